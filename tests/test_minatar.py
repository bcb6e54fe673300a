"""MinAtar as the third env family: the five games through gymnasium, channel-first bool layers,
the MinAtar paper's network, and real training runs."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
from support import StopAtCheckpoint, assert_same_weights
from typer.testing import CliRunner

from per_dqn.agent.networks import MinAtarCNN
from per_dqn.cli import app
from per_dqn.config import Override, load_config, resolve_config_path
from per_dqn.envs.make import EnvSpec, describe, make_eval_env, make_vector_env
from per_dqn.training.build import make_agent

GAMES = {  # id -> object layers, from the MinAtar paper's game descriptions
    "MinAtar/Asterix-v1": 4,
    "MinAtar/Breakout-v1": 4,
    "MinAtar/Freeway-v1": 7,
    "MinAtar/Seaquest-v1": 10,
    "MinAtar/SpaceInvaders-v1": 6,
}
SHORT = [
    "train.total_env_steps=2000", "train.learning_starts=500", "train.eval_interval=1000",
    "train.eval_episodes=2", "train.final_eval_episodes=3", "train.log_interval=500",
    "replay.capacity=5000",
]  # fmt: skip


def config(*sets: str):
    return load_config(
        resolve_config_path("minatar.yaml"), [Override(*s.split("=", 1)) for s in sets]
    )


@pytest.mark.parametrize("env_id", sorted(GAMES))
def test_every_game_gives_channel_first_bool_layers(env_id):
    channels = GAMES[env_id]
    cfg = config(f"env.id={env_id}")
    env = make_eval_env(cfg.env)
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == (channels, 10, 10) and obs.dtype == np.bool_
        assert obs.flags["C_CONTIGUOUS"]
        raw = env.unwrapped.game.state()  # MinAtar's own (10, 10, C) layers
        np.testing.assert_array_equal(obs, np.moveaxis(raw, -1, 0))
        actions = len(env.unwrapped.game.minimal_action_set())  # -v1: the minimal action set
        assert describe(env) == EnvSpec((channels, 10, 10), np.dtype(np.bool_), actions)
    finally:
        env.close()


def test_same_seed_same_episode_start_and_sticky_actions_by_default():
    cfg = config()
    firsts = []
    for _ in range(2):
        envs = make_vector_env(cfg.env)
        obs, _ = envs.reset(seed=123)
        frames = [obs.copy()]
        for _ in range(50):
            obs, *_ = envs.step(np.array([1]))
            frames.append(obs.copy())
        firsts.append(np.stack(frames))
        game = envs.envs[0].unwrapped.game
        assert game.sticky_action_prob == pytest.approx(0.1)
        envs.close()
    np.testing.assert_array_equal(firsts[0], firsts[1])


def test_an_episode_step_cap_truncates_minatar_episodes():
    """MinAtar's registration sets no step limit; env.max_episode_steps adds one (truncation,
    not termination), and without it a no-op Freeway episode runs past the cap."""
    for cap, expect_truncated in ((40, True), (None, False)):
        cfg = load_config(
            resolve_config_path("minatar.yaml"),
            [Override("env.id", "MinAtar/Freeway-v1"), Override("env.max_episode_steps", cap)],
        )
        env = make_eval_env(cfg.env)
        try:
            env.reset(seed=0)
            steps, truncated = 0, False
            while steps < 40 and not truncated:
                _, _, terminated, truncated, _ = env.step(0)
                steps += 1
                assert not terminated  # Freeway ends on its own only after 2,500 frames
            assert (truncated, steps) == (expect_truncated, 40)
        finally:
            env.close()


def test_minatar_cnn_is_the_papers_network():
    """One 3x3 conv of 16 channels, stride 1, then 128 units: parameters by hand for
    Seaquest's 10 layers and 6 actions (linear head)."""
    net = MinAtarCNN((10, 10, 10), 6, (128,), dueling=False)
    conv = 16 * 10 * 9 + 16
    fc = 16 * 8 * 8 * 128 + 128
    head = 128 * 6 + 6
    assert sum(p.numel() for p in net.parameters()) == conv + fc + head
    obs = torch.zeros(5, 10, 10, 10, dtype=torch.bool)
    obs[:, 3, 4, 5] = True
    assert net(obs).shape == (5, 6)
    spec = describe(make_eval_env(config().env))
    agent = make_agent(config(), spec, torch.device("cpu"))
    assert isinstance(agent.online, MinAtarCNN)  # `network: auto` picks it for the MinAtar family


def _train(tmp_path: Path, name: str, *sets: str):
    run_dir = tmp_path / name
    argv = ["train", "--config", "minatar.yaml", "--run-dir", str(run_dir), "-q"]
    for text in (*SHORT, *sets):
        argv += ["--set", text]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    return run_dir


@pytest.mark.slow
def test_a_short_real_run_is_reproducible(tmp_path):
    """The same config and seed give the same weights, on Seaquest (10 layers) with rank PER."""
    sets = ("env.id=MinAtar/Seaquest-v1", "replay.kind=rank")
    a = _train(tmp_path, "a", *sets)
    b = _train(tmp_path, "b", *sets)
    digest = [hashlib.sha256((d / "model.pt").read_bytes()).hexdigest() for d in (a, b)]
    wa = torch.load(a / "model.pt", weights_only=True)
    wb = torch.load(b / "model.pt", weights_only=True)
    assert all(torch.equal(wa[k], wb[k]) for k in wa), digest
    assert "conv.weight" in wa and wa["conv.weight"].shape == (16, 10, 3, 3)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["MinAtar/Seaquest-v1", "MinAtar/Asterix-v1"])
def test_resume_is_exact(tmp_path, env_id):
    """MinAtar's game state (positions, timers, entity lists, the shared RandomState, the sticky
    action) is checkpointed: a run stopped at its step-1,000 checkpoint and resumed ends with the
    weights of the same run never stopped, with no "not exact" note."""
    import per_dqn

    overrides = [*SHORT, f"env.id={env_id}", "checkpoint.interval_steps=1000"]
    full = per_dqn.train("minatar.yaml", overrides=overrides, run_dir=tmp_path / "full")
    stopped = per_dqn.train(
        "minatar.yaml",
        overrides=overrides,
        run_dir=tmp_path / "stopped",
        callbacks=[StopAtCheckpoint(1000)],
    )
    assert stopped.summary["interrupted"] and stopped.summary["env_steps"] == 1000
    resumption = per_dqn.api.prepare_resume(tmp_path / "stopped")
    try:
        assert resumption.notes == []  # an exact resume
    finally:
        resumption.trainer.close()
    resumed = per_dqn.resume(tmp_path / "stopped")
    assert resumed.final_return == full.final_return
    assert_same_weights(tmp_path / "full" / "model.pt", tmp_path / "stopped" / "model.pt")


def test_plan_reports_a_seaquest_transition_in_under_500_bytes():
    """The issue's goal, as `per-dqn plan` reports it: bit-packed observations put a Seaquest
    transition of the shipped config (proportional, 100k) at <= 500 B, a quarter of the 2,000 B
    that obs and next_obs take at one byte a cell."""
    import re

    result = CliRunner().invoke(
        app, ["plan", "--config", "minatar.yaml", "--set", "env.id=MinAtar/Seaquest-v1"]
    )
    assert result.exit_code == 0, result.output
    assert "obs and next_obs packed eight cells a byte" in result.stdout
    per_transition = int(re.search(r"per transition\s+([\d,]+) bytes", result.stdout).group(1))
    assert per_transition <= 500
    # One 125-byte obs a slot with a link for its next obs (306 B with next_obs stored whole);
    # the pool's size is the one assumption, and the plan says which.
    assert per_transition == 189
    assert "next-obs pool    3,125 entries of 129 bytes counted" in result.stdout
