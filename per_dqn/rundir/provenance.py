"""What produced a run: the command line or the API call, the package versions, the code's git
commit, the host and the device; ``summary.json`` records it (and ``ablate`` may write it into
``sweep.json``).

A run started from the command line (``per-dqn train``, a sweep's runs) records its argument list,
with secrets taken out (``redact_argv``); a run started by ``per_dqn.train`` or ``per_dqn.resume``
records that call instead (``called``): the function, the config it was given and the overrides,
never the calling script's own command line, which may carry a token or a password (issue 23).
Nothing is read from the environment.

Nothing here may fail a run: a version that cannot be read is None, a git that is missing, slow or
broken gives None.

What runs a run may add what only it knows (a Ray task: the node it ran on) with ``recorded``; a
run started any other way has no such field.
"""

from __future__ import annotations

import contextlib
import json
import platform
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from importlib import metadata
from pathlib import Path
from typing import Any

from per_dqn.envs.families import GAME_PACKAGES

# The distributions whose versions decide what a run computes, by their installed names.
DISTRIBUTIONS = ("torch", "gymnasium", *GAME_PACKAGES, "numpy", "per-dqn")
# Seconds one git call may take: a network filesystem must not hold a run's start.
GIT_TIMEOUT_S = 5.0

__all__ = [
    "DISTRIBUTIONS",
    "REDACTED",
    "called",
    "git_state",
    "looks_secret",
    "provenance",
    "recorded",
    "redact_argv",
    "shareable_argv",
    "versions",
]

# What a secret's value is replaced with in a recorded command line.
REDACTED = "<redacted>"
# An option or key whose name holds one of these (any case) carries a secret: --hf-token,
# --db-password, --api-key, AWS_SECRET_ACCESS_KEY=..., --set run.wandb_auth=...
SECRET_WORDS = ("token", "key", "passw", "pwd", "secret", "credential", "auth")
# `NAME=VALUE` (as `--set`, Hydra or `env` take it): NAME a dotted or dashed identifier.
_ASSIGNMENT = re.compile(r"(?P<name>[A-Za-z_][\w.\-]*)=(?P<value>.*)", re.DOTALL)
# A URL's `user:password@` part.
_URL_PASSWORD = re.compile(r"(?P<scheme>[A-Za-z][\w+.\-]*://)(?P<user>[^/@:\s]*):[^/@\s]*@")

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
    package_dir = Path(__file__).resolve().parents[1] if package_dir is None else package_dir
    try:
        # Exits non-zero outside a checkout, and when the package's files are untracked there.
        _git(package_dir, "ls-files", "--error-unmatch", "__init__.py")
        commit = _git(package_dir, "rev-parse", "HEAD")
        changes = _git(package_dir, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return {"commit": commit, "dirty": bool(changes)}


# The API call running in this context (``called``); None: the process's command line.
_CALL: ContextVar[dict[str, Any] | None] = ContextVar("per_dqn_provenance_call", default=None)


def looks_secret(name: str) -> bool:
    """True if an option or key named ``name`` would carry a secret (``SECRET_WORDS``)."""
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def _redact_assignment(text: str) -> str:
    """``NAME=VALUE`` with ``VALUE`` redacted where ``NAME`` looks secret; a URL's password
    redacted wherever it is."""
    text = _URL_PASSWORD.sub(rf"\g<scheme>\g<user>:{REDACTED}@", text)
    match = _ASSIGNMENT.fullmatch(text)
    if match and looks_secret(match["name"]):
        return f"{match['name']}={REDACTED}"
    return text


def redact_argv(argv: Iterable[str]) -> list[str]:
    """A command line with the values of secret-looking options taken out.

    The rule: an option whose name looks secret (``looks_secret``: holds token, key, passw, pwd,
    secret, credential or auth, in any case) has its value replaced with ``REDACTED``, whether
    given as ``--hf-token=VALUE`` or as ``--hf-token VALUE`` (the next argument, unless that is
    another ``--`` option); so has any ``NAME=VALUE`` argument whose ``NAME`` looks secret
    (``--set run.api_key=VALUE``, ``HF_TOKEN=VALUE``), and the password of any
    ``scheme://user:password@host`` URL. Short options (``-p VALUE``) cannot be told apart and
    are kept. The program name (``argv[0]``) is kept as it is.

    Returns:
        A new list; ``argv`` is left as it was.
    """
    argv = [str(arg) for arg in argv]
    out = argv[:1]
    secret_next = False
    for arg in argv[1:]:
        if secret_next and not arg.startswith("--"):
            out.append(REDACTED)
            secret_next = False
            continue
        secret_next = False
        if arg.startswith("--") and len(arg) > 2:
            name, sep, _ = arg[2:].partition("=")
            if looks_secret(name):
                out.append(f"--{name}={REDACTED}" if sep else arg)
                secret_next = not sep
                continue
            if sep:
                out.append(f"--{name}={_redact_assignment(arg[3 + len(name) :])}")
                continue
        out.append(_redact_assignment(arg))
    return out


def _json_value(value: Any) -> Any:
    """``value`` if it is a JSON value, else its ``repr``."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def _described(config: Any) -> str:
    """How a call record names a config: the path or shipped name it was given, else its kind
    (a dict's values are the run's ``config.yaml``)."""
    if isinstance(config, str | Path):
        return str(config)
    if isinstance(config, Mapping):
        return "a dict"
    return f"a {type(config).__name__}"


def _described_overrides(overrides: Any) -> Any:
    """Overrides as given (a mapping or ``key=value`` strings), secret-looking values redacted."""
    if overrides is None:
        return None
    if isinstance(overrides, Mapping):
        return {
            str(key): REDACTED if looks_secret(str(key)) else _json_value(value)
            for key, value in overrides.items()
        }
    return [_redact_assignment(str(text)) for text in overrides]


@contextlib.contextmanager
def called(function: str, **arguments: Any) -> Iterator[None]:
    """Records, for every ``provenance()`` made inside the block, the API call ``function`` with
    ``arguments`` in place of the process's command line.

    ``config`` is recorded as the path or name given (``"a dict"`` for a mapping, ``"a Config"``
    for a ``Config``), ``overrides`` as given with secret-looking values redacted, anything else
    as a JSON value (its ``repr`` otherwise); None arguments are left out. Within an outer
    ``called`` block the outer call is kept: it is the one the user made.

    Args:
        function: the public name called, ``"per_dqn.train"``.
        arguments: the call's arguments worth recording (not the callbacks).
    """
    if _CALL.get() is not None:
        yield
        return
    record: dict[str, Any] = {"function": function}
    for name, value in arguments.items():
        if value is None:
            continue
        if name == "config":
            record[name] = _described(value)
        elif name == "overrides":
            record[name] = _described_overrides(value)
        else:
            record[name] = _json_value(str(value) if isinstance(value, Path) else value)
    token = _CALL.set(record)
    try:
        yield
    finally:
        _CALL.reset(token)


def shareable_argv() -> list[str]:
    """The command line as another recorder (wandb, which stores ``sys.argv``) may keep it: the
    program name alone inside a ``called`` block, else ``sys.argv`` redacted."""
    if _CALL.get() is not None:
        return sys.argv[:1]
    return redact_argv(sys.argv)


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
        argv: the command line (default: ``sys.argv``, unless a ``called`` block is around the
            call).

    Returns:
        ``command`` (the argument list, secrets redacted: ``redact_argv``) and ``command_line``
        (the same, quoted for a POSIX shell), both None inside a ``called`` block; ``call`` (the
        API call, see ``called``; None outside one); ``versions`` (see ``versions``), ``git``
        (see ``git_state``), ``host`` (the host name), ``device`` (``"cpu"``, ``"cuda:0"``, ...
        or None) and ``cuda_device`` (the GPU's name on CUDA, else None); then the fields of any
        ``recorded`` block around the call.
    """
    call = _CALL.get() if argv is None else None
    command = None if call is not None else redact_argv(sys.argv if argv is None else argv)
    name = None if device is None else str(device)
    cuda_device = None
    if name is not None and name.startswith("cuda"):
        try:
            import torch

            cuda_device = torch.cuda.get_device_name(torch.device(name))
        except (RuntimeError, AssertionError, ValueError):
            cuda_device = None
    return {
        "command": command,
        "command_line": None if command is None else shlex.join(command),
        "call": None if call is None else dict(call),
        "versions": versions(),
        "git": git_state(),
        "host": socket.gethostname(),
        "device": name,
        "cuda_device": cuda_device,
        **(_ADDED.get() or {}),
    }
