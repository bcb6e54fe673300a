"""``per-dqn report``: a sweep dir's report, written again from its run dirs alone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from per_dqn.cli.common import fail

app = typer.Typer()


@app.command()
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
) -> None:
    """Write report.md, scores.csv and the figures (curves, performance profiles; PNG and SVG)
    into a sweep dir, from its run dirs alone."""
    from per_dqn.sweeps import report as reports

    try:
        files = reports.write_report(sweep_dir, reports.parse_thresholds(threshold or []), baseline)
    except ValueError as exc:
        fail([str(exc)])
    typer.echo(f"report: {files}")
