"""The array-backed binary max-heap of rank-based prioritized replay.

Schaul et al. (2016, Appendix B.2.1) keep the transitions in a binary heap ordered by ``|delta|``
and read its array as an approximately sorted list: the transition at array position ``r - 1`` has
rank ``r``. The array is fully re-sorted now and then (a sorted array is a valid heap), which makes
the positions exact ranks again.

Layout (5 entries; ``slot`` is the memory slot, ``key`` its ``|delta|``, ``stamp`` its insertion
number; position ``p`` has children ``2p + 1`` and ``2p + 2``)::

    position   0      1      2      3      4
    slot       3      0      4      1      2
    key       2.0    1.0    1.0    0.5    0.25
    stamp      3      0      4      1      2

Order is lexicographic on ``(key, stamp)``: a larger key ranks higher, and between equal keys the
newer transition (larger stamp) does. New transitions enter with the largest key seen so far
(Algorithm 1: "store transition with maximal priority"), so without the stamp a new transition
tied with every clipped ``|delta|`` and could sink to the bottom (see ``RankSampler``, ``rank.py``).

Like the trees, the heap owns its numba kernels (``py``). ``insert``, ``update`` and
``sample_segments`` are the replay memory's hot path and trust their input (slots handed out by
the storage, errors already validated); ``keys``, ``ranks`` and ``load_state_dict`` check theirs.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from per_dqn.memory.trees import checked_capacity, first_out_of_range

_jit = numba.njit(cache=True, nogil=True)  # as the trees' and the frames' kernels

# --- rank-based: an array-backed binary max-heap over (|delta|, insertion stamp) ------------------
#
# Heap order is lexicographic: a larger key ranks higher, and between equal keys the later
# insertion stamp (the newer transition) ranks higher. Without the stamp a new transition enters
# with key == the running max and, under td_error_clip, ties with every clipped transition; a
# strict sift-up then leaves it near the bottom, where it waits longer than under uniform replay
# for its first replay. Schaul et al. (2016, Algorithm 1) put new transitions at the top.


@_jit
def _above(heap_key, heap_stamp, a, b):  # pragma: no cover - compiled
    """True if heap entry ``a`` ranks strictly above entry ``b``."""
    ka = heap_key[a]
    kb = heap_key[b]
    return ka > kb or (ka == kb and heap_stamp[a] > heap_stamp[b])


@_jit
def _heap_swap(heap_slot, heap_key, heap_stamp, slot_pos, a, b):  # pragma: no cover - compiled
    sa = heap_slot[a]
    sb = heap_slot[b]
    heap_slot[a] = sb
    heap_slot[b] = sa
    ka = heap_key[a]
    heap_key[a] = heap_key[b]
    heap_key[b] = ka
    ta = heap_stamp[a]
    heap_stamp[a] = heap_stamp[b]
    heap_stamp[b] = ta
    slot_pos[sb] = a
    slot_pos[sa] = b


@_jit
def _heap_sift(heap_slot, heap_key, heap_stamp, slot_pos, size, pos):  # pragma: no cover
    # Up while above the parent, else down while below the higher child.
    moved = False
    while pos > 0:
        parent = (pos - 1) >> 1
        if _above(heap_key, heap_stamp, pos, parent):
            _heap_swap(heap_slot, heap_key, heap_stamp, slot_pos, pos, parent)
            pos = parent
            moved = True
        else:
            break
    if moved:
        return
    while True:
        child = 2 * pos + 1
        if child >= size:
            return
        if child + 1 < size and _above(heap_key, heap_stamp, child + 1, child):
            child += 1
        if _above(heap_key, heap_stamp, child, pos):
            _heap_swap(heap_slot, heap_key, heap_stamp, slot_pos, pos, child)
            pos = child
        else:
            return


@_jit
def heap_set(
    heap_slot, heap_key, heap_stamp, slot_pos, size, slots, keys, first_stamp
):  # pragma: no cover - compiled
    """Sets the key of each slot (inserting absent slots) and restores the heap; returns size.

    ``first_stamp >= 0`` marks the slots as new transitions (an insert, or a slot overwritten
    after wrap-around): slot ``k`` gets stamp ``first_stamp + k``. ``first_stamp < 0`` is a
    priority update: stamps stay as they are.
    """
    for k in range(slots.shape[0]):
        slot = slots[k]
        pos = slot_pos[slot]
        if pos < 0:
            pos = size
            size += 1
            heap_slot[pos] = slot
            slot_pos[slot] = pos
        heap_key[pos] = keys[k]
        if first_stamp >= 0:
            heap_stamp[pos] = first_stamp + k
        _heap_sift(heap_slot, heap_key, heap_stamp, slot_pos, size, pos)
    return size


@_jit
def break_ties_newest_first(order, keys, stamps, newest_stamp):  # pragma: no cover - compiled
    """Reorders each run of equal keys in ``order`` (heap positions sorted by key, descending)
    newest stamp first, in O(n); returns False, changing nothing, if there are ties and the
    stamps are not the contiguous range ``newest_stamp - n + 1 .. newest_stamp``.

    A second full sort by stamp (``np.lexsort``) costs three times the key sort at 2**20 entries.
    The live stamps are always contiguous, because the ring overwrites its oldest slot, so one
    pass over the entries newest first deals every tied entry to the next free place of its run.
    """
    n = order.shape[0]
    run_start = np.full(n, -1, dtype=np.int64)  # per heap position, in a tie run: its start
    next_free = np.empty(n, dtype=np.int64)
    ties = False
    i = 0
    while i < n:
        j = i + 1
        key = keys[order[i]]
        while j < n and keys[order[j]] == key:
            j += 1
        if j - i > 1:
            ties = True
            next_free[i] = i
            for m in range(i, j):
                run_start[order[m]] = i
        i = j
    if not ties:
        return True  # the key sort is the ranking; the stamps are not needed
    by_age = np.full(n, -1, dtype=np.int64)  # by_age[newest_stamp - stamp] = heap position
    for p in range(n):
        age = newest_stamp - stamps[p]
        if age < 0 or age >= n or by_age[age] >= 0:
            return False
        by_age[age] = p
    for age in range(n):
        p = by_age[age]
        start = run_start[p]
        if start >= 0:
            order[next_free[start]] = p
            next_free[start] += 1
    return True


@_jit
def rank_boundaries(cum_mass, size, batch, out):  # pragma: no cover - compiled
    """Splits ranks ``0..size-1`` into ``batch`` segments of (nearly) equal probability mass.

    ``cum_mass[r]`` is ``sum_{j<=r} (1/(j+1))^alpha``. Segment ``k`` is ``[out[k], out[k+1])``:
    the ranks whose cumulative mass falls in ``(k/B, (k+1)/B]`` of the total. A rank heavier than
    ``1/B`` would empty a segment, so boundaries are then pushed apart to keep every segment
    non-empty; the IS weights use the segments as they are, so they stay exact.
    """
    total = cum_mass[size - 1]
    out[0] = 0
    out[batch] = size
    for k in range(1, batch):
        target = total * k / batch
        lo = 0
        hi = size
        while lo < hi:  # first rank whose cumulative mass exceeds the target
            mid = (lo + hi) >> 1
            if cum_mass[mid] <= target:
                lo = mid + 1
            else:
                hi = mid
        out[k] = lo
    for k in range(1, batch + 1):
        if out[k] <= out[k - 1]:
            out[k] = out[k - 1] + 1
    for k in range(batch - 1, 0, -1):
        if out[k] > size - (batch - k):
            out[k] = size - (batch - k)


@_jit
def rank_sample(bounds, heap_slot, heap_key, beta, u, out_idx, out_w, out_key):  # pragma: no cover
    """One uniform draw inside each rank segment, and exact IS weights for that distribution;
    ``out_key`` gets the drawn entries' keys.

    A rank in segment ``k`` of ``n_k`` ranks is drawn with probability ``P = 1 / (B n_k)``, so
    ``w = (N P)^-beta``, normalised by the largest possible weight, that of the largest segment.
    Every segment is drawn once per batch, so the batch's largest weight is that same weight:
    global and batch normalisation coincide here.
    """
    batch = u.shape[0]
    largest = 0
    for k in range(batch):
        n_k = bounds[k + 1] - bounds[k]
        largest = max(largest, n_k)
        pos = bounds[k] + int(u[k] * n_k)
        if pos >= bounds[k + 1]:
            pos = bounds[k + 1] - 1
        out_key[k] = heap_key[pos]
        out_idx[k] = heap_slot[pos]
    # w_k / w_max = (P_min / P_k)^beta = (n_k / n_max)^beta
    for k in range(batch):
        out_w[k] = ((bounds[k + 1] - bounds[k]) / largest) ** beta


# --- the heap -------------------------------------------------------------------------------------


class RankHeap:
    """Binary max-heap of memory slots keyed by ``(|delta|, insertion stamp)``.

    Args:
        capacity: the most entries it holds (the memory's capacity), an int >= 1.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = checked_capacity(capacity)
        self._slot = np.zeros(self.capacity, dtype=np.int64)  # position -> slot
        self._key = np.zeros(self.capacity, dtype=np.float64)  # position -> |delta|
        self._stamp = np.zeros(self.capacity, dtype=np.int64)  # position -> insertion stamp
        self._pos = np.full(self.capacity, -1, dtype=np.int64)  # slot -> position (-1: absent)
        self._size = 0
        self._next_stamp = 0

    def __repr__(self) -> str:
        return f"RankHeap(capacity={self.capacity}, size={self._size})"

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        """Bytes of the four arrays (slots, keys, stamps, positions): 32 per entry of capacity."""
        return self._slot.nbytes + self._key.nbytes + self._stamp.nbytes + self._pos.nbytes

    @staticmethod
    def planned_nbytes(capacity: int) -> int:
        """``nbytes`` of a heap of ``capacity`` entries, without allocating it."""
        return int(capacity) * 4 * 8

    # --- the hot path (trusted input) ---------------------------------------------------------

    def insert(self, slots: np.ndarray, key: float) -> None:
        """Enters ``slots`` as new transitions with ``key``, each newer than all before it.

        A slot already in the heap (overwritten after the ring wrapped) is re-keyed and gets a new
        stamp; an absent one is appended. Either way it then sifts to its place, so a new
        transition with the largest key goes to the top.

        Trusts its input: ``slots`` an int64 array of slots in ``[0, capacity)`` (a slot listed
        twice, as when one batch wraps the ring, ends with its later stamp).
        """
        keys = np.full(slots.shape[0], key)
        self._size = heap_set(
            self._slot, self._key, self._stamp, self._pos, self._size, slots, keys,
            self._next_stamp,
        )  # fmt: skip
        self._next_stamp += slots.shape[0]

    def update(self, slots: np.ndarray, keys: np.ndarray) -> None:
        """Re-keys each slot (in order: a repeated slot keeps its last key); stamps stay.

        Trusts its input: ``slots`` int64, all in the heap; ``keys`` float64, finite and >= 0.
        """
        heap_set(self._slot, self._key, self._stamp, self._pos, self._size, slots, keys, -1)

    def sample_segments(
        self, bounds: np.ndarray, u: np.ndarray, beta: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One position drawn uniformly inside each segment ``[bounds[k], bounds[k + 1])``.

        A position in segment ``k`` of ``n_k`` positions is drawn with probability
        ``P = 1 / (B n_k)``, so ``w = (N P) ** -beta`` normalised by the largest possible weight,
        that of the largest segment: ``(n_k / n_max) ** beta``. Every segment is drawn once per
        batch, so the batch's largest weight is that same weight.

        Trusts its input: ``bounds`` int64 of ``B + 1`` strictly increasing positions from 0 to
        ``len(self)``; ``u`` ``B`` uniforms in [0, 1); ``beta`` in [0, 1].

        Returns:
            ``(slots, weights, keys)``: the drawn slots (int64), their weights and their keys
            (float64, the ranking keys ``|delta|`` at the drawn positions).
        """
        batch = u.shape[0]
        slots = np.empty(batch, dtype=np.int64)
        weights = np.empty(batch)
        keys = np.empty(batch)
        rank_sample(bounds, self._slot, self._key, beta, u, slots, weights, keys)
        return slots, weights, keys

    def sort(self) -> None:
        """Sorts the array by decreasing key, ties newest first, so that positions are exact
        ranks (a sorted array is a valid heap)."""
        n = self._size
        keys, stamps = self._key[:n], self._stamp[:n]
        order = np.argsort(keys)[::-1].copy()  # ties in any order, fixed next
        if not break_ties_newest_first(order, keys, stamps, self._next_stamp - 1):
            order = np.lexsort((-stamps, -keys))  # never expected: stamps not contiguous
        self._slot[:n] = self._slot[:n][order]
        self._key[:n] = self._key[:n][order]
        self._stamp[:n] = self._stamp[:n][order]
        self._pos[self._slot[:n]] = np.arange(n)

    # --- reading (checked) ---------------------------------------------------------------------

    def _positions(self, slots) -> np.ndarray:
        slots = np.asarray(slots, dtype=np.int64)
        flat = slots.reshape(-1)
        bad = first_out_of_range(flat, self.capacity)
        if bad < 0:
            positions = self._pos[slots]
            bad = first_out_of_range(positions.reshape(-1), self.capacity)
        if bad >= 0:
            raise ValueError(
                f"`slots` must be slots in the heap, got {int(flat[bad])} at position {bad}"
            )
        return positions

    def keys(self, slots) -> np.ndarray:
        """The keys ``|delta|`` of ``slots``.

        Raises:
            ValueError: a slot that is not in the heap.
        """
        return self._key[self._positions(slots)]

    def ranks(self, slots) -> np.ndarray:
        """The 1-based rank (array position + 1) of each of ``slots``.

        Raises:
            ValueError: a slot that is not in the heap.
        """
        return self._positions(slots) + 1

    def order(self) -> np.ndarray:
        """A copy of the slots in array order (rank 1 first; exact ranks right after ``sort``)."""
        return self._slot[: self._size].copy()

    def mean_key(self) -> float:
        """Mean key over the entries (0 when empty)."""
        n = self._size
        return float(self._key[:n].mean()) if n else 0.0

    # --- state ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The entries in array order, and the next insertion stamp (copies)."""
        n = self._size
        return {
            "heap_slots": self._slot[:n].copy(),
            "heap_keys": self._key[:n].copy(),
            "heap_stamps": self._stamp[:n].copy(),
            "next_stamp": self._next_stamp,
        }

    def check_state(self, state: dict[str, Any], size: int) -> None:
        """Raises ValueError, changing nothing, unless ``state`` holds ``size`` entries."""
        if "heap_stamps" not in state:
            raise ValueError(
                "rank-based state has no `heap_stamps` (written before new transitions were "
                "ranked above ties); it cannot be resumed exactly"
            )
        shapes = [np.shape(state[name]) for name in ("heap_slots", "heap_keys", "heap_stamps")]
        if size > self.capacity or any(shape != (size,) for shape in shapes):
            got = ", ".join(str(shape[0]) if shape else "a scalar" for shape in shapes)
            raise ValueError(f"heap arrays must have {size} entries, got {got}")

    def load_state_dict(self, state: dict[str, Any], size: int) -> None:
        """Restores ``state_dict()`` output holding ``size`` entries (see ``check_state``)."""
        self.check_state(state, size)
        slots = np.asarray(state["heap_slots"], dtype=np.int64)
        self._size = size
        self._slot[:size] = slots
        self._key[:size] = np.asarray(state["heap_keys"], dtype=np.float64)
        self._stamp[:size] = np.asarray(state["heap_stamps"], dtype=np.int64)
        self._next_stamp = int(state["next_stamp"])
        self._pos[:] = -1
        self._pos[slots] = np.arange(size)
