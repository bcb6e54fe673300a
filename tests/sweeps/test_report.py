"""Reports rebuilt from run dirs: hand-computed tables from fabricated runs (no training), the
missing-run list, thresholds, normalised scores across games, figures, byte-for-byte
reproducibility, one-line errors that change nothing, and one tiny real sweep."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from support import TINY, read_scalars, sets, summary_of, tree
from typer.testing import CliRunner

from per_dqn.cli import app
from per_dqn.logs import metrics, tags
from per_dqn.memory import KINDS
from per_dqn.rundir import fileio
from per_dqn.sweeps import figures, markdown, measure, plan, report, runs, stats

R = report
runner = CliRunner()
REPORT_FILES = ("report.md", "scores.csv", "curves.png", "curves.svg", "profiles.png",
                "profiles.svg")  # fmt: skip


def fake_run(
    out: Path,
    rel: str,
    env_id: str,
    arm: str,
    seed: int,
    score: float,
    curve: list[tuple[int, float]],
    interrupted: bool = False,
    is_weights: list[float] | None = None,
    **more: object,
) -> None:
    """A run dir as ``Trainer.run`` leaves it: an event file with the eval curve (and the IS
    weight means, at the curve's first steps) and a summary (with ``more`` of its fields)."""
    run_dir = out / rel
    run_dir.mkdir(parents=True)
    logger = metrics.TensorBoardLogger(run_dir)
    for step, value in curve:
        logger.scalars({tags.EVAL_RETURN_MEAN: value}, step)
    for (step, _), weight in zip(curve, is_weights or [], strict=False):
        logger.scalars({tags.PER_IS_WEIGHT_MEAN: weight}, step)
    logger.close()
    fileio.write_json(
        run_dir / "summary.json",
        {
            "final_eval_return_mean": None if interrupted else score,
            "final_eval_return_std": None if interrupted else 1.5,
            "final_eval_episodes": 0 if interrupted else 20,
            "env_steps": curve[-1][0] if curve else 0,
            "update_steps": 10,
            "wall_seconds": 2.0,
            "sps": 100.0,
            "replay": arm,
            "seed": seed,
            "env_id": env_id,
            "config": "cartpole",
            "device": "cpu",
            "interrupted": interrupted,
            "run_dir": str(run_dir),
            **more,
        },
    )


def sweep_record(runs: list[tuple[str, str, int, str]], envs: list[str], arms: list[str]) -> dict:
    return {
        "config": "cartpole.yaml",
        "config_name": "cartpole",
        "arms": arms,
        "seeds": sorted({seed for _, _, seed, _ in runs}),
        "envs": envs,
        "steps": None,
        "overrides": [],
        "resolved_config": {},
        "runs": [{"env_id": e, "arm": a, "seed": s, "run_dir": d} for e, a, s, d in runs],
    }


# Final scores by seed. uniform: IQM of 100, 200, 300, 400 cuts one from each end -> 250;
# proportional beats uniform on seeds 0, 1 and 3, loses on seed 2 -> P = 3/4.
UNIFORM = [100.0, 200.0, 300.0, 400.0]
PROPORTIONAL = [150.0, 250.0, 250.0, 500.0]
# Eval curves at 1000, 2000, 3000 steps, 100 before a seed's first step at 480 and 480 from it
# on: proportional reaches 475 at 2000 on seeds 0 and 3 and never on seeds 1 and 2 -> median
# over (2000, 2000, never, never) is "not reached", 2/4. uniform reaches it at 1000 (s0), 2000
# (s1), 3000 (s2) and never (s3) -> median 2500, 3/4.
UNIFORM_FIRST = [1000, 2000, 3000, None]
PROPORTIONAL_FIRST = [2000, None, None, 2000]
# AUC of values (a, b, c) at 1000, 2000, 3000: (1000 (a + b) / 2 + 1000 (b + c) / 2) / 2000
# = (a + 2b + c) / 4. First at 1000: 480; at 2000: (100 + 960 + 480) / 4 = 385; at 3000:
# (100 + 200 + 480) / 4 = 195; never: 100.
UNIFORM_AUC = [480.0, 385.0, 195.0, 100.0]  # IQM (195 + 385) / 2 = 290
PROPORTIONAL_AUC = [385.0, 100.0, 100.0, 385.0]  # IQM (100 + 385) / 2 = 242.5; P(> uniform) 1/4
# IS weight means logged by each proportional run: run means 0.6, 0.3, 0.1, 0.8 -> 0.45 over
# seeds; uniform logs 1 (no IS correction).
PROPORTIONAL_IS = [[0.5, 0.7], [0.2, 0.4], [0.1], [1.0, 0.6]]


def make_cartpole_sweep(out: Path, seeds: int = 4) -> Path:
    planned = []
    for arm, scores, firsts in (
        ("uniform", UNIFORM, UNIFORM_FIRST),
        ("proportional", PROPORTIONAL, PROPORTIONAL_FIRST),
    ):
        for seed in range(seeds):
            score, first = scores[seed % 4], firsts[seed % 4]
            rel = f"{arm}/s{seed}"
            planned.append(("CartPole-v1", arm, seed, rel))
            curve = [(s, 480.0 if first is not None and s >= first else 100.0)
                     for s in (1000, 2000, 3000)]  # fmt: skip
            weights = [1.0, 1.0, 1.0] if arm == "uniform" else PROPORTIONAL_IS[seed % 4]
            fake_run(out, rel, "CartPole-v1", arm, seed, score, curve, is_weights=weights)
    planned.append(("CartPole-v1", "rank", 0, "rank/s0"))  # planned, never started
    fileio.write_json(out / "sweep.json", sweep_record(planned, ["CartPole-v1"], ["uniform",
                                                  "proportional", "rank"]))  # fmt: skip
    return out


@pytest.fixture
def cartpole_sweep(tmp_path) -> Path:
    return make_cartpole_sweep(tmp_path / "sweep")


@pytest.fixture(scope="module")
def reported_sweep(tmp_path_factory) -> Path:
    """The sweep above with its report written, for tests that must leave it unchanged."""
    out = make_cartpole_sweep(tmp_path_factory.mktemp("reported") / "sweep")
    R.write_report(out)
    return out


def table_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| arm"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def ci_text(scores, digits=1) -> str:
    """A cell "IQM [low, high]": the bounds from ``stats`` (its bootstrap is checked against
    rliable's in ``test_stats``), at the report's reps and seed; the tests that use it pin the
    IQM itself by hand."""
    scores = np.array(scores)
    low, high = stats.stratified_bootstrap_ci(scores, stats.iqm, reps=2000, seed=0)
    return f"{stats.iqm(scores):,.{digits}f} [{low:,.{digits}f}, {high:,.{digits}f}]"


def p_text(x, y) -> str:
    """A cell "P [low, high] (n pairs)", its bounds from ``stats`` as ``ci_text``'s."""
    low, high = stats.paired_bootstrap_ci(np.array(x), np.array(y), reps=2000, seed=0)
    p = stats.paired_probability_of_improvement(x, y)
    return f"{p:.2f} [{low:.2f}, {high:.2f}] ({len(x)} pairs)"


def test_steps_to_threshold_by_hand():
    curve = [(1000, 100.0), (2000, 475.0), (3000, 200.0), (4000, 500.0)]
    assert measure.steps_to_threshold(curve, 475) == 2000  # reaching counts, not staying
    assert measure.steps_to_threshold(curve, 501) is None
    assert measure.steps_to_threshold([], 1.0) is None


def test_censored_median_by_hand():
    """A seed that never reaches the threshold ranks after every seed that does."""
    assert measure.censored_median([3000, 1000, 2000]) == 2000
    assert measure.censored_median([1000, None, 3000]) == 3000
    assert measure.censored_median([1000, 2000, 3000, None]) == 2500
    assert measure.censored_median([1000, 2000, None, None]) == math.inf  # half never: not reached
    assert measure.censored_median([None]) == math.inf
    with pytest.raises(ValueError, match="empty"):
        measure.censored_median([])


def test_reward_threshold_comes_from_gymnasium():
    assert measure.reward_threshold("CartPole-v1") == 475.0
    assert measure.reward_threshold("Acrobot-v1") == -100.0
    assert measure.reward_threshold("Pendulum-v1") is None
    assert measure.reward_threshold("NoSuchEnv-v0") is None


def test_report_table_by_hand(cartpole_sweep):
    files = R.write_report(cartpole_sweep)
    text = files.report.read_text()
    assert "Runs used: 8 of 9 planned; missing: rank/s0 (not run)." in text
    assert (
        "| arm | runs | final score IQM | AUC IQM | steps to 475 | P(> uniform), final | "
        "P(> uniform), AUC | IS weight |"
    ) in text
    rows = table_rows(text)
    assert rows["uniform"] == [
        "4", ci_text(UNIFORM), ci_text(UNIFORM_AUC), "2,500 (3/4)", "n/a", "n/a", "-",
    ]  # fmt: skip
    assert rows["uniform"][1].startswith("250.0 [") and rows["uniform"][2].startswith("290.0 [")
    assert rows["proportional"] == [
        "4", ci_text(PROPORTIONAL), ci_text(PROPORTIONAL_AUC), "not reached (2/4)",
        p_text(PROPORTIONAL, UNIFORM), p_text(PROPORTIONAL_AUC, UNIFORM_AUC), "0.45",
    ]  # fmt: skip
    assert rows["proportional"][2].startswith("242.5 [")
    assert rows["proportional"][4].startswith("0.75 [") and rows["proportional"][5].startswith(
        "0.25 ["
    )
    assert rows["rank"] == ["0"] + ["n/a"] * 6
    assert "(gymnasium's reward threshold for CartPole-v1)" in text


@pytest.mark.slow
def test_fewer_than_five_runs_is_warned_plainly(cartpole_sweep, tmp_path):
    """Issue 14: with 2 seeds the "95% CI" is just [min, max]; report.md says so for every cell
    of fewer than 5 runs, and not once there are 5 (the negative control)."""
    text = R.write_report(cartpole_sweep).report.read_text()
    assert (
        "**Warning: fewer than 5 runs** for uniform (4), proportional (4). A bootstrap can only "
        "resample the runs there are, so with so few the 95% interval is little more than the "
        "range of the runs (lowest to highest)"
    ) in text
    five = make_cartpole_sweep(tmp_path / "five", seeds=5)
    text = R.write_report(five).report.read_text()
    assert table_rows(text)["uniform"][0] == "5" and "Warning" not in text


def test_scores_csv_matches_the_summaries(cartpole_sweep):
    files = R.write_report(cartpole_sweep)
    with files.scores.open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(markdown.SCORES_COLUMNS)
    assert [(r["arm"], int(r["seed"])) for r in rows] == [
        (arm, s) for arm in ("uniform", "proportional") for s in range(4)
    ]
    for row in rows:
        summary = json.loads((cartpole_sweep / row["run_dir"] / "summary.json").read_text())
        assert float(row["final_return"]) == summary["final_eval_return_mean"]
        assert row["human_normalized"] == ""  # not an Atari game
        assert row["threshold"] == "475.0"
    firsts = UNIFORM_FIRST + PROPORTIONAL_FIRST
    assert [r["steps_to_threshold"] for r in rows] == ["" if f is None else str(f) for f in firsts]
    assert [float(r["auc"]) for r in rows] == UNIFORM_AUC + PROPORTIONAL_AUC
    np.testing.assert_allclose(
        [float(r["is_weight_mean"]) for r in rows], [1.0] * 4 + [0.6, 0.3, 0.1, 0.8]
    )


@pytest.mark.slow
def test_report_is_reproducible_from_the_run_dirs(cartpole_sweep):
    """Every file, figures included, is the same bytes when rebuilt from the same run dirs."""
    R.write_report(cartpole_sweep)
    first = {name: (cartpole_sweep / name).read_bytes() for name in REPORT_FILES}
    for name in REPORT_FILES:
        (cartpole_sweep / name).unlink()
    R.write_report(cartpole_sweep)
    assert {name: (cartpole_sweep / name).read_bytes() for name in REPORT_FILES} == first


def test_figures_are_png_at_200_dpi_and_svg(cartpole_sweep):
    files = R.write_report(cartpole_sweep)
    for png, width_inches in ((files.curves, 6.4), (files.profiles, 12.8)):
        with Image.open(png) as image:
            assert image.format == "PNG"
            assert min(image.info["dpi"]) >= 199.5
            assert image.size[0] == round(width_inches * figures.FIGURE_DPI)
    for svg in (files.curves_svg, files.profiles_svg):
        text = svg.read_text()
        assert text.startswith("<?xml") and "<svg" in text and "<dc:date>" not in text
    assert "![performance profiles](profiles.png) ([SVG](profiles.svg))" in (
        files.report.read_text()
    )


def test_curve_band_aggregates_each_step():
    """IQM at each step over the curves that have it; a lone curve's band is the point."""
    steps, centre, low, high = measure.curve_band(
        [[(10, 1.0), (20, 4.0)], [(10, 3.0), (20, 8.0)], [(10, 2.0)], [(10, 6.0)]]
    )
    np.testing.assert_array_equal(steps, [10, 20])
    # step 10: 1, 2, 3, 6 -> one cut from each end -> (2 + 3) / 2; step 20: 4, 8 -> 6
    np.testing.assert_array_equal(centre, [2.5, 6.0])
    assert low[0] <= 2.5 <= high[0] and (low[1], high[1]) == (4.0, 8.0)


def test_runs_are_grouped_by_env_and_arm_in_sweep_order(cartpole_sweep):
    sweep = runs.collect(cartpole_sweep)
    measured = [measure.measure(r, 475.0) for r in reversed(sweep.runs)]
    cells = measure.group_cells(sweep, measured)
    assert list(cells) == [("CartPole-v1", a) for a in ("uniform", "proportional", "rank")]
    assert [r.run.seed for r in cells[("CartPole-v1", "uniform")]] == [0, 1, 2, 3]
    assert cells[("CartPole-v1", "rank")] == []


def test_without_sweep_json_reads_every_summary(tmp_path):
    out = tmp_path / "loose"
    fake_run(out, "a/s0", "CartPole-v1", "uniform", 0, 10.0, [(100, 10.0)])
    fake_run(out, "a/s1", "CartPole-v1", "uniform", 1, 30.0, [(100, 30.0)])
    fake_run(out, "b/s0", "CartPole-v1", "rank", 0, 0.0, [(50, 5.0)], interrupted=True)
    sweep = runs.collect(out)
    assert [(r.arm, r.seed) for r in sweep.runs] == [("uniform", 0), ("uniform", 1)]
    assert sweep.missing == ("b/s0 (interrupted)",)
    text = R.write_report(out).report.read_text()
    assert "Runs used: 2 (no sweep.json); missing: b/s0 (interrupted)." in text
    # IQM of two runs is their mean; no IS weight was logged
    assert table_rows(text)["uniform"][1].startswith("20.0 [")
    assert table_rows(text)["uniform"][-1] == "n/a"


def make_run(arm: str, kind: str, settings=(), point=(), seed: int = 0) -> runs.Run:
    return runs.Run("CartPole-v1", arm, seed, f"{arm}/s{seed}", 1.0, 0.0, 1, 10, 1.0, (),
                    kind=kind, settings=settings, point=point)  # fmt: skip


def test_each_arm_is_compared_with_uniform_at_its_grid_point():
    """A grid crosses every arm, uniform included: proportional at alpha 0.4 is compared with
    uniform at alpha 0.4, not with a uniform at another value. An arm with settings of its own
    (rank/alpha=0.7, no grid) is compared with the plain uniform arm; uniform arms with none."""
    at = {a: (("replay.alpha", a),) for a in (0.4, 0.6)}
    sweep = runs.SweepRuns(Path("x"), None, ("CartPole-v1",), (), (
        make_run("uniform/alpha=0.4", "uniform", point=at[0.4]),
        make_run("proportional/alpha=0.4", "proportional", point=at[0.4]),
        make_run("uniform/alpha=0.6", "uniform", point=at[0.6]),
        make_run("proportional/alpha=0.6", "proportional", point=at[0.6]),
    ), None, ())  # fmt: skip
    assert measure.baseline_arms(sweep) == {
        "uniform/alpha=0.4": None, "proportional/alpha=0.4": "uniform/alpha=0.4",
        "uniform/alpha=0.6": None, "proportional/alpha=0.6": "uniform/alpha=0.6",
    }  # fmt: skip
    sweep = runs.SweepRuns(Path("x"), None, ("CartPole-v1",), (), (
        make_run("uniform", "uniform"),
        make_run("uniform/lr=0.001", "uniform", settings=(("agent.learning_rate", 1e-3),)),
        make_run("rank/alpha=0.7", "rank", settings=(("replay.alpha", 0.7),)),
    ), None, ())  # fmt: skip
    assert measure.baseline_arms(sweep) == {
        "uniform": None, "uniform/lr=0.001": None, "rank/alpha=0.7": "uniform",
    }  # fmt: skip


@pytest.mark.slow
def test_a_grid_sweep_reports_each_arm_against_uniform_at_its_point(tmp_path):
    """proportional beats uniform at alpha 0.4 on every seed (20 > 10: P = 1) and loses at 0.6
    (5 < 30: P = 0); against the wrong uniform both would flip."""
    out = tmp_path / "grid"
    planned = []
    cells = {("uniform", 0.4): 10.0, ("proportional", 0.4): 20.0, ("uniform", 0.6): 30.0,
             ("proportional", 0.6): 5.0}  # fmt: skip
    for (kind, alpha), score in cells.items():
        arm = f"{kind}/alpha={alpha}"
        for seed in range(5):
            rel = f"{arm}/s{seed}"
            fake_run(out, rel, "CartPole-v1", kind, seed, score, [(100, score), (200, score)])
            planned.append(
                {
                    "env_id": "CartPole-v1",
                    "arm": arm,
                    "seed": seed,
                    "run_dir": rel,
                    "kind": kind,
                    "settings": {},
                    "point": {"replay.alpha": alpha},
                }
            )
    record = sweep_record([], ["CartPole-v1"], [])
    fileio.write_json(out / "sweep.json", {**record, "seeds": list(range(5)), "runs": planned})
    rows = table_rows(R.write_report(out).report.read_text())
    assert rows["proportional/alpha=0.4"][4:6] == ["1.00 [1.00, 1.00] (5 pairs)"] * 2
    assert rows["proportional/alpha=0.6"][4:6] == ["0.00 [0.00, 0.00] (5 pairs)"] * 2
    assert rows["uniform/alpha=0.4"][4:6] == rows["uniform/alpha=0.6"][4:6] == ["n/a", "n/a"]


# --- thresholds -----------------------------------------------------------------------------------


def make_minatar_sweep(out: Path, games: dict[str, dict[str, list[float]]]) -> Path:
    """Fabricated MinAtar runs: ``games[env][arm]`` is the final score by seed; each run's eval
    curve is that score at 1000 and 2000 steps, so its AUC is the score too."""
    planned = []
    for env, arms in games.items():
        for arm, scores in arms.items():
            for seed, score in enumerate(scores):
                rel = f"{env.replace('/', '-')}/{arm}/s{seed}"
                fake_run(out, rel, env, arm, seed, score, [(1000, score), (2000, score)])
                planned.append((env, arm, seed, rel))
    arms = list(next(iter(games.values())))
    fileio.write_json(out / "sweep.json", sweep_record(planned, list(games), arms))
    return out


def test_a_game_without_finished_runs_is_left_out_of_the_pool_and_said_so(tmp_path):
    """A sweep under way: Freeway has no finished run yet. The pool across games is Breakout's
    alone (as a sweep of Breakout would give it), and a line says Freeway is left out. Pins a
    bug: the heading counted Freeway among the pooled games with no word that it had no runs
    (seen on the MinAtar study at 70 of 150 runs)."""
    out = make_minatar_sweep(tmp_path / "minatar", {
        "MinAtar/Breakout-v1": {"uniform": [0, 2, 4, 6, 8], "proportional": [2, 4, 6, 8, 10]},
        "MinAtar/Freeway-v1": {"uniform": [], "proportional": []},
    })  # fmt: skip
    text = R.write_report(out).report.read_text()
    section = text.split("## Across games: min-max normalised scores (2 games)")[1]
    assert "- MinAtar/Freeway-v1 is left out: it has no finished run yet." in section
    uniform = np.array([[0.0], [0.2], [0.4], [0.6], [0.8]])
    proportional = np.array([[0.2], [0.4], [0.6], [0.8], [1.0]])
    rows = table_rows(section)
    assert rows["uniform"][:3] == ["5", ci_text(uniform, 2), ci_text(uniform, 2)]
    assert rows["proportional"][:3] == ["5", ci_text(proportional, 2), ci_text(proportional, 2)]


def test_the_compute_line_counts_each_pack_session_once_by_its_longest_run(tmp_path):
    """A sweep stopped and resumed with other packs. Session 1: a, b and c in pack P1 (100 s;
    a's own session 99 s) and d alone (P2, 30 s). Session 2: a and b in P3 (50 s), c and d in P4
    (50 s): 100 + 30 + 50 + 50 = 230 s in 4 pack sessions, where the packs of the runs' last
    sessions alone would count P1 twice and lose P2. Summaries from before ``wall_sessions``
    count their one session in the pack their provenance names: e alone (10 s), g and h packed
    (40 s and 45 s: 45); f was resumed (20 s in its last session), so the sum is a lower bound;
    i's record is malformed (5 s, never resumed) and is read as unknown, its scores still used.
    230 + 10 + 45 + 20 + 5 = 310 s, 5.2 minutes in 8 pack sessions."""
    out = tmp_path / "sweep"
    pack_gh = {"pack": {"size": 2, "members": ["uniform/s6", "uniform/s7"]}}
    runs_ = {  # seed: (wall_seconds, more summary fields)
        0: (50.0, {"wall_sessions": [{"pack": "P1", "seconds": 99.0},
                                     {"pack": "P3", "seconds": 50.0}]}),
        1: (50.0, {"wall_sessions": [{"pack": "P1", "seconds": 100.0},
                                     {"pack": "P3", "seconds": 49.0}]}),
        2: (50.0, {"wall_sessions": [{"pack": "P1", "seconds": 100.0},
                                     {"pack": "P4", "seconds": 50.0}]}),
        3: (50.0, {"wall_sessions": [{"pack": "P2", "seconds": 30.0},
                                     {"pack": "P4", "seconds": 50.0}]}),
        4: (10.0, {}),
        5: (20.0, {"resumed_from_env_steps": 100}),
        6: (40.0, {"provenance": pack_gh}),
        7: (45.0, {"provenance": pack_gh}),
        8: (5.0, {"wall_sessions": "garbage"}),
    }  # fmt: skip
    planned = []
    for seed, (wall, more) in runs_.items():
        rel = f"uniform/s{seed}"
        fake_run(out, rel, "CartPole-v1", "uniform", seed, 100.0, [(100, 1.0), (200, 2.0)],
                 wall_seconds=wall, **more)  # fmt: skip
        planned.append(("CartPole-v1", "uniform", seed, rel))
    fileio.write_json(out / "sweep.json", sweep_record(planned, ["CartPole-v1"], ["uniform"]))
    text = R.write_report(out).report.read_text()
    assert "Runs used: 9 of 9 planned; missing: none." in text
    assert (
        "- Compute: 5.2 minutes of training time in 8 pack sessions (a pack trains its runs in "
        "one process and counts once, by its longest run; a run alone is a pack of one; start-up "
        "and checkpoint loading are not timed); a lower bound, as 1 run was resumed from "
        "checkpoints that did not time the sessions before them.\n"
    ) in text


@pytest.mark.slow
def test_threshold_for_an_env_without_one(tmp_path):
    """MinAtar's games have no reward_threshold: no steps column until --threshold gives one.
    Breakout at 10: uniform's curves (3, 8) -> (3, 12) reach it at 2000 on seed 1 only."""
    out = tmp_path / "minatar"
    planned = []
    for arm, curves in (
        ("uniform", [[(1000, 3.0), (2000, 8.0)], [(1000, 3.0), (2000, 12.0)]]),
        ("rank", [[(1000, 10.0), (2000, 11.0)], [(1000, 9.0), (2000, 10.0)]]),
    ):
        for seed, curve in enumerate(curves):  # fmt: skip
            rel = f"{arm}/s{seed}"
            fake_run(out, rel, "MinAtar/Breakout-v1", arm, seed, curve[-1][1], curve)
            planned.append(("MinAtar/Breakout-v1", arm, seed, rel))
    fileio.write_json(out / "sweep.json", sweep_record(planned, ["MinAtar/Breakout-v1"],
                                                  ["uniform", "rank"]))  # fmt: skip
    assert "steps to" not in R.write_report(out).report.read_text()

    result = runner.invoke(app, ["report", str(out), "--threshold", "MinAtar/Breakout-v1=10"])
    assert result.exit_code == 0, result.output
    text = (out / "report.md").read_text()
    rows = table_rows(text)
    assert rows["uniform"][3] == "not reached (1/2)"  # (2000, never)
    assert rows["rank"][3] == "1,500 (2/2)"  # median of 1000 and 2000
    assert "Steps to 10 (given with `--threshold`)" in text
    with (out / "scores.csv").open() as f:
        assert [(r["threshold"], r["steps_to_threshold"]) for r in csv.DictReader(f)] == [
            ("10.0", ""), ("10.0", "2000"), ("10.0", "1000"), ("10.0", "2000"),
        ]  # fmt: skip


@pytest.mark.slow
def test_threshold_overrides_gymnasiums(cartpole_sweep):
    """At 50 every seed of both arms is there at the first evaluation (values 100 or 480)."""
    result = runner.invoke(app, ["report", str(cartpole_sweep), "--threshold", "CartPole-v1=50"])
    assert result.exit_code == 0, result.output
    text = (cartpole_sweep / "report.md").read_text()
    rows = table_rows(text)
    assert rows["uniform"][3] == rows["proportional"][3] == "1,000 (4/4)"
    assert "| steps to 50 |" in text and "Steps to 50 (given with `--threshold`)" in text


def test_parse_thresholds():
    assert R.parse_thresholds(["MinAtar/Breakout-v1=10", "CartPole-v1 = -2.5"]) == {
        "MinAtar/Breakout-v1": 10.0,
        "CartPole-v1": -2.5,
    }
    assert R.parse_thresholds([]) == {}


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["CartPole-v1"], "--threshold 'CartPole-v1': expected ENV_ID=VALUE, e.g. "
                          "MinAtar/Breakout-v1=10"),
        (["=5"], "--threshold '=5': expected ENV_ID=VALUE, e.g. MinAtar/Breakout-v1=10"),
        (["CartPole-v1="], "--threshold 'CartPole-v1=': expected ENV_ID=VALUE, e.g. "
                           "MinAtar/Breakout-v1=10"),
        (["CartPole-v1=abc"], "--threshold 'CartPole-v1=abc': VALUE must be a finite number, "
                              "got 'abc'"),
        (["CartPole-v1=nan"], "--threshold 'CartPole-v1=nan': VALUE must be a finite number, "
                              "got 'nan'"),
        (["CartPole-v1=inf"], "--threshold 'CartPole-v1=inf': VALUE must be a finite number, "
                              "got 'inf'"),
        (["CartPole-v1=1", "CartPole-v1=2"], "--threshold CartPole-v1: given twice (1 and 2); "
                                             "give it once"),
        (["Acrobot-v1=-100"], "--threshold Acrobot-v1: the sweep has no env Acrobot-v1 (its "
                              "envs: CartPole-v1)"),
    ],
)  # fmt: skip
def test_bad_thresholds_are_one_line_and_change_nothing(reported_sweep, args, line):
    """Exit 2, one line naming the option and the value, and the report already there is left
    exactly as it was."""
    before = tree(reported_sweep)
    result = runner.invoke(
        app, ["report", str(reported_sweep), *[a for v in args for a in ("--threshold", v)]]
    )
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {line}\n"
    assert result.stdout == ""
    assert tree(reported_sweep) == before


# --- across games ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_minatar_games_are_min_max_normalised_by_hand(tmp_path):
    """Breakout spans 0..10 over all runs, Freeway 20..60; Seaquest is 0 on every run and is left
    out (no range). Normalised, uniform is Breakout (0, .2, .4, .6, .8) and Freeway (0, .25, .5,
    .75, 1): the 10 values' IQM cuts two per end and averages .2, .25, .4, .5, .6, .75 -> 0.45.
    proportional: Breakout (.2 .. 1), Freeway as uniform -> .25, .4, .5, .6, .75, .8 -> 0.55.
    Paired over seeds: Breakout all wins (1), Freeway all ties (1/2) -> P = 0.75. The AUC equals
    the final score on these flat curves, so its columns are the same."""
    out = make_minatar_sweep(tmp_path / "minatar", {
        "MinAtar/Breakout-v1": {"uniform": [0, 2, 4, 6, 8], "proportional": [2, 4, 6, 8, 10]},
        "MinAtar/Freeway-v1": {"uniform": [20, 30, 40, 50, 60],
                               "proportional": [20, 30, 40, 50, 60]},
        "MinAtar/Seaquest-v1": {"uniform": [0] * 5, "proportional": [0] * 5},
    })  # fmt: skip
    text = R.write_report(out).report.read_text()
    section = text.split("## Across games: min-max normalised scores (3 games)")[1]
    assert (
        "- MinAtar/Seaquest-v1 is left out of the final score and AUC comparison: every run has "
        "the same value (final score 0, AUC 0), so there is no range to normalise by."
    ) in section
    uniform = np.array([[0, 0], [0.2, 0.25], [0.4, 0.5], [0.6, 0.75], [0.8, 1.0]])
    proportional = np.array([[0.2, 0], [0.4, 0.25], [0.6, 0.5], [0.8, 0.75], [1.0, 1.0]])
    assert stats.iqm(uniform) == pytest.approx(0.45) and stats.iqm(proportional) == (
        pytest.approx(0.55)
    )
    rows = table_rows(section)
    assert rows["uniform"] == ["5", ci_text(uniform, 2), ci_text(uniform, 2), "n/a", "n/a"]
    p = p_text(proportional, uniform)
    assert rows["proportional"] == ["5", ci_text(proportional, 2), ci_text(proportional, 2), p, p]
    assert p.startswith("0.75 [")
    assert "Warning" not in section
    assert "and P(> uniform) pairs them across games." in section
    # under --baseline, the line names the arm the across-games P(>) pairs against
    based = R.write_report(out, baseline="proportional").report.read_text()
    assert "and P(> proportional) pairs them across games." in based


def test_human_normalised_scores_for_atari(tmp_path):
    """Pong -3.05 and Breakout 16.1 are both halfway from random to human: 0.5."""
    out = tmp_path / "atari"
    planned = []
    for env, score in (("ALE/Pong-v5", -3.05), ("ALE/Breakout-v5", 16.1)):
        for arm in ("uniform", "proportional"):
            for seed in (0, 1):
                rel = f"{env.replace('/', '-')}/{arm}/s{seed}"
                bump = 0.0 if arm == "uniform" else (1.0 if seed == 0 else -1.0)
                fake_run(out, rel, env, arm, seed, score + bump, [(100, score + bump)])
                planned.append((env, arm, seed, rel))
    fileio.write_json(out / "sweep.json", sweep_record(planned, ["ALE/Pong-v5", "ALE/Breakout-v5"],
                                                  ["uniform", "proportional"]))  # fmt: skip
    files = R.write_report(out)
    with files.scores.open() as f:
        rows = list(csv.DictReader(f))
    uniform_hns = [float(r["human_normalized"]) for r in rows if r["arm"] == "uniform"]
    np.testing.assert_allclose(uniform_hns, 0.5)
    text = files.report.read_text()
    assert "## Human-normalised scores (2 games)" in text
    hn_rows = table_rows(text.split("## Human-normalised")[1])
    # final score and AUC (one eval point: the AUC is that point) on the human scale
    assert hn_rows["uniform"][:3] == ["2", "0.50 [0.50, 0.50]", "0.50 [0.50, 0.50]"]
    # proportional: +1 on seed 0 of both games (wins), -1 on seed 1 (losses) -> P = 1/2
    assert hn_rows["proportional"][3].startswith("0.50 [")
    assert "**Warning: fewer than 5 seeds** for uniform (2), proportional (2)" in text
    assert "steps to" not in text  # the ALE games have no reward threshold


# --- errors ---------------------------------------------------------------------------------------


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="does not exist or is not a directory"):
        R.write_report(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no finished run"):
        R.write_report(tmp_path / "empty")
    out = tmp_path / "dup"
    fake_run(out, "x/s0", "CartPole-v1", "uniform", 0, 1.0, [(1, 1.0)])
    fake_run(out, "y/s0", "CartPole-v1", "uniform", 0, 2.0, [(1, 2.0)])
    with pytest.raises(ValueError, match="are both CartPole-v1 uniform seed 0"):
        R.write_report(out)
    # An evaluation curve with two points at one step has no area: the run is skipped, named;
    # with no other run, there is nothing to report.
    twice = tmp_path / "twice"
    fake_run(twice, "a/s0", "CartPole-v1", "uniform", 0, 1.0, [(100, 1.0), (100, 2.0)])
    warned = []
    with pytest.raises(ValueError, match=r": no run could be reported \(1 skipped, 0 not fin"):
        R.write_report(twice, warn=warned.append)
    assert warned == [f"{twice / 'a/s0'}: eval/return_mean: normalized_auc: two points at one "
                      "env step in [100.0, 100.0]; run skipped"]  # fmt: skip
    assert [p.name for p in twice.iterdir()] == ["a"]  # nothing written
    # A run cut short before its summary is still one run's dir, not a sweep.
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "config.yaml").write_text("run:\n  seed: 0\n")
    with pytest.raises(ValueError, match=r"cut is the run dir of one training run \(it holds "):
        R.write_report(cut)
    assert [p.name for p in cut.iterdir()] == ["config.yaml"]


@pytest.mark.slow
def test_cli_report(cartpole_sweep, tmp_path):
    result = runner.invoke(app, ["report", str(cartpole_sweep)])
    assert result.exit_code == 0, result.output
    assert (
        result.stdout == f"report: {cartpole_sweep / 'report.md'}\n"
        "  beside it: scores.csv, and as PNG and SVG: curves, profiles\n"
    )
    assert all((cartpole_sweep / name).is_file() for name in REPORT_FILES)
    result = runner.invoke(app, ["report", str(tmp_path / "nowhere")])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: sweep dir {tmp_path / 'nowhere'} does not exist or is not a directory\n"
    )
    assert result.stdout == ""


# --- a damaged sweep ------------------------------------------------------------------------------


def edit_summary(run_dir: Path, **changes) -> None:
    """Sets (or, with None, deletes) keys of a run's summary.json."""
    path = run_dir / "summary.json"
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    path.write_text(json.dumps(data))


def test_a_damaged_sweep_is_reported_as_far_as_it_can_be(cartpole_sweep, tmp_path):
    """Issue 23 item 10: ``report`` trusted its inputs. A ``sweep.json`` run path of ``../``, an
    absolute one, or a symlink out pulled an outside run into scores.csv; a summary.json missing
    a key was a ``KeyError`` traceback; one bad run stopped the whole report, its error line
    naming no file. Now each bad file is one warning line naming it, its run is skipped and listed
    in report.md, the other runs are reported, exit 0; a summary that is a FIFO is refused unread
    (reading it would block)."""
    out = cartpole_sweep
    elsewhere = tmp_path / "elsewhere"
    for rel, seed in (("run", 0), ("run2", 1), ("run3", 2)):  # would score 999
        fake_run(elsewhere, rel, "CartPole-v1", "rank", seed, 999.0, [(1000, 999.0)])
    (out / "inlink").symlink_to(elsewhere / "run3")
    record = json.loads((out / "sweep.json").read_text())
    record["runs"][8]["run_dir"] = "../elsewhere/run"
    record["runs"].append({**record["runs"][8], "seed": 1, "run_dir": str(elsewhere / "run2")})
    record["runs"].append({**record["runs"][8], "seed": 2, "run_dir": "inlink"})
    fileio.write_json(out / "sweep.json", record)
    edit_summary(out / "uniform/s1", seed=None)
    edit_summary(out / "uniform/s3", final_eval_return_mean="abc")
    (out / "proportional/s2/summary.json").write_text("not json{")
    (out / "uniform/s2/summary.json").unlink()
    os.mkfifo(out / "uniform/s2/summary.json")

    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("report: ")
    # A report that takes over ~30 s (a loaded machine) also prints progress lines off a terminal.
    warnings = [line for line in result.stderr.splitlines() if not line.startswith("progress: ")]
    assert sorted(warnings) == sorted(
        f"warning: {out}/{line}; run skipped"
        for line in [
            "uniform/s1/summary.json: no 'seed'",
            "uniform/s2/summary.json: not a regular file",
            "uniform/s3/summary.json: final_eval_return_mean: expected a finite number, got 'abc'",
            "proportional/s2/summary.json: cannot be read as JSON (Expecting value: line 1 "
            "column 1 (char 0))",
            "sweep.json: runs[8].run_dir '../elsewhere/run' leaves the sweep dir",
            f"sweep.json: runs[9].run_dir '{elsewhere / 'run2'}' leaves the sweep dir",
            "sweep.json: runs[10].run_dir 'inlink' leaves the sweep dir",
        ]
    )
    with (out / "scores.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["arm"], int(r["seed"])) for r in rows) == [
        ("proportional", 0), ("proportional", 1), ("proportional", 3), ("uniform", 0)
    ]  # fmt: skip
    assert all(float(r["final_return"]) != 999.0 and "elsewhere" not in r["run_dir"] for r in rows)
    text = (out / "report.md").read_text()
    assert "- Runs used: 4 of 11 planned; missing: none.\n" in text
    assert "- Runs skipped, their files damaged: uniform/s1/summary.json (no 'seed'); " in text
    assert "sweep.json (runs[8].run_dir '../elsewhere/run' leaves the sweep dir)" in text


def test_an_event_file_tensorboard_cannot_read_skips_its_run(cartpole_sweep):
    """Bug pinned: a damaged event file (a byte flipped, or its end cut off) gave a shorter
    curve without a word, since TensorBoard's reader stops at a bad record and says so only at
    DEBUG level; the report then measured the run on the part before it. Now the run is skipped
    with one warning naming the file and the reason, as for a damaged summary, and
    the other runs are reported."""
    out = cartpole_sweep
    (flipped,) = (out / "uniform/s0").glob("events.out.tfevents.*")
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0x01
    flipped.write_bytes(bytes(data))
    (cut,) = (out / "proportional/s1").glob("events.out.tfevents.*")
    with open(cut, "r+b") as file:
        file.truncate(cut.stat().st_size - 3)

    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    damaged = "damaged event file: TensorBoard stops reading it at a bad record"
    assert sorted(result.stderr.splitlines()) == [
        f"warning: {cut}: {damaged} (a record's data is cut short), so its curves would be cut "
        "short; run skipped",
        f"warning: {flipped}: {damaged} (a record's data fails its CRC-32C check), so its curves "
        "would be cut short; run skipped",
    ]
    with (out / "scores.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert sorted((r["arm"], int(r["seed"])) for r in rows) == [
        ("proportional", 0), ("proportional", 2), ("proportional", 3),
        ("uniform", 1), ("uniform", 2), ("uniform", 3),
    ]  # fmt: skip


def test_a_sweep_with_no_run_that_can_be_reported_is_one_error_and_writes_nothing(tmp_path):
    """Issue 23 item 10: when no run can be reported, each bad file is still named, then one
    ``error:`` line, exit 2, and no report file is written."""
    out = tmp_path / "sweep"
    fake_run(out, "uniform/s0", "CartPole-v1", "uniform", 0, 1.0, [(1, 1.0)])
    fake_run(out, "uniform/s1", "CartPole-v1", "uniform", 1, 1.0, [(1, 1.0)])
    edit_summary(out / "uniform/s0", env_id=None)
    edit_summary(out / "uniform/s1", seed="one")
    before = tree(out)
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"warning: {out}/uniform/s0/summary.json: no 'env_id'; run skipped",
        f"warning: {out}/uniform/s1/summary.json: seed: expected an integer, got 'one'; run "
        "skipped",
        f"error: sweep dir {out}: no run could be reported (2 skipped, 0 not finished)",
    ]
    assert result.stdout == "" and tree(out) == before


def final_returns(out: Path) -> list[float]:
    with (out / "scores.csv").open() as f:
        return [float(row["final_return"]) for row in csv.DictReader(f)]


def test_a_run_outside_or_not_the_one_planned_is_skipped(tmp_path):
    """Issue 23 item 10: a ``sweep.json`` run path of ``../elsewhere`` (alone: the rest whole)
    pulled an outside run into scores.csv; a run dir whose summary is not the run sweep.json
    plans there (another seed: a run copied in) was reported under the planned name; in a
    folder of run dirs without sweep.json, a summary.json symlinked to a file outside was read.
    Each is now skipped, named in one warning line."""
    out = make_cartpole_sweep(tmp_path / "sweep")
    fake_run(tmp_path, "elsewhere", "CartPole-v1", "rank", 0, 999.0, [(1000, 999.0)])
    record = json.loads((out / "sweep.json").read_text())
    record["runs"][8]["run_dir"] = "../elsewhere"  # rank s0: planned, never run
    fileio.write_json(out / "sweep.json", record)
    edit_summary(out / "uniform/s1", seed=7)
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    assert 999.0 not in final_returns(out) and len(final_returns(out)) == 7
    assert result.stderr.splitlines() == [
        f"warning: {out}/uniform/s1/summary.json: seed 7, but sweep.json plans 1 here; run skipped",
        f"warning: {out}/sweep.json: runs[8].run_dir '../elsewhere' leaves the sweep dir; run "
        "skipped",
    ]

    loose = tmp_path / "loose"
    for rel, seed in (("uniform/s0", 0), ("proportional/s0", 0), ("proportional/s1", 1)):
        fake_run(loose, rel, "CartPole-v1", rel.split("/")[0], seed, 1.0, [(1, 1.0), (2, 2.0)])
    fake_run(tmp_path, "outside", "CartPole-v1", "uniform", 1, 999.0, [(1, 9.0), (2, 9.0)])
    (loose / "uniform/s1").mkdir(parents=True)
    (loose / "uniform/s1/summary.json").symlink_to(tmp_path / "outside/summary.json")
    result = runner.invoke(app, ["report", str(loose)])
    assert result.exit_code == 0, result.output
    assert final_returns(loose) == [1.0, 1.0, 1.0]
    assert result.stderr.splitlines() == [
        f"warning: {loose}/uniform/s1/summary.json: a symlink out of the sweep dir; run skipped"
    ]
    sweep = runs.collect(loose)
    assert [str(s) for s in sweep.skipped] == [
        "uniform/s1/summary.json (a symlink out of the sweep dir)"
    ]


# What a terminal acts on (clear the screen) and a forged line, as a name in a sweep dir may hold.
FORGED = "\x1b[2J\nerror: forged"
# An arm named in sweep.json with that, and pipes that would end its cell and add a column.
FORGED_ARM = f"prop | x{FORGED} | 1 |"
FORGED_RUN_DIR = f"uniform/s1{FORGED}"


def make_forged_sweep(out: Path) -> Path:
    """The cartpole sweep with proportional's arm named ``FORGED_ARM`` in sweep.json, and
    uniform/s1 moved to ``FORGED_RUN_DIR`` with a damaged summary (a warning names its dir)."""
    make_cartpole_sweep(out)
    (out / "uniform/s1").rename(out / FORGED_RUN_DIR)
    edit_summary(out / FORGED_RUN_DIR, seed=None)
    record = json.loads((out / "sweep.json").read_text())
    for planned in record["runs"]:
        planned["arm"] = FORGED_ARM if planned["arm"] == "proportional" else planned["arm"]
        if planned["run_dir"] == "uniform/s1":
            planned["run_dir"] = FORGED_RUN_DIR
    record["arms"] = [FORGED_ARM if a == "proportional" else a for a in record["arms"]]
    fileio.write_json(out / "sweep.json", record)
    return out


def markdown_tables(text: str) -> list[list[list[str]]]:
    """The tables of ``text`` as GitHub reads them, each a list of rows of cells, header first:
    after a header row and its ``|---|`` line, every line up to a blank one is a row, with or
    without a leading ``|`` (so a raw newline in a cell starts a row); cells split at each ``|``
    without a backslash before it."""

    def cells(row: str) -> list[str]:
        row = row.strip().removeprefix("|")
        if row.endswith("|") and not row.endswith("\\|"):
            row = row[:-1]
        return [c.strip() for c in re.split(r"(?<!\\)\|", row)]

    lines = re.split(r"\r\n|\r|\n", text)
    tables = []
    for i, line in enumerate(lines[:-1]):
        if line.startswith("|") and lines[i + 1].startswith("|---"):
            rows = [line]
            for row in lines[i + 2 :]:
                if not row.strip():
                    break
                rows.append(row)
            tables.append([cells(row) for row in rows])
    return tables


def test_a_run_dir_s_name_cannot_clear_the_screen_or_forge_a_line_in_a_warning(tmp_path):
    """Issue 43, E11: ``report``'s warnings printed a run dir's name as the sweep dir holds it,
    raw on the terminal: ``\x1b[2J`` cleared the screen and a newline started a forged
    ``error:`` line. Now each warning is one line, its control characters escaped as ``fail``
    escapes them (``printable``); and the figures' labels are escaped too, so matplotlib has no
    ESC glyph to warn of (its warning quoted the character raw), which ``CliRunner`` under
    pytest would not show: a real process."""
    out = make_forged_sweep(tmp_path / "sweep")
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(repo), "PYTHONWARNINGS": "default"}
    done = subprocess.run([sys.executable, "-m", "per_dqn.cli", "report", str(out)],
                          capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stderr
    lines = done.stderr.splitlines()
    assert not [line for line in lines if line.startswith("error: forged")], lines
    warnings = [line for line in lines if line.startswith("warning: ")]
    assert len(warnings) == 1, lines
    shown = "uniform/s1\\x1b[2J\\nerror: forged/summary.json"
    assert warnings[0].startswith(f"warning: {out}/{shown}: "), warnings
    assert warnings[0].endswith("; run skipped")


def test_an_arm_s_name_cannot_add_a_row_or_a_column_to_report_md(tmp_path):
    """issue 43, E11: an arm named in sweep.json with a newline broke report.md's tables (the
    text after it a row of its own), and a ``|`` in it a column more. Now every cell is
    escaped: control characters as ``printable`` does, ``|`` as ``\\|``; and no line of
    report.md holds a raw control character."""
    out = make_forged_sweep(tmp_path / "sweep")
    report.write_report(out)
    text = (out / "report.md").read_text()
    assert "\x1b" not in text
    assert not [line for line in text.splitlines() if "error: forged" in line.partition("\\n")[0]]
    tables = markdown_tables(text)
    for table in tables:
        assert {len(row) for row in table} == {len(table[0])}, table
    arm = "prop \\| x\\x1b[2J\\nerror: forged \\| 1 \\|"
    (scores,) = [t for t in tables if t[0][:2] == ["arm", "runs"]]
    assert [row[0] for row in scores[1:]] == ["uniform", arm, "rank"]
    (training,) = [t for t in tables if t[0][:2] == ["env", "arm"]]
    assert [row[1] for row in training[1:]] == ["uniform", arm]
    assert [row[2] for row in training[1:]] == ["3", "4"]
    assert f"- Arms: uniform, {arm.replace(chr(92) + '|', '|')}, rank; seeds" in text


def test_ablate_prints_the_report_s_warnings_escaped_as_report_does(workdir):
    """issue 43, E11: ``ablate`` prints the same skip warnings as ``report`` once its runs are
    done, and printed them raw too: an ``ablate`` re-run of a finished sweep whose sweep.json
    (a shared dir's) lists a run dir named with ``\x1b[2J`` and a newline cleared the screen
    and forged an ``error:`` line. Now they are escaped as ``report``'s are."""
    sweep = plan.plan_sweep("cartpole.yaml", ("uniform",), [0, 1], 3000, [], Path("sw"))
    sweep.out.mkdir()
    curve = [(1000, 1.0), (2000, 2.0), (3000, 3.0)]
    for job in sweep.jobs:
        fake_run(sweep.out, job.run_dir, "CartPole-v1", "uniform", job.seed, 100.0, curve)
    fake_run(sweep.out, FORGED_RUN_DIR, "CartPole-v1", "uniform", 9, 1.0, curve)
    edit_summary(sweep.out / FORGED_RUN_DIR, seed=None)  # damaged: a warning names its dir
    record = sweep.record
    record["runs"].append({**record["runs"][0], "seed": 9, "run_dir": FORGED_RUN_DIR})
    fileio.write_json(sweep.out / "sweep.json", record)
    result = runner.invoke(app, ["ablate", "-c", "cartpole.yaml", "--replay", "uniform", "--seeds",
                                 "2", "--steps", "3000", "--out", "sw"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("sweep sw: 2 runs, 2 finished, 0 to run\nreport: ")
    # click drops an ANSI sequence off a terminal (not on one): the escaped text is what tells.
    assert "\x1b" not in result.stderr
    (line,) = result.stderr.splitlines()  # no forged line
    assert line.startswith("warning: sw/uniform/s1\\x1b[2J\\nerror: forged/summary.json: ")
    assert line.endswith("; run skipped")


def finished_sweep(seed_field=0) -> plan.Sweep:
    """A planned two-run CartPole sweep in ``sw`` (the cwd's) whose runs are finished (fake run
    dirs, as ``Trainer.run`` leaves them); ``seed_field`` None damages both summaries."""
    sweep = plan.plan_sweep("cartpole.yaml", ("uniform",), [0, 1], 3000, [], Path("sw"))
    sweep.out.mkdir()
    curve = [(1000, 1.0), (2000, 2.0), (3000, 3.0)]
    for job in sweep.jobs:
        fake_run(sweep.out, job.run_dir, "CartPole-v1", "uniform", job.seed, 100.0, curve)
        if seed_field is None:
            edit_summary(sweep.out / job.run_dir, seed=None)
    fileio.write_json(sweep.out / "sweep.json", sweep.record)
    return sweep


ABLATE_SW = ["ablate", "-c", "cartpole.yaml", "--replay", "uniform", "--seeds", "2", "--steps",
             "3000", "--out", "sw"]  # fmt: skip


def test_a_report_file_that_cannot_be_written_is_one_line_not_a_traceback(workdir):
    """Pins a bug: a report file that could not be written (a read-only sweep dir, a full disk;
    here ``scores.csv`` is a directory) reached the user of ``report`` and of ``ablate`` as an
    ``OSError`` traceback. Now each prints one ``error:`` line naming the file, exit 1, and the
    runs are as they were."""
    sweep = finished_sweep()
    (sweep.out / "scores.csv").mkdir()
    before = tree(sweep.out)
    for args in (["report", "sw"], ABLATE_SW):
        result = runner.invoke(app, args)
        assert result.exit_code == 1, (args, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit)
        (line,) = result.stderr.splitlines()
        assert line.startswith("error: sw/scores.csv: Is a directory; the report was not "
                               "finished (the runs are untouched; `per-dqn report sw` writes it "
                               "once it can)"), line  # fmt: skip
        assert not list(sweep.out.glob(".tmp-*")), "a temp file was left behind"
        for rel in ("uniform/s0", "uniform/s1"):
            assert {k: v for k, v in tree(sweep.out).items() if k.startswith(rel)} == {
                k: v for k, v in before.items() if k.startswith(rel)
            }


def test_ablate_exits_non_zero_when_no_run_can_be_reported(workdir):
    """Pins a bug: an ``ablate`` re-run of a finished sweep none of whose runs can be read printed
    ``error: ... no run could be reported`` and exited 0. Now it exits 1 (``report`` on the
    same dir exits 2: there the dir is the input)."""
    finished_sweep(seed_field=None)
    result = runner.invoke(app, ABLATE_SW)
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[-1] == (
        "error: sweep dir sw: no run could be reported (2 skipped, 0 not finished)"
    )


# --- a real sweep ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_real_sweep_reports_what_its_event_files_hold(tmp_path):
    """Two real CartPole runs (uniform, proportional; 600 steps): the report's AUC and mean IS
    weight are recomputed here from the event files (read with TensorBoard's own reader): the
    trapezoid area of the eval curve over its span, and the mean of proportional's logged
    ``per/is_weight_mean`` (below 1: PER's weights are normalised by their maximum); uniform's
    weights are all 1, shown as a dash."""
    out = tmp_path / "sweep"
    args = ["ablate", "-c", "cartpole.yaml", "--replay", "uniform,proportional", "--seeds", "1",
            "--steps", "600", "--workers", "2", "--out", str(out),
            *sets(*TINY)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output

    with (out / "scores.csv").open() as f:
        rows = {r["arm"]: r for r in csv.DictReader(f)}
    for arm in ("uniform", "proportional"):
        curve = read_scalars(out / arm / "s0")[tags.EVAL_RETURN_MEAN]
        assert [s for s, _ in curve] == [300, 600]  # eval_interval 300, and the final step
        (_, v0), (_, v1) = curve
        assert float(rows[arm]["auc"]) == pytest.approx((v0 + v1) / 2)
    weights = [v for _, v in read_scalars(out / "proportional" / "s0")[tags.PER_IS_WEIGHT_MEAN]]
    assert weights and float(rows["proportional"]["is_weight_mean"]) == pytest.approx(
        np.mean(weights)
    )
    assert 0 < np.mean(weights) < 1
    text = (out / "report.md").read_text()
    table = table_rows(text)
    assert table["uniform"][-1] == "-"
    assert table["proportional"][-1] == f"{np.mean(weights):.3g}"
    # Two runs alone: two pack sessions, each timed whole.
    seconds = sum(summary_of(out / arm / "s0")["wall_seconds_total"] for arm in rows)
    assert f"- Compute: {seconds / 60:,.1f} minutes of training time in 2 pack sessions (" in text


# --- sensitivity to a grid key ------------------------------------------------------------------


def make_grid_sweep(out: Path, scores: dict[tuple[str, float, int], list[float]]) -> Path:
    """Fabricated runs of a grid over replay.alpha x agent.n_step: ``scores[(kind, alpha, n)]``
    is the final score by seed (its curve is that score at two steps, so its AUC is too)."""
    planned = []
    for (kind, alpha, n), by_seed in scores.items():
        arm = f"{kind}/alpha={alpha},n={n}"
        for seed, score in enumerate(by_seed):
            rel = f"{arm}/s{seed}"
            fake_run(out, rel, "CartPole-v1", kind, seed, score, [(100, score), (200, score)])
            planned.append({"env_id": "CartPole-v1", "arm": arm, "seed": seed, "run_dir": rel,
                            "kind": kind, "settings": {},
                            "point": {"replay.alpha": alpha, "agent.n_step": n}})  # fmt: skip
    record = sweep_record([], ["CartPole-v1"], [])
    fileio.write_json(out / "sweep.json", {**record, "seeds": [0, 1, 2, 3], "runs": planned})
    return out


@pytest.mark.slow
def test_sensitivity_to_a_numeric_grid_key_by_hand(tmp_path):
    """Per series (everything but the key fixed), the IQM over seeds at each value: 4 seeds cut
    one from each end, so the IQM of (1, 2, 3, 10) is 2.5."""
    scores = {
        ("proportional", 0.4, 1): [1.0, 2.0, 3.0, 10.0],  # IQM 2.5
        ("proportional", 0.8, 1): [4.0, 5.0, 6.0, 0.0],  # IQM 4.5
        ("proportional", 0.4, 3): [7.0, 7.0, 7.0, 7.0],
        ("proportional", 0.8, 3): [9.0, 8.0, 9.0, 8.0],  # IQM 8.5
    }
    files = R.write_report(make_grid_sweep(tmp_path / "grid", scores))
    text = files.report.read_text()
    assert "## Sensitivity to `replay.alpha`" in text and "## Sensitivity to `agent.n_step`" in text
    rows = [line.split(" | ")[:4] for line in text.splitlines() if line.startswith("| proport")]
    by_alpha = [r for r in rows if r[0] in ("| proportional/n=1", "| proportional/n=3")]
    assert [(r[0], r[1], r[3].split(" [")[0]) for r in by_alpha] == [
        ("| proportional/n=1", "0.4", "2.5"), ("| proportional/n=1", "0.8", "4.5"),
        ("| proportional/n=3", "0.4", "7.0"), ("| proportional/n=3", "0.8", "8.5"),
    ]  # fmt: skip
    by_n = [r for r in rows if r[0] in ("| proportional/alpha=0.4", "| proportional/alpha=0.8")]
    assert [(r[0], r[1], r[3].split(" [")[0]) for r in by_n] == [
        ("| proportional/alpha=0.4", "1", "2.5"), ("| proportional/alpha=0.4", "3", "7.0"),
        ("| proportional/alpha=0.8", "1", "4.5"), ("| proportional/alpha=0.8", "3", "8.5"),
    ]  # fmt: skip
    assert files.sensitivity.read_bytes().startswith(b"\x89PNG")
    assert files.sensitivity_svg.read_text().lstrip().startswith("<?xml")


def fake_normalization_sweep(out: Path, scores: dict[str, list[float]]) -> None:
    """A sweep dir of proportional runs over a grid of ``replay.weight_normalization``: for each
    value, one finished CartPole run per seed with the given final score (a flat curve)."""
    planned = []
    for norm, finals in scores.items():
        arm = f"proportional/weight_normalization={norm}"
        for seed, score in enumerate(finals):
            fake_run(out, f"{arm}/s{seed}", "CartPole-v1", "proportional", seed, score,
                     [(100, score), (200, score)])  # fmt: skip
            planned.append({"env_id": "CartPole-v1", "arm": arm, "seed": seed,
                            "run_dir": f"{arm}/s{seed}", "kind": "proportional", "settings": {},
                            "point": {"replay.weight_normalization": norm}})  # fmt: skip
    fileio.write_json(
        out / "sweep.json", {**sweep_record([], ["CartPole-v1"], []), "runs": planned}
    )


@pytest.mark.slow
def test_no_sensitivity_section_without_a_numeric_grid_key(tmp_path):
    """A grid of strings (weight_normalization) is compared by the table, not plotted against."""
    out = tmp_path / "strings"
    fake_normalization_sweep(out, {"global": [1.0, 1.0], "batch": [2.0, 2.0]})
    files = R.write_report(out)
    assert "Sensitivity" not in files.report.read_text()
    assert files.sensitivity is None and not (out / figures.SENSITIVITY_FILE).exists()


@pytest.mark.slow
def test_baseline_pairs_every_arm_against_the_arm_named(tmp_path):
    """``--baseline ARM``: P(>) against that arm, paired by seed, e.g. batch against global IS
    normalisation (no uniform arm at all); an arm the sweep lacks is one error line, exit 2."""
    out = tmp_path / "norms"
    fake_normalization_sweep(out, {"global": [1.0, 3.0, 5.0], "batch": [2.0, 2.0, 6.0]})
    plain = table_rows(R.write_report(out).report.read_text())
    assert "P(> uniform), final" not in (out / "report.md").read_text()  # nothing to pair with
    base = "proportional/weight_normalization=global"
    text = R.write_report(out, baseline=base).report.read_text()
    rows = table_rows(text)
    # batch beats global on seeds 0 and 2, loses on seed 1: 2/3
    expected = p_text([2.0, 2.0, 6.0], [1.0, 3.0, 5.0])
    assert rows["proportional/weight_normalization=batch"][4:6] == [expected] * 2
    assert rows[base][4:6] == ["n/a", "n/a"]
    assert f"P(> {base}), final" in text and plain[base][:4] == rows[base][:4]
    result = runner.invoke(app, ["report", str(out), "--baseline", "uniform"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --baseline: 'uniform' is not an arm of ")


@pytest.mark.slow
def test_report_states_each_arms_settings_and_the_grid(tmp_path):
    scores = {("proportional", 0.4, 1): [1.0, 2.0], ("proportional", 0.8, 1): [3.0, 4.0]}
    out = make_grid_sweep(tmp_path / "grid", scores)
    record = json.loads((out / "sweep.json").read_text())
    record["grid"] = {"replay.alpha": [0.4, 0.8], "agent.n_step": [1]}
    record["arm_settings"] = {"rank/beta0=0.5": {"replay.beta0": 0.5}}
    fileio.write_json(out / "sweep.json", record)
    text = R.write_report(out).report.read_text()
    assert "- Arm `rank/beta0=0.5` sets `replay.beta0=0.5`." in text
    assert "- Grid: `replay.alpha` takes `0.4`, `0.8`, crossed with every arm." in text
    assert "- Grid: `agent.n_step` takes `1`, crossed with every arm." in text


class _InterruptAfter:
    """A callback that interrupts the run (as Ctrl-C does, no checkpoint) at a log point."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_log(self, env_steps: int, values: dict[str, float]) -> None:
        if env_steps >= self.step:
            raise KeyboardInterrupt


@pytest.mark.slow
def test_reading_a_resumed_run_drops_its_purged_points_without_a_warning(tmp_path, caplog):
    """A run interrupted at step 750 and resumed from its step-500 checkpoint: its first event
    file holds points past 500 that the resume's ``purge_step`` drops. ``read_curves`` merges the
    files as TensorBoard does (no step twice, the resumed values kept) and stays quiet.

    Bug pinned: `per-dqn report` printed TensorBoard's "Detected out of order event.step likely
    caused by a TensorFlow restart ... Removing N scalars" warning for every resumed run, which
    reads like corrupt data though the purge is by design."""
    import per_dqn

    short = {
        "train.total_env_steps": 1_000, "train.learning_starts": 200, "train.eval_interval": 500,
        "train.eval_episodes": 2, "train.final_eval_episodes": 2, "train.log_interval": 250,
        "checkpoint.interval_steps": 500, "agent.hidden_sizes": [32, 32],
        "replay.capacity": 2_000, "run.device": "cpu",
    }  # fmt: skip
    run_dir = tmp_path / "run"
    stopped = per_dqn.train(
        "cartpole", overrides=short, run_dir=run_dir, callbacks=[_InterruptAfter(750)]
    )
    assert stopped.summary["interrupted"] and stopped.summary["env_steps"] >= 750
    resumed = per_dqn.resume(run_dir)
    assert resumed.summary["resumed_from_env_steps"] == 500
    assert len(list(run_dir.glob("events.out.tfevents.*"))) == 2

    with caplog.at_level("WARNING"):
        curves = runs.read_curves(run_dir, (tags.EXPLORE_EPSILON,))
    assert [r.getMessage() for r in caplog.records if "out of order" in r.getMessage()] == []
    assert [step for step, _ in curves[tags.EXPLORE_EPSILON]] == [250, 500, 750, 1000]


def test_training_returns_are_measured_as_the_literature_does_by_hand():
    """The EMA from 0 (``avg <- 0.99 avg + 0.01 G``) over episodes, after the last one, and the
    mean of the last 100 returns."""
    returns = [(10_000, 10.0), (40_000, 20.0), (60_000, 0.0), (100_000, 30.0)]
    ema = measure.train_return_ema(returns)
    assert [avg for _, avg in ema] == pytest.approx([0.1, 0.299, 0.29601, 0.5930499])
    assert measure.published_measures(returns) == pytest.approx((0.5930499, 15.0))
    many = [(i, float(i)) for i in range(1, 151)]
    assert measure.published_measures(many)[1] == pytest.approx(sum(range(51, 151)) / 100)
    assert measure.published_measures([]) == (None, None)


def test_the_report_gives_each_run_s_training_returns_from_its_event_file(tmp_path):
    """Pins the literature's measures end to end: ``episode/return`` points written to a run's
    event file come back in ``scores.csv`` as the hand-computed EMA and last-100 mean, and in
    report.md's training-returns table as the mean (sd) over seeds."""
    out = tmp_path / "sweep"
    planned = []
    for seed, returns in enumerate(([1.0] * 200, [3.0] * 200)):
        rel = f"uniform/s{seed}"
        planned.append(("MinAtar/Breakout-v1", "uniform", seed, rel))
        fake_run(out, rel, "MinAtar/Breakout-v1", "uniform", seed, 5.0,
                 [(100_000, 4.0), (200_000, 5.0)])  # fmt: skip
        logger = metrics.TensorBoardLogger(out / rel)
        for i, value in enumerate(returns):
            logger.scalars({tags.EPISODE_RETURN: value}, (i + 1) * 1000)
        logger.close()
    fileio.write_json(
        out / "sweep.json", sweep_record(planned, ["MinAtar/Breakout-v1"], ["uniform"])
    )
    files = R.write_report(out)
    with files.scores.open() as f:
        rows = list(csv.DictReader(f))
    for row, g in zip(rows, (1.0, 3.0), strict=True):
        # A constant return G: the EMA after episode n is G (1 - 0.99 ** n); 200 episodes.
        assert float(row["train_return_ema"]) == pytest.approx(g * (1 - 0.99**200))
        assert float(row["train_return_last100"]) == g
    text = files.report.read_text()
    emas = [g * (1 - 0.99**200) for g in (1.0, 3.0)]
    row = f"| MinAtar/Breakout-v1 | uniform | 2 | {np.mean(emas):.2f} ({np.std(emas, ddof=1):.2f})"
    assert row + " | 2.00 (1.41) |" in text


def test_report_tells_its_stages_as_it_goes(cartpole_sweep):
    """The feed of ``report``'s progress display (issue 26: a large sweep's report printed
    nothing while it read): every planned run is counted as it is looked at, the not-run one
    included, then the statistics, the figures and each file written, in that order."""
    seen: list[tuple[str, int, int]] = []
    files = R.write_report(cartpole_sweep, on_stage=lambda *a: seen.append(a))
    reading = [s for s in seen if s[0] == "reading runs"]
    assert reading == [("reading runs", i, 9) for i in range(10)]
    rest = [s for s in seen if s[0] != "reading runs"]
    written = len([p for p in vars(files).values() if p is not None])
    assert rest == [
        ("statistics", 0, 1), ("statistics", 1, 1), ("figures", 0, 1), ("figures", 1, 1),
        *[("writing", i, written) for i in range(written + 1)],
    ]  # fmt: skip
    assert seen.index(("reading runs", 9, 9)) < seen.index(("statistics", 0, 1))


def test_an_arm_keeps_one_colour_and_legends_sit_outside_the_data(cartpole_sweep):
    """Pins the figures' blemishes (issue 26): legends drawn over the data, an arm's colour
    changing from one figure to the next (arms other than a bare kind took the colour of their
    index, which differed between figures), and a one-seed line hidden under another. Now one
    legend per figure, below every panel, an arm's (colour, line style) the same in each figure,
    and no two arms with the same style."""
    from matplotlib.lines import Line2D

    sweep = runs.collect(cartpole_sweep)
    arms = ["uniform", "proportional/alpha=0.4", "rank", "proportional/alpha=0.8"]
    styles = figures.arm_styles(arms)
    assert styles["uniform"][0] == "#4c72b0" and styles["rank"][0] == "#55a868"
    kinds = figures.arm_styles(list(KINDS))  # every kind alone: a colour of its own, whatever arms
    assert len({color for color, _ in kinds.values()}) == len(KINDS)
    assert all(figures.arm_styles([k])[k][0] == kinds[k][0] for k in KINDS)
    assert len(set(styles.values())) == len(arms)
    assert figures.arm_styles(arms[:2]) == {a: styles[a] for a in arms[:2]}  # order, not count
    measured = [measure.measure(r, 475.0) for r in sweep.runs]
    cells = measure.group_cells(sweep, measured)
    norm = measure.normalization(sweep, cells)
    drawn = {}
    for fig in (figures.plot_curves(sweep, cells, {"CartPole-v1": 475.0}),
                figures.plot_profiles(sweep, cells, norm)):  # fmt: skip
        fig.canvas.draw()
        assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
        legend_box = fig.legends[0].get_window_extent()
        for ax in fig.axes:
            assert not legend_box.overlaps(ax.get_window_extent())
            assert legend_box.y1 <= ax.get_window_extent().y0
            for line in ax.get_lines():
                if isinstance(line, Line2D) and line.get_label() in sweep.arms:
                    drawn.setdefault(line.get_label(), set()).add(
                        (line.get_color(), line.get_linestyle())
                    )
    expected = figures.arm_styles(sweep.arms)
    assert set(drawn) == {"uniform", "proportional"}
    for arm, seen in drawn.items():
        assert seen == {expected[arm]}


@pytest.mark.slow
def test_the_sensitivity_figure_s_legend_sits_below_its_panels_one_style_a_series(tmp_path):
    """The sensitivity figure, as the curves and profiles above: one legend, below every panel
    and over none, and each series drawn in one (colour, line style) in every panel, no two
    series alike (the alpha figure of docs/results/minatar.md is one)."""
    from matplotlib.container import ErrorbarContainer

    scores = {
        (kind, alpha, n): [1.0 + alpha, 2.0, 3.0 * n, 4.0]
        for kind in ("proportional", "rank") for alpha in (0.4, 0.8) for n in (1, 3)
    }  # fmt: skip
    sweep = runs.collect(make_grid_sweep(tmp_path / "grid", scores))
    measured = [measure.measure(r, None) for r in sweep.runs]
    fig = figures.plot_sensitivity(sweep, measured, ["replay.alpha", "agent.n_step"])
    fig.canvas.draw()
    assert len(fig.axes) == 2 * 2  # a row per key (one env), a column per metric
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    legend_box = fig.legends[0].get_window_extent()
    drawn: dict[str, set] = {}
    for ax in fig.axes:
        assert legend_box.y1 <= ax.get_window_extent().y0
        for container in ax.containers:
            assert isinstance(container, ErrorbarContainer)
            line = container.lines[0]
            drawn.setdefault(container.get_label(), set()).add(
                (line.get_color(), line.get_linestyle())
            )
    assert set(drawn) == {f"{k}/n={n}" for k in ("proportional", "rank") for n in (1, 3)} | {
        f"{k}/alpha={a}" for k in ("proportional", "rank") for a in (0.4, 0.8)
    }
    assert all(len(seen) == 1 for seen in drawn.values()), drawn
    assert len({next(iter(seen)) for seen in drawn.values()}) == len(drawn)
