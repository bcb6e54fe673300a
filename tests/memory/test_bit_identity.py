"""Every draw, weight, priority and saved state is bit-identical to the memory before its redesign.

The digests below were computed by ``stream_digest`` on commit dcc030f (the memory as one class per
kind, before it became storage plus sampler) and pin the random draws and floating-point results
of every kind that existed then (uniform, proportional and rank; the later kinds were written on
storage plus sampler) on flat and frame storage. A change here means runs (and checkpoints written
before the change) no longer replay exactly: if it is intended, say so in the commit and
recompute the digests. They hold for numpy's PCG64 streams and IEEE float64 as numba compiles
this repository's kernels; a numpy or numba upgrade that changes them is worth knowing about too.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from replay_helpers import as_full_capacity

from per_dqn.memory import make_memory

# name -> (replay kind, its settings for make_memory)
CONFIGS = {
    "uniform": ("uniform", {}),
    "proportional": ("proportional", {}),
    "proportional-mixed": (
        "proportional",
        dict(
            alpha=0.7,
            priority_eps=1e-3,
            td_error_clip=1.5,
            uniform_mix=0.2,
            weight_normalization="batch",
        ),
    ),
    "rank": ("rank", {}),
    "rank-clipped": ("rank", dict(alpha=0.5, td_error_clip=1.0, sort_interval=7)),
}
BATCH_FIELDS = ("obs", "actions", "rewards", "next_obs", "terminated", "indices", "weights",
                "n_steps")  # fmt: skip

# Computed at dcc030f, from a checkout of it, with this file on sys.path:
#   python -c "from test_bit_identity import all_digests; print(all_digests())"
EXPECTED = {
    "uniform/flat": "7aa62fd77999beb18ba2e2bd9ae96f013d630923c088ffe0010452772657b78a",
    "uniform/frames": "cfaf4a128fab739cf832266f15112f0f605066da6407b7be0c91c498e9c043be",
    "proportional/flat": "0fc63fc174461c9f87b2af74b23f59f741d5bcc1d693a08f8993881ab24f3e49",
    "proportional/frames": "dfa9015cba58d85fc76d8199d728cfd77927a91d94625e2887bd8e65992cd8c3",
    "proportional-mixed/flat": "e68fc0d2b1efcbbf689b788990598b523cbdc66ce20b5f85f231f4c94b7082fc",
    "proportional-mixed/frames": "8b21b70bc87dc7269b190b182088737aff33db90fac87b3c6f3bed4928f599fe",
    "rank/flat": "79996ce6233bdea33ecca785b7daee32ec27033a4741a893a4cca8c8c526575c",
    "rank/frames": "8cf91319b8bcabbc462c0df5bc4494f29035a6135ebdce9d0aa709617ac20209",
    "rank-clipped/flat": "ac9dc139b7a1b8b48639dc0d9f150d34983cc750f048ee3ad07167668f507f49",
    "rank-clipped/frames": "b828b5403638084d2e48e4125469e452f6529a1ddc6dc7769f86d13ce2907da1",
}


def _feed(h, value) -> None:
    if isinstance(value, dict):
        for key in sorted(value):
            h.update(repr(key).encode())
            _feed(h, value[key])
    elif isinstance(value, np.ndarray):
        h.update(f"{value.dtype}{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    else:
        h.update(repr(value).encode())


def _obs(t: int, frames: bool) -> np.ndarray:
    if frames:  # a 4-frame stack of frames t .. t+3: consecutive stacks share three frames
        return np.stack([np.full((8, 8), (t + j) % 251, np.uint8) for j in range(4)])
    return np.full(3, t * 0.37, np.float32)


def stream_digest(name: str, frames: bool) -> str:
    """SHA-256 of a deterministic stream through the memory's public API (the part that existed
    before the redesign): single and batched adds with wrap-around, samples with varying batch
    size and beta, updates with zeros and repeated slots, and the state after every round."""
    kind, kw = CONFIGS[name]
    layout = dict(obs_shape=(4, 8, 8), obs_dtype=np.uint8, dedup_frames=True, frame_slack=0.5)
    mem = make_memory(
        kind, capacity=37, seed=5, **(layout if frames else dict(obs_shape=(3,))), **kw
    )
    rng = np.random.default_rng(42)
    h = hashlib.sha256()
    t = 0
    for rnd in range(40):
        if rnd % 3 == 0:
            n = int(rng.integers(1, 9))
            obs = np.stack([_obs(t + i, frames) for i in range(n)])
            nxt = np.stack([_obs(t + i + 1, frames) for i in range(n)])
            _feed(h, mem.add_batch(obs, rng.integers(0, 3, n), rng.random(n), nxt,
                                   rng.random(n) < 0.1, rng.integers(1, 4, n)))  # fmt: skip
            t += n
        else:
            _feed(h, mem.add(_obs(t, frames), int(rng.integers(3)), float(rng.random()),
                             _obs(t + 1, frames), bool(rng.random() < 0.1)))  # fmt: skip
            t += 1
        if len(mem) >= 4:
            size = int(rng.integers(1, min(len(mem), 24) + 1))
            batch = mem.sample(size, float(rng.choice([0.0, 0.4, 0.77, 1.0])))
            for field in BATCH_FIELDS:
                _feed(h, getattr(batch, field))
            if hasattr(mem.sampler, "priorities"):
                _feed(h, mem.sampler.priorities(batch.indices))
            td = np.abs(rng.standard_normal(size)) * rng.choice([0.1, 1.0, 5.0])
            if rnd % 5 == 0:
                td[: size // 2] = 0.0
            mem.update_priorities(np.r_[batch.indices, batch.indices[:1]], np.r_[td, 0.3])
        # In the layout of the memory before its states held the stored part alone.
        _feed(h, as_full_capacity(mem, mem.state_dict()))
    return h.hexdigest()


def all_digests() -> dict[str, str]:
    return {
        f"{name}/{'frames' if frames else 'flat'}": stream_digest(name, frames)
        for name in CONFIGS
        for frames in (False, True)
    }


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_stream_is_bit_identical_to_before_the_redesign(key):
    name, storage = key.split("/")
    assert stream_digest(name, storage == "frames") == EXPECTED[key]
