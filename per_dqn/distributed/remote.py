"""Ape-X's actors as Ray actor processes (``RayActors``, a ``BlockSource``): each holds one
``Actor`` and one CPU of the cluster, on whichever node Ray places it.

The learner drives them: each actor has up to ``in_flight`` block requests queued (two: it plays
its next block while the learner takes its last; fewer where the run's budget needs no more, and
none while a checkpoint is written), and a Ray actor runs its calls in the order they were made,
so its blocks come back in order. An actor pulls the learner's weights every
``sync_steps`` of its own vector-env steps: the request that falls due carries the newest weights
the learner has published (``ray.put`` once per learner update at most, shared by every actor
that pulls them), as an object-store reference each actor's node fetches once. A block of
stacked image observations travels with each frame once (``per_dqn.distributed.frames``),
rebuilt on arrival.

Ray is imported through ``per_dqn.cluster`` (the optional ``ray`` extra); the caller connects
(``per_dqn.cluster.connection.connect``) before building the source.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from per_dqn.agent import DQNAgent
from per_dqn.cluster.connection import connect
from per_dqn.cluster.housekeeping import RayOptions
from per_dqn.config import Config
from per_dqn.distributed import ActorLostError
from per_dqn.distributed.actor import Actor, Block
from per_dqn.distributed.frames import pack, unpack
from per_dqn.distributed.learner import BLOCK_STEPS, SYNC_STEPS, ApexLoop
from per_dqn.distributed.shards import ShardedReplay, ShardLostError, raised, shard_died
from per_dqn.rundir import provenance
from per_dqn.training.build import set_torch_threads
from per_dqn.training.schedules import epsilon_ladder
from per_dqn.training.seeding import RunSeeds

# How long the learner waits before asking a restarting actor again.
RESTART_POLL_SECONDS = 0.2


class ActorProcess:
    """What each Ray actor process holds: one ``Actor`` on CPU, one torch thread. Ray builds it
    again in a new process after the old one died (up to ``RayActors``' ``restarts``); the new
    one plays on fresh streams (``RunSeeds.for_actor`` of an incarnation drawn from the OS: a
    distributed run repeats nothing else either), its blocks numbered from 0 again, which is how
    the learner sees the restart."""

    def __init__(
        self, config: Config, index: int, epsilon: float, shard: tuple[str, int] | None = None
    ) -> None:
        import ray

        set_torch_threads(torch.device("cpu"), 1)
        incarnation = 0
        if ray.get_runtime_context().was_current_actor_reconstructed:
            incarnation = 1 + int.from_bytes(os.urandom(4), "little")
        seeds = RunSeeds.for_actor(config.run.seed, index, incarnation)
        self.actor = Actor(config, index, epsilon, seeds, priorities=config.actor_priorities())
        # Its replay shard (``run.shards``: its Ray actor name and index), found by name; or None.
        self.shard = None if shard is None else ray.get_actor(shard[0])
        self.shard_index = None if shard is None else shard[1]

    def collect(self, steps: int, weights: Any = None, version: int = -1) -> Block:
        """The next block, each frame of its stacked images once (``frames.pack``); the given
        weights (``(online, target)``) loaded first, if any. With a replay shard, the block is
        stored there first and goes on with its slots only (``Block.emptied``).

        Raises:
            ShardLostError: the shard's process died.
        """
        import ray

        if weights is not None:
            self.actor.set_weights(*weights, version=version)
        block = self.actor.collect(steps)
        transitions, packed = pack(block.transitions)
        if self.shard is None:
            return dataclasses.replace(block, transitions=transitions, frames=packed)
        if not len(block):
            return block.emptied(np.empty(0, dtype=np.int64), 0)
        try:
            slots, written = ray.get(self.shard.add.remote(transitions, packed, block.td_abs))
        except ray.exceptions.RayActorError as exc:
            what = f"storing actor {self.actor.index}'s block"
            raise ShardLostError(shard_died(self.shard_index, what, exc)) from None
        return block.emptied(slots, written)

    def where(self) -> dict[str, str]:
        """The Ray node this process runs on: ``node_ip`` and ``node_id`` as ``ray.nodes()``
        names it."""
        import ray

        return {"node_ip": ray.util.get_node_ip_address(),
                "node_id": ray.get_runtime_context().get_node_id()}  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """The actor's state after its last block (``Actor.state_dict``)."""
        return self.actor.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> bool:
        """``Actor.load_state_dict``."""
        return self.actor.load_state_dict(state)

    def close(self) -> None:
        self.actor.close()


class RayActors:
    """Actors as Ray actor processes (see the module docstring).

    Args:
        ray: the connected ``ray`` module.
        config: the run's config.
        agent: the learner, whose weights the actors pull.
        actors: how many, each at its epsilon of the ladder (``epsilon_ladder`` of
            ``run.actor_epsilon`` and ``run.actor_epsilon_alpha``).
        block_steps: vector-env steps per block.
        sync_steps: an actor's vector-env steps between two weight pulls.
        in_flight: block requests each actor has queued.
        restarts: how many times Ray restarts an actor whose process died (the blocks it was
            playing and its open episodes are lost); one more death stops the run
            (``ActorLostError``).
        shards: the replay shards' Ray actor names (``ShardedReplay.names``), where the run
            has them: actor ``i`` stores its blocks in shard ``i % len(shards)`` itself.
    """

    def __init__(
        self,
        ray: Any,
        config: Config,
        agent: DQNAgent,
        actors: int,
        block_steps: int = BLOCK_STEPS,
        sync_steps: int = SYNC_STEPS,
        in_flight: int = 2,
        restarts: int = 3,
        shards: Sequence[str] = (),
    ) -> None:
        for name, value in (("block_steps", block_steps), ("sync_steps", sync_steps),
                            ("in_flight", in_flight)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be an integer >= 1, got {value!r}")
        self.ray, self.agent = ray, agent
        self.block_steps, self.sync_steps = block_steps, sync_steps
        self.num_envs = config.env.num_envs
        remote = ray.remote(num_cpus=1, max_restarts=restarts)(ActorProcess)
        self.epsilons = epsilon_ladder(
            actors, config.run.actor_epsilon, config.run.actor_epsilon_alpha
        )
        mine = [(shards[i % len(shards)], i % len(shards)) if shards else None
                for i in range(actors)]  # fmt: skip
        self.handles = [
            remote.remote(config, i, eps, mine[i]) for i, eps in enumerate(self.epsilons)
        ]
        self.in_flight, self.max_restarts = in_flight, restarts
        self._published: tuple[int, Any] | None = None  # (version, object ref)
        self._since_sync: list[int | None] = [None] * actors
        self._pending: dict[Any, int] = {}  # object ref -> actor
        self._order: list[list[Any]] = [[] for _ in range(actors)]  # each actor's refs, in order
        # Each actor's restarts so far (its incarnation), and what its earlier incarnations
        # delivered (blocks, env steps): a new one counts its blocks and steps from 0 again.
        self.incarnations = [0] * actors
        self._delivered = [(0, 0)] * actors
        self._base = [(0, 0)] * actors
        self._wanted = math.inf  # the env steps the run still needs, as the last call said
        # Blocks are asked for from the first ``blocks`` call on (after ``restore``, if any).

    def __len__(self) -> int:
        return len(self.epsilons)

    def placement(self) -> list[dict[str, Any]]:
        """Where each actor runs, once its process is up: ``index``, ``epsilon``, ``node_ip``
        and ``node_id`` (a run's provenance records it).

        Raises:
            ValueError: an actor that could not start on its node (the config names a network
                its node cannot import, for one), with the error its process raised.
        """
        refs = [handle.where.remote() for handle in self.handles]
        found = []
        for i, ref in enumerate(refs):
            try:
                found.append(self.ray.get(ref))
            except self.ray.exceptions.RayActorError as exc:
                raise ValueError(f"actor {i} could not start: {raised(exc)}") from None
        pairs = enumerate(zip(self.epsilons, found, strict=True))
        return [{"index": i, "epsilon": eps, **where} for i, (eps, where) in pairs]

    def _fill(self, i: int, wanted: float = math.inf) -> None:
        """Queues actor ``i``'s requests up to ``in_flight``, while the env steps of all those
        in flight fall short of ``wanted``."""
        while len(self._order[i]) < self.in_flight and self._in_flight_steps() < wanted:
            self._request(i)

    def _in_flight_steps(self) -> int:
        """The most env steps the blocks asked for can bring."""
        return len(self._pending) * self.block_steps * self.num_envs

    def _weights(self) -> tuple[int, Any]:
        """The newest published weights, published anew if the learner has updated since."""
        version = self.agent.update_steps
        if self._published is None or self._published[0] != version:
            online = {k: v.detach().cpu() for k, v in self.agent.online.state_dict().items()}
            target = {k: v.detach().cpu() for k, v in self.agent.target.state_dict().items()}
            self._published = (version, self.ray.put((online, target)))
        return self._published

    def _request(self, i: int) -> None:
        """Queues actor ``i``'s next block, with the weights if its pull is due."""
        since = self._since_sync[i]
        weights, version = None, -1
        if since is None or since >= self.sync_steps:
            version, weights = self._weights()
            since = 0
        ref = self.handles[i].collect.remote(self.block_steps, weights, version)
        self._since_sync[i] = since + self.block_steps
        self._pending[ref] = i
        self._order[i].append(ref)

    def blocks(self, wanted: float = math.inf) -> list[Block]:
        """The blocks done now (waiting for the first), each actor's in order; every actor whose
        block is taken is asked for its next, while the blocks in flight can bring fewer than
        ``wanted`` env steps (the run's budget left: no actor plays past it for nothing)."""
        self._wanted = wanted
        for i in range(len(self.handles)):
            self._fill(i, wanted)
        ready, _ = self.ray.wait(list(self._pending), num_returns=1)
        ready, _ = self.ray.wait(list(self._pending), num_returns=len(self._pending), timeout=0)
        done = set(ready)
        out = []
        for i, refs in enumerate(self._order):
            # An actor's blocks finish in the order they were asked for: take its done prefix.
            while refs and refs[0] in done:
                before = self._delivered[i][1]
                block = self._receive(i)
                if block is None:
                    break
                out.append(block)
                wanted -= block.env_steps - before
                self._fill(i, wanted)
        return out

    def _receive(self, i: int, refill: bool = True) -> Block | None:
        """Actor ``i``'s oldest block asked for, numbered as the run counts it; None where the
        actor's process died (``_unavailable``: its requests are dropped, and asked again if
        ``refill``)."""
        ref = self._order[i].pop(0)
        del self._pending[ref]
        try:
            block = self.ray.get(ref)
        except self.ray.exceptions.RayActorError as exc:
            self._unavailable(i, exc, refill)
            return None
        except self.ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, ShardLostError):
                raise ShardLostError(str(exc.cause)) from None
            raise
        if block.serial == 0 and self._delivered[i][0] > self._base[i][0]:
            self._restarted(i)
        blocks, steps = self._base[i]
        block = dataclasses.replace(
            block, serial=blocks + block.serial, env_steps=steps + block.env_steps,
            transitions=unpack(block.transitions, block.frames), frames=None,
        )  # fmt: skip
        self._delivered[i] = (block.serial + 1, block.env_steps)
        return block

    def pause(self) -> tuple[list[Block], list[dict[str, Any] | None]]:
        """Every block in flight, each actor's in order, then each actor's state after its last
        (None for one whose process died meanwhile: it goes on, restarted, from fresh streams);
        no block is asked for until the next ``blocks``, and each actor then pulls weights."""
        asked = [handle.state_dict.remote() for handle in self.handles]
        out: list[Block] = []
        for i in range(len(self.handles)):
            while self._order[i]:
                block = self._receive(i, refill=False)
                if block is None:
                    break
                out.append(block)
        states: list[dict[str, Any] | None] = []
        for ref in asked:
            try:
                states.append(self.ray.get(ref))
            except self.ray.exceptions.RayActorError:
                states.append(None)  # died after its last block: counted when it answers again
        self._since_sync = [None] * len(self.handles)
        return out, states

    def restore(self, received: dict[int, tuple[int, int]],
                states: Sequence[dict[str, Any] | None]) -> bool:  # fmt: skip
        """Before the first ``blocks``: each actor continues from its state, or, where there is
        none (its process died as the checkpoint was taken), from a reset on the streams it began
        the run with (a new cluster's actor is no restart: ``RunSeeds.for_actor`` of incarnation
        0); either way its blocks and env steps count on from ``received`` (each actor's next
        serial and env steps). Returns whether every actor with a state had its envs restored
        exactly.

        Raises:
            ValueError: a state that does not fit its actor, or an actor that died as it loaded
                (one line).
        """
        if len(states) != len(self.handles):
            raise ValueError(f"{len(states)} actors' states for {len(self.handles)} actors")
        loads = [(i, self.handles[i].load_state_dict.remote(state))
                 for i, state in enumerate(states) if state is not None]  # fmt: skip
        exact = True
        for i, ref in loads:
            try:
                exact = self.ray.get(ref) and exact
            except self.ray.exceptions.RayTaskError as exc:
                cause = exc.cause if isinstance(exc.cause, ValueError) else exc
                raise ValueError(f"actor {i}'s state: {cause}") from None
            except self.ray.exceptions.RayActorError as exc:
                first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                raise ValueError(f"actor {i} died as it loaded its state: {first}") from None
        for i, state in enumerate(states):
            # Its blocks and env steps count on from those received: a fresh actor's from 0, a
            # restored one's from its own counters (behind the received by what the processes
            # before a restart delivered).
            blocks, steps = self._delivered[i] = received.get(i, (0, 0))
            if state is not None:
                blocks, steps = blocks - state["blocks"], steps - state["loop"]["env_steps"]
            self._base[i] = (blocks, steps)
        return exact

    def restarts(self) -> int:
        """Actors restarted so far (every incarnation past the first)."""
        return sum(self.incarnations)

    def _unavailable(self, i: int, exc: Exception, refill: bool = True) -> None:
        """Actor ``i`` did not answer: its process died, and Ray is restarting it (its queued
        requests are dropped and asked again shortly; the blocks they would have been are lost)
        or has given up on it.

        Raises:
            ActorLostError: Ray will not restart it (it died past ``restarts`` times, or its
                node is gone).
        """
        for ref in self._order[i]:
            self._pending.pop(ref, None)
        self._order[i] = []
        if not isinstance(exc, self.ray.exceptions.ActorUnavailableError):
            cause = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            raise ActorLostError(
                f"actor {i} (epsilon {self.epsilons[i]:.3g}) died after {self.incarnations[i]} "
                f"restart(s) of the {self.max_restarts} allowed: {cause}"
            )
        self._since_sync[i] = None  # the new process holds no weights yet
        if refill:
            time.sleep(RESTART_POLL_SECONDS)
            self._fill(i, self._wanted)

    def _restarted(self, i: int) -> None:
        """Actor ``i``'s first block from a new process: its blocks and env steps count on from
        where the last process's delivered ones ended; the restart is counted and shown."""
        self.incarnations[i] += 1
        self._base[i] = self._delivered[i]
        warnings.warn(
            f"actor {i} (epsilon {self.epsilons[i]:.3g}) died and was restarted "
            f"({self.incarnations[i]} of {self.max_restarts}); the blocks it was playing and its "
            "open episodes are lost",
            stacklevel=3,
        )

    def close(self) -> None:
        """Ends every actor process (their queued blocks dropped)."""
        for handle in self.handles:
            self.ray.kill(handle)
        self.handles = []
        self._pending.clear()


@contextlib.contextmanager
def ray_loop(config: Config, address: str | None = None) -> Iterator[Callable[..., ApexLoop]]:
    """Connects to the Ray cluster at ``address`` (None: starts one on loopback with a CPU per
    actor) and yields a ``Trainer``'s ``make_loop`` whose loop is fed by ``config.run.actors``
    Ray actors (``RayActors``); ends them and disconnects on the way out."""
    actors = config.run.actors
    if actors is None:
        raise ValueError("run.actors: a distributed run needs actors (train --actors N)")
    shards = config.run.shards or 0
    cpus = actors + shards if address is None else None
    options = RayOptions(address=address, local_cpus=cpus)
    # Where each actor first ran, for the run's provenance (``actors``), once they are up.
    placement: list[dict[str, Any]] = []
    with connect(options) as connection, provenance.recorded(actors=placement):
        opened: list[RayActors | ShardedReplay] = []

        def make_loop(config, agent, memory, envs, seeds) -> ApexLoop:
            names = memory.names if isinstance(memory, ShardedReplay) else ()
            source = RayActors(connection.ray, config, agent, actors, shards=names)
            opened.append(source)
            placement[:] = source.placement()
            return ApexLoop(config, agent, memory, envs, seeds, source)

        def make_memory(config, spec) -> ShardedReplay:
            replay = ShardedReplay(connection.ray, config, spec)
            opened.append(replay)
            return replay

        if shards:
            make_loop.make_memory = make_memory  # type: ignore[attr-defined]
        try:
            yield make_loop
        finally:
            for part in opened:
                part.close()
