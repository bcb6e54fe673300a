"""The report's numbers: each run measured, runs grouped into cells, scores put on one scale.

Everything ``per_dqn.sweeps.report`` writes is computed here from the runs that
``per_dqn.sweeps.runs`` reads; ``per_dqn.sweeps.markdown`` and ``per_dqn.sweeps.figures`` only
lay these numbers out. The estimators themselves (IQM, bootstrap, probability of improvement)
are ``per_dqn.sweeps.stats``; this module fixes their settings (seeded, so the same run dirs
always give the same numbers) and applies them to cells.

What is measured per run (the rows of ``scores.csv``):

- the *final score*: the mean return of its final evaluation (``final_eval_return_mean``);
- the *AUC*: ``summary.normalized_auc`` of its ``eval/return_mean`` curve, the area under the
  curve over the env steps it spans, i.e. its mean evaluation return over training, in return
  units. Two arms that end level but learn at different speeds differ here;
- *steps to threshold*: the first env step at which the curve reaches the env's threshold:
  gymnasium's ``reward_threshold`` (CartPole-v1: 475), or the value given with ``per-dqn report
  --threshold ENV_ID=VALUE`` (MinAtar's games have none);
- its *mean IS weight*: the mean of its logged ``per/is_weight_mean``, the factor by which PER's
  importance-sampling weights scale the step size on average;
- its *training returns as the literature reports them* (``published_measures``), beside the
  final score, from the returns of its training episodes (under exploration):
  the *EMA*: an exponential moving average over episodes, ``avg <- 0.99 avg + 0.01 G`` from 0, as
  the MinAtar paper's ``examples/dqn.py`` keeps it, at the run's end: the value after its last
  episode (what reducible-loss's `mean_scores.csv` takes, the last logged value; its binned curves
  hold the values logged at fixed steps, one a bin for its DQN); and the *last 100*: the mean
  return of its last 100 training episodes (the MinAtar paper's learning curves).

Runs are grouped into cells, one per env x arm (``cell_key``), and each arm is paired with the
uniform arm at its grid point (``baseline_arms``) for P(arm > uniform).

Across games (several envs, or Atari games), scores are first put on one scale, per game
(``normalization``):

- a sweep of Atari games keeps the human-normalised score, ``(x - random) / (human - random)``
  with the published references (``per_dqn.envs.atari_scores``);
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

Also here: the IQM over seeds at each value of a numeric grid key (``sensitivity``) and at each
step of the evaluation curves (``curve_band``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from per_dqn.envs import atari_scores
from per_dqn.logs.tags import EVAL_RETURN_MEAN
from per_dqn.rundir.summary import normalized_auc
from per_dqn.sweeps import stats
from per_dqn.sweeps.naming import settings_label
from per_dqn.sweeps.runs import Run, SweepRuns

BASELINE_ARM = "uniform"
# The bootstrap is seeded so that the same run dirs always give the same report, byte for byte.
BOOTSTRAP_REPS = 2000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95
# The two per-run metrics every statistic is computed for, and how tables name them.
METRICS = {"final": "final score", "auc": "AUC"}


# --- thresholds -----------------------------------------------------------------------------------


def reward_threshold(env_id: str) -> float | None:
    """Gymnasium's ``reward_threshold`` for ``env_id`` (CartPole-v1: 475), None if it has none."""
    import gymnasium as gym

    try:
        threshold = gym.spec(env_id).reward_threshold
    except gym.error.Error:
        return None
    return None if threshold is None else float(threshold)


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
        train_ema: its training returns' EMA at its end (``published_measures``; None without
            training episodes).
        train_last100: the mean return of its last 100 training episodes (None without any).
    """

    run: Run
    final: float
    auc: float | None
    threshold: float | None
    steps_to_threshold: int | None
    train_ema: float | None = None
    train_last100: float | None = None

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
    ema, last100 = published_measures(run.train_returns)
    return RunMetrics(run, run.score, auc, threshold, steps, ema, last100)


# The literature's training-return measures (``published_measures``).
TRAIN_EMA_DECAY = 0.99
TRAIN_LAST_EPISODES = 100


def train_return_ema(
    returns: Sequence[tuple[int, float]], decay: float = TRAIN_EMA_DECAY
) -> list[tuple[int, float]]:
    """The EMA over episodes of ``(env step, return)`` points, in order: after each episode,
    ``avg <- decay * avg + (1 - decay) * G``, from ``avg = 0`` (MinAtar's ``examples/dqn.py``)."""
    avg, out = 0.0, []
    for step, value in returns:
        avg = decay * avg + (1.0 - decay) * value
        out.append((step, avg))
    return out


def published_measures(
    returns: Sequence[tuple[int, float]],
) -> tuple[float | None, float | None]:
    """``(EMA, last 100)`` of a run's training-episode returns (see the module docstring): the
    EMA after its last episode, and the mean of its last 100 returns; None without episodes."""
    if not returns:
        return None, None
    last = [value for _, value in returns[-TRAIN_LAST_EPISODES:]]
    return train_return_ema(returns)[-1][1], sum(last) / len(last)


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


# --- intervals ------------------------------------------------------------------------------------


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

    @property
    def scale_name(self) -> str:
        """How tables and figure axes name the scale."""
        return "human-normalised score" if self.kind == "human" else "min-max normalised score"


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


# --- sensitivity to a grid key, curves over steps -------------------------------------------------


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
