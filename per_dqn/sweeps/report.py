"""Ablation reports, rebuilt from the run dirs alone: ``report.md``, ``curves.png``, ``scores.csv``.

A sweep dir (see ``per_dqn.sweeps.ablate``) holds one normal run dir per env x arm x seed, each
with the ``summary.json`` and TensorBoard event file that ``Trainer.run`` writes, and
``sweep.json`` naming the runs the sweep planned. Everything here is read back from those files
(by ``per_dqn.sweeps.runs``), so a report can be rewritten at any time (``per-dqn report DIR``),
also from a sweep that is still running or was interrupted: it says how many runs it used and
which are missing. A single run's dir is refused: a report compares arms over seeds.

What is reported, per env and arm (Agarwal et al., 2021, "Deep RL at the edge of the statistical
precipice"):

- the *score* of a run is the mean return of its final greedy evaluation
  (``final_eval_return_mean``); IQM, mean and median of the scores over seeds, each with a 95%
  stratified bootstrap confidence interval (``per_dqn.sweeps.stats``);
- *steps to threshold*: the first env step at which the run's ``eval/return_mean`` curve reaches
  gymnasium's ``reward_threshold`` for the env (CartPole-v1: 475), as a median over seeds in
  which a seed that never reaches it counts as later than every seed that does;
- P(arm > uniform): over paired seeds, the share on which the arm's score beats uniform's, ties
  counting one half, with a paired bootstrap interval;
- for Atari, the same aggregates on human-normalised scores pooled over the games
  (``per_dqn.atari_scores``).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from per_dqn import atari_scores
from per_dqn import metrics as m
from per_dqn.sweeps import stats
from per_dqn.sweeps.runs import Run, SweepRuns, collect

REPORT_FILE = "report.md"
CURVES_FILE = "curves.png"
SCORES_FILE = "scores.csv"
BASELINE_ARM = "uniform"
# The bootstrap is seeded so that the same run dirs always give the same report, byte for byte.
BOOTSTRAP_REPS = 2000
BOOTSTRAP_SEED = 0
CONFIDENCE = 0.95
SCORES_COLUMNS = (
    "env_id", "arm", "seed", "final_return", "final_return_std", "final_eval_episodes",
    "steps_to_threshold", "human_normalized", "env_steps", "wall_seconds", "run_dir",
)  # fmt: skip
_ARM_COLORS = {"uniform": "#4c72b0", "proportional": "#dd8452", "rank": "#55a868"}


# --- thresholds -----------------------------------------------------------------------------------


def reward_threshold(env_id: str) -> float | None:
    """Gymnasium's ``reward_threshold`` for ``env_id`` (CartPole-v1: 475), None if it has none."""
    import gymnasium as gym

    try:
        threshold = gym.spec(env_id).reward_threshold
    except gym.error.Error:
        return None
    return None if threshold is None else float(threshold)


def steps_to_threshold(curve: Sequence[tuple[int, float]], threshold: float) -> int | None:
    """The first env step whose value is >= ``threshold``; None if the curve never gets there."""
    for step, value in curve:
        if value >= threshold:
            return step
    return None


def censored_median(values: Sequence[int | None]) -> float:
    """Median of step counts where None means "never": it ranks after every number.

    ``inf`` when the median position falls on a "never" (half or more never got there), so
    the seeds that never reach a threshold cannot flatter the arm.
    """
    if not values:
        raise ValueError("values must not be empty")
    ordered = sorted(math.inf if v is None else float(v) for v in values)
    n = len(ordered)
    low, high = ordered[(n - 1) // 2], ordered[n // 2]
    return (low + high) / 2 if math.isfinite(high) else math.inf


# --- statistics -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval."""

    value: float
    low: float
    high: float

    def format(self, digits: int) -> str:
        """``value [low, high]`` with ``digits`` decimals."""
        return f"{self.value:,.{digits}f} [{self.low:,.{digits}f}, {self.high:,.{digits}f}]"


def aggregate(scores: np.ndarray) -> dict[str, Interval]:
    """IQM, mean and median of ``(runs, tasks)`` scores, each with its stratified bootstrap CI."""
    out = {}
    for name, statistic in stats.AGGREGATES.items():
        low, high = stats.stratified_bootstrap_ci(
            scores, statistic, reps=BOOTSTRAP_REPS, confidence=CONFIDENCE, seed=BOOTSTRAP_SEED
        )
        out[name] = Interval(statistic(scores), low, high)
    return out


def improvement(x: np.ndarray, y: np.ndarray) -> Interval:
    """P(X > Y) over paired seeds (rows), with its paired bootstrap CI."""
    low, high = stats.paired_bootstrap_ci(
        x, y, reps=BOOTSTRAP_REPS, confidence=CONFIDENCE, seed=BOOTSTRAP_SEED
    )
    return Interval(stats.paired_probability_of_improvement(x, y), low, high)


def _paired(a: dict[int, float], b: dict[int, float]) -> tuple[np.ndarray, np.ndarray]:
    seeds = sorted(set(a) & set(b))
    return np.array([a[s] for s in seeds]), np.array([b[s] for s in seeds])


def _human_normalized_matrix(sweep: SweepRuns, arm: str) -> dict[int, np.ndarray]:
    """Seed -> human-normalised scores over every env, for seeds finished on all of them."""
    per_env = {env: sweep.scores(env, arm) for env in sweep.envs}
    seeds = set.intersection(*(set(s) for s in per_env.values()))
    return {
        seed: np.array([atari_scores.human_normalized(env, per_env[env][seed]) for env in per_env])
        for seed in sorted(seeds)
    }


# --- writing --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportFiles:
    """Where a report was written."""

    report: Path
    curves: Path
    scores: Path


def write_report(out: Path) -> ReportFiles:
    """Reads the sweep dir ``out`` and writes ``report.md``, ``curves.png`` and ``scores.csv``.

    Raises:
        ValueError: see ``collect``.
    """
    sweep = collect(out)
    thresholds = {env: reward_threshold(env) for env in sweep.envs}
    files = ReportFiles(out / REPORT_FILE, out / CURVES_FILE, out / SCORES_FILE)
    write_scores_csv(sweep, thresholds, files.scores)
    plot_curves(sweep, thresholds, files.curves)
    files.report.write_text(render_markdown(sweep, thresholds), encoding="utf-8")
    return files


def write_scores_csv(sweep: SweepRuns, thresholds: dict[str, float | None], path: Path) -> None:
    """One row per finished run: its score, steps to threshold and human-normalised score."""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(SCORES_COLUMNS)
        for r in _ordered(sweep):
            threshold = thresholds.get(r.env_id)
            steps = None if threshold is None else steps_to_threshold(r.curve, threshold)
            hns = atari_scores.human_normalized(r.env_id, r.score)
            writer.writerow(
                [r.env_id, r.arm, r.seed, repr(r.score), repr(r.score_std), r.eval_episodes,
                 "" if steps is None else steps, "" if hns is None else repr(hns),
                 r.env_steps, f"{r.wall_seconds:.1f}", r.path]
            )  # fmt: skip


def _ordered(sweep: SweepRuns) -> list[Run]:
    env_rank = {e: i for i, e in enumerate(sweep.envs)}
    arm_rank = {a: i for i, a in enumerate(sweep.arms)}
    return sorted(sweep.runs, key=lambda r: (env_rank[r.env_id], arm_rank[r.arm], r.seed))


def _seed_range(seeds: Sequence[int]) -> str:
    seeds = sorted(seeds)
    if seeds == list(range(seeds[0], seeds[-1] + 1)) and len(seeds) > 2:
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _steps_cell(steps: list[int | None]) -> str:
    reached = sum(s is not None for s in steps)
    median = censored_median(steps)
    where = f"{median:,.0f}" if math.isfinite(median) else "not reached"
    return f"{where} ({reached}/{len(steps)})"


def render_markdown(sweep: SweepRuns, thresholds: dict[str, float | None]) -> str:
    """The report: what was run, which runs are missing, one table per env, the curves."""
    record = sweep.record or {}
    name = record.get("config_name") or "sweep"
    seeds = sorted({r.seed for r in sweep.runs})
    lines = [f"# Ablation report: {name}", ""]
    if record:
        overrides = record.get("overrides") or []
        lines.append(
            f"- Sweep: config `{record.get('config')}`, overrides "
            + (", ".join(f"`{o}`" for o in overrides) if overrides else "none")
            + f"; {_steps_text(sweep)} env steps per run."
        )
        seeds = list(record.get("seeds", seeds))
    lines += [
        f"- Arms: {', '.join(sweep.arms)}; seeds {_seed_range(seeds)}, paired (seed s gives every "
        "arm the same network initialisation and env seeds); envs: "
        + ", ".join(sweep.envs) + ".",
        f"- Runs used: {len(sweep.runs)}"
        + (f" of {sweep.expected} planned" if sweep.expected is not None else " (no sweep.json)")
        + "; missing: " + (", ".join(sweep.missing) if sweep.missing else "none") + ".",
        "",
        "Score of a run: the mean return of its final greedy evaluation, at the last env step. "
        "Brackets: 95% stratified bootstrap confidence intervals over seeds "
        f"({BOOTSTRAP_REPS:,} resamples, percentile method). "
        f"P(> {BASELINE_ARM}): the share of paired seeds on which the arm's score beats "
        f"{BASELINE_ARM}'s (ties count 1/2), with a paired bootstrap interval.",
        "",
    ]  # fmt: skip
    for env in sweep.envs:
        lines += _env_table(sweep, env, thresholds.get(env))
    if all(atari_scores.game_name(env) is not None for env in sweep.envs):
        lines += _human_normalized_table(sweep)
    lines += [f"![eval return against env steps]({CURVES_FILE})", ""]
    return "\n".join(lines)


def _steps_text(sweep: SweepRuns) -> str:
    steps = sorted({r.env_steps for r in sweep.runs})
    return " or ".join(f"{s:,}" for s in steps)


def _env_table(sweep: SweepRuns, env: str, threshold: float | None) -> list[str]:
    baseline = sweep.scores(env, BASELINE_ARM)
    compare = bool(baseline) and len(sweep.arms) > 1
    head = ["arm", "runs", "IQM", "mean", "median"]
    if threshold is not None:
        head.append(f"steps to {threshold:g}")
    if compare:
        head.append(f"P(> {BASELINE_ARM})")
    lines = [f"## {env}", "", "| " + " | ".join(head) + " |"]
    lines.append("|---|" + "--:|" * (len(head) - 1))
    for arm in sweep.arms:
        scores = sweep.scores(env, arm)
        if not scores:
            lines.append("| " + " | ".join([arm, "0"] + ["n/a"] * (len(head) - 2)) + " |")
            continue
        agg = aggregate(np.array(list(scores.values())))
        row = [arm, str(len(scores))] + [agg[k].format(1) for k in ("iqm", "mean", "median")]
        if threshold is not None:
            runs = [r for r in sweep.runs if r.env_id == env and r.arm == arm]
            row.append(_steps_cell([steps_to_threshold(r.curve, threshold) for r in runs]))
        if compare:
            x, y = _paired(scores, baseline)
            if arm == BASELINE_ARM or x.size == 0:
                row.append("n/a")
            else:
                row.append(f"{improvement(x, y).format(2)} ({x.size} pairs)")
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    if threshold is not None:
        lines += [
            f"Steps to {threshold:g}: the first env step at which the run's evaluation return "
            f"(`{m.EVAL_RETURN_MEAN}`) reaches gymnasium's reward threshold for {env}; median "
            "over seeds, a seed that never reaches it counting as later than any that does "
            '("not reached" when half or more never do); (reached/runs).',
            "",
        ]
    return lines


def _human_normalized_table(sweep: SweepRuns) -> list[str]:
    lines = [
        f"## Human-normalised scores ({len(sweep.envs)} game{'s' * (len(sweep.envs) > 1)})",
        "",
        "(score - random) / (human - random) with the standard random and human reference "
        "scores; aggregates pool seeds x games, resampling seeds within each game. Only seeds "
        "finished on every game are used.",
        "",
    ]
    baseline = _human_normalized_matrix(sweep, BASELINE_ARM) if BASELINE_ARM in sweep.arms else {}
    head = ["arm", "seeds", "IQM", "mean", "median"]
    if baseline:
        head.append(f"P(> {BASELINE_ARM})")
    lines += ["| " + " | ".join(head) + " |", "|---|" + "--:|" * (len(head) - 1)]
    for arm in sweep.arms:
        matrix = _human_normalized_matrix(sweep, arm)
        if not matrix:
            lines.append("| " + " | ".join([arm, "0"] + ["n/a"] * (len(head) - 2)) + " |")
            continue
        agg = aggregate(np.stack(list(matrix.values())))
        row = [arm, str(len(matrix))] + [agg[k].format(2) for k in ("iqm", "mean", "median")]
        if baseline:
            seeds = sorted(set(matrix) & set(baseline))
            if arm == BASELINE_ARM or not seeds:
                row.append("n/a")
            else:
                x = np.stack([matrix[s] for s in seeds])
                y = np.stack([baseline[s] for s in seeds])
                row.append(f"{improvement(x, y).format(2)} ({len(seeds)} pairs)")
        lines.append("| " + " | ".join(row) + " |")
    return [*lines, ""]


def curve_band(
    curves: Sequence[Sequence[tuple[int, float]]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Steps, IQM over seeds and its 95% bootstrap band, at each step any of the curves has.

    Returns:
        ``(steps, iqm, low, high)``; each step aggregates the curves that have a point there.
    """
    by_step: dict[int, list[float]] = {}
    for curve in curves:
        for step, value in curve:
            by_step.setdefault(step, []).append(value)
    steps = np.array(sorted(by_step), dtype=np.int64)
    centre, low, high = (np.empty(len(steps)) for _ in range(3))
    for i, step in enumerate(steps):
        values = np.array(by_step[int(step)])
        centre[i] = stats.iqm(values)
        low[i], high[i] = stats.stratified_bootstrap_ci(
            values, stats.iqm, reps=BOOTSTRAP_REPS, confidence=CONFIDENCE, seed=BOOTSTRAP_SEED
        )
    return steps, centre, low, high


def plot_curves(sweep: SweepRuns, thresholds: dict[str, float | None], path: Path) -> None:
    """Evaluation return against env steps: one panel per env, one line per arm (IQM over
    seeds) with its 95% stratified bootstrap band; the reward threshold dashed."""
    # Imported here, and without pyplot: a report needs no GUI backend and no global figure
    # state, and the rest of the package never needs matplotlib at all.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4 * len(sweep.envs), 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(sweep.envs), squeeze=False)[0]
    for ax, env in zip(axes, sweep.envs, strict=True):
        for k, arm in enumerate(sweep.arms):
            curves = [r.curve for r in sweep.runs if r.env_id == env and r.arm == arm and r.curve]
            if not curves:
                continue
            steps, centre, low, high = curve_band(curves)
            color = _ARM_COLORS.get(arm, f"C{k}")
            ax.plot(steps, centre, marker="o", markersize=3, color=color,
                    label=f"{arm} ({len(curves)} seeds)")  # fmt: skip
            ax.fill_between(steps, low, high, color=color, alpha=0.2, linewidth=0)
        threshold = thresholds.get(env)
        if threshold is not None:
            ax.axhline(threshold, color="black", linestyle="--", linewidth=0.8,
                       label=f"reward threshold {threshold:g}")  # fmt: skip
        ax.set_title(env)
        ax.set_xlabel("env steps")
        ax.set_ylabel("evaluation return (IQM over seeds, 95% CI)")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
    fig.savefig(path, dpi=110)
