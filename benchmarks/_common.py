"""Small helpers shared by the scripts in ``benchmarks/``: the checkout's ``per_dqn`` first on the
path, run modes (full, ``--quick``, ``--smoke``), timing loops, subprocesses, and table printing.

Import this module before anything from ``per_dqn``: a script run as ``python benchmarks/x.py``
has ``benchmarks/`` on ``sys.path``, not the checkout, so ``per_dqn`` would otherwise come from
wherever it is installed (an editable install of another checkout, say), and the figures would be
that code's. Importing this module puts the checkout that holds it first.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib.metadata
import math
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

ROOT = Path(__file__).resolve().parents[1]
"""The checkout these scripts belong to."""

if sys.path[:1] != [str(ROOT)]:
    sys.path.insert(0, str(ROOT))

T = TypeVar("T")

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
    """One line naming the CPU, its core count, Python, the given package versions and, once
    imported, where ``per_dqn`` came from (the code that was measured)."""
    parts = [
        f"{cpu_model()}, {os.cpu_count()} CPUs",
        f"{platform.system()} {platform.machine()}",
        f"Python {platform.python_version()}",
        *(f"{name} {version}" for name, version in versions.items()),
    ]
    package = sys.modules.get("per_dqn")
    if package is not None and getattr(package, "__file__", None):
        parts.append(f"per_dqn from {Path(package.__file__).parent}")
    return "; ".join(parts)


def package_versions(*names: str) -> dict[str, str]:
    """Each installed distribution's version, ``"not installed"`` for the others."""
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def load_average() -> str:
    """The 1-minute load average."""
    return f"{os.getloadavg()[0]:.1f}"


def load_averages() -> str:
    """The 1-, 5- and 15-minute load averages, ``"1.02 / 0.98 / 0.91"``."""
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


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


def gb(n_bytes: float) -> str:
    """Bytes as decimal gigabytes."""
    return f"{n_bytes / 1e9:.2f} GB"


# --- run modes and options ----------------------------------------------------------------------

MODES = ("full", "quick", "smoke")


def add_mode_options(parser: argparse.ArgumentParser, quick: str | None = None) -> None:
    """Adds ``--smoke`` (and ``--quick`` when ``quick`` gives its help), mutually exclusive.

    ``--smoke`` runs every code path of the script at tiny sizes in a few seconds, so that
    ``make test`` can keep the script working (tests/test_benchmarks.py); its figures mean nothing.
    """
    group = parser.add_mutually_exclusive_group()
    if quick is not None:
        group.add_argument("--quick", action="store_true", help=quick)
    group.add_argument(
        "--smoke", action="store_true", help="tiny sizes, a few seconds; the figures mean nothing"
    )


def mode(args: argparse.Namespace) -> str:
    """``"smoke"``, ``"quick"`` or ``"full"``: which of ``add_mode_options``' flags was given."""
    if getattr(args, "smoke", False):
        return "smoke"
    return "quick" if getattr(args, "quick", False) else "full"


def fill_defaults(args: argparse.Namespace, defaults: Mapping[str, tuple[Any, Any, Any]]) -> None:
    """Sets each option still ``None`` to its value for the run's mode, ``(full, quick, smoke)``."""
    column = MODES.index(mode(args))
    for name, values in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, values[column])


def require_at_least(
    parser: argparse.ArgumentParser, args: argparse.Namespace, minimum: float, *names: str
) -> None:
    """Exits through ``parser.error`` (one line, exit 2) when an option is below ``minimum``."""
    for name in names:
        value = getattr(args, name)
        if value < minimum:
            parser.error(f"--{name.replace('_', '-')} must be >= {minimum}, got {value}")


def rotated(items: Sequence[T], shift: int) -> list[T]:
    """``items`` started at ``shift`` (mod its length): the order of one interleaved repeat, so
    that a slow spell of a shared machine does not always fall on the same row."""
    if not items:
        return []
    k = shift % len(items)
    return [*items[k:], *items[:k]]


# --- subprocesses -------------------------------------------------------------------------------


class Finished(NamedTuple):
    """A finished subprocess: its wall time (start-up included), exit code and output."""

    wall: float
    returncode: int
    stdout: str
    stderr: str


def run_python(
    args: Sequence[str], root: Path, cwd: Path | None = None, timeout: float | None = None
) -> Finished:
    """Runs ``python ARGS`` in a fresh process whose ``per_dqn`` is ``root``'s; times its wall.

    ``root`` goes first on ``PYTHONPATH`` (before any ``PYTHONPATH`` already set), which puts it
    ahead of an installed ``per_dqn``. The wall time is the whole process: interpreter start,
    imports, the work and the exit.
    """
    paths = [str(root), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    wall = time.perf_counter() - start
    return Finished(wall, proc.returncode, proc.stdout, proc.stderr)


def check_finished(what: str, done: Finished) -> None:
    """When it failed: echoes the end of its stderr, then exits with one line naming ``what``."""
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        print("\n".join(lines[-20:]), file=sys.stderr)
        last = lines[-1] if lines else "(no output)"
        raise SystemExit(f"error: {what} exited with {done.returncode}: {last}")


# --- process memory ----------------------------------------------------------------------------


def _proc_bytes(path: str, key: str) -> int | None:
    """A ``kB`` line of a ``/proc`` file (``/proc/self/status``, ``/proc/meminfo``) in bytes
    (Linux), else None."""
    try:
        with open(path, encoding="ascii") as f:
            match = re.search(rf"^{key}:\s+(\d+) kB", f.read(), re.MULTILINE)
    except OSError:
        return None
    return None if match is None else int(match.group(1)) * 1024


def _status_bytes(key: str) -> int | None:
    return _proc_bytes("/proc/self/status", key)


def available_bytes() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo``, or None where the platform does not say."""
    return _proc_bytes("/proc/meminfo", "MemAvailable")


def rss_bytes() -> int:
    """Resident set size now (``VmRSS``); the peak from ``getrusage`` where /proc is missing."""
    now = _status_bytes("VmRSS")
    return now if now is not None else peak_rss_bytes()


def reset_peak_rss() -> None:
    """Resets the peak resident size (``VmHWM``) to the resident size now (Linux: ``clear_refs``
    5), so that ``peak_rss_bytes`` then measures a phase of its own."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (``VmHWM``, else ``ru_maxrss``)."""
    peak = _status_bytes("VmHWM")
    if peak is not None:
        return peak
    import resource

    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def local_ray_cluster(cpus: int = 2) -> Any:
    """A Ray cluster on 127.0.0.1 with ``cpus`` CPUs for an Ape-X benchmark, as a context manager
    yielding the connection (``per_dqn.cluster.connection.connect``); Ray's files under /tmp
    unless ``RAY_TMPDIR`` says otherwise."""
    from per_dqn.cluster.connection import connect
    from per_dqn.cluster.housekeeping import RayOptions

    os.environ.setdefault("RAY_TMPDIR", "/tmp")
    return connect(RayOptions(address=None, local_cpus=cpus))
