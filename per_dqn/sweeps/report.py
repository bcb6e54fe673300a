"""Ablation reports, rebuilt from the run dirs alone: ``report.md``, ``scores.csv`` and figures.

A sweep dir (see ``per_dqn.sweeps.plan``) holds one normal run dir per env x arm x seed, each
with the ``summary.json`` and TensorBoard event file that ``Trainer.run`` writes, and
``sweep.json`` naming the runs the sweep planned. Everything here is read back from those files
(by ``per_dqn.sweeps.runs``), so a report can be rewritten at any time (``per-dqn report DIR``),
also from a sweep that is still running or was interrupted: it says how many runs it used and
which are missing. A single run's dir is refused: a report compares arms over seeds. The same
run dirs give the same files, byte for byte: the bootstrap is seeded and the figures carry no
date.

A damaged sweep is reported as far as it can be: a run whose files cannot be read as they should
(see ``per_dqn.sweeps.runs``), or whose evaluation curve cannot be measured, is skipped, named
in a warning and listed in ``report.md``; only a sweep of which no run can be reported is refused.

This module is the composition (``write_report``: read, measure, render, draw, write) and the
parsing of its ``--threshold`` options; each step has its own home:

- ``per_dqn.sweeps.measure``: what is measured per run (final score, AUC, steps to threshold,
  mean IS weight), the cells, the baselines, the normalisation across games and why min-max;
- ``per_dqn.sweeps.stats``: the estimators (IQM, stratified bootstrap, probability of
  improvement, performance profiles; Agarwal et al., 2021);
- ``per_dqn.sweeps.markdown``: ``report.md`` and ``scores.csv``;
- ``per_dqn.sweeps.figures``: ``curves``, ``profiles``, ``sensitivity`` and, with published
  curves (``per_dqn.sweeps.published``), ``training`` (PNG and SVG).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from per_dqn.rundir.dirs import check_name_lengths
from per_dqn.rundir.fileio import write_bytes_atomic
from per_dqn.sweeps import figures, markdown
from per_dqn.sweeps.measure import (
    group_cells,
    measure,
    normalization,
    resolve_thresholds,
    sensitivity_keys,
)
from per_dqn.sweeps.published import Point
from per_dqn.sweeps.runs import Skipped, collect

REPORT_FILE = "report.md"
SCORES_FILE = "scores.csv"


def parse_thresholds(items: Sequence[str]) -> dict[str, float]:
    """``--threshold ENV_ID=VALUE`` options as ``{env_id: value}``.

    Raises:
        ValueError: an item without ``=``, an empty env id, a value that is not a finite number,
            or an env id given twice; the message names the item.
    """
    out: dict[str, float] = {}
    for item in items:
        env_id, sep, text = item.partition("=")
        env_id, text = env_id.strip(), text.strip()
        if not sep or not env_id or not text:
            raise ValueError(
                f"--threshold {item!r}: expected ENV_ID=VALUE, e.g. MinAtar/Breakout-v1=10"
            )
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise ValueError(f"--threshold {item!r}: VALUE must be a finite number, got {text!r}")
        if env_id in out:
            raise ValueError(
                f"--threshold {env_id}: given twice ({out[env_id]:g} and {value:g}); give it once"
            )
        out[env_id] = value
    return out


@dataclass(frozen=True)
class ReportFiles:
    """Where a report was written."""

    report: Path
    scores: Path
    curves: Path
    curves_svg: Path
    profiles: Path
    profiles_svg: Path
    sensitivity: Path | None = None
    sensitivity_svg: Path | None = None
    training: Path | None = None
    training_svg: Path | None = None

    def lines(self) -> list[str]:
        """What ``report`` and ``ablate`` print: the report's path, then what lies beside it,
        by name, on a line that fits 80 columns."""
        figures = [
            path.stem for path in (self.curves, self.profiles, self.sensitivity, self.training)
            if path is not None
        ]  # fmt: skip
        return [
            f"report: {self.report}",
            f"  beside it: {self.scores.name}, and as PNG and SVG: {', '.join(figures)}",
        ]


def write_report(
    out: Path,
    thresholds: dict[str, float] | None = None,
    baseline: str | None = None,
    warn: Callable[[str], None] | None = None,
    on_stage: Callable[[str, int, int], None] | None = None,
    published: Sequence[Point] = (),
) -> ReportFiles:
    """Reads the sweep dir ``out`` and writes the report's files into it.

    Everything is computed before the first file is written, and each file replaces its old
    version atomically, so a refused or failed report leaves the old one whole.

    Args:
        out: the sweep dir.
        thresholds: ``{env_id: value}`` overriding or adding steps-to-threshold targets
            (``parse_thresholds``).
        baseline: the arm every other arm's P(>) is paired against, on the same env (None:
            uniform at the same grid point, ``measure.baseline_arms``).
        warn: called with ``<file>: <what is wrong>; run skipped`` for each run left out.
        on_stage: called with (stage, done, total) as the work goes on: ``reading runs``
            (runs looked at of those to read), ``statistics`` and ``figures`` (0 of 1, then
            1 of 1), ``writing`` (files written).
        published: published curve points (``published.read_published``): with any, report.md
            sets them beside the runs' training returns and ``training.png``/``.svg`` draws them.

    Raises:
        ValueError: see ``runs.collect`` (no run could be reported included); a threshold for an
            env the sweep does not have; a baseline that is not one of the sweep's arms; a name
            in ``out`` longer than its filesystem takes (``rundir.check_name_lengths``).
    """
    # Before any stat of it: a name over NAME_MAX is one line, not an OSError (issue 43, E12).
    check_name_lengths(out, "sweep dir")

    def skipped(entry: Skipped) -> None:
        if warn is not None:
            warn(entry.line(out))

    def stage(name: str, done: int, total: int) -> None:
        if on_stage is not None:
            on_stage(name, done, total)

    sweep = collect(out, skipped, lambda done, total: stage("reading runs", done, total))
    if baseline is not None and baseline not in sweep.arms:
        raise ValueError(
            f"--baseline: {baseline!r} is not an arm of {out}; its arms are "
            + ", ".join(sweep.arms)
        )
    env_thresholds = resolve_thresholds(sweep, thresholds or {})
    measured_runs, unmeasured = [], []
    for run in sweep.runs:
        try:
            measured_runs.append(measure(run, env_thresholds[run.env_id]))
        except ValueError as exc:  # a curve with no area: named by its run dir's event files
            entry = Skipped(run.path, str(exc).removeprefix(f"run {run.path}: "))
            unmeasured.append(entry)
            skipped(entry)
    if unmeasured:
        if not measured_runs:
            raise ValueError(
                f"sweep dir {out}: no run could be reported "
                f"({len(sweep.skipped) + len(unmeasured)} skipped, {len(sweep.missing)} not "
                "finished)"
            )
        sweep = replace(
            sweep,
            runs=tuple(m.run for m in measured_runs),
            skipped=(*sweep.skipped, *unmeasured),
        )
    cells = group_cells(sweep, measured_runs)
    measured = [r for runs in cells.values() for r in runs]  # by env, arm and seed
    norm = normalization(sweep, cells)
    files = ReportFiles(
        out / REPORT_FILE, out / SCORES_FILE, out / figures.CURVES_FILE,
        out / figures.CURVES_SVG, out / figures.PROFILES_FILE, out / figures.PROFILES_SVG,
    )  # fmt: skip
    stage("statistics", 0, 1)
    contents = {
        files.scores: markdown.scores_csv(measured).encode("utf-8"),
        files.report: markdown.render_markdown(
            sweep, cells, env_thresholds, norm, thresholds or {}, baseline, published
        ).encode("utf-8"),
    }
    stage("statistics", 1, 1)
    stage("figures", 0, 1)
    curves = figures.plot_curves(sweep, cells, env_thresholds)
    profiles = figures.plot_profiles(sweep, cells, norm)
    contents.update({files.curves: figures.figure_bytes(curves, "png"),
                     files.curves_svg: figures.figure_bytes(curves, "svg"),
                     files.profiles: figures.figure_bytes(profiles, "png"),
                     files.profiles_svg: figures.figure_bytes(profiles, "svg")})  # fmt: skip
    # The figures a report has only when there is something to draw: (field, PNG, SVG, figure).
    optional = []
    keys = sensitivity_keys(sweep)
    if keys:
        optional.append(("sensitivity", figures.SENSITIVITY_FILE, figures.SENSITIVITY_SVG,
                         figures.plot_sensitivity(sweep, measured, keys)))  # fmt: skip
    if published:
        optional.append(("training", figures.TRAINING_FILE, figures.TRAINING_SVG,
                         figures.plot_training(sweep, cells, published)))  # fmt: skip
    for field, png_name, svg_name, figure in optional:
        png, svg = out / png_name, out / svg_name
        files = replace(files, **{field: png, f"{field}_svg": svg})
        contents[png] = figures.figure_bytes(figure, "png")
        contents[svg] = figures.figure_bytes(figure, "svg")
    stage("figures", 1, 1)
    for written, (path, data) in enumerate(contents.items()):
        stage("writing", written, len(contents))
        write_bytes_atomic(path, data)
    stage("writing", len(contents), len(contents))
    return files
