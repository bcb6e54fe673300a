"""Frame-deduplicated observations for stacked images (Atari's 4 x 84 x 84 uint8 stacks).

A stacked observation shares all but one frame with the previous one, and ``next_obs`` shares all
but one with ``obs``; storing whole stacks costs ``2 * stack`` frames per transition. This storage
keeps each distinct frame once, in a ring of frames, and every transition keeps ``2 * stack``
int32 pointers into it, from which ``obs`` and ``next_obs`` are rebuilt at sample time.

Frames are deduplicated by content, never by assumption: an incoming frame reuses a stored one
only when a 64-bit hash *and all of its bytes* are equal. So the rebuilt stacks are bit-identical to
what was added, whatever the env's padding at episode starts, the episode boundaries, the number of
envs writing at once or the n of n-step transitions; a wrong guess can only cost memory, never
correctness. (A buffer that instead *assumes* the layout of its input, as cpprb's
``stack_compress`` does, silently returns wrong stacks for channel-first input.)

The candidates for a match are the ``dedup_window`` most recently stored frames (one env step
adds one frame, so a window of 256 covers 4-frame stacks with n-step returns for dozens of envs).

Lifetime: each frame records the serial number of the last transition that references it, and the
frame ring's cursor skips frames still referenced by a transition that is in the memory. With one
new frame per env step plus one per episode start, ``capacity * (1 + frame_slack)`` frames are
enough as long as episodes average more than ``1 / frame_slack`` steps (50 at the default 2%);
if they are shorter a clear error names ``frame_slack``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numba
import numpy as np

from per_dqn.memory.storage import RING_FIELDS, NamedStorage, ObservationStore, filled

_jit = numba.njit(cache=True, nogil=True)
_FREE = np.iinfo(np.int64).min // 2  # ref of a never-used frame: dead for any serial
# Spare frames beyond ``capacity`` at the least: the frames of the newest transitions' n-step
# windows, which small memories' ``frame_slack`` alone would not cover.
MIN_SPARE_FRAMES = 256


@_jit
def _hash(words):  # pragma: no cover - compiled
    # FNV-1a over 64-bit words: one pass over the frame, ~1 us for 84 x 84.
    h = np.uint64(14695981039346656037)
    prime = np.uint64(1099511628211)
    for k in range(words.shape[0]):
        h = (h ^ words[k]) * prime
    return h


@_jit
def _equal(a, b):  # pragma: no cover - compiled
    for k in range(a.shape[0]):
        if a[k] != b[k]:
            return False
    return True


@_jit
def _hinted(frames, frame, ptrs, k):  # pragma: no cover - compiled
    """``ptrs[k]`` if that stored frame holds exactly ``frame``'s bytes, else -1."""
    if k < 0 or k >= ptrs.shape[0]:
        return -1
    f = ptrs[k]
    if f >= 0 and _equal(frames[f], frame):
        return f
    return -1


@_jit
def _store(
    frames,
    frame_hash,
    frame_ref,
    obs,
    next_obs,
    serial,
    capacity,
    cursor,
    window,
    out_ptrs,
    last_ptrs,
):  # pragma: no cover - compiled
    """Resolves each frame of ``obs`` then ``next_obs`` to a stored frame (found or written).

    Before hashing, a frame is compared byte for byte with the stored frames it is most likely
    to repeat (``last_ptrs``: the previous transition's pointers, -1 where there are none): the
    previous ``next_obs`` (consecutive 1-step transitions), the previous stack shifted by one
    (consecutive n-step ones), and, for ``next_obs``, this ``obs`` shifted by one. A hit is as
    exact as a hash match (all bytes equal) and skips the hash and the window scan; with one
    env, seven of the eight frames of a step hit.

    Returns the new frame cursor, or -1 if every frame is still referenced (the ring is full).
    A match may be a frame no transition references any more: its bytes are intact until it is
    overwritten, and the match makes it referenced again.
    """
    n_frames = frames.shape[0]
    stack = obs.shape[0]
    dead_below = serial - capacity  # refs <= this belong to transitions no longer stored
    for j in range(2 * stack):
        frame = obs[j] if j < stack else next_obs[j - stack]
        if j < stack:
            found = _hinted(frames, frame, last_ptrs, stack + j)
            if found < 0:
                found = _hinted(frames, frame, last_ptrs, j + 1 if j + 1 < stack else -1)
        else:
            i = j - stack
            found = _hinted(frames, frame, out_ptrs, i + 1 if i + 1 < stack else -1)
            if found < 0:
                found = _hinted(frames, frame, last_ptrs, j + 1 if i + 1 < stack else -1)
        if found >= 0:
            frame_ref[found] = serial
            out_ptrs[j] = found
            continue
        h = _hash(frame)
        for back in range(1, min(window, n_frames) + 1):
            f = cursor - back
            if f < 0:
                f += n_frames
            if frame_hash[f] == h and _equal(frames[f], frame):
                found = f
                break
        if found < 0:
            scanned = 0
            while frame_ref[cursor] > dead_below:
                cursor += 1
                if cursor == n_frames:
                    cursor = 0
                scanned += 1
                if scanned > n_frames:
                    return -1
            found = cursor
            frames[found] = frame
            frame_hash[found] = h
            cursor += 1
            if cursor == n_frames:
                cursor = 0
        frame_ref[found] = serial
        out_ptrs[j] = found
    return cursor


def frame_count(capacity: int, frame_slack: float) -> int:
    """Frames a ``FrameObservations`` of ``capacity`` transitions allocates."""
    return capacity + max(math.ceil(capacity * frame_slack), MIN_SPARE_FRAMES)


class FrameObservations(ObservationStore):
    """Stacked uint8 observations kept one distinct frame at a time (see the module docstring).

    Args:
        capacity: transitions kept.
        obs_shape: ``(stack, height, width)``; ``height * width`` must be a multiple of 8.
        obs_dtype: must be uint8.
        frame_slack: extra frames, as a fraction of ``capacity``, for episode starts (> 0).
        dedup_window: how many recently stored frames an incoming frame is compared with.

    Attributes:
        frames: the frame ring, one flattened frame a row.
        frame_hash: each frame's 64-bit hash.
        frame_ref: the serial of the last transition that references each frame.
        obs_ptr: each slot's ``stack`` pointers into ``frames`` for ``obs`` (``next_ptr``: for
            ``next_obs``).
    """

    state_order = (
        "obs_ptr", "next_ptr", *RING_FIELDS, "cursor", "size",
        "frames", "frame_hash", "frame_ref", "frame_cursor", "serial",
    )  # fmt: skip
    _ARRAYS = ("obs_ptr", "next_ptr", "frames", "frame_hash", "frame_ref")

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, ...],
        obs_dtype,
        frame_slack: float = 0.02,
        dedup_window: int = 256,
    ) -> None:
        if len(obs_shape) != 3:
            raise ValueError(
                f"frame storage needs obs_shape (stack, height, width), got {tuple(obs_shape)}"
            )
        if np.dtype(obs_dtype) != np.uint8:
            raise ValueError(f"frame storage needs obs_dtype uint8, got {np.dtype(obs_dtype)}")
        stack, height, width = (int(d) for d in obs_shape)
        if (height * width) % 8:
            raise ValueError(
                f"frame storage needs height * width to be a multiple of 8, got {height * width}"
            )
        if not 0.0 < frame_slack <= 1.0:
            raise ValueError(f"`frame_slack` must be in (0, 1], got {frame_slack}")
        if dedup_window < 2 * stack:
            raise ValueError(f"`dedup_window` must be >= {2 * stack}, got {dedup_window}")
        super().__init__(capacity, (stack, height, width), np.uint8)
        self.stack = stack
        self.dedup_window = int(dedup_window)
        n_frames = frame_count(self.capacity, frame_slack)
        self.frames = np.zeros((n_frames, height * width), dtype=np.uint8)
        self.frame_hash = np.zeros(n_frames, dtype=np.uint64)
        self.frame_ref = np.full(n_frames, _FREE, dtype=np.int64)
        self.frame_cursor = 0
        self.serial = 0  # transitions written so far
        self.obs_ptr = np.zeros((self.capacity, stack), dtype=np.int32)
        self.next_ptr = np.zeros((self.capacity, stack), dtype=np.int32)
        self._ptrs = np.empty(2 * stack, dtype=np.int64)
        self._last_ptrs = np.full(2 * stack, -1, dtype=np.int64)  # the previous write's

    @property
    def nbytes(self) -> int:
        """Bytes of the frames, their hashes and references, and the pointers."""
        return sum(getattr(self, name).nbytes for name in self._ARRAYS)

    @classmethod
    def planned_nbytes(
        cls, capacity: int, obs_shape: tuple[int, ...], obs_dtype, frame_slack: float = 0.02
    ) -> int:
        """Frames with a uint64 hash and an int64 last reference each; int32 pointers a stack."""
        stack = int(obs_shape[0])
        frame_bytes = math.prod(int(d) for d in obs_shape) // stack
        return frame_count(capacity, frame_slack) * (frame_bytes + 8 + 8) + capacity * 2 * stack * 4

    def write(self, slot: int, obs: np.ndarray, next_obs: np.ndarray, evicts: bool) -> None:
        """Resolves the frames of ``obs`` and ``next_obs`` to stored ones (see ``_store``)."""
        words = (self.stack, -1)
        obs = np.ascontiguousarray(obs, dtype=np.uint8).reshape(words).view(np.uint64)
        next_obs = np.ascontiguousarray(next_obs, dtype=np.uint8).reshape(words).view(np.uint64)
        cursor = _store(
            self.frames.view(np.uint64), self.frame_hash, self.frame_ref, obs, next_obs,
            self.serial, self.capacity, self.frame_cursor, self.dedup_window, self._ptrs,
            self._last_ptrs,
        )  # fmt: skip
        if cursor < 0:
            raise RuntimeError(
                f"frame storage is full: episodes are shorter on average than "
                f"1 / frame_slack steps; raise `frame_slack` (now {self._slack():.3f})"
            )
        self.frame_cursor = cursor
        self._last_ptrs[:] = self._ptrs
        self.obs_ptr[slot] = self._ptrs[: self.stack]
        self.next_ptr[slot] = self._ptrs[self.stack :]
        self.serial += 1

    def _slack(self) -> float:
        return self.frames.shape[0] / self.capacity - 1.0

    def write_batch(
        self, slots: np.ndarray, obs: np.ndarray, next_obs: np.ndarray, skip: int, free: int
    ) -> None:
        """Every item in order, the skipped ones too: each is a step of the frame stream."""
        for k in range(obs.shape[0]):
            self.write(int(slots[k]), obs[k], next_obs[k], False)

    def gather(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The stacks rebuilt from their frames."""
        shape = (indices.shape[0], *self.obs_shape)
        return (
            self.frames[self.obs_ptr[indices]].reshape(shape),
            self.frames[self.next_ptr[indices]].reshape(shape),
        )

    _FRAME_ARRAYS = ("frames", "frame_hash", "frame_ref")  # one row a frame of the ring

    def frames_used(self) -> int:
        """Frames of the ring written so far: a prefix until the ring first wraps (its cursor
        writes them in order, and only a written frame can match an incoming one, so none past
        the cursor is referenced), all of them from then on."""
        free = self.frame_ref == _FREE
        return int(free.argmax()) if free.any() else len(free)

    def state_dict(self, size: int, copy: bool = True) -> dict[str, Any]:
        """The pointers of the ``size`` filled slots and the frames written so far
        (``frames_used``), with the frame cursor and the serial."""
        used = self.frames_used()
        state: dict[str, Any] = {
            name: filled(getattr(self, name), size, copy) for name in ("obs_ptr", "next_ptr")
        }
        for name in self._FRAME_ARRAYS:
            state[name] = filled(getattr(self, name), used, copy)
        state["frame_cursor"] = self.frame_cursor
        state["serial"] = self.serial
        return state

    def templates(self, state: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The pointers, and the frame arrays cut to as many frames as ``state`` holds (up to
        the ring's)."""
        held = np.shape(state.get("frames", ()))
        used = min(held[0], self.frames.shape[0]) if held else self.frames.shape[0]
        templates = {name: getattr(self, name) for name in ("obs_ptr", "next_ptr")}
        for name in self._FRAME_ARRAYS:
            templates[name] = getattr(self, name)[:used]
        return templates

    def load_state_dict(self, state: Mapping[str, Any], cursor: int, size: int) -> None:
        for name in ("frame_cursor", "serial"):
            if name not in state:
                raise ValueError(f"storage field `{name}` is missing")
        used = len(state["frames"])
        for name in ("frame_hash", "frame_ref"):  # one row a frame, as `frames`
            if len(state[name]) != used:
                raise ValueError(
                    f"storage field `{name}` must hold one row for each of the {used:,} frames "
                    f"stored, got {len(state[name]):,}"
                )
        for name in ("obs_ptr", "next_ptr"):
            pointers = np.asarray(state[name])[:size]
            if pointers.size and not (0 <= pointers.min() and pointers.max() < used):
                raise ValueError(
                    f"storage field `{name}` must point into the {used:,} frames stored, "
                    f"got {int(pointers.min())} to {int(pointers.max())}"
                )
        frame_cursor = int(state["frame_cursor"])
        if not 0 <= frame_cursor < self.frames.shape[0]:
            raise ValueError(
                f"storage `frame_cursor` must be in [0, {self.frames.shape[0]}), got {frame_cursor}"
            )
        # Until the ring first wraps, its cursor is where the next new frame goes: right past
        # the frames written (``frames_used``).
        if used < self.frames.shape[0] and frame_cursor != used:
            raise ValueError(
                f"storage `frame_cursor` must be {used:,} (the frames stored) before the frame "
                f"ring wraps, got {frame_cursor}"
            )
        # Frames past `used` must read as never written, as in the memory that was saved; only
        # those this memory wrote are reset (the rest were never touched, and stay unallocated).
        stale = slice(used, self.frames_used())
        for name in ("obs_ptr", "next_ptr", *self._FRAME_ARRAYS):
            rows = np.asarray(state[name])
            getattr(self, name)[: len(rows)] = rows
        self.frames[stale] = 0
        self.frame_hash[stale] = 0
        self.frame_ref[stale] = _FREE
        self.frame_cursor = frame_cursor
        self.serial = int(state["serial"])
        # The previous write's pointers named this memory's frames, not the state's: a hint
        # into a frame past `used` would reference a frame the next state leaves out.
        self._last_ptrs[:] = -1


class FrameStorage(NamedStorage):
    """A ``RingStorage`` of ``FrameObservations``: each distinct frame of stacked observations
    kept once. Its arguments are ``FrameObservations``': ``capacity``, ``obs_shape``
    ``(stack, height, width)``, ``obs_dtype`` (uint8), ``frame_slack`` and ``dedup_window``.
    """

    observation_store = FrameObservations
