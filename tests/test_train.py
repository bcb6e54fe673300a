"""Real short runs: the event file's tags read back with TensorBoard's own reader, the run dir's
files, reproducibility, Ctrl-C, and what the loop stores, checked on a counting toy env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from support import (
    cartpole_config,
    fill_with_random_play,
    read_scalars,
    run_trainer,
    sets,
    summary_of,
)
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

from per_dqn.agent import DQNAgent, objectives, signals
from per_dqn.cli import app
from per_dqn.config import Config, load_config
from per_dqn.logs import tags
from per_dqn.memory import KINDS, REPLAY_KINDS, make_memory
from per_dqn.training.run import Trainer

# A run short enough for a test that still learns, logs, evaluates and checks the tree.
SHORT = [
    "train.total_env_steps=1200", "train.learning_starts=300", "train.log_interval=100",
    "train.eval_interval=600", "train.eval_episodes=2", "train.final_eval_episodes=3",
    "train.epsilon_decay_steps=600",
]  # fmt: skip
REQUIRED_TAGS = {
    tags.PER_SAMPLED_PRIORITY, tags.PER_MEAN_PRIORITY, tags.PER_BETA, tags.PER_IS_WEIGHT_MEAN,
    tags.PER_IS_WEIGHT_MIN, tags.PER_MAX_PRIORITY, tags.TRAIN_LOSS, tags.TRAIN_Q_MEAN,
    tags.TRAIN_TD_ERROR_ABS, tags.EXPLORE_EPSILON, tags.EPISODE_RETURN, tags.EPISODE_LENGTH,
    tags.EVAL_RETURN_MEAN, tags.PERF_SPS, tags.PER_IS_WEIGHT_ESS, tags.PER_NEVER_REPLAYED,
    tags.PER_SAMPLE_AGE, tags.PER_PRIORITY_AGE, tags.PER_TREE_DRIFT,
}  # fmt: skip


def short_config(*extra: str) -> Config:
    return cartpole_config(*SHORT, *extra)


def test_cli_run_writes_events_config_and_summary(workdir):
    args = ["train", "-c", "cartpole.yaml", "--seed", "3", "-q", *sets(*SHORT)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    (run_dir,) = (workdir / "runs").iterdir()
    assert run_dir.name.startswith("CartPole-v1__cartpole__proportional__s3__")
    assert "final eval return" in result.stdout  # the end-of-run summary

    scalars = read_scalars(run_dir)
    assert REQUIRED_TAGS <= set(scalars)
    assert set(scalars) <= set(tags.SCALAR_TAGS)
    events = EventAccumulator(str(run_dir))
    events.Reload()
    # add_text stores a string tensor under <tag>/text_summary.
    (text_event,) = events.Tensors(f"{tags.CONFIG_TEXT}/text_summary")
    text = text_event.tensor_proto.string_val[0].decode()
    assert "kind: proportional" in text and "seed: 3" in text

    assert scalars[tags.PER_BETA][-1][1] == pytest.approx(1.0, abs=1e-3)
    assert all(0 < v <= 1 for _, v in scalars[tags.PER_IS_WEIGHT_ESS])
    assert all(0 <= v < 1e-9 for _, v in scalars[tags.PER_TREE_DRIFT])
    assert scalars[tags.EVAL_RETURN_MEAN][-1][0] == 1200  # the final evaluation, at the last step

    summary = summary_of(run_dir)
    assert summary["env_steps"] == 1200
    assert summary["replay"] == "proportional" and summary["seed"] == 3
    assert summary["interrupted"] is False
    assert summary["final_eval_episodes"] == 3
    assert summary["final_eval_return_mean"] == pytest.approx(scalars[tags.EVAL_RETURN_MEAN][-1][1])
    assert summary["wall_seconds"] > 0
    saved = load_config(run_dir / "config.yaml")
    assert saved == short_config("run.seed=3")


@pytest.mark.parametrize("kind", KINDS)
def test_every_memory_logs_what_it_has(tmp_path, kind):
    """What a kind logs follows from what its sampler has, not from its name: the priority tags
    where its diagnostics give priorities, the tree drift where its full diagnostics check one,
    IS weights of 1 (an effective sample size of 1) where its weights do not depend on beta,
    and its learner's own numbers (its objective's and its priority signal's)."""
    summary = run_trainer(short_config(f"replay.kind={kind}"), tmp_path)
    assert summary["replay"] == kind
    scalars = read_scalars(tmp_path)
    memory = make_memory(kind, capacity=8, obs_shape=(4,))
    has = memory.diagnostics(full=True)
    assert (tags.PER_TREE_DRIFT in scalars) == ("tree_drift" in has)
    entry = REPLAY_KINDS[kind]
    own = set(objectives.objective(entry.objective).metrics)
    signal = signals.priority_signal(entry.signal or "td_error")
    if signal.report is not None:
        own |= set(signal.report(signals.SignalInputs(np.ones(2), "huber", np.ones(2))))
    assert {tags.LEARNER_PREFIX + name for name in own} <= set(scalars)
    if not memory.weighted:
        assert all(v == 1.0 for _, v in scalars[tags.PER_IS_WEIGHT_ESS])
    if "mean_priority" in has:
        assert set(tags.PRIORITY_TAGS) <= set(scalars)
    else:
        assert not set(tags.PRIORITY_TAGS) & set(scalars)
        # Pins the tag table promising priority tags for uniform runs (issue 26): every tag a
        # run without priorities does not log says so in its meaning, save the optional two.
        optional = {tags.TRAIN_GRAD_NORM, tags.TRAIN_LEARNING_RATE}
        only = (
            "prioritized memories only", "distributed runs only",
            *(f"{other} only" for other in KINDS),
        )  # fmt: skip
        for tag in set(tags.SCALAR_TAGS) - set(scalars) - optional:
            meaning = tags.SCALAR_TAGS[tag]
            assert any(phrase in meaning for phrase in only), tag


@pytest.mark.slow
def test_same_seed_same_curves(tmp_path):
    """Two CPU runs with the same seed and config log identical scalars (wall-clock aside)."""
    config = short_config("train.total_env_steps=800", "train.eval_interval=400")
    run_trainer(config, tmp_path / "a")
    run_trainer(config, tmp_path / "b")
    first, second = read_scalars(tmp_path / "a"), read_scalars(tmp_path / "b")
    first.pop(tags.PERF_SPS)
    second.pop(tags.PERF_SPS)
    assert first == second
    assert len(first[tags.TRAIN_LOSS]) >= 4
    run_trainer(short_config("train.total_env_steps=800", "run.seed=1"), tmp_path / "c")
    other = read_scalars(tmp_path / "c")
    assert other[tags.EPISODE_RETURN] != first[tags.EPISODE_RETURN]


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
    summary = summary_of(tmp_path / "run")
    assert summary["interrupted"] is True
    assert summary["final_eval_return_mean"] is None
    assert 300 < summary["env_steps"] < 1200
    assert tags.TRAIN_LOSS in read_scalars(tmp_path / "run")


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
    episodes = len(read_scalars(tmp_path / "run")[tags.EPISODE_RETURN])
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


# --- what the loop does with each update: each test pins a one-line mutant (tests/mutants) --------


def test_priorities_land_on_the_sampled_slots(tmp_path):
    """Pins writing the learner's |TD errors| back to slots other than those sampled (reversed,
    say): after one loop update, the priority of each sampled slot is what the paper's formula
    gives for the TD error a reference copy of the agent computes on the same batch.

    The reference: the memory and agent are copied before the update; the copied memory, with
    the same RNG state, draws the same batch, and the copied agent's ``learn`` gives the same
    |delta| (CPU, same weights). Repeated slots keep their last error.
    """
    from per_dqn.training.build import make_agent, make_memory

    config = short_config("replay.alpha=0.7", "replay.td_error_clip=null")
    trainer = Trainer(config, "cartpole")
    try:
        loop = trainer.loop
        fill_with_random_play(trainer)  # real CartPole transitions
        memory_copy = make_memory(config.replay, trainer.spec, 0)
        memory_copy.load_state_dict(trainer.memory.state_dict())
        agent_copy = make_agent(config, trainer.spec, trainer.device)
        agent_copy.load_state_dict(trainer.agent.state_dict())

        loop.learn()

        batch = memory_copy.sample(config.train.batch_size, loop.beta(loop.state.env_steps))
        td_abs = agent_copy.learn(batch).td_abs.astype(np.float64)
        last_error = dict(zip(batch.indices.tolist(), td_abs.tolist(), strict=True))
        slots = np.array(sorted(last_error))
        errors = np.array([last_error[s] for s in slots])
        expected = (errors + config.replay.priority_eps) ** config.replay.alpha
        np.testing.assert_allclose(trainer.memory.sampler.priorities(slots), expected, rtol=1e-12)
    finally:
        trainer.close()


@pytest.mark.parametrize("gradient_steps", [1, 3])
def test_update_count_follows_replay_period_and_gradient_steps(tmp_path, gradient_steps):
    """Pins ignoring ``train.gradient_steps``: updates happen at env steps learning_starts,
    learning_starts + replay_period, ... up to the budget, gradient_steps at each, so 400 steps
    from 100 every 4 give 76 points: 76 * gradient_steps updates (hand count)."""
    config = short_config(
        "train.total_env_steps=400", "train.learning_starts=100", "train.replay_period=4",
        "train.batch_size=32", f"train.gradient_steps={gradient_steps}", "train.eval_interval=0",
        "train.final_eval_episodes=1",
    )  # fmt: skip
    summary = run_trainer(config, tmp_path)
    assert summary["update_steps"] == 76 * gradient_steps


@pytest.mark.slow
def test_periodic_evaluation_follows_eval_epsilon(tmp_path):
    """Pins the periodic evaluation ignoring ``train.eval_epsilon``: with epsilon 1 every
    evaluation action comes from the evaluation's own stream, whatever the network, so two runs
    whose networks differ (another learning rate) log the same periodic evaluations, while their
    greedy evaluations (epsilon 0, the control) differ."""

    def periodic_evals(name: str, *extra: str) -> list[tuple[int, float]]:
        config = short_config("train.eval_interval=300", "train.eval_episodes=3", *extra)
        run_trainer(config, tmp_path / name)
        points = read_scalars(tmp_path / name)[tags.EVAL_RETURN_MEAN]
        return [p for p in points if p[0] < config.train.total_env_steps]

    random_a = periodic_evals("a", "train.eval_epsilon=1.0", "agent.learning_rate=0.002")
    random_b = periodic_evals("b", "train.eval_epsilon=1.0", "agent.learning_rate=0.0001")
    greedy_a = periodic_evals("c", "train.eval_epsilon=0.0", "agent.learning_rate=0.002")
    greedy_b = periodic_evals("d", "train.eval_epsilon=0.0", "agent.learning_rate=0.0001")
    assert len(random_a) == 3
    assert random_a == random_b
    assert greedy_a != greedy_b


@pytest.mark.slow
def test_priority_age_restarts_when_a_priority_is_refreshed(tmp_path):
    """Pins dropping the priority-age (staleness) update: a sampled transition's priority is
    reset from its TD error, so per/priority_age_steps falls below per/sample_age_steps (they are
    equal only if no priority was ever refreshed, as under that bug)."""
    summary = run_trainer(short_config(), tmp_path)
    assert summary["update_steps"] > 100
    scalars = read_scalars(tmp_path)
    sample_age = dict(scalars[tags.PER_SAMPLE_AGE])
    priority_age = dict(scalars[tags.PER_PRIORITY_AGE])
    assert sample_age.keys() == priority_age.keys()
    assert all(priority_age[s] <= sample_age[s] for s in sample_age)
    late = [s for s in sample_age if s >= 800]
    assert all(priority_age[s] < 0.8 * sample_age[s] for s in late)


@pytest.mark.slow
def test_learning_rate_anneals_linearly_from_learning_starts(tmp_path):
    """``agent.learning_rate_end``: Adam's step size is ``learning_rate`` until learning starts,
    then falls linearly to ``learning_rate_end`` at the last env step (hand-computed values)."""
    config = short_config("agent.learning_rate=0.002", "agent.learning_rate_end=0.0005")
    trainer = Trainer(config, "cartpole")
    try:
        trainer.run(tmp_path)
        last_lr = trainer.agent.optimizer.param_groups[0]["lr"]
    finally:
        trainer.close()
    logged = dict(read_scalars(tmp_path)[tags.TRAIN_LEARNING_RATE])
    assert logged[200] == pytest.approx(0.002)  # before learning_starts (300)
    for step, value in logged.items():
        expected = 0.002 - 0.0015 * min(max(step - 300, 0), 900) / 900
        assert value == pytest.approx(expected, rel=1e-6), step
    assert len(logged) == 12
    assert last_lr == pytest.approx(0.0005)  # the update at env step 1200


def test_train_names_its_run_dir_before_it_starts(workdir):
    """Pins ``train`` naming its run dir only in the final table (issue 26): the first line on
    stderr is now ``run dir: PATH``, before the first env step (so TensorBoard can be pointed at
    it while the run goes on); ``--quiet`` leaves it out."""
    args = ["train", "-c", "cartpole.yaml", "--run-dir", "runs/named", *sets(*SHORT)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == "run dir: runs/named"
    quiet = CliRunner().invoke(app, [*args[:4], "runs/quiet", "-q", *sets(*SHORT)])
    assert quiet.exit_code == 0 and "run dir:" not in quiet.stderr
