"""What a person watching a sweep sees: how many runs are done, running and pending, and each
running run's steps, speed and time left.

Both backends feed it: Ray's tasks report their runs' steps and SPS through a Ray actor at every
log point, local workers through a queue; it knows neither. On a terminal it is a live display
that redraws itself::

    sweep 12/45 done, 2 running, 31 pending  elapsed 1:02:03  ETA 2:10:00
    dashboard http://127.0.0.1:8265
      MinAtar-Breakout-v1/rank/alpha=0.7/s2  starting
      MinAtar-Breakout-v1/uniform/s2         120,000/500,000 steps  1,234 SPS  ETA 0:05:07

Runs in packs (``ablate --pack K``) are listed under their pack, whose line names what their run
dirs share::

    sweep 12/150 done, 5 running, 133 pending  elapsed 0:41:10  ETA 10:43:00
      pack 10/30  MinAtar-SpaceInvaders-v1
        proportional/s9  120,000/500,000 steps  1,234 SPS  ETA 0:05:07
        uniform/s9       120,000/500,000 steps  1,234 SPS  ETA 0:05:07

A run's speed is measured over the last ``console.SPEED_WINDOW_S`` seconds of its log points
(``console.Speedometer``), and during its warm-up its line reads ``learning in 0:00:25`` instead
of an ETA. The sweep's ETA (``SweepProgress.eta_s``) is the env steps left, of the runs running
and pending, at the summed speed of the runs now learning: it assumes the runs to come run as
fast as those running (a sweep whose arms differ in cost, LaBER's against uniform's, is
projected from whichever run now), and is unknown while none is learning.

Where stderr is not a terminal (nohup, Slurm, CI, a pipe) the same text is printed as plain lines
every ``plain_interval_s`` seconds, as ``per-dqn train`` does with its progress: both are
``console.LiveOrPlainDisplay``s, which draw and time them; this module only says what a sweep's
display shows.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rich.console import Console

from per_dqn.logs.console import (
    PLAIN_PROGRESS_INTERVAL_S,
    LiveOrPlainDisplay,
    Speedometer,
    format_duration,
    phase_eta,
)
from per_dqn.logs.tags import PERF_SPS

# A terminal's display lists this many running runs at most (a cluster may run hundreds).
MAX_RUNS_SHOWN = 20


@dataclass(frozen=True)
class RunProgress:
    """Where one running run is.

    Attributes:
        env_steps: env steps done (0 until its first log point).
        total: the run's budget of env steps.
        sps: env steps per second lately, within its phase (NaN before its first log point).
        pack: the pack it runs in (``pack 3/30``), or ``""`` for a run alone.
        learning_starts: the env step its learning begins at (``train.learning_starts``).
    """

    env_steps: int
    total: int
    sps: float = math.nan
    pack: str = ""
    learning_starts: int = 0

    @property
    def learning(self) -> bool:
        """Past its warm-up."""
        return self.env_steps >= self.learning_starts

    def text(self) -> str:
        """``120,000/500,000 steps  1,234 SPS  ETA 0:05:07``, or ``starting`` before the first
        log point. The ETA is the steps left at the SPS shown, computed by
        ``console.phase_eta`` as ``per-dqn train``'s display computes it (``-:--:--`` at a
        speed of 0: a stalled run has no end in sight); during the warm-up, ``learning in``
        the time to its end."""
        if math.isnan(self.sps) and not self.env_steps:
            return "starting"
        speed = "-" if math.isnan(self.sps) else f"{self.sps:,.0f}"
        eta = phase_eta(self.env_steps, self.total, self.learning_starts, self.sps)
        return f"{self.env_steps:,}/{self.total:,} steps  {speed} SPS  {eta}"


class ProgressReporter:
    """A run's callback (``per_dqn.training.run.Callback``) that tells the sweep's display the run's
    steps and SPS, once at its start and at every log point, through ``send(run_dir,
    RunProgress)``, which must not wait: a local worker's queue ``put``, a Ray actor's
    ``report.remote``. Both backends use it; only ``send`` differs."""

    def __init__(
        self,
        send: Callable[[str, RunProgress], Any],
        run_dir: str,
        total: int,
        pack: str = "",
        learning_starts: int = 0,
    ) -> None:
        self.send, self.run_dir, self.total, self.pack = send, run_dir, total, pack
        self.learning_starts = learning_starts
        self.speedometer = Speedometer(total, learning_starts)
        self.send(run_dir, RunProgress(0, total, pack=pack, learning_starts=learning_starts))

    def on_log(self, env_steps: int, values: dict[str, float]) -> None:
        """The speed over the last ``SPEED_WINDOW_S`` seconds of log points, within the run's
        phase; at the run's first log point, the log interval's own (``perf/sps``). Right after
        the warm-up ends it is not known (``-``): the last interval's speed is the warm-up's."""
        first = not self.speedometer.samples
        self.speedometer.add(env_steps, time.monotonic())
        sps = self.speedometer.speed
        if math.isnan(sps) and first:
            sps = values.get(PERF_SPS, math.nan)
        run = RunProgress(env_steps, self.total, sps, self.pack, self.learning_starts)
        self.send(self.run_dir, run)


class SweepProgress(LiveOrPlainDisplay):
    """The display of a sweep in progress (on ``console.LiveOrPlainDisplay``: live on a terminal,
    plain lines elsewhere; stdout's ``[n/N]`` result lines are printed above a live one).

    Args:
        total: the sweep's runs, finished ones included.
        done: runs already finished when it starts.
        dashboard: the cluster's dashboard address (``host:port``), shown when given.
        console: where to draw (stderr by default: stdout keeps the ``[n/N]`` result lines).
        enabled: False draws nothing.
        plain_interval_s: seconds between plain lines when ``console`` is not a terminal.
    """

    refresh_per_second = 2

    def __init__(
        self,
        total: int,
        done: int = 0,
        dashboard: str | None = None,
        console: Console | None = None,
        enabled: bool = True,
        plain_interval_s: float = PLAIN_PROGRESS_INTERVAL_S,
    ) -> None:
        super().__init__(console, enabled, plain_interval_s)
        self.total = total
        self.done = done
        self.dashboard = dashboard
        self.running: dict[str, RunProgress] = {}

    def update(self, done: int, running: Mapping[str, RunProgress]) -> None:
        """Shows ``done`` runs finished and ``running`` (run dir in the sweep -> where it is);
        the rest of ``total`` is pending."""
        self.done = done
        self.running = dict(sorted(running.items()))
        self._tick()

    @property
    def pending(self) -> int:
        """Runs neither finished nor running."""
        return max(self.total - self.done - len(self.running), 0)

    def eta_s(self) -> float:
        """Seconds until the sweep ends: the env steps left (each running run's, and each
        pending run's budget, taken as the running runs' mean) at the summed speed of the runs
        past their warm-up; NaN while none is (none running, all starting or warming up)."""
        learning = [r for r in self.running.values() if r.learning and r.sps > 0]
        if not learning:
            return math.nan
        budget = sum(r.total for r in self.running.values()) / len(self.running)
        left = sum(max(r.total - r.env_steps, 0) for r in self.running.values())
        return (left + self.pending * budget) / sum(r.sps for r in learning)

    def lines(self, limit: int | None = None) -> list[str]:
        """The display's text: a head line, the dashboard's address, then one line per running run
        (at most ``limit``); runs in packs under a line per pack, which names the part of their
        run dirs they share (the env, in a sweep's layout) once."""
        head = (
            f"sweep {self.done}/{self.total} done, {len(self.running)} running, "
            f"{self.pending} pending  elapsed {format_duration(self.elapsed_s())}  "
            f"ETA {format_duration(self.eta_s())}"
        )
        # On a line of its own, so that the head fits 80 columns.
        dashboard = [f"dashboard http://{self.dashboard}"] if self.dashboard else []
        shown = list(self.running.items())[:limit]
        groups: dict[str, list[tuple[str, RunProgress]]] = {}
        for name, run in shown:
            groups.setdefault(run.pack, []).append((name, run))
        lines = [head, *dashboard]
        for pack, members in sorted(groups.items(), key=lambda item: _pack_order(item[0])):
            indent = "  "
            if pack:
                prefix = _shared_head([name for name, _ in members])
                lines.append(f"  {pack}  {prefix.rstrip('/')}".rstrip())
                members = [(name[len(prefix) :], run) for name, run in members]
                indent = "    "
            width = max(len(name) for name, _ in members)
            lines += [f"{indent}{name:<{width}}  {run.text()}" for name, run in members]
        if len(shown) < len(self.running):
            lines.append(f"  ... and {len(self.running) - len(shown)} more running")
        return lines

    def plain_lines(self) -> list[str]:
        """``lines()``, every running run listed (a log file has no screen to fill)."""
        return self.lines()

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text("\n".join(self.lines(MAX_RUNS_SHOWN)), no_wrap=True, overflow="ellipsis")


def _pack_order(pack: str) -> tuple[int, str]:
    """Runs alone first, then packs by number (``pack 10/30`` after ``pack 9/30``)."""
    number = pack.split(" ")[-1].split("/")[0] if pack else ""
    return (int(number) if number.isdigit() else 0, pack)


def _shared_head(names: list[str]) -> str:
    """The leading path components (with their ``/``) that every name shares, less one: a name
    is never left empty."""
    parts = [name.split("/") for name in names]
    shared = []
    for column in zip(*(p[:-1] for p in parts), strict=False):
        if len(set(column)) != 1:
            break
        shared.append(column[0])
    return "".join(f"{part}/" for part in shared)


class ReportProgress(LiveOrPlainDisplay):
    """What a person watching ``per-dqn report`` sees while a large sweep is read: the stage
    and how far it is, redrawn on a terminal (``report: reading runs 37/150  elapsed 0:00:12``),
    a plain ``progress:`` line every ``plain_interval_s`` seconds off one (and where it ended,
    if any was printed). Fed by ``report.write_report``'s ``on_stage``."""

    repeat_on_exit = True
    # The stage, and how far it is (set by ``stage``).
    stage_name, done, total = "starting", 0, 0

    def stage(self, name: str, done: int, total: int) -> None:
        """``done`` of ``total`` of stage ``name``."""
        self.stage_name, self.done, self.total = name, done, total
        self._tick()

    def plain_line(self) -> str:
        """What the display says."""
        count = f" {self.done}/{self.total}" if self.total > 1 else ""
        return f"report: {self.stage_name}{count}  elapsed {format_duration(self.elapsed_s())}"

    def __rich__(self) -> Any:
        from rich.text import Text

        return Text(self.plain_line(), no_wrap=True, overflow="ellipsis")
