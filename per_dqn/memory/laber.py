"""Large Batch Experience Replay's sampler (LaBER; Lahire, Geist & Rachelson, ICML 2022).

The kind ``laber``: ``large_batch * B`` transitions drawn uniformly, with replacement, and ``B``
uniforms for the learner, which computes fresh ``|delta|`` on the large batch with its current
network and picks ``B`` of it in proportion (``per_dqn.agent.objectives``, ``laber``). No
priority is stored, so there is no tree and nothing to update.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from per_dqn.memory.samplers import positive_int
from per_dqn.memory.uniform import UniformSampler


class LaBERSampler(UniformSampler):
    """Uniform draws of ``large_batch`` times the batch, and the learner's picks.

    Args:
        capacity: slots of the storage, an int >= 1.
        large_batch: the factor ``m`` >= 1 of the large batch (the authors' Atari agent and cpprb:
            4).
        seed: see ``Sampler``.
    """

    kind: ClassVar[str] = "laber"

    def __init__(
        self, capacity: int, large_batch: int = 4, seed: int | np.random.Generator | None = None
    ) -> None:
        self.large_batch = positive_int("large_batch", large_batch)
        super().__init__(capacity, seed)

    def rows(self, batch_size: int) -> int:
        """``large_batch * batch_size``: the large batch."""
        return self.large_batch * batch_size

    def draw(self, batch_size: int, beta: float, size: int) -> tuple[np.ndarray, np.ndarray, None]:
        """``large_batch * batch_size`` uniform slots (with replacement), weights 1."""
        rows = self.large_batch * batch_size
        return self.rng.integers(0, size, rows), np.ones(rows), None

    def picks(self, batch_size: int) -> np.ndarray:
        """``batch_size`` uniforms in [0, 1): the learner's draws out of the large batch."""
        return self.rng.random(batch_size)
