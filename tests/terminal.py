"""A real command run on a pseudo-terminal of a given size, its output read through a terminal
emulator (pyte): what stays on the screen once it exits, line by line, as a person sees it.

Matching rich's escape codes in the raw output cannot say that: a frame that a redraw failed to
erase is a stale frame on the screen, and a line that a redraw overwrote is gone from it.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import termios
import time
from collections.abc import Sequence

import pyte


def final_screen(
    argv: Sequence[str], columns: int, rows: int = 60, timeout_s: float = 300.0, cwd=None
) -> tuple[list[str], int]:
    """Runs ``argv`` on a ``columns`` x ``rows`` pty (stdout and stderr both on it, as in a
    terminal) and returns the emulated screen's lines, right-stripped, with trailing empty
    lines dropped, and the command's exit status."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the command, on the pty
        if cwd is not None:
            os.chdir(cwd)
        os.environ.update(COLUMNS=str(columns), LINES=str(rows), TERM="xterm-256color")
        os.environ.pop("CI", None)  # rich treats CI as not a terminal
        os.execvp(argv[0], list(argv))
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    screen = pyte.Screen(columns, rows)
    stream = pyte.ByteStream(screen)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                continue
            try:
                data = os.read(fd, 65536)
            except OSError:  # the child closed the pty: it has exited
                break
            if not data:
                break
            stream.feed(data)
        else:
            os.kill(pid, 9)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    lines = [line.rstrip() for line in screen.display]
    while lines and not lines[-1]:
        lines.pop()
    return lines, os.waitstatus_to_exitcode(status)
