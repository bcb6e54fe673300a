"""Each frame once: how a block of stacked image observations travels from an actor to the
learner (Ape-X's frame-store format, issue 47).

An Atari transition holds two stacks of 4 frames (its observation and the one n steps later),
and consecutive transitions share all but one of them, so a block sent as stacks carries each
frame about eight times. ``pack`` keeps each distinct frame of a block once, with every stack
as indices into them; ``unpack`` rebuilds the stacks, equal to the ones packed. Frames are told
apart by their bytes, within a block: a frame a later block repeats is sent again with it (one
or two stacks' worth a block), so no state lives between blocks and a lost block loses nothing
of the next.

Only stacked uint8 images (``(N, k, H, W)``) are packed; other observations travel as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from per_dqn.training.nstep import Transitions


@dataclass(frozen=True)
class PackedFrames:
    """A block's stacks as distinct frames and indices into them.

    Attributes:
        frames: ``(F, H, W)`` uint8, each distinct frame once, in order of first use.
        obs: ``(N, k)`` int32, the frames of each observation's stack.
        next_obs: ``(N, k)`` int32, the same for each next observation.
    """

    frames: np.ndarray
    obs: np.ndarray
    next_obs: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.frames.nbytes + self.obs.nbytes + self.next_obs.nbytes)


def packable(obs: np.ndarray) -> bool:
    """Whether observations ``(N, ...)`` are stacked uint8 images, ``(N, k, H, W)``."""
    return obs.dtype == np.uint8 and obs.ndim == 4


def pack(transitions: Transitions) -> tuple[Transitions, PackedFrames | None]:
    """``transitions`` with their observations moved into a ``PackedFrames`` (left as empty
    arrays of their dtype and frame shape), or as they are and None where they are not stacked
    uint8 images."""
    obs, next_obs = transitions.obs, transitions.next_obs
    if not packable(obs) or obs.shape[0] == 0:
        return transitions, None
    n, k = obs.shape[:2]
    both = np.concatenate([obs, next_obs]).reshape(2 * n * k, -1)
    index: dict[bytes, int] = {}
    order = np.empty(2 * n * k, dtype=np.int32)
    for i, frame in enumerate(both):
        order[i] = index.setdefault(frame.tobytes(), len(index))
    _, first = np.unique(order, return_index=True)  # each frame's first use, by its number
    frames = both[first].reshape(len(index), *obs.shape[2:])
    empty = obs[:0]
    packed = PackedFrames(frames, order[: n * k].reshape(n, k), order[n * k :].reshape(n, k))
    return transitions._replace(obs=empty, next_obs=empty.copy()), packed


def unpack(transitions: Transitions, packed: PackedFrames | None) -> Transitions:
    """The transitions ``pack`` was given, their stacks rebuilt from ``packed`` (None: as they
    are)."""
    if packed is None:
        return transitions
    frames = packed.frames
    return transitions._replace(obs=frames[packed.obs], next_obs=frames[packed.next_obs])
