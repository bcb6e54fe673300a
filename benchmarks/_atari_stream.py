"""The data of ``benchmarks/atari.py``'s replay section (2): distinct 84x84 frames made from
integer ids (``FrameSource``), and transitions made of them as an env emits them
(``EpisodeStream``), so that every stack a memory returns can be checked against the truth bit for
bit.

Not a benchmark on its own: ``_atari_replay_rows.py`` fills the memories with these streams, and
``_atari_replay.py`` times them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from learner import NUM_ACTIONS

STACK, SCREEN = 4, 84
FRAME_ITEMS = SCREEN * SCREEN
OBS_SHAPE = (STACK, SCREEN, SCREEN)
EPISODE_STEPS = (100, 600)  # episode lengths are drawn uniformly from [100, 600)
BASE_FRAMES = 1024  # random frames the stamped frames are made from


class FrameSource:
    """Distinct 84x84 uint8 frames made from integer ids, cheaply and reproducibly.

    Frame ``f`` is random base frame ``f % 1024`` with ``f`` written into its first 8 bytes, so
    any stack a memory returns names the frames it holds, and a few hundred MB of truth stand in
    for the 7 GB a million stored frames would take.
    """

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.base = rng.integers(0, 256, (BASE_FRAMES, FRAME_ITEMS), dtype=np.uint8)

    def frames(self, ids: np.ndarray) -> np.ndarray:
        """Frames ``(*ids.shape, 84, 84)`` for integer frame ids."""
        ids = np.asarray(ids, dtype=np.int64)
        out = self.base[ids % BASE_FRAMES]
        out[..., :8] = ids[..., None].astype("<i8").view(np.uint8)
        return out.reshape(*ids.shape, SCREEN, SCREEN)


@dataclass(frozen=True)
class EpisodeStream:
    """Transitions as an env emits them: frame ids of each ``obs`` stack and the next frame.

    ``ids[k]`` holds 5 frame ids: ``obs`` is frames ``ids[k, :4]``, ``next_obs`` is
    ``ids[k, 1:]``. An episode of ``L`` steps owns ``L + 1`` fresh frames (the reset frame and one
    per step); its first stacks repeat the reset frame where there is no earlier one (gymnasium's
    ``FrameStackObservation`` padding). Each episode's last transition is terminal; the stream
    ends on an episode's end.
    """

    ids: np.ndarray  # (n, 5) int64
    terminated: np.ndarray  # (n,) bool
    actions: np.ndarray  # (n,) int64
    rewards: np.ndarray  # (n,) float32
    next_frame_id: int  # first id the next stream may use

    @classmethod
    def make(cls, n: int, first_frame_id: int, rng: np.random.Generator) -> EpisodeStream:
        """``n`` transitions in episodes of random length; the last one is cut to end at ``n``."""
        ids = np.empty((n, STACK + 1), dtype=np.int64)
        terminated = np.zeros(n, dtype=np.bool_)
        window = np.arange(-(STACK - 1), 2)  # frame offsets of obs (first 4) and next_obs (last 4)
        frame, k = first_frame_id, 0
        while k < n:
            steps = min(int(rng.integers(*EPISODE_STEPS)), n - k)
            episode_frames = frame + np.arange(steps + 1)
            offsets = np.arange(steps)[:, None] + window
            ids[k : k + steps] = episode_frames[np.clip(offsets, 0, None)]
            terminated[k + steps - 1] = True
            frame += steps + 1
            k += steps
        return cls(
            ids=ids,
            terminated=terminated,
            actions=rng.integers(0, NUM_ACTIONS, n),
            rewards=rng.choice(np.array([0.0, 1.0], dtype=np.float32), n, p=[0.9, 0.1]),
            next_frame_id=frame,
        )

    def __len__(self) -> int:
        return self.ids.shape[0]

    def episodes(self) -> list[slice]:
        """One slice per episode."""
        ends = np.flatnonzero(self.terminated) + 1
        return [slice(int(a), int(b)) for a, b in zip(np.r_[0, ends[:-1]], ends, strict=True)]

    def chunks(self, size: int) -> list[slice]:
        """Consecutive slices of at most ``size`` transitions."""
        n = len(self)
        return [slice(a, min(a + size, n)) for a in range(0, n, size)]
