"""``planned_nbytes`` (what ``per-dqn plan`` prints before allocating) equals what memories hold."""

from __future__ import annotations

import numpy as np
import pytest

from per_dqn.memory import KINDS, make_memory, planned_nbytes


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("capacity", [1, 100, 1000, 5000])
@pytest.mark.parametrize(
    ("obs_shape", "obs_dtype", "dedup"),
    [
        ((4,), np.float32, False),
        ((4, 84, 84), np.uint8, False),
        ((4, 84, 84), np.uint8, True),
        ((10, 10, 10), np.bool_, False),
        ((4, 10, 10), np.bool_, False),
    ],
)
def test_planned_bytes_match_built_memories(kind, capacity, obs_shape, obs_dtype, dedup):
    """Pins the plan to the real allocation: a storage or index change must update both."""
    mem = make_memory(
        kind, capacity=capacity, obs_shape=obs_shape, obs_dtype=obs_dtype, dedup_frames=dedup
    )
    plan = planned_nbytes(kind, capacity, obs_shape, obs_dtype, dedup_frames=dedup)
    assert plan["total"] == mem.nbytes
    assert plan["total"] == plan["observations"] + plan["fields"] + plan["index"]


def test_atari_million_fits_the_target_per_transition():
    """Hand computation: 1M transitions of 4x84x84 frames with 2% slack.

    frames: 1,020,000 x (7056 + 8 + 8) bytes; pointers 1M x 32; fields 1M x 14; two trees of
    2 x 2**20 float64 nodes. About 7.27 KB a transition against 56.5 KB for whole stacks.
    """
    plan = planned_nbytes("proportional", 1_000_000, (4, 84, 84), np.uint8, dedup_frames=True)
    expected = 1_020_000 * 7072 + 1_000_000 * 32 + 1_000_000 * 14 + 2 * 2 * 2**20 * 8
    assert plan["total"] == expected
    assert plan["total"] / 1_000_000 < 7_500
    whole = planned_nbytes("proportional", 1_000_000, (4, 84, 84), np.uint8, dedup_frames=False)
    assert whole["observations"] == 1_000_000 * 2 * 4 * 84 * 84


def test_minatar_seaquest_per_transition_by_hand():
    """Hand computation: 100k Seaquest transitions (10 x 10 x 10 bool cells, 125 bytes packed).

    One packed obs and an int32 next-obs link a slot; the pool's first 100,000 / 32 = 3,125
    entries of a row and a free-list int32 each; fields 14 bytes a slot; two trees of
    2 x 2**17 float64 nodes: 189 bytes a transition, against 306 with next_obs stored whole.
    """
    plan = planned_nbytes("proportional", 100_000, (10, 10, 10), np.bool_)
    assert plan["observations"] == 100_000 * (125 + 4) + 3_125 * (125 + 4)
    assert plan["total"] == plan["observations"] + 100_000 * 14 + 2 * 2 * 2**17 * 8
    assert round(plan["total"] / 100_000) == 189


def test_unknown_kind_is_named():
    with pytest.raises(ValueError, match=r"`kind` must be one of .* got 'prio'"):
        planned_nbytes("prio", 10, (4,), np.float32)
