"""Films as animated GIFs: ``per-dqn eval --video``'s writer.

One palette for the whole film, exact where the frames use at most 256 colours (rendered games
do), and frames narrower than ``MIN_VIDEO_SIDE`` enlarged by a whole factor so the pixels stay
sharp. The file replaces its path atomically (``fileio.write_bytes_atomic``). Pillow is imported
only to write.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from per_dqn.rundir.fileio import write_bytes_atomic

# Smaller frames are enlarged by the smallest whole factor that reaches this many pixels.
MIN_VIDEO_SIDE = 240
# Frames the GIF's shared palette is computed from, spread evenly over the film.
PALETTE_SAMPLE_FRAMES = 8


def write_gif(frames: Sequence[np.ndarray], path: Path, fps: float) -> int:
    """Writes RGB frames as a looping GIF, replacing ``path`` atomically.

    GIF delays are whole hundredths of a second and browsers slow down anything under 20 ms, so
    the frame time is rounded to 10 ms and at least 20 ms (50 fps).

    Returns:
        The frame time in milliseconds.

    Raises:
        ValueError: no frames, or frames that are not ``(H, W, 3)`` images.

    Frames are uint8, or floats in [0, 1] (scaled to bytes).
    """
    from PIL import Image

    if not frames:
        raise ValueError("no frames to write")
    frames = [_as_bytes(frame) for frame in frames]
    first = frames[0]
    if first.ndim != 3 or first.shape[2] != 3:
        raise ValueError(f"frames must be (height, width, 3) RGB images, got {first.shape}")
    height, width = first.shape[:2]
    scale = max(1, -(-MIN_VIDEO_SIDE // min(height, width)))  # ceil division
    # One palette for the whole film, from frames spread over it: Pillow's adaptive palette per
    # frame costs ~30 ms a CartPole frame. Rendered games use few colours (Atari's grayscale
    # frames at most 256), and then every pixel keeps its exact colour.
    picks = np.linspace(0, len(frames) - 1, num=min(len(frames), PALETTE_SAMPLE_FRAMES))
    sample = np.concatenate([_packed(frames[int(i)]) for i in picks])
    colours = np.unique(sample)
    exact = _ExactPalette(colours) if len(colours) <= 256 else None
    if exact is None:
        rgb = _unpacked(sample)[None]
        palette = Image.fromarray(rgb).quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    images = []
    for frame in frames:
        if exact is not None:
            image = exact(frame)
        else:
            image = Image.fromarray(frame).quantize(palette=palette, dither=Image.Dither.NONE)
        if scale > 1:
            image = image.resize((width * scale, height * scale), Image.Resampling.NEAREST)
        images.append(image)
    duration_ms = max(20, round(100 / fps) * 10)
    buffer = io.BytesIO()
    images[0].save(
        buffer, format="GIF", save_all=True, append_images=images[1:], duration=duration_ms,
        loop=0,
    )  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, buffer.getvalue())  # the one atomic writer
    return duration_ms


def _as_bytes(frame: np.ndarray) -> np.ndarray:
    """A frame as uint8 RGB: float frames (MinAtar's ``rgb_array`` is float64 in [0, 1]) scaled
    by 255 and rounded; integer ones as they are."""
    frame = np.asarray(frame)
    if np.issubdtype(frame.dtype, np.floating):
        return np.clip(np.rint(frame * 255.0), 0, 255).astype(np.uint8)
    return frame.astype(np.uint8, copy=False)


def _packed(frame: np.ndarray) -> np.ndarray:
    """An ``(H, W, 3)`` uint8 image's pixels as ``0xRRGGBB`` integers."""
    rgb = np.asarray(frame, dtype=np.uint8).reshape(-1, 3).astype(np.uint32)
    return (rgb[:, 0] << 16) | (rgb[:, 1] << 8) | rgb[:, 2]


def _unpacked(packed: np.ndarray) -> np.ndarray:
    """``0xRRGGBB`` integers as ``(..., 3)`` uint8 RGB."""
    channels = [(packed >> 16) & 255, (packed >> 8) & 255, packed & 255]
    return np.stack(channels, axis=-1).astype(np.uint8)


class _ExactPalette:
    """Maps frames onto a palette of at most 256 known colours: a colour in the palette keeps its
    exact value, one that is not (absent from the sampled frames) takes the nearest entry."""

    def __init__(self, colours: np.ndarray) -> None:
        self.colours = colours  # sorted 0xRRGGBB
        self.rgb = _unpacked(colours).astype(np.int32)
        entries = np.repeat(_unpacked(colours[:1]), 256, axis=0)  # padding repeats a real colour
        entries[: len(colours)] = _unpacked(colours)
        self.entries = entries.tobytes()

    def __call__(self, frame: np.ndarray) -> Any:
        from PIL import Image

        packed = _packed(frame)
        index = np.searchsorted(self.colours, packed).clip(max=len(self.colours) - 1)
        missing = self.colours[index] != packed
        if missing.any():
            new, inverse = np.unique(packed[missing], return_inverse=True)
            distance = ((_unpacked(new).astype(np.int32)[:, None] - self.rgb[None]) ** 2).sum(-1)
            index[missing] = distance.argmin(axis=1)[inverse]
        image = Image.fromarray(index.astype(np.uint8).reshape(frame.shape[:2]), mode="P")
        image.putpalette(self.entries)
        return image
