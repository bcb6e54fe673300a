"""The report's text: ``report.md`` (what was run, one table per env, across games, sensitivity)
and ``scores.csv`` (one row per run).

Only layout: every number comes from ``per_dqn.sweeps.measure``. What is reported per env and
arm (Agarwal et al., 2021, "Deep RL at the edge of the statistical precipice", whose estimators
``per_dqn.sweeps.stats`` implements and checks against rliable's):

- the IQM of the final scores and of the AUCs over seeds, each with a 95% stratified bootstrap
  confidence interval;
- steps to threshold as a median over seeds in which a seed that never reaches it counts as later
  than every seed that does, with the fraction of seeds that reached it;
- P(arm > uniform) of the final score and of the AUC: over paired seeds, the share on which the
  arm beats uniform, ties counting one half, with a paired bootstrap interval;
- the arm's mean IS weight, averaged over seeds (a dash where every weight is 1: uniform);
- a plain warning under every table with a cell of fewer than 5 runs: the bootstrap can only
  resample the runs there are, so the "95% interval" of 2 to 4 runs is little more than their
  range.

Across games, on the normalised scale (``measure.normalization``): the aggregate IQM over games
(runs resampled within each game) and P(arm > uniform) over seeds paired across games. With a
numeric grid key, the IQM over seeds at each of its values (``measure.sensitivity``).

One module though past 500 lines: report.md's sections and scores.csv are one document, written from
one set of measured cells, and each section's wording is read back by the tests.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from per_dqn.config.messages import printable
from per_dqn.envs import atari_scores
from per_dqn.logs.tags import EVAL_RETURN_MEAN, PER_IS_WEIGHT_MEAN
from per_dqn.sweeps.figures import (
    CURVES_FILE,
    CURVES_SVG,
    PROFILES_FILE,
    PROFILES_SVG,
    SENSITIVITY_FILE,
    SENSITIVITY_SVG,
    TRAINING_FILE,
    TRAINING_SVG,
)
from per_dqn.sweeps.measure import (
    BASELINE_ARM,
    BOOTSTRAP_REPS,
    METRICS,
    TRAIN_EMA_DECAY,
    TRAIN_LAST_EPISODES,
    Cells,
    Normalization,
    RunMetrics,
    baseline_arms,
    by_seed,
    censored_median,
    improvement,
    iqm_interval,
    normalized_matrix,
    sensitivity,
    sensitivity_keys,
)
from per_dqn.sweeps.published import Point, in_reach, read_as_logged
from per_dqn.sweeps.runs import SweepRuns
from per_dqn.sweeps.wording import compute_seconds, env_games, env_label

# Below this many runs a cell's bootstrap interval is little more than the runs' range.
MIN_RUNS = 5
SCORES_COLUMNS = (
    "env_id", "arm", "seed", "final_return", "final_return_std", "final_eval_episodes", "auc",
    "threshold", "steps_to_threshold", "human_normalized", "is_weight_mean", "env_steps",
    "wall_seconds", "run_dir", "train_return_ema", "train_return_last100",
)  # fmt: skip


def scores_csv(measured: Sequence[RunMetrics]) -> str:
    """One row per finished run: its final score, AUC, steps to threshold, human-normalised
    score, mean IS weight, and its training returns as the literature measures them (the EMA
    at its end, the mean of its last 100 episodes), last so that older columns keep their
    places."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(SCORES_COLUMNS)
    for r in measured:
        run = r.run
        hns = atari_scores.human_normalized(run.env_id, run.score)
        writer.writerow(
            [run.env_id, run.arm, run.seed, repr(run.score), repr(run.score_std),
             run.eval_episodes, _blank(r.auc), _blank(r.threshold),
             "" if r.steps_to_threshold is None else r.steps_to_threshold, _blank(hns),
             _blank(run.is_weight_mean), run.env_steps, f"{run.wall_seconds:.1f}", run.path,
             _blank(r.train_ema), _blank(r.train_last100)]
        )  # fmt: skip
    return buffer.getvalue()


def cell(text: object) -> str:
    """``text`` as one markdown table cell: its control characters escaped (``printable``) and
    each ``|`` as ``\\|``, so that a name read from the sweep dir (an arm's, an env id's, a run
    dir's) cannot end its row and add one, nor add a column (issue 43, E11)."""
    return printable(str(text)).replace("|", "\\|")


def table_row(cells: Sequence[object]) -> str:
    """``| a | b |``: one markdown table row of ``cells``, each escaped by ``cell``."""
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def _blank(value: float | None) -> str:
    return "" if value is None else repr(value)


def _seed_range(seeds: Sequence[int]) -> str:
    seeds = sorted(seeds)
    if not seeds:
        return "none"
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _steps_cell(steps: list[int | None]) -> str:
    reached = sum(s is not None for s in steps)
    median = censored_median(steps)
    where = f"{median:,.0f}" if math.isfinite(median) else "not reached"
    return f"{where} ({reached}/{len(steps)})"


def few_runs_warning(counts: dict[str, int], unit: str = "runs") -> list[str]:
    """A plain warning naming every arm with fewer than ``MIN_RUNS`` (but some) ``unit``."""
    few = [f"{arm} ({n})" for arm, n in counts.items() if 0 < n < MIN_RUNS]
    if not few:
        return []
    return [
        f"**Warning: fewer than {MIN_RUNS} {unit}** for {', '.join(few)}. A bootstrap can only "
        f"resample the {unit} there are, so with so few the 95% interval is little more than the "
        f"range of the {unit} (lowest to highest), not a confidence interval to draw a conclusion "
        "from; add seeds.",
        "",
    ]


def render_markdown(
    sweep: SweepRuns,
    cells: Cells,
    thresholds: dict[str, float | None],
    norm: Normalization,
    given: dict[str, float] | None = None,
    baseline: str | None = None,
    published: Sequence[Point] = (),
) -> str:
    """The report: what was run, which runs are missing, one table per env, the comparison
    across games, the published curves (where given), the figures."""
    record = sweep.record or {}
    name = record.get("config_name") or "sweep"
    seeds = sorted({r.seed for r in sweep.runs})
    lines = [f"# Ablation report: {name}", ""]
    versus = baseline or BASELINE_ARM
    where = " on the same env" if baseline else " at the same grid point"
    if record:
        overrides = record.get("overrides") or []
        lines.append(
            f"- Sweep: config `{record.get('config')}`, overrides "
            + (", ".join(f"`{o}`" for o in overrides) if overrides else "none")
            + f"; {_steps_text(sweep)} env steps per run."
        )
        seeds = list(record.get("seeds", seeds))
        for arm, settings in (record.get("arm_settings") or {}).items():
            pairs = ", ".join(f"`{k}={json.dumps(v)}`" for k, v in settings.items())
            lines.append(f"- Arm `{arm}` sets {pairs}.")
        for key, values in (record.get("grid") or {}).items():
            listed = ", ".join(f"`{json.dumps(v)}`" for v in values)
            lines.append(f"- Grid: `{key}` takes {listed}, crossed with every arm.")
    lines += [
        f"- Arms: {', '.join(sweep.arms)}; seeds {_seed_range(seeds)}, paired (seed s gives every "
        "arm the same network initialisation and env seeds); envs: "
        + ", ".join(sweep.envs) + ".",
        f"- Runs used: {len(sweep.runs)}"
        + (f" of {sweep.expected} planned" if sweep.expected is not None else " (no sweep.json)")
        + "; missing: " + (", ".join(sweep.missing) if sweep.missing else "none") + ".",
        *([f"- Runs skipped, their files damaged: {'; '.join(map(str, sweep.skipped))}."]
          if sweep.skipped else []),
        *_compute_line(sweep),
        "",
        "Final score of a run: the mean return of its final evaluation (at the config's "
        "`train.eval_epsilon`: 0 is greedy), at the last env step. "
        f"AUC: the area under its evaluation curve (`{EVAL_RETURN_MEAN}`) divided by the "
        "env steps the curve spans, its mean evaluation return over training. IQM: the "
        "interquartile mean over seeds. Brackets: 95% stratified bootstrap confidence intervals "
        f"({BOOTSTRAP_REPS:,} resamples, percentile method). P(> {versus}): the share of "
        f"paired seeds on which the arm beats {versus}{where} (ties count 1/2), with a paired "
        "bootstrap interval. IS weight: the mean over seeds of each run's "
        f"mean logged `{PER_IS_WEIGHT_MEAN}`, the average factor PER's importance-sampling "
        "weights put on the step size (- where every weight is 1: uniform sampling).",
        "",
    ]  # fmt: skip
    baselines = (
        {arm: None if arm == baseline else baseline for arm in sweep.arms}
        if baseline
        else baseline_arms(sweep)
    )
    for env in sweep.envs:
        lines += _env_table(
            sweep, cells, baselines, env, thresholds.get(env), (given or {}).get(env), versus
        )
    if len(sweep.envs) > 1 or norm.kind == "human":
        lines += _across_games_table(sweep, cells, baselines, norm, versus)
    measured = [r for runs in cells.values() for r in runs]
    lines += _training_returns_table(sweep, cells)
    if published:
        lines += _published_table(sweep, cells, published)
    for key in sensitivity_keys(sweep):
        lines += _sensitivity_table(sweep, measured, key)
    lines += [
        f"![evaluation return against env steps]({CURVES_FILE}) ([SVG]({CURVES_SVG}))",
        "",
        f"![performance profiles]({PROFILES_FILE}) ([SVG]({PROFILES_SVG})): for each tau, the "
        f"fraction of runs{' x games' * (len(sweep.envs) > 1)} whose "
        + norm.scale_name
        + " is above tau, with 95% stratified bootstrap bands.",
        "",
    ]
    # Names come from the sweep dir (arms, env ids, run dirs, skipped files' problems): each
    # line stays one line, whatever a name holds (issue 43, E11).
    return "\n".join(printable(line) for line in lines)


def _compute_line(sweep: SweepRuns) -> list[str]:
    """What training the runs used took (``wording.compute_seconds``), as one line."""
    if not sweep.runs:
        return []
    seconds, packs, untimed = compute_seconds(sweep.runs)
    amount = f"{seconds / 3600:,.1f} hours" if seconds >= 3600 else f"{seconds / 60:,.1f} minutes"
    line = (
        f"- Compute: {amount} of training time in {packs} pack session{'s' * (packs != 1)} (a "
        "pack trains its runs in one process and counts once, by its longest run; a run alone "
        "is a pack of one; start-up and checkpoint loading are not timed)"
    )
    if untimed:
        line += (
            f"; a lower bound, as {untimed} run{'s were' if untimed != 1 else ' was'} resumed "
            "from checkpoints that did not time the sessions before them"
        )
    return [line + "."]


def _steps_text(sweep: SweepRuns) -> str:
    steps = sorted({r.env_steps for r in sweep.runs})
    return " or ".join(f"{s:,}" for s in steps)


def _env_table(
    sweep: SweepRuns,
    cells: Cells,
    baselines: dict[str, str | None],
    env: str,
    threshold: float | None,
    given: float | None,
    versus: str = BASELINE_ARM,
) -> list[str]:
    compare = any(baselines.values())
    head = ["arm", "runs", "final score IQM", "AUC IQM"]
    if threshold is not None:
        head.append(f"steps to {threshold:g}")
    if compare:
        head += [f"P(> {versus}), final", f"P(> {versus}), AUC"]
    head.append("IS weight")
    lines = [f"## {env_label(sweep.runs, env)}", ""]
    games = env_games(sweep.runs, env)
    if len(games) > 1:
        lines += [
            f"Its runs played {len(games)} releases of the game ({', '.join(games)}): their "
            "scores are not all of one game.",
            "",
        ]
    lines.append(table_row(head))
    lines.append("|---|" + "--:|" * (len(head) - 1))
    for arm in sweep.arms:
        runs = cells[(env, arm)]
        if not runs:
            lines.append(table_row([arm, "0"] + ["n/a"] * (len(head) - 2)))
            continue
        row = [arm, str(len(runs))]
        for metric in METRICS:
            values = by_seed(runs, metric)
            row.append(iqm_interval(np.array(list(values.values()))).format(1) if values else "n/a")
        if threshold is not None:
            row.append(_steps_cell([r.steps_to_threshold for r in runs]))
        if compare:
            base = cells.get((env, baselines[arm])) if baselines.get(arm) else None
            for metric in METRICS:
                row.append(
                    "n/a" if base is None
                    else _improvement_cell(by_seed(runs, metric), by_seed(base, metric))
                )  # fmt: skip
        row.append(is_weight_cell(runs))
        lines.append(table_row(row))
    lines.append("")
    lines += few_runs_warning({arm: len(cells[(env, arm)]) for arm in sweep.arms})
    if threshold is not None:
        source = (
            "given with `--threshold`" if given is not None
            else f"gymnasium's reward threshold for {env}"
        )  # fmt: skip
        lines += [
            f"Steps to {threshold:g} ({source}): the first env step at which the run's evaluation "
            "return reaches it; median over seeds, a seed that never reaches it counting as later "
            'than any that does ("not reached" when half or more never do); (reached/runs).',
            "",
        ]
    return lines


def _across_games_table(
    sweep: SweepRuns,
    cells: Cells,
    baselines: dict[str, str | None],
    norm: Normalization,
    versus: str = BASELINE_ARM,
) -> list[str]:
    n = len(sweep.envs)
    if norm.kind == "human":
        title = f"## Human-normalised scores ({n} game{'s' * (n > 1)})"
        scale = (
            "(x - random) / (human - random) with the standard random and human reference "
            "scores, for the final score and the AUC alike"
        )
    else:
        title = f"## Across games: min-max normalised scores ({n} games)"
        scale = (
            "(x - lo) / (hi - lo) per game and metric, lo and hi the lowest and highest value of "
            "any run of any arm on that game in this sweep (no reference scores exist for these "
            "games; this gives every game the same weight, and compares the arms of this report, "
            "not numbers across reports)"
        )
    # A game without a finished run yet (a sweep under way) is left out, not a pool of none.
    played = [env for env in sweep.envs if any(cells[(env, arm)] for arm in sweep.arms)]
    notes = [
        *(f"{env} is left out: it has no finished run yet." for env in sweep.envs
          if env not in played),
        *norm.notes,
    ]  # fmt: skip
    lines = [
        title,
        "",
        f"Scale: {scale}. Aggregates pool seeds x games, resampling seeds within each game; only "
        f"seeds finished on every game are used, and P(> {versus}) pairs them across games.",
        "",
        *[f"- {note}" for note in notes],
        *([""] if notes else []),
    ]
    matrices = {
        (arm, metric): normalized_matrix(cells, norm, norm.envs(metric, played), arm, metric)
        for arm in sweep.arms
        for metric in METRICS
    }
    compare = any(baselines.values())
    head = ["arm", "seeds", "final score IQM", "AUC IQM"]
    if compare:
        head += [f"P(> {versus}), final", f"P(> {versus}), AUC"]
    lines += [table_row(head), "|---|" + "--:|" * (len(head) - 1)]
    for arm in sweep.arms:
        finals = matrices[(arm, "final")]
        row = [arm, str(len(finals))]
        for metric in METRICS:
            matrix = matrices[(arm, metric)]
            row.append(iqm_interval(np.stack(list(matrix.values()))).format(2) if matrix else "n/a")
        if compare:
            base = baselines.get(arm)
            for metric in METRICS:
                row.append(
                    "n/a" if base is None
                    else _improvement_cell(matrices[(arm, metric)], matrices[(base, metric)])
                )  # fmt: skip
        lines.append(table_row(row))
    lines.append("")
    lines += few_runs_warning({arm: len(matrices[(arm, "final")]) for arm in sweep.arms}, "seeds")
    return lines


def _improvement_cell(x: dict[int, Any], y: dict[int, Any]) -> str:
    """``P [low, high] (n pairs)`` over the seeds both have; ``n/a`` without a pair."""
    seeds = sorted(set(x) & set(y))
    if not seeds:
        return "n/a"
    a, b = np.array([x[s] for s in seeds]), np.array([y[s] for s in seeds])
    return f"{improvement(a, b).format(2)} ({len(seeds)} pair{'s' * (len(seeds) > 1)})"


def _training_returns_table(sweep: SweepRuns, cells: Cells) -> list[str]:
    """The runs' training returns as published MinAtar curves measure them, for comparison with
    them (docs/results/literature.md): mean (sd) over seeds."""

    def mean_sd(values: list[float | None]) -> str:
        got = [v for v in values if v is not None]
        if not got:
            return "n/a"
        sd = f" ({np.std(got, ddof=1):.2f})" if len(got) > 1 else ""
        return f"{np.mean(got):.2f}{sd}"

    lines = [
        "## Training returns, as the literature reports them",
        "",
        "Returns of the training episodes (under exploration), beside the evaluation scores above: "
        f"EMA, a moving average over episodes (`avg <- {TRAIN_EMA_DECAY} avg + "
        f"{1 - TRAIN_EMA_DECAY:.2f} G` from 0, MinAtar's `examples/dqn.py`) after the run's last "
        f"episode (reducible-loss's final scores); last {TRAIN_LAST_EPISODES}: the mean of the "
        f"last {TRAIN_LAST_EPISODES} episodes (the MinAtar paper's curves). Mean (sd) over seeds.",
        "",
        "| env | arm | runs | EMA | last 100 |",
        "|---|---|--:|--:|--:|",
    ]
    for env in sweep.envs:
        for arm in sweep.arms:
            runs = cells[(env, arm)]
            if not runs:
                continue
            ema = mean_sd([r.train_ema for r in runs])
            last = mean_sd([r.train_last100 for r in runs])
            lines.append(f"| {cell(env)} | {cell(arm)} | {len(runs)} | {ema} | {last} |")
    lines.append("")
    return lines


def _published_table(sweep: SweepRuns, cells: Cells, points: Sequence[Point]) -> list[str]:
    """Each env's published values beside the runs' EMA at the same step: the last published
    step within the env's runs (mean (sd) over seeds, and how many)."""

    def value_cells(mean: float, sd: float | None, n: int | str) -> str:  # two cells
        return f"{mean:.2f}" + ("" if sd is None else f" ({sd:.2f})") + f" | {n}"

    lines = [
        "## Beside the published curves",
        "",
        "The training-return EMA (as above) at the last published step within the runs, "
        "beside the published value there; mean (sd) over seeds. Where the published file says "
        "how often its source logged a curve, the runs are read the same way: what they would "
        "have logged at that cadence, averaged over the 50k-step bin ending at the step, one row "
        "per cadence (`per_dqn.sweeps.published.read_as_logged`). Training returns are measured "
        "under exploration, so each curve's exploration after its decay is named (the "
        "published file's, where it gives it). "
        f"![training return EMA against env steps, beside the published curves]({TRAINING_FILE}) "
        f"([SVG]({TRAINING_SVG})).",
        "",
        "| env | step | curve | exploration | EMA | seeds |",
        "|---|--:|---|---|--:|--:|",
    ]
    for env in sweep.envs:
        runs = [r for arm in sweep.arms for r in cells[(env, arm)]]
        if not runs:
            continue  # no run to read a step from, nor an EMA to set beside it
        _, here = in_reach(env, points, [r.run.env_steps for r in runs])
        if not here:
            continue
        step = max(p.step for p in here)
        for p in here:
            if p.step == step:
                seeds = p.seeds if p.seeds is not None else "?"
                lines.append(f"| {cell(env)} | {step:,} | {cell(p.label)} (published) | "
                             f"{cell(p.exploration or 'not given')} | "
                             f"{value_cells(p.mean, p.sd, seeds)} |")  # fmt: skip
        # Each arm read as each published curve at this step was logged (``read_as_logged``).
        cadences = sorted({p.logged_every for p in here if p.step == step},
                          key=lambda every: (every is not None, every or 0))  # fmt: skip
        for arm in sweep.arms:
            for every in cadences:
                values = [read_as_logged(r.run.train_returns, [step], every)[0]
                          for r in cells[(env, arm)]]  # fmt: skip
                if not values:
                    continue
                sd = float(np.std(values, ddof=1)) if len(values) > 1 else None
                kinds = sorted({r.run.exploration or "not known" for r in cells[(env, arm)]})
                values_text = value_cells(float(np.mean(values)), sd, len(values))
                name = arm if every is None else f"{arm}, read as logged every {every:,}"
                explored = cell("; ".join(kinds))
                lines.append(f"| {cell(env)} | {step:,} | {cell(name)} | {explored} | "
                             f"{values_text} |")  # fmt: skip
    lines.append("")
    return lines


def is_weight_cell(runs: Sequence[RunMetrics]) -> str:
    """The mean over seeds of each run's mean logged IS weight (3 significant digits); ``-`` if
    every one is exactly 1 (uniform sampling: no IS correction), ``n/a`` if none was logged."""
    weights = [r.run.is_weight_mean for r in runs if r.run.is_weight_mean is not None]
    if not weights:
        return "n/a"
    if all(w == 1.0 for w in weights):
        return "-"
    return f"{sum(weights) / len(weights):.3g}"


def _sensitivity_table(sweep: SweepRuns, measured: Sequence[RunMetrics], key: str) -> list[str]:
    lines = [
        f"## Sensitivity to `{key}`",
        "",
        f"Each row holds everything but `{key}` fixed (kind, the arm's settings, the other grid "
        f"values). IQM over seeds [95% CI]. Figure: [{SENSITIVITY_FILE}]({SENSITIVITY_FILE}) "
        f"([SVG]({SENSITIVITY_SVG})).",
        "",
    ]
    for env in sweep.envs:
        finals = sensitivity(measured, env, key, "final")
        aucs = sensitivity(measured, env, key, "auc")
        if not finals:
            continue
        lines += [f"### {env_label(sweep.runs, env)}", "",
                  f"| series | {cell(key)} | runs | final score IQM | AUC IQM |",
                  "|---|--:|--:|--:|--:|"]  # fmt: skip
        for name, points in finals.items():
            auc_at = {x: interval for x, interval, _ in aucs.get(name, [])}
            for x, interval, n in points:
                auc = auc_at[x].format(1) if x in auc_at else "n/a"
                lines.append(f"| {cell(name)} | {x:g} | {n} | {interval.format(1)} | {auc} |")
        lines.append("")
    return lines
