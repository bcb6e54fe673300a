"""The report's figures draw the numbers they claim: each line and band is read back from the
figure and checked against a hand computation (an IQM over four seeds, a mean and sd over two,
a profile's share of runs above tau) or against the interval function the tables use, for the
right arm, in the right panel and colour.

A figure's band drawn from the wrong column, a curve of the wrong arm, or a profile of the wrong
metric is a bug the tables do not show: these tests are what catch it.
"""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from test_report import fake_run, sweep_record

from per_dqn.logs import metrics, tags
from per_dqn.memory import KINDS
from per_dqn.rundir import fileio
from per_dqn.sweeps import figures, measure, published, runs, stats

ENV, OTHER = "MinAtar/Breakout-v1", "MinAtar/Asterix-v1"
STEPS = (1000, 2000, 3000)
# Eval returns by seed at STEPS, per (env, arm): four seeds each.
CURVES = {
    (ENV, "uniform"): [(1, 2, 3), (5, 6, 7), (9, 10, 11), (13, 14, 15)],
    (ENV, "proportional"): [(2, 2, 2), (2, 2, 2), (2, 2, 2), (2, 2, 2)],
    (OTHER, "uniform"): [(0, 10, 40), (0, 20, 30), (0, 30, 20), (0, 40, 10)],
    (OTHER, "proportional"): [(4, 4, 4), (8, 8, 8), (1, 1, 1), (100, 100, 100)],
}
# Final scores by seed, per (env, arm).
FINALS = {
    (ENV, "uniform"): [0.0, 10.0, 20.0, 30.0],
    (ENV, "proportional"): [5.0, 15.0, 25.0, 40.0],
    (OTHER, "uniform"): [100.0, 300.0, 200.0, 400.0],
    (OTHER, "proportional"): [100.0, 100.0, 500.0, 100.0],
}
ARMS = ("uniform", "proportional")


@pytest.fixture
def sweep(tmp_path):
    out = tmp_path / "sweep"
    planned = []
    for (env, arm), curves in CURVES.items():
        for seed, values in enumerate(curves):
            rel = f"{env.split('/')[1]}/{arm}/s{seed}"
            planned.append((env, arm, seed, rel))
            fake_run(out, rel, env, arm, seed, FINALS[(env, arm)][seed],
                     list(zip(STEPS, map(float, values), strict=True)))  # fmt: skip
    fileio.write_json(out / "sweep.json", sweep_record(planned, [ENV, OTHER], list(ARMS)))
    collected = runs.collect(out)
    cells = measure.group_cells(collected, [measure.measure(r, None) for r in collected.runs])
    return collected, cells


def hand_iqm(values) -> float:
    """The IQM of four values: the mean of the middle two."""
    ordered = sorted(values)
    return (ordered[1] + ordered[2]) / 2


def arm_line(ax, arm: str):
    (line,) = [line for line in ax.get_lines() if line.get_label() == arm]
    return line


def band_edges(ax, color: str, xs) -> tuple[np.ndarray, np.ndarray]:
    """The lower and upper edge at each of ``xs`` of the one band filled in ``color``."""
    (band,) = [c for c in ax.collections if tuple(c.get_facecolor()[0][:3]) == to_rgb(color)]
    vertices = band.get_paths()[0].vertices
    low, high = [], []
    for x in xs:
        at = vertices[np.isclose(vertices[:, 0], x), 1]
        low.append(at.min())
        high.append(at.max())
    return np.array(low), np.array(high)


def test_the_curves_figure_draws_each_arm_s_iqm_and_its_bootstrap_band(sweep):
    collected, cells = sweep
    fig = figures.plot_curves(collected, cells, {ENV: 12.0, OTHER: None})
    styles = figures.arm_styles(collected.arms)
    panels = {ax.get_title().split(" (")[0]: ax for ax in fig.axes}
    assert list(panels) == [ENV, OTHER]
    assert tuple(fig.get_size_inches()) == pytest.approx((2 * 6.4, 4.6))  # one row of two
    for ax in panels.values():
        assert ax.get_ylabel() == "evaluation return (IQM over seeds, 95% CI)"
        assert ax.get_xlabel() == "env steps"
    for (env, arm), curves in CURVES.items():
        ax, (color, style) = panels[env], styles[arm]
        line = arm_line(ax, arm)
        assert (line.get_color(), line.get_linestyle()) == (color, style)
        assert list(line.get_xdata()) == list(STEPS)
        by_step = np.array(curves, dtype=float).T  # (steps, seeds)
        assert list(line.get_ydata()) == [hand_iqm(v) for v in by_step]
        low, high = band_edges(ax, color, STEPS)
        for k, values in enumerate(by_step):
            want = stats.stratified_bootstrap_ci(values, stats.iqm, reps=2000, seed=0)
            assert (low[k], high[k]) == pytest.approx(want)
            assert low[k] <= hand_iqm(values) <= high[k]
    # Four equal seeds: the band is the line itself.
    low, high = band_edges(panels[ENV], styles["proportional"][0], STEPS)
    assert list(low) == list(high) == [2.0, 2.0, 2.0]
    # Every band a light fill without an edge, as the training figure's and the profiles'.
    for ax in panels.values():
        for band in ax.collections:
            assert band.get_alpha() == 0.2 and list(band.get_linewidths()) == [0.0]
    # The threshold, a thin black dashed line, on its env's panel only.
    (threshold,) = [ln for ln in panels[ENV].get_lines() if ln.get_label() == "threshold"]
    assert list(threshold.get_ydata()) == [12.0, 12.0] and threshold.get_linestyle() == "--"
    assert to_rgb(threshold.get_color()) == (0.0, 0.0, 0.0)
    assert threshold.get_linewidth() == 0.8
    assert not [ln for ln in panels[OTHER].get_lines() if ln.get_label() == "threshold"]


def test_the_profiles_figure_draws_each_arm_s_share_of_runs_above_tau(sweep):
    """On the min-max scale of each game (over both arms' runs), the share of the 8 runs x games
    of an arm whose score is above tau, by hand, with its band around it; the final score's
    panel first, then the AUC's."""
    collected, cells = sweep
    norm = measure.normalization(collected, cells)
    fig = figures.plot_profiles(collected, cells, norm)
    styles = figures.arm_styles(collected.arms)
    final_ax, auc_ax = fig.axes
    assert final_ax.get_title().startswith("final score") and "AUC" in auc_ax.get_title()
    finals = {}
    for env in (ENV, OTHER):
        lo = min(v for arm in ARMS for v in FINALS[(env, arm)])
        hi = max(v for arm in ARMS for v in FINALS[(env, arm)])
        for arm in ARMS:
            finals.setdefault(arm, []).extend((v - lo) / (hi - lo) for v in FINALS[(env, arm)])
    taus = np.linspace(0.0, 1.0, figures.PROFILE_POINTS)
    for arm in ARMS:
        line = arm_line(final_ax, arm)
        assert np.allclose(line.get_xdata(), taus)
        want = [np.mean([s > tau for s in finals[arm]]) for tau in taus]
        assert np.allclose(line.get_ydata(), want)
        low, high = band_edges(final_ax, styles[arm][0], taus)
        assert np.all(low <= np.asarray(want) + 1e-12) and np.all(np.asarray(want) <= high + 1e-12)
        assert low[-1] == high[-1] == want[-1] == 0.0  # no score is above the highest
    # The AUC panel profiles the AUC (trapezoids over the three evaluations at even steps:
    # (a + 2b + c) / 4), not the final score.
    aucs = {}
    for env in (ENV, OTHER):
        by_arm = {arm: [(a + 2 * b + c) / 4 for a, b, c in CURVES[(env, arm)]] for arm in ARMS}
        lo = min(min(v) for v in by_arm.values())
        hi = max(max(v) for v in by_arm.values())
        for arm in ARMS:
            aucs.setdefault(arm, []).extend((v - lo) / (hi - lo) for v in by_arm[arm])
    auc_taus = np.linspace(0.0, max(max(v) for v in aucs.values()), figures.PROFILE_POINTS)
    for arm in ARMS:
        line = arm_line(auc_ax, arm)
        assert np.allclose(line.get_xdata(), auc_taus)
        assert np.allclose(
            line.get_ydata(), [np.mean([s > t for s in aucs[arm]]) for t in auc_taus]
        )


def test_profile_taus_run_from_zero_or_the_lowest_score_to_the_highest():
    assert np.allclose(figures.profile_taus([np.array([[0.5, 2.0]])]), np.linspace(0, 2, 101))
    assert np.allclose(figures.profile_taus([np.array([[-1.0]]), np.array([[3.0]])]),
                       np.linspace(-1, 3, 101))  # fmt: skip
    # One value, or none: a range of 1 from it.
    assert np.allclose(figures.profile_taus([np.array([[0.0]])]), np.linspace(0, 1, 101))
    assert np.allclose(figures.profile_taus([]), np.linspace(0, 1, 101))


def training_sweep(tmp_path, returns: dict[int, float], steps: int = 100_000):
    """Two uniform runs of ``steps`` env steps on ENV: seed s's episodes return ``returns[s]``,
    one every 1,000 steps from step 1,000."""
    out = tmp_path / "training"
    planned = []
    for seed, g in returns.items():
        rel = f"uniform/s{seed}"
        planned.append((ENV, "uniform", seed, rel))
        fake_run(out, rel, ENV, "uniform", seed, 5.0, [(steps // 2, 4.0), (steps, 5.0)])
        logger = metrics.TensorBoardLogger(out / rel)
        for i in range(steps // 1000):
            logger.scalars({tags.EPISODE_RETURN: g}, (i + 1) * 1000)
        logger.close()
    fileio.write_json(out / "sweep.json", sweep_record(planned, [ENV], ["uniform"]))
    collected = runs.collect(out)
    cells = measure.group_cells(collected, [measure.measure(r, None) for r in collected.runs])
    return collected, cells


def test_the_training_figure_draws_the_runs_mean_and_sd_and_each_published_curve(tmp_path):
    """Episodes of constant return G every 1,000 steps: the EMA after n of them is
    G (1 - 0.99^n). Read at the published steps (50k, 100k: n = 50, 100), the arm's line is the
    mean over the two seeds (G = 1 and 3) and its band one sd (ddof 1) each side; each published
    curve is its means with a band of its sds, in grey, up to the runs' last step."""
    collected, cells = training_sweep(tmp_path, {0: 1.0, 1: 3.0})
    points = (
        published.Point(ENV, "src DQN", 50_000, 2.5, 0.5, 5),
        published.Point(ENV, "src DQN", 100_000, 4.0, 1.0, 5),
        published.Point(ENV, "src DQN", 150_000, 9.0, 1.0, 5),  # past the runs: not drawn
        published.Point(OTHER, "src DQN", 50_000, 7.0, 1.0, 5),  # another env
    )
    fig = figures.plot_training(collected, cells, points)
    (ax,) = fig.axes
    color = figures.arm_styles(collected.arms)["uniform"][0]
    line = arm_line(ax, "uniform (this tool)")
    assert list(line.get_xdata()) == [50_000, 100_000]
    emas = np.array([[g * (1 - 0.99**n) for n in (50, 100)] for g in (1.0, 3.0)])
    assert np.allclose(line.get_ydata(), emas.mean(axis=0))
    low, high = band_edges(ax, color, [50_000, 100_000])
    sd = emas.std(axis=0, ddof=1)
    assert np.allclose(low, emas.mean(axis=0) - sd) and np.allclose(high, emas.mean(axis=0) + sd)
    source = arm_line(ax, "src DQN")
    assert list(source.get_xdata()) == [50_000, 100_000]
    assert list(source.get_ydata()) == [2.5, 4.0]
    low, high = band_edges(ax, "grey", [50_000, 100_000])
    assert list(low) == [2.0, 3.0] and list(high) == [3.0, 5.0]


def test_the_training_figure_reads_the_runs_as_the_published_curve_was_logged(tmp_path):
    """A published curve logged every 5,000 steps and binned per 50,000 (reducible-loss's PER):
    the runs are read the same way. Logged at the first episode end (1,000), then at 6,000,
    11,000, ..., so the value at 50k is the mean of the EMAs after n = 1, 6, ..., 46 episodes,
    and at 100k after n = 51, ..., 96. One seed: no band (sd 0)."""
    collected, cells = training_sweep(tmp_path, {0: 2.0})
    points = tuple(
        published.Point(ENV, "src PER", step, 1.0, 0.1, 5, logged_every=5000)
        for step in (50_000, 100_000)
    )
    fig = figures.plot_training(collected, cells, points)
    (ax,) = fig.axes
    line = arm_line(ax, "uniform (this tool)")
    want = [np.mean([2.0 * (1 - 0.99**n) for n in range(first, first + 50, 5)])
            for first in (1, 51)]  # fmt: skip
    assert np.allclose(line.get_ydata(), want)
    low, high = band_edges(ax, figures.arm_styles(collected.arms)["uniform"][0], [50_000, 100_000])
    assert np.allclose(low, want) and np.allclose(high, want)


def test_a_figure_of_five_games_takes_two_rows_of_at_most_three(tmp_path):
    """Pins an unreadable figure (issue 45): the MinAtar study's five games in one row were
    147 px a panel at the docs page's width. Envs now take rows of ``PANELS_PER_ROW`` (3), in
    the sweep's order; a row's unused places stay empty."""
    games = ["MinAtar/Asterix-v1", "MinAtar/Breakout-v1", "MinAtar/Freeway-v1",
             "MinAtar/Seaquest-v1", "MinAtar/SpaceInvaders-v1"]  # fmt: skip
    out = tmp_path / "five"
    planned = []
    for env in games:
        rel = f"{env.split('/')[1]}/uniform/s0"
        planned.append((env, "uniform", 0, rel))
        fake_run(out, rel, env, "uniform", 0, 1.0, [(1000, 1.0), (2000, 2.0)])
    fileio.write_json(out / "sweep.json", sweep_record(planned, games, ["uniform"]))
    collected = runs.collect(out)
    cells = measure.group_cells(collected, [measure.measure(r, None) for r in collected.runs])
    fig = figures.plot_curves(collected, cells, {})
    assert [ax.get_title().split(" (")[0] for ax in fig.axes] == games
    rows = [ax.get_subplotspec().rowspan.start for ax in fig.axes]
    columns = [ax.get_subplotspec().colspan.start for ax in fig.axes]
    assert rows == [0, 0, 0, 1, 1] and columns == [0, 1, 2, 0, 1]
    assert tuple(fig.get_size_inches()) == pytest.approx((3 * 6.4, 2 * 4.6))


def test_a_study_s_arms_with_settings_keep_their_kind_s_colour():
    """Pins a colour change: once the registry held seven kinds, the study's
    ``proportional/alpha=0.6,beta0=0.4`` and ``rank/alpha=0.7,beta0=0.5`` took the palette's
    leftovers (grey, olive) instead of proportional's red and rank's purple, so the same arm
    changed colour between the study's figures and the new ones. The first arm of a kind takes
    the kind's colour where the kind alone is not an arm; a second arm of it, the palette's."""
    kinds = figures.arm_styles(list(KINDS))
    study = ["uniform", "proportional/alpha=0.6,beta0=0.4", "rank/alpha=0.7,beta0=0.5",
             "relo", "lap/alpha=0.4", "laber"]  # fmt: skip
    styles = figures.arm_styles(study)
    for arm in study:
        assert styles[arm][0] == kinds[arm.split("/")[0]][0]
    two = figures.arm_styles(["proportional/alpha=0.4", "proportional/alpha=0.8"])
    assert two["proportional/alpha=0.4"][0] == kinds["proportional"][0]
    assert two["proportional/alpha=0.8"][0] not in {c for c, _ in kinds.values()}
    alone = figures.arm_styles(["proportional/alpha=0.4", "proportional"])
    assert alone["proportional"][0] == kinds["proportional"][0]
    assert alone["proportional/alpha=0.4"][0] != kinds["proportional"][0]


def styled_sweep(tmp_path):
    """Two arms over two envs, two seeds each, as ``training_sweep`` makes them, except that
    ``uniform`` has runs on OTHER only: in ENV's panel the first arm has no curve."""
    out = tmp_path / "styled"
    planned = []
    cells = [(OTHER, "uniform"), (ENV, "proportional"), (OTHER, "proportional")]
    for env, arm in cells:
        for seed, g in enumerate((1.0, 3.0)):
            rel = f"{env.split('/')[1]}/{arm}/s{seed}"
            planned.append((env, arm, seed, rel))
            fake_run(out, rel, env, arm, seed, 5.0, [(50_000, 4.0), (100_000, 5.0)])
            logger = metrics.TensorBoardLogger(out / rel)
            for i in range(100):
                logger.scalars({tags.EPISODE_RETURN: g}, (i + 1) * 1000)
            logger.close()
    fileio.write_json(
        out / "sweep.json", sweep_record(planned, [ENV, OTHER], ["proportional", "uniform"])
    )
    collected = runs.collect(out)
    grouped = measure.group_cells(collected, [measure.measure(r, None) for r in collected.runs])
    return collected, grouped


def test_the_training_figure_s_styles_each_arm_and_each_published_curve(tmp_path):
    """Issue 44's mutation run: the training figure's drawing survived every change to how it
    looks and to which curves it skips. Here each line and band is read back with its style:
    an arm in its colour and line style with a band of alpha 0.2 and no edge; each published
    curve in black, in the next of four line styles by the order its label first appears (the
    fifth label takes the first again), 1.2 wide, with a grey band of alpha 0.15 and no edge; a
    published sd left out draws no band width. A label or an arm with nothing in a panel is
    skipped there, the later ones still drawn; a panel with no published point in reach is
    read every 50,000 steps."""
    collected, grouped = styled_sweep(tmp_path)
    labels = ("A", "B", "C", "D", "E", "F")
    points = [published.Point(OTHER, "A", 150_000, 1.0, 0.5, 5)]  # past the runs: not drawn
    points += [
        published.Point(ENV, label, step, float(k) + step / 100_000, 0.25, 5)
        for k, label in enumerate(labels[1:], start=1)
        for step in (50_000, 100_000)
    ]
    points.append(published.Point(ENV, "G", 50_000, 7.0, None, None))  # no sd
    points.append(published.Point(ENV, "G", 100_000, 8.0, None, None))
    fig = figures.plot_training(collected, grouped, points)
    ax, other = fig.axes
    assert ax.get_ylabel() == "training return, EMA 0.99 (mean over seeds, +-1 sd)"
    styles = figures.arm_styles(collected.arms)
    # ENV: the arm without runs there, the first, is skipped, the next one drawn in its own
    # style (a mutation run found a skip that ended the panel's arms unseen: the test had the
    # empty arm last).
    assert collected.arms == ("uniform", "proportional")
    line = arm_line(ax, "proportional (this tool)")
    assert (to_rgb(line.get_color()), line.get_linestyle()) == (
        to_rgb(styles["proportional"][0]),
        styles["proportional"][1],
    )
    assert not [x for x in ax.get_lines() if x.get_label() == "uniform (this tool)"]
    first, *published_bands = ax.collections
    assert to_rgb(first.get_facecolor()[0]) == to_rgb(styles["proportional"][0])
    assert first.get_alpha() == 0.2 and list(first.get_linewidth()) == [0.0]
    expected_styles = {"B": "--", "C": ":", "D": "-.", "E": "-", "F": "--", "G": ":"}
    for label, style in expected_styles.items():
        source = arm_line(ax, label)
        assert to_rgb(source.get_color()) == (0.0, 0.0, 0.0), label
        assert source.get_linestyle() == style, label
        assert source.get_linewidth() == 1.2, label
    assert len(published_bands) == len(expected_styles)
    for band in published_bands:
        assert to_rgb(band.get_facecolor()[0]) == to_rgb("grey")
        assert band.get_alpha() == 0.15 and list(band.get_linewidth()) == [0.0]
    vertices = published_bands[-1].get_paths()[0].vertices  # G's: no sd, no width
    assert set(np.round(vertices[:, 1], 9)) <= {7.0, 8.0}
    vertices = published_bands[0].get_paths()[0].vertices  # B's: 1.5 and 2 +- 0.25
    assert set(np.round(vertices[:, 1], 9)) <= {1.25, 1.75, 2.25}
    # OTHER: both arms, read every 50,000 steps, as no published point of it is in reach.
    for arm in ("proportional", "uniform"):
        drawn = arm_line(other, f"{arm} (this tool)")
        assert list(drawn.get_xdata()) == [0, 50_000, 100_000]
        assert (to_rgb(drawn.get_color()), drawn.get_linestyle()) == (
            to_rgb(styles[arm][0]),
            styles[arm][1],
        )


def test_the_profiles_figure_s_bands_are_the_report_s_bootstrap_on_any_scale(sweep, monkeypatch):
    """Issue 44's mutation run: the profile figure survived a band of another seed, the report's
    resamples or confidence left out, the band filled down to 0 rather than from its low edge,
    opaque or edged bands, another figure size, and taus taken from no scores at all (on a
    min-max scale the scores always span 0 to 1, so those taus were the same). Here, on a scale
    whose scores go past 1, each band is ``performance_profile_bands`` of the arm's runs x games
    at the report's settings (patched to 300 resamples, seed 3 and 50%, so that leaving any one
    out shows), filled at alpha 0.2 without an edge, and the taus run to the highest score."""
    collected, cells = sweep
    monkeypatch.setattr(figures, "BOOTSTRAP_REPS", 300)
    monkeypatch.setattr(figures, "BOOTSTRAP_SEED", 3)
    monkeypatch.setattr(figures, "CONFIDENCE", 0.5)
    bounds = {(ENV, "final"): (0.0, 20.0), (OTHER, "final"): (0.0, 200.0)}
    bounds |= {(env, "auc"): (0.0, 10.0) for env in (ENV, OTHER)}
    norm = measure.Normalization("human", bounds, ())
    fig = figures.plot_profiles(collected, cells, norm)
    assert tuple(fig.get_size_inches()) == pytest.approx((12.8, 4.6))
    final_ax, _ = fig.axes
    styles = figures.arm_styles(collected.arms)
    matrices = {
        arm: np.array([[FINALS[(ENV, arm)][s] / 20, FINALS[(OTHER, arm)][s] / 200]
                       for s in range(4)])
        for arm in ARMS
    }  # fmt: skip
    top = max(m.max() for m in matrices.values())
    assert top == 2.5
    taus = np.linspace(0.0, top, figures.PROFILE_POINTS)
    for arm in ARMS:
        assert np.allclose(arm_line(final_ax, arm).get_xdata(), taus)
        profile, want_low, want_high = stats.performance_profile_bands(
            matrices[arm], taus, reps=300, seed=3, confidence=0.5
        )
        assert np.allclose(arm_line(final_ax, arm).get_ydata(), profile)
        low, high = band_edges(final_ax, styles[arm][0], taus)
        np.testing.assert_allclose(low, want_low, atol=1e-12)
        np.testing.assert_allclose(high, want_high, atol=1e-12)
        assert not np.allclose(want_low, stats.performance_profile_bands(
            matrices[arm], taus, reps=300, seed=0, confidence=0.5)[1])  # fmt: skip
    for band in final_ax.collections:
        assert band.get_alpha() == 0.2
        assert list(band.get_linewidths()) == [0.0]


def test_the_profiles_figure_draws_the_arms_after_one_with_no_runs(tmp_path):
    """An arm with no runs on a game of the scale has no profile; the arms after it are still
    drawn (issue 44's mutation run: the loop stopping at that arm survived)."""
    collected, cells = styled_sweep(tmp_path)
    assert collected.arms == ("uniform", "proportional")  # the arm with no ENV runs first
    bounds = {(ENV, metric): (0.0, 10.0) for metric in measure.METRICS}
    fig = figures.plot_profiles(collected, cells, measure.Normalization("human", bounds, ()))
    for ax in fig.axes:
        assert [line.get_label() for line in ax.get_lines()] == ["proportional"]


def test_the_curves_figure_marks_each_point_and_draws_the_arms_after_one_with_no_runs(tmp_path):
    """Each arm's IQM line marks its evaluations (round markers of size 3); in a panel where the
    first arm has no runs, the arms after it are still drawn (issue 44's mutation run: the
    markers left out or resized, and the loop stopping at the arm without runs, survived)."""
    collected, cells = styled_sweep(tmp_path)
    fig = figures.plot_curves(collected, cells, {ENV: None, OTHER: None})
    panels = {ax.get_title().split(" (")[0]: ax for ax in fig.axes}
    assert [line.get_label() for line in panels[ENV].get_lines()] == ["proportional"]
    assert sorted(line.get_label() for line in panels[OTHER].get_lines()) == [
        "proportional", "uniform"
    ]  # fmt: skip
    for ax in (panels[ENV], panels[OTHER]):
        for line in ax.get_lines():
            assert (line.get_marker(), line.get_markersize()) == ("o", 3)


def test_the_profiles_figure_titles_its_games_and_seeds(sweep):
    """Each panel's title (medium size): the metric, the games it covers and the seeds per arm
    (runs, not games), in the plural where there are several; its axes' labels and range, and a
    faint grid (issue 44's mutation run: the title's plural, seed note and size, the labels,
    the y range and the grid's alpha survived)."""
    collected, cells = sweep
    norm = measure.normalization(collected, cells)
    fig = figures.plot_profiles(collected, cells, norm)
    assert [ax.get_title() for ax in fig.axes] == [
        "final score (2 games; 4 seeds per arm)", "AUC (2 games; 4 seeds per arm)"
    ]  # fmt: skip
    for ax in fig.axes:
        assert ax.title.get_fontsize() == pytest.approx(10.0)  # "medium" at matplotlib's 10 pt
        assert ax.get_xlabel() == f"{norm.scale_name} tau"
        assert ax.get_ylabel() == "fraction of runs with score > tau"
        assert ax.get_ylim() == pytest.approx((-0.02, 1.02))
        assert {line.get_alpha() for line in ax.xaxis.get_gridlines()} == {0.3}
    one = measure.Normalization("human", {(ENV, m): (0.0, 10.0) for m in measure.METRICS}, ())
    titles = [ax.get_title() for ax in figures.plot_profiles(collected, cells, one).axes]
    assert titles == ["final score (1 game; 4 seeds per arm)", "AUC (1 game; 4 seeds per arm)"]
