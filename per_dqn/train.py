"""The composition root: wires env, memory, agent, schedules and metrics, and runs the loop.

One vector-env step of the loop::

    actions   <- epsilon-greedy(agent, obs)            (skipped when every sub-env only resets)
    step      -> next_obs, rewards, terminated, truncated
    n-step accumulator -> finished windows -> memory.add_batch   (reset-only steps are not stored)
    every replay_period env steps after learning_starts, gradient_steps times:
        batch <- memory.sample(batch_size, beta)
        result <- agent.learn(batch)
        memory.update_priorities(batch.indices, result.td_abs)

Env steps count the steps the agent experienced: gymnasium's next-step autoreset spends one
``step`` call per episode on the reset alone, and that call is neither stored nor counted.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from per_dqn import metrics as m
from per_dqn.agent import DQNAgent
from per_dqn.config import Config, ReplayConfig
from per_dqn.envs import EnvSpec, describe, make_eval_env, make_vector_env
from per_dqn.memory import PrioritizedReplay, RankBasedReplay, ReplayMemory, UniformReplay
from per_dqn.nstep import NStepAccumulator, stack
from per_dqn.schedules import LinearSchedule

# The tree-drift check is O(capacity); every this many log points is "now and then".
TREE_DRIFT_EVERY_LOGS = 10
# Env steps between progress-bar refreshes: often enough to look live, rare enough to cost nothing.
PROGRESS_INTERVAL_STEPS = 250
# Offset of the evaluation env's seed from the run seed, so it never replays a training episode.
EVAL_SEED_OFFSET = 10_000
_AGENT_METRIC_TAGS = {
    "loss": m.TRAIN_LOSS,
    "q_mean": m.TRAIN_Q_MEAN,
    "td_error_abs": m.TRAIN_TD_ERROR_ABS,
    "grad_norm": m.TRAIN_GRAD_NORM,
}


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU.

    Raises:
        ValueError: ``cuda`` asked for on a machine without a usable CUDA device.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("run.device: 'cuda' was asked for but torch.cuda.is_available() is False")
    return torch.device(name)


def make_memory(config: ReplayConfig, spec: EnvSpec, seed: int) -> ReplayMemory:
    """The replay memory ``config.kind`` names, sized for ``spec``'s observations."""
    base: dict[str, Any] = {
        "capacity": config.capacity,
        "obs_shape": spec.obs_shape,
        "obs_dtype": spec.obs_dtype,
        "seed": seed,
    }
    if config.kind == "uniform":
        return UniformReplay(**base)
    if config.kind == "rank":
        return RankBasedReplay(
            alpha=config.alpha,
            td_error_clip=config.td_error_clip,
            sort_interval=config.sort_interval,
            **base,
        )
    return PrioritizedReplay(
        alpha=config.alpha,
        priority_eps=config.priority_eps,
        td_error_clip=config.td_error_clip,
        uniform_mix=config.uniform_mix,
        weight_normalization=config.weight_normalization,
        **base,
    )


@dataclass(frozen=True)
class EvalResult:
    """Returns and lengths of evaluation episodes."""

    returns: np.ndarray
    lengths: np.ndarray

    def scalars(self) -> dict[str, float]:
        """The ``eval/*`` TensorBoard values."""
        return {
            m.EVAL_RETURN_MEAN: float(self.returns.mean()),
            m.EVAL_RETURN_STD: float(self.returns.std()),
            m.EVAL_LENGTH_MEAN: float(self.lengths.mean()),
        }


def evaluate(
    agent: DQNAgent, env: gym.Env, episodes: int, epsilon: float, rng: np.random.Generator
) -> EvalResult:
    """Runs ``episodes`` full episodes with an epsilon-greedy (default greedy) policy."""
    returns, lengths = np.zeros(episodes), np.zeros(episodes, dtype=np.int64)
    num_actions = agent.num_actions
    for episode in range(episodes):
        obs, _ = env.reset()
        done = False
        while not done:
            if epsilon > 0 and rng.random() < epsilon:
                action = int(rng.integers(num_actions))
            else:
                action = int(agent.greedy_actions(obs[None])[0])
            obs, reward, terminated, truncated, _ = env.step(action)
            returns[episode] += float(reward)
            lengths[episode] += 1
            done = terminated or truncated
    return EvalResult(returns, lengths)


class Trainer:
    """Everything a run needs, built (and checked) before anything is written to disk.

    Args:
        config: the validated experiment.
        config_name: the config's name (file stem), recorded in the summary.

    Raises:
        ValueError: an environment or device the config asks for cannot be had; the message
            starts with the config key to blame.
    """

    def __init__(self, config: Config, config_name: str) -> None:
        self.config = config
        self.config_name = config_name
        run = config.run
        self.device = resolve_device(run.device)
        if self.device.type == "cpu":
            # A small MLP gains nothing from intra-op threads; they only contend with the env.
            torch.set_num_threads(run.torch_threads)
        torch.manual_seed(run.seed)
        self.envs = make_vector_env(config.env)
        self.eval_env = make_eval_env(config.env)
        self.spec = describe(self.envs)
        self.memory = make_memory(config.replay, self.spec, run.seed)
        agent = config.agent
        self.agent = DQNAgent(
            obs_shape=self.spec.obs_shape,
            num_actions=self.spec.num_actions,
            hidden_sizes=agent.hidden_sizes,
            dueling=agent.dueling,
            double=agent.double,
            gamma=agent.gamma,
            learning_rate=agent.learning_rate,
            adam_eps=agent.adam_eps,
            loss=agent.loss,
            grad_clip_norm=agent.grad_clip_norm,
            target_update_interval=agent.target_update_interval,
            tau=agent.tau,
            device=self.device,
        )

    def close(self) -> None:
        """Closes the environments."""
        self.envs.close()
        self.eval_env.close()

    def run(self, run_dir: Path, progress: m.ConsoleProgress | None = None) -> dict[str, Any]:
        """Trains, evaluates, and writes ``config.yaml``, events and ``summary.json``.

        A ``KeyboardInterrupt`` stops the loop cleanly: the summary is written with
        ``interrupted: true`` and no final evaluation, and the event file is closed.

        Returns:
            The summary (also written to ``run_dir / "summary.json"``).
        """
        run_dir.mkdir(parents=True, exist_ok=True)
        config_yaml = self.config.to_yaml()
        (run_dir / "config.yaml").write_text(config_yaml, encoding="utf-8")
        logger = m.TensorBoardLogger(run_dir)
        start = time.perf_counter()
        try:
            logger.text(m.CONFIG_TEXT, m.config_as_markdown(config_yaml))
            loop = _Loop(self, logger, progress)
            interrupted = False
            try:
                loop.train()
                final = loop.final_eval()
            except KeyboardInterrupt:
                interrupted, final = True, None
            wall = time.perf_counter() - start
            torch.save(self.agent.online.state_dict(), run_dir / "model.pt")
            summary = {
                "final_eval_return_mean": None if final is None else float(final.returns.mean()),
                "final_eval_return_std": None if final is None else float(final.returns.std()),
                "final_eval_episodes": 0 if final is None else len(final.returns),
                "env_steps": loop.env_steps,
                "update_steps": self.agent.update_steps,
                "wall_seconds": wall,
                "sps": loop.env_steps / wall if wall > 0 else 0.0,
                "replay": self.config.replay.kind,
                "seed": self.config.run.seed,
                "env_id": self.config.env.id,
                "config": self.config_name,
                "device": str(self.device),
                "interrupted": interrupted,
                "run_dir": str(run_dir),
            }
            m.write_json(run_dir / "summary.json", summary)
        finally:
            logger.close()
        return summary


class _Loop:
    """The training loop's state; ``Trainer.run`` owns its lifetime."""

    def __init__(
        self, trainer: Trainer, logger: m.TensorBoardLogger, progress: m.ConsoleProgress | None
    ) -> None:
        cfg = trainer.config
        self.cfg = cfg
        self.agent = trainer.agent
        self.memory = trainer.memory
        self.envs = trainer.envs
        self.eval_env = trainer.eval_env
        self.logger = logger
        self.progress = progress
        self.prioritized = isinstance(self.memory, PrioritizedReplay | RankBasedReplay)
        self.rng = np.random.default_rng(cfg.run.seed)
        self.eval_rng = np.random.default_rng(cfg.run.seed + EVAL_SEED_OFFSET)
        self.epsilon = LinearSchedule(
            cfg.train.epsilon_start, cfg.train.epsilon_end, cfg.train.epsilon_decay_steps
        )
        # Annealed over the whole run, reaching exactly 1 on its last step (Schaul et al., 3.4).
        self.beta = LinearSchedule(cfg.replay.beta0, 1.0, cfg.train.total_env_steps)
        self.nstep = NStepAccumulator(cfg.env.num_envs, cfg.agent.n_step, cfg.agent.gamma)
        self.health = m.ReplayHealth(self.memory.capacity)
        self.learn_means = m.MeanAccumulator()
        self.env_steps = 0
        self.recent_returns: deque[float] = deque(maxlen=20)
        self.eval_env.reset(seed=cfg.run.seed + EVAL_SEED_OFFSET)
        self._log_clock = (time.perf_counter(), 0)  # (time, env steps) of the previous log write
        self._logs_written = 0
        self._last_sps = 0.0

    def _actions(self, obs: np.ndarray, epsilon: float) -> np.ndarray:
        """Epsilon-greedy actions for every sub-env; the network runs only if one is greedy."""
        n = obs.shape[0]
        explore = self.rng.random(n) < epsilon
        if explore.all():
            return self.rng.integers(self.agent.num_actions, size=n)
        actions = self.agent.greedy_actions(obs)
        if explore.any():
            actions[explore] = self.rng.integers(self.agent.num_actions, size=int(explore.sum()))
        return actions

    def _learn(self) -> None:
        """One gradient step and its priority update."""
        memory, health, step = self.memory, self.health, self.env_steps
        batch = memory.sample(self.cfg.train.batch_size, self.beta(step))
        priorities = memory.priorities(batch.indices) if self.prioritized else None
        health.record_sample(batch.indices, batch.weights, step, priorities)
        result = self.agent.learn(batch)
        memory.update_priorities(batch.indices, result.td_abs)
        health.record_priority_update(batch.indices, step)
        self.learn_means.add(result.metrics)

    def train(self) -> None:
        """Steps the envs and learns until ``total_env_steps``."""
        cfg, train = self.cfg, self.cfg.train
        envs, memory, nstep = self.envs, self.memory, self.nstep
        num_envs = cfg.env.num_envs
        obs, _ = envs.reset(seed=cfg.run.seed)
        # Sub-envs whose next step only resets them (gymnasium's next-step autoreset).
        autoreset = np.zeros(num_envs, dtype=np.bool_)
        ep_return = np.zeros(num_envs)
        ep_length = np.zeros(num_envs, dtype=np.int64)
        next_update = max(train.learning_starts, 1)
        next_log = train.log_interval
        next_eval = train.eval_interval if train.eval_interval > 0 else math.inf
        next_progress = PROGRESS_INTERVAL_STEPS
        self._log_clock = (time.perf_counter(), 0)

        while self.env_steps < train.total_env_steps:
            if autoreset.all():
                actions = np.zeros(num_envs, dtype=np.int64)  # ignored by a reset-only step
            else:
                actions = self._actions(obs, self.epsilon(self.env_steps))
            next_obs, rewards, terminated, truncated, _ = envs.step(actions)
            active = ~autoreset
            stepped = int(active.sum())
            if stepped:
                self.env_steps += stepped
                done = np.logical_or(terminated, truncated)
                fresh = nstep.step(obs, actions, rewards, next_obs, terminated, truncated, active)
                if len(fresh) == 1:  # the common case; `add` costs a third of `add_batch`
                    self.health.record_add(memory.add(*fresh[0]), self.env_steps)
                elif fresh:
                    stacked = stack(fresh)
                    self.health.record_add(memory.add_batch(*stacked), self.env_steps)
                ep_return[active] += rewards[active]
                ep_length[active] += 1
                if done.any():
                    self._end_episodes(np.flatnonzero(done), ep_return, ep_length)
                autoreset = done
            else:
                autoreset[:] = False
            obs = next_obs

            while self.env_steps >= next_update:
                next_update += train.replay_period
                if len(memory) >= train.batch_size:
                    for _ in range(train.gradient_steps):
                        self._learn()
            if self.env_steps >= next_log:
                while next_log <= self.env_steps:
                    next_log += train.log_interval
                self._write_log()
            if self.env_steps >= next_eval and self.env_steps < train.total_env_steps:
                next_eval += train.eval_interval
                result = evaluate(
                    self.agent, self.eval_env, train.eval_episodes, train.eval_epsilon,
                    self.eval_rng,
                )  # fmt: skip
                self.logger.scalars(result.scalars(), self.env_steps)
            if self.progress is not None and self.env_steps >= next_progress:
                next_progress = self.env_steps + PROGRESS_INTERVAL_STEPS
                self._update_progress()

    def _end_episodes(
        self, finished: np.ndarray, ep_return: np.ndarray, ep_length: np.ndarray
    ) -> None:
        for i in finished:
            self.logger.scalars(
                {m.EPISODE_RETURN: ep_return[i], m.EPISODE_LENGTH: ep_length[i]}, self.env_steps
            )
            self.recent_returns.append(float(ep_return[i]))
        ep_return[finished] = 0.0
        ep_length[finished] = 0

    def _sps(self) -> float:
        clock, steps = self._log_clock
        elapsed = time.perf_counter() - clock
        return (self.env_steps - steps) / elapsed if elapsed > 0 else 0.0

    def _write_log(self) -> None:
        step = self.env_steps
        values = {m.EXPLORE_EPSILON: self.epsilon(step), m.PERF_SPS: self._sps()}
        self._log_clock = (time.perf_counter(), step)
        values.update({_AGENT_METRIC_TAGS[k]: v for k, v in self.learn_means.pop_means().items()})
        values.update(self.health.pop_means())
        memory = self.memory
        if isinstance(memory, PrioritizedReplay | RankBasedReplay):
            values[m.PER_BETA] = self.beta(step)
            values[m.PER_MEAN_PRIORITY] = memory.mean_priority
            values[m.PER_MAX_PRIORITY] = memory.max_priority
            if isinstance(memory, PrioritizedReplay) and (
                self._logs_written % TREE_DRIFT_EVERY_LOGS == 0
            ):
                values[m.PER_TREE_DRIFT] = memory.tree_drift()
        self.logger.scalars(values, step)
        self._logs_written += 1
        self._last_sps = values[m.PERF_SPS]

    def _update_progress(self) -> None:
        assert self.progress is not None
        ret = float(np.mean(self.recent_returns)) if self.recent_returns else math.nan
        self.progress.update(
            self.env_steps,
            sps=self._last_sps,
            ret=ret,
            eps=self.epsilon(self.env_steps),
            beta=self.beta(self.env_steps),
        )

    def final_eval(self) -> EvalResult:
        """The final greedy evaluation, logged at the last env step."""
        train = self.cfg.train
        if self.progress is not None:
            self._update_progress()
        result = evaluate(
            self.agent, self.eval_env, train.final_eval_episodes, train.eval_epsilon, self.eval_rng
        )
        self.logger.scalars(result.scalars(), self.env_steps)
        return result
