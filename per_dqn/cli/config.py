"""``per-dqn config show`` and ``config validate``: a config resolved, or checked, without
running anything."""

from __future__ import annotations

from typing import Annotated

import typer

from per_dqn.cli.common import SetOption, fail, load_or_fail, parse_sets
from per_dqn.config import Config, unread_keys

app = typer.Typer(help="Show or check experiment configs.", no_args_is_help=True)


@app.command("show", short_help="Print a config with every default filled in.")
def config_show(
    name: Annotated[str, typer.Argument(help="A shipped config name or a path.")],
    set_: SetOption = None,
) -> None:
    """Print the resolved config (every key, defaults filled in) as YAML.

    A key the run would not read is marked with a comment saying what does not read it: a
    replay key its kind does not read, an `env` key of another env family (an Atari-only key of
    a CartPole config), an optimiser setting of the optimiser it does not use.
    """
    cfg, _ = load_or_fail(name, parse_sets(set_))
    typer.echo(mark_unread_keys(cfg.to_yaml(), cfg), nl=False)


def mark_unread_keys(text: str, config: Config) -> str:
    """The config YAML with ``# not read by <what>`` after each key a run of ``config`` does not
    read (``unread_keys``: its replay kind, its env's family, its optimiser). The comment names
    the family, not the id: an id given with ``--set`` may hold any character, and a comment
    must not break the YAML that ``config show`` prints."""
    unread = unread_keys(config)
    lines, section = [], None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            section = line.rstrip(":")
        key = f"{section}.{line.strip().split(':', 1)[0]}"
        if line.startswith("  ") and not line.startswith("   ") and key in unread:
            line = f"{line}  # not read by {unread[key]}"
        lines.append(line)
    return "\n".join(lines) + "\n"


@app.command("validate", short_help="Check a config: ok, or one line per problem.")
def config_validate(
    file: Annotated[str, typer.Argument(help="A config file (or a shipped config name).")],
) -> None:
    """Check a config; print `ok: FILE` or one `error:` line per problem (exit 2).

    Its env is made once and closed, so an env id that does not exist (or needs an extra that
    is not installed) is a problem too.
    """
    from per_dqn.training.memory_plan import env_spec  # makes one env and closes it

    cfg, _ = load_or_fail(file, [])
    try:
        env_spec(cfg)
    except ValueError as exc:
        fail([f"{file}: {exc}"])
    typer.echo(f"ok: {file}")
