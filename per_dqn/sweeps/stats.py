"""Aggregate statistics for comparing replay arms across seeds (Agarwal et al., 2021).

Scores are arrays of shape ``(runs, tasks)``: one row per seed, one column per game (a single
column for a one-env sweep). Pure numpy.

- ``iqm``: the interquartile mean, the mean of the middle 50% of all runs x tasks scores (the
  ``scipy.stats.trim_mean(x, 0.25)`` convention: ``floor(n / 4)`` scores cut from each end).
- ``stratified_bootstrap_ci``: a percentile confidence interval from resampling runs with
  replacement *within each task* (the strata), so every task keeps its weight.
- ``paired_probability_of_improvement``: for paired seeds (same seed, same init and env seeds in
  every arm), the share of seeds on which arm X scores above arm Y, ties counting one half,
  averaged over tasks.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def _as_scores(scores) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim == 1:
        scores = scores[:, None]
    if scores.ndim != 2 or scores.shape[0] == 0 or scores.shape[1] == 0:
        raise ValueError(f"scores must have shape (runs, tasks), got {scores.shape}")
    if not np.isfinite(scores).all():
        raise ValueError("scores must be finite")
    return scores


def iqm(scores) -> float:
    """Interquartile mean over all runs and tasks."""
    flat = np.sort(_as_scores(scores), axis=None)
    cut = flat.size // 4
    return float(flat[cut : flat.size - cut].mean())


def mean(scores) -> float:
    """Mean over all runs and tasks."""
    return float(_as_scores(scores).mean())


def median(scores) -> float:
    """Median over all runs and tasks."""
    return float(np.median(_as_scores(scores)))


AGGREGATES: dict[str, Callable[[np.ndarray], float]] = {"iqm": iqm, "mean": mean, "median": median}


def stratified_bootstrap_ci(
    scores,
    statistic: Callable[[np.ndarray], float],
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile interval of ``statistic`` under a bootstrap that resamples runs per task.

    Args:
        scores: ``(runs, tasks)``.
        statistic: maps a ``(runs, tasks)`` array to a float.
        reps: bootstrap replicates.
        confidence: two-sided level, e.g. 0.95.
        seed: seed of the resampling, so a report is reproducible.
    """
    scores = _as_scores(scores)
    runs, tasks = scores.shape
    rng = np.random.default_rng(seed)
    # one index draw per (replicate, run, task): column j is resampled within itself
    picks = rng.integers(0, runs, size=(reps, runs, tasks))
    cols = np.arange(tasks)
    values = np.array([statistic(scores[p, cols]) for p in picks])
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)


def paired_probability_of_improvement(x, y) -> float:
    """P(X > Y) over paired seeds: mean over tasks of the share of seeds where x > y (ties 1/2).

    Args:
        x, y: ``(runs, tasks)`` with row ``s`` of both from seed ``s``.
    """
    x, y = _as_scores(x), _as_scores(y)
    if x.shape != y.shape:
        raise ValueError(f"paired scores must have the same shape, got {x.shape} and {y.shape}")
    wins = (x > y).astype(np.float64) + 0.5 * (x == y)
    return float(wins.mean(axis=0).mean())


def paired_bootstrap_ci(
    x, y, reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the paired probability of improvement, resampling seed pairs."""
    x, y = _as_scores(x), _as_scores(y)
    if x.shape != y.shape:
        raise ValueError(f"paired scores must have the same shape, got {x.shape} and {y.shape}")
    runs, tasks = x.shape
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, runs, size=(reps, runs, tasks))
    cols = np.arange(tasks)
    values = np.array([paired_probability_of_improvement(x[p, cols], y[p, cols]) for p in picks])
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(values, [tail, 1.0 - tail])
    return float(low), float(high)
