"""What a person watching a run or a sweep sees on stderr: one live-or-plain display
(``LiveOrPlainDisplay``), a run's progress on it (``ConsoleProgress``), ``per-dqn eval``'s
(``EvalDisplay``), the number formats they use, and the end-of-run table (``print_summary``).

A sweep's display (``sweeps/progress.py``) is built on the same base class: it stays beside the
sweep backends that feed it, and shares the terminal / plain-line machinery and the formats here.

One module though past 500 lines: the live display, its plain fallback (train's and the sweeps') and
the end-of-run table share one layout of lines that fit 80 columns.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any, Self

from rich.console import Console
from rich.table import Table

# Seconds between two plain progress lines when stderr is not a terminal.
PLAIN_PROGRESS_INTERVAL_S = 30.0


def format_duration(seconds: float) -> str:
    """``H:MM:SS`` (hours unbounded: a 50M-step Atari run takes days), ``-:--:--`` if unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "-:--:--"
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def format_eta(steps_left: int, sps: float) -> str:
    """The time ``steps_left`` env steps take at ``sps``, as ``format_duration`` writes it:
    ``0:00:00`` with none left, ``-:--:--`` at a speed of 0 or unknown (NaN)."""
    if steps_left <= 0:
        return format_duration(0)
    return format_duration(steps_left / sps) if sps > 0 else format_duration(math.nan)


def phase_eta(steps: int, total: int, learning_starts: int, sps: float) -> str:
    """A run's time left as its phase allows: ``learning in 0:00:25`` during the warm-up (to its
    end, at ``sps``, the warm-up's speed), else ``ETA 1:43:49`` (to the end of ``total``, at the
    learning speed); ``ETA 0:00:00`` at or past the budget."""
    if steps >= total:
        return f"ETA {format_duration(0)}"
    if steps < learning_starts:
        return f"learning in {format_eta(learning_starts - steps, sps)}"
    return f"ETA {format_eta(total - steps, sps)}"


# Seconds of wall time a run's speed is measured over.
SPEED_WINDOW_S = 30.0


class Speedometer:
    """A run's env steps per second over the last ``window_s`` seconds of wall time, within its
    current phase, and the ETA that follows from it.

    A run has two phases with speeds far apart: the warm-up (env steps below
    ``train.learning_starts``: acting only) and learning (an Atari run: about 2,000 env steps/s,
    then about 130). The speed is measured within the phase the run is in (the window restarts
    when learning begins), so the ETA never projects a run from its warm-up's speed: during the
    warm-up it is the time until learning begins, and from there the time to the end of the
    budget at the learning speed. Fed the env step count at each display update (``add``), it
    measures between the oldest sample still in the window and the newest; a speed that cannot
    be measured yet (one sample in the phase) is NaN.

    Args:
        total: the run's budget in env steps.
        learning_starts: the env step learning begins at (0: no warm-up).
        window_s: seconds of wall time the speed is measured over.
    """

    def __init__(self, total: int, learning_starts: int = 0, window_s: float = SPEED_WINDOW_S):
        self.total, self.learning_starts, self.window_s = total, learning_starts, window_s
        self.samples: list[tuple[float, int]] = []
        self.steps = 0

    def phase(self, steps: int | None = None) -> str:
        """``"warm-up"`` below ``learning_starts`` env steps, else ``"learning"``."""
        steps = self.steps if steps is None else steps
        return "warm-up" if steps < self.learning_starts else "learning"

    def add(self, steps: int, now: float) -> None:
        """The run is at env step ``steps`` at wall time ``now`` (seconds, monotonic)."""
        if self.samples and self.phase(steps) != self.phase(self.samples[-1][1]):
            self.samples = []  # a new phase: its speed is its own
        self.steps = steps
        self.samples.append((now, steps))
        # Keep the last sample at or before the window's start, so the speed spans the window.
        while len(self.samples) > 2 and self.samples[1][0] <= now - self.window_s:
            self.samples.pop(0)

    def pause(self, seconds: float) -> None:
        """Leaves ``seconds`` of wall time out of the speed (an evaluation: no env step of
        training is taken then), as if the samples before it were taken that much later."""
        self.samples = [(t + seconds, steps) for t, steps in self.samples]

    @property
    def speed(self) -> float:
        """Env steps per second over the window (NaN: not measured yet)."""
        if len(self.samples) < 2:
            return math.nan
        (t0, s0), (t1, s1) = self.samples[0], self.samples[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else math.nan

    def eta_text(self) -> str:
        """``phase_eta`` at the speed measured (``-:--:--`` without one, or at a speed of 0)."""
        return phase_eta(self.steps, self.total, self.learning_starts, self.speed)


def gib(n_bytes: float) -> str:
    """``n_bytes`` in TiB or GiB with two decimals, or MiB / KiB when smaller than that shows."""
    if n_bytes >= 1 << 40:
        return f"{n_bytes / (1 << 40):.2f} TiB"
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n_bytes >= (1 << shift) // 10:
            return f"{n_bytes / (1 << shift):.2f} {unit}"
    return f"{int(n_bytes)} B"


def format_steps(steps: int) -> str:
    """``12,500`` below a million, ``12.50M`` from there (a 50M budget must fit in 80 columns)."""
    return f"{steps:,}" if steps < 1_000_000 else f"{steps / 1e6:.2f}M"


def _number(value: float, spec: str) -> str:
    return "-" if not math.isfinite(value) else format(value, spec)


class LiveOrPlainDisplay:
    """A display that redraws itself on a terminal and prints plain lines everywhere else; the
    machinery ``ConsoleProgress`` (a run) and ``sweeps.progress.SweepProgress`` (a sweep) share.

    On a terminal, inside ``with``, a rich ``Live`` redraws the subclass's ``__rich__``
    ``refresh_per_second`` times a second. Where ``console`` is not a terminal (nohup, Slurm, CI, a
    pipe) a redrawn display would print nothing until the end, so ``plain_lines()`` is printed at
    most every ``plain_interval_s`` seconds instead, when the subclass calls ``_tick`` after a
    change; with ``repeat_on_exit``, once more at the end if any were printed (where it ended).

    A subclass defines ``plain_lines`` and ``__rich__`` and calls ``_tick`` from its updates.

    Args:
        console: where to draw (stderr by default, so stdout stays for results).
        enabled: False draws nothing.
        plain_interval_s: seconds between plain lines when ``console`` is not a terminal.
    """

    refresh_per_second: float = 4
    repeat_on_exit = False

    def __init__(
        self,
        console: Console | None = None,
        enabled: bool = True,
        plain_interval_s: float = PLAIN_PROGRESS_INTERVAL_S,
    ) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = enabled
        self.plain = not self.console.is_terminal
        self.plain_interval_s = plain_interval_s
        self._started = time.monotonic()
        self._next_line = self._started + plain_interval_s
        self._printed = 0  # plain printouts so far
        self._live: Any = None

    def __enter__(self) -> Self:
        self._started = time.monotonic()
        self._next_line = self._started + self.plain_interval_s
        if self.enabled and not self.plain:
            from rich.live import Live

            # Live also redirects stdout: what a command prints meanwhile lands above the display.
            self._live = Live(
                self, console=self.console, refresh_per_second=self.refresh_per_second
            )
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        elif self.enabled and self.plain and self._printed and self.repeat_on_exit:
            self._print_plain()  # where it ended, after the lines that came before

    def elapsed_s(self) -> float:
        """Seconds since the display started (entered its ``with``)."""
        return time.monotonic() - self._started

    def plain_lines(self) -> list[str]:
        """What one plain printout says, line by line: by default ``progress: `` and
        ``plain_line()``."""
        return [f"progress: {self.plain_line()}"]

    def plain_line(self) -> str:
        """The one plain progress line of a one-line display (without its prefix)."""
        raise NotImplementedError

    def _tick(self) -> None:
        if not self.enabled or not self.plain:
            return  # a live display redraws itself from the subclass's fields
        now = time.monotonic()
        if now >= self._next_line:
            self._next_line = now + self.plain_interval_s
            self._print_plain()

    def _print_plain(self) -> None:
        self._printed += 1
        for line in self.plain_lines():
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)


class ConsoleProgress(LiveOrPlainDisplay):
    """What a person watching a run sees: progress, speed, learning, and an evaluation underway.

    On a terminal, a two-line rich display that fits in 80 columns::

        train ━━━━━━━━━━━━━━━━━         12,500/50,000 steps  1,234 SPS  elapsed 0:00:10  ETA 0:00:30
        return 45.2  last eval 120.0  loss 0.0123  eps 0.050  beta 0.550

    (the bar takes what the text leaves). Where stderr is not a terminal (nohup, Slurm, CI, a
    pipe) a redrawn bar would print nothing until the end, so one plain line is printed every
    ``plain_interval_s`` seconds instead, with the same fields::

        progress: 12,500/50,000 env steps (25.0%)  1,234 SPS  return 45.2  last eval 120.0  ...

    The SPS is the run's speed over the last ``SPEED_WINDOW_S`` seconds of wall time, within
    its phase and with its evaluations' time left out, and the ETA knows the phases
    (``Speedometer``): during the warm-up it reads ``learning in 0:00:25``, from there ``ETA``
    to the end at the learning speed. It leaves out the evaluations, which ``evaluating`` shows
    while they run.

    Args:
        total_env_steps: the run's budget.
        learning_starts: the env step its learning begins at (``train.learning_starts``).
        console: where to draw (stderr by default, so stdout stays clean for the summary).
        enabled: False draws nothing (tests, ``--quiet``); ``warn`` still prints.
        plain_interval_s: seconds between plain lines when ``console`` is not a terminal.
    """

    refresh_per_second = 4
    repeat_on_exit = True

    def __init__(
        self,
        total_env_steps: int,
        console: Console | None = None,
        enabled: bool = True,
        plain_interval_s: float = PLAIN_PROGRESS_INTERVAL_S,
        learning_starts: int = 0,
    ) -> None:
        super().__init__(console, enabled, plain_interval_s)
        self.total = total_env_steps
        self.env_steps = 0
        self.speedometer = Speedometer(total_env_steps, learning_starts)
        self.ret = self.loss = self.last_eval = math.nan
        self.eps = self.beta = math.nan
        self.eval_state: tuple[int, int, int | None] | None = None  # done, total, agent steps
        self.save_state: tuple[int, int, int] | None = None  # bytes done, total, checkpoint size
        self._aside_began = 0.0  # when the evaluation or checkpoint shown began (monotonic)

    def update(
        self,
        env_steps: int,
        ret: float,
        eps: float,
        beta: float,
        *,
        loss: float = math.nan,
        last_eval: float = math.nan,
    ) -> None:
        """Shows the training state at ``env_steps`` (and ends an ``evaluating`` display).

        Args:
            env_steps: env steps done (the speed is measured from these and the wall time).
            ret: mean return of the recent training episodes (NaN: none finished yet).
            eps: exploration epsilon.
            beta: PER's importance-sampling exponent (NaN for a memory without IS weights:
                not shown).
            loss: the latest TD loss (NaN: no update yet).
            last_eval: mean return of the latest evaluation (NaN: none yet).
        """
        now = time.monotonic()
        self._back_to_training(now)
        self.speedometer.add(env_steps, now)
        self.env_steps, self.ret, self.eps, self.beta = env_steps, ret, eps, beta
        self.loss, self.last_eval = loss, last_eval
        self._tick()

    def _back_to_training(self, now: float) -> None:
        """Ends an evaluation or a checkpoint shown: its time is not training's."""
        if self.eval_state is not None or self.save_state is not None:
            self.speedometer.pause(now - self._aside_began)
        self.eval_state = self.save_state = None

    def evaluating(
        self, episodes_done: int, episodes_total: int, agent_steps: int | None = None
    ) -> None:
        """Shows an evaluation underway: ``episodes_done`` of ``episodes_total`` finished, and
        the agent steps it has taken so far. The next ``update`` returns to training, and
        leaves the evaluation's time out of the training speed."""
        if self.eval_state is None:
            self._aside_began = time.monotonic()
        self.eval_state = (episodes_done, episodes_total, agent_steps)
        self._tick()

    def saving(self, done: int, total: int, size: int) -> None:
        """Shows a checkpoint being written: ``done`` of ``total`` bytes written and checked, of
        a checkpoint of ``size`` bytes. Its time is left out of the training speed; once
        ``done`` reaches ``total`` the display is back to training."""
        now = time.monotonic()
        if self.save_state is None:
            self._aside_began = now
        self.save_state = (done, total, size)
        if done >= total:
            self._back_to_training(now)
        self._tick()

    def say(self, line: str) -> None:
        """Prints ``line`` above the display (also when the display is disabled)."""
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def warn(self, line: str) -> None:
        """Prints ``warning: line`` above the display (also when the display is disabled)."""
        self.console.print(f"warning: {line}", markup=False, highlight=False, soft_wrap=True)

    # --- what is shown ----------------------------------------------------------------------------

    def _elapsed(self) -> str:
        return format_duration(self.elapsed_s())

    @property
    def sps(self) -> float:
        """Env steps per second over the last ``SPEED_WINDOW_S`` seconds (NaN: not yet known)."""
        return self.speedometer.speed

    def _eta(self) -> str:
        return self.speedometer.eta_text()

    def _save_share(self) -> str:
        """How much of the checkpoint shown is written and checked, as ``45%``."""
        assert self.save_state is not None
        done, total, _ = self.save_state
        return f"{100 * done / max(total, 1):.0f}%"

    def _save_text(self) -> str:
        assert self.save_state is not None
        return f"saving a checkpoint ({gib(self.save_state[2])}): {self._save_share()}"

    def _eval_text(self) -> str:
        assert self.eval_state is not None
        done, total, steps = self.eval_state
        text = f"evaluating: {done}/{total} episodes"
        return text if steps is None else f"{text}, {steps:,} agent steps"

    def _learning_text(self) -> str:
        text = (
            f"return {_number(self.ret, '.1f')}  last eval {_number(self.last_eval, '.1f')}  "
            f"loss {_number(self.loss, '.3g')}  eps {_number(self.eps, '.3f')}"
        )
        # A memory without IS weights (uniform, LAP, PAL, LaBER) has no beta: NaN, not shown.
        return text if math.isnan(self.beta) else f"{text}  beta {self.beta:.3f}"

    def plain_line(self) -> str:
        """The plain progress line (without its ``progress:`` prefix)."""
        share = 100.0 * self.env_steps / self.total if self.total else 100.0
        head = f"{self.env_steps:,}/{self.total:,} env steps ({share:.1f}%)"
        times = f"elapsed {self._elapsed()}  {self._eta()}"
        if self.save_state is not None:
            return f"{head}  {self._save_text()}  {times}"
        if self.eval_state is not None:
            return f"{head}  {self._eval_text()}  {times}"
        return f"{head}  {_number(self.sps, ',.0f')} SPS  {self._learning_text()}  {times}"

    def __rich__(self) -> Any:
        from rich.console import Group
        from rich.text import Text

        if self.save_state is not None:
            done, total, size = self.save_state
            right = f"checkpoint {gib(size)}  {self._save_share()}  written and checked"
            top = _bar_row("save ", done, total, right)
            return Group(top, Text(self._learning_text(), no_wrap=True, overflow="ellipsis"))
        label = "eval " if self.eval_state is not None else "train"
        steps = f"{format_steps(self.env_steps)}/{format_steps(self.total)} steps"
        right = (
            f"{steps}  {_number(self.sps, ',.0f')} SPS  elapsed {self._elapsed()}  {self._eta()}"
        )
        top = _bar_row(label, self.env_steps, self.total, right)
        second = self._eval_text() if self.eval_state is not None else self._learning_text()
        return Group(top, Text(second, no_wrap=True, overflow="ellipsis"))


class EvalDisplay(LiveOrPlainDisplay):
    """What a person watching ``per-dqn eval`` sees on stderr while it plays: what is played
    (``start``, one line printed at once), then the episodes done, the mean return so far, the
    agent steps and the elapsed time, redrawn on a terminal::

        eval ━━━━━━━━━━━━━━━━━━━━━━         3/10 episodes  mean return 123.4  elapsed 0:00:12

    and off one a plain line every ``plain_interval_s`` seconds (and one at the end, if any was
    printed)::

        progress: 3/10 episodes  mean return 123.4  12,345 agent steps  elapsed 0:00:12

    Feeds: ``start`` (``evaluate_run``'s ``on_start``), ``progress`` (``on_progress``) and
    ``episode`` (``on_episode``).
    """

    repeat_on_exit = True
    # Episodes done and asked for, agent steps, and the returns so far (set by the feeds).
    done = total = steps = returns = 0
    return_sum = 0.0

    def start(self, line: str) -> None:
        """Prints what is about to be played, at once (above the display)."""
        if self.enabled:
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def progress(self, done: int, total: int, steps: int) -> None:
        """``done`` of ``total`` episodes finished, ``steps`` agent steps taken so far."""
        self.done, self.total, self.steps = done, total, steps
        self._tick()

    def episode(self, ret: float, length: int) -> None:
        """An episode ended with return ``ret`` after ``length`` agent steps."""
        self.return_sum += ret
        self.returns += 1

    def _mean(self) -> str:
        return _number(self.return_sum / self.returns if self.returns else math.nan, ".1f")

    def _starting(self) -> str:
        """What it shows before the first episode starts (the agent and its env being loaded):
        not ``0/0 episodes``."""
        return f"starting  elapsed {format_duration(self.elapsed_s())}"

    def plain_line(self) -> str:
        """The plain progress line (without its ``progress:`` prefix)."""
        if not self.total:
            return self._starting()
        return (
            f"{self.done}/{self.total} episodes  mean return {self._mean()}  "
            f"{self.steps:,} agent steps  elapsed {format_duration(self.elapsed_s())}"
        )

    def __rich__(self) -> Any:
        if not self.total:
            from rich.text import Text

            return Text(f"eval  {self._starting()}", no_wrap=True, overflow="ellipsis")
        right = (
            f"{self.done}/{self.total} episodes  mean return {self._mean()}  "
            f"elapsed {format_duration(self.elapsed_s())}"
        )
        return _bar_row("eval", self.done, self.total, right)


def _bar_row(label: str, done: int, total: int, right: str) -> Any:
    """One row of a live display: ``label``, a bar of ``done`` of ``total`` taking what the text
    leaves, and ``right``."""
    from rich.progress_bar import ProgressBar
    from rich.text import Text

    row = Table.grid(padding=(0, 1), expand=True)
    row.add_column(no_wrap=True)
    row.add_column(ratio=1)
    row.add_column(no_wrap=True)
    row.add_row(
        Text(label, style="bold"),
        ProgressBar(total=max(total, 1), completed=min(done, total)),
        Text(right),
    )
    return row


def print_summary(summary: Mapping[str, Any], console: Console | None = None) -> None:
    """The end-of-run table: where the run went and how it ended."""
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(no_wrap=True)
    # A value longer than the line (an Atari run's dir at 80 columns) folds onto the next line
    # whole, never cut with an ellipsis.
    table.add_column(overflow="fold")
    final = summary.get("final_eval_return_mean")
    # A resumed run's sessions together (``Trainer.run``), where its checkpoint timed the first.
    whole = summary.get("wall_seconds_total")
    resumed = summary.get("resumed_from_env_steps") is not None
    total = f"; {whole:.1f} s over every session" if resumed and whole is not None else ""
    rows = [
        ("run dir", str(summary["run_dir"])),
        ("replay", str(summary["replay"])),
        ("seed", str(summary["seed"])),
        ("env steps", f"{summary['env_steps']:,}"),
        ("update steps", f"{summary['update_steps']:,}"),
        ("wall time", f"{summary['wall_seconds']:.1f} s ({summary['sps']:,.0f} SPS)" + total),
        (
            "final eval return",
            "not run (interrupted)"
            if final is None
            else f"{final:.1f} ± {summary['final_eval_return_std']:.1f} "
            f"over {summary['final_eval_episodes']} episodes",
        ),
    ]
    for key, value in rows:
        table.add_row(f"[bold]{key}", value)
    (console or Console()).print(table)
