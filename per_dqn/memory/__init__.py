"""Replay memories for DQN: uniform, proportional PER and rank-based PER, as a standalone library.

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

A memory is a storage plus a sampler, ``ReplayMemory(storage, sampler)``:

- storage (``storage.py``, ``frames.py``): the transitions in preallocated ring arrays, whole
  (``TransitionStorage``) or with each distinct frame of stacked images kept once
  (``FrameStorage``, ``dedup_frames=True``);
- sampler (``samplers.py``): ``UniformSampler``, ``ProportionalSampler`` (sum and min trees,
  ``trees.py``) or ``RankSampler`` (a binary heap, ``heap.py``) behind one interface; it owns the
  random generator, draws indices with their IS weights and the priorities it read, and takes
  a ``PriorityUpdate`` whole, so errors are never paired with slots by hand.

``KINDS`` lists the kinds once; ``make_memory(kind, **kwargs)`` builds one (the keywords of
``UniformReplay``, ``PrioritizedReplay`` or ``RankBasedReplay``). ``memory.weighted`` says whether
the weights depend on beta (not for uniform), so a loop never needs to ask which kind it has.
The beta schedule lives outside (``per_dqn.schedules``).

The names below are imported on first use, so reading ``KINDS`` (as the config and the command
line do) costs no numpy or numba import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

KINDS = ("uniform", "proportional", "rank")
"""The replay kinds, the one list: ``replay.kind`` in the config, ``--replay`` on the CLI."""

# name -> submodule that defines it
_EXPORTS = {
    "Batch": "storage",
    "PriorityUpdate": "storage",
    "TransitionStorage": "storage",
    "BitStorage": "storage",
    "FrameStorage": "frames",
    "MinTree": "trees",
    "SumTree": "trees",
    "RankHeap": "heap",
    "Sampler": "samplers",
    "UniformSampler": "samplers",
    "ProportionalSampler": "samplers",
    "RankSampler": "samplers",
    "ReplayMemory": "replay",
    "UniformReplay": "replay",
    "PrioritizedReplay": "replay",
    "RankBasedReplay": "replay",
    "make_memory": "replay",
    "make_storage": "replay",
    "planned_nbytes": "footprint",
}

__all__ = [
    "KINDS",
    "Batch",
    "BitStorage",
    "FrameStorage",
    "MinTree",
    "PrioritizedReplay",
    "PriorityUpdate",
    "ProportionalSampler",
    "RankBasedReplay",
    "RankHeap",
    "RankSampler",
    "ReplayMemory",
    "Sampler",
    "SumTree",
    "TransitionStorage",
    "UniformReplay",
    "UniformSampler",
    "make_memory",
    "make_storage",
    "planned_nbytes",
]

if TYPE_CHECKING:
    from per_dqn.memory.footprint import planned_nbytes
    from per_dqn.memory.frames import FrameStorage
    from per_dqn.memory.heap import RankHeap
    from per_dqn.memory.replay import (
        PrioritizedReplay,
        RankBasedReplay,
        ReplayMemory,
        UniformReplay,
        make_memory,
        make_storage,
    )
    from per_dqn.memory.samplers import (
        ProportionalSampler,
        RankSampler,
        Sampler,
        UniformSampler,
    )
    from per_dqn.memory.storage import Batch, BitStorage, PriorityUpdate, TransitionStorage
    from per_dqn.memory.trees import MinTree, SumTree


if set(__all__) != {"KINDS", *_EXPORTS}:  # the two lists above must name the same things
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
