"""Checkpoint files on disk: the manifest's sizes and SHA-256s and its own digest against hashlib,
atomic writes that a failure mid-way leaves unseen, keep-last-K, the fallback past a truncated,
corrupted, edited or half-written checkpoint, reading beside a writer, and refusing format 1 and
pickles. Also the pieces of state a checkpoint carries, all as npz + JSON: the replay memory's
arrays and RNG, classic-control envs mid-episode, the n-step windows and the health panel."""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import pickle
import re
import shutil
import socket
import threading
import time
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from per_dqn.envs.make import check_env_state, env_state, load_env_state
from per_dqn.memory import KINDS, make_memory
from per_dqn.rundir import arrays, latest, readback
from per_dqn.rundir import checkpoint as ckpt
from per_dqn.rundir.fileio import write_bytes_atomic, write_text_atomic
from per_dqn.rundir.weights import load_weights
from per_dqn.training import checkpoints as run_ckpt
from per_dqn.training.health import ReplayHealth
from per_dqn.training.nstep import NStepAccumulator


def write_bytes(files: dict[str, bytes]):
    def write(directory: Path) -> None:
        for name, data in files.items():
            (directory / name).write_bytes(data)

    return write


def names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def digest(manifest: dict) -> str:
    """The manifest digest by hand: SHA-256 of its JSON with sorted keys, no spaces, and its own
    key left out."""
    body = {key: value for key, value in manifest.items() if key != "manifest_sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def test_manifest_lists_every_file_with_its_size_and_sha256(tmp_path):
    path = ckpt.write_checkpoint(
        tmp_path, 1200, write_bytes({"a.bin": b"abc", "b.bin": b""}), keep_last=2,
        meta={"final": True},
    )  # fmt: skip
    assert path == tmp_path / "step_000001200"
    assert names(tmp_path) == ["step_000001200"]  # no temp dir left behind
    manifest = json.loads((path / "manifest.json").read_text())
    expected = {
        "format": 3,
        "env_steps": 1200,
        "final": True,
        "files": {
            # hashlib's digests of the literal bytes, computed independently of the module.
            "a.bin": {"bytes": 3, "sha256": hashlib.sha256(b"abc").hexdigest()},
            "b.bin": {"bytes": 0, "sha256": hashlib.sha256(b"").hexdigest()},
        },
    }
    assert manifest == {**expected, "manifest_sha256": digest(expected)}
    assert ckpt.verify_checkpoint(path) == manifest


def test_keeps_the_last_k(tmp_path):
    for step in (100, 200, 300, 400):
        ckpt.write_checkpoint(tmp_path, step, write_bytes({"x": b"1"}), keep_last=2)
    assert names(tmp_path) == ["step_000000300", "step_000000400"]
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == names(tmp_path)


def test_a_write_that_fails_midway_leaves_no_checkpoint_and_the_old_ones_intact(tmp_path):
    ckpt.write_checkpoint(tmp_path, 100, write_bytes({"x": b"good"}), keep_last=1)

    def crash(directory: Path) -> None:
        (directory / "x").write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        ckpt.write_checkpoint(tmp_path, 200, crash, keep_last=1)
    assert names(tmp_path) == ["step_000000100"]
    assert (tmp_path / "step_000000100" / "x").read_bytes() == b"good"


def test_a_killed_writer_is_never_read_and_its_leftovers_go(tmp_path):
    """A process killed mid-write leaves a temp dir (no final name); readers ignore it and the
    next write removes it."""
    ckpt.write_checkpoint(tmp_path, 100, write_bytes({"x": b"good"}), keep_last=3)
    leftover = tmp_path / ".tmp-step_000000200-99999"
    leftover.mkdir()
    (leftover / "x").write_bytes(b"partial")
    found = latest.find_latest(tmp_path)
    assert found.path == tmp_path / "step_000000100" and found.warnings == []
    ckpt.write_checkpoint(tmp_path, 300, write_bytes({"x": b"new"}), keep_last=3)
    assert names(tmp_path) == ["step_000000100", "step_000000300"]


def test_an_entry_under_a_checkpoint_name_that_is_not_a_dir_is_warned_of(tmp_path):
    """Bug pinned: a ``step_*`` file or dangling link was left out of the candidates silently.
    Newer than the checkpoint used: one warning each, newest first; older: nothing to say; with
    no usable checkpoint at all: still named."""
    (tmp_path / "step_000000050").write_bytes(b"older")
    ckpt.write_checkpoint(tmp_path, 100, write_bytes({"x": b"good"}), keep_last=3)
    (tmp_path / "step_000000300").write_bytes(b"a file")
    (tmp_path / "step_000000200").symlink_to(tmp_path / "nowhere")
    expected = [
        f"checkpoint {tmp_path / 'step_000000300'}: not a directory but a file; "
        "using the previous one, step_000000100",
        f"checkpoint {tmp_path / 'step_000000200'}: not a directory but a dangling symlink; "
        "using the previous one, step_000000100",
    ]
    found = latest.find_latest(tmp_path)
    assert found.path == tmp_path / "step_000000100" and found.warnings == expected
    read = latest.read_latest(tmp_path, ["x"])
    assert read.path == found.path and read.warnings == expected
    shutil.rmtree(tmp_path / "step_000000100")
    none = [
        f"checkpoint {tmp_path / name}: not a directory but {what}; no earlier checkpoint is usable"
        for name, what in [("step_000000300", "a file"), ("step_000000200", "a dangling symlink"),
                           ("step_000000050", "a file")]
    ]  # fmt: skip
    assert latest.find_latest(tmp_path) == latest.Found(None, {}, none, 0)
    assert latest.read_latest(tmp_path, ["x"]) == latest.Read(None, {}, {}, none, 0)


def test_a_fifo_or_a_socket_under_a_checkpoint_name_is_named_for_what_it_is(tmp_path):
    os.mkfifo(tmp_path / "step_000000300")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "step_000000200"))
        found = latest.find_latest(tmp_path)
    assert found.warnings == [
        f"checkpoint {tmp_path / 'step_000000300'}: not a directory but a FIFO; "
        "no earlier checkpoint is usable",
        f"checkpoint {tmp_path / 'step_000000200'}: not a directory but a special file; "
        "no earlier checkpoint is usable",
    ]


def damage_truncate(path: Path) -> None:
    with open(path, "r+b") as file:
        file.truncate(path.stat().st_size // 2)


def damage_flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (damage_truncate, "x has 3,000 bytes, its manifest says 6,000"),
        (damage_flip, "x fails its SHA-256 check"),
        (lambda path: path.unlink(), "x is missing"),
        (lambda path: (path.parent / "manifest.json").unlink(), "no manifest.json"),
        (lambda path: (path.parent / "manifest.json").write_text("{"), "unreadable manifest"),
    ],
    ids=["truncated", "flipped-byte", "missing-file", "no-manifest", "bad-manifest"],
)
def test_a_damaged_checkpoint_is_skipped_with_one_warning(tmp_path, damage, problem):
    for step in (100, 200):
        ckpt.write_checkpoint(tmp_path, step, write_bytes({"x": bytes(6000)}), keep_last=3)
    newest = tmp_path / "step_000000200"
    damage(newest / "x")
    found = latest.find_latest(tmp_path)
    assert found.path == tmp_path / "step_000000100"
    (warning,) = found.warnings
    assert warning.startswith(f"checkpoint {newest}: {problem}")
    assert warning.endswith("; using the previous one, step_000000100")
    with pytest.raises(ckpt.CheckpointError, match=problem.split(" (")[0]):
        ckpt.verify_checkpoint(newest)


EDITED = "manifest.json fails its own SHA-256 check (manifest_sha256)"


def edit_manifest(path: Path, change, reseal: bool = False) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    change(manifest)
    if reseal:
        manifest["manifest_sha256"] = digest(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest, indent=2))


@pytest.mark.parametrize(
    ("change", "reseal", "problem"),
    [
        (lambda m: m.update(env_steps=100), False, EDITED),
        (lambda m: m.update(final=True), False, EDITED),
        (
            lambda m: m["files"]["x"].update(sha256=hashlib.sha256(b"other").hexdigest()),
            False,
            EDITED,
        ),
        (lambda m: m.pop("manifest_sha256"), False, EDITED),
        (lambda m: m.update(env_steps=100), True, "its manifest.json says env step 100, its name "
         "step 200"),
    ],
    ids=["env-steps-digit", "added-value", "file-digest", "digest-removed", "resealed-step"],
)  # fmt: skip
def test_an_edited_manifest_is_skipped_with_one_warning(tmp_path, change, reseal, problem):
    """Pins the bug where manifest.json itself was unchecked: one changed digit of env_steps
    passed. Its digest now covers every value; a manifest resealed with a fresh digest but another
    step than its dir name (a copied manifest, say) is caught by the name."""
    for step in (100, 200):
        ckpt.write_checkpoint(tmp_path, step, write_bytes({"x": bytes(60)}), keep_last=3)
    newest = tmp_path / "step_000000200"
    (newest / "manifest.json").write_text(  # re-indenting changes no value: still accepted
        json.dumps(json.loads((newest / "manifest.json").read_text()), indent=4)
    )
    assert latest.find_latest(tmp_path).path == newest
    edit_manifest(newest, change, reseal)
    for found in (latest.find_latest(tmp_path), latest.read_latest(tmp_path, ["x"])):
        assert found.path == tmp_path / "step_000000100"
        assert found.warnings == [
            f"checkpoint {newest}: {problem}; using the previous one, step_000000100"
        ]


def test_format_1_is_refused_not_skipped(tmp_path):
    """A format-1 manifest (no digest, a pickled loop.pt) is not damage to fall back from: every
    checkpoint of that run is format 1. Resume and eval both stop at it with one line."""
    ckpt.write_checkpoint(tmp_path, 100, write_bytes({"x": b"1"}), keep_last=3)
    old = tmp_path / "step_000000200"
    old.mkdir()
    (old / "loop.pt").write_bytes(b"\x80\x04N.")  # pickle of None
    files = {"loop.pt": {"bytes": 4, "sha256": hashlib.sha256(b"\x80\x04N.").hexdigest()}}
    (old / "manifest.json").write_text(json.dumps({"format": 1, "env_steps": 200, "files": files}))
    message = f"{old}: a format-1 checkpoint (its loop state is a pickle, loop.pt"
    with pytest.raises(ckpt.FormatError, match=re.escape(message)):
        latest.find_latest(tmp_path)
    with pytest.raises(ckpt.FormatError, match=re.escape(message)):
        latest.read_latest(tmp_path, ["x"])
    # A format-2 manifest edited to say format 1 is damage (its digest fails), not format 1.
    shutil.rmtree(old)
    ckpt.write_checkpoint(tmp_path, 300, write_bytes({"x": b"3"}), keep_last=3)
    edit_manifest(tmp_path / "step_000000300", lambda m: m.update(format=1))
    assert latest.find_latest(tmp_path).path == tmp_path / "step_000000100"


def test_no_usable_checkpoint(tmp_path):
    assert latest.find_latest(tmp_path / "absent") == latest.Found(None, {}, [], 0)
    ckpt.write_checkpoint(tmp_path, 100, write_bytes({"x": b"abc"}), keep_last=1)
    damage_flip(tmp_path / "step_000000100" / "x")
    found = latest.find_latest(tmp_path)
    assert found.path is None and found.candidates == 1
    assert found.warnings == [
        f"checkpoint {tmp_path / 'step_000000100'}: x fails its SHA-256 check; no earlier "
        "checkpoint is usable"
    ]


def test_checking_only_some_files(tmp_path):
    """Evaluation reads only agent.pt and config.yaml: damage elsewhere does not stop it."""
    ckpt.write_checkpoint(tmp_path, 100, write_bytes({"a": b"1", "m": b"22"}), keep_last=1)
    damage_flip(tmp_path / "step_000000100" / "m")
    assert latest.find_latest(tmp_path, ["a"]).path == tmp_path / "step_000000100"
    assert latest.find_latest(tmp_path).path is None


def test_a_damaged_newer_checkpoint_is_replaced_and_never_crowds_out_a_good_one(tmp_path):
    """After a fallback from a damaged step 300 to step 200, the resumed run writes 250 and then
    300 again: with keep_last=1, the good 250 must not be deleted in favour of the damaged 300."""
    for step in (200, 300):
        ckpt.write_checkpoint(tmp_path, step, write_bytes({"x": b"v1"}), keep_last=2)
    damage_flip(tmp_path / "step_000000300" / "x")
    ckpt.write_checkpoint(tmp_path, 250, write_bytes({"x": b"v2"}), keep_last=1)
    assert names(tmp_path) == ["step_000000250"]
    (tmp_path / "step_000000300").mkdir()  # a damaged dir of the same step as the next write
    ckpt.write_checkpoint(tmp_path, 300, write_bytes({"x": b"v3"}), keep_last=1)
    assert names(tmp_path) == ["step_000000300"]
    assert ckpt.verify_checkpoint(tmp_path / "step_000000300")["env_steps"] == 300


def test_write_text_atomic_replaces_whole(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("old")
    write_text_atomic(path, "new")
    assert path.read_text() == "new" and names(tmp_path) == ["config.yaml"]


def test_write_bytes_atomic_leaves_the_old_file_when_the_write_fails(tmp_path):
    """How model.pt is written. A write that fails after the temp file is opened (here: data of
    a type the file refuses, as no disk can be filled on demand) leaves the old file whole and no
    temp file."""
    path = tmp_path / "model.pt"
    path.write_bytes(b"old weights")
    with pytest.raises(TypeError):
        write_bytes_atomic(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"old weights" and names(tmp_path) == ["model.pt"]
    write_bytes_atomic(path, b"new weights")
    assert path.read_bytes() == b"new weights" and names(tmp_path) == ["model.pt"]


def test_read_latest_reads_each_file_once_as_checked(tmp_path):
    """What ``eval`` gets is the bytes that passed the checks, not a second read of the path; a
    missing file with no newer checkpoint around is damage, warned about like the others."""
    for step, data in ((100, b"one"), (200, b"two")):
        ckpt.write_checkpoint(tmp_path, step, write_bytes({"a": data, "b": b"x"}), keep_last=3)
    read = latest.read_latest(tmp_path, ["a"])
    assert (read.path, read.files, read.warnings) == (
        tmp_path / "step_000000200",
        {"a": b"two"},
        [],
    )
    (tmp_path / "step_000000200" / "a").unlink()
    read = latest.read_latest(tmp_path, ["a"])
    assert read.path == tmp_path / "step_000000100" and read.files == {"a": b"one"}
    assert read.warnings == [
        f"checkpoint {tmp_path / 'step_000000200'}: a is missing; using the previous one, "
        "step_000000100"
    ]
    with pytest.raises(ckpt.CheckpointError, match=r"c is not listed in its manifest\.json"):
        ckpt.read_verified(tmp_path / "step_000000100", ["b", "c"])


def test_a_checkpoint_rotated_away_mid_read_is_no_damage(tmp_path):
    """What ``read_latest`` decides when a file of checkpoint P is found missing, on real dirs:
    P deleted, or replaced by a new dir of its step, or with a newer checkpoint beside it (the
    writer renames the new one in before it deletes) means the rotation took it: look again,
    no warning. P still there, the same dir, nothing newer: damage."""
    root = tmp_path
    for step in (100, 200):
        ckpt.write_checkpoint(root, step, write_bytes({"a": b"1"}), keep_last=3)
    p = root / "step_000000200"
    inode = os.stat(p).st_ino
    assert not latest._rotated_away(root, p, inode, {})  # the same dir, nothing newer: damage
    ckpt.write_checkpoint(root, 300, write_bytes({"a": b"3"}), keep_last=3)
    assert latest._rotated_away(root, p, inode, {})  # a newer one appeared
    assert not latest._rotated_away(root, p, inode, {root / "step_000000300": "damaged"})
    replacement = root / ".tmp-step_000000200"
    replacement.mkdir()  # made while p exists: another inode, never p's reused
    shutil.rmtree(p)
    assert latest._rotated_away(root, p, inode, {})  # deleted
    replacement.rename(p)
    assert latest._rotated_away(root, p, inode, {})  # replaced: another dir under its name
    # replaced, with nothing newer usable: the new inode alone tells
    assert latest._rotated_away(root, p, inode, {root / "step_000000300": "damaged"})


def test_a_damaged_newest_is_passed_over_again_after_a_rotation(tmp_path, monkeypatch):
    """The newest checkpoint is damaged and the one before it is rotated away while it is read:
    on the second look the damaged one, already refused, is passed over (not the end of the
    look), and the oldest, whole, is returned, with the damage warned about."""
    for step in (100, 200, 300):
        ckpt.write_checkpoint(tmp_path, step, write_bytes({"a": str(step).encode()}), keep_last=3)
    (tmp_path / "step_000000300" / "a").write_bytes(b"tampered")
    real = ckpt.read_verified

    def rotated_mid_read(path, *args, **kwargs):
        if path.name == "step_000000200" and path.exists():
            shutil.rmtree(path)  # the writer's rotation, between the listing and the read
        return real(path, *args, **kwargs)

    monkeypatch.setattr(ckpt, "read_verified", rotated_mid_read)
    read = latest.read_latest(tmp_path, ["a"])
    assert (read.path, read.files) == (tmp_path / "step_000000100", {"a": b"100"})
    assert read.warnings == [
        f"checkpoint {tmp_path / 'step_000000300'}: a has 8 bytes, its manifest says 3; using "
        "the previous one, step_000000100"
    ]


def test_read_latest_beside_a_writer_that_rotates(tmp_path):
    """A real writer thread writes checkpoints as fast as it can, keeping one, while this thread
    reads the newest again and again for a second (the race is real: on the 2-core development
    machine about one read in a thousand found its checkpoint deleted mid-read). Every read
    returns a checkpoint, whole, with no warning."""
    ckpt.write_checkpoint(tmp_path, 0, write_bytes({"a": b"0" * 1000}), keep_last=1)
    stop = threading.Event()

    def writer() -> None:
        step = 0
        while not stop.is_set():
            step += 1
            data = str(step).encode() * 1000
            ckpt.write_checkpoint(tmp_path, step, write_bytes({"a": data}), keep_last=1)

    thread = threading.Thread(target=writer)
    thread.start()
    reads = []
    try:
        start = time.monotonic()
        # A second at least, and on until the writer has rotated past ten checkpoints (a
        # writer thread descheduled on a busy machine may write fewer in the first second).
        while time.monotonic() - start < 1.0 or (
            len(set(reads)) <= 10 and time.monotonic() - start < 60.0
        ):
            read = latest.read_latest(tmp_path, ["a"])
            assert read.path is not None and read.warnings == []
            step = int(read.manifest["env_steps"])
            assert read.files["a"] == (str(step).encode() if step else b"0") * 1000
            reads.append(step)
    finally:
        stop.set()
        thread.join()
    assert reads == sorted(reads) and len(set(reads)) > 10


def test_a_checkpoint_rotated_away_since_the_listing_is_no_stray(tmp_path, monkeypatch):
    """Pins a race that the rotating-writer test above found with two pytest workers loading the
    machine: ``read_latest`` listed a newer checkpoint that the writer then rotated away, and
    warned that it was "not a directory but a special file" (each of ``is_dir``, ``is_fifo`` and
    ``is_file`` failed on the missing entry). The listing is replayed here with the entry gone: no
    warning, the newest checkpoint still there is read. A stray that is there is still named."""
    ckpt.write_checkpoint(tmp_path, 41, write_bytes({"a": b"41"}), keep_last=1)
    gone = tmp_path / ckpt.checkpoint_name(42)
    real_iterdir = Path.iterdir

    def listing_with_the_rotated_entry(self):
        entries = list(real_iterdir(self))
        return iter([*entries, gone] if self == tmp_path else entries)

    monkeypatch.setattr(Path, "iterdir", listing_with_the_rotated_entry)
    read = latest.read_latest(tmp_path, ["a"])
    assert read.path == tmp_path / ckpt.checkpoint_name(41) and read.warnings == []
    assert read.files["a"] == b"41"
    stray = tmp_path / ckpt.checkpoint_name(43)
    stray.write_bytes(b"")
    read = latest.read_latest(tmp_path, ["a"])
    assert read.path == tmp_path / ckpt.checkpoint_name(41)
    assert read.warnings == [f"checkpoint {stray}: not a directory but a file; using the previous "
                             f"one, {ckpt.checkpoint_name(41)}"]  # fmt: skip


class Plant:
    """Unpickled, it creates ``marker``: stands in for any code a hostile file would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_load_weights_runs_no_code_and_checks_the_crc(tmp_path):
    """``torch.load(weights_only=True)`` alone loads a flipped byte in a tensor silently (it does
    not check its zip's CRC-32s): ``load_weights`` does, and refuses a pickle that would run code
    (shown live first) with one line."""
    weights = {"w": torch.arange(64, dtype=torch.float32)}
    torch.save(weights, tmp_path / "good.pt")
    data = (tmp_path / "good.pt").read_bytes()
    assert torch.equal(load_weights(data, "good.pt")["w"], weights["w"])
    # The tensor's bytes: the float 10.0 (0x41200000) at offset 40 of its storage member.
    at = data.index(np.float32(10.0).tobytes())
    flipped = data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]
    assert not torch.equal(torch.load(io.BytesIO(flipped), weights_only=True)["w"], weights["w"])
    with pytest.raises(ckpt.CheckpointError, match=r"^bad.pt: corrupt: its member .+ fails its "
                       "CRC-32 check$"):  # fmt: skip
        load_weights(flipped, "bad.pt")
    with pytest.raises(ckpt.CheckpointError) as caught:
        load_weights(data[: len(data) // 2], "cut.pt")
    with pytest.raises(zipfile.BadZipFile) as zip_says:
        zipfile.ZipFile(io.BytesIO(data[: len(data) // 2]))
    assert str(caught.value) == (
        f"cut.pt: truncated or corrupt, not a whole torch file ({zip_says.value})"
    )
    # a whole zip, but not torch's: torch's own reason, cut at 200 characters
    other = io.BytesIO()
    with zipfile.ZipFile(other, "w") as archive:
        archive.writestr("x" * 300, b"not a torch file")
    with pytest.raises(RuntimeError) as torch_says:
        torch.load(io.BytesIO(other.getvalue()), weights_only=True)
    with pytest.raises(ckpt.CheckpointError) as caught:
        load_weights(other.getvalue(), "zip.pt")
    reason = " ".join(str(torch_says.value).split())[:200]
    assert str(caught.value) == f"zip.pt: cannot load (RuntimeError: {reason})"

    marker = tmp_path / "ran"
    torch.save({"w": Plant(marker)}, tmp_path / "plant.pt")
    planted = (tmp_path / "plant.pt").read_bytes()
    pickle.loads(pickle.dumps(Plant(marker)))
    assert marker.exists()  # the plant is live
    marker.unlink()
    with pytest.raises(ckpt.CheckpointError) as info:
        load_weights(planted, "plant.pt")
    assert str(info.value) == (
        "plant.pt: refused: it holds more than tensors (Unsupported global: GLOBAL io.open was "
        "not an allowed global by default), and loading it could run code"
    )
    assert not marker.exists()


def test_trees_hold_no_pickle(tmp_path):
    """An npz holding an object array (whose pickle would run code) is refused on reading, and
    ``save_tree`` never writes one."""
    marker = tmp_path / "ran"
    np.savez(tmp_path / "t.npz", a=np.array([Plant(marker)], dtype=object), allow_pickle=True)
    (tmp_path / "t.json").write_text('{"a": {"__array__": "a"}}')
    with pytest.raises(ValueError, match="Object arrays cannot be loaded when allow_pickle=False"):
        arrays.load_tree(tmp_path / "t.npz", tmp_path / "t.json")
    assert not marker.exists()
    with pytest.raises(TypeError, match="object array at 'a'"):
        arrays.save_tree(tmp_path / "u.npz", tmp_path / "u.json", {"a": np.array([None])})


def test_a_tree_whose_json_is_damaged_is_named_by_its_file(tmp_path):
    arrays.save_tree(tmp_path / "t.npz", tmp_path / "t.json", {"a": np.zeros(2), "b": 1})
    (tmp_path / "t.json").write_text('{"a": {"__array__": "a"}, "b": ')
    with pytest.raises(ValueError, match=rf"^{re.escape(str(tmp_path / 't.json'))}: "):
        arrays.load_tree(tmp_path / "t.npz", tmp_path / "t.json")


# --- the state a checkpoint carries ---------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_memory_round_trip_continues_identically(tmp_path, kind):
    """Arrays, priorities and the 128-bit PCG64 state survive npz + JSON: the restored memory
    draws the same batches as the original."""
    rng = np.random.default_rng(0)
    memory = make_memory(kind, capacity=64, obs_shape=(3,), seed=7)
    for _ in range(100):  # wraps around
        memory.add(
            rng.normal(size=3), int(rng.integers(2)), rng.normal(), rng.normal(size=3), False
        )
    batch = memory.sample(8, 0.5)
    memory.update_priorities(batch.indices, rng.random(len(batch.indices)) * 5)
    arrays.save_tree(tmp_path / "m.npz", tmp_path / "m.json", memory.state_dict())
    restored = make_memory(kind, capacity=64, obs_shape=(3,), seed=123)
    restored.load_state_dict(arrays.load_tree(tmp_path / "m.npz", tmp_path / "m.json"))
    for _ in range(3):
        a, b = memory.sample(16, 0.7), restored.sample(16, 0.7)
        for field_a, field_b in zip(a, b, strict=True):
            np.testing.assert_array_equal(field_a, field_b)


def test_frame_memory_round_trip(tmp_path):
    """The deduplicated-frame storage Atari uses: its frame ring and links survive too."""
    memory = make_memory(
        "proportional", capacity=16, obs_shape=(4, 8, 8), obs_dtype=np.uint8, seed=1,
        dedup_frames=True,
    )  # fmt: skip
    frames = np.random.default_rng(1).integers(0, 255, size=(40, 8, 8), dtype=np.uint8)
    for t in range(30):
        memory.add(frames[t : t + 4], t % 3, 1.0, frames[t + 1 : t + 5], t % 9 == 8)
    arrays.save_tree(tmp_path / "m.npz", tmp_path / "m.json", memory.state_dict())
    restored = make_memory(
        "proportional", capacity=16, obs_shape=(4, 8, 8), obs_dtype=np.uint8, seed=5,
        dedup_frames=True,
    )  # fmt: skip
    restored.load_state_dict(arrays.load_tree(tmp_path / "m.npz", tmp_path / "m.json"))
    a, b = memory.sample(8, 1.0), restored.sample(8, 1.0)
    np.testing.assert_array_equal(a.obs, b.obs)
    np.testing.assert_array_equal(a.next_obs, b.next_obs)


def atari_like_memory(transitions: int, capacity: int):
    """A frame memory of 84x84 stacks holding ``transitions`` of ``capacity``, every frame new."""
    memory = make_memory(
        "proportional", capacity=capacity, obs_shape=(4, 84, 84), obs_dtype=np.uint8, seed=1,
        dedup_frames=True,
    )  # fmt: skip
    rng = np.random.default_rng(0)
    pool = rng.integers(0, 256, size=(300, 84, 84), dtype=np.uint8)  # past the dedup window
    for t in range(transitions):
        stack = pool[np.arange(t, t + 5) % len(pool)]
        memory.add(stack[:4], t % 4, 0.0, stack[1:], False)
    return memory


def test_a_memory_s_npz_is_sized_to_its_transitions_not_its_capacity(tmp_path):
    """Issue 45, item 3: 51,112 transitions of a 1M Atari memory wrote 7,267,442,780 bytes, the
    whole capacity. Now 1,000 of 100,000 write their 1,000 slots' pointers and their 1,004
    frames, and read back to the same memory."""
    memory = atari_like_memory(1_000, 100_000)
    arrays.save_tree(tmp_path / "m.npz", tmp_path / "m.json", memory.state_dict(copy=False))
    frames, fields = 1_004 * (84 * 84 + 8 + 8), 1_000 * (2 * 4 * 4 + 8 + 4 + 1 + 1 + 8)
    written = (tmp_path / "m.npz").stat().st_size
    assert frames + fields < written < frames + fields + 8_000  # npz headers: ~300 B an array
    restored = atari_like_memory(0, 100_000)
    restored.load_state_dict(arrays.load_tree(tmp_path / "m.npz", tmp_path / "m.json"))
    a, b = memory.sample(32, 1.0), restored.sample(32, 1.0)
    for field_a, field_b in zip(a, b, strict=True):
        np.testing.assert_array_equal(field_a, field_b)


def test_a_memory_is_written_from_where_it_is_without_a_second_copy(tmp_path):
    """Issue 45, item 3: writing a checkpoint copied the memory's arrays first, so a full 1M
    Atari memory needed another 7.3 GB of RAM at every checkpoint. Written from views, numpy
    streams each array in 16 MiB chunks: the peak of Python's allocations while the 140 MB
    memory is written stays far below its size, where the copies took all of it."""
    import tracemalloc

    memory = atari_like_memory(20_000, 20_000)
    size = arrays.tree_nbytes(memory.state_dict(copy=False))
    assert size > 140e6
    peaks = {}
    for copy in (True, False):
        tracemalloc.start()
        arrays.save_tree(tmp_path / "m.npz", tmp_path / "m.json", memory.state_dict(copy=copy))
        peaks[copy] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peaks[True] > size  # the test can tell a copy
    assert peaks[False] < 40e6, peaks


def test_a_checkpoint_reports_its_progress_written_then_hashed(tmp_path):
    """The progress a display shows while a checkpoint is written: every ~16 MiB of the arrays
    written and of the files hashed, rising to its total (the arrays twice, the weights once)."""
    memory = atari_like_memory(6_000, 8_000)
    weights = {"w": torch.zeros(1000)}
    trees = {"memory": memory.state_dict(copy=False)}
    told: list[tuple[int, int]] = []
    run_ckpt.save_run_checkpoint(
        tmp_path, env_steps=6_000, weights={"agent": weights}, trees=trees, config_yaml="a: 1\n",
        keep_last=1, progress=lambda done, total: told.append((done, total)),
    )  # fmt: skip
    total = 2 * arrays.tree_nbytes(trees) + 4_000
    assert {t for _, t in told} == {total}
    done = [d for d, _ in told]
    assert done == sorted(done) and done[-1] == total
    assert len(told) >= 2 * arrays.tree_nbytes(trees) // (16 << 20)
    assert all(b - a >= 16 << 20 for a, b in itertools.pairwise(done[:-1]))  # the last: the rest


def cartpole_vector(num_envs: int) -> SyncVectorEnv:
    envs = [gym.make("CartPole-v1", disable_env_checker=True) for _ in range(num_envs)]
    return SyncVectorEnv([lambda e=e: e for e in envs], autoreset_mode=AutoresetMode.NEXT_STEP)


def through_files(tree, tmp_path: Path):
    """A tree as a checkpoint stores it: npz + JSON, read back."""
    arrays.save_tree(tmp_path / "t.npz", tmp_path / "t.json", tree)
    return arrays.load_tree(tmp_path / "t.npz", tmp_path / "t.json")


def test_vector_env_state_continues_identically_through_an_autoreset(tmp_path):
    """A copy taken right after an episode ended (the next step only resets that sub-env), stored
    as npz + JSON, steps exactly like the original: physics, RNG, time limit and the autoreset
    flag all restored."""
    envs = cartpole_vector(2)
    envs.reset(seed=3)
    while True:
        _, _, terminated, truncated, _ = envs.step(np.zeros(2, dtype=np.int64))
        if (terminated | truncated).any():
            break
    state = env_state(envs)
    assert state is not None and state["autoreset"].any()
    copy = cartpole_vector(2)
    copy.reset(seed=99)
    load_env_state(copy, through_files(state, tmp_path))
    actions = np.random.default_rng(0).integers(2, size=(300, 2))
    for a in actions:
        for x, y in zip(envs.step(a)[:4], copy.step(a)[:4], strict=True):
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [
        ("CartPole-v1", {"max_episode_steps": 7}),  # truncates mid-test: the counter matters
        ("Acrobot-v1", {}),
        ("MountainCar-v0", {}),  # its state is a tuple after a step
        ("Pendulum-v1", {}),
        ("MountainCarContinuous-v0", {}),
    ],
)
def test_single_env_state_is_restored_in_place(tmp_path, env_id, kwargs):
    """Each classic-control env continues exactly, through a truncation and the reset after it
    (whose draw shows the RNG continues), in the same object that others hold."""
    env = gym.make(env_id, disable_env_checker=True, **kwargs)
    env.reset(seed=1)
    env.action_space.seed(0)
    actions = [env.action_space.sample() for _ in range(12)]
    env.step(actions[0])
    state = through_files(env_state(env), tmp_path)
    other = gym.make(env_id, disable_env_checker=True, **kwargs)
    other.reset(seed=2)
    same_object = other
    load_env_state(other, state)
    assert other is same_object
    for action in actions[1:]:
        got, want = other.step(action), env.step(action)
        for x, y in zip(got[:4], want[:4], strict=True):
            np.testing.assert_array_equal(x, y)
        if want[2] or want[3]:
            np.testing.assert_array_equal(env.reset()[0], other.reset()[0])


def test_an_env_whose_state_is_unknown_has_none():
    """Anything but the named wrappers and classic-control envs cannot be captured exactly."""

    class Handle(gym.Env):
        action_space = gym.spaces.Discrete(2)
        observation_space = gym.spaces.Box(-1.0, 1.0, (1,))

        def __init__(self) -> None:
            self.lock = __import__("threading").Lock()  # stands in for a C++ emulator handle

    assert env_state(Handle()) is None
    wrapped = gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1"))
    assert env_state(wrapped) is None  # its own counters are not known here
    vector = SyncVectorEnv([lambda: Handle()], autoreset_mode=AutoresetMode.NEXT_STEP)
    assert env_state(vector) is None


def test_a_state_of_another_env_is_refused_and_changes_nothing():
    cartpole = gym.make("CartPole-v1", disable_env_checker=True)
    cartpole.reset(seed=1)
    acrobot = gym.make("Acrobot-v1", disable_env_checker=True)
    acrobot.reset(seed=1)
    before = acrobot.unwrapped.state.copy()
    with pytest.raises(ValueError, match="the checkpoint's env is TimeLimit/OrderEnforcing/"
                       "CartPoleEnv, this run's TimeLimit/OrderEnforcing/AcrobotEnv"):  # fmt: skip
        load_env_state(acrobot, env_state(cartpole))
    np.testing.assert_array_equal(acrobot.unwrapped.state, before)
    with pytest.raises(ValueError, match="the checkpoint has 2 sub-envs, this run 3"):
        check_env_state(cartpole_vector(3), env_state(cartpole_vector(2)))
    with pytest.raises(ValueError, match="malformed env state"):
        check_env_state(cartpole, {"kind": "CartPoleEnv"})


def test_nstep_and_health_state_round_trip():
    acc = NStepAccumulator(num_envs=2, n_step=3, gamma=0.5)
    obs = np.arange(4, dtype=np.float32).reshape(2, 2)
    no = np.zeros(2, dtype=np.bool_)
    acc.step(obs, np.array([0, 1]), np.array([1.0, 2.0]), obs + 1, no, no, ~no)
    other = NStepAccumulator(num_envs=2, n_step=3, gamma=0.5)
    other.load_state_dict(acc.state_dict())
    # Both sub-envs truncate on the second step: every open window is emitted, by hand
    # R = r0 + 0.5 r1 for the 2-step window and r1 for the 1-step one.
    out = other.step(obs + 1, np.array([1, 0]), np.array([3.0, 4.0]), obs + 2, no, ~no, ~no)
    expected = [(0, 0, 1 + 0.5 * 3, 2), (0, 1, 3.0, 1), (1, 1, 2 + 0.5 * 4, 2), (1, 0, 4.0, 1)]
    assert len(out) == len(expected)
    for t, (env, action, ret, n) in zip(out, expected, strict=True):
        assert (t.action, t.reward, t.terminated, t.n_steps) == (action, ret, False, n)
        np.testing.assert_array_equal(t.next_obs, obs[env] + 2)
    np.testing.assert_array_equal(out[0].obs, obs[0])  # the window saved before the checkpoint
    with pytest.raises(ValueError, match="3 sub-envs, expected 2"):
        other.load_state_dict({"windows": [[], [], []]})

    health = ReplayHealth(4)
    health.record_add(np.array([0, 1]), 10)
    health.record_sample(np.array([1, 1]), np.array([0.5, 1.0]), 12)
    copy = ReplayHealth(4)
    copy.load_state_dict(health.state_dict(2))
    assert copy.pop_means() == health.pop_means()
    np.testing.assert_array_equal(copy.replay_count, [0, 1, 0, 0])  # a repeat counts once
    with pytest.raises(ValueError, match=r"`added_at` must have shape \[n\] with n <= 1"):
        ReplayHealth(1).load_state_dict(health.state_dict(2))


def test_the_health_panel_saves_its_stored_slots_and_loads_any_state_exactly():
    """Sized like the memory (issue 45, item 3): 3 slots of 1,000 stored (the memory's len, which
    the loop passes) save 3 rows; a state written at full length (before) loads too, and a panel
    that had stored more continues as a fresh one."""
    health = ReplayHealth(1_000)
    health.record_add(np.array([0, 1]), 10)
    health.record_add(2, 11)
    health.record_sample(np.array([1, 1]), np.array([0.5, 1.0]), 12)
    state = health.state_dict(3)
    assert [len(state[k]) for k in ("added_at", "priority_set_at", "replay_count")] == [3] * 3
    full = dict(state, **{k: np.r_[state[k], np.zeros(997, np.int64)] for k in
                          ("added_at", "priority_set_at", "replay_count")})  # fmt: skip
    used = ReplayHealth(1_000)
    used.record_add(np.arange(1_000), 5)
    used.record_sample(np.arange(10), np.ones(10), 6)
    health.record_add(3, 20)
    health.record_sample(np.array([3, 0]), np.array([1.0, 0.25]), 21)
    for target, loaded in (
        (ReplayHealth(1_000), state),
        (used, state),
        (ReplayHealth(1_000), full),
    ):
        target.load_state_dict(loaded)
        target.record_add(3, 20)
        target.record_sample(np.array([3, 0]), np.array([1.0, 0.25]), 21)
        for name in ("added_at", "priority_set_at", "replay_count"):
            np.testing.assert_array_equal(getattr(target, name), getattr(health, name), name)
    assert used.pop_means() == health.pop_means()


def test_checkpoint_names_sort_by_step(tmp_path):
    for step in (5, 1_000_000, 40_000):
        os.mkdir(tmp_path / ckpt.checkpoint_name(step))
    (tmp_path / "notes").mkdir()
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == [
        "step_000000005", "step_000040000", "step_001000000",
    ]  # fmt: skip
    shutil.rmtree(tmp_path / "notes")


def test_a_file_that_fails_while_it_is_hashed_is_one_line_with_the_reason(tmp_path):
    """A read error while a verified file is hashed (a disk that fails mid-read) is a damaged
    checkpoint, named with the OS's reason; an error with no OS reason (a filesystem driver's
    own) is named by its message, on one line."""
    path = tmp_path / "agent.pt"
    path.write_bytes(b"weights")
    with os.fdopen(os.open(path, os.O_WRONLY), "rb", buffering=0) as unreadable:
        with pytest.raises(ckpt.CheckpointError) as caught:
            ckpt._digest(tmp_path, "agent.pt", unreadable)
    assert str(caught.value) == f"{tmp_path}: unreadable agent.pt (Bad file descriptor)"

    class FailingDisk(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:
            raise OSError("the device\n went away")

    with pytest.raises(ckpt.CheckpointError) as caught:
        ckpt._digest(tmp_path, "agent.pt", FailingDisk())
    assert str(caught.value) == f"{tmp_path}: unreadable agent.pt (the device went away)"


@pytest.mark.parametrize("reader", ["_read_manifest_at", "_read_checked"])
def test_a_checkpoint_replaced_under_its_name_mid_read_is_read_again_not_damage(
    tmp_path, monkeypatch, reader
):
    """The writer's rotation replays here at the worst moment: the dir being read is deleted
    after its manifest was read, and a complete new dir of the same step renamed in under its
    name, nothing newer beside it. The missing file is told from damage by the dir's inode (the
    name now holds another dir), so ``read_latest`` lists again and reads the new dir: no
    warning, and not the older checkpoint."""
    ckpt.write_checkpoint(tmp_path, 100, write_bytes({"a": b"old"}), keep_last=3)
    ckpt.write_checkpoint(tmp_path, 200, write_bytes({"a": b"first"}), keep_last=3)
    path = tmp_path / ckpt.checkpoint_name(200)
    replacement = tmp_path / "replacement"
    ckpt.write_checkpoint(replacement, 200, write_bytes({"a": b"second"}), keep_last=1)
    real = getattr(ckpt, reader)
    swapped = []

    def read_while_the_writer_replaces(path_, *args, **kwargs):
        if path_ == path and not swapped:
            swapped.append(path_)
            mtime = os.stat(tmp_path).st_mtime_ns
            shutil.rmtree(path)
            (replacement / ckpt.checkpoint_name(200)).rename(path)
            # as on a filesystem whose clock did not tick meanwhile: the dir's stamp alone
            # does not tell that it changed
            os.utime(tmp_path, ns=(mtime, mtime))
        return real(path_, *args, **kwargs)

    monkeypatch.setattr(ckpt, reader, read_while_the_writer_replaces)
    read = latest.read_latest(tmp_path, ["a"])
    assert swapped and read.path == path and read.warnings == []
    assert read.files["a"] == b"second" and read.candidates == 2


def test_a_checkpoint_renamed_in_while_the_dir_is_listed_is_found_on_a_second_look(
    tmp_path, monkeypatch
):
    """A listing that missed a checkpoint renamed in while it was taken (POSIX lets readdir skip
    it) finds nothing usable; that is trusted only if the dir did not change meanwhile. Here the
    writer renames step 300 in just after the listing, once with the dir's stamp moving and once
    with it standing still (a coarse clock): either change is a reason to look again."""
    real = ckpt.list_checkpoints
    for still in (False, True):
        root = tmp_path / f"still={still}"
        root.mkdir()
        looks = []

        def listing_as_the_writer_renames(directory, root=root, still=still, looks=looks):
            found = real(directory)
            if directory == root and not looks:
                looks.append(found)  # first: the writer lists too
                mtime = os.stat(root).st_mtime_ns
                ckpt.write_checkpoint(root, 300, write_bytes({"a": b"300"}), keep_last=3)
                if still:
                    os.utime(root, ns=(mtime, mtime))
                else:
                    os.utime(root, ns=(mtime + 10**9, mtime + 10**9))
            return found

        monkeypatch.setattr(ckpt, "list_checkpoints", listing_as_the_writer_renames)
        read = latest.read_latest(root, ["a"])
        assert looks[0] == [] and read.path == root / "step_000000300", still
        assert read.files == {"a": b"300"} and read.warnings == []


def test_checkpoints_rotated_away_faster_than_they_can_be_read_give_up_in_one_line(
    tmp_path, monkeypatch
):
    """A writer that deletes each checkpoint as soon as it is listed (a newer one renamed in,
    the listed one rotated out) is given ``MAX_READ_ATTEMPTS`` looks, then one line."""
    real = ckpt.list_checkpoints
    steps = iter(range(100, 10**6, 100))
    ckpt.write_checkpoint(tmp_path, next(steps), write_bytes({"a": b"x"}), keep_last=1)

    writing = []

    def listing_rotated_at_once(directory):
        found = real(directory)
        if directory == tmp_path and not writing:  # not the writer's own listing
            writing.append(True)
            ckpt.write_checkpoint(tmp_path, next(steps), write_bytes({"a": b"x"}), keep_last=1)
            writing.clear()
        return found

    monkeypatch.setattr(ckpt, "list_checkpoints", listing_rotated_at_once)
    monkeypatch.setattr(latest, "MAX_READ_ATTEMPTS", 5)
    with pytest.raises(ckpt.CheckpointError) as caught:
        latest.read_latest(tmp_path, ["a"])
    assert str(caught.value) == (
        f"{tmp_path}: its checkpoints were deleted faster than one could be read (5 attempts)"
    )


def test_a_step_dir_that_is_a_link_is_not_followed_but_a_checkpoint_named_by_the_user_is(
    tmp_path,
):
    """The writer never makes a step dir a link: found by listing, one that is a link (to a
    checkpoint in the same dir, or out of it) is damage, named, and the older one is used. A
    checkpoint dir the user names directly (``eval PATH``) may be a link: it is followed."""
    root = tmp_path / "checkpoints"
    ckpt.write_checkpoint(root, 100, write_bytes({"a": b"100"}), keep_last=3)
    ckpt.write_checkpoint(root, 200, write_bytes({"a": b"200"}), keep_last=3)
    elsewhere = tmp_path / "elsewhere"
    ckpt.write_checkpoint(elsewhere, 400, write_bytes({"a": b"400"}), keep_last=1)
    (root / "step_000000300").symlink_to(root / "step_000000200")
    (root / "step_000000400").symlink_to(elsewhere / "step_000000400")
    read = latest.read_latest(root, ["a"])
    assert read.path == root / "step_000000200" and read.files == {"a": b"200"}
    assert len(read.warnings) == 2 and read.candidates == 4
    out, into = root / "step_000000400", root / "step_000000300"
    assert read.warnings == [
        f"checkpoint {out}: leads outside {root} (to {elsewhere / 'step_000000400'}); refused: "
        "a run dir's paths stay inside it; using the previous one, step_000000200",
        f"checkpoint {into}: cannot open ([Errno 20] Not a directory: '{into}'); using the "
        "previous one, step_000000200",
    ]
    user_link = tmp_path / "mine"
    user_link.symlink_to(elsewhere / "step_000000400")
    manifest, files = ckpt.read_verified(user_link, ["a"])
    assert manifest["env_steps"] == 400 and files == {"a": b"400"}
    with pytest.raises(ckpt.CheckpointError) as caught:
        ckpt.read_verified(user_link, ["b"])
    assert str(caught.value) == f"{user_link}: b is not listed in its manifest.json"


def test_read_manifest_names_a_missing_dir_and_a_file_in_its_place(tmp_path):
    with pytest.raises(ckpt.CheckpointError) as caught:
        ckpt.read_manifest(tmp_path / "step_000000100")
    assert str(caught.value) == f"{tmp_path / 'step_000000100'}: no such checkpoint dir"
    (tmp_path / "step_000000200").write_text("a file")
    with pytest.raises(ckpt.CheckpointError) as caught:
        ckpt.read_manifest(tmp_path / "step_000000200")
    file = tmp_path / "step_000000200"
    assert str(caught.value) == f"{file}: cannot open ([Errno 20] Not a directory: '{file}')"


def test_verify_checkpoint_follows_a_link_the_user_names_and_holds_to_its_lists(tmp_path):
    """``verify_checkpoint``: a checkpoint dir named through a link is followed (``follow``
    False refuses it); ``only`` refuses a manifest listing another file; a file asked for must be
    listed; a changed file fails its SHA-256 check, named."""
    ckpt.write_checkpoint(tmp_path / "c", 100, write_bytes({"a": b"1", "b": b"2"}), keep_last=1)
    real = tmp_path / "c" / "step_000000100"
    link = tmp_path / "mine"
    link.symlink_to(real)
    assert ckpt.verify_checkpoint(link)["env_steps"] == 100
    with pytest.raises(ckpt.CheckpointError) as caught:
        ckpt.verify_checkpoint(link, follow=False)
    assert str(caught.value).startswith(f"{link}: cannot open (")
    with pytest.raises(ckpt.CheckpointError) as caught:
        ckpt.verify_checkpoint(real, only={"a"})
    assert str(caught.value) == (
        f"{real}: its manifest.json lists b, not a training checkpoint's file; refused"
    )
    with pytest.raises(ckpt.CheckpointError) as caught:
        ckpt.verify_checkpoint(real, ["z"])
    assert str(caught.value) == f"{real}: z is not listed in its manifest.json"
    (real / "b").write_bytes(b"3")
    with pytest.raises(ckpt.CheckpointError) as caught:
        ckpt.verify_checkpoint(real, ["b"])
    assert str(caught.value) == f"{real}: b fails its SHA-256 check"
    assert ckpt.verify_checkpoint(real, ["a"])["env_steps"] == 100


def test_find_latest_passes_over_links_and_manifests_listing_other_files(tmp_path):
    """``find_latest`` (a run resuming): a step dir that is a link is not followed, and with
    ``only``, one whose manifest lists another file is passed over, both named; the count of
    checkpoints on disk comes with the one found."""
    ckpt.write_checkpoint(tmp_path, 100, write_bytes({"a": b"1"}), keep_last=5)
    ckpt.write_checkpoint(tmp_path, 200, write_bytes({"a": b"2", "b": b"x"}), keep_last=5)
    (tmp_path / "step_000000300").symlink_to(tmp_path / "step_000000100")
    found = latest.find_latest(tmp_path, only={"a"})
    assert found.path == tmp_path / "step_000000100" and found.candidates == 3
    into = tmp_path / "step_000000300"
    assert found.warnings == [
        f"checkpoint {into}: cannot open ([Errno 20] Not a directory: '{into}'); using the "
        "previous one, step_000000100",
        f"checkpoint {tmp_path / 'step_000000200'}: its manifest.json lists b, not a training "
        "checkpoint's file; refused; using the previous one, step_000000100",
    ]
    assert latest.find_latest(tmp_path).path == tmp_path / "step_000000200"


def test_each_checkpoint_file_is_read_under_its_kind_s_cap():
    """``file_kind``: torch files 4 GiB, the memory's arrays the RAM, their metadata (JSON) 64 MiB,
    anything else (the config) 1 MiB."""
    kinds = readback.KINDS
    assert ckpt.file_kind("agent.pt") is kinds["weights"]
    assert ckpt.file_kind("memory.npz") is kinds["arrays"]
    assert ckpt.file_kind("memory.json") is kinds["tree"]
    assert ckpt.file_kind("config.yaml") is kinds["config"]
    assert kinds["tree"].max_bytes == 64 << 20 and kinds["config"].max_bytes == 1 << 20


def test_a_file_written_in_place_while_it_is_read_is_refused(tmp_path, monkeypatch):
    """A checkpoint file that grows between its open (size checked) and its read: past its
    manifest's size, refused with both sizes; past its kind's cap (the config's 1 MiB), refused
    as unreadable, before more than the cap is read."""
    ckpt.write_checkpoint(tmp_path, 100, write_bytes({"config.yaml": b"a: 1\n"}), keep_last=1)
    path = tmp_path / "step_000000100"
    real = ckpt._open_file
    grow = {"by": 10}

    def open_then_written(path_, name, entry, dir_fd, inode=None):
        file = real(path_, name, entry, dir_fd, inode)
        with open(path_ / name, "ab") as writer:
            writer.write(b"#" * grow["by"])
        return file

    monkeypatch.setattr(ckpt, "_open_file", open_then_written)
    with pytest.raises(ckpt.CheckpointError) as caught:
        ckpt.read_verified(path, ["config.yaml"])
    assert str(caught.value) == f"{path}: config.yaml has 15 bytes, its manifest says 5"
    (path / "config.yaml").write_bytes(b"a: 1\n")
    grow["by"] = 2 << 20
    with pytest.raises(ckpt.CheckpointError) as caught:
        ckpt.read_verified(path, ["config.yaml"])
    assert str(caught.value) == (
        f"{path}: unreadable config.yaml (grew past the 1,048,576 bytes a config.yaml may have)"
    )


def test_a_listed_size_that_is_not_a_number_is_shown_as_listed(tmp_path):
    ckpt.write_checkpoint(tmp_path, 100, write_bytes({"a": b"12345"}), keep_last=1)
    path = tmp_path / "step_000000100"
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["a"]["bytes"] = "5"
    manifest[ckpt.MANIFEST_DIGEST_KEY] = ckpt.manifest_digest(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ckpt.CheckpointError) as caught:
        ckpt.verify_checkpoint(path)
    assert str(caught.value) == f"{path}: a has 5 bytes, its manifest says '5'"


def _resigned(path: Path, **changes) -> None:
    """The checkpoint's manifest with ``changes`` made (None: key removed), re-signed."""
    manifest = json.loads((path / "manifest.json").read_text())
    for key, value in changes.items():
        if value is None:
            manifest.pop(key, None)
        else:
            manifest[key] = value
    manifest.pop(ckpt.MANIFEST_DIGEST_KEY, None)
    manifest[ckpt.MANIFEST_DIGEST_KEY] = ckpt.manifest_digest(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_a_re_signed_manifest_of_the_wrong_shape_is_one_line_naming_what(tmp_path):
    """Each shape a manifest is refused for, re-signed so that its digest passes: not an object,
    another format, ``files`` or ``env_steps`` of the wrong type, a run id that is not a string,
    and one past the manifest's size cap."""
    ckpt.write_checkpoint(tmp_path, 100, write_bytes({"a": b"1"}), keep_last=1)
    path = tmp_path / "step_000000100"
    good = (path / "manifest.json").read_bytes()

    def refusal() -> str:
        with pytest.raises(ckpt.CheckpointError) as caught:
            ckpt.read_manifest(path)
        (path / "manifest.json").write_bytes(good)
        return str(caught.value)

    (path / "manifest.json").write_text("[]")
    assert refusal() == f"{path}: manifest.json is not a checkpoint manifest"
    _resigned(path, format=99)
    said = refusal()
    assert said.startswith(f"{path}: a format-99 checkpoint; this per-dqn reads formats ")
    assert said.endswith(": use the per-dqn release that wrote it")
    version = json.loads(good)["format"]
    for change in ({"files": ["a"]}, {"env_steps": "100"}, {"env_steps": None}):
        _resigned(path, **change)
        assert refusal() == f"{path}: manifest.json is not a format-{version} checkpoint manifest"
    _resigned(path, run_id=5)
    assert refusal() == f"{path}: its manifest.json has a run_id of 5"
    (path / "manifest.json").write_bytes(b" " * (ckpt.MANIFEST_MAX_BYTES + 1))
    assert refusal() == (
        f"{path}: manifest.json is larger than {ckpt.MANIFEST_MAX_BYTES:,} bytes: not a manifest"
    )
    with pytest.raises(ckpt.CheckpointError) as caught:
        ckpt.read_verified(tmp_path / "step_000000200", ["a"])
    assert str(caught.value) == f"{tmp_path / 'step_000000200'}: no such checkpoint dir"


def test_a_stray_at_step_zero_is_named_too(tmp_path):
    """``strays`` with no checkpoint used names every stray, from step 0: the first checkpoint
    a run writes can be step 0."""
    (tmp_path / "step_000000000").write_bytes(b"a file")
    found = latest.find_latest(tmp_path)
    assert found.warnings == [
        f"checkpoint {tmp_path / 'step_000000000'}: not a directory but a file; no earlier "
        "checkpoint is usable"
    ]


def test_a_stray_of_the_used_checkpoint_s_own_step_changes_nothing(tmp_path):
    """A stray is named only when newer than the checkpoint used: ``step_200`` (another spelling
    of step 200) beside ``step_000000200`` changes nothing."""
    ckpt.write_checkpoint(tmp_path, 200, write_bytes({"a": b"1"}), keep_last=1)
    (tmp_path / "step_200").write_bytes(b"a file")
    found = latest.find_latest(tmp_path)
    assert found.path == tmp_path / "step_000000200" and found.warnings == []


def test_the_manifest_digest_is_of_its_canonical_ascii_json(tmp_path):
    """By hand: keys sorted, no spaces, non-ASCII escaped, the digest's own key left out."""
    manifest = {"z": 1, "config_name": "café", "a": [1, 2], ckpt.MANIFEST_DIGEST_KEY: "old"}
    canonical = '{"a":[1,2],"config_name":"caf\\u00e9","z":1}'
    assert ckpt.manifest_digest(manifest) == hashlib.sha256(canonical.encode()).hexdigest()
