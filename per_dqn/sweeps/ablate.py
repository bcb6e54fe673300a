"""Paired multi-seed sweeps: every env x arm x grid point x seed, run in worker processes.

An *arm* is a replay kind, optionally with its own settings, the way the PER paper ran its arms
(``--replay "rank:replay.alpha=0.7,replay.beta0=0.5"``); a *grid* crosses any config keys with the
arms (``--grid replay.alpha=0.4,0.6 --grid agent.n_step=1,3``). A sweep dir ``DIR`` holds one
normal run dir per run, ``DIR[/<env>]/<kind>[/<settings and grid values>]/s<seed>``, e.g.
``DIR/proportional/alpha=0.4,n=3/s100`` (the env level only when the sweep has several envs; keys
shortened to their last part, a few to a common abbreviation, ``runs.SHORT_KEYS``; values never
cut),
so ``tensorboard --logdir DIR`` shows every curve under that name. ``DIR/sweep.json`` is the
sweep's own record: config, arms and their settings, grid, seeds, envs, the resolved config and
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
with none is cleared and redone from zero), so a sweep survives Ctrl-C, a crash or a reboot.

Each worker is a ``spawn``-ed process that builds a ``Trainer`` and runs it into its run dir
exactly as ``per-dqn train --quiet --run-dir ...`` would, one run at a time, torch on
``run.torch_threads`` threads (1 by default), holding the run dir's writer lock
(``rundir.RunDirLock``) so that no other command writes there meanwhile. Ctrl-C or SIGTERM
interrupts the runs in progress the way they interrupt ``per-dqn train`` (stop between two env
steps, checkpoint, summary marked ``interrupted``) and starts no new run.

A sweep dies as a whole: a worker whose parent dies, even by SIGKILL, gets SIGTERM from the kernel
(``prctl(PR_SET_PDEATHSIG)`` on Linux; elsewhere it notices at its next env step that its parent
changed) and stops its run the same way, so no orphan keeps writing into a run dir that the next
``ablate`` resumes.

Run dirs and ``sweep.json`` are read through ``per_dqn.sweeps.runs``, never the report writer, so
that deciding which runs are left to do imports no plotting and no statistics
(``tests/test_architecture.py`` checks it); the CLI writes the report once the sweep ends.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import multiprocessing as mp
import os
import queue
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from per_dqn import rundir
from per_dqn.config import (
    Config,
    ConfigError,
    Override,
    load_config,
    parse_override,
    parse_yaml,
    resolve_config_path,
    validate_config,
)
from per_dqn.fileio import write_json
from per_dqn.metrics import flatten_config
from per_dqn.provenance import provenance
from per_dqn.sweeps import runs
from per_dqn.sweeps.runs import ARMS, SWEEP_FILE, settings_label

# The config keys every sweep sets per run; arms' settings and grid keys join them in a sweep.
SWEEP_AXES = ("env.id", "replay.kind", "run.seed")
# After Ctrl-C, how long interrupted runs get to write their summaries before being killed.
STOP_GRACE_SECONDS = 60.0
# sweep.json's layout: 2 added arm settings, the grid and per-run points (1 is still read).
SWEEP_FORMAT = 2


@dataclass(frozen=True)
class Arm:
    """One arm of a sweep: a replay kind and the settings it carries.

    Attributes:
        kind: the replay kind.
        settings: config overrides only this arm applies (``replay.alpha=0.7``), in the order
            given.
    """

    kind: str
    settings: tuple[Override, ...] = ()


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
    """

    out: Path
    record: dict[str, Any]
    jobs: tuple[Job, ...]

    def pending(self) -> list[Job]:
        """The runs not finished yet."""
        return [j for j in self.jobs if not runs.is_finished(self.out / j.run_dir)]


def _split_top_level(text: str) -> list[str]:
    """Splits at the commas outside brackets: ``"[64],[128,128]"`` -> ``["[64]", "[128,128]"]``."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def parse_arms(texts: str | Sequence[str]) -> tuple[Arm, ...]:
    """``--replay`` values -> arms.

    Each value lists arms separated by commas; an arm is a kind, optionally followed by ``:`` and
    its settings, ``KEY=VALUE`` pairs separated by commas (values read as YAML, as ``--set``
    reads them). A comma-separated part that is not a kind continues the previous arm's settings:
    ``"uniform,rank:replay.alpha=0.7,replay.beta0=0.5"`` is two arms.

    Raises:
        ValueError: one line naming the bad part: an unknown kind, a setting without an arm, a
            setting that is not ``KEY=VALUE``, a key set twice in one arm, an arm setting a key
            the sweep itself sets, or an arm given twice.
    """
    values = [texts] if isinstance(texts, str) else list(texts)
    arms: list[tuple[str, list[Override]]] = []
    for text in values:
        if not text.strip():
            raise ValueError(f"--replay must list at least one of {', '.join(ARMS)}, got {text!r}")
        for part in _split_top_level(text):
            kind, colon, setting = part.partition(":")
            kind = kind.strip()
            if colon or "=" not in part:
                if kind not in ARMS:
                    raise ValueError(
                        f"--replay: unknown arm {kind!r}; choose from {', '.join(ARMS)}"
                    )
                arms.append((kind, []))
                if not colon:
                    continue
                part = setting
            if not arms:
                raise ValueError(f"--replay: setting {part!r} comes before any arm in {text!r}")
            try:
                override = parse_override(part.strip())
            except ConfigError as exc:
                line = exc.problems[0].replace("--set", f"--replay {arms[-1][0]}:", 1)
                raise ValueError(line) from None
            arm_kind, settings = arms[-1]
            source = f"--replay {arm_kind}:"
            if override.path in SWEEP_AXES:
                raise ValueError(
                    f"{source} an arm cannot set {override.path} (the sweep sets it per run)"
                )
            if any(o.path == override.path for o in settings):
                raise ValueError(f"{source} sets {override.path} twice")
            settings.append(Override(override.path, override.value, source))
    result = tuple(Arm(kind, tuple(settings)) for kind, settings in arms)
    names = [arm_label(a) for a in result]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"--replay lists the arm {name!r} twice")
    return result


def parse_grid(texts: Sequence[str]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """``--grid KEY=V1,V2,...`` values -> ``((key, values), ...)``, values read as YAML.

    Commas inside brackets belong to one value: ``agent.hidden_sizes=[64],[128,128]``.

    Raises:
        ValueError: one line naming the bad ``--grid``: no ``=``, an empty or repeated value, a
            key given twice, or a key the sweep sets some other way (replay.kind: ``--replay``;
            run.seed: ``--seeds``).
    """
    grid: list[tuple[str, tuple[Any, ...]]] = []
    for text in texts:
        key, sep, raw = text.partition("=")
        key = key.strip()
        bad = f"--grid {text!r}: expected KEY=VALUE1,VALUE2,..."
        if not sep or not key or any(not part for part in key.split(".")):
            raise ValueError(bad)
        if key == "replay.kind":
            raise ValueError(f"--grid {key}: replay kinds are the arms; give them with --replay")
        if key == "run.seed":
            raise ValueError(f"--grid {key}: give seeds with --seeds")
        if any(k == key for k, _ in grid):
            raise ValueError(f"--grid gives {key} twice")
        values = []
        for raw_value in _split_top_level(raw):
            if not raw_value:
                raise ValueError(f"--grid {text!r}: an empty value")
            try:
                values.append(parse_override(f"{key}={raw_value}").value)
            except ConfigError as exc:
                raise ValueError(exc.problems[0].replace("--set", "--grid", 1)) from None
        encoded = [json.dumps(v, sort_keys=True) for v in values]
        if len(set(encoded)) != len(encoded):
            raise ValueError(f"--grid {key} lists a value twice, got {raw!r}")
        grid.append((key, tuple(values)))
    return tuple(grid)


# A seed list longer than this is a typo (10**9 runs), not a sweep.
MAX_SEEDS = 100_000


def parse_seeds(text: str) -> tuple[int, ...]:
    """``--seeds``: ``"10"`` -> seeds 0..9; ``"100-119"`` -> 100..119; ``"3,7,11"`` -> those.

    Raises:
        ValueError: one line naming the bad part: not a number, a negative seed, an empty or
            reversed range, a repeated seed, or more than ``MAX_SEEDS`` seeds.
    """
    text = text.strip()
    bad = f"--seeds: expected a count (10), a range (100-119) or a list (3,7,11), got {text!r}"
    if text.isdigit():
        count = int(text)
        if not 1 <= count <= MAX_SEEDS:
            raise ValueError(f"--seeds must be a count from 1 to {MAX_SEEDS:,}, got {count}")
        return tuple(range(count))
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(bad)
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"--seeds: range {part!r} ends before it starts")
        if len(seeds) + last - first + 1 > MAX_SEEDS:
            raise ValueError(f"--seeds lists more than {MAX_SEEDS:,} seeds, got {text!r}")
        seeds.extend(range(first, last + 1))
    repeated = sorted({s for s in seeds if seeds.count(s) > 1}) if len(seeds) < 10_000 else []
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds lists a seed twice ({repeated[:5] or 'several'}), got {text!r}")
    return tuple(seeds)


def check_workers(workers: int | None) -> int:
    """The worker count: ``workers`` if given (>= 1), else one per CPU core."""
    if workers is None:
        return os.cpu_count() or 1
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    return workers


def _env_list(value: Any, source: str) -> list[str]:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",")]
    if not isinstance(value, list) or not value:
        raise ValueError(f"{source} env.id: expected an env id or a list of them, got {value!r}")
    if not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{source} env.id: every env id must be a non-empty string, got {value}")
    if len(set(value)) != len(value):
        raise ValueError(f"{source} env.id lists an env twice, got {value}")
    return value


def _split_envs(overrides: Sequence[Override]) -> tuple[list[str] | None, list[Override]]:
    """Takes the ``env.id`` overrides out: a list (or comma-separated ids) is the sweep's envs."""
    envs, rest = None, []
    for override in overrides:
        if override.path != "env.id":
            rest.append(override)
            continue
        envs = _env_list(override.value, "--set")
    return envs, rest


def env_slug(env_id: str) -> str:
    """An env id as one path component: ``ALE/Pong-v5`` -> ``ALE-Pong-v5``."""
    return env_id.replace("/", "-")


def arm_label(arm: Arm) -> str:
    """An arm as report and run dirs name it: ``rank`` or ``rank/alpha=0.7,beta0=0.5``."""
    text = settings_label([(o.path, o.value) for o in arm.settings])
    return f"{arm.kind}/{text}" if text else arm.kind


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
    env_list, rest = _split_envs(overrides)
    grid = [(k, tuple(v)) for k, v in grid]
    for key, values in grid:
        if key == "env.id":
            if env_list is not None:
                raise ValueError("--grid env.id and --set env.id both list envs; give one")
            env_list = _env_list(list(values), "--grid")
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
    several = env_list is not None and len(env_list) > 1
    jobs, problems = [], []
    base: dict[str, Any] | None = None
    runs_root, envs = "runs", list(env_list or [])
    for seed in seeds:
        for env in env_list or [None]:  # None: the config's own env
            for arm in arm_list:
                for point in points:
                    extra = [
                        Override("replay.kind", arm.kind, "--replay"),
                        *arm.settings,
                        *(Override(k, v, "--grid") for k, v in point),
                        Override("run.seed", seed, "--seeds"),
                    ]
                    if env is not None:
                        extra.append(Override("env.id", env, "--set"))
                    if steps is not None:
                        extra.append(Override("train.total_env_steps", steps, "--steps"))
                    try:
                        cfg = load_config(path, [*rest, *extra], display_name=config)
                    except ConfigError as exc:
                        problems += [p for p in exc.problems if p not in problems]
                        continue
                    base = base if base is not None else _normalised(cfg, axes)
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
    if problems:
        raise ConfigError(problems)
    dirs = [j.run_dir for j in jobs]
    for run_dir in dirs:
        if dirs.count(run_dir) > 1:
            raise ValueError(f"two runs of this sweep would share the run dir {run_dir}")
    _refuse_same_config_twice(jobs, [])
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
    sweep = Sweep(out, record, tuple(jobs))
    return check_out_dir(sweep)


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


def _config_differences(old: Any, new: Any) -> list[str]:
    """``key: old -> new`` for each config key both have with different values.

    A config key only one side has is not a difference: a newer per-dqn added it with a default
    that keeps the old behaviour, and refusing would strand every sweep across upgrades.
    """
    old_cfg, new_cfg = flatten_config(old or {}), flatten_config(new or {})
    return [
        f"{key}: {old_cfg[key]} -> {new_cfg[key]}"
        for key in sorted(set(old_cfg) & set(new_cfg))
        if old_cfg[key] != new_cfg[key]
    ]


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
        **{k: old[k] for k in ("provenance", "grown") if k in old},
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
    if out.exists() and not out.is_dir():
        raise ValueError(f"sweep dir {out} exists and is not a directory")
    rundir.check_writable(out, "sweep dir")
    if not rundir.is_nonempty_dir(out):
        return sweep
    old = runs.read_sweep(out)
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
    diffs += _config_differences(
        _blank(old.get("resolved_config"), axes), _blank(sweep.record["resolved_config"], axes)
    )
    if diffs:
        raise ValueError(
            f"sweep dir {out} holds a sweep with other settings ({'; '.join(diffs)}); repeat its "
            "command (adding seeds, arms, envs or grid values is fine) to resume or grow it, or "
            "choose another --out"
        )
    old_runs = {r["run_dir"]: r for r in old["runs"]}
    for job in sweep.jobs:
        _check_run_dir_holds(out, job, old_runs.get(job.run_dir))
    _refuse_same_config_twice(sweep.jobs, [(d, out / d / "config.yaml") for d in old_runs])
    return Sweep(out, merge_records(old, sweep.record), sweep.jobs)


def _refuse_same_config_twice(jobs: Sequence[Job], held: Sequence[tuple[str, Path]]) -> None:
    """Refuses two runs of one config under two run dirs: the same arm or grid value spelled two
    ways (``1`` and ``1.0``, settings in another order), in this command or against a run dir
    the sweep dir already holds (``held``: run dir, its config.yaml; one not yet written or
    unreadable is skipped). Without this, a grown sweep would run the same run again and the
    report would count its seeds twice."""
    seen: dict[str, str] = {}
    for run_dir, config_file in held:
        try:
            data = parse_yaml(config_file.read_text(encoding="utf-8"), str(config_file))
        except (OSError, ConfigError):
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
            held = parse_yaml(config_file.read_text(encoding="utf-8"), str(config_file))
        except (OSError, ConfigError):
            return  # unreadable: _run_job clears an unfinished run dir; a finished one is kept
        diffs = _config_differences(held, parse_yaml(job.config_yaml, job.run_dir))
        if diffs:
            raise ValueError(
                f"sweep dir {out}: run dir {job.run_dir} holds a run of another config "
                f"({'; '.join(diffs)}); choose another --out"
            )


def preflight(sweep: Sweep) -> None:
    """Builds (and closes) one trainer per env, so that an unusable env or device fails before
    anything is written, as ``per-dqn train`` does.

    Raises:
        ValueError: the message starts with the config and the key to blame (an allocation
            that fails included).
    """
    from per_dqn.plan import allocation_failure
    from per_dqn.run import Trainer

    seen = set()
    for job in sweep.jobs:
        if job.env_id in seen:
            continue
        seen.add(job.env_id)
        config = _job_config(job)
        try:
            Trainer(config, job.config_name).close()
        except ValueError as exc:
            raise ValueError(f"{sweep.record['config']}: {exc}") from None
        except (MemoryError, RuntimeError) as exc:  # a replay memory or network too large
            line = allocation_failure(exc, config)
            if line is None:
                raise
            raise ValueError(f"{sweep.record['config']}: {line}") from None


def _job_config(job: Job) -> Config:
    label = f"{job.run_dir}/config.yaml"
    return validate_config(parse_yaml(job.config_yaml, label), label)


# --- running --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """How one run ended.

    Attributes:
        job: the run.
        final_return: its final evaluation's mean return (None unless it finished).
        wall_seconds: its wall time.
        interrupted: Ctrl-C stopped it.
        error: the exception that ended it, if one did.
    """

    job: Job
    final_return: float | None = None
    wall_seconds: float = 0.0
    interrupted: bool = False
    error: str | None = None


@dataclass
class SweepResult:
    """What ``run_sweep`` did.

    Attributes:
        skipped: runs already finished before this call.
        outcomes: one per run started, in the order they ended.
        interrupted: Ctrl-C stopped the sweep.
    """

    skipped: int = 0
    outcomes: list[Outcome] = field(default_factory=list)
    interrupted: bool = False

    @property
    def failed(self) -> list[Outcome]:
        """Runs that ended in an error."""
        return [o for o in self.outcomes if o.error is not None]


def _run_job(
    job: Job,
    out: Path,
    should_stop: Callable[[], bool] | None = None,
    callbacks: Sequence[Any] = (),
) -> Outcome:
    """Runs one job in this process, as ``per-dqn train --quiet`` would, holding its run dir's
    lock: a run with a usable checkpoint is resumed from it (``train --resume``), any other
    unfinished run dir is cleared and the run starts from zero. ``callbacks`` are the run's
    (``per_dqn.run.Callback``): the Ray backend's report its progress.

    Raises:
        RunDirInUse: another process writes the run dir.
    """
    from per_dqn import checkpoint as ckpt
    from per_dqn.run import Trainer

    config = _job_config(job)
    run_dir = out / job.run_dir
    with rundir.lock_run_dir(run_dir):
        summary = runs.read_summary(run_dir)
        if summary is not None and summary.get("interrupted") is False:
            # Finished by another command since this sweep was planned.
            return Outcome(job, summary["final_eval_return_mean"], summary["wall_seconds"])
        trainer = Trainer(config, job.config_name)
        try:
            found = ckpt.find_latest(ckpt.checkpoints_dir(run_dir))
            # A final checkpoint without a finished summary (killed between the two writes) is
            # not continued: that would evaluate a second time and score the run differently
            # from one never stopped.
            resumed = found.path is not None and not found.manifest.get("final")
            if resumed:
                try:
                    trainer.load_checkpoint(found.path)
                except ckpt.CheckpointError:
                    resumed = False
                    trainer.close()  # it may hold part of the checkpoint
                    trainer = Trainer(config, job.config_name)
            if not resumed:
                _clear_run_dir(run_dir)
            summary = trainer.run(run_dir, should_stop=should_stop, callbacks=callbacks)
        finally:
            trainer.close()
    return Outcome(
        job,
        final_return=summary["final_eval_return_mean"],
        wall_seconds=summary["wall_seconds"],
        interrupted=summary["interrupted"],
    )


def error_line(exc: BaseException) -> str:
    """An exception as one line, its type included: ``ValueError: train.lr: must be > 0``."""
    return " ".join("".join(traceback.format_exception_only(exc)).split())


def _clear_run_dir(run_dir: Path) -> None:
    """Deletes what an unfinished run left (its events would mix with the redo), lock aside."""
    import shutil

    for path in run_dir.iterdir():
        if path.name == rundir.LOCK_FILE:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


# Set in a worker by its first SIGINT or SIGTERM during a run; the run polls it between env steps.
_STOP_REQUESTED = False
# The sweep's process: a worker whose parent changes has lost it (it was reparented).
_PARENT_PID: int | None = None
# linux/prctl.h: deliver a signal to this process when the thread that created it exits.
_PR_SET_PDEATHSIG = 1


def _request_stop(signum: int, frame: Any) -> None:
    """Asks the run in progress to stop at its next env step; later SIGINTs are ignored (a
    terminal's Ctrl-C reaches a worker directly and again through the parent).

    Nothing is raised here: an exception thrown from a signal handler lands wherever the main
    thread happens to be, which can be inside a library holding a lock (TensorBoard's event
    writer, a queue), and the worker could then hang instead of writing its summary.
    """
    global _STOP_REQUESTED
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _STOP_REQUESTED = True


def _parent_is_gone() -> bool:
    return _PARENT_PID is not None and os.getppid() != _PARENT_PID


def _stop_requested() -> bool:
    # The getppid poll is the fallback where PR_SET_PDEATHSIG is missing: ~1 us a call (timeit
    # on the 2-core dev VM), next to the ~2 ms of a CartPole env step with learning.
    return _STOP_REQUESTED or _parent_is_gone()


def _die_with_parent(parent_pid: int) -> None:
    """Has the kernel send this process SIGTERM when its parent dies, however it dies.

    Linux only (``prctl``); elsewhere ``_stop_requested`` polls the parent's pid instead. A parent
    that died before the call is caught by that poll too.
    """
    global _PARENT_PID
    _PARENT_PID = parent_pid
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _worker(out: Path, jobs: Any, results: Any, stop: Any, parent_pid: int | None = None) -> None:
    """A worker process: runs jobs from ``jobs`` until a ``None``, ``stop`` is set, or the sweep's
    process (``parent_pid``) is gone.

    SIGINT is ignored between runs (the parent decides when the sweep stops) and, during one,
    asks ``Trainer.run`` to stop at its next env step, which it ends with a checkpoint and an
    interrupted summary. SIGTERM (also what the kernel sends when the parent dies) always asks
    for that stop, and between runs ends the worker.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _request_stop)
    if parent_pid is not None:
        _die_with_parent(parent_pid)
    while True:
        try:
            # A timeout, so that a worker left without its parent between runs notices.
            job = jobs.get(timeout=0.5)
        except queue.Empty:
            if _stop_requested():
                results.cancel_join_thread()  # nobody may be left to read it
                return
            continue
        if job is None or stop.is_set() or _stop_requested():
            return
        signal.signal(signal.SIGINT, _request_stop)
        try:
            outcome = _run_job(job, out, _stop_requested)
        except KeyboardInterrupt:
            outcome = Outcome(job, interrupted=True)
        except Exception as exc:
            outcome = Outcome(job, error=error_line(exc))
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        if _parent_is_gone():
            results.cancel_join_thread()
        results.put(outcome)
        if outcome.interrupted:
            return


def lock_sweep_dir(sweep: Sweep) -> rundir.RunDirLock:
    """Creates the sweep dir and takes its lock, so that a second ``ablate`` on the same dir is
    refused while this one runs (each run dir is locked by its worker as well).

    Raises:
        RunDirError: another process holds it, or it cannot be created.
    """
    lock = rundir.lock_run_dir(sweep.out, what="sweep dir")
    assert lock is not None  # created when absent
    return lock


def start_sweep(sweep: Sweep) -> tuple[SweepResult, list[Job]]:
    """What every backend does first: writes ``sweep.json`` (the record on disk grown by this
    plan) and lists the runs left to do; the finished ones count as skipped.

    Returns:
        A result holding the skipped count, and the unfinished jobs in the plan's order.
    """
    out = sweep.out
    out.mkdir(parents=True, exist_ok=True)
    # Read again under the sweep dir's lock: the record on disk is the one to grow.
    old = runs.read_sweep(out)
    record = sweep.record if old is None else merge_records(old, sweep.record)
    if old is None:
        record["provenance"] = provenance()
    elif len(record["runs"]) > len(old["runs"]):
        # Who grew the sweep, and by how many runs; each run's summary has its own provenance.
        grown = {"runs_added": len(record["runs"]) - len(old["runs"]), **provenance()}
        record["grown"] = [*old.get("grown", []), grown]
    if record != old:
        write_json(out / SWEEP_FILE, record)
    result = SweepResult()
    todo = []
    for job in sweep.jobs:
        if runs.is_finished(out / job.run_dir):
            result.skipped += 1
        else:
            todo.append(job)
    return result, todo


def run_sweep(
    sweep: Sweep, workers: int, on_outcome: Callable[[Outcome], None] | None = None
) -> SweepResult:
    """Writes ``sweep.json`` and runs the unfinished runs in worker processes, each resuming its
    run from its newest usable checkpoint when it has one.

    Args:
        sweep: from ``plan_sweep`` (whose checks this relies on).
        workers: processes at most (never more than there are runs to do).
        on_outcome: called in this process as each run ends.

    Returns:
        What ran; ``interrupted`` if Ctrl-C or SIGTERM stopped it (runs in progress checkpoint,
        keep an interrupted summary, and are resumed by the next call).
    """
    out = sweep.out
    result, todo = start_sweep(sweep)
    if not todo:
        return result

    ctx = mp.get_context("spawn")
    jobs, results, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
    # After Ctrl-C, jobs no worker took stay queued; exiting must not wait to flush them.
    jobs.cancel_join_thread()
    count = min(workers, len(todo))
    for job in todo:
        jobs.put(job)
    for _ in range(count):
        jobs.put(None)
    procs = [
        ctx.Process(target=_worker, args=(out, jobs, results, stop, os.getpid()))
        for _ in range(count)
    ]
    ended: set[str] = set()

    def record(outcome: Outcome) -> None:
        ended.add(outcome.job.run_dir)
        result.outcomes.append(outcome)
        if outcome.interrupted:
            result.interrupted = True
        if on_outcome is not None:
            on_outcome(outcome)

    try:
        for proc in procs:
            proc.start()
        while len(ended) < len(todo) and any(p.is_alive() for p in procs):
            try:
                record(results.get(timeout=0.5))
            except queue.Empty:
                pass
        # Results put just before a worker exited may still be in the pipe.
        while len(ended) < len(todo):
            try:
                record(results.get(timeout=0.5))
            except queue.Empty:
                break
    except KeyboardInterrupt:
        result.interrupted = True
        _stop_workers(procs, stop, results, record)
    finally:
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        jobs.close()
        results.close()
    if not result.interrupted:
        for job in todo:
            if job.run_dir not in ended:  # a worker died (killed, out of memory) mid-run
                record(Outcome(job, error="its worker process died without a result"))
    return result


def _stop_workers(procs: list, stop: Any, results: Any, record: Callable) -> None:
    """After Ctrl-C: no new runs; runs in progress are interrupted and write their summaries."""
    stop.set()
    # A terminal's Ctrl-C already reached the workers (same process group); a SIGINT sent to
    # this process alone did not, so pass it on. Idle workers ignore it.
    for proc in procs:
        if proc.is_alive() and proc.pid is not None:
            try:
                os.kill(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    try:
        while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
            try:
                record(results.get(timeout=0.2))
            except queue.Empty:
                pass
    except KeyboardInterrupt:
        pass  # a second Ctrl-C: stop waiting; the caller kills what is left
