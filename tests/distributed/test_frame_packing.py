"""Each frame once between an actor and the learner (issue 47): ``frames.pack`` and ``unpack``
give back the stacks they were given, for any stacks (property test), and cut a real Atari
block's bytes about eightfold; other observations travel as they are."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from per_dqn.config import Override, load_config, resolve_config_path
from per_dqn.distributed.actor import Actor
from per_dqn.distributed.frames import pack, unpack
from per_dqn.training.nstep import Transitions
from per_dqn.training.seeding import RunSeeds


def transitions(obs: np.ndarray, next_obs: np.ndarray) -> Transitions:
    n = obs.shape[0]
    return Transitions(obs, np.arange(n), np.ones(n, np.float32), next_obs,
                       np.zeros(n, np.bool_), np.full(n, 3, np.uint8))  # fmt: skip


@st.composite
def stacked_blocks(draw):
    """Stacks of k frames taken from a pool of few distinct 3x2 frames (so that they repeat, as
    a game's do), at any positions: overlapping windows, repeats, episode starts, anything."""
    k = draw(st.integers(1, 4))
    n = draw(st.integers(0, 12))
    pool = draw(st.integers(1, 6))
    frames = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).integers(
        0, 3, size=(pool, 3, 2), dtype=np.uint8
    )
    index = st.lists(st.integers(0, pool - 1), min_size=n * k, max_size=n * k)
    obs = frames[np.asarray(draw(index), dtype=np.int64)].reshape(n, k, 3, 2)
    next_obs = frames[np.asarray(draw(index), dtype=np.int64)].reshape(n, k, 3, 2)
    return transitions(obs, next_obs)


@settings(max_examples=200, deadline=None)
@given(stacked_blocks())
def test_unpack_gives_back_the_stacks_pack_was_given(block):
    """Every stack back, byte for byte, in its dtype and shape; each distinct frame sent once
    and no frame sent that no stack uses; the other fields untouched."""
    sent, packed = pack(block)
    if block.obs.shape[0] == 0:
        assert packed is None and sent is block
        return
    assert sent.obs.size == sent.next_obs.size == 0
    both = np.concatenate([block.obs, block.next_obs]).reshape(-1, 3, 2)
    distinct = {frame.tobytes() for frame in both}
    assert len(packed.frames) == len(distinct)
    assert {frame.tobytes() for frame in packed.frames} == distinct
    back = unpack(sent, packed)
    for got, want in zip(back, block, strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "obs",
    [
        np.zeros((5, 4), np.float32),
        np.zeros((5, 4, 10, 10), np.bool_),
        np.zeros((5, 84, 84), np.uint8),
    ],
    ids=["CartPole", "MinAtar", "unstacked uint8"],
)
def test_other_observations_travel_as_they_are(obs):
    block = transitions(obs, obs.copy())
    sent, packed = pack(block)
    assert packed is None and sent is block
    assert unpack(sent, None) is block


def test_a_real_atari_block_travels_in_about_an_eighth_of_its_bytes():
    """50 steps of Pong by an actor (the shipped atari.yaml, 1-step transitions, 4-frame stacks):
    the packed block rebuilds its stacks exactly, and weighs under a sixth of the stacks (each
    step brings one new frame; a block's stacks hold each about 8 times)."""
    overrides = {"replay.capacity": 1000, "train.learning_starts": 64, "run.device": "cpu"}
    config = load_config(
        resolve_config_path("atari.yaml"), [Override(k, v) for k, v in overrides.items()]
    )
    with Actor(config, 0, 0.4, RunSeeds.for_actor(0, 0)) as actor:
        block = actor.collect(50)
    t = block.transitions
    assert len(block) >= 45 and t.obs.shape[1:] == (4, 84, 84)
    sent, packed = pack(t)
    whole = t.obs.nbytes + t.next_obs.nbytes
    assert packed.nbytes < whole / 6, (packed.nbytes, whole)
    assert len(packed.frames) <= len(block) + 2 * 4 + 3
    back = unpack(sent, packed)
    np.testing.assert_array_equal(back.obs, t.obs)
    np.testing.assert_array_equal(back.next_obs, t.next_obs)
