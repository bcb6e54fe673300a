"""Event files, read and written: the report's reader (``per_dqn.sweeps.events``) against
TensorBoard's ``EventAccumulator``, and ``per-dqn unarchive``'s writer against the run's own
logger (``TensorBoardLogger``, torch's ``SummaryWriter`` and its writer thread), in one run.

An archived sweep is unarchived once; then, run by run:

* read: every scalar tag of the run's event file by ``EventAccumulator`` (what ``per-dqn report``
  used) and by ``scalar_curves`` (what it uses), checked to give the same points;
* write: the run's archived points written back by ``TensorBoardLogger.scalars``, one point at a
  time (what ``per-dqn unarchive`` did), and by ``write_scalars`` (what it does), into two new
  dirs, checked to read back the same.

Each side's seconds are summed over the runs, alternating which side goes first run by run.

    .venv/bin/python benchmarks/events.py                       # the MinAtar study: 150 runs
    .venv/bin/python benchmarks/events.py --archive docs/results/data/minatar-alpha.tar.xz
    .venv/bin/python benchmarks/events.py --smoke               # a few seconds: 3 runs
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _common import ROOT, add_mode_options, command_line, machine_line, markdown_table, mode
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from per_dqn.cli import app
from per_dqn.logs.metrics import TensorBoardLogger
from per_dqn.sweeps import events
from per_dqn.sweeps.archive import ARCHIVED_TAGS

STUDY = ROOT / "docs/results/data/minatar-study.tar.xz"
SMALL = ROOT / "docs/results/data/literature-per-beta-over-1m.tar.xz"


def event_files(run: Path) -> list[Path]:
    return sorted(p for p in run.iterdir() if "tfevents" in p.name)


def tensorboard_read(run: Path) -> dict[str, list[tuple[int, float]]]:
    accumulator = EventAccumulator(str(run), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: [(e.step, e.value) for e in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


def ours_read(run: Path, tags) -> dict[str, list[tuple[int, float]]]:
    return events.scalar_curves([(p, p.read_bytes()) for p in event_files(run)], tags)


def logger_write(run: Path, points) -> None:
    logger = TensorBoardLogger(run)
    try:
        for tag, step, value in points:
            logger.scalars({tag: value}, step)
    finally:
        logger.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_mode_options(parser)
    parser.add_argument("--archive", type=Path, help="an archived sweep (the MinAtar study's)")
    args = parser.parse_args()
    smoke = mode(args) == "smoke"
    archive = args.archive or (SMALL if smoke else STUDY)
    print(command_line())
    print(machine_line({}))
    from typer.testing import CliRunner

    seconds = {"read": [0.0, 0.0], "write": [0.0, 0.0]}
    points_total = 0
    with tempfile.TemporaryDirectory() as tmp:
        sweep = Path(tmp) / "sweep"
        result = CliRunner().invoke(app, ["unarchive", str(archive), str(sweep)])
        if result.exit_code != 0:
            sys.exit(result.output)
        runs = sorted({p.parent for p in sweep.rglob("*tfevents*")})[: 3 if smoke else None]
        for i, run in enumerate(runs):
            first = i % 2  # 0: TensorBoard's side first
            timed = {}
            for side in (0, 1) if first == 0 else (1, 0):
                start = time.perf_counter()
                timed[side] = tensorboard_read(run) if side == 0 else ours_read(run, ARCHIVED_TAGS)
                seconds["read"][side] += time.perf_counter() - start
            theirs, mine = timed[0], timed[1]
            if mine != theirs:
                sys.exit(f"{run}: the readers disagree")
            points = sorted(
                ((tag, step, value) for tag, curve in theirs.items() for step, value in curve),
                key=lambda point: point[1],
            )
            points_total += len(points)
            dirs = {side: Path(tmp) / f"write{side}" / str(i) for side in (0, 1)}
            for side in (0, 1) if first == 0 else (1, 0):
                dirs[side].mkdir(parents=True)
                start = time.perf_counter()
                if side == 0:
                    logger_write(dirs[side], points)
                else:
                    events.write_scalars(dirs[side], points)
                seconds["write"][side] += time.perf_counter() - start
            if tensorboard_read(dirs[0]) != tensorboard_read(dirs[1]):
                sys.exit(f"{run}: the written files read back differently")
    print(f"\n{archive.name}: {len(runs)} runs, {points_total:,} points\n")
    rows = [
        ["read every run's scalars", f"{seconds['read'][0]:.2f}", f"{seconds['read'][1]:.2f}",
         f"{seconds['read'][0] / seconds['read'][1]:.1f}x"],
        ["write them back", f"{seconds['write'][0]:.2f}", f"{seconds['write'][1]:.2f}",
         f"{seconds['write'][0] / seconds['write'][1]:.1f}x"],
    ]  # fmt: skip
    print(markdown_table(["", "TensorBoard's, s", "per_dqn.sweeps.events, s", "ratio"], rows))


if __name__ == "__main__":
    main()
