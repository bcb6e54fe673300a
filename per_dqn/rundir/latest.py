"""The newest usable checkpoint of a run: tried newest first, one whose manifest or files fail
their checks skipped with a one-line warning for the one before it (``find_latest``), and, beside
a run still writing and rotating its checkpoints, read once and verified with a retry when the
rotation deletes the one being read (``read_latest``).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from per_dqn.rundir import checkpoint as ckpt
from per_dqn.rundir.fileio import inside


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
    candidates = ckpt.list_checkpoints(root)
    for path in reversed(candidates):
        try:
            manifest = ckpt.verify_checkpoint(
                inside(root, path.name, ckpt.CheckpointError), files, False, only
            )
        except ckpt.FormatError:
            raise
        except ckpt.CheckpointError as exc:
            problems.append(str(exc))
            continue
        problems = [*ckpt.strays(root, path), *problems]
        return Found(path, manifest, _warnings(problems, path), len(candidates))
    return Found(None, {}, _warnings([*ckpt.strays(root, None), *problems], None), len(candidates))


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
        candidates = ckpt.list_checkpoints(root)
        look_again = False
        for path in reversed(candidates):
            if path in rejected:
                continue
            try:
                manifest, data = ckpt.read_verified(
                    inside(root, path.name, ckpt.CheckpointError), files, follow=False, only=only
                )
            except ckpt.FormatError:
                raise
            except ckpt.Missing as exc:
                if _rotated_away(root, path, exc.inode, rejected):
                    look_again = True
                    break
                rejected[path] = str(exc)
                continue
            except ckpt.CheckpointError as exc:
                rejected[path] = str(exc)
                continue
            problems = [*ckpt.strays(root, path), *rejected.values()]
            return Read(path, manifest, data, _warnings(problems, path), len(candidates))
        # readdir may skip an entry renamed while it runs (POSIX allows it), so a rotation can
        # hide every checkpoint from one listing: "nothing usable" is trusted only from a
        # listing that the writer did not change while it was taken.
        if not look_again and (
            _dir_stamp(root) != stamp or ckpt.list_checkpoints(root) != candidates
        ):
            look_again = True
        if not look_again:
            problems = [*ckpt.strays(root, None), *rejected.values()]
            return Read(None, {}, {}, _warnings(problems, None), len(candidates))
    raise ckpt.CheckpointError(
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
        raise ckpt.CheckpointError(f"{root}: cannot be read ({exc.strerror})") from None
    return st.st_ino, st.st_mtime_ns


def _rotated_away(root: Path, path: Path, inode: int | None, rejected: Mapping[Path, str]) -> bool:
    """Whether ``path`` went missing because the writer replaced or deleted it."""
    try:
        now = os.stat(path).st_ino
    except FileNotFoundError:
        return True
    if inode is not None and now != inode:
        return True  # renamed away and replaced by a new dir of the same step
    step = ckpt.checkpoint_step(path)
    return any(
        ckpt.checkpoint_step(other) > step and other not in rejected
        for other in ckpt.list_checkpoints(root)
    )
