"""``per-dqn eval``: play a trained agent, report its returns, and film an episode.

Which weights are played:

* a checkpoint dir (``RUN_DIR/checkpoints/step_*``): that checkpoint, with the config saved in it;
  a damaged one is an error, not a fallback, since it was asked for by name;
* a run dir: its newest checkpoint whose manifest, ``agent.pt`` and ``config.yaml`` pass their
  checks (a damaged newer one is named in a warning), else its final ``model.pt``.

A run dir may belong to a run that is still training and deleting its older checkpoints as it
writes new ones: each file is read once, checked, and used as read (``checkpoint.read_latest``),
and a checkpoint deleted while it was being read sends the search back to the newest one.
Weights are read with ``torch.load(weights_only=True)``, after their zip container's CRC-32s are
checked (``checkpoint.load_weights``): a planted file runs no code, a corrupt ``model.pt`` is one
error line naming it.

The environment is the run's evaluation env (``envs.make_eval_env``), the same one training
evaluated on. ``--video`` films the first episode as an animated GIF (Pillow) of ``env.render()``
frames into ``RUN_DIR/videos/``; frames narrower than ``MIN_VIDEO_SIDE`` (Atari's 84x84) are
enlarged by a whole factor so the pixels stay sharp.

This module builds no agent itself: the CLI passes ``build.make_agent``, so an evaluated network
is always built exactly as training built it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from per_dqn import checkpoint as ckpt
from per_dqn.config import Config, ConfigError, load_config, parse_yaml, validate_config

MODEL_FILE = "model.pt"
RUN_CONFIG_FILE = "config.yaml"
VIDEO_DIR = "videos"
# Episodes differ from the training episodes and from training's periodic evaluations.
EVAL_SEED_OFFSET = 20_000
# A film stops here: 5 minutes at Atari's 15 agent steps per second; frames are held in memory.
VIDEO_MAX_FRAMES = 4_500
# Smaller frames are enlarged by the smallest whole factor that reaches this many pixels.
MIN_VIDEO_SIDE = 240
# Frames the GIF's shared palette is computed from, spread evenly over the film.
PALETTE_SAMPLE_FRAMES = 8
# Frames per second when the env does not say (60 Hz Atari at the usual frame skip of 4).
DEFAULT_VIDEO_FPS = 15.0


@dataclass(frozen=True)
class Source:
    """Weights to evaluate and the run they belong to.

    Attributes:
        weights_file: a checkpoint's ``agent.pt`` or a run's ``model.pt``, as named in errors.
        weights: the online network's ``state_dict`` read from it (CPU tensors).
        config: the config the weights were trained with.
        run_dir: where ``videos/`` goes.
        env_steps: the env step the weights are from, when known.
        label: how to name the weights in the output.
        warnings: one line per damaged checkpoint that was skipped.
    """

    weights_file: Path
    weights: dict[str, Any]
    config: Config
    run_dir: Path
    env_steps: int | None
    label: str
    warnings: list[str] = field(default_factory=list)


def _config(path: Path) -> Config:
    try:
        return load_config(path)
    except ConfigError as exc:
        raise ValueError("; ".join(exc.problems)) from None


def _config_from(data: bytes, path: Path) -> Config:
    label = str(path)
    try:
        return validate_config(parse_yaml(data.decode("utf-8"), label), label)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{label}: cannot read ({exc})") from None
    except ConfigError as exc:
        raise ValueError("; ".join(exc.problems)) from None


def _checkpoint_source(
    path: Path, manifest: dict[str, Any], files: dict[str, bytes], warnings: list[str]
) -> Source:
    run_dir = path.parent.parent if path.parent.name == ckpt.CHECKPOINTS_DIR else path
    steps = int(manifest["env_steps"])
    agent = ckpt.load_weights(files[ckpt.AGENT_FILE], str(path / ckpt.AGENT_FILE))
    if not isinstance(agent, dict) or not isinstance(agent.get("online"), dict):
        raise ValueError(f"{path / ckpt.AGENT_FILE}: holds no online network (key 'online')")
    return Source(
        weights_file=path / ckpt.AGENT_FILE,
        weights=agent["online"],
        config=_config_from(files[ckpt.CONFIG_FILE], path / ckpt.CONFIG_FILE),
        run_dir=run_dir,
        env_steps=steps,
        label=f"{path} (env step {steps:,})",
        warnings=warnings,
    )


def resolve_source(target: Path) -> Source:
    """Finds and reads the weights ``target`` names (see the module docstring).

    Raises:
        ValueError: ``target`` is neither a run dir nor a checkpoint dir, a named checkpoint
            fails its checks (``CheckpointError``), a checkpoint's format is refused, the weights
            cannot be read safely, or a run dir has nothing to evaluate.
    """
    target = Path(target)
    wanted = (ckpt.AGENT_FILE, ckpt.CONFIG_FILE)
    if (target / ckpt.MANIFEST_FILE).is_file():
        manifest, files = ckpt.read_verified(target, wanted)
        return _checkpoint_source(target, manifest, files, [])
    if not (target / RUN_CONFIG_FILE).is_file():
        raise ValueError(
            f"{target}: neither a run dir (no {RUN_CONFIG_FILE}) nor a checkpoint dir "
            f"(no {ckpt.MANIFEST_FILE})"
        )
    found = ckpt.read_latest(ckpt.checkpoints_dir(target), wanted)
    if found.path is not None:
        return _checkpoint_source(found.path, found.manifest, found.files, found.warnings)
    model = target / MODEL_FILE
    try:
        data = model.read_bytes()
    except FileNotFoundError:
        raise ValueError(
            f"{target}: no usable checkpoint and no {MODEL_FILE} to evaluate"
        ) from None
    except OSError as exc:
        raise ValueError(f"{model}: cannot read ({exc.strerror})") from None
    weights = ckpt.load_weights(data, str(model))
    fallback = f"using {MODEL_FILE}"
    warnings = [
        line.replace("no earlier checkpoint is usable", fallback) for line in found.warnings
    ]
    steps = None
    try:
        steps = int(json.loads((target / "summary.json").read_text(encoding="utf-8"))["env_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # a run killed before its summary: the step is unknown, the weights are still fine
    label = f"{model}" + ("" if steps is None else f" (env step {steps:,})")
    config = _config(target / RUN_CONFIG_FILE)
    return Source(model, weights, config, target, steps, label, warnings)


@dataclass(frozen=True)
class Episodes:
    """Returns and lengths of evaluation episodes, and the first one's frames when filmed."""

    returns: np.ndarray
    lengths: np.ndarray
    frames: list[np.ndarray]


def play(
    agent: Any,
    env: Any,
    episodes: int,
    epsilon: float,
    seed: int,
    film: bool = False,
) -> Episodes:
    """Plays ``episodes`` full episodes, epsilon-greedy (greedy at 0).

    The env is reset with ``seed`` before the first episode and without one afterwards (its own
    RNG continues), and exploration draws from ``default_rng(seed)``: same seed, same episodes.

    Args:
        agent: anything with ``greedy_actions(obs_batch)`` and ``num_actions`` (a ``DQNAgent``).
        env: a single gymnasium env; with ``film``, made with ``render_mode="rgb_array"``.
        episodes: how many.
        epsilon: probability of a uniformly random action.
        seed: see above.
        film: keep the first episode's frames (the reset frame and one per step, up to
            ``VIDEO_MAX_FRAMES``).
    """
    return run_episodes(agent, env, episodes, epsilon, np.random.default_rng(seed), seed, film)


def run_episodes(
    agent: Any,
    env: Any,
    episodes: int,
    epsilon: float,
    rng: np.random.Generator,
    first_reset_seed: int | None = None,
    film: bool = False,
) -> Episodes:
    """The episode loop behind ``play`` and the training loop's evaluations.

    Args:
        agent: anything with ``greedy_actions(obs_batch)`` and ``num_actions``.
        env: a single gymnasium env.
        episodes: how many.
        epsilon: probability of a uniformly random action, drawn from ``rng``.
        rng: exploration's random generator (the caller's, so its state carries on).
        first_reset_seed: seed of the first reset (None: the env's own RNG continues).
        film: keep the first episode's frames.
    """
    returns, lengths = np.zeros(episodes), np.zeros(episodes, dtype=np.int64)
    frames: list[np.ndarray] = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=first_reset_seed if episode == 0 else None)
        filming = film and episode == 0
        if filming:
            frames.append(env.render())
        done = False
        while not done:
            if epsilon > 0 and rng.random() < epsilon:
                action = int(rng.integers(agent.num_actions))
            else:
                action = int(agent.greedy_actions(obs[None])[0])
            obs, reward, terminated, truncated, _ = env.step(action)
            returns[episode] += float(reward)
            lengths[episode] += 1
            done = terminated or truncated
            if filming and len(frames) < VIDEO_MAX_FRAMES:
                frames.append(env.render())
    return Episodes(returns, lengths, frames)


def write_gif(frames: Sequence[np.ndarray], path: Path, fps: float) -> int:
    """Writes RGB frames as a looping GIF, replacing ``path`` atomically.

    GIF delays are whole hundredths of a second and browsers slow down anything under 20 ms, so
    the frame time is rounded to 10 ms and at least 20 ms (50 fps).

    Returns:
        The frame time in milliseconds.

    Raises:
        ValueError: no frames, or frames that are not ``(H, W, 3)`` images.
    """
    from PIL import Image

    if not frames:
        raise ValueError("no frames to write")
    first = np.asarray(frames[0])
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
        frame = np.asarray(frame, dtype=np.uint8)
        if exact is not None:
            image = exact(frame)
        else:
            image = Image.fromarray(frame).quantize(palette=palette, dither=Image.Dither.NONE)
        if scale > 1:
            image = image.resize((width * scale, height * scale), Image.Resampling.NEAREST)
        images.append(image)
    duration_ms = max(20, round(100 / fps) * 10)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}")
    images[0].save(
        tmp, format="GIF", save_all=True, append_images=images[1:], duration=duration_ms, loop=0
    )
    os.replace(tmp, path)
    return duration_ms


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


@dataclass(frozen=True)
class EvalReport:
    """What ``per-dqn eval`` prints."""

    source: Source
    episodes: Episodes
    epsilon: float
    seed: int
    video: Path | None
    frame_ms: int

    def lines(self) -> list[str]:
        """The report, one fact per line."""
        returns, lengths = self.episodes.returns, self.episodes.lengths
        out = [
            f"weights: {self.source.label}",
            f"env: {self.source.config.env.id}, {len(returns)} episodes, epsilon "
            f"{self.epsilon:g}, seed {self.seed}",
            f"return: mean {returns.mean():.2f}  std {returns.std():.2f}  "
            f"min {returns.min():.2f}  max {returns.max():.2f}",
            f"length: mean {lengths.mean():.1f}  min {lengths.min()}  max {lengths.max()}",
        ]
        if self.video is not None:
            frames = len(self.episodes.frames)
            out.append(f"video: {self.video} ({frames} frames, {self.frame_ms} ms each)")
        return out


def evaluate_source(
    source: Source,
    make_agent: Callable[[Config, Any, Any], Any],
    *,
    episodes: int = 10,
    epsilon: float | None = None,
    seed: int | None = None,
    video: bool = False,
) -> EvalReport:
    """Builds the agent and the eval env of ``source``'s config, loads the weights and plays.

    Args:
        source: from ``resolve_source``.
        make_agent: ``(config, env_spec, device) -> DQNAgent`` (``build.make_agent``).
        episodes: episodes to play.
        epsilon: exploration epsilon (None: the config's ``train.eval_epsilon``).
        seed: episode seed (None: ``run.seed + EVAL_SEED_OFFSET``).
        video: film the first episode into ``RUN_DIR/videos/eval-step<N>.gif``.

    Raises:
        ValueError: the env cannot be made or rendered, or the weights do not fit the network.
    """
    import gymnasium as gym
    import torch

    from per_dqn.envs import describe, make_eval_env

    config = source.config
    epsilon = config.train.eval_epsilon if epsilon is None else epsilon
    seed = config.run.seed + EVAL_SEED_OFFSET if seed is None else seed
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if video:
        # Classic-control renderers call pygame.init(), whose display driver prints an SDL
        # "error:" line on a headless machine; offscreen rgb_array frames need no display.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    env = make_eval_env(config.env, render=video)
    try:
        agent = make_agent(config, describe(env), device)
        try:
            agent.online.load_state_dict(source.weights)  # copies the CPU tensors to `device`
        except (RuntimeError, TypeError, AttributeError) as exc:
            reason = " ".join(str(exc).split())[:300]
            raise ValueError(
                f"{source.weights_file}: does not fit the network ({reason})"
            ) from None
        try:
            played = play(agent, env, episodes, epsilon, seed, film=video)
        except gym.error.Error as exc:  # e.g. a renderer whose dependency is not installed
            raise ValueError(f"{config.env.id}: cannot render ({exc})") from None
        fps = float(env.metadata.get("render_fps") or DEFAULT_VIDEO_FPS)
    finally:
        env.close()
    path, frame_ms = None, 0
    if video:
        name = "eval-final" if source.env_steps is None else f"eval-step{source.env_steps}"
        path = source.run_dir / VIDEO_DIR / f"{name}.gif"
        frame_ms = write_gif(played.frames, path, fps)
    return EvalReport(source, played, epsilon, seed, path, frame_ms)
