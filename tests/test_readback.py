"""The one reader of what a run dir, a sweep dir or a checkpoint holds (``per_dqn.rundir.readback``,
issue 43), and the checkpoint defects it closes: E3 (the checkpoint checked was not the one
loaded), E7 (deep JSON was a ``RecursionError``) and E8 (a huge sparse file was read whole).

The reader's own checks are tested against hand-made trees: links in and out, FIFOs, devices,
sizes at and past each cap, nesting depth against a reference computed from the parsed value
(hypothesis), and a walk of a nest deeper than Python's recursion limit."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from support import RESUMABLE, cartpole_config, nest, reseal, run_trainer, time_limit
from typer.testing import CliRunner

import per_dqn
from per_dqn.cli import app
from per_dqn.rundir import checkpoint as ckpt
from per_dqn.rundir import latest, readback
from per_dqn.rundir.readback import KINDS, Kind, ReadBackError
from per_dqn.training import checkpoints as run_ckpt

runner = CliRunner()
TINY_KIND = Kind("test file", 10, max_depth=3)


# --- the reader ----------------------------------------------------------------------------------


def test_a_regular_file_inside_is_read_and_a_link_inside_followed(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f.json").write_text('{"x": 1}')
    (tmp_path / "g.json").symlink_to("a/f.json")
    assert readback.read_json(tmp_path, "a/f.json", KINDS["summary"]) == {"x": 1}
    assert readback.read_json(tmp_path, "g.json", KINDS["summary"]) == {"x": 1}


def test_a_link_out_of_the_dir_is_refused_before_it_is_opened(tmp_path):
    """A link out (to /dev/zero, or to a dir above) is refused from where it resolves: it is
    never opened, so a device or a FIFO out there cannot block or flood the read."""
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "secret").write_text("key")
    (root / "zero").symlink_to("/dev/zero")
    (root / "up").symlink_to(tmp_path, target_is_directory=True)
    for name in ("zero", "up/secret", "../secret"):
        with pytest.raises(ReadBackError) as caught:
            readback.read_bytes(root, name, KINDS["text"])
        assert caught.value.reason == "outside", caught.value


@pytest.mark.parametrize("what", ["fifo", "dir", "link to a device"])
def test_what_is_not_a_regular_file_is_refused_at_once(tmp_path, what):
    path = tmp_path / "f"
    if what == "fifo":
        os.mkfifo(path)
    elif what == "dir":
        path.mkdir()
    else:
        os.symlink("/dev/null", path)  # resolves outside: refused as such
    with time_limit(10), pytest.raises(ReadBackError) as caught:
        readback.read_bytes(tmp_path, "f", KINDS["text"])
    assert caught.value.reason == ("outside" if what == "link to a device" else "special")
    if what == "fifo":
        assert str(caught.value) == f"{path}: a FIFO, not a regular file"


def test_the_size_cap_holds_at_its_byte(tmp_path):
    """A file of exactly the cap is read; one byte more is refused from its size, unread."""
    (tmp_path / "f").write_bytes(b"x" * 10)
    assert readback.read_bytes(tmp_path, "f", TINY_KIND) == b"x" * 10
    (tmp_path / "f").write_bytes(b"x" * 11)
    with pytest.raises(ReadBackError) as caught:
        readback.read_bytes(tmp_path, "f", TINY_KIND)
    assert str(caught.value) == f"{tmp_path / 'f'}: 11 bytes, over the 10 a test file may have"
    assert caught.value.reason == "too_big"


@pytest.mark.parametrize("name", ["nope", "no/such/dir/x.json"])
def test_a_missing_file_says_so(tmp_path, name):
    """Missing itself or a dir on its way: one line naming the path, as ``missing``."""
    (tmp_path / "no").mkdir()
    with pytest.raises(ReadBackError) as caught:
        readback.read_bytes(tmp_path, name, KINDS["text"])
    assert str(caught.value) == f"{tmp_path / name}: no such file"
    assert caught.value.missing and caught.value.reason == "missing"


def test_a_path_through_dotdot_or_absolute_is_refused(tmp_path):
    for name in ("../x", "/etc/passwd", "a/../../x"):
        with pytest.raises(ReadBackError) as caught:
            readback.read_bytes(tmp_path, name, KINDS["text"])
        assert str(caught.value) == f"{name}: not a path inside its dir (absolute, or through ..)"
        assert caught.value.reason == "outside"


@pytest.mark.parametrize("name", ["", "."])
def test_the_dir_itself_is_not_a_file(tmp_path, name):
    with pytest.raises(ReadBackError) as caught:
        readback.read_bytes(tmp_path, name, KINDS["text"])
    assert str(caught.value) == f"{tmp_path}: not a file"
    assert caught.value.reason == "special"


def reference_depth(value) -> int:
    """Nesting depth of a parsed JSON value: the reference ``json_depth`` is checked against."""
    if isinstance(value, dict):
        return 1 + max((reference_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((reference_depth(v) for v in value), default=0)
    return 0


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab,: '),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(alphabet='[]{}"\\ab', max_size=4), inner, max_size=3),
    max_leaves=20,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_json_depth_matches_the_parsed_value_s_depth(value):
    """Brackets inside strings (escaped quotes too) do not count; every other bracket does."""
    assert readback.json_depth(json.dumps(value)) == reference_depth(value)


def test_json_nested_past_its_kind_s_depth_is_refused_before_parsing():
    """Issue 43, E7: ``json.loads`` of a 1.5 KB ``[[[[...`` raised ``RecursionError``; nesting
    is measured first, so a document far past the recursion limit is one line."""
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ReadBackError, match="nested 100000 levels deep, past the 32"):
        readback.parse_json(deep, "x.json", KINDS["summary"])
    assert readback.parse_json("[[[1]]]", "x.json", TINY_KIND) == [[[1]]]
    with pytest.raises(ReadBackError, match="nested 4 levels deep, past the 3"):
        readback.parse_json("[[[[1]]]]", "x.json", TINY_KIND)


def test_walk_lists_a_nest_deeper_than_the_recursion_limit_without_recursing(tmp_path):
    """Issue 43, E9: ``os.walk`` (Python 3.11) and ``rglob`` recurse once a level. ``walk`` goes
    to its depth bound and no further, enters no link, and names links and FIFOs apart."""
    (tmp_path / "f").write_text("x")
    (tmp_path / "l").symlink_to(tmp_path, target_is_directory=True)
    os.mkfifo(tmp_path / "p")
    with nest(tmp_path, sys.getrecursionlimit() + 200):
        seen = list(readback.walk(tmp_path))
    assert len(seen) == readback.MAX_WALK_DEPTH + 1
    assert seen[0] == (tmp_path, ["f"], ["l", "p"])
    assert seen[-1][2] == ["d"]  # the dir at the bound is named, not entered


def test_a_record_of_the_wrong_shape_names_its_field():
    from per_dqn.sweeps.record import SweepRecord

    with pytest.raises(ReadBackError, match=r"sweep.json: not a SweepRecord record: seeds.0: "):
        readback.validate({"runs": [], "seeds": ["0"]}, SweepRecord, "sweep.json")


# --- checkpoints ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A finished CartPole run with checkpoints at 900, 1200 and 1500 env steps."""
    run_dir = tmp_path_factory.mktemp("readback") / "run"
    run_trainer(cartpole_config(*RESUMABLE), run_dir)
    return run_dir


@pytest.fixture
def copy(run, tmp_path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "run"))


def newest(run_dir: Path) -> Path:
    return ckpt.checkpoints_dir(run_dir) / "step_000001500"


@pytest.mark.slow
def test_the_checkpoint_loaded_is_the_one_verified_while_agent_pt_is_swapped(copy, tmp_path):
    """Issue 43, E3: ``load_run_checkpoint`` verified every file through handles, then opened
    each again by path: a process that could write the run dir swapped ``agent.pt`` in between
    and another run's weights loaded, exit 0 (an inotify-driven swapper won 4 and 5 of 6). Now
    each file is read once, through the handle that was verified. A real swapper thread here
    replaces ``agent.pt`` (by rename, as fast as it can) with another run's while the checkpoint
    is loaded again and again: every load either refuses the checkpoint or returns exactly the
    verified weights, never the swapped-in ones.

    The loads go on, past 40, until both outcomes were seen (CI once failed ``loaded > 0``: the
    swapper thread was descheduled while ``agent.pt`` was the other run's, and 40 quick
    refusals fell in that one window); each attempt first sleeps a millisecond so that the
    swapper runs between them."""
    path = newest(copy)
    good = (path / "agent.pt").read_bytes()
    other = torch.load(path / "agent.pt", weights_only=True)
    for tensor in other["online"].values():
        tensor.add_(1.0)
    evil = tmp_path / "evil.pt"
    torch.save(other, evil)
    good_copy = tmp_path / "good.pt"
    good_copy.write_bytes(good)
    stop = threading.Event()

    def swap() -> None:
        i = 0
        while not stop.is_set():
            source = evil if i % 2 == 0 else good_copy
            tmp = path / f".swap{i % 2}"
            shutil.copyfile(source, tmp)
            os.replace(tmp, path / "agent.pt")
            i += 1

    swapper = threading.Thread(target=swap, daemon=True)
    expected = torch.load(good_copy, weights_only=True)["online"]
    loaded = refused = 0
    swapper.start()
    try:
        for attempt in range(2000):
            if attempt >= 40 and loaded and refused:
                break
            time.sleep(0.001)
            try:
                checkpoint = run_ckpt.load_run_checkpoint(path)
            except ckpt.CheckpointError:
                refused += 1
                continue
            loaded += 1
            for key, tensor in checkpoint.parts["agent"]["online"].items():
                assert torch.equal(tensor, expected[key]), "another run's weights were loaded"
    finally:
        stop.set()
        swapper.join()
    assert loaded > 0, "every load refused: the verified file was never the one loaded"
    assert refused > 0, "no load refused: the swapped-in file was never the one read"


def test_agent_pt_swapped_just_after_its_check_is_not_what_loads(copy, tmp_path, monkeypatch):
    """The swap of the test above at the worst moment, every time: ``agent.pt`` is replaced by
    another run's right after its bytes were read and checked. The weights that load are the
    checked ones (the race above left the re-read by path, ``checkpoint-reread-by-path`` in
    ``make mutants``, uncaught whenever the swapper thread lost every race, as it can on a busy
    machine)."""
    path = newest(copy)
    expected = torch.load(path / "agent.pt", weights_only=True)["online"]
    other = torch.load(path / "agent.pt", weights_only=True)
    for tensor in other["online"].values():
        tensor.add_(1.0)
    torch.save(other, tmp_path / "evil.pt")
    real = ckpt._read_checked

    def read_then_swap(where, name, entry, dir_fd, inode=None):
        blob = real(where, name, entry, dir_fd, inode)
        if name == "agent.pt":
            os.replace(shutil.copyfile(tmp_path / "evil.pt", where / ".swap"), where / name)
        return blob

    monkeypatch.setattr(ckpt, "_read_checked", read_then_swap)
    checkpoint = run_ckpt.load_run_checkpoint(path)
    for key, tensor in checkpoint.parts["agent"]["online"].items():
        assert torch.equal(tensor, expected[key]), "the swapped-in weights were loaded"


def test_a_checkpoint_s_arrays_are_hashed_in_chunks_never_read_whole(copy, monkeypatch):
    """``load_parts`` reads every small file whole, checks it and parses those bytes, but a
    part's ``.npz`` (as large as what the replay memory holds) only through its handle, hashed in
    chunks: no second copy of it is held, and the bytes it returns are the other files' alone
    (a mutation run found a ``load_parts`` that read the arrays whole too uncaught)."""
    path = newest(copy)
    real, read_whole = ckpt._read_checked, []

    def spy(where, name, entry, dir_fd, inode=None):
        read_whole.append(name)
        return real(where, name, entry, dir_fd, inode)

    monkeypatch.setattr(ckpt, "_read_checked", spy)
    files = set(ckpt.read_manifest(path)["files"])
    _, parts, blobs = ckpt.load_parts(path, run_ckpt.TRAINING_FILES, (), lambda b, label: b)
    npz = {name for name in files if name.endswith(".npz")}
    assert npz and not npz & set(read_whole)
    assert set(blobs) == files - npz
    assert {name.removesuffix(".npz") for name in npz} <= set(parts)


def deep_manifest(path: Path) -> None:
    """A manifest of ~1.5 KB nested 700 levels deep, not re-signed."""
    (path / "manifest.json").write_text("[" * 700 + "]" * 700)


def test_a_deeply_nested_manifest_falls_back_to_the_checkpoint_before(copy):
    """Issue 43, E7: a 1.5 KB manifest nested deep (not even re-signed) was a ``RecursionError``
    traceback in ``eval``, resume and ``per_dqn.load``, instead of a damaged checkpoint skipped
    for the one before. Now each uses step 1200 with a warning naming step 1500."""
    deep_manifest(newest(copy))
    found = latest.find_latest(ckpt.checkpoints_dir(copy))
    assert found.path == ckpt.checkpoints_dir(copy) / "step_000001200"
    (warning,) = found.warnings
    assert f"{newest(copy)}: unreadable manifest.json (nested 700 levels deep" in warning
    read = latest.read_latest(ckpt.checkpoints_dir(copy), (run_ckpt.AGENT_FILE,))
    assert read.path == found.path
    with pytest.warns(RuntimeWarning, match="step_000001500: unreadable manifest.json"):
        policy = per_dqn.load(copy)
    assert policy.env_steps == 1200
    result = runner.invoke(app, ["eval", str(copy), "--episodes", "1"])
    assert result.exit_code == 0, result.output
    assert "using the previous one, step_000001200" in result.stderr
    result = runner.invoke(app, ["train", "--resume", str(copy), "-q", "--steps", "1800"])
    assert result.exit_code == 0, result.output
    assert "using the previous one, step_000001200" in result.stderr
    assert json.loads((copy / "summary.json").read_text())["env_steps"] == 1800


def test_deep_json_in_run_json_and_summary_json_is_no_traceback(copy):
    """Issue 43, E7: ``run.json`` and ``summary.json`` nested deep were tracebacks too; now
    ``run.json`` is "holds no run id" and a summary is unreadable (the run is unfinished)."""
    from per_dqn.rundir import dirs as rundir
    from per_dqn.sweeps import runs

    (copy / "run.json").write_text("[" * 700 + "]" * 700)
    with pytest.raises(rundir.RunDirError, match="holds no run id"):
        rundir.read_run_id(copy)
    (copy / "summary.json").write_text("{" + '"a":{' * 700 + "}" * 701)
    assert runs.read_summary(copy) is None


def sparse(path: Path, size: int) -> None:
    path.unlink(missing_ok=True)
    with open(path, "wb") as file:
        file.truncate(size)


GIB_64 = 64 << 30


def test_a_64_gib_sparse_agent_pt_re_signed_is_refused_by_its_size(copy):
    """Issue 43, E8: a re-signed ``agent.pt`` of 64 GiB (sparse) was read whole by the verifier
    before hashing: a ``MemoryError`` traceback. Now it is refused from its size (over the 4 GiB
    a torch file may have), before a byte is read, and the checkpoint before is used."""
    path = newest(copy)
    manifest = json.loads((path / "manifest.json").read_text())
    sparse(path / "agent.pt", GIB_64)
    files = dict(manifest["files"])
    files["agent.pt"] = {"bytes": GIB_64, "sha256": "0" * 64}  # never reached: size first
    reseal(path, files)
    with time_limit(60):
        read = latest.read_latest(
            ckpt.checkpoints_dir(copy), (run_ckpt.AGENT_FILE, run_ckpt.CONFIG_FILE)
        )
    assert read.path == ckpt.checkpoints_dir(copy) / "step_000001200"
    cap = KINDS["weights"].max_bytes
    assert (
        f"agent.pt ({GIB_64:,} bytes, over the {cap:,} a torch file may have)" in (read.warnings[0])
    )
    with time_limit(60):
        result = runner.invoke(app, ["eval", str(copy), "--episodes", "1"])
    assert result.exit_code == 0, result.output


def test_a_64_gib_sparse_model_pt_is_one_line_in_eval(copy):
    """Issue 43, E8: ``eval`` read ``model.pt`` (which has no manifest) with no cap: a 64 GiB
    sparse one was a ``MemoryError`` traceback. Now one line naming it, exit 2."""
    shutil.rmtree(ckpt.checkpoints_dir(copy))
    sparse(copy / "model.pt", GIB_64)
    with time_limit(60):
        result = runner.invoke(app, ["eval", str(copy), "--episodes", "1"])
    assert result.exit_code == 2, result.output
    cap = KINDS["weights"].max_bytes
    assert result.stderr == (
        f"error: {copy / 'model.pt'}: cannot read ({GIB_64:,} bytes, over the {cap:,} a torch "
        "file may have)\n"
    )


def test_memory_npz_is_hashed_in_chunks_and_loaded_from_its_verified_handle(copy):
    """Issue 43, E3 and E8: the replay memory's arrays are hashed through their handle and
    loaded from it: the loaded arrays equal the file's (a reference read with numpy), and a
    memory.npz with one bit flipped, its digest not re-signed, is refused."""
    path = newest(copy)
    checkpoint = run_ckpt.load_run_checkpoint(path)
    with np.load(path / "memory.npz") as data:
        for key in data.files:
            assert np.array_equal(data[key], _leaf(checkpoint.parts["memory"], key))
    blob = bytearray((path / "memory.npz").read_bytes())
    blob[-100] ^= 1
    (path / "memory.npz").write_bytes(bytes(blob))
    with pytest.raises(ckpt.CheckpointError) as caught:
        run_ckpt.load_run_checkpoint(path)
    assert str(caught.value) == f"{path}: memory.npz fails its SHA-256 check"


def test_memory_npz_is_refused_past_the_ram_available_to_the_byte(copy, monkeypatch):
    """The arrays' cap is the RAM available when they are read: a memory.npz that unpacks to
    exactly that many bytes is loaded, one byte more than is available is refused, in one line.
    (Compressed and re-signed, so that it unpacks past its own size, which is capped too.)"""
    import zipfile

    path = newest(copy)
    with np.load(path / "memory.npz") as data:
        arrays = {key: data[key] for key in data.files}
    np.savez_compressed(path / "memory.npz", **arrays)
    reseal(path)
    with zipfile.ZipFile(path / "memory.npz") as archive:
        unpacked = sum(info.file_size for info in archive.infolist())
    assert unpacked > (path / "memory.npz").stat().st_size
    monkeypatch.setattr(readback, "available_ram_bytes", lambda: unpacked)
    assert run_ckpt.load_run_checkpoint(path).env_steps == 1500
    monkeypatch.setattr(readback, "available_ram_bytes", lambda: unpacked - 1)
    with pytest.raises(ckpt.CheckpointError) as caught:
        run_ckpt.load_run_checkpoint(path)
    assert str(caught.value) == (
        f"{path}: memory.npz unpacks to {unpacked:,} bytes, over the {unpacked - 1:,} of RAM "
        "available; refused"
    )


def test_a_re_signed_memory_npz_numpy_cannot_load_is_one_line_cut_at_300(copy):
    """A member that is not an array (a header numpy cannot parse, 400 characters of it) in a
    re-signed memory.npz: numpy's reason, on one line, cut at 300 characters."""
    import zipfile

    path = newest(copy)
    header = ("{'descr': '<f4', " + "x" * 400 + "}").encode()
    member = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header
    with zipfile.ZipFile(path / "memory.npz", "w") as archive:
        archive.writestr("storage.obs.npy", member)
    reseal(path)
    with zipfile.ZipFile(path / "memory.npz") as archive, archive.open("storage.obs.npy") as f:
        with pytest.raises(ValueError) as numpy_says:
            np.lib.format.read_array(f, allow_pickle=False)
    reason = " ".join(str(numpy_says.value).split())
    assert len(reason) > 300
    with pytest.raises(ckpt.CheckpointError) as caught:
        run_ckpt.load_run_checkpoint(path)
    assert str(caught.value) == f"{path}: cannot load memory.npz (ValueError: {reason[:300]})"


def test_a_memory_npz_changed_while_it_is_read_is_refused(copy, monkeypatch):
    """The file is hashed, then loaded, through one handle; a change to it in between (its
    size or times moved: an in-place write) is refused, not loaded."""
    path = newest(copy)
    real = ckpt._digest

    def digest_then_write(path_, name, file):
        digest = real(path_, name, file)
        if name == "memory.npz":
            stamp = os.fstat(file.fileno()).st_mtime_ns + 10**9
            os.utime(file.fileno(), ns=(stamp, stamp))
        return digest

    monkeypatch.setattr(ckpt, "_digest", digest_then_write)
    with pytest.raises(ckpt.CheckpointError) as caught:
        run_ckpt.load_run_checkpoint(path)
    assert str(caught.value) == f"{path}: memory.npz changed while it was read; refused"


def test_a_re_signed_memory_json_that_is_not_json_is_one_line_naming_it(copy):
    path = newest(copy)
    (path / "memory.json").write_text('{"storage": ')
    reseal(path)
    with pytest.raises(ckpt.CheckpointError) as caught:
        run_ckpt.load_run_checkpoint(path)
    assert str(caught.value).startswith(
        f"{path}: cannot load memory.json (ReadBackError: {path / 'memory.json'}: "
    )


def _leaf(tree, dotted: str):
    node = tree
    for part in dotted.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


@pytest.mark.parametrize("how", ["removed", "null"])
def test_a_checkpoint_stripped_of_its_run_id_and_re_signed_is_refused(copy, how):
    """Issue 43, the documented limit decided: a checkpoint whose manifest's run id was removed
    (or set to null) and the manifest re-signed was read unchecked, as one from before run ids,
    by ``eval`` and ``--resume`` (the fuzz harness counted it as using a damaged checkpoint). In
    a run dir that has an id, whose checkpoints all carry it, it is now refused as one copied
    from another run is: one line, exit 2."""
    path = newest(copy)
    manifest = json.loads((path / "manifest.json").read_text())
    if how == "removed":
        del manifest["run_id"]
    else:
        manifest["run_id"] = None
    (path / "manifest.json").write_text(json.dumps(manifest))
    reseal(path)
    with pytest.raises(ckpt.CheckpointError, match="a checkpoint without a run id, but its run"):
        run_ckpt.check_owner(path, ckpt.read_manifest(path), copy)
    result = runner.invoke(app, ["eval", str(path), "--episodes", "1"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and "stripped of its run id is not this run's" in line
    result = runner.invoke(app, ["train", "--resume", str(copy), "-q", "--steps", "1800"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and "a checkpoint without a run id" in line


def test_an_event_file_stamped_in_the_future_does_not_hold_a_resume(copy):
    """Found while closing issue 43: a resume waits until its new event file's name sorts after
    every existing one (``metrics._wait_for_a_later_event_file_name``), reading the unix time in
    the names found; one planted as ``events.out.tfevents.99999999999...`` held the resume for
    three thousand years. A stamp from the future is not waited for."""
    (copy / "events.out.tfevents.99999999999.elsewhere.1.0").write_bytes(b"")
    with time_limit(120):
        result = runner.invoke(app, ["train", "--resume", str(copy), "-q", "--steps", "1800"])
    assert result.exit_code == 0, result.output


def test_an_id_less_checkpoint_above_the_legacy_step_is_refused(copy):
    """Issue 43: a run dir that got its id when it was resumed records its newest id-less step
    (``legacy_through``); an id-less checkpoint at that step is read, one above it (written
    since, so stripped) is refused."""
    from per_dqn.rundir import dirs as rundir

    run_id = rundir.read_run_id(copy)
    (copy / "run.json").write_text(json.dumps({"run_id": run_id, "legacy_through": 1200}))
    for step in ("step_000001200", "step_000001500"):
        path = ckpt.checkpoints_dir(copy) / step
        manifest = json.loads((path / "manifest.json").read_text())
        del manifest["run_id"]
        (path / "manifest.json").write_text(json.dumps(manifest))
        reseal(path)
    older = ckpt.checkpoints_dir(copy) / "step_000001200"
    run_ckpt.check_owner(older, ckpt.read_manifest(older), copy)  # legacy: read
    with pytest.raises(ckpt.CheckpointError, match="a checkpoint without a run id"):
        run_ckpt.check_owner(newest(copy), ckpt.read_manifest(newest(copy)), copy)


def test_a_small_file_is_read_without_reserving_its_kind_s_cap(tmp_path):
    """Found in review: ``read_all`` asked ``read`` for the whole cap (4 GiB for a torch file),
    which Python reserves before reading: under a 3 GiB address-space limit a 1 KB agent.pt was
    a ``MemoryError``. A real process under ``RLIMIT_AS`` reads it now."""
    import subprocess

    (tmp_path / "agent.pt").write_bytes(b"x" * 1000)
    script = (
        "import resource, sys\n"
        "from per_dqn.rundir import readback\n"
        "limit = 3 << 30\n"
        "resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
        "data = readback.read_bytes(sys.argv[1], 'agent.pt', readback.KINDS['weights'])\n"
        "print(len(data))\n"
    )
    ran = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "1000\n"


def test_a_re_signed_manifest_listing_a_foreign_file_is_skipped_by_every_reader(copy):
    """Found by the run-dir fuzz (issue 43): a manifest re-signed to list one more file than a
    training checkpoint holds (``model.pt`` here) was refused by a resume but played by ``eval``
    and ``per_dqn.load``, which verify only the files they read. Every reader of a training
    checkpoint now refuses such a manifest, and passes over it to the checkpoint before."""
    path = newest(copy)
    manifest = json.loads((path / "manifest.json").read_text())
    files = {**manifest["files"], "model.pt": {"bytes": 1, "sha256": "0" * 64}}
    reseal(path, files)
    result = runner.invoke(app, ["eval", str(copy), "--episodes", "1"])
    assert result.exit_code == 0, result.output
    assert (
        f"warning: checkpoint {path}: its manifest.json lists model.pt, not a training "
        "checkpoint's file; refused; using the previous one, step_000001200"
    ) in result.stderr
    with pytest.warns(RuntimeWarning, match="lists model.pt, not a training checkpoint's file"):
        policy = per_dqn.load(copy)
    assert policy.env_steps == 1200
    result = runner.invoke(app, ["eval", str(path), "--episodes", "1"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"error: {path}: its manifest.json lists model.pt, not a training "
        "checkpoint's file; refused"
    ]
    result = runner.invoke(app, ["train", "--resume", str(copy), "-q", "--steps", "1800"])
    assert result.exit_code == 0, result.output
    assert "using the previous one, step_000001200" in result.stderr


def test_why_a_component_could_not_be_opened_is_named(tmp_path):
    """The reader's one-line reasons for a path component it could not open, each with the
    ``reason`` callers branch on: the file itself a link (``O_NOFOLLOW``'s ``ELOOP``) and a dir
    on the way that became a link since the path was resolved ("outside": never followed), a
    file where a dir should be ("special"), and any other failure ("unreadable", with the
    system's words)."""
    import errno

    from per_dqn.rundir.readback import _open_error

    (tmp_path / "f").write_text("x")
    (tmp_path / "l").symlink_to("f")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        loop = OSError(errno.ELOOP, "Too many levels of symbolic links")
        cases = [
            (_open_error("p", "l", fd, loop, last=True),
             "p: a symbolic link, not a regular file", "outside"),
            (_open_error("p", "l", fd, loop, last=False),
             "p: 'l' is a symbolic link, not a directory", "outside"),
            (_open_error("p", "f", fd, OSError(errno.ENOTDIR, "Not a directory"), last=False),
             "p: 'f' is a regular file, not a directory", "special"),
            (_open_error("p", "f", fd, OSError(errno.EACCES, "Permission denied"), last=True),
             "p: cannot open it (Permission denied)", "unreadable"),
            (_open_error("p", "gone", fd, OSError(errno.EACCES, "Permission denied"), last=False),
             "p: cannot open it (Permission denied)", "unreadable"),
        ]  # fmt: skip
    finally:
        os.close(fd)
    for error, message, reason in cases:
        assert (str(error), error.reason) == (message, reason)
    with pytest.raises(ReadBackError) as caught:  # the same through the reader: a file as a dir
        readback.read_bytes(tmp_path, "f/x", KINDS["text"])
    assert (str(caught.value), caught.value.reason) == (
        f"{tmp_path / 'f/x'}: 'f' is a regular file, not a directory", "special")  # fmt: skip


def test_walk_names_links_to_files_apart_skips_hidden_dirs_and_survives_a_missing_root(tmp_path):
    """``walk``'s edges: a link to a file is no file to read (named in ``others``), a hidden dir
    is entered only with ``hidden``, and a root that cannot be listed is one empty entry."""
    (tmp_path / "f").write_text("x")
    (tmp_path / "to-f").symlink_to("f")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / "shown").mkdir()
    assert [(d.name, files, others) for d, files, others in readback.walk(tmp_path)] == [
        (tmp_path.name, ["f"], ["to-f"]), (".hidden", [], []), ("shown", [], []),
    ]  # fmt: skip
    assert [d.name for d, _, _ in readback.walk(tmp_path, hidden=False)] == [tmp_path.name, "shown"]
    assert list(readback.walk(tmp_path / "none")) == [(tmp_path / "none", [], [])]


def test_a_record_refused_by_its_model_is_named_at_its_field_or_its_top_level():
    """``validate``'s line: the dotted field and what it got, or "its top level" for a value of
    another shape whole."""
    from per_dqn.sweeps.record import SweepRecord

    with pytest.raises(ReadBackError) as caught:
        readback.validate({"runs": [], "seeds": [0, "1"]}, SweepRecord, "s.json")
    assert str(caught.value) == (
        "s.json: not a SweepRecord record: seeds.1: Input should be a valid integer (got '1')"
    )
    with pytest.raises(ReadBackError) as caught:
        readback.validate([1, 2], SweepRecord, "s.json")
    assert str(caught.value).startswith("s.json: not a SweepRecord record: its top level: ")
    assert str(caught.value).endswith("(got [1, 2])")
    long = "x" * 200
    with pytest.raises(ReadBackError) as caught:
        readback.validate({"runs": [], "seeds": [long]}, SweepRecord, "s.json")
    assert str(caught.value).endswith(f"(got {repr(long)[:80]})")
    assert (caught.value.reason, caught.value.path) == ("shape", "s.json")


def test_validate_is_strict_whatever_the_model_says():
    """A record read back is data: ``validate`` coerces nothing, even for a model that would
    (a string of digits is not an int, a float not a str)."""
    from pydantic import BaseModel

    class Lenient(BaseModel):
        steps: int

    assert Lenient.model_validate({"steps": "12"}).steps == 12  # pydantic's own default
    assert readback.validate({"steps": 12}, Lenient, "r.json").steps == 12
    with pytest.raises(ReadBackError) as caught:
        readback.validate({"steps": "12"}, Lenient, "r.json")
    assert str(caught.value) == (
        "r.json: not a Lenient record: steps: Input should be a valid integer (got '12')"
    )


def test_a_memory_npz_that_unpacks_past_the_ram_is_refused_before_it_is_unpacked(copy):
    """Found in review (issue 43): the arrays' cap held the file's size, not what it unpacks to;
    a re-signed memory.npz whose members unpack past the RAM (a compressed one: the writer
    stores them plain) was unpacked. Here eight members whose zip directory says 4 GiB each (the
    directory edited, as whoever re-signs can): refused from the directory, before a byte is
    unpacked."""
    import zipfile

    path = newest(copy)
    with zipfile.ZipFile(path / "memory.npz", "w") as archive:
        for i in range(8):
            archive.writestr(f"a{i}.npy", b"x")
    data = bytearray((path / "memory.npz").read_bytes())
    at = data.find(b"PK\x01\x02")
    while at != -1:  # each central-directory entry's uncompressed size, at offset 24
        data[at + 24 : at + 28] = (0xFFFFFFFE).to_bytes(4, "little")
        at = data.find(b"PK\x01\x02", at + 4)
    (path / "memory.npz").write_bytes(bytes(data))
    reseal(path)
    with time_limit(60), pytest.raises(ckpt.CheckpointError, match=r"memory\.npz unpacks to"):
        run_ckpt.load_run_checkpoint(path)


def test_a_training_checkpoint_loads_onto_the_device_asked_for_without_a_second_copy(copy):
    """``load_run_checkpoint``: its path, every part, the weights mapped to the device asked for
    (torch's ``meta`` device stands in for a GPU here), and the replay memory's arrays loaded
    from their verified handle without the files also being read whole: the peak of what Python
    allocates (5.6 MB here) stays below the arrays' files once, the other files twice (their
    bytes and what is parsed from them) and 1 MiB; read whole as well, the arrays' files would
    add their size again (3.9 MB here)."""
    import tracemalloc

    path = newest(copy)
    checkpoint = run_ckpt.load_run_checkpoint(path, device="meta")
    assert checkpoint.path == path and checkpoint.env_steps == 1500
    assert {"agent", "loop", "memory"} <= set(checkpoint.parts)
    tensors = [v for v in _tensors(checkpoint.parts["agent"])]
    assert tensors and all(t.device.type == "meta" for t in tensors)
    tracemalloc.start()
    try:
        run_ckpt.load_run_checkpoint(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    sizes = {name: (path / name).stat().st_size for name in os.listdir(path)}
    arrays = sum(size for name, size in sizes.items() if name.endswith(".npz"))
    others = sum(size for name, size in sizes.items() if not name.endswith(".npz"))
    assert peak < arrays + 2 * others + (1 << 20), (peak, arrays, others)


def _tensors(tree):
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, dict):
        for value in tree.values():
            yield from _tensors(value)
    elif isinstance(tree, list | tuple):
        for value in tree:
            yield from _tensors(value)


def test_a_checkpoint_that_is_not_a_training_one_or_whose_config_is_not_utf8_is_one_line(copy):
    path = newest(copy)
    manifest = json.loads((path / "manifest.json").read_text())
    files = {k: v for k, v in manifest["files"].items() if k != "agent.pt"}
    reseal(path, files)
    with pytest.raises(ckpt.CheckpointError) as caught:
        run_ckpt.load_run_checkpoint(path)
    assert str(caught.value) == f"{path}: no agent.pt (not a training checkpoint)"
    reseal(path, manifest["files"])
    (path / "config.yaml").write_bytes(b"env:\n  id: \xff\xfe\n")
    reseal(path)
    with pytest.raises(ckpt.CheckpointError) as caught:
        run_ckpt.load_run_checkpoint(path)
    assert str(caught.value) == f"{path}: cannot load config.yaml (not UTF-8: invalid start byte)"


def test_a_re_signed_memory_json_naming_a_missing_array_is_one_line_cut_at_300(copy):
    path = newest(copy)
    key = "k" * 400
    (path / "memory.json").write_text(json.dumps({"storage": {"__array__": key}}))
    reseal(path)
    with pytest.raises(ckpt.CheckpointError) as caught:
        run_ckpt.load_run_checkpoint(path)
    reason = repr(key)[:300]
    assert str(caught.value) == f"{path}: cannot load memory.json (KeyError: {reason})"


def test_a_checkpoint_in_a_run_dir_whose_run_json_is_damaged_is_refused_naming_it(copy):
    """``check_owner`` cannot tell whose a checkpoint is when the run dir's ``run.json`` is
    damaged: the checkpoint is refused with ``run.json``'s own line."""
    path = newest(copy)
    (copy / "run.json").write_text("[]")
    manifest = ckpt.read_manifest(path)
    with pytest.raises(ckpt.CheckpointError) as caught:
        run_ckpt.check_owner(path, manifest, copy)
    assert str(caught.value) == f"{copy / 'run.json'}: holds no run id ('run_id': 32 hex digits)"


def test_a_training_checkpoint_named_through_the_user_s_own_link_is_loaded(copy, tmp_path):
    """A checkpoint dir the user names (``eval PATH``, ``load_run_checkpoint``) may be a link of
    theirs: it is followed; only step dirs found by listing are never followed."""
    link = tmp_path / "latest"
    link.symlink_to(newest(copy))
    assert run_ckpt.load_run_checkpoint(link).env_steps == 1500


def test_available_ram_is_meminfo_s_memavailable_else_free_pages_else_none(monkeypatch):
    """``available_ram_bytes`` reads ``/proc/meminfo``'s ``MemAvailable`` (kB), by hand here from
    a given text; without that line, or without the file, free pages times the page size (as
    ``os.sysconf`` gives them); without those either, None."""
    import io

    opened = []

    def meminfo(text):
        def fake_open(path, *args, **kwargs):
            opened.append(path)
            if text is None:
                raise FileNotFoundError(path)
            return io.StringIO(text)

        return fake_open

    monkeypatch.setattr(readback, "open", meminfo("MemTotal: 9 kB\nMemAvailable:    1000 kB\n"),
                        raising=False)  # fmt: skip
    assert readback.available_ram_bytes() == 1000 * 1024 and opened == ["/proc/meminfo"]
    pages = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for text in ("MemTotal: 9 kB\n", None):
        monkeypatch.setattr(readback, "open", meminfo(text), raising=False)
        assert abs(readback.available_ram_bytes() - pages) < (256 << 20)  # free pages move

    def no_sysconf(name):
        raise ValueError(f"unrecognized configuration name {name}")

    monkeypatch.setattr(readback.os, "sysconf", no_sysconf)
    assert readback.available_ram_bytes() is None


def test_read_text_names_a_file_that_is_not_utf8(tmp_path):
    (tmp_path / "c.yaml").write_bytes(b"a: \xff\n")
    with pytest.raises(ReadBackError) as caught:
        readback.read_text(tmp_path, "c.yaml", KINDS["config"])
    assert str(caught.value) == f"{tmp_path / 'c.yaml'}: not UTF-8 text (invalid start byte)"
    assert caught.value.reason == "syntax"


def test_parse_json_refuses_past_its_kind_s_depth_to_the_level_and_names_bad_utf8():
    """Nesting exactly at the kind's depth is read; one level more is refused, in one line naming
    the kind; bytes that are not UTF-8 are refused as syntax."""
    kind = KINDS["run"]
    at = "[" * kind.max_depth + "]" * kind.max_depth
    assert readback.json_depth(readback.parse_json(at, "r.json", kind) and at) == kind.max_depth
    past = "[" + at + "]"
    with pytest.raises(ReadBackError) as caught:
        readback.parse_json(past, "r.json", kind)
    assert str(caught.value) == (
        f"r.json: nested {kind.max_depth + 1} levels deep, past the {kind.max_depth} a "
        f"{kind.name} may have"
    )
    assert caught.value.reason == "deep"
    with pytest.raises(ReadBackError) as caught:
        readback.parse_json(b'{"a": "\xff"}', "r.json", kind)
    assert str(caught.value) == "r.json: not UTF-8 text (invalid start byte)"
    assert caught.value.reason == "syntax"


def test_a_file_that_cannot_be_read_is_one_line_naming_it(tmp_path):
    """``read_all`` on a handle the OS refuses to read (here one open for writing only): the
    label and the OS's reason, as ``unreadable``."""
    path = tmp_path / "summary.json"
    path.write_text("{}")
    with os.fdopen(os.open(path, os.O_WRONLY), "rb", buffering=0) as file:
        with pytest.raises(ReadBackError) as caught:
            readback.read_all(file, KINDS["summary"], path)
    assert str(caught.value) == f"{path}: cannot read it (Bad file descriptor)"
    assert caught.value.reason == "unreadable"


def test_a_path_holding_a_nul_byte_is_one_line_naming_it(tmp_path):
    """The NUL byte is refused before any system call (which would raise a bare ValueError),
    and the line shows it escaped."""
    with pytest.raises(ReadBackError) as caught:
        readback.read_bytes(tmp_path, "a\0b/c.json", KINDS["summary"])
    assert str(caught.value) == "a\\x00b/c.json: a path holding a NUL byte"
    assert caught.value.reason == "outside"


def test_a_kind_capped_by_the_ram_is_capped_by_what_is_available_or_not_at_all(monkeypatch):
    """``limit``: a fixed cap as is; the RAM available for the arrays' kind; 2**62 (no cap a
    file can reach) when the RAM available cannot be known."""
    assert readback.limit(TINY_KIND) == 10
    monkeypatch.setattr(readback, "available_ram_bytes", lambda: 12_345)
    assert readback.limit(KINDS["arrays"]) == 12_345
    monkeypatch.setattr(readback, "available_ram_bytes", lambda: None)
    assert readback.limit(KINDS["arrays"]) == 1 << 62


def _pipe(data: bytes):
    """An unbuffered read handle on a pipe holding ``data``, already closed for writing: its
    size reads as 0, so every byte ``read_all`` takes is one it read past that size."""
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    return os.fdopen(r, "rb", buffering=0)


@pytest.mark.parametrize("size", [1, 2, 9, 10])
def test_read_all_takes_a_growing_file_to_its_cap(size):
    """A file that grew since its size was read (a pipe's size reads 0) is read whole, byte
    for byte, up to its kind's cap."""
    data = bytes(range(65, 65 + size))
    with _pipe(data) as file:
        assert readback.read_all(file, TINY_KIND, "grown") == data


def test_read_all_refuses_a_file_grown_past_its_cap_and_reads_no_further():
    """Grown past the cap: one line naming it, and no byte read past the cap's first one over
    (the rest is still in the pipe), so a file growing without end is no endless read."""
    with _pipe(b"x" * 100) as file:
        with pytest.raises(ReadBackError) as caught:
            readback.read_all(file, TINY_KIND, "grown.json")
        assert file.read() == b"x" * (100 - 11)
    assert str(caught.value) == "grown.json: grew past the 10 bytes a test file may have"
    assert caught.value.reason == "too_big"


def test_json_nested_exactly_at_its_kind_s_depth_is_read_when_the_scan_runs():
    """More brackets than the depth (so the nesting is scanned) but nested exactly at it: read."""
    kind = KINDS["run"]
    at = "[" * kind.max_depth + "]" * kind.max_depth
    assert readback.parse_json(f"[{at[1:-1]}, []]", "r.json", kind)[1] == []


def test_json_that_does_not_parse_is_one_line_with_json_s_reason():
    with pytest.raises(ReadBackError) as caught:
        readback.parse_json(b'{"a":\n  }', "s.json", KINDS["summary"])
    assert str(caught.value) == (
        "s.json: cannot be read as JSON (Expecting value: line 2 column 3 (char 8))"
    )
    assert caught.value.reason == "syntax"


def test_a_file_opened_in_an_open_dir_is_named_by_its_label_whatever_refuses_it(tmp_path):
    """``open_at`` (a checkpoint's files, read through the dir's one handle) names the file by
    the label it is given: a link refused (never followed), a socket the system cannot open (with
    the system's words), a file missing."""
    import socket

    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock"))
    (tmp_path / "link").symlink_to("sock")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = []
        for name in ("link", "sock", "gone"):
            with pytest.raises(ReadBackError) as caught:
                readback.open_at(fd, name, KINDS["text"], f"run/{name}")
            found.append((str(caught.value), caught.value.reason))
    finally:
        os.close(fd)
        server.close()
    assert found == [
        ("run/link: a symbolic link, not a regular file", "outside"),
        ("run/sock: cannot open it (No such device or address)", "unreadable"),
        ("run/gone: no such file", "missing"),
    ]


def test_a_file_the_system_fails_to_read_is_named_by_its_path():
    """A regular file whose read fails (a process's own memory, unmapped at offset 0): one line
    naming the file's path under its dir, as ``unreadable``."""
    with pytest.raises(ReadBackError) as caught:
        readback.read_bytes("/proc/self", "mem", KINDS["text"])
    assert str(caught.value) == "/proc/self/mem: cannot read it (Input/output error)"
    assert caught.value.reason == "unreadable"


class _Record(BaseModel):
    name: str
    steps: int


def test_read_json_returns_its_model_and_names_the_file_it_refuses(tmp_path):
    """With a model: the validated record; a value of the wrong type or JSON that does not parse
    is one line naming the file by its path. Without one: the parsed value."""
    (tmp_path / "r.json").write_text('{"name": "a", "steps": 3}')
    assert readback.read_json(tmp_path, "r.json", KINDS["run"], _Record) == _Record(
        name="a", steps=3
    )
    assert readback.read_json(tmp_path, "r.json", KINDS["run"]) == {"name": "a", "steps": 3}
    for name, text, problem, reason in (
        ("bad.json", '{"name": "a", "steps": "3"}',
         "not a _Record record: steps: Input should be a valid integer (got '3')", "shape"),
        ("cut.json", '{"name": ',
         "cannot be read as JSON (Expecting value: line 1 column 10 (char 9))", "syntax"),
    ):  # fmt: skip
        (tmp_path / name).write_text(text)
        with pytest.raises(ReadBackError) as caught:
            readback.read_json(tmp_path, name, KINDS["run"], _Record)
        assert (str(caught.value), caught.value.reason) == (f"{tmp_path / name}: {problem}", reason)


def test_a_dir_on_the_way_swapped_for_a_link_after_the_check_is_not_followed(tmp_path, monkeypatch):
    """The race the reader closes: the path is resolved and checked, then a dir on its way is
    replaced by a link to a dir outside. Each component is opened with ``O_NOFOLLOW``, so the
    swap is refused, naming the link, instead of reading the file outside."""
    inside, outside = tmp_path / "run", tmp_path / "elsewhere"
    (inside / "a").mkdir(parents=True)
    (inside / "a" / "x.json").write_text("{}")
    outside.mkdir()
    (outside / "x.json").write_text('{"foreign": true}')
    real = os.path.realpath
    calls = []

    def resolve_then_swap(path):
        resolved = real(path)
        calls.append(path)
        if len(calls) == 2:  # the file's path, resolved and checked: now the swap
            shutil.rmtree(inside / "a")
            (inside / "a").symlink_to(outside)
        return resolved

    monkeypatch.setattr(readback.os.path, "realpath", resolve_then_swap)
    with pytest.raises(ReadBackError) as caught:
        readback.read_bytes(inside, "a/x.json", KINDS["summary"])
    assert str(caught.value) == f"{inside / 'a/x.json'}: 'a' is a symbolic link, not a directory"
    assert caught.value.reason == "outside"


def test_a_dir_read_back_that_is_missing_or_a_file_is_one_line(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ReadBackError) as caught:
        readback.read_bytes(tmp_path / "gone", "x.json", KINDS["summary"])
    assert str(caught.value) == f"{tmp_path / 'gone/x.json'}: no such file"
    assert caught.value.reason == "missing"
    with pytest.raises(ReadBackError) as caught:
        readback.read_bytes(tmp_path / "file", "x.json", KINDS["summary"])
    assert str(caught.value) == f"{tmp_path / 'file/x.json'}: cannot open its dir (Not a directory)"
    assert caught.value.reason == "unreadable"


def test_a_file_that_reaches_its_cap_and_grows_on_is_refused():
    """Read to exactly its cap, the file is read once more to see whether it goes on: here a
    byte that arrives later (a writer still writing) makes it one past the cap, refused."""
    r, w = os.pipe()
    os.write(w, b"x" * 10)

    def late_byte():
        time.sleep(0.3)
        os.write(w, b"y")
        os.close(w)

    writer = threading.Thread(target=late_byte)
    writer.start()
    try:
        with os.fdopen(r, "rb", buffering=0) as file:
            with pytest.raises(ReadBackError, match="grew past the 10 bytes a test file may have"):
                readback.read_all(file, TINY_KIND, "grown")
    finally:
        writer.join()
