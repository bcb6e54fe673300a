"""The two baselines of ``benchmarks/replay.py``, proportional PER without per_dqn's numba
kernels: a textbook pure-Python sum tree (``PurePythonReplay``) and a vectorised-numpy one
(``NumpyReplay``), each a ``Sampler`` in a ``ReplayMemory`` with per_dqn's storage and gather; and
the check that both draw what per_dqn's proportional memory draws.

Not a benchmark on its own: ``replay.py`` times them beside per_dqn's memories. Only the public
API of ``per_dqn.memory`` is used.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from per_dqn.memory import PriorityUpdate, ReplayMemory, Sampler, make_memory, make_storage


def _check_update_elementwise(memory: ReplayMemory, indices, td_errors) -> PriorityUpdate:
    """The textbook check of an update: one Python comparison per element."""
    size = len(memory)
    indices = np.asarray(indices)
    td_errors = np.asarray(td_errors, dtype=np.float64)
    for index, td_error in zip(indices.tolist(), td_errors.tolist(), strict=True):
        if not 0 <= index < size:
            raise ValueError(f"`indices` must lie in [0, {size}), got {index}")
        if not 0.0 <= td_error < math.inf:
            raise ValueError(f"`td_errors` must be finite and >= 0, got {td_error!r}")
    return PriorityUpdate(indices.astype(np.int64, copy=False), td_errors)


class PurePythonSampler(Sampler):
    """Proportional PER with the textbook pure-Python sum and min trees.

    The trees are Python lists of floats; every leaf write walks its root path in a Python loop,
    and every draw descends the sum tree in a Python loop, one element at a time. Same maths as
    ``ProportionalSampler`` with ``uniform_mix=0`` and global weight normalisation; the strata come
    from the same numpy generator so that ``check_baselines_agree`` can compare draws.
    """

    kind = "proportional"
    weighted = True

    def __init__(
        self, capacity: int, alpha: float = 0.6, priority_eps: float = 1e-6, seed: int = 0
    ) -> None:
        super().__init__(capacity, seed)
        self.alpha = float(alpha)
        self.priority_eps = float(priority_eps)
        self._offset = 1 << max(0, self.capacity - 1).bit_length()
        self._sum = [0.0] * (2 * self._offset)
        self._min = [math.inf] * (2 * self._offset)
        self.max_priority = 1.0

    @staticmethod
    def planned_nbytes(capacity: int) -> int:
        return 2 * 2 * (1 << max(0, capacity - 1).bit_length()) * 8  # as float64 arrays

    @property
    def nbytes(self) -> int:
        return self.planned_nbytes(self.capacity)  # Python lists hold more

    def _set(self, slot: int, leaf: float) -> None:
        sums, mins = self._sum, self._min
        pos = self._offset + slot
        sums[pos] = leaf
        mins[pos] = leaf
        pos >>= 1
        while pos >= 1:
            left = 2 * pos
            sums[pos] = sums[left] + sums[left + 1]
            mins[pos] = min(mins[left], mins[left + 1])
            pos >>= 1

    def on_insert(self, slots: int | np.ndarray) -> None:
        leaf = self.max_priority**self.alpha
        if not isinstance(slots, np.ndarray):
            self._set(slots, leaf)
            return
        for slot in slots.tolist():
            self._set(slot, leaf)

    def draw(self, batch_size: int, beta: float, size: int):
        sums, offset = self._sum, self._offset
        segment = sums[1] / batch_size
        least = self._min[1]
        indices: list[int] = []
        weights: list[float] = []
        priorities: list[float] = []
        for k, u in enumerate(self.rng.random(batch_size).tolist()):
            mass = (k + u) * segment  # stratified: one draw in each of B equal segments
            pos = 1
            while pos < offset:
                left = sums[2 * pos]
                if mass < left or sums[2 * pos + 1] <= 0.0:
                    pos = 2 * pos
                else:
                    mass -= left
                    pos = 2 * pos + 1
            indices.append(pos - offset)
            priorities.append(sums[pos])
            weights.append((least / sums[pos]) ** beta)  # (P_min / P(i)) ** beta
        return np.array(indices, dtype=np.int64), np.array(weights), np.array(priorities)

    def update(self, update: PriorityUpdate) -> None:
        """Sets ``p_i = (|delta_i| + priority_eps) ** alpha``, one element at a time."""
        for index, td_error in zip(update.indices.tolist(), update.td_abs.tolist(), strict=True):
            raw = td_error + self.priority_eps
            self._set(index, raw**self.alpha)
            self.max_priority = max(self.max_priority, raw)

    def diagnostics(self, full: bool = False) -> dict[str, float]:
        return {"max_priority": self.max_priority}


class PurePythonReplay(ReplayMemory):
    """A ``ReplayMemory`` (per_dqn's storage, gather and ``sample`` checks) over
    ``PurePythonSampler``, whose updates are checked element by element in Python as well."""

    def __init__(self, *, capacity: int, obs_shape: tuple[int, ...], alpha: float = 0.6,
                 seed: int = 0, obs_dtype: Any = np.float32) -> None:  # fmt: skip
        super().__init__(
            make_storage(capacity, obs_shape, obs_dtype),
            PurePythonSampler(capacity, alpha, seed=seed),
        )

    def update_priorities(self, indices, td_errors) -> None:
        self.sampler.update(_check_update_elementwise(self, indices, td_errors))


class NumpySampler(Sampler):
    """``ProportionalSampler`` with vectorised numpy in place of the numba kernels.

    Its own float64 sum and min trees have ``SumTree``'s layout; only the four hot paths differ:

    - batch leaf writes go up the tree one level at a time for the whole batch (all ancestors are
      computed up front; parents are recomputed from their children, so a parent shared by two
      leaves just gets the same value twice);
    - a single add recomputes its whole root path at once: the new value of the ``k``-th ancestor
      is the leaf plus its ``k`` lower siblings, a ``cumsum`` (``minimum.accumulate`` for the min
      tree), which is bit-identical to recomputing parent after parent;
    - the descent is level by level over the whole batch;
    - updates are checked with numpy reductions instead of the numba scans (``NumpyReplay``).

    Supports only the configuration benchmarked: ``uniform_mix=0``, no ``td_error_clip`` and
    global weight normalisation.
    """

    kind = "proportional"
    weighted = True

    def __init__(
        self, capacity: int, alpha: float = 0.6, priority_eps: float = 1e-6, seed: int = 0
    ) -> None:
        super().__init__(capacity, seed)
        self.alpha = float(alpha)
        self.priority_eps = float(priority_eps)
        self.max_priority = 1.0
        self._offset = 1 << max(0, self.capacity - 1).bit_length()
        self._sum_nodes = np.zeros(2 * self._offset)
        self._min_nodes = np.full(2 * self._offset, np.inf)
        self._depth = self._offset.bit_length() - 1
        self._path_shifts = np.arange(self._depth + 1, dtype=np.int64)
        self._path_values = np.empty(self._depth + 1)
        self._level_shifts = self._path_shifts[1:, None]
        self._strata: dict[int, np.ndarray] = {}

    @staticmethod
    def planned_nbytes(capacity: int) -> int:
        return 2 * 2 * (1 << max(0, capacity - 1).bit_length()) * 8  # two float64 trees

    @property
    def nbytes(self) -> int:
        return self._sum_nodes.nbytes + self._min_nodes.nbytes

    def on_insert(self, slots: int | np.ndarray) -> None:
        leaf = self.max_priority**self.alpha
        if isinstance(slots, np.ndarray):
            self._write_leaves(slots, np.full(slots.shape[0], leaf))
            return
        path = (self._offset + slots) >> self._path_shifts  # leaf, parent, ..., root
        siblings = path[:-1] ^ 1
        values = self._path_values
        for nodes, accumulate in (
            (self._sum_nodes, np.add.accumulate),
            (self._min_nodes, np.minimum.accumulate),
        ):
            values[0] = leaf
            values[1:] = nodes[siblings]
            accumulate(values, out=values)
            nodes[path] = values

    def _write_leaves(self, slots: np.ndarray, leaves: np.ndarray) -> None:
        # All ancestors and their children come from three whole-batch ops up front; the levels
        # are then fixed bottom-up, one gather-combine-scatter per tree and level. With repeated
        # slots numpy does not promise which value lands (in practice the last); ancestors are
        # recomputed from their children either way, so the trees stay consistent.
        leaf_pos = slots + self._offset
        ancestors = leaf_pos >> self._level_shifts  # row k: the ancestors k + 1 levels up
        left = ancestors << 1
        right = left + 1
        sums, mins = self._sum_nodes, self._min_nodes
        sums[leaf_pos] = leaves
        mins[leaf_pos] = leaves
        for parent, lo, hi in zip(ancestors, left, right, strict=True):
            sums[parent] = sums[lo] + sums[hi]
            mins[parent] = np.minimum(mins[lo], mins[hi])

    def draw(self, batch_size: int, beta: float, size: int):
        # Temporaries are allocated per level on purpose: on numpy 2 a fresh ``nodes[child]`` is
        # several times cheaper than ``np.take(..., out=)``, and ``where=`` ufuncs cost more than
        # the multiply they save (measured on the benchmark machine).
        nodes = self._sum_nodes
        strata = self._strata.get(batch_size)
        if strata is None:
            strata = self._strata[batch_size] = np.arange(batch_size, dtype=np.float64)
        masses = (strata + self.rng.random(batch_size)) * (nodes[1] / batch_size)
        child = np.full(batch_size, 2, dtype=np.int64)  # left child of the current node
        for _ in range(self._depth):
            left = nodes[child]
            go_right = masses >= left
            masses -= left * go_right
            child += go_right
            child <<= 1
        indices = (child >> 1) - self._offset
        # Every stored leaf is > 0 and they are contiguous from slot 0, so a draw that rounding
        # pushed past the last stored leaf belongs to it (the numba descent checks right > 0).
        np.minimum(indices, size - 1, out=indices)
        priorities = nodes[indices + self._offset]
        weights = (self._min_nodes[1] / priorities) ** beta
        return indices, weights, priorities

    def update(self, update: PriorityUpdate) -> None:
        if not update.indices.size:
            return
        raw = update.td_abs + self.priority_eps
        self._write_leaves(update.indices, raw**self.alpha)
        self.max_priority = max(self.max_priority, float(raw.max()))

    def diagnostics(self, full: bool = False) -> dict[str, float]:
        return {"max_priority": self.max_priority}


class NumpyReplay(ReplayMemory):
    """A ``ReplayMemory`` over ``NumpySampler``, whose updates are checked with numpy reductions
    (instead of the memory's numba scans)."""

    def __init__(self, *, capacity: int, obs_shape: tuple[int, ...], alpha: float = 0.6,
                 seed: int = 0, obs_dtype: Any = np.float32) -> None:  # fmt: skip
        super().__init__(
            make_storage(capacity, obs_shape, obs_dtype), NumpySampler(capacity, alpha, seed=seed)
        )

    def update_priorities(self, indices, td_errors) -> None:
        indices = np.asarray(indices)
        if indices.dtype.kind not in "iu":
            raise TypeError(f"`indices` must be integers, got dtype {indices.dtype}")
        indices = indices.astype(np.int64, copy=False).reshape(-1)
        td_errors = np.asarray(td_errors, dtype=np.float64).reshape(-1)
        if indices.shape != td_errors.shape:
            raise ValueError("`indices` and `td_errors` must have the same length")
        if indices.size:
            if indices.min() < 0 or indices.max() >= len(self):
                raise ValueError(f"`indices` must lie in [0, {len(self)})")
            lowest, highest = td_errors.min(), td_errors.max()  # min propagates NaN
            if not (lowest >= 0.0 and highest < np.inf):
                raise ValueError("`td_errors` must be finite and >= 0 (pass |delta|)")
        self.sampler.update(PriorityUpdate(indices, td_errors))


def check_baselines_agree(obs_shape: tuple[int, ...], beta: float) -> None:
    """Raises if a baseline draws other indices or weights than per_dqn's proportional memory.

    Same seed, same fills and updates (a capacity that is not a power of two, a ring that has
    wrapped, repeated indices in one update): the stratified draws must pick the same slots, and
    the weights must agree to rounding. Observations of ``obs_shape``, batches drawn at ``beta``.
    """
    rng = np.random.default_rng(1)
    capacity = 37
    kwargs: dict[str, Any] = dict(capacity=capacity, obs_shape=obs_shape, seed=5, alpha=0.6)
    memories = [
        make_memory("proportional", **kwargs),
        NumpyReplay(**kwargs),
        PurePythonReplay(**kwargs),
    ]
    obs = rng.standard_normal((45, *obs_shape)).astype(np.float32)
    zeros = np.zeros(30)
    for memory in memories:
        memory.add_batch(obs[:30], zeros, zeros, obs[:30], zeros.astype(bool))
    for round_ in range(20):
        if round_ < 15:
            for memory in memories:
                memory.add(obs[30 + round_], 1, 1.0, obs[30 + round_], False)
        batches = [memory.sample(16, beta) for memory in memories]
        for memory, batch in zip(memories[1:], batches[1:], strict=True):
            if not np.array_equal(batch.indices, batches[0].indices) or not np.allclose(
                batch.weights, batches[0].weights, rtol=1e-6
            ):
                raise AssertionError(
                    f"{type(memory).__name__} disagrees with per_dqn proportional: "
                    f"{batch.indices} {batch.weights} vs {batches[0].indices} {batches[0].weights}"
                )
        td_errors = np.abs(rng.standard_normal(16)) * 3
        for memory in memories:
            memory.update_priorities(batches[0].indices, td_errors)
