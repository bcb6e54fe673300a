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

The trees own their numba kernels (``py``): the replay memory's samplers call only the
methods below, so the methods the tests pin are the code training runs. Two kinds of method:

- checked (``update``, ``find_prefix_sum``, ``set_leaves``, ``[]``): validate their input and
  raise ``ValueError`` naming the bad value, changing nothing;
- trusted (``write``, ``write_one``, ``write_both``, ``write_both_one``, ``sample``,
  ``sample_proportional``, ``update_proportional``): the hot
  path of a replay memory, whose slots come from its storage and whose errors it has already
  validated. They skip the checks (which would cost a measurable share of a 32-item call) and say
  so in their docstrings; an out-of-range slot there is undefined behaviour, not an error.

One module though past 500 lines: the sum and min trees share their layout and their kernels
(the fused sample and update walk both trees at once), so they are one data structure.
"""

from __future__ import annotations

import numba
import numpy as np

# --- kernels --------------------------------------------------------------------------------------
#
# JIT-compiled inner loops: a plain loop over a batch (32 to 256 items) or one root-to-leaf path,
# compiled once (cached on disk), so that a whole batch costs one call instead of ~20 numpy calls
# per tree level (``benchmarks/replay.py`` shows the difference against a vectorised-numpy
# descent). They take raw arrays and never validate: the classes below check their input first
# (or say that they trust it). Layout: ``nodes[1]`` is the root, node ``i`` has children ``2i``
# and ``2i + 1``, and leaf ``k`` lives at ``nodes[leaf_offset + k]``; ``nodes[0]`` is unused.

_jit = numba.njit(cache=True, nogil=True)


@_jit
def sum_set(nodes, leaf_offset, indices, values):  # pragma: no cover - compiled
    """Writes leaves and recomputes every ancestor as the sum of its two children."""
    for k in range(indices.shape[0]):
        pos = leaf_offset + indices[k]
        nodes[pos] = values[k]
        pos >>= 1
        while pos >= 1:
            nodes[pos] = nodes[2 * pos] + nodes[2 * pos + 1]
            pos >>= 1


@_jit
def sum_set_one(nodes, leaf_offset, index, value):  # pragma: no cover - compiled
    """``sum_set`` for a single leaf, without allocating index/value arrays."""
    pos = leaf_offset + index
    nodes[pos] = value
    pos >>= 1
    while pos >= 1:
        nodes[pos] = nodes[2 * pos] + nodes[2 * pos + 1]
        pos >>= 1


@_jit
def min_set(nodes, leaf_offset, indices, values):  # pragma: no cover - compiled
    """Writes leaves and recomputes every ancestor as the min of its two children."""
    for k in range(indices.shape[0]):
        pos = leaf_offset + indices[k]
        nodes[pos] = values[k]
        pos >>= 1
        while pos >= 1:
            nodes[pos] = min(nodes[2 * pos], nodes[2 * pos + 1])
            pos >>= 1


@_jit
def min_set_one(nodes, leaf_offset, index, value):  # pragma: no cover - compiled
    """``min_set`` for a single leaf."""
    pos = leaf_offset + index
    nodes[pos] = value
    pos >>= 1
    while pos >= 1:
        nodes[pos] = min(nodes[2 * pos], nodes[2 * pos + 1])
        pos >>= 1


@_jit
def sum_min_set(sum_nodes, min_nodes, leaf_offset, indices, values):  # pragma: no cover
    """``sum_set`` and ``min_set`` of the same leaves in one call (a proportional insert)."""
    for k in range(indices.shape[0]):
        pos = leaf_offset + indices[k]
        sum_nodes[pos] = values[k]
        min_nodes[pos] = values[k]
        pos >>= 1
        while pos >= 1:
            sum_nodes[pos] = sum_nodes[2 * pos] + sum_nodes[2 * pos + 1]
            min_nodes[pos] = min(min_nodes[2 * pos], min_nodes[2 * pos + 1])
            pos >>= 1


@_jit
def sum_min_set_one(sum_nodes, min_nodes, leaf_offset, index, value):  # pragma: no cover
    """``sum_min_set`` for a single leaf, without allocating index/value arrays."""
    pos = leaf_offset + index
    sum_nodes[pos] = value
    min_nodes[pos] = value
    pos >>= 1
    while pos >= 1:
        sum_nodes[pos] = sum_nodes[2 * pos] + sum_nodes[2 * pos + 1]
        min_nodes[pos] = min(min_nodes[2 * pos], min_nodes[2 * pos + 1])
        pos >>= 1


@_jit
def _descend(nodes, leaf_offset, masses, out):  # pragma: no cover - compiled
    # All masses go down one level together: the loads of different masses are independent, so
    # the CPU overlaps their cache misses instead of waiting out ~20 dependent misses per mass
    # (the tree of a 1M memory is 16 MB, far beyond cache).
    #
    # Invariant per mass: the current node's value is > 0. Going right needs the right child to
    # be > 0; going left needs ``mass < left``, which with ``mass >= 0`` means left > 0. Rounding
    # can leave ``mass`` >= the right child after the subtraction; the descent then keeps to the
    # rightmost non-empty leaf of that subtree, never to an empty one.
    batch = masses.shape[0]
    for k in range(batch):
        out[k] = 1
    pos_limit = leaf_offset
    width = 1
    while width < pos_limit:
        for k in range(batch):
            pos = out[k]
            left = nodes[2 * pos]
            right = nodes[2 * pos + 1]
            if masses[k] < left or right <= 0.0:
                out[k] = 2 * pos
            else:
                masses[k] -= left
                out[k] = 2 * pos + 1
        width *= 2
    for k in range(batch):
        out[k] -= leaf_offset


@_jit
def sum_find(nodes, leaf_offset, masses, out):  # pragma: no cover - compiled
    """For each mass, the leaf whose prefix-sum interval ``[c_{i-1}, c_i)`` contains it."""
    _descend(nodes, leaf_offset, masses.copy(), out)


@_jit
def sum_sample(nodes, leaf_offset, uniforms, out_idx, out_p):  # pragma: no cover - compiled
    """Independent draws: draw ``k`` takes the leaf holding mass ``uniforms[k] * total``; writes
    the leaves and their values."""
    total = nodes[1]
    batch = uniforms.shape[0]
    masses = np.empty(batch)
    for k in range(batch):
        masses[k] = uniforms[k] * total
    _descend(nodes, leaf_offset, masses, out_idx)
    for k in range(batch):
        out_p[k] = nodes[leaf_offset + out_idx[k]]


@_jit
def proportional_sample(
    sum_nodes,
    min_nodes,
    leaf_offset,
    size,
    beta,
    uniform_mix,
    batch_norm,
    strata_u,
    coin_u,
    uniform_idx,
    out_idx,
    out_w,
    out_p,
):  # pragma: no cover - compiled
    """Stratified proportional sampling, optional uniform mixture, and IS weights.

    Draw ``k`` of ``B`` takes mass ``(k + u_k) * total / B``; with probability ``uniform_mix`` it is
    replaced by a uniform index. The sampling probability is the mixture
    ``P(i) = m / N + (1 - m) p_i / total`` and ``w_i = (N P(i))^-beta`` divided by the largest
    possible weight (from the min tree) or by the batch's largest weight.
    """
    total = sum_nodes[1]
    batch = strata_u.shape[0]
    segment = total / batch
    masses = np.empty(batch)
    for k in range(batch):
        masses[k] = (k + strata_u[k]) * segment
    _descend(sum_nodes, leaf_offset, masses, out_idx)
    for k in range(batch):
        if coin_u[k] < uniform_mix:
            out_idx[k] = uniform_idx[k]
    for k in range(batch):
        out_p[k] = sum_nodes[leaf_offset + out_idx[k]]
    # w_i / w_max = (P_min / P(i))^beta: N cancels, so alpha = 0 gives weights of exactly 1.
    if batch_norm:
        p_ref = np.inf
        for k in range(batch):
            p_ref = min(p_ref, uniform_mix / size + (1.0 - uniform_mix) * out_p[k] / total)
    else:
        p_ref = uniform_mix / size + (1.0 - uniform_mix) * min_nodes[1] / total
    for k in range(batch):
        prob = uniform_mix / size + (1.0 - uniform_mix) * out_p[k] / total
        out_w[k] = (p_ref / prob) ** beta


@_jit
def proportional_update(
    sum_nodes,
    min_nodes,
    leaf_offset,
    indices,
    td_errors,
    clip,
    eps,
    alpha,
):  # pragma: no cover - compiled
    """Writes ``(min(|delta|, clip) + eps) ** alpha`` leaves into both trees; returns max raw.

    The input must already be validated. Leaves are written in order (a repeated index keeps its
    last value), then the ancestors of all of them are recomputed one level at a time, which is
    idempotent for shared ancestors and lets the cache misses of different paths overlap.
    """
    batch = indices.shape[0]
    max_raw = 0.0
    pos = np.empty(batch, dtype=np.int64)
    for k in range(batch):
        raw = min(td_errors[k], clip) + eps
        max_raw = max(max_raw, raw)
        leaf = raw**alpha
        pos[k] = leaf_offset + indices[k]
        sum_nodes[pos[k]] = leaf
        min_nodes[pos[k]] = leaf
    width = leaf_offset
    while width > 1:
        for k in range(batch):
            p = pos[k] >> 1
            pos[k] = p
            sum_nodes[p] = sum_nodes[2 * p] + sum_nodes[2 * p + 1]
            min_nodes[p] = min(min_nodes[2 * p], min_nodes[2 * p + 1])
        width >>= 1
    return max_raw


@_jit
def first_invalid_error(td_errors):  # pragma: no cover - compiled
    """Index of the first NaN, infinite or negative value, or -1."""
    for k in range(td_errors.shape[0]):
        v = td_errors[k]
        if not (v >= 0.0 and v < np.inf):
            return k
    return -1


@_jit
def first_out_of_range(indices, upper):  # pragma: no cover - compiled
    """Index of the first entry outside ``[0, upper)``, or -1."""
    for k in range(indices.shape[0]):
        if indices[k] < 0 or indices[k] >= upper:
            return k
    return -1


@_jit
def first_invalid_update(indices, upper, td_errors):  # pragma: no cover - compiled
    """``first_out_of_range`` then ``first_invalid_error`` in one call (one dispatch on the
    update path): ``k >= 0`` if index ``k`` is outside ``[0, upper)``, else ``-2 - k`` if error
    ``k`` is NaN, infinite or negative, else -1."""
    for k in range(indices.shape[0]):
        if indices[k] < 0 or indices[k] >= upper:
            return k
    for k in range(td_errors.shape[0]):
        v = td_errors[k]
        if not (v >= 0.0 and v < np.inf):
            return -2 - k
    return -1


# --- the trees ------------------------------------------------------------------------------------


def checked_capacity(capacity: object) -> int:
    """``capacity`` as an int >= 1 (a tree's leaves, a heap's entries).

    Raises:
        TypeError: not an int (a bool included).
        ValueError: below 1.
    """
    if isinstance(capacity, bool) or not isinstance(capacity, int | np.integer):
        raise TypeError(f"`capacity` must be an int, got {type(capacity).__name__}")
    if capacity < 1:
        raise ValueError(f"`capacity` must be >= 1, got {capacity}")
    return int(capacity)


def _leaf_offset(capacity: int) -> int:
    return 1 << max(0, int(capacity) - 1).bit_length()


class _SegmentTree:
    _fill: float = 0.0
    # The kernels that write leaves and recompute their ancestors (set per subclass).
    _set = staticmethod(sum_set)
    _set_one = staticmethod(sum_set_one)

    def __init__(self, capacity: int) -> None:
        self.capacity = checked_capacity(capacity)
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
        bad = first_out_of_range(indices, self.capacity)
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
    def nbytes(self) -> int:
        """Bytes held by the node array (``2 * P`` float64 nodes)."""
        return self._nodes.nbytes

    @staticmethod
    def planned_nbytes(capacity: int) -> int:
        """``nbytes`` of a tree of ``capacity`` leaves, without allocating it."""
        return 2 * _leaf_offset(capacity) * np.dtype(np.float64).itemsize

    def write(self, slots: np.ndarray, values: np.ndarray) -> None:
        """Sets leaves ``slots`` to ``values`` in order (the last of a repeated slot wins) and
        recomputes their ancestors: ``update`` without its checks.

        Trusts its input: ``slots`` an int64 array of indices in ``[0, capacity)`` (a replay
        memory's storage hands them out), ``values`` a float64 array of the same length that is
        valid for the tree. Use ``update`` for anything else.
        """
        self._set(self._nodes, self._offset, slots, values)

    def write_one(self, slot: int, value: float) -> None:
        """``write`` for one leaf, without allocating arrays (one ``add``). Trusts its input."""
        self._set_one(self._nodes, self._offset, slot, value)

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
        self.write(indices, values)

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
        sum_find(self._nodes, self._offset, masses, out)
        return out

    def sample(self, uniforms: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Independent draws in proportion to the leaves, in one pass: draw ``k`` takes the leaf
        holding mass ``uniforms[k] * total`` (``find_prefix_sum``'s descent).

        Trusts its input: the tree is not empty and ``uniforms`` is a float64 array in [0, 1)
        (every mass is then below the total: ``u`` is at most ``1 - 2**-53``, and any positive
        double times that rounds below it).

        Returns:
            ``(indices, priorities)``: int64 leaves and their float64 values.
        """
        batch = uniforms.shape[0]
        indices = np.empty(batch, dtype=np.int64)
        priorities = np.empty(batch)
        sum_sample(self._nodes, self._offset, uniforms, indices, priorities)
        return indices, priorities

    def write_both(self, mins: MinTree, slots: np.ndarray, values: np.ndarray) -> None:
        """``write`` of the same leaves into this tree and ``mins``, in one kernel call.

        Trusts its input, as ``write`` does; ``mins`` of the same capacity.
        """
        self._check_pair(mins)
        sum_min_set(self._nodes, mins._nodes, self._offset, slots, values)

    def write_both_one(self, mins: MinTree, slot: int, value: float) -> None:
        """``write_both`` for one leaf, without allocating arrays (one add). Trusts its input."""
        self._check_pair(mins)
        sum_min_set_one(self._nodes, mins._nodes, self._offset, slot, value)

    def sample_proportional(
        self,
        mins: MinTree,
        size: int,
        beta: float,
        strata_u: np.ndarray,
        uniform_mix: float = 0.0,
        coin_u: np.ndarray | None = None,
        uniform_idx: np.ndarray | None = None,
        batch_norm: bool = False,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Stratified proportional sampling with importance-sampling weights, in one pass.

        Draw ``k`` of ``B = len(strata_u)`` takes the leaf holding mass
        ``(k + strata_u[k]) * total / B`` (Schaul et al., 2016, Appendix B.2.1: one draw in each
        of ``B`` equal slices of the total). Where ``coin_u[k] < uniform_mix`` the draw is
        replaced by ``uniform_idx[k]``. With ``P(i) = m / N + (1 - m) p_i / total`` (``m`` the
        mix, ``N = size``), the weights are ``w_i = (N P(i)) ** -beta`` divided by the largest
        possible weight (``mins``, the min tree over the same leaves) or, with ``batch_norm``,
        by the batch's largest.

        Trusts its input: the tree is not empty, ``mins`` holds the same leaves (+inf beyond
        ``size``), ``size`` is the number of written leaves, ``beta`` is in [0, 1], the uniforms
        are in [0, 1) and ``uniform_idx`` in ``[0, size)``. ``find_prefix_sum`` is the checked
        descent (the same kernel).

        Returns:
            ``(indices, weights, priorities)``: int64 leaves, float64 weights and the float64
            leaf values ``p_i`` of the drawn leaves.
        """
        self._check_pair(mins)
        batch = strata_u.shape[0]
        if coin_u is None:
            coin_u = strata_u  # never below uniform_mix == 0, so never read as a coin
            uniform_idx = np.empty(batch, dtype=np.int64)
        indices = np.empty(batch, dtype=np.int64)
        weights = np.empty(batch)
        priorities = np.empty(batch)
        proportional_sample(
            self._nodes, mins._nodes, self._offset, size, beta, uniform_mix, batch_norm,
            strata_u, coin_u, uniform_idx, indices, weights, priorities,
        )  # fmt: skip
        return indices, weights, priorities

    def update_proportional(
        self,
        mins: MinTree,
        indices: np.ndarray,
        td_errors: np.ndarray,
        clip: float,
        eps: float,
        alpha: float,
    ) -> float:
        """Sets leaves ``p_i = (min(|delta_i|, clip) + eps) ** alpha`` here and in ``mins``.

        Both trees' paths are recomputed one level at a time for the whole batch, so the cache
        misses of different paths overlap. Repeated indices: the last error wins.

        Trusts its input: ``indices`` int64 in ``[0, capacity)``, ``td_errors`` float64, finite
        and >= 0, of the same length; ``mins`` of the same capacity.

        Returns:
            The largest raw priority ``min(|delta|, clip) + eps`` of the batch (0 when empty).
        """
        self._check_pair(mins)
        return proportional_update(
            self._nodes, mins._nodes, self._offset, indices, td_errors, clip, eps, alpha
        )

    def _check_pair(self, mins: MinTree) -> None:
        # The kernels index both node arrays with this tree's layout: a smaller partner would be
        # written out of bounds (numba does not check), so this one check is always paid; it
        # compares layouts rather than calling isinstance, the cheapest test on this path.
        if mins._offset != self._offset:
            raise ValueError(f"`mins` must be a MinTree of capacity {self.capacity}, got {mins!r}")

    def _validate_values(self, values: np.ndarray) -> None:
        bad = first_invalid_error(values)
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
    _set = staticmethod(min_set)
    _set_one = staticmethod(min_set_one)

    def update(self, indices, values) -> None:
        """Sets leaves ``indices`` to ``values``; repeated indices: the last value wins.

        Raises:
            ValueError: an index outside ``[0, capacity)`` or a NaN value. Nothing is changed then.
        """
        indices, values = self._check(indices, values)
        self._validate_values(values)
        self.write(indices, values)

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
