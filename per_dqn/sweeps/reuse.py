"""``ablate --reuse DIR``: finished runs from elsewhere taken into a sweep instead of run again.

A sweep can name other sweep dirs (or any dir of run dirs) to take runs from. A planned run is
taken from there when a finished run (its ``summary.json`` says ``interrupted: false``, and it
has its ``model.pt``: not a run rebuilt by ``per-dqn unarchive``) has the planned run's config,
key for key, once validated by this per-dqn's config models: a run of an older per-dqn lacks the
keys added since, and it is taken only where the plan sets each of them to its default, which is
what that per-dqn ran (a key is only ever added with a default that keeps the old behaviour, as
``runs.config_differences`` assumes). A run with a key the plan lacks, or with a config this
per-dqn refuses, is never taken. Validating imports nothing a config names (``config.trust``):
the source dirs stay data.
A run's outcome depends on its config alone, never on its pack-mates or its sweep (issue 24's
exactness: ``tests/test_packs.py``), so that run is the one this sweep would make, bit for bit
on the same kind of device (``run.device: auto`` is resolved when a run starts: a run made on a
GPU has other floats than one made on a CPU).

Only a run dir that does not exist yet is filled: a run this sweep has started is resumed, not
replaced. The run is copied whole (event file, checkpoints, ``model.pt``, its summary with the
provenance of the command that made it, its run id), without its lock file, into a hidden temp
dir beside its place, synced to the device and then renamed into place: a copy cut short leaves
no run dir that could pass for a finished run, and the next start clears the temp dir and copies
again. A source run dir that holds a symbolic link is not taken. ``sweep.json`` lists what was
taken, and from where (``reused``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from per_dqn.config import ConfigError, parse_yaml, validate_config
from per_dqn.logs.metrics import flatten_config
from per_dqn.rundir import readback
from per_dqn.rundir.dirs import LOCK_FILE
from per_dqn.rundir.fileio import WriteError, fsync_path, fsync_tree
from per_dqn.sweeps import runs

if TYPE_CHECKING:
    from per_dqn.sweeps.plan import Job

CONFIG_FILE = "config.yaml"
MODEL_FILE = "model.pt"
TEMP_PREFIX = ".reuse-"


def check_sources(sources: Sequence[Path], out: Path) -> tuple[Path, ...]:
    """The ``--reuse`` dirs, checked.

    Raises:
        ValueError: one line: a dir that does not exist, or the sweep dir or a dir inside it.
    """
    checked = []
    for source in sources:
        if not source.exists():
            raise ValueError(f"--reuse {source}: no such directory")
        if not source.is_dir():
            raise ValueError(f"--reuse {source}: not a directory")
        resolved, own = source.resolve(), out.resolve()
        if resolved == own or own in resolved.parents:
            raise ValueError(f"--reuse {source}: is in the sweep dir itself (--out {out})")
        checked.append(source)
    return tuple(checked)


def _finished_runs(source: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Each finished run dir under ``source`` (``source`` itself included) that has its weights,
    and its config."""
    # Without recursion, to a bounded depth, no link followed (issue 43, E9: a nest 1,200 dirs
    # deep was a RecursionError); hidden dirs are not looked into.
    for run_dir, files, _ in readback.walk(source, hidden=False):
        if CONFIG_FILE not in files or MODEL_FILE not in files:
            continue
        if not runs.is_finished(run_dir):
            continue
        try:
            text = readback.read_text(run_dir, CONFIG_FILE, readback.KINDS["config"])
            config = parse_yaml(text, str(run_dir))
        except (readback.ReadBackError, ConfigError):
            continue
        if isinstance(config, dict):
            yield run_dir, config


def _has_links(run_dir: Path) -> bool:
    """Whether anything below ``run_dir`` is a link (or a FIFO, a device: not copied)."""
    return any(others for _, _, others in readback.walk(run_dir))


def match(jobs: Sequence[Job], out: Path, sources: Sequence[Path]) -> dict[str, Path]:
    """For each job whose run dir under ``out`` does not exist, a finished run of its config
    from ``sources`` (the first found, sources in order): run dir -> the source's run dir, in
    the plan's order. Reads, writes nothing."""
    wanted = [job for job in jobs if not (out / job.run_dir).exists()]
    if not wanted or not sources:
        return {}
    planned = {job.run_dir: parse_yaml(job.config_yaml, job.run_dir) for job in wanted}
    found: dict[str, Path] = {}
    own = out.resolve()
    for source in sources:
        for run_dir, config in _finished_runs(source):
            if own == run_dir.resolve() or own in run_dir.resolve().parents:
                continue  # a source that holds this sweep: never its own runs
            for job in wanted:
                if job.run_dir in found:
                    continue
                if _same_run(config, planned[job.run_dir]) and not _has_links(run_dir):
                    found[job.run_dir] = run_dir
                    break
    return {job.run_dir: found[job.run_dir] for job in wanted if job.run_dir in found}


def _same_run(held: dict[str, Any], planned: dict[str, Any]) -> bool:
    """The same run: the same env and seed (checked first: cheap), then every key of the held
    config, validated (the keys it lacks at their defaults), equal to the planned one's."""
    for section, key in (("env", "id"), ("run", "seed")):
        if (held.get(section) or {}).get(key) != (planned.get(section) or {}).get(key):
            return False
    try:
        filled = validate_config(held, "a --reuse run").model_dump(mode="json")
    except ConfigError:
        return False
    return flatten_config(filled) == flatten_config(planned)


def copy_in(out: Path, found: dict[str, Path], on_copied: Callable[[dict[str, str]], None]) -> int:
    """Copies each found run into its place under ``out`` (see the module docstring), skipping
    one whose place exists by now or whose source is no longer finished. ``on_copied`` is told
    of each run as soon as it is in place, as ``sweep.json`` lists it (``{"run_dir": ...,
    "from": ...}``), so that a copy cut short later loses no record of the earlier ones. Returns
    how many were copied.

    Raises:
        WriteError: a run could not be copied (one line naming its place); its temp dir is
            removed.
    """
    taken = 0
    for run_dir, source in found.items():
        target = out / run_dir
        if target.exists() or not runs.is_finished(source):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        temp = target.parent / f"{TEMP_PREFIX}{target.name}"
        shutil.rmtree(temp, ignore_errors=True)  # one a killed copy left
        try:
            shutil.copytree(source, temp, symlinks=True, ignore=shutil.ignore_patterns(LOCK_FILE))
            fsync_tree(temp)
            os.replace(temp, target)
            fsync_path(target.parent)
        except BaseException as exc:
            shutil.rmtree(temp, ignore_errors=True)
            if isinstance(exc, shutil.Error | OSError):
                reason = getattr(exc, "strerror", None) or "the copy failed"
                raise WriteError(None, f"copying {source} in: {reason}", str(target)) from exc
            raise
        on_copied({"run_dir": run_dir, "from": str(source)})
        taken += 1
    return taken
