"""Small timing and printing helpers shared by the scripts in ``benchmarks/``."""

from __future__ import annotations

import functools
import gc
import math
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import NamedTuple

# A timed loop: given a number of calls, it returns a thunk that makes exactly those calls. Building
# the thunk is setup (not timed): that is where pools of inputs are prepared. A thunk that must do
# untimed work between its calls times those calls itself and returns the seconds they took;
# otherwise it returns None and the whole thunk is timed.
LoopFactory = Callable[[int], Callable[[], float | None]]


class Timing(NamedTuple):
    """One timed loop: seconds per timed call, and the wall time the loop took."""

    per_call: float
    wall: float


@functools.cache
def timer_overhead() -> float:
    """Seconds that an empty ``start = perf_counter(); total += perf_counter() - start`` reads.

    Self-timed loops subtract it once per call (the median of five runs of 100,000 windows).
    """
    runs = []
    clock = time.perf_counter
    for _ in range(5):
        total = 0.0
        for _ in repeat(None, 100_000):
            start = clock()
            total += clock() - start
        runs.append(total / 100_000)
    return statistics.median(runs)


def time_loop(factory: LoopFactory, calls: int) -> Timing:
    """Times one loop of ``calls`` calls.

    The garbage collector is paused while the loop runs, as ``timeit`` does, so that a collection
    triggered by one implementation's allocations is not billed to a random call.
    """
    thunk = factory(calls)
    overhead = timer_overhead()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        self_timed = thunk()
        wall = time.perf_counter() - start
    finally:
        if was_enabled:
            gc.enable()
    timed = wall if self_timed is None else max(0.0, self_timed - calls * overhead)
    return Timing(timed / calls, wall)


def calibrate(factory: LoopFactory, target_s: float, multiple_of: int = 1) -> int:
    """Number of calls that makes one loop last about ``target_s`` seconds of wall time.

    One untimed loop first warms up (JIT compilation or cache load, first-touch page faults,
    CPU caches), so that a slow first call cannot set the count; then loops grow until one of at
    least 10 calls lasts a fifth of the target. The result is rounded up to a multiple of
    ``multiple_of`` so that periodic work (e.g. a re-sort every 1000 updates) is included in its
    true proportion.
    """
    calls = multiple_of
    time_loop(factory, calls)
    while True:
        wall = time_loop(factory, calls).wall
        if calls >= 10 and wall >= target_s / 5:
            break
        calls *= 4
    wanted = max(1, math.ceil(target_s * calls / wall))
    return math.ceil(wanted / multiple_of) * multiple_of


def median(values: Sequence[float]) -> float:
    """The median of a non-empty sequence."""
    return statistics.median(values)


def relative_spread(values: Sequence[float]) -> float:
    """``(max - min) / median``: how far apart the repeats of one measurement landed."""
    mid = statistics.median(values)
    return (max(values) - min(values)) / mid if mid > 0 else 0.0


def cpu_model() -> str:
    """The CPU model name from ``/proc/cpuinfo`` (Linux), else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine_line(versions: dict[str, str]) -> str:
    """One line naming the CPU, its core count, Python and the given package versions."""
    parts = [
        f"{cpu_model()}, {os.cpu_count()} CPUs",
        f"{platform.system()} {platform.machine()}",
        f"Python {platform.python_version()}",
        *(f"{name} {version}" for name, version in versions.items()),
    ]
    return "; ".join(parts)


def command_line() -> str:
    """The command line exactly as it was typed (interpreter included)."""
    return shlex.join(sys.orig_argv)


def progress_log() -> Callable[[str], None]:
    """A function that prints a message to stderr behind the seconds since this call."""
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", file=sys.stderr, flush=True)

    return log


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-flavoured markdown table; the first column left-aligned, the rest right-aligned."""
    widths = [max(len(str(r[c])) for r in (headers, *rows)) for c in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        padded = [
            str(cell).ljust(w) if c == 0 else str(cell).rjust(w)
            for c, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = ["-" * (w + 2) if c == 0 else "-" * (w + 1) + ":" for c, w in enumerate(widths)]
    return "\n".join([line(headers), "|" + "|".join(rule) + "|", *(line(r) for r in rows)])


def format_us(seconds: float) -> str:
    """Seconds as microseconds: two decimals below 10, one below 100, then whole numbers."""
    us = seconds * 1e6
    return f"{us:,.0f}" if us >= 100 else f"{us:.1f}" if us >= 10 else f"{us:.2f}"


def format_rate(per_second: float) -> str:
    """A rate with thousands separators."""
    return f"{per_second:,.0f}"
