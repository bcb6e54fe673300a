"""The rank heap's methods (those ``RankSampler`` calls) against hand computation and a model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from per_dqn.memory import RankHeap


def test_insert_update_sort_by_hand():
    """Slots 0..4 inserted with key 1 (stamps 0..4), then re-keyed 0.5, 2, 1, 0.25, 1::

        sorted: slot 1 (2.0) | slot 4 (1.0, stamp 4) | slot 2 (1.0, stamp 2) | 0 (0.5) | 3 (0.25)

    Ties rank newest first, so slot 4 is above slot 2.
    """
    heap = RankHeap(8)
    heap.insert(np.arange(5), 1.0)
    assert len(heap) == 5 and heap.order()[0] == 4  # the newest of five ties is on top
    heap.update(np.arange(5), np.array([0.5, 2.0, 1.0, 0.25, 1.0]))
    assert heap.order()[0] == 1
    heap.sort()
    assert heap.order().tolist() == [1, 4, 2, 0, 3]
    assert heap.ranks([1, 4, 2, 0, 3]).tolist() == [1, 2, 3, 4, 5]
    assert heap.keys([0, 1, 2]).tolist() == [0.5, 2.0, 1.0]
    assert heap.mean_key() == pytest.approx(4.75 / 5)
    # an overwritten slot (the ring wrapped) enters as new: above its ties, with a new stamp
    heap.insert(np.array([0]), 2.0)
    assert heap.order()[0] == 0 and len(heap) == 5
    heap.update(np.array([3, 3]), np.array([9.0, 0.1]))  # repeated slot: the last key wins
    assert heap.keys([3]).item() == 0.1


def test_sample_segments_by_hand():
    """Sorted keys 4, 3, 2, 1 (slots 3, 2, 1, 0); segments [0, 1) and [1, 4): n = 1 and 3.
    u = (0.5, 0.7): positions 0 and 1 + int(0.7 * 3) = 3; weights (n_k / 3) ** beta."""
    heap = RankHeap(4)
    heap.insert(np.arange(4), 1.0)
    heap.update(np.arange(4), np.array([1.0, 2.0, 3.0, 4.0]))
    heap.sort()
    slots, weights, keys = heap.sample_segments(np.array([0, 1, 4]), np.array([0.5, 0.7]), 0.5)
    assert slots.tolist() == [3, 0] and keys.tolist() == [4.0, 1.0]
    np.testing.assert_allclose(weights, [(1 / 3) ** 0.5, 1.0], rtol=1e-15)


def test_readers_refuse_slots_not_in_the_heap():
    heap = RankHeap(6)
    heap.insert(np.arange(3), 1.0)
    with pytest.raises(ValueError, match="slots in the heap, got 4 at position 1"):
        heap.keys([0, 4])
    with pytest.raises(ValueError, match="got 6 at position 0"):
        heap.ranks([6])
    with pytest.raises(ValueError, match="got -1 at position 0"):
        heap.keys([-1])


def test_state_round_trip_and_refusals():
    heap = RankHeap(6)
    heap.insert(np.arange(4), 1.0)
    heap.update(np.array([2]), np.array([5.0]))
    state = heap.state_dict()
    assert sorted(state) == ["heap_keys", "heap_slots", "heap_stamps", "next_stamp"]
    clone = RankHeap(6)
    clone.load_state_dict(state, 4)
    assert clone.order().tolist() == heap.order().tolist() and len(clone) == 4
    assert clone.ranks(np.arange(4)).tolist() == heap.ranks(np.arange(4)).tolist()
    clone.insert(np.array([4]), 5.0)
    heap.insert(np.array([4]), 5.0)
    assert clone.order()[0] == heap.order()[0] == 4  # stamps restored: newest wins the tie
    with pytest.raises(ValueError, match="heap arrays must have 5 entries, got 4, 4, 4"):
        RankHeap(6).check_state(state, 5)


@settings(max_examples=80, deadline=None)
@given(data=st.data(), capacity=st.integers(1, 24))
def test_heap_matches_a_reference_ordering(data, capacity):
    """Any mix of inserts (with wrap-around, as a ring hands out slots) and updates keeps a valid
    heap whose top is the reference's first item; ``sort`` gives exactly the reference ranking
    (key descending, ties newest first), and ``sample_segments`` reads the keys it draws."""
    heap = RankHeap(capacity)
    key, stamp, clock, cursor, top = {}, {}, 0, 0, 1.0
    values = st.sampled_from([0.0, 0.25, 0.5, 1.0])
    for _ in range(data.draw(st.integers(1, 50))):
        if not key or data.draw(st.booleans()):
            n = data.draw(st.integers(1, 3))
            slots = (cursor + np.arange(n)) % capacity
            slots = slots[-capacity:]  # a batch longer than the ring keeps its last items
            cursor = (cursor + n) % capacity
            heap.insert(np.ascontiguousarray(slots), top)
            for s in slots.tolist():
                key[s], stamp[s], clock = top, clock, clock + 1
        else:
            slots = data.draw(st.lists(st.sampled_from(sorted(key)), min_size=1, max_size=4))
            keys = [data.draw(values) for _ in slots]
            heap.update(np.array(slots), np.array(keys))
            for s, k in zip(slots, keys, strict=True):
                key[s] = k
        order = heap.order().tolist()
        assert sorted(order) == sorted(key)
        entries = [(key[s], stamp[s]) for s in order]
        assert all(entries[(i - 1) // 2] > entries[i] for i in range(1, len(order)))
        assert order[0] == max(key, key=lambda s: (key[s], stamp[s]))
    heap.sort()
    expected = sorted(key, key=lambda s: (-key[s], -stamp[s]))
    assert heap.order().tolist() == expected
    n = len(expected)
    bounds = np.array([0, n])
    slots, _, keys = heap.sample_segments(bounds, np.array([0.999]), 1.0)
    assert keys.tolist() == [key[slots[0]]]
