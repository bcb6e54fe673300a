"""``per-dqn eval``: play a trained agent, report its returns, and film an episode.

Which weights are played:

* a checkpoint dir (``RUN_DIR/checkpoints/step_*``): that checkpoint, with the config saved in it;
  a damaged one is an error, not a fallback, since it was asked for by name, and so is one of
  another run than its run dir's (``training.checkpoints.check_owner``);
* a run dir: its newest checkpoint whose manifest, ``agent.pt`` and ``config.yaml`` pass their
  checks (a damaged newer one is named in a warning), else its final ``model.pt``.

A run dir may belong to a run that is still training and deleting its older checkpoints as it
writes new ones: each file is read once, checked, and used as read (``rundir.latest.read_latest``),
and a checkpoint deleted while it was being read sends the search back to the newest one.
Weights are read with ``torch.load(weights_only=True)``, after their zip container's CRC-32s are
checked (``rundir.weights.load_weights``): a planted file runs no code, a corrupt ``model.pt`` is
one error line naming it.

The environment is the run's evaluation env (``envs.make_eval_env``), the same one training
evaluated on. ``--video`` films the first episode as an animated GIF (Pillow) of ``env.render()``
frames into ``RUN_DIR/videos/``: the game's own frames (Atari: the emulator's 210x160 RGB screen)
or, with ``video_view="agent"``, what the agent sees (Atari's 84x84 grayscale), written by
``video.write_gif``.

This module builds no agent itself: the CLI passes ``build.make_agent``, so an evaluated network
is always built exactly as training built it.

One module though past 500 lines: the weights chosen, the episode loop with its caps and the report
of one evaluation are one notion of an evaluation, shared by ``per-dqn eval`` and the training
loop's.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from per_dqn.config import (
    Config,
    ConfigError,
    Override,
    config_from_data,
    parse_yaml,
    validate_config,
)
from per_dqn.config.messages import one_line
from per_dqn.logs.video import write_gif
from per_dqn.rundir import checkpoint as ckpt
from per_dqn.rundir import latest, readback
from per_dqn.rundir.fileio import inside
from per_dqn.rundir.weights import load_weights
from per_dqn.training import checkpoints as run_ckpt
from per_dqn.training.asking import ACT, Request, serve
from per_dqn.training.seeding import RunSeeds

MODEL_FILE = "model.pt"
RUN_CONFIG_FILE = "config.yaml"
VIDEO_DIR = "videos"
SUMMARY_FILE = "summary.json"
# summary.json is a few kilobytes; a larger one is not read for the step it names.
SUMMARY_MAX_BYTES = readback.KINDS["summary"].max_bytes
# A film stops here: 5 minutes at Atari's 15 agent steps per second; frames are held in memory.
VIDEO_MAX_FRAMES = 4_500
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


def read_run_config(path: Path, overrides: Sequence[Override] = ()) -> Config:
    """A run dir's ``config.yaml`` (``path``), read back through ``readback`` (a FIFO, a link
    out of the run dir or an oversized file is refused unread), overridden and validated.

    Raises:
        ConfigError: it cannot be read, or is not a valid config; one line per problem.
    """
    try:
        text = readback.read_text(path.parent, path.name, readback.KINDS["config"])
    except readback.ReadBackError as exc:
        raise ConfigError([f"{path}: no such config file" if exc.missing else str(exc)]) from None
    label = str(path)
    return config_from_data(parse_yaml(text, label), label, overrides)


def _config(path: Path) -> Config:
    try:
        return read_run_config(path)
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
    owner = run_ckpt.run_dir_of(path)
    run_ckpt.check_owner(path, manifest, owner)
    run_dir = path if owner is None else owner
    steps = int(manifest["env_steps"])
    agent = load_weights(files[run_ckpt.AGENT_FILE], str(path / run_ckpt.AGENT_FILE))
    if not isinstance(agent, dict) or not isinstance(agent.get("online"), dict):
        raise ValueError(f"{path / run_ckpt.AGENT_FILE}: holds no online network (key 'online')")
    return Source(
        weights_file=path / run_ckpt.AGENT_FILE,
        weights=agent["online"],
        config=_config_from(files[run_ckpt.CONFIG_FILE], path / run_ckpt.CONFIG_FILE),
        run_dir=run_dir,
        env_steps=steps,
        label=f"{path} (env step {steps:,})",
        warnings=warnings,
    )


def check_finite(network: Any, file: Path) -> None:
    """Refuses a network whose parameters, loaded from ``file``, hold a NaN or an infinity: its
    Q-values are NaN, so it cannot act, and no run writes one (a non-finite loss or weight stops
    a run before ``model.pt`` or a checkpoint: ``loop.DivergedError`` checks the parameters). A
    buffer may hold an infinity (a user's network's mask or floor), as in training.

    Raises:
        ValueError: one line naming the file and the first such parameter.
    """
    import torch

    for name, parameter in network.named_parameters():
        if not bool(torch.isfinite(parameter).all()):
            raise ValueError(
                f"{file}: its parameter {name!r} holds NaN or infinite values; these weights "
                "cannot act"
            )


def resolve_source(target: Path) -> Source:
    """Finds and reads the weights ``target`` names (see the module docstring).

    Raises:
        ValueError: ``target`` is neither a run dir nor a checkpoint dir, a named checkpoint
            fails its checks (``CheckpointError``), a checkpoint's format is refused, the weights
            cannot be read safely, or a run dir has nothing to evaluate.
    """
    target = Path(target)
    if not os.path.lexists(target):
        raise ValueError(f"{target}: no such run dir or checkpoint dir (the path does not exist)")
    if not target.is_dir():
        raise ValueError(f"{target}: not a directory (a run dir or a checkpoint dir)")
    wanted = (run_ckpt.AGENT_FILE, run_ckpt.CONFIG_FILE)
    if os.path.lexists(target / ckpt.MANIFEST_FILE):  # even a FIFO: refused, as a checkpoint
        owner = run_ckpt.run_dir_of(target)
        if owner is not None:  # named in its run dir: its path stays inside it, links and all
            inside(owner, Path(ckpt.CHECKPOINTS_DIR) / target.name, ckpt.CheckpointError)
        manifest, files = ckpt.read_verified(target, wanted, only=run_ckpt.TRAINING_FILES)
        return _checkpoint_source(target, manifest, files, [])
    if not inside(target, RUN_CONFIG_FILE).is_file():
        raise ValueError(
            f"{target}: neither a run dir (no {RUN_CONFIG_FILE}) nor a checkpoint dir "
            f"(no {ckpt.MANIFEST_FILE})"
        )
    found = latest.read_latest(ckpt.checkpoints_dir(target), wanted, run_ckpt.TRAINING_FILES)
    if found.path is not None:
        return _checkpoint_source(found.path, found.manifest, found.files, found.warnings)
    model = inside(target, MODEL_FILE)
    try:
        # Capped as a torch file (issue 43, E8: a 64 GiB sparse model.pt was a MemoryError).
        data = readback.read_bytes(target, MODEL_FILE, readback.KINDS["weights"])
    except readback.ReadBackError as exc:
        if exc.missing:
            raise ValueError(
                f"{target}: no usable checkpoint and no {MODEL_FILE} to evaluate"
            ) from None
        raise ValueError(f"{model}: cannot read ({exc.problem})") from None
    weights = load_weights(data, str(model))
    fallback = f"using {MODEL_FILE}"
    warnings = [
        line.replace("no earlier checkpoint is usable", fallback) for line in found.warnings
    ]
    try:
        summary = readback.read_json(target, SUMMARY_FILE, readback.KINDS["summary"])
        recorded = summary["env_steps"]
    except (ValueError, KeyError, TypeError):
        recorded = None  # a run killed before its summary: the step is unknown, the weights fine
    # A step no run records ("12", 1e30, Infinity, True, -5, past an event's int64) is unknown.
    usable = isinstance(recorded, int) and not isinstance(recorded, bool)
    usable = usable and 0 <= recorded < 2**63
    steps = recorded if usable else None
    label = f"{model}" + ("" if steps is None else f" (env step {steps:,})")
    config = _config(target / RUN_CONFIG_FILE)
    return Source(model, weights, config, target, steps, label, warnings)


# The config keys of the evaluation caps, named in the warning a cut evaluation prints.
EPISODE_CAP_KEY = "train.eval_max_episode_steps"
TOTAL_CAP_KEY = "train.eval_max_total_steps"
# Agent steps between two progress reports within an episode (an Atari episode can last 27,000).
PROGRESS_EVERY_STEPS = 1_000

# (episodes finished, episodes asked for, agent steps so far)
EvalProgress = Callable[[int, int, int], None]
# (an episode's return, its length in agent steps), as each episode ends
EvalEpisode = Callable[[float, int], None]


@dataclass(frozen=True)
class Episodes:
    """Returns and lengths of evaluation episodes, and the first one's frames when filmed.

    Attributes:
        returns: one per episode played (fewer than asked when the step budget ran out).
        lengths: agent steps of each.
        frames: the first episode's frames, when filmed.
        truncated: each episode ended by a time limit, the env's or a cap (not by the game).
        asked: episodes asked for.
        episode_cap: the per-episode cap in agent steps (None: none).
        total_cap: the whole evaluation's budget in agent steps (None: none).
        reached_episode_cap: episodes that lasted ``episode_cap`` steps and were cut there.
        reached_total_cap: the budget ran out before every asked episode had ended.
    """

    returns: np.ndarray
    lengths: np.ndarray
    frames: list[np.ndarray]
    truncated: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))
    asked: int = 0
    episode_cap: int | None = None
    total_cap: int | None = None
    reached_episode_cap: int = 0
    reached_total_cap: bool = False

    def cap_warning(self) -> str | None:
        """One line naming each cap that cut this evaluation and its config key; None if none
        did."""
        parts = []
        if self.reached_episode_cap:
            parts.append(
                f"{self.reached_episode_cap} of {len(self.returns)} episodes reached "
                f"{EPISODE_CAP_KEY} ({self.episode_cap:,} agent steps) and count as truncated"
            )
        if self.reached_total_cap:
            parts.append(
                f"the evaluation reached {TOTAL_CAP_KEY} ({self.total_cap:,} agent steps) after "
                f"{len(self.returns)} of {self.asked} episodes (an episode it cut counts as "
                "truncated)"
            )
        return "; ".join(parts) or None


def play(
    agent: Any,
    env: Any,
    episodes: int,
    epsilon: float,
    seed: int,
    film: bool = False,
    *,
    max_episode_steps: int | None = None,
    max_total_steps: int | None = None,
    on_progress: EvalProgress | None = None,
    on_episode: EvalEpisode | None = None,
) -> Episodes:
    """Plays ``episodes`` episodes, epsilon-greedy (greedy at 0), within the caps.

    ``seed`` is a run seed, and the episodes are those a run of that seed evaluates on: the env
    is reset once with its ``eval_env`` stream, as a run's eval env is when the run starts, every
    episode then starts from the env's own RNG, and exploration draws from its ``eval_explore``
    stream (``seeding.RunSeeds``). One convention for training's evaluations and ``per-dqn
    eval``: the same seed, the same episodes.

    Args:
        agent: anything with ``greedy_actions(obs_batch)`` and ``num_actions`` (a ``DQNAgent``).
        env: a single gymnasium env; with ``film``, made with ``render_mode="rgb_array"``.
        episodes: how many.
        epsilon: probability of a uniformly random action.
        seed: see above.
        film: keep the first episode's frames (the reset frame and one per step, up to
            ``VIDEO_MAX_FRAMES``).
        max_episode_steps, max_total_steps, on_progress, on_episode: see ``episode_requests``.
    """
    streams = RunSeeds.from_seed(seed)
    # As a run's eval env is reset once with the stream when the run starts, and each evaluation
    # episode then starts from the env's own RNG.
    env.reset(seed=streams.eval_env)
    return run_episodes(
        agent, env, episodes, epsilon, np.random.default_rng(streams.eval_explore), None, film,
        max_episode_steps=max_episode_steps, max_total_steps=max_total_steps,
        on_progress=on_progress, on_episode=on_episode,
    )  # fmt: skip


def run_episodes(agent: Any, env: Any, *args: Any, **kwargs: Any) -> Episodes:
    """``episode_requests(agent.num_actions, env, ...)`` (the rest of the arguments are its own)
    answered by ``agent`` alone: anything with ``greedy_actions(obs_batch)`` and
    ``num_actions``, a ``DQNAgent``."""
    return serve(episode_requests(agent.num_actions, env, *args, **kwargs), agent)


def episode_requests(
    num_actions: int,
    env: Any,
    episodes: int,
    epsilon: float,
    rng: np.random.Generator,
    first_reset_seed: int | None = None,
    film: bool = False,
    *,
    max_episode_steps: int | None = None,
    max_total_steps: int | None = None,
    on_progress: EvalProgress | None = None,
    on_episode: EvalEpisode | None = None,
) -> Generator[Request, Any, Episodes]:
    """The episode loop behind ``play`` and the training loop's evaluations, as a generator
    that asks for each greedy action (``(ACT, obs[None])``, answered with an array of one
    action) instead of computing it: ``run_episodes`` answers alone, and a pack answers its runs'
    requests of one observation shape in one forward pass (``per_dqn.packs``).

    Two caps keep an evaluation bounded: an untrained Breakout agent that never serves plays
    every episode to Atari's time limit, and a 30-episode final evaluation then took 17 minutes
    after a 1,500-step smoke run. An episode that reaches ``max_episode_steps`` is cut there;
    once the evaluation has taken ``max_total_steps`` agent steps, the episode underway is cut
    and no other starts. A cut episode counts as truncated, with the return it had; the result
    says which cap was reached (``Episodes.cap_warning``).

    Args:
        num_actions: the agent's number of actions (an exploring step draws one).
        env: a single gymnasium env.
        episodes: how many.
        epsilon: probability of a uniformly random action, drawn from ``rng``.
        rng: exploration's random generator (the caller's, so its state carries on).
        first_reset_seed: seed of the first reset (None: the env's own RNG continues).
        film: keep the first episode's frames.
        max_episode_steps: agent steps after which an episode is cut (None: the env's own time
            limit only). An episode the env truncates at exactly this length counts as reaching
            it too.
        max_total_steps: agent steps the whole evaluation may take (None: no budget).
        on_progress: called with (episodes finished, ``episodes``, agent steps so far) at the
            start, at the end of each episode and every ``PROGRESS_EVERY_STEPS`` agent steps.
        on_episode: called with (return, length) as each episode ends, cut ones included.

    Raises:
        ValueError: a cap below 1 (at the generator's first step).
    """
    caps = {"max_episode_steps": max_episode_steps, "max_total_steps": max_total_steps}
    for name, cap in caps.items():
        if cap is not None and cap < 1:
            raise ValueError(f"`{name}` must be >= 1 or None, got {cap}")
    returns, lengths = np.zeros(episodes), np.zeros(episodes, dtype=np.int64)
    cut = np.zeros(episodes, dtype=np.bool_)
    frames: list[np.ndarray] = []
    steps, played, at_episode_cap, out_of_budget = 0, 0, 0, False
    if on_progress is not None:
        on_progress(0, episodes, 0)
    for episode in range(episodes):
        if max_total_steps is not None and steps >= max_total_steps:
            out_of_budget = True
            break
        obs, _ = env.reset(seed=first_reset_seed if episode == 0 else None)
        filming = film and episode == 0
        if filming:
            frames.append(env.render())
        done = False
        while not done:
            if epsilon > 0 and rng.random() < epsilon:
                action = int(rng.integers(num_actions))
            else:
                action = int((yield ACT, obs[None])[0])
            obs, reward, terminated, truncated, _ = env.step(action)
            returns[episode] += float(reward)
            lengths[episode] += 1
            steps += 1
            if not terminated and max_episode_steps is not None:
                if lengths[episode] >= max_episode_steps:
                    truncated = True
                    at_episode_cap += 1
            if not (terminated or truncated) and max_total_steps is not None:
                if steps >= max_total_steps:
                    truncated = out_of_budget = True
            cut[episode] = truncated and not terminated
            done = terminated or truncated
            if filming and len(frames) < VIDEO_MAX_FRAMES:
                frames.append(env.render())
            if on_progress is not None and steps % PROGRESS_EVERY_STEPS == 0 and not done:
                on_progress(episode, episodes, steps)
        played += 1
        if on_episode is not None:
            on_episode(float(returns[episode]), int(lengths[episode]))
        if on_progress is not None:
            on_progress(played, episodes, steps)
    return Episodes(
        returns[:played], lengths[:played], frames, cut[:played], episodes,
        max_episode_steps, max_total_steps, at_episode_cap, out_of_budget,
    )  # fmt: skip


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
    video_view: str = "game",
    on_start: Callable[[str], None] | None = None,
    on_progress: EvalProgress | None = None,
    on_episode: EvalEpisode | None = None,
) -> EvalReport:
    """Builds the agent and the eval env of ``source``'s config, loads the weights and plays,
    within the config's evaluation caps (``train.eval_max_episode_steps`` and
    ``train.eval_max_total_steps``).

    Args:
        source: from ``resolve_source``.
        make_agent: ``(config, env_spec, device) -> DQNAgent`` (``build.make_agent``).
        episodes: episodes to play.
        epsilon: exploration epsilon (None: the config's ``train.eval_epsilon``).
        seed: the run seed whose evaluation episodes are played (None: ``run.seed``, so the
            episodes are those training evaluated on).
        video: film the first episode into ``RUN_DIR/videos/eval-step<N>.gif``.
        video_view: ``game`` films the game's own frames (Atari: the emulator's 210x160 RGB
            screen), ``agent`` the agent's observations (Atari's 84x84 grayscale, into
            ``eval-step<N>-agent.gif``).
        on_start: called with one line saying what is about to be played (the weights, the
            env, the episodes, epsilon and seed), once the agent is built and its weights
            loaded.
        on_progress, on_episode: see ``episode_requests``.

    Raises:
        ValueError: the env cannot be made or rendered (or has no ``agent`` view), or the
            weights do not fit the network.
    """
    import gymnasium as gym
    import torch

    from per_dqn.envs.make import describe, make_eval_env

    config = source.config
    epsilon = config.train.eval_epsilon if epsilon is None else epsilon
    seed = config.run.seed if seed is None else seed
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        # As in training: one greedy action at a time is a tiny matrix product, and intra-op
        # threads beyond `run.torch_threads` only spin against the env (10 CartPole episodes took
        # 21 s on torch's default threads against 3.6 s on one, on a many-core machine).
        torch.set_num_threads(config.run.torch_threads)
    if video:
        # Classic-control renderers call pygame.init(), whose display driver prints an SDL
        # "error:" line on a headless machine; offscreen rgb_array frames need no display.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    # Before a minute of playing: the film must not leave the run dir through a link.
    videos = inside(source.run_dir, VIDEO_DIR) if video else None
    env = make_eval_env(config.env, render=video, view=video_view)
    try:
        agent = make_agent(config, describe(env), device)
        try:
            agent.online.load_state_dict(source.weights)  # copies the CPU tensors to `device`
        except (RuntimeError, TypeError, AttributeError) as exc:
            reason = one_line(exc)[:300]
            raise ValueError(
                f"{source.weights_file}: does not fit the network ({reason})"
            ) from None
        check_finite(agent.online, source.weights_file)
        if on_start is not None:
            on_start(
                f"playing {source.label} on {config.env.id}: {episodes} episodes, epsilon "
                f"{epsilon:g}, seed {seed}"
            )
        try:
            played = play(
                agent, env, episodes, epsilon, seed, film=video,
                max_episode_steps=config.train.eval_max_episode_steps,
                max_total_steps=config.train.eval_max_total_steps, on_progress=on_progress,
                on_episode=on_episode,
            )  # fmt: skip
        except gym.error.Error as exc:  # e.g. a renderer whose dependency is not installed
            raise ValueError(f"{config.env.id}: cannot render ({exc})") from None
        fps = float(env.metadata.get("render_fps") or DEFAULT_VIDEO_FPS)
    finally:
        env.close()
    path, frame_ms = None, 0
    if video:
        name = "eval-final" if source.env_steps is None else f"eval-step{source.env_steps}"
        name += "" if video_view == "game" else f"-{video_view}"
        assert videos is not None
        path = videos / f"{name}.gif"
        frame_ms = write_gif(played.frames, path, fps)
    return EvalReport(source, played, epsilon, seed, path, frame_ms)
