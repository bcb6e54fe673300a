"""``per-dqn config show`` and ``config validate``: a config resolved, or checked, without
running anything."""

from __future__ import annotations

from typing import Annotated

import typer

from per_dqn.cli.common import SetOption, fail, load_or_fail, parse_sets
from per_dqn.envs import families

app = typer.Typer(help="Show or check experiment configs.", no_args_is_help=True)


@app.command("show", short_help="Print a config with every default filled in.")
def config_show(
    name: Annotated[str, typer.Argument(help="A shipped config name or a path.")],
    set_: SetOption = None,
) -> None:
    """Print the resolved config (every key, defaults filled in) as YAML.

    An `env` key the config's env does not read (an Atari-only key of a CartPole config) is
    marked with a comment.
    """
    cfg, _ = load_or_fail(name, parse_sets(set_))
    typer.echo(mark_ignored_env_keys(cfg.to_yaml(), cfg.env.id), nl=False)


def mark_ignored_env_keys(text: str, env_id: str) -> str:
    """The config YAML with ``# not read by <family> envs`` after each ``env`` key that
    ``env_id``'s family ignores (``families.ignored_env_keys``). The comment names the family,
    not the id: an id given with ``--set`` may hold any character, and a comment must not break
    the YAML that ``config show`` prints."""
    ignored, family = families.ignored_env_keys(env_id), families.of(env_id).title
    lines, section = [], None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            section = line.rstrip(":")
        key = line.strip().split(":", 1)[0]
        if section == "env" and line.startswith("  ") and key in ignored:
            line = f"{line}  # not read by {family} envs"
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
