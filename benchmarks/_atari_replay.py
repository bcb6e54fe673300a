"""Section 2 of ``benchmarks/atari.py``, replay memory at Atari size: each row built, filled,
checked, timed and deleted in turn, with the process's resident memory before and after; then the
section's table and verdicts.

Not a benchmark on its own: ``atari.py`` runs it (``--sections replay``), and its docstring says
what is measured; the rows are in ``_atari_replay_rows.py``, their data in ``_atari_stream.py``.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import cycle, islice
from typing import Any

import numpy as np
from _atari_replay_rows import (
    BETA,
    ROW_CPPRB,
    ROW_CPPRB_CL,
    ROW_PER,
    ROW_TIANSHOU,
    TRAIN_BATCH,
    ReplayRow,
    RowSpec,
    check_stacks,
    cpprb,
    fill,
    loop_pool,
    randomise_priorities,
    replay_specs,
    tianshou,
)
from _atari_stream import EPISODE_STEPS, OBS_SHAPE, EpisodeStream, FrameSource
from _common import (
    LoopFactory,
    available_bytes,
    calibrate,
    format_rate,
    format_us,
    gb,
    load_average,
    markdown_table,
    median,
    mode,
    rss_bytes,
    time_loop,
)

LOOP_POOL_STEPS = 2048  # transitions (whole episodes) cycled by the timed add loop (smoke 512)
ADDS_PER_STEP = 4  # env steps per gradient step in the DQN papers; unrolled in the loop
TD_POOL = 32
RSS_TARGET_BYTES = 7.5e9
MEMORY_HEADROOM_BYTES = 1 << 30  # left free for the other jobs on a shared machine
WARM_UP_STEPS = 2048  # smoke: 256
LOOP_RATIO_TARGET = 2.0


# --- process memory ----------------------------------------------------------------------------


_LIBC_NAME = ctypes.util.find_library("c")
_LIBC = ctypes.CDLL(_LIBC_NAME) if _LIBC_NAME else None


def settle_memory() -> None:
    """Collects garbage and hands freed heap pages back to the OS, so RSS shows what is held.

    glibc keeps freed blocks below its (adaptive, up to 32 MiB) mmap threshold in the heap, so
    the fill's temporary chunks could otherwise stay resident and be billed to the memory.
    """
    gc.collect()
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


# --- the timed loops and the measurement -------------------------------------------------------


def step_loop(row: ReplayRow, transitions: Iterator[Any], td_pool: list[np.ndarray]) -> LoopFactory:
    """Loops of DQN steps: 4 adds continuing the episode stream, sample 32, update 32."""

    def factory(calls: int) -> Callable[[], None]:
        items = list(islice(transitions, ADDS_PER_STEP * calls))
        tds = list(islice(cycle(td_pool), calls))
        add, sample, update = row.add_one, row.sample, row.update

        def run() -> None:
            it = iter(items)
            for td_errors in tds:
                add(next(it))
                add(next(it))
                add(next(it))
                add(next(it))
                batch = sample()
                if update is not None:
                    update(batch, td_errors)

        return run

    return factory


def sample_loop(row: ReplayRow) -> LoopFactory:
    """Loops of ``sample(32)`` calls."""

    def factory(calls: int) -> Callable[[], None]:
        sample = row.sample

        def run() -> None:
            for _ in range(calls):
                sample()

        return run

    return factory


@dataclass
class ReplayResult:
    """What one replay row measured."""

    name: str
    stacks: str = "not measured"
    fill_s: float = 0.0
    rss_delta: int = 0
    rss_after: int = 0
    filled: int = 0
    nbytes: int | None = None
    planned: int | None = None
    step_s: list[float] = field(default_factory=list)
    sample_s: list[float] = field(default_factory=list)
    load: str = ""
    skipped: str | None = None


def warm_up(
    spec: RowSpec, source: FrameSource, td_pool: list[np.ndarray], steps: int = WARM_UP_STEPS
) -> None:
    """Runs a small memory of the row's kind through every timed path, then frees it.

    The first memory of a kind loads numba's compiled kernels (and each library its lazily
    initialised state); doing that here keeps those bytes out of the measured RSS delta.
    """
    rng = np.random.default_rng(12345)
    stream = EpisodeStream.make(steps, 0, rng)
    row = spec.build(2 * steps)
    fill(row, spec, stream, source)
    if row.update is not None:
        randomise_priorities(row, len(stream), rng)
    check_stacks(row, stream, source)
    if row.extra_check is not None:
        row.extra_check(stream, source)
    transitions = cycle(loop_pool(spec, stream, source))
    time_loop(step_loop(row, transitions, td_pool), 16)
    time_loop(sample_loop(row), 16)
    del row, transitions
    settle_memory()


def measure_replay(args: argparse.Namespace, log: Callable[[str], None]) -> str:
    """Section 2: each memory built, filled, checked, timed and deleted in turn."""
    rng = np.random.default_rng(args.seed)
    source = FrameSource(args.seed)
    stream = EpisodeStream.make(args.fill, 0, rng)
    # Ends on an episode's end, so the cycled loop stream restarts at an episode's start.
    smoke = mode(args) == "smoke"
    pool_stream = EpisodeStream.make(512 if smoke else LOOP_POOL_STEPS, stream.next_frame_id, rng)
    td_pool = [np.abs(rng.standard_normal(TRAIN_BATCH)) for _ in range(TD_POOL)]
    results: list[ReplayResult] = []
    for spec in replay_specs():
        name = spec.name
        result = ReplayResult(name)
        results.append(result)
        need = spec.need(args.capacity)
        available = available_bytes()
        # Other jobs share the machine: leave them room rather than risk the OOM killer.
        if available is not None and need * 1.1 + MEMORY_HEADROOM_BYTES > available:
            result.skipped = f"needs ~{gb(need)}, {gb(available)} available"
            log(f"{name}: skipped ({result.skipped})")
            continue
        warm_up(spec, source, td_pool, 256 if smoke else WARM_UP_STEPS)
        before = rss_bytes()
        start = time.perf_counter()
        row = spec.build(args.capacity)
        fill(row, spec, stream, source)
        result.fill_s = time.perf_counter() - start
        result.filled = row.stored()
        if result.filled != len(stream):
            raise AssertionError(f"{name}: {result.filled} stored after the fill, not {args.fill}")
        settle_memory()
        result.rss_after = rss_bytes()
        result.rss_delta = result.rss_after - before
        result.nbytes, result.planned = row.nbytes, row.planned
        log(f"{name}: filled {result.filled:,} in {result.fill_s:.1f} s, +{gb(result.rss_delta)}")
        if row.update is not None:
            randomise_priorities(row, result.filled, rng)
        result.stacks = check_stacks(row, stream, source)
        if row.extra_check is not None:
            result.stacks += "; " + row.extra_check(stream, source)
        log(f"{name}: stacks {result.stacks}")
        transitions = cycle(loop_pool(spec, pool_stream, source))
        loops = [step_loop(row, transitions, td_pool), sample_loop(row)]
        calls = [calibrate(loop, args.target_s) for loop in loops]
        for _ in range(args.repeats):
            result.step_s.append(time_loop(loops[0], calls[0]).per_call)
            result.sample_s.append(time_loop(loops[1], calls[1]).per_call)
        result.load = load_average()
        log(f"{name}: timed")
        del row, transitions, loops
        settle_memory()
    return render_replay(results, args)


def render_replay(results: list[ReplayResult], args: argparse.Namespace) -> str:
    """Section 2's table and verdicts."""
    by_name = {r.name: r for r in results}
    rows = []
    for r in results:
        if r.skipped is not None:
            rows.append([r.name, f"not measured: {r.skipped}", *[""] * 8])
            continue
        rows.append(
            [
                r.name,
                r.stacks,
                f"{r.fill_s:.0f}",
                gb(r.rss_delta),
                gb(r.rss_after),
                "n/a" if r.nbytes is None else gb(r.nbytes),
                "n/a" if r.nbytes is None else f"{r.nbytes / args.capacity:,.0f}",
                f"{r.rss_delta / r.filled:,.0f}",
                format_rate(1.0 / median(r.step_s)),
                format_us(median(r.sample_s)),
                r.load,
            ]
        )
    headers = [
        "implementation",
        "stacks vs truth",
        "fill s",
        "RSS delta",
        "process RSS",
        "nbytes",
        "nbytes / capacity",
        "RSS delta / filled",
        f"loop steps/s ({ADDS_PER_STEP} add + sample {TRAIN_BATCH} + update {TRAIN_BATCH})",
        "sample 32 (us)",
        "load",
    ]
    full = args.fill == args.capacity
    lines = [
        f"### 2. Replay memory at capacity {args.capacity:,}, uint8 {OBS_SHAPE} stacks",
        "",
        f"Filled with {args.fill:,} transitions"
        + ("" if full else f" (not the full capacity: `--fill {args.fill}`)")
        + f" in episodes of {EPISODE_STEPS[0]} to {EPISODE_STEPS[1] - 1} steps, consecutive "
        f"stacks sharing 3 frames; PER priorities then randomised; beta {BETA}. Each timing "
        f"cell is the median of {args.repeats} loops of ~{args.target_s:g} s; rows ran one "
        "after another (load = 1-minute load average while the row ran). RSS delta: resident "
        "bytes the memory added, read after the fill (pages a partial fill never touched are "
        "not resident); nbytes: the memory's own arrays at full capacity.",
        "",
        markdown_table(headers, rows),
        "",
    ]
    per = by_name.get(ROW_PER)
    if per is not None and per.skipped is None:
        if per.nbytes != per.planned:
            lines.append(f"- {ROW_PER}: nbytes {per.nbytes:,} != planned {per.planned:,}.")
        if full:
            verdict = "met" if per.rss_delta <= RSS_TARGET_BYTES else "NOT met"
            lines.append(
                f"- per_dqn PER at {args.capacity:,}: {gb(per.rss_delta)} resident for the memory "
                f"(process {gb(per.rss_after)}); target <= {gb(RSS_TARGET_BYTES)}: {verdict}."
            )
        else:
            lines.append(
                f"- per_dqn PER resident at {args.capacity:,} not judged (fill {args.fill:,}); "
                f"its arrays total {gb(per.nbytes or 0)}."
            )
        for name, note in ((ROW_CPPRB, "its stacks as asked"), (ROW_CPPRB_CL, "channel-last")):
            peer = by_name.get(name)
            if peer is None or peer.skipped is not None:
                continue
            ratio = median(peer.step_s) / median(per.step_s)
            verdict = "met" if ratio >= LOOP_RATIO_TARGET else "NOT met"
            lines.append(
                f"- loop steps/s, per_dqn PER / cpprb PER ({note}; cpprb stacks {peer.stacks}): "
                f"{ratio:.2f}x; target >= {LOOP_RATIO_TARGET:g}x: {verdict}."
            )
        peer = by_name.get(ROW_TIANSHOU)
        if peer is not None and peer.skipped is None:
            ratio = median(peer.step_s) / median(per.step_s)
            lines.append(
                f"- loop steps/s, per_dqn PER / Tianshou PER (Tianshou stacks {peer.stacks}): "
                f"{ratio:.2f}x."
            )
    tianshou_result = by_name.get(ROW_TIANSHOU)
    if tianshou_result is not None and tianshou_result.skipped is None:
        lines.append(
            "- Tianshou's stacks: besides the 256 random samples every row gets, its row is "
            "checked at every stored episode start and end. With `ignore_obs_next=True` the "
            "frame after an episode's last step is never stored and `next(index)` stays at "
            "`index` when `done`, so `obs_next` of a terminal step is that step's `obs` again, "
            "not the truth (DQN's target masks it with `done`). At episode starts Tianshou pads "
            "as the truth does, repeating the reset frame (`prev` stops at the episode's first "
            "slot; Tianshou's `FrameStack` and gymnasium's `FrameStackObservation` both pad so)."
        )
    if cpprb is None:
        lines.append("- cpprb not installed (the `bench` extra, `make bench`): no peer rows.")
    if tianshou is None:
        lines.append("- tianshou not installed (the `bench` extra, `make bench`): no Tianshou row.")
    return "\n".join(lines)
