"""``per-dqn config show`` and ``config validate``: a config resolved, or checked, without
running anything."""

from __future__ import annotations

from typing import Annotated

import typer

from per_dqn.cli.common import SetOption, load_or_fail, parse_sets

app = typer.Typer(help="Show or check experiment configs.", no_args_is_help=True)


@app.command("show")
def config_show(
    name: Annotated[str, typer.Argument(help="A shipped config name or a path.")],
    set_: SetOption = None,
) -> None:
    """Print the resolved config (every key, defaults filled in) as YAML."""
    cfg, _ = load_or_fail(name, parse_sets(set_))
    typer.echo(cfg.to_yaml(), nl=False)


@app.command("validate")
def config_validate(
    file: Annotated[str, typer.Argument(help="A config file (or a shipped config name).")],
) -> None:
    """Check a config; print `ok: FILE` or one `error:` line per problem (exit 2)."""
    load_or_fail(file, [])
    typer.echo(f"ok: {file}")
