"""Run dirs (and sweep dirs): their names, the checks before a command writes into one, and the
writer lock that keeps two processes out of one.

A fresh run gets ``<env>__<config>__<replay>__s<seed>__<time>`` under ``run.runs_root``
(``default_run_name``, ``fresh_run_dir``); ``check_run_dir`` refuses a dir it must not or cannot
write before anything is built, and ``lock_run_dir`` takes the dir's ``flock`` before anything is
written. ``display_name`` is what trackers call a run (its path within a sweep, for a sweep's run).

A run's identity is its run id, written once into ``run.json`` when the run starts
(``ensure_run_id``) and into every checkpoint's manifest, so a checkpoint copied in from another
run is told apart (``training.checkpoints.check_owner``). It has a file of its own: ``config.yaml``
is the experiment (compared on resume, copied by hand as a template, strict about its keys), and
``summary.json`` is written only when a run ends, so a run killed before it would have no id.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from per_dqn.rundir import readback
from per_dqn.rundir.fileio import inside, nearest_existing, write_json


def default_run_name(env_id: str, config_name: str, replay: str, seed: int, now: datetime) -> str:
    """``<env>__<config>__<replay>__s<seed>__<YYYYmmdd-HHMMSS>``; ``/`` in ids becomes ``-``."""
    env = env_id.replace("/", "-")
    return f"{env}__{config_name}__{replay}__s{seed}__{now:%Y%m%d-%H%M%S}"


# The lock file a run dir's writer holds (see ``RunDirLock``); it stays when the lock is released.
LOCK_FILE = ".per-dqn.lock"
# What `per-dqn ablate` writes into a sweep dir (per_dqn.sweeps.runs reads it): a run dir below
# one is a run of that sweep.
SWEEP_FILE = "sweep.json"
# A run's identity (see the module docstring): ``{"run_id": "<32 hex digits>"}``.
RUN_FILE = "run.json"
RUN_ID_KEY = "run_id"
# In ``run.json`` of a run dir that had checkpoints before it got its id: the newest of them.
LEGACY_KEY = "legacy_through"
_RUN_ID = re.compile(r"[0-9a-f]{32}")


class RunDirError(ValueError):
    """A run dir (or sweep dir) this command must not or cannot write into; a one-line message."""


class RunDirInUse(RunDirError):
    """Another live process holds the dir's lock."""


# The longest file name most filesystems take (ext4, xfs, btrfs, tmpfs: NAME_MAX), for where the
# filesystem does not say.
NAME_MAX = 255


def check_name_lengths(path: Path, what: str = "run dir") -> None:
    """Refuses a path with a component longer than its filesystem takes, before anything is
    created: ``mkdir -p`` would make the parents before failing on it, and a ``stat`` of it fails
    with a bare ``OSError``.

    The limit is ``os.pathconf``'s ``PC_NAME_MAX`` for the nearest existing ancestor
    (``NAME_MAX``, 255 bytes, where it cannot be read); names count in bytes, as the filesystem
    counts them (``os.fsencode``).

    Raises:
        RunDirError: naming the component (shortened) and its length in bytes, or a path holding
            a NUL byte (which no system call takes: it would fail later with a bare ValueError).
    """
    if "\0" in str(path):
        raise RunDirError(f"{what} {str(path)!a}: a path holding a NUL byte; choose another")
    limit = NAME_MAX
    with contextlib.suppress(OSError, ValueError):  # ValueError: a platform without PC_NAME_MAX
        limit = os.pathconf(nearest_existing(path), "PC_NAME_MAX")

    def short(part: str) -> str:  # the line stays readable: a long name shown by its ends
        return part if len(part) <= 40 else f"{part[:24]}...{part[-12:]}"

    for part in path.parts:
        try:
            size = len(os.fsencode(part))
        except UnicodeEncodeError as exc:  # a lone surrogate (YAML's "\ud800"): no file's name
            raise RunDirError(
                f"{what} {str(path)!a}: the name {short(part)!r} cannot be a file name "
                f"({exc.reason}); choose another"
            ) from None
        if size > limit:
            shown = Path(*(short(p) for p in path.parts))
            raise RunDirError(
                f"{what} {shown}: the name {short(part)!r} is {size} bytes long, more than the "
                f"filesystem's limit of {limit}; choose a shorter one"
            )


def is_nonempty_dir(path: Path) -> bool:
    """True if ``path`` is a directory with at least one entry besides its lock file."""
    return path.is_dir() and any(p.name != LOCK_FILE for p in path.iterdir())


def check_run_dir(path: Path) -> None:
    """Refuses a path a fresh run must not or cannot write into, before anything is built.

    ``lock_run_dir`` checks again when it takes the lock: this early call only saves the seconds a
    ``Trainer`` takes to build before a refusal.

    Raises:
        RunDirError: ``path`` is not a directory, is another writer's run dir (``RunDirInUse``),
            is not empty, or cannot be created (a file where a parent folder should be, a
            read-only filesystem).
    """
    check_name_lengths(path)
    if path.exists() and not path.is_dir():
        raise RunDirError(f"run dir {path} exists and is not a directory")
    if path.is_dir():
        _refuse_if_locked(path)
    if is_nonempty_dir(path):
        raise RunDirError(f"run dir {path} exists and is not empty; choose another --run-dir")
    check_writable(path, "run dir")


def check_writable(path: Path, what: str) -> None:
    """Refuses a directory that cannot be created or written: its nearest existing ancestor must
    be a directory this process may write, on a filesystem mounted read-write.

    Raises:
        RunDirError: naming ``path`` and the ancestor to blame.
    """
    ancestor = nearest_existing(path)
    if not ancestor.is_dir():
        raise RunDirError(f"{what} {path}: {ancestor} is a file, not a directory")
    # statvfs first: root passes every permission check, but not a read-only mount.
    if os.statvfs(ancestor).f_flag & os.ST_RDONLY:
        raise RunDirError(f"{what} {path}: {ancestor} is on a read-only filesystem")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise RunDirError(f"{what} {path}: {ancestor} is not writable (permission denied)")


def fresh_run_dir(root: Path, name: str) -> Path:
    """``root/name``, or ``root/name-2``, ``-3``... if a run of that name already wrote there.

    Raises:
        RunDirError: a component of the path is too long (``check_name_lengths``).
    """
    path, k = root / name, 1
    check_name_lengths(path)
    while path.exists() and (not path.is_dir() or is_nonempty_dir(path)):
        k += 1
        path = root / f"{name}-{k}"
        check_name_lengths(path)
    return path


class RunDirLock:
    """An exclusive ``flock`` on ``DIR/.per-dqn.lock``, held while one process writes ``DIR``.

    The kernel drops the lock when its process ends, however it ends (SIGKILL, out of memory, a
    power cut), so a crashed run never leaves a stale lock to clear by hand: the next command
    takes it at once. The file stays after ``release``: deleting it could let a third process lock
    a new file of the same name while a second still holds the old one. It stays empty: a refused
    command finds the holder's pid in ``/proc/locks``.

    Use ``lock_run_dir`` to take one.
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        """Releases the lock (closing the file releases it); a second call does nothing."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunDirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_holder(path: Path) -> int | None:
    """The pid holding ``path``'s writer lock, from ``/proc/locks`` (Linux); None when nobody
    holds it or the system does not say. The lock file itself is never written: a refused
    command must change nothing, not even a pid in it."""
    try:
        info = (path / LOCK_FILE).stat()
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    where = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF"; a waiter's line has "->" second
        if fields[1:4] == ["FLOCK", "ADVISORY", "WRITE"] and fields[5] == where:
            return int(fields[4])
    return None


def _in_use(path: Path, what: str = "run dir") -> RunDirInUse:
    pid = lock_holder(path)
    return RunDirInUse(
        f"{what} {path} is in use by another per-dqn process (pid {pid or 'unknown'}); wait for "
        "it to end or stop it"
    )


def _refuse_if_locked(path: Path, what: str = "run dir") -> None:
    """Raises ``RunDirInUse`` if a live process holds ``path``'s lock; creates, changes nothing.

    Raises:
        RunDirError: the lock file is a link that leaves ``path``, or cannot be opened.
    """
    try:
        fd = os.open(_lock_file(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise RunDirError(f"{what} {path}: cannot use its {LOCK_FILE}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _in_use(path, what) from None
    finally:
        os.close(fd)  # also drops the shared lock just taken


def _lock_file(path: Path) -> Path:
    """``path``'s lock file, refused if it is a link that leaves ``path`` (a dangling one would
    otherwise create its target)."""
    return inside(path, LOCK_FILE, RunDirError)


def lock_run_dir(
    path: Path, *, fresh: bool = False, create: bool = True, what: str = "run dir"
) -> RunDirLock | None:
    """Takes ``path``'s writer lock without waiting, before anything is written into it.

    Args:
        path: the run dir (or sweep dir).
        fresh: the caller starts a new run: after taking the lock, ``path`` must still be empty
            (another process may have run there since ``check_run_dir``).
        create: create ``path`` and its lock file if absent. False takes the lock only if the
            lock file exists and returns None otherwise (a refused command must create nothing;
            the caller takes it with ``create=True`` once it is about to write).
        what: how messages call ``path``.

    Raises:
        RunDirInUse: another live process holds the lock (the message names its pid).
        RunDirError: ``path`` cannot be created or its lock file cannot be opened (the message
            names the path and the reason: a file in the way, a read-only filesystem, a full
            disk, a link: the lock is never followed out of ``path``), or, with ``fresh``,
            ``path`` holds another run.
    """
    lock_path = _lock_file(path)
    made = []
    if create:
        check_name_lengths(path, what)
        check_writable(path, what)
        missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        if not create:
            try:
                fd = os.open(lock_path, os.O_RDWR | os.O_NOFOLLOW)
            except FileNotFoundError:
                return None
        else:
            path.mkdir(parents=True, exist_ok=True)
            made = missing
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        for p in made:  # a refused command leaves nothing behind
            with contextlib.suppress(OSError):
                p.rmdir()
        raise RunDirError(f"{what} {path}: cannot use it: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _in_use(path, what) from None
    lock = RunDirLock(path, fd)
    if fresh and is_nonempty_dir(path):
        lock.release()
        raise RunDirError(f"run dir {path} exists and is not empty; choose another --run-dir")
    return lock


def display_name(run_dir: Path) -> str:
    """A run's name for trackers: its dir's name, or, for a run of a sweep (a dir up to four
    levels above holds ``sweep.json``), its path from the sweep dir's parent:
    ``ablate__MinAtar-Breakout-v1__minatar/proportional/alpha=0.4/s0``."""
    return _name_in_sweep(run_dir, with_sweep=True)


def trial_name(run_dir: Path) -> str:
    """A run's name in TensorBoard's HParams table, which shows a few characters of it: its
    path inside its sweep (``rank/alpha=0.7/s0``: the arm and seed, the env where the sweep has
    several), or its dir's name for a run of no sweep. The sweep's own name, the same in every
    row, is left out (issue 45: every trial read ``ablation-cartpol...`` at 1280 px)."""
    return _name_in_sweep(run_dir, with_sweep=False)


def _name_in_sweep(run_dir: Path, with_sweep: bool) -> str:
    """``run_dir``'s path from its sweep dir (``with_sweep``: from the dir above, the sweep's
    name first), or its own name for a run of no sweep."""
    run_dir = Path(os.path.abspath(run_dir))
    sweep = _enclosing_sweep(run_dir)
    if sweep is None:
        return run_dir.name
    return run_dir.relative_to(sweep.parent if with_sweep else sweep).as_posix()


def _enclosing_sweep(run_dir: Path) -> Path | None:
    """The sweep dir a run dir lies in: the nearest of the four dirs above it that holds
    ``sweep.json`` (a sweep's run dirs are ``<env>/<arm>/<settings>/s<seed>`` at most below it);
    None for a run of no sweep."""
    for parent in list(Path(os.path.abspath(run_dir)).parents)[:4]:
        if (parent / SWEEP_FILE).is_file():
            return parent
    return None


# Where a ``sweep.json`` run entry keeps the value of each of the axes every sweep has.
_RUN_FIELDS = {"env.id": "env_id", "replay.kind": "kind", "run.seed": "seed"}


def sweep_axes(run_dir: Path) -> list[str] | None:
    """The config keys a run's sweep varies (``sweep.json``'s ``axes``: env, replay kind, seed,
    arm settings and grid keys) that take more than one value among its runs (a sweep of one
    env does not vary ``env.id``; all of them where none does), for a run of a sweep (as
    ``display_name`` finds it); None for a run of no sweep, or a record whose axes cannot be
    read (it is data: never trusted)."""
    sweep = _enclosing_sweep(run_dir)
    if sweep is None:
        return None
    try:
        record = readback.read_json(sweep, SWEEP_FILE, readback.KINDS["sweep"])
    except readback.ReadBackError:
        return None
    axes = record.get("axes") if isinstance(record, dict) else None
    if not (isinstance(axes, list) and all(isinstance(a, str) for a in axes)):
        return None
    runs = record.get("runs")
    runs = [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []

    def values(axis: str) -> set[str]:
        found = set()
        for run in runs:
            if axis in _RUN_FIELDS:
                found.add(repr(run.get(_RUN_FIELDS[axis])))
            else:  # an arm's setting or a grid key
                within = {**_mapping(run.get("settings")), **_mapping(run.get("point"))}
                found.add(repr(within.get(axis)))
        return found

    varying = [axis for axis in axes if len(values(axis)) > 1]
    return varying or list(axes)


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def read_run_id(run_dir: Path) -> str | None:
    """The run's id from its ``run.json``; None for a run dir written before run ids.

    Raises:
        RunDirError: ``run.json`` leads outside the run dir, is not a regular file, or holds no
            run id (one line naming it).
    """
    return read_run_record(run_dir)[0]


def read_run_record(run_dir: Path) -> tuple[str | None, int | None]:
    """The run's id and, for a run dir that had checkpoints before it got its id (one from
    before run ids, resumed since), the env step up to which its checkpoints carry none
    (``LEGACY_KEY``); ``(None, None)`` for a run dir written before run ids.

    Raises:
        RunDirError: as ``read_run_id``, or a ``LEGACY_KEY`` that is not a step.
    """
    path = inside(run_dir, RUN_FILE, RunDirError)
    try:
        record = readback.read_json(run_dir, RUN_FILE, readback.KINDS["run"])
    except readback.ReadBackError as exc:
        if exc.missing:
            return None, None
        if exc.reason in ("syntax", "deep"):
            record = None
        else:
            raise RunDirError(f"{path}: cannot read it ({exc.problem})") from None
    run_id = record.get(RUN_ID_KEY) if isinstance(record, dict) else None
    if not isinstance(run_id, str) or not _RUN_ID.fullmatch(run_id):
        raise RunDirError(f"{path}: holds no run id ({RUN_ID_KEY!r}: 32 hex digits)")
    legacy = record.get(LEGACY_KEY)
    if legacy is not None and (type(legacy) is not int or legacy < 0):
        raise RunDirError(f"{path}: {LEGACY_KEY} {legacy!r} is not an env step")
    return run_id, legacy


def ensure_run_id(run_dir: Path, legacy_through: int | None = None) -> str:
    """The run's id: the one its ``run.json`` holds, else a new one (``uuid4``), written there
    first. A run dir from before run ids gets one on its first write after this change; its old
    checkpoints carry none, and ``legacy_through`` (the newest of them, given by the caller) is
    recorded beside the id (``LEGACY_KEY``), so that they, and no checkpoint without an id
    written since, stay readable (``training.checkpoints.check_owner``).

    Raises:
        RunDirError: as ``read_run_id``.
        WriteError: ``run.json`` could not be written.
    """
    run_id = read_run_id(run_dir)
    if run_id is None:
        run_id = uuid.uuid4().hex
        record: dict[str, object] = {RUN_ID_KEY: run_id}
        if legacy_through is not None:
            record[LEGACY_KEY] = legacy_through
        write_json(inside(run_dir, RUN_FILE, RunDirError), record)
    return run_id
