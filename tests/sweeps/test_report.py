"""Reports rebuilt from run dirs: hand-computed tables from fabricated runs (no training), the
missing-run list, human-normalised Atari scores, and one-line errors."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from per_dqn import metrics as m
from per_dqn.cli import app
from per_dqn.sweeps import report, runs, stats

R = report


def fake_run(
    out: Path,
    rel: str,
    env_id: str,
    arm: str,
    seed: int,
    score: float,
    curve: list[tuple[int, float]],
    interrupted: bool = False,
) -> None:
    """A run dir as ``Trainer.run`` leaves it: an event file with the eval curve and a summary."""
    run_dir = out / rel
    run_dir.mkdir(parents=True)
    logger = m.TensorBoardLogger(run_dir)
    for step, value in curve:
        logger.scalars({m.EVAL_RETURN_MEAN: value}, step)
    logger.close()
    m.write_json(
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
# Eval curves at 1000, 2000, 3000 steps: proportional reaches 475 at 2000 on seeds 0 and 3 and
# never on seeds 1 and 2 -> median over (2000, 2000, never, never) is "not reached", 2/4.
# uniform reaches it at 1000 (s0), 2000 (s1), 3000 (s2) and never (s3) -> median 2500, 3/4.
UNIFORM_FIRST = [1000, 2000, 3000, None]
PROPORTIONAL_FIRST = [2000, None, None, 2000]


@pytest.fixture
def cartpole_sweep(tmp_path) -> Path:
    out = tmp_path / "sweep"
    planned = []
    for arm, scores, firsts in (
        ("uniform", UNIFORM, UNIFORM_FIRST),
        ("proportional", PROPORTIONAL, PROPORTIONAL_FIRST),
    ):
        for seed, (score, first) in enumerate(zip(scores, firsts, strict=True)):
            rel = f"{arm}/s{seed}"
            planned.append(("CartPole-v1", arm, seed, rel))
            curve = [(s, 480.0 if first is not None and s >= first else 100.0)
                     for s in (1000, 2000, 3000)]  # fmt: skip
            fake_run(out, rel, "CartPole-v1", arm, seed, score, curve)
    planned.append(("CartPole-v1", "rank", 0, "rank/s0"))  # planned, never started
    m.write_json(out / "sweep.json", sweep_record(planned, ["CartPole-v1"], ["uniform",
                                                  "proportional", "rank"]))  # fmt: skip
    return out


def table_rows(text: str) -> dict[str, list[str]]:
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| arm"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def ci_text(scores, statistic, digits=1) -> str:
    low, high = stats.stratified_bootstrap_ci(np.array(scores), statistic, reps=2000, seed=0)
    return f"{statistic(scores):,.{digits}f} [{low:,.{digits}f}, {high:,.{digits}f}]"


def test_steps_to_threshold_by_hand():
    curve = [(1000, 100.0), (2000, 475.0), (3000, 200.0), (4000, 500.0)]
    assert R.steps_to_threshold(curve, 475) == 2000  # reaching counts, not staying
    assert R.steps_to_threshold(curve, 501) is None
    assert R.steps_to_threshold([], 1.0) is None


def test_censored_median_by_hand():
    """A seed that never reaches the threshold ranks after every seed that does."""
    assert R.censored_median([3000, 1000, 2000]) == 2000
    assert R.censored_median([1000, None, 3000]) == 3000
    assert R.censored_median([1000, 2000, 3000, None]) == 2500
    assert R.censored_median([1000, 2000, None, None]) == math.inf  # half never: not reached
    assert R.censored_median([None]) == math.inf
    with pytest.raises(ValueError, match="empty"):
        R.censored_median([])


def test_reward_threshold_comes_from_gymnasium():
    assert R.reward_threshold("CartPole-v1") == 475.0
    assert R.reward_threshold("Acrobot-v1") == -100.0
    assert R.reward_threshold("Pendulum-v1") is None
    assert R.reward_threshold("NoSuchEnv-v0") is None


def test_report_table_by_hand(cartpole_sweep):
    files = R.write_report(cartpole_sweep)
    text = files.report.read_text()
    rows = table_rows(text)
    assert "Runs used: 8 of 9 planned; missing: rank/s0 (not run)." in text

    uniform, proportional = rows["uniform"], rows["proportional"]
    assert uniform[0] == "4" and proportional[0] == "4"
    assert uniform[1].startswith("250.0 [") and proportional[1].startswith("250.0 [")
    assert uniform[1] == ci_text(UNIFORM, stats.iqm)
    assert uniform[2] == ci_text(UNIFORM, stats.mean)  # 250.0
    assert proportional[2].startswith("287.5 [")  # (150 + 250 + 250 + 500) / 4
    assert proportional[3] == ci_text(PROPORTIONAL, stats.median)  # 250.0
    assert uniform[4] == "2,500 (3/4)"
    assert proportional[4] == "not reached (2/4)"
    assert uniform[5] == "n/a"
    low, high = stats.paired_bootstrap_ci(PROPORTIONAL, UNIFORM, reps=2000, seed=0)
    assert proportional[5] == f"0.75 [{low:.2f}, {high:.2f}] (4 pairs)"
    assert rows["rank"] == ["0", "n/a", "n/a", "n/a", "n/a", "n/a"]
    assert files.curves.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_scores_csv_matches_the_summaries(cartpole_sweep):
    files = R.write_report(cartpole_sweep)
    with files.scores.open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["arm"], int(r["seed"])) for r in rows] == [
        (arm, s) for arm in ("uniform", "proportional") for s in range(4)
    ]
    for row in rows:
        summary = json.loads((cartpole_sweep / row["run_dir"] / "summary.json").read_text())
        assert float(row["final_return"]) == summary["final_eval_return_mean"]
        assert row["human_normalized"] == ""  # not an Atari game
    firsts = UNIFORM_FIRST + PROPORTIONAL_FIRST
    assert [r["steps_to_threshold"] for r in rows] == ["" if f is None else str(f) for f in firsts]


def test_report_is_reproducible_from_the_run_dirs(cartpole_sweep):
    first = R.write_report(cartpole_sweep)
    texts = (first.report.read_text(), first.scores.read_text())
    first.report.unlink()
    first.scores.unlink()
    again = R.write_report(cartpole_sweep)
    assert (again.report.read_text(), again.scores.read_text()) == texts


def test_curve_band_aggregates_each_step():
    """IQM at each step over the curves that have it; a lone curve's band is the point."""
    steps, centre, low, high = R.curve_band(
        [[(10, 1.0), (20, 4.0)], [(10, 3.0), (20, 8.0)], [(10, 2.0)], [(10, 6.0)]]
    )
    np.testing.assert_array_equal(steps, [10, 20])
    # step 10: 1, 2, 3, 6 -> one cut from each end -> (2 + 3) / 2; step 20: 4, 8 -> 6
    np.testing.assert_array_equal(centre, [2.5, 6.0])
    assert low[0] <= 2.5 <= high[0] and (low[1], high[1]) == (4.0, 8.0)


def test_without_sweep_json_reads_every_summary(tmp_path):
    out = tmp_path / "loose"
    fake_run(out, "a/s0", "CartPole-v1", "uniform", 0, 10.0, [(100, 10.0)])
    fake_run(out, "a/s1", "CartPole-v1", "uniform", 1, 30.0, [(100, 30.0)])
    fake_run(out, "b/s0", "CartPole-v1", "rank", 0, 0.0, [(50, 5.0)], interrupted=True)
    sweep = runs.collect(out)
    assert [(r.arm, r.seed) for r in sweep.runs] == [("uniform", 0), ("uniform", 1)]
    assert sweep.missing == ("b/s0 (interrupted)",)
    text = R.render_markdown(sweep, {"CartPole-v1": 475.0})
    assert "Runs used: 2 (no sweep.json); missing: b/s0 (interrupted)." in text
    assert table_rows(text)["uniform"][2].startswith("20.0 [")


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
    m.write_json(out / "sweep.json", sweep_record(planned, ["ALE/Pong-v5", "ALE/Breakout-v5"],
                                                  ["uniform", "proportional"]))  # fmt: skip
    files = R.write_report(out)
    with files.scores.open() as f:
        rows = list(csv.DictReader(f))
    uniform_hns = [float(r["human_normalized"]) for r in rows if r["arm"] == "uniform"]
    np.testing.assert_allclose(uniform_hns, 0.5)
    text = files.report.read_text()
    assert "## Human-normalised scores (2 games)" in text
    hn_rows = table_rows(text.split("## Human-normalised")[1])
    assert hn_rows["uniform"][:2] == ["2", "0.50 [0.50, 0.50]"]
    # proportional: +1 on seed 0 of both games (wins), -1 on seed 1 (losses) -> P = 1/2
    assert hn_rows["proportional"][-1].startswith("0.50 [")
    assert "steps to" not in text  # the ALE games have no reward threshold


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
    # A run cut short before its summary is still one run's dir, not a sweep.
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "config.yaml").write_text("run:\n  seed: 0\n")
    with pytest.raises(ValueError, match=r"cut is the run dir of one training run \(it holds "):
        R.write_report(cut)
    assert [p.name for p in cut.iterdir()] == ["config.yaml"]


def test_cli_report(cartpole_sweep, tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["report", str(cartpole_sweep)])
    assert result.exit_code == 0, result.output
    assert (cartpole_sweep / "report.md").is_file()
    result = runner.invoke(app, ["report", str(tmp_path / "nowhere")])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: sweep dir {tmp_path / 'nowhere'} does not exist or is not a directory\n"
    )
    assert result.stdout == ""
