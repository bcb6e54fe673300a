"""``Shard``: a replay memory fed and updated out of step (issue 47, one replay shard of an Ape-X
run). Each stored observation holds its own write serial, so what a slot holds can be read back
and set against the serial an update names."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import assert_same_state

from per_dqn.memory import KINDS, Shard, make_memory


def block(start: int, n: int) -> tuple:
    """``n`` transitions whose observations are their serials ``start, start + 1, ...``."""
    obs = np.arange(start, start + n, dtype=np.float32)[:, None].repeat(2, axis=1)
    return obs, np.arange(n) % 3, np.ones(n), obs + 0.5, np.zeros(n, dtype=bool)


def shard(kind: str = "proportional", capacity: int = 4) -> Shard:
    return Shard(make_memory(kind, capacity=capacity, obs_shape=(2,), seed=7))


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_an_update_sets_only_the_transitions_it_sampled(kind, data):
    """The property: blocks, samples and late updates in any order (a sampled batch's update
    arriving after any number of later blocks). Each batch's serials name the transitions it
    holds; an update then sets exactly the priorities of those not overwritten since (the memory
    ends as one given only those updates, slot by slot) and drops the others, counted."""
    capacity = data.draw(st.integers(1, 6), label="capacity")
    under_test = shard(kind, capacity)
    reference = make_memory(kind, capacity=capacity, obs_shape=(2,), seed=7)
    pending, dropped = [], 0
    for _ in range(data.draw(st.integers(1, 12), label="events")):
        event = data.draw(st.sampled_from(["add", "sample", "update"]), label="event")
        if event == "add" or len(under_test) == 0:
            n = data.draw(st.integers(1, 2 * capacity), label="block")
            start = under_test.written
            serials = under_test.add(*block(start, n))
            reference.add_batch(*block(start, n))
            assert serials.tolist() == list(range(start, start + n))
        elif event == "sample":
            batch, serials = under_test.sample(min(2, len(under_test)))
            np.testing.assert_array_equal(batch.obs[:, 0], serials)  # what it holds, by serial
            pending.append(serials)
        elif pending:
            serials = pending.pop(data.draw(st.integers(0, len(pending) - 1), label="which"))
            td = np.array(data.draw(st.lists(st.floats(0, 10), min_size=len(serials),
                                             max_size=len(serials)), label="td"))  # fmt: skip
            stored = reference.state_dict(copy=False)["storage"]["obs"][:, 0]
            live = stored[serials % capacity] == serials
            applied = under_test.update(serials, td)
            reference.update_priorities((serials % capacity)[live], td[live])
            assert applied == int(live.sum())
            dropped += len(serials) - applied
    assert under_test.dropped == dropped
    mine, theirs = under_test.memory.state_dict(), reference.state_dict()
    mine.pop("rng"), theirs.pop("rng")  # the shard's memory drew samples; the reference did not
    assert_same_state(mine, theirs)


def test_a_late_update_by_hand():
    """Capacity 4: serials 0-3 fill it, a batch samples slot 2 (serial 2) and slot 1; then a
    block of 2 overwrites slots 0 and 1 (serials 4, 5): the update sets serial 2's priority and
    drops serial 1's, whose slot now holds serial 5."""
    s = shard()
    s.add(*block(0, 4))
    assert s.serials([2, 1]).tolist() == [2, 1]
    s.add(*block(4, 2))
    assert s.serials([2, 1, 0, 3]).tolist() == [2, 5, 4, 3]
    before = s.memory.sampler.priorities(np.arange(4)).copy()
    assert s.update([2, 1], [3.0, 5.0]) == 1
    after = s.memory.sampler.priorities(np.arange(4))
    # Serial 2's leaf is (|delta| + eps) ** alpha at the memory's defaults (1e-6, 0.6); the
    # others are as they were.
    assert after[2] == pytest.approx((3.0 + 1e-6) ** 0.6, rel=1e-12)
    np.testing.assert_array_equal(after[[0, 1, 3]], before[[0, 1, 3]])
    assert s.dropped == 1 and s.written == 6


def test_a_block_s_errors_set_its_priorities():
    s, plain = shard(), make_memory("proportional", capacity=4, obs_shape=(2,), seed=7)
    s.add(*block(0, 3), td_abs=[0.0, 1.0, 2.0])
    slots = plain.add_batch(*block(0, 3))
    plain.update_priorities(slots, [0.0, 1.0, 2.0])
    assert_same_state(s.memory.state_dict(), plain.state_dict())


@pytest.mark.parametrize(
    ("serials", "td", "message"),
    [
        ([6], [1.0], r"`serials` must lie in \[0, 6\) \(written\), got 6"),
        ([-1], [1.0], r"got -1"),
        ([1, 2], [1.0], r"same length, got 2 and 1"),
        (
            [4],
            [np.nan],
            r"`td_abs` must be finite and >= 0 \(pass \|delta\|\), got nan at "
            r"position 0 \(serial 4\)",
        ),
        # Serial 0 was overwritten (it would be dropped): its NaN is refused all the same, and
        # named at the caller's position.
        ([5, 0], [1.0, np.nan], r"got nan at position 1 \(serial 0\)"),
        ([1, 0], [-5.0, 1.0], r"got -5.0 at position 0 \(serial 1\)"),
    ],
)
def test_a_bad_update_is_refused_and_changes_nothing(serials, td, message):
    s = shard()
    s.add(*block(0, 6))
    before = copy.deepcopy(s.state_dict())
    with pytest.raises(ValueError, match=message):
        s.update(serials, td)
    assert_same_state(s.state_dict(), before)


def test_a_shard_starts_from_an_empty_memory():
    memory = make_memory("uniform", capacity=4, obs_shape=(2,))
    memory.add_batch(*block(0, 1))
    with pytest.raises(ValueError, match="a shard starts from an empty memory, got 1"):
        Shard(memory)


def test_the_state_round_trip_keeps_the_serials_and_refuses_counters_that_do_not_fit():
    s = shard()
    s.add(*block(0, 6))
    s.update([1], [1.0])
    state = copy.deepcopy(s.state_dict())
    restored = shard()
    restored.load_state_dict(copy.deepcopy(state))
    assert (restored.written, restored.dropped) == (6, 1)
    assert restored.serials([0, 1, 2, 3]).tolist() == s.serials([0, 1, 2, 3]).tolist()
    for written in (5, 7, -1):  # 10 would fit: 4 stored, the next at slot 2
        bad = {**copy.deepcopy(state), "written": written}
        fresh = shard()
        with pytest.raises(ValueError, match=f"a shard's `written` \\({written}\\) must give"):
            fresh.load_state_dict(bad)
        assert fresh.written == 0 and len(fresh) == 0


def test_serials_and_slots_must_be_integers_of_what_is_stored():
    s = shard()
    s.add(*block(0, 3))
    with pytest.raises(TypeError, match=r"`serials` must be integers, got dtype float64"):
        s.update([1.9], [1.0])
    with pytest.raises(ValueError, match=r"`slots` must lie in \[0, 3\) \(stored\), got 3"):
        s.serials([3])
    assert s.update([], []) == 0


def test_a_write_around_the_shard_is_refused_at_its_next_call():
    """A write straight to the memory shifts every slot: the serials the shard would hand out
    next would name other transitions, so each of its calls refuses to go on."""
    s = shard()
    s.add(*block(0, 2))
    s.memory.add_batch(*block(99, 1))
    for call in (lambda: s.add(*block(2, 1)), lambda: s.sample(1), lambda: s.update([0], [1.0])):
        with pytest.raises(
            RuntimeError,
            match="holds 3 transitions with its next at slot 3, "
            "not what the 2 written through the shard give",
        ):
            call()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"written": 6.9}, r"a shard's `written` must be an integer, got 6.9"),
        ({"dropped": None}, r"a shard's `dropped` must be an integer, got None"),
        ({"memory": {}}, r"malformed shard state \(KeyError: 'storage'\)"),
    ],
)
def test_a_malformed_state_is_refused_in_one_line(change, message):
    s = shard()
    s.add(*block(0, 6))
    fresh = shard()
    with pytest.raises(ValueError, match=message):
        fresh.load_state_dict({**copy.deepcopy(s.state_dict()), **change})
    assert fresh.written == 0 and len(fresh) == 0
