"""Agent steps per second of the two Atari pipelines per-dqn can build on, in one run.

What is measured: raw environment throughput, i.e. agent steps per second summed over the
sub-environments (one agent step = 4 emulator frames after frame-skip), with uniformly random
actions drawn before the timed loop, and the episode resets the loop runs into included (Pong's
random episodes last ~900 agent steps, Breakout's ~200). No agent, no replay memory.

The rows:

- ``AtariVectorEnv``: ale-py's C++ vector environment, which does the whole protocol natively
  (noop starts, frame skip with max-pool, 84x84 grayscale resize, 4-frame stack, autoreset) on
  its own thread pool; ``threads=auto`` is its default ``num_threads=0``, ``threads=1`` pins one.
- ``gym single``: one ``gym.make(id, frameskip=1)`` wrapped in gymnasium's
  ``AtariPreprocessing(frame_skip=4)`` and ``FrameStackObservation(stack_size=4)``; the loop
  resets it itself when an episode ends.
- ``gym SyncVectorEnv`` / ``gym AsyncVectorEnv``: the same wrapped env in gymnasium's vector
  envs (``NEXT_STEP`` autoreset). The async workers are started with ``spawn`` so that no worker
  is forked from a process whose ale-py threads are live.

Every row uses the same protocol settings: sticky actions 0.25 (the v5 default), up to 30 noop
starts, no fire reset, raw rewards, minimal action set, 108,000-frame episode cap.

Each cell is the median of ``--repeats`` timed loops of about ``--target-s`` seconds. Repeats are
interleaved across rows (repeat 1 of every row, then repeat 2, ...) so that load from other
processes on a small shared machine hits all rows alike; the ratios under the table are medians of
per-repeat ratios. Every loop runs once untimed first. The gymnasium rows need OpenCV
(``opencv-python``, gymnasium's ``other`` extra); without it they are skipped with a note.

    .venv/bin/python benchmarks/atari_env.py            # ~2 minutes
    .venv/bin/python benchmarks/atari_env.py --quick    # ~30 s
    .venv/bin/python benchmarks/atari_env.py --smoke    # seconds: Pong, 1 and 2 envs, 1 repeat
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import ale_py
import gymnasium as gym
import numpy as np
from _common import (
    LoopFactory,
    add_mode_options,
    calibrate,
    command_line,
    fill_defaults,
    format_rate,
    load_averages,
    machine_line,
    markdown_table,
    median,
    package_versions,
    progress_log,
    relative_spread,
    require_at_least,
    rotated,
    time_loop,
)
from ale_py.vector_env import AtariVectorEnv
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv
from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation

try:
    import cv2  # noqa: F401  (AtariPreprocessing imports it lazily; probe it here, once)
except ImportError:
    HAVE_CV2 = False
else:
    HAVE_CV2 = True

gym.register_envs(ale_py)

# Display name -> (ale-py ROM name, gymnasium id).
GAMES = {"Pong": ("pong", "ALE/Pong-v5"), "Breakout": ("breakout", "ALE/Breakout-v5")}
NUM_ENVS = (1, 2, 4)
STICKY = 0.25  # repeat_action_probability, Machado et al. (2018) and the v5 default
NOOP_MAX = 30
FRAME_SKIP = 4
STACK = 4
MAX_FRAMES = 108_000  # 30 minutes of play at 60 Hz

# A step function takes one row of pre-drawn actions.
Step = Callable[[np.ndarray], object]


@dataclass
class Subject:
    """One (implementation, num_envs) row for one game, with its live environment."""

    label: str
    num_envs: int
    step: Step
    close: Callable[[], None]
    num_actions: int
    calls: int = 0
    rates: list[float] = field(default_factory=list)  # agent steps/s, one per repeat


def quiet_ale() -> None:
    """Stops ALE printing its banner to stdout (into the table) when a ROM loads."""
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)


def make_gym_env(gym_id: str) -> gym.Env:
    """One gymnasium Atari env with the standard preprocessing and a 4-frame stack."""
    quiet_ale()  # also runs in each spawned worker, which has its own ALE banner to print
    env = gym.make(
        gym_id,
        frameskip=1,  # AtariPreprocessing skips frames itself
        repeat_action_probability=STICKY,
        max_num_frames_per_episode=MAX_FRAMES,
    )
    env = AtariPreprocessing(
        env, noop_max=NOOP_MAX, frame_skip=FRAME_SKIP, screen_size=84, grayscale_obs=True
    )
    return FrameStackObservation(env, stack_size=STACK)


def ale_subject(game: str, num_envs: int, num_threads: int, seed: int) -> Subject:
    """An ``AtariVectorEnv`` configured to the same protocol as the gymnasium rows."""
    env = AtariVectorEnv(
        game,
        num_envs,
        num_threads=num_threads,
        repeat_action_probability=STICKY,
        noop_max=NOOP_MAX,
        frameskip=FRAME_SKIP,
        stack_num=STACK,
        use_fire_reset=False,
        reward_clipping=False,
        max_num_frames_per_episode=MAX_FRAMES,
    )
    env.reset(seed=seed)
    threads = "auto" if num_threads == 0 else str(num_threads)
    return Subject(
        f"AtariVectorEnv threads={threads}",
        num_envs,
        env.step,
        env.close,
        int(env.single_action_space.n),
    )


def gym_single_subject(gym_id: str, seed: int) -> Subject:
    """One wrapped gymnasium env, reset by the loop when its episode ends."""
    env = make_gym_env(gym_id)
    env.reset(seed=seed)

    def step(action: np.ndarray) -> None:
        _, _, terminated, truncated, _ = env.step(int(action[0]))
        if terminated or truncated:
            env.reset()

    return Subject("gym single", 1, step, env.close, int(env.action_space.n))


def gym_vector_subject(gym_id: str, num_envs: int, asynchronous: bool, seed: int) -> Subject:
    """The wrapped gymnasium env in a ``SyncVectorEnv`` or ``AsyncVectorEnv``."""
    fns = [functools.partial(make_gym_env, gym_id) for _ in range(num_envs)]
    if asynchronous:
        env = AsyncVectorEnv(fns, context="spawn", autoreset_mode=AutoresetMode.NEXT_STEP)
    else:
        env = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.NEXT_STEP)
    env.reset(seed=seed)
    label = "gym AsyncVectorEnv" if asynchronous else "gym SyncVectorEnv"
    return Subject(label, num_envs, env.step, env.close, int(env.single_action_space.n))


def build_subjects(game: str, gym_id: str, seed: int, num_envs: list[int]) -> list[Subject]:
    """Every row for one game, environments created and reset."""
    subjects = [ale_subject(game, n, threads, seed) for threads in (0, 1) for n in num_envs]
    if HAVE_CV2:
        subjects.append(gym_single_subject(gym_id, seed))
        subjects += [gym_vector_subject(gym_id, n, False, seed) for n in num_envs]
        subjects += [gym_vector_subject(gym_id, n, True, seed) for n in num_envs]
    return subjects


def loop_factory(subject: Subject, seed: int) -> LoopFactory:
    """Loops of ``calls`` vector steps with actions drawn before the loop starts."""
    rng = np.random.default_rng(seed)

    def factory(calls: int) -> Callable[[], None]:
        actions = rng.integers(0, subject.num_actions, (calls, subject.num_envs))
        step = subject.step

        def thunk() -> None:
            for row in actions:
                step(row)

        return thunk

    return factory


def measure_game(name: str, args: argparse.Namespace, log: Callable[[str], None]) -> list[Subject]:
    """Builds, calibrates and times every row for one game; closes the envs."""
    game, gym_id = GAMES[name]
    subjects = build_subjects(game, gym_id, args.seed, args.num_envs)
    log(f"{name}: {len(subjects)} environments built")
    try:
        factories = [loop_factory(s, args.seed + i) for i, s in enumerate(subjects)]
        for subject, factory in zip(subjects, factories, strict=True):
            subject.calls = calibrate(factory, args.target_s)
        for repeat in range(args.repeats):
            # Rotate the order so that no row is always first after a slow spell.
            for i in rotated(range(len(subjects)), repeat):
                subject = subjects[i]
                per_call = time_loop(factories[i], subject.calls).per_call
                subject.rates.append(subject.num_envs / per_call)
            log(f"{name}: repeat {repeat + 1}/{args.repeats} done")
    finally:
        for subject in subjects:
            subject.close()
    return subjects


def paired_ratio(a: Subject, b: Subject) -> tuple[float, float, float]:
    """Median, min and max over repeats of ``a``'s rate divided by ``b``'s."""
    ratios = [x / y for x, y in zip(a.rates, b.rates, strict=True)]
    return median(ratios), min(ratios), max(ratios)


def render(results: dict[str, list[Subject]], args: argparse.Namespace) -> str:
    """The table (one column per game), the ratios that decide, machine and command."""
    games = list(results)
    rows = []
    for i, subject in enumerate(results[games[0]]):
        cells = [subject.label, str(subject.num_envs)]
        cells += [format_rate(median(results[g][i].rates)) for g in games]
        spread = max(relative_spread(results[g][i].rates) for g in games)
        cells.append(f"{spread:.0%}")
        rows.append(cells)
    headers = ["implementation", "num_envs", *(f"{g} steps/s" for g in games), "spread"]
    lines = [
        f"Agent steps/s (after frame-skip {FRAME_SKIP}), summed over sub-envs, random actions, "
        f"sticky {STICKY}, noop_max {NOOP_MAX}, {STACK}-frame stacks of 84x84 grayscale; median "
        f"of {args.repeats} interleaved loops of ~{args.target_s:g} s; spread = (max - min) / "
        "median over the repeats, worst game.",
        "",
        markdown_table(headers, rows),
        "",
    ]
    by_key = {(s.label, s.num_envs): i for i, s in enumerate(results[games[0]])}
    for game in games:
        subjects = results[game]
        ale = {n: subjects[by_key["AtariVectorEnv threads=auto", n]] for n in args.num_envs}
        parts = []
        for n in args.num_envs:
            for label in ("gym SyncVectorEnv", "gym AsyncVectorEnv"):
                if (label, n) in by_key:
                    mid, lo, hi = paired_ratio(ale[n], subjects[by_key[label, n]])
                    parts.append(f"{n} env(s) vs {label[4:]} {mid:.1f}x ({lo:.1f}-{hi:.1f})")
        if parts:
            lines.append(f"- {game}, AtariVectorEnv (auto threads) speed-up: " + "; ".join(parts))
        few, most = min(args.num_envs), max(args.num_envs)
        if most > few:
            mid, lo, hi = paired_ratio(ale[most], ale[few])
            lines.append(
                f"- {game}, AtariVectorEnv {most} envs / {few} env(s): {mid:.2f}x "
                f"({lo:.2f}-{hi:.2f})"
            )
    if not HAVE_CV2:
        lines.append("- gymnasium rows skipped: AtariPreprocessing needs OpenCV (`opencv-python`).")
    versions = package_versions("ale-py", "gymnasium", "numpy")
    if HAVE_CV2:
        import cv2 as opencv

        versions["opencv"] = opencv.__version__
    lines += [
        "",
        f"Machine: {machine_line(versions)}; load average at the end {load_averages()}.",
        f"Command: `{command_line()}`",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options; ``--quick`` shortens the loops, ``--smoke`` shrinks everything."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_mode_options(parser, quick="3 repeats, short loops")
    parser.add_argument("--repeats", type=int, help="timed loops per cell (5, quick 3, smoke 1)")
    parser.add_argument(
        "--target-s", type=float, help="seconds per timed loop (0.5, quick 0.1, smoke 0.02)"
    )
    parser.add_argument("--games", help=f"comma-separated, of {', '.join(GAMES)} (smoke Pong)")
    parser.add_argument(
        "--num-envs", help="comma-separated env counts (1,2,4; smoke 1,2)", dest="num_envs"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    every_game = ",".join(GAMES)
    all_counts = ",".join(map(str, NUM_ENVS))
    fill_defaults(
        args,
        {
            "repeats": (5, 3, 1),
            "target_s": (0.5, 0.1, 0.02),
            "games": (every_game, every_game, "Pong"),
            "num_envs": (all_counts, all_counts, "1,2"),
        },
    )
    require_at_least(parser, args, 1, "repeats")
    if args.target_s <= 0:
        parser.error(f"--target-s must be > 0, got {args.target_s}")
    args.games = [g.strip() for g in args.games.split(",") if g.strip()]
    if not args.games or set(args.games) - set(GAMES):
        parser.error(f"--games must name some of {', '.join(GAMES)}, got {args.games}")
    try:
        args.num_envs = sorted({int(n) for n in args.num_envs.split(",")})
    except ValueError:
        parser.error(f"--num-envs must be comma-separated integers, got {args.num_envs!r}")
    if not args.num_envs or args.num_envs[0] < 1:
        parser.error(f"--num-envs must be >= 1, got {args.num_envs}")
    return args


def main(argv: list[str] | None = None) -> None:
    """Runs every game's rows and prints the report."""
    args = parse_args(argv)
    log = progress_log()

    quiet_ale()
    if not HAVE_CV2:
        log("OpenCV is not importable: the gymnasium rows are skipped")
    results = {name: measure_game(name, args, log) for name in args.games}
    print(render(results, args))


if __name__ == "__main__":
    main()
