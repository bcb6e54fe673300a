"""Rank-based prioritized replay's sampler, over a binary heap (Schaul et al., 2016).

The kind ``rank``: ``P(i)`` proportional to ``rank(i) ** -alpha``, one draw in each of ``B``
equal-mass segments of the ranks.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from per_dqn.memory.heap import RankHeap, rank_boundaries
from per_dqn.memory.samplers import Sampler, in_range, optional_clip, positive_int
from per_dqn.memory.types import PriorityUpdate


class RankSampler(Sampler):
    """Rank-based prioritized replay (Schaul et al., 2016, Section 3.3 and Appendix B.2.1).

    ``P(i)`` is proportional to ``(1 / rank(i)) ** alpha``, where ``rank(i)`` is the position of
    transition ``i`` when the memory is sorted by ``|delta|`` in decreasing order. As in the paper,
    ranks come from an array-backed binary max-heap (``RankHeap``): its array is an approximately
    sorted list (``rank = heap position + 1``), fully re-sorted every ``sort_interval`` priority
    updates.

    New transitions enter at the top (Algorithm 1: "store transition with maximal priority"):
    their key is the largest ``|delta|`` seen so far, and between equal keys the newer transition
    ranks higher, in the heap and in every re-sort. The tie-break matters whenever
    ``td_error_clip`` is set: every |delta| at or above the clip is stored as exactly the running
    maximum, and without it a new transition tied with all of them and sank to the bottom
    (measured on a clipped CartPole stream: a median wait of ~520 transitions for a first replay,
    against ~280 under uniform replay).

    Sampling splits the ranks into ``B`` segments of equal probability mass under the power law,
    using a cumulative table computed once at construction, and draws one rank uniformly inside
    each segment. The distribution actually used is therefore ``P = 1 / (B * n_k)`` for a rank in
    a segment of ``n_k`` ranks, and the IS weights ``w = (N P) ** -beta / max w`` are exact for it.

    Args:
        capacity: slots of the storage, an int >= 1.
        alpha: rank exponent >= 0; 0.7 in the paper's rank-based Atari runs.
        td_error_clip: clip ``|delta|`` at this value before ranking (None: no clip).
        sort_interval: priority updates between full re-sorts of the heap (>= 1).
        seed: see ``Sampler``.

    Attributes:
        heap: the rank heap of the stored slots.
        max_priority: the largest ranking key ``min(|delta|, clip)`` seen (initially 1).
    """

    kind: ClassVar[str] = "rank"
    weighted: ClassVar[bool] = True

    def __init__(
        self,
        capacity: int,
        alpha: float = 0.7,
        td_error_clip: float | None = None,
        sort_interval: int = 1000,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        self.alpha = in_range("alpha", alpha, 0.0, np.inf)
        self.td_error_clip = optional_clip("td_error_clip", td_error_clip)
        self.sort_interval = positive_int("sort_interval", sort_interval)
        super().__init__(capacity, seed)
        self.heap = RankHeap(self.capacity)
        # cum_mass[r] = sum_{j=1}^{r+1} j^-alpha: alpha is applied here and nowhere else. Computed
        # in place, so building it needs no temporaries beyond the 8 bytes a slot it keeps.
        self._cum_mass = np.arange(1, self.capacity + 1, dtype=np.float64)
        np.power(self._cum_mass, -self.alpha, out=self._cum_mass)
        np.cumsum(self._cum_mass, out=self._cum_mass)
        self.max_priority = 1.0
        self._updates_since_sort = 0

    @staticmethod
    def planned_nbytes(capacity: int) -> int:
        """Bytes of the heap and of the cumulative power-law table (one float64 a slot)."""
        return RankHeap.planned_nbytes(capacity) + capacity * 8

    @property
    def nbytes(self) -> int:
        """Bytes of the heap and of the cumulative power-law table."""
        return self.heap.nbytes + self._cum_mass.nbytes

    def on_insert(self, slots: int | np.ndarray) -> None:
        """New transitions enter with key ``max_priority``, above every tie (newest first)."""
        if not isinstance(slots, np.ndarray):
            slots = np.array([slots], dtype=np.int64)
        self.heap.insert(slots, self.max_priority)

    def draw(
        self, batch_size: int, beta: float, size: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One rank in each of ``batch_size`` equal-mass segments (see ``RankHeap``)."""
        bounds = np.empty(batch_size + 1, dtype=np.int64)
        rank_boundaries(self._cum_mass, size, batch_size, bounds)
        u = self.rng.random(batch_size)
        return self.heap.sample_segments(bounds, u, beta)

    def update(self, update: PriorityUpdate) -> None:
        """Re-keys each index by ``min(|delta|, clip)``; re-sorts every ``sort_interval`` calls."""
        indices, td_abs = update
        if self.td_error_clip is not None:
            td_abs = np.minimum(td_abs, self.td_error_clip)
        self.heap.update(indices, td_abs)
        if td_abs.size:
            self.max_priority = max(self.max_priority, float(td_abs.max()))
        self._updates_since_sort += 1
        if self._updates_since_sort >= self.sort_interval:
            self.sort()

    def sort(self) -> None:
        """Re-sorts the heap now (positions become exact ranks) and restarts the interval."""
        self.heap.sort()
        self._updates_since_sort = 0

    def priorities(self, indices) -> np.ndarray:
        """The ranking keys ``min(|delta|, clip)`` at ``indices``."""
        return self.heap.keys(indices)

    def ranks(self, indices) -> np.ndarray:
        """Current 1-based rank (heap position + 1) of each stored index."""
        return self.heap.ranks(indices)

    @property
    def mean_priority(self) -> float:
        """Mean ranking key ``|delta|`` over the stored transitions (0 when empty)."""
        return self.heap.mean_key()

    def diagnostics(self, full: bool = False) -> dict[str, float]:
        """``mean_priority`` and ``max_priority`` (nothing more with ``full``)."""
        return {"mean_priority": self.mean_priority, "max_priority": self.max_priority}

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state.update(self.heap.state_dict())
        state["max_priority"] = self.max_priority
        state["updates_since_sort"] = self._updates_since_sort
        return state

    def check_state(self, state: dict[str, Any], size: int) -> None:
        super().check_state(state, size)
        self.heap.check_state(state, size)

    def load_state_dict(self, state: dict[str, Any], size: int) -> None:
        self.check_state(state, size)
        super().load_state_dict(state, size)
        self.heap.load_state_dict(state, size)
        self.max_priority = float(state["max_priority"])
        self._updates_since_sort = int(state["updates_since_sort"])
