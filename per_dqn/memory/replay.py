"""Uniform, proportional and rank-based replay memories with one shared interface.

All three take the constructor keywords ``capacity``, ``obs_shape``, ``obs_dtype`` and ``seed``
and offer ``add``, ``add_batch``, ``sample``, ``update_priorities``, ``len()``, ``state_dict`` and
``load_state_dict``. The beta schedule lives outside the memory (``per_dqn.schedules``): the
caller passes the current beta to ``sample``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from per_dqn.memory import _kernels
from per_dqn.memory.frames import FrameStorage
from per_dqn.memory.storage import Batch, TransitionStorage
from per_dqn.memory.trees import MinTree, SumTree

_WEIGHT_NORMALIZATIONS = ("global", "batch")


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"`{name}` must be >= 1, got {value}")
    return int(value)


def _in_range(name: str, value, low: float, high: float) -> float:
    value = float(value)
    if not low <= value <= high:  # also rejects NaN
        raise ValueError(f"`{name}` must be in [{low}, {high}], got {value}")
    return value


class ReplayMemory:
    """Uniform experience replay; the base of the prioritized kinds.

    Args:
        capacity: transitions kept; the oldest is overwritten first.
        obs_shape: shape of one observation, e.g. ``(4,)`` or ``(4, 84, 84)``.
        obs_dtype: storage dtype of observations (uint8 frames stay uint8).
        seed: seed of the memory's own random generator (None: fresh entropy).
        dedup_frames: store stacked uint8 image observations ``(stack, height, width)`` one
            distinct frame at a time (``FrameStorage``) instead of whole ``obs``/``next_obs``.
        frame_slack: with ``dedup_frames``, extra frames for episode starts, as a fraction of
            ``capacity``.
    """

    kind = "uniform"

    def __init__(
        self,
        *,
        capacity: int,
        obs_shape: tuple[int, ...],
        obs_dtype: Any = np.float32,
        seed: int | None = None,
        dedup_frames: bool = False,
        frame_slack: float = 0.02,
    ) -> None:
        capacity = _positive_int("capacity", capacity)
        try:
            obs_shape = tuple(int(d) for d in obs_shape)
        except TypeError:
            raise TypeError(f"`obs_shape` must be a tuple of ints, got {obs_shape!r}") from None
        if any(d < 1 for d in obs_shape):
            raise ValueError(f"`obs_shape` dimensions must be >= 1, got {obs_shape}")
        if dedup_frames:
            self._storage = FrameStorage(capacity, obs_shape, obs_dtype, frame_slack)
        else:
            self._storage = TransitionStorage(capacity, obs_shape, obs_dtype)
        self._rng = np.random.default_rng(seed)

    @property
    def capacity(self) -> int:
        """Maximum number of transitions kept."""
        return self._storage.capacity

    def __len__(self) -> int:
        return self._storage.size

    @property
    def nbytes(self) -> int:
        """Bytes held by the memory's arrays: storage plus priority index."""
        return self._storage.nbytes + sum(a.nbytes for a in self._index_arrays())

    def _index_arrays(self) -> tuple[np.ndarray, ...]:
        return ()

    # --- writing -----------------------------------------------------------------------------

    def add(self, obs, action, reward, next_obs, terminated, n_steps: int = 1) -> int:
        """Stores one transition and returns its slot.

        ``n_steps`` is the number of env steps from ``obs`` to ``next_obs`` (1 unless the caller
        builds n-step returns); ``reward`` is then the discounted sum over those steps.

        Raises:
            ValueError: ``obs`` or ``next_obs`` of the wrong shape or of an uncastable dtype.
        """
        st = self._storage
        obs = st.check_obs("obs", obs, batched=False)
        next_obs = st.check_obs("next_obs", next_obs, batched=False)
        slot = st.write(obs, action, reward, next_obs, terminated, n_steps)
        self._on_insert_one(slot)
        return slot

    def add_batch(self, obs, actions, rewards, next_obs, terminated, n_steps=1) -> np.ndarray:
        """Stores ``B`` transitions (one vector-env step), in order; returns their slots.

        Raises:
            ValueError: a wrongly shaped observation batch or fields of different lengths.
        """
        st = self._storage
        obs = st.check_obs("obs", obs, batched=True)
        next_obs = st.check_obs("next_obs", next_obs, batched=True)
        actions = np.asarray(actions).reshape(-1)
        rewards = np.asarray(rewards).reshape(-1)
        terminated = np.asarray(terminated).reshape(-1)
        n = obs.shape[0]
        n_steps = np.broadcast_to(np.asarray(n_steps, dtype=np.uint8).reshape(-1), (n,))
        for name, arr in (
            ("next_obs", next_obs), ("actions", actions), ("rewards", rewards),
            ("terminated", terminated),
        ):  # fmt: skip
            if arr.shape[0] != n:
                raise ValueError(f"`{name}` must have {n} entries like `obs`, got {arr.shape[0]}")
        slots = st.write_batch(obs, actions, rewards, next_obs, terminated, n_steps)
        self._on_insert(slots)
        return slots

    def _on_insert_one(self, slot: int) -> None:
        pass

    def _on_insert(self, slots: np.ndarray) -> None:
        pass

    # --- sampling ----------------------------------------------------------------------------

    def sample(self, batch_size: int, beta: float = 1.0) -> Batch:
        """Draws a minibatch.

        Args:
            batch_size: number of transitions, at most ``len(self)``.
            beta: importance-sampling exponent in [0, 1] (ignored by uniform replay).

        Raises:
            ValueError: an empty memory, ``batch_size`` out of range, or ``beta`` outside [0, 1].
        """
        batch_size = _positive_int("batch_size", batch_size)
        size = self._storage.size
        if size == 0:
            raise ValueError("cannot sample from an empty replay memory")
        if batch_size > size:
            raise ValueError(
                f"`batch_size` must be <= stored transitions ({size}), got {batch_size}"
            )
        beta = _in_range("beta", beta, 0.0, 1.0)
        indices, weights = self._draw(batch_size, beta, size)
        return self._storage.gather(indices, weights)

    def _draw(self, batch_size: int, beta: float, size: int) -> tuple[np.ndarray, np.ndarray]:
        return self._rng.integers(0, size, batch_size), np.ones(batch_size)

    # --- priorities --------------------------------------------------------------------------

    def _check_update(self, indices, td_errors) -> tuple[np.ndarray, np.ndarray]:
        indices = np.asarray(indices)
        td_errors = np.asarray(td_errors, dtype=np.float64).reshape(-1)
        if indices.dtype.kind not in "iu":
            raise TypeError(f"`indices` must be integers, got dtype {indices.dtype}")
        indices = indices.astype(np.int64, copy=False).reshape(-1)
        if indices.shape != td_errors.shape:
            raise ValueError(
                f"`indices` and `td_errors` must have the same length, "
                f"got {indices.shape[0]} and {td_errors.shape[0]}"
            )
        bad = _kernels.first_out_of_range(indices, self._storage.size)
        if bad >= 0:
            raise ValueError(
                f"`indices` must lie in [0, {self._storage.size}) (stored transitions), "
                f"got {indices[bad]} at position {bad}"
            )
        bad = _kernels.first_invalid_error(td_errors)
        if bad >= 0:
            raise ValueError(
                f"`td_errors` must be finite and >= 0 (pass |delta|), "
                f"got {float(td_errors[bad])!r} at position {bad} (index {indices[bad]})"
            )
        return indices, td_errors

    def update_priorities(self, indices, td_errors) -> None:
        """Sets new priorities from absolute TD errors ``|delta|``; a no-op for uniform replay.

        The input is still validated, so a NaN loss is caught whichever memory is in use.

        Raises:
            ValueError: an index outside the stored range, or a NaN, infinite or negative error.
                Nothing is changed then.
        """
        self._check_update(indices, td_errors)

    # --- state -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: contents, priorities and RNG state."""
        return {
            "kind": self.kind,
            "storage": self._storage.state_dict(),
            "rng": self._rng.bit_generator.state,
        }

    def _check_kind(self, state: dict[str, Any]) -> None:
        if state.get("kind") != self.kind:
            raise ValueError(f"state is for a `{state.get('kind')}` memory, not `{self.kind}`")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict()`` output; raises ValueError if it is for another layout."""
        self._check_kind(state)
        self._storage.load_state_dict(state["storage"])
        self._rng.bit_generator.state = state["rng"]


class UniformReplay(ReplayMemory):
    """Uniform experience replay: every stored transition equally likely, weights all 1."""


class PrioritizedReplay(ReplayMemory):
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
        alpha: prioritisation exponent >= 0; 0.6 in the paper's proportional Atari runs.
        priority_eps: added to ``|delta|`` so no transition gets priority 0; > 0 (1e-6 default).
        td_error_clip: clip ``|delta|`` at this value before prioritising (None: no clip).
        uniform_mix: probability in [0, 1) that a draw is uniform instead of prioritized; the
            weights use the resulting mixture distribution.
        weight_normalization: ``"global"`` or ``"batch"``.
        **base: ``capacity``, ``obs_shape``, ``obs_dtype``, ``seed`` (see ``ReplayMemory``).
    """

    kind = "proportional"

    def __init__(
        self,
        *,
        alpha: float = 0.6,
        priority_eps: float = 1e-6,
        td_error_clip: float | None = None,
        uniform_mix: float = 0.0,
        weight_normalization: str = "global",
        **base: Any,
    ) -> None:
        self.alpha = _in_range("alpha", alpha, 0.0, np.inf)
        self.priority_eps = float(priority_eps)
        if not 0.0 < self.priority_eps < np.inf:
            raise ValueError(f"`priority_eps` must be > 0, got {priority_eps}")
        self.td_error_clip = None if td_error_clip is None else float(td_error_clip)
        if self.td_error_clip is not None and not 0.0 < self.td_error_clip < np.inf:
            raise ValueError(f"`td_error_clip` must be > 0 or None, got {td_error_clip}")
        self.uniform_mix = float(uniform_mix)
        if not 0.0 <= self.uniform_mix < 1.0:
            raise ValueError(f"`uniform_mix` must be in [0, 1), got {uniform_mix}")
        if weight_normalization not in _WEIGHT_NORMALIZATIONS:
            raise ValueError(
                f"`weight_normalization` must be one of {_WEIGHT_NORMALIZATIONS}, "
                f"got {weight_normalization!r}"
            )
        self.weight_normalization = weight_normalization
        super().__init__(**base)
        self._sum = SumTree(self.capacity)
        self._min = MinTree(self.capacity)
        self.max_priority = 1.0

    def _index_arrays(self) -> tuple[np.ndarray, ...]:
        return (self._sum._nodes, self._min._nodes)

    # Leaves are written through the kernels directly: slots come from the storage, so they are
    # in range by construction and the public trees' checks would only cost time.

    def _on_insert_one(self, slot: int) -> None:
        leaf = self.max_priority**self.alpha
        _kernels.sum_set_one(self._sum._nodes, self._sum._offset, slot, leaf)
        _kernels.min_set_one(self._min._nodes, self._min._offset, slot, leaf)

    def _on_insert(self, slots: np.ndarray) -> None:
        leaves = np.full(slots.shape[0], self.max_priority**self.alpha)
        _kernels.sum_set(self._sum._nodes, self._sum._offset, slots, leaves)
        _kernels.min_set(self._min._nodes, self._min._offset, slots, leaves)

    def _draw(self, batch_size: int, beta: float, size: int) -> tuple[np.ndarray, np.ndarray]:
        strata_u = self._rng.random(batch_size)
        if self.uniform_mix > 0.0:
            coin_u = self._rng.random(batch_size)
            uniform_idx = self._rng.integers(0, size, batch_size)
        else:
            coin_u = strata_u  # never below uniform_mix == 0, so never read as a coin
            uniform_idx = np.empty(batch_size, dtype=np.int64)
        indices = np.empty(batch_size, dtype=np.int64)
        weights = np.empty(batch_size)
        priorities = np.empty(batch_size)
        _kernels.proportional_sample(
            self._sum._nodes, self._min._nodes, self._sum._offset, size, beta, self.uniform_mix,
            self.weight_normalization == "batch", strata_u, coin_u, uniform_idx,
            indices, weights, priorities,
        )  # fmt: skip
        return indices, weights

    def update_priorities(self, indices, td_errors) -> None:
        """Sets ``p_i = (min(|delta_i|, clip) + priority_eps) ** alpha`` for each index.

        Repeated indices: the last error wins (see ``SumTree.update``).

        Raises:
            ValueError: an index outside the stored range, or a NaN, infinite or negative error.
                Nothing is changed then.
        """
        indices, td_errors = self._check_update(indices, td_errors)
        clip = np.inf if self.td_error_clip is None else self.td_error_clip
        max_raw = _kernels.proportional_update(
            self._sum._nodes, self._min._nodes, self._sum._offset, indices, td_errors,
            clip, self.priority_eps, self.alpha,
        )  # fmt: skip
        self.max_priority = max(self.max_priority, max_raw)

    def priorities(self, indices) -> np.ndarray:
        """Leaf priorities ``p_i`` (alpha applied) at ``indices``."""
        return self._sum[indices]

    @property
    def total_priority(self) -> float:
        """Sum of all leaf priorities (the sum tree's root)."""
        return self._sum.total

    @property
    def mean_priority(self) -> float:
        """Mean leaf priority over the stored transitions (0 when empty)."""
        return self._sum.total / len(self) if len(self) else 0.0

    def tree_drift(self) -> float:
        """Relative gap between the tree's root and an exact sum of its leaves (``math.fsum``).

        Parents are always recomputed from their children, so this stays at float rounding
        (~1e-16 * depth); a larger value means the tree is corrupt. O(capacity): call it rarely.
        """
        exact = math.fsum(self._sum.leaves)
        return abs(self._sum.total - exact) / exact if exact > 0 else 0.0

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["priorities"] = self._sum.leaves
        state["max_priority"] = self.max_priority
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_kind(state)
        priorities = np.asarray(state["priorities"], dtype=np.float64)
        if priorities.shape != (self.capacity,):
            raise ValueError(
                f"`priorities` must have shape ({self.capacity},), got {priorities.shape}"
            )
        super().load_state_dict(state)
        self._sum.set_leaves(priorities)
        mins = priorities.copy()
        mins[len(self) :] = np.inf  # unwritten slots must not win the min
        self._min.set_leaves(mins)
        self.max_priority = float(state["max_priority"])


class RankBasedReplay(ReplayMemory):
    """Rank-based prioritized replay (Schaul et al., 2016, Section 3.3 and Appendix B.2.1).

    ``P(i)`` is proportional to ``(1 / rank(i)) ** alpha``, where ``rank(i)`` is the position of
    transition ``i`` when the memory is sorted by ``|delta|`` in decreasing order. As in the paper,
    ranks come from an array-backed binary max-heap: its array is an approximately sorted list
    (``rank = heap position + 1``), and the array is fully re-sorted every ``sort_interval``
    priority updates.

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
        alpha: rank exponent >= 0; 0.7 in the paper's rank-based Atari runs.
        td_error_clip: clip ``|delta|`` at this value before ranking (None: no clip).
        sort_interval: priority updates between full re-sorts of the heap (>= 1).
        **base: ``capacity``, ``obs_shape``, ``obs_dtype``, ``seed`` (see ``ReplayMemory``).
    """

    kind = "rank"

    def __init__(
        self,
        *,
        alpha: float = 0.7,
        td_error_clip: float | None = None,
        sort_interval: int = 1000,
        **base: Any,
    ) -> None:
        self.alpha = _in_range("alpha", alpha, 0.0, np.inf)
        self.td_error_clip = None if td_error_clip is None else float(td_error_clip)
        if self.td_error_clip is not None and not 0.0 < self.td_error_clip < np.inf:
            raise ValueError(f"`td_error_clip` must be > 0 or None, got {td_error_clip}")
        self.sort_interval = _positive_int("sort_interval", sort_interval)
        super().__init__(**base)
        cap = self.capacity
        self._heap_slot = np.zeros(cap, dtype=np.int64)
        self._heap_key = np.zeros(cap, dtype=np.float64)
        # Insertion stamp of each heap entry: the tie-break between equal keys (newer is higher).
        self._heap_stamp = np.zeros(cap, dtype=np.int64)
        self._next_stamp = 0
        self._slot_pos = np.full(cap, -1, dtype=np.int64)
        self._heap_size = 0
        # cum_mass[r] = sum_{j=1}^{r+1} j^-alpha: alpha is applied here and nowhere else. Computed
        # in place, so building it needs no temporaries beyond the 8 bytes a slot it keeps.
        self._cum_mass = np.arange(1, cap + 1, dtype=np.float64)
        np.power(self._cum_mass, -self.alpha, out=self._cum_mass)
        np.cumsum(self._cum_mass, out=self._cum_mass)
        self.max_priority = 1.0
        self._updates_since_sort = 0

    def _index_arrays(self) -> tuple[np.ndarray, ...]:
        return (self._heap_slot, self._heap_key, self._heap_stamp, self._slot_pos, self._cum_mass)

    def _on_insert_one(self, slot: int) -> None:
        self._on_insert(np.array([slot], dtype=np.int64))

    def _on_insert(self, slots: np.ndarray) -> None:
        keys = np.full(slots.shape[0], self.max_priority)
        self._heap_size = _kernels.heap_set(
            self._heap_slot, self._heap_key, self._heap_stamp, self._slot_pos, self._heap_size,
            slots, keys, self._next_stamp,
        )  # fmt: skip
        self._next_stamp += slots.shape[0]

    def _draw(self, batch_size: int, beta: float, size: int) -> tuple[np.ndarray, np.ndarray]:
        bounds = np.empty(batch_size + 1, dtype=np.int64)
        _kernels.rank_boundaries(self._cum_mass, size, batch_size, bounds)
        u = self._rng.random(batch_size)
        indices = np.empty(batch_size, dtype=np.int64)
        weights = np.empty(batch_size)
        positions = np.empty(batch_size, dtype=np.int64)
        _kernels.rank_sample(bounds, self._heap_slot, beta, u, indices, weights, positions)
        return indices, weights

    def update_priorities(self, indices, td_errors) -> None:
        """Re-keys each index by ``min(|delta|, clip)``; re-sorts every ``sort_interval`` calls.

        Raises:
            ValueError: an index outside the stored range, or a NaN, infinite or negative error.
                Nothing is changed then.
        """
        indices, td_errors = self._check_update(indices, td_errors)
        if self.td_error_clip is not None:
            td_errors = np.minimum(td_errors, self.td_error_clip)
        _kernels.heap_set(
            self._heap_slot, self._heap_key, self._heap_stamp, self._slot_pos, self._heap_size,
            indices, td_errors, -1,
        )  # fmt: skip
        if td_errors.size:
            self.max_priority = max(self.max_priority, float(td_errors.max()))
        self._updates_since_sort += 1
        if self._updates_since_sort >= self.sort_interval:
            self.sort()

    def sort(self) -> None:
        """Sorts the heap array by decreasing ``|delta|``, ties newest first, so that positions
        are exact ranks (a sorted array is a valid heap)."""
        n = self._heap_size
        keys, stamps = self._heap_key[:n], self._heap_stamp[:n]
        order = np.argsort(keys)[::-1].copy()  # ties in any order, fixed next
        if not _kernels.break_ties_newest_first(order, keys, stamps, self._next_stamp - 1):
            order = np.lexsort((-stamps, -keys))  # never expected: stamps not contiguous
        self._heap_slot[:n] = self._heap_slot[:n][order]
        self._heap_key[:n] = self._heap_key[:n][order]
        self._heap_stamp[:n] = self._heap_stamp[:n][order]
        self._slot_pos[self._heap_slot[:n]] = np.arange(n)
        self._updates_since_sort = 0

    def priorities(self, indices) -> np.ndarray:
        """The ranking keys ``min(|delta|, clip)`` at ``indices``."""
        return self._heap_key[self._slot_pos[np.asarray(indices, dtype=np.int64)]]

    @property
    def mean_priority(self) -> float:
        """Mean ranking key ``|delta|`` over the stored transitions (0 when empty)."""
        n = self._heap_size
        return float(self._heap_key[:n].mean()) if n else 0.0

    def ranks(self, indices) -> np.ndarray:
        """Current 1-based rank (heap position + 1) of each stored index."""
        return self._slot_pos[np.asarray(indices, dtype=np.int64)] + 1

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        n = self._heap_size
        state["heap_slots"] = self._heap_slot[:n].copy()
        state["heap_keys"] = self._heap_key[:n].copy()
        state["heap_stamps"] = self._heap_stamp[:n].copy()
        state["next_stamp"] = self._next_stamp
        state["max_priority"] = self.max_priority
        state["updates_since_sort"] = self._updates_since_sort
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._check_kind(state)
        slots = np.asarray(state["heap_slots"], dtype=np.int64)
        keys = np.asarray(state["heap_keys"], dtype=np.float64)
        if "heap_stamps" not in state:
            raise ValueError(
                "rank-based state has no `heap_stamps` (written before new transitions were "
                "ranked above ties); it cannot be resumed exactly"
            )
        stamps = np.asarray(state["heap_stamps"], dtype=np.int64)
        size = int(np.asarray(state["storage"]["size"]))
        if slots.shape != (size,) or keys.shape != (size,) or stamps.shape != (size,):
            raise ValueError(f"heap arrays must have {size} entries, got {slots.shape[0]}")
        super().load_state_dict(state)
        self._heap_size = size
        self._heap_slot[:size] = slots
        self._heap_key[:size] = keys
        self._heap_stamp[:size] = stamps
        self._next_stamp = int(state["next_stamp"])
        self._slot_pos[:] = -1
        self._slot_pos[slots] = np.arange(size)
        self.max_priority = float(state["max_priority"])
        self._updates_since_sort = int(state["updates_since_sort"])
