"""A memory's state holds what it stores, not its capacity (issue 45: an Atari checkpoint of
51,112 transitions was 7.3 GB, the size of the 1M memory, and its writing held a second copy of
the memory in RAM).

Every kind of the registry, on each storage layout (flat, bit-packed, frame-deduplicated):
- the state's per-slot arrays hold the ``size`` stored transitions, the frame storage's frame
  arrays the frames written so far, the priorities one a stored transition;
- ``state_dict(copy=False)`` hands out views of the memory's own arrays (no second copy);
- a state written before, at full capacity, loads and continues exactly as the sized one;
- a state loaded into a memory that had stored more continues exactly as a fresh one would.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from replay_helpers import as_full_capacity
from support import assert_same_state

from per_dqn.memory import KINDS, make_memory
from per_dqn.memory.frames import _FREE

LAYOUTS = {
    "flat": dict(obs_shape=(2,)),
    "bits": dict(obs_shape=(3, 5), obs_dtype=np.bool_),
    "frames": dict(obs_shape=(4, 8, 8), obs_dtype=np.uint8, dedup_frames=True, frame_slack=0.5),
}
CAPACITY = 64


def observation(layout: str, t: int) -> np.ndarray:
    """Observation ``t`` of a stream in which ``next_obs`` of ``t`` is observation ``t + 1``."""
    if layout == "frames":
        return np.stack([np.full((8, 8), (t + j) % 251, np.uint8) for j in range(4)])
    if layout == "bits":
        return (np.arange(15).reshape(3, 5) * (t + 1)) % 3 == 0
    return np.full(2, t * 0.5, np.float32)


def memory(kind: str, layout: str, seed: int = 0):
    return make_memory(kind, capacity=CAPACITY, seed=seed, **LAYOUTS[layout])


def add(mem, layout: str, start: int, n: int) -> None:
    for t in range(start, start + n):
        mem.add(observation(layout, t), t % 3, float(t % 5), observation(layout, t + 1), t % 9 == 8)


def play(mem, rounds: int = 6, seed: int = 1) -> list:
    """Samples, priority updates and adds, as training interleaves them; what each returned."""
    rng = np.random.default_rng(seed)
    seen = []
    layout = "frames" if mem.storage.obs_shape == (4, 8, 8) else None
    for r in range(rounds):
        batch = mem.sample(8, beta=0.5)
        seen.append(batch)
        mem.update_priorities(batch.indices, rng.exponential(size=len(batch.indices)))
        obs = observation(layout or ("bits" if mem.storage.obs_dtype == np.bool_ else "flat"), r)
        seen.append(mem.add(obs, 1, 0.5, obs, False))
    return seen


def assert_same_play(a: list, b: list) -> None:
    for x, y in zip(a, b, strict=True):
        if isinstance(x, int):
            assert x == y
            continue
        for field in x._fields:
            np.testing.assert_array_equal(getattr(x, field), getattr(y, field), strict=True)


def per_slot(state: dict) -> dict:
    """The storage arrays that hold one row a slot."""
    shared = ("frames", "frame_hash", "frame_ref", "pool", "pool_free")
    return {
        k: v for k, v in state["storage"].items() if isinstance(v, np.ndarray) and k not in shared
    }


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_state_holds_the_stored_transitions_not_the_capacity(kind, layout):
    mem = memory(kind, layout)
    add(mem, layout, 0, 10)
    state = mem.state_dict()
    assert state["storage"]["size"] == 10
    for name, rows in per_slot(state).items():
        assert len(rows) == 10, name
    if layout == "frames":
        # 10 stacks of 4 frames each a frame on from the one before: frames 0..13, once each
        assert [len(state["storage"][k]) for k in ("frames", "frame_hash", "frame_ref")] == [14] * 3
    if "priorities" in state:
        assert len(state["priorities"]) == 10
    add(mem, layout, 10, 2 * CAPACITY)  # full: every slot
    for name, rows in per_slot(mem.state_dict()).items():
        assert len(rows) == CAPACITY, name


@pytest.mark.parametrize("layout", LAYOUTS)
def test_views_share_the_memory_and_copies_do_not(layout):
    mem = memory("proportional", layout)
    add(mem, layout, 0, 10)
    arrays = per_slot(mem.state_dict(copy=False))
    copies = per_slot(mem.state_dict())
    storage = mem.storage
    for name, view in arrays.items():
        whole = getattr(storage, name, getattr(storage.observations, name, None))
        assert np.shares_memory(view, whole), name
        assert not np.shares_memory(copies[name], whole), name


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_state_written_at_full_length_loads_as_the_sized_one(kind, layout):
    """Checkpoints written before this change hold every array at full capacity."""
    mem = memory(kind, layout)
    add(mem, layout, 0, 21)
    play(mem, rounds=3)
    state = copy.deepcopy(mem.state_dict())
    sized, legacy = memory(kind, layout, seed=7), memory(kind, layout, seed=8)
    sized.load_state_dict(state)
    legacy.load_state_dict(as_full_capacity(mem, state))
    assert_same_state(sized.state_dict(), state)
    assert_same_state(legacy.state_dict(), state)
    expected = play(mem)
    assert_same_play(play(sized), expected)
    assert_same_play(play(legacy), expected)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_state_loaded_over_a_fuller_memory_continues_as_a_fresh_one(kind, layout):
    """The rows past the state's are left as the loading memory had them, and must not matter;
    the frame storage resets the frames it had written past the state's, which its writes
    would otherwise find (their hashes and references)."""
    mem = memory(kind, layout)
    add(mem, layout, 0, 12)
    state = copy.deepcopy(mem.state_dict())
    fresh, used = memory(kind, layout, seed=3), memory(kind, layout, seed=4)
    add(used, layout, 500, CAPACITY + 5)  # other transitions, in every slot
    fresh.load_state_dict(state)
    used.load_state_dict(state)
    expected = play(fresh, rounds=20)
    assert_same_play(play(used, rounds=20), expected)
    assert_same_state(used.state_dict(), fresh.state_dict())
    if layout == "frames":
        frames = used.storage.observations
        assert frames.frames_used() == fresh.storage.observations.frames_used()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda s: s["storage"].update(actions=s["storage"]["actions"][:5]),
         r"storage field `actions` must be int64\[10 or 64\], got int64\[5\]"),
        (lambda s: s["storage"].update(cursor=3),
         r"storage `cursor` must be 10 \(its size\) before the ring is full, got 3"),
        (lambda s: s.update(priorities=s["priorities"][:4]),
         r"`priorities` must have shape \(10 or 64,\), got \(4,\)"),
    ],
)  # fmt: skip
def test_a_state_of_the_wrong_length_is_refused_and_changes_nothing(damage, message):
    mem = memory("proportional", "flat")
    add(mem, "flat", 0, 10)
    state = copy.deepcopy(mem.state_dict())
    damage(state)
    target = memory("proportional", "flat", seed=2)
    add(target, "flat", 100, 3)
    before = copy.deepcopy(target.state_dict())
    with pytest.raises(ValueError, match=message):
        target.load_state_dict(state)
    assert_same_state(target.state_dict(), before)


def test_a_frame_pointer_past_the_frames_held_is_refused():
    mem = memory("uniform", "frames")
    add(mem, "frames", 0, 10)
    state = copy.deepcopy(mem.state_dict())
    state["storage"]["obs_ptr"][3, 1] = 14  # 14 frames held: 0..13
    with pytest.raises(
        ValueError, match=r"`obs_ptr` must point into the 14 frames stored, got 0 to 14"
    ):
        memory("uniform", "frames", seed=2).load_state_dict(state)


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=12),
    capacity=st.integers(8, 48),
    n_step=st.integers(1, 3),
)
def test_the_frames_written_are_a_prefix_of_the_ring_until_it_wraps(lengths, capacity, n_step):
    """``frames_used`` counts the frames a state holds: it must cover every frame a stored
    transition points to, and every frame past it must read as never written."""
    mem = make_memory(
        "uniform", capacity=capacity, obs_shape=(4, 8, 8), obs_dtype=np.uint8,
        dedup_frames=True, frame_slack=1.0,
    )  # fmt: skip
    t = 0
    for length in lengths:
        frames = [np.full((8, 8), (t + j) % 251, np.uint8) for j in range(length + 3)]
        stacks = [np.stack(frames[i : i + 4]) for i in range(length)]
        for i in range(length - 1):
            k = min(n_step, length - 1 - i)
            mem.add(stacks[i], 0, 0.0, stacks[i + k], i + k == length - 1, n_steps=k)
        t += length + 3
    store = mem.storage.observations
    used = store.frames_used()
    # Until the ring wraps its cursor sits right past the frames written, which the load checks.
    assert used == len(store.frames) or store.frame_cursor == used
    assert (store.frame_ref[used:] == _FREE).all() and not store.frames[used:].any()
    size = len(mem)
    if size:
        assert max(store.obs_ptr[:size].max(), store.next_ptr[:size].max()) < used
