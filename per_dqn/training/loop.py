"""The training loop's state (``LoopState``) and its step (``Loop.step``), with no I/O.

One call of ``Loop.step``::

    actions   <- epsilon-greedy(agent, obs)            (skipped when every sub-env only resets)
    step      -> next_obs, rewards, terminated, truncated
    n-step accumulator -> finished windows -> memory.add / add_batch  (reset-only steps: nothing)
    every replay_period env steps after learning_starts, gradient_steps times:
        batch  <- memory.sample(batch_size, beta)           (indices, IS weights, priorities)
        result <- agent.learn(batch)                        (metrics, PriorityUpdate)
        memory.update(result.priorities)

Env steps count the steps the agent experienced: gymnasium's next-step autoreset spends one
``step`` call per episode on the reset alone, and that call is neither stored nor counted.

``LoopState`` is the one place the loop's state lives (counters, the open n-step windows, the
RNGs, the lives, the episode accumulators, the schedules' positions); its ``state_dict`` is the
loop's part of a checkpoint. The run (``run.py``) decides what to log, evaluate and save, and
when: everything here is computation.

One module though past 500 lines: ``LoopState`` and the step that reads and writes it are one state
machine, whose checkpointed fields must match the step exactly.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from per_dqn.agent import DQNAgent
from per_dqn.agent.result import LearnResult
from per_dqn.config import Config, EnvConfig
from per_dqn.envs.make import Envs
from per_dqn.logs import tags
from per_dqn.memory import Batch, ReplayMemory
from per_dqn.rundir.summary import RunRecord
from per_dqn.training.asking import ACT, LEARN, Request, serve
from per_dqn.training.health import MeanAccumulator, ReplayHealth
from per_dqn.training.nstep import NStepAccumulator, Transition, stack
from per_dqn.training.schedules import LinearSchedule
from per_dqn.training.seeding import RunSeeds, restart_seed

if TYPE_CHECKING:
    from gymnasium.vector import VectorEnv

# Weights whose largest |value| exceeds this many times the largest at init and at every earlier
# check have diverged (see `Loop.check_weights`).
DIVERGED_WEIGHT_GROWTH = 1_000.0
# Episode returns the "recent return" of the progress display averages.
RECENT_EPISODES = 20


class DivergedError(RuntimeError):
    """The loss became NaN or infinite, or the weights non-finite or far larger than ever before
    (``DIVERGED_WEIGHT_GROWTH``); the run stopped before the bad weights reached a priority, a
    log point, a checkpoint or ``model.pt``. The message is one line naming the step and value."""


@dataclass
class LoopState:
    """Everything the loop carries from one step to the next, besides the agent, the memory and
    the envs (which hold their own state).

    Attributes:
        env_steps: agent steps taken so far (reset-only steps not counted).
        obs: the current observation of every sub-env.
        autoreset: sub-envs whose next step only resets them (gymnasium's next-step autoreset).
        ep_return: each sub-env's undiscounted return so far in its episode.
        ep_length: each sub-env's steps so far in its episode.
        prev_lives: each sub-env's lives after the last step (terminal-on-life-loss), else None.
        next_update: the env step at which learning is next due.
        next_log: the env step of the next log point.
        next_eval: the env step of the next periodic evaluation (inf: none).
        rng: exploration's generator (``RunSeeds.explore``).
        eval_rng: the evaluations' epsilon draws (``RunSeeds.eval_explore``).
        nstep: the open n-step windows.
        health: the PER health panel's per-slot history and pending batch statistics.
        learn_means: the learner's metrics since the last log point.
        recent_returns: the last ``RECENT_EPISODES`` episode returns.
        logs_written: log points written (the tree-drift check runs on every 10th).
        weight_scale: the largest |weight| at every earlier weight check (``Loop.check_weights``).
        record: the evaluation curve and the logged IS-weight means, for the summary; None when
            the run was resumed from a checkpoint written before it was kept (its start is
            unknown).
        torch_rng: torch's CPU generator state of this run (``keep_torch_rng``).
        cuda_rng: torch's CUDA generator states of this run (None without CUDA).
    """

    env_steps: int
    obs: np.ndarray
    autoreset: np.ndarray
    ep_return: np.ndarray
    ep_length: np.ndarray
    prev_lives: np.ndarray | None
    next_update: int
    next_log: int
    next_eval: float
    rng: np.random.Generator
    eval_rng: np.random.Generator
    nstep: NStepAccumulator
    health: ReplayHealth
    learn_means: MeanAccumulator = field(default_factory=MeanAccumulator)
    recent_returns: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_EPISODES))
    logs_written: int = 0
    weight_scale: float = 0.0
    record: RunRecord | None = field(default_factory=RunRecord)
    torch_rng: np.ndarray | None = None
    cuda_rng: list[np.ndarray] | None = None

    def keep_torch_rng(self) -> None:
        """Keeps torch's generator states of now (the run's networks just built) as the run's
        own. No step of a run draws from them, so they stay the run's state from then on even
        where several runs share the process (a pack): each run checkpoints its own."""
        self.torch_rng = torch.get_rng_state().numpy()
        self.cuda_rng = (
            [state.numpy() for state in torch.cuda.get_rng_state_all()]
            if torch.cuda.is_available()
            else None
        )

    def state_dict(self, stored: int | None = None) -> dict[str, Any]:
        """A tree of arrays and JSON values (no pickle), torch's RNG states included; the PER
        health panel's per-slot arrays cut to the ``stored`` slots of the memory (its ``len``;
        None: every slot)."""
        return {
            "env_steps": self.env_steps,
            "obs": self.obs,
            "autoreset": self.autoreset,
            "ep_return": self.ep_return,
            "ep_length": self.ep_length,
            "prev_lives": self.prev_lives,
            "next_update": self.next_update,
            "next_log": self.next_log,
            "next_eval": self.next_eval,
            "rng": self.rng.bit_generator.state,
            "eval_rng": self.eval_rng.bit_generator.state,
            # uint8 tensors, stored as arrays: the checkpoint holds no pickle.
            "torch_rng": self.torch_rng,
            "cuda_rng": self.cuda_rng,
            "nstep": self.nstep.state_dict(),
            "health": self.health.state_dict(self.health.capacity if stored is None else stored),
            "learn_means": self.learn_means.state_dict(),
            "recent_returns": list(self.recent_returns),
            "logs_written": self.logs_written,
            "weight_scale": self.weight_scale,
            "record": None if self.record is None else self.record.state_dict(),
        }

    @classmethod
    def check_state_dict(cls, state: Any) -> None:
        """Raises the ``ValueError`` that ``load_state_dict`` would, and changes nothing."""
        missing = [
            key
            for key in _STATE_KEYS
            if key not in _LATER_KEYS and (not isinstance(state, dict) or key not in state)
        ]
        if missing:
            raise ValueError(f"its loop state lacks {', '.join(missing)}")
        if state.get("record") is not None:
            RunRecord().load_state_dict(state["record"])
        for key in ("rng", "eval_rng"):
            try:
                np.random.Generator(np.random.PCG64()).bit_generator.state = state[key]
            except (TypeError, ValueError, KeyError, OverflowError) as exc:
                raise ValueError(f"its loop state's {key}: {exc}") from None
        torch_rng = state["torch_rng"]
        if not isinstance(torch_rng, np.ndarray) or torch_rng.dtype != np.uint8:
            raise ValueError("its loop state's torch_rng is not a uint8 array")
        try:  # on a generator of its own: torch checks the size and the MT19937 state
            torch.Generator().set_state(torch.from_numpy(np.ascontiguousarray(torch_rng)))
        except RuntimeError as exc:
            raise ValueError(f"its loop state's torch_rng: {exc}") from None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict()`` output (torch's RNG states included).

        Raises:
            ValueError: a state that does not fit (``check_state_dict``).
        """
        self.check_state_dict(state)
        self.env_steps = int(state["env_steps"])
        self.obs = state["obs"]
        self.autoreset = np.asarray(state["autoreset"], dtype=np.bool_)
        self.ep_return = np.asarray(state["ep_return"], dtype=np.float64)
        self.ep_length = np.asarray(state["ep_length"], dtype=np.int64)
        self.prev_lives = state["prev_lives"]
        self.next_update = int(state["next_update"])
        self.next_log = int(state["next_log"])
        self.next_eval = float(state["next_eval"])
        self.rng.bit_generator.state = state["rng"]
        self.eval_rng.bit_generator.state = state["eval_rng"]
        self.torch_rng = np.asarray(state["torch_rng"], dtype=np.uint8)
        self.cuda_rng = state["cuda_rng"]
        torch.set_rng_state(torch.from_numpy(self.torch_rng))
        if self.cuda_rng is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(
                [torch.from_numpy(np.asarray(s, dtype=np.uint8)) for s in self.cuda_rng]
            )
        self.nstep.load_state_dict(state["nstep"])
        self.health.load_state_dict(state["health"])
        self.learn_means.load_state_dict(state["learn_means"])
        self.recent_returns.clear()
        self.recent_returns.extend(state["recent_returns"])
        self.logs_written = int(state["logs_written"])
        self.weight_scale = float(state["weight_scale"])
        if state.get("record") is None:
            self.record = None  # a checkpoint from before the record: the run's start is unknown
        else:
            self.record = RunRecord()
            self.record.load_state_dict(state["record"])


# The keys of ``LoopState.state_dict``: its fields, and torch's RNG states.
_STATE_KEYS = tuple(f.name for f in fields(LoopState))
# Keys added since format 3 that older checkpoints lack (loaded as None: unknown).
_LATER_KEYS = frozenset({"record"})


def upgrade_format_2(parts: dict[str, Any]) -> dict[str, Any]:
    """A format-2 checkpoint's parts in format 3's shape.

    Format 2 kept the loop's locals under ``loop["cursor"]`` and the envs' states under
    ``loop["envs"]`` / ``loop["eval_env"]``; format 3 has a flat ``LoopState`` and an ``envs``
    part. Nothing else changed, so the same numbers continue the run exactly.

    Raises:
        ValueError: a loop part that is not format 2's.
    """
    loop = parts.get("loop")
    if not isinstance(loop, dict) or not isinstance(loop.get("cursor"), dict):
        raise ValueError("its format-2 loop state lacks cursor")
    loop = dict(loop)
    cursor = loop.pop("cursor")
    envs = {"train": loop.pop("envs", None), "eval": loop.pop("eval_env", None)}
    loop.update(cursor)
    return {**parts, "loop": loop, "envs": envs}


def tracks_lives(config: Config, info: dict[str, Any]) -> bool:
    """Whether a lost life ends the bootstrapped return: asked for, and the env reports lives
    (``info`` of the training envs' reset)."""
    return bool(config.env.terminal_on_life_loss and "lives" in info)


def fresh_state(
    config: Config, obs: np.ndarray, info: dict[str, Any], seeds: RunSeeds, capacity: int
) -> LoopState:
    """A loop's state at env step 0, from the training envs' first reset (``obs``, ``info``),
    the run's random streams and the memory's ``capacity`` (the health panel's slots)."""
    train, num_envs = config.train, config.env.num_envs
    return LoopState(
        env_steps=0,
        obs=obs,
        autoreset=np.zeros(num_envs, dtype=np.bool_),
        ep_return=np.zeros(num_envs),
        ep_length=np.zeros(num_envs, dtype=np.int64),
        prev_lives=info["lives"] if tracks_lives(config, info) else None,
        next_update=max(train.learning_starts, 1),
        next_log=train.log_interval,
        next_eval=train.eval_interval if train.eval_interval > 0 else math.inf,
        rng=np.random.default_rng(seeds.explore),
        eval_rng=np.random.default_rng(seeds.eval_explore),
        nstep=NStepAccumulator(num_envs, config.agent.n_step, config.agent.gamma),
        health=ReplayHealth(capacity),
    )


def restart_play(
    state: LoopState, env: VectorEnv, seed: int, config: Config, life_loss: bool
) -> None:
    """Restarts play in ``state`` from a reset of the training ``env`` seeded ``seed``, for envs
    whose state could not be saved: every open episode and n-step window is dropped, since none
    may span the reset."""
    num_envs = config.env.num_envs
    obs, info = env.reset(seed=seed)
    state.obs = obs
    state.autoreset = np.zeros(num_envs, dtype=np.bool_)
    state.ep_return = np.zeros(num_envs)
    state.ep_length = np.zeros(num_envs, dtype=np.int64)
    state.prev_lives = info.get("lives") if life_loss else None
    state.nstep = NStepAccumulator(num_envs, config.agent.n_step, config.agent.gamma)


def experience(
    state: LoopState,
    env: VectorEnv,
    epsilon: float,
    num_actions: int,
    config: EnvConfig,
    life_loss: bool,
) -> Generator[Request, Any, tuple[list[Transition], list[tuple[float, int]]]]:
    """One vector-env step of epsilon-greedy play from ``state``, which it advances: the
    actions, the step, the n-step windows it completes, the episode counters. A generator as
    ``Loop.steps`` is: it yields ``(ACT, obs)`` for the greedy actions (skipped when every
    sub-env only resets, or every one explores) and returns ``(transitions, episodes)``, the
    n-step transitions to store, oldest first, and ``(return, length)`` of each episode that
    ended. A run's loop stores the transitions in its memory; an Ape-X actor
    (``per_dqn.distributed``) sends them in blocks.

    Args:
        state: the loop's state: ``obs``, ``autoreset``, ``rng``, ``nstep``, ``env_steps``, the
            episode accumulators and ``prev_lives`` are read and advanced.
        env: the training vector env ``state.obs`` came from.
        epsilon: the probability of a random action, the same for every sub-env.
        num_actions: the action space's size.
        config: the env's config (reward clipping, the sub-env count).
        life_loss: whether a lost life ends the bootstrapped return (and ``prev_lives`` is kept).
    """
    num_envs = config.num_envs
    autoreset, obs = state.autoreset, state.obs
    if autoreset.all():
        actions = np.zeros(num_envs, dtype=np.int64)  # ignored by a reset-only step
    else:
        # Epsilon-greedy for every sub-env; the network runs only if one is greedy.
        rng = state.rng
        explore = rng.random(num_envs) < epsilon
        if explore.all():
            actions = rng.integers(num_actions, size=num_envs)
        else:
            actions = yield ACT, obs
            if explore.any():
                actions[explore] = rng.integers(num_actions, size=int(explore.sum()))
    next_obs, rewards, terminated, truncated, info = env.step(actions)
    active = ~autoreset
    stepped = int(active.sum())
    fresh: list[Transition] = []
    finished: list[tuple[float, int]] = []
    if stepped:
        state.env_steps += stepped
        done = np.logical_or(terminated, truncated)
        # What the learner sees: clipped rewards, and a lost life as the end of the
        # bootstrapped return while the game plays on (Mnih et al., 2015).
        learn_rewards = np.clip(rewards, -1.0, 1.0) if config.clip_rewards else rewards
        learn_terminated = terminated
        if life_loss:
            learn_terminated = terminated | (info["lives"] < state.prev_lives)
        fresh = state.nstep.step(
            obs, actions, learn_rewards, next_obs, learn_terminated, truncated, active
        )
        state.ep_return[active] += rewards[active]
        state.ep_length[active] += 1
        if done.any():
            ended = np.flatnonzero(done)
            for i in ended:
                finished.append((float(state.ep_return[i]), int(state.ep_length[i])))
                state.recent_returns.append(float(state.ep_return[i]))
            state.ep_return[ended] = 0.0
            state.ep_length[ended] = 0
        state.autoreset = done
    else:
        state.autoreset = np.zeros(num_envs, dtype=np.bool_)
    if life_loss:
        state.prev_lives = info["lives"]  # a reset step brings the new game's lives
    state.obs = next_obs
    return fresh, finished


class Loop:
    """Steps the envs, stores transitions and learns; owns a ``LoopState``.

    Args:
        config: the run's config.
        agent: the learner.
        memory: the replay memory.
        envs: the training and evaluation envs.
        seeds: the run's random streams.
    """

    def __init__(
        self, config: Config, agent: DQNAgent, memory: ReplayMemory, envs: Envs, seeds: RunSeeds
    ) -> None:
        self.config = config
        self.agent = agent
        self.memory = memory
        self.envs = envs
        train = config.train
        # From env step 0, or after the warm-up (Dopamine's and the MinAtar paper's schedule).
        decay_begins = train.learning_starts if train.epsilon_decay_from == "learning_starts" else 0
        self.epsilon = LinearSchedule(
            train.epsilon_start, train.epsilon_end, train.epsilon_decay_steps, decay_begins
        )
        # Annealed over the whole run, reaching exactly beta_end (the paper's 1) on its last step
        # (Schaul et al., 3.4), or over beta_anneal_steps where a config gives a schedule of its
        # own; fixed where beta_end is beta0.
        replay = config.replay
        anneal_steps = replay.beta_anneal_steps or train.total_env_steps
        self.beta = LinearSchedule(replay.beta0, replay.beta_end, anneal_steps)
        agent_cfg, starts = config.agent, train.learning_starts
        self.learning_rate = (
            None
            if agent_cfg.learning_rate_end is None
            else LinearSchedule(
                agent_cfg.learning_rate, agent_cfg.learning_rate_end,
                max(train.total_env_steps - starts, 0), begin_step=starts,
            )
        )  # fmt: skip
        obs, info = envs.train.reset(seed=seeds.env)
        envs.eval.reset(seed=seeds.eval_env)
        self.life_loss = tracks_lives(config, info)
        self.state = fresh_state(config, obs, info, seeds, memory.capacity)
        self.state.weight_scale = self._largest_weight()
        self.state.keep_torch_rng()

    # --- state ---------------------------------------------------------------------------------

    def load_state_dict(self, loop: dict[str, Any], envs: dict[str, Any]) -> bool:
        """Continues from a checkpoint's ``loop`` and ``envs`` parts (the agent and the memory of
        the same checkpoint are loaded by their owners); returns whether the resume is exact.

        Envs whose state could not be saved (ale-py's) restart from a reset seeded by
        ``seeding.restart_seed``: every open episode and n-step window is dropped then, since none
        may span the reset.

        Raises:
            ValueError: a state that does not fit this run (checked before anything changes).
        """
        LoopState.check_state_dict(loop)
        self.envs.check_state_dict(envs)
        state = self.state
        state.load_state_dict(loop)
        self.envs.load_state_dict(envs)
        seed = restart_seed(self.config.run.seed, state.env_steps)
        if envs["eval"] is None:
            self.envs.eval.reset(seed=seed + self.config.env.num_envs)  # past every sub-env
        if envs["train"] is not None:
            return envs["eval"] is not None
        restart_play(state, self.envs.train, seed, self.config, self.life_loss)
        return False

    def state_dict(self, stored: int | None = None) -> dict[str, Any]:
        """The checkpoint's ``loop`` part: ``LoopState.state_dict(stored)`` (a distributed
        run's learner adds its actors')."""
        return self.state.state_dict(stored)

    def settle(self) -> None:
        """Brings the loop to a state a checkpoint holds whole, before one is written: nothing
        to do here (a distributed run's learner takes the blocks in flight)."""

    # --- the step ------------------------------------------------------------------------------

    def step(self) -> list[tuple[float, int]]:
        """One vector-env step, the transitions it completes, and the learning then due, with
        this loop's own agent: ``steps`` served at once (``serve``).

        Returns:
            ``(return, length)`` of each episode that ended on this step.

        Raises:
            DivergedError: a non-finite loss.
        """
        return serve(self.steps(), self.agent)

    def steps(self) -> Generator[Request, Any, list[tuple[float, int]]]:
        """``step`` as a generator that asks for the agent's work instead of calling it, so
        that a pack (``per_dqn.packs``) can serve several runs' requests in one batch: it
        yields ``(ACT, obs)`` for the greedy actions of ``obs`` (answer: the actions) and
        ``(LEARN, batch)`` for a gradient step on ``batch`` (answer: its ``LearnResult``), and
        returns what ``step`` returns. The random draws, the env step and the memory's updates
        happen in the same order either way."""
        state = self.state
        epsilon = self.epsilon(state.env_steps)
        fresh, finished = yield from experience(
            state, self.envs.train, epsilon, self.agent.num_actions, self.config.env,
            self.life_loss,
        )  # fmt: skip
        if fresh:
            # The common single window goes through `add`, a third of `add_batch`'s cost.
            one = len(fresh) == 1
            memory = self.memory
            slots = memory.add(*fresh[0]) if one else memory.add_batch(*stack(fresh))
            state.health.record_add(slots, state.env_steps)
        if state.env_steps >= state.next_update:  # no generator made on the steps between
            yield from self.learning()
        return finished

    def learning(self) -> Generator[Request, Any, None]:
        """The gradient steps due at the env steps taken so far, each asked for as ``(LEARN,
        batch)`` (see ``steps``): ``gradient_steps`` every ``replay_period`` env steps from
        ``learning_starts`` on, once the memory holds a batch."""
        state, train = self.state, self.config.train
        while state.env_steps >= state.next_update:
            state.next_update += train.replay_period
            if self.can_sample():
                for _ in range(train.gradient_steps):
                    batch = self._sample()
                    self._learned(batch, (yield LEARN, batch))

    def can_sample(self) -> bool:
        """Whether the memory holds a batch (``train.batch_size`` transitions)."""
        return len(self.memory) >= self.config.train.batch_size

    def exploration(self, step: int) -> float:
        """The exploration epsilon at env step ``step``, as the progress display shows it."""
        return self.epsilon(step)

    def log_values(self, step: int) -> dict[str, float]:
        """The loop's own scalars of a log point at env step ``step``, written first: its
        exploration epsilon."""
        return {tags.EXPLORE_EPSILON: self.epsilon(step)}

    def close(self) -> None:
        """Releases what the loop holds besides the envs (nothing here; a distributed run's
        loop stops its actors)."""

    def learn(self) -> None:
        """One gradient step and its priority update, with this loop's own agent."""
        batch = self._sample()
        self._learned(batch, self.agent.learn(batch))

    def _sample(self) -> Batch:
        """The next batch; the learning rate set for the step that learns from it."""
        step = self.state.env_steps
        if self.learning_rate is not None:
            self.agent.set_learning_rate(self.learning_rate(step))
        return self.memory.sample(self.config.train.batch_size, self.beta(step))

    def _learned(self, batch: Batch, result: LearnResult) -> None:
        """What follows a gradient step on ``batch``: the divergence check, the priority update,
        the health panel's and the means' feeds.

        Raises:
            DivergedError: a non-finite loss.
        """
        state, memory = self.state, self.memory
        step = state.env_steps
        loss = result.metrics["loss"]
        if not math.isfinite(loss):
            raise DivergedError(
                f"train/loss is {loss} at env step {step:,} (update step "
                f"{self.agent.update_steps:,}): training diverged"
            )
        update = result.priorities  # made of the agent's priority signal (replay.priority_from)
        memory.update(update)
        # The health panel's one feed per gradient step: the batch drawn, the slots updated.
        state.health.record_learn(
            batch.indices, batch.weights, batch.priorities, update.indices, step
        )
        state.learn_means.add(result.metrics)

    # --- schedule points -----------------------------------------------------------------------

    def log_due(self) -> bool:
        """True once per log interval; moves the next log point past the current step."""
        state = self.state
        if state.env_steps < state.next_log:
            return False
        while state.next_log <= state.env_steps:
            state.next_log += self.config.train.log_interval
        return True

    def eval_due(self) -> bool:
        """True when a periodic evaluation is due before the budget's end; the schedule moves on
        even on the last step (where the final evaluation stands in), so that a run extended by
        ``--resume --steps`` does not evaluate again one step later."""
        state = self.state
        if state.env_steps < state.next_eval:
            return False
        state.next_eval += self.config.train.eval_interval
        return state.env_steps < self.config.train.total_env_steps

    # --- weights -------------------------------------------------------------------------------

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
        state = self.state
        largest = self._largest_weight()
        bound = DIVERGED_WEIGHT_GROWTH * state.weight_scale
        if not math.isfinite(largest) or largest > bound:
            raise DivergedError(
                f"the largest |weight| is {largest:.3g} at env step {state.env_steps:,} (update "
                f"step {self.agent.update_steps:,}), more than {DIVERGED_WEIGHT_GROWTH:g}x the "
                f"largest before ({state.weight_scale:.3g}): training diverged"
            )
        state.weight_scale = max(state.weight_scale, largest)
