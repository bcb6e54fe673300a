"""``per-dqn archive`` and ``unarchive``: a sweep's results in one small file, and back."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from per_dqn.cli.common import EXIT_WRITE_FAILED, fail, printable

app = typer.Typer()


@app.command(short_help="Keep a sweep's results, without weights, in one .tar.xz file.")
def archive(
    sweep_dir: Annotated[Path, typer.Argument(help="A sweep dir written by `per-dqn ablate`.")],
    file: Annotated[Path, typer.Argument(help="The archive to write, ending in .tar.xz.")],
) -> None:
    """Write FILE with what a report reads of each finished run in SWEEP_DIR: its config,
    summary and run id, and its evaluation curve, IS weights and training returns; with
    sweep.json. No weights and no checkpoints: `per-dqn unarchive` rebuilds a sweep dir from it
    that `report` reads as the original and `ablate` grows or finishes."""
    from per_dqn.sweeps.archive import write_archive

    try:
        count = write_archive(sweep_dir, file)
    except ValueError as exc:
        fail([str(exc)])
    except OSError as exc:  # fileio.WriteError: disk full, read-only, I/O error
        typer.echo(f"error: {printable(str(exc))}", err=True)
        raise typer.Exit(EXIT_WRITE_FAILED) from None
    typer.echo(f"archive: {file} ({count} runs, {file.stat().st_size:,} bytes)")


@app.command(short_help="Rebuild a sweep dir from `per-dqn archive`'s file.")
def unarchive(
    file: Annotated[Path, typer.Argument(help="An archive written by `per-dqn archive`.")],
    sweep_dir: Annotated[Path, typer.Argument(help="The sweep dir to create (absent or empty).")],
) -> None:
    """Rebuild SWEEP_DIR from FILE: each run dir with its config, summary, run id and an event
    file of its archived curves. `per-dqn report SWEEP_DIR` writes the original report again, and
    the sweep's `ablate` command counts these runs finished. The runs have no weights: `eval` and
    `load` need the original run dirs."""
    from per_dqn.sweeps.archive import restore_archive

    try:
        count = restore_archive(file, sweep_dir)
    except ValueError as exc:
        fail([str(exc)])
    except OSError as exc:
        # A member's name is the archive's text: one line, as ``fail`` prints it.
        where = exc.filename or sweep_dir
        typer.echo(f"error: {printable(f'{where}: {exc.strerror or exc}')}", err=True)
        raise typer.Exit(EXIT_WRITE_FAILED) from None
    typer.echo(f"unarchive: {sweep_dir} ({count} runs)")
