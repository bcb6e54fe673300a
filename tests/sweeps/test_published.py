"""Published training curves beside a sweep's runs (``per-dqn report --published``): the file
read or refused with one line, each run's EMA read at the published steps by hand, the table
and the figure in the report, and the shipped file of reducible-loss's curves."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_report import fake_run, sweep_record
from typer.testing import CliRunner

from per_dqn.cli import app
from per_dqn.logs import metrics, tags
from per_dqn.rundir import fileio
from per_dqn.sweeps import figures, measure, published, report, runs, wording

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "docs" / "results" / "published" / "reducible_loss_minatar.csv"
ENV = "MinAtar/Breakout-v1"
runner = CliRunner()


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_file_is_read_in_order_with_comments_and_optional_columns(tmp_path):
    path = write(tmp_path / "p.csv", "# a source\nenv_id,label,step,mean,sd,seeds\n"
                 f"{ENV},DQN,0,0.0,,\n\n{ENV},DQN,50000,1.5,0.25,5\n"
                 f"# between rows\nMinAtar/Asterix-v1,PER,50000,-2,0,3\n")  # fmt: skip
    assert published.read_published(path) == (
        published.Point(ENV, "DQN", 0, 0.0, None, None),
        published.Point(ENV, "DQN", 50_000, 1.5, 0.25, 5),
        published.Point("MinAtar/Asterix-v1", "PER", 50_000, -2.0, 0.0, 3),
    )
    # sd and seeds may be left out as columns too.
    path = write(tmp_path / "q.csv", f"label,env_id,mean,step\nDQN,{ENV},3,100\n")
    assert published.read_published(path) == (published.Point(ENV, "DQN", 100, 3.0),)


@pytest.mark.parametrize(
    "text, line",
    [
        ("", "no header and no rows"),
        (
            "env_id,label,mean\n",
            "line 1: no column 'step' (columns: env_id, label, step, mean, sd, seeds, exploration, "
            "logged_every)",
        ),
        (f"env_id,label,step,mean\n{ENV},DQN,1e5,1\n", "line 2: step: '1e5' is not a whole number"),
        (f"env_id,label,step,mean\n{ENV},DQN,-1,1\n", "line 2: step: '-1' is out of range"),
        (f"env_id,label,step,mean\n{ENV},DQN,1,nan\n", "line 2: mean: 'nan' is out of range"),
        (f"env_id,label,step,mean\n{ENV},DQN,1,x\n", "line 2: mean: 'x' is not a number"),
        (f"env_id,label,step,mean,sd\n{ENV},DQN,1,1,-0.5\n", "line 2: sd: '-0.5' is out of range"),
        (f"env_id,label,step,mean\n{ENV},,1,1\n", "line 2: label: '' is not a name"),
        ("env_id,label,step,mean\n,DQN,1,1\n", "line 2: env_id: '' is not a name"),
        (
            f"env_id,label,step,mean,exploration\n{ENV},DQN,1,1,eps\x07\n",
            "line 2: exploration: 'eps\\x07' is not a name",
        ),
        (
            f"env_id,label,step,mean,seeds\n{ENV},DQN,1,1,2.5\n",
            "line 2: seeds: '2.5' is not a whole number",
        ),
        (
            f"env_id,label,step,mean,logged_every\n{ENV},DQN,1,1,x\n",
            "line 2: logged_every: 'x' is not a whole number",
        ),
        (f"env_id,label,step,mean\n{ENV},DQN,1\n", "line 2: 3 values for 4 columns"),
        (
            f"env_id,label,step,mean\n{ENV},DQN,1,1\n{ENV},DQN,1,2\n",
            "line 3: a second value for 'DQN' on MinAtar/Breakout-v1 at step 1",
        ),
    ],
)
def test_a_bad_file_is_one_line_naming_where(tmp_path, text, line):
    path = write(tmp_path / "p.csv", text)
    with pytest.raises(ValueError) as info:
        published.read_published(path)
    assert str(info.value) == f"--published {path}: {line}"


def test_a_missing_or_binary_file_is_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"^--published .*nope\.csv: no such file$"):
        published.read_published(tmp_path / "nope.csv")
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ValueError, match=r"cannot be read \(UnicodeDecodeError\)$"):
        published.read_published(tmp_path / "bin.csv")


def test_a_file_of_exactly_the_size_limit_is_read_and_one_byte_more_is_refused(tmp_path):
    """The limit is the largest size read, not the first refused (a mutation run found the
    bound unchecked): a 10 MiB file, a comment padding it, is read; 10 MiB and a byte is not."""
    body = f"env_id,label,step,mean\n{ENV},DQN,0,1.5\n"
    pad = published.MAX_BYTES - len(body) - 2  # "#" and its newline
    path = write(tmp_path / "limit.csv", "#" + "x" * pad + "\n" + body)
    assert path.stat().st_size == published.MAX_BYTES
    assert published.read_published(path) == (published.Point(ENV, "DQN", 0, 1.5),)
    write(path, "#" + "x" * (pad + 1) + "\n" + body)
    with pytest.raises(ValueError, match=r"^--published .*limit\.csv: larger than 10 MB$"):
        published.read_published(path)


def test_a_file_is_read_as_utf_8_whatever_the_locale(tmp_path):
    """A label or comment outside ASCII (an em dash, an author's accent) reads the same under a
    locale whose codec is ASCII: in a fresh interpreter with ``LC_ALL=C``, UTF-8 mode and locale
    coercion off (a mutation run found the file read with the locale's codec unseen)."""
    path = write(tmp_path / "p.csv", f"# Sujit et al. — reducible loss\nenv_id,label,step,mean\n"
                 f"{ENV},ReLo — Pérez,0,1.5\n")  # fmt: skip
    code = (
        "import sys, locale; from pathlib import Path; from per_dqn.sweeps import published;"
        "assert locale.getpreferredencoding(False).lower() in {'ascii', 'ansi_x3.4-1968'};"
        "print(published.read_published(Path(sys.argv[1]))[0].label.encode('unicode_escape'))"
    )
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, env=env, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "b'ReLo \\\\u2014 P\\\\xe9rez'"


def test_the_ema_at_given_steps_by_hand():
    """The EMA after the last episode that ended at or before each step, 0 before the first:
    episodes of 10, 20, 0 ending at 10k, 40k, 60k give 0.1, 0.299, 0.29601."""
    returns = [(10_000, 10.0), (40_000, 20.0), (60_000, 0.0)]
    got = published.ema_at(returns, [0, 9_999, 10_000, 50_000, 60_000, 100_000])
    assert got == pytest.approx([0.0, 0.0, 0.1, 0.299, 0.29601, 0.29601])
    assert published.ema_at([], [0, 50_000]) == [0.0, 0.0]


def test_the_runs_are_read_at_the_published_steps_within_reach_or_every_50k():
    """Within reach: up to the fewest env steps any run of the env trained."""
    points = [published.Point(ENV, "DQN", s, 1.0) for s in (0, 50_000, 100_000, 150_000)]
    last, reached = published.in_reach(ENV, points, [130_000, 120_000])
    assert (last, reached) == (120_000, points[:3])
    assert published.steps_for(reached, last) == [0, 50_000, 100_000]
    last, reached = published.in_reach("MinAtar/Asterix-v1", points, [120_000])
    assert (last, reached) == (120_000, [])
    assert published.steps_for(reached, last) == [0, 50_000, 100_000]
    assert published.steps_for([], 40_000) == [0]
    assert published.in_reach(ENV, points, []) == (0, points[:1])


def breakout_sweep(out: Path) -> Path:
    """Two uniform runs of 100k steps: seed 0's episodes return 1, seed 1's 3, one every 1,000
    steps from step 1,000."""
    planned = []
    for seed, g in enumerate((1.0, 3.0)):
        rel = f"uniform/s{seed}"
        planned.append((ENV, "uniform", seed, rel))
        fake_run(out, rel, ENV, "uniform", seed, 5.0, [(50_000, 4.0), (100_000, 5.0)])
        logger = metrics.TensorBoardLogger(out / rel)
        for i in range(100):
            logger.scalars({tags.EPISODE_RETURN: g}, (i + 1) * 1000)
        logger.close()
    fileio.write_json(out / "sweep.json", sweep_record(planned, [ENV], ["uniform"]))
    return out


def test_the_report_sets_the_published_value_beside_the_runs_at_the_last_common_step(tmp_path):
    """At 50k steps (the last published step within the runs' 100k) each run has had 50
    episodes of constant return G: EMA G (1 - 0.99 ** 50); the table gives their mean (sd)."""
    out = breakout_sweep(tmp_path / "sweep")
    path = write(tmp_path / "p.csv", "env_id,label,step,mean,sd,seeds\n"
                 f"{ENV},src DQN,50000,2.5,0.5,5\n{ENV},src DQN,200000,9,1,5\n"
                 f"MinAtar/Asterix-v1,src DQN,50000,7,1,5\n")  # fmt: skip
    result = runner.invoke(app, ["report", str(out), "--published", str(path)])
    assert result.exit_code == 0, result.output
    text = (out / "report.md").read_text()
    emas = [g * (1 - 0.99**50) for g in (1.0, 3.0)]
    assert f"| {ENV} | 50,000 | src DQN (published) | not given | 2.50 (0.50) | 5 |" in text
    ours = f"{np.mean(emas):.2f} ({np.std(emas, ddof=1):.2f})"
    # the fake runs have no config.yaml to say how they explored
    assert f"| {ENV} | 50,000 | uniform | not known | {ours} | 2 |" in text
    assert "Asterix" not in text  # a published env the sweep does not have is left out
    with Image.open(out / "training.png") as image:
        assert image.format == "PNG" and image.width > 1000
    assert (out / "training.svg").read_bytes().startswith(b"<?xml")
    assert "and as PNG and SVG: curves, profiles, training\n" in result.output


def test_the_source_s_logger_is_replayed_by_hand():
    """reducible-loss's ``utils.Every(5000)``, asked at each episode end: it logs the first
    episode (mark 10), then the first end at or past mark + 5000, moving the mark by 5000 once a
    log, so after a long episode it logs at each next end while the mark catches up (marks
    5010, 10010, 15010, 20010, 25010)."""
    returns = [(10, 1.0), (5_000, 2.0), (12_000, 3.0), (40_000, 4.0), (40_100, 5.0),
               (40_200, 6.0), (40_300, 7.0)]  # fmt: skip
    ema = [value for _, value in published.train_return_ema(returns)]
    got = published.logged(returns, 5_000)
    assert [s for s, _ in got] == [10, 12_000, 40_000, 40_100, 40_200, 40_300]
    assert [v for _, v in got] == [ema[0], *ema[2:]]
    assert published.logged([], 5_000) == []


def test_logged_points_are_binned_as_the_source_bins_them_by_hand():
    """0 at step 0; the mean of the points in (x - 50k, x]; an empty bin linearly between its
    neighbours; the last value held after the last point; a last partial bin past the steps
    asked for dropped, as the source's borders stop at the last point; a step off the 50k grid
    refused."""
    points = [(10, 1.0), (50_000, 3.0), (50_001, 10.0), (120_000, 20.0), (130_000, 30.0)]
    steps = [0, 50_000, 100_000, 150_000, 200_000, 250_000]
    # (0, 50k]: 1, 3 -> 2; (50k, 100k]: 10; (100k, 150k]: 20, 30 -> 25; then held.
    assert published.binned(points, steps) == [0.0, 2.0, 10.0, 25.0, 25.0, 25.0]
    # (50k, 100k] empty: halfway between 2 and 25.
    assert published.binned([(10, 1.0), (50_000, 3.0), (150_000, 25.0)],
                             [100_000]) == [13.5]  # fmt: skip
    # The source's borders for points up to 130k end at 100k: (100k, 150k] is not a bin.
    assert published.binned([(10, 1.0), (50_000, 3.0), (130_000, 25.0)],
                             [100_000]) == [2.0]  # fmt: skip
    with pytest.raises(ValueError, match="steps must be multiples of 50,000, got 75,000"):
        published.binned(points, [75_000])
    # Three empty bins between 2 (at 50k) and 26 (at 250k): a quarter of the way each.
    assert published.binned([(10, 1.0), (50_000, 3.0), (250_000, 26.0)],
                            [100_000, 150_000, 200_000]) == [8.0, 14.0, 20.0]  # fmt: skip
    # No points (a run with no episode yet): 0 wherever asked; nothing asked, nothing read.
    assert published.binned([], [0, 50_000, 100_000]) == [0.0, 0.0, 0.0]
    assert published.binned(points, []) == []


def test_a_run_is_read_as_each_published_curve_was_logged():
    """Episodes of return 1 ending every 1,000 steps from step 1,000: logged every 5k (marks
    1k, 6k, 11k, ...), the bin (50k, 100k] averages the EMA after episodes 51, 56, ..., 96;
    logged every 50k (marks 1k, 51k, 101k), it holds the one after episode 51; without a
    cadence, the EMA after episode 100 itself."""
    returns = [((i + 1) * 1_000, 1.0) for i in range(120)]

    def ema(n: int) -> float:  # after n episodes of return 1
        return 1 - 0.99**n

    five = published.read_as_logged(returns, [100_000], 5_000)[0]
    assert five == pytest.approx(np.mean([ema(n) for n in range(51, 97, 5)]))
    assert published.read_as_logged(returns, [100_000], 50_000) == [pytest.approx(ema(51))]
    assert published.read_as_logged(returns, [100_000], None) == [pytest.approx(ema(100))]


def test_the_report_reads_the_runs_once_per_published_cadence(tmp_path):
    """A published file giving two cadences at the step: each arm gets a row read each way."""
    out = breakout_sweep(tmp_path / "sweep")
    path = write(tmp_path / "p.csv", "env_id,label,step,mean,sd,seeds,logged_every\n"
                 f"{ENV},src DQN,50000,2.5,0.5,5,50000\n"
                 f"{ENV},src PER,50000,2,0.5,5,5000\n")  # fmt: skip
    result = runner.invoke(app, ["report", str(out), "--published", str(path)])
    assert result.exit_code == 0, result.output
    text = (out / "report.md").read_text()
    sweep = runs.collect(out)
    for every in (5_000, 50_000):
        values = [published.read_as_logged(r.train_returns, [50_000], every)[0]
                  for r in sweep.runs]  # fmt: skip
        ours = f"{np.mean(values):.2f} ({np.std(values, ddof=1):.2f})"
        assert (f"| {ENV} | 50,000 | uniform, read as logged every {every:,} | not known | "
                f"{ours} | 2 |") in text  # fmt: skip
    assert f"| {ENV} | 50,000 | uniform | " not in text


def test_logged_every_is_read_and_checked(tmp_path):
    path = write(tmp_path / "p.csv", "env_id,label,step,mean,logged_every\n"
                 f"{ENV},DQN,50000,1,5000\n{ENV},PER,50000,1,\n")  # fmt: skip
    assert [p.logged_every for p in published.read_published(path)] == [5_000, None]
    for bad in ("0", "-5", "1.5"):
        path = write(
            tmp_path / "p.csv", f"env_id,label,step,mean,logged_every\n{ENV},DQN,1,1,{bad}\n"
        )
        with pytest.raises(ValueError, match=f"line 2: logged_every: '{bad}' is "):
            published.read_published(path)


def with_an_env_not_run(out: Path) -> Path:
    """The sweep at ``out``, its record planning a SpaceInvaders run it never made."""
    record = json.loads((out / "sweep.json").read_text())
    record["envs"].append("MinAtar/SpaceInvaders-v1")
    record["runs"].append({"env_id": "MinAtar/SpaceInvaders-v1", "arm": "uniform", "seed": 0,
                           "run_dir": "space/uniform/s0"})  # fmt: skip
    fileio.write_json(out / "sweep.json", record)
    return out


def test_an_env_without_finished_runs_gets_no_published_row(tmp_path):
    """Pins a bug: a sweep under way whose SpaceInvaders pack had no finished run listed the
    published SpaceInvaders curves at step 0 with a mean of 0.00, as if they were compared."""
    out = with_an_env_not_run(breakout_sweep(tmp_path / "sweep"))
    path = write(tmp_path / "p.csv", "env_id,label,step,mean,sd,seeds\n"
                 f"{ENV},src DQN,50000,2.5,0.5,5\n"
                 "MinAtar/SpaceInvaders-v1,src DQN,0,0,0,5\n"
                 "MinAtar/SpaceInvaders-v1,src DQN,50000,20,1,5\n")  # fmt: skip
    result = runner.invoke(app, ["report", str(out), "--published", str(path)])
    assert result.exit_code == 0, result.output
    table = (out / "report.md").read_text().split("## Beside the published curves")[1]
    assert f"| {ENV} | 50,000 | src DQN (published) |" in table
    assert "SpaceInvaders" not in table


def test_an_env_without_finished_runs_gets_no_panel(tmp_path):
    """Pins empty panels: the figures of a sweep whose Asterix pack alone had finished drew
    Breakout and SpaceInvaders as panels with no line and made-up axes (-0.04 to 0.04). An env
    with no finished run now gets no panel; the report's "Runs used" line names its runs."""
    out = with_an_env_not_run(breakout_sweep(tmp_path / "sweep"))
    path = write(tmp_path / "p.csv", "env_id,label,step,mean,sd,seeds\n"
                 f"{ENV},src DQN,50000,2.5,0.5,5\n")  # fmt: skip
    sweep = runs.collect(out)
    assert sweep.envs == (ENV, "MinAtar/SpaceInvaders-v1")
    cells = measure.group_cells(sweep, [measure.measure(r, None) for r in sweep.runs])
    assert figures.drawn_envs(sweep, cells) == [ENV]
    for fig in (figures.plot_curves(sweep, cells, {}),
                figures.plot_training(sweep, cells, published.read_published(path))):  # fmt: skip
        assert [ax.get_title() for ax in fig.axes] == [f"{ENV} (2 seeds per arm)"]
    nothing = dataclasses.replace(sweep, runs=[])
    empty = measure.group_cells(nothing, [])
    assert figures.drawn_envs(nothing, empty) == [ENV, "MinAtar/SpaceInvaders-v1"]


def test_a_legend_too_wide_for_one_row_takes_more_rows_inside_the_figure(tmp_path):
    """Pins a clipped legend: the training figure of a one-env sweep set its entries in one row
    whatever their length, and the row, wider than the figure, lost its first and last entries
    at the edges (the Seaquest runs' figure: two arms and reducible-loss's two curves). Now the
    legend takes as many entries a row as fit, inside the figure and below the panel."""
    out = breakout_sweep(tmp_path / "sweep")
    long = "reducible-loss DQN on MinAtar 1.0.10 (5 seeds)"
    path = write(tmp_path / "p.csv", "env_id,label,step,mean,sd,seeds\n"
                 f"{ENV},{long},50000,2.5,0.5,5\n{ENV},{long} + PER,50000,2,0.5,5\n")  # fmt: skip
    sweep = runs.collect(out)
    cells = measure.group_cells(sweep, [measure.measure(r, None) for r in sweep.runs])
    fig = figures.plot_training(sweep, cells, published.read_published(path))
    fig.canvas.draw()
    (legend,) = fig.legends
    box = legend.get_window_extent()
    texts = legend.get_texts()
    assert [t.get_text() for t in texts] == ["uniform (this tool)", long, f"{long} + PER"]
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width
    assert box.y1 <= fig.axes[0].get_window_extent().y0
    assert len({round(t.get_window_extent().y0) for t in texts}) > 1  # rows


def test_without_published_curves_there_is_no_training_figure(tmp_path):
    out = breakout_sweep(tmp_path / "sweep")
    report.write_report(out)
    assert not (out / "training.png").exists()
    assert "Beside the published" not in (out / "report.md").read_text()


def test_a_bad_published_file_is_one_line_exit_2_and_writes_nothing(tmp_path):
    out = breakout_sweep(tmp_path / "sweep")
    before = sorted(p.name for p in out.iterdir())
    result = runner.invoke(app, ["report", str(out), "--published", str(tmp_path / "none.csv")])
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1].endswith("none.csv: no such file")
    assert sorted(p.name for p in out.iterdir()) == before


def test_the_shipped_file_holds_reducible_loss_s_published_numbers():
    """docs/results/literature.md's table of reducible-loss's curves (mean (sd) over 5 seeds at
    500k and 1M frames) is what the shipped file holds."""
    points = {(p.env_id, p.label, p.step): p for p in published.read_published(SHIPPED)}
    table = {
        ("Asterix", 500_000): (2.41, 0.79, 3.18, 0.26),
        ("Asterix", 1_000_000): (12.76, 1.33, 2.51, 0.58),
        ("Breakout", 1_000_000): (7.87, 0.55, 10.40, 0.70),
        ("SpaceInvaders", 500_000): (27.59, 2.42, 19.55, 1.29),
        ("Seaquest", 1_000_000): (3.10, 0.53, 0.49, 0.06),
    }  # fmt: skip
    for (game, step), (dqn, dqn_sd, per, per_sd) in table.items():
        env = f"MinAtar/{game}-v1"
        for label, mean, sd in (("DQN", dqn, dqn_sd), ("DQN+PER", per, per_sd)):
            point = points[(env, f"reducible-loss {label}", step)]
            assert (round(point.mean, 2), round(point.sd, 2), point.seeds) == (mean, sd, 5)
    steps = sorted({s for e, _, s in points if e == "MinAtar/Breakout-v1"})
    assert steps == list(range(0, 5_000_001, 50_000))
    games = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
    assert {e for e, _, _ in points} == {f"MinAtar/{game}-v1" for game in games}


def test_a_published_effect_is_the_difference_of_means_with_welch_s_interval_by_hand():
    """Reducible-loss's PER minus DQN on Asterix at 1M frames, by hand from the shipped file's
    means and sds over 5 seeds each: 2.511202 - 12.755729 = -10.244527; standard error
    sqrt((0.575259**2 + 1.328991**2) / 5) = 0.647633; Welch-Satterthwaite's degrees of freedom
    0.647633**4 / ((0.575259**2 / 5) ** 2 / 4 + (1.328991**2 / 5) ** 2 / 4) = 5.4481, whose
    t quantile at 0.975 is 2.5083 (scipy.stats.t.ppf), so -10.24 [-11.87, -8.62]."""
    points = published.read_published(SHIPPED)
    effect = published.difference(
        points, "MinAtar/Asterix-v1", "reducible-loss DQN+PER", "reducible-loss DQN", 1_000_000
    )
    assert effect.value == pytest.approx(-10.244527)
    assert effect.standard_error == pytest.approx(0.647633, abs=1e-6)
    assert effect.df == pytest.approx(5.4481, abs=1e-4)
    low, high = effect.interval()
    assert (low, high) == pytest.approx(
        (-10.244527 - 2.5083 * 0.647633, -10.244527 + 2.5083 * 0.647633), abs=1e-4
    )
    assert [round(v, 2) for v in (effect.value, low, high)] == [-10.24, -11.87, -8.62]


def test_a_published_effect_without_its_points_or_their_spread_is_one_line():
    points = (
        published.Point("E", "a", 10, 1.0, 0.5, 5),
        published.Point("E", "b", 10, 2.0, None, 5),
        published.Point("E", "c", 10, 2.0, 0.5, None),
        published.Point("E", "d", 10, 2.0, 0.5, 1),
    )
    with pytest.raises(ValueError, match=r"^no published value for 'a' on E at step 20$"):
        published.difference(points, "E", "a", "b", 20)
    for other in ("b", "c", "d"):
        with pytest.raises(ValueError, match=rf"^'{other}' on E at step 10: no sd or fewer than 2"):
            published.difference(points, "E", "a", other, 10)
    # Two seeds are enough for an sd: the difference is had, with 2 + 2 - 2 = 2 df at equal sds.
    two = (published.Point("E", "x", 10, 3.0, 0.5, 2), published.Point("E", "y", 10, 1.0, 0.5, 2))
    effect = published.difference(two, "E", "x", "y", 10)
    assert effect.value == 2.0 and effect.df == pytest.approx(2.0)


def test_values_at_reads_each_run_of_an_arm_and_env_that_reached_the_step(tmp_path):
    """``values_at`` (what the literature page sets beside a published value): seed -> the
    run's training-return EMA at the step, read at the step itself or as a curve logged every
    5,000 steps was binned; a run that stopped before the step is left out. Seed 0's episodes
    return 1, seed 1's 3, one every 1,000 steps, for 100,000 steps."""
    out = breakout_sweep(tmp_path / "sweep")
    at = published.values_at(out, "uniform", ENV, 50_000, None)
    assert at == pytest.approx({0: 1 - 0.99**50, 1: 3 * (1 - 0.99**50)})
    binned = published.values_at(out, "uniform", ENV, 50_000, 5000)
    mean_ema = np.mean([1 - 0.99**n for n in range(1, 50, 5)])  # logged at n = 1, 6, ..., 46
    assert binned == pytest.approx({0: mean_ema, 1: 3 * mean_ema})
    # a run that reached the step exactly is read there (issue 44's mutation run: `>=` -> `>`)
    at_end = published.values_at(out, "uniform", ENV, 100_000, None)
    assert at_end == pytest.approx({0: 1 - 0.99**100, 1: 3 * (1 - 0.99**100)})
    assert published.values_at(out, "uniform", ENV, 150_000, None) == {}  # past both runs
    assert published.values_at(out, "rank", ENV, 50_000, None) == {}
    assert published.values_at(out, "uniform", "MinAtar/Asterix-v1", 50_000, None) == {}


def test_the_report_names_the_game_release_its_runs_played_and_warns_when_they_differ(tmp_path):
    """A MinAtar release can change the game (1.0.11 fixed Seaquest's oxygen), so the report
    names the release each env's runs recorded in their summaries' provenance: in the table's
    heading and the figures' titles; a sweep whose runs played two releases of one game says so.
    A run whose summary records none (an older per-dqn) adds nothing."""
    out = breakout_sweep(tmp_path / "sweep")
    for seed, version in ((0, "1.0.10"), (1, "1.0.15")):
        summary = out / f"uniform/s{seed}" / "summary.json"
        data = json.loads(summary.read_text()) | {
            "provenance": {"versions": {"minatar": version, "torch": "2.13.0"}}
        }
        fileio.write_json(summary, data)
    sweep = runs.collect(out)
    assert [r.game for r in sweep.runs] == ["minatar 1.0.10", "minatar 1.0.15"]
    assert wording.env_label(sweep.runs, ENV) == f"{ENV}, minatar 1.0.10 and 1.0.15"
    assert wording.env_label(sweep.runs[1:], ENV) == f"{ENV}, minatar 1.0.15"
    assert wording.env_label(sweep.runs, "CartPole-v1") == "CartPole-v1"
    cells = measure.group_cells(sweep, [measure.measure(r, None) for r in sweep.runs])
    fig = figures.plot_curves(sweep, cells, {ENV: None})
    assert fig.axes[0].get_title() == f"{ENV}, minatar 1.0.10 and 1.0.15 (2 seeds per arm)"
    report.write_report(out)
    text = (out / "report.md").read_text()
    assert f"## {ENV}, minatar 1.0.10 and 1.0.15\n" in text
    assert (
        "Its runs played 2 releases of the game (minatar 1.0.10, minatar 1.0.15): their scores "
        "are not all of one game." in text
    )
    fileio.write_json(out / "uniform/s0/summary.json", {
        k: v for k, v in json.loads((out / "uniform/s0/summary.json").read_text()).items()
        if k != "provenance"
    })  # fmt: skip
    report.write_report(out)
    text = (out / "report.md").read_text()
    assert f"## {ENV}, minatar 1.0.15\n" in text and "releases of the game" not in text
    # releases in version order, not as text ("1.0.15" < "1.0.9")
    summary = out / "uniform/s0/summary.json"
    data = json.loads(summary.read_text()) | {"provenance": {"versions": {"minatar": "1.0.9"}}}
    fileio.write_json(summary, data)
    assert wording.env_label(runs.collect(out).runs, ENV) == f"{ENV}, minatar 1.0.9 and 1.0.15"


def test_the_published_table_names_each_curve_s_exploration(tmp_path):
    """Training returns depend on exploration as much as on the agent (Seaquest 1.0.10: EMA 3.10
    at epsilon 0.01, 2.22 at 0.1), so each row of the published table names its curve's: the
    runs' from their config.yaml (the floor, and the env step it is reached at), the source's
    from the file's optional column. By hand: the decay's length, after learning_starts where
    the decay starts there."""
    assert wording.exploration_text({"epsilon_end": 0.01, "epsilon_decay_steps": 250_000}) == (
        "epsilon 0.01 from 250k"
    )
    assert wording.exploration_text({
        "epsilon_end": 0.1, "epsilon_decay_steps": 100_000,
        "epsilon_decay_from": "learning_starts", "learning_starts": 5_000,
    }) == "epsilon 0.1 from 105k"  # fmt: skip
    assert wording.exploration_text({"epsilon_end": 0.05, "epsilon_decay_steps": 1_500}) == (
        "epsilon 0.05 from 1,500"
    )
    assert wording.exploration_text({"epsilon_end": 0.05}) is None
    out = breakout_sweep(tmp_path / "sweep")
    for seed in (0, 1):
        (out / f"uniform/s{seed}/config.yaml").write_text(
            "train:\n  epsilon_end: 0.01\n  epsilon_decay_steps: 250000\n"
        )
    path = write(tmp_path / "p.csv", "env_id,label,step,mean,sd,seeds,exploration\n"
                 f"{ENV},src DQN,50000,2.5,0.5,5,epsilon 0.1 from 105k\n")  # fmt: skip
    (point,) = published.read_published(path)
    assert point.exploration == "epsilon 0.1 from 105k"
    assert runner.invoke(app, ["report", str(out), "--published", str(path)]).exit_code == 0
    text = (out / "report.md").read_text()
    source = "src DQN (published) | epsilon 0.1 from 105k | 2.50 (0.50) | 5"
    assert f"| {ENV} | 50,000 | {source} |" in text
    assert f"| {ENV} | 50,000 | uniform | epsilon 0.01 from 250k | " in text
    shipped = published.read_published(SHIPPED)
    assert {p.exploration for p in shipped} == {"epsilon 0.1 from 105k"}


def test_interpolate_is_numpy_s_interp_at_every_step_ends_and_knots_included():
    """``_interpolate`` against ``numpy.interp`` at each integer from the first knot to past the
    last, the knots themselves among them (issue 44's mutation run: `>=` -> `>` at the last knot
    and `>` -> `>=` in the search survived, since ``binned`` only asks between knots)."""
    xs, ys = [0, 2, 3, 7], [0.0, 4.0, -1.0, 2.5]
    for x in range(0, 10):
        assert published._interpolate(xs, ys, x) == pytest.approx(np.interp(x, xs, ys)), x


HEADER = "env_id,label,step,mean,sd,seeds\n"


def test_a_published_file_past_the_cap_is_refused_in_megabytes(tmp_path):
    """Issue 44's mutation run: the refusal's size (`MAX_BYTES // (1024 * 1024)`) survived any
    change. A sparse file one byte past the cap is refused, naming its 10 MB."""
    path = tmp_path / "huge.csv"
    with open(path, "wb") as file:
        file.truncate(published.MAX_BYTES + 1)
    with pytest.raises(ValueError, match=rf"^--published {path}: larger than 10 MB$"):
        published.read_published(path)


@contextlib.contextmanager
def address_space_capped(extra: int):
    """This process may map at most ``extra`` bytes more than it has mapped now (``RLIMIT_AS``),
    so a read without bound fails with a MemoryError instead of filling the machine."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    mapped = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (mapped + extra, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.mark.skipif(
    not (Path("/dev/zero").exists() and Path("/proc/self/statm").exists()),
    reason="no /dev/zero or /proc here",
)
def test_a_published_file_with_no_size_is_read_no_further_than_the_cap():
    """Pins a bug: the cap was checked against the file's size, which a device or a pipe reports
    as 0, so ``--published /dev/zero`` read on until the machine ran out of memory. Now at most
    one byte past the cap is read, and it is refused as a file past the cap is. (Under a cap on
    the address space 20 times the read's: a reader that reads on fails here, not the machine.)"""
    with address_space_capped(20 * published.MAX_BYTES):
        with pytest.raises(ValueError, match=r"^--published /dev/zero: larger than 10 MB$"):
            published.read_published(Path("/dev/zero"))


def test_an_indented_comment_line_and_a_negative_seed_count(tmp_path):
    """A comment line may be indented (`lstrip`, not `rstrip`, found it); a negative seed count
    is out of range like a negative step or sd (issue 44's mutation run: `"seeds"` left out of
    the columns that must not be negative survived)."""
    path = write(tmp_path / "p.csv", HEADER + "   # a note\nMinAtar/Asterix-v1,DQN,10,1.5,0.5,5\n")
    (point,) = published.read_published(path)
    assert (point.step, point.mean, point.seeds) == (10, 1.5, 5)
    bad = write(tmp_path / "bad.csv", HEADER + "MinAtar/Asterix-v1,DQN,10,1.5,0.5,-5\n")
    with pytest.raises(ValueError, match=r"^--published .+: line 2: seeds: '-5' is out of range$"):
        published.read_published(bad)


def test_a_published_file_is_read_as_utf_8_whatever_the_locale(tmp_path):
    """Issue 44's mutation run: `read_text(encoding="utf-8")` -> the locale's encoding survived,
    the tests' locale being UTF-8. Under an ASCII locale (C, with Python's UTF-8 coercion off) a
    label with an accent is still read."""
    path = write(tmp_path / "p.csv", HEADER + "MinAtar/Asterix-v1,DQN (Schaul é),10,1.5,0.5,5\n")
    code = ("import sys; from pathlib import Path; from per_dqn.sweeps import published; "
            "print(published.read_published(Path(sys.argv[1]))[0].label.encode('unicode_escape')"
            ".decode())")  # fmt: skip
    env = {
        "PATH": os.environ["PATH"],
        "LC_ALL": "C",
        "PYTHONUTF8": "0",
        "PYTHONCOERCECLOCALE": "0",
        "PYTHONPATH": str(Path(published.__file__).parents[2]),
    }
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                          env=env, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "DQN (Schaul \\xe9)"


def test_steps_for_runs_without_published_points_stop_at_their_last_step():
    """Every 50,000 env steps up to the runs' last step, that step included where it is one
    (issue 44's mutation run: the range's end `+ 1` -> `+ 2` survived): runs of 49,999 steps
    are read at 0 alone, runs of 100,000 at 0, 50,000 and 100,000."""
    assert published.steps_for([], 49_999) == [0]
    assert published.steps_for([], 100_000) == [0, 50_000, 100_000]
    assert published.steps_for([], 99_999) == [0, 50_000]
