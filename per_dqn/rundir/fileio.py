"""Writing a run's files: atomic replacement, and one error for every write that fails.

Every file the project writes goes through here: ``write_bytes_atomic`` (and its text and JSON
forms) replaces a file so that a crash, or a reader at any moment, sees the old or the new one
whole; ``writing`` turns a failure to write a path (an ``OSError``, or torch's errno-less full
disk) into a ``WriteError`` naming it, which the command line prints as one line. Checkpoints
(``checkpoint.py``) build their directories from ``fsync_path`` and the same ``TMP_PREFIX``.

A run dir may come from someone else, so what is read from or written under one is first placed
by ``inside``, the one confinement check: a path that a symbolic link (or ``..``) leads out of the
dir is refused with one line. Reading what a run dir holds is ``readback``'s: the one bounded
reader of every file read back.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

# What a write in progress (or one whose process died) is named with: never read as a result.
TMP_PREFIX = ".tmp-"


class WriteError(OSError):
    """A file of a run could not be written (disk full, quota, read-only, I/O error).

    An ``OSError`` whose ``filename`` is the file or checkpoint that failed and whose ``strerror``
    says why, so the command line prints one line naming it.
    """


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Re-raises a failure to write ``path`` as a ``WriteError`` naming ``path``.

    Torch's serializer reports a full disk as ``RuntimeError("[enforce fail at
    inline_container.cc:...] . unexpected pos ...")`` with no errno; that one is translated too,
    with the free space of the filesystem as the reason.
    """
    try:
        yield
    except WriteError:
        raise
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise WriteError(exc.errno, reason, str(path)) from exc
    except RuntimeError as exc:
        text = str(exc)
        if "inline_container" not in text and "PytorchStreamWriter" not in text:
            raise
        raise _torch_write_error(path) from exc


def _torch_write_error(path: Path) -> WriteError:
    """What torch's errno-less write failure most likely was: ENOSPC when the filesystem has no
    byte left, else an I/O error with the free space in the message."""
    try:
        free = shutil.disk_usage(nearest_existing(path)).free
    except OSError:
        return WriteError(errno.EIO, "torch could not write it", str(path))
    if free == 0:
        return WriteError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    return WriteError(
        errno.EIO, f"torch could not write it ({free:,} bytes free on its filesystem)", str(path)
    )


def nearest_existing(path: Path) -> Path:
    """``path`` itself if it exists, else its nearest ancestor that does."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


# --- confinement ----------------------------------------------------------------------------------


def inside(
    root: Path, relative: str | Path, error: Callable[[str], Exception] = ValueError
) -> Path:
    """``root / relative``, once it is known to stay inside ``root``: the one check that a path
    read from or written under a run dir (or checkpoint or sweep dir) does not leave it.

    ``relative`` and every symbolic link on the way are resolved (``os.path.realpath``; a dangling
    link resolves to where it points), and the result must be ``root``'s own real path or below
    it. ``root`` itself is the caller's and may be a link (a user's ``runs/latest``).

    Raises:
        error: one line naming the path and where it leads (the caller's error type:
            ``RunDirError``, ``CheckpointError``, ...; a ``ValueError`` by default).
    """
    path = Path(root) / relative
    base = os.path.realpath(root)
    target = os.path.realpath(path)
    if os.path.commonpath([base, target]) != base:
        raise error(f"{path}: leads outside {root} (to {target}); refused: a run dir's paths stay "
                    "inside it")  # fmt: skip
    return path


# --- atomic writes --------------------------------------------------------------------------------


def fsync_path(path: Path) -> None:
    """Flushes a file's or a directory's data and metadata to the device."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path, recurse: bool = True) -> None:
    """Every file and dir under ``root`` (``root`` alone where ``recurse`` is False) on the
    device: before a rename makes a tree built in a temp dir the real one."""
    if not recurse:
        fsync_path(root)
        return
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            fsync_path(Path(directory) / name)
        fsync_path(Path(directory))


def write_text_atomic(path: Path, text: str) -> None:
    """Replaces ``path`` with ``text`` so that a crash leaves either the old or the new file."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replaces ``path`` with ``data`` so that a crash, or a reader at any moment, sees either the
    old or the new file whole: a temp file beside it, fsynced, renamed over it, the dir fsynced."""
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}-{os.getpid()}")
    try:
        # A leftover of that name goes first, and the new one is made exclusively: a link planted
        # under the temp name is removed, never written through.
        tmp.unlink(missing_ok=True)
        with open(tmp, "xb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Writes ``data`` as indented JSON, replacing ``path`` atomically and durably (the one atomic
    writer, ``write_bytes_atomic``: temp file, fsync, rename, dir fsync).

    Raises:
        WriteError: it could not be written (``path`` is then as it was).
    """
    with writing(path):
        write_text_atomic(path, json.dumps(data, indent=2) + "\n")
