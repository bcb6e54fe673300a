"""Replay memories for DQN (uniform, proportional PER, rank-based PER, ...) as a standalone library.

A pure data structure on numpy (numba compiles its inner loops): it never imports torch,
gymnasium or the agent, so it can be lifted out and fed from any loop::

    import numpy as np
    from per_dqn.memory import PriorityUpdate, make_memory

    memory = make_memory("proportional", capacity=100_000, obs_shape=(4,), alpha=0.6, seed=0)
    memory.add(obs, action, reward, next_obs, terminated)   # add_batch(...) for a vector env
    batch = memory.sample(32, beta=0.4)     # Batch(obs, actions, ..., indices, weights, priorities)
    td_abs = np.abs(targets - q_values)     # from your learner, one per sampled transition
    memory.update(PriorityUpdate(batch.indices, td_abs))
    memory.diagnostics()                    # {"mean_priority": ..., "max_priority": ...}

A memory is a storage plus a sampler, ``ReplayMemory(storage, sampler)``; ``Batch`` and
``PriorityUpdate`` (``types.py``) are what goes between it and a learner:

- storage (``storage.py``): a ``RingStorage``, the fields every transition has in preallocated
  ring arrays, composed with an ``ObservationStore`` for the observations: whole
  (``TransitionStorage``), bool cells eight a byte with each next observation once
  (``BitStorage``, ``bits.py``), or each distinct frame of stacked images once
  (``FrameStorage``, ``frames.py``, ``dedup_frames=True``);
- sampler: one ABC, ``Sampler`` (``samplers.py``), and one module per kind: ``UniformSampler``
  (``uniform.py``), ``ProportionalSampler`` (sum and min trees, ``trees.py``; ``proportional.py``)
  and ``RankSampler`` (a binary heap, ``heap.py``; ``rank.py``). It owns the random generator,
  draws indices with their IS weights and the priorities it read, and takes a ``PriorityUpdate``
  whole, so errors are never paired with slots by hand.

``Shard`` (``shard.py``) is a memory fed and updated out of step, as one replay shard of a
distributed run: blocks in with their priorities, batches out with their transitions' write
serials, and updates keyed by those, dropped where the transition was overwritten meanwhile.

``kinds.py`` registers each kind once (``REPLAY_KINDS``: its name, its sampler and the sampler's
settings); ``KINDS`` is the registry's names. ``make_memory(kind, capacity=..., obs_shape=...,
**settings)`` builds one. ``memory.weighted`` says whether the weights depend on beta (not for
uniform), so a loop never needs to ask which kind it has; what only one kind has is its
sampler's (``memory.sampler.tree_drift()``). The beta schedule lives outside
(``per_dqn.training.schedules``).

The names below are imported on first use, so reading ``KINDS`` (as the config and the command
line do) costs no numpy or numba import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from per_dqn.memory.kinds import KINDS, REPLAY_KINDS, ReplayKind

# name -> submodule that defines it
_EXPORTS = {
    "Batch": "types",
    "PriorityUpdate": "types",
    "ObservationStore": "storage",
    "RingStorage": "storage",
    "TransitionStorage": "storage",
    "WholeObservations": "storage",
    "BitObservations": "bits",
    "BitStorage": "bits",
    "FrameObservations": "frames",
    "FrameStorage": "frames",
    "MinTree": "trees",
    "SumTree": "trees",
    "RankHeap": "heap",
    "Sampler": "samplers",
    "UniformSampler": "uniform",
    "ProportionalSampler": "proportional",
    "RankSampler": "rank",
    "ReplayMemory": "replay",
    "make_memory": "replay",
    "make_storage": "replay",
    "Shard": "shard",
    "planned_nbytes": "footprint",
}

__all__ = [
    "KINDS",
    "REPLAY_KINDS",
    "Batch",
    "BitObservations",
    "BitStorage",
    "FrameObservations",
    "FrameStorage",
    "MinTree",
    "ObservationStore",
    "PriorityUpdate",
    "ProportionalSampler",
    "RankHeap",
    "RankSampler",
    "ReplayKind",
    "ReplayMemory",
    "RingStorage",
    "Sampler",
    "Shard",
    "SumTree",
    "TransitionStorage",
    "UniformSampler",
    "WholeObservations",
    "make_memory",
    "make_storage",
    "planned_nbytes",
]

if TYPE_CHECKING:
    from per_dqn.memory.bits import BitObservations, BitStorage
    from per_dqn.memory.footprint import planned_nbytes
    from per_dqn.memory.frames import FrameObservations, FrameStorage
    from per_dqn.memory.heap import RankHeap
    from per_dqn.memory.proportional import ProportionalSampler
    from per_dqn.memory.rank import RankSampler
    from per_dqn.memory.replay import ReplayMemory, make_memory, make_storage
    from per_dqn.memory.samplers import Sampler
    from per_dqn.memory.shard import Shard
    from per_dqn.memory.storage import (
        ObservationStore,
        RingStorage,
        TransitionStorage,
        WholeObservations,
    )
    from per_dqn.memory.trees import MinTree, SumTree
    from per_dqn.memory.types import Batch, PriorityUpdate
    from per_dqn.memory.uniform import UniformSampler


if set(__all__) != {"KINDS", "REPLAY_KINDS", "ReplayKind", *_EXPORTS}:  # the lists must agree
    raise ImportError("per_dqn.memory: __all__ and _EXPORTS disagree")


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
