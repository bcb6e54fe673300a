"""Frame-deduplicated storage: every rebuilt stack is bit-identical to what was added."""

from __future__ import annotations

import numpy as np
import pytest

from per_dqn.memory import KINDS, make_memory
from per_dqn.memory.frames import FrameStorage

STACK, H, W = 4, 8, 8


def episode_stream(rng, length, padding):
    """The stacked observations a frame-stacking env emits over one episode of ``length`` steps.

    ``padding="reset"`` repeats the reset frame (gymnasium's FrameStackObservation default),
    ``"zero"`` pads with black frames. Frames are random, so every step's frame is new.
    """
    frames = rng.integers(0, 256, size=(length + 1, H, W), dtype=np.uint8)
    pad = frames[0] if padding == "reset" else np.zeros((H, W), np.uint8)
    history = [pad] * (STACK - 1) + list(frames)
    return [np.stack(history[t : t + STACK]) for t in range(length + 1)]


def record_transitions(seed, n_envs, episodes, n_step, padding):
    """Interleaved per-env transitions (obs_t, obs_{t+k}, k), like a vector env's loop emits."""
    rng = np.random.default_rng(seed)
    per_env = []
    for _ in range(n_envs):
        items = []
        for _ in range(episodes):
            stacks = episode_stream(rng, int(rng.integers(3, 15)), padding)
            last = len(stacks) - 1
            for t in range(last):
                k = min(n_step, last - t)  # shorter windows at the end: none spans episodes
                items.append((stacks[t], stacks[t + k], k, t + k == last))
        per_env.append(items)
    out = []
    for step in range(max(len(items) for items in per_env)):
        out.extend(items[step] for items in per_env if step < len(items))
    return out


def check_memory_holds(mem, transitions):
    kept = transitions[-len(mem) :]
    storage = mem.storage
    slots = [(storage.cursor - len(kept) + i) % storage.capacity for i in range(len(kept))]
    batch = storage.gather(np.array(slots), np.ones(len(slots)))
    for i, (obs, next_obs, k, terminated) in enumerate(kept):
        np.testing.assert_array_equal(batch.obs[i], obs)
        np.testing.assert_array_equal(batch.next_obs[i], next_obs)
        assert batch.n_steps[i] == k and batch.terminated[i] == terminated


@pytest.mark.parametrize("padding", ["reset", "zero"])
@pytest.mark.parametrize("n_step", [1, 3])
@pytest.mark.parametrize("n_envs", [1, 2])
def test_stacks_are_rebuilt_bit_exact(padding, n_step, n_envs):
    """Episode starts, wrap-around of both rings (100 slots for ~900 transitions), 2 envs."""
    transitions = record_transitions(0, n_envs, 100 // n_envs, n_step, padding)
    assert len(transitions) > 3 * 100
    mem = make_memory(
        "uniform", capacity=100, obs_shape=(STACK, H, W), obs_dtype=np.uint8, dedup_frames=True,
        frame_slack=0.5,
    )  # fmt: skip
    for i, (obs, next_obs, k, terminated) in enumerate(transitions):
        mem.add(obs, i % 3, float(i), next_obs, terminated, n_steps=k)
        if i % 97 == 0:
            check_memory_holds(mem, transitions[: i + 1])
    check_memory_holds(mem, transitions)


@pytest.mark.parametrize("kind", KINDS)
def test_frame_storage_plugs_under_every_memory(kind):
    transitions = record_transitions(1, 2, 10, 1, "reset")
    mem = make_memory(
        kind, capacity=64, obs_shape=(STACK, H, W), obs_dtype=np.uint8, dedup_frames=True, seed=0
    )
    obs = np.stack([t[0] for t in transitions[:50]])
    next_obs = np.stack([t[1] for t in transitions[:50]])
    mem.add_batch(obs, np.zeros(50), np.zeros(50), next_obs, np.zeros(50, bool))
    batch = mem.sample(16, beta=0.5)
    np.testing.assert_array_equal(batch.obs, obs[batch.indices])
    np.testing.assert_array_equal(batch.next_obs, next_obs[batch.indices])
    rows = mem.sampler.rows(16)
    assert batch.obs.dtype == np.uint8 and batch.obs.shape == (rows, STACK, H, W)


def test_one_frame_per_step_plus_one_per_episode():
    """A 1-step stream stores each env frame once: frames used = transitions + episodes."""
    transitions = record_transitions(2, 1, 10, 1, "reset")
    storage = FrameStorage(1000, (STACK, H, W), np.uint8)
    for obs, next_obs, k, terminated in transitions:
        storage.write(obs, 0, 0.0, next_obs, terminated, k)
    used = int((storage.observations.frame_ref >= 0).sum())
    assert used == len(transitions) + 10


def test_episodes_too_short_for_the_slack_fail_clearly():
    storage = FrameStorage(64, (STACK, H, W), np.uint8, frame_slack=0.1)  # 64 + 256 frames
    rng = np.random.default_rng(0)
    with pytest.raises(RuntimeError, match="raise `frame_slack`"):
        for _ in range(100):  # every transition brings 8 new frames: 64 * 8 cannot fit
            obs, next_obs = rng.integers(0, 256, size=(2, STACK, H, W), dtype=np.uint8)
            storage.write(obs, 0, 0.0, next_obs, False, 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"obs_shape": (4, 84)}, r"obs_shape \(stack, height, width\), got \(4, 84\)"),
        ({"obs_dtype": np.float32}, "needs obs_dtype uint8, got float32"),
        ({"obs_shape": (4, 3, 3)}, "multiple of 8, got 9"),
        ({"frame_slack": 0.0}, r"`frame_slack` must be in \(0, 1\], got 0.0"),
    ],
)
def test_bad_layouts_are_refused(kwargs, message):
    args = {"obs_shape": (STACK, H, W), "obs_dtype": np.uint8, **kwargs}
    with pytest.raises(ValueError, match=message):
        make_memory("uniform", capacity=8, dedup_frames=True, **args)


def test_state_dict_round_trip():
    transitions = record_transitions(3, 2, 6, 3, "zero")
    mem = make_memory(
        "proportional", capacity=40, obs_shape=(STACK, H, W), obs_dtype=np.uint8,
        dedup_frames=True, seed=1,
    )  # fmt: skip
    for obs, next_obs, k, terminated in transitions:
        mem.add(obs, 0, 0.0, next_obs, terminated, n_steps=k)
    clone = make_memory(
        "proportional", capacity=40, obs_shape=(STACK, H, W), obs_dtype=np.uint8,
        dedup_frames=True, seed=9,
    )  # fmt: skip
    clone.load_state_dict(mem.state_dict())
    a, b = mem.sample(8, beta=0.5), clone.sample(8, beta=0.5)
    for field in a._fields:
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    check_memory_holds(clone, transitions)


@pytest.mark.parametrize("n_step", [1, 3])
def test_stale_shortcut_pointers_cost_a_hash_never_a_wrong_stack(n_step):
    """A write first compares each frame with the previous write's frames (its pointers kept
    on the side, never saved). After ``load_state_dict`` of another memory those pointers would
    name frames that now hold other bytes, or frames past the ones the state holds: the load
    forgets them (a hint into a frame past the state's would make a later state leave out a
    frame a transition points to, ``test_state_sized``), so the next writes still rebuild
    bit-exact and a 1-step stream still stores one frame per step."""
    ours = record_transitions(4, 1, 8, n_step, "reset")
    theirs = record_transitions(5, 1, 16, n_step, "reset")
    split = len(theirs) // 2

    def memory():
        return make_memory(
            "uniform", capacity=64, obs_shape=(STACK, H, W), obs_dtype=np.uint8, dedup_frames=True
        )

    mem, source = memory(), memory()
    for obs, next_obs, k, terminated in ours:
        mem.add(obs, 0, 0.0, next_obs, terminated, n_steps=k)
    for obs, next_obs, k, terminated in theirs[:split]:
        source.add(obs, 0, 0.0, next_obs, terminated, n_steps=k)
    mem.load_state_dict(source.state_dict())
    used_before = int((mem.storage.observations.frame_ref >= 0).sum())
    for obs, next_obs, k, terminated in theirs[split:]:
        mem.add(obs, 0, 0.0, next_obs, terminated, n_steps=k)
    check_memory_holds(mem, theirs)
    if n_step == 1:
        new_episodes = sum(1 for t in theirs[split:] if t[3])
        used = int((mem.storage.observations.frame_ref >= 0).sum())
        # one new frame per step, one more per episode start (the first stack's reset frame)
        assert used - used_before <= len(theirs) - split + new_episodes
