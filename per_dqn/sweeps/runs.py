"""Reading run dirs and sweep dirs back: summaries, eval curves, ``sweep.json`` and whole sweeps.

Run naming lives in ``naming``, the report's wording of what the runs hold in ``wording``.

Shared by the sweep runner (``per_dqn.sweeps.plan``: which runs are finished, what a sweep dir
already holds) and the report writer (``per_dqn.sweeps.report``: every finished run's score and
curve). It reads only what ``Trainer.run`` and ``ablate`` write (``summary.json``, the
TensorBoard event file, ``sweep.json``) and writes nothing, so a sweep can be read at any time,
also while it runs. No plotting and no statistics here: the runner must not pay for them.

A sweep dir may come from elsewhere (a shared disk, an archive) and be damaged: ``collect`` reads
it as far as it can. A run whose path leaves the sweep dir (``../``, an absolute path, a symlink
out), whose ``summary.json`` is not a regular file, not JSON or lacks a field the report needs,
or that does not match its ``sweep.json`` entry, or whose event file holds a record TensorBoard
cannot read (its curves would be cut short there), is skipped and named (``Skipped``); the others
are reported.

One module though past 500 lines: every run dir and sweep dir is read back here, with one set of
rules for what is damaged and skipped (``Skipped``), so that the runner and the report never
disagree on which runs a sweep holds.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from per_dqn.envs.families import game_package
from per_dqn.logs.metrics import flatten_config
from per_dqn.logs.tags import EPISODE_RETURN, EVAL_RETURN_MEAN, PER_IS_WEIGHT_MEAN
from per_dqn.memory import KINDS
from per_dqn.rundir import readback
from per_dqn.rundir.dirs import SWEEP_FILE
from per_dqn.rundir.summary import SESSIONS_KEY, read_sessions
from per_dqn.sweeps import events
from per_dqn.sweeps.record import FILLED, SweepRecord
from per_dqn.sweeps.wording import exploration_text

SUMMARY_FILE = "summary.json"
# What `per-dqn train` writes into a run dir first (its resolved config) and last (its summary):
# a dir holding either, and no sweep.json, is one training run, not a sweep.
RUN_DIR_FILES = ("config.yaml", SUMMARY_FILE)
# The replay kinds a sweep compares, in the order reports list them.
ARMS = KINDS  # the replay kinds, in report order (per_dqn.memory.KINDS: the one list)


def config_differences(old: Any, new: Any, unread: Iterable[str] = ()) -> list[str]:
    """``key: old -> new`` for each config key both have with different values, but the dotted
    keys in ``unread`` (keys the run does not read: a difference there changes nothing).

    A config key only one side has is not a difference: a newer per-dqn added it with a default
    that keeps the old behaviour, and refusing would strand every sweep across upgrades.
    """
    old_cfg, new_cfg = flatten_config(old or {}), flatten_config(new or {})
    skip = set(unread)
    return [
        f"{key}: {old_cfg[key]} -> {new_cfg[key]}"
        for key in sorted(set(old_cfg) & set(new_cfg))
        if old_cfg[key] != new_cfg[key] and key not in skip
    ]


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """The run's ``summary.json``, or None if it is absent or unreadable (a run cut short), or
    refused (``readback``: a link out of the run dir, a FIFO, too large, nested too deep)."""
    try:
        summary = readback.read_json(run_dir, SUMMARY_FILE, readback.KINDS["summary"])
    except readback.ReadBackError:
        return None
    return summary if isinstance(summary, dict) else None


def is_finished(run_dir: Path) -> bool:
    """True if the run completed: its summary exists and says ``interrupted: false``."""
    summary = read_summary(run_dir)
    return summary is not None and summary.get("interrupted") is False


def read_sweep(out: Path) -> dict[str, Any] | None:
    """The sweep's own record (``sweep.json``), or None if the dir has none.

    Raises:
        ValueError: the file exists but is refused (``readback``: a link out of the dir, a FIFO,
            too large, nested too deep), is not JSON, or not of ``SweepRecord``'s shape; one line.
    """
    try:
        record = readback.read_json(out, SWEEP_FILE, readback.KINDS["sweep"])
    except readback.ReadBackError as exc:
        if exc.missing:
            return None
        raise ValueError(f"cannot read the sweep record: {exc}") from None
    if not isinstance(record, dict) or not isinstance(record.get("runs"), list):
        raise ValueError(f"{out / SWEEP_FILE}: not a sweep record (no list of runs)")
    try:
        model = readback.validate(record, SweepRecord, out / SWEEP_FILE)
    except readback.ReadBackError as exc:
        raise ValueError(str(exc)) from None
    return {**record, **{key: getattr(model, key) for key in FILLED if key not in record}}


def read_curve(run_dir: Path, tag: str = EVAL_RETURN_MEAN) -> list[tuple[int, float]]:
    """``(env_step, value)`` points of one scalar tag from the run's event files, by step."""
    return read_curves(run_dir, (tag,))[tag]


class EventDataLoss(ValueError):
    """An event file that TensorBoard stops reading before its end (a record cut short or failing
    its CRC): the curves read from it would be cut short, silently.

    Attributes:
        path: the event file.
        reason: where the record is bad (cut short, or failing its CRC-32C check).
    """

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: damaged event file, read only up to a bad record ({reason})")
        self.path = path
        self.reason = reason


class EventFileRefused(ValueError):
    """A name in a run dir that TensorBoard's reader would open as an event file (any name holding
    ``tfevents``) but that ``readback`` refuses: a link out of the run dir, a FIFO (TensorBoard's
    open would block forever), a device, or a file over the event files' size cap.

    Attributes:
        path: the file.
        refused: the reader's refusal.
    """

    def __init__(self, path: Path, refused: readback.ReadBackError) -> None:
        super().__init__(str(refused))
        self.path = path
        self.refused = refused


def read_curves(run_dir: Path, tags: tuple[str, ...]) -> dict[str, list[tuple[int, float]]]:
    """``read_curve`` of several tags, reading the event files once (an empty list for a tag
    the run never logged).

    Raises:
        EventDataLoss: an event file holds a record TensorBoard cannot read (truncated, or failing
            its CRC): TensorBoard would show, and this would return, curves cut short there.
        EventFileRefused: a name TensorBoard would read as an event file is refused by
            ``readback`` (a FIFO hung ``archive``, a link out of the run dir): each is read
            through it, once.
    """

    def files() -> Iterator[tuple[Path, bytes]]:
        for name in _names(run_dir):
            if "tfevents" in name:  # what TensorBoard reads as an event file
                try:
                    data = readback.read_bytes(run_dir, name, readback.KINDS["events"])
                except readback.ReadBackError as exc:
                    raise EventFileRefused(run_dir / name, exc) from None
                yield run_dir / name, data

    try:
        curves = events.scalar_curves(files(), tags)
    except events.Damaged as exc:
        raise EventDataLoss(exc.path, exc.reason) from None
    return {tag: sorted(curves[tag]) for tag in tags}


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
        wall_seconds: wall time of the run's last session.
        curve: the ``eval/return_mean`` points, by env step.
        kind: its replay kind.
        settings: its arm's own settings, ``(dotted key, value)`` pairs.
        point: its grid values, ``(dotted key, value)`` pairs.
        is_weight_mean: the mean of its logged ``per/is_weight_mean`` points (the batches' mean
            IS weight), None if it logged none.
        train_returns: the ``episode/return`` points: each finished training episode's return
            at the env step it ended (what the literature's training curves are made of).
        game: the package and version of the game's code the run played, as its summary's
            provenance records them (``minatar 1.0.15``; ``Family.game_package``); None for
            other envs or where the summary does not say.
        exploration: its exploration after the decay, from its ``config.yaml``: ``epsilon 0.01
            from 250k`` (``exploration_text``); None where the config cannot be read.
        sessions: its sessions (its summary's ``wall_sessions``: the pack each trained in, and
            its seconds); None where the summary does not record them (from before the record,
            or resumed from a checkpoint that did not), or records them wrongly.
        pack: the run dirs of the pack its last session ran in, relative to the sweep dir and
            sorted (its summary's ``provenance.pack``); its own path alone for a run alone.
        resumed: whether its last session resumed a checkpoint.
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
    train_returns: tuple[tuple[int, float], ...] = ()
    game: str | None = None
    exploration: str | None = None
    sessions: tuple[tuple[str, float], ...] | None = None
    pack: tuple[str, ...] = ()
    resumed: bool = False


def _exploration(run_dir: Path) -> str | None:
    from per_dqn.config import ConfigError, parse_yaml

    try:
        text = readback.read_text(run_dir, "config.yaml", readback.KINDS["config"])
        config = parse_yaml(text, str(run_dir))
    except (readback.ReadBackError, ConfigError):
        return None
    train = config.get("train") if isinstance(config, dict) else None
    return exploration_text(train) if isinstance(train, dict) else None


def _sessions(summary: dict[str, Any]) -> tuple[tuple[str, float], ...] | None:
    """``Run.sessions``: a malformed record leaves the run's time unknown; its scores stand."""
    sessions = read_sessions(summary.get(SESSIONS_KEY))
    return None if sessions is None else tuple((s["pack"], s["seconds"]) for s in sessions)


def _pack(path: str, summary: dict[str, Any]) -> tuple[str, ...]:
    """``Run.pack``: the provenance's members (named relative to their common parent) joined to
    the part of ``path`` above the run's own member name; ``(path,)`` where the summary names no
    pack or none of its members is this run."""
    origin = summary.get("provenance")
    record = origin.get("pack") if isinstance(origin, dict) else None
    members = record.get("members") if isinstance(record, dict) else None
    if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
        return (path,)
    own = next((m for m in members if path == m or path.endswith("/" + m)), None)
    if own is None:
        return (path,)
    root = path[: len(path) - len(own)]
    return tuple(sorted(root + m for m in members))


def _game(env_id: str, summary: dict[str, Any]) -> str | None:
    """``Run.game`` from the summary's ``provenance.versions``."""
    name = game_package(env_id)
    found = (summary.get("provenance") or {}).get("versions") or {}
    version = found.get(name) if name is not None and isinstance(found, dict) else None
    return f"{name} {version}" if isinstance(version, str) else None


@dataclass(frozen=True)
class Skipped:
    """A run the report leaves out, and why.

    Attributes:
        path: the file to blame, relative to the sweep dir (``sweep.json``,
            ``uniform/s1/summary.json``; a run dir for what its event files hold).
        problem: what is wrong with it, one line.
    """

    path: str
    problem: str

    def line(self, out: Path) -> str:
        """``<out/path>: <problem>; run skipped``, the warning the CLI prints."""
        return f"{out / self.path}: {self.problem}; run skipped"

    def __str__(self) -> str:
        return f"{self.path} ({self.problem})"


class _Damaged(ValueError):
    """A file of one run that cannot be read as it should be; the run is skipped."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(problem)
        self.skipped = Skipped(path, problem)


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
        skipped: the runs left out because a file of theirs is damaged (``Skipped``).
    """

    out: Path
    record: dict[str, Any] | None
    envs: tuple[str, ...]
    arms: tuple[str, ...]
    runs: tuple[Run, ...]
    expected: int | None
    missing: tuple[str, ...]
    skipped: tuple[Skipped, ...] = ()


def _inside(out: Path, path: Path) -> bool:
    """True if ``path``, its symlinks followed, is ``out`` or below it."""
    try:
        Path(os.path.realpath(path)).relative_to(os.path.realpath(out))
    except ValueError:
        return False
    return True


def _names(directory: Path) -> list[str]:
    """The names in ``directory`` (none where it cannot be listed)."""
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def _damaged(name: str, exc: readback.ReadBackError) -> _Damaged:
    """A refused read as the skip the report names: a link out of the sweep dir and a file
    that is not a regular one in the words the report has always used, else the reader's."""
    if exc.reason == "outside":
        return _Damaged(name, "a symlink out of the sweep dir")
    if exc.reason == "special":
        return _Damaged(name, "not a regular file")
    return _Damaged(name, exc.problem)


def _rel(out: Path, path: Path) -> str:
    return path.relative_to(out).as_posix()


def _load_summary(out: Path, run_dir: Path) -> dict[str, Any] | None:
    """The run's ``summary.json``; None if it is absent (a run not started or cut short).

    Raises:
        _Damaged: it leaves the sweep dir, is not a regular file, is too big, or is not a JSON
            object (summaries are written whole, atomically: a broken one was damaged).
    """
    name = _rel(out, run_dir / SUMMARY_FILE)
    try:
        summary = readback.read_json(out, name, readback.KINDS["summary"])
    except readback.ReadBackError as exc:
        if exc.missing:
            return None
        raise _damaged(name, exc) from None
    if not isinstance(summary, dict):
        raise _Damaged(name, f"not a JSON object, got a {type(summary).__name__}")
    return summary


def _field(summary: dict[str, Any], key: str, kind: str, where: str) -> Any:
    """``summary[key]`` checked to be ``kind`` (``"str"``, ``"int"``, ``"number"``: finite).

    Raises:
        _Damaged: naming ``where`` (the summary's path), the key and the value.
    """
    if key not in summary:
        raise _Damaged(where, f"no {key!r}")
    value = summary[key]
    ok = (
        isinstance(value, str)
        if kind == "str"
        else isinstance(value, int) and not isinstance(value, bool)
        if kind == "int"
        else isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    )
    if not ok:
        expected = {"str": "a string", "int": "an integer", "number": "a finite number"}[kind]
        raise _Damaged(where, f"{key}: expected {expected}, got {value!r}")
    return value


def _read_run(
    out: Path, run_dir: Path, summary: dict[str, Any], planned: dict[str, Any] | None = None
) -> Run:
    """One finished run from its summary and event files.

    Raises:
        _Damaged: a field missing or of the wrong type, a summary that contradicts its
            ``sweep.json`` entry, or an event file that leaves the sweep dir or is not a regular
            file.
    """
    planned = planned or {}
    where = _rel(out, run_dir / SUMMARY_FILE)
    kind = _field(summary, "replay", "str", where)
    env_id = _field(summary, "env_id", "str", where)
    seed = _field(summary, "seed", "int", where)
    for key, value in (("env_id", env_id), ("seed", seed), ("kind", kind)):
        if key in planned and planned[key] != value:
            got = summary["replay" if key == "kind" else key]
            raise _Damaged(where, f"{key} {got!r}, but sweep.json plans {planned[key]!r} here")
    values = {
        "score": _field(summary, "final_eval_return_mean", "number", where),
        "score_std": _field(summary, "final_eval_return_std", "number", where),
        "eval_episodes": _field(summary, "final_eval_episodes", "int", where),
        "env_steps": _field(summary, "env_steps", "int", where),
        "wall_seconds": _field(summary, "wall_seconds", "number", where),
    }
    try:
        curves = read_curves(run_dir, (EVAL_RETURN_MEAN, PER_IS_WEIGHT_MEAN, EPISODE_RETURN))
    except EventFileRefused as exc:  # issue 43, E6: an `x.tfevents` link out, a FIFO, ...
        raise _damaged(_rel(out, exc.path), exc.refused) from None
    except EventDataLoss as exc:
        raise _Damaged(
            _rel(out, exc.path),
            f"damaged event file: TensorBoard stops reading it at a bad record ({exc.reason}), "
            "so its curves would be cut short",
        ) from None
    weights = [value for _, value in curves[PER_IS_WEIGHT_MEAN]]
    return Run(
        env_id=env_id,
        arm=str(planned.get("arm", kind)),
        seed=seed,
        path=_rel(out, run_dir),
        score=float(values["score"]),
        score_std=float(values["score_std"]),
        eval_episodes=values["eval_episodes"],
        env_steps=values["env_steps"],
        wall_seconds=float(values["wall_seconds"]),
        curve=tuple(curves[EVAL_RETURN_MEAN]),
        kind=kind,
        settings=tuple(planned.get("settings", {}).items()),
        point=tuple(planned.get("point", {}).items()),
        is_weight_mean=sum(weights) / len(weights) if weights else None,
        train_returns=tuple(curves[EPISODE_RETURN]),
        game=_game(env_id, summary),
        exploration=_exploration(run_dir),
        sessions=_sessions(summary),
        pack=_pack(_rel(out, run_dir), summary),
        resumed=summary.get("resumed_from_env_steps") is not None,
    )


def _planned_entry(out: Path, i: int, planned: Any, seen: set[str]) -> Path:
    """The run dir of ``sweep.json``'s ``runs[i]``, checked to lie inside ``out``.

    Raises:
        _Damaged: naming ``sweep.json``: an entry that is not an object, lacks a ``run_dir`` or
            ``arm``, has ``settings``/``point`` that are not objects, repeats a run dir, or has a
            run dir that leaves the sweep dir (``..``, an absolute path, a symlink out).
    """
    if not isinstance(planned, dict):
        raise _Damaged(SWEEP_FILE, f"runs[{i}]: not an object, got {planned!r}")
    run_dir = planned.get("run_dir")
    if not isinstance(run_dir, str) or not run_dir.strip():
        raise _Damaged(SWEEP_FILE, f"runs[{i}].run_dir: expected a path, got {run_dir!r}")
    if not isinstance(planned.get("arm"), str):
        raise _Damaged(SWEEP_FILE, f"runs[{i}].arm: expected a string, got {planned.get('arm')!r}")
    for key in ("settings", "point"):
        if not isinstance(planned.get(key, {}), dict):
            raise _Damaged(SWEEP_FILE, f"runs[{i}].{key}: expected an object")
    rel = PurePosixPath(run_dir)
    if rel.is_absolute() or ".." in rel.parts or not _inside(out, out / rel):
        raise _Damaged(SWEEP_FILE, f"runs[{i}].run_dir {run_dir!r} leaves the sweep dir")
    if rel.as_posix() in seen:
        raise _Damaged(SWEEP_FILE, f"runs[{i}].run_dir {run_dir!r} is listed twice")
    seen.add(rel.as_posix())
    return out / rel


def _why_missing(run_dir: Path, summary: dict[str, Any] | None) -> str:
    if not run_dir.exists():
        return "not run"
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


def _summary_dirs(out: Path) -> list[Path]:
    """The dirs below ``out`` that hold a ``summary.json``, found without recursion and to a
    bounded depth (``readback.walk``: a nest 1,200 dirs deep was a ``RecursionError``, issue 43,
    E9). A link is not entered, but one to a dir holding a summary is listed, to be skipped by
    name."""
    found = []
    for directory, files, others in readback.walk(out):
        if SUMMARY_FILE in files or SUMMARY_FILE in others:
            found.append(directory)
        for name in others:
            link = directory / name
            try:
                if link.is_symlink() and (link / SUMMARY_FILE).exists():
                    found.append(link)
            except OSError:  # a link to a name too long, a dir without permission: not a run
                continue
    return sorted(found)


def collect(
    out: Path,
    warn: Callable[[Skipped], None] | None = None,
    on_read: Callable[[int, int], None] | None = None,
) -> SweepRuns:
    """Reads every run of the sweep dir ``out``, as far as its files can be read.

    With a ``sweep.json`` the planned runs are read and the unfinished ones listed as missing;
    without one, every run dir below ``out`` that holds a ``summary.json`` is read. A run with a
    damaged file (see the module's docstring) is skipped: listed in ``SweepRuns.skipped`` and
    passed to ``warn`` as it is found. ``on_read`` is called with (runs looked at, runs to look
    at) before the first and after each one.

    Raises:
        ValueError: ``out`` is not a directory, is one training run's dir (see
            ``check_not_a_run_dir``), or holds no finished run that could be read.
    """
    if not out.is_dir():
        raise ValueError(f"sweep dir {out} does not exist or is not a directory")
    record = read_sweep(out)
    if record is None:
        check_not_a_run_dir(out)
    runs: list[Run] = []
    missing: list[str] = []
    skipped: list[Skipped] = []

    def skip(damaged: _Damaged) -> None:
        skipped.append(damaged.skipped)
        if warn is not None:
            warn(damaged.skipped)

    def read(run_dir: Path, name: str, planned: dict[str, Any] | None = None) -> None:
        try:
            summary = _load_summary(out, run_dir)
            if summary is not None and summary.get("interrupted") is False:
                runs.append(_read_run(out, run_dir, summary, planned))
            else:
                missing.append(f"{name} ({_why_missing(run_dir, summary)})")
        except _Damaged as damaged:
            skip(damaged)

    def looked_at(done: int, total: int) -> None:
        if on_read is not None:
            on_read(done, total)

    if record is not None:
        seen: set[str] = set()
        arms_planned: list[str] = []
        looked_at(0, len(record["runs"]))
        for i, planned in enumerate(record["runs"]):
            try:
                run_dir = _planned_entry(out, i, planned, seen)
            except _Damaged as damaged:
                skip(damaged)
            else:
                arms_planned.append(planned["arm"])
                read(run_dir, planned["run_dir"], planned)
            looked_at(i + 1, len(record["runs"]))
        given = record.get("envs")
        envs = (
            tuple(given)
            if isinstance(given, list) and all(isinstance(e, str) for e in given)
            else ()
        )
        # A run of an env the record does not list (a damaged list) still gets its table.
        envs += tuple(e for e in dict.fromkeys(r.env_id for r in runs) if e not in envs)
        # The cells in the order the sweep planned them (seed first: seed 0's runs list them all).
        arms = tuple(dict.fromkeys(arms_planned))
        expected: int | None = len(record["runs"])
    else:
        found = _summary_dirs(out)
        looked_at(0, len(found))
        for i, run_dir in enumerate(found, start=1):
            if not _inside(out, run_dir):  # through a symlinked dir
                skip(_Damaged(_rel(out, run_dir), "a symlink out of the sweep dir"))
            else:
                read(run_dir, _rel(out, run_dir))
            looked_at(i, len(found))
        envs = tuple(dict.fromkeys(r.env_id for r in runs))
        found = {r.arm for r in runs}
        arms = tuple(a for a in ARMS if a in found) + tuple(sorted(found - set(ARMS)))
        expected = None
    if not runs:
        if skipped:
            raise ValueError(
                f"sweep dir {out}: no run could be reported ({len(skipped)} skipped, "
                f"{len(missing)} not finished)"
            )
        raise ValueError(f"sweep dir {out} holds no finished run (a run dir with {SUMMARY_FILE})")
    seen_runs: dict[tuple[str, str, int], str] = {}
    for r in runs:
        key = (r.env_id, r.arm, r.seed)
        if key in seen_runs:
            raise ValueError(
                f"sweep dir {out}: runs {seen_runs[key]} and {r.path} are both {r.env_id} "
                f"{r.arm} seed {r.seed}; a report needs one run per env, arm and seed"
            )
        seen_runs[key] = r.path
    return SweepRuns(out, record, envs, arms, tuple(runs), expected, tuple(missing), tuple(skipped))
