"""The ``per-dqn`` command line: parse, load the config, call into the package, map errors to exits.

Exit codes: 0 done; 2 bad input (config file, ``--set``, run dir, unusable env or device), one
``error: ...`` line per problem on stderr and nothing created on disk; 130 interrupted by Ctrl-C
(the run dir keeps its events and a summary marked ``interrupted``).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from per_dqn.config import (
    Config,
    ConfigError,
    Override,
    load_config,
    parse_override,
    resolve_config_path,
)

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130

app = typer.Typer(
    name="per-dqn",
    help="Double/Dueling DQN with Prioritized Experience Replay.",
    no_args_is_help=True,
    add_completion=False,
)
config_app = typer.Typer(help="Show or check experiment configs.", no_args_is_help=True)
app.add_typer(config_app, name="config")


class Replay(StrEnum):
    """Replay memory kinds (``replay.kind``)."""

    uniform = "uniform"
    proportional = "proportional"
    rank = "rank"


class Device(StrEnum):
    """Where the networks run (``run.device``)."""

    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="SECTION.KEY=VALUE",
        help="Override one config value (YAML-typed, validated like the file). Repeatable.",
    ),
]


def _fail(problems: list[str]) -> NoReturn:
    for problem in problems:
        typer.echo(f"error: {problem}", err=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def _load(name_or_path: str, overrides: list[Override]) -> tuple[Config, str]:
    """The validated config and its name (file stem); exits 2 on any problem."""
    try:
        path = resolve_config_path(name_or_path)
        return load_config(path, overrides, display_name=name_or_path), path.stem
    except ConfigError as exc:
        _fail(exc.problems)


def _parse_sets(sets: list[str] | None) -> list[Override]:
    problems, overrides = [], []
    for text in sets or []:
        try:
            overrides.append(parse_override(text))
        except ConfigError as exc:
            problems += exc.problems
    if problems:
        _fail(problems)
    return overrides


@app.command()
def train(
    config: Annotated[
        str,
        typer.Option(
            "--config",
            "-c",
            help="A shipped config name (cartpole.yaml) or a path to a YAML file.",
        ),
    ],
    replay: Annotated[
        Replay | None, typer.Option(help="Replay memory; overrides replay.kind.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed; overrides run.seed.")] = None,
    steps: Annotated[
        int | None, typer.Option(help="Total env steps; overrides train.total_env_steps.")
    ] = None,
    run_dir: Annotated[
        Path | None,
        typer.Option(
            help="Exact output directory (must be absent or empty). "
            "Default: <runs_root>/<env>__<config>__<replay>__s<seed>__<time>.",
        ),
    ] = None,
    set_: SetOption = None,
    device: Annotated[
        Device | None, typer.Option(help="auto, cpu or cuda; overrides run.device.")
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Train an agent; write config.yaml, TensorBoard events and summary.json to the run dir."""
    overrides = _parse_sets(set_)
    for path, value, flag in (
        ("replay.kind", replay.value if replay else None, "--replay"),
        ("run.seed", seed, "--seed"),
        ("train.total_env_steps", steps, "--steps"),
        ("run.device", device.value if device else None, "--device"),
    ):
        if value is not None:
            overrides.append(Override(path, value, flag))
    cfg, name = _load(config, overrides)

    # Imported only now: torch, gymnasium and tensorboard take seconds, and bad input must not
    # wait for them.
    from per_dqn import metrics
    from per_dqn.train import Trainer

    if run_dir is None:
        run_name = metrics.default_run_name(
            cfg.env.id, name, cfg.replay.kind, cfg.run.seed, datetime.now()
        )
        run_dir = metrics.fresh_run_dir(Path(cfg.run.runs_root), run_name)
    else:
        try:
            metrics.check_run_dir(run_dir)
        except FileExistsError as exc:
            _fail([str(exc)])
    try:
        trainer = Trainer(cfg, name)
    except ValueError as exc:
        _fail([f"{config}: {exc}"])
    try:
        with metrics.ConsoleProgress(cfg.train.total_env_steps, enabled=not quiet) as progress:
            summary = trainer.run(run_dir, progress)
    finally:
        trainer.close()
    metrics.print_summary(summary)
    if summary["interrupted"]:
        raise typer.Exit(EXIT_INTERRUPTED)


@config_app.command("show")
def config_show(
    name: Annotated[str, typer.Argument(help="A shipped config name or a path.")],
    set_: SetOption = None,
) -> None:
    """Print the resolved config (every key, defaults filled in) as YAML."""
    cfg, _ = _load(name, _parse_sets(set_))
    typer.echo(cfg.to_yaml(), nl=False)


@config_app.command("validate")
def config_validate(
    file: Annotated[str, typer.Argument(help="A config file (or a shipped config name).")],
) -> None:
    """Check a config; print `ok: FILE` or one `error:` line per problem (exit 2)."""
    _load(file, [])
    typer.echo(f"ok: {file}")
