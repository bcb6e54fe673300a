"""Checkpoints on disk: atomic writes, checksummed manifests, the last K kept, and verified reads.

A run's checkpoints live in ``RUN_DIR/checkpoints``, one directory each. This module knows no
training run: a checkpoint is a set of named parts, each a ``NAME.pt`` file (tensors) or a
``NAME.npz`` + ``NAME.json`` pair (a tree of arrays, ``arrays``), and the files a manifest lists.
What a training run's parts are, and whose a checkpoint is, is ``per_dqn.training.checkpoints``'s::

    checkpoints/
        step_000050000/
            manifest.json   written last: format, env step, its parts, every file's size and
                            SHA-256, and the SHA-256 of its own canonical content
                            (``manifest_sha256``)
            NAME.pt, NAME.npz, NAME.json, ...   the parts' files
        .tmp-step_000060000-4242/   a write in progress (or one whose process died): never read

Writing (``write_checkpoint``): the files go into a temp dir and are fsynced, the manifest is
written and fsynced last, the temp dir is fsynced and renamed to its final name, and the parent is
fsynced. A directory under a final name therefore holds a complete checkpoint, and a process killed
at any moment leaves every earlier checkpoint as it was. Only then are old checkpoints deleted,
down to the newest ``keep_last``.

Reading (``verify_checkpoint``, ``read_verified``, ``load_parts``): a checkpoint whose manifest is
missing, unreadable or changed (its ``manifest_sha256`` fails, or its ``env_steps`` is not the
step in its dir name), or one of whose files is missing, has another size or fails its SHA-256,
is refused with one line naming it; ``latest`` chooses the newest usable one past such damage.
The checksums guard against damage and edits, not against someone who rewrites the checksums too;
what keeps a hostile checkpoint from running code is that nothing in it is unpickled: tensors are
read with ``torch.load(weights_only=True)`` (``weights``), everything else is JSON, YAML and npz
without pickle.

Paths stay inside: a run's ``checkpoints/`` and each checkpoint dir in it must resolve inside the
run dir (``fileio.inside``; a link to another run's is refused, and the rotation deletes a link,
never what it points to); a manifest may list plain file names only (no ``/``, no ``..``), and a
reader's ``only`` names; each file is opened without following a link and checked to be a
regular file of the listed size before a byte of it is hashed, so a FIFO or a device cannot block
a read. A manifest may carry its run's id (``run_id``, a string).

Formats: 3 is written. 2 kept the envs' state inside the loop's part; it is read, and the loader
moves it (``run.upgrade_parts``). 1 kept the loop in a pickle, ``loop.pt``; it is refused, not
read (``FormatError``), as is any other version, with one line naming it.

One module though past 500 lines: it is the checkpoint's on-disk format, and its writer and its
verifying readers must agree on every name, size and digest in the manifest. Atomic file writes
themselves live in ``fileio``, the tree-of-arrays encoding in ``arrays``, the newest usable
checkpoint's choice in ``latest``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

from per_dqn.config.messages import error_text, one_line
from per_dqn.rundir import dirs as rundir
from per_dqn.rundir import readback
from per_dqn.rundir.arrays import join_tree
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
# The manifest key that names the run a checkpoint belongs to (its run dir's ``run.json``).
RUN_ID_KEY = rundir.RUN_ID_KEY
# What a manifest may call a file: a plain name in the checkpoint dir, never a path.
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}")
# A manifest is a few hundred bytes; anything much larger is not one (and is not read whole).
_MANIFEST_KIND = readback.KINDS["manifest"]
MANIFEST_MAX_BYTES = _MANIFEST_KIND.max_bytes

_NAME = re.compile(r"step_(\d+)")


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


def strays(root: Path, newer_than: Path | None) -> list[str]:
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
        digest, buffer = hashlib.sha256(), bytearray(PROGRESS_CHUNK_BYTES)
        view = memoryview(buffer)
        while n := file.readinto(buffer):
            digest.update(view[:n])
            progress(n)
        return digest.hexdigest()


# The chunk a checkpoint's progress is told of: often enough for a bar to move on a 7 GB write.
PROGRESS_CHUNK_BYTES = 16 << 20


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
        raise Missing(f"{path}: no such checkpoint dir") from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot open ({one_line(exc)})") from None
    try:
        return _read_manifest_at(path, dir_fd)
    finally:
        os.close(dir_fd)


def _read_manifest_at(
    path: Path, dir_fd: int, inode: int | None = None, only: Collection[str] | None = None
) -> dict[str, Any]:
    """The manifest of the checkpoint dir open as ``dir_fd`` (``path`` names it), read back
    through ``readback`` and checked (``_parse_manifest``); with ``only``, one listing a file
    of another name is refused (a training checkpoint's reader:
    ``training.checkpoints.TRAINING_FILES``)."""
    try:
        with readback.open_at(dir_fd, MANIFEST_FILE, _MANIFEST_KIND, path / MANIFEST_FILE) as file:
            data = readback.read_all(file, _MANIFEST_KIND, path / MANIFEST_FILE)
    except readback.ReadBackError as exc:
        if exc.missing:
            raise Missing(f"{path}: no {MANIFEST_FILE}", inode) from None
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
    return exc.strerror or one_line(exc)


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


class Missing(CheckpointError):
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
            raise Missing(f"{path}: {name} is missing", inode) from None
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
        raise Missing(f"{path}: no such checkpoint dir") from None
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot open ({one_line(exc)})") from None


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


def load_parts(
    path: Path,
    only: Collection[str],
    required: Iterable[str],
    load_weights: Callable[[bytes, str], Any],
) -> tuple[dict[str, Any], dict[str, Any], dict[str, bytes]]:
    """Verifies every file of a checkpoint against its manifest and loads each part, each file
    read through the handle that was verified (issue 43, E3: the files were verified through
    handles, then opened again by path, so a writer of the run dir could swap in another run's
    ``agent.pt`` between the two).

    Everything is read through one descriptor on the checkpoint dir, each file opened once
    without following a link. A file is read whole, checked, and parsed from those bytes; a
    part's arrays (``.npz``, as large as what the replay memory holds) are hashed in chunks
    through their handle and then loaded from it, and a file whose size, modification or change
    time moved meanwhile (written in place) is refused, so no second copy of the file is held.

    Args:
        path: the checkpoint dir.
        only: the file names its manifest may list (another is refused).
        required: the files it must hold.
        load_weights: reads a ``NAME.pt`` part from its bytes and its label (``weights``).

    Returns:
        The manifest, each part by name (``NAME.pt`` through ``load_weights``, ``NAME.npz`` +
        ``NAME.json`` as a tree) and the bytes of every file but the ``.npz`` ones.

    Raises:
        CheckpointError: it fails its checks or cannot be read.
    """
    dir_fd = _open_dir(path)
    try:
        manifest = _read_manifest_at(path, dir_fd, only=only)
        files = set(manifest["files"])
        for name in required:
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
                parts[stem] = load_weights(blob, str(path / name))
        for name in sorted(files):
            stem, suffix = os.path.splitext(name)
            if suffix == ".npz" and f"{stem}.json" in files:
                arrays = _load_arrays(path, name, manifest["files"][name], dir_fd)
                parts[stem] = _tree(path, stem, blobs[f"{stem}.json"], arrays)
    finally:
        os.close(dir_fd)
    return manifest, parts, blobs


def _load_arrays(
    path: Path, name: str, entry: Mapping[str, Any], dir_fd: int
) -> dict[str, np.ndarray]:
    """An ``.npz``'s arrays, verified and loaded through one handle (see ``load_parts``)."""
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
            problem = f"{path}: cannot load {name} ({error_text(exc)})"
            raise CheckpointError(problem) from None
        after = os.fstat(file.fileno())
    stamp = ("st_size", "st_mtime_ns", "st_ctime_ns")
    if any(getattr(before, key) != getattr(after, key) for key in stamp):
        raise CheckpointError(f"{path}: {name} changed while it was read; refused")
    return arrays


def _tree(path: Path, stem: str, skeleton: bytes, arrays: dict[str, np.ndarray]) -> Any:
    """A part's tree from its JSON skeleton's bytes and its arrays (``arrays.load_tree``'s
    join)."""
    name = f"{stem}.json"
    try:
        tree = readback.parse_json(skeleton, path / name, readback.KINDS["tree"])
        return join_tree(tree, arrays)
    except (readback.ReadBackError, KeyError, TypeError) as exc:
        problem = f"{path}: cannot load {name} ({error_text(exc)})"
        raise CheckpointError(problem) from None
