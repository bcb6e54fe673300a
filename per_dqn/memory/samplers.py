"""Which stored transitions a replay memory draws, and with what weights: one interface, 3 kinds.

A sampler keeps the priority index of a memory (none, sum and min trees, or a rank heap) and its
random generator; the storage keeps the transitions. ``ReplayMemory(storage, sampler)`` validates
every call at its public boundary and hands the sampler only checked input:

- ``on_insert(slots)``: slots (an int from ``add``, an int64 array from ``add_batch``) now hold new
  transitions;
- ``draw(batch_size, beta, size) -> (indices, weights, priorities)``: a batch from the ``size``
  stored transitions, with importance-sampling weights and the priorities the draw read (None for
  uniform);
- ``update(PriorityUpdate)``: new ``|delta|`` for sampled slots;
- ``diagnostics(full)``: numbers worth logging, ``{}`` when there are none;
- ``state_dict()`` / ``check_state(state, size)`` / ``load_state_dict(state, size)``; ``nbytes``.

The beta schedule lives outside (``per_dqn.schedules``): the caller passes the current beta.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from per_dqn.memory.heap import RankHeap, rank_boundaries
from per_dqn.memory.trees import MinTree, SumTree
from per_dqn.memory.types import PriorityUpdate

WEIGHT_NORMALIZATIONS = ("global", "batch")


def positive_int(name: str, value) -> int:
    """``value`` as an int, or TypeError/ValueError naming ``name`` unless it is an int >= 1."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"`{name}` must be >= 1, got {value}")
    return int(value)


def in_range(name: str, value, low: float, high: float) -> float:
    """``value`` as a float, or ValueError naming ``name`` unless it lies in ``[low, high]``."""
    value = float(value)
    if not low <= value <= high:  # also rejects NaN
        raise ValueError(f"`{name}` must be in [{low}, {high}], got {value}")
    return value


def _clip(name: str, value) -> float | None:
    clip = None if value is None else float(value)
    if clip is not None and not 0.0 < clip < np.inf:
        raise ValueError(f"`{name}` must be > 0 or None, got {value}")
    return clip


class Sampler(ABC):
    """The interface every sampler implements; it owns the random generator and its state.

    A new replay kind is a subclass plus its entry in ``per_dqn.memory.kinds.REPLAY_KINDS``.

    Args:
        capacity: slots of the storage it samples from, an int >= 1.
        seed: seed of the sampler's own generator, or a ``np.random.Generator`` to use as is
            (None: fresh entropy).

    Attributes:
        kind: the name a memory's ``state_dict`` carries, one of ``per_dqn.memory.KINDS``.
        weighted: whether the IS weights ``draw`` returns depend on ``beta`` (the loop logs beta
            only then).
        rng: the generator every draw uses.
    """

    kind: ClassVar[str]
    weighted: ClassVar[bool]

    def __init__(self, capacity: int, seed: int | np.random.Generator | None = None) -> None:
        self.capacity = positive_int("capacity", capacity)
        self.rng = np.random.default_rng(seed)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity={self.capacity})"

    @property
    @abstractmethod
    def nbytes(self) -> int:
        """Bytes held by the sampler's index arrays."""

    @abstractmethod
    def on_insert(self, slots: int | np.ndarray) -> None:
        """Slots that now hold new transitions: one int (``add``) or an int64 array (``add_batch``).

        Trusts its input: slots in ``[0, capacity)``, in the order the storage wrote them.
        """

    @abstractmethod
    def draw(
        self, batch_size: int, beta: float, size: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Draws ``batch_size`` of the ``size`` stored slots.

        Trusts its input (``ReplayMemory.sample`` checks it): ``1 <= batch_size <= size``,
        ``beta`` in [0, 1].

        Returns:
            ``(indices, weights, priorities)``: int64 slots, float64 IS weights, and the float64
            priorities read during the draw (None where there are no priorities).
        """

    @abstractmethod
    def update(self, update: PriorityUpdate) -> None:
        """New ``|delta|`` for sampled slots.

        Trusts its input (``ReplayMemory.update`` checks it): ``indices`` int64 of stored slots,
        ``td_abs`` float64, finite and >= 0, of the same length.
        """

    @abstractmethod
    def diagnostics(self, full: bool = False) -> dict[str, float]:
        """Numbers worth logging about the priorities, by name (``{}`` when there are none).

        Args:
            full: also the O(capacity) checks (e.g. the sum tree's drift); call it rarely.
        """

    def state_dict(self) -> dict[str, Any]:
        """The sampler's part of a memory's ``state_dict``: its RNG state and priority index."""
        return {"rng": self.rng.bit_generator.state}

    def check_state(self, state: dict[str, Any], size: int) -> None:
        """Raises ValueError, changing nothing, unless ``state`` fits this sampler with ``size``
        stored transitions (a memory calls it before it restores any part)."""
        if "rng" not in state:
            raise ValueError("replay state has no `rng`")

    def load_state_dict(self, state: dict[str, Any], size: int) -> None:
        """Restores ``state_dict()`` output for a storage holding ``size`` transitions."""
        self.check_state(state, size)
        self.rng.bit_generator.state = state["rng"]


class UniformSampler(Sampler):
    """Uniform replay: every stored transition equally likely, weights all 1, no priorities.

    Args:
        capacity: slots of the storage, an int >= 1.
        seed: see ``Sampler``.
    """

    kind: ClassVar[str] = "uniform"
    weighted: ClassVar[bool] = False

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
        self.td_error_clip = _clip("td_error_clip", td_error_clip)
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
        state["priorities"] = self.sums.leaves
        state["max_priority"] = self.max_priority
        return state

    def check_state(self, state: dict[str, Any], size: int) -> None:
        super().check_state(state, size)
        priorities = np.asarray(state["priorities"], dtype=np.float64)
        if priorities.shape != (self.capacity,):
            raise ValueError(
                f"`priorities` must have shape ({self.capacity},), got {priorities.shape}"
            )
        bad = np.flatnonzero(~(np.isfinite(priorities) & (priorities >= 0.0)))
        if bad.size:
            raise ValueError(
                f"`priorities` must be finite and >= 0, "
                f"got {float(priorities[bad[0]])!r} at slot {bad[0]}"
            )

    def load_state_dict(self, state: dict[str, Any], size: int) -> None:
        self.check_state(state, size)
        priorities = np.asarray(state["priorities"], dtype=np.float64)
        super().load_state_dict(state, size)
        self.sums.set_leaves(priorities)
        mins = priorities.copy()
        mins[size:] = np.inf  # unwritten slots must not win the min
        self.mins.set_leaves(mins)
        self.max_priority = float(state["max_priority"])
        self._size = size


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
        self.td_error_clip = _clip("td_error_clip", td_error_clip)
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
