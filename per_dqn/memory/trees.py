"""Sum and min segment trees over float64 leaves, for proportional prioritized replay.

Layout (capacity 5, rounded up to 8 leaves; ``nodes[0]`` is unused)::

                          [1] = 10
                 /                    \\
            [2] = 10                  [3] = 0
           /        \\               /       \\
       [4] = 3     [5] = 7       [6] = 0     [7] = 0
       /    \\      /    \\       /    \\      /    \\
     [8]=1 [9]=2 [10]=3 [11]=4 [12]=0 [13]=0 [14]=0 [15]=0
     leaf0 leaf1 leaf2  leaf3  leaf4  (padding: never written)

Node ``i`` has children ``2i`` and ``2i + 1``; leaf ``k`` is ``nodes[P + k]`` with ``P`` the
capacity rounded up to a power of two, so any capacity >= 1 works. Every write recomputes the
ancestors from their children (never ``parent += delta``), so the root cannot drift from the sum of
the leaves however many updates it has seen.

``find_prefix_sum`` is the descent of Schaul et al. (2016), Appendix B.2.1: a mass ``m`` in
``[0, total)`` selects the leaf ``i`` with ``c_{i-1} <= m < c_i``, ``c_i`` being the sum of leaves
``0..i``. Leaves of value 0 own an empty interval and are never returned.
"""

from __future__ import annotations

import numpy as np

from per_dqn.memory import _kernels


def _leaf_offset(capacity: int) -> int:
    return 1 << max(0, int(capacity) - 1).bit_length()


class _SegmentTree:
    _fill: float = 0.0

    def __init__(self, capacity: int) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int | np.integer):
            raise TypeError(f"`capacity` must be an int, got {type(capacity).__name__}")
        if capacity < 1:
            raise ValueError(f"`capacity` must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._offset = _leaf_offset(self.capacity)
        self._nodes = np.full(2 * self._offset, self._fill, dtype=np.float64)

    def _check(self, indices, values) -> tuple[np.ndarray, np.ndarray]:
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        if indices.shape != values.shape:
            raise ValueError(
                f"`indices` and `values` must have the same length, "
                f"got {indices.shape[0]} and {values.shape[0]}"
            )
        bad = _kernels.first_out_of_range(indices, self.capacity)
        if bad >= 0:
            raise ValueError(
                f"`indices` must lie in [0, {self.capacity}), got {indices[bad]} at position {bad}"
            )
        return indices, values

    def __getitem__(self, indices):
        """Leaf values at ``indices`` (an int or an array of ints)."""
        idx = np.asarray(indices, dtype=np.int64)
        if np.any(idx < 0) or np.any(idx >= self.capacity):
            raise ValueError(f"`indices` must lie in [0, {self.capacity}), got {indices}")
        return self._nodes[self._offset + idx]

    @property
    def leaves(self) -> np.ndarray:
        """A copy of the ``capacity`` leaf values."""
        return self._nodes[self._offset : self._offset + self.capacity].copy()

    def set_leaves(self, values) -> None:
        """Replaces every leaf at once and rebuilds the tree bottom-up (used to restore state)."""
        values = np.asarray(values, dtype=np.float64)
        if values.shape != (self.capacity,):
            raise ValueError(f"`values` must have shape ({self.capacity},), got {values.shape}")
        self._validate_values(values)
        self._nodes[:] = self._fill
        self._nodes[self._offset : self._offset + self.capacity] = values
        level = self._offset
        while level > 1:
            children = self._nodes[level : 2 * level]
            self._nodes[level // 2 : level] = self._combine(children[0::2], children[1::2])
            level //= 2

    def _validate_values(self, values: np.ndarray) -> None:
        raise NotImplementedError

    @staticmethod
    def _combine(left: np.ndarray, right: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class SumTree(_SegmentTree):
    """Sum segment tree: O(log n) leaf updates, O(1) total, O(log n) prefix-sum search.

    Args:
        capacity: number of leaves, any int >= 1.
    """

    _fill = 0.0

    def update(self, indices, values) -> None:
        """Sets leaves ``indices`` to ``values`` (both 1-D, same length) and fixes their ancestors.

        Repeated indices in one call are applied in order, so the last value wins: a batch that
        sampled the same transition twice leaves the priority from its last TD error. This is
        deterministic (numpy's fancy assignment promises no order for duplicates).

        Raises:
            ValueError: an index outside ``[0, capacity)`` or a negative, NaN or infinite value.
                Nothing is changed then.
        """
        indices, values = self._check(indices, values)
        self._validate_values(values)
        _kernels.sum_set(self._nodes, self._offset, indices, values)

    @property
    def total(self) -> float:
        """The sum of all leaves."""
        return float(self._nodes[1])

    def find_prefix_sum(self, masses) -> np.ndarray:
        """For each mass, the index of the leaf whose prefix-sum interval contains it.

        Args:
            masses: floats in ``[0, total)``.

        Returns:
            int64 leaf indices, one per mass. The result is always a leaf of value > 0, also when
            float rounding pushes a mass past a subtree's sum.

        Raises:
            ValueError: the tree is empty (total 0) or a mass lies outside ``[0, total)``.
        """
        masses = np.asarray(masses, dtype=np.float64).reshape(-1)
        total = self._nodes[1]
        if not total > 0.0:
            raise ValueError("find_prefix_sum on an empty tree (total is 0)")
        bad = np.flatnonzero(~((masses >= 0.0) & (masses < total)))
        if bad.size:
            raise ValueError(
                f"`masses` must lie in [0, total={float(total)!r}), got {float(masses[bad[0]])!r} "
                f"at position {bad[0]}"
            )
        out = np.empty(masses.shape[0], dtype=np.int64)
        _kernels.sum_find(self._nodes, self._offset, masses, out)
        return out

    def _validate_values(self, values: np.ndarray) -> None:
        bad = _kernels.first_invalid_error(values)
        if bad >= 0:
            raise ValueError(
                f"sum-tree values must be finite and >= 0, "
                f"got {float(values[bad])!r} at position {bad}"
            )

    @staticmethod
    def _combine(left: np.ndarray, right: np.ndarray) -> np.ndarray:
        return left + right


class MinTree(_SegmentTree):
    """Min segment tree: O(log n) leaf updates and O(1) minimum; unwritten leaves are +inf.

    Args:
        capacity: number of leaves, any int >= 1.
    """

    _fill = np.inf

    def update(self, indices, values) -> None:
        """Sets leaves ``indices`` to ``values``; repeated indices: the last value wins.

        Raises:
            ValueError: an index outside ``[0, capacity)`` or a NaN value. Nothing is changed then.
        """
        indices, values = self._check(indices, values)
        self._validate_values(values)
        _kernels.min_set(self._nodes, self._offset, indices, values)

    @property
    def min(self) -> float:
        """The smallest leaf (+inf while no leaf has been written)."""
        return float(self._nodes[1])

    def _validate_values(self, values: np.ndarray) -> None:
        nan = np.flatnonzero(np.isnan(values))
        if nan.size:
            raise ValueError(f"min-tree values must not be NaN, got NaN at position {nan[0]}")

    @staticmethod
    def _combine(left: np.ndarray, right: np.ndarray) -> np.ndarray:
        return np.minimum(left, right)
