"""How many bytes a replay memory holds, computed before it is built.

``planned_nbytes`` mirrors the arrays each storage and index allocates (a test checks it against
``ReplayMemory.nbytes`` of real instances), so ``per-dqn plan`` and ``per-dqn train`` can refuse a
memory that will not fit in RAM before a single page is touched, instead of dying of OOM hours in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from per_dqn.memory import KINDS
from per_dqn.memory.frames import MIN_SPARE_FRAMES
from per_dqn.memory.storage import initial_pool_entries, link_dtype
from per_dqn.memory.trees import _leaf_offset

# actions int64 + rewards float32 + terminated bool + n_steps uint8, per transition.
_FIELD_BYTES = 8 + 4 + 1 + 1


def planned_nbytes(
    kind: str,
    capacity: int,
    obs_shape: Sequence[int],
    obs_dtype,
    dedup_frames: bool = False,
    frame_slack: float = 0.02,
) -> dict[str, int]:
    """Bytes of a memory's arrays, by part, without allocating them.

    Args:
        kind: ``uniform``, ``proportional`` or ``rank``.
        capacity: transitions kept.
        obs_shape: shape of one observation.
        obs_dtype: its dtype.
        dedup_frames: frame-deduplicated storage (``obs_shape`` is ``(stack, height, width)``).
        frame_slack: spare frames for episode starts, as a fraction of ``capacity``.

    Returns:
        ``observations`` (obs and next_obs, or frames with their hashes and the per-transition
        frame pointers, or for bool observations packed obs, next-obs links and the pool as
        first allocated), ``fields`` (actions, rewards, flags), ``index`` (trees or rank heap) and
        ``total``.

    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {KINDS}, got {kind!r}")
    capacity = int(capacity)
    obs_items = math.prod(int(d) for d in obs_shape)
    if dedup_frames:
        stack = int(obs_shape[0])
        frame_bytes = obs_items // stack * np.dtype(np.uint8).itemsize
        n_frames = capacity + max(math.ceil(capacity * frame_slack), MIN_SPARE_FRAMES)
        # frames + a uint64 hash and an int64 last-reference per frame; int32 pointers per stack.
        observations = n_frames * (frame_bytes + 8 + 8) + capacity * 2 * stack * 4
    else:
        if np.dtype(obs_dtype) == np.bool_:  # BitStorage: eight cells a byte, one row a slot
            row, link = (obs_items + 7) // 8, link_dtype(capacity).itemsize
            # obs and a next_obs link per slot; the pool's rows and free list as first allocated
            # (the floor: it grows by half whenever more next observations wait in it)
            observations = (capacity + initial_pool_entries(capacity)) * (row + link)
        else:
            observations = capacity * 2 * obs_items * np.dtype(obs_dtype).itemsize
    if kind == "proportional":
        index = 2 * (2 * _leaf_offset(capacity) * 8)  # sum tree and min tree, float64 nodes
    elif kind == "rank":
        # heap slots, keys and insertion stamps, slot positions, cumulative masses
        index = capacity * 5 * 8
    else:
        index = 0
    fields = capacity * _FIELD_BYTES
    return {
        "observations": observations,
        "fields": fields,
        "index": index,
        "total": observations + fields + index,
    }
