"""What produced a run: the command line, the package versions, the code's git commit, the host
and the device; ``summary.json`` records it (and ``ablate`` may write it into ``sweep.json``).

Nothing here may fail a run: a version that cannot be read is None, a git that is missing, slow or
broken gives None.

What runs a run may add what only it knows (a Ray task: the node it ran on) with ``recorded``; a
run started any other way has no such field.
"""

from __future__ import annotations

import contextlib
import platform
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from importlib import metadata
from pathlib import Path
from typing import Any

# The distributions whose versions decide what a run computes, by their installed names.
DISTRIBUTIONS = ("torch", "gymnasium", "ale-py", "minatar", "numpy", "per-dqn")
# Seconds one git call may take: a network filesystem must not hold a run's start.
GIT_TIMEOUT_S = 5.0

__all__ = ["DISTRIBUTIONS", "git_state", "provenance", "recorded", "versions"]

# The fields ``recorded`` adds, for the code running in its block (a context variable: a thread
# that did not enter the block does not see them).
_ADDED: ContextVar[dict[str, Any] | None] = ContextVar("per_dqn_provenance_added", default=None)


def versions() -> dict[str, str | None]:
    """Python's version and each of ``DISTRIBUTIONS``' (None where it is not installed)."""
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in DISTRIBUTIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def _git(checkout: Path, *args: str) -> str:
    """``git -C checkout ARGS``'s stdout, stripped; raises on any failure."""
    done = subprocess.run(
        ["git", "-C", str(checkout), *args],
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT_S,
        check=True,
    )
    return done.stdout.strip()


def git_state(package_dir: Path | None = None) -> dict[str, Any] | None:
    """The commit of the git checkout the ``per_dqn`` package is imported from, and whether its
    tracked files differ from that commit; None when the package is not in a checkout.

    The package must be tracked by that checkout: an install into a virtualenv that happens to
    sit inside some other repository (``.venv/lib/.../per_dqn``) is not that repository's code.

    Args:
        package_dir: the package's directory (default: this ``per_dqn``'s).

    Returns:
        ``{"commit": sha, "dirty": bool}`` (``dirty``: tracked files modified or staged, as
        ``git describe --dirty`` counts them; untracked files do not count), or None.
    """
    package_dir = Path(__file__).resolve().parent if package_dir is None else package_dir
    try:
        # Exits non-zero outside a checkout, and when the package's files are untracked there.
        _git(package_dir, "ls-files", "--error-unmatch", "__init__.py")
        commit = _git(package_dir, "rev-parse", "HEAD")
        changes = _git(package_dir, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return {"commit": commit, "dirty": bool(changes)}


@contextlib.contextmanager
def recorded(**fields: Any) -> Iterator[None]:
    """Adds ``fields`` (JSON values) to every ``provenance()`` made inside the block.

    A Ray task uses it to say which node ran the run: the trainer that calls ``provenance()``
    needs no parameter for what only the code around it knows.
    """
    token = _ADDED.set({**(_ADDED.get() or {}), **fields})
    try:
        yield
    finally:
        _ADDED.reset(token)


def provenance(device: Any = None, argv: list[str] | None = None) -> dict[str, Any]:
    """What produced a run, as JSON values.

    Args:
        device: the run's ``torch.device`` (or its name); None when there is none (a sweep).
        argv: the command line (default: ``sys.argv``).

    Returns:
        ``command`` (the argument list), ``command_line`` (the same, quoted for a POSIX shell),
        ``versions`` (see ``versions``), ``git`` (see ``git_state``), ``host`` (the host name),
        ``device`` (``"cpu"``, ``"cuda:0"``, ... or None) and ``cuda_device`` (the GPU's name on
        CUDA, else None); then the fields of any ``recorded`` block around the call.
    """
    argv = list(sys.argv if argv is None else argv)
    name = None if device is None else str(device)
    cuda_device = None
    if name is not None and name.startswith("cuda"):
        try:
            import torch

            cuda_device = torch.cuda.get_device_name(torch.device(name))
        except (RuntimeError, AssertionError, ValueError):
            cuda_device = None
    return {
        "command": argv,
        "command_line": shlex.join(argv),
        "versions": versions(),
        "git": git_state(),
        "host": socket.gethostname(),
        "device": name,
        "cuda_device": cuda_device,
        **(_ADDED.get() or {}),
    }
