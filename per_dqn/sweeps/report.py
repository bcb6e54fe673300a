"""Ablation reports, rebuilt from the run dirs alone: ``report.md``, ``scores.csv`` and figures.

A sweep dir (see ``per_dqn.sweeps.ablate``) holds one normal run dir per env x arm x seed, each
with the ``summary.json`` and TensorBoard event file that ``Trainer.run`` writes, and
``sweep.json`` naming the runs the sweep planned. Everything here is read back from those files
(by ``per_dqn.sweeps.runs``), so a report can be rewritten at any time (``per-dqn report DIR``),
also from a sweep that is still running or was interrupted: it says how many runs it used and
which are missing. A single run's dir is refused: a report compares arms over seeds. The same
run dirs give the same files, byte for byte: the bootstrap is seeded and the figures carry no
date.

What is measured per run (the rows of ``scores.csv``):

- the *final score*: the mean return of its final greedy evaluation (``final_eval_return_mean``);
- the *AUC*: ``summary.normalized_auc`` of its ``eval/return_mean`` curve, the area under the
  curve over the env steps it spans, i.e. its mean evaluation return over training, in return
  units. Two arms that end level but learn at different speeds differ here;
- *steps to threshold*: the first env step at which the curve reaches the env's threshold:
  gymnasium's ``reward_threshold`` (CartPole-v1: 475), or the value given with ``per-dqn report
  --threshold ENV_ID=VALUE`` (MinAtar's games have none);
- its *mean IS weight*: the mean of its logged ``per/is_weight_mean``, the factor by which PER's
  importance-sampling weights scale the step size on average.

What is reported per env and arm (Agarwal et al., 2021, "Deep RL at the edge of the statistical
precipice", whose estimators ``per_dqn.sweeps.stats`` implements and checks against rliable's):

- the IQM of the final scores and of the AUCs over seeds, each with a 95% stratified bootstrap
  confidence interval;
- steps to threshold as a median over seeds in which a seed that never reaches it counts as later
  than every seed that does, with the fraction of seeds that reached it;
- P(arm > uniform) of the final score and of the AUC: over paired seeds, the share on which the
  arm beats uniform, ties counting one half, with a paired bootstrap interval;
- the arm's mean IS weight, averaged over seeds (a dash where every weight is 1: uniform);
- a plain warning under every table with a cell of fewer than 5 runs: the bootstrap can only
  resample the runs there are, so the "95% interval" of 2 to 4 runs is little more than their
  range.

Across games (several envs, or Atari games), scores are first put on one scale, per game:

- a sweep of Atari games keeps the human-normalised score, ``(x - random) / (human - random)``
  with the published references (``per_dqn.atari_scores``);
- any other sweep (MinAtar, classic control, or a mix) is *min-max normalised within the sweep*:
  ``(x - lo) / (hi - lo)`` with ``lo`` and ``hi`` the lowest and highest value of that metric over
  every run of every arm on that game. Why: MinAtar has no published random and human reference
  scores to anchor a fixed scale, and the games' raw scales differ by an order of magnitude
  (Freeway ~ 60, Breakout ~ 15), so a raw IQM pooled over games would be the IQM of the
  high-scoring games. Min-max gives every game the same weight, is defined for any sign of return
  (a ratio to a baseline arm would not be) and privileges no arm; being an increasing map per game,
  it leaves every per-game comparison and the probability of improvement unchanged. The price: the
  scale is set by the runs in the sweep, so normalised values compare the arms of one report, not
  numbers across reports. A game on which every run scored the same carries no comparison and is
  left out, with a note.

On that scale: the aggregate IQM over games (runs resampled within each game), P(arm > uniform)
over seeds paired across games, and *performance profiles* (``profiles.png``/``.svg``): for each
tau, the fraction of runs x games with a normalised score above tau, with 95% stratified bootstrap
bands. ``curves.png``/``.svg`` draw the evaluation return against env steps, one panel per env, the
IQM over seeds of each arm with its 95% band.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from per_dqn import atari_scores
from per_dqn.fileio import write_bytes_atomic
from per_dqn.summary import normalized_auc
from per_dqn.sweeps import stats
from per_dqn.sweeps.runs import Run, SweepRuns, collect, settings_label
from per_dqn.tags import EVAL_RETURN_MEAN, PER_IS_WEIGHT_MEAN

REPORT_FILE = "report.md"
CURVES_FILE = "curves.png"
CURVES_SVG = "curves.svg"
PROFILES_FILE = "profiles.png"
PROFILES_SVG = "profiles.svg"
SENSITIVITY_FILE = "sensitivity.png"
SENSITIVITY_SVG = "sensitivity.svg"
SCORES_FILE = "scores.csv"
BASELINE_ARM = "uniform"
# The bootstrap is seeded so that the same run dirs always give the same report, byte for byte.
BOOTSTRAP_REPS = 2000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95
# Below this many runs a cell's bootstrap interval is little more than the runs' range.
MIN_RUNS = 5
FIGURE_DPI = 200
PROFILE_POINTS = 101
SCORES_COLUMNS = (
    "env_id", "arm", "seed", "final_return", "final_return_std", "final_eval_episodes", "auc",
    "threshold", "steps_to_threshold", "human_normalized", "is_weight_mean", "env_steps",
    "wall_seconds", "run_dir",
)  # fmt: skip
# The two per-run metrics every statistic is computed for, and how tables name them.
METRICS = {"final": "final score", "auc": "AUC"}
_ARM_COLORS = {"uniform": "#4c72b0", "proportional": "#dd8452", "rank": "#55a868"}


# --- thresholds -----------------------------------------------------------------------------------


def reward_threshold(env_id: str) -> float | None:
    """Gymnasium's ``reward_threshold`` for ``env_id`` (CartPole-v1: 475), None if it has none."""
    import gymnasium as gym

    try:
        threshold = gym.spec(env_id).reward_threshold
    except gym.error.Error:
        return None
    return None if threshold is None else float(threshold)


def parse_thresholds(items: Sequence[str]) -> dict[str, float]:
    """``--threshold ENV_ID=VALUE`` options as ``{env_id: value}``.

    Raises:
        ValueError: an item without ``=``, an empty env id, a value that is not a finite number,
            or an env id given twice; the message names the item.
    """
    out: dict[str, float] = {}
    for item in items:
        env_id, sep, text = item.partition("=")
        env_id, text = env_id.strip(), text.strip()
        if not sep or not env_id or not text:
            raise ValueError(
                f"--threshold {item!r}: expected ENV_ID=VALUE, e.g. MinAtar/Breakout-v1=10"
            )
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise ValueError(f"--threshold {item!r}: VALUE must be a finite number, got {text!r}")
        if env_id in out:
            raise ValueError(
                f"--threshold {env_id}: given twice ({out[env_id]:g} and {value:g}); give it once"
            )
        out[env_id] = value
    return out


def resolve_thresholds(sweep: SweepRuns, given: dict[str, float]) -> dict[str, float | None]:
    """Each env's threshold: the one given, else gymnasium's ``reward_threshold``, else None.

    Raises:
        ValueError: a threshold given for an env the sweep does not have.
    """
    for env_id in given:
        if env_id not in sweep.envs:
            raise ValueError(
                f"--threshold {env_id}: the sweep has no env {env_id} (its envs: "
                f"{', '.join(sweep.envs)})"
            )
    return {env: given[env] if env in given else reward_threshold(env) for env in sweep.envs}


def steps_to_threshold(curve: Sequence[tuple[int, float]], threshold: float) -> int | None:
    """The first env step whose value is >= ``threshold``; None if the curve never gets there."""
    for step, value in curve:
        if value >= threshold:
            return step
    return None


def censored_median(values: Sequence[int | None]) -> float:
    """Median of step counts where None means "never": it ranks after every number.

    ``inf`` when the median position falls on a "never" (half or more never got there), so
    the seeds that never reach a threshold cannot flatter the arm.
    """
    if not values:
        raise ValueError("values must not be empty")
    ordered = sorted(math.inf if v is None else float(v) for v in values)
    n = len(ordered)
    low, high = ordered[(n - 1) // 2], ordered[n // 2]
    return (low + high) / 2 if math.isfinite(high) else math.inf


# --- per run and per cell -------------------------------------------------------------------------


@dataclass(frozen=True)
class RunMetrics:
    """One run and what the report measures on it.

    Attributes:
        run: the run as read from its dir.
        final: its final score.
        auc: the normalised AUC of its evaluation curve (None if it logged no evaluation).
        threshold: the threshold of its env (None if the env has none).
        steps_to_threshold: the first env step its curve reached ``threshold`` (None if never).
    """

    run: Run
    final: float
    auc: float | None
    threshold: float | None
    steps_to_threshold: int | None

    def value(self, metric: str) -> float | None:
        """The run's ``metric`` (a key of ``METRICS``)."""
        return self.final if metric == "final" else self.auc


def measure(run: Run, threshold: float | None) -> RunMetrics:
    """The per-run metrics of ``run``.

    Raises:
        ValueError: its evaluation curve has no area (two points at one step), naming the run.
    """
    steps = None if threshold is None else steps_to_threshold(run.curve, threshold)
    try:
        auc = normalized_auc(run.curve) if run.curve else None
    except ValueError as exc:
        raise ValueError(f"run {run.path}: {EVAL_RETURN_MEAN}: {exc}") from None
    return RunMetrics(run, run.score, auc, threshold, steps)


CellKey = tuple[str, str]
Cells = dict[CellKey, list[RunMetrics]]


def cell_key(run: Run) -> CellKey:
    """The cell a run belongs to, ``(env_id, arm)``: the one place runs are grouped, so a richer
    arm label changes only this and the sweep's list of arms."""
    return (run.env_id, run.arm)


def group_cells(sweep: SweepRuns, measured: Sequence[RunMetrics]) -> Cells:
    """Every env x arm of the sweep (in sweep order) -> its runs, by seed; a cell may be empty."""
    cells: Cells = {(e, a): [] for e in sweep.envs for a in sweep.arms}
    for r in measured:
        cells.setdefault(cell_key(r.run), []).append(r)
    for runs in cells.values():
        runs.sort(key=lambda r: r.run.seed)
    return cells


def by_seed(runs: Sequence[RunMetrics], metric: str) -> dict[int, float]:
    """Seed -> ``metric`` of the runs that have it."""
    return {r.run.seed: v for r in runs if (v := r.value(metric)) is not None}


def baseline_arms(sweep: SweepRuns) -> dict[str, str | None]:
    """Arm -> the arm its P(> uniform) compares it with: the uniform arm at the same grid point
    (the one without settings of its own where there are several); None for a uniform arm, or
    where there is no such arm."""
    facts: dict[str, tuple[str, bool, tuple]] = {}  # arm -> (kind, has settings, grid point)
    for r in sweep.runs:
        facts.setdefault(r.arm, (r.kind or r.arm, bool(r.settings), r.point))
    uniform_at: dict[tuple, list[tuple[bool, str]]] = {}
    for arm, (kind, has_settings, point) in facts.items():
        if kind == BASELINE_ARM:
            uniform_at.setdefault(point, []).append((has_settings, arm))

    def pick(point: tuple) -> str | None:
        found = uniform_at.get(point, [])
        plain = [arm for has_settings, arm in found if not has_settings]
        return found[0][1] if len(found) == 1 else plain[0] if len(plain) == 1 else None

    return {
        arm: None if kind == BASELINE_ARM else pick(point)
        for arm, (kind, _, point) in facts.items()
    }


# --- statistics -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval."""

    value: float
    low: float
    high: float

    def format(self, digits: int) -> str:
        """``value [low, high]`` with ``digits`` decimals."""
        return f"{self.value:,.{digits}f} [{self.low:,.{digits}f}, {self.high:,.{digits}f}]"


def iqm_interval(scores: np.ndarray) -> Interval:
    """The IQM of ``(runs, tasks)`` scores with its 95% stratified bootstrap CI."""
    low, high = stats.stratified_bootstrap_ci(
        scores, stats.iqm, reps=BOOTSTRAP_REPS, confidence=CONFIDENCE, seed=BOOTSTRAP_SEED
    )
    return Interval(float(stats.iqm(scores)), low, high)


def improvement(x: np.ndarray, y: np.ndarray) -> Interval:
    """P(X > Y) over paired seeds (rows), with its paired bootstrap CI."""
    low, high = stats.paired_bootstrap_ci(
        x, y, reps=BOOTSTRAP_REPS, confidence=CONFIDENCE, seed=BOOTSTRAP_SEED
    )
    return Interval(stats.paired_probability_of_improvement(x, y), low, high)


def _improvement_cell(x: dict[int, Any], y: dict[int, Any]) -> str:
    """``P [low, high] (n pairs)`` over the seeds both have; ``n/a`` without a pair."""
    seeds = sorted(set(x) & set(y))
    if not seeds:
        return "n/a"
    a, b = np.array([x[s] for s in seeds]), np.array([y[s] for s in seeds])
    return f"{improvement(a, b).format(2)} ({len(seeds)} pair{'s' * (len(seeds) > 1)})"


def is_weight_cell(runs: Sequence[RunMetrics]) -> str:
    """The mean over seeds of each run's mean logged IS weight (3 significant digits); ``-`` if
    every one is exactly 1 (uniform sampling: no IS correction), ``n/a`` if none was logged."""
    weights = [r.run.is_weight_mean for r in runs if r.run.is_weight_mean is not None]
    if not weights:
        return "n/a"
    if all(w == 1.0 for w in weights):
        return "-"
    return f"{sum(weights) / len(weights):.3g}"


# --- normalisation across games -------------------------------------------------------------------


@dataclass(frozen=True)
class Normalization:
    """How scores of different games are put on one scale.

    Attributes:
        kind: ``"human"`` (Atari's human-normalised score) or ``"min-max"`` (within the sweep).
        bounds: ``(env_id, metric) -> (zero, one)``: the values mapped to 0 and 1; a game left
            out for a metric has no entry.
        notes: one sentence per game left out.
    """

    kind: str
    bounds: dict[tuple[str, str], tuple[float, float]]
    notes: tuple[str, ...]

    def envs(self, metric: str, envs: Sequence[str]) -> list[str]:
        """The envs of ``envs`` with a scale for ``metric``."""
        return [e for e in envs if (e, metric) in self.bounds]

    def apply(self, env_id: str, metric: str, value: float) -> float:
        """``value`` of ``metric`` on ``env_id``, normalised."""
        zero, one = self.bounds[(env_id, metric)]
        return (value - zero) / (one - zero)


def normalization(sweep: SweepRuns, cells: Cells) -> Normalization:
    """Human-normalised if every env is an Atari game with reference scores, else min-max
    normalised within the sweep (see the module docstring for why)."""
    games = [atari_scores.game_name(env) for env in sweep.envs]
    if all(g is not None for g in games):
        bounds = {
            (env, metric): atari_scores.RANDOM_HUMAN[game]
            for env, game in zip(sweep.envs, games, strict=True)
            if game is not None
            for metric in METRICS
        }
        return Normalization("human", bounds, ())
    bounds, notes = {}, []
    for env in sweep.envs:
        flat: dict[str, float] = {}  # label -> the one value every run has
        for metric, label in METRICS.items():
            values = [v for a in sweep.arms for v in by_seed(cells[(env, a)], metric).values()]
            if values and min(values) == max(values):
                flat[label] = values[0]
            elif values:
                bounds[(env, metric)] = (min(values), max(values))
        if flat:
            labels = " and ".join(flat)
            same = ", ".join(f"{label} {value:g}" for label, value in flat.items())
            notes.append(
                f"{env} is left out of the {labels} comparison: every run has the same value "
                f"({same}), so there is no range to normalise by."
            )
    return Normalization("min-max", bounds, tuple(notes))


def normalized_matrix(
    cells: Cells, norm: Normalization, envs: Sequence[str], arm: str,
    metric: str,
) -> dict[int, np.ndarray]:  # fmt: skip
    """Seed -> normalised ``metric`` over ``envs``, for the seeds that have it on every one."""
    per_env = [by_seed(cells[(env, arm)], metric) for env in envs]
    if not per_env:
        return {}
    seeds = sorted(set.intersection(*(set(s) for s in per_env)))
    return {
        seed: np.array(
            [norm.apply(env, metric, s[seed]) for env, s in zip(envs, per_env, strict=True)]
        )
        for seed in seeds
    }


# --- writing --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportFiles:
    """Where a report was written."""

    report: Path
    scores: Path
    curves: Path
    curves_svg: Path
    profiles: Path
    profiles_svg: Path
    sensitivity: Path | None = None
    sensitivity_svg: Path | None = None

    def __str__(self) -> str:
        paths = (self.report, self.scores, self.curves, self.curves_svg, self.profiles,
                 self.profiles_svg, self.sensitivity, self.sensitivity_svg)  # fmt: skip
        return ", ".join(str(p) for p in paths if p is not None)


def write_report(
    out: Path, thresholds: dict[str, float] | None = None, baseline: str | None = None
) -> ReportFiles:
    """Reads the sweep dir ``out`` and writes the report's files into it.

    Everything is computed before the first file is written, and each file replaces its old
    version atomically, so a refused or failed report leaves the old one whole.

    Args:
        out: the sweep dir.
        thresholds: ``{env_id: value}`` overriding or adding steps-to-threshold targets
            (``parse_thresholds``).
        baseline: the arm every other arm's P(>) is paired against, on the same env (None:
            uniform at the same grid point, ``baseline_arms``).

    Raises:
        ValueError: see ``collect``; a threshold for an env the sweep does not have; a
            baseline that is not one of the sweep's arms.
    """
    sweep = collect(out)
    if baseline is not None and baseline not in sweep.arms:
        raise ValueError(
            f"--baseline: {baseline!r} is not an arm of {out}; its arms are "
            + ", ".join(sweep.arms)
        )
    env_thresholds = resolve_thresholds(sweep, thresholds or {})
    cells = group_cells(sweep, [measure(r, env_thresholds[r.env_id]) for r in sweep.runs])
    measured = [r for runs in cells.values() for r in runs]  # by env, arm and seed
    norm = normalization(sweep, cells)
    files = ReportFiles(
        out / REPORT_FILE, out / SCORES_FILE, out / CURVES_FILE, out / CURVES_SVG,
        out / PROFILES_FILE, out / PROFILES_SVG,
    )  # fmt: skip
    contents = {
        files.scores: scores_csv(measured).encode("utf-8"),
        files.report: render_markdown(
            sweep, cells, env_thresholds, norm, thresholds or {}, baseline
        ).encode("utf-8"),
    }
    curves = plot_curves(sweep, cells, env_thresholds)
    profiles = plot_profiles(sweep, cells, norm)
    contents.update({files.curves: _figure_bytes(curves, "png"),
                     files.curves_svg: _figure_bytes(curves, "svg"),
                     files.profiles: _figure_bytes(profiles, "png"),
                     files.profiles_svg: _figure_bytes(profiles, "svg")})  # fmt: skip
    keys = sensitivity_keys(sweep)
    if keys:
        figure = plot_sensitivity(sweep, measured, keys)
        files = replace(files, sensitivity=out / SENSITIVITY_FILE,
                        sensitivity_svg=out / SENSITIVITY_SVG)  # fmt: skip
        contents[files.sensitivity] = _figure_bytes(figure, "png")
        contents[files.sensitivity_svg] = _figure_bytes(figure, "svg")
    for path, data in contents.items():
        write_bytes_atomic(path, data)
    return files


def scores_csv(measured: Sequence[RunMetrics]) -> str:
    """One row per finished run: its final score, AUC, steps to threshold, human-normalised
    score and mean IS weight."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(SCORES_COLUMNS)
    for r in measured:
        run = r.run
        hns = atari_scores.human_normalized(run.env_id, run.score)
        writer.writerow(
            [run.env_id, run.arm, run.seed, repr(run.score), repr(run.score_std),
             run.eval_episodes, _blank(r.auc), _blank(r.threshold),
             "" if r.steps_to_threshold is None else r.steps_to_threshold, _blank(hns),
             _blank(run.is_weight_mean), run.env_steps, f"{run.wall_seconds:.1f}", run.path]
        )  # fmt: skip
    return buffer.getvalue()


def _blank(value: float | None) -> str:
    return "" if value is None else repr(value)


def _seed_range(seeds: Sequence[int]) -> str:
    seeds = sorted(seeds)
    if not seeds:
        return "none"
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _steps_cell(steps: list[int | None]) -> str:
    reached = sum(s is not None for s in steps)
    median = censored_median(steps)
    where = f"{median:,.0f}" if math.isfinite(median) else "not reached"
    return f"{where} ({reached}/{len(steps)})"


def few_runs_warning(counts: dict[str, int], unit: str = "runs") -> list[str]:
    """A plain warning naming every arm with fewer than ``MIN_RUNS`` (but some) ``unit``."""
    few = [f"{arm} ({n})" for arm, n in counts.items() if 0 < n < MIN_RUNS]
    if not few:
        return []
    return [
        f"**Warning: fewer than {MIN_RUNS} {unit}** for {', '.join(few)}. A bootstrap can only "
        f"resample the {unit} there are, so with so few the 95% interval is little more than the "
        f"range of the {unit} (lowest to highest), not a confidence interval to draw a conclusion "
        "from; add seeds.",
        "",
    ]


def render_markdown(
    sweep: SweepRuns,
    cells: Cells,
    thresholds: dict[str, float | None],
    norm: Normalization,
    given: dict[str, float] | None = None,
    baseline: str | None = None,
) -> str:
    """The report: what was run, which runs are missing, one table per env, the comparison
    across games, the figures."""
    record = sweep.record or {}
    name = record.get("config_name") or "sweep"
    seeds = sorted({r.seed for r in sweep.runs})
    lines = [f"# Ablation report: {name}", ""]
    versus = baseline or BASELINE_ARM
    where = " on the same env" if baseline else " at the same grid point"
    if record:
        overrides = record.get("overrides") or []
        lines.append(
            f"- Sweep: config `{record.get('config')}`, overrides "
            + (", ".join(f"`{o}`" for o in overrides) if overrides else "none")
            + f"; {_steps_text(sweep)} env steps per run."
        )
        seeds = list(record.get("seeds", seeds))
        for arm, settings in (record.get("arm_settings") or {}).items():
            pairs = ", ".join(f"`{k}={json.dumps(v)}`" for k, v in settings.items())
            lines.append(f"- Arm `{arm}` sets {pairs}.")
        for key, values in (record.get("grid") or {}).items():
            listed = ", ".join(f"`{json.dumps(v)}`" for v in values)
            lines.append(f"- Grid: `{key}` takes {listed}, crossed with every arm.")
    lines += [
        f"- Arms: {', '.join(sweep.arms)}; seeds {_seed_range(seeds)}, paired (seed s gives every "
        "arm the same network initialisation and env seeds); envs: "
        + ", ".join(sweep.envs) + ".",
        f"- Runs used: {len(sweep.runs)}"
        + (f" of {sweep.expected} planned" if sweep.expected is not None else " (no sweep.json)")
        + "; missing: " + (", ".join(sweep.missing) if sweep.missing else "none") + ".",
        "",
        "Final score of a run: the mean return of its final greedy evaluation, at the last env "
        f"step. AUC: the area under its evaluation curve (`{EVAL_RETURN_MEAN}`) divided by the "
        "env steps the curve spans, its mean evaluation return over training. IQM: the "
        "interquartile mean over seeds. Brackets: 95% stratified bootstrap confidence intervals "
        f"({BOOTSTRAP_REPS:,} resamples, percentile method). P(> {versus}): the share of "
        f"paired seeds on which the arm beats {versus}{where} (ties count 1/2), with a paired "
        "bootstrap interval. IS weight: the mean over seeds of each run's "
        f"mean logged `{PER_IS_WEIGHT_MEAN}`, the average factor PER's importance-sampling "
        "weights put on the step size (- where every weight is 1: uniform sampling).",
        "",
    ]  # fmt: skip
    baselines = (
        {arm: None if arm == baseline else baseline for arm in sweep.arms}
        if baseline
        else baseline_arms(sweep)
    )
    for env in sweep.envs:
        lines += _env_table(
            sweep, cells, baselines, env, thresholds.get(env), (given or {}).get(env), versus
        )
    if len(sweep.envs) > 1 or norm.kind == "human":
        lines += _across_games_table(sweep, cells, baselines, norm, versus)
    measured = [r for runs in cells.values() for r in runs]
    for key in sensitivity_keys(sweep):
        lines += _sensitivity_table(sweep, measured, key)
    lines += [
        f"![evaluation return against env steps]({CURVES_FILE}) ([SVG]({CURVES_SVG}))",
        "",
        f"![performance profiles]({PROFILES_FILE}) ([SVG]({PROFILES_SVG})): for each tau, the "
        f"fraction of runs{' x games' * (len(sweep.envs) > 1)} whose "
        + _scale_name(norm)
        + " is above tau, with 95% stratified bootstrap bands.",
        "",
    ]
    return "\n".join(lines)


def _scale_name(norm: Normalization) -> str:
    return "human-normalised score" if norm.kind == "human" else "min-max normalised score"


def _steps_text(sweep: SweepRuns) -> str:
    steps = sorted({r.env_steps for r in sweep.runs})
    return " or ".join(f"{s:,}" for s in steps)


def _env_table(
    sweep: SweepRuns,
    cells: Cells,
    baselines: dict[str, str | None],
    env: str,
    threshold: float | None,
    given: float | None,
    versus: str = BASELINE_ARM,
) -> list[str]:
    compare = any(baselines.values())
    head = ["arm", "runs", "final score IQM", "AUC IQM"]
    if threshold is not None:
        head.append(f"steps to {threshold:g}")
    if compare:
        head += [f"P(> {versus}), final", f"P(> {versus}), AUC"]
    head.append("IS weight")
    lines = [f"## {env}", "", "| " + " | ".join(head) + " |"]
    lines.append("|---|" + "--:|" * (len(head) - 1))
    for arm in sweep.arms:
        runs = cells[(env, arm)]
        if not runs:
            lines.append("| " + " | ".join([arm, "0"] + ["n/a"] * (len(head) - 2)) + " |")
            continue
        row = [arm, str(len(runs))]
        for metric in METRICS:
            values = by_seed(runs, metric)
            row.append(iqm_interval(np.array(list(values.values()))).format(1) if values else "n/a")
        if threshold is not None:
            row.append(_steps_cell([r.steps_to_threshold for r in runs]))
        if compare:
            base = cells.get((env, baselines[arm])) if baselines.get(arm) else None
            for metric in METRICS:
                row.append(
                    "n/a" if base is None
                    else _improvement_cell(by_seed(runs, metric), by_seed(base, metric))
                )  # fmt: skip
        row.append(is_weight_cell(runs))
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines += few_runs_warning({arm: len(cells[(env, arm)]) for arm in sweep.arms})
    if threshold is not None:
        source = (
            "given with `--threshold`" if given is not None
            else f"gymnasium's reward threshold for {env}"
        )  # fmt: skip
        lines += [
            f"Steps to {threshold:g} ({source}): the first env step at which the run's evaluation "
            "return reaches it; median over seeds, a seed that never reaches it counting as later "
            'than any that does ("not reached" when half or more never do); (reached/runs).',
            "",
        ]
    return lines


def _across_games_table(
    sweep: SweepRuns,
    cells: Cells,
    baselines: dict[str, str | None],
    norm: Normalization,
    versus: str = BASELINE_ARM,
) -> list[str]:
    n = len(sweep.envs)
    if norm.kind == "human":
        title = f"## Human-normalised scores ({n} game{'s' * (n > 1)})"
        scale = (
            "(x - random) / (human - random) with the standard random and human reference "
            "scores, for the final score and the AUC alike"
        )
    else:
        title = f"## Across games: min-max normalised scores ({n} games)"
        scale = (
            "(x - lo) / (hi - lo) per game and metric, lo and hi the lowest and highest value of "
            "any run of any arm on that game in this sweep (no reference scores exist for these "
            "games; this gives every game the same weight, and compares the arms of this report, "
            "not numbers across reports)"
        )
    lines = [
        title,
        "",
        f"Scale: {scale}. Aggregates pool seeds x games, resampling seeds within each game; only "
        f"seeds finished on every game are used, and P(> {versus}) pairs them across games.",
        "",
        *[f"- {note}" for note in norm.notes],
        *([""] if norm.notes else []),
    ]
    matrices = {
        (arm, metric): normalized_matrix(cells, norm, norm.envs(metric, sweep.envs), arm, metric)
        for arm in sweep.arms
        for metric in METRICS
    }
    compare = any(baselines.values())
    head = ["arm", "seeds", "final score IQM", "AUC IQM"]
    if compare:
        head += [f"P(> {versus}), final", f"P(> {versus}), AUC"]
    lines += ["| " + " | ".join(head) + " |", "|---|" + "--:|" * (len(head) - 1)]
    for arm in sweep.arms:
        finals = matrices[(arm, "final")]
        row = [arm, str(len(finals))]
        for metric in METRICS:
            matrix = matrices[(arm, metric)]
            row.append(iqm_interval(np.stack(list(matrix.values()))).format(2) if matrix else "n/a")
        if compare:
            base = baselines.get(arm)
            for metric in METRICS:
                row.append(
                    "n/a" if base is None
                    else _improvement_cell(matrices[(arm, metric)], matrices[(base, metric)])
                )  # fmt: skip
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    lines += few_runs_warning({arm: len(matrices[(arm, "final")]) for arm in sweep.arms}, "seeds")
    return lines


# --- sensitivity to a grid key --------------------------------------------------------------------


def sensitivity_keys(sweep: SweepRuns) -> list[str]:
    """The grid keys with two or more numeric values among the finished runs, in grid order."""
    keys: dict[str, set[float]] = {}
    for run in sweep.runs:
        for key, value in run.point:
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            keys.setdefault(key, set())
            if numeric:
                keys[key].add(float(value))
            else:
                keys[key].add(float("nan"))  # one non-numeric value rules the key out
    return [k for k, values in keys.items()
            if len(values) >= 2 and not any(np.isnan(v) for v in values)]  # fmt: skip


def series_label(run: Run, key: str) -> str:
    """What a sensitivity curve holds fixed while ``key`` varies: the kind, the arm's settings
    and the other grid values (``rank/n=3``), without ``key``."""
    pairs = [*run.settings, *((k, v) for k, v in run.point if k != key)]
    return f"{run.kind}/{settings_label(pairs)}" if pairs else run.kind


def sensitivity(
    measured: Sequence[RunMetrics], env: str, key: str, metric: str
) -> dict[str, list[tuple[float, Interval, int]]]:
    """Series -> ``(value of key, IQM over seeds with its 95% CI, runs)`` by value, on ``env``."""
    groups: dict[str, dict[float, list[float]]] = {}
    for r in measured:
        point = dict(r.run.point)
        if r.run.env_id != env or key not in point or (v := r.value(metric)) is None:
            continue
        series = groups.setdefault(series_label(r.run, key), {})
        series.setdefault(float(point[key]), []).append(v)
    return {
        name: [(x, iqm_interval(np.array(ys)), len(ys)) for x, ys in sorted(by_x.items())]
        for name, by_x in groups.items()
    }


def _sensitivity_table(sweep: SweepRuns, measured: Sequence[RunMetrics], key: str) -> list[str]:
    lines = [
        f"## Sensitivity to `{key}`",
        "",
        f"Each row holds everything but `{key}` fixed (kind, the arm's settings, the other grid "
        f"values). IQM over seeds [95% CI]. Figure: [{SENSITIVITY_FILE}]({SENSITIVITY_FILE}) "
        f"([SVG]({SENSITIVITY_SVG})).",
        "",
    ]
    for env in sweep.envs:
        finals = sensitivity(measured, env, key, "final")
        aucs = sensitivity(measured, env, key, "auc")
        if not finals:
            continue
        lines += [f"### {env}", "", f"| series | {key} | runs | final score IQM | AUC IQM |",
                  "|---|--:|--:|--:|--:|"]  # fmt: skip
        for name, points in finals.items():
            auc_at = {x: interval for x, interval, _ in aucs.get(name, [])}
            for x, interval, n in points:
                auc = auc_at[x].format(1) if x in auc_at else "n/a"
                lines.append(f"| {name} | {x:g} | {n} | {interval.format(1)} | {auc} |")
        lines.append("")
    return lines


def plot_sensitivity(sweep: SweepRuns, measured: Sequence[RunMetrics], keys: Sequence[str]):
    """Final score and AUC against each numeric grid key, one row per env and key, one line per
    series (IQM over seeds with 95% CI bars), as the PER paper drew its alpha and beta sweeps."""
    rows = [(env, key) for key in keys for env in sweep.envs]
    fig = _new_figure(12.8, 4.2 * len(rows))
    axes = fig.subplots(len(rows), len(METRICS), squeeze=False)
    for (env, key), row in zip(rows, axes, strict=True):
        for ax, (metric, name) in zip(row, METRICS.items(), strict=True):
            for k, (series, points) in enumerate(sensitivity(measured, env, key, metric).items()):
                xs = np.array([x for x, _, _ in points])
                centre = np.array([i.value for _, i, _ in points])
                below = centre - np.array([i.low for _, i, _ in points])
                above = np.array([i.high for _, i, _ in points]) - centre
                ax.errorbar(xs, centre, yerr=np.stack((below, above)), marker="o", capsize=3,
                            color=_arm_color(series.split("/")[0], k), label=series)  # fmt: skip
            ax.set_title(f"{env}: {name} against {key}")
            ax.set_xlabel(key)
            ax.set_ylabel(f"{name} (IQM over seeds, 95% CI)")
            ax.grid(alpha=0.3)
            if ax.has_data():
                ax.legend(fontsize="small")
    return fig


# --- figures --------------------------------------------------------------------------------------


def _new_figure(width: float, height: float):
    # Imported here, and without pyplot: a report needs no GUI backend and no global figure
    # state, and the rest of the package never needs matplotlib at all.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _figure_bytes(fig, fmt: str) -> bytes:
    """The figure as PNG (``FIGURE_DPI``) or SVG bytes, the same bytes for the same figure."""
    import matplotlib

    buffer = io.BytesIO()
    # No date in either file, and SVG element ids from a fixed salt rather than random ones.
    with matplotlib.rc_context({"svg.hashsalt": "per-dqn-report"}):
        fig.savefig(buffer, format=fmt, dpi=FIGURE_DPI,
                    metadata={"Date": None} if fmt == "svg" else {"Software": None})  # fmt: skip
    return buffer.getvalue()


def curve_band(
    curves: Sequence[Sequence[tuple[int, float]]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Steps, IQM over seeds and its 95% bootstrap band, at each step any of the curves has.

    Returns:
        ``(steps, iqm, low, high)``; each step aggregates the curves that have a point there.
    """
    by_step: dict[int, list[float]] = {}
    for curve in curves:
        for step, value in curve:
            by_step.setdefault(step, []).append(value)
    steps = np.array(sorted(by_step), dtype=np.int64)
    centre, low, high = (np.empty(len(steps)) for _ in range(3))
    for i, step in enumerate(steps):
        values = np.array(by_step[int(step)])
        centre[i] = stats.iqm(values)
        low[i], high[i] = stats.stratified_bootstrap_ci(
            values, stats.iqm, reps=BOOTSTRAP_REPS, confidence=CONFIDENCE, seed=BOOTSTRAP_SEED
        )
    return steps, centre, low, high


def _arm_color(arm: str, k: int) -> str:
    return _ARM_COLORS.get(arm, f"C{k}")


def plot_curves(sweep: SweepRuns, cells: Cells, thresholds: dict[str, float | None]):
    """Evaluation return against env steps: one panel per env, one line per arm (IQM over
    seeds) with its 95% stratified bootstrap band; the threshold dashed."""
    fig = _new_figure(6.4 * len(sweep.envs), 4.2)
    axes = fig.subplots(1, len(sweep.envs), squeeze=False)[0]
    for ax, env in zip(axes, sweep.envs, strict=True):
        for k, arm in enumerate(sweep.arms):
            curves = [r.run.curve for r in cells[(env, arm)] if r.run.curve]
            if not curves:
                continue
            steps, centre, low, high = curve_band(curves)
            color = _arm_color(arm, k)
            ax.plot(steps, centre, marker="o", markersize=3, color=color,
                    label=f"{arm} ({len(curves)} seeds)")  # fmt: skip
            ax.fill_between(steps, low, high, color=color, alpha=0.2, linewidth=0)
        threshold = thresholds.get(env)
        if threshold is not None:
            ax.axhline(threshold, color="black", linestyle="--", linewidth=0.8,
                       label=f"threshold {threshold:g}")  # fmt: skip
        ax.set_title(env)
        ax.set_xlabel("env steps")
        ax.set_ylabel("evaluation return (IQM over seeds, 95% CI)")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
    return fig


def profile_taus(matrices: Sequence[np.ndarray]) -> np.ndarray:
    """``PROFILE_POINTS`` thresholds from min(0, lowest score) to the highest score."""
    values = np.concatenate([a.ravel() for a in matrices]) if matrices else np.zeros(1)
    lo, hi = min(0.0, float(values.min())), float(values.max())
    return np.linspace(lo, hi if hi > lo else lo + 1.0, PROFILE_POINTS)


def plot_profiles(sweep: SweepRuns, cells: Cells, norm: Normalization):
    """Performance profiles of the final score and the AUC on the normalised scale: per arm, the
    fraction of runs x games above each tau, with its 95% stratified bootstrap band."""
    fig = _new_figure(12.8, 4.2)
    axes = fig.subplots(1, len(METRICS), squeeze=False)[0]
    for ax, (metric, label) in zip(axes, METRICS.items(), strict=True):
        envs = norm.envs(metric, sweep.envs)
        matrices = {}
        for arm in sweep.arms:
            matrix = normalized_matrix(cells, norm, envs, arm, metric)
            if matrix:
                matrices[arm] = np.stack(list(matrix.values()))
        taus = profile_taus(list(matrices.values()))
        for k, arm in enumerate(sweep.arms):
            if arm not in matrices:
                continue
            profile, low, high = stats.performance_profile_bands(
                matrices[arm], taus, reps=BOOTSTRAP_REPS, confidence=CONFIDENCE,
                seed=BOOTSTRAP_SEED,
            )  # fmt: skip
            color = _arm_color(arm, k)
            ax.plot(taus, profile, color=color,
                    label=f"{arm} ({matrices[arm].shape[0]} seeds)")  # fmt: skip
            ax.fill_between(taus, low, high, color=color, alpha=0.2, linewidth=0)
        games = f"{len(envs)} game{'s' * (len(envs) != 1)}"
        ax.set_title(f"{label} ({games})")
        ax.set_xlabel(f"{_scale_name(norm)} tau")
        ax.set_ylabel("fraction of runs with score > tau")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        if matrices:
            ax.legend(loc="upper right", fontsize="small")
    return fig
