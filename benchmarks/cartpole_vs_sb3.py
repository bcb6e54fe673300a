"""The default CartPole run against Stable-Baselines3's DQN with rl-zoo's CartPole settings:
whole wall time of each, as a user meets it, side by side in one run.

Target (issue 13): ``per-dqn train --config cartpole.yaml`` (50,000 env steps) in at most half of
SB3 DQN's wall time.

Both sides run as fresh processes and are timed from process start to exit, start-up included:

* per_dqn: ``python -m per_dqn.cli train --config cartpole.yaml --quiet --device cpu --seed S
  --run-dir TMP --set run.torch_threads=T`` (what the ``per-dqn`` command runs, with this
  checkout's code): the shipped config as it is, so its periodic evaluations (every 10,000 steps,
  5 episodes), its final evaluation (20 episodes) and its checkpoint and model writes are
  included. The score is ``summary.json``'s ``final_eval_return_mean``.
* SB3: ``benchmarks/_sb3_cartpole.py``: ``DQN("MlpPolicy", "CartPole-v1", ...)`` with
  rl-baselines3-zoo's ``hyperparams/dqn.yml`` entry for ``CartPole-v1`` (commit ce95481b:
  ``n_timesteps 5e4``, ``learning_rate 2.3e-3``, ``batch_size 64``, ``buffer_size 100000``,
  ``learning_starts 1000``, ``gamma 0.99``, ``target_update_interval 10``, ``train_freq 256``,
  ``gradient_steps 128``, ``exploration_fraction 0.16``, ``exploration_final_eps 0.04``,
  ``net_arch [256, 256]``), ``learn`` for the same number of steps, then a greedy evaluation of
  as many episodes as per_dqn's final one (its score). No periodic evaluation: rl-zoo's
  ``train.py`` would add one every 25,000 steps; leaving it out favours SB3.

Both on CPU with the same torch thread count (``--threads``, default the config's
``run.torch_threads``) and the same seed (``--seed`` + the repeat's index). Repeats alternate
which side goes first. SPS is env steps over the whole wall time. Without ``stable_baselines3``
(the ``bench`` extra) only per_dqn's row is measured.

    .venv/bin/python benchmarks/cartpole_vs_sb3.py               # 50k steps each, 3 repeats
    .venv/bin/python benchmarks/cartpole_vs_sb3.py --smoke       # 1,200 steps each, 1 repeat
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

from per_dqn.config import load_config, resolve_config_path

HAVE_SB3 = importlib.util.find_spec("stable_baselines3") is not None
SB3_CHILD = Path(__file__).resolve().parent / "_sb3_cartpole.py"
TARGET = 0.5  # per_dqn wall / SB3 wall


def run_per_dqn(args: argparse.Namespace, seed: int, run_dir: Path) -> dict[str, Any]:
    """One ``per-dqn train`` process; its wall time and what its summary says."""
    command = [
        "-m", "per_dqn.cli", "train", "--config", args.config, "--quiet", "--device", "cpu",
        "--seed", str(seed), "--run-dir", str(run_dir), "--steps", str(args.steps),
        "--set", f"run.torch_threads={args.threads}",
    ]  # fmt: skip
    done = run_python(command, root=ROOT, cwd=run_dir.parent)
    check_finished("per-dqn train", done)
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"wall": done.wall, "env_steps": summary["env_steps"],
            "score": summary["final_eval_return_mean"]}  # fmt: skip


def run_sb3(args: argparse.Namespace, seed: int, cwd: Path) -> dict[str, Any]:
    """One SB3 process; its wall time and what it printed."""
    command = [
        str(SB3_CHILD), "--steps", str(args.steps), "--seed", str(seed),
        "--threads", str(args.threads), "--eval-episodes", str(args.eval_episodes),
    ]  # fmt: skip
    done = run_python(command, root=ROOT, cwd=cwd)
    check_finished("the SB3 run", done)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {"wall": done.wall, "env_steps": result["env_steps"],
            "score": result["final_eval_return_mean"]}  # fmt: skip


def render(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> str:
    """The table and the ratio against the target."""
    labels = {
        "per_dqn": f"per_dqn: per-dqn train --config {args.config}",
        "sb3": "SB3 DQN, rl-zoo CartPole-v1 settings",
    }
    rows = []
    for side, results in runs.items():
        walls = [r["wall"] for r in results]
        steps = results[-1]["env_steps"]
        scores = ", ".join("n/a" if r["score"] is None else f"{r['score']:.1f}" for r in results)
        rows.append(
            [labels[side], f"{median(walls):.1f}", f"{min(walls):.1f}", f"{steps:,}",
             f"{steps / median(walls):,.0f}", scores]
        )  # fmt: skip
    headers = ["run", "wall s (median)", "min", "env steps", "SPS", "final score per repeat"]
    lines = [markdown_table(headers, rows), ""]
    if "sb3" in runs:
        paired = [p["wall"] / s["wall"] for p, s in zip(runs["per_dqn"], runs["sb3"], strict=True)]
        ratio = median([r["wall"] for r in runs["per_dqn"]]) / median(
            [r["wall"] for r in runs["sb3"]]
        )
        verdict = "met" if ratio <= TARGET else "NOT met"
        lines.append(
            f"per_dqn / SB3 wall time (medians): {ratio:.2f} (per repeat {min(paired):.2f} to "
            f"{max(paired):.2f}); target <= {TARGET}: {verdict}."
        )
    else:
        lines.append(
            "SB3 not measured: stable_baselines3 is not importable (the `bench` extra: "
            "`make bench-sb3` installs it)."
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options; the defaults come from the config."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_mode_options(parser)
    parser.add_argument("--config", default="cartpole.yaml")
    parser.add_argument("--steps", type=int, help="env steps each (the config's; smoke 1200)")
    parser.add_argument("--repeats", type=int, help="runs each (3; smoke 1)")
    parser.add_argument("--threads", type=int, help="torch threads each (the config's)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first repeat")
    args = parser.parse_args(argv)
    config = load_config(resolve_config_path(args.config))
    fill_defaults(
        args,
        {
            "steps": (config.train.total_env_steps, None, 1_200),
            "repeats": (3, None, 1),
            "threads": (config.run.torch_threads,) * 3,
        },
    )
    require_at_least(parser, args, 1, "repeats", "threads")
    if args.steps <= config.train.learning_starts:
        parser.error(
            f"--steps must be > train.learning_starts ({config.train.learning_starts}), "
            f"got {args.steps}"
        )
    args.eval_episodes = config.train.final_eval_episodes
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    log = progress_log()
    versions = {"torch": version("torch")}
    if HAVE_SB3:
        versions["stable-baselines3"] = version("stable-baselines3")
    print(f"# {machine_line(versions)}")
    print(
        f"# {args.steps:,} env steps each, {args.repeats} repeat(s), torch threads "
        f"{args.threads}, CPU; command `{command_line()}`"
    )
    sides = ["per_dqn", *(["sb3"] if HAVE_SB3 else [])]
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="bench-cartpole-sb3-") as tmp:
        for repeat in range(args.repeats):
            seed = args.seed + repeat
            for side in rotated(sides, repeat):
                if side == "per_dqn":
                    result = run_per_dqn(args, seed, Path(tmp) / f"per_dqn-{repeat}")
                else:
                    result = run_sb3(args, seed, Path(tmp))
                runs[side].append(result)
                log(f"repeat {repeat + 1}: {side} {result['wall']:.1f} s")
    print()
    print(render(args, runs))


if __name__ == "__main__":
    main()
