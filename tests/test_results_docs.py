"""The results pages quote the committed sweeps: every figure a page quotes from a sweep archived in
``docs/results/data/`` is checked against the report that ``per-dqn unarchive`` and ``per-dqn
report`` make from that archive, as the pages tell a reader to do.

A figure is an interval (``4.9 [4.2, 5.3]``, an IQM with its bootstrap interval, or a probability
of improvement with its own) or a mean with its sd (``13.60 (1.03)``); each must appear in the
report's lines about the same game. The pages also quote the report's count of runs and its
``Compute:`` line, which must match it. A page whose numbers were not updated with its archive,
or an archive committed without its page, fails here.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from per_dqn.cli import app
from per_dqn.sweeps import published, runs, stats

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
PUBLISHED = RESULTS / "published" / "reducible_loss_minatar.csv"
GAMES = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
# A figure: an estimate with its interval, or a mean with its sd.
NUMBER = r"-?\d+\.\d+"
FIGURE = re.compile(rf"{NUMBER} \[{NUMBER}, {NUMBER}\]|{NUMBER} \(\d+\.\d+\)")
# The study's proportional arm, as its reports name it.
PROPORTIONAL_ARM = "proportional/alpha=0.6,beta0=0.4"

runner = CliRunner()


def rebuilt_report(archive: Path, out: Path, *report_args: str) -> str:
    """``per-dqn unarchive ARCHIVE OUT`` then ``per-dqn report OUT ...``: its report.md."""
    result = runner.invoke(app, ["unarchive", str(archive), str(out)])
    assert result.exit_code == 0, result.output
    return report_of(out, *report_args)


def report_of(out: Path, *report_args: str) -> str:
    """``per-dqn report OUT ...``: its report.md."""
    result = runner.invoke(app, ["report", str(out), *report_args])
    assert result.exit_code == 0, result.output
    return (out / "report.md").read_text()


@pytest.fixture(scope="module")
def literature(tmp_path_factory):
    """``literature(NAME)``: the dir ``runs/NAME`` of a tmp dir, made once per module from
    ``docs/results/data/NAME.tar.xz`` by ``per-dqn unarchive`` and ``per-dqn report --published``
    with reducible-loss's curves, as literature.md's commands make it."""
    runs = tmp_path_factory.mktemp("literature") / "runs"
    made: dict[str, Path] = {}

    def rebuilt(name: str) -> Path:
        if name not in made:
            archive = RESULTS / "data" / f"{name}.tar.xz"
            assert archive.is_file(), f"not archived: {archive.name}"
            rebuilt_report(archive, runs / name, "--published", str(PUBLISHED))
            made[name] = runs / name
        return made[name]

    return rebuilt


def run_snippet(page: str, cwd: Path) -> str:
    """Runs the one ``python`` code block of ``page`` (a section) in ``cwd``, as the page tells a
    reader to run it in a dir holding the sweeps it reads; its stdout."""
    snippets = re.findall(r"```python\n(.*?)```", page, re.DOTALL)
    assert len(snippets) == 1, "the section has no one snippet"
    done = subprocess.run(
        [sys.executable, "-c", snippets[0]], cwd=cwd, capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(cwd)},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def section(text: str, heading: str) -> str:
    """The text under the heading that starts with ``heading`` (``## The study``: its title may
    go on to say how far it is) up to the next heading of its level or above, outside code
    blocks (where a ``# comment`` is no heading)."""
    level = len(heading.split(" ")[0])
    lines = text.splitlines()
    found = [n for n, line in enumerate(lines) if line.startswith(heading)]
    assert len(found) == 1, f"no one heading {heading!r}: {[lines[n] for n in found]}"
    fenced, end = False, len(lines)
    for n in range(found[0] + 1, len(lines)):
        line = lines[n]
        fenced ^= line.startswith("```")
        hashes = len(line) - len(line.lstrip("#"))
        if not fenced and 0 < hashes <= level and line[hashes : hashes + 1] == " ":
            end = n
            break
    return "\n".join(lines[found[0] : end]) + "\n"


def check_compute_quoted(report: str, flat: str) -> None:
    """The report's ``Compute:`` line, up to its parenthesis, is quoted in ``flat`` (a page
    section with its whitespace collapsed)."""
    compute = re.search(r"- Compute: ([^(]+?) \(", report)
    assert compute and f'"Compute: {compute[1]}"' in flat


def report_rows(report: str, env_section: str, starts: tuple[str, ...]) -> dict[str, str]:
    """The rows of the report's table under ``env_section`` (``## MinAtar/Breakout-v1``) whose
    line starts with one of ``starts``, by their arm."""
    return {
        line.split("|")[1].strip(): line
        for line in section(report, env_section).splitlines()
        if line.startswith(starts)
    }


def lines_about(report: str, game: str) -> str:
    """The report's lines about ``game``: its own section, and every table row naming it."""
    own = section(report, f"## MinAtar/{game}-v1")
    rows = [line for line in report.splitlines() if f"MinAtar/{game}-v1" in line]
    return "\n".join([own, *rows])


def game_of(text: str) -> str:
    """The game ``text`` (a bullet or a table cell of a page) is about: the game it starts with."""
    first = re.match(r"\w+", text.strip())
    assert first and first[0] in GAMES, f"not about a game: {text[:80]!r}"
    return first[0]


@pytest.mark.slow
def test_the_minatar_study_section_quotes_its_archive(tmp_path):
    """docs/results/minatar.md, "The study with packs": the runs it says are finished,
    the report's ``Compute:`` line and every figure of its per-game bullets and of its tables,
    against the report of ``docs/results/data/minatar-study.tar.xz``."""
    report = rebuilt_report(RESULTS / "data" / "minatar-study.tar.xz", tmp_path / "study")
    page = section((RESULTS / "minatar.md").read_text(), "## The study with packs")

    used = re.search(r"- Runs used: (\d+) of (\d+) planned", report)
    assert used, report[:2000]
    finished = re.search(r"All (\d+) runs are finished", page)
    assert finished, "the section does not say how many runs are finished"
    assert finished[1] == used[1]
    assert f"{used[2]} runs in one sweep dir" in page
    check_compute_quoted(report, " ".join(page.split()))

    # The per-game bullets: the list after "What 10 paired seeds resolve", up to its first blank
    # line.
    marker = "What 10 paired seeds resolve"
    assert page.count(marker) == 1
    listed = page.split(marker, 1)[1].split("\n\n", 1)[0]
    bullets = [" ".join(b.split()) for b in re.split(r"^- ", listed, flags=re.M)[1:]]
    assert sum(bool(FIGURE.search(b)) for b in bullets) >= 2, listed
    for bullet in bullets:
        figures = FIGURE.findall(bullet)
        about = lines_about(report, game_of(bullet))
        missing = [f for f in figures if f not in about]
        assert missing == [], (game_of(bullet), missing)

    # Its tables, row by row: a row of a game and an arm has exactly the figures of the report's
    # row of that arm under that game, in order; a row of an arm alone, those of its row across
    # the games.
    rows = [line for line in page.splitlines() if line.startswith("| ") and FIGURE.search(line)]
    assert len(rows) >= 3 * len(GAMES), "the study's tables are missing"
    for row in rows:
        cells = [cell.strip() for cell in row.split("|")[1:-1]]
        game = re.match(r"(?:MinAtar/)?(\w+)", cells[0])
        if game and game[1] in GAMES:
            where, arm = section(report, f"## MinAtar/{game[1]}-v1"), cells[1]
        else:
            where, arm = section(report, "## Across games"), cells[0]
        theirs = [
            line
            for line in where.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip().split("/")[0] == arm
        ]
        assert len(theirs) == 1, (row, theirs)
        assert FIGURE.findall(row) == FIGURE.findall(theirs[0]), (row, theirs[0])


@pytest.mark.slow
def test_the_six_arm_study_section_quotes_its_archive(tmp_path):
    """docs/results/minatar.md, "Which prioritization helps": its count of finished runs, the
    report's ``Compute:`` line, every row of its tables and every figure it quotes, against the
    two reports its commands make of ``docs/results/data/minatar-study-six-arms.tar.xz``: paired
    against uniform, and against proportional PER (``--baseline``)."""
    archive = RESULTS / "data" / "minatar-study-six-arms.tar.xz"
    against_uniform = rebuilt_report(archive, tmp_path / "sweep")
    against_per = report_of(tmp_path / "sweep", "--baseline", PROPORTIONAL_ARM)
    page = section((RESULTS / "minatar.md").read_text(), "## Which prioritization helps")
    flat = " ".join(page.split())

    used = re.search(r"- Runs used: (\d+) of (\d+) planned", against_uniform)
    assert used and used[1] == used[2], "the archive does not hold every planned run"
    assert f"All {used[1]} runs are finished" in flat
    check_compute_quoted(against_uniform, flat)

    # Each table row: a game's row of an arm has the figures of that arm's row under that game in
    # the report against uniform (its IQMs and P(> uniform)), then those of its row in the report
    # against proportional past the IQMs (P(> proportional)); a row of an arm alone, the same
    # across the games.
    rows = [line for line in page.splitlines() if line.startswith("| ") and FIGURE.search(line)]
    assert len(rows) == 6 * len(GAMES) + 6, "the section's tables are not whole"
    for row in rows:
        cells = [cell.strip() for cell in row.split("|")[1:-1]]
        if cells[0] in GAMES:
            heading, arm = f"## MinAtar/{cells[0]}-v1", cells[1]
        else:
            heading, arm = "## Across games", cells[0]
        theirs = []
        for report in (against_uniform, against_per):
            lines = [
                line
                for line in section(report, heading).splitlines()
                if line.startswith("| ") and line.split("|")[1].strip().split("/")[0] == arm
            ]
            assert len(lines) == 1, (row, lines)
            theirs.append(FIGURE.findall(lines[0]))
        assert FIGURE.findall(row) == theirs[0] + theirs[1][2:], (row, theirs)

    # Its per-game bullets: each figure in the two reports' lines about the bullet's game.
    marker = "What 10 paired seeds resolve"
    assert page.count(marker) == 1
    listed = page.split(marker, 1)[1].split("\n\n", 1)[0]
    bullets = [" ".join(b.split()) for b in re.split(r"^- ", listed, flags=re.M)[1:]]
    assert sorted(game_of(b) for b in bullets) == sorted(GAMES), listed
    for bullet in bullets:
        about = lines_about(against_uniform, game_of(bullet))
        about += lines_about(against_per, game_of(bullet))
        missing = [f for f in FIGURE.findall(bullet) if f not in about]
        assert missing == [], (game_of(bullet), missing)

    # Its reading: each figure across the games, in one of the two reports' tables across them.
    reading = page.split("**Reading.**", 1)[1]
    across = section(against_uniform, "## Across games") + section(against_per, "## Across games")
    quoted = FIGURE.findall(" ".join(reading.split()))
    assert len(quoted) >= 8, reading
    assert [f for f in quoted if f not in across] == []


@pytest.mark.slow
def test_the_is_weight_section_quotes_its_archive(tmp_path):
    """docs/results/minatar.md, "IS-weight normalisation": its table row by row, its per-seed
    scores, the report's ``Compute:`` line and the reading's IS weights (each arm's mean over the
    run and in the last log window, mean over seeds), against ``per-dqn report --baseline`` of
    ``docs/results/data/minatar-is-weights.tar.xz``."""
    sweep = tmp_path / "minatar-is-weights"
    baseline = "proportional/weight_normalization=global"
    report = rebuilt_report(
        RESULTS / "data" / "minatar-is-weights.tar.xz", sweep, "--baseline", baseline
    )
    page = section((RESULTS / "minatar.md").read_text(), "## IS-weight normalisation")
    page = page.split("**CartPole.**", 1)[0]  # the CartPole sweep is not archived
    flat = " ".join(page.split())
    check_compute_quoted(report, flat)
    theirs = report_rows(report, "## MinAtar/Breakout-v1", ("| proportional/",))
    rows = [line for line in page.splitlines() if line.startswith("| ") and FIGURE.search(line)]
    assert len(rows) == 2, rows
    for row in rows:
        name = row.split("|")[1].strip().split(" ")[0]  # "global (Algorithm 1)", "batch"
        mine = theirs[f"proportional/weight_normalization={name}"]
        assert FIGURE.findall(row) == FIGURE.findall(mine), (row, mine)
        assert row.split("|")[2].strip() == mine.split("|")[2].strip()  # runs
        assert row.split("|")[-2].strip() == mine.split("|")[-2].strip()  # IS weight
    with open(sweep / "scores.csv") as f:
        scores = list(csv.DictReader(f))
    for name in ("global", "batch"):
        quoted = re.search(rf"{name} ((?:\d+\.\d / \d+\.\d(?:, |;|\.))+)", flat)
        assert quoted, f"no per-seed scores of {name}"
        by_seed = sorted(
            (int(r["seed"]), f"{float(r['final_return']):.1f} / {float(r['auc']):.1f}")
            for r in scores
            if r["arm"] == f"proportional/weight_normalization={name}"
        )
        assert re.findall(r"\d+\.\d / \d+\.\d", quoted[1]) == [c for _, c in by_seed]
    # "under `global` the mean IS weight over a run was 0.015 (0.0015 in the last log window,
    # ...), against 0.343 (0.238) under `batch`": from the archived IS-weight curves.
    weights = re.search(
        r"under `global` the mean IS weight over a run was (\d\.\d+) \((\d\.\d+) in the last "
        r"log window.*?against (\d\.\d+) \((\d\.\d+)\) under `batch`",
        flat,
    )
    assert weights, "no IS weights quoted"
    for (over_run, last), name in zip(
        (weights.groups()[:2], weights.groups()[2:]), ("global", "batch"), strict=True
    ):
        curves = [
            runs.read_curve(sweep / f"proportional/weight_normalization={name}/s{seed}",
                            "per/is_weight_mean")
            for seed in range(5)
        ]  # fmt: skip
        digits = len(over_run.split(".")[1])
        mean = np.mean([np.mean([v for _, v in c]) for c in curves])
        assert over_run == f"{mean:.{digits}f}", (name, over_run, mean)
        digits = len(last.split(".")[1])
        assert last == f"{np.mean([c[-1][1] for c in curves]):.{digits}f}", (name, last)


SEAQUEST_ARMS = {  # the Seaquest-causes table's rows -> the sweep's arms
    "uniform": "uniform",
    "proportional, reference": "proportional/alpha=0.6,beta0=0.4",
    "proportional, lr 6.25e-5": "proportional/alpha=0.6,beta0=0.4,lr=6.25e-05",
    "proportional, lr 7.5e-4": "proportional/alpha=0.6,beta0=0.4,lr=0.00075",
    "proportional, beta0 1.0": "proportional/alpha=0.6,beta0=1.0",
}


@pytest.mark.slow
def test_the_seaquest_causes_section_quotes_its_archive(tmp_path):
    """docs/results/minatar.md, "Seaquest: why the PER arms fall behind": its table row by row
    (every figure, the steps to 5 and the IS weight) and the report's ``Compute:`` line against
    ``per-dqn report`` of ``docs/results/data/minatar-seaquest-causes.tar.xz``; its last column
    is what the section's snippet prints, run as the page says; its per-seed scores are the
    report's ``scores.csv``; and its uniform and reference runs are the study's of seeds 0 to 4
    (the same final score and AUC, to the last bit, in the two archives)."""
    runs_dir = tmp_path / "runs"
    sweep = runs_dir / "minatar-seaquest-causes"
    report = rebuilt_report(
        RESULTS / "data" / "minatar-seaquest-causes.tar.xz", sweep,
        "--threshold", "MinAtar/Seaquest-v1=5",
    )  # fmt: skip
    page = section((RESULTS / "minatar.md").read_text(), "## Seaquest: why the PER arms")
    flat = " ".join(page.split())
    check_compute_quoted(report, flat)
    theirs = report_rows(report, "## MinAtar/Seaquest-v1", ("| uniform", "| proportional/"))
    rows = [line for line in page.splitlines() if line.startswith("| ") and FIGURE.search(line)]
    assert [row.split("|")[1].strip().split(" (")[0] for row in rows] == list(SEAQUEST_ARMS)
    printed = run_snippet(page, tmp_path).splitlines()
    for row in rows:
        label = row.split("|")[1].strip().split(" (")[0]
        cells = [cell.strip() for cell in row.split("|")[1:-1]]
        mine = [cell.strip() for cell in theirs[SEAQUEST_ARMS[label]].split("|")[1:-1]]
        # arm | runs | final | AUC | steps to 5 | P(> uniform) final, AUC | P(> ref) | IS weight
        assert cells[1:5] == mine[1:5], (row, mine)
        assert [FIGURE.findall(c) for c in cells[5:7]] == [FIGURE.findall(c) for c in mine[5:7]]
        assert cells[-1] == mine[-1], (row, mine)  # IS weight
        if label in ("uniform", "proportional, reference"):
            assert cells[7] == "n/a", row
        else:
            assert f"{SEAQUEST_ARMS[label]}: {cells[7]}" in printed, (row, printed)
    with open(sweep / "scores.csv") as f:
        scores = list(csv.DictReader(f))
    quoted = re.search(r"Per seed, final score / AUC \(seeds 0 to 4\): (.+?) \(", flat)
    assert quoted, "no per-seed scores"
    for label, arm in SEAQUEST_ARMS.items():
        by_seed = sorted(
            (int(r["seed"]), f"{float(r['final_return']):.1f}/{float(r['auc']):.1f}")
            for r in scores
            if r["arm"] == arm
        )
        short = label.removeprefix("proportional, ")
        assert f"{short}: {', '.join(c for _, c in by_seed)}" in quoted[1], (label, by_seed)
    with tarfile.open(RESULTS / "data" / "minatar-study.tar.xz") as study:
        for arm in ("uniform", "proportional/alpha=0.6,beta0=0.4"):
            for seed in range(5):
                ours = runs.read_summary(sweep / arm / f"s{seed}")
                member = study.extractfile(f"MinAtar-Seaquest-v1/{arm}/s{seed}/summary.json")
                assert ours is not None and member is not None
                first = json.loads(member.read())
                for key in ("final_eval_return_mean", "auc", "env_steps"):
                    assert ours[key] == first[key], (arm, seed, key)


@pytest.mark.slow
def test_the_alpha_section_quotes_its_archives(tmp_path):
    """docs/results/minatar.md, "Alpha sensitivity (Breakout)": its report table row by row and
    the report's ``Compute:`` line, against ``per-dqn report`` of
    ``docs/results/data/minatar-alpha.tar.xz``; its snippet, run as the page says (in a dir
    holding that sweep and the study's, both reported), prints exactly the rows of its second
    table; and every number of its prose is one the snippet printed or the report holds."""
    runs_dir = tmp_path / "runs"
    report = rebuilt_report(
        RESULTS / "data" / "minatar-alpha.tar.xz", runs_dir / "minatar-alpha",
        "--baseline", "proportional/alpha=0.6", "--threshold", "MinAtar/Breakout-v1=8",
    )  # fmt: skip
    rebuilt_report(RESULTS / "data" / "minatar-study.tar.xz", runs_dir / "minatar-study")
    page = section((RESULTS / "minatar.md").read_text(), "## Alpha sensitivity")
    flat = " ".join(page.split())
    check_compute_quoted(report, flat)
    breakout = section(report, "## MinAtar/Breakout-v1")
    theirs = report_rows(report, "## MinAtar/Breakout-v1", ("| proportional/",))
    stdout = run_snippet(page, tmp_path)
    printed = stdout.splitlines()
    rows = [line for line in page.splitlines() if line.startswith("| ") and FIGURE.search(line)]
    own = [row for row in rows if f"proportional/alpha={row.split('|')[1].strip()}" in theirs]
    assert len(own) == 5, own  # alpha 0.2 to 1.0
    for row in own:
        mine = theirs[f"proportional/alpha={row.split('|')[1].strip()}"]
        assert FIGURE.findall(row) == FIGURE.findall(mine), (row, mine)
        assert row.split("|")[-2].strip() == mine.split("|")[-2].strip()  # IS weight
    table = [row for row in rows if row not in own]
    assert table == [line for line in printed if line.startswith("| ")]
    prose = "\n".join(
        line for line in page.split("```python", 1)[1].split("```", 1)[1].splitlines()
        if not line.startswith("|")
    )  # fmt: skip
    numbers = re.findall(r"\d+\.\d+", prose)
    assert numbers, "the reading quotes no number"
    assert [n for n in numbers if n not in stdout and n not in breakout] == []


def against_band(value: float, point: published.Point) -> tuple[str, float, float]:
    """Where ``value`` lies against the published band, ``point``'s mean +- 2 sd: ``within``,
    ``above`` or ``below``, with the band's ends."""
    low, high = point.mean - 2 * point.sd, point.mean + 2 * point.sd
    return ("within" if low <= value <= high else "above" if value > high else "below"), low, high


def bins_against_band(runs_dir: Path, game: str, label: str) -> dict[int, str]:
    """Where the mean over the runs ``runs_dir/s0`` to ``s4`` lies against the published band of
    ``label`` at each published 50k bin of ``game`` from 50k to 1M: the runs' training-return EMA
    read as ``label`` was logged (``published.read_as_logged``), as the report's figure draws
    it."""
    points = {
        p.step: p
        for p in published.read_published(PUBLISHED)
        if (p.env_id, p.label) == (f"MinAtar/{game}-v1", label) and 0 < p.step <= 1_000_000
    }
    bins = sorted(points)
    every = points[bins[0]].logged_every
    curves = [runs.read_curve(runs_dir / f"s{seed}", "episode/return") for seed in range(5)]
    means = np.array([published.read_as_logged(curve, bins, every) for curve in curves])
    return {
        step: against_band(mean, points[step])[0]
        for step, mean in zip(bins, means.mean(axis=0), strict=True)
    }


def steps(first_k: str, last_k: str) -> list[int]:
    """The 50k bins from ``first_k`` to ``last_k`` (in thousands; "1M" for the last bin)."""
    last = 1_000_000 if last_k == "1M" else int(last_k) * 1000
    return list(range(int(first_k) * 1000, last + 1, 50_000))


@pytest.mark.slow
def test_the_literature_comparison_rows_quote_their_archive(literature):
    """docs/results/literature.md, the comparison: its snippet, run as the page says (in a dir
    holding the presets' sweeps, with the repository's docs), prints exactly the rows of its
    table, in order (each read as its released curve was logged, both bands computed); the greedy
    final scores quoted under it are each preset's report's, game by game; the reading's claim
    about the PER preset's SpaceInvaders bins holds on its runs' curves; the MinAtar paper's
    last-100 measure and the PER preset's compute quoted are the reports'."""
    page = (RESULTS / "literature.md").read_text()
    table = section(page, "## The comparison")
    made = [literature(f"literature-{p}") for p in ("minatar_paper_dqn",
                                                     "reducible_loss_minatar_per",
                                                     "reducible_loss_minatar_relo")]  # fmt: skip
    root = made[0].parents[1]
    if not (root / "docs").exists():  # the page runs it in the repository's root
        (root / "docs").symlink_to(ROOT / "docs")
    printed = run_snippet(table, root).splitlines()
    rows = [line for line in table.splitlines() if line.startswith("| `") and FIGURE.search(line)]
    assert len(printed) >= 18, "the snippet printed too few rows"
    assert rows == printed
    reports = {p: (d / "report.md").read_text() for p, d in zip(
        ("minatar_paper_dqn", "reducible_loss_minatar_per"), made[:2], strict=True)}  # fmt: skip
    flat = " ".join(table.split())
    finals = re.search(r"from each sweep's report: DQN (.+? on SpaceInvaders); DQN\+PER "
                       r"(.+? on SpaceInvaders)\.", flat)  # fmt: skip
    assert finals, "no final scores quoted"
    for preset, quoted in zip(reports, finals.groups(), strict=True):
        found = re.findall(rf"({NUMBER} \[{NUMBER}, {NUMBER}\]) on (\w+)", quoted)
        assert len(found) == 3, quoted
        for figure, game in found:
            assert figure in lines_about(reports[preset], game), (preset, game, figure)
    # "... and on SpaceInvaders, within it at every bin from 50k to 1M": from the runs' curves.
    claim = re.search(r"and on SpaceInvaders, within it at every bin from (\d+)k to 1M", flat)
    assert claim, "no claim about the SpaceInvaders bins"
    runs_dir = made[1] / "MinAtar-SpaceInvaders-v1" / "proportional"
    where = bins_against_band(runs_dir, "SpaceInvaders", "reducible-loss DQN+PER")
    assert [s for s, w in where.items() if w == "within"] == steps(claim[1], "1M")
    check_compute_quoted(reports["reducible_loss_minatar_per"], flat)
    # "the mean of the last 100 training episodes, is 13.58 (1.89) on Asterix and ..."
    last100 = re.search(r"last 100 training episodes, is ([^;]+?)\)\.", " ".join(page.split()))
    assert last100, "no sentence quoting the last-100 measure"
    quoted = re.findall(r"(\d+\.\d+ \(\d+\.\d+\)) on (\w+)", last100[1])
    assert quoted, last100[0]
    for figure, game in quoted:
        assert game in GAMES, game
        row = next(
            line
            for line in reports["minatar_paper_dqn"].splitlines()
            if line.startswith(f"| MinAtar/{game}-v1 | uniform |") and line.count("|") == 6
        )
        assert row.split("|")[5].strip() == figure, (game, row)


def asterix_per_at_1m(sweep: Path) -> dict[int, float]:
    """The Asterix PER runs' training-return EMA at 1M, by seed, read as reducible-loss's PER
    curve was logged (every 5k, binned)."""
    return published.values_at(sweep, "proportional", "MinAtar/Asterix-v1", 1_000_000, 5_000)


def quoted_row(sweep: Path) -> list[str]:
    """What a row of the beta-schedule table quotes of a sweep of Asterix runs: the EMA at 1M read
    as logged every 5k, mean (sd) over seeds, then the last-100 mean of its report's "Training
    returns" row, then the final score of its report's Asterix table."""
    report = (sweep / "report.md").read_text()
    values = np.array(list(asterix_per_at_1m(sweep).values()))
    training = next(
        line for line in report.splitlines()
        if line.startswith("| MinAtar/Asterix-v1 | proportional |") and line.count("|") == 6
    )  # fmt: skip
    final = next(
        line
        for line in section(report, "## MinAtar/Asterix-v1").splitlines()
        if line.startswith("| proportional |")
    )
    ema = f"{values.mean():.2f} ({values.std(ddof=1):.2f})"
    return [ema, FIGURE.findall(training)[1], FIGURE.findall(final)[0]]


@pytest.mark.slow
def test_the_beta_schedule_contrast_quotes_its_archive(literature):
    """docs/results/literature.md, "Reducible-loss's PER on Asterix: beta's schedule": the row of
    the runs whose beta was annealed over their own 1M steps quotes its archive
    (``literature-per-beta-over-1m.tar.xz``), cell by cell: the training-return EMA at 1M read
    as the released PER was logged, the last-100 mean of its report's "Training returns" row and
    the final score of its Asterix table; the row of the runs on the source's schedule, the same
    against the preset's own archive; the reading's per-seed pairs, its claim about the bins
    within and above the published band, its figures and its IS weights, from both archives and
    the published file; the published row, reducible-loss's DQN+PER at 1M."""
    page = section((RESULTS / "literature.md").read_text(), "### Reducible-loss's PER on Asterix")
    contrast_sweep = literature("literature-per-beta-over-1m")
    faithful_sweep = literature("literature-reducible_loss_minatar_per")
    report = (contrast_sweep / "report.md").read_text()
    preset = (faithful_sweep / "report.md").read_text()
    rows = {
        line.split("|")[1].strip(): FIGURE.findall(line)
        for line in page.splitlines()
        if line.startswith("| ") and FIGURE.search(line)
    }
    ours = rows["the PER preset, beta annealed over the run's 1M steps (5 seeds)"]
    assert ours == quoted_row(contrast_sweep), ours
    source = "the PER preset, beta over 5M frames as the source (5 seeds)"
    assert rows[source] == quoted_row(faithful_sweep), rows[source]
    # "Every seed ends lower on the source's schedule than on the 1M one (at 1M, read as logged
    # every 5k: 2.35 against 15.39, ... on seeds 0 to 4)": each pair, from both sweeps' runs.
    pairs = re.search(r"read as logged every 5k: (.+?) on seeds 0 to 4\)", " ".join(page.split()))
    assert pairs, "no per-seed pairs quoted"
    quoted = [tuple(p) for p in re.findall(r"(\d+\.\d+) against (\d+\.\d+)", pairs[1])]
    faithful, contrast = asterix_per_at_1m(faithful_sweep), asterix_per_at_1m(contrast_sweep)
    assert quoted == [(f"{faithful[s]:.2f}", f"{contrast[s]:.2f}") for s in range(5)]
    assert all(faithful[s] < contrast[s] for s in range(5))
    # The reading: the bins where the curve on the source's schedule is above the published band
    # (within at every other), and every figure it quotes (a sweep's mean (sd) at a published
    # bin, or a report's), computed from the archives and the published file.
    reading = " ".join(page.split("**Reading", 1)[1].split())
    claim = re.search(r"within the published band \(mean \+- 2 sd\) at every 50k bin but "
                      r"(\d+)k and (\d+)k, where it is above", reading)  # fmt: skip
    assert claim, "no claim about the bins"
    where = bins_against_band(faithful_sweep / "MinAtar-Asterix-v1" / "proportional", "Asterix",
                              "reducible-loss DQN+PER")  # fmt: skip
    above = [int(claim[1]) * 1000, int(claim[2]) * 1000]
    assert [s for s, w in where.items() if w == "above"] == above
    assert [s for s, w in where.items() if w == "within"] == [
        s for s in steps("50", "1M") if s not in above
    ]
    points = {
        (p.label, p.step): p
        for p in published.read_published(PUBLISHED)
        if p.env_id == "MinAtar/Asterix-v1" and 0 < p.step <= 1_000_000
    }
    bins = sorted(step for label, step in points if label == "reducible-loss DQN+PER")
    known: set[str] = {f"{p.mean:.2f} ({p.sd:.2f})" for p in points.values()}
    for sweep in (faithful_sweep, contrast_sweep):
        runs_dir = sweep / "MinAtar-Asterix-v1" / "proportional"
        curves = [runs.read_curve(runs_dir / f"s{seed}", "episode/return") for seed in range(5)]
        values = np.array([published.read_as_logged(curve, bins, 5_000) for curve in curves])
        known |= {f"{v.mean():.2f} ({v.std(ddof=1):.2f})" for v in values.T}
    dqn = published.values_at(literature("literature-minatar_paper_dqn"), "uniform",
                              "MinAtar/Asterix-v1", 1_000_000, 50_000)  # fmt: skip
    known.add(f"{np.mean(list(dqn.values())):.2f} ({np.std(list(dqn.values()), ddof=1):.2f})")
    unknown = [f for f in FIGURE.findall(reading) if f not in known and f not in report + preset]
    assert unknown == [], unknown
    # "the mean IS weight ... is 0.289 on the source's schedule against 0.217 with beta ... 1M":
    # each the last cell of its report's Asterix row.
    weights = re.search(
        r"over training is (\d\.\d+) on the source's schedule against (\d\.\d+)", reading
    )
    assert weights, "no IS weights quoted"
    for quoted_weight, text in zip(weights.groups(), (preset, report), strict=True):
        row = next(line for line in section(text, "## MinAtar/Asterix-v1").splitlines()
                   if line.startswith("| proportional |"))  # fmt: skip
        assert row.split("|")[-2].strip() == quoted_weight, row
    published_row = rows["reducible-loss DQN+PER (published, 5 seeds)"]
    assert published_row == ["2.51 (0.58)"]
    head = "| MinAtar/Asterix-v1 | 1,000,000 | reducible-loss DQN+PER (published) |"
    beside = next(line for line in report.splitlines() if line.startswith(head))
    assert FIGURE.findall(beside) == published_row, beside


# preset -> (its sweep on MinAtar 1.0.10, its arm, the released method it is set against)
ON_THE_OLD_GAME = {
    "minatar_paper_dqn": ("literature-seaquest-1.0.10", "uniform", "DQN"),
    "reducible_loss_minatar_per": (
        "literature-reducible_loss_minatar_per-seaquest-1.0.10", "proportional", "DQN+PER"),
    "reducible_loss_minatar_relo": (
        "literature-reducible_loss_minatar_relo-seaquest-1.0.10", "relo", "ReLo"),
}  # fmt: skip


@pytest.mark.slow
def test_the_seaquest_preset_rows_quote_their_archive(literature):
    """docs/results/literature.md, the Seaquest section's tables of the published presets on
    MinAtar 1.0.10 and the reports' ``Compute:`` lines quoted beside them: each row's
    training-return EMA at its step, mean (sd) over the 5 seeds, computed from the runs' curves
    in the preset's archive (``ON_THE_OLD_GAME``), read as its released curve was logged; the
    published value there, from the published file; the verdict against the published band; and
    at 1M the report's own final score. Every preset has its two rows."""
    page = section((RESULTS / "literature.md").read_text(), "## Seaquest")
    flat = " ".join(page.split())
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    presets = [row.split("`")[1] for row in rows]
    assert presets == [p for p in ON_THE_OLD_GAME for _ in range(2)], presets
    for preset, (name, arm, method) in ON_THE_OLD_GAME.items():
        sweep = literature(name)
        report = (sweep / "report.md").read_text()
        assert "minatar 1.0.10" in report, f"{name}: the runs did not play MinAtar 1.0.10"
        check_compute_quoted(report, flat)
        curves = [
            runs.read_curve(sweep / arm / f"s{seed}", "episode/return")  # one env: no env level
            for seed in range(5)
        ]
        points = {
            p.step: p
            for p in published.read_published(PUBLISHED)
            if (p.env_id, p.label) == ("MinAtar/Seaquest-v1", f"reducible-loss {method}")
        }
        for row in (row for row in rows if row.startswith(f"| `{preset}` |")):
            cells = [cell.strip() for cell in row.split("|")]
            _, _, version, step, theirs, ours, band, said, final, _ = cells
            assert version == "1.0.10", row
            at = {"500k": 500_000, "1M": 1_000_000}[step]
            point = points[at]
            values = np.array(
                [published.read_as_logged(c, [at], point.logged_every)[0] for c in curves]
            )
            assert theirs == f"{method} {point.mean:.2f} ({point.sd:.2f})", row
            assert ours == f"{values.mean():.2f} ({values.std(ddof=1):.2f})", row
            where, low, high = against_band(values.mean(), point)
            assert band == f"{where} ({low:.2f} to {high:.2f})", row
            gap = stats.Estimate.of_sample(values) - stats.Estimate.of_mean(
                point.mean, point.sd, point.seeds
            )
            g_low, g_high = gap.interval()
            verdict = "consistent" if g_low <= 0 <= g_high else "above" if g_low > 0 else "below"
            assert said == f"{gap.value:.2f} [{g_low:.2f}, {g_high:.2f}]: {verdict}", row
            assert (final in lines_about(report, "Seaquest")) if at == 1_000_000 else not final
    # "within the published band at every 50k bin from 50k to 1M": from the DQN runs' curves.
    claim = re.search(r"within the published band at every 50k bin from (\d+)k to 1M:", flat)
    assert claim, "no claim about the Seaquest bins"
    dqn = literature(ON_THE_OLD_GAME["minatar_paper_dqn"][0]) / "uniform"
    where = bins_against_band(dqn, "Seaquest", "reducible-loss DQN")
    assert [s for s, w in where.items() if w == "within"] == steps(claim[1], "1M")


def check_effect_table(literature, heading: str, sweeps: tuple[str, ...], fewest: int) -> None:
    """The section ``heading`` of docs/results/literature.md: its snippet, run as the page says
    (in a dir holding the ``sweeps`` rebuilt from their archives, with the repository's docs),
    prints exactly the rows of its table, in order, at least ``fewest``: no row is missing, stale
    or typed by hand; and every number of the prose after the snippet is one it printed or one
    of the comparison table's (checked against the archives by its own test)."""
    whole = (RESULTS / "literature.md").read_text()
    page = section(whole, heading)
    made = [literature(f"literature-{name}") for name in sweeps]  # all in one tmp dir
    root = made[0].parents[1]
    if not (root / "docs").exists():  # the page runs it in the repository's root
        (root / "docs").symlink_to(ROOT / "docs")
    stdout = run_snippet(page, root)
    printed = stdout.splitlines()
    rows = [line for line in page.splitlines() if line.startswith("| ") and FIGURE.search(line)]
    assert len(printed) >= fewest, "the snippet printed too few rows"
    assert rows == printed
    prose = page.split("```python", 1)[1].split("```", 1)[1]  # after the snippet
    prose = "\n".join(line for line in prose.splitlines() if not line.startswith("|"))
    numbers = re.findall(r"\d+\.\d+", prose)
    assert numbers, "the reading quotes no number"
    comparison = section(whole, "## The comparison")
    compared = [line for line in comparison.splitlines() if line.startswith("| `")]
    assert [n for n in numbers if n not in stdout and not any(n in c for c in compared)] == []


@pytest.mark.slow
def test_the_per_effect_table_is_what_its_snippet_prints_from_the_archives(literature):
    """docs/results/literature.md, "The PER effect under reducible-loss's PER" (PER minus DQN,
    beta on the source's schedule and on the run's): ``check_effect_table``."""
    check_effect_table(
        literature, "## The PER effect",
        ("minatar_paper_dqn", "reducible_loss_minatar_per", "per-beta-over-1m"), 2,
    )  # fmt: skip


@pytest.mark.slow
def test_the_relo_effect_table_is_what_its_snippet_prints_from_the_archives(literature):
    """docs/results/literature.md, "ReLo against its released curves" (ReLo minus PER and minus
    DQN): ``check_effect_table``."""
    check_effect_table(
        literature, "## ReLo against its released curves",
        ("minatar_paper_dqn", "reducible_loss_minatar_per", "reducible_loss_minatar_relo",
         "seaquest-1.0.10", "reducible_loss_minatar_per-seaquest-1.0.10",
         "reducible_loss_minatar_relo-seaquest-1.0.10"), 16,
    )  # fmt: skip


def test_the_readme_quotes_the_literature_page():
    """README.md's "Beside the literature" bullet quotes figures of docs/results/literature.md,
    which the tests above check against the archives: each of its figures is on that page."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    bullet = (
        readme.split("**Beside the literature**", 1)[1].split(" - **", 1)[0].split(" ## ", 1)[0]
    )
    page = " ".join((RESULTS / "literature.md").read_text().split())
    figures = FIGURE.findall(bullet)
    assert len(figures) >= 4, bullet
    assert [f for f in figures if f not in page] == []


@pytest.mark.slow
def test_the_apex_minatar_table_is_what_its_snippet_prints_from_the_archives(tmp_path):
    """docs/results/distributed.md, "MinAtar Breakout and Seaquest, 2 actors": every run in
    ``apex-minatar.tar.xz`` is a finished run of the rules' setup (``minatar.yaml``, 2 actors,
    500,000 env steps, a seed of 0 to 4); the page's snippet, run as the page says (in a dir
    holding those runs and the study's, rebuilt from their archives), prints exactly the rows
    of its table, in order, and the per-run lines the page quotes."""
    page = section((RESULTS / "distributed.md").read_text(), "## MinAtar Breakout and Seaquest")
    root = tmp_path / "runs"
    study = RESULTS / "data" / "minatar-study.tar.xz"
    result = runner.invoke(app, ["unarchive", str(study), str(root / "minatar-study")])
    assert result.exit_code == 0, result.output
    with tarfile.open(RESULTS / "data" / "apex-minatar.tar.xz") as archive:
        archive.extractall(root, filter="data")
    run_dirs = sorted((root / "apex-minatar").glob("*/s*"))
    assert run_dirs, "the archive holds no run"
    for run_dir in run_dirs:
        summary = json.loads((run_dir / "summary.json").read_text())
        config = (run_dir / "config.yaml").read_text()
        game, seed = run_dir.parent.name, int(run_dir.name.removeprefix("s"))
        assert summary["interrupted"] is False and summary["env_steps"] >= 500_000, run_dir
        ran = (summary["config"], summary["env_id"], summary["seed"])
        assert ran == ("minatar", f"MinAtar/{game}-v1", seed), run_dir
        assert seed in range(5) and "\n  actors: 2\n" in config, run_dir
    printed = run_snippet(page, tmp_path).splitlines()
    rows = [line for line in page.splitlines() if line.startswith("| ") and FIGURE.search(line)]
    assert len(rows) >= 2, "the table has no game's rows"
    assert [line for line in printed if line.startswith("| ")] == rows
    flat = " ".join(page.split())
    assert [line for line in printed if not line.startswith("| ") and line not in flat] == []
