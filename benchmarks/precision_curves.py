"""fp32 against bf16 (``agent.precision``): finished runs' learning curves side by side, and a
table of what each run reached and how fast.

Usage::

    .venv/bin/python benchmarks/precision_curves.py RUN_DIR [RUN_DIR ...] [--out PNG]
    .venv/bin/python benchmarks/precision_curves.py --smoke    # trains two tiny runs to read

Every run dir is one ``per-dqn train`` output (``config.yaml``, ``summary.json``, an event file),
finished or interrupted (Ctrl-C: its curves stop where it stopped, and it has no final evaluation);
runs are grouped by their ``agent.precision`` and matched by seed. Nothing here trains: the runs are
made with the commands docs/guides/atari.md lists, and this script only reads what they wrote.
``--smoke`` is the exception: it trains a 300-step CartPole run at each precision
(``per_dqn.train``) into a temporary dir and reads those, so that ``make test`` runs every line.
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml
from _common import add_mode_options, markdown_table
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import per_dqn
from per_dqn.logs.tags import EPISODE_RETURN, PER_MEAN_PRIORITY, TRAIN_Q_MEAN, TRAIN_TD_ERROR_ABS
from per_dqn.sweeps.runs import read_summary

PANELS = [  # (tag, y label, episodes or log points in the rolling mean)
    (EPISODE_RETURN, "training episode return (mean of 10 episodes)", 10),
    (TRAIN_Q_MEAN, "mean Q(s, a) of the sampled batch", 1),
    (TRAIN_TD_ERROR_ABS, "mean |TD error| of the sampled batch", 1),
    (PER_MEAN_PRIORITY, "mean priority of the whole memory", 1),
]
COLORS = {"fp32": "C0", "bf16": "C3"}
LAST_STEPS = 20_000  # the training-return column averages the episodes that end in these


@dataclass(frozen=True)
class RunCurves:
    """One run: its precision, seed, summary and scalar curves."""

    path: Path
    precision: str
    seed: int
    summary: dict
    curves: dict[str, tuple[np.ndarray, np.ndarray]]


def read_run(run_dir: Path) -> RunCurves:
    """The run dir's config, summary and the panels' scalars."""
    summary = read_summary(run_dir)
    if summary is None:
        raise SystemExit(f"error: {run_dir}: no summary.json (a run in progress or cut short)")
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    precision = config.get("agent", {}).get("precision", "fp32")
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    curves = {}
    for tag, _, _ in PANELS:
        if tag in tags:
            points = events.Scalars(tag)
            curves[tag] = (
                np.array([p.step for p in points]),
                np.array([p.value for p in points], dtype=np.float64),
            )
    return RunCurves(run_dir, precision, int(summary["seed"]), summary, curves)


def rolling_mean(values: np.ndarray, window: int) -> np.ndarray:
    """Mean of each value and the ``window - 1`` before it (fewer at the start)."""
    sums = np.cumsum(np.concatenate(([0.0], values)))
    ends = np.arange(1, len(values) + 1)
    starts = np.maximum(ends - window, 0)
    return (sums[ends] - sums[starts]) / (ends - starts)


def plot(runs: list[RunCurves], out: Path) -> None:
    """One panel per tag; one colour per precision, one line style per seed."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12.8, 7.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 2).ravel()
    seeds = sorted({r.seed for r in runs})
    styles = ["-", "--", ":", "-."]
    for ax, (tag, label, window) in zip(axes, PANELS, strict=True):
        for run in runs:
            if tag not in run.curves:
                continue
            steps, values = run.curves[tag]
            ax.plot(
                steps,
                rolling_mean(values, window),
                color=COLORS.get(run.precision, "C2"),
                linestyle=styles[seeds.index(run.seed) % len(styles)],
                linewidth=1.2,
                label=f"{run.precision}, seed {run.seed}",
            )
        ax.set_xlabel("env steps")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    # One legend below the panels, outside the data, as the report's figures have it.
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 4),
                   fontsize="small", frameon=False)  # fmt: skip
    title = {r.summary["env_id"] for r in runs} | {r.summary["config"] for r in runs}
    fig.suptitle(", ".join(sorted(title)) + ": agent.precision fp32 against bf16")
    fig.savefig(out, dpi=200)


def table(runs: list[RunCurves]) -> str:
    """A row per run: final evaluation, late training return, SPS, wall time."""
    rows = []
    for run in sorted(runs, key=lambda r: (r.seed, r.precision != "fp32")):
        s = run.summary
        late = "n/a"
        if EPISODE_RETURN in run.curves:
            steps, values = run.curves[EPISODE_RETURN]
            mask = steps > s["env_steps"] - LAST_STEPS  # the last steps this run reached
            if mask.any():
                late = f"{values[mask].mean():.1f} ({int(mask.sum())} episodes)"
        if s["interrupted"]:
            final = f"none: stopped at {s['env_steps']:,} steps"
        else:
            final = (
                f"{s['final_eval_return_mean']:.1f} ± {s['final_eval_return_std']:.1f} "
                f"({s['final_eval_episodes']} episodes)"
            )
        rows.append(
            [
                run.precision,
                str(run.seed),
                final,
                late,
                f"{s['sps']:.1f}",
                f"{s['wall_seconds'] / 3600:.2f} h",
                run.path.as_posix(),
            ]
        )
    headers = [
        "precision",
        "seed",
        "final evaluation",
        f"training return, last {LAST_STEPS:,} steps",
        "SPS",
        "wall",
        "run dir",
    ]
    return markdown_table(headers, rows)


def smoke_runs(root: Path) -> list[Path]:
    """Two 300-step CartPole runs, fp32 and bf16, trained under ``root``."""
    dirs = []
    for precision in ("fp32", "bf16"):
        result = per_dqn.train(
            "cartpole.yaml",
            overrides={
                "agent.precision": precision,
                "train.total_env_steps": 300,
                "train.learning_starts": 100,
                "train.log_interval": 50,
                "train.eval_interval": 0,
                "train.final_eval_episodes": 1,
                "run.device": "cpu",
            },
            run_dir=root / precision,
        )
        dirs.append(result.run_dir)
    return dirs


def report(run_dirs: list[Path], out: Path) -> None:
    """Reads the runs, draws the curves to ``out`` and prints the table."""
    runs = [read_run(d) for d in run_dirs]
    out.parent.mkdir(parents=True, exist_ok=True)
    plot(runs, out)
    print(table(runs))
    print(f"\nCurves: {out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_mode_options(parser)
    parser.add_argument("run_dirs", nargs="*", type=Path, help="finished per-dqn run dirs")
    parser.add_argument(
        "--out", type=Path, help="the PNG (runs/precision-curves.png; smoke: a temp file)"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        if args.run_dirs:
            parser.error("--smoke trains its own runs: give it no RUN_DIR")
        with tempfile.TemporaryDirectory(prefix="bench-precision-") as tmp:
            report(smoke_runs(Path(tmp)), args.out or Path(tmp) / "precision-curves.png")
        return
    if not args.run_dirs:
        parser.error("give at least one RUN_DIR (or --smoke)")
    report(args.run_dirs, args.out or Path("runs/precision-curves.png"))


if __name__ == "__main__":
    main()
