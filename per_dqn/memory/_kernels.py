"""JIT-compiled inner loops of the replay memory.

Everything here is a plain loop over a batch (32 to 256 items) or one root-to-leaf path; numba
compiles it once (cached on disk) so that a whole batch costs one call instead of ~20 numpy calls
per tree level. ``benchmarks/replay.py`` shows the difference against a vectorised-numpy descent.

The functions take raw arrays and never validate: the public classes in ``trees.py`` and
``replay.py`` check their input first, so a bad call changes nothing.

Tree layout shared by all tree kernels: ``nodes[1]`` is the root, node ``i`` has children ``2i``
and ``2i + 1``, and leaf ``k`` lives at ``nodes[leaf_offset + k]`` where ``leaf_offset`` is the
capacity rounded up to a power of two. ``nodes[0]`` is unused.
"""

from __future__ import annotations

import numba
import numpy as np

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
