"""``per-dqn report``: a sweep dir's report, written again from its run dirs alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from per_dqn.cli.common import EXIT_WRITE_FAILED, fail, printable

app = typer.Typer()


@app.command(short_help="Write a sweep's report, scores and figures.")
def report(
    sweep_dir: Annotated[
        Path, typer.Argument(help="A sweep dir written by `per-dqn ablate` (not one run's dir).")
    ],
    threshold: Annotated[
        list[str] | None,
        typer.Option(
            metavar="ENV_ID=VALUE",
            help="Steps-to-threshold target for an env, repeatable: for envs without gymnasium's "
            "reward_threshold (MinAtar), or to override it.",
        ),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            metavar="ARM",
            help="Pair every arm's P(>) against this arm (as report.md names it, e.g. "
            "proportional/weight_normalization=global) instead of uniform.",
        ),
    ] = None,
    published: Annotated[
        list[Path] | None,
        typer.Option(
            metavar="FILE",
            help="A CSV of published training curves (env_id,label,step,mean[,sd,seeds,"
            "exploration,logged_every]), "
            "repeatable: report.md sets them beside the runs' training-return EMA at the last "
            "published step and training.png draws them; docs/results/published/ holds one.",
        ),
    ] = None,
) -> None:
    """Write report.md, scores.csv and the figures (curves, performance profiles; PNG and SVG)
    into a sweep dir, from its run dirs alone.

    A run with a damaged file is skipped with a warning naming the file, and listed in
    report.md; exit 0 if any run was reported, 2 if none could be, 1 if a report file could not
    be written."""
    from per_dqn.sweeps import report as reports
    from per_dqn.sweeps.progress import ReportProgress
    from per_dqn.sweeps.published import read_published

    try:
        thresholds = reports.parse_thresholds(threshold or [])
        points = [p for path in published or [] for p in read_published(path)]
        # Reading a large sweep's event files takes minutes: the stage and the runs read so far
        # show on stderr meanwhile.
        with ReportProgress() as progress:
            files = reports.write_report(
                sweep_dir,
                thresholds,
                baseline,
                warn=warning,
                on_stage=progress.stage,
                published=points,
            )
    except ValueError as exc:
        fail([str(exc)])
    except OSError as exc:  # a report file could not be written (a full disk, a read-only dir)
        typer.echo(f"error: {not_written(exc, sweep_dir)}", err=True)
        raise typer.Exit(EXIT_WRITE_FAILED) from None
    typer.echo("\n".join(files.lines()))


def not_written(exc: OSError, sweep_dir: Path) -> str:
    """One line for a report file that could not be written: the file, the reason, and that
    the files written before it are whole (each is written atomically) and the runs untouched."""
    # A failed os.replace names its temporary file first and the file it was to be second.
    where = printable(str(exc.filename2 or exc.filename or sweep_dir))
    return (
        f"{where}: {exc.strerror or exc}; the report was not finished (the runs are untouched; "
        f"`per-dqn report {printable(str(sweep_dir))}` writes it once it can)"
    )


def warning(line: str) -> None:
    """Prints ``warning: <line>`` on stderr, as one line: a warning names a run dir or an arm as
    the sweep dir holds it (someone else's text, maybe), so its control characters are escaped
    (``printable``, as ``fail`` does) and cannot clear the screen or forge a line (issue 43,
    E11)."""
    typer.echo(f"warning: {printable(line)}", err=True)
