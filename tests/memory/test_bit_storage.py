"""Bit-packed storage of bool observations (MinAtar's object layers): lossless, eight cells a byte,
each next observation shared with a later slot's obs where the bytes are equal, chosen for bool
observations whatever the replay kind.

The reference is ``TransitionStorage`` with bool observations: it stores ``obs`` and ``next_obs``
of every slot whole, so it cannot get a link wrong."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from per_dqn.memory import KINDS, BitStorage, TransitionStorage, make_memory, planned_nbytes
from per_dqn.training.nstep import NStepAccumulator, stack


def assert_same_contents(storage: BitStorage, reference: TransitionStorage) -> None:
    """Every stored slot gathers exactly the reference's transition, and the pool holds exactly
    one entry per distinct next observation that no slot written at or after its own has as
    obs (the slots that need one), so never more entries than such slots."""
    assert (storage.cursor, storage.size) == (reference.cursor, reference.size)
    if reference.size == 0:
        return
    slots = np.arange(reference.size)
    got = storage.gather(slots, np.ones(reference.size))
    want = reference.gather(slots, np.ones(reference.size))
    for field in ("obs", "actions", "rewards", "next_obs", "terminated", "n_steps"):
        a, b = getattr(got, field), getattr(want, field)
        assert a.dtype == b.dtype and a.shape == b.shape, field
        np.testing.assert_array_equal(a, b, err_msg=field)
    order = (reference.cursor - reference.size + np.arange(reference.size)) % reference.capacity
    needing = set()
    for age, slot in enumerate(order):
        whole = reference.observations
        later = whole.obs[order[age:]]
        if not (later == whole.next_obs[slot]).reshape(len(later), -1).all(axis=1).any():
            needing.add(whole.next_obs[slot].tobytes())
    assert storage.observations.pool_used == len(needing)


def write(storages, transitions) -> None:
    """Writes the same transitions to every storage: ``write`` for one, ``write_batch`` else."""
    if len(transitions) == 1:
        for storage in storages:
            storage.write(*transitions[0])
    elif transitions:
        batch = stack(transitions)
        for storage in storages:
            storage.write_batch(*batch)


@st.composite
def streams(draw):
    """Random vector-env streams cut into n-step windows: a small alphabet of observations
    (repeats within and across envs, steps where nothing moves), random terminations and
    truncations, and now and then a burst of more transitions than the capacity at once."""
    shape = draw(st.sampled_from([(3,), (2, 3, 2), (10, 3), (2, 2, 5)]))
    alphabet_size = draw(st.integers(1, 6))
    num_envs = draw(st.integers(1, 4))
    n_step = draw(st.integers(1, 3))
    capacity = draw(st.integers(1, 16))
    pool_entries = draw(st.integers(1, capacity))
    steps = draw(st.integers(1, 40))
    p_end = draw(st.sampled_from([0.0, 0.1, 0.3, 0.7]))
    p_burst = draw(st.sampled_from([0.0, 0.05]))
    resume_at = draw(st.integers(0, steps))
    seed = draw(st.integers(0, 2**32 - 1))
    return (
        shape, alphabet_size, num_envs, n_step, capacity, pool_entries, steps, p_end, p_burst,
        resume_at, seed,
    )  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(streams())
def test_gathers_equal_a_storage_without_sharing_on_every_stream(stream):
    """Against the reference after every write: n-step windows of 1..3 from 1..4 envs (so
    ``write`` and ``write_batch``), episode ends, repeated observations, the ring wrapping many
    times, batches longer than the capacity, a pool that starts small and grows; a state round
    trip (into a storage with the default pool) mid-stream continues exactly
    (same contents and the same state as the storage never reloaded). A link to an older slot
    fails here once that slot is overwritten (mutant ``bits-link-older``)."""
    (
        shape, alphabet_size, num_envs, n_step, capacity, pool_entries, steps, p_end, p_burst,
        resume_at, seed,
    ) = stream  # fmt: skip
    rng = np.random.default_rng(seed)
    alphabet = rng.random((alphabet_size, *shape)) < 0.5
    storage = BitStorage(capacity, shape, pool_entries=pool_entries)  # grows from there
    reference = TransitionStorage(capacity, shape, np.bool_)
    acc = NStepAccumulator(num_envs, n_step, gamma=0.9)
    state = rng.integers(alphabet_size, size=num_envs)
    for step in range(steps):
        if step == resume_at:
            reloaded = BitStorage(capacity, shape)
            reloaded.load_state_dict(storage.state_dict())
            assert_same_contents(reloaded, reference)
            storages = [storage, reloaded]
        else:
            storages = [storage] if step < resume_at else storages
        if rng.random() < p_burst:
            k = int(rng.integers(1, 2 * capacity + 2))
            burst = [
                (alphabet[rng.integers(alphabet_size)], int(rng.integers(4)), float(j),
                 alphabet[rng.integers(alphabet_size)], bool(rng.random() < 0.5), 1)
                for j in range(k)
            ]  # fmt: skip
            write([*storages, reference], burst)
            assert_same_contents(storage, reference)
        stay = rng.random(num_envs) < 0.3  # nothing moved this step
        nxt = np.where(stay, state, rng.integers(alphabet_size, size=num_envs))
        ended = rng.random(num_envs) < p_end
        terminated = ended & (rng.random(num_envs) < 0.5)
        fresh = acc.step(
            alphabet[state], rng.integers(4, size=num_envs), rng.random(num_envs),
            alphabet[nxt], terminated, ended & ~terminated, np.ones(num_envs, bool),
        )  # fmt: skip
        write([*storages, reference], fresh)
        assert_same_contents(storage, reference)
        state = np.where(ended, rng.integers(alphabet_size, size=num_envs), nxt)
    if resume_at < steps:
        assert_same_contents(reloaded, reference)
        a, b = storage.state_dict(), reloaded.state_dict()
        assert a.keys() == b.keys()
        for name in a:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def test_a_real_seaquest_stream_with_two_envs_and_three_step_windows():
    """Real MinAtar Seaquest, random play, two envs, n = 3: 3,000 env steps into 700 slots (the
    ring wraps eight times) gather exactly what the reference stored, and only the episodes'
    ends wait in the pool."""
    from per_dqn.config import Override, load_config, resolve_config_path
    from per_dqn.envs.make import make_vector_env

    config = load_config(
        resolve_config_path("minatar.yaml"),
        [Override("env.id", "MinAtar/Seaquest-v1"), Override("env.num_envs", 2)],
    )
    envs = make_vector_env(config.env)
    try:
        obs, _ = envs.reset(seed=0)
        shape = obs.shape[1:]
        storage, reference = BitStorage(700, shape), TransitionStorage(700, shape, np.bool_)
        acc = NStepAccumulator(2, 3, gamma=0.99)
        rng = np.random.default_rng(0)
        active = np.ones(2, bool)
        for _ in range(1500):
            actions = rng.integers(envs.single_action_space.n, size=2)
            next_obs, rewards, terminated, truncated, _ = envs.step(actions)
            fresh = acc.step(obs, actions, rewards, next_obs, terminated, truncated, active)
            write([storage, reference], fresh)
            active = ~(terminated | truncated)  # next-step autoreset: the next step only resets
            obs = next_obs
    finally:
        envs.close()
    assert_same_contents(storage, reference)
    assert storage.observations.pool_used < 700 // 10  # episode ends, not every slot
    assert storage.nbytes < reference.nbytes / 10  # 1,000 bool cells whole, twice, against bits


def test_a_link_to_an_older_slot_is_caught_once_that_slot_is_overwritten():
    """Negative control of ``assert_same_contents``: slot 0's next obs equals slot 1's obs and
    is linked to slot 1 (written after it). Relinked by hand to slot 3, an older copy of the same
    bytes, it gathers right until slot 3 is overwritten, then wrong; the check sees it."""
    a, b, c = (np.array([x, y, z]) for x, y, z in ((1, 0, 0), (0, 1, 0), (0, 0, 1)))
    storage, reference = BitStorage(4, (3,)), TransitionStorage(4, (3,), np.bool_)
    for obs, nxt in ((a, b), (c, a), (c, b), (b, c), (a, b)):  # slots 0, 1, 2, 3, 0
        write([storage, reference], [(obs, 0, 0.0, nxt, False, 1)])
    write([storage, reference], [(c, 0, 0.0, b, False, 1)])  # slot 1, its obs c
    # slot 0 holds (a -> b), b is slot 3's obs (older) and later slot 2's next obs
    write([storage, reference], [(b, 0, 0.0, a, False, 1)])  # slot 2: links slot 1 and 0 here
    assert int(storage.observations.next_ref[0]) == 2
    storage.observations.next_ref[0] = 3  # the same bytes, in an older slot
    assert_same_contents(storage, reference)  # right while slot 3 lives
    write([storage, reference], [(c, 0, 0.0, c, False, 1)])  # overwrites slot 3
    with pytest.raises(AssertionError, match="next_obs"):
        assert_same_contents(storage, reference)


def test_a_state_with_a_link_to_an_older_slot_is_refused_and_nothing_changes():
    storage = BitStorage(4, (3,))
    a, b = np.array([1, 0, 0], bool), np.array([0, 1, 0], bool)
    for obs, nxt in ((a, b), (b, a), (a, b)):
        storage.write(obs, 0, 0.0, nxt, False, 1)
    state = storage.state_dict()
    assert int(state["next_ref"][1]) == 2
    state["next_ref"][1] = 0  # slot 0's obs is a as well, but older
    before = storage.state_dict()
    with pytest.raises(ValueError, match="`next_ref` links a slot to an older or empty slot"):
        storage.load_state_dict(state)
    for name, value in storage.state_dict().items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)
    missing = {k: v for k, v in before.items() if k != "pool"}
    with pytest.raises(ValueError, match="storage field `pool` is missing"):
        BitStorage(4, (3,)).load_state_dict(missing)


def test_a_checkpoint_storing_next_obs_whole_loads_and_continues_exactly():
    """Checkpoints written before the sharing stored ``next_obs`` packed per slot: they load,
    linked as if written now, and the memory goes on exactly."""
    rng = np.random.default_rng(3)
    alphabet = rng.random((5, 10, 10, 4)) < 0.3
    reference = TransitionStorage(50, (10, 10, 4), np.bool_)
    states = rng.integers(5, size=131)
    for t in range(130):
        reference.write(alphabet[states[t]], t % 3, float(t), alphabet[states[t + 1]], False, 1)
    old = reference.state_dict()
    old["obs"] = np.packbits(old["obs"].reshape(50, -1), axis=-1)
    old["next_obs"] = np.packbits(old["next_obs"].reshape(50, -1), axis=-1)
    storage = BitStorage(50, (10, 10, 4))
    storage.load_state_dict(old)
    assert_same_contents(storage, reference)
    for t in range(130, 200):
        obs, nxt = alphabet[t % 5], alphabet[(t + 1) % 5]
        write([storage, reference], [(obs, 0, 0.0, nxt, t % 7 == 0, 1)])
    assert_same_contents(storage, reference)


@settings(max_examples=40, deadline=None)
@given(
    shape=st.sampled_from([(1,), (3, 5, 7), (4, 10, 10), (10, 10, 10), (9,)]),
    capacity=st.integers(1, 40),
    batches=st.lists(st.integers(1, 12), min_size=1, max_size=6),
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 2**16),
)
def test_sampled_observations_are_exactly_what_was_added(shape, capacity, batches, kind, seed):
    """Against a reference: each slot's last written obs / next_obs, by hand (independent
    random observations: nearly every next obs waits in the pool, which grows)."""
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


def test_the_pool_grows_by_half_when_full_and_the_bytes_say_so():
    """Capacity 6,400: 200 pool entries (one per 32 slots) of 125 bytes; transitions whose
    next obs never come back fill them, and 301 grow the pool to 300, then 450 entries."""
    storage = BitStorage(6400, (10, 10, 10))
    assert storage.observations.pool.shape[0] == 200
    fresh = storage.nbytes
    rng = np.random.default_rng(0)
    for _ in range(301):
        storage.write(rng.random((10, 10, 10)) < 0.5, 0, 0.0, rng.random((10, 10, 10)) < 0.5,
                      True, 1)  # fmt: skip
    assert storage.observations.pool_used == 301 and storage.observations.pool.shape[0] == 450
    assert storage.nbytes - fresh == 250 * (125 + 4)  # a row and a free-list entry each


def test_state_round_trip_and_a_seaquest_transition_takes_under_500_bytes():
    """The issue's goal: at most a quarter of the naive layout (obs and next_obs as one byte a
    cell: 2,000 B) for Seaquest's (10, 10, 10) layers. Measured on the real arrays and planned
    the same: 125 B of obs, a 4 B link, 14 B of fields, the pool's 1/32 of (125 + 4) B and the
    sum and min trees (2 x 2 x 1,024 float64 nodes for 1,000 slots)."""
    memory = make_memory("proportional", capacity=1000, obs_shape=(10, 10, 10), obs_dtype=bool,
                         seed=0)  # fmt: skip
    planned = planned_nbytes("proportional", 1000, (10, 10, 10), bool)["total"]
    assert memory.nbytes == planned == 1000 * (125 + 4 + 14) + 64 * (125 + 4) + 4 * 1024 * 8
    assert planned / 1000 <= 500
    naive = make_memory("proportional", capacity=1000, obs_shape=(10, 10, 10), obs_dtype=np.uint8)
    assert naive.nbytes / 1000 > 2000
    rng = np.random.default_rng(1)
    obs = rng.random((300, 10, 10, 10)) < 0.2
    memory.add_batch(obs[:-1], np.zeros(299, int), np.zeros(299), obs[1:], np.zeros(299, bool))
    assert memory.storage.observations.pool_used == 1  # only the last next obs waits
    copy = make_memory("proportional", capacity=1000, obs_shape=(10, 10, 10), obs_dtype=bool)
    copy.load_state_dict(memory.state_dict())
    a, b = memory.sample(32, 0.4), copy.sample(32, 0.4)
    np.testing.assert_array_equal(a.obs, b.obs)
    np.testing.assert_array_equal(a.next_obs, b.next_obs)


def test_other_dtypes_are_refused():
    with pytest.raises(ValueError, match="`obs_dtype` must be bool for bit-packed storage"):
        BitStorage(4, (3,), np.uint8)
