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

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from per_dqn.cli import app

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
PUBLISHED = RESULTS / "published" / "reducible_loss_minatar.csv"
GAMES = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
# A figure: an estimate with its interval, or a mean with its sd.
FIGURE = re.compile(r"\d+\.\d+ \[\d+\.\d+, \d+\.\d+\]|\d+\.\d+ \(\d+\.\d+\)")

runner = CliRunner()


def rebuilt_report(archive: Path, out: Path, *report_args: str) -> str:
    """``per-dqn unarchive ARCHIVE OUT`` then ``per-dqn report OUT ...``: its report.md."""
    result = runner.invoke(app, ["unarchive", str(archive), str(out)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["report", str(out), *report_args])
    assert result.exit_code == 0, result.output
    return (out / "report.md").read_text()


def section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of its level."""
    level = heading.split(" ")[0]
    start = text.index(heading + "\n")
    end = text.find(f"\n{level} ", start + len(heading))
    return text[start : end if end != -1 else len(text)]


def lines_about(report: str, game: str) -> str:
    """The report's lines about ``game``: its own section, and every table row naming it."""
    own = section(
        report, next(h for h in report.splitlines() if h.startswith(f"## MinAtar/{game}-v1"))
    )
    rows = [line for line in report.splitlines() if f"MinAtar/{game}-v1" in line]
    return "\n".join([own, *rows])


def game_of(text: str) -> str:
    """The one game ``text`` (a bullet or a table row of a page) is about."""
    named = [g for g in GAMES if re.search(rf"\b{g}\b", text)]
    assert len(named) == 1, text
    return named[0]


@pytest.mark.slow
def test_the_minatar_study_section_quotes_its_archive(tmp_path):
    """docs/results/minatar.md, "The study with packs, under way": the runs it says are finished,
    the report's ``Compute:`` line and every figure of its per-game bullets, against the report of
    ``docs/results/data/minatar-study.tar.xz``."""
    report = rebuilt_report(RESULTS / "data" / "minatar-study.tar.xz", tmp_path / "study")
    page = section((RESULTS / "minatar.md").read_text(), "## The study with packs, under way")

    used = re.search(r"- Runs used: (\d+) of (\d+) planned", report)
    assert used, report[:2000]
    assert f"Its first {used[1]} runs are finished" in page
    assert f"{used[2]} runs in one sweep dir" in page
    compute = re.search(r"- Compute: ([^(]+?) \(", report)
    assert compute
    assert f'"Compute: {compute[1]}"' in " ".join(page.split())

    bullets = re.findall(r"^- (.+?)(?=^- |\Z)", page.split("So far")[1], re.S | re.M)
    assert len(bullets) >= 2
    for bullet in bullets:
        bullet = " ".join(bullet.split())
        figures = FIGURE.findall(bullet)
        assert figures, bullet
        about = lines_about(report, game_of(bullet))
        missing = [f for f in figures if f not in about]
        assert missing == [], (game_of(bullet), missing)


@pytest.mark.slow
def test_the_literature_comparison_rows_quote_their_archive(tmp_path):
    """docs/results/literature.md, the comparison table: every figure of each row of ours (the
    training-return EMA, the published value beside it, the greedy final score) and the MinAtar
    paper's last-100 measure quoted under the table, against the report of
    ``docs/results/data/literature-minatar_paper_dqn.tar.xz`` with the published curves."""
    report = rebuilt_report(
        RESULTS / "data" / "literature-minatar_paper_dqn.tar.xz",
        tmp_path / "literature",
        "--published",
        str(PUBLISHED),
    )
    page = (RESULTS / "literature.md").read_text()
    rows = [
        line
        for line in page.splitlines()
        if line.startswith("| `minatar_paper_dqn` |") and FIGURE.search(line)
    ]
    assert len(rows) >= 2, "no row of ours in the comparison table"
    for row in rows:
        about = lines_about(report, game_of(row.split("|")[2]))
        missing = [f for f in FIGURE.findall(row) if f not in about]
        assert missing == [], (row, missing)

    # "the mean of the last 100 training episodes, is 13.58 (1.89) on Asterix and ..."
    last100 = re.search(r"last 100\s+training episodes, is (.+?)\)\.", " ".join(page.split()))
    assert last100
    for figure, game in re.findall(r"(\d+\.\d+ \(\d+\.\d+\)) on (\w+)", last100[1]):
        row = next(
            line
            for line in report.splitlines()
            if line.startswith(f"| MinAtar/{game}-v1 | uniform |") and line.count("|") == 6
        )
        assert row.split("|")[5].strip() == figure, (game, row)
