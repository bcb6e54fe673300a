"""Real short runs: the event file's tags read back with TensorBoard's own reader, the run dir's
files, reproducibility, Ctrl-C, and what the loop stores, checked on a counting toy env."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

from per_dqn import metrics as m
from per_dqn.agent import DQNAgent
from per_dqn.cli import app
from per_dqn.config import Config, load_config, parse_override, resolve_config_path
from per_dqn.train import Trainer

# A run short enough for a test that still learns, logs, evaluates and checks the tree.
SHORT = [
    "train.total_env_steps=1200", "train.learning_starts=300", "train.log_interval=100",
    "train.eval_interval=600", "train.eval_episodes=2", "train.final_eval_episodes=3",
    "train.epsilon_decay_steps=600",
]  # fmt: skip
REQUIRED_TAGS = {
    m.PER_SAMPLED_PRIORITY, m.PER_MEAN_PRIORITY, m.PER_BETA, m.PER_IS_WEIGHT_MEAN,
    m.PER_IS_WEIGHT_MIN, m.PER_MAX_PRIORITY, m.TRAIN_LOSS, m.TRAIN_Q_MEAN, m.TRAIN_TD_ERROR_ABS,
    m.EXPLORE_EPSILON, m.EPISODE_RETURN, m.EPISODE_LENGTH, m.EVAL_RETURN_MEAN, m.PERF_SPS,
    m.PER_IS_WEIGHT_ESS, m.PER_NEVER_REPLAYED, m.PER_SAMPLE_AGE, m.PER_PRIORITY_AGE,
    m.PER_TREE_DRIFT,
}  # fmt: skip


def short_config(*extra: str) -> Config:
    overrides = [parse_override(text) for text in [*SHORT, *extra]]
    return load_config(resolve_config_path("cartpole.yaml"), overrides)


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


def run(config: Config, run_dir: Path) -> dict:
    trainer = Trainer(config, "cartpole")
    try:
        return trainer.run(run_dir)
    finally:
        trainer.close()


def test_cli_run_writes_events_config_and_summary(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["train", "-c", "cartpole.yaml", "--seed", "3", "-q"]
    for text in SHORT:
        args += ["--set", text]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("CartPole-v1__cartpole__proportional__s3__")
    assert "final eval return" in result.stdout  # the end-of-run summary

    scalars = read_scalars(run_dir)
    assert REQUIRED_TAGS <= set(scalars)
    assert set(scalars) <= set(m.SCALAR_TAGS)
    events = EventAccumulator(str(run_dir))
    events.Reload()
    # add_text stores a string tensor under <tag>/text_summary.
    (text_event,) = events.Tensors(f"{m.CONFIG_TEXT}/text_summary")
    text = text_event.tensor_proto.string_val[0].decode()
    assert "kind: proportional" in text and "seed: 3" in text

    assert scalars[m.PER_BETA][-1][1] == pytest.approx(1.0, abs=1e-3)
    assert all(0 < v <= 1 for _, v in scalars[m.PER_IS_WEIGHT_ESS])
    assert all(0 <= v < 1e-9 for _, v in scalars[m.PER_TREE_DRIFT])
    assert scalars[m.EVAL_RETURN_MEAN][-1][0] == 1200  # the final evaluation, at the last step

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 1200
    assert summary["replay"] == "proportional" and summary["seed"] == 3
    assert summary["interrupted"] is False
    assert summary["final_eval_episodes"] == 3
    assert summary["final_eval_return_mean"] == pytest.approx(scalars[m.EVAL_RETURN_MEAN][-1][1])
    assert summary["wall_seconds"] > 0
    saved = load_config(run_dir / "config.yaml")
    assert saved == short_config("run.seed=3")


@pytest.mark.parametrize("kind", ["uniform", "rank"])
def test_other_memories_log_what_they_have(tmp_path, kind):
    summary = run(short_config(f"replay.kind={kind}"), tmp_path)
    assert summary["replay"] == kind
    scalars = read_scalars(tmp_path)
    assert m.PER_TREE_DRIFT not in scalars  # only the sum tree has a drift to check
    if kind == "uniform":
        assert not set(m.PRIORITY_TAGS) & set(scalars)
        assert all(v == 1.0 for _, v in scalars[m.PER_IS_WEIGHT_ESS])
    else:
        assert set(m.PRIORITY_TAGS) <= set(scalars)


def test_same_seed_same_curves(tmp_path):
    """Two CPU runs with the same seed and config log identical scalars (wall-clock aside)."""
    config = short_config("train.total_env_steps=800", "train.eval_interval=400")
    run(config, tmp_path / "a")
    run(config, tmp_path / "b")
    first, second = read_scalars(tmp_path / "a"), read_scalars(tmp_path / "b")
    first.pop(m.PERF_SPS)
    second.pop(m.PERF_SPS)
    assert first == second
    assert len(first[m.TRAIN_LOSS]) >= 4
    run(short_config("train.total_env_steps=800", "run.seed=1"), tmp_path / "c")
    other = read_scalars(tmp_path / "c")
    assert other[m.EPISODE_RETURN] != first[m.EPISODE_RETURN]


def test_ctrl_c_keeps_what_was_written(tmp_path, monkeypatch):
    """A KeyboardInterrupt mid-run: exit 130, events kept, summary marked interrupted."""
    real_learn = DQNAgent.learn
    calls = []

    def learn_then_interrupt(self, batch):
        calls.append(1)
        if len(calls) == 150:
            raise KeyboardInterrupt
        return real_learn(self, batch)

    monkeypatch.setattr(DQNAgent, "learn", learn_then_interrupt)
    args = ["train", "-c", "cartpole.yaml", "--run-dir", str(tmp_path / "run"), "-q"]
    for text in SHORT:
        args += ["--set", text]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 130, result.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["interrupted"] is True
    assert summary["final_eval_return_mean"] is None
    assert 300 < summary["env_steps"] < 1200
    assert m.TRAIN_LOSS in read_scalars(tmp_path / "run")


def test_should_stop_ends_the_run_between_steps_like_an_interrupt(tmp_path):
    """``should_stop`` is polled once per loop iteration (an env step, or a sub-env's uncounted
    reset-only step): true at poll 500, the loop stops there and the run ends as an interrupt
    does, with no final evaluation and the summary marked interrupted."""
    polls = []

    def should_stop() -> bool:
        polls.append(1)
        return len(polls) >= 500

    trainer = Trainer(short_config("env.num_envs=1"), "cartpole")
    try:
        summary = trainer.run(tmp_path / "run", should_stop=should_stop)
    finally:
        trainer.close()
    assert len(polls) == 500
    assert summary["interrupted"] is True
    assert summary["final_eval_return_mean"] is None
    # 499 iterations ran: each an env step except the reset-only step after each episode end.
    episodes = len(read_scalars(tmp_path / "run")[m.EPISODE_RETURN])
    assert 400 < summary["env_steps"] < 499
    # (500 if the last of the 499 ended an episode, whose reset step never came)
    assert summary["env_steps"] + episodes in (499, 500)


class CountingEnv(gym.Env):
    """obs = [episode number, t]; reward t + 1 for step t; odd episodes terminate after 3 steps,
    even ones run into the 4-step time limit (truncation)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.episode, self.t = -1, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode, self.t = self.episode + 1, 0
        return np.array([self.episode, 0], np.float32), {}

    def step(self, action):
        self.t += 1
        terminated = self.episode % 2 == 1 and self.t == 3
        return np.array([self.episode, self.t], np.float32), float(self.t), terminated, False, {}


gym.register("PerDqnTest/Counting-v0", entry_point=CountingEnv, max_episode_steps=4)


@pytest.mark.parametrize(("n_step", "num_envs"), [(1, 1), (2, 1), (3, 2)])
def test_loop_stores_exactly_the_real_transitions(tmp_path, n_step, num_envs):
    """Every stored transition lies inside one episode, spans n_steps env steps, carries the
    discounted reward sum, is terminal exactly when it ends on a termination, and no reset-only
    step is stored. Regression for gymnasium 1.x next-step autoreset."""
    gamma = 0.5
    config = Config.model_validate(
        {
            "env": {"id": "PerDqnTest/Counting-v0", "num_envs": num_envs},
            "agent": {"n_step": n_step, "gamma": gamma, "hidden_sizes": [8]},
            "replay": {"capacity": 1000},
            "train": {"total_env_steps": 60, "learning_starts": 16, "batch_size": 16,
                      "log_interval": 20, "eval_interval": 0, "final_eval_episodes": 1},
        }
    )  # fmt: skip
    trainer = Trainer(config, "counting")
    summary = trainer.run(tmp_path)
    trainer.close()
    state = trainer.memory.state_dict()["storage"]
    size = int(state["size"])
    obs, next_obs = state["obs"][:size], state["next_obs"][:size]
    k = state["n_steps"][:size].astype(np.float32)
    open_windows = num_envs * (n_step - 1)
    assert summary["env_steps"] - open_windows <= size <= summary["env_steps"]
    np.testing.assert_array_equal(obs[:, 0], next_obs[:, 0])  # same episode
    np.testing.assert_array_equal(next_obs[:, 1] - obs[:, 1], k)  # spans k real steps
    assert np.all(k <= n_step)
    # A window never starts on a terminal or truncated observation.
    last_t = np.where(obs[:, 0] % 2 == 1, 3, 4)
    assert np.all(obs[:, 1] < last_t)
    terminal = (next_obs[:, 0] % 2 == 1) & (next_obs[:, 1] == 3)
    np.testing.assert_array_equal(state["terminated"][:size], terminal)
    expected = [
        sum(gamma**j * (t + 1 + j) for j in range(int(n)))
        for t, n in zip(obs[:, 1], k, strict=True)
    ]
    np.testing.assert_allclose(state["rewards"][:size], expected, rtol=1e-6)
