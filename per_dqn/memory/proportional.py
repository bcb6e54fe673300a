"""Proportional prioritized replay's sampler, over a sum tree (Schaul et al., 2016).

The kind ``proportional``: ``P(i)`` proportional to ``p_i ** alpha``, stratified draws, IS weights
normalised by their maximum.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from per_dqn.memory.samplers import Sampler, checked_priorities, in_range, optional_clip
from per_dqn.memory.trees import MinTree, SumTree
from per_dqn.memory.types import PriorityUpdate

WEIGHT_NORMALIZATIONS = ("global", "batch")


class ProportionalSampler(Sampler):
    """Proportional prioritized replay (Schaul et al., 2016, Section 3.3 and Algorithm 1).

    Priorities and probabilities::

        p_i  = (min(|delta_i|, td_error_clip) + priority_eps) ** alpha
        P(i) = uniform_mix / N + (1 - uniform_mix) * p_i / sum_k p_k
        w_i  = (N * P(i)) ** -beta / max_j (N * P(j)) ** -beta

    ``alpha`` is applied in exactly one place, when a raw priority becomes a leaf. The largest raw
    priority seen so far (``max_priority``, initially 1) is kept un-exponentiated, and every new
    transition enters with leaf ``max_priority ** alpha`` so that it is replayed at least once soon.

    Sampling is stratified: the total mass is cut into ``B`` equal segments and one mass is drawn
    uniformly in each (Appendix B.2.1). With ``weight_normalization="global"`` (the paper's, and the
    default) the max in ``w_i`` runs over the whole memory, via a min tree of the priorities; with
    ``"batch"`` it runs over the batch, as many libraries do. ``alpha = 0`` gives every transition
    the same priority, so sampling is uniform and every weight is exactly 1.

    Args:
        capacity: slots of the storage, an int >= 1.
        alpha: prioritisation exponent >= 0; 0.6 in the paper's proportional Atari runs.
        priority_eps: added to ``|delta|`` so no transition gets priority 0; > 0 (1e-6 default).
        td_error_clip: clip ``|delta|`` at this value before prioritising (None: no clip).
        uniform_mix: probability in [0, 1) that a draw is uniform instead of prioritized; the
            weights use the resulting mixture distribution.
        weight_normalization: ``"global"`` or ``"batch"``.
        seed: see ``Sampler``.

    Attributes:
        sums: the sum tree of the leaves ``p_i``.
        mins: the min tree of the same leaves (+inf where no transition is stored).
        max_priority: the largest raw priority ``min(|delta|, clip) + eps`` seen (initially 1).
    """

    kind: ClassVar[str] = "proportional"
    weighted: ClassVar[bool] = True

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.6,
        priority_eps: float = 1e-6,
        td_error_clip: float | None = None,
        uniform_mix: float = 0.0,
        weight_normalization: str = "global",
        seed: int | np.random.Generator | None = None,
    ) -> None:
        self.alpha = in_range("alpha", alpha, 0.0, np.inf)
        self.priority_eps = float(priority_eps)
        if not 0.0 < self.priority_eps < np.inf:
            raise ValueError(f"`priority_eps` must be > 0, got {priority_eps}")
        self.td_error_clip = optional_clip("td_error_clip", td_error_clip)
        self._clip = np.inf if self.td_error_clip is None else self.td_error_clip
        self.uniform_mix = float(uniform_mix)
        if not 0.0 <= self.uniform_mix < 1.0:
            raise ValueError(f"`uniform_mix` must be in [0, 1), got {uniform_mix}")
        if weight_normalization not in WEIGHT_NORMALIZATIONS:
            raise ValueError(
                f"`weight_normalization` must be one of {WEIGHT_NORMALIZATIONS}, "
                f"got {weight_normalization!r}"
            )
        self.weight_normalization = weight_normalization
        self._batch_norm = weight_normalization == "batch"
        super().__init__(capacity, seed)
        self.sums = SumTree(self.capacity)
        self.mins = MinTree(self.capacity)
        self.max_priority = 1.0
        # Stored transitions, counted as a ring storage counts them (min(size + n, capacity)),
        # so that the mean priority needs no storage.
        self._size = 0

    @staticmethod
    def planned_nbytes(capacity: int) -> int:
        """Bytes of the sum tree and the min tree (the same layout) for ``capacity`` leaves."""
        return 2 * SumTree.planned_nbytes(capacity)

    @property
    def nbytes(self) -> int:
        """Bytes of the two trees' nodes."""
        return self.sums.nbytes + self.mins.nbytes

    def on_insert(self, slots: int | np.ndarray) -> None:
        """New transitions enter at ``max_priority ** alpha`` (alpha applied here, once)."""
        leaf = self.max_priority**self.alpha
        if not isinstance(slots, np.ndarray):  # one add: no arrays to allocate
            self.sums.write_both_one(self.mins, slots, leaf)
            if self._size < self.capacity:
                self._size += 1
        else:
            self.sums.write_both(self.mins, slots, np.full(slots.shape[0], leaf))
            self._size = min(self._size + slots.shape[0], self.capacity)

    def draw(
        self, batch_size: int, beta: float, size: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Stratified draws over the sum tree (see ``SumTree.sample_proportional``)."""
        rng = self.rng
        strata_u = rng.random(batch_size)
        if self.uniform_mix > 0.0:
            coin_u = rng.random(batch_size)
            uniform_idx = rng.integers(0, size, batch_size)
        else:
            coin_u = uniform_idx = None
        return self.sums.sample_proportional(
            self.mins, size, beta, strata_u, self.uniform_mix, coin_u, uniform_idx,
            self._batch_norm,
        )  # fmt: skip

    def update(self, update: PriorityUpdate) -> None:
        """Sets ``p_i = (min(|delta_i|, clip) + priority_eps) ** alpha`` for each index.

        Repeated indices: the last error wins (see ``SumTree.update``).
        """
        indices, td_abs = update
        max_raw = self.sums.update_proportional(
            self.mins, indices, td_abs, self._clip, self.priority_eps, self.alpha
        )
        self.max_priority = max(self.max_priority, max_raw)

    def priorities(self, indices) -> np.ndarray:
        """Leaf priorities ``p_i`` (alpha applied) at ``indices``."""
        return self.sums[indices]

    @property
    def mean_priority(self) -> float:
        """Mean leaf priority over the stored transitions (0 when empty)."""
        return self.sums.total / self._size if self._size else 0.0

    def tree_drift(self) -> float:
        """Relative gap between the tree's root and an exact sum of its leaves (``math.fsum``).

        Parents are always recomputed from their children, so this stays at float rounding
        (~1e-16 * depth); a larger value means the tree is corrupt. O(capacity): call it rarely.
        """
        exact = math.fsum(self.sums.leaves)
        return abs(self.sums.total - exact) / exact if exact > 0 else 0.0

    def diagnostics(self, full: bool = False) -> dict[str, float]:
        """``mean_priority``, ``max_priority``; with ``full`` also ``tree_drift`` (O(capacity))."""
        values = {"mean_priority": self.mean_priority, "max_priority": self.max_priority}
        if full:
            values["tree_drift"] = self.tree_drift()
        return values

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["priorities"] = self.sums.leaves[: self._size]  # the stored transitions' only
        state["max_priority"] = self.max_priority
        return state

    def check_state(self, state: dict[str, Any], size: int) -> None:
        super().check_state(state, size)
        checked_priorities(state, self.capacity, size)

    def load_state_dict(self, state: dict[str, Any], size: int) -> None:
        self.check_state(state, size)
        priorities = checked_priorities(state, self.capacity, size)
        super().load_state_dict(state, size)
        self.sums.set_leaves(priorities)
        mins = priorities.copy()
        mins[size:] = np.inf  # unwritten slots must not win the min
        self.mins.set_leaves(mins)
        self.max_priority = float(state["max_priority"])
        self._size = size
