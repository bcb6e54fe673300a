"""Aggregate statistics for comparing replay arms across seeds (Agarwal et al., 2021).

Scores are arrays of shape ``(runs, tasks)``: one row per seed, one column per game (a single
column for a one-env sweep). Every aggregate also takes a stack ``(..., runs, tasks)`` and
reduces the last two axes, so a bootstrap evaluates all its replicates in one call. Pure numpy.

- ``iqm``: the interquartile mean, the mean of the middle 50% of all runs x tasks scores, computed
  as ``scipy.stats.trim_mean(x, 0.25, axis=None)`` computes it (``floor(n / 4)`` scores cut from
  each end, the middle selected by ``np.partition``), which is rliable's ``aggregate_iqm``: the
  same value to the last bit (``tests/sweeps/test_stats.py`` checks it).
- ``stratified_bootstrap`` / ``stratified_bootstrap_ci``: a percentile confidence interval from
  resampling runs with replacement *within each task* (the strata), so every task keeps its
  weight: rliable's ``StratifiedBootstrap``, drawn from a seeded ``numpy.random.Generator`` (rliable
  draws from numpy's global RNG), so a report is reproducible.
- ``paired_probability_of_improvement``: for paired seeds (same seed, same init and env seeds in
  every arm), the share of seeds on which arm X scores above arm Y, ties counting one half,
  averaged over tasks. Its interval resamples seed *pairs* (``paired_bootstrap_ci``). This is
  what reports show: the pairing removes the seed-to-seed variance both arms share.
- ``probability_of_improvement``: the unpaired form, rliable's: per task the Mann-Whitney U
  statistic of X against Y over every (x run, y run) pair, divided by the number of pairs (ties
  1/2), averaged over tasks. Its interval resamples X's and Y's runs independently
  (``independent_bootstrap_ci``, rliable's ``StratifiedIndependentBootstrap``).
- ``Estimate``: a mean, or a difference of independent means, with a Student-t interval (Welch's
  for a difference): the interval a source's published means, sds and seed counts allow, where
  no run can be resampled, and the same kind of interval for the runs' own paired differences,
  so the two can be set side by side. ``t_quantile`` is Student's t quantile (``scipy.stats.t.ppf``,
  which the tests check it against).
- ``performance_profile``: the fraction of all runs x tasks scores strictly above each threshold
  tau (rliable's ``create_performance_profile`` with score distributions), with stratified
  bootstrap bands (``performance_profile_bands``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# A statistic maps scores (..., runs, tasks) to (...): one value per stacked score matrix.
Statistic = Callable[[np.ndarray], "float | np.ndarray"]


def _as_scores(scores) -> np.ndarray:
    """Validated ``(runs, tasks)`` scores as float64; a 1-D array is one task's runs."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim == 1:
        scores = scores[:, None]
    if scores.ndim != 2 or scores.shape[0] == 0 or scores.shape[1] == 0:
        raise ValueError(f"scores must have shape (runs, tasks), got {scores.shape}")
    if not np.isfinite(scores).all():
        raise ValueError(f"scores must be finite, got {scores.ravel().tolist()}")
    return scores


def _stack(scores) -> np.ndarray:
    """``(..., runs, tasks)`` as float64: one matrix (validated) or a stack of them."""
    array = np.asarray(scores, dtype=np.float64)
    return array if array.ndim > 2 else _as_scores(array)


def _reduce(value: np.ndarray) -> float | np.ndarray:
    return float(value) if np.ndim(value) == 0 else value


def iqm(scores) -> float | np.ndarray:
    """Interquartile mean over all runs and tasks (``scipy.stats.trim_mean(x, 0.25)``)."""
    array = _stack(scores)
    flat = array.reshape(*array.shape[:-2], -1)
    n = flat.shape[-1]
    cut = int(0.25 * n)
    # trim_mean's own steps (partition, then the mean of the middle slice), not a sort: a sort
    # orders the middle differently and the sum can differ from rliable's in the last bit.
    middle = np.partition(flat, (cut, n - cut - 1), axis=-1)[..., cut : n - cut]
    return _reduce(np.mean(middle, axis=-1))


def mean(scores) -> float | np.ndarray:
    """Mean over all runs and tasks."""
    return _reduce(_stack(scores).mean(axis=(-2, -1)))


def median(scores) -> float | np.ndarray:
    """Median over all runs and tasks."""
    array = _stack(scores)
    return _reduce(np.median(array.reshape(*array.shape[:-2], -1), axis=-1))


AGGREGATES: dict[str, Statistic] = {"iqm": iqm, "mean": mean, "median": median}


def _check_reps(reps: int) -> None:
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _resample_indices(rng: np.random.Generator, runs: int, tasks: int, reps: int) -> np.ndarray:
    """``(reps, runs, tasks)`` run indices: column j of a replicate draws from task j's runs."""
    return rng.integers(0, runs, size=(reps, runs, tasks))


def percentile_interval(values, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """The two-sided percentile interval of bootstrap ``values`` (replicates on axis 0).

    ``np.quantile``'s linear interpolation, which is ``np.percentile``'s, the one arch (and so
    rliable) uses for its percentile method.
    """
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(np.asarray(values, dtype=np.float64), [tail, 1.0 - tail], axis=0)
    return low, high


def stratified_bootstrap(scores, statistic: Statistic, reps: int = 2000, seed: int = 0):
    """``statistic`` of ``reps`` stratified resamples of ``scores``: runs drawn with
    replacement within each task.

    Args:
        scores: ``(runs, tasks)``.
        statistic: maps ``(reps, runs, tasks)`` to ``(reps, ...)`` (every aggregate here does).
        reps: bootstrap replicates.
        seed: seed of the resampling.

    Returns:
        The replicates, ``(reps, ...)``.
    """
    scores = _as_scores(scores)
    _check_reps(reps)
    runs, tasks = scores.shape
    picks = _resample_indices(np.random.default_rng(seed), runs, tasks, reps)
    return np.asarray(statistic(scores[picks, np.arange(tasks)]), dtype=np.float64)


def stratified_bootstrap_ci(
    scores,
    statistic: Statistic,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile interval of ``statistic`` under a bootstrap that resamples runs per task.

    Args:
        scores: ``(runs, tasks)``.
        statistic: maps ``(reps, runs, tasks)`` to ``(reps,)`` (``iqm``, ``mean``, ``median``).
        reps: bootstrap replicates.
        confidence: two-sided level, e.g. 0.95.
        seed: seed of the resampling, so a report is reproducible.
    """
    _check_confidence(confidence)
    low, high = percentile_interval(stratified_bootstrap(scores, statistic, reps, seed), confidence)
    return float(low), float(high)


# --- probability of improvement -------------------------------------------------------------------


def _paired(x, y) -> tuple[np.ndarray, np.ndarray]:
    x, y = _as_scores(x), _as_scores(y)
    if x.shape != y.shape:
        raise ValueError(f"paired scores must have the same shape, got {x.shape} and {y.shape}")
    return x, y


def _wins(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """1 where x > y, 1/2 where they tie, 0 where x < y."""
    return (x > y).astype(np.float64) + 0.5 * (x == y)


def paired_probability_of_improvement(x, y) -> float:
    """P(X > Y) over paired seeds: mean over tasks of the share of seeds where x > y (ties 1/2).

    Args:
        x, y: ``(runs, tasks)`` with row ``s`` of both from seed ``s``.
    """
    x, y = _paired(x, y)
    return float(_wins(x, y).mean(axis=0).mean())


def paired_bootstrap_ci(
    x, y, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the paired probability of improvement, resampling seed pairs
    within each task (a pair stays a pair)."""
    x, y = _paired(x, y)
    _check_confidence(confidence)
    # Resampling pairs is resampling the per-pair outcomes.
    values = stratified_bootstrap(_wins(x, y), mean, reps, seed)
    low, high = percentile_interval(values, confidence)
    return float(low), float(high)


def _improvement_per_task(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``(..., tasks)``: the Mann-Whitney U of x over y per task, over the number of pairs.

    Args:
        x: ``(..., runs_x, tasks)``; y: ``(..., runs_y, tasks)``.
    """
    # U = #{(i, j): x_i > y_j} + #{ties} / 2, by counting every pair. The count is a
    # half-integer, exact in float64, as is scipy's rank-sum form R_x - n_x (n_x + 1) / 2 that
    # rliable calls, so the two agree to the last bit.
    pairs = x[..., :, None, :] - y[..., None, :, :]
    u = (pairs > 0).sum(axis=(-3, -2)) + 0.5 * (pairs == 0).sum(axis=(-3, -2))
    return u / (x.shape[-2] * y.shape[-2])


def probability_of_improvement(x, y) -> float:
    """Unpaired P(X > Y) (rliable's ``probability_of_improvement``): per task, the probability
    that a random run of X beats a random run of Y (ties 1/2), averaged over tasks.

    Args:
        x: ``(runs_x, tasks)``; y: ``(runs_y, tasks)``; the run counts may differ.
    """
    x, y = _as_scores(x), _as_scores(y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"scores must have the same tasks, got {x.shape} and {y.shape}")
    return float(np.mean(_improvement_per_task(x, y)))


def independent_bootstrap_ci(
    x, y, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the unpaired ``probability_of_improvement``: X's runs and Y's
    runs resampled independently, each within each task."""
    x, y = _as_scores(x), _as_scores(y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"scores must have the same tasks, got {x.shape} and {y.shape}")
    _check_confidence(confidence)
    _check_reps(reps)
    rng = np.random.default_rng(seed)
    tasks = np.arange(x.shape[1])
    x_picks = _resample_indices(rng, x.shape[0], x.shape[1], reps)
    y_picks = _resample_indices(rng, y.shape[0], y.shape[1], reps)
    # In chunks of replicates: one chunk compares every pair of runs, (chunk, nx, ny, tasks).
    chunk = max(1, 2**22 // (x.shape[0] * y.shape[0] * x.shape[1]))
    values = np.concatenate([
        _improvement_per_task(x[x_picks[i : i + chunk], tasks], y[y_picks[i : i + chunk], tasks])
        .mean(axis=-1)
        for i in range(0, reps, chunk)
    ])  # fmt: skip
    low, high = percentile_interval(values, confidence)
    return float(low), float(high)


# --- performance profiles -------------------------------------------------------------------------


def _profile(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """``(..., len(taus))``: the share of the runs x tasks scores strictly above each tau."""
    return (scores[..., None] > taus).mean(axis=(-3, -2))


def performance_profile(scores, taus) -> np.ndarray:
    """The score distribution: for each ``tau``, the fraction of all runs x tasks with a score
    strictly above it (rliable's run-score profile)."""
    return _profile(_as_scores(scores), np.asarray(taus, dtype=np.float64))


def performance_profile_bands(
    scores, taus, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The profile and its pointwise percentile band under the stratified bootstrap.

    Returns:
        ``(profile, low, high)``, each ``(len(taus),)``.
    """
    taus = np.asarray(taus, dtype=np.float64)
    _check_confidence(confidence)
    values = stratified_bootstrap(scores, lambda s: _profile(s, taus), reps, seed)
    low, high = percentile_interval(values, confidence)
    return performance_profile(scores, taus), low, high


# --- Student-t intervals -------------------------------------------------------------------------


def _incomplete_beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta function (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float, y: float) -> float:
    """``I_x(a, b)``, the regularised incomplete beta function, for ``0 <= x <= 1``; ``y`` is
    ``1 - x``, passed as computed without cancellation."""
    if x <= 0.0 or y <= 0.0:
        return 0.0 if x <= 0.0 else 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log(y))  # fmt: skip
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _incomplete_beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _incomplete_beta_fraction(b, a, y) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function with ``df`` (> 0, not necessarily whole) degrees of
    freedom."""
    x, y = df / (df + t * t), t * t / (df + t * t)
    # The tail beyond |t| is I_x(df / 2, 1 / 2) / 2; near t = 0, its complement I_y(1 / 2, df / 2)
    # keeps the digits that 1 - I_x would lose.
    if y < 0.5:
        tail = 0.5 * (1.0 - _incomplete_beta(0.5, df / 2.0, y, x))
    else:
        tail = 0.5 * _incomplete_beta(df / 2.0, 0.5, x, y)
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile: the ``t`` with ``t_cdf(t, df) == p``, by bisection (to 1e-12)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"a quantile's probability must be in (0, 1), got {p}")
    if not df > 0.0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        low, high = high, 2.0 * high
    while high - low > 1e-12 * max(1.0, high):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if t_cdf(middle, df) < p else (low, middle)
    return 0.5 * (low + high)


@dataclass(frozen=True)
class Estimate:
    """A mean, or a difference of independent means (``a - b``), with what its interval needs:
    the squared standard error and the degrees of freedom of each independent sample in it."""

    value: float
    parts: tuple[tuple[float, float], ...]

    @classmethod
    def of_mean(cls, mean: float, sd: float, n: int) -> Estimate:
        """A mean of ``n`` (>= 2) values whose sample sd is ``sd``: standard error
        ``sd / sqrt(n)``, ``n - 1`` degrees of freedom."""
        if n < 2 or not sd >= 0.0:
            raise ValueError(f"a mean's interval needs n >= 2 and sd >= 0, got n {n}, sd {sd}")
        return cls(float(mean), ((sd * sd / n, n - 1.0),))

    @classmethod
    def of_sample(cls, values: Sequence[float]) -> Estimate:
        """The mean of ``values`` (for paired runs: their per-pair differences)."""
        array = np.asarray(values, dtype=np.float64)
        if array.ndim != 1 or array.size < 2 or not np.isfinite(array).all():
            raise ValueError(f"a sample needs 2 or more finite values, got {array.tolist()}")
        return cls.of_mean(float(array.mean()), float(array.std(ddof=1)), array.size)

    def __sub__(self, other: Estimate) -> Estimate:
        return Estimate(self.value - other.value, self.parts + other.parts)

    @property
    def standard_error(self) -> float:
        return math.sqrt(sum(variance for variance, _ in self.parts))

    @property
    def df(self) -> float:
        """Welch-Satterthwaite's degrees of freedom (one part's own for a single mean)."""
        denominator = sum(variance**2 / df for variance, df in self.parts)
        return self.standard_error**4 / denominator if denominator > 0 else math.inf

    def interval(self, confidence: float = 0.95) -> tuple[float, float]:
        """``value +- t * standard_error``, ``t`` the ``(1 + confidence) / 2`` quantile of
        Student's t with ``df`` degrees of freedom: the one-sample t interval for a mean, Welch's
        for a difference of two."""
        _check_confidence(confidence)
        se = self.standard_error
        if se == 0.0:
            return self.value, self.value
        half = t_quantile((1.0 + confidence) / 2.0, self.df) * se
        return self.value - half, self.value + half
