"""What the commands share: the exit codes, the option types two commands take, and turning bad
input (a config, a ``--set``) into one ``error:`` line per problem and exit 2."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from per_dqn.config import (
    REPLAY_KINDS,
    Config,
    ConfigError,
    Override,
    load_config,
    parse_override,
    resolve_config_path,
)
from per_dqn.config.messages import printable

EXIT_WRITE_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 3


def invoked_as() -> str:
    """``per-dqn`` as the user ran it, for the commands a hint prints (``resume with: ...``,
    ``see ... --help``), so that they paste as they are: ``per-dqn`` where that name on PATH is
    this program; else the script's path as it was typed (``.venv/bin/per-dqn`` from an
    unactivated venv); or, under ``python -m per_dqn.cli``, that, with the interpreter's path
    where ``python`` on PATH is another one."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name in ("per_dqn.cli", "per_dqn.cli.__main__"):
        python = shutil.which("python")
        same = python is not None and _same_file(python, sys.executable)
        return f"{'python' if same else shlex.quote(sys.executable)} -m per_dqn.cli"
    script = sys.argv[0] if sys.argv else ""
    if Path(script).name != "per-dqn" or os.sep not in script:
        return "per-dqn"  # found on PATH, or not the console script (an embedding program)
    on_path = shutil.which("per-dqn")
    if on_path is not None and _same_file(on_path, script):
        return "per-dqn"
    return shlex.quote(script)


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


Replay = StrEnum("Replay", {kind: kind for kind in REPLAY_KINDS})  # replay.kind

ConfigOption = Annotated[
    str, typer.Option("--config", "-c", help="A shipped config name or a path to a YAML file.")
]

SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="SECTION.KEY=VALUE",
        help="Override one config value (YAML-typed, validated like the file). Repeatable.",
    ),
]

TrustCodeOption = Annotated[
    bool,
    typer.Option(
        "--trust-code",
        help="Allow what the run dir's config.yaml names as code (a network factory "
        "package.module:factory, an env id module:Env-v1) to be imported and run, and, on "
        "--resume, the tracker its run.track turns on (wandb, with your credentials); refused "
        "without it, as a run dir is data. Only for a run dir whose origin you trust; never "
        "stored.",
    ),
]


def say(line: str) -> None:
    """Prints ``line`` on stdout, as a live display on the same terminal allows.

    While a live display runs, rich's ``Live`` holds ``sys.stdout`` and prints what is written
    there above its frame (on its own stream, stderr); ``typer.echo`` wrote past that hold to the
    terminal, so the display's next redraw erased the line and left its old frame behind (issue
    45, item 1). On a terminal the line goes through the hold; where stdout is a file or a pipe
    (``ablate ... > log``), to stdout itself, which the display on stderr does not touch."""
    stream = sys.stdout
    # rich's FileProxy, while a Live display holds stdout: behind it, the stdout it replaced.
    behind = getattr(stream, "rich_proxied_file", None)
    if behind is not None and not behind.isatty():
        stream = behind
    stream.write(line + "\n")
    stream.flush()


def fail(problems: list[str]) -> NoReturn:
    """Prints one ``error:`` line per problem and exits 2."""
    for problem in problems:
        typer.echo(f"error: {printable(problem)}", err=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def load_or_fail(name_or_path: str, overrides: list[Override]) -> tuple[Config, str]:
    """The validated config and its name (file stem); exits 2 on any problem."""
    try:
        path = resolve_config_path(name_or_path)
        return load_config(path, overrides, display_name=name_or_path), path.stem
    except ConfigError as exc:
        fail(exc.problems)


def parse_sets(sets: list[str] | None) -> list[Override]:
    """The ``--set`` options as overrides; exits 2 naming every one that does not parse."""
    problems, overrides = [], []
    for text in sets or []:
        try:
            overrides.append(parse_override(text))
        except ConfigError as exc:
            problems += exc.problems
    if problems:
        fail(problems)
    return overrides
