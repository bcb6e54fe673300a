"""Reading run dirs and sweep dirs back: summaries, eval curves, ``sweep.json`` and whole sweeps.

Shared by the sweep runner (``per_dqn.sweeps.plan``: which runs are finished, what a sweep dir
already holds) and the report writer (``per_dqn.sweeps.report``: every finished run's score and
curve). It reads only what ``Trainer.run`` and ``ablate`` write (``summary.json``, the
TensorBoard event file, ``sweep.json``) and writes nothing, so a sweep can be read at any time,
also while it runs. No plotting and no statistics here: the runner must not pay for them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from per_dqn.memory import KINDS
from per_dqn.rundir import SWEEP_FILE
from per_dqn.tags import EVAL_RETURN_MEAN, PER_IS_WEIGHT_MEAN

SUMMARY_FILE = "summary.json"
# What `per-dqn train` writes into a run dir first (its resolved config) and last (its summary):
# a dir holding either, and no sweep.json, is one training run, not a sweep.
RUN_DIR_FILES = ("config.yaml", SUMMARY_FILE)
# The replay kinds a sweep compares, in the order reports list them.
ARMS = KINDS  # the replay kinds, in report order (per_dqn.memory.KINDS: the one list)


# How a key appears in run dir names when its last part is not short enough; any other key
# appears as its last part (``replay.alpha`` -> ``alpha``), or whole if two keys of one run share
# that last part.
SHORT_KEYS = {"agent.n_step": "n", "agent.learning_rate": "lr"}


def format_value(value: Any) -> str:
    """A setting's value as run dir names show it: ``0.0001``, ``true``, ``[128,128]``, ``huber``;
    ``/`` becomes ``-`` so that the name stays one path component."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, float):
        text = repr(value)
    else:
        text = json.dumps(value, separators=(",", ":"))
    return text.replace("/", "-")


def short_keys(keys: Sequence[str]) -> dict[str, str]:
    """How each key of one run's label is written: ``SHORT_KEYS`` or its last part, the whole
    dotted key where two keys would read alike."""
    short = {k: SHORT_KEYS.get(k, k.rsplit(".", 1)[-1]) for k in keys}
    clashes = {s for s in short.values() if list(short.values()).count(s) > 1}
    return {k: (k if s in clashes else s) for k, s in short.items()}


def settings_label(pairs: Sequence[tuple[str, Any]]) -> str:
    """``[("replay.alpha", 0.4), ("agent.n_step", 3)]`` -> ``"alpha=0.4,n=3"``."""
    short = short_keys([k for k, _ in pairs])
    return ",".join(f"{short[k]}={format_value(v)}" for k, v in pairs)


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """The run's ``summary.json``, or None if it is absent or unreadable (a run cut short)."""
    try:
        summary = json.loads((run_dir / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def is_finished(run_dir: Path) -> bool:
    """True if the run completed: its summary exists and says ``interrupted: false``."""
    summary = read_summary(run_dir)
    return summary is not None and summary.get("interrupted") is False


def read_sweep(out: Path) -> dict[str, Any] | None:
    """The sweep's own record (``sweep.json``), or None if the dir has none.

    Raises:
        ValueError: the file exists but is not a JSON object.
    """
    path = out / SWEEP_FILE
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read the sweep record ({exc})") from None
    if not isinstance(record, dict) or not isinstance(record.get("runs"), list):
        raise ValueError(f"{path}: not a sweep record (no list of runs)")
    return record


def read_curve(run_dir: Path, tag: str = EVAL_RETURN_MEAN) -> list[tuple[int, float]]:
    """``(env_step, value)`` points of one scalar tag from the run's event files, by step."""
    return read_curves(run_dir, (tag,))[tag]


def read_curves(run_dir: Path, tags: tuple[str, ...]) -> dict[str, list[tuple[int, float]]]:
    """``read_curve`` of several tags, reading the event files once (an empty list for a tag
    the run never logged)."""
    # Imported here: tensorboard takes a second to import and a bad command line must not wait.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    # A resumed run's event file starts with the resume's purge_step, which drops what the run
    # logged after its last checkpoint (so that no step counts twice); TensorBoard warns of it as
    # an unexpected restart, once per resumed run. Here it is by design.
    tensorboard_log = logging.getLogger("tensorboard")
    level = tensorboard_log.level
    tensorboard_log.setLevel(logging.ERROR)
    try:
        events.Reload()
    finally:
        tensorboard_log.setLevel(level)
    logged = set(events.Tags()["scalars"])
    return {
        tag: sorted((int(e.step), float(e.value)) for e in events.Scalars(tag))
        if tag in logged
        else []
        for tag in tags
    }


@dataclass(frozen=True)
class Run:
    """One finished run, as read from its run dir.

    Attributes:
        env_id: the env it trained on.
        arm: its cell: the replay kind, then its arm's settings and grid values as its run dir
            names them (``proportional/alpha=0.4,n=3``); just the kind in a plain sweep.
        seed: its seed.
        path: its run dir relative to the sweep dir.
        score: the mean return of its final evaluation.
        score_std: the standard deviation of those returns.
        eval_episodes: episodes of the final evaluation.
        env_steps: env steps trained.
        wall_seconds: wall time of the run.
        curve: the ``eval/return_mean`` points, by env step.
        kind: its replay kind.
        settings: its arm's own settings, ``(dotted key, value)`` pairs.
        point: its grid values, ``(dotted key, value)`` pairs.
        is_weight_mean: the mean of its logged ``per/is_weight_mean`` points (the batches' mean
            IS weight), None if it logged none.
    """

    env_id: str
    arm: str
    seed: int
    path: str
    score: float
    score_std: float
    eval_episodes: int
    env_steps: int
    wall_seconds: float
    curve: tuple[tuple[int, float], ...]
    kind: str = ""
    settings: tuple[tuple[str, Any], ...] = ()
    point: tuple[tuple[str, Any], ...] = ()
    is_weight_mean: float | None = None


@dataclass(frozen=True)
class SweepRuns:
    """What a sweep dir holds: its finished runs and the planned runs it lacks.

    Attributes:
        out: the sweep dir.
        record: ``sweep.json`` (None for a dir of run dirs without one).
        envs: env ids in sweep order.
        arms: cells in sweep order: each arm (kind and settings) at each grid point, named as
            ``Run.arm`` names them.
        runs: the finished runs.
        expected: how many runs the sweep planned (None without a record).
        missing: ``"<run dir> (<why>)"`` for each planned run that is not finished.
    """

    out: Path
    record: dict[str, Any] | None
    envs: tuple[str, ...]
    arms: tuple[str, ...]
    runs: tuple[Run, ...]
    expected: int | None
    missing: tuple[str, ...]


def _read_run(
    out: Path, run_dir: Path, summary: dict[str, Any], planned: dict[str, Any] | None = None
) -> Run:
    planned = planned or {}
    kind = str(summary["replay"])
    curves = read_curves(run_dir, (EVAL_RETURN_MEAN, PER_IS_WEIGHT_MEAN))
    weights = [value for _, value in curves[PER_IS_WEIGHT_MEAN]]
    return Run(
        env_id=str(summary["env_id"]),
        arm=str(planned.get("arm", kind)),
        seed=int(summary["seed"]),
        path=run_dir.relative_to(out).as_posix(),
        score=float(summary["final_eval_return_mean"]),
        score_std=float(summary["final_eval_return_std"]),
        eval_episodes=int(summary["final_eval_episodes"]),
        env_steps=int(summary["env_steps"]),
        wall_seconds=float(summary["wall_seconds"]),
        curve=tuple(curves[EVAL_RETURN_MEAN]),
        kind=kind,
        settings=tuple(planned.get("settings", {}).items()),
        point=tuple(planned.get("point", {}).items()),
        is_weight_mean=sum(weights) / len(weights) if weights else None,
    )


def _why_missing(run_dir: Path) -> str:
    if not run_dir.exists():
        return "not run"
    summary = read_summary(run_dir)
    if summary is None:
        return "no summary: running or cut short"
    return "interrupted"


def check_not_a_run_dir(out: Path) -> None:
    """Refuses the dir of one training run where a sweep dir is expected.

    Without this, a run dir passed to ``per-dqn report`` read as a sweep of that one run and got
    a report with no statistics worth the name written into it, next to its model.

    Raises:
        ValueError: ``out`` holds a run's ``config.yaml`` or ``summary.json``.
    """
    found = [name for name in RUN_DIR_FILES if (out / name).is_file()]
    if not found:
        return
    # A run of a sweep sits two to four levels below it (<kind>/s<seed>, <kind>/<settings>/s<seed>,
    # <env>/<kind>/s<seed>, <env>/<kind>/<settings>/s<seed>).
    sweep = next((p for p in list(out.parents)[:4] if (p / SWEEP_FILE).is_file()), None)
    instead = (
        f"pass its sweep dir, {sweep}"
        if sweep is not None
        else f"pass the sweep dir that `per-dqn ablate` wrote (the one holding {SWEEP_FILE}), "
        "or a folder of run dirs"
    )
    raise ValueError(
        f"{out} is the run dir of one training run (it holds {found[0]}), not a sweep dir; "
        + instead
    )


def collect(out: Path) -> SweepRuns:
    """Reads every run of the sweep dir ``out``.

    With a ``sweep.json`` the planned runs are read and the unfinished ones listed as missing;
    without one, every run dir below ``out`` that holds a ``summary.json`` is read.

    Raises:
        ValueError: ``out`` is not a directory, is one training run's dir (see
            ``check_not_a_run_dir``), or holds no finished run.
    """
    if not out.is_dir():
        raise ValueError(f"sweep dir {out} does not exist or is not a directory")
    record = read_sweep(out)
    if record is None:
        check_not_a_run_dir(out)
    runs: list[Run] = []
    missing: list[str] = []
    if record is not None:
        for planned in record["runs"]:
            run_dir = out / planned["run_dir"]
            summary = read_summary(run_dir)
            if summary is not None and summary.get("interrupted") is False:
                runs.append(_read_run(out, run_dir, summary, planned))
            else:
                missing.append(f"{planned['run_dir']} ({_why_missing(run_dir)})")
        envs = tuple(record["envs"])
        # The cells in the order the sweep planned them (seed first: seed 0's runs list them all).
        arms = tuple(dict.fromkeys(str(planned["arm"]) for planned in record["runs"]))
        expected: int | None = len(record["runs"])
    else:
        for path in sorted(out.rglob(SUMMARY_FILE)):
            run_dir = path.parent
            summary = read_summary(run_dir)
            if summary is not None and summary.get("interrupted") is False:
                runs.append(_read_run(out, run_dir, summary))
            else:
                missing.append(f"{run_dir.relative_to(out).as_posix()} ({_why_missing(run_dir)})")
        envs = tuple(dict.fromkeys(r.env_id for r in runs))
        found = {r.arm for r in runs}
        arms = tuple(a for a in ARMS if a in found) + tuple(sorted(found - set(ARMS)))
        expected = None
    if not runs:
        raise ValueError(f"sweep dir {out} holds no finished run (a run dir with {SUMMARY_FILE})")
    seen: dict[tuple[str, str, int], str] = {}
    for r in runs:
        key = (r.env_id, r.arm, r.seed)
        if key in seen:
            raise ValueError(
                f"sweep dir {out}: runs {seen[key]} and {r.path} are both {r.env_id} {r.arm} "
                f"seed {r.seed}; a report needs one run per env, arm and seed"
            )
        seen[key] = r.path
    return SweepRuns(out, record, envs, arms, tuple(runs), expected, tuple(missing))
