"""How many bytes a replay memory holds, computed before it is built.

``planned_nbytes`` asks each part for its own arithmetic: the storage layout ``make_storage``
would choose, the ring's fields, and the kind's priority index (``Sampler.planned_nbytes``; a test
checks the total against ``ReplayMemory.nbytes`` of real instances), so ``per-dqn plan`` and
``per-dqn train`` can refuse a memory that will not fit in RAM before a single page is touched,
instead of dying of OOM hours in.
"""

from __future__ import annotations

from collections.abc import Sequence

from per_dqn.memory.kinds import replay_kind
from per_dqn.memory.replay import storage_layout
from per_dqn.memory.storage import RING_FIELD_BYTES


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
        kind: one of ``KINDS``.
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
    capacity = int(capacity)
    index = replay_kind(kind).sampler.planned_nbytes(capacity)
    storage, options = storage_layout(obs_dtype, dedup_frames, frame_slack)
    observations = storage.observation_store.planned_nbytes(
        capacity, tuple(obs_shape), obs_dtype, **options
    )
    fields = capacity * RING_FIELD_BYTES
    return {
        "observations": observations,
        "fields": fields,
        "index": index,
        "total": observations + fields + index,
    }
