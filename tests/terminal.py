"""A real command run on a pseudo-terminal of a given size, its output read through a terminal
emulator (pyte): what stays on the screen once it exits, line by line, as a person sees it.

Matching rich's escape codes in the raw output cannot say that: a frame that a redraw failed to
erase is a stale frame on the screen, and a line that a redraw overwrote is gone from it.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Sequence
from pathlib import Path

import pyte

# What makes rich decide, against the stream itself, whether it writes to a terminal: a person's
# shell sets none of them (CI sets CI, which rich does not read; these it does).
_TERMINAL_OVERRIDES = ("TTY_COMPATIBLE", "TTY_INTERACTIVE", "FORCE_COLOR", "NO_COLOR")


def final_screen(
    argv: Sequence[str],
    columns: int,
    rows: int = 60,
    timeout_s: float = 300.0,
    cwd: Path | None = None,
    stdout: Path | None = None,
    interrupt_when: str | None = None,
) -> tuple[list[str], int]:
    """Runs ``argv`` on a ``columns`` x ``rows`` pty, in a session of its own, and returns the
    emulated screen's lines (right-stripped, trailing empty lines dropped) and its exit status.
    stdout and stderr both go to the pty, as in a terminal, unless ``stdout`` names a file to
    send stdout to (a person's ``> log``). With ``interrupt_when`` (a regular expression),
    Ctrl-C is pressed once (SIGINT to the command's process group, as a terminal sends it) as
    soon as the screen shows a match. Whatever is left of the command's process group at the
    end (or past ``timeout_s``) is killed."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in _TERMINAL_OVERRIDES}
    env.update(COLUMNS=str(columns), LINES=str(rows), TERM="xterm-256color")
    out = open(stdout, "wb") if stdout is not None else None  # closed below, once the child has it
    try:
        process = subprocess.Popen(
            list(argv), stdin=slave, stdout=out or slave, stderr=slave, cwd=cwd, env=env,
            start_new_session=True,
        )  # fmt: skip
    finally:
        os.close(slave)
        if out is not None:
            out.close()
    screen = pyte.Screen(columns, rows)
    stream = pyte.ByteStream(screen)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # every writer closed the pty: the command has exited
                    break
                if not data:
                    break
                stream.feed(data)
                if interrupt_when is not None and re.search(
                    interrupt_when, "\n".join(screen.display)
                ):
                    os.killpg(process.pid, signal.SIGINT)
                    interrupt_when = None
            elif process.poll() is not None:
                break  # exited, and nothing more came: a leftover holding the pty is not waited
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # leftovers (or all of it, past the timeout)
        except ProcessLookupError:
            pass
        code = process.wait()
        os.close(master)
    lines = [line.rstrip() for line in screen.display]
    while lines and not lines[-1]:
        lines.pop()
    return lines, code
