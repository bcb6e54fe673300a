"""Whole-loop speed on CartPole: uniform vs proportional vs rank-based replay, in one run.

Each repeat trains the same config (same seed, same hyperparameters) once per memory kind, in
rotating order so that a slow spell of the machine is shared out; env steps per second are the
loop's own (``summary.json``'s ``env_steps / wall_seconds``: acting, storing, sampling, learning,
priority updates and logging), with periodic evaluation switched off so that only the loop is
timed. The PER overhead is ``uniform SPS / PER SPS`` of the medians (1.15 = 15 % slower).

    .venv/bin/python benchmarks/train_loop.py                 # 20k env steps x 3 repeats
    .venv/bin/python benchmarks/train_loop.py --steps 50000 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
from pathlib import Path

import numpy as np
import torch
from _common import cpu_model

from per_dqn.config import load_config, parse_override, resolve_config_path
from per_dqn.run import Trainer

KINDS = ("uniform", "proportional", "rank")


def one_run(config_name: str, kind: str, steps: int, seed: int, root: Path) -> dict:
    """Trains once and returns the summary."""
    overrides = [
        f"replay.kind={kind}",
        f"train.total_env_steps={steps}",
        f"run.seed={seed}",
        "run.device=cpu",
        "train.eval_interval=0",
        "train.final_eval_episodes=1",
    ]
    config = load_config(
        resolve_config_path(config_name), [parse_override(text) for text in overrides]
    )
    trainer = Trainer(config, Path(config_name).stem)
    try:
        return trainer.run(root / f"{kind}-{len(list(root.iterdir()))}")
    finally:
        trainer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="cartpole.yaml")
    parser.add_argument("--steps", type=int, default=20_000, help="env steps per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    print(
        f"# {cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, "
        f"numpy {np.__version__}, python {platform.python_version()}"
    )
    print(f"# config {args.config}, {args.steps:,} env steps per run, {args.repeats} repeats")
    sps: dict[str, list[float]] = {kind: [] for kind in KINDS}
    updates: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        # Warm-up, not timed: first-call costs (numba's cache, torch's lazy imports).
        one_run(args.config, "proportional", 2_000, args.seed, root)
        for repeat in range(args.repeats):
            order = KINDS[repeat % 3 :] + KINDS[: repeat % 3]
            for kind in order:
                summary = one_run(args.config, kind, args.steps, args.seed, root)
                sps[kind].append(summary["env_steps"] / summary["wall_seconds"])
                updates[kind] = summary["update_steps"]

    base = statistics.median(sps["uniform"])
    print()
    header = ("replay", "SPS (median)", "min", "max", "updates", "overhead")
    print("{:<13} {:>12} {:>7} {:>7} {:>8} {:>9}".format(*header))
    for kind in KINDS:
        values = sps[kind]
        mid = statistics.median(values)
        print(
            f"{kind:<13} {mid:>12,.0f} {min(values):>7,.0f} {max(values):>7,.0f} "
            f"{updates[kind]:>8,} {base / mid:>8.3f}x"
        )
    worst = max(base / statistics.median(sps[k]) for k in ("proportional", "rank"))
    verdict = "within" if worst <= 1.15 else "NOT within"
    print(f"\nPER overhead (uniform SPS / PER SPS, worst kind): {worst:.3f}x, {verdict} 15 %")


if __name__ == "__main__":
    main()
