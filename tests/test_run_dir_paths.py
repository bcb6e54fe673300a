"""A run dir from elsewhere is data (issue 23): its paths stay inside it, every file read is a
regular file checked before it is hashed, a checkpoint knows its run, ``per_dqn.load`` and
``per_dqn.resume`` warn as the CLI does, and a refused torch file says why.

Each case that once hung (a FIFO, ``/dev/zero``) runs under ``deadline``: a regression fails the
test instead of hanging the suite.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import warnings
from pathlib import Path

import pytest
import torch
from support import reseal, time_limit
from typer.testing import CliRunner

import per_dqn
import per_dqn.api
from per_dqn.cli import app
from per_dqn.rundir import checkpoint as ckpt
from per_dqn.rundir import dirs as rundir
from per_dqn.rundir import weights
from per_dqn.rundir.fileio import inside
from per_dqn.training import checkpoints as run_ckpt

runner = CliRunner()
SHORT = {
    "train.total_env_steps": 1_200, "train.learning_starts": 200, "train.eval_interval": 0,
    "train.final_eval_episodes": 1, "train.log_interval": 300, "checkpoint.interval_steps": 300,
    "checkpoint.keep_last": 3, "agent.hidden_sizes": [32, 32], "replay.capacity": 2_000,
    "run.device": "cpu",
}  # fmt: skip
NEWEST = "step_000000600"
OLDER = "step_000000300"
FORMAT_2_RUN = Path(__file__).parent / "data" / "format2-cartpole"


class StopAt:
    def __init__(self, step: int) -> None:
        self.step = step

    def on_checkpoint(self, env_steps, path):
        return env_steps >= self.step


def stopped_run(run_dir: Path, seed: int) -> Path:
    """A CartPole run stopped by a callback at env step 600 of 1,200: checkpoints at 300 and 600."""
    overrides = {**SHORT, "run.seed": seed}
    per_dqn.train("cartpole", overrides=overrides, run_dir=run_dir, callbacks=[StopAt(600)])
    return run_dir


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """Two runs, A and B (another seed, so another config)."""
    root = tmp_path_factory.mktemp("runs")
    return stopped_run(root / "A", 0), stopped_run(root / "B", 1)


@pytest.fixture
def two(runs, tmp_path) -> tuple[Path, Path]:
    """Fresh copies of A and B for one test."""
    return tuple(Path(shutil.copytree(run, tmp_path / run.name, symlinks=True)) for run in runs)


def snapshot(path: Path) -> dict[str, str]:
    """Every file under ``path`` by relative name, with its SHA-256 (links not followed)."""
    out = {}
    for found in sorted(path.rglob("*")):
        if found.is_symlink():
            out[str(found.relative_to(path))] = "-> " + os.readlink(found)
        elif found.is_file():
            out[str(found.relative_to(path))] = hashlib.sha256(found.read_bytes()).hexdigest()
    return out


def resume(run_dir: Path, *extra: str):
    return runner.invoke(app, ["train", "--resume", str(run_dir), "-q", *extra])


def evaluate(*args: str):
    return runner.invoke(app, ["eval", "--episodes", "1", *args])


def one_error(result) -> str:
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: "), line
    return line.removeprefix("error: ")


# --- the one confinement check -------------------------------------------------------------------


def test_inside_refuses_what_leaves_the_dir_and_keeps_what_stays(tmp_path):
    """Issue 23 item 2: ``fileio.inside`` is the one check. ``..``, an absolute name, a link out
    and a dangling link out are refused with one line naming the path and where it leads; a
    link that stays inside is kept, and so is a root that is itself a link (the user's own)."""
    root, outside = tmp_path / "run", tmp_path / "elsewhere"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "out").symlink_to(outside)
    (root / "dangling").symlink_to(outside / "not-yet")
    (root / "in").symlink_to(root / "sub")
    (tmp_path / "latest").symlink_to(root)
    assert inside(root, "in") == root / "in"
    assert inside(root, "sub/x") == root / "sub/x"
    assert inside(tmp_path / "latest", "sub") == tmp_path / "latest/sub"
    for name, target in [("../elsewhere", outside), (str(outside), outside), ("out", outside),
                         ("dangling", outside / "not-yet"), ("out/x", outside / "x")]:  # fmt: skip
        with pytest.raises(ValueError) as info:
            inside(root, name)
        assert str(info.value) == (
            f"{root / name}: leads outside {root} (to {target}); refused: a run dir's paths stay "
            "inside it"
        )
    with pytest.raises(rundir.RunDirError):  # the caller picks the error type
        inside(root, "out", rundir.RunDirError)


# --- item 2: links that leave the run dir -------------------------------------------------------


def test_a_checkpoints_link_to_another_run_is_refused_and_that_run_is_untouched(two):
    """Issue 23 item 2: with A's ``checkpoints/`` a link to B's, ``train --resume A`` resumed B's
    state, wrote new checkpoints into B and rotated B's old ones away, without B's lock. Now
    resume, eval and the API refuse it with one line naming the link, and B is as it was."""
    run_a, run_b = two
    shutil.rmtree(run_a / ckpt.CHECKPOINTS_DIR)
    (run_a / ckpt.CHECKPOINTS_DIR).symlink_to(run_b / ckpt.CHECKPOINTS_DIR)
    before_a, before_b = snapshot(run_a), snapshot(run_b)
    link = run_a / ckpt.CHECKPOINTS_DIR
    expected = (
        f"{link}: leads outside {run_a} (to {run_b / ckpt.CHECKPOINTS_DIR}); refused: a run "
        "dir's paths stay inside it"
    )
    assert one_error(resume(run_a, "--steps", "1500")) == expected
    assert one_error(evaluate(str(run_a))) == expected
    with pytest.raises(ValueError, match="leads outside"):
        per_dqn.resume(run_a)
    with pytest.raises(ValueError, match="leads outside"):
        per_dqn.load(run_a)
    assert snapshot(run_b) == before_b
    assert snapshot(run_a) == before_a


def test_a_checkpoints_link_that_loops_onto_itself_is_refused_with_one_line(two):
    """Pins a bug the fuzz test found in a clean-clone `make test`: with ``checkpoints`` a link
    to itself, ``per_dqn.load`` raised ``OSError`` (ELOOP, from the stat of the checkpoints dir)
    instead of refusing. Now load and eval refuse it with one line naming the dir, resume with
    its own line (a run with no checkpoint to resume from), and nothing in the run changes."""
    run_a, _ = two
    link = run_a / ckpt.CHECKPOINTS_DIR
    shutil.rmtree(link)
    link.symlink_to(link)
    before = snapshot(run_a)
    expected = f"{link}: cannot be read (Too many levels of symbolic links)"
    with pytest.raises(ValueError) as info:
        per_dqn.load(run_a)
    assert str(info.value) == expected
    assert one_error(evaluate(str(run_a))) == expected
    assert one_error(resume(run_a, "--steps", "1500")) == (
        f"{run_a}: nothing to resume from: it has no checkpoint"
    )
    assert snapshot(run_a) == before


def test_a_checkpoint_dir_linked_to_another_run_s_is_skipped_and_its_target_kept(two):
    """Issue 23 item 2: a step dir in A that is a link to B's checkpoint is not A's: it is
    skipped with a warning naming it, A resumes from its older checkpoint, and the rotation that
    replaces it removes the link, never B's checkpoint behind it."""
    run_a, run_b = two
    shutil.rmtree(run_a / ckpt.CHECKPOINTS_DIR / NEWEST)
    (run_a / ckpt.CHECKPOINTS_DIR / NEWEST).symlink_to(run_b / ckpt.CHECKPOINTS_DIR / NEWEST)
    before_b = snapshot(run_b)
    result = resume(run_a)
    assert result.exit_code == 0, result.output
    link = run_a / ckpt.CHECKPOINTS_DIR / NEWEST
    assert result.stderr.splitlines()[0] == (
        f"warning: checkpoint {link}: leads outside {link.parent} (to "
        f"{run_b / ckpt.CHECKPOINTS_DIR / NEWEST}); refused: a run dir's paths stay inside it; "
        f"using the previous one, {OLDER}"
    )
    assert not link.is_symlink()
    assert snapshot(run_b) == before_b


def test_an_entry_under_a_checkpoint_name_that_is_not_a_dir_is_named(two):
    """Bug pinned: ``list_checkpoints`` leaves out a ``checkpoints/step_*`` entry that is not a
    directory, so a resume or an eval fell back past a newer "checkpoint" (a file, a dangling
    link) without a word. Now each is named in a warning, newest first, by ``train --resume``,
    ``eval`` and the API, and the older checkpoint is used as before."""
    run_a, _ = two
    root = run_a / ckpt.CHECKPOINTS_DIR
    (root / "step_000000950").write_bytes(b"not a checkpoint")
    (root / "step_000000975").symlink_to(root / "gone")
    (root / "step_000000001").write_bytes(b"older than the one used: changes nothing")
    lines = [
        f"checkpoint {root / 'step_000000975'}: not a directory but a dangling symlink; "
        f"using the previous one, {NEWEST}",
        f"checkpoint {root / 'step_000000950'}: not a directory but a file; "
        f"using the previous one, {NEWEST}",
    ]
    shown = evaluate(str(run_a))
    assert shown.exit_code == 0, shown.output
    assert shown.stderr.splitlines()[:2] == [f"warning: {line}" for line in lines]
    with pytest.warns(RuntimeWarning) as caught:
        assert per_dqn.load(run_a).env_steps == 600
    assert [str(w.message) for w in caught] == lines
    # the line of the user's call; under mutmut (which rewrites the module: its functions are
    # called through a trampoline frame, between the two), at least not a line of the policy's
    if any(name.startswith("mutants_x_") for name in vars(sys.modules["per_dqn.policy"])):
        assert not any(w.filename.endswith(os.path.join("per_dqn", "policy.py")) for w in caught)
    else:
        assert {w.filename for w in caught} == {__file__}
    result = resume(run_a)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[:2] == [f"warning: {line}" for line in lines]
    assert json.loads((run_a / "summary.json").read_text())["resumed_from_env_steps"] == 600


def test_a_dangling_lock_link_creates_nothing(two, tmp_path):
    """Issue 23 item 2: a dangling ``.per-dqn.lock`` link made ``train --resume`` create its
    target outside the run dir (O_CREAT follows links). Now the lock is refused with one line,
    by the CLI and by ``lock_run_dir``, and nothing is created."""
    run_a, _ = two
    target = tmp_path / "outside" / "planted"
    target.parent.mkdir()
    (run_a / rundir.LOCK_FILE).unlink()
    (run_a / rundir.LOCK_FILE).symlink_to(target)
    line = one_error(resume(run_a, "--steps", "1500"))
    assert line.startswith(f"{run_a / rundir.LOCK_FILE}: leads outside {run_a} (to {target})")
    for create in (True, False):
        with pytest.raises(rundir.RunDirError, match="leads outside"):
            rundir.lock_run_dir(run_a, create=create)
    with pytest.raises(rundir.RunDirError, match="leads outside"):
        rundir.check_run_dir(run_a)
    assert not target.exists()


def test_a_videos_link_keeps_the_film_inside(two, tmp_path):
    """Issue 23 item 2: ``eval --video`` wrote its GIF through a ``videos/`` link outside the
    run dir. Now it is refused with one line before any episode is played."""
    run_a, _ = two
    outside = tmp_path / "outside"
    outside.mkdir()
    (run_a / "videos").symlink_to(outside)
    line = one_error(evaluate(str(run_a), "--video"))
    assert line.startswith(f"{run_a / 'videos'}: leads outside {run_a} (to {outside})")
    assert list(outside.iterdir()) == []


# --- item 8: manifest names, FIFOs and devices ---------------------------------------------------


@pytest.mark.parametrize("name", ["../config.yaml", "/dev/zero", "sub/agent.pt", ".hidden"])
def test_a_manifest_lists_plain_file_names_only(two, name):
    """Issue 23 item 8: manifest names were not confined: ``../`` or absolute names were read
    (and ``.pt`` ones loaded), and an entry for ``/dev/zero`` hung ``--resume`` forever. A
    resealed manifest listing anything but a plain name of the checkpoint dir is refused."""
    run_a, _ = two
    newest = run_a / ckpt.CHECKPOINTS_DIR / NEWEST
    files = json.loads((newest / ckpt.MANIFEST_FILE).read_text())["files"]
    files[name] = {"bytes": 1 << 40, "sha256": "0" * 64}
    reseal(newest, files)
    problem = (
        f"{newest}: its manifest.json lists {name!r}, not a plain file name of the checkpoint "
        "dir; refused"
    )
    with time_limit(60):
        with pytest.raises(ckpt.CheckpointError) as info:
            ckpt.verify_checkpoint(newest)
        assert str(info.value) == problem
        assert one_error(evaluate(str(newest))) == problem
        result = resume(run_a)  # skipped as damaged, with a warning: the older one resumes
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == (
        f"warning: checkpoint {problem}; using the previous one, {OLDER}"
    )


def test_a_training_checkpoint_lists_its_own_parts_only(two):
    """Issue 23 item 8: a plain name that is no part of a training checkpoint (``evil.pt``) is
    refused, not loaded."""
    run_a, _ = two
    newest = run_a / ckpt.CHECKPOINTS_DIR / NEWEST
    shutil.copy(newest / run_ckpt.AGENT_FILE, newest / "evil.pt")
    files = json.loads((newest / ckpt.MANIFEST_FILE).read_text())["files"]
    files["evil.pt"] = {}
    reseal(newest, files)
    reseal(newest)
    with pytest.raises(ckpt.CheckpointError) as info:
        run_ckpt.load_run_checkpoint(newest)
    assert str(info.value) == (
        f"{newest}: its manifest.json lists evil.pt, not a training checkpoint's file; refused"
    )


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "link out"])
def test_a_fifo_or_link_in_place_of_a_file_is_refused_without_blocking(two, tmp_path, kind):
    """Issue 23 item 8: a FIFO named ``agent.pt`` hung ``eval`` and ``--resume`` (the hash was
    computed before the size and file-type checks), and so did a link to ``/dev/zero``. Each
    file is now opened without following a link, checked to be a regular file of its listed
    size, and only then hashed: one line, at once."""
    run_a, _ = two
    newest = run_a / ckpt.CHECKPOINTS_DIR / NEWEST
    agent = newest / run_ckpt.AGENT_FILE
    agent.unlink()
    if kind == "fifo":
        os.mkfifo(agent)
        what = "a FIFO, not a regular file"
    elif kind == "link to /dev/zero":
        agent.symlink_to("/dev/zero")
        what = "a symbolic link, not a regular file"
    else:
        outside = tmp_path / "outside.pt"
        shutil.copy(run_a / ckpt.CHECKPOINTS_DIR / OLDER / run_ckpt.AGENT_FILE, outside)
        agent.symlink_to(outside)
        what = "a symbolic link, not a regular file"
    problem = f"{newest}: unreadable agent.pt ({what})"
    with time_limit(60):
        with pytest.raises(ckpt.CheckpointError) as info:
            ckpt.verify_checkpoint(newest)
        assert str(info.value) == problem
        assert one_error(evaluate(str(newest))) == problem
        result = evaluate(str(run_a))
        assert result.exit_code == 0, result.output
        assert result.stderr.splitlines()[:-1] == [
            f"warning: checkpoint {problem}; using the previous one, {OLDER}"
        ]
        assert result.stderr.splitlines()[-1].startswith(f"playing {run_a}/checkpoints/{OLDER} ")
        result = resume(run_a)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == (
        f"warning: checkpoint {problem}; using the previous one, {OLDER}"
    )


def test_a_fifo_manifest_or_model_is_refused_without_blocking(two):
    """Issue 23 item 8: the manifest, a run dir's ``model.pt`` and ``summary.json`` are read
    the same way: a FIFO in their place is one line (or, for the summary, an unknown step), not a
    read that never returns."""
    run_a, _ = two
    newest = run_a / ckpt.CHECKPOINTS_DIR / NEWEST
    (newest / ckpt.MANIFEST_FILE).unlink()
    os.mkfifo(newest / ckpt.MANIFEST_FILE)
    with time_limit(60):
        assert one_error(evaluate(str(newest))) == (
            f"{newest}: unreadable manifest.json (a FIFO, not a regular file)"
        )
        shutil.rmtree(run_a / ckpt.CHECKPOINTS_DIR)
        (run_a / "summary.json").unlink()
        os.mkfifo(run_a / "summary.json")
        result = evaluate(str(run_a))
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith(f"weights: {run_a / 'model.pt'}\n")
        (run_a / "model.pt").unlink()
        os.mkfifo(run_a / "model.pt")
        assert one_error(evaluate(str(run_a))) == (
            f"{run_a / 'model.pt'}: cannot read (a FIFO, not a regular file)"
        )


# --- item 7: a checkpoint knows its run ----------------------------------------------------------


def run_id(run_dir: Path) -> str:
    return json.loads((run_dir / rundir.RUN_FILE).read_text())["run_id"]


def manifest_of(path: Path) -> dict:
    return json.loads((path / ckpt.MANIFEST_FILE).read_text())


def test_a_run_has_an_id_that_every_checkpoint_carries(runs):
    """Issue 23 item 7: a run's id is written into ``run.json`` when it starts and into every
    checkpoint's manifest; two runs have two ids."""
    run_a, run_b = runs
    assert run_id(run_a) != run_id(run_b)
    assert len(run_id(run_a)) == 32
    for run in runs:
        for path in ckpt.list_checkpoints(ckpt.checkpoints_dir(run)):
            assert manifest_of(path)[ckpt.RUN_ID_KEY] == run_id(run)


def test_a_checkpoint_copied_from_another_run_is_refused_everywhere(two):
    """Issue 23 item 7: a step dir copied from run B into run A was played by ``eval`` with no
    warning and resumed with only a "config differs" note. Now ``eval`` (of the run dir and of
    the checkpoint by name), ``train --resume``, ``per_dqn.load`` and ``per_dqn.resume`` refuse
    it with one line naming both runs, and A is left as it was."""
    run_a, run_b = two
    newest = run_a / ckpt.CHECKPOINTS_DIR / NEWEST
    shutil.rmtree(newest)
    shutil.copytree(run_b / ckpt.CHECKPOINTS_DIR / NEWEST, newest)
    before = snapshot(run_a)
    line = one_error(evaluate(str(run_a)))
    problem = (
        f"{newest}: a checkpoint of run {run_id(run_b)}, but its run dir {run_a} is run "
        f"{run_id(run_a)}; refused: a checkpoint copied from another run is not this run's"
    )
    assert line == problem
    assert one_error(evaluate(str(newest))) == problem
    assert one_error(resume(run_a)) == problem
    for call in (per_dqn.load, per_dqn.resume):
        with pytest.raises(ValueError) as info:
            call(run_a)
        assert str(info.value) == problem
    assert snapshot(run_a) == before
    # A checkpoint dir on its own, outside any run dir, has nothing to be checked against.
    alone = Path(shutil.copytree(newest, run_a.parent / "alone"))
    assert evaluate(str(alone)).exit_code == 0


def test_a_checkpoint_with_an_id_in_a_run_dir_without_one_is_refused(two):
    """Issue 23 item 7: deleting A's ``run.json`` does not make B's checkpoint A's: a checkpoint
    that names a run in a run dir that records none is refused too."""
    run_a, run_b = two
    newest = run_a / ckpt.CHECKPOINTS_DIR / NEWEST
    shutil.rmtree(newest)
    shutil.copytree(run_b / ckpt.CHECKPOINTS_DIR / NEWEST, newest)
    (run_a / "run.json").unlink(missing_ok=True)
    assert one_error(evaluate(str(run_a))) == (
        f"{newest}: a checkpoint of run {run_id(run_b)}, but its run dir {run_a} records none "
        "(no run.json); refused: a checkpoint copied from another run is not this run's"
    )


def test_a_checkpoint_from_before_run_ids_resumes_and_the_run_gets_one(tmp_path):
    """Issue 23 item 7: a checkpoint without a run id (format 2, written before run ids) is
    legacy and unchecked: it still resumes exactly (tests/test_resume.py compares the weights),
    and the run dir gets an id on its first write, which its new checkpoints carry, with the
    newest id-less step beside it, so that the old checkpoints stay readable there."""
    run_dir = Path(shutil.copytree(FORMAT_2_RUN, tmp_path / "run"))
    assert not (run_dir / rundir.RUN_FILE).exists()
    assert ckpt.RUN_ID_KEY not in manifest_of(run_dir / "checkpoints/step_000000300")
    result = resume(run_dir)
    assert result.exit_code == 0, result.output
    newest = manifest_of(run_dir / "checkpoints/step_000000600")
    assert newest[ckpt.RUN_ID_KEY] == run_id(run_dir)
    # Its id-less checkpoints are recorded as legacy (issue 43): the only id-less ones it reads.
    assert rundir.read_run_record(run_dir) == (run_id(run_dir), 300)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a legacy checkpoint plays without a word
        per_dqn.load(run_dir / "checkpoints/step_000000300")


# --- item 9: the API warns as the CLI does -------------------------------------------------------


def test_load_and_resume_warn_when_they_pass_a_damaged_checkpoint(two):
    """Issue 23 item 9: ``per_dqn.load`` fell back past a damaged checkpoint (to an older one,
    or to ``model.pt``) without a word, where the CLI warns. Now the API warns too, with the
    line the CLI prints after ``warning:``."""
    run_a, _ = two
    newest = run_a / ckpt.CHECKPOINTS_DIR / NEWEST
    with open(newest / run_ckpt.AGENT_FILE, "r+b") as file:
        file.truncate(1000)
    cli_line = evaluate(str(run_a)).stderr.splitlines()[0].removeprefix("warning: ")
    assert cli_line.startswith(f"checkpoint {newest}: agent.pt has 1,000 bytes")
    with pytest.warns(RuntimeWarning) as caught:
        policy = per_dqn.load(run_a)
    assert [str(w.message) for w in caught] == [cli_line]
    assert policy.env_steps == 300
    with pytest.warns(RuntimeWarning) as caught:
        per_dqn.api.evaluate_run(run_a, episodes=1)
    assert [str(w.message) for w in caught] == [cli_line]
    with pytest.warns(RuntimeWarning) as caught:
        per_dqn.resume(run_a)
    assert [str(w.message) for w in caught] == [cli_line]
    # Past every checkpoint to the run's model.pt: each damaged one is named, the last says so.
    saved = ckpt.list_checkpoints(ckpt.checkpoints_dir(run_a))
    for path in saved:
        with open(path / run_ckpt.AGENT_FILE, "r+b") as file:
            file.truncate(1000)
    cli_lines = [
        line.removeprefix("warning: ")
        for line in evaluate(str(run_a)).stderr.splitlines()
        if line.startswith("warning: ")
    ]
    assert len(cli_lines) == len(saved) and cli_lines[-1].endswith("; using model.pt")
    with pytest.warns(RuntimeWarning) as caught:
        policy = per_dqn.load(run_a)
    assert [str(w.message) for w in caught] == cli_lines
    assert policy.source == run_a / "model.pt"


# --- item 11: a refused torch file says why -------------------------------------------------------


class System:
    """Unpickled, it runs a shell command: a pickle whose GLOBAL is posix.system."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def test_a_refused_torch_file_names_the_global_it_asked_for(two, tmp_path):
    """Issue 23 item 11: torch's refusal no longer starts with the text the code looked for, so
    the line showed torch's advice cut off mid-sentence and lost the reason. A ``model.pt`` whose
    pickle calls ``posix.system`` (shown live first) is refused with the reason, and runs
    nothing."""
    run_a, _ = two
    marker = tmp_path / "ran"
    torch.save({"w": System(f"touch {marker}")}, tmp_path / "control.pt")
    torch.load(tmp_path / "control.pt", weights_only=False)
    assert marker.exists()  # the plant is live
    marker.unlink()
    shutil.rmtree(run_a / ckpt.CHECKPOINTS_DIR)
    torch.save({"w": System(f"touch {marker}")}, run_a / "model.pt")
    assert one_error(evaluate(str(run_a))) == (
        f"{run_a / 'model.pt'}: refused: it holds more than tensors (Trying to load unsupported "
        "GLOBAL posix.system whose module posix is blocked), and loading it could run code"
    )
    with pytest.raises(ckpt.CheckpointError, match=r"\(Trying to load unsupported GLOBAL posix"):
        per_dqn.load(run_a)
    assert not marker.exists()


def test_the_reason_is_found_in_each_shape_of_torch_s_message():
    """Issue 23 item 11: the reason is read from torch's message whatever its advice says
    around it: after ``WeightsUnpickler error:``, on a line naming a GLOBAL, or else on the first
    line that is not advice; its first sentence only."""
    reason = weights.unpickling_reason
    assert (
        reason(
            "Weights only load failed. This file can still be loaded, to do so you have two "
            "options. \n\t(1) In PyTorch 2.6, we changed the default.\n\tWeightsUnpickler error: "
            "Unsupported global: GLOBAL io.open was not an allowed global by default. Please use "
            "`torch.serialization.add_safe_globals([io.open])`.\n\nCheck the documentation"
        )
        == "Unsupported global: GLOBAL io.open was not an allowed global by default"
    )
    assert (
        reason(
            "Weights only load failed. In PyTorch 2.6, we changed the default value. Re-running "
            "`torch.load` will likely succeed.\n\n\nTrying to load unsupported GLOBAL posix.system "
            "whose module posix is blocked.\n\nCheck the documentation of torch.load"
        )
        == "Trying to load unsupported GLOBAL posix.system whose module posix is blocked"
    )
    assert reason("Weights only load failed. \n\nUnsupported operand 149. More") == (
        "Unsupported operand 149"
    )


def test_a_wandb_link_out_of_the_run_dir_is_refused_before_wandb_starts(tmp_path):
    """Issue 23 item 2: the tracker's ``wandb/`` dir is a path under the run dir too: a link that
    leaves it is refused (``TrackingError``, one line) before wandb writes anything there."""
    from per_dqn.logs import tracking

    run_dir, outside = tmp_path / "run", tmp_path / "outside"
    run_dir.mkdir()
    outside.mkdir()
    (run_dir / "wandb").symlink_to(outside)
    with pytest.raises(tracking.TrackingError, match=f"^{run_dir / 'wandb'}: leads outside"):
        tracking.WandbTracker(run_dir, {}, "run", resume=True)
    assert list(outside.iterdir()) == []
