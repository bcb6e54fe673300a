"""A distributed run's replay memory in Ray actor processes (``run.shards``; Horgan et al., 2018,
"Replay": the memory apart from the learner, fed by the actors, sampled by the learner).

``ShardProcess`` is what each shard's process holds: a ``per_dqn.memory.Shard`` over the run's
memory kind, of ``replay.capacity / K`` transitions, on its own sampling stream
(``RunSeeds.for_shard``). Actor ``i`` stores its blocks in shard ``i % K`` itself, before it
hands the block's counts to the learner (``ActorProcess.collect``): the transitions never pass
through the learner's process, and a block the learner counts is already stored.

``ShardedReplay`` is the learner's view of the shards, with the memory's interface that a run's
loop and ``Trainer`` use (``sample``, ``update``, ``diagnostics``, ``state_dict``, ...). Its
slots are global: shard ``j``'s slot ``s`` is ``j * capacity_each + s``, so the health panel and
every batch name one transition each. Each batch comes from one shard, picked with probability
in proportion to what it holds among those that hold a batch (as RLlib's multi-shard Ape-X
replay picks one per batch), and a shard once picked keeps ``prefetch`` batches asked for
ahead, so the learner takes a batch that is already drawn rather than wait for one. A
priority update goes back keyed by write serials (``Shard.update``): one whose transition was
overwritten since it was drawn is dropped, as in the paper.

A shard whose process dies stops the run with one line (``ShardLostError``): its transitions
are gone, and the run's checkpoints, which hold every shard's, are as they were.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import numpy as np

from per_dqn.config import Config
from per_dqn.distributed import ActorLostError
from per_dqn.distributed.frames import PackedFrames, unpack
from per_dqn.envs.make import EnvSpec
from per_dqn.memory import REPLAY_KINDS, Batch, Shard
from per_dqn.memory.types import PriorityUpdate
from per_dqn.training.build import make_memory
from per_dqn.training.seeding import RunSeeds

# Batches each shard has drawn ahead for the learner.
PREFETCH = 2


class ShardLostError(ActorLostError):
    """A replay shard's process died: the run stops with one line."""


def raised(exc: Exception) -> str:
    """What a Ray actor's process raised as it started, from the traceback Ray's error carries:
    its last ``SomeError: message`` line (else the error's first line)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[A-Za-z_.]*(Error|Exception): ", line)]
    return (errors[-1] if errors else lines[0] if lines else type(exc).__name__)[:300]


def shard_died(shard: int | None, what: str, exc: Exception) -> str:
    """The line of a shard whose process died, ``what`` it was doing (Ray's first line of
    why)."""
    cause = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else "no reason given"
    return f"replay shard {shard} died ({what}); its transitions are gone: {cause}"


def capacity_each(config: Config) -> int:
    """The transitions each shard of ``config``'s run holds (the config refuses a capacity that
    its shards do not divide)."""
    return config.replay.capacity // (config.run.shards or 1)


class ShardProcess:
    """One replay shard's process: a ``Shard`` over the run's memory kind (see the module
    docstring).

    Args:
        config: the run's config (its ``replay`` section; ``run.shards`` gives the size).
        spec: the env's observation spec, as the learner's memory would be sized for it.
        index: the shard's index, 0 to K - 1.
    """

    def __init__(self, config: Config, spec: EnvSpec, index: int) -> None:
        replay = config.replay.model_copy(update={"capacity": capacity_each(config)})
        seed = RunSeeds.for_shard(config.run.seed, index)
        self.offset = index * replay.capacity
        self.shard = Shard(make_memory(replay, spec, seed))

    def add(
        self, transitions: Any, frames: PackedFrames | None, td_abs: Any
    ) -> tuple[np.ndarray, int]:
        """Stores a block (its frames rebuilt first, ``frames.unpack``); returns its
        transitions' global slots and the transitions written to the shard so far."""
        serials = self.shard.add(*unpack(transitions, frames), td_abs=td_abs)
        return self.offset + serials % self.shard.memory.capacity, self.shard.written

    def sample(self, batch_size: int, beta: float) -> tuple[Batch, np.ndarray, int]:
        """A batch, its slots made global, its transitions' write serials, and the
        transitions written to the shard so far."""
        batch, serials = self.shard.sample(batch_size, beta)
        return batch._replace(indices=batch.indices + self.offset), serials, self.shard.written

    def update(self, serials: np.ndarray, td_abs: np.ndarray) -> int:
        """``Shard.update``: the priorities set."""
        return self.shard.update(serials, td_abs)

    def size(self) -> int:
        """The transitions held."""
        return len(self.shard)

    def diagnostics(self, full: bool) -> dict[str, float]:
        """The memory's diagnostics."""
        return self.shard.memory.diagnostics(full)

    def state_dict(self) -> dict[str, Any]:
        """``Shard.state_dict``: the memory's contents and the write counters (views into
        the memory's arrays: Ray copies them out as it sends them)."""
        return self.shard.state_dict(copy=False)

    def load_state_dict(self, state: dict[str, Any]) -> int:
        """``Shard.load_state_dict``; returns the transitions held then."""
        self.shard.load_state_dict(state)
        return len(self.shard)


class ShardedReplay:
    """The learner's view of ``K`` replay shards (see the module docstring).

    Args:
        ray: the connected ``ray`` module.
        config: the run's config.
        spec: the env's observation spec.
        prefetch: batches each shard has drawn ahead.
    """

    def __init__(self, ray: Any, config: Config, spec: EnvSpec, prefetch: int = PREFETCH) -> None:
        self.ray = ray
        shards = config.run.shards or 1
        self.capacity_each = capacity_each(config)
        # Ray restarts no shard: its transitions would be gone.
        remote = ray.remote(num_cpus=1, max_restarts=0)(ShardProcess)
        # Named, so that an actor finds its shard by name (a restarted actor too: a handle
        # among an actor's constructor arguments would have to outlive every restart).
        prefix = f"per-dqn-shard-{uuid.uuid4().hex[:12]}"
        self.names = [f"{prefix}-{j}" for j in range(shards)]
        self.handles = [
            remote.options(name=name).remote(config, spec, j) for j, name in enumerate(self.names)
        ]
        # Each shard up before the run starts: one that cannot start (its part of the memory
        # too large for its node, for one) is one line, with what its process raised.
        for j, ref in enumerate([handle.size.remote() for handle in self.handles]):
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                self.close()
                raise ValueError(f"replay shard {j} could not start: {raised(exc)}") from None
        self.prefetch = prefetch
        self._kind = config.replay.kind
        self._weighted = REPLAY_KINDS[config.replay.kind].weighted
        self._keeps = REPLAY_KINDS[config.replay.kind].keeps_priorities
        self._written = [0] * shards  # transitions each shard was given, by the blocks counted
        self._ahead: list[list[Any]] = [[] for _ in range(shards)]  # sample refs, oldest first
        self._rng = np.random.default_rng(RunSeeds.from_seed(config.run.seed).replay)
        self._last: tuple[int, np.ndarray, np.ndarray] | None = None  # shard, slots, serials
        # Update refs not yet seen done -> (their shard, their transitions).
        self._updates: dict[Any, tuple[int, int]] = {}
        self.dropped = 0  # priority updates dropped so far (their transitions overwritten)

    @property
    def kind(self) -> str:
        return self._kind

    @property
    def weighted(self) -> bool:
        """Whether its batches carry importance-sampling weights (the kind's)."""
        return self._weighted

    @property
    def capacity(self) -> int:
        """Every shard's capacity together: the run's ``replay.capacity``."""
        return self.capacity_each * len(self.handles)

    def sizes(self) -> list[int]:
        """What each shard holds, by the blocks counted so far."""
        return [min(written, self.capacity_each) for written in self._written]

    def __len__(self) -> int:
        return sum(self.sizes())

    @property
    def slots_in_use(self) -> int:
        """One past the highest global slot holding a transition: each shard fills its own
        range from its start, so the slots below ``len`` are not the ones in use (a checkpoint
        keeps the health panel's per-slot history up to here)."""
        used = [j * self.capacity_each + size for j, size in enumerate(self.sizes()) if size]
        return max(used, default=0)

    def can_sample(self, batch_size: int) -> bool:
        """Whether a shard holds a whole batch (each batch comes from one)."""
        return max(self.sizes()) >= batch_size

    def stored(self, slots: np.ndarray, written: int) -> None:
        """Notes a block an actor stored in its shard: its global ``slots`` (all in one
        shard) and the transitions ``written`` to that shard then. A shard's count is the
        largest it was told, so a block noted twice (held by a checkpoint, then taken) or out
        of order counts once, and one whose actor died before the learner saw it is counted
        by the next."""
        slots = np.asarray(slots, dtype=np.int64)
        if slots.size:
            self._note(int(slots[0]) // self.capacity_each, written)

    def _note(self, shard: int, written: int) -> None:
        self._written[shard] = max(self._written[shard], int(written))

    def _get(self, ref: Any, shard: int, what: str) -> Any:
        """``ray.get`` of one call to shard ``shard``; a shard that died raises
        ``ShardLostError``."""
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayActorError as exc:
            raise ShardLostError(shard_died(shard, what, exc)) from None

    def _each(self, refs: list[Any], what: str) -> list[Any]:
        """``_get`` of one call to each shard, in shard order."""
        return [self._get(ref, j, what) for j, ref in enumerate(refs)]

    def sample(self, batch_size: int, beta: float = 1.0) -> Batch:
        """A batch drawn ahead by one shard (picked in proportion to what each holds, among
        those holding a batch), whose next is asked for at once.

        Raises:
            ValueError: no shard holds ``batch_size`` transitions.
        """
        sizes = np.asarray(self.sizes(), dtype=np.float64)
        sizes[sizes < batch_size] = 0.0
        if not sizes.any():
            raise ValueError(
                f"`batch_size` must be <= the transitions of one shard ({int(max(self.sizes()))}), "
                f"got {batch_size}"
            )
        j = int(self._rng.choice(len(sizes), p=sizes / sizes.sum()))
        ahead = self._ahead[j]
        while len(ahead) < self.prefetch + 1:
            ahead.append(self.handles[j].sample.remote(batch_size, beta))
        batch, serials, written = self._get(ahead.pop(0), j, "sampling a batch")
        self._note(j, written)
        self._last = (j, batch.indices, serials)
        self._check_updates()
        return batch

    def update(self, update: PriorityUpdate) -> None:
        """Sends the last batch's priority update to its shard, keyed by write serials (not
        waited for; a shard that refused one is raised at the next call).

        Raises:
            ValueError: indices that are not the last batch's.
        """
        if not self._keeps:
            return  # a kind that keeps no priorities: nothing to send
        if self._last is None:
            raise ValueError("a priority update before any batch was drawn")
        j, slots, serials = self._last
        order = np.argsort(slots, kind="stable")
        where = np.searchsorted(slots[order], update.indices)
        where = np.minimum(where, len(slots) - 1)
        found = slots[order][where] == update.indices
        if not found.all():
            bad = int(np.asarray(update.indices)[~found][0])
            raise ValueError(f"a priority update for slot {bad}, not in the last batch drawn")
        ref = self.handles[j].update.remote(serials[order][where], update.td_abs)
        self._updates[ref] = (j, len(update.indices))

    def _check_updates(self, wait: bool = False) -> None:
        """Counts the updates the shards have finished (those dropped into ``dropped``);
        raises the error of one that a shard refused. ``wait``: waits for every one."""
        if not self._updates:
            return
        refs = list(self._updates)
        done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=None if wait else 0)
        for ref in done:
            j, count = self._updates.pop(ref)
            self.dropped += count - int(self._get(ref, j, "updating priorities"))

    def flush(self) -> None:
        """Waits for every priority update sent to be applied (or dropped, and counted)."""
        self._check_updates(wait=True)

    def diagnostics(self, full: bool = False) -> dict[str, float]:
        """The shards' diagnostics together: a ``mean_*`` value as their mean weighted by what
        each holds, any other the largest of theirs."""
        each = self._each([h.diagnostics.remote(full) for h in self.handles], "reading priorities")
        sizes = np.asarray(self.sizes(), dtype=np.float64)
        out: dict[str, float] = {}
        for key in each[0]:
            values = np.asarray([d[key] for d in each], dtype=np.float64)
            if key.startswith("mean_") and sizes.sum() > 0:
                out[key] = float((values * sizes).sum() / sizes.sum())
            else:
                out[key] = float(values.max())
        return out

    def state_dict(self, copy: bool = True) -> dict[str, Any]:
        """Every shard's state (``Shard.state_dict``), after every update sent (a shard runs
        its calls in order)."""
        self.flush()
        # One shard at a time, so that one shard's state at most is on its way at once.
        states = [
            self._get(handle.state_dict.remote(), j, "saving a checkpoint")
            for j, handle in enumerate(self.handles)
        ]
        return {"kind": self._kind, "shards": states, "rng": self._rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Loads each shard's state; the batches drawn ahead are dropped.

        Raises:
            ValueError: a state of another kind or number of shards, or one a shard refuses.
        """
        shards = state.get("shards") if isinstance(state, dict) else None
        if not isinstance(shards, list) or state.get("kind") != self._kind:
            raise ValueError(
                f"its memory is not the {len(self.handles)} {self._kind} replay shards this "
                "run has (a run with run.shards resumes with the same number)"
            )
        if len(shards) != len(self.handles):
            raise ValueError(
                f"its memory holds {len(shards)} replay shards, this run has {len(self.handles)}"
            )
        refs = [h.load_state_dict.remote(s) for h, s in zip(self.handles, shards, strict=True)]
        for j, ref in enumerate(refs):
            try:
                self.ray.get(ref)
            except self.ray.exceptions.RayTaskError as exc:
                raise ValueError(f"replay shard {j}'s state: {exc.cause}") from None
            except self.ray.exceptions.RayActorError as exc:
                raise ValueError(shard_died(j, "loading its state", exc)) from None
        if "rng" in state:
            self._rng.bit_generator.state = state["rng"]
        self._written = [int(s["written"]) for s in shards]
        self.dropped = sum(int(s["dropped"]) for s in shards)
        self._ahead = [[] for _ in self.handles]
        self._last = None

    def close(self) -> None:
        """Ends every shard's process."""
        for handle in self.handles:
            self.ray.kill(handle)
        self.handles = []
