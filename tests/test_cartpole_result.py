"""The shipped CartPole config solves the task on a seed no tuning saw, as `make train` runs it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from per_dqn.cli import app


@pytest.mark.slow
def test_shipped_cartpole_config_solves_a_held_out_seed(tmp_path):
    """`per-dqn train --config cartpole.yaml` (50,000 env steps, ~35 s) on seed 1019, one of the
    held-out seeds 1000-1019 the README's distribution comes from (tuning used 100-119): the
    final greedy evaluation reaches CartPole-v1's threshold of 475.

    On another CPU type, torch build or thread count the floats, and so the trajectory, differ;
    the README's 20-seed distribution (20 of 20 at or above 475 here) is what carries over.
    """
    run_dir = tmp_path / "run"
    args = ["train", "-c", "cartpole.yaml", "--seed", "1019", "-q", "--run-dir", str(run_dir)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 50_000 and summary["replay"] == "proportional"
    assert summary["final_eval_episodes"] == 20
    assert summary["final_eval_return_mean"] >= 475
