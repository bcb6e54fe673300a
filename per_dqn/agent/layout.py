"""Channel-last (NHWC) uint8 batches built on the host, for CNNs that run channels_last.

The replay memory returns stacks as ``(B, C, H, W)``. oneDNN's CPU convolutions run far faster
on NHWC activations, above all in the backward pass, and torch's own NCHW -> NHWC copy of a
uint8 batch with C = 4 walks memory one byte at a time. With four channels a pixel's NHWC
bytes are one little-endian uint32, so the interleave below is a shift-and-or that the compiler
vectorises, over ten times faster for the 64 stacks of one Double-DQN update
(``benchmarks/atari.py --sections learner`` times both).
"""

from __future__ import annotations

import sys

import numba
import numpy as np

PACKED_CHANNELS = 4  # the frame stack the uint32 trick serves; other stacks take torch's copy
_LITTLE_ENDIAN = sys.byteorder == "little"


@numba.njit(cache=True, nogil=True)
def _interleave4(first: np.ndarray, second: np.ndarray, out: np.ndarray) -> None:
    """``out[i, p]`` = pixel ``p`` of stack ``i`` of ``first`` then ``second``, packed as
    ``c0 | c1 << 8 | c2 << 16 | c3 << 24``; stacks are ``(B, 4, H * W)`` uint8."""
    size = first.shape[0]
    pixels = first.shape[2]
    for i in range(out.shape[0]):
        src = first[i] if i < size else second[i - size]
        row = out[i]
        for p in range(pixels):
            row[p] = (
                np.uint32(src[0, p])
                | (np.uint32(src[1, p]) << 8)
                | (np.uint32(src[2, p]) << 16)
                | (np.uint32(src[3, p]) << 24)
            )


def can_pack(obs: np.ndarray) -> bool:
    """Whether ``stack_nhwc`` takes this batch: C-contiguous uint8 ``(B, 4, H, W)``."""
    return (
        _LITTLE_ENDIAN
        and obs.dtype == np.uint8
        and obs.ndim == 4
        and obs.shape[1] == PACKED_CHANNELS
        and obs.flags.c_contiguous
    )


def stack_nhwc(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """``concatenate((first, second))`` transposed to ``(2B, H, W, 4)``, in one pass.

    Args:
        first, second: uint8 stacks of the same shape ``(B, 4, H, W)`` (``can_pack`` of each).

    Returns:
        A new C-contiguous uint8 array ``(2B, H, W, 4)``; ``out.transpose(0, 3, 1, 2)`` equals
        ``concatenate((first, second))``.
    """
    size, channels, height, width = first.shape
    out = np.empty((2 * size, height * width), dtype=np.uint32)
    _interleave4(
        first.reshape(size, channels, height * width),
        second.reshape(size, channels, height * width),
        out,
    )
    return out.view(np.uint8).reshape(2 * size, height, width, channels)
