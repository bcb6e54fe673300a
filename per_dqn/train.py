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

import contextlib
import io
import math
import time
import warnings
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from per_dqn import checkpoint as ckpt
from per_dqn import metrics as m
from per_dqn.agent import DQNAgent
from per_dqn.config import Config, ConfigError, ReplayConfig, parse_yaml, validate_config
from per_dqn.envs import (
    EnvSpec,
    check_env_state,
    describe,
    env_state,
    load_env_state,
    make_eval_env,
    make_vector_env,
)
from per_dqn.evaluate import run_episodes
from per_dqn.memory import PrioritizedReplay, RankBasedReplay, ReplayMemory, UniformReplay
from per_dqn.nstep import NStepAccumulator, stack
from per_dqn.plan import uses_frame_storage
from per_dqn.schedules import LinearSchedule
from per_dqn.seeding import RunSeeds, restart_seed

# The tree-drift check is O(capacity); every this many log points is "now and then".
TREE_DRIFT_EVERY_LOGS = 10
# Env steps between progress-bar refreshes: often enough to look live, rare enough to cost nothing.
PROGRESS_INTERVAL_STEPS = 250
# Weights whose largest |value| exceeds this many times the largest at init and at every earlier
# log point and checkpoint have diverged (see `_Loop.check_weights`).
DIVERGED_WEIGHT_GROWTH = 1_000.0
_AGENT_METRIC_TAGS = {
    "loss": m.TRAIN_LOSS,
    "q_mean": m.TRAIN_Q_MEAN,
    "td_error_abs": m.TRAIN_TD_ERROR_ABS,
    "grad_norm": m.TRAIN_GRAD_NORM,
}


class StopRequested(KeyboardInterrupt):
    """The run's ``should_stop`` asked it to stop; raised between two env steps, where the loop's
    state is exact and can be checkpointed (a ``KeyboardInterrupt`` raised anywhere else may land
    mid-step)."""


class DivergedError(RuntimeError):
    """The loss became NaN or infinite, or the weights non-finite or far larger than ever before
    (``DIVERGED_WEIGHT_GROWTH``); the run stopped before the bad weights reached a priority, a
    log point, a checkpoint or ``model.pt``. The message is one line naming the step and value."""


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
    if uses_frame_storage(config, spec):
        base.update(dedup_frames=True, frame_slack=config.frame_slack)
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


def make_agent(config: Config, spec: EnvSpec, device: torch.device) -> DQNAgent:
    """The agent ``config.agent`` describes, sized for ``spec``."""
    agent = config.agent
    return DQNAgent(
        obs_shape=spec.obs_shape,
        num_actions=spec.num_actions,
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
        device=device,
        network=agent.network,
        channels_last=agent.channels_last,
        precision=agent.precision,
    )


@dataclass(frozen=True)
class EvalResult:
    """Returns and lengths of evaluation episodes, and the line saying which cap cut them."""

    returns: np.ndarray
    lengths: np.ndarray
    cap_warning: str | None = None

    def scalars(self) -> dict[str, float]:
        """The ``eval/*`` TensorBoard values."""
        return {
            m.EVAL_RETURN_MEAN: float(self.returns.mean()),
            m.EVAL_RETURN_STD: float(self.returns.std()),
            m.EVAL_LENGTH_MEAN: float(self.lengths.mean()),
        }


def evaluate(
    agent: DQNAgent,
    env: gym.Env,
    episodes: int,
    epsilon: float,
    rng: np.random.Generator,
    train: Any = None,
    progress: m.ConsoleProgress | None = None,
) -> EvalResult:
    """Runs ``episodes`` episodes with an epsilon-greedy (default greedy) policy, within the
    evaluation caps of ``train`` (a ``TrainConfig``; None: no caps), shown on ``progress``."""
    played = run_episodes(
        agent, env, episodes, epsilon, rng,
        max_episode_steps=None if train is None else train.eval_max_episode_steps,
        max_total_steps=None if train is None else train.eval_max_total_steps,
        on_progress=None if progress is None else progress.evaluating,
    )  # fmt: skip
    return EvalResult(played.returns, played.lengths, played.cap_warning())


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
        self.seeds = RunSeeds.from_seed(run.seed)  # one independent stream per consumer
        torch.manual_seed(self.seeds.network)
        self.envs = make_vector_env(config.env)
        self.eval_env = make_eval_env(config.env)
        self.spec = describe(self.envs)
        self.memory = make_memory(config.replay, self.spec, self.seeds.replay)
        self.agent = make_agent(config, self.spec, self.device)
        self._resume: ckpt.RunCheckpoint | None = None

    def close(self) -> None:
        """Closes the environments."""
        self.envs.close()
        self.eval_env.close()

    def load_checkpoint(self, path: Path) -> list[str]:
        """Loads a training checkpoint (agent and memory now, the loop's state in ``run``) so that
        ``run`` continues it; returns one-line notes for the user on what is not exact.

        Raises:
            CheckpointError: the checkpoint fails its checksums, cannot be read, or does not fit
                this config.
        """
        state = ckpt.load_run_checkpoint(path, self.device)
        ckpt.load_agent_state(self.agent, state.agent)
        notes = []
        if state.memory is None:
            notes.append(
                f"{path.name} holds no replay memory (checkpoint.replay: false): the resumed run "
                "starts from an empty memory"
            )
        else:
            try:
                self.memory.load_state_dict(state.memory)
            except ValueError as exc:
                raise ckpt.CheckpointError(
                    f"{path}: its replay memory does not fit this config ({exc})"
                ) from None
        try:
            saved = validate_config(parse_yaml(state.config_yaml, str(path)), str(path))
        except ConfigError:
            saved = None
        budget = {"total_env_steps": self.config.train.total_env_steps}
        if (
            saved is None
            or saved.model_copy(update={"train": saved.train.model_copy(update=budget)})
            != self.config
        ):
            notes.append(
                f"this config differs from the one {path.name} was written with (beyond "
                "train.total_env_steps): the resume follows this config and is not exact"
            )
        loop = state.loop
        self._check_loop_state(loop, path, state.env_steps)
        if loop["envs"] is None or loop["eval_env"] is None:
            notes.append(
                f"{self.config.env.id} envs cannot be saved: they restart from a fresh reset "
                "seeded from run.seed and the env step, so this resume is not exact"
            )
        self._resume = state
        return notes

    def _check_loop_state(self, loop: Any, path: Path, env_steps: int) -> None:
        """Checks what ``_Loop.load_state_dict`` will apply, so that a loop state that does not
        fit is refused here, in one line, before the run writes anything.

        Raises:
            CheckpointError: a missing key, another env step than the manifest's, an RNG state
                or env state that does not fit.
        """
        missing = [key for key in _LOOP_KEYS if not isinstance(loop, dict) or key not in loop]
        if missing:
            raise ckpt.CheckpointError(f"{path}: its loop state lacks {', '.join(missing)}")
        if loop["env_steps"] != env_steps:
            raise ckpt.CheckpointError(
                f"{path}: its loop state is at env step {loop['env_steps']}, its manifest at "
                f"{env_steps}"
            )
        for key in ("rng", "eval_rng"):
            try:
                np.random.Generator(np.random.PCG64()).bit_generator.state = loop[key]
            except (TypeError, ValueError, KeyError) as exc:
                raise ckpt.CheckpointError(f"{path}: its loop state's {key}: {exc}") from None
        torch_rng = loop["torch_rng"]
        if not isinstance(torch_rng, np.ndarray) or torch_rng.dtype != np.uint8:
            raise ckpt.CheckpointError(f"{path}: its loop state's torch_rng is not a uint8 array")
        for env, key in ((self.envs, "envs"), (self.eval_env, "eval_env")):
            if loop[key] is not None:
                try:
                    check_env_state(env, loop[key])
                except ValueError as exc:
                    raise ckpt.CheckpointError(f"{path}: {key}: {exc}") from None

    def _save_checkpoint(
        self, run_dir: Path, logger: m.TensorBoardLogger, loop_state: dict[str, Any], final: bool
    ) -> Path:
        """Writes a checkpoint of the agent, the memory and ``loop_state``."""
        cfg = self.config.checkpoint
        # Every point logged up to this step reaches the event file before the state that follows
        # it is saved: a resumed run purges only what comes after.
        logger.flush()
        root = ckpt.checkpoints_dir(run_dir)
        # A failed write leaves the earlier checkpoints whole (see ``checkpoint.write_checkpoint``).
        with m.writing(root / ckpt.checkpoint_name(loop_state["env_steps"])):
            return ckpt.save_run_checkpoint(
                root,
                env_steps=loop_state["env_steps"],
                agent=self.agent,
                loop_state=loop_state,
                memory_state=self.memory.state_dict() if cfg.replay else None,
                config_yaml=self.config.to_yaml(),
                keep_last=cfg.keep_last,
                meta={
                    "update_steps": self.agent.update_steps,
                    "final": final,
                    "config_name": self.config_name,
                },
            )

    def run(
        self,
        run_dir: Path,
        progress: m.ConsoleProgress | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> dict[str, Any]:
        """Trains, evaluates, and writes ``config.yaml``, events, checkpoints and ``summary.json``.

        After ``load_checkpoint`` the run continues that checkpoint in ``run_dir``: its event
        files get no duplicated points (see ``TensorBoardLogger``'s ``purge_step``).

        A ``KeyboardInterrupt`` stops the loop cleanly: the summary is written with
        ``interrupted: true`` and no final evaluation, and the event file is closed; no checkpoint
        is written then (the state may be mid-step), so a resume starts from the last periodic one.
        ``should_stop`` is the same stop asked for cooperatively: polled once per env step (and
        before the final evaluation), it ends the run as an interrupt does, but always between
        two steps, never inside a library call, so the state is exact and is checkpointed first
        (when checkpoints are on and the step has none yet): a resume then loses nothing. The CLI
        turns Ctrl-C and SIGTERM into this stop, and a sweep's workers stop their runs this way.

        Returns:
            The summary (also written to ``run_dir / "summary.json"``); ``wall_seconds`` and
            ``sps`` cover this call only.

        Raises:
            DivergedError: a non-finite loss; nothing is written after it (no checkpoint, model
                or summary).
            WriteError: a file could not be written (disk full, read-only...); it names the file
                or checkpoint. Checkpoints written before it are left whole.
        """
        config_yaml = self.config.to_yaml()
        with m.writing(run_dir / "config.yaml"):
            run_dir.mkdir(parents=True, exist_ok=True)
            ckpt.write_text_atomic(run_dir / "config.yaml", config_yaml)
        resume = self._resume
        start_steps = 0 if resume is None else resume.env_steps
        # The checkpoint was written after every point of its step was logged.
        logger = m.TensorBoardLogger(run_dir, None if resume is None else start_steps + 1)
        start = time.perf_counter()
        saved_at = [start_steps]  # the step of the newest checkpoint (none at 0)
        try:
            if resume is None:
                logger.text(m.CONFIG_TEXT, m.config_as_markdown(config_yaml))

            def save(loop_state: dict[str, Any]) -> None:
                self._save_checkpoint(run_dir, logger, loop_state, final=False)
                saved_at[0] = loop_state["env_steps"]

            checkpoints = self.config.checkpoint.enabled
            loop = _Loop(self, logger, progress, save if checkpoints else None)
            loop.should_stop = should_stop
            interrupted = stopped_between_steps = False
            try:
                loop.train(None if resume is None else resume.loop)
                if should_stop is not None and should_stop():
                    raise StopRequested
                loop.check_weights()
                final = loop.final_eval()
            except KeyboardInterrupt as exc:
                interrupted, final = True, None
                stopped_between_steps = isinstance(exc, StopRequested)
            # However the loop ended (Ctrl-C included), the weights are checked before they are
            # written.
            loop.check_weights()
            # A stop between two steps is checkpointed there, so that a resume loses nothing; not
            # at the budget's end, where a checkpoint would read as a finished run.
            if (
                interrupted
                and stopped_between_steps
                and checkpoints
                and saved_at[0] < loop.env_steps < self.config.train.total_env_steps
            ):
                save(loop.state_dict())
            if final is not None and checkpoints:
                self._save_checkpoint(run_dir, logger, loop.state_dict(), final=True)
            wall = time.perf_counter() - start
            # Atomic: `eval` beside this run reads the old file or the new one, never half.
            buffer = io.BytesIO()
            torch.save(self.agent.online.state_dict(), buffer)
            with m.writing(run_dir / "model.pt"):
                ckpt.write_bytes_atomic(run_dir / "model.pt", buffer.getvalue())
            summary = {
                "final_eval_return_mean": None if final is None else float(final.returns.mean()),
                "final_eval_return_std": None if final is None else float(final.returns.std()),
                "final_eval_episodes": 0 if final is None else len(final.returns),
                "env_steps": loop.env_steps,
                "update_steps": self.agent.update_steps,
                "wall_seconds": wall,
                "sps": (loop.env_steps - start_steps) / wall if wall > 0 else 0.0,
                "replay": self.config.replay.kind,
                "seed": self.config.run.seed,
                "env_id": self.config.env.id,
                "config": self.config_name,
                "device": str(self.device),
                "interrupted": interrupted,
                "resumed_from_env_steps": None if resume is None else start_steps,
                "run_dir": str(run_dir),
            }
            m.write_json(run_dir / "summary.json", summary)
        except BaseException:
            # The first failure is the one to report; closing a writer that failed fails again.
            with contextlib.suppress(OSError):
                logger.close()
            raise
        logger.close()
        return summary


# What a checkpoint's loop state must hold (``_Loop.state_dict``).
_LOOP_KEYS = (
    "env_steps", "cursor", "rng", "eval_rng", "torch_rng", "cuda_rng", "nstep", "health",
    "learn_means", "recent_returns", "logs_written", "weight_scale", "envs", "eval_env",
)  # fmt: skip


class _Loop:
    """The training loop's state; ``Trainer.run`` owns its lifetime."""

    def __init__(
        self,
        trainer: Trainer,
        logger: m.TensorBoardLogger,
        progress: m.ConsoleProgress | None,
        checkpoint: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        cfg = trainer.config
        self.checkpoint = checkpoint  # saves a ``state_dict()``; None: no periodic checkpoints
        self.should_stop: Callable[[], bool] | None = None  # see ``Trainer.run``
        self.cfg = cfg
        self.agent = trainer.agent
        self.memory = trainer.memory
        self.envs = trainer.envs
        self.eval_env = trainer.eval_env
        self.logger = logger
        self.progress = progress
        self.prioritized = isinstance(self.memory, PrioritizedReplay | RankBasedReplay)
        self.seeds = trainer.seeds
        self.rng = np.random.default_rng(self.seeds.explore)
        self.eval_rng = np.random.default_rng(self.seeds.eval_explore)
        self.epsilon = LinearSchedule(
            cfg.train.epsilon_start, cfg.train.epsilon_end, cfg.train.epsilon_decay_steps
        )
        # Annealed over the whole run, reaching exactly 1 on its last step (Schaul et al., 3.4).
        self.beta = LinearSchedule(cfg.replay.beta0, 1.0, cfg.train.total_env_steps)
        agent_cfg, starts = cfg.agent, cfg.train.learning_starts
        self.learning_rate = (
            None
            if agent_cfg.learning_rate_end is None
            else LinearSchedule(
                agent_cfg.learning_rate, agent_cfg.learning_rate_end,
                max(cfg.train.total_env_steps - starts, 0), begin_step=starts,
            )
        )  # fmt: skip
        self.nstep = NStepAccumulator(cfg.env.num_envs, cfg.agent.n_step, cfg.agent.gamma)
        self.health = m.ReplayHealth(self.memory.capacity)
        self.learn_means = m.MeanAccumulator()
        self.env_steps = 0
        self.recent_returns: deque[float] = deque(maxlen=20)
        self.eval_env.reset(seed=self.seeds.eval_env)
        self._log_clock = (time.perf_counter(), 0)  # (time, env steps) of the previous log write
        self.weight_scale = self._largest_weight()  # see `check_weights`
        self._logs_written = 0
        self._last_sps = 0.0
        self._last_loss = math.nan  # shown on the progress display
        self._last_eval = math.nan

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
        if self.learning_rate is not None:
            self.agent.set_learning_rate(self.learning_rate(step))
        result = self.agent.learn(batch)
        loss = result.metrics["loss"]
        if not math.isfinite(loss):
            raise DivergedError(
                f"train/loss is {loss} at env step {step:,} (update step "
                f"{self.agent.update_steps:,}): training diverged"
            )
        memory.update_priorities(batch.indices, result.td_abs)
        health.record_priority_update(batch.indices, step)
        self.learn_means.add(result.metrics)

    def train(self, resume: dict[str, Any] | None = None) -> None:
        """Steps the envs and learns until ``total_env_steps``.

        Args:
            resume: a ``state_dict()`` to continue from (with the agent and memory of the same
                checkpoint already loaded).
        """
        cfg, train = self.cfg, self.cfg.train
        envs, memory, nstep = self.envs, self.memory, self.nstep
        num_envs = cfg.env.num_envs
        obs, info = envs.reset(seed=self.seeds.env)
        clip_rewards = cfg.env.clip_rewards
        life_loss = cfg.env.terminal_on_life_loss and "lives" in info
        prev_lives = info["lives"] if life_loss else None
        # Sub-envs whose next step only resets them (gymnasium's next-step autoreset).
        autoreset = np.zeros(num_envs, dtype=np.bool_)
        ep_return = np.zeros(num_envs)
        ep_length = np.zeros(num_envs, dtype=np.int64)
        next_update = max(train.learning_starts, 1)
        next_log = train.log_interval
        next_eval = train.eval_interval if train.eval_interval > 0 else math.inf
        next_progress = PROGRESS_INTERVAL_STEPS
        if resume is not None:
            cursor = self.load_state_dict(resume)
            obs, autoreset = cursor["obs"], cursor["autoreset"]
            ep_return, ep_length = cursor["ep_return"], cursor["ep_length"]
            next_update, next_log = cursor["next_update"], cursor["next_log"]
            next_eval = cursor["next_eval"]
            if life_loss:
                prev_lives = cursor["prev_lives"]
        self._log_clock = (time.perf_counter(), self.env_steps)
        next_checkpoint = self._next_checkpoint()

        def cursor_now() -> dict[str, Any]:
            # The loop's locals as they are when a checkpoint is taken (a closure reads them then).
            return {
                "obs": obs, "autoreset": autoreset, "ep_return": ep_return,
                "ep_length": ep_length, "next_update": next_update, "next_log": next_log,
                "next_eval": next_eval, "prev_lives": prev_lives,
            }  # fmt: skip

        self._cursor = cursor_now
        should_stop = self.should_stop

        while self.env_steps < train.total_env_steps:
            if should_stop is not None and should_stop():
                raise StopRequested
            if autoreset.all():
                actions = np.zeros(num_envs, dtype=np.int64)  # ignored by a reset-only step
            else:
                actions = self._actions(obs, self.epsilon(self.env_steps))
            next_obs, rewards, terminated, truncated, info = envs.step(actions)
            active = ~autoreset
            stepped = int(active.sum())
            if stepped:
                self.env_steps += stepped
                done = np.logical_or(terminated, truncated)
                # What the learner sees: clipped rewards, and a lost life as the end of the
                # bootstrapped return while the game plays on (Mnih et al., 2015).
                learn_rewards = np.clip(rewards, -1.0, 1.0) if clip_rewards else rewards
                learn_terminated = terminated
                if life_loss:
                    lives = info["lives"]
                    learn_terminated = terminated | (lives < prev_lives)
                fresh = nstep.step(
                    obs, actions, learn_rewards, next_obs, learn_terminated, truncated, active
                )
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
            if life_loss:
                prev_lives = info["lives"]  # a reset step brings the new game's lives
            obs = next_obs

            while self.env_steps >= next_update:
                next_update += train.replay_period
                if len(memory) >= train.batch_size:
                    for _ in range(train.gradient_steps):
                        self._learn()
            if self.env_steps >= next_log:
                while next_log <= self.env_steps:
                    next_log += train.log_interval
                self.check_weights()
                self._write_log()
            # Due on the last step, the final evaluation stands in; the schedule still moves on,
            # so a run extended by `--resume --steps` does not evaluate again one step later.
            if self.env_steps >= next_eval:
                next_eval += train.eval_interval
                if self.env_steps < train.total_env_steps:
                    self.check_weights()
                    result = evaluate(
                        self.agent, self.eval_env, train.eval_episodes, train.eval_epsilon,
                        self.eval_rng, train, self.progress,
                    )  # fmt: skip
                    self._eval_done(result, f"the evaluation at env step {self.env_steps:,}")
                    self.logger.scalars(result.scalars(), self.env_steps)
            if self.progress is not None and self.env_steps >= next_progress:
                next_progress = self.env_steps + PROGRESS_INTERVAL_STEPS
                self._update_progress()
            # Last in the step, so that everything logged at this env step precedes it.
            if self.env_steps >= next_checkpoint and self.env_steps < train.total_env_steps:
                next_checkpoint = self._next_checkpoint()
                assert self.checkpoint is not None  # else next_checkpoint is inf
                self.check_weights()
                self.checkpoint(self.state_dict())

    def _next_checkpoint(self) -> float:
        """The env step of the next periodic checkpoint: the next multiple of the interval."""
        interval = self.cfg.checkpoint.interval_steps
        if self.checkpoint is None or interval == 0:
            return math.inf
        return (self.env_steps // interval + 1) * interval

    def state_dict(self) -> dict[str, Any]:
        """What the loop needs, besides the agent and the memory, to continue exactly from here:
        counters, RNG states, open n-step windows, episode accumulators, the envs' states and the
        PER health panel's history. Only valid once ``train`` has started."""
        return {
            "env_steps": self.env_steps,
            "cursor": self._cursor(),
            "rng": self.rng.bit_generator.state,
            "eval_rng": self.eval_rng.bit_generator.state,
            # uint8 tensors, stored as arrays: the checkpoint holds no pickle.
            "torch_rng": torch.get_rng_state().numpy(),
            "cuda_rng": (
                [state.numpy() for state in torch.cuda.get_rng_state_all()]
                if torch.cuda.is_available()
                else None
            ),
            "nstep": self.nstep.state_dict(),
            "health": self.health.state_dict(),
            "learn_means": self.learn_means.state_dict(),
            "recent_returns": list(self.recent_returns),
            "logs_written": self._logs_written,
            "weight_scale": self.weight_scale,
            "envs": env_state(self.envs),
            "eval_env": env_state(self.eval_env),
        }

    def load_state_dict(self, state: dict[str, Any]) -> dict[str, Any]:
        """Restores ``state_dict()`` output; returns the cursor (the loop's locals) to continue.

        Envs that could not be saved restart from a reset seeded by ``seeding.restart_seed``:
        every open episode and n-step window is dropped, since none may span the reset.
        """
        self.env_steps = int(state["env_steps"])
        self.rng.bit_generator.state = state["rng"]
        self.eval_rng.bit_generator.state = state["eval_rng"]
        torch.set_rng_state(torch.from_numpy(np.asarray(state["torch_rng"], dtype=np.uint8)))
        if state["cuda_rng"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(
                [torch.from_numpy(np.asarray(s, dtype=np.uint8)) for s in state["cuda_rng"]]
            )
        self.health.load_state_dict(state["health"])
        self.learn_means.load_state_dict(state["learn_means"])
        self.recent_returns.extend(state["recent_returns"])
        self._logs_written = int(state["logs_written"])
        self.weight_scale = float(state["weight_scale"])
        seed = restart_seed(self.cfg.run.seed, self.env_steps)
        if state["eval_env"] is not None:
            load_env_state(self.eval_env, state["eval_env"])
        else:
            self.eval_env.reset(seed=seed + self.cfg.env.num_envs)  # past every training sub-env
        cursor = dict(state["cursor"])
        if state["envs"] is not None:
            load_env_state(self.envs, state["envs"])
            self.nstep.load_state_dict(state["nstep"])
        else:
            num_envs = self.cfg.env.num_envs
            obs, info = self.envs.reset(seed=seed)
            cursor.update(
                obs=obs,
                autoreset=np.zeros(num_envs, dtype=np.bool_),
                ep_return=np.zeros(num_envs),
                ep_length=np.zeros(num_envs, dtype=np.int64),
                prev_lives=info.get("lives"),
            )
        return cursor

    def _largest_weight(self) -> float:
        """The largest |value| in the online and target networks (NaN if any is NaN)."""
        with torch.no_grad():
            params = [*self.agent.online.parameters(), *self.agent.target.parameters()]
            return float(torch.stack([p.detach().abs().max() for p in params]).max())

    def check_weights(self) -> None:
        """Stops the run if the weights diverged, before they are logged or written.

        A finite loss does not mean sane weights: one Adam step at an absurd learning rate moves
        every weight by about the learning rate (1e30, say) while the loss it reports is the one
        computed before the step, and the NaN loss only comes a step later; a checkpoint taken in
        between would hold those weights. The rule: weights are diverged when one is non-finite,
        or the largest |weight| is more than ``DIVERGED_WEIGHT_GROWTH`` (1000) times the largest
        seen at init and at every earlier log point and checkpoint (``weight_scale``). Healthy
        training grows it by a small factor over a whole run (CartPole's init bound is 0.5, its
        trained weights stay below ~10); a blow-up grows it by orders of magnitude between two
        log points.

        Raises:
            DivergedError: one line with the value, the bound and the step.
        """
        largest = self._largest_weight()
        bound = DIVERGED_WEIGHT_GROWTH * self.weight_scale
        if not math.isfinite(largest) or largest > bound:
            raise DivergedError(
                f"the largest |weight| is {largest:.3g} at env step {self.env_steps:,} (update "
                f"step {self.agent.update_steps:,}), more than {DIVERGED_WEIGHT_GROWTH:g}x the "
                f"largest before ({self.weight_scale:.3g}): training diverged"
            )
        self.weight_scale = max(self.weight_scale, largest)

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
        if self.learning_rate is not None:
            values[m.TRAIN_LEARNING_RATE] = self.learning_rate(step)
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
        self._last_loss = values.get(m.TRAIN_LOSS, self._last_loss)

    def _update_progress(self) -> None:
        assert self.progress is not None
        ret = float(np.mean(self.recent_returns)) if self.recent_returns else math.nan
        self.progress.update(
            self.env_steps,
            sps=self._last_sps,
            ret=ret,
            eps=self.epsilon(self.env_steps),
            beta=self.beta(self.env_steps),
            loss=self._last_loss,
            last_eval=self._last_eval,
        )

    def _eval_done(self, result: EvalResult, what: str) -> None:
        """Shows an evaluation's mean return, and warns when a cap cut it."""
        self._last_eval = float(result.returns.mean())
        if result.cap_warning is not None:
            line = f"{what}: {result.cap_warning}"
            if self.progress is not None:
                self.progress.warn(line)
            else:
                warnings.warn(line, RuntimeWarning, stacklevel=2)
        if self.progress is not None:
            self._update_progress()

    def final_eval(self) -> EvalResult:
        """The final greedy evaluation, logged at the last env step."""
        train = self.cfg.train
        if self.progress is not None:
            self._update_progress()
        result = evaluate(
            self.agent, self.eval_env, train.final_eval_episodes, train.eval_epsilon,
            self.eval_rng, train, self.progress,
        )  # fmt: skip
        self._eval_done(result, "the final evaluation")
        self.logger.scalars(result.scalars(), self.env_steps)
        return result
