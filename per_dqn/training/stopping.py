"""SIGINT and SIGTERM as "stop at the next step", the one way every command is stopped.

Ctrl-C (SIGINT) and SIGTERM (``docker stop``, Slurm, systemd) are handled alike: while a
``StopSignals`` is active, the first of them is remembered and ``should_stop()`` turns true; the
command polls it between two steps (an env step, a wait for a worker), where stopping is exact,
and exits 130 after SIGINT or 143 after SIGTERM, what a shell reports for a job ended by either.
A second signal gives up on the clean stop and raises ``KeyboardInterrupt`` at once.

Handlers raise nothing on the first signal unless asked (``raise_first``): an exception thrown
from a handler lands wherever the main thread is, mid-step or inside a library holding a lock (a
TensorBoard writer, a queue). A command whose main thread only waits (a sweep's driver) asks for
it, to leave that wait at once.

Imports nothing of per_dqn, so that any module, a worker process included, can use it.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a job Ctrl-C ended
EXIT_TERMINATED = 143  # 128 + SIGTERM

# The signals that stop a command the way Ctrl-C does.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

# A run's ``should_stop``: polled between two env steps.
ShouldStop = Callable[[], bool]


def exit_code(signum: int | None) -> int:
    """The exit code of a command stopped by ``signum``: 143 for SIGTERM, else 130 (SIGINT, or a
    ``KeyboardInterrupt`` that no signal of ours raised)."""
    return EXIT_TERMINATED if signum == signal.SIGTERM else EXIT_INTERRUPTED


class StopSignals:
    """While active (``with``), SIGINT and SIGTERM ask the command to stop at its next step.

    Called, it is the command's ``should_stop``. On the way out the handlers in place before are
    put back.

    Args:
        signals: the signals handled (``watching`` adds more for a while).
        raise_first: the first signal also raises ``KeyboardInterrupt``, for a main thread that
            waits rather than polls (a sweep's driver). Default: it is only remembered.
        raise_again: a later signal raises ``KeyboardInterrupt`` (give up on the clean stop). A
            sweep's worker sets it False: a terminal's Ctrl-C reaches a worker directly and
            again through its parent, and the second must not cut its checkpoint short.

    Attributes:
        received: the signals handled so far, in order.
    """

    def __init__(
        self,
        signals: tuple[int, ...] = STOP_SIGNALS,
        *,
        raise_first: bool = False,
        raise_again: bool = True,
    ) -> None:
        self.signals = signals
        self.raise_first = raise_first
        self.raise_again = raise_again
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    @contextlib.contextmanager
    def watching(self, *signals: int) -> Iterator[StopSignals]:
        """Handles ``signals`` too for the block, then puts their handlers back (a worker takes
        SIGINT only while a run is in progress)."""
        previous = {signum: signal.signal(signum, self._handle) for signum in signals}
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        again = bool(self.received)
        self.received.append(signum)
        if self.raise_again if again else self.raise_first:
            raise KeyboardInterrupt

    def should_stop(self) -> bool:
        """Whether a signal has asked the command to stop."""
        return bool(self.received)

    __call__ = should_stop

    @property
    def first(self) -> int | None:
        """The first signal handled, or None."""
        return self.received[0] if self.received else None

    @property
    def exit_code(self) -> int:
        """130 after SIGINT (or a ``KeyboardInterrupt`` without a signal), 143 after SIGTERM:
        the first signal's."""
        return exit_code(self.first)

    @property
    def terminated(self) -> bool:
        """Whether a SIGTERM came, first or later."""
        return signal.SIGTERM in self.received


@contextlib.contextmanager
def kept_handler(signum: int) -> Iterator[Any]:
    """Puts ``signum``'s handler back on the way out of the block, for a library call that
    installs its own (``ray.init`` puts in a SIGTERM handler that exits at once, code 15).

    Yields:
        The handler kept (None where it was not set from Python).
    """
    handler = signal.getsignal(signum)
    try:
        yield handler
    finally:
        if handler is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signum, handler)
