"""The root ``per-dqn`` command: the Typer app the command groups are added to, its ``--version``,
and click's usage errors as one ``error:`` line and exit 2."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

try:  # typer vendors click from 0.20 on
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - an older typer on a separate click
    from click.exceptions import ClickException, NoArgsIsHelpError, UsageError

from per_dqn import __version__
from per_dqn.cli.common import EXIT_BAD_INPUT, invoked_as


class _OneLineErrors(TyperGroup):
    """The command group, with click's usage errors (a bad choice, an unknown or missing option)
    as one plain ``error: ...`` line and exit 2, the style of every other bad input.

    Typer would draw them in a boxed rich panel (plain click: three lines). Overriding ``main``
    covers both ways in: the console script (``Typer.__call__``) and ``CliRunner``, which calls
    the click command's ``main`` directly.
    """

    def main(self, args: Any = None, prog_name: Any = None, complete_var: Any = None,
             standalone_mode: bool = True, **extra: Any) -> Any:  # fmt: skip
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except NoArgsIsHelpError as exc:  # a bare group (`per-dqn`, `per-dqn config`): its help
            typer.echo(exc.format_message(), err=True)
            sys.exit(EXIT_BAD_INPUT)
        except UsageError as exc:
            sys.exit(_usage_error(exc, sys.argv[1:] if args is None else list(args)))
        except ClickException as exc:
            typer.echo(f"error: {_one_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:  # end of input at a prompt; per-dqn prompts for nothing today
            typer.echo("error: aborted", err=True)
            sys.exit(1)
        # Without standalone mode a command's `typer.Exit(code)` comes back as its code; our
        # commands return nothing otherwise.
        sys.exit(code if isinstance(code, int) else 0)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _usage_error(exc: UsageError, args: list[str]) -> int:
    """Prints a click ``UsageError`` as one line naming the option and the value given, with the
    command whose ``--help`` explains it."""
    message = _lower_first(_one_line(exc.format_message()).rstrip("."))
    param = getattr(exc, "param", None)
    if param is not None and getattr(exc, "message", None):
        # `BadParameter`: click's reason may not echo the value (typer: "Input should be a valid
        # integer, ..."); the value is found where it was given.
        reason = _lower_first(_one_line(exc.message).removeprefix("Value error, ").rstrip("."))
        hint = " / ".join(repr(opt) for opt in param.opts) if param.opts else repr(param.name)
        value = _given_value(args, param.opts)
        shown = "" if value is None or repr(value) in reason else f"{value!r}: "
        message = f"invalid value for {hint}: {shown}{reason}"
    where = ""
    if exc.ctx is not None:  # the command as the user ran it (common.invoked_as), then its path
        root = exc.ctx.find_root().info_name or ""
        where = f" (see {invoked_as()}{exc.ctx.command_path[len(root) :]} --help)"
    typer.echo(f"error: {message}{where}", err=True)
    return EXIT_BAD_INPUT


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _given_value(args: list[str], opts: list[str]) -> str | None:
    """The value given to an option among ``opts`` (its last use), as typed; None if not found."""
    value = None
    for i, arg in enumerate(args):
        for opt in opts:
            if arg == opt and i + 1 < len(args):
                value = args[i + 1]
            elif opt.startswith("--") and arg.startswith(opt + "="):
                value = arg[len(opt) + 1 :]
    return value


app = typer.Typer(
    name="per-dqn",
    help="Double/Dueling DQN with Prioritized Experience Replay.",
    no_args_is_help=True,
    add_completion=False,
    cls=_OneLineErrors,
    # Plain help, click's: rich's panels showed `<bool>` beside every flag and broke command
    # summaries at their docstrings' line ends. Each command's `short_help` is its whole summary.
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"per-dqn {__version__}")
        raise typer.Exit()


@app.callback()
def _main_options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Double/Dueling DQN with Prioritized Experience Replay."""
