"""Atari-scale speed and memory of per-dqn in one run: env, replay at 1M, learner, whole loop.

Five sections, each printed as a markdown table as soon as it is measured:

1. **Environment.** Agent steps per second (after frame-skip 4) of
   ``per_dqn.envs.make.make_vector_env`` for ``--env-id`` with one env and uniformly random actions,
   with the env section of ``atari100k.yaml``; beside it, for reference, the raw ``AtariVectorEnv``
   exactly as ``benchmarks/atari_env.py`` builds it (its loop and rows are imported from there).
2. **Replay memory at Atari size.** Memories of ``--capacity`` (1,000,000) transitions filled with
   ``--fill`` real-sized transitions: uint8 ``(4, 84, 84)`` stacks whose frames are shared the
   way an env emits them (consecutive stacks share 3 frames, ``next_obs`` is ``obs`` shifted by
   one frame, an episode's first stack repeats its reset frame), in episodes of 100 to 599 steps.
   Every frame is distinct (an id is stamped into its first 8 bytes), so a returned stack can be
   checked against the truth bit for bit. Rows: ``per_dqn``'s ``uniform`` and ``proportional``
   (alpha 0.6) memories (``make_memory``) with ``dedup_frames=True``, and, when ``cpprb`` imports
   (the ``bench`` extra), cpprb 11's ``PrioritizedReplayBuffer`` with its frame-sharing options
   (``next_of="obs"``, ``stack_compress="obs"``, ``Nstep=False``), once with the channel-first
   ``(4, 84, 84)`` stacks every other row stores, and once with channel-last ``(84, 84, 4)``
   stacks, the layout ``stack_compress`` documents ("the last dimension is the stack dimension");
   and, when ``tianshou`` imports (also the ``bench`` extra), Tianshou 2's
   ``PrioritizedReplayBuffer`` as its Atari examples set it up (``stack_num=4``,
   ``ignore_obs_next=True``, ``save_only_last_obs=True``: it keeps each ``obs``'s newest frame
   only and rebuilds stacks along its episode links), added one ``Batch`` per transition with the
   channel-first stacks its Atari wrappers emit. Before timing, 256 sampled ``obs`` and
   ``next_obs`` stacks of each row are compared with the truth (Tianshou's row is also compared
   at every episode start and end, where it differs); a row whose stacks are wrong is still
   timed, and marked. Timed: the replay side of one DQN step (4 single ``add`` calls continuing
   the episode stream, ``sample(32)`` gathering the ``obs`` and ``next_obs`` stacks, and, for
   PER, ``update_priorities`` (Tianshou: ``update_weight``) of those 32 with random ``|delta|``)
   in steps per second, and ``sample(32)`` alone in microseconds. Memory: the
   process's resident set (``VmRSS``) before building and after filling each memory, freed
   memory given back to the OS (``malloc_trim``) before each reading; the memories are built one
   at a time and deleted before the next, so each delta is that memory's.
3. **Learner.** Milliseconds per ``DQNAgent.learn`` on a batch of 32 uint8 stacks (Nature CNN,
   dueling, Double DQN, 6 actions, Huber loss, no gradient clipping, fused Adam) with
   ``channels_last`` off and on, at torch threads 1 and 2, against the ``plain`` row of
   ``benchmarks/learner.py`` (imported: the textbook update on ready torch tensors). Each update
   is timed on its own; rows take turns in blocks of 5 updates, rotating. ``DQNAgent.learn``
   takes numpy batches, so its time includes moving them into torch.
4. **Whole loop.** ``per_dqn.training.run.Trainer`` on ``atari100k.yaml`` with ``env.id=--env-id``,
   ``train.total_env_steps=--train-steps``, ``train.learning_starts=1000``,
   ``replay.capacity=10000``, ``env.max_episode_steps=500``, ``train.eval_interval=0``,
   ``train.final_eval_episodes=1``, ``checkpoint.enabled=false``, ``run.device=cpu`` (and
   ``run.torch_threads=--train-threads`` when given); replay ``uniform`` vs ``proportional``.
   SPS is the summary's ``sps`` (env steps over the wall time of ``Trainer.run``, final
   evaluation included). Each run is a fresh process (``spawn``), so runs do not inherit each
   other's heap, and its peak resident set (``VmHWM``) is reported.
5. **Stable-Baselines3.** When ``stable_baselines3`` imports, SB3's ``DQN("CnnPolicy")`` in the
   same repeats as section 4, on the same env pipeline (``per_dqn.envs.make.make_eval_env``:
   ale-py's one-env ``AtariVectorEnv``; SB3's own ``AtariWrapper`` would need OpenCV) with the
   config's settings (buffer 10,000, batch 32, one update per env step from step 1,000, target copy
   every 2,000 steps, Adam lr 1e-4 eps 1.5e-4, gradient clip 10, epsilon 1 -> 0.01 over 5,000 steps,
   clipped rewards, but no terminal on life loss), timed over ``learn`` plus one evaluation
   episode. SB3's DQN has no dueling head, no Double-DQN target, no n-step return and no PER: it
   does less work per update.

Repeats are interleaved where the subjects can live side by side (sections 1, 3, 4 and 5), so
that load from other processes on a small shared machine hits every row alike, and the ratios
come with their per-repeat range. The memories of section 2 are too big to hold together: each
row is built, checked, timed and deleted in turn, so its ratios compare rows measured minutes
apart; the load average during each row is in the table.

Section 1 and the driver are this file; the other sections are modules of their own:
``_atari_replay.py`` (2; its rows are in ``_atari_replay_rows.py``, their data in
``_atari_stream.py``), ``_atari_learner.py`` (3) and ``_atari_training.py`` (4 and 5).

    .venv/bin/python benchmarks/atari.py            # full run, 10-20 minutes on a quiet machine
    .venv/bin/python benchmarks/atari.py --quick    # fill 100k, short loops, short runs
    .venv/bin/python benchmarks/atari.py --smoke    # seconds: every path at tiny sizes, the
                                                    # training runs in this process
    .venv/bin/python benchmarks/atari.py --train-threads 1   # loops at 1 torch thread (see 3.)
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

from _atari_learner import measure_learner
from _atari_replay import measure_replay
from _atari_replay_rows import CHECK_BATCHES, TRAIN_BATCH
from _atari_training import load_atari_config, measure_training
from _common import (
    add_mode_options,
    calibrate,
    command_line,
    fill_defaults,
    format_rate,
    gb,
    load_average,
    load_averages,
    machine_line,
    markdown_table,
    median,
    package_versions,
    progress_log,
    relative_spread,
    require_at_least,
    time_loop,
)
from atari_env import Subject, ale_subject, loop_factory, quiet_ale

from per_dqn.envs.families.atari import atari_game
from per_dqn.envs.make import make_vector_env

SECTIONS = ("env", "replay", "learner", "train")


# --- 1. environment ----------------------------------------------------------------------------


def measure_env(args: argparse.Namespace, log: Callable[[str], None]) -> str:
    """Section 1: raw agent steps/s of ``make_vector_env`` and of atari_env.py's reference."""
    env_config = load_atari_config(args, ["env.num_envs=1"]).env
    vector = make_vector_env(env_config)
    vector.reset(seed=args.seed)
    subjects = [
        Subject(
            "per_dqn make_vector_env (atari100k env section)",
            1,
            vector.step,
            vector.close,
            int(vector.single_action_space.n),
        ),
        ale_subject(atari_game(args.env_id), 1, 0, args.seed),
    ]
    subjects[1].label = "AtariVectorEnv as benchmarks/atari_env.py builds it (sticky 0.25)"
    try:
        factories = [loop_factory(s, args.seed + i) for i, s in enumerate(subjects)]
        for subject, factory in zip(subjects, factories, strict=True):
            subject.calls = calibrate(factory, args.target_s)
        for r in range(args.repeats):
            shift = r % len(subjects)
            for i in [*range(shift, len(subjects)), *range(shift)]:
                per_call = time_loop(factories[i], subjects[i].calls).per_call
                subjects[i].rates.append(subjects[i].num_envs / per_call)
        log("env: timed")
    finally:
        for subject in subjects:
            subject.close()
    rows = [
        [s.label, format_rate(median(s.rates)), f"{relative_spread(s.rates):.0%}"] for s in subjects
    ]
    ratios = [a / b for a, b in zip(subjects[0].rates, subjects[1].rates, strict=True)]
    return "\n".join(
        [
            f"### 1. Raw environment throughput: {args.env_id}, 1 env, random actions",
            "",
            f"Agent steps/s (4 emulator frames each), episode resets included; sticky actions "
            f"{env_config.sticky_action_prob}, noop_max {env_config.noop_max}, "
            f"{env_config.frame_stack}-frame 84x84 grayscale stacks; median of {args.repeats} "
            f"interleaved loops of ~{args.target_s:g} s.",
            "",
            markdown_table(["env", "agent steps/s", "spread"], rows),
            "",
            f"- make_vector_env / reference: {median(ratios):.2f}x "
            f"(per-repeat {min(ratios):.2f}x to {max(ratios):.2f}x).",
        ]
    )


# --- driver --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options; ``--quick`` shortens everything, ``--smoke`` shrinks everything."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_mode_options(parser, quick="fill 100k, short loops, short runs")
    parser.add_argument("--env-id", default="ALE/Breakout-v5", help="an ALE/<Game>-v5 id")
    parser.add_argument("--capacity", type=int, help="replay capacity (1M, smoke 2048)")
    parser.add_argument(
        "--fill", type=int, help="transitions filled (default capacity, quick 100k)"
    )
    parser.add_argument(
        "--repeats", type=int, help="timed loops per cell, sections 1-2 (5, quick 3, smoke 1)"
    )
    parser.add_argument(
        "--target-s", type=float, help="seconds per timed loop (0.5, quick 0.1, smoke 0.02)"
    )
    parser.add_argument(
        "--updates", type=int, help="timed learner updates per row (40, quick 10, smoke 1)"
    )
    parser.add_argument(
        "--train-steps", type=int, help="env steps per run (3000, quick 1050, smoke 40)"
    )
    parser.add_argument("--learning-starts", type=int, help="env steps (1000, smoke 32)")
    parser.add_argument("--train-repeats", type=int, help="runs per kind (2, quick 1, smoke 1)")
    parser.add_argument(
        "--train-threads",
        type=int,
        default=0,
        help="torch threads of the training runs (default 0: the config's run.torch_threads)",
    )
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated subset of {','.join(SECTIONS)} (default all; train includes SB3)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    fill_defaults(args, {"capacity": (1_000_000, 1_000_000, 2048)})
    fill_defaults(
        args,
        {
            "fill": (args.capacity, min(100_000, args.capacity), args.capacity),
            "repeats": (5, 3, 1),
            "target_s": (0.5, 0.1, 0.02),
            "updates": (40, 10, 1),
            "train_steps": (3000, 1050, 40),
            "learning_starts": (1000, 1000, TRAIN_BATCH),
            "train_repeats": (2, 1, 1),
        },
    )
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(args.sections) - set(SECTIONS))
    if unknown:
        parser.error(f"--sections must name some of {', '.join(SECTIONS)}, got {unknown}")
    if not CHECK_BATCHES * TRAIN_BATCH <= args.fill <= args.capacity:
        parser.error(
            f"--fill must be in [{CHECK_BATCHES * TRAIN_BATCH}, --capacity ({args.capacity:,})], "
            f"got {args.fill:,}"
        )
    require_at_least(parser, args, 1, "repeats", "updates", "train_repeats")
    require_at_least(parser, args, 0, "train_threads")
    if args.target_s <= 0:
        parser.error(f"--target-s must be > 0, got {args.target_s}")
    if args.learning_starts < TRAIN_BATCH:
        parser.error(f"--learning-starts must be >= {TRAIN_BATCH}, got {args.learning_starts}")
    if args.train_steps <= args.learning_starts:
        parser.error(
            f"--train-steps must be > --learning-starts ({args.learning_starts}), "
            f"got {args.train_steps}"
        )
    return args


def main(argv: list[str] | None = None) -> None:
    """Runs the chosen sections in order, printing each one's tables as soon as it is done."""
    args = parse_args(argv)
    log = progress_log()

    quiet_ale()
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    versions = package_versions(
        "numpy", "numba", "torch", "ale-py", "gymnasium", "cpprb", "tianshou", "stable-baselines3"
    )
    print(f"Machine: {machine_line(versions)}; {gb(total)} RAM", flush=True)
    print(f"Command: `{command_line()}`", flush=True)
    measures = {
        "env": measure_env,
        "replay": measure_replay,
        "learner": measure_learner,
        "train": measure_training,
    }
    for name in SECTIONS:
        if name in args.sections:
            print("\n" + measures[name](args, log), flush=True)
            log(f"{name} done; load average {load_average()}")
    print(f"\nLoad average at the end: {load_averages()}.")


if __name__ == "__main__":
    main()
