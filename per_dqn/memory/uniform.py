"""Uniform experience replay's sampler: every stored transition equally likely (Mnih et al., 2015).

The kind ``uniform``: the baseline every prioritization is measured against.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from per_dqn.memory.samplers import Sampler
from per_dqn.memory.types import PriorityUpdate


class UniformSampler(Sampler):
    """Uniform replay: every stored transition equally likely, weights all 1, no priorities.

    Args:
        capacity: slots of the storage, an int >= 1.
        seed: see ``Sampler``.
    """

    kind: ClassVar[str] = "uniform"
    weighted: ClassVar[bool] = False

    @staticmethod
    def planned_nbytes(capacity: int) -> int:
        """0: uniform replay keeps no index."""
        return 0

    @property
    def nbytes(self) -> int:
        """0: uniform replay keeps no index."""
        return 0

    def on_insert(self, slots: int | np.ndarray) -> None:
        """Nothing to index."""

    def draw(self, batch_size: int, beta: float, size: int) -> tuple[np.ndarray, np.ndarray, None]:
        """``batch_size`` independent uniform slots (with replacement), weights 1; beta ignored."""
        return self.rng.integers(0, size, batch_size), np.ones(batch_size), None

    def update(self, update: PriorityUpdate) -> None:
        """Uniform replay ignores priorities."""

    def diagnostics(self, full: bool = False) -> dict[str, float]:
        """``{}``: no priorities."""
        return {}
