"""What every replay kind shares, run for each kind of the registry (``KINDS``): contents,
validation, wrap-around, state round trips and the single-``add`` fast path.

Hand computations and the paper's formulas for one kind are in that kind's file
(``test_uniform.py``, ``test_proportional.py``, ``test_rank.py``).
"""

from __future__ import annotations

import copy
import itertools
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from replay_helpers import filled
from support import assert_same_state

from per_dqn.memory import KINDS, REPLAY_KINDS, make_memory


def test_importing_memory_pulls_in_neither_torch_nor_gymnasium():
    code = (
        "import sys, per_dqn.training.schedules; from per_dqn.memory import *; "
        "bad = [m for m in ('torch', 'gymnasium', 'ale_py') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("kind", KINDS)
def test_batch_contents_match_what_was_added(kind):
    mem = filled(kind, capacity=50)
    batch = mem.sample(16, beta=0.4)
    i = batch.indices
    np.testing.assert_array_equal(batch.obs[:, 0], i)
    np.testing.assert_array_equal(batch.next_obs[:, 1], i + 1)
    np.testing.assert_array_equal(batch.actions, i % 3)
    np.testing.assert_array_equal(batch.rewards, i)
    assert batch.obs.dtype == np.float32 and batch.weights.dtype == np.float32
    assert batch.n_steps.tolist() == [1] * mem.sampler.rows(16) and len(i) >= 16


@pytest.mark.parametrize("kind", KINDS)
def test_uint8_observations_stay_uint8(kind):
    mem = make_memory(kind, capacity=8, obs_shape=(4, 84, 84), obs_dtype=np.uint8, seed=0)
    frame = np.full((4, 84, 84), 255, np.uint8)
    mem.add(frame, 1, 0.0, frame, True)
    batch = mem.sample(1)
    assert batch.obs.dtype == np.uint8 and batch.obs.max() == 255 and batch.terminated[0]
    with pytest.raises(ValueError, match="`obs` must be castable to uint8, got float64"):
        mem.add(frame.astype(np.float64), 1, 0.0, frame, False)


@pytest.mark.parametrize("kind", KINDS)
def test_unfilled_slots_are_never_sampled(kind):
    mem = filled(kind, capacity=1000, n=10)
    seen = np.concatenate([mem.sample(10, beta=1.0).indices for _ in range(2000)])
    assert seen.min() >= 0 and seen.max() <= 9
    assert set(seen.tolist()) == set(range(10))


@pytest.mark.parametrize("kind", KINDS)
def test_wrap_around_overwrites_data_and_priority(kind):
    """Slots 0 and 1 are overwritten: their data is the new transitions', and where the sampler
    keeps priorities, both new transitions enter at the largest priority in the memory, whatever
    the old ones held (each kind's exact value is pinned in its own file)."""
    mem = filled(kind, capacity=4)  # obs 0..3 in slots 0..3
    mem.update_priorities([0, 1, 2, 3], [0.001, 5.0, 0.001, 0.001])  # checked; uniform keeps none
    obs = np.array([[10.0, 10.0], [11.0, 11.0]], np.float32)
    slots = mem.add_batch(obs, [0, 1], [10.0, 11.0], obs + 1, [False, True])
    assert slots.tolist() == [0, 1] and len(mem) == 4
    batch = mem.sample(4, beta=1.0)
    by_slot = dict(zip(batch.indices.tolist(), batch.obs[:, 0].tolist(), strict=True))
    for slot, value in by_slot.items():
        assert value == {0: 10.0, 1: 11.0, 2: 2.0, 3: 3.0}[slot]
    priorities = getattr(mem.sampler, "priorities", None)
    if priorities is not None:
        top = priorities(np.arange(4)).max()
        assert priorities([0, 1]).tolist() == [top, top]
        assert top > priorities([2, 3]).max()  # slot 0 held one of the smallest before


@pytest.mark.parametrize("kind", KINDS)
def test_bad_input_raises_and_changes_nothing(kind):
    mem = filled(kind, capacity=20, n=10)
    before = copy.deepcopy(mem.state_dict())
    cases = [
        (
            lambda: mem.update_priorities([1, 2], [0.5, np.nan]),
            r"got nan at position 1 \(index 2\)",
        ),
        (
            lambda: mem.update_priorities([1, 2], [np.inf, 0.5]),
            r"got inf at position 0 \(index 1\)",
        ),
        (lambda: mem.update_priorities([3], [-0.5]), r"got -0.5 at position 0 \(index 3\)"),
        (lambda: mem.update_priorities([10], [0.5]), r"\[0, 10\).*got 10 at position 0"),
        (lambda: mem.update_priorities([1, 2], [0.5]), r"same length"),
        (lambda: mem.sample(11), r"`batch_size` must be <= stored transitions \(10\), got 11"),
        (lambda: mem.sample(0), r"`batch_size` must be >= 1, got 0"),
        (lambda: mem.sample(4, beta=1.5), r"`beta` must be in \[0.0, 1.0\], got 1.5"),
        (lambda: mem.add(np.zeros(3), 0, 0.0, np.zeros(2), False), r"`obs` must have shape \(2,\)"),
        (
            lambda: mem.add_batch(np.zeros((2, 2)), [0], [0, 0], np.zeros((2, 2)), [0, 0]),
            r"`actions` must have 2 entries",
        ),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()
    after = mem.state_dict()
    for key in ("storage", "rng"):
        assert repr(after[key]) == repr(before[key])
    assert_same_state(after, before)  # the sampler's priority index too, whatever the kind


@pytest.mark.parametrize("kind", KINDS)
def test_empty_memory_cannot_be_sampled(kind):
    mem = make_memory(kind, capacity=4, obs_shape=(2,), seed=0)
    with pytest.raises(ValueError, match="empty replay memory"):
        mem.sample(1)


@pytest.mark.parametrize("kind", KINDS)
def test_state_dict_round_trip_reproduces_next_samples(kind):
    mem = filled(kind, capacity=64, n=80, seed=3)
    rng = np.random.default_rng(1)
    for _ in range(20):
        batch = mem.sample(8, beta=0.6)
        mem.update_priorities(batch.indices, rng.exponential(size=len(batch.indices)))
    clone = make_memory(kind, capacity=64, obs_shape=(2,), seed=999)
    clone.load_state_dict(copy.deepcopy(mem.state_dict()))
    for _ in range(5):
        a, b = mem.sample(8, beta=0.6), clone.sample(8, beta=0.6)
        for field in a._fields:
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
        td = rng.exponential(size=len(a.indices))
        mem.update_priorities(a.indices, td)
        clone.update_priorities(b.indices, td)
        slot = mem.add(np.ones(2), 0, 0.0, np.ones(2), False)
        assert clone.add(np.ones(2), 0, 0.0, np.ones(2), False) == slot


@pytest.mark.parametrize(("saved", "kind"), list(itertools.permutations(KINDS, 2)))
def test_state_dict_for_another_kind_is_refused(saved, kind):
    with pytest.raises(ValueError, match=f"state is for a `{saved}` memory, not `{kind}`"):
        filled(kind).load_state_dict(filled(saved).state_dict())


@pytest.mark.parametrize("kind", [k for k in KINDS if REPLAY_KINDS[k].keeps_priorities])
def test_repeated_index_in_one_update_keeps_the_last_error(kind):
    """Pins the documented rule on the path training runs (``update_priorities``, not the tree
    classes): a batch that sampled slot 3 three times leaves what its last error alone leaves,
    for every kind that keeps a priority per transition (the priority's value is pinned in each
    kind's file)."""
    mem = filled(kind, capacity=8)
    last = copy.deepcopy(mem)
    mem.update_priorities([3, 5, 3, 3], [5.0, 1.0, 7.0, 2.0])
    last.update_priorities([5, 3], [1.0, 2.0])
    slots = np.arange(8)
    np.testing.assert_array_equal(mem.sampler.priorities(slots), last.sampler.priorities(slots))


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_one_transition_through_add_is_a_batch_of_one(kind, data):
    """The loop stores a step's single transition with ``add`` and several with ``add_batch``
    (``Loop.steps``: ``add`` costs a third as much). The property: any sequence of steps, with
    priority updates between them, leaves a memory fed that way and one fed only through
    ``add_batch`` in the same state (contents, priorities, sampler and RNG), with the same
    slots returned and the same next batch drawn."""
    capacity = data.draw(st.integers(1, 6), label="capacity")
    one, batched = (make_memory(kind, capacity=capacity, obs_shape=(2,), seed=3) for _ in range(2))
    t = 0
    for _ in range(data.draw(st.integers(1, 8), label="steps")):
        n = data.draw(st.integers(1, 3), label="transitions")
        obs = np.arange(t, t + n, dtype=np.float32)[:, None].repeat(2, axis=1)
        actions, rewards = np.arange(t, t + n) % 3, np.arange(t, t + n) * 0.5
        terminated = np.arange(t, t + n) % 4 == 3
        t += n
        if n == 1:
            slots = [one.add(obs[0], actions[0], rewards[0], obs[0] + 1, terminated[0])]
        else:
            slots = one.add_batch(obs, actions, rewards, obs + 1, terminated).tolist()
        assert slots == batched.add_batch(obs, actions, rewards, obs + 1, terminated).tolist()
        indices = data.draw(st.lists(st.integers(0, len(one) - 1), max_size=3), label="updated")
        errors = data.draw(
            st.lists(st.floats(0, 10), min_size=len(indices), max_size=len(indices)), label="td"
        )
        for mem in (one, batched):
            mem.update_priorities(np.array(indices, dtype=np.int64), errors)
    assert_same_state(one.state_dict(), batched.state_dict())
    size = min(len(one), 2)
    a, b = one.sample(size, beta=0.5), batched.sample(size, beta=0.5)
    assert a.indices.tolist() == b.indices.tolist() and a.weights.tolist() == b.weights.tolist()


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_a_block_stored_with_its_errors_is_the_block_then_its_update(kind, data):
    """Ape-X's actors send their transitions with the errors their own network gives them
    (``add_batch(..., td_abs=)``, Horgan et al., 2018). The property, for every kind: any
    sequence of blocks (past the capacity included, where the last write of a slot wins) leaves
    the memory in the state that storing each block and then updating its slots' priorities
    leaves (contents, priorities, sampler and RNG), with the same slots and the same next batch."""
    capacity = data.draw(st.integers(1, 6), label="capacity")
    given_, reference = (
        make_memory(kind, capacity=capacity, obs_shape=(2,), seed=5) for _ in range(2)
    )
    t = 0
    for _ in range(data.draw(st.integers(1, 6), label="blocks")):
        n = data.draw(st.integers(1, 8), label="transitions")
        obs = np.arange(t, t + n, dtype=np.float32)[:, None].repeat(2, axis=1)
        actions, rewards, terminated = np.arange(n) % 3, np.arange(n) * 0.5, np.arange(n) % 4 == 3
        td = np.array(data.draw(st.lists(st.floats(0, 10), min_size=n, max_size=n), label="td"))
        t += n
        slots = given_.add_batch(obs, actions, rewards, obs + 1, terminated, td_abs=td)
        expected = reference.add_batch(obs, actions, rewards, obs + 1, terminated)
        reference.update_priorities(expected, td)
        assert slots.tolist() == expected.tolist()
    assert_same_state(given_.state_dict(), reference.state_dict())
    size = min(len(given_), 2)
    a, b = given_.sample(size, beta=0.5), reference.sample(size, beta=0.5)
    for field in a._fields:
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))


def test_proportional_stores_a_block_at_its_errors_priorities_not_the_max():
    """By hand: alpha 0.5, priority_eps 0.01, clip 1: errors 0.0, 0.44 and 3.0 give the
    priorities (0 + 0.01) ** 0.5 = 0.1, (0.44 + 0.01) ** 0.5 = 0.67082... and
    (min(3, 1) + 0.01) ** 0.5 = 1.00499..., not the max priority a plain insert gives."""
    mem = make_memory("proportional", capacity=4, obs_shape=(2,), alpha=0.5, priority_eps=0.01,
                      td_error_clip=1.0)  # fmt: skip
    obs = np.zeros((3, 2), dtype=np.float32)
    mem.add_batch(obs, [0, 1, 2], [0.0] * 3, obs, [False] * 3, td_abs=[0.0, 0.44, 3.0])
    expected = np.array([0.01, 0.45, 1.01]) ** 0.5
    np.testing.assert_allclose(mem.sampler.priorities(np.arange(3)), expected, rtol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_a_block_with_bad_errors_is_refused_and_changes_nothing(kind):
    mem = filled(kind, capacity=20, n=10)
    before = copy.deepcopy(mem.state_dict())
    obs = np.zeros((2, 2), dtype=np.float32)
    for td, message in (
        ([0.5], r"`td_abs` must have 2 entries like `obs`, got 1"),
        (
            [0.5, np.nan],
            r"`td_abs` must be finite and >= 0 \(pass \|delta\|\), got nan at position 1",
        ),
        ([-1.0, 0.5], r"got -1.0 at position 0"),
    ):
        with pytest.raises(ValueError, match=message):
            mem.add_batch(obs, [0, 1], [0.0, 0.0], obs, [False, False], td_abs=td)
    assert_same_state(mem.state_dict(), before)
