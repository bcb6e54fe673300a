"""Bit-packed storage of bool observations (MinAtar's object layers): lossless, eight cells a
byte, chosen for bool observations whatever the replay kind."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from per_dqn.memory import KINDS, BitStorage, make_memory, planned_nbytes


@settings(max_examples=40, deadline=None)
@given(
    shape=st.sampled_from([(1,), (3, 5, 7), (4, 10, 10), (10, 10, 10), (9,)]),
    capacity=st.integers(1, 40),
    batches=st.lists(st.integers(1, 12), min_size=1, max_size=6),
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 2**16),
)
def test_sampled_observations_are_exactly_what_was_added(shape, capacity, batches, kind, seed):
    """Against a reference: each slot's last written obs / next_obs, by hand."""
    rng = np.random.default_rng(seed)
    memory = make_memory(kind, capacity=capacity, obs_shape=shape, obs_dtype=bool, seed=seed)
    assert isinstance(memory.storage, BitStorage)
    written: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for n in batches:
        obs, nxt = rng.random((n, *shape)) < 0.3, rng.random((n, *shape)) < 0.3
        if n == 1:
            slots = [memory.add(obs[0], 1, 0.5, nxt[0], False)]
        else:
            slots = memory.add_batch(obs, np.ones(n, int), np.zeros(n), nxt, np.zeros(n, bool))
        for k, slot in enumerate(slots):
            written[int(slot)] = (obs[k], nxt[k])
    batch = memory.sample(min(len(memory), 8), 0.5)
    assert batch.obs.dtype == np.bool_ and batch.obs.shape == (len(batch.indices), *shape)
    for k, slot in enumerate(batch.indices):
        np.testing.assert_array_equal(batch.obs[k], written[int(slot)][0])
        np.testing.assert_array_equal(batch.next_obs[k], written[int(slot)][1])


def test_state_round_trip_and_a_seaquest_transition_takes_under_500_bytes():
    """The issue's goal: at most a quarter of the naive layout (obs and next_obs as one byte a
    cell: 2,000 B) for Seaquest's (10, 10, 10) layers. Measured on the real arrays and planned
    the same."""
    memory = make_memory("proportional", capacity=1000, obs_shape=(10, 10, 10), obs_dtype=bool,
                         seed=0)  # fmt: skip
    planned = planned_nbytes("proportional", 1000, (10, 10, 10), bool)["total"]
    assert memory.nbytes == planned
    assert planned / 1000 <= 500
    naive = make_memory("proportional", capacity=1000, obs_shape=(10, 10, 10), obs_dtype=np.uint8)
    assert naive.nbytes / 1000 > 2000
    rng = np.random.default_rng(1)
    obs = rng.random((300, 10, 10, 10)) < 0.2
    memory.add_batch(obs[:-1], np.zeros(299, int), np.zeros(299), obs[1:], np.zeros(299, bool))
    copy = make_memory("proportional", capacity=1000, obs_shape=(10, 10, 10), obs_dtype=bool)
    copy.load_state_dict(memory.state_dict())
    a, b = memory.sample(32, 0.4), copy.sample(32, 0.4)
    np.testing.assert_array_equal(a.obs, b.obs)
    np.testing.assert_array_equal(a.next_obs, b.next_obs)


def test_other_dtypes_are_refused():
    with pytest.raises(ValueError, match="`obs_dtype` must be bool for bit-packed storage"):
        BitStorage(4, (3,), np.uint8)
