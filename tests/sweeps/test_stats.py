"""Aggregate statistics against hand-computed cases."""

import numpy as np
import pytest

from per_dqn.sweeps import stats


def test_iqm_by_hand():
    # 8 scores: floor(8/4) = 2 cut from each end, mean of 3, 4, 5, 6
    assert stats.iqm([8, 1, 7, 2, 6, 3, 5, 4]) == 4.5
    # 10 scores: 2 cut from each end, mean of 3..8; an outlier does not move it
    assert stats.iqm([1, 2, 3, 4, 5, 6, 7, 8, 9, 1000]) == 5.5
    # pooled over tasks: (runs, tasks) = (2, 2) -> 4 scores, 1 cut per end
    assert stats.iqm([[0, 10], [2, 4]]) == 3.0


def test_mean_and_median():
    assert stats.mean([[1, 2], [3, 6]]) == 3.0
    assert stats.median([1, 9, 3]) == 3.0


def test_stratified_bootstrap_keeps_each_task_weight():
    """Task 0 scores 0, task 1 scores 10 on every run: any within-task resample has mean 5,
    while a bootstrap that mixed tasks would wander."""
    scores = np.array([[0.0, 10.0]] * 6)
    assert stats.stratified_bootstrap_ci(scores, stats.mean, reps=500) == (5.0, 5.0)


def test_bootstrap_ci_of_the_mean_matches_normal_theory():
    """For 400 N(0, 1) runs the 95% interval of the mean is about +-1.96/20 = +-0.098."""
    scores = np.random.default_rng(0).standard_normal(400)
    low, high = stats.stratified_bootstrap_ci(scores, stats.mean, reps=2000, seed=1)
    assert low < scores.mean() < high
    assert 0.8 * 0.196 < high - low < 1.2 * 0.196


def test_bootstrap_is_reproducible_for_a_seed():
    scores = np.arange(12.0).reshape(6, 2)
    a = stats.stratified_bootstrap_ci(scores, stats.iqm, reps=300, seed=3)
    assert a == stats.stratified_bootstrap_ci(scores, stats.iqm, reps=300, seed=3)


def test_paired_probability_of_improvement_by_hand():
    # seed-wise: 1>0 win, 2=2 tie, 3<5 loss, 4>1 win -> (1 + 0.5 + 0 + 1) / 4
    assert stats.paired_probability_of_improvement([1, 2, 3, 4], [0, 2, 5, 1]) == 0.625
    # averaged over tasks: task 0 all wins (1.0), task 1 all losses (0.0)
    assert stats.paired_probability_of_improvement([[1, 0], [1, 0]], [[0, 1], [0, 1]]) == 0.5


def test_paired_ci_brackets_the_estimate():
    rng = np.random.default_rng(0)
    y = rng.standard_normal(30)
    x = y + 0.5 + 0.5 * rng.standard_normal(30)
    p = stats.paired_probability_of_improvement(x, y)
    low, high = stats.paired_bootstrap_ci(x, y, reps=1000)
    assert low <= p <= high and 0.5 < low


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: stats.iqm([]), r"shape \(runs, tasks\), got \(0, 1\)"),
        (lambda: stats.mean([1.0, np.nan]), "finite"),
        (lambda: stats.paired_probability_of_improvement([1, 2], [1]), "same shape"),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()
