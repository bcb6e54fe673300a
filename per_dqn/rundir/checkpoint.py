"""Training checkpoints on disk: atomic writes, checksummed manifests, the last K kept, and a
fallback past a damaged checkpoint to the one before it.

A run's checkpoints live in ``RUN_DIR/checkpoints``, one directory each. This module knows no
component: a checkpoint is a set of named parts, each some component's ``state_dict()``, stored
as trees of arrays (``save_run_checkpoint``). A training run's parts::

    checkpoints/
        step_000050000/
            manifest.json   written last: format, env step, its parts, every file's size and
                            SHA-256, and the SHA-256 of its own canonical content
                            (``manifest_sha256``)
            agent.pt        the agent's state_dict: networks, optimiser state, update_steps
            loop.npz        the loop's arrays (LoopState): observations, torch's RNG state, n-step
                            windows, episode accumulators, PER health arrays
            loop.json       the loop's other values: counters, numpy bit-generator states, and
                            where each array of loop.npz sits
            envs.npz/.json  the envs' state (physics, time-limit counters, RNGs), where it can be
                            captured (CartPole yes, ale-py's emulators no)
            memory.npz      the replay memory's arrays, priorities included (uncompressed npz), of
                            the transitions it holds, not its capacity; streamed from the
                            memory's own arrays, never copied first
            memory.json     the memory's other values: cursor, size, RNG state, max priority
            config.yaml     the resolved config this state belongs to
        .tmp-step_000060000-4242/   a write in progress (or one whose process died): never read

Writing (``write_checkpoint``): the files go into a temp dir and are fsynced, the manifest is
written and fsynced last, the temp dir is fsynced and renamed to its final name, and the parent is
fsynced. A directory under a final name therefore holds a complete checkpoint, and a process killed
at any moment leaves every earlier checkpoint as it was. Only then are old checkpoints deleted,
down to the newest ``keep_last``.

Reading (``find_latest``, ``read_latest``): checkpoints are tried newest first. One whose manifest
is missing, unreadable or changed (its ``manifest_sha256`` fails, or its ``env_steps`` is not the
step in its dir name), or one of whose files is missing, has another size or fails its SHA-256,
is skipped with a one-line warning, and the previous one is used; so is an entry under a
checkpoint's name that is not a directory (a file, a dangling link). The checksums guard against
damage and edits, not against someone who rewrites the checksums too; what keeps a hostile
checkpoint from running code is that nothing in it is unpickled: ``agent.pt`` is read with
``torch.load(weights_only=True)``, everything else is JSON, YAML and npz without pickle.

Paths stay inside: a run's ``checkpoints/`` and each checkpoint dir in it must resolve inside the
run dir (``fileio.inside``; a link to another run's is refused, and the rotation deletes a link,
never what it points to); a manifest may list plain file names only (no ``/``, no ``..``), and a
training checkpoint only its known parts' files; each file is opened without following a link
and checked to be a regular file of the listed size before a byte of it is hashed, so a FIFO or a
device cannot block a read.

A checkpoint knows its run: the manifest of one written since run ids carries the run's id
(``run_id``, from the run dir's ``run.json``, see ``rundir``), and ``check_owner`` refuses one
whose id is not its run dir's: a step dir copied in from another run. A checkpoint without one
(formats 2 and 3 written before run ids) is legacy and unchecked.

Formats: 3 is written. 2 kept the envs' state inside the loop's part; it is read, and the loader
moves it (``run.upgrade_parts``). 1 kept the loop in a pickle, ``loop.pt``; it is refused, not
read (``FormatError``), as is any other version, with one line naming it.

One module though past 500 lines: it is the checkpoint's on-disk format, and its writer, its
verifier and its readers (with their fallback and the retry when a newer checkpoint is rotated away
mid-read) must agree on every name, size and digest in the manifest; the tree-of-arrays encoding
is that format's payload. Atomic file writes themselves live in ``fileio``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import re
import shutil
import stat
import zipfile
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from per_dqn.rundir import dirs as rundir
from per_dqn.rundir import readback
from per_dqn.rundir.fileio import TMP_PREFIX, fsync_path, inside

FORMAT_VERSION = 3
# Formats this per-dqn reads: 2 differs only in where the envs' state sits (inside the loop's part),
# which the loader moves (``run.upgrade_parts``).
READABLE_FORMATS = (2, 3)
_READABLE = "formats " + " and ".join(str(v) for v in READABLE_FORMATS)
CHECKPOINTS_DIR = "checkpoints"
MANIFEST_FILE = "manifest.json"
# The manifest key that holds the SHA-256 of the manifest's canonical JSON without this key.
MANIFEST_DIGEST_KEY = "manifest_sha256"
AGENT_FILE = "agent.pt"
LOOP_ARRAYS_FILE = "loop.npz"
LOOP_META_FILE = "loop.json"
ENVS_ARRAYS_FILE = "envs.npz"
ENVS_META_FILE = "envs.json"
MEMORY_ARRAYS_FILE = "memory.npz"
MEMORY_META_FILE = "memory.json"
CONFIG_FILE = "config.yaml"
# The files a training checkpoint may hold (``load_run_checkpoint`` refuses any other name).
TRAINING_FILES = frozenset(
    {AGENT_FILE, LOOP_ARRAYS_FILE, LOOP_META_FILE, ENVS_ARRAYS_FILE, ENVS_META_FILE,
     MEMORY_ARRAYS_FILE, MEMORY_META_FILE, CONFIG_FILE}
)  # fmt: skip
# The manifest key that names the run a checkpoint belongs to (its run dir's ``run.json``).
RUN_ID_KEY = rundir.RUN_ID_KEY
# What a manifest may call a file: a plain name in the checkpoint dir, never a path.
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}")
# A manifest is a few hundred bytes; anything much larger is not one (and is not read whole).
_MANIFEST_KIND = readback.KINDS["manifest"]
MANIFEST_MAX_BYTES = _MANIFEST_KIND.max_bytes

_NAME = re.compile(r"step_(\d+)")
# Marks where an array sat in a JSON tree whose arrays went to the npz.
_ARRAY_KEY = "__array__"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message is one line naming it and the problem."""


class FormatError(CheckpointError):
    """A checkpoint of another format version: not damaged, so not skipped for an older one (all
    of a run's checkpoints share a format), but refused whole."""


def checkpoints_dir(run_dir: Path) -> Path:
    """Where a run's checkpoints live.

    Raises:
        CheckpointError: ``checkpoints`` is a link that leaves the run dir (another run's:
            resuming would write and rotate that run's checkpoints).
    """
    return inside(Path(run_dir), CHECKPOINTS_DIR, CheckpointError)


def checkpoint_name(env_steps: int) -> str:
    """``step_000050000``: zero-padded, so names sort like the steps up to 10^9 env steps."""
    return f"step_{env_steps:09d}"


def list_checkpoints(root: Path) -> list[Path]:
    """The checkpoint dirs under their final names in ``root``, oldest (fewest env steps) first.

    A dir under a final name was complete when it was renamed; whether it is still intact is
    ``verify_checkpoint``'s question.
    """
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        match = _NAME.fullmatch(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


def _strays(root: Path, newer_than: Path | None) -> list[str]:
    """A problem line for each entry of ``root`` under a checkpoint's name that is not a dir (a
    file, a dangling link), newest first: ``list_checkpoints`` leaves it out, so it can never be
    resumed from, and a resume that used an older checkpoint must say why. Only those newer than
    ``newer_than`` (all, when None): an older one changes nothing."""
    if not root.is_dir():
        return []
    least = -1 if newer_than is None else checkpoint_step(newer_than)
    found = []
    for path in root.iterdir():
        match = _NAME.fullmatch(path.name)
        if match and int(match.group(1)) > least and not path.is_dir():
            what = _entry_kind(path)
            if what is not None:
                found.append((int(match.group(1)), f"{path}: not a directory but {what}"))
    return [line for _, line in sorted(found, reverse=True)]


def _entry_kind(path: Path) -> str | None:
    """What a directory entry that is not a directory is, in words, from one ``stat``; None when it
    is gone (a writer beside the reader rotated it away since the listing: no stray, nothing to
    report, where asking ``is_file`` and the rest one after another called it a special file)."""
    try:
        mode = path.stat().st_mode
    except OSError:  # gone, a dangling link or a loop of links
        return "a dangling symlink" if path.is_symlink() else None
    if stat.S_ISDIR(mode):  # made since the listing: a checkpoint, no stray
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISREG(mode):
        return "a file"
    return "a special file"


def sha256_file(path: Path, progress: Callable[[int], None] | None = None) -> str:
    """Hex SHA-256 of a file's bytes; ``progress`` is told of each chunk hashed (its bytes)."""
    with open(path, "rb") as file:
        if progress is None:
            return hashlib.file_digest(file, "sha256").hexdigest()
        digest, buffer = hashlib.sha256(), bytearray(_CHUNK_BYTES)
        view = memoryview(buffer)
        while n := file.readinto(buffer):
            digest.update(view[:n])
            progress(n)
        return digest.hexdigest()


# The chunk a checkpoint's progress is told of: often enough for a bar to move on a 7 GB write.
_CHUNK_BYTES = 16 << 20


class _Meter:
    """Counts a checkpoint's bytes written and hashed, and tells ``report(done, total)`` every
    ``_CHUNK_BYTES`` or so (``total``: the arrays' bytes twice, once written, once hashed; the
    weights' once, hashed)."""

    def __init__(self, total: int, report: Callable[[int, int], None]) -> None:
        self.total, self.done, self._told, self._report = max(total, 1), 0, 0, report

    def add(self, n: int) -> None:
        self.done = min(self.done + n, self.total)
        if self.done - self._told >= _CHUNK_BYTES or self._told < self.done == self.total:
            self._told = self.done
            self._report(self.done, self.total)


class _CountedWrites:
    """A file whose writes are counted (``np.savez`` streams each array through it in chunks)."""

    def __init__(self, file: IO[bytes], count: Callable[[int], None]) -> None:
        self._file, self._count = file, count

    def write(self, data: Any) -> int:
        written = self._file.write(data)
        self._count(memoryview(data).nbytes)
        return written

    def __getattr__(self, name: str) -> Any:  # tell, seek, flush, ... as the file's
        return getattr(self._file, name)


# --- writing --------------------------------------------------------------------------------------


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """The SHA-256 of a manifest's canonical JSON (keys sorted, no spaces, ASCII), its own
    ``manifest_sha256`` left out: a change to any value, one digit of ``env_steps`` included,
    changes it, while re-indenting the file does not."""
    body = {key: value for key, value in manifest.items() if key != MANIFEST_DIGEST_KEY}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def write_checkpoint(
    root: Path,
    env_steps: int,
    write_files: Callable[[Path], None],
    *,
    keep_last: int,
    meta: Mapping[str, Any] | None = None,
    progress: Callable[[int], None] | None = None,
) -> Path:
    """Writes one checkpoint atomically, then deletes all but the newest ``keep_last``.

    Args:
        root: the checkpoints dir (created if absent).
        env_steps: the env step the state belongs to; names the checkpoint.
        write_files: writes the checkpoint's files into the directory it is given (flat, no
            subdirectories); everything it writes is checksummed.
        keep_last: checkpoints to keep, this one included.
        meta: extra JSON values for the manifest.
        progress: told of each chunk of the files hashed (its bytes).

    Returns:
        The checkpoint's final directory.

    Checkpoints of more env steps than this one are deleted too: resuming always starts from the
    newest usable checkpoint, so a later one still on disk is one that failed its checks (and a
    damaged checkpoint must not count among the ``keep_last`` and push out a good one). A damaged
    checkpoint of the same step is replaced.

    Raises:
        ValueError: ``keep_last`` < 1 or ``env_steps`` < 0.
    """
    if keep_last < 1:
        raise ValueError(f"`keep_last` must be >= 1, got {keep_last}")
    if env_steps < 0:
        raise ValueError(f"`env_steps` must be >= 0, got {env_steps}")
    root.mkdir(parents=True, exist_ok=True)
    _remove_temp_dirs(root)
    name = checkpoint_name(env_steps)
    final = root / name
    tmp = root / f"{TMP_PREFIX}{name}-{os.getpid()}"
    tmp.mkdir()
    try:
        write_files(tmp)
        files = {}
        for path in sorted(tmp.iterdir()):
            fsync_path(path)
            files[path.name] = {
                "bytes": path.stat().st_size,
                "sha256": sha256_file(path, progress),
            }
        manifest = {
            "format": FORMAT_VERSION,
            "env_steps": env_steps,
            **(meta or {}),
            "files": files,
        }
        manifest[MANIFEST_DIGEST_KEY] = manifest_digest(manifest)
        with open(tmp / MANIFEST_FILE, "w", encoding="utf-8") as file:
            file.write(json.dumps(manifest, indent=2) + "\n")
            file.flush()
            os.fsync(file.fileno())
        fsync_path(tmp)
        if final.exists():
            # A damaged checkpoint of this step that resuming skipped. Killed between the two
            # renames, neither copy has a final name and the older checkpoints are used.
            stale = root / f"{TMP_PREFIX}replaced-{name}-{os.getpid()}"
            os.rename(final, stale)
            os.rename(tmp, final)
            _delete(stale)
        else:
            os.rename(tmp, final)
        fsync_path(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    existing = list_checkpoints(root)
    kept = [path for path in existing if checkpoint_step(path) <= env_steps][-keep_last:]
    for path in existing:
        if path not in kept:
            _delete(path)
    return final


def _delete(path: Path) -> None:
    """Deletes a checkpoint dir; a link in its place is removed itself, never followed (it may
    lead to another run's checkpoint), and so is a FIFO or other file (``rmtree`` opens its path
    before it checks for a directory: a FIFO held the resume writing over it forever)."""
    if path.is_symlink() or not path.is_dir():
        path.unlink()
    else:
        shutil.rmtree(path)


def checkpoint_step(path: Path) -> int:
    """The env steps in a checkpoint dir's name (``step_000050000``: 50,000)."""
    match = _NAME.fullmatch(path.name)
    assert match is not None  # a name list_checkpoints returned
    return int(match.group(1))


def _remove_temp_dirs(root: Path) -> None:
    """Deletes what killed writers left behind (a run dir has one writer at a time)."""
    for path in root.iterdir():
        if path.name.startswith(TMP_PREFIX):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


# --- reading --------------------------------------------------------------------------------------


def read_manifest(path: Path) -> dict[str, Any]:
    """The checkpoint's manifest, checked for shape, for its own digest and against the dir name,
    but not against the files.

    Raises:
        FormatError: a checkpoint of another format version.
        CheckpointError: no manifest, or one that is unreadable, changed since it was written, or
            names another env step than the dir's name.
    """
    try:
        dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise _Missing(f"{path}: no such checkpoint dir") from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot open ({_one_line(exc)})") from None
    try:
        return _read_manifest_at(path, dir_fd)
    finally:
        os.close(dir_fd)


def _read_manifest_at(
    path: Path, dir_fd: int, inode: int | None = None, only: Collection[str] | None = None
) -> dict[str, Any]:
    """The manifest of the checkpoint dir open as ``dir_fd`` (``path`` names it), read back
    through ``readback`` and checked (``_parse_manifest``); with ``only``, one listing a file
    of another name is refused (a training checkpoint's reader: ``TRAINING_FILES``)."""
    try:
        with readback.open_at(dir_fd, MANIFEST_FILE, _MANIFEST_KIND, path / MANIFEST_FILE) as file:
            data = readback.read_all(file, _MANIFEST_KIND, path / MANIFEST_FILE)
    except readback.ReadBackError as exc:
        if exc.missing:
            raise _Missing(f"{path}: no {MANIFEST_FILE}", inode) from None
        if exc.reason == "too_big":
            raise CheckpointError(
                f"{path}: {MANIFEST_FILE} is larger than {MANIFEST_MAX_BYTES:,} bytes: not a "
                "manifest"
            ) from None
        raise CheckpointError(f"{path}: unreadable {MANIFEST_FILE} ({exc.problem})") from None
    manifest = _parse_manifest(path, data)
    for name in sorted(
        set(manifest["files"]) - set(only if only is not None else manifest["files"])
    ):
        raise CheckpointError(f"{path}: its {MANIFEST_FILE} lists {name}, not a training "
                              "checkpoint's file; refused")  # fmt: skip
    return manifest


def _reason(exc: OSError) -> str:
    return exc.strerror or _one_line(exc)


def _parse_manifest(path: Path, data: bytes) -> dict[str, Any]:
    try:
        # Nesting bounded first: a 1.5 KB `[[[[...` was a RecursionError traceback, not a damaged
        # checkpoint to fall back from (issue 43, E7).
        manifest = readback.parse_json(data, path / MANIFEST_FILE, _MANIFEST_KIND)
    except readback.ReadBackError as exc:
        raise CheckpointError(f"{path}: unreadable {MANIFEST_FILE} ({exc.problem})") from None
    if not isinstance(manifest, dict):
        raise CheckpointError(f"{path}: {MANIFEST_FILE} is not a checkpoint manifest")
    version = manifest.get("format")
    if MANIFEST_DIGEST_KEY not in manifest and version == 1:
        # Format 1 had no digest; its loop state is a pickle that may run code when loaded.
        raise FormatError(
            f"{path}: a format-1 checkpoint (its loop state is a pickle, loop.pt, which this "
            f"per-dqn never loads: it could run code); this per-dqn reads {_READABLE}: "
            "resume it with the per-dqn release that wrote it, or start a new run"
        )
    if manifest.get(MANIFEST_DIGEST_KEY) != manifest_digest(manifest):
        raise CheckpointError(
            f"{path}: {MANIFEST_FILE} fails its own SHA-256 check ({MANIFEST_DIGEST_KEY})"
        )
    if version not in READABLE_FORMATS:
        raise FormatError(
            f"{path}: a format-{version} checkpoint; this per-dqn reads {_READABLE}: "
            "use the per-dqn release that wrote it"
        )
    steps = manifest.get("env_steps")
    if not isinstance(manifest.get("files"), dict) or not isinstance(steps, int):
        raise CheckpointError(
            f"{path}: {MANIFEST_FILE} is not a format-{version} checkpoint manifest"
        )
    for name in manifest["files"]:
        if not _FILE_NAME.fullmatch(name) or name == MANIFEST_FILE:
            # A path ("../x", "/dev/zero") would read, and load, a file outside the checkpoint.
            raise CheckpointError(
                f"{path}: its {MANIFEST_FILE} lists {name!r}, not a plain file name of the "
                "checkpoint dir; refused"
            )
    run_id = manifest.get(RUN_ID_KEY)
    if run_id is not None and not isinstance(run_id, str):
        raise CheckpointError(f"{path}: its {MANIFEST_FILE} has a {RUN_ID_KEY} of {run_id!r}")
    # A manifest copied into another checkpoint's dir passes its own digest: the name tells.
    match = _NAME.fullmatch(path.name)
    if match is not None and int(match.group(1)) != steps:
        raise CheckpointError(
            f"{path}: its {MANIFEST_FILE} says env step {steps:,}, its name step "
            f"{int(match.group(1)):,}"
        )
    return manifest


def _one_line(exc: object) -> str:
    return " ".join(str(exc).split())


class _Missing(CheckpointError):
    """The checkpoint dir, its manifest or one of its files is not there: damage, or a rotation
    that deleted it while it was being read (``read_latest`` tells them apart).

    Attributes:
        inode: the inode of the dir as it was opened, or None if it could not be.
    """

    def __init__(self, message: str, inode: int | None = None) -> None:
        super().__init__(message)
        self.inode = inode


def _entry(path: Path, manifest: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    entry = manifest["files"].get(name)
    if not isinstance(entry, dict):
        raise CheckpointError(f"{path}: {name} is not listed in its {MANIFEST_FILE}")
    return entry


def _check_size(path: Path, name: str, entry: Mapping[str, Any], size: int) -> None:
    listed = entry.get("bytes")
    if size != listed:
        said = f"{listed:,}" if isinstance(listed, int) else repr(listed)
        raise CheckpointError(f"{path}: {name} has {size:,} bytes, its manifest says {said}")


def _check_digest(path: Path, name: str, entry: Mapping[str, Any], digest: str) -> None:
    if digest != entry.get("sha256"):
        raise CheckpointError(f"{path}: {name} fails its SHA-256 check")


def file_kind(name: str) -> readback.Kind:
    """The ``readback`` kind of a checkpoint's file, by its name: its size cap (torch files 4 GiB,
    the memory's arrays the RAM available, their metadata 64 MiB, the config 1 MiB)."""
    if name.endswith(".pt"):
        return readback.KINDS["weights"]
    if name.endswith(".npz"):
        return readback.KINDS["arrays"]
    if name.endswith(".json"):
        return readback.KINDS["tree"]
    return readback.KINDS["config"]


def _open_file(path: Path, name: str, entry: Mapping[str, Any], dir_fd: int,
               inode: int | None = None) -> IO[bytes]:  # fmt: skip
    """The checkpoint's file ``name`` open in its dir ``dir_fd``, once it is known to be a regular
    file (not a link, a FIFO or a device), within its kind's size cap (``file_kind``: a 64 GiB
    sparse file is refused, not read; issue 43, E8) and of the size its manifest lists: all
    checked before any byte is read."""
    try:
        file = readback.open_at(dir_fd, name, file_kind(name), path / name)
    except readback.ReadBackError as exc:
        if exc.missing:
            raise _Missing(f"{path}: {name} is missing", inode) from None
        raise CheckpointError(f"{path}: unreadable {name} ({exc.problem})") from None
    try:
        _check_size(path, name, entry, os.fstat(file.fileno()).st_size)
    except BaseException:
        file.close()
        raise
    return file


def _open_dir(path: Path, follow: bool = True) -> int:
    """A descriptor on the checkpoint dir: every file of it is read through this one handle, so
    a writer that renames it away (or swaps it) meanwhile cannot mix two checkpoints' files.
    ``follow`` False: a step dir found by listing the checkpoints dir, which the writer never
    makes a link, is not followed if it is one now (swapped since ``inside`` checked it)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        return os.open(path, flags)
    except FileNotFoundError:
        raise _Missing(f"{path}: no such checkpoint dir") from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot open ({_one_line(exc)})") from None


def _digest(path: Path, name: str, file: IO[bytes]) -> str:
    """The SHA-256 of an open file's bytes, read in chunks (never whole: issue 43, E8)."""
    try:
        return hashlib.file_digest(file, "sha256").hexdigest()
    except OSError as exc:
        raise CheckpointError(f"{path}: unreadable {name} ({_reason(exc)})") from None


def verify_checkpoint(
    path: Path,
    files: Iterable[str] | None = None,
    follow: bool = True,
    only: Collection[str] | None = None,
) -> dict[str, Any]:
    """Checks a checkpoint's files against its manifest and returns the manifest.

    Args:
        path: the checkpoint dir.
        files: check only these (each must be listed); None checks every listed file.
        follow: False refuses a ``path`` that is a link (``_open_dir``).
        only: the file names its manifest may list (None: any plain name).

    Raises:
        FormatError: a checkpoint of another format version.
        CheckpointError: a missing, unreadable or changed manifest (see ``read_manifest``), or a
            file that is missing, unlisted, of another size than listed (truncated) or whose
            SHA-256 differs (corrupted).
    """
    dir_fd = _open_dir(path, follow)
    try:
        manifest = _read_manifest_at(path, dir_fd, only=only)
        for name in manifest["files"] if files is None else files:
            entry = _entry(path, manifest, name)
            with _open_file(path, name, entry, dir_fd) as file:
                _check_digest(path, name, entry, _digest(path, name, file))
    finally:
        os.close(dir_fd)
    return manifest


def read_verified(
    path: Path, files: Iterable[str], follow: bool = True, only: Collection[str] | None = None
) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Reads a checkpoint's manifest and the named files, each once, and checks them.

    Everything is read through one handle on the directory, so a writer that renames it away
    meanwhile (to replace or delete it) cannot mix two checkpoints' files; what is checked is
    exactly what is returned, so nothing can change between the check and the use.

    Returns:
        The manifest and each named file's bytes.

    Raises:
        FormatError: a checkpoint of another format version.
        CheckpointError: as ``verify_checkpoint``.
    """
    dir_fd = _open_dir(path, follow)
    try:
        inode = os.fstat(dir_fd).st_ino
        manifest = _read_manifest_at(path, dir_fd, inode, only)
        data = {
            name: _read_checked(path, name, _entry(path, manifest, name), dir_fd, inode)
            for name in files
        }
    finally:
        os.close(dir_fd)
    return manifest, data


def _read_checked(
    path: Path, name: str, entry: Mapping[str, Any], dir_fd: int, inode: int | None = None
) -> bytes:
    """The file's bytes, read once through ``dir_fd`` and checked against its manifest entry:
    what is checked is what is returned."""
    with _open_file(path, name, entry, dir_fd, inode) as file:
        try:
            blob = readback.read_all(file, file_kind(name), path / name)
        except readback.ReadBackError as exc:
            raise CheckpointError(f"{path}: unreadable {name} ({exc.problem})") from None
    _check_size(path, name, entry, len(blob))  # it changed since it was opened
    _check_digest(path, name, entry, hashlib.sha256(blob).hexdigest())
    return blob


@dataclass(frozen=True)
class Found:
    """The outcome of ``find_latest``.

    Attributes:
        path: the newest checkpoint that passed its checks, or None.
        manifest: its manifest (empty when ``path`` is None).
        warnings: one line per newer checkpoint that failed, naming it, the problem and what is
            used instead.
        candidates: how many checkpoints were on disk.
    """

    path: Path | None
    manifest: dict[str, Any]
    warnings: list[str]
    candidates: int


def _warnings(problems: Iterable[str], used: Path | None) -> list[str]:
    if used is None:
        return [f"checkpoint {problem}; no earlier checkpoint is usable" for problem in problems]
    return [f"checkpoint {problem}; using the previous one, {used.name}" for problem in problems]


def find_latest(
    root: Path, files: Iterable[str] | None = None, only: Collection[str] | None = None
) -> Found:
    """The newest checkpoint in ``root`` that passes ``verify_checkpoint(path, files)``.

    For a run dir with one writer, the run itself (resuming). A reader beside a live writer uses
    ``read_latest``.

    Raises:
        FormatError: the newest checkpoint that is not damaged is of another format version.
    """
    files = None if files is None else tuple(files)
    problems: list[str] = []
    candidates = list_checkpoints(root)
    for path in reversed(candidates):
        try:
            manifest = verify_checkpoint(
                inside(root, path.name, CheckpointError), files, False, only
            )
        except FormatError:
            raise
        except CheckpointError as exc:
            problems.append(str(exc))
            continue
        problems = [*_strays(root, path), *problems]
        return Found(path, manifest, _warnings(problems, path), len(candidates))
    return Found(None, {}, _warnings([*_strays(root, None), *problems], None), len(candidates))


@dataclass(frozen=True)
class Read:
    """The outcome of ``read_latest``.

    Attributes:
        path: the newest checkpoint that passed its checks, or None.
        manifest: its manifest (empty when ``path`` is None).
        files: the requested files' bytes, as checked.
        warnings: as ``Found.warnings``; a checkpoint deleted by the writer's rotation while it
            was read is no warning, only a reason to look again.
        candidates: how many checkpoints were on disk at the last look.
    """

    path: Path | None
    manifest: dict[str, Any]
    files: dict[str, bytes]
    warnings: list[str]
    candidates: int


# A reader that keeps losing the race against a writer's rotation gives up after this many looks.
MAX_READ_ATTEMPTS = 100


def read_latest(root: Path, files: Iterable[str], only: Collection[str] | None = None) -> Read:
    """The newest checkpoint in ``root`` whose manifest and ``files`` pass their checks, with
    those files read once each (``read_verified``): safe beside a run that is still writing and
    rotating its checkpoints.

    A checkpoint can be deleted by the rotation between being listed and being read. A file found
    missing therefore means damage only if the checkpoint is still there, as the same dir, and no
    newer usable one has appeared (the rotation deletes only after renaming a newer one in);
    otherwise the checkpoints are listed again and the newest is tried.

    Raises:
        FormatError: the newest checkpoint that is not damaged is of another format version.
        CheckpointError: the checkpoints kept being deleted before one could be read
            (``MAX_READ_ATTEMPTS`` looks).
    """
    files = tuple(files)
    rejected: dict[Path, str] = {}
    for _ in range(MAX_READ_ATTEMPTS):
        stamp = _dir_stamp(root)
        candidates = list_checkpoints(root)
        look_again = False
        for path in reversed(candidates):
            if path in rejected:
                continue
            try:
                manifest, data = read_verified(
                    inside(root, path.name, CheckpointError), files, follow=False, only=only
                )
            except FormatError:
                raise
            except _Missing as exc:
                if _rotated_away(root, path, exc.inode, rejected):
                    look_again = True
                    break
                rejected[path] = str(exc)
                continue
            except CheckpointError as exc:
                rejected[path] = str(exc)
                continue
            problems = [*_strays(root, path), *rejected.values()]
            return Read(path, manifest, data, _warnings(problems, path), len(candidates))
        # readdir may skip an entry renamed while it runs (POSIX allows it), so a rotation can
        # hide every checkpoint from one listing: "nothing usable" is trusted only from a
        # listing that the writer did not change while it was taken.
        if not look_again and (_dir_stamp(root) != stamp or list_checkpoints(root) != candidates):
            look_again = True
        if not look_again:
            problems = [*_strays(root, None), *rejected.values()]
            return Read(None, {}, {}, _warnings(problems, None), len(candidates))
    raise CheckpointError(
        f"{root}: its checkpoints were deleted faster than one could be read "
        f"({MAX_READ_ATTEMPTS} attempts)"
    )


def _dir_stamp(root: Path) -> tuple[int, int] | None:
    """The dir's inode and modification time: any entry renamed in or out changes it.

    Raises:
        CheckpointError: ``root`` is there but cannot be looked at (a link that loops, a dir
            without search permission): no checkpoint in it can be read.
    """
    try:
        st = os.stat(root)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CheckpointError(f"{root}: cannot be read ({exc.strerror})") from None
    return st.st_ino, st.st_mtime_ns


def _rotated_away(root: Path, path: Path, inode: int | None, rejected: Mapping[Path, str]) -> bool:
    """Whether ``path`` went missing because the writer replaced or deleted it."""
    try:
        now = os.stat(path).st_ino
    except FileNotFoundError:
        return True
    if inode is not None and now != inode:
        return True  # renamed away and replaced by a new dir of the same step
    step = checkpoint_step(path)
    return any(
        checkpoint_step(other) > step and other not in rejected for other in list_checkpoints(root)
    )


# --- array trees: the replay memory and the loop ------------------------------------------------


def tree_nbytes(tree: Any) -> int:
    """The bytes of a tree's arrays (numpy's or torch's): what a checkpoint writes of it,
    headers aside."""
    if isinstance(tree, Mapping):
        return sum(tree_nbytes(value) for value in tree.values())
    if isinstance(tree, list | tuple):
        return sum(tree_nbytes(value) for value in tree)
    nbytes = getattr(tree, "nbytes", 0)
    return nbytes if isinstance(nbytes, int) else 0


def save_tree(
    npz_path: Path, json_path: Path, tree: Any, progress: Callable[[int], None] | None = None
) -> None:
    """Writes a nested dict whose leaves are arrays or JSON values: arrays to an uncompressed
    ``.npz``, everything else to a JSON file that marks where each array was.

    The arrays are streamed from where they are (numpy writes each in chunks of 16 MiB), so
    views of a memory's arrays are written without a copy of it; ``progress`` is told of each
    chunk written (its bytes).

    JSON keeps Python ints of any size (a PCG64 state is 128 bits) and floats exactly. Reading
    either file runs no code: JSON, and ``np.load(allow_pickle=False)``.

    Raises:
        TypeError: a leaf of another type, an object array, or a key that is not a string.
    """
    arrays: dict[str, np.ndarray] = {}
    skeleton = _split(tree, "", arrays)
    with open(npz_path, "wb") as file:
        np.savez(file if progress is None else _CountedWrites(file, progress), **arrays)
    json_path.write_text(json.dumps(skeleton, indent=1) + "\n", encoding="utf-8")


def load_tree(npz_path: Path, json_path: Path) -> Any:
    """Reads what ``save_tree`` wrote; an npz that holds pickled objects is refused
    (``ValueError``), never unpickled."""
    skeleton = readback.read_bytes(json_path.parent, json_path.name, readback.KINDS["tree"])
    with np.load(npz_path, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    return _join(readback.parse_json(skeleton, json_path, readback.KINDS["tree"]), arrays)


def _split(node: Any, path: str, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(node, Mapping):
        out = {}
        for key, value in node.items():
            if not isinstance(key, str) or key == _ARRAY_KEY:
                raise TypeError(f"tree keys must be strings other than {_ARRAY_KEY!r}, got {key!r}")
            out[key] = _split(value, f"{path}.{key}" if path else key, arrays)
        return out
    if isinstance(node, np.ndarray):
        if node.dtype.hasobject:
            raise TypeError(f"cannot store an object array at {path!r} in a checkpoint tree")
        if path in arrays:
            raise TypeError(f"two arrays of a checkpoint tree are both at {path!r}")
        arrays[path] = node
        return {_ARRAY_KEY: path}
    if isinstance(node, np.generic):
        return node.item()
    if isinstance(node, list | tuple):
        return [_split(value, f"{path}.{i}", arrays) for i, value in enumerate(node)]
    if node is None or isinstance(node, bool | int | float | str):
        return node
    raise TypeError(f"cannot store {type(node).__name__} at {path!r} in a checkpoint tree")


def _join(node: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(node, dict):
        if set(node) == {_ARRAY_KEY}:
            return arrays[node[_ARRAY_KEY]]
        return {key: _join(value, arrays) for key, value in node.items()}
    if isinstance(node, list):
        return [_join(value, arrays) for value in node]
    return node


# --- torch files ---------------------------------------------------------------------------------


def load_weights(data: bytes, label: str, device: Any = "cpu") -> Any:
    """Reads a ``torch.save`` file's tensors and plain containers, running no code.

    ``torch.load(weights_only=True)`` refuses any other object a pickle names. It does not check
    the CRC-32 its zip container keeps for every member, so a flipped byte would load silently as
    other weights: that check is made here first (``model.pt`` has no manifest to catch it).

    Args:
        data: the file's bytes.
        label: how to name the file in errors (its path).
        device: where the tensors go.

    Raises:
        CheckpointError: one line naming ``label``: a truncated or corrupt file, or one whose
            pickle names anything but tensors and containers (it could run code).
    """
    import torch

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        raise CheckpointError(
            f"{label}: truncated or corrupt, not a whole torch file ({_one_line(exc)})"
        ) from None
    if bad is not None:
        raise CheckpointError(f"{label}: corrupt: its member {bad} fails its CRC-32 check")
    try:
        return torch.load(io.BytesIO(data), map_location=device, weights_only=True)
    except pickle.UnpicklingError as exc:
        reason = unpickling_reason(str(exc))
        raise CheckpointError(
            f"{label}: refused: it holds more than tensors ({reason}), and loading it could run "
            "code"
        ) from None
    except Exception as exc:  # torch's reader raises RuntimeError, KeyError, ... by damage
        reason = _one_line(exc)[:200]
        raise CheckpointError(f"{label}: cannot load ({type(exc).__name__}: {reason})") from None


# What torch's weights-only refusal says around its reason: advice on `weights_only`, not why.
_TORCH_ADVICE = ("weights only load failed", "in pytorch", "re-running", "(1)", "(2)", "check the "
                 "documentation", "alternatively")  # fmt: skip


def unpickling_reason(message: str) -> str:
    """Why ``torch.load(weights_only=True)`` refused a file, from its message: the sentence that
    names what the pickle asked for ("Trying to load unsupported GLOBAL posix.system whose module
    posix is blocked", "Unsupported global: GLOBAL io.open was not an allowed global by
    default"), not torch's advice around it, whose wording changes between releases.

    The reason is looked for, in order, after ``WeightsUnpickler error:``, in a line naming a
    ``GLOBAL``, then in the first line that is not advice; the first sentence of it is kept.
    """
    lines = [" ".join(line.split()) for line in message.splitlines()]
    lines = [line for line in lines if line]
    picks = [line.split("WeightsUnpickler error:", 1)[1] for line in lines
             if "WeightsUnpickler error:" in line]  # fmt: skip
    picks += [line for line in lines if "GLOBAL" in line]
    picks += [line for line in lines if not line.lower().startswith(_TORCH_ADVICE)]
    text = (picks or lines or [message])[0].strip()
    sentence = re.split(r"(?<=[^.\s])\.(?:\s|$)", text, maxsplit=1)[0]
    return _one_line(sentence)[:200]


# --- a training run's checkpoint ------------------------------------------------------------------


def save_run_checkpoint(
    root: Path,
    *,
    env_steps: int,
    weights: Mapping[str, Any],
    trees: Mapping[str, Any],
    config_yaml: str,
    keep_last: int,
    meta: Mapping[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Writes a training checkpoint (see the module docstring for its files).

    This module knows no component: the caller hands it named parts, each some component's
    ``state_dict()``, and each becomes files named after it.

    Args:
        root: the run's checkpoints dir.
        env_steps: the loop's env step.
        weights: parts holding torch tensors (the agent), each written to ``NAME.pt`` with
            ``torch.save`` and read back with ``torch.load(weights_only=True)``.
        trees: parts that are trees of arrays and JSON values (the loop, the envs, the replay
            memory), each written to ``NAME.npz`` + ``NAME.json`` (see ``save_tree``).
        config_yaml: the resolved config.
        keep_last: checkpoints to keep.
        meta: extra manifest values.
        progress: told ``(done, total)`` bytes as the trees' arrays are written and the files
            hashed (``total``: the trees' ``tree_nbytes`` twice, the weights' once), every
            16 MiB or so.
    """
    import torch

    total = 2 * tree_nbytes(trees) + tree_nbytes(weights)
    count = None if progress is None else _Meter(total, progress).add

    def write(directory: Path) -> None:
        for name, state in weights.items():
            torch.save(state, directory / f"{name}.pt")
        for name, tree in trees.items():
            save_tree(directory / f"{name}.npz", directory / f"{name}.json", tree, count)
        (directory / CONFIG_FILE).write_text(config_yaml, encoding="utf-8")

    meta = {"parts": sorted([*weights, *trees]), **(meta or {})}
    return write_checkpoint(root, env_steps, write, keep_last=keep_last, meta=meta, progress=count)


@dataclass(frozen=True)
class RunCheckpoint:
    """A training checkpoint, verified and loaded.

    Attributes:
        path: its directory.
        manifest: its manifest (``format``, ``env_steps``, ``final``, ``config_name``, ...).
        parts: each part's tree by name (``agent``, ``loop``, ``envs``, ``memory``), tensors on
            the requested device; a part the checkpoint leaves out (``memory`` under
            ``checkpoint.replay: false``) is absent.
        config_yaml: the config the state belongs to.
    """

    path: Path
    manifest: dict[str, Any]
    parts: dict[str, Any]
    config_yaml: str

    @property
    def env_steps(self) -> int:
        """The env step the state belongs to."""
        return int(self.manifest["env_steps"])

    @property
    def format(self) -> int:
        """The format version it was written in."""
        return int(self.manifest["format"])


def load_run_checkpoint(path: Path, device: Any = "cpu") -> RunCheckpoint:
    """Verifies every file of a training checkpoint against its manifest and loads each part,
    each file read through the handle that was verified (issue 43, E3: the files were verified
    through handles, then opened again by path, so a writer of the run dir could swap in another
    run's ``agent.pt`` between the two).

    Everything is read through one descriptor on the checkpoint dir, each file opened once
    without following a link. A file is read whole, checked, and parsed from those bytes; the
    replay memory's arrays (``.npz``, as large as what the memory holds) are hashed in chunks
    through their handle and then loaded from it, and a file whose size, modification or change
    time moved meanwhile (written in place) is refused, so no second copy of the file is held.

    A part is a ``NAME.pt`` file (tensors) or a ``NAME.npz`` + ``NAME.json`` pair.

    Raises:
        CheckpointError: it fails its checks or cannot be read.
    """
    dir_fd = _open_dir(path)
    try:
        manifest = _read_manifest_at(path, dir_fd, only=TRAINING_FILES)
        files = set(manifest["files"])
        for name in (AGENT_FILE, LOOP_ARRAYS_FILE, LOOP_META_FILE, CONFIG_FILE):
            if name not in files:
                raise CheckpointError(f"{path}: no {name} (not a training checkpoint)")
        blobs = {
            name: _read_checked(path, name, manifest["files"][name], dir_fd)
            for name in sorted(files)
            if not name.endswith(".npz")
        }
        # Nothing here unpickles: a run dir may come from someone else.
        parts: dict[str, Any] = {}
        for name, blob in blobs.items():
            stem, suffix = os.path.splitext(name)
            if suffix == ".pt":
                parts[stem] = load_weights(blob, str(path / name), device)
        for name in sorted(files):
            stem, suffix = os.path.splitext(name)
            if suffix == ".npz" and f"{stem}.json" in files:
                arrays = _load_arrays(path, name, manifest["files"][name], dir_fd)
                parts[stem] = _tree(path, stem, blobs[f"{stem}.json"], arrays)
        try:
            config_yaml = blobs[CONFIG_FILE].decode("utf-8")
        except UnicodeDecodeError as exc:
            problem = f"{path}: cannot load {CONFIG_FILE} (not UTF-8: {exc.reason})"
            raise CheckpointError(problem) from None
    finally:
        os.close(dir_fd)
    return RunCheckpoint(path, manifest, parts, config_yaml)


def _load_arrays(
    path: Path, name: str, entry: Mapping[str, Any], dir_fd: int
) -> dict[str, np.ndarray]:
    """An ``.npz``'s arrays, verified and loaded through one handle (see
    ``load_run_checkpoint``)."""
    with _open_file(path, name, entry, dir_fd) as file:
        before = os.fstat(file.fileno())
        _check_digest(path, name, entry, _digest(path, name, file))
        try:
            file.seek(0)
            with np.load(file, allow_pickle=False) as data:
                # What the members unpack to, before any is: a re-signed file may hold a
                # compressed member that unpacks past the RAM (the writer stores them plain).
                unpacked = sum(info.file_size for info in data.zip.infolist())
                cap = readback.limit(readback.KINDS["arrays"])
                if unpacked > cap:
                    raise CheckpointError(
                        f"{path}: {name} unpacks to {unpacked:,} bytes, over the {cap:,} of RAM "
                        "available; refused"
                    )
                arrays = {key: data[key] for key in data.files}
        except CheckpointError:
            raise
        except Exception as exc:  # unzipping raises many kinds; the checksum passed
            reason = _one_line(exc)[:300]
            problem = f"{path}: cannot load {name} ({type(exc).__name__}: {reason})"
            raise CheckpointError(problem) from None
        after = os.fstat(file.fileno())
    stamp = ("st_size", "st_mtime_ns", "st_ctime_ns")
    if any(getattr(before, key) != getattr(after, key) for key in stamp):
        raise CheckpointError(f"{path}: {name} changed while it was read; refused")
    return arrays


def _tree(path: Path, stem: str, skeleton: bytes, arrays: dict[str, np.ndarray]) -> Any:
    """A part's tree from its JSON skeleton's bytes and its arrays (``load_tree``'s join)."""
    name = f"{stem}.json"
    try:
        tree = readback.parse_json(skeleton, path / name, readback.KINDS["tree"])
        return _join(tree, arrays)
    except (readback.ReadBackError, KeyError, TypeError) as exc:
        reason = _one_line(exc)[:300]
        problem = f"{path}: cannot load {name} ({type(exc).__name__}: {reason})"
        raise CheckpointError(problem) from None


def run_dir_of(path: Path) -> Path | None:
    """The run dir a checkpoint dir sits in (``RUN_DIR/checkpoints/step_*``), or None for one
    that sits elsewhere."""
    path = Path(path)
    return path.parent.parent if path.parent.name == CHECKPOINTS_DIR else None


def check_owner(path: Path, manifest: Mapping[str, Any], run_dir: Path | None) -> None:
    """Refuses a checkpoint of another run than ``run_dir``'s (a step dir copied in from run B
    into run A): its manifest's run id must be the one ``run_dir``'s ``run.json`` holds.

    A checkpoint without a run id is legacy (written before run ids) and is read unchecked only
    where that is what it can be: in a run dir without ``run.json`` (one from before run ids),
    or in one whose ``run.json`` records its id-less checkpoints (``rundir.LEGACY_KEY``: the run
    dir got its id when it was resumed) at this step or below. Elsewhere, in a run dir that has
    an id, it is refused (issue 43: a checkpoint stripped of its run id and re-signed was read
    unchecked). A checkpoint outside any run dir (``run_dir`` None: a checkpoint dir evaluated
    on its own) is not checked.

    Raises:
        CheckpointError: the ids differ, the checkpoint has one and ``run_dir`` none, it has none
            and ``run_dir`` one that does not record it as legacy, or ``run_dir``'s ``run.json``
            cannot be read; one line naming both.
    """
    if run_dir is None:
        return
    try:
        ours, legacy = rundir.read_run_record(run_dir)
    except rundir.RunDirError as exc:
        raise CheckpointError(str(exc)) from None
    theirs = manifest.get(RUN_ID_KEY)
    if theirs is None:
        step = manifest.get("env_steps")
        if ours is not None and (legacy is None or not isinstance(step, int) or step > legacy):
            raise CheckpointError(
                f"{path}: a checkpoint without a run id, but its run dir {run_dir} is run {ours}, "
                "whose checkpoints carry it; refused: a checkpoint stripped of its run id is not "
                "this run's"
            )
        return
    if theirs != ours:
        mine = f"is run {ours}" if ours is not None else f"records none (no {rundir.RUN_FILE})"
        raise CheckpointError(
            f"{path}: a checkpoint of run {theirs}, but its run dir {run_dir} {mine}; refused: "
            "a checkpoint copied from another run is not this run's"
        )
