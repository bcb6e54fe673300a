"""The learner's side of an Ape-X run (Horgan et al., 2018, Algorithm 1, "Learner"): a run's
loop whose transitions come from actors' blocks instead of its own envs.

``ApexLoop`` is the loop a ``Trainer`` is built with for a distributed run (``make_loop``), so the
run has the single run's run dir, TensorBoard, evaluation (by the learner's weights),
checkpoints and summary. Each of its steps takes the blocks its ``BlockSource`` has for it: each
block is stored with its actor's priorities (``ReplayMemory.add_batch(..., td_abs=)``:
``replay.initial_priority: actor``; with ``max`` the actors send none and the memory inserts at
its largest priority, as a single run does), its env steps counted, its episodes
logged as the run's; then the gradient steps due at the env steps reached are taken as a single
run takes them (``Loop.learning``: ``gradient_steps`` every ``replay_period`` env steps), so a
distributed run learns as often per env step as the single run it is compared with.

A source hands out every actor's blocks in order, each once: a block out of order (lost or
repeated on the way) stops the run with one line. The weights' staleness at the actors, in
learner updates, is measured on each block: the updates between the weights its actor played
and computed priorities with and the learner's now.

``LocalActors`` is the in-process source: the actors stepped in turn in this process, each block
in a fixed order, weights pulled every ``sync_steps`` of an actor's steps: deterministic, for
tests and for a machine without Ray.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from per_dqn.agent import DQNAgent
from per_dqn.config import Config
from per_dqn.distributed import RunStoppedError
from per_dqn.distributed.actor import Actor, Block
from per_dqn.envs.make import Envs
from per_dqn.logs import tags
from per_dqn.memory import ReplayMemory
from per_dqn.training.loop import Loop
from per_dqn.training.schedules import epsilon_ladder
from per_dqn.training.seeding import RunSeeds

# Ape-X's actors: a local buffer of 50 transitions sent at once, and the learner's parameters
# copied every 400 of an actor's frames (Horgan et al., 2018; as the replications quote them).
BLOCK_STEPS = 50
SYNC_STEPS = 400


class BlockSource(Protocol):
    """Where a distributed run's transitions come from."""

    def __len__(self) -> int:
        """How many actors."""

    def blocks(self, wanted: float = math.inf) -> Sequence[Block]:
        """The blocks sent since the last call, each actor's in order; more are asked for while
        those in flight can bring fewer than ``wanted`` env steps (the run's budget left)."""

    def restarts(self) -> int:
        """Actors restarted so far after their process died."""

    def pause(self) -> tuple[list[Block], list[dict[str, Any] | None]]:
        """For a checkpoint: every block in flight (each actor's in order) and then each
        actor's state after its last one (``Actor.state_dict``; None for an actor whose process
        died meanwhile); no block is asked for until ``blocks`` is called again, and then every
        actor pulls the learner's weights first."""

    def restore(self, received: dict[int, tuple[int, int]],
                states: Sequence[dict[str, Any] | None]) -> bool:  # fmt: skip
        """Before the first ``blocks``: continues each actor from its ``states`` entry (None: from
        a reset, on the streams it began the run with), its blocks and env steps counted on from
        ``received`` (each actor's next serial and env steps); returns whether every actor with a
        state had its envs restored exactly.

        Raises:
            ValueError: a state that does not fit its actor.
        """

    def close(self) -> None:
        """Stops the actors."""


class OutOfOrderError(RunStoppedError):
    """A block arrived that is not its actor's next: one was lost or repeated on the way."""


class ApexLoop(Loop):
    """A run's loop fed by actors' blocks (see the module docstring).

    Args:
        config, agent, memory, envs, seeds: as ``Loop`` takes them (the training envs are not
            stepped; the evaluation env is the run's).
        source: the actors' blocks.
    """

    def __init__(
        self,
        config: Config,
        agent: DQNAgent,
        memory: ReplayMemory,
        envs: Envs,
        seeds: RunSeeds,
        source: BlockSource,
    ) -> None:
        super().__init__(config, agent, memory, envs, seeds)
        self.source = source
        # actor -> (its next block's serial, its env steps so far)
        self.received: dict[int, tuple[int, int]] = {}
        # The largest number of learner updates between a block's weights and the learner's on
        # its arrival.
        self.max_staleness = 0
        # Since the last log point: (blocks, staleness sum, staleness max), the transitions
        # stored, each actor's episode returns; each actor's env steps, the learner's updates,
        # and when it was.
        self._since_log = (0, 0, 0)
        self._stored = 0
        self._actor_returns: dict[int, list[float]] = {}
        self._actor_steps: dict[int, int] = {}
        self._log_updates = agent.update_steps
        self._log_clock = time.perf_counter()
        # The blocks a checkpoint took in flight (``settle``), stored by the next step, and the
        # actors' states it kept (None: none since the last step); the actors restarted before
        # this session (a resumed run's).
        self._held: list[Block] = []
        self._settled: list[dict[str, Any] | None] | None = None
        self._restarts_before = 0

    def steps(self):  # type: ignore[override]
        """Stores the source's next blocks (first those a checkpoint took in flight, if any),
        then learns as due; returns their episodes."""
        if self._held:
            blocks, self._held = self._held, []
        else:
            blocks = self.source.blocks(self.config.train.total_env_steps - self.state.env_steps)
        finished, self._settled = self._take(blocks), None
        yield from self.learning()
        return finished

    def _take(self, blocks: Sequence[Block]) -> list[tuple[float, int]]:
        """Stores ``blocks`` with their actors' priorities (or notes where their actors stored
        them, in replay shards) and counts their env steps and staleness; returns their
        episodes."""
        state, memory = self.state, self.memory
        finished: list[tuple[float, int]] = []
        for block in blocks:
            serial, env_steps = self.received.get(block.actor, (0, 0))
            if block.serial != serial:
                raise OutOfOrderError(
                    f"actor {block.actor}'s block {block.serial} arrived where its block "
                    f"{serial} was due: a block was lost or repeated on the way"
                )
            self.received[block.actor] = (serial + 1, block.env_steps)
            state.env_steps += block.env_steps - env_steps
            if block.stored is not None:  # stored by its actor in a replay shard
                memory.stored(block.stored, block.written)
                slots = block.stored
            elif len(block):
                slots = memory.add_batch(*block.transitions, td_abs=block.td_abs)
            else:
                slots = None
            if slots is not None and len(slots):
                state.health.record_add(slots, state.env_steps)
                self._stored += len(slots)
            staleness = self.agent.update_steps - max(block.version, 0)
            self.max_staleness = max(self.max_staleness, staleness)
            blocks, total, most = self._since_log
            self._since_log = (blocks + 1, total + staleness, max(most, staleness))
            finished.extend(block.episodes)
            state.recent_returns.extend(ret for ret, _ in block.episodes)
            returns = self._actor_returns.setdefault(block.actor, [])
            returns.extend(ret for ret, _ in block.episodes)
        return finished

    def settle(self) -> None:
        """Before a checkpoint: takes every block in flight and each actor's state after it.
        The blocks are held, not stored: the checkpoint holds them beside the replay, and the
        next step (a resumed run's first) stores them, so that the run's env steps, and what
        falls due at them, are those of the moment the checkpoint was asked for; every actor
        pulls the learner's weights before its next block."""
        blocks, states = self.source.pause()
        for block in blocks:
            # Already in its shard, and so in the shard's state the checkpoint saves: noted
            # now, so that the checkpoint's count of the slots in use includes it.
            if block.stored is not None:
                self.memory.stored(block.stored, block.written)
        self._held.extend(blocks)
        self._settled = states

    def state_dict(self, stored: int | None = None) -> dict[str, Any]:
        """The checkpoint's ``loop`` part: the learner's ``LoopState``, and under ``apex`` each
        actor's blocks and env steps received and its state (``settle`` first).

        Raises:
            RuntimeError: no ``settle`` since the last step.
        """
        if self._settled is None:
            raise RuntimeError("a distributed run's loop state is read after `settle` only")
        # Replay shards fill each its own range of slots (``ShardedReplay.slots_in_use``).
        stored = getattr(self.memory, "slots_in_use", stored)
        received = sorted(self.received.items())
        return {
            **self.state.state_dict(stored),
            "apex": {
                "received": [[actor, serial, steps] for actor, (serial, steps) in received],
                "actors": list(self._settled),
                "held": [block.state_dict() for block in self._held],
                "restarts": self._restarts_before + self.source.restarts(),
            },
        }

    def load_state_dict(self, loop: dict[str, Any], envs: dict[str, Any]) -> bool:
        """Continues from a checkpoint's ``loop`` and ``envs`` parts: the learner's state as a
        single run's, and each actor from its state (``BlockSource.restore``); returns whether
        every env could be restored (the actors' included). Which block arrives first still
        follows the machine's timing: see the module docstring.

        Raises:
            ValueError: a loop part without the actors' state, or of another number of actors,
                or a state that does not fit; the run is left half loaded then, for its caller
                to close (``Trainer.load_checkpoint``'s does).
        """
        apex = loop.get("apex") if isinstance(loop, dict) else None
        actors = len(self.source)
        try:
            received = {int(a): (int(serial), int(steps)) for a, serial, steps in apex["received"]}
            states = list(apex["actors"])
            held = [Block.from_state_dict(block) for block in apex["held"]]
            restarts = int(apex["restarts"])
        except (TypeError, KeyError, ValueError, AttributeError):
            raise ValueError("its loop state holds no actors' state (`apex`)") from None
        if len(states) != actors or not set(received) <= set(range(len(states))):
            raise ValueError(
                f"its loop state holds {len(states)} actors' state, this run has {actors} actors"
            )
        if any(block.actor >= actors for block in held):
            raise ValueError(f"its loop state holds a block of an actor past its {actors}")
        exact = super().load_state_dict(loop, envs)
        self.received, self._held, self._restarts_before = received, held, restarts
        # Where each actor's blocks go on from: after those held, else after those received.
        delivered = dict(received)
        for block in held:
            delivered[block.actor] = (block.serial + 1, block.env_steps)
        self._actor_steps = {actor: steps for actor, (_, steps) in received.items()}
        self._log_updates = self.agent.update_steps  # the agent is loaded first
        self._log_clock = time.perf_counter()  # loading took time that no rate should count
        return self.source.restore(delivered, states) and exact

    def can_sample(self) -> bool:
        """Whether a batch can be drawn: with replay shards (``ShardedReplay``), whether one
        shard holds a batch, since each batch comes from one."""
        ready = getattr(self.memory, "can_sample", None)
        return super().can_sample() if ready is None else ready(self.config.train.batch_size)

    def exploration(self, step: int) -> float:
        """None to show (NaN): each actor has its own epsilon."""
        return math.nan

    def log_values(self, step: int) -> dict[str, float]:
        """The actors' panel (``apex/*``), since the last log point: blocks/s; every actor's env
        steps/s, together, each, the slowest and the fastest; each actor's mean return at its
        epsilon; the replay's transitions in and sampled per second; the learner's updates per
        second; the weights' staleness; the restarts so far. No ``explore/epsilon``: each actor
        has its own."""
        now = time.perf_counter()
        seconds = max(now - self._log_clock, 1e-9)
        blocks, total, most = self._since_log
        rates = {
            actor: (env_steps - self._actor_steps.get(actor, 0)) / seconds
            for actor, (_, env_steps) in sorted(self.received.items())
        }
        updates = self.agent.update_steps - self._log_updates
        values = {
            tags.APEX_BLOCKS_PER_S: blocks / seconds,
            tags.APEX_ACTORS_SPS: sum(rates.values()),
            tags.APEX_INGEST_PER_S: self._stored / seconds,
            tags.APEX_UPDATES_PER_S: updates / seconds,
            tags.APEX_SAMPLES_PER_S: updates * self.config.train.batch_size / seconds,
            tags.APEX_RESTARTS: float(self._restarts_before + self.source.restarts()),
        }
        dropped = getattr(self.memory, "dropped", None)  # replay shards' (``ShardedReplay``)
        if dropped is not None:
            values[tags.APEX_UPDATES_DROPPED] = float(dropped)
        if rates:
            values[tags.APEX_ACTOR_SPS_MIN] = min(rates.values())
            values[tags.APEX_ACTOR_SPS_MAX] = max(rates.values())
        for actor, rate in rates.items():
            values[tags.apex_actor(tags.APEX_ACTOR_SPS, actor)] = rate
        for actor, returns in sorted(self._actor_returns.items()):
            if returns:
                values[tags.apex_actor(tags.APEX_ACTOR_RETURN, actor)] = sum(returns) / len(returns)
        if blocks:
            values[tags.APEX_STALENESS_MEAN] = total / blocks
            values[tags.APEX_STALENESS_MAX] = float(most)
        self._since_log = (0, 0, 0)
        self._stored = 0
        self._actor_returns = {}
        self._actor_steps = {actor: env_steps for actor, (_, env_steps) in self.received.items()}
        self._log_updates = self.agent.update_steps
        self._log_clock = now
        return values

    def close(self) -> None:
        """Stops the source's actors."""
        self.source.close()


def local_loop(actors: int, block_steps: int = BLOCK_STEPS, sync_steps: int = SYNC_STEPS):
    """A ``Trainer``'s ``make_loop`` for an Ape-X run with ``actors`` actors in this process
    (``LocalActors``); a config with ``run.shards`` is refused (shards are Ray processes)."""

    def make_loop(config, agent, memory, envs, seeds) -> ApexLoop:
        if config.run.shards is not None:
            raise ValueError(
                f"run.shards: {config.run.shards}: replay shards are Ray actor processes; actors "
                "stepped in this process keep the replay memory in it"
            )
        source = LocalActors(config, agent, actors, block_steps, sync_steps)
        return ApexLoop(config, agent, memory, envs, seeds, source)

    return make_loop


class LocalActors:
    """Actors stepped in turn in this process (``BlockSource``).

    Args:
        config: the run's config.
        agent: the learner, whose weights the actors pull.
        actors: how many, each at its epsilon of the ladder (``epsilon_ladder`` of
            ``run.actor_epsilon`` and ``run.actor_epsilon_alpha``).
        block_steps: vector-env steps per block.
        sync_steps: an actor pulls the learner's weights once this many of its vector-env steps
            have passed since it last did (and before its first block).

    Raises:
        ValueError: fewer than one actor, or a block or sync interval below 1.
    """

    def __init__(
        self,
        config: Config,
        agent: DQNAgent,
        actors: int,
        block_steps: int = BLOCK_STEPS,
        sync_steps: int = SYNC_STEPS,
    ) -> None:
        for name, value in (("block_steps", block_steps), ("sync_steps", sync_steps)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}")
        self.agent = agent
        self.block_steps, self.sync_steps = block_steps, sync_steps
        ladder = epsilon_ladder(actors, config.run.actor_epsilon, config.run.actor_epsilon_alpha)
        priorities = config.actor_priorities()
        self.actors = [
            Actor(config, i, eps, RunSeeds.for_actor(config.run.seed, i), agent.device, priorities)
            for i, eps in enumerate(ladder)
        ]
        # Each actor's vector-env steps since it last pulled weights; None: never pulled.
        self._since_sync: list[int | None] = [None] * len(self.actors)

    def __len__(self) -> int:
        return len(self.actors)

    def blocks(self, wanted: float = math.inf) -> list[Block]:
        """One block from each actor, in index order (none is in flight: ``wanted`` is always
        met)."""
        out = []
        for i, actor in enumerate(self.actors):
            since = self._since_sync[i]
            if since is None or since >= self.sync_steps:
                actor.set_weights(*self._weights(), version=self.agent.update_steps)
                since = 0
            out.append(actor.collect(self.block_steps))
            self._since_sync[i] = since + self.block_steps
        return out

    def restarts(self) -> int:
        """None: an actor in this process does not die alone."""
        return 0

    def pause(self) -> tuple[list[Block], list[dict[str, Any] | None]]:
        """No block in flight here; every actor's state, and a pull of weights due for each."""
        self._since_sync = [None] * len(self.actors)
        return [], [actor.state_dict() for actor in self.actors]

    def restore(self, received: dict[int, tuple[int, int]],
                states: Sequence[dict[str, Any] | None]) -> bool:  # fmt: skip
        """Continues each actor from its state (here none is ever missing: ``pause`` keeps them
        all); returns whether every actor's envs were restored exactly."""
        exact = True
        for actor, state in zip(self.actors, states, strict=True):
            if state is None:
                raise ValueError(f"actor {actor.index}'s state is missing from the checkpoint")
            exact = actor.load_state_dict(state) and exact
        self._since_sync = [None] * len(self.actors)
        return exact

    def _weights(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The learner's online and target networks' state (an actor loads copies of it)."""
        return self.agent.online.state_dict(), self.agent.target.state_dict()

    def close(self) -> None:
        """Closes every actor's envs."""
        for actor in self.actors:
            actor.close()
