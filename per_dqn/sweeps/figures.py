"""The report's figures: evaluation curves, performance profiles and sensitivity to a grid key,
drawn with matplotlib and turned into PNG and SVG bytes.

The only module of ``per_dqn`` that imports matplotlib (``tests/test_architecture.py`` checks
it), and only inside the functions that draw, so that importing the report writer costs no
matplotlib. Every value drawn comes from ``per_dqn.sweeps.measure`` and ``per_dqn.sweeps.stats``;
here are only the axes, colours and file formats.

- ``curves.png``/``.svg``: the evaluation return against env steps, one panel per env, the IQM
  over seeds of each arm with its 95% band (``measure.curve_band``);
- ``profiles.png``/``.svg``: *performance profiles* on the normalised scale: for each tau, the
  fraction of runs x games with a normalised score above tau, with 95% stratified bootstrap bands;
- ``sensitivity.png``/``.svg``: final score and AUC against each numeric grid key;
- ``training.png``/``.svg`` (with ``--published``): the training-return EMA against env steps,
  the mean over seeds of each arm with a band of one sd, beside each published curve (its mean
  and sd band, in black and greys), the measure the published MinAtar curves take.

Every figure of a report gives an arm one colour and one line style (``arm_styles``: the three
kinds' own colours where an arm is a kind alone, then a fixed palette in the sweep's arm order),
so a line hidden under another (a one-seed arm on top of a five-seed one) still shows as a
dashed or dotted edge; legends sit below the axes, outside the data. A figure carries no date,
and SVG ids come from a fixed salt, so the same run dirs give the same bytes.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np

from per_dqn.config.messages import printable
from per_dqn.memory import KINDS
from per_dqn.sweeps import stats
from per_dqn.sweeps.measure import (
    BOOTSTRAP_REPS,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    METRICS,
    Cells,
    Normalization,
    RunMetrics,
    curve_band,
    normalized_matrix,
    sensitivity,
)
from per_dqn.sweeps.published import Point, in_reach, read_as_logged, steps_for
from per_dqn.sweeps.runs import SweepRuns
from per_dqn.sweeps.wording import env_label

# The figures' file names in the sweep dir (report.md links them by these names).
CURVES_FILE = "curves.png"
CURVES_SVG = "curves.svg"
PROFILES_FILE = "profiles.png"
PROFILES_SVG = "profiles.svg"
SENSITIVITY_FILE = "sensitivity.png"
SENSITIVITY_SVG = "sensitivity.svg"
TRAINING_FILE = "training.png"
TRAINING_SVG = "training.svg"
FIGURE_DPI = 200
PROFILE_POINTS = 101
# seaborn's "deep" palette. Each replay kind alone takes its colour in the registry's order (so a
# kind is the same colour in every report); arms that are not a kind alone take the colours left,
# in the sweep's arm order, and past them matplotlib's cycle.
_DEEP = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c",
         "#ccb974", "#64b5cd")  # fmt: skip
_ARM_COLORS = dict(zip(KINDS, _DEEP, strict=False))
_PALETTE = _DEEP[len(_ARM_COLORS) :]
_LINE_STYLES = ("-", "--", ":", "-.")


def arm_styles(arms: Sequence[str]) -> dict[str, tuple[str, str]]:
    """``arm -> (colour, line style)``, the same in every figure of a report: a kind alone
    (``uniform``, ``rank``, any of ``KINDS``) in its own colour; the first arm of a kind with
    settings (``proportional/alpha=0.6,beta0=0.4``) in its kind's colour too where the kind
    alone is not an arm, so that a study's proportional arm is proportional's colour whatever
    its settings; other arms in the palette's next unused colour, in ``arms``' order. Line
    styles cycle in that order, so overlapping lines stay apart."""
    styles: dict[str, tuple[str, str]] = {}
    palette = iter((*_PALETTE, *(f"C{i}" for i in range(10, 100))))
    taken = {arm for arm in arms if arm in _ARM_COLORS}
    for k, arm in enumerate(arms):
        kind = arm.split("/")[0]
        if arm in _ARM_COLORS:
            color = _ARM_COLORS[arm]
        elif kind in _ARM_COLORS and kind not in taken:
            taken.add(kind)
            color = _ARM_COLORS[kind]
        else:
            color = next(palette)
        styles[arm] = (color, _LINE_STYLES[k % len(_LINE_STYLES)])
    return styles


def _legend_below(fig, axes) -> None:
    """One legend for the figure, below its axes (outside the data), from the first panel that
    has labelled lines: as many entries a row as fit the figure's width (at most 4)."""
    for ax in axes:
        handles, labels = ax.get_legend_handles_labels()
        if not handles:
            continue
        renderer = fig.canvas.get_renderer()
        for ncols in range(min(len(labels), 4), 0, -1):
            legend = fig.legend(handles, labels, loc="outside lower center", ncols=ncols,
                                fontsize="small", frameon=False)  # fmt: skip
            if ncols == 1 or legend.get_window_extent(renderer).width <= fig.bbox.width:
                return
            legend.remove()


def _seeds_note(counts: dict[str, int]) -> str:
    """``5 seeds`` when every arm has the same count, else ``uniform 5, rank 1 seeds``."""
    if not counts:
        return "no runs"
    if len(set(counts.values())) == 1:
        n = next(iter(counts.values()))
        return f"{n} seed{'s' * (n != 1)} per arm"
    return ", ".join(f"{arm} {n}" for arm, n in counts.items()) + " seeds"


def _new_figure(width: float, height: float):
    # Imported here, and without pyplot: a report needs no GUI backend and no global figure
    # state, importing this module (or the report writer) loads no matplotlib, and the rest of
    # the package never needs it at all.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


# Panels a row of a figure of envs: more go on further rows, so that a figure of five games
# stays readable at a docs page's width (issue 45: one row of five was 147 px a panel there).
PANELS_PER_ROW = 3


def _env_panels(count: int):
    """A figure of ``count`` env panels, ``PANELS_PER_ROW`` a row at most, and its axes in
    reading order (a row's unused places left empty)."""
    columns = min(count, PANELS_PER_ROW)
    rows = -(-count // columns)
    fig = _new_figure(6.4 * columns, 4.6 * rows)
    grid = fig.subplots(rows, columns, squeeze=False).ravel()
    for ax in grid[count:]:
        ax.remove()
    return fig, list(grid[:count])


def figure_bytes(fig, fmt: str) -> bytes:
    """The figure as PNG (``FIGURE_DPI``) or SVG bytes, the same bytes for the same figure."""
    import matplotlib

    buffer = io.BytesIO()
    # No date in either file, and SVG element ids from a fixed salt rather than random ones.
    with matplotlib.rc_context({"svg.hashsalt": "per-dqn-report"}):
        fig.savefig(buffer, format=fmt, dpi=FIGURE_DPI,
                    metadata={"Date": None} if fmt == "svg" else {"Software": None})  # fmt: skip
    return buffer.getvalue()


def drawn_envs(sweep: SweepRuns, cells: Cells) -> list[str]:
    """The envs a figure has a panel for: those with a finished run. A sweep under way leaves
    out an env none of whose runs has finished, rather than draw empty axes; a sweep with no
    finished run at all draws every env's (empty) panel."""
    drawn = [env for env in sweep.envs if any(cells[(env, arm)] for arm in sweep.arms)]
    return drawn or list(sweep.envs)


def plot_curves(sweep: SweepRuns, cells: Cells, thresholds: dict[str, float | None]):
    """Evaluation return against env steps: one panel per env with runs (``drawn_envs``), one
    line per arm (IQM over seeds) with its 95% stratified bootstrap band; the threshold dashed."""
    envs = drawn_envs(sweep, cells)
    fig, axes = _env_panels(len(envs))
    styles = arm_styles(sweep.arms)
    for ax, env in zip(axes, envs, strict=True):
        counts = {}
        for arm in sweep.arms:
            curves = [r.run.curve for r in cells[(env, arm)] if r.run.curve]
            if not curves:
                continue
            counts[arm] = len(curves)
            steps, centre, low, high = curve_band(curves)
            color, style = styles[arm]
            ax.plot(steps, centre, marker="o", markersize=3, color=color, linestyle=style,
                    label=printable(arm))  # fmt: skip
            ax.fill_between(steps, low, high, color=color, alpha=0.2, linewidth=0)
        threshold = thresholds.get(env)
        if threshold is not None:
            ax.axhline(threshold, color="black", linestyle="--", linewidth=0.8,
                       label="threshold")  # fmt: skip
        _label_panel(
            ax, env_label(sweep.runs, env), counts, "evaluation return (IQM over seeds, 95% CI)"
        )
    _legend_below(fig, axes)
    return fig


def _label_panel(ax, env: str, counts: dict[str, int], ylabel: str) -> None:
    """A panel of curves against env steps: its env (``wording.env_label``: with its game's release)
    and seeds as the title, its axes, a grid."""
    ax.set_title(printable(f"{env} ({_seeds_note(counts)})"), fontsize="medium")
    ax.set_xlabel("env steps")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def plot_training(sweep: SweepRuns, cells: Cells, points: Sequence[Point]):
    """The training-return EMA against env steps, one panel per env with runs (``drawn_envs``):
    each arm's mean over seeds with a band of one sd, read at the published steps
    (``published.steps_for``) the way the env's most often logged published curve was
    (``published.read_as_logged``), and each published curve of that env up to the runs' last
    step, with its sd band."""
    envs = drawn_envs(sweep, cells)
    fig, axes = _env_panels(len(envs))
    styles = arm_styles(sweep.arms)
    labels = list(dict.fromkeys(p.label for p in points))
    greys = {label: ("black", ("-", "--", ":", "-.")[k % 4]) for k, label in enumerate(labels)}
    for ax, env in zip(axes, envs, strict=True):
        runs = [r for arm in sweep.arms for r in cells[(env, arm)]]
        last, reached = in_reach(env, points, [r.run.env_steps for r in runs])
        steps = steps_for(reached, last)
        counts = {}
        # Read as the most often logged published curve of the env was (its bins average the
        # most points); at the steps themselves without one.
        every = min((p.logged_every for p in reached if p.logged_every), default=None)
        for arm in sweep.arms:
            curves = [read_as_logged(r.run.train_returns, steps, every) for r in cells[(env, arm)]]
            if not curves:
                continue
            counts[arm] = len(curves)
            values = np.asarray(curves)
            centre = values.mean(axis=0)
            spread = values.std(axis=0, ddof=1) if len(curves) > 1 else np.zeros_like(centre)
            color, style = styles[arm]
            ax.plot(
                steps, centre, color=color, linestyle=style, label=printable(f"{arm} (this tool)")
            )
            ax.fill_between(steps, centre - spread, centre + spread, color=color, alpha=0.2,
                            linewidth=0)  # fmt: skip
        for label in labels:
            curve = sorted((p.step, p.mean, p.sd or 0.0) for p in reached if p.label == label)
            if not curve:
                continue
            at, mean, sd = (np.asarray(c, dtype=float) for c in zip(*curve, strict=True))
            color, style = greys[label]
            ax.plot(at, mean, color=color, linestyle=style, linewidth=1.2, label=printable(label))
            ax.fill_between(at, mean - sd, mean + sd, color="grey", alpha=0.15, linewidth=0)
        label = env_label(sweep.runs, env)
        _label_panel(ax, label, counts, "training return, EMA 0.99 (mean over seeds, +-1 sd)")
    _legend_below(fig, axes)
    return fig


def profile_taus(matrices: Sequence[np.ndarray]) -> np.ndarray:
    """``PROFILE_POINTS`` thresholds from min(0, lowest score) to the highest score."""
    values = np.concatenate([a.ravel() for a in matrices]) if matrices else np.zeros(1)
    lo, hi = min(0.0, float(values.min())), float(values.max())
    return np.linspace(lo, hi if hi > lo else lo + 1.0, PROFILE_POINTS)


def plot_profiles(sweep: SweepRuns, cells: Cells, norm: Normalization):
    """Performance profiles of the final score and the AUC on the normalised scale: per arm, the
    fraction of runs x games above each tau, with its 95% stratified bootstrap band."""
    fig = _new_figure(12.8, 4.6)
    axes = fig.subplots(1, len(METRICS), squeeze=False)[0]
    styles = arm_styles(sweep.arms)
    for ax, (metric, label) in zip(axes, METRICS.items(), strict=True):
        envs = norm.envs(metric, sweep.envs)
        matrices = {}
        for arm in sweep.arms:
            matrix = normalized_matrix(cells, norm, envs, arm, metric)
            if matrix:
                matrices[arm] = np.stack(list(matrix.values()))
        taus = profile_taus(list(matrices.values()))
        for arm in sweep.arms:
            if arm not in matrices:
                continue
            profile, low, high = stats.performance_profile_bands(
                matrices[arm], taus, reps=BOOTSTRAP_REPS, confidence=CONFIDENCE,
                seed=BOOTSTRAP_SEED,
            )  # fmt: skip
            color, style = styles[arm]
            ax.plot(taus, profile, color=color, linestyle=style, label=printable(arm))
            ax.fill_between(taus, low, high, color=color, alpha=0.2, linewidth=0)
        games = f"{len(envs)} game{'s' * (len(envs) != 1)}"
        seeds = _seeds_note({arm: m.shape[0] for arm, m in matrices.items()})
        ax.set_title(printable(f"{label} ({games}; {seeds})"), fontsize="medium")
        ax.set_xlabel(f"{norm.scale_name} tau")
        ax.set_ylabel("fraction of runs with score > tau")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    _legend_below(fig, axes)
    return fig


def plot_sensitivity(sweep: SweepRuns, measured: Sequence[RunMetrics], keys: Sequence[str]):
    """Final score and AUC against each numeric grid key, one row per env and key, one line per
    series (IQM over seeds with 95% CI bars), as the PER paper drew its alpha and beta sweeps."""
    rows = [(env, key) for key in keys for env in sweep.envs]
    fig = _new_figure(12.8, 4.2 * len(rows) + 0.4)
    axes = fig.subplots(len(rows), len(METRICS), squeeze=False)
    by_row = {
        (env, key, metric): sensitivity(measured, env, key, metric)
        for env, key in rows for metric in METRICS
    }  # fmt: skip
    # A series that is an arm keeps its colour; the others follow, in the order first drawn.
    names = list(dict.fromkeys(name for series in by_row.values() for name in series))
    styles = arm_styles([*sweep.arms, *(n for n in names if n not in sweep.arms)])
    for (env, key), row in zip(rows, axes, strict=True):
        for ax, (metric, name) in zip(row, METRICS.items(), strict=True):
            for series, points in by_row[(env, key, metric)].items():
                xs = np.array([x for x, _, _ in points])
                centre = np.array([i.value for _, i, _ in points])
                below = centre - np.array([i.low for _, i, _ in points])
                above = np.array([i.high for _, i, _ in points]) - centre
                color, style = styles[series]
                ax.errorbar(xs, centre, yerr=np.stack((below, above)), marker="o", capsize=3,
                            color=color, linestyle=style, label=printable(series))  # fmt: skip
            ax.set_title(
                printable(f"{env_label(sweep.runs, env)}: {name} against {key}"), fontsize="medium"
            )
            ax.set_xlabel(key)
            ax.set_ylabel(f"{name} (IQM over seeds, 95% CI)")
            ax.grid(alpha=0.3)
    _legend_below(fig, axes.ravel())
    return fig
