"""Speed of the replay memories against a textbook baseline, a numpy baseline and cpprb.

What is measured, on memories pre-filled to their full capacity (2**20 transitions by default) with
CartPole-sized transitions (obs ``(4,)`` float32) whose priorities were then randomised with
``update_priorities`` (so the trees and the rank heap are not all-equal):

- ``add/s``: single-transition ``add`` calls per second; the memory is full, so every add
  overwrites the oldest slot and fixes its tree path, as in a long training run.
- ``sample 32`` / ``sample 256``: microseconds per ``sample(B, beta=0.4)`` call, including the
  gather of the transitions and the importance-sampling weights.
- ``update 32`` / ``update 256``: microseconds per ``update_priorities`` call with random
  ``|delta|``, each call right after its own (untimed) ``sample(B)``, as in training: the update
  walks the tree paths the sample just visited, and a rank-based heap is disturbed by fresh
  indices. These calls are timed one by one, minus the timer's measured overhead (~0.1 us).
- ``loop steps/s``: the replay side of one DQN training step, i.e. 4 single adds (one update every
  4 env steps) + ``sample(32)`` + ``update_priorities`` of those 32, in steps per second.

Each cell is the median over ``--repeats`` timed loops; each loop makes enough calls to last about
0.2 s, so timer overhead is negligible (or, for updates, subtracted), and slow rows simply make
fewer calls. Repeats are interleaved across implementations (repeat 1 of every row, then repeat 2,
...) so that background load on a small shared machine hits all rows alike, and the ratios below
the table come from one run, with their per-repeat range. Before timing, every loop runs once
untimed (numba JIT, first-touch page faults, caches).

The rows, and why each is there:

- ``per_dqn``'s memory of every kind in ``per_dqn.memory.KINDS``, built by ``make_memory`` at the
  kind's default settings: uniform, proportional (alpha 0.6, global weight normalisation) and
  rank-based (alpha 0.7): what the project ships. The rank-based memory re-sorts its heap every
  ``sort_interval`` (1000) updates; its update and loop timings make whole multiples of that many
  calls, so the amortised sort is included.
- A pure-Python sum tree (Python lists, a Python loop per element for updates and per draw for the
  descent, numpy storage): the textbook implementation, i.e. what PER costs without care.
- A vectorised-numpy sum tree (level-by-level descent and updates over the whole batch, no
  numba), a sampler in the same ``ReplayMemory`` with the same storage and gather: the row that
  says whether the numba kernels behind ``SumTree`` and ``MinTree`` earn their place.
- cpprb 11 ``PrioritizedReplayBuffer`` (alpha 0.6) and ``ReplayBuffer``: the established C++
  implementation. Plain buffers only (no ``Nstep``, ``next_of`` or ``stack_compress``), in which
  configuration ``add`` writes straight into the main buffer; the script checks that the stored
  size is the capacity and that sampled observations are the ones written.

Both baselines are checked against ``make_memory("proportional", ...)`` before timing: with the
same seed they must draw the same indices with the same weights.

Run ``make bench`` (or ``.venv/bin/python benchmarks/replay.py``); ``--quick`` is a short run,
``--smoke`` a seconds-long check that the script works (``make test`` runs it).

The script uses only the public API of ``per_dqn.memory``: the baselines are ``Sampler``
subclasses composed with per_dqn's storage in a ``ReplayMemory`` (``_replay_baselines.py``). The
timed loops and the filled memories are in ``_replay_subjects.py``; this file runs and reports.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from _common import (
    LoopFactory,
    calibrate,
    command_line,
    fill_defaults,
    format_rate,
    format_us,
    machine_line,
    markdown_table,
    median,
    mode,
    package_versions,
    progress_log,
    relative_spread,
    require_at_least,
    time_loop,
)
from _replay_baselines import check_baselines_agree
from _replay_subjects import (
    ADDS_PER_STEP,
    BETA,
    METRICS,
    OBS_SHAPE,
    ROW_CPPRB,
    ROW_NUMPY,
    ROW_PROPORTIONAL,
    TRAIN_BATCH,
    FillData,
    Subject,
    build_subjects,
    cpprb,
)

# --- running and reporting -------------------------------------------------------------------


Results = dict[str, dict[str, list[float]]]  # row -> metric -> seconds per call, one per repeat


def run(
    subjects: list[Subject], repeats: int, target_s: float, log: Callable[[str], None]
) -> Results:
    """Calibrates (and warms up) every loop, then times the repeats, interleaving the rows."""
    rng = np.random.default_rng(123)
    loops: dict[tuple[str, str], tuple[LoopFactory, int]] = {}
    for subject in subjects:
        for key, metric in METRICS.items():
            factory = metric.loop(subject, rng)
            if factory is None:
                continue
            multiple = subject.update_period if metric.periodic else 1
            loops[subject.name, key] = (factory, calibrate(factory, target_s, multiple))
        log(f"calibrated {subject.name}")
    results: Results = {s.name: {key: [] for key in METRICS} for s in subjects}
    for r in range(repeats):
        shift = r % len(subjects)  # rotate the order so no row always runs first
        for subject in subjects[shift:] + subjects[:shift]:
            for key in METRICS:
                if (subject.name, key) in loops:
                    factory, calls = loops[subject.name, key]
                    results[subject.name][key].append(time_loop(factory, calls).per_call)
        log(f"repeat {r + 1}/{repeats} done")
    return results


def cell(results: Results, row: str, key: str) -> float:
    """Median seconds per call of one table cell."""
    return median(results[row][key])


def paired_range(results: Results, slow: str, fast: str, keys: tuple[str, ...]) -> str:
    """Range of the per-repeat ratios ``time(slow) / time(fast)`` over ``keys``.

    Repeats are interleaved, so repeat ``r`` of both rows ran close together in time.
    """
    ratios = [
        sum(results[slow][key][r] for key in keys) / sum(results[fast][key][r] for key in keys)
        for r in range(len(results[slow][keys[0]]))
    ]
    return f"per-repeat {min(ratios):.2f}x to {max(ratios):.2f}x"


def render(results: Results, args: argparse.Namespace, versions: dict[str, str]) -> str:
    """The whole report: settings, the table, the target ratios, machine and command."""
    rows = []
    for name, by_metric in results.items():
        cells = [name]
        for key, metric in METRICS.items():
            seconds = median(by_metric[key]) if by_metric[key] else None
            if seconds is None:
                cells.append("n/a")
            elif metric.is_rate:
                cells.append(format_rate(1.0 / seconds))
            else:
                cells.append(format_us(seconds))
        rows.append(cells)
    lines = [
        f"Replay memories at capacity {args.capacity:,} (full, priorities randomised), "
        f"obs {OBS_SHAPE} float32, beta {BETA}; each cell is the median of {args.repeats} timed "
        f"loops of ~{args.target_s:g} s. A loop step is the replay side of one DQN update: "
        f"{ADDS_PER_STEP} single adds, sample {TRAIN_BATCH}, update those {TRAIN_BATCH} "
        f"priorities (n/a: no priorities).",
        "",
        markdown_table(["implementation", *(m.header for m in METRICS.values())], rows),
        "",
    ]
    if ROW_PROPORTIONAL in results and ROW_CPPRB in results:
        ours_su, theirs_su = (
            cell(results, row, "sample32") + cell(results, row, "update32")
            for row in (ROW_PROPORTIONAL, ROW_CPPRB)
        )
        speedup = theirs_su / ours_su
        loop_ratio = cell(results, ROW_CPPRB, "step") / cell(results, ROW_PROPORTIONAL, "step")
        lines += [
            f"- (a) sample 32 + update 32, {ROW_PROPORTIONAL} vs cpprb: "
            f"{format_us(ours_su)} us vs {format_us(theirs_su)} us: per_dqn is {speedup:.2f}x as "
            f"fast ({paired_range(results, ROW_CPPRB, ROW_PROPORTIONAL, ('sample32', 'update32'))})"
            f"; target > 1x: {'met' if speedup > 1 else 'NOT met'}.",
            f"- (b) loop steps/s, {ROW_PROPORTIONAL} / cpprb: {loop_ratio:.2f}x "
            f"({paired_range(results, ROW_CPPRB, ROW_PROPORTIONAL, ('step',))}); target >= 2x: "
            f"{'met' if loop_ratio >= 2 else 'NOT met'}.",
        ]
    else:
        lines.append("- (a), (b): cpprb is not installed (`make bench` installs it); no ratios.")
    if ROW_NUMPY in results:

        def numba_gain(*keys: str) -> float:
            return sum(cell(results, ROW_NUMPY, k) for k in keys) / sum(
                cell(results, ROW_PROPORTIONAL, k) for k in keys
            )

        lines.append(
            f"- numba kernels vs vectorised numpy (same memory otherwise): per_dqn is "
            f"{numba_gain('sample32', 'update32'):.2f}x as fast on sample 32 + update 32, "
            f"{numba_gain('sample256', 'update256'):.2f}x on sample 256 + update 256, "
            f"{numba_gain('step'):.2f}x on the loop."
        )
    if args.repeats > 1:
        spread, where = max(
            (relative_spread(values), f"{row}, {METRICS[key].header}")
            for row, by_metric in results.items()
            for key, values in by_metric.items()
            if values
        )
        lines.append(f"- Largest (max - min) / median over the repeats: {spread:.0%} ({where}).")
    lines += [
        "",
        f"Machine: {machine_line(versions)}",
        f"Command: `{command_line()}`",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--quick", action="store_true", help="quick run: capacity 2**14, 3 repeats, short loops"
    )
    group.add_argument(
        "--smoke",
        action="store_true",
        help="smoke test (seconds; what `make test` runs): capacity 512, 1 repeat, tiny loops; "
        "its figures mean nothing",
    )
    parser.add_argument(
        "--repeats", type=int, help="timed loops per cell (default 7, quick 3, smoke 1)"
    )
    parser.add_argument(
        "--capacity", type=int, help="transitions (default 2**20, quick 2**14, smoke 512)"
    )
    args = parser.parse_args(argv)
    fill_defaults(args, {"repeats": (7, 3, 1), "capacity": (1 << 20, 1 << 14, 512)})
    args.target_s = {"full": 0.2, "quick": 0.02, "smoke": 0.001}[mode(args)]
    require_at_least(parser, args, 1, "repeats")
    if args.capacity < 256:
        parser.error(f"--capacity must be >= 256 (the largest batch), got {args.capacity}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    log = progress_log()

    check_baselines_agree(OBS_SHAPE, BETA)
    log("baselines agree with per_dqn proportional")
    if cpprb is None:
        log("cpprb is not importable: its rows are skipped (`make bench` installs it)")
    subjects = build_subjects(args.capacity, FillData.make(args.capacity), log)
    results = run(subjects, args.repeats, args.target_s, log)
    print(render(results, args, package_versions("numpy", "numba", "cpprb")))


if __name__ == "__main__":
    main()
