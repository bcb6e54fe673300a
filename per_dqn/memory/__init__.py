"""Replay memories for DQN: uniform, proportional PER and rank-based PER.

A pure data structure on numpy (and numba for its inner loops): no torch, no gymnasium, so it can
be lifted out and used on its own.
"""

from per_dqn.memory.footprint import planned_nbytes
from per_dqn.memory.replay import (
    PrioritizedReplay,
    RankBasedReplay,
    ReplayMemory,
    UniformReplay,
)
from per_dqn.memory.storage import Batch
from per_dqn.memory.trees import MinTree, SumTree

__all__ = [
    "Batch",
    "MinTree",
    "PrioritizedReplay",
    "RankBasedReplay",
    "ReplayMemory",
    "SumTree",
    "UniformReplay",
    "planned_nbytes",
]
