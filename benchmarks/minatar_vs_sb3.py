"""MinAtar Breakout training speed at ``minatar.yaml``'s update ratio: per_dqn (uniform and
proportional replay) against Stable-Baselines3's DQN with the same settings, in one run.

Goal (issue 14): per_dqn's training SPS at least 2x SB3's. Target: 1M env steps of the default
config in at most 10 minutes on one core.

Each side is a fresh process on one torch thread, timed from start to exit, start-up included;
SPS is env steps over that wall time:

* per_dqn: ``python -m per_dqn.cli train --config minatar.yaml --quiet --device cpu --seed S
  --steps N --replay KIND --set train.eval_interval=N --set train.final_eval_episodes=E --set
  checkpoint.enabled=false``: the shipped config (one update every 4 env steps, batches of 32,
  Double DQN, the MinAtar network), with no periodic evaluation or checkpoint, so that it times
  training, then a final evaluation of E episodes (at the config's ``train.eval_epsilon``, 0.001),
  as SB3's side does (greedy);
* SB3: ``benchmarks/_sb3_minatar.py`` (its docstring lists the settings), ``learn`` for N steps
  and E greedy episodes. SB3 has no prioritised replay, so its row compares with per_dqn's uniform
  row; the proportional row shows what PER costs on top. SB3's DQN has no Double-DQN target, so a
  third per_dqn row runs uniform replay with ``agent.double=false``: SB3's update, one forward
  pass fewer than the config's.

Then, in this process, the learner alone: a ``Trainer`` of the same config (uniform replay) trains
``--learner-fill`` env steps to fill its memory, and ``agent.learn(memory.sample(32))`` is timed
over ``--learner-updates`` updates: the milliseconds an update costs, and how many of the 1M-step
minutes the config's 250,000 updates take. One more block runs under ``torch.profiler``: the self
time of the update's arithmetic kernels (``KERNELS``), which splits the uniform run's env step
into those kernels, the rest of ``learn``, and everything else, against the step time the 2x goal
allows.

Repeats rotate which side goes first. Without ``stable_baselines3`` (the ``bench`` extra) only
per_dqn's rows are measured.

    .venv/bin/python benchmarks/minatar_vs_sb3.py              # 100k steps each, 2 repeats
    .venv/bin/python benchmarks/minatar_vs_sb3.py --smoke      # 1,500 steps each, 1 repeat
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

from _common import (
    ROOT,
    add_mode_options,
    check_finished,
    command_line,
    fill_defaults,
    machine_line,
    markdown_table,
    median,
    progress_log,
    require_at_least,
    rotated,
    run_python,
)

from per_dqn.config import Config, load_config, resolve_config_path

HAVE_SB3 = importlib.util.find_spec("stable_baselines3") is not None
SB3_CHILD = Path(__file__).resolve().parent / "_sb3_minatar.py"
CONFIG = "minatar.yaml"
GOAL = 2.0  # SB3 wall / per_dqn (uniform) wall
TARGET_STEPS, TARGET_SECONDS = 1_000_000, 600.0


def run_per_dqn(args: argparse.Namespace, side: str, seed: int, run_dir: Path) -> dict[str, Any]:
    """One ``per-dqn train`` process; its wall time and what its summary says."""
    kind = side.removesuffix("-single")
    double = [] if kind == side else ["--set", "agent.double=false"]
    command = [
        "-m", "per_dqn.cli", "train", "--config", CONFIG, "--quiet", "--device", "cpu",
        "--seed", str(seed), "--run-dir", str(run_dir), "--steps", str(args.steps),
        "--replay", kind, "--set", f"env.id={args.env_id}", "--set", "run.torch_threads=1",
        "--set", f"train.eval_interval={args.steps}",
        "--set", f"train.final_eval_episodes={args.eval_episodes}",
        "--set", "checkpoint.enabled=false", *double,
    ]  # fmt: skip
    done = run_python(command, root=ROOT, cwd=run_dir.parent)
    check_finished("per-dqn train", done)
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"wall": done.wall, "env_steps": summary["env_steps"],
            "score": summary["final_eval_return_mean"]}  # fmt: skip


def run_sb3(args: argparse.Namespace, seed: int, cwd: Path) -> dict[str, Any]:
    """One SB3 process; its wall time and what it printed."""
    command = [
        str(SB3_CHILD), "--env-id", args.env_id, "--steps", str(args.steps), "--seed", str(seed),
        "--threads", "1", "--eval-episodes", str(args.eval_episodes),
    ]  # fmt: skip
    done = run_python(command, root=ROOT, cwd=cwd)
    check_finished("the SB3 run", done)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {"wall": done.wall, "env_steps": result["env_steps"],
            "score": result["final_eval_return_mean"]}  # fmt: skip


LABELS = {
    "uniform": "per_dqn, uniform replay",
    "uniform-single": "per_dqn, uniform replay, DQN target (no Double)",
    "proportional": "per_dqn, proportional PER",
    "sb3": "SB3 DQN, same settings",
}


def render(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> str:
    """The table, the SB3 ratio against the goal and the 1M-step estimate against the target."""
    rows, walls = [], {}
    for side, results in runs.items():
        walls[side] = median([r["wall"] for r in results])
        steps = results[-1]["env_steps"]
        scores = ", ".join(f"{r['score']:.1f}" for r in results)
        rows.append(
            [LABELS[side], f"{walls[side]:.1f}", f"{steps:,}", f"{steps / walls[side]:,.0f}",
             scores]
        )  # fmt: skip
    headers = ["run", "wall s (median)", "env steps", "SPS", "final score per repeat"]
    lines = [markdown_table(headers, rows), ""]
    if "sb3" in runs:
        for side in ("uniform-single", "uniform", "proportional"):
            ratio = walls["sb3"] / walls[side]
            verdict = "met" if ratio >= GOAL else "NOT met"
            lines.append(
                f"SB3 / per_dqn {side} wall time: {ratio:.2f}x; goal >= {GOAL:.0f}x: {verdict}."
            )
    else:
        lines.append(
            "SB3 not measured: stable_baselines3 is not importable (the `bench` extra: "
            "`make bench-minatar` installs it)."
        )
    for side in ("uniform", "proportional"):
        sps = runs[side][-1]["env_steps"] / walls[side]
        minutes = TARGET_STEPS / sps / 60
        verdict = "met" if minutes * 60 <= TARGET_SECONDS else "NOT met"
        lines.append(
            f"per_dqn {side}: 1M env steps at this SPS take {minutes:.1f} min; target <= "
            f"{TARGET_SECONDS / 60:.0f} min: {verdict}."
        )
    return "\n".join(lines)


# The learner's arithmetic, by group: the fc layer's and the head's matrix products (forward:
# addmm, or baddbmm over a pack's stacked layers; backward: mm or bmm), the convolution forward
# (oneDNN's kernel, or the native one where oneDNN is not used) and its weight gradient, and
# Adam's fused step. Everything else in an update is small ops, copies and Python.
KERNELS = {
    "aten::addmm": "matrix products", "aten::mm": "matrix products",
    "aten::baddbmm": "matrix products", "aten::bmm": "matrix products",
    "aten::mkldnn_convolution": "convolution", "aten::_slow_conv2d_forward": "convolution",
    "aten::convolution_backward": "convolution", "aten::_fused_adam_": "Adam",
}  # fmt: skip


def time_learner(args: argparse.Namespace, tmp: Path) -> tuple[float, float, dict[str, float]]:
    """Milliseconds of one ``learn`` (sampling included) and of one ``sample`` alone, medians of
    five blocks of ``args.learner_updates // 5`` updates, after a memory filled by training; then
    the milliseconds of an update spent in each group of ``KERNELS``, their self time under
    ``torch.profiler`` over one more block."""
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile

    from per_dqn.config import Override
    from per_dqn.training.run import Trainer

    torch.set_num_threads(1)
    config = load_config(
        resolve_config_path(CONFIG),
        [Override(k, v, "benchmark") for k, v in {
            "env.id": args.env_id, "replay.kind": "uniform", "run.device": "cpu",
            "train.total_env_steps": args.learner_fill, "train.eval_interval": args.learner_fill,
            "train.final_eval_episodes": 1, "checkpoint.enabled": False,
        }.items()],
    )  # fmt: skip
    trainer = Trainer(config, "minatar")
    try:
        trainer.run(tmp / "learner")
        agent, memory, batch = trainer.agent, trainer.memory, config.train.batch_size
        block = max(1, args.learner_updates // 5)
        learn, sample = [], []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(block):
                agent.learn(memory.sample(batch))
            learn.append((time.perf_counter() - start) / block * 1e3)
            start = time.perf_counter()
            for _ in range(block):
                memory.sample(batch)
            sample.append((time.perf_counter() - start) / block * 1e3)
        with profile(activities=[ProfilerActivity.CPU]) as profiled:
            for _ in range(block):
                agent.learn(memory.sample(batch))
        kernels_ms = dict.fromkeys(KERNELS.values(), 0.0)
        for event in profiled.key_averages():
            if event.key in KERNELS:
                kernels_ms[KERNELS[event.key]] += event.self_cpu_time_total / block / 1e3
    finally:
        trainer.close()
    return median(learn), median(sample), kernels_ms


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_mode_options(parser)
    parser.add_argument("--env-id", default="MinAtar/Breakout-v1")
    parser.add_argument("--steps", type=int, help="env steps each (100,000; smoke 1,500)")
    parser.add_argument("--repeats", type=int, help="runs each (2; smoke 1)")
    parser.add_argument("--eval-episodes", type=int, help="final evaluation episodes (10; smoke 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first repeat")
    parser.add_argument("--learner-fill", type=int, help="env steps before timing learn (5,000)")
    parser.add_argument("--learner-updates", type=int, help="timed updates (1,000; smoke 10)")
    args = parser.parse_args(argv)
    config = load_config(resolve_config_path(CONFIG))
    fill_defaults(
        args,
        {
            "steps": (100_000, None, 1_500),
            "repeats": (2, None, 1),
            "eval_episodes": (10, None, 2),
            "learner_fill": (5_000, None, 1_200),
            "learner_updates": (1_000, None, 10),
        },
    )
    require_at_least(parser, args, 1, "repeats", "eval_episodes")
    if args.steps <= config.train.learning_starts:
        parser.error(
            f"--steps must be > train.learning_starts ({config.train.learning_starts}), "
            f"got {args.steps}"
        )
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    log = progress_log()
    versions = {"torch": version("torch"), "minatar": version("minatar")}
    if HAVE_SB3:
        versions["stable-baselines3"] = version("stable-baselines3")
    print(f"# {machine_line(versions)}")
    print(
        f"# {args.env_id}, {args.steps:,} env steps each, {args.repeats} repeat(s), 1 torch "
        f"thread, CPU; command `{command_line()}`"
    )
    sides = ["uniform", "uniform-single", "proportional", *(["sb3"] if HAVE_SB3 else [])]
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="bench-minatar-sb3-") as tmp:
        for repeat in range(args.repeats):
            seed = args.seed + repeat
            for side in rotated(sides, repeat):
                if side == "sb3":
                    result = run_sb3(args, seed, Path(tmp))
                else:
                    result = run_per_dqn(args, side, seed, Path(tmp) / f"{side}-{repeat}")
                runs[side].append(result)
                log(f"repeat {repeat + 1}: {side} {result['wall']:.1f} s")
        learn_ms, sample_ms, kernels_ms = time_learner(args, Path(tmp))
    print()
    print(render(args, runs))
    config = load_config(resolve_config_path(CONFIG))
    updates = (TARGET_STEPS - config.train.learning_starts) // config.train.replay_period
    print(
        f"learner (uniform, one thread): {learn_ms:.2f} ms an update, sampling "
        f"{sample_ms:.3f} ms of it; the {updates:,} updates of 1M env steps take "
        f"{updates * learn_ms / 60e3:.1f} min."
    )
    print(breakdown(config, runs, learn_ms, kernels_ms))


def breakdown(
    config: Config, runs: dict[str, list[dict[str, Any]]], learn_ms: float,
    kernels_ms: dict[str, float],
) -> str:  # fmt: skip
    """Where an env step of the uniform run goes: the update's arithmetic kernels (by group), the
    rest of ``learn``, and everything else (the env, acting, storing, logging, start-up), against
    the step time the 2x goal allows."""
    groups = ", ".join(f"{name} {ms:.2f}" for name, ms in kernels_ms.items())
    kernels = sum(kernels_ms.values())
    steps = runs["uniform"][-1]["env_steps"]
    updates = max(steps - config.train.learning_starts, 0) // config.train.replay_period
    wall = median([r["wall"] for r in runs["uniform"]])
    step_us = wall / steps * 1e6
    kernels_us = kernels * updates / steps * 1e3
    rest_us = max(learn_ms - kernels, 0.0) * updates / steps * 1e3
    line = (
        f"per env step (uniform): {step_us:.0f} us, of which the update's arithmetic kernels "
        f"(torch.profiler self time: {groups} ms; {kernels:.2f} ms an update) "
        f"{kernels_us:.0f} us, the rest of learn {rest_us:.0f} us, everything else "
        f"{max(step_us - kernels_us - rest_us, 0.0):.0f} us"
    )
    if "sb3" in runs:
        sb3_wall = median([r["wall"] for r in runs["sb3"]])
        allowed_us = sb3_wall / runs["sb3"][-1]["env_steps"] * 1e6 / GOAL
        line += f"; the {GOAL:.0f}x goal allows {allowed_us:.0f} us"
    return line + "."


if __name__ == "__main__":
    main()
