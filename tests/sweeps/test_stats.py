"""Aggregate statistics against hand-computed cases and against rliable's own implementation
(Agarwal et al., 2021), run on the same inputs; the Student-t intervals against scipy's."""

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from rliable import library as rly
from rliable import metrics as rly_metrics
from scipy import stats as scipy_stats

from per_dqn.sweeps import stats


def test_iqm_by_hand():
    # 8 scores: floor(8/4) = 2 cut from each end, mean of 3, 4, 5, 6
    assert stats.iqm([8, 1, 7, 2, 6, 3, 5, 4]) == 4.5
    # 10 scores: 2 cut from each end, mean of 3..8; an outlier does not move it
    assert stats.iqm([1, 2, 3, 4, 5, 6, 7, 8, 9, 1000]) == 5.5
    # pooled over tasks: (runs, tasks) = (2, 2) -> 4 scores, 1 cut per end
    assert stats.iqm([[0, 10], [2, 4]]) == 3.0
    # fewer than 4 scores: nothing is cut
    assert stats.iqm([1, 2, 6]) == 3.0


def test_mean_and_median():
    assert stats.mean([[1, 2], [3, 6]]) == 3.0
    assert stats.median([1, 9, 3]) == 3.0


def test_aggregates_reduce_a_stack_of_score_matrices():
    """A bootstrap passes (reps, runs, tasks) at once: each matrix gets its own value."""
    stack = np.array([[[8, 1], [7, 2], [6, 3], [5, 4]], [[0, 10], [2, 4], [2, 4], [2, 4]]], float)
    for statistic in stats.AGGREGATES.values():
        np.testing.assert_array_equal(statistic(stack), [statistic(m) for m in stack])


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
    assert a != stats.stratified_bootstrap_ci(scores, stats.iqm, reps=300, seed=4)


def test_paired_probability_of_improvement_by_hand():
    # seed-wise: 1>0 win, 2=2 tie, 3<5 loss, 4>1 win -> (1 + 0.5 + 0 + 1) / 4
    assert stats.paired_probability_of_improvement([1, 2, 3, 4], [0, 2, 5, 1]) == 0.625
    # averaged over tasks: task 0 all wins (1.0), task 1 all losses (0.0)
    assert stats.paired_probability_of_improvement([[1, 0], [1, 0]], [[0, 1], [0, 1]]) == 0.5


def test_paired_and_unpaired_differ_by_hand():
    """x = [1, 2, 3, 4] against y = [0, 3, 5, 1]. Paired, seed by seed: win, loss, loss, win ->
    1/2. Unpaired, over all 16 (x, y) pairs: 1 beats 0 and ties 1 (1.5); 2 beats 0, 1 (2); 3
    beats 0, 1 and ties 3 (2.5); 4 beats 0, 3, 1 (3) -> 9 / 16."""
    x, y = [1, 2, 3, 4], [0, 3, 5, 1]
    assert stats.paired_probability_of_improvement(x, y) == 0.5
    assert stats.probability_of_improvement(x, y) == 9 / 16


def test_unpaired_probability_of_improvement_by_hand():
    # 3 vs (1, 2, 3): 2.5; 4 vs all three: 3 -> 5.5 of 6 pairs; run counts may differ
    assert stats.probability_of_improvement([3, 4], [1, 2, 3]) == 5.5 / 6
    # identical samples: 1/2; per task, then averaged: (1 + 0) / 2
    assert stats.probability_of_improvement([1, 2, 2], [1, 2, 2]) == 0.5
    assert stats.probability_of_improvement([[5, 0]], [[1, 1], [2, 2]]) == 0.5


def test_paired_ci_brackets_the_estimate():
    rng = np.random.default_rng(0)
    y = rng.standard_normal(30)
    x = y + 0.5 + 0.5 * rng.standard_normal(30)
    p = stats.paired_probability_of_improvement(x, y)
    low, high = stats.paired_bootstrap_ci(x, y, reps=1000)
    assert low <= p <= high and 0.5 < low


def test_independent_ci_brackets_the_estimate():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((12, 2)) + 1.0, rng.standard_normal((9, 2))
    p = stats.probability_of_improvement(x, y)
    low, high = stats.independent_bootstrap_ci(x, y, reps=1000)
    assert low <= p <= high and 0.5 < low < high < 1.0
    # a sample against itself cannot separate: the interval straddles 1/2
    low, high = stats.independent_bootstrap_ci(y, y, reps=1000)
    assert low < 0.5 < high


def test_performance_profile_by_hand():
    """Scores 0, 10, 2, 4: above -1 all four, above 0 three, above 3 two (4, 10), above 10
    none (strictly above: a score equal to tau does not count)."""
    profile = stats.performance_profile([[0, 10], [2, 4]], [-1, 0, 3, 10])
    np.testing.assert_array_equal(profile, [1.0, 0.75, 0.5, 0.0])


def test_performance_profile_bands():
    """Runs that agree within each task give a band of zero width; the band brackets the
    profile."""
    profile, low, high = stats.performance_profile_bands([[0, 10]] * 4, [5.0], reps=200)
    assert (profile, low, high) == ([0.5], [0.5], [0.5])
    scores = np.random.default_rng(0).standard_normal((10, 3))
    taus = np.linspace(-2, 2, 9)
    profile, low, high = stats.performance_profile_bands(scores, taus, reps=500)
    assert (low <= profile).all() and (profile <= high).all() and (low < high).any()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: stats.iqm([]), r"shape \(runs, tasks\), got \(0, 1\)"),
        (lambda: stats.mean([1.0, np.nan]), r"finite, got \[1.0, nan\]"),
        (lambda: stats.paired_probability_of_improvement([1, 2], [1]), "same shape"),
        (lambda: stats.probability_of_improvement([[1, 2]], [[1]]), "same tasks"),
        (
            lambda: stats.independent_bootstrap_ci([[1, 2]], [[1]]),
            r"^scores must have the same tasks, got \(1, 2\) and \(1, 1\)$",
        ),
        (lambda: stats.stratified_bootstrap_ci([1, 2], stats.iqm, reps=0), "reps must be >= 1"),
        (
            lambda: stats.stratified_bootstrap_ci([1, 2], stats.iqm, confidence=1.0),
            r"confidence must be in \(0, 1\), got 1.0",
        ),
    ],
)
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# --- against rliable ------------------------------------------------------------------------------

SCORE_MATRICES = hnp.arrays(
    np.float64,
    st.tuples(st.integers(1, 12), st.integers(1, 4)),
    # few distinct values, so ties (which the estimators must treat as rliable does) are common
    elements=st.sampled_from([-3.5, 0.0, 0.1, 1.0, 2.0, 7.25, 1e3, 123456.789])
    | st.floats(-1e6, 1e6),
)


@settings(max_examples=200, deadline=None)
@given(SCORE_MATRICES)
def test_iqm_is_rliables_to_the_last_bit(scores):
    assert stats.iqm(scores) == rly_metrics.aggregate_iqm(scores)


@settings(max_examples=150, deadline=None)
@given(SCORE_MATRICES, st.integers(1, 12), st.data())
def test_unpaired_probability_of_improvement_is_rliables(x, runs_y, data):
    """rliable's form: scipy's Mann-Whitney U per task over the product of the run counts."""
    y = data.draw(hnp.arrays(np.float64, (runs_y, x.shape[1]), elements=st.sampled_from(
        [-3.5, 0.0, 1.0, 2.0, 7.25, 1e3])))  # fmt: skip
    assert stats.probability_of_improvement(x, y) == rly_metrics.probability_of_improvement(x, y)


@settings(max_examples=100, deadline=None)
@given(SCORE_MATRICES, st.lists(st.sampled_from([-1e3, -1.0, 0.0, 0.1, 2.0, 7.25, 1e3]),
                                min_size=1, max_size=6))  # fmt: skip
def test_performance_profile_is_rliables(scores, taus):
    """rliable's run-score distribution: the share of runs x tasks strictly above each tau."""
    expected = rly.score_distributions(scores, np.array(taus))
    np.testing.assert_array_equal(stats.performance_profile(scores, taus), expected)


@pytest.fixture
def global_numpy_seed():
    """rliable resamples with numpy's global RNG: seed it, and leave it as it was."""
    state = np.random.get_state()  # noqa: NPY002 (rliable's legacy global RNG)
    np.random.seed(0)  # noqa: NPY002
    yield
    np.random.set_state(state)  # noqa: NPY002


def ecdf_bracket(values: np.ndarray, point: float) -> tuple[float, float]:
    """``(P(V < point), P(V <= point))`` over ``values``: where ``point`` sits in them."""
    values = np.sort(values)
    n = values.size
    return np.searchsorted(values, point, "left") / n, np.searchsorted(values, point, "right") / n


def level_tolerance(p: float, reps_a: int, reps_b: int, sds: float = 5.0) -> float:
    """How far the quantile *level* of a percentile endpoint estimated from ``reps_b`` bootstrap
    replicates can sit from ``p`` in an independent set of ``reps_a`` replicates of the same
    bootstrap distribution: each empirical quantile's level has standard deviation
    ``sqrt(p (1 - p) / reps)``, the two are independent, so ``sds`` standard deviations of the
    difference."""
    return sds * float(np.sqrt(p * (1 - p) * (1 / reps_a + 1 / reps_b)))


def same_endpoint(ours: np.ndarray, theirs: float, p: float, tol: float) -> bool:
    """True if ``theirs`` sits at quantile level ``p`` of ``ours``, within ``tol``."""
    low, high = ecdf_bracket(ours, theirs)
    return low - tol <= p <= high + tol


# Three games on scales 1, 10 and 100: a bootstrap that ignored the strata would pool their runs.
SCALES = np.array([1.0, 10.0, 100.0])
OURS_REPS, THEIR_REPS = 20_000, 10_000


@pytest.mark.slow
def test_stratified_bootstrap_ci_matches_rliables(global_numpy_seed):
    """rliable's 95% percentile interval of the IQM (its ``StratifiedBootstrap``, numpy's global
    RNG) against ours (a seeded Generator): the RNGs differ, so the endpoints agree only up to
    Monte Carlo error. Compared in quantile levels: rliable's lower endpoint must sit at level
    0.025 of our replicates, its upper at 0.975, within ``level_tolerance`` (5 standard
    deviations, 0.0096 here). Negative control: a bootstrap that resamples the pooled runs of all
    games, ignoring the strata, lands far outside."""
    scores = np.random.default_rng(7).gamma(2.0, 1.0, size=(10, 3)) * SCALES
    _, intervals = rly.get_interval_estimates(
        {"x": scores}, lambda s: np.array([rly_metrics.aggregate_iqm(s)]), reps=THEIR_REPS
    )
    their_low, their_high = intervals["x"][:, 0]
    ours = stats.stratified_bootstrap(scores, stats.iqm, reps=OURS_REPS, seed=1)
    tol = level_tolerance(0.025, OURS_REPS, THEIR_REPS)
    assert same_endpoint(ours, their_low, 0.025, tol)
    assert same_endpoint(ours, their_high, 0.975, tol)
    # our interval is the quantiles of those very replicates
    low, high = stats.stratified_bootstrap_ci(scores, stats.iqm, reps=OURS_REPS, seed=1)
    assert (low, high) == tuple(np.quantile(ours, [0.025, 0.975]))
    # negative control: pooled resampling (every cell drawn from all 30 scores)
    pooled = np.random.default_rng(1).choice(scores.ravel(), size=(OURS_REPS, *scores.shape))
    pooled_iqm = stats.iqm(pooled)
    assert not (
        same_endpoint(pooled_iqm, their_low, 0.025, tol)
        and same_endpoint(pooled_iqm, their_high, 0.975, tol)
    )


def test_performance_profile_bands_match_rliables(global_numpy_seed):
    """The profile itself exactly, and its 95% bands per tau in quantile levels, as above."""
    scores = np.random.default_rng(3).gamma(2.0, 1.0, size=(10, 3)) * SCALES / SCALES.max()
    taus = np.linspace(0.0, 1.0, 21)
    profiles, bands = rly.create_performance_profile({"x": scores}, taus, reps=2000)
    ours = stats.stratified_bootstrap(
        scores, lambda s: stats._profile(s, taus), reps=OURS_REPS, seed=2
    )
    profile, low, high = stats.performance_profile_bands(scores, taus, reps=OURS_REPS, seed=2)
    np.testing.assert_array_equal(profile, profiles["x"])
    np.testing.assert_array_equal((low, high), np.quantile(ours, [0.025, 0.975], axis=0))
    tol = level_tolerance(0.025, OURS_REPS, 2000)
    for i in range(len(taus)):
        assert same_endpoint(ours[:, i], bands["x"][0, i], 0.025, tol), taus[i]
        assert same_endpoint(ours[:, i], bands["x"][1, i], 0.975, tol), taus[i]


# --- Student-t intervals, against scipy ---------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.floats(0.2, 1e5), st.floats(1e-6, 1 - 1e-6), st.floats(-60.0, 60.0))
def test_t_quantile_and_cdf_are_scipys(df, p, t):
    """Student's t for any df (Welch's are not whole numbers), against scipy.stats.t."""
    assert stats.t_cdf(t, df) == pytest.approx(scipy_stats.t.cdf(t, df), abs=1e-9)
    assert stats.t_quantile(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-8, abs=1e-8)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=12),
    st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=12),
    st.sampled_from([0.5, 0.9, 0.95, 0.99]),
)
def test_the_t_and_welch_intervals_are_scipys(x, y, confidence):
    """A mean's interval is scipy's one-sample t interval; a difference of two independent
    means is Welch's (``ttest_ind(equal_var=False)``'s interval)."""
    x, y = np.array(x), np.array(y)
    assume(x.std() > 1e-3 and y.std() > 1e-3)
    mean = stats.Estimate.of_sample(x)
    expected = scipy_stats.t.interval(confidence, x.size - 1, x.mean(), scipy_stats.sem(x))
    np.testing.assert_allclose(mean.interval(confidence), expected, rtol=1e-7, atol=1e-7)
    difference = stats.Estimate.of_sample(x) - stats.Estimate.of_sample(y)
    welch = scipy_stats.ttest_ind(x, y, equal_var=False)
    assert difference.value == pytest.approx(x.mean() - y.mean())
    assert difference.df == pytest.approx(welch.df)
    np.testing.assert_allclose(
        difference.interval(confidence), tuple(welch.confidence_interval(confidence)),
        rtol=1e-7, atol=1e-7,
    )  # fmt: skip


def test_a_mean_from_its_summary_and_a_sample_without_spread_by_hand():
    """Mean 2, sd 1 over 4 values: standard error 0.5, 3 degrees of freedom, t(0.975, 3) =
    3.182446, so 2 +- 1.591223; a sample of equal values has the point as its interval."""
    mean = stats.Estimate.of_mean(2.0, 1.0, 4)
    assert (mean.standard_error, mean.df) == (0.5, 3.0)
    assert mean.interval() == pytest.approx((2 - 1.591223, 2 + 1.591223), abs=1e-6)
    assert stats.Estimate.of_sample([3.0, 3.0, 3.0]).interval() == (3.0, 3.0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: stats.Estimate.of_sample([1.0]), r"2 or more finite values, got \[1.0\]"),
        (lambda: stats.Estimate.of_sample([1.0, np.nan]), "2 or more finite values"),
        (lambda: stats.Estimate.of_mean(1.0, 0.5, 1), "n >= 2 and sd >= 0, got n 1"),
        (lambda: stats.Estimate.of_mean(1.0, -0.5, 5), "sd -0.5"),
        (lambda: stats.t_quantile(1.0, 3), r"in \(0, 1\), got 1.0"),
        (lambda: stats.t_quantile(0.5, 0), "degrees of freedom must be > 0, got 0"),
        (lambda: stats.Estimate.of_mean(1.0, 0.5, 5).interval(0), "confidence must be in"),
    ],
)
def test_bad_input_to_the_t_intervals(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def naive_independent_ci(x, y, reps, seed, confidence=0.95):
    """The unpaired bootstrap written out one replicate and one task at a time: X's runs, then
    Y's, drawn within each task from the seed's generator, P(X > Y) counted pair by pair."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    rng = np.random.default_rng(seed)
    x_picks = rng.integers(0, x.shape[0], size=(reps, x.shape[0], x.shape[1]))
    y_picks = rng.integers(0, y.shape[0], size=(reps, y.shape[0], y.shape[1]))
    values = []
    for r in range(reps):
        per_task = []
        for t in range(x.shape[1]):
            xs, ys = x[x_picks[r, :, t], t], y[y_picks[r, :, t], t]
            wins = (xs[:, None] > ys[None, :]).sum() + 0.5 * (xs[:, None] == ys[None, :]).sum()
            per_task.append(wins / (len(xs) * len(ys)))
        values.append(np.mean(per_task))
    tail = (1 - confidence) / 2
    return tuple(np.quantile(values, [tail, 1 - tail]))


def test_the_independent_interval_is_the_bootstrap_written_out_replicate_by_replicate():
    """Each replicate counted as its definition says, against the vectorised one: at the default
    of 2,000 replicates, and with runs so many that the replicates go in several chunks."""
    rng = np.random.default_rng(3)
    x, y = rng.integers(0, 5, (6, 2)).astype(float), rng.integers(0, 5, (5, 2)).astype(float)
    assert stats.independent_bootstrap_ci(x, y) == pytest.approx(
        naive_independent_ci(x, y, 2000, 0), abs=1e-12
    )
    big_x, big_y = rng.standard_normal((300, 1)) + 0.1, rng.standard_normal((300, 1))
    assert 2**22 // (300 * 300) < 60  # a chunk holds fewer replicates than are drawn
    assert stats.independent_bootstrap_ci(big_x, big_y, reps=60, seed=5) == pytest.approx(
        naive_independent_ci(big_x, big_y, 60, 5), abs=1e-12
    )


def test_the_independent_interval_s_seed_and_confidence_are_its_own():
    """The default seed is 0 and another seed draws other replicates; the confidence asked for
    is the one the interval has (issue 44's mutation run: seed 0 -> 1 and the confidence left out
    survived, the integer scores above giving the same quantiles for any seed)."""
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((7, 3)) + 0.3, rng.standard_normal((6, 3))
    default = stats.independent_bootstrap_ci(x, y, reps=200)
    assert default == stats.independent_bootstrap_ci(x, y, reps=200, seed=0)
    assert default != stats.independent_bootstrap_ci(x, y, reps=200, seed=1)
    half = stats.independent_bootstrap_ci(x, y, reps=200, confidence=0.5)
    assert half == pytest.approx(naive_independent_ci(x, y, 200, 0, confidence=0.5), abs=1e-12)
    assert default[0] < half[0] <= half[1] < default[1]


def test_the_incomplete_beta_at_its_ends_and_on_both_sides_of_its_switch():
    """``I_x(a, b)`` against scipy's ``betainc`` at the ends (0 and 1 exactly, where the
    continued fraction is not used) and on both sides of the point ``(a + 1) / (a + b + 2)``
    where it switches to the complement, and ``t_cdf`` at 0 and far out: the t-interval's
    corners that the hypothesis cases above reach rarely."""
    from scipy.special import betainc

    for a, b in ((0.5, 2.5), (3.0, 0.5), (2.0, 2.0)):
        assert stats._incomplete_beta(a, b, 0.0, 1.0) == 0.0
        assert stats._incomplete_beta(a, b, 1.0, 0.0) == 1.0
        switch = (a + 1.0) / (a + b + 2.0)
        for x in (switch - 1e-3, switch, switch + 1e-3, 1e-6, 1 - 1e-6):
            assert stats._incomplete_beta(a, b, x, 1.0 - x) == pytest.approx(
                betainc(a, b, x), rel=1e-12, abs=1e-15
            )
    assert stats.t_cdf(0.0, 4.0) == 0.5
    assert stats.t_cdf(-1e6, 3.0) == pytest.approx(scipy_stats.t.cdf(-1e6, 3.0), rel=1e-9)
    assert stats.t_cdf(1e6, 3.0) == pytest.approx(scipy_stats.t.cdf(1e6, 3.0), rel=1e-15)


def test_a_sample_s_mean_and_sd_are_taken_in_float64_whatever_its_dtype():
    """Issue 44's mutation run: `np.asarray(values, dtype=np.float64)` -> `dtype=None` survived.
    In float32, 1e8 + 1 rounds back to 1e8, so these four values would average 0.25, not 0.5."""
    values = np.array([1e8, 1.0, -1e8, 1.0], dtype=np.float32)
    estimate = stats.Estimate.of_sample(values)
    assert estimate.value == 0.5
    assert estimate.standard_error == pytest.approx(np.std([1e8, 1, -1e8, 1], ddof=1) / 2)


@pytest.mark.parametrize("p", [0.0, 1.0, -0.25, 1.5])
def test_t_quantile_refuses_a_probability_outside_0_to_1_naming_it(p):
    """Issue 44's mutation run: `0.0 < p` -> `0.0 <= p` survived, as p = 0 then failed one call
    deeper, at 1 - p: the refusal names the probability asked for."""
    refusal = rf"^a quantile's probability must be in \(0, 1\), got {p}$"
    with pytest.raises(ValueError, match=refusal):
        stats.t_quantile(p, 5.0)


def test_a_one_sample_interval_with_a_standard_error_of_exactly_one_by_hand():
    """[0, 2]: mean 1, standard error exactly 1 (sd sqrt 2 over sqrt 2), df 1, so the 95%
    interval is 1 +- t(0.975, 1) = 1 +- 12.7062; a standard error of 0 gives the point itself (a
    mutation run found the zero-error shortcut taken at an error of 1 unseen)."""
    estimate = stats.Estimate.of_sample([0.0, 2.0])
    assert estimate.standard_error == 1.0 and estimate.df == pytest.approx(1.0)
    low, high = estimate.interval(0.95)
    assert high - 1.0 == pytest.approx(12.706204736174698) and 1.0 - low == pytest.approx(
        12.706204736174698
    )
    assert stats.Estimate.of_sample([3.0, 3.0, 3.0]).interval(0.95) == (3.0, 3.0)


def naive_paired_ci(x, y, reps, seed, confidence=0.95):
    """The paired bootstrap written out one replicate and one task at a time: seed pairs drawn
    within each task from the seed's generator, the wins (ties one half) averaged per replicate."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    picks = np.random.default_rng(seed).integers(0, x.shape[0], size=(reps, *x.shape))
    values = []
    for r in range(reps):
        per_task = []
        for t in range(x.shape[1]):
            xs, ys = x[picks[r, :, t], t], y[picks[r, :, t], t]
            per_task.append(np.mean((xs > ys) + 0.5 * (xs == ys)))
        values.append(np.mean(per_task))
    tail = (1 - confidence) / 2
    return tuple(np.quantile(values, [tail, 1 - tail]))


def test_the_paired_interval_is_the_bootstrap_written_out_with_its_own_seed_and_confidence():
    """The paired interval against its definition, replicate by replicate: at the defaults (2,000
    replicates, seed 0, 95%), at another seed, which draws other pairs, and at 50% (issue 44's
    mutation run: the seed and the confidence left out of the calls below survived, every test
    calling at the defaults)."""
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((8, 3)) + 0.2, rng.standard_normal((8, 3))
    default = stats.paired_bootstrap_ci(x, y)
    assert default == pytest.approx(naive_paired_ci(x, y, 2000, 0), abs=1e-12)
    seeded = stats.paired_bootstrap_ci(x, y, reps=300, seed=7)
    assert seeded == pytest.approx(naive_paired_ci(x, y, 300, 7), abs=1e-12)
    assert seeded != stats.paired_bootstrap_ci(x, y, reps=300, seed=0)
    half = stats.paired_bootstrap_ci(x, y, reps=300, seed=7, confidence=0.5)
    assert half == pytest.approx(naive_paired_ci(x, y, 300, 7, confidence=0.5), abs=1e-12)
    assert seeded[0] < half[0] <= half[1] < seeded[1]


def naive_profile_bands(scores, taus, reps, seed, confidence=0.95):
    """The profile's bands written out: per replicate, runs drawn within each task, the share of
    all drawn scores strictly above each tau; the percentile interval per tau."""
    scores = np.asarray(scores, float)
    picks = np.random.default_rng(seed).integers(0, scores.shape[0], size=(reps, *scores.shape))
    values = np.empty((reps, len(taus)))
    for r in range(reps):
        drawn = np.stack([scores[picks[r, :, t], t] for t in range(scores.shape[1])], axis=1)
        values[r] = [np.mean(drawn > tau) for tau in taus]
    tail = (1 - confidence) / 2
    return np.quantile(values, tail, axis=0), np.quantile(values, 1 - tail, axis=0)


def test_the_profile_bands_are_the_bootstrap_written_out_with_their_own_seed_and_confidence():
    """The bands against their definition, tau by tau: at the defaults (2,000 replicates, seed 0,
    95%, as every other interval of the report), at another seed, and at 50% (issue 44's mutation
    run: 2,000 -> 2,001, seed 0 -> 1 or None, and the confidence left out survived)."""
    # 120 scores: fine enough steps that the 2.5% quantile of 2,000 replicates moves with one more
    scores = np.random.default_rng(6).standard_normal((30, 4))
    taus = [-1.0, -0.25, 0.0, 0.5, 1.0]
    for kwargs, (reps, seed, confidence) in [
        ({}, (2000, 0, 0.95)),
        ({"reps": 300, "seed": 3}, (300, 3, 0.95)),
        ({"reps": 300, "seed": 3, "confidence": 0.5}, (300, 3, 0.5)),
    ]:
        profile, low, high = stats.performance_profile_bands(scores, taus, **kwargs)
        np.testing.assert_array_equal(profile, stats.performance_profile(scores, taus))
        want_low, want_high = naive_profile_bands(scores, taus, reps, seed, confidence)
        np.testing.assert_allclose(low, want_low, atol=1e-12)
        np.testing.assert_allclose(high, want_high, atol=1e-12)
    _, low_1, high_1 = stats.performance_profile_bands(scores, taus, reps=300, seed=1)
    _, low_3, high_3 = stats.performance_profile_bands(scores, taus, reps=300, seed=3)
    assert not (np.array_equal(low_1, low_3) and np.array_equal(high_1, high_3))


def test_aggregates_and_intervals_compute_in_float64_and_return_floats():
    """Issue 44's mutation run: these survived. A stack of float32 score matrices aggregated in
    float32 (the stack's dtype left to numpy), a bootstrap's replicates or an interval kept in
    a statistic's float32, one matrix's aggregate returned as a numpy scalar rather than a
    float, and a 2-D matrix with a NaN let through unchecked."""
    rng = np.random.default_rng(3)
    stack32 = rng.normal(size=(4, 9, 3)).astype(np.float32)
    for aggregate in (stats.iqm, stats.mean, stats.median):
        got = aggregate(stack32)
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, aggregate(stack32.astype(np.float64)))
        one = aggregate(stack32[0])
        assert type(one) is float and one == aggregate(stack32[0].astype(np.float64))
    with pytest.raises(ValueError, match="scores must be finite"):
        stats.iqm([[1.0, np.nan], [2.0, 3.0]])
    values32 = rng.normal(size=(500, 2)).astype(np.float32)
    low, high = stats.percentile_interval(values32)
    assert low.dtype == high.dtype == np.float64
    exact = stats.percentile_interval(values32.astype(np.float64))
    np.testing.assert_array_equal(np.stack([low, high]), np.stack(exact))
    replicates = stats.stratified_bootstrap(
        stack32[0], lambda s: s.mean(axis=(-2, -1)).astype(np.float32)
    )
    assert replicates.dtype == np.float64
    # The resampled scores a statistic gets are float64 whatever the scores' dtype.

    def total(resampled):
        return resampled.sum(axis=(-2, -1))

    np.testing.assert_array_equal(
        stats.stratified_bootstrap(stack32[0], total),
        stats.stratified_bootstrap(stack32[0].astype(np.float64), total),
    )


def test_the_bootstraps_defaults_are_2000_replicates_at_seed_0_and_95_percent():
    """Issue 44's mutation run: the defaults changed (2001 replicates, seed 1, a confidence of
    1.95) survived, every caller passing its own. A report that leans on them gets these."""
    scores = np.random.default_rng(4).normal(size=(6, 2))
    replicates = stats.stratified_bootstrap(scores, stats.mean)
    assert replicates.shape == (2000,)
    np.testing.assert_array_equal(
        replicates, stats.stratified_bootstrap(scores, stats.mean, 2000, 0)
    )
    assert stats.stratified_bootstrap_ci(scores, stats.iqm) == stats.stratified_bootstrap_ci(
        scores, stats.iqm, reps=2000, confidence=0.95, seed=0
    )
    values = np.random.default_rng(5).normal(size=(300,))
    assert stats.percentile_interval(values) == stats.percentile_interval(values, 0.95)
    # One replicate is the least a bootstrap may have.
    assert stats.stratified_bootstrap(scores, stats.mean, reps=1).shape == (1,)
