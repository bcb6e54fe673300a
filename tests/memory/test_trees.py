"""Sum and min trees against hand-drawn examples and a plain-Python reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from per_dqn.memory import MinTree, SumTree


def reference_find(leaves: list[float], mass: float) -> int:
    """The smallest i with leaves[0] + ... + leaves[i] > mass (a linear scan)."""
    running = 0.0
    for i, value in enumerate(leaves):
        running += value
        if mass < running:
            return i
    raise AssertionError("mass beyond total")


def test_hand_drawn_tree():
    """Capacity 5 (8 padded leaves), leaves 1, 2, 3, 4, 0::

                 10
             10       0
           3    7   0   0
          1 2  3 4 0 . . .

    Prefix intervals: leaf0 [0,1), leaf1 [1,3), leaf2 [3,6), leaf3 [6,10), leaf4 empty.
    """
    tree = SumTree(5)
    tree.update([0, 1, 2, 3, 4], [1.0, 2.0, 3.0, 4.0, 0.0])
    assert tree.total == 10.0
    masses = [0.0, 0.999, 1.0, 2.5, 3.0, 5.999, 6.0, 9.999]
    assert tree.find_prefix_sum(masses).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    # the internal nodes are the sums drawn above
    assert tree._nodes[1:8].tolist() == [10.0, 10.0, 0.0, 3.0, 7.0, 0.0, 0.0]


def test_hand_drawn_min_tree():
    """Leaves 5, 2, 7 (capacity 3, 4 padded leaves): min 2; padding stays +inf."""
    tree = MinTree(3)
    assert tree.min == np.inf
    tree.update([0, 1, 2], [5.0, 2.0, 7.0])
    assert tree.min == 2.0
    tree.update([1], [9.0])
    assert tree.min == 5.0


def test_update_changes_only_its_path():
    """Setting leaf 2 from 3 to 0.5 changes total 10 -> 7.5 and the [3,6) interval to [3,3.5)."""
    tree = SumTree(5)
    tree.update([0, 1, 2, 3], [1.0, 2.0, 3.0, 4.0])
    tree.update([2], [0.5])
    assert tree.total == 7.5
    assert tree.find_prefix_sum([3.4, 3.5]).tolist() == [2, 3]


def test_repeated_indices_last_value_wins():
    """Pins the documented rule for a batch that sampled the same slot twice."""
    tree = SumTree(4)
    tree.update([1, 1, 1], [5.0, 7.0, 2.0])
    assert tree[1] == 2.0 and tree.total == 2.0
    mins = MinTree(4)
    mins.update([3, 3], [1.0, 4.0])
    assert mins.min == 4.0


def test_capacity_one():
    tree = SumTree(1)
    tree.update([0], [3.0])
    assert tree.total == 3.0
    assert tree.find_prefix_sum([0.0, 2.9]).tolist() == [0, 0]
    mins = MinTree(1)
    mins.update([0], [3.0])
    assert mins.min == 3.0


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: t.update([5], [1.0]), r"\[0, 5\), got 5"),
        (lambda t: t.update([-1], [1.0]), r"got -1"),
        (lambda t: t.update([0], [-1.0]), r"got -1.0 at position 0"),
        (lambda t: t.update([0, 1], [1.0, np.nan]), r"got nan at position 1"),
        (lambda t: t.update([0], [np.inf]), r"got inf"),
        (lambda t: t.update([0, 1], [1.0]), r"same length"),
        (lambda t: t.find_prefix_sum([10.0]), r"got 10.0 at position 0"),
        (lambda t: t.find_prefix_sum([-0.1]), r"got -0.1"),
        (lambda t: t.find_prefix_sum([np.nan]), r"got nan"),
    ],
)
def test_bad_input_raises_and_changes_nothing(call, message):
    tree = SumTree(5)
    tree.update([0, 1, 2, 3], [1.0, 2.0, 3.0, 4.0])
    before = tree._nodes.copy()
    with pytest.raises(ValueError, match=message):
        call(tree)
    np.testing.assert_array_equal(tree._nodes, before)


def test_empty_tree_cannot_be_searched():
    with pytest.raises(ValueError, match="empty tree"):
        SumTree(3).find_prefix_sum([0.0])


@pytest.mark.parametrize("capacity", [0, -3])
def test_capacity_must_be_positive(capacity):
    with pytest.raises(ValueError, match=f"`capacity` must be >= 1, got {capacity}"):
        SumTree(capacity)


def test_set_leaves_rebuilds_both_trees():
    tree, mins = SumTree(6), MinTree(6)
    values = np.array([0.5, 1.5, 0.0, 2.0, 4.0, 1.0])
    tree.set_leaves(values)
    mins.set_leaves(values)
    assert tree.total == 9.0 and mins.min == 0.0
    assert tree.find_prefix_sum([1.9, 2.0]).tolist() == [1, 3]


# Dyadic values (multiples of 1/8 below 2**20) add up exactly in float64, so the tree and the
# reference must agree to the bit, boundaries included.
dyadic = st.integers(min_value=0, max_value=8 * 1000).map(lambda k: k / 8)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=1, max_value=70))
def test_sum_tree_matches_reference(data, capacity):
    tree = SumTree(capacity)
    mins = MinTree(capacity)
    leaves = [0.0] * capacity
    written = [np.inf] * capacity
    for _ in range(data.draw(st.integers(1, 8), label="n_updates")):
        idx = data.draw(st.lists(st.integers(0, capacity - 1), min_size=1, max_size=12))
        vals = data.draw(st.lists(dyadic, min_size=len(idx), max_size=len(idx)))
        tree.update(idx, vals)
        mins.update(idx, vals)
        for i, v in zip(idx, vals, strict=True):
            leaves[i] = v
            written[i] = v
        assert tree.total == sum(leaves)
        assert mins.min == min(written)
        assert tree.leaves.tolist() == leaves
    if tree.total > 0:
        masses = data.draw(
            st.lists(
                st.floats(0.0, tree.total, exclude_max=True, allow_nan=False),
                min_size=1,
                max_size=20,
            )
        )
        # boundaries c_i themselves are where off-by-one bugs live
        boundaries = [c for c in np.cumsum(leaves) if c < tree.total]
        masses = masses + boundaries
        expected = [reference_find(leaves, m) for m in masses]
        assert tree.find_prefix_sum(masses).tolist() == expected


@settings(max_examples=100, deadline=None)
@given(
    data=st.data(),
    capacity=st.integers(min_value=1, max_value=300),
)
def test_descent_never_returns_empty_or_unfilled_leaf(data, capacity):
    """Priorities spanning 1e-12 .. 1e12 (and zeros), masses up to total minus one ulp."""
    filled = data.draw(st.integers(1, capacity), label="filled")
    exponents = data.draw(
        st.lists(
            st.one_of(st.none(), st.floats(-12, 12)),
            min_size=filled,
            max_size=filled,
        )
    )
    values = np.array([0.0 if e is None else 10.0**e for e in exponents])
    if not values.any():
        values[-1] = 1e-12
    tree = SumTree(capacity)
    tree.update(np.arange(filled), values)
    total = tree.total
    u = data.draw(st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=32))
    masses = np.concatenate([np.array(u) * total, [0.0, np.nextafter(total, 0.0)]])
    masses = np.minimum(masses, np.nextafter(total, 0.0))
    found = tree.find_prefix_sum(masses)
    assert (found < filled).all()
    assert (values[found] > 0).all()


def test_total_minus_one_ulp_stays_on_a_nonzero_leaf():
    """At 1e12 one ulp is ~1e-4: the 1e-12 leaves after leaf 2 are below rounding, and the
    zero-valued leaves 4 and 6 (and the padding) must never be reached however the mass rounds."""
    tree = SumTree(10)
    values = [1e12, 1e-12, 3.0, 1e-12, 0.0, 1e-12, 0.0]
    tree.update(np.arange(7), values)
    masses = [np.nextafter(tree.total, 0.0), 1e12 + 3.0 - 1e-4, 1e12 + 2.9999]
    found = tree.find_prefix_sum(masses)
    assert found.tolist() == [2, 2, 2]
    # a mass past a subtree's sum after subtraction: right subtree holds leaves 4..6 only
    small = SumTree(8)
    small.update(np.arange(6), [0.1, 0.2, 0.3, 0.4, 1e-17, 0.0])
    found = small.find_prefix_sum([np.nextafter(small.total, 0.0)])
    assert small[found].item() > 0 and found.item() < 6


def test_no_drift_after_many_updates():
    """Parents are recomputed from children, so the root equals a fresh sum of the leaves."""
    rng = np.random.default_rng(0)
    tree = SumTree(1000)
    for _ in range(2000):
        idx = rng.integers(0, 1000, 32)
        tree.update(idx, 10.0 ** rng.uniform(-6, 6, 32))
    fresh = SumTree(1000)
    fresh.set_leaves(tree.leaves)
    assert tree.total == fresh.total


# --- the trusted methods the proportional sampler calls ------------------------------------------


def test_write_both_writes_the_same_leaves_into_both_trees():
    """``write_both``/``write_both_one`` (the proportional insert) equal ``write`` on each tree."""
    tree, mins = SumTree(5), MinTree(5)
    ref_sum, ref_min = SumTree(5), MinTree(5)
    slots, values = np.array([0, 3, 1, 3]), np.array([1.5, 2.0, 0.25, 4.0])
    tree.write_both(mins, slots, values)
    ref_sum.write(slots, values)
    ref_min.write(slots, values)
    tree.write_both_one(mins, 4, 0.125)
    ref_sum.write_one(4, 0.125)
    ref_min.write_one(4, 0.125)
    assert tree._nodes.tolist() == ref_sum._nodes.tolist()
    assert mins._nodes.tolist() == ref_min._nodes.tolist()
    assert tree.total == 1.5 + 0.25 + 4.0 + 0.125 and mins.min == 0.125


def test_write_and_write_one_are_update_without_checks():
    """Hand-drawn: capacity 5, leaves 1, 2, 3, 4 written as a batch then leaf 4 = 5 alone::

           15                    min 1
       10       5
     3    7   5   0
    1 2  3 4 5 . . .
    """
    tree, mins = SumTree(5), MinTree(5)
    tree.write(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    mins.write(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    tree.write_one(4, 5.0)
    mins.write_one(4, 5.0)
    assert tree._nodes[1:8].tolist() == [15.0, 10.0, 5.0, 3.0, 7.0, 5.0, 0.0]
    assert mins.min == 1.0 and mins[4] == 5.0
    tree.write(np.array([2, 2]), np.array([9.0, 0.5]))  # repeated slot: the last value wins
    assert tree[2] == 0.5 and tree.total == 12.5
    mins.write_one(0, 7.0)
    assert mins.min == 2.0


def hand_trees():
    """Leaves 1, 2, 3, 4 (capacity 6, two slots unwritten): total 10, min 1."""
    tree, mins = SumTree(6), MinTree(6)
    tree.update(np.arange(4), [1.0, 2.0, 3.0, 4.0])
    mins.update(np.arange(4), [1.0, 2.0, 3.0, 4.0])
    return tree, mins


def test_sample_proportional_by_hand():
    """B = 2 strata of mass 5: u = (0.1, 0.5) -> masses 0.5 and 7.5 -> leaves 0 and 3.
    P = p / 10, global weights (P_min / P)^beta with P_min = 0.1: beta 1 -> 1 and 1/4."""
    tree, mins = hand_trees()
    idx, w, p = tree.sample_proportional(mins, 4, 1.0, np.array([0.1, 0.5]))
    assert idx.tolist() == [0, 3] and p.tolist() == [1.0, 4.0]
    np.testing.assert_allclose(w, [1.0, 0.25], rtol=1e-15)
    # batch normalisation: the batch's own largest weight is 1 -> same here; beta 0.5 -> sqrt
    idx, w, _ = tree.sample_proportional(mins, 4, 0.5, np.array([0.3, 0.3]), batch_norm=True)
    assert idx.tolist() == [1, 3]  # masses 1.5 and 6.5
    np.testing.assert_allclose(w, [1.0, (2 / 4) ** 0.5], rtol=1e-15)
    # uniform mixture: a coin below the mix replaces the draw by the uniform index
    idx, w, p = tree.sample_proportional(
        mins, 4, 1.0, np.array([0.1, 0.5]), uniform_mix=0.5,
        coin_u=np.array([0.9, 0.2]), uniform_idx=np.array([2, 1]),
    )  # fmt: skip
    assert idx.tolist() == [0, 1] and p.tolist() == [1.0, 2.0]
    prob = 0.5 / 4 + 0.5 * np.array([1.0, 2.0]) / 10
    p_min = 0.5 / 4 + 0.5 * 1.0 / 10
    np.testing.assert_allclose(w, p_min / prob, rtol=1e-15)


def test_update_proportional_by_hand():
    """(min(|d|, clip) + eps) ** alpha into both trees; repeated slot: the last error wins;
    returns the largest raw priority. clip 3, eps 1, alpha 0.5: |d| 8 -> 2, 0 -> 1, 3 -> 2."""
    tree, mins = hand_trees()
    max_raw = tree.update_proportional(
        mins, np.array([1, 2, 1]), np.array([8.0, 0.0, 3.0]), 3.0, 1.0, 0.5
    )
    assert max_raw == 4.0
    assert tree.leaves.tolist()[:4] == [1.0, 2.0, 1.0, 4.0] and tree.total == 8.0
    assert mins.min == 1.0 and mins[2] == 1.0
    mins_after = MinTree(6)
    mins_after.set_leaves(np.r_[tree.leaves[:4], np.inf, np.inf])
    assert mins._nodes.tolist() == mins_after._nodes.tolist()


def test_fused_methods_refuse_a_min_tree_of_another_layout():
    """The kernels index both node arrays with the sum tree's layout: a smaller min tree would be
    written out of bounds, so it is refused."""
    tree, _ = hand_trees()
    with pytest.raises(ValueError, match="`mins` must be a MinTree of capacity 6"):
        tree.sample_proportional(MinTree(2), 4, 1.0, np.array([0.5]))
    with pytest.raises(ValueError, match="`mins` must be a MinTree of capacity 6"):
        tree.update_proportional(MinTree(100), np.array([0]), np.array([1.0]), 9.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="`mins` must be a MinTree of capacity 6"):
        tree.write_both_one(MinTree(3), 5, 1.0)
    with pytest.raises(ValueError, match="`mins` must be a MinTree of capacity 6"):
        tree.write_both(MinTree(9), np.array([5]), np.array([1.0]))


@settings(max_examples=100, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=1, max_value=70))
def test_fused_sample_matches_find_prefix_sum_and_the_formula(data, capacity):
    """``sample_proportional`` (training's path) against the checked descent and the PER formula
    computed in numpy, for dyadic leaves (exact sums) and any strata."""
    filled = data.draw(st.integers(1, capacity))
    values = np.array(data.draw(st.lists(dyadic.map(lambda v: v + 0.125), min_size=filled,
                                         max_size=filled)))  # fmt: skip
    tree, mins = SumTree(capacity), MinTree(capacity)
    tree.update(np.arange(filled), values)
    mins.update(np.arange(filled), values)
    batch = data.draw(st.integers(1, 16))
    u = np.array(data.draw(st.lists(st.floats(0, 1, exclude_max=True), min_size=batch,
                                    max_size=batch)))  # fmt: skip
    beta = data.draw(st.sampled_from([0.0, 0.4, 1.0]))
    idx, w, p = tree.sample_proportional(mins, filled, beta, u)
    masses = (np.arange(batch) + u) * (tree.total / batch)
    masses = np.minimum(masses, np.nextafter(tree.total, 0.0))
    np.testing.assert_array_equal(idx, tree.find_prefix_sum(masses))
    np.testing.assert_array_equal(p, values[idx])
    np.testing.assert_allclose(w, (values.min() / values[idx]) ** beta, rtol=1e-12)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=1, max_value=70))
def test_independent_sample_is_the_checked_descent_of_u_times_the_total(data, capacity):
    """``sample`` (LAP's draws) against ``find_prefix_sum`` of ``u * total`` computed in numpy,
    and the drawn leaves' values, for any leaves (zeros among them) and any uniforms in [0, 1),
    the largest double below 1 included."""
    filled = data.draw(st.integers(1, capacity))
    values = data.draw(st.lists(st.floats(0, 1e6, allow_subnormal=False), min_size=filled,
                                max_size=filled).filter(lambda v: sum(v) > 0))  # fmt: skip
    tree = SumTree(capacity)
    tree.update(np.arange(filled), values)
    u = data.draw(st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=16))
    u = np.array([*u, np.nextafter(1.0, 0.0)])
    idx, p = tree.sample(u)
    np.testing.assert_array_equal(idx, tree.find_prefix_sum(u * tree.total))
    np.testing.assert_array_equal(p, np.asarray(values)[idx])
    assert (p > 0).all()


@settings(max_examples=100, deadline=None)
@given(data=st.data(), capacity=st.integers(min_value=1, max_value=40))
def test_fused_update_matches_checked_updates(data, capacity):
    """``update_proportional`` leaves both trees exactly as ``update`` with the leaves computed
    in Python would (repeated indices: the last wins)."""
    tree, mins = SumTree(capacity), MinTree(capacity)
    ref_sum, ref_min = SumTree(capacity), MinTree(capacity)
    for _ in range(data.draw(st.integers(1, 5))):
        idx = data.draw(st.lists(st.integers(0, capacity - 1), min_size=1, max_size=10))
        td = data.draw(st.lists(st.floats(0, 100), min_size=len(idx), max_size=len(idx)))
        clip, eps, alpha = 10.0, 0.01, data.draw(st.sampled_from([0.0, 0.6, 1.0]))
        raw = [min(d, clip) + eps for d in td]
        got = tree.update_proportional(
            mins, np.array(idx), np.array(td, dtype=np.float64), clip, eps, alpha
        )
        assert got == max(raw)
        ref_sum.update(idx, [r**alpha for r in raw])
        ref_min.update(idx, [r**alpha for r in raw])
        assert tree._nodes.tolist() == ref_sum._nodes.tolist()
        assert mins._nodes.tolist() == ref_min._nodes.tolist()
