"""Loss-Adjusted Prioritized replay's sampler (LAP; Fujimoto, Meger & Precup, NeurIPS 2020).

The kind ``lap``, as sfujim/LAP-PAL ``discrete/LAP_DDQN.py`` and ``discrete/utils.py`` build it:

    p_i  = max(|delta_i|, min_priority) ** alpha
    P(i) = p_i / sum_k p_k            (independent draws, with replacement)
    w_i  = 1                          (no IS weights: LAP's loss makes the gradient unbiased)

New transitions enter at the largest priority seen (initially 1). The learner's side is LAP's
loss (``per_dqn.agent.objectives``, ``lap``), a Huber loss whose threshold is the same
``min_priority``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from per_dqn.memory.samplers import Sampler, checked_priorities, in_range
from per_dqn.memory.trees import SumTree
from per_dqn.memory.types import PriorityUpdate


class LAPSampler(Sampler):
    """LAP's sampling: ``P(i)`` proportional to ``max(|delta_i|, min_priority) ** alpha``.

    Unlike proportional PER's stratified draws, each of the ``B`` draws is an independent uniform
    mass in ``[0, total)`` (the source's ``SumTree.sample``), and every weight is 1.

    Args:
        capacity: slots of the storage, an int >= 1.
        alpha: exponent >= 0 (the source: 0.6 on Atari, 0.4 elsewhere).
        min_priority: the floor ``k`` > 0 of ``|delta|`` (the paper's 1; the source's Atari
            setting 0.01), also the threshold of LAP's Huber loss.
        seed: see ``Sampler``.

    Attributes:
        sums: the sum tree of the leaves ``p_i``.
        max_priority: the largest ``max(|delta|, min_priority)`` seen (initially 1); a new
            transition enters at its ``alpha`` power.
    """

    kind: ClassVar[str] = "lap"
    weighted: ClassVar[bool] = False

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        min_priority: float = 1.0,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        self.alpha = in_range("alpha", alpha, 0.0, np.inf)
        self.min_priority = float(min_priority)
        if not 0.0 < self.min_priority < np.inf:
            raise ValueError(f"`min_priority` must be > 0, got {min_priority}")
        super().__init__(capacity, seed)
        self.sums = SumTree(self.capacity)
        self.max_priority = 1.0
        self._size = 0

    @staticmethod
    def planned_nbytes(capacity: int) -> int:
        """Bytes of the sum tree for ``capacity`` leaves."""
        return SumTree.planned_nbytes(capacity)

    @property
    def nbytes(self) -> int:
        """Bytes of the sum tree's nodes."""
        return self.sums.nbytes

    def on_insert(self, slots: int | np.ndarray) -> None:
        """New transitions enter at ``max_priority ** alpha``."""
        leaf = self.max_priority**self.alpha
        if not isinstance(slots, np.ndarray):
            self.sums.write_one(slots, leaf)
            if self._size < self.capacity:
                self._size += 1
        else:
            self.sums.write(slots, np.full(slots.shape[0], leaf))
            self._size = min(self._size + slots.shape[0], self.capacity)

    def draw(
        self, batch_size: int, beta: float, size: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``batch_size`` independent draws in proportion to ``p_i``; weights 1, beta ignored."""
        # Each mass ``u * total`` is below the total (no clamp needed, unlike stratified draws).
        indices, priorities = self.sums.sample(self.rng.random(batch_size))
        return indices, np.ones(batch_size), priorities

    def update(self, update: PriorityUpdate) -> None:
        """Sets ``p_i = max(|delta_i|, min_priority) ** alpha``; the last of a repeated index
        wins."""
        indices, td_abs = update
        raw = np.maximum(td_abs, self.min_priority)
        self.sums.write(indices, raw**self.alpha)
        if raw.size:
            self.max_priority = max(self.max_priority, float(raw.max()))

    def priorities(self, indices) -> np.ndarray:
        """Leaf priorities ``p_i`` (alpha applied) at ``indices``."""
        return self.sums[indices]

    @property
    def mean_priority(self) -> float:
        """Mean leaf priority over the stored transitions (0 when empty)."""
        return self.sums.total / self._size if self._size else 0.0

    def diagnostics(self, full: bool = False) -> dict[str, float]:
        """``mean_priority`` and ``max_priority``."""
        return {"mean_priority": self.mean_priority, "max_priority": self.max_priority}

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["priorities"] = self.sums.leaves[: self._size]  # the stored transitions' only
        state["max_priority"] = self.max_priority
        return state

    def check_state(self, state: dict[str, Any], size: int) -> None:
        super().check_state(state, size)
        checked_priorities(state, self.capacity, size)
        max_priority = float(state.get("max_priority", np.nan))
        if not 1.0 <= max_priority < np.inf:
            raise ValueError(f"`max_priority` must be finite and >= 1, got {max_priority}")

    def load_state_dict(self, state: dict[str, Any], size: int) -> None:
        self.check_state(state, size)
        super().load_state_dict(state, size)
        self.sums.set_leaves(checked_priorities(state, self.capacity, size))
        self.max_priority = float(state["max_priority"])
        self._size = size
