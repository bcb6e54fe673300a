"""Bool observations (MinAtar's object layers) eight cells a byte, each next observation once.

``BitObservations`` is the observation store of ``BitStorage``; ``initial_pool_entries`` and
``link_dtype`` say what it allocates, for ``planned_nbytes`` and ``per-dqn plan``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from per_dqn.memory.storage import RING_FIELDS, NamedStorage, ObservationStore, filled

# A fresh BitStorage's pool holds one next observation for every POOL_PERIOD transitions (at
# least MIN_POOL_ENTRIES): a slot needs one only where its next observation never comes back as a
# later obs, about once an episode, and random play on Seaquest ends an episode every 32 steps
# (MinAtar v1.0.15, 20k steps: 617 episodes). It grows by half whenever more are needed.
POOL_PERIOD = 32
MIN_POOL_ENTRIES = 64


def initial_pool_entries(capacity: int) -> int:
    """Pool entries a fresh ``BitStorage`` of ``capacity`` allocates (at most ``capacity``)."""
    return min(capacity, max(MIN_POOL_ENTRIES, -(-capacity // POOL_PERIOD)))


def link_dtype(capacity: int) -> np.dtype:
    """The integer type of ``BitStorage``'s links: int32 unless ``capacity`` needs more."""
    return np.dtype(np.int32 if capacity < 2**31 else np.int64)


class BitObservations(ObservationStore):
    """Bool observations packed eight cells a byte, each next observation stored once.

    Every slot keeps its ``obs`` as ``np.packbits`` of the flattened observation (a Seaquest
    observation of 10 x 10 x 10 cells takes 125 bytes instead of 1,000) and a link saying where
    its ``next_obs`` lives (``next_ref``, int32)::

        next_ref[s] >= 0   next_obs of s == obs[next_ref[s]], a slot written at or after s
        next_ref[s] <  0   next_obs of s == pool[~next_ref[s]], an entry of the overflow pool

    On a write, the new packed ``obs`` is looked up among the pool's contents (a dict keyed by the
    packed bytes): the slots waiting for exactly these bytes link to the new slot and their entry
    is freed. The new ``next_obs`` links to the slot itself if it equals its ``obs`` (nothing
    moved), else it joins the pool entry holding the same bytes, or takes a new one. So in a
    stream ``obs_{t+1} == next_obs_t`` a transition's next observation costs a 4-byte link; only a
    slot whose next observation never comes back as a later ``obs`` keeps an entry: an episode's
    last transitions (terminated or truncated; with n-step returns, the windows ending there share
    one entry), and for a few writes the newest slots (n-step: ``s_{t+n}`` is written as an
    ``obs`` n transitions later; with several envs, after the other envs' transitions).

    Exact by construction, whatever the number of envs, n, episode ends or repeated observations:
    a link is made only between byte-equal rows, and only to the slot itself or to a slot written
    after it. The ring overwrites slots oldest first, so a link's target outlives its source, and
    a pool entry is freed when its last slot is overwritten. ``gather`` returns bit for bit what
    was written. The pool's contents are distinct, so it never holds more entries than there are
    slots whose next observation is not any later slot's obs.

    ``nbytes`` counts the arrays (obs, links, the pool and its free list). Beside them the dict of
    the pool's contents and the lists of their slots take Python objects, a few hundred bytes per
    entry in use.

    Args:
        capacity: number of transitions kept.
        obs_shape: shape of one observation.
        obs_dtype: must be bool.
        pool_entries: the pool's first size (default ``initial_pool_entries(capacity)``); it
            grows by half whenever full.

    Attributes:
        obs: the packed observations, ``uint8[capacity, row_bytes]``.
        next_ref: each slot's link to its next observation.
        pool: the next observations no later slot's obs holds, ``uint8[entries, row_bytes]``.
    """

    state_order = ("obs", "next_ref", *RING_FIELDS, "pool", "pool_free", "cursor", "size")

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        obs_dtype=np.bool_,
        pool_entries: int | None = None,
    ) -> None:
        if np.dtype(obs_dtype) != np.bool_:
            raise ValueError(f"`obs_dtype` must be bool for bit-packed storage, got {obs_dtype}")
        super().__init__(capacity, obs_shape, np.bool_)
        if pool_entries is None:
            pool_entries = initial_pool_entries(self.capacity)
        if not 1 <= pool_entries <= self.capacity:
            raise ValueError(
                f"`pool_entries` must be in [1, capacity={self.capacity}], got {pool_entries}"
            )
        self._cells = int(np.prod(self.obs_shape))
        self.row_bytes = (self._cells + 7) // 8
        self.obs = np.zeros((self.capacity, self.row_bytes), dtype=np.uint8)
        self.next_ref = np.zeros(self.capacity, dtype=link_dtype(self.capacity))
        self._empty_pool(int(pool_entries))

    def _empty_pool(self, entries: int) -> None:
        self.pool = np.zeros((entries, self.row_bytes), dtype=np.uint8)
        # A stack of free entries, entry 0 on top; `free_count` of them are free.
        self.pool_free = np.arange(entries - 1, -1, -1, dtype=self.next_ref.dtype)
        self.free_count = entries
        self._pending: dict[bytes, int] = {}  # an entry's packed bytes -> the entry
        self._sources: dict[int, list[int]] = {}  # entry -> its slots, oldest first

    @property
    def nbytes(self) -> int:
        """Bytes of the packed obs, the links, the pool as allocated now and its free list."""
        return self.obs.nbytes + self.next_ref.nbytes + self.pool.nbytes + self.pool_free.nbytes

    @classmethod
    def planned_nbytes(cls, capacity: int, obs_shape: tuple[int, ...], obs_dtype, **options) -> int:
        """Packed obs and a next-obs link a slot; the pool's rows and free list as first
        allocated (the floor: it grows by half whenever more next observations wait in it)."""
        row = (math.prod(int(d) for d in obs_shape) + 7) // 8
        return (capacity + initial_pool_entries(capacity)) * (row + link_dtype(capacity).itemsize)

    @property
    def pool_used(self) -> int:
        """Pool entries in use: distinct next observations that no later slot's obs holds."""
        return self.pool.shape[0] - self.free_count

    def _pack(self, obs: np.ndarray, batched: bool) -> np.ndarray:
        flat = np.asarray(obs, dtype=np.bool_).reshape((obs.shape[0], -1) if batched else (-1,))
        return np.packbits(flat, axis=-1)

    def _unpack(self, packed: np.ndarray) -> np.ndarray:
        cells = np.unpackbits(packed, axis=-1, count=self._cells)
        return cells.view(np.bool_).reshape(packed.shape[0], *self.obs_shape)

    # --- the pool --------------------------------------------------------------------------

    def _take_entry(self) -> int:
        if self.free_count == 0:  # at most capacity - 1 are in use here: the slot was released
            old = self.pool.shape[0]
            new = min(self.capacity, max(old + 1, old + old // 2))
            pool = np.zeros((new, self.row_bytes), dtype=np.uint8)
            pool[:old] = self.pool
            self.pool = pool
            self.pool_free = np.arange(new - 1, -1, -1, dtype=self.next_ref.dtype)
            self.free_count = new - old  # the new entries, lowest on top
        self.free_count -= 1
        return int(self.pool_free[self.free_count])

    def _free_entry(self, entry: int) -> None:
        self.pool_free[self.free_count] = entry
        self.free_count += 1

    def _release(self, slot: int) -> None:
        """Forgets the transition at ``slot``, the oldest stored, before it is overwritten."""
        ref = int(self.next_ref[slot])
        if ref >= 0:  # its next obs is a slot's obs, not older than its own: nothing to free
            return
        entry = ~ref
        sources = self._sources[entry]
        sources.remove(slot)
        if not sources:
            del self._sources[entry]
            del self._pending[self.pool[entry].tobytes()]
            self._free_entry(entry)

    def _place(self, slot: int, row: np.ndarray, next_row: np.ndarray, evicts: bool) -> None:
        """Stores packed ``row`` at ``slot`` and links ``next_row`` (``evicts``: slot in use)."""
        if evicts:
            self._release(slot)
        self.obs[slot] = row
        key = row.tobytes()
        entry = self._pending.pop(key, None)
        if entry is not None:
            # Earlier slots wait for exactly this observation: they link to this slot, written
            # after them, so the ring overwrites it after them.
            for source in self._sources.pop(entry):
                self.next_ref[source] = slot
            self._free_entry(entry)
        next_key = next_row.tobytes()
        if next_key == key:  # nothing moved from s_t to s_{t+n}: the slot's own obs
            self.next_ref[slot] = slot
            return
        entry = self._pending.get(next_key)
        if entry is None:
            entry = self._take_entry()
            self.pool[entry] = next_row
            self._pending[next_key] = entry
            self._sources[entry] = [slot]
        else:  # another waiting slot has the same next obs (an episode's last n-step windows)
            self._sources[entry].append(slot)
        self.next_ref[slot] = ~entry

    # --- writing and reading -----------------------------------------------------------------

    def write(self, slot: int, obs: np.ndarray, next_obs: np.ndarray, evicts: bool) -> None:
        """Packs and places one transition's observations."""
        self._place(slot, self._pack(obs, False), self._pack(next_obs, False), evicts)

    def write_batch(
        self, slots: np.ndarray, obs: np.ndarray, next_obs: np.ndarray, skip: int, free: int
    ) -> None:
        """Packs ``B`` transitions' observations and places them one by one, in write order."""
        n = obs.shape[0]
        if skip:  # the kept items overwrite every stored transition: start from an empty pool
            self._empty_pool(self.pool.shape[0])
        kept = slots[skip:]
        rows, next_rows = self._pack(obs[skip:], True), self._pack(next_obs[skip:], True)
        # In write order: a link may only point to a slot written after its source.
        for k in range(n - skip):
            self._place(int(kept[k]), rows[k], next_rows[k], k >= free)

    def gather(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Observations unpacked to bool; next ones from the linked slot or the pool."""
        refs = self.next_ref[indices]
        # A pool reference ~e is negative and indexes `obs` from the end (-capacity <= ~e < 0):
        # harmless, as those rows are replaced by the pool's right after.
        next_rows = self.obs[refs]
        pooled = refs < 0
        if pooled.any():
            next_rows[pooled] = self.pool[~refs[pooled]]
        return self._unpack(self.obs[indices]), self._unpack(next_rows)

    # --- state -------------------------------------------------------------------------------

    def state_dict(self, size: int, copy: bool = True) -> dict[str, Any]:
        """Packed obs and links of the ``size`` filled slots, the pool and its free entries (in
        stack order)."""
        return {
            "obs": filled(self.obs, size, copy),
            "next_ref": filled(self.next_ref, size, copy),
            "pool": self.pool.copy() if copy else self.pool,
            "pool_free": filled(self.pool_free, self.free_count, copy),
        }

    def templates(self, state: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """``obs`` and ``next_ref``, or for the layout that stored ``next_obs`` whole
        (checkpoints written before the sharing) ``obs`` and ``next_obs``, both packed."""
        if "next_ref" not in state and "next_obs" in state:
            return {"obs": self.obs, "next_obs": self.obs}
        return {"obs": self.obs, "next_ref": self.next_ref}

    def load_state_dict(self, state: Mapping[str, Any], cursor: int, size: int) -> None:
        """Restores the links and the pool, refusing links this store would never make."""
        if "next_ref" not in state and "next_obs" in state:
            self._load_unshared(state, cursor, size)
            return
        for name in ("pool", "pool_free"):
            if name not in state:
                raise ValueError(f"storage field `{name}` is missing")
        pool, free = np.asarray(state["pool"]), np.asarray(state["pool_free"])
        if pool.ndim != 2 or pool.dtype != np.uint8 or pool.shape[1] != self.row_bytes:
            raise ValueError(
                f"storage field `pool` must be uint8[n, {self.row_bytes}], "
                f"got {pool.dtype}{list(pool.shape)}"
            )
        entries = pool.shape[0]
        if not 1 <= entries <= self.capacity:
            raise ValueError(
                f"storage `pool` must have 1 to {self.capacity} entries, got {entries}"
            )
        if free.ndim != 1 or free.dtype.kind not in "iu" or len(set(free.tolist())) != free.size:
            raise ValueError(f"storage `pool_free` must be distinct entries, got {free!r}")
        if free.size and not (0 <= free.min() and free.max() < entries):
            raise ValueError(f"storage `pool_free` must lie in [0, {entries}), got {free!r}")
        # The live slots, oldest first; each link must point to the slot itself or a younger one.
        order = (cursor - size + np.arange(size)) % self.capacity
        refs = np.asarray(state["next_ref"])[order]
        age = np.full(self.capacity, -1, dtype=np.int64)
        age[order] = np.arange(size)
        linked = refs >= 0
        targets = refs[linked]
        if (targets >= self.capacity).any() or (age[targets] < np.flatnonzero(linked)).any():
            raise ValueError("storage `next_ref` links a slot to an older or empty slot")
        if (~refs[~linked] >= entries).any():
            raise ValueError(f"storage `next_ref` points past the pool's {entries} entries")
        sources: dict[int, list[int]] = {}
        for slot, ref in zip(order[~linked].tolist(), refs[~linked].tolist(), strict=True):
            sources.setdefault(~ref, []).append(slot)
        if set(sources) & set(free.tolist()) or len(sources) + free.size != entries:
            raise ValueError(
                f"storage `pool_free` must list exactly the {entries - len(sources)} entries "
                f"no slot uses, got {free.size}"
            )
        pending = {pool[entry].tobytes(): entry for entry in sources}
        if len(pending) != len(sources):
            raise ValueError("storage `pool` holds one next observation twice")
        for name in ("obs", "next_ref"):
            rows = np.asarray(state[name])
            getattr(self, name)[: len(rows)] = rows
        self.pool = pool.copy()
        self.pool_free = np.zeros(entries, dtype=self.next_ref.dtype)
        self.pool_free[: free.size] = free
        self.free_count = int(free.size)
        self._pending, self._sources = pending, sources

    def _load_unshared(self, state: Mapping[str, Any], cursor: int, size: int) -> None:
        """Loads packed ``obs`` and ``next_obs`` per slot, linking as it goes, oldest first."""
        obs, next_obs = np.asarray(state["obs"]), np.asarray(state["next_obs"])
        self._empty_pool(initial_pool_entries(self.capacity))
        self.next_ref[...] = 0
        for slot in ((cursor - size + np.arange(size)) % self.capacity).tolist():
            self._place(slot, obs[slot], next_obs[slot], False)
        self.obs[: len(obs)] = obs


class BitStorage(NamedStorage):
    """A ``RingStorage`` of ``BitObservations``: bool observations eight cells a byte, each next
    observation stored once. Its arguments are ``BitObservations``': ``capacity``,
    ``obs_shape``, ``obs_dtype`` (bool) and ``pool_entries``.
    """

    observation_store = BitObservations
