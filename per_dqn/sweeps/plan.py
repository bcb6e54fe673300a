"""Planning a sweep: every env x arm x grid point x seed, its run dirs and its record.

An *arm* is a replay kind, optionally with its own settings, the way the PER paper ran its arms
(``--replay "rank:replay.alpha=0.7,replay.beta0=0.5"``); a *grid* crosses any config keys with the
arms (``--grid replay.alpha=0.4,0.6 --grid agent.n_step=1,3``). A sweep dir ``DIR`` holds one
normal run dir per run, ``DIR[/<env>]/<kind>[/<settings and grid values>]/s<seed>``, e.g.
``DIR/proportional/alpha=0.4,n=3/s100`` (the env level only when the sweep has several envs; keys
shortened to their last part, a few to a common abbreviation, ``naming.SHORT_KEYS``; values
never cut), so ``tensorboard --logdir DIR`` shows every curve under that name. ``DIR/sweep.json`` is
the sweep's own record: config, arms and their settings, grid, seeds, envs, the resolved config and
every run. Seeds are paired: seed ``s`` sets ``run.seed = s`` in every arm and grid point, and the
trainer seeds torch (so the network initialisation), the envs and the memory from it, so the arms
of one seed start from the same network and see the same env seeds. Runs are ordered seed first,
so a sweep stopped halfway has about as many seeds in every cell.

A sweep grows: re-running it with more seeds, arms, envs or grid values runs only the runs it
does not have yet, and its record becomes the union, which ``report`` reads. Anything else that
differs (another budget, another ``--set``) is refused, as is a run dir that already holds a run
of another config, rather than mixing runs.

Re-running a sweep skips finished runs (a ``summary.json`` with ``interrupted: false``) and
resumes the others from their newest usable checkpoint, as ``per-dqn train --resume`` would (a run
with none is cleared and redone from zero; ``per_dqn.sweeps.job``), so a sweep survives Ctrl-C, a
crash or a reboot. Where the runs execute is a backend's choice (``per_dqn.sweeps.backends``);
what every backend does first, taking the sweep dir's lock and writing ``sweep.json``
(``lock_sweep_dir``, ``start_sweep``), is here.

Run dirs and ``sweep.json`` are read through ``per_dqn.sweeps.runs``, never the report writer, so
that deciding which runs are left to do imports no plotting and no statistics, and planning builds
no trainer (``tests/test_architecture.py`` checks both); the CLI writes the report once the sweep
ends.

The axes themselves, as ``ablate`` is given them, are parsed in ``axes``.

One module though past 500 lines: planning the runs, merging the record and refusing a sweep dir
that holds something else are one set of rules about what a sweep is, and change together.
"""

from __future__ import annotations

import itertools
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from per_dqn.config import (
    Config,
    ConfigError,
    Override,
    env_ignores,
    kind_ignores,
    load_config,
    optimizer_ignores,
    parse_yaml,
    resolve_config_path,
)
from per_dqn.envs import families
from per_dqn.rundir import dirs as rundir
from per_dqn.rundir import readback
from per_dqn.rundir.fileio import write_json
from per_dqn.rundir.provenance import provenance
from per_dqn.sweeps import reuse as reuse_runs
from per_dqn.sweeps import runs
from per_dqn.sweeps.axes import SWEEP_AXES, Arm, arm_label, env_list_of, env_slug, split_envs
from per_dqn.sweeps.naming import settings_label
from per_dqn.sweeps.record import SweepRun
from per_dqn.sweeps.runs import SWEEP_FILE, config_differences

# sweep.json's layout: 2 added arm settings, the grid and per-run points (1 is still read).
SWEEP_FORMAT = 2


@dataclass(frozen=True)
class Job:
    """One run of a sweep.

    Attributes:
        env_id: the env.
        arm: the run's cell, ``<kind>[/<settings and grid values>]``: the run dir without the env
            and the seed.
        seed: the run seed.
        run_dir: the run dir relative to the sweep dir.
        config_yaml: the run's resolved config.
        config_name: the config's name (file stem), recorded in the summary.
        kind: the replay kind.
        settings: the arm's own settings, dotted key -> value.
        point: the grid values of this run, dotted key -> value.
    """

    env_id: str
    arm: str
    seed: int
    run_dir: str
    config_yaml: str
    config_name: str
    kind: str = ""
    settings: tuple[tuple[str, Any], ...] = ()
    point: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Sweep:
    """A planned sweep: where it goes, what it runs and the record that identifies it.

    Attributes:
        out: the sweep dir.
        record: what ``sweep.json`` will hold: this plan merged with the record already there.
        jobs: the runs this plan asks for, seed first, then env, arm and grid point.
        reuse: runs to take from other dirs (``ablate --reuse``; ``per_dqn.sweeps.reuse``):
            run dir -> the finished run of its config found there; ``start_sweep`` copies them.
    """

    out: Path
    record: dict[str, Any]
    jobs: tuple[Job, ...]
    reuse: tuple[tuple[str, Path], ...] = ()

    def pending(self) -> list[Job]:
        """The runs not finished yet, and not to be taken from elsewhere."""
        taken = {run_dir for run_dir, _ in self.reuse}
        return [
            j
            for j in self.jobs
            if j.run_dir not in taken and not runs.is_finished(self.out / j.run_dir)
        ]


# The agent keys that only one optimiser reads (``optimizer_ignores``).
_OPTIMIZER_SETTINGS = optimizer_ignores("adam") | optimizer_ignores("rmsprop")


def _read_by_optimizer(
    path: Path, config: str, shared: list[Override], extra: list[Override]
) -> list[Override]:
    """``shared`` less the optimiser settings the run's optimiser does not read, the optimiser
    being the one its whole config names (an arm or a --grid point may choose it)."""
    try:
        probe = load_config(path, [*shared, *extra], display_name=config, check_unread=False)
    except ConfigError:
        return shared  # the run's own load names the problem
    unread = optimizer_ignores(probe.agent.optimizer)
    return [o for o in shared if o.path not in unread]


def _normalised(config: Config, axes: Sequence[str]) -> dict[str, Any]:
    """The resolved config as plain JSON data, with the sweep's axes blanked."""
    return _blank(config.model_dump(mode="json"), axes)


def plan_sweep(
    config: str,
    arms: Sequence[str | Arm],
    seeds: Sequence[int],
    steps: int | None = None,
    overrides: Sequence[Override] = (),
    out: Path | None = None,
    grid: Sequence[tuple[str, Sequence[Any]]] = (),
    reuse: Sequence[Path] = (),
) -> Sweep:
    """Resolves and validates every run's config and checks the sweep dir; writes nothing.

    Args:
        config: a shipped config name or a path.
        arms: replay kinds or ``Arm``s, e.g. from ``parse_arms``.
        seeds: the run seeds (``parse_seeds``), the same in every arm.
        steps: ``train.total_env_steps`` of every run (None keeps the config's).
        overrides: ``--set`` overrides; an ``env.id`` list makes one sweep over several envs.
        out: the sweep dir; default ``<run.runs_root>/ablate__<envs>__<config name>``.
        grid: ``(key, values)`` pairs (``parse_grid``), crossed with everything else; an
            ``env.id`` grid is the sweep's envs.
        reuse: dirs to take finished runs of this sweep's configs from, instead of running
            them (``per_dqn.sweeps.reuse``), in the order given.

    Raises:
        ConfigError: a config problem, one line each.
        ValueError: bad arms, seeds, grid or env list, a key set two ways, or a sweep dir that
            holds something else (see ``check_out_dir``).
    """
    seeds = tuple(seeds)
    if not seeds:
        raise ValueError("--seeds must name at least one seed")
    if not arms:
        raise ValueError("arms must not be empty")
    arm_list = [a if isinstance(a, Arm) else Arm(a) for a in arms]
    path = resolve_config_path(config)
    name = path.stem
    env_list, rest = split_envs(overrides)
    grid = [(k, tuple(v)) for k, v in grid]
    for key, values in grid:
        if key == "env.id":
            if env_list is not None:
                raise ValueError("--grid env.id and --set env.id both list envs; give one")
            env_list = env_list_of(list(values), "--grid")
    grid = [(k, v) for k, v in grid if k != "env.id"]
    grid_keys = [k for k, _ in grid]
    arm_keys = sorted({o.path for a in arm_list for o in a.settings})
    for override in rest:
        if override.path in grid_keys or override.path in arm_keys:
            how = "--grid" if override.path in grid_keys else "an arm's settings"
            raise ValueError(f"--set {override.path} is also set by {how}; give it once")
    for key in grid_keys:
        if key in arm_keys:
            raise ValueError(f"--grid {key} is also set by an arm's settings; give it once")
    axes = [*SWEEP_AXES, *arm_keys, *grid_keys]
    points = list(itertools.product(*[[(k, v) for v in values] for k, values in grid]))
    # The sweep this command re-runs or grows, if --out holds one (the default --out names its
    # envs, so only a given one can hold a sweep over others). A name too long for the
    # filesystem is refused first: asking whether it is a dir would raise.
    before = None
    if out is not None:
        rundir.check_name_lengths(out, "sweep dir")
        before = read_record(out) if out.is_dir() else None
    # A run dir holds an env level when the sweep has several envs: this command's, or those of
    # the sweep it re-runs (a re-run that names one of its envs resumes that env's runs).
    several = env_list is not None and len(env_list) > 1
    if not several and before is not None:
        envs_before = before.get("envs")
        several = isinstance(envs_before, list) and len(envs_before) > 1
    jobs, problems = [], []
    base: dict[str, Any] | None = None
    runs_root, envs = "runs", list(env_list or [])
    # A sweep-wide env key that some of its envs' families do not read (`--set env.frame_skip`
    # over Atari and MinAtar) is left out of their runs, as a kind's are below. One that none of
    # the sweep's envs reads (those of the sweep it re-runs too) is refused, and so is a --grid
    # of one that some of them do not read: its points would name settings their runs lack. On
    # one env, the config's own check refuses both.
    recorded = before.get("envs") if before is not None else None
    listed = [e for e in recorded if isinstance(e, str)] if isinstance(recorded, list) else []
    first_env = listed[0] if several and listed else None
    env_ignored = {env: env_ignores(env) for env in (env_list or []) if several}
    if env_ignored:
        every = {*env_ignored, *listed}
        for override in rest:
            if all(override.path in env_ignores(env) for env in every):
                raise ConfigError(
                    [f"{config}: {override.path}: none of the sweep's envs reads it (set by "
                     f"{override.source})"]
                )  # fmt: skip
        for key in grid_keys:
            unread = [env for env, keys in env_ignored.items() if key in keys]
            if unread:
                title = families.of(unread[0]).title
                raise ConfigError([f"{config}: {key}: {title} envs do not read it (set by --grid)"])
    # The --set paths some planned run reads: one that none reads is refused below.
    read: set[str] = set()
    optimizer_sets = any(o.path in _OPTIMIZER_SETTINGS for o in rest)
    for seed in seeds:
        for env in env_list or [None]:  # None: the config's own env
            for arm in arm_list:
                # A sweep-wide key the arm's kind does not read (`--set replay.alpha` beside a
                # uniform arm) is left out of that arm's runs; its own settings are checked.
                ignored = kind_ignores(arm.kind) | env_ignored.get(env, frozenset())
                shared = [o for o in rest if o.path not in ignored]
                for point in points:
                    extra = [
                        Override("replay.kind", arm.kind, "--replay"),
                        *arm.settings,
                        *(Override(k, v, "--grid") for k, v in point if k not in ignored),
                        Override("run.seed", seed, "--seeds"),
                    ]
                    if env is not None:
                        extra.append(Override("env.id", env, "--set"))
                    if steps is not None:
                        extra.append(Override("train.total_env_steps", steps, "--steps"))
                    kept = shared
                    if optimizer_sets:  # so is one of an optimiser the run does not use
                        kept = _read_by_optimizer(path, config, shared, extra)
                    try:
                        cfg = load_config(path, [*kept, *extra], display_name=config)
                    except ConfigError as exc:
                        problems += [p for p in exc.problems if p not in problems]
                        continue
                    read.update(o.path for o in kept)
                    if base is None:  # every sweep-wide key, those this arm leaves out too
                        # Read on the first env of the sweep this re-runs, as its record was:
                        # an env's family sets some keys (evaluation caps, the frame skip), so
                        # a re-run naming another of its envs would differ there.
                        on = [Override("env.id", first_env, "--set")] if first_env else []
                        whole = load_config(path, [*rest, *extra, *on], config, check_unread=False)
                        base = _normalised(whole, axes)
                    runs_root, env_id = cfg.run.runs_root, cfg.env.id
                    if env_id not in envs:
                        envs.append(env_id)
                    pairs = [*((o.path, o.value) for o in arm.settings), *point]
                    cell = f"{arm.kind}/{settings_label(pairs)}" if pairs else arm.kind
                    run_dir = f"{cell}/s{seed}"
                    if several:
                        run_dir = f"{env_slug(env_id)}/{run_dir}"
                    settings = tuple((o.path, o.value) for o in arm.settings)
                    job = Job(
                        env_id, cell, seed, run_dir, cfg.to_yaml(), name, arm.kind, settings,
                        tuple(point),
                    )  # fmt: skip
                    jobs.append(job)
    if not problems:
        # A --set no run reads would change nothing (`--replay uniform --set replay.alpha=0.7`),
        # unless the sweep this re-runs has it: some of its runs, not planned here, read it.
        given = set(before.get("overrides") or []) if before is not None else set()
        for o in rest:
            if o.path not in read and f"{o.path}={json.dumps(o.value)}" not in given:
                problems.append(
                    f"{config}: {o.path}: none of the sweep's runs reads it (set by {o.source})"
                )
    if problems:
        raise ConfigError(problems)
    if before is not None:
        jobs = _recorded_run_dirs(jobs, before)
    dirs = [j.run_dir for j in jobs]
    for run_dir in dirs:
        if dirs.count(run_dir) > 1:
            raise ValueError(f"two runs of this sweep would share the run dir {run_dir}")
    _refuse_same_config_twice(jobs)
    if out is None:
        out = Path(runs_root) / f"ablate__{'+'.join(map(env_slug, envs))}__{name}"
    record = {
        "format": SWEEP_FORMAT,
        "config": config,
        "config_name": name,
        "arms": [arm_label(a) for a in arm_list],
        "arm_settings": {
            arm_label(a): {o.path: o.value for o in a.settings} for a in arm_list if a.settings
        },
        "grid": {k: list(v) for k, v in grid},
        "seeds": list(seeds),
        "envs": list(envs),
        "steps": steps,
        "overrides": [f"{o.path}={json.dumps(o.value)}" for o in overrides],
        "axes": axes,
        "resolved_config": base,
        "runs": [_run_entry(j) for j in jobs],
    }
    sources = reuse_runs.check_sources([Path(r) for r in reuse], out)
    sweep = check_out_dir(Sweep(out, record, tuple(jobs)))
    found = reuse_runs.match(sweep.jobs, out, sources)
    return replace(sweep, reuse=tuple(found.items()))


def _run_entry(job: Job) -> dict[str, Any]:
    return {
        "env_id": job.env_id,
        "arm": job.arm,
        "kind": job.kind,
        "settings": dict(job.settings),
        "point": dict(job.point),
        "seed": job.seed,
        "run_dir": job.run_dir,
    }


def _identity(entry: dict[str, Any]) -> str:
    """A run of a sweep record (or a ``_run_entry``) as its env, kind, seed, settings and grid
    point, spelled as the record spells them."""
    keys = ("env_id", "kind", "seed", "settings", "point")
    return json.dumps([entry.get(k) for k in keys], sort_keys=True)


def _recorded_run_dirs(jobs: Sequence[Job], record: dict[str, Any]) -> list[Job]:
    """The jobs, each planned run the record already holds in the run dir recorded for it.

    A sweep over one env names its run dirs without an env level (``uniform/s0``), one over
    several with it (``CartPole-v1/uniform/s0``): grown by a second env, the first env's runs
    stay where they are, and only the new env's take the env level. A record entry that lacks a
    field (an older format) matches nothing, so its run is named as planned; so does one whose
    run dir is neither of the two layouts' names for that run (a record edited by hand cannot
    send a run elsewhere, outside the sweep dir least of all)."""
    recorded = {
        _identity(entry): entry["run_dir"]
        for entry in record.get("runs", [])
        if isinstance(entry, dict) and isinstance(entry.get("run_dir"), str)
    }

    def placed(job: Job) -> Job:
        layouts = (f"{job.arm}/s{job.seed}", f"{env_slug(job.env_id)}/{job.arm}/s{job.seed}")
        held = recorded.get(_identity(_run_entry(job)))
        return replace(job, run_dir=held) if held in layouts else job

    return [placed(j) for j in jobs]


def _union(old: Sequence[Any], new: Sequence[Any]) -> list[Any]:
    seen = [json.dumps(v, sort_keys=True) for v in old]
    return [*old, *(v for v in new if json.dumps(v, sort_keys=True) not in seen)]


def merge_records(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The record of a sweep grown by ``new``: old runs first, then the new ones; arms, seeds,
    envs and grid values joined. Assumes ``check_out_dir``'s checks passed."""
    by_dir = {r["run_dir"] for r in old["runs"]}
    axes = _union(old.get("axes", list(SWEEP_AXES)), new["axes"])
    old_grid = old.get("grid", {})
    grid = {k: _union(old_grid.get(k, []), new["grid"].get(k, [])) for k in old_grid}
    grid.update({k: v for k, v in new["grid"].items() if k not in grid})
    return {
        **new,
        "arms": _union(old["arms"], new["arms"]),
        "arm_settings": {**old.get("arm_settings", {}), **new["arm_settings"]},
        "grid": grid,
        "seeds": _union(old["seeds"], new["seeds"]),
        "envs": _union(old["envs"], new["envs"]),
        "axes": axes,
        "resolved_config": _blank(new["resolved_config"], axes),
        "runs": [*old["runs"], *(r for r in new["runs"] if r["run_dir"] not in by_dir)],
        **{k: old[k] for k in ("provenance", "grown", "reused") if k in old},
    }


def check_out_dir(sweep: Sweep) -> Sweep:
    """Refuses a sweep dir that holds anything but this sweep or a smaller one it extends, and
    returns the sweep with its record merged into the one already there.

    Raises:
        ValueError: ``out`` is a file, a non-empty dir without ``sweep.json``, a sweep with
            different settings (the message lists them), a run dir whose config differs from the
            run planned there, or a dir that cannot be created or written.
    """
    out = sweep.out
    rundir.check_name_lengths(out, "sweep dir")
    for job in sweep.jobs:  # its runs' dirs too: a grid's settings make long names
        rundir.check_name_lengths(out / job.run_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"sweep dir {out} exists and is not a directory")
    rundir.check_writable(out, "sweep dir")
    if not rundir.is_nonempty_dir(out):
        return sweep
    old = read_record(out)
    if old is None:
        raise ValueError(
            f"sweep dir {out} exists, is not empty and holds no {SWEEP_FILE}; choose another --out"
        )
    axes = _union(old.get("axes", list(SWEEP_AXES)), sweep.record["axes"])
    diffs = [
        f"{key}: {old.get(key)} -> {sweep.record[key]}"
        for key in ("config_name",)
        if old.get(key) != sweep.record[key]
    ]
    diffs += config_differences(
        _blank(old.get("resolved_config"), axes), _blank(sweep.record["resolved_config"], axes)
    )
    if diffs:
        raise ValueError(
            f"sweep dir {out} holds a sweep with other settings ({'; '.join(diffs)}); repeat its "
            "command (adding seeds, arms, envs or grid values is fine) to resume or grow it, or "
            "choose another --out"
        )
    check_run_dir_paths(out, sweep.jobs)
    old_runs = {r["run_dir"]: r for r in old["runs"]}
    for job in sweep.jobs:
        _check_run_dir_holds(out, job, old_runs.get(job.run_dir))
    _refuse_same_config_twice(sweep.jobs, out, list(old_runs))
    return Sweep(out, merge_records(old, sweep.record), sweep.jobs)


def _refuse_same_config_twice(
    jobs: Sequence[Job], out: Path = Path(), held: Sequence[str] = ()
) -> None:
    """Refuses two runs of one config under two run dirs: the same arm or grid value spelled two
    ways (``1`` and ``1.0``, settings in another order), in this command or against a run dir
    the sweep dir ``out`` already holds (``held``: run dirs whose config.yaml, one not yet
    written or unreadable, is skipped). Without this, a grown sweep would run the same run
    again and the report would count its seeds twice."""
    seen: dict[str, str] = {}
    for run_dir in held:
        try:
            data = parse_yaml(_read_config(out, run_dir), f"{out}/{run_dir}/config.yaml")
        except (readback.ReadBackError, ConfigError):
            continue
        seen.setdefault(json.dumps(data, sort_keys=True), run_dir)
    for job in jobs:
        key = json.dumps(parse_yaml(job.config_yaml, job.run_dir), sort_keys=True)
        other = seen.setdefault(key, job.run_dir)
        if other != job.run_dir:
            raise ValueError(
                f"run dirs {other} and {job.run_dir} would hold the same run (the same config): "
                "an arm or grid value is given twice, spelled two ways; give it once, spelled "
                "as before"
            )


def _blank(config: Any, axes: Sequence[str]) -> Any:
    data = json.loads(json.dumps(config))
    for path in axes:
        node = data
        *parents, leaf = path.split(".")
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and leaf in node:
            node[leaf] = None
    return data


def _check_run_dir_holds(out: Path, job: Job, recorded: dict[str, Any] | None) -> None:
    """Refuses a planned run whose run dir the old record, or the dir's own config.yaml, gives to
    a run of another config (possible only through a record edited by hand or a key whose values
    read alike in a run dir name, ``"1"`` and ``1``)."""
    if recorded is not None:
        planned = _run_entry(job)
        same = all(
            json.dumps(recorded.get(k), sort_keys=True) == json.dumps(planned[k], sort_keys=True)
            for k in ("env_id", "kind", "seed", "settings", "point")
            if k in recorded
        )
        if not same:
            raise ValueError(
                f"sweep dir {out}: run dir {job.run_dir} is recorded for another run "
                f"({recorded}); choose another --out"
            )
    config_file = out / job.run_dir / "config.yaml"
    if config_file.is_file():
        try:
            held = parse_yaml(_read_config(out, job.run_dir), str(config_file))
        except (readback.ReadBackError, ConfigError):
            return  # unreadable: run_job clears an unfinished run dir; a finished one is kept
        # A key the run does not read (its kind's, its env family's) may differ: a sweep made
        # before such a --set was left out of the runs that ignore it wrote it there.
        planned = parse_yaml(job.config_yaml, job.run_dir)
        optimizer = planned.get("agent", {}).get("optimizer", "")
        unread = kind_ignores(job.kind) | env_ignores(job.env_id) | optimizer_ignores(optimizer)
        diffs = config_differences(held, planned, unread)
        if diffs:
            raise ValueError(
                f"sweep dir {out}: run dir {job.run_dir} holds a run of another config "
                f"({'; '.join(diffs)}); choose another --out"
            )


def _read_config(out: Path, run_dir: str) -> str:
    """A run dir's ``config.yaml`` read back from the sweep dir (``readback``: a FIFO, a link out
    of the sweep dir or a file over a config's size is refused, not read; issue 43, E5)."""
    return readback.read_text(out, f"{run_dir}/config.yaml", readback.KINDS["config"])


def read_record(out: Path) -> dict[str, Any] | None:
    """The sweep record an ``ablate`` re-run grows (``runs.read_sweep``), each run entry checked
    against ``SweepRun`` too: the record is merged into the new one (issue 43, E10: 7 of 8
    malformed records were a traceback). A recorded run dir that leaves the sweep dir is no
    shape error: no run is sent there (``_recorded_run_dirs``) and no file is read there
    (``readback``).

    Raises:
        ValueError: one line naming the record, the entry and what is wrong.
    """
    record = runs.read_sweep(out)
    if record is None:
        return None
    label = out / SWEEP_FILE
    for i, entry in enumerate(record["runs"]):
        try:
            readback.validate(entry, SweepRun, f"{label}: runs[{i}]")
        except readback.ReadBackError as exc:
            raise ValueError(f"{exc}; repair or remove the sweep dir") from None
    return record


def check_run_dir_paths(out: Path, jobs: Sequence[Job]) -> None:
    """Refuses a sweep whose run dirs are reached through a link, before any run starts: ``ablate``
    clears an unfinished run dir and trains there, so a run dir (or a dir above it, below the
    sweep dir) that is a link would have it delete and write wherever the link leads (issue 43,
    E1). A path that exists and is not a dir is refused too. The sweep dir itself is the user's
    and may be a link.

    Raises:
        ValueError: one line naming the link and where it leads.
    """
    for job in jobs:
        path = out
        for part in PurePosixPath(job.run_dir).parts:
            path = path / part
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                break
            except OSError as exc:
                problem = f"sweep dir {out}: {path}: cannot be looked at ({exc.strerror})"
                raise ValueError(problem) from None
            if stat.S_ISLNK(mode):
                raise ValueError(
                    f"sweep dir {out}: {path} is a symbolic link (to {os.readlink(path)}); "
                    "refused: ablate clears and writes run dirs, never through a link; remove "
                    "it, or choose another --out"
                )
            if not stat.S_ISDIR(mode):
                raise ValueError(
                    f"sweep dir {out}: {path} is not a directory; remove it, or choose another "
                    "--out"
                )


def lock_sweep_dir(sweep: Sweep) -> rundir.RunDirLock:
    """Creates the sweep dir and takes its lock, so that a second ``ablate`` on the same dir is
    refused while this one runs (each run dir is locked by its worker as well).

    Raises:
        RunDirError: another process holds it, or it cannot be created.
    """
    lock = rundir.lock_run_dir(sweep.out, what="sweep dir")
    assert lock is not None  # created when absent
    return lock


def first_missing(path: Path) -> Path | None:
    """The outermost of ``path`` and its parents that does not exist yet (None: it exists):
    what ``lock_sweep_dir`` will create, and ``remove_created`` removes if the sweep is refused."""
    missing = None
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        missing = candidate
    return missing


def remove_created(path: Path, top: Path) -> None:
    """Removes ``path`` (its lock file aside, it must be empty) and its parents up to ``top``:
    a sweep refused once its dir was locked leaves no dir behind that it created."""
    (path / rundir.LOCK_FILE).unlink(missing_ok=True)
    for directory in (path, *path.parents):
        try:
            directory.rmdir()
        except OSError:
            return
        if directory == top:
            return


def start_sweep(sweep: Sweep) -> list[Job]:
    """What every backend does first, with the sweep dir locked: writes ``sweep.json`` (the record
    on disk grown by this plan) and lists the runs left to do.

    Returns:
        The unfinished jobs in the plan's order; the others are finished (skipped).
    """
    out = sweep.out
    out.mkdir(parents=True, exist_ok=True)
    # Read again under the sweep dir's lock: the record on disk is the one to grow.
    old = read_record(out)
    record = sweep.record if old is None else merge_records(old, sweep.record)
    if old is None:
        record["provenance"] = provenance()
    elif len(record["runs"]) > len(old["runs"]):
        # Who grew the sweep, and by how many runs; each run's summary has its own provenance.
        grown = {"runs_added": len(record["runs"]) - len(old["runs"]), **provenance()}
        record["grown"] = [*old.get("grown", []), grown]
    if record != old:
        write_json(out / SWEEP_FILE, record)
    # After the record: a sweep dir with runs in it always has its sweep.json; each run taken
    # from elsewhere is listed in it as soon as it is in place.

    def copied(entry: dict[str, str]) -> None:
        record["reused"] = [*record.get("reused", []), entry]
        write_json(out / SWEEP_FILE, record)

    reuse_runs.copy_in(out, dict(sweep.reuse), copied)
    return [job for job in sweep.jobs if not runs.is_finished(out / job.run_dir)]
