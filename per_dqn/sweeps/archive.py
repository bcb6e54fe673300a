"""A sweep's results in one small file, and a sweep dir rebuilt from it.

``per-dqn archive DIR FILE`` keeps what a report reads of each finished run: its ``config.yaml``,
``summary.json`` and ``run.json``, and the scalar points of the tags the report measures
(``ARCHIVED_TAGS``: the evaluation curve, the batches' mean IS weight, every training episode's
return) as ``scalars.csv``; with the sweep's ``sweep.json``. No weights, checkpoints or other
tags. The file is a ``.tar.xz``, written atomically; the same runs give the same bytes.

``per-dqn unarchive FILE DIR`` rebuilds the sweep dir: each run dir gets its files back and an
event file holding those points, so ``per-dqn report DIR`` writes the same ``report.md``,
``scores.csv`` and figures as from the original runs (the points are stored as the float32
values the event file held; ``tests/sweeps/test_archive.py`` checks the files byte for byte),
and ``per-dqn ablate`` with the sweep's command counts the runs finished and runs only the ones
the archive lacks. What such a run dir cannot do is be evaluated, loaded or taken by
``ablate --reuse``: it has no ``model.pt``. The dir is built in a hidden temp dir beside its
place, synced to the device and renamed into place: a rebuild that fails leaves nothing, and
one killed midway leaves only that temp dir (``.<name>.unarchive-*``), never a partial sweep dir.

What it is for: results that outlive the run dirs (shipped beside a results page, so that its
figures can be redrawn), and a long study carried from one machine to another without its
weights.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath
from typing import NamedTuple, NoReturn

import numpy as np

from per_dqn.logs.tags import EPISODE_RETURN, EVAL_RETURN_MEAN, PER_IS_WEIGHT_MEAN
from per_dqn.rundir import readback
from per_dqn.rundir.dirs import SWEEP_FILE, check_name_lengths
from per_dqn.rundir.fileio import fsync_tree, write_bytes_atomic, writing
from per_dqn.sweeps import events, runs

ARCHIVED_TAGS = (EVAL_RETURN_MEAN, PER_IS_WEIGHT_MEAN, EPISODE_RETURN)
RUN_FILES = ("config.yaml", runs.SUMMARY_FILE, "run.json")
SCALARS_FILE = "scalars.csv"
# The largest step an event holds (a signed 64-bit integer); archived steps are env steps, >= 0.
MAX_STEP = 2**63 - 1
# The most a member, and all of them, may unpack to, and the most members: a run's scalars are
# tens of kB; this refuses a bomb.
MAX_MEMBER_BYTES = 256 * 2**20
MAX_TOTAL_BYTES = 2**30
MAX_MEMBERS = 100_000
# The kind (and so the size cap) of each file archived (``readback.KINDS``).
_KIND_OF = {
    SWEEP_FILE: readback.KINDS["sweep"],
    "config.yaml": readback.KINDS["config"],
    runs.SUMMARY_FILE: readback.KINDS["summary"],
    "run.json": readback.KINDS["run"],
}


def _finished_run_dirs(out: Path) -> list[Path]:
    """Every finished run dir under ``out`` (``runs.is_finished``), in path order."""
    # Without recursion, to a bounded depth, no link followed (issue 43, E9: a nest 1,200 dirs
    # deep was a RecursionError); hidden dirs are not looked into.
    found = []
    for directory, files, _ in readback.walk(out, hidden=False):
        if runs.SUMMARY_FILE in files and runs.is_finished(directory):
            found.append(directory)
    return sorted(found)


def _scalars_csv(run_dir: Path) -> bytes:
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["tag", "step", "value"])
    for tag, points in runs.read_curves(run_dir, ARCHIVED_TAGS).items():
        for step, value in points:
            writer.writerow([tag, step, repr(value)])
    return text.getvalue().encode("utf-8")


def write_archive(out: Path, dest: Path) -> int:
    """Writes ``dest`` (a ``.tar.xz``) from the sweep dir ``out``; returns the runs archived.

    Raises:
        ValueError: one line: ``out`` is not a dir or holds no finished run, ``dest`` does not
            end in ``.tar.xz`` or lies inside ``out``, a name in either is longer than its
            filesystem takes (``rundir.check_name_lengths``), or an event file is damaged.
    """
    # Before any stat of them: a name over NAME_MAX is one line, not an OSError (issue 43, E12).
    check_name_lengths(out, "sweep dir")
    check_name_lengths(dest, "archive")
    if not out.is_dir():
        raise ValueError(f"{out}: no such sweep dir")
    if not dest.name.endswith(".tar.xz"):
        raise ValueError(f"{dest}: the archive's name must end in .tar.xz")
    if out.resolve() in dest.resolve().parents:
        raise ValueError(f"{dest}: the archive cannot go inside the sweep dir {out}")
    if not dest.parent.is_dir():
        raise ValueError(f"{dest}: no such directory {dest.parent}")
    run_dirs = _finished_run_dirs(out)
    if not run_dirs:
        raise ValueError(f"{out}: holds no finished run to archive")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)  # mtime 0, no owner: the same runs give the same bytes
            tar.addfile(info, io.BytesIO(data))

        def read(directory: Path, name: str) -> bytes:
            # A run's file, refused if it is a link leaving the sweep dir, not a regular file or
            # over its kind's size (``readback``).
            relative = (directory / name).relative_to(out)
            try:
                return readback.read_bytes(out, relative, _KIND_OF[name])
            except readback.ReadBackError as exc:
                raise ValueError(str(exc)) from None

        if (out / SWEEP_FILE).exists():
            add(SWEEP_FILE, read(out, SWEEP_FILE))
        for run_dir in run_dirs:
            rel = run_dir.relative_to(out).as_posix()
            for name in RUN_FILES:
                if (run_dir / name).exists() or (run_dir / name).is_symlink():
                    add(f"{rel}/{name}" if rel != "." else name, read(run_dir, name))
            try:
                scalars = _scalars_csv(run_dir)
            except (runs.EventDataLoss, runs.EventFileRefused) as exc:
                raise ValueError(str(exc)) from None
            add(f"{rel}/{SCALARS_FILE}" if rel != "." else SCALARS_FILE, scalars)
    with writing(dest):
        write_bytes_atomic(dest, buffer.getvalue())
    return len(run_dirs)


def _member_path(name: str, source: Path) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ValueError(f"{source}: member {name!r} would leave the sweep dir")
    return path


def _read_members(source: Path) -> dict[PurePosixPath, bytes]:
    """The archive's files by path, checked: regular files only, none leaving the dir."""
    try:
        tar = tarfile.open(source, mode="r:xz")
    except FileNotFoundError:
        raise ValueError(f"{source}: no such file") from None
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ValueError(f"{source}: not a per-dqn archive (.tar.xz): {exc}") from None
    members: dict[PurePosixPath, bytes] = {}
    total = 0
    with tar:
        try:
            for info in tar:
                path = _member_path(info.name, source)
                if not info.isfile():
                    raise ValueError(f"{source}: member {info.name!r} is not a regular file")
                total += info.size
                if info.size > MAX_MEMBER_BYTES or total > MAX_TOTAL_BYTES:
                    raise ValueError(f"{source}: member {info.name!r} is too large")
                if path in members or len(members) >= MAX_MEMBERS:
                    raise ValueError(f"{source}: member {info.name!r} is one too many")
                handle = tar.extractfile(info)
                assert handle is not None  # a regular file
                members[path] = handle.read()
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ValueError(f"{source}: damaged archive: {exc}") from None
    for path in members:
        for parent in path.parents:
            if parent in members:
                raise ValueError(f"{source}: member {str(parent)!r} is a file and a directory")
    return members


class _Points(NamedTuple):
    """A run's archived points as columns: point ``i`` is ``(tags[tag[i]], step[i], value[i])``."""

    tags: list[str]
    tag: np.ndarray
    step: np.ndarray
    value: np.ndarray


def _parse_scalars(data: bytes, where: str) -> _Points:
    try:
        rows = list(csv.reader(io.StringIO(data.decode("utf-8"))))
    except (csv.Error, UnicodeDecodeError) as exc:
        raise ValueError(f"{where}: not a UTF-8 CSV file ({exc})") from None
    if not rows or rows[0] != ["tag", "step", "value"]:
        raise ValueError(f"{where}: not a scalars file (header tag,step,value)")
    # Whole columns at C speed (1.75 million points in a 300-run sweep); a column that fails is
    # read again row by row for the line to name.
    try:
        tags, steps, values = zip(*rows[1:], strict=True) if len(rows) > 1 else ((), (), ())
        steps, values = list(map(int, steps)), list(map(float, values))
        names = set(tags)
        fine = names <= set(ARCHIVED_TAGS) and (
            not steps or 0 <= min(steps) <= max(steps) <= MAX_STEP
        )
    except ValueError:
        fine = False
    if not fine:
        _refuse_row(rows, where)
    ids = {name: i for i, name in enumerate(sorted(names))}
    return _Points(
        list(ids),
        np.array([ids[name] for name in tags], dtype=np.int64),
        np.array(steps, dtype=np.int64),
        np.array(values, dtype=np.float64),
    )


def _refuse_row(rows: list[list[str]], where: str) -> NoReturn:
    """Raises the ``ValueError`` naming the first bad row of a scalars file's ``rows``."""
    for number, row in enumerate(rows[1:], start=2):
        try:
            tag, step, value = row
            point = (tag, int(step), float(value))
        except ValueError:
            raise ValueError(f"{where}: line {number}: expected tag,step,value") from None
        if tag not in ARCHIVED_TAGS:
            raise ValueError(f"{where}: line {number}: unknown tag {tag!r}")
        if not 0 <= point[1] <= MAX_STEP:  # an event's step is a signed 64-bit integer
            raise ValueError(f"{where}: line {number}: step {step} is out of range")
    raise AssertionError("no bad row")  # pragma: no cover - the caller found one


def _write_events(run_dir: Path, points: _Points) -> None:
    """One event file holding ``points``, each its own record, by step (stably: a tag may have
    several points at one step, training episodes of several envs that end together); a NaN is
    left out, as the run's logger leaves it out."""
    kept = ~np.isnan(points.value)
    order = np.argsort(points.step[kept], kind="stable")
    events.write_scalar_arrays(
        run_dir,
        points.tags,
        points.tag[kept][order],
        points.step[kept][order],
        points.value[kept][order],
    )


def restore_archive(source: Path, out: Path) -> int:
    """Rebuilds the sweep dir ``out`` from the archive ``source``; returns the runs restored.

    Raises:
        ValueError: one line: a missing, damaged or foreign archive, a member that would leave
            the dir, an ``out`` that exists and is not empty, or a name in ``source`` or ``out``
            longer than its filesystem takes (``rundir.check_name_lengths``).
    """
    check_name_lengths(source, "archive")  # before any stat: one line, not an OSError (E12)
    check_name_lengths(out, "sweep dir")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out}: exists and is not empty; choose a new dir to unarchive into")
    members = _read_members(source)
    run_dirs = sorted({p.parent for p in members if p.name == SCALARS_FILE})
    if not run_dirs:
        raise ValueError(f"{source}: holds no run (no {SCALARS_FILE})")
    for run_dir in run_dirs:
        for name in ("config.yaml", runs.SUMMARY_FILE):
            if run_dir / name not in members:
                raise ValueError(f"{source}: run {run_dir} has no {name}")
    parsed = {
        d: _parse_scalars(members[d / SCALARS_FILE], f"{source}: {d / SCALARS_FILE}")
        for d in run_dirs
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{out.name}.unarchive-", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temp, 0o777 & ~umask)  # mkdtemp's 0700 would keep the sweep from its group
    try:
        for path, data in members.items():
            if path.name == SCALARS_FILE:
                continue
            target = temp / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        for run_dir, points in parsed.items():
            (temp / run_dir).mkdir(parents=True, exist_ok=True)
            _write_events(temp / run_dir, points)
        fsync_tree(temp)
        if out.exists():
            out.rmdir()  # empty, checked above
        os.replace(temp, out)
        fsync_tree(out.parent, recurse=False)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return len(run_dirs)
