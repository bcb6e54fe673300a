"""The learner's side of an Ape-X run (Horgan et al., 2018, Algorithm 1, "Learner"): a run's
loop whose transitions come from actors' blocks instead of its own envs.

``ApexLoop`` is the loop a ``Trainer`` is built with for a distributed run (``make_loop``), so the
run has the single run's run dir, TensorBoard, evaluation (by the learner's weights),
checkpoints and summary. Each of its steps takes the blocks its ``BlockSource`` has for it: each
block is stored with its actor's priorities (``ReplayMemory.add_batch(..., td_abs=)``: the
``actor`` initial priority, beside max-priority insertion), its env steps counted, its episodes
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
from typing import Protocol

import torch

from per_dqn.agent import DQNAgent
from per_dqn.config import Config
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

    def blocks(self) -> Sequence[Block]:
        """The blocks sent since the last call; each actor's in order."""

    def restarts(self) -> int:
        """Actors restarted so far after their process died."""

    def close(self) -> None:
        """Stops the actors."""


class OutOfOrderError(RuntimeError):
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
        # Since the last log point: (blocks, staleness sum, staleness max), each actor's env
        # steps, and when it was.
        self._since_log = (0, 0, 0)
        self._actor_steps: dict[int, int] = {}
        self._log_clock = time.perf_counter()

    def steps(self):  # type: ignore[override]
        """Stores the source's next blocks, then learns as due; returns their episodes."""
        state, memory = self.state, self.memory
        finished: list[tuple[float, int]] = []
        for block in self.source.blocks():
            serial, env_steps = self.received.get(block.actor, (0, 0))
            if block.serial != serial:
                raise OutOfOrderError(
                    f"actor {block.actor}'s block {block.serial} arrived where its block "
                    f"{serial} was due: a block was lost or repeated on the way"
                )
            self.received[block.actor] = (serial + 1, block.env_steps)
            state.env_steps += block.env_steps - env_steps
            if len(block):
                slots = memory.add_batch(*block.transitions, td_abs=block.td_abs)
                state.health.record_add(slots, state.env_steps)
            staleness = self.agent.update_steps - max(block.version, 0)
            self.max_staleness = max(self.max_staleness, staleness)
            blocks, total, most = self._since_log
            self._since_log = (blocks + 1, total + staleness, max(most, staleness))
            finished.extend(block.episodes)
            state.recent_returns.extend(ret for ret, _ in block.episodes)
        yield from self.learning()
        return finished

    def exploration(self, step: int) -> float:
        """None to show (NaN): each actor has its own epsilon."""
        return math.nan

    def log_values(self, step: int) -> dict[str, float]:
        """The actors' panel (``apex/*``): blocks/s, the slowest and fastest actor's env
        steps/s and the weights' staleness, since the last log point. No ``explore/epsilon``:
        each actor has its own."""
        now = time.perf_counter()
        seconds = max(now - self._log_clock, 1e-9)
        blocks, total, most = self._since_log
        rates = [
            (env_steps - self._actor_steps.get(actor, 0)) / seconds
            for actor, (_, env_steps) in self.received.items()
        ]
        values = {
            tags.APEX_BLOCKS_PER_S: blocks / seconds,
            tags.APEX_RESTARTS: float(self.source.restarts()),
        }
        if rates:
            values[tags.APEX_ACTOR_SPS_MIN] = min(rates)
            values[tags.APEX_ACTOR_SPS_MAX] = max(rates)
        if blocks:
            values[tags.APEX_STALENESS_MEAN] = total / blocks
            values[tags.APEX_STALENESS_MAX] = float(most)
        self._since_log = (0, 0, 0)
        self._actor_steps = {actor: env_steps for actor, (_, env_steps) in self.received.items()}
        self._log_clock = now
        return values

    def close(self) -> None:
        """Stops the source's actors."""
        self.source.close()


def local_loop(actors: int, block_steps: int = BLOCK_STEPS, sync_steps: int = SYNC_STEPS):
    """A ``Trainer``'s ``make_loop`` for an Ape-X run with ``actors`` actors in this process
    (``LocalActors``)."""

    def make_loop(config, agent, memory, envs, seeds) -> ApexLoop:
        source = LocalActors(config, agent, actors, block_steps, sync_steps)
        return ApexLoop(config, agent, memory, envs, seeds, source)

    return make_loop


class LocalActors:
    """Actors stepped in turn in this process (``BlockSource``).

    Args:
        config: the run's config.
        agent: the learner, whose weights the actors pull.
        actors: how many, each at its epsilon of the ladder (``epsilon_ladder``).
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
        ladder = epsilon_ladder(actors)
        self.actors = [
            Actor(config, i, epsilon, RunSeeds.for_actor(config.run.seed, i), agent.device)
            for i, epsilon in enumerate(ladder)
        ]
        # Each actor's vector-env steps since it last pulled weights; None: never pulled.
        self._since_sync: list[int | None] = [None] * len(self.actors)

    def blocks(self) -> list[Block]:
        """One block from each actor, in index order."""
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

    def _weights(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The learner's online and target networks' state (an actor loads copies of it)."""
        return self.agent.online.state_dict(), self.agent.target.state_dict()

    def close(self) -> None:
        """Closes every actor's envs."""
        for actor in self.actors:
            actor.close()

