"""``per-dqn eval``: play a trained agent from a run dir or a checkpoint and print its returns
(and, with ``--video``, film the first episode)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from per_dqn import api
from per_dqn.cli.common import EXIT_WRITE_FAILED, TrustCodeOption, fail
from per_dqn.config import MAX_EVAL_EPISODES, ConfigError

app = typer.Typer()


class VideoView(StrEnum):
    """What ``eval --video`` films."""

    game = "game"
    agent = "agent"


@app.command("eval", short_help="Play a trained agent and print its returns.")
def eval_(
    target: Annotated[
        Path,
        typer.Argument(
            metavar="RUN_DIR_OR_CHECKPOINT",
            help="A run dir (its newest usable checkpoint, else its model.pt) or a checkpoint "
            "dir (RUN_DIR/checkpoints/step_*).",
        ),
    ],
    episodes: Annotated[int, typer.Option(help="Episodes to play.")] = 10,
    epsilon: Annotated[
        float | None,
        typer.Option(
            help="Exploration epsilon (default: the run's train.eval_epsilon; 0 is greedy)."
        ),
    ] = None,
    video: Annotated[
        bool, typer.Option("--video", help="Write a GIF of the first episode to RUN_DIR/videos/.")
    ] = False,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Run seed whose evaluation episodes are played (default: the run's own, so "
            "the episodes are those training evaluated on)."
        ),
    ] = None,
    video_view: Annotated[
        VideoView | None,
        typer.Option(
            help="With --video: `game` films the game's own frames (Atari: the emulator's RGB "
            "screen; the default), `agent` the agent's 84x84 grayscale view (Atari only)."
        ),
    ] = None,
    trust_code: TrustCodeOption = False,
) -> None:
    """Play a trained agent: print the mean, std, min and max return over the episodes.

    The run's `train.eval_max_episode_steps` and `train.eval_max_total_steps` bound the
    episodes (a warning names the one reached)."""
    problems = []
    if video_view is not None and not video:
        problems.append(f"--video-view {video_view.value} needs --video")
    if not 1 <= episodes <= MAX_EVAL_EPISODES:  # the config's bound on its evaluations too
        problems.append(f"--episodes must be in [1, {MAX_EVAL_EPISODES:,}], got {episodes}")
    if epsilon is not None and not 0.0 <= epsilon <= 1.0:
        problems.append(f"--epsilon must be in [0, 1], got {epsilon}")
    if seed is not None and seed < 0:
        problems.append(f"--seed must be >= 0, got {seed}")
    if problems:
        fail(problems)

    def warn(line: str) -> None:
        typer.echo(f"warning: {line}", err=True)

    try:
        # What is played, then the episodes as they end, on stderr: the report stays on stdout.
        with api.EvalDisplay() as display:
            result = api.evaluate_run(
                target, episodes=episodes, epsilon=epsilon, seed=seed, video=video,
                video_view=(video_view or VideoView.game).value, warn=warn,
                trust_code=trust_code, on_start=display.start, on_progress=display.progress,
                on_episode=display.episode,
            )  # fmt: skip
    except ConfigError as exc:  # a config that names code included: one line per key
        fail(exc.problems)
    except ValueError as exc:
        fail([str(exc)])
    except OSError as exc:  # the video could not be written: disk full, read-only...
        typer.echo(f"error: {exc.filename or target}: {exc.strerror or exc}", err=True)
        raise typer.Exit(EXIT_WRITE_FAILED) from None
    cut = result.episodes.cap_warning()
    if cut is not None:
        typer.echo(f"warning: {cut}", err=True)
    for line in result.lines():
        typer.echo(line)
