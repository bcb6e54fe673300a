"""The sweep's progress display (``per_dqn.sweeps.progress``): what it says, and when it prints
off a terminal. The Ray backend's tests check that real tasks feed it."""

from __future__ import annotations

import io
import math
import re

import pytest
from rich.console import Console

from per_dqn.sweeps.progress import MAX_RUNS_SHOWN, RunProgress, SweepProgress


def plain_console() -> tuple[Console, io.StringIO]:
    text = io.StringIO()
    return Console(file=text, force_terminal=False, width=200), text


def test_a_run_shows_its_steps_speed_and_eta_or_that_it_is_starting():
    """Pins the local sweep display giving no ETA for its running runs (issue 26: each running
    run's steps, SPS and ETA). The ETA is the steps left at the SPS shown: 380,000 / 1,234.4 =
    307.8 s."""
    shown = RunProgress(120_000, 500_000, 1234.4).text()
    assert shown == "120,000/500,000 steps  1,234 SPS  ETA 0:05:07"
    assert RunProgress(500_000, 500_000, 0.0).text().endswith("ETA 0:00:00")  # done
    assert RunProgress(100, 500_000, 0.0).text().endswith("ETA -:--:--")  # stalled
    assert RunProgress(7_200, 10_800, 1.0).text().endswith("ETA 1:00:00")
    assert RunProgress(0, 500_000).text() == "starting"
    assert math.isnan(RunProgress(0, 10).sps)


def test_the_display_counts_done_running_and_pending_and_lists_each_running_run():
    console, _ = plain_console()
    shown = SweepProgress(45, done=12, dashboard="127.0.0.1:8265", console=console)
    shown.update(
        13,
        {
            "b/rank/alpha=0.7/s2": RunProgress(0, 500_000),
            "a/uniform/s2": RunProgress(120_000, 500_000, 1234.0),
        },
    )
    assert shown.pending == 45 - 13 - 2
    head, dashboard, *runs = shown.lines()
    assert head.startswith("sweep 13/45 done, 2 running, 30 pending  elapsed 0:00:0")
    assert len(head) <= 80
    assert dashboard == "dashboard http://127.0.0.1:8265"
    # sorted by run dir, names padded to one column
    assert runs == [
        "  a/uniform/s2         120,000/500,000 steps  1,234 SPS  ETA 0:05:07",
        "  b/rank/alpha=0.7/s2  starting",
    ]


def test_off_a_terminal_the_display_prints_plain_lines_at_its_interval_only():
    console, text = plain_console()
    with SweepProgress(3, console=console, plain_interval_s=3600.0) as shown:
        assert shown.plain
        shown.update(1, {"uniform/s1": RunProgress(600, 1000, 50.0)})
    assert text.getvalue() == ""  # the interval has not passed

    console, text = plain_console()
    with SweepProgress(3, console=console, plain_interval_s=0.0) as shown:
        shown.update(1, {"uniform/s1": RunProgress(600, 1000, 50.0)})
        shown.update(2, {})
    lines = text.getvalue().splitlines()
    assert [line.split("  elapsed")[0] for line in lines[::2]] == [
        "sweep 1/3 done, 1 running, 1 pending",
        "sweep 2/3 done, 0 running, 1 pending",
    ]
    assert lines[1] == "  uniform/s1  600/1,000 steps  50 SPS  ETA 0:00:08"
    assert len(lines) == 3


def test_a_terminal_shows_at_most_max_runs_shown_runs_and_says_how_many_more():
    text = io.StringIO()
    console = Console(file=text, force_terminal=True, width=100)
    shown = SweepProgress(100, console=console)
    assert not shown.plain
    shown.update(0, {f"uniform/s{i:03d}": RunProgress(i, 1000, 10.0) for i in range(25)})
    console.print(shown)
    printed = [line.rstrip() for line in text.getvalue().splitlines()]
    assert len(printed) == 1 + MAX_RUNS_SHOWN + 1
    assert printed[1].startswith("  uniform/s000  0/1,000 steps")
    assert printed[-1] == "  ... and 5 more running"


def test_runs_in_packs_are_listed_under_their_pack_naming_what_they_share_once():
    """Pins the pack view (issue 24): runs alone first, then each pack in number order (10 after
    9), its line naming the run dirs' shared head, its runs indented under it without it; the
    longest names of the MinAtar study fit 80 columns."""
    console, _ = plain_console()
    shown = SweepProgress(150, console=console)
    shown.update(
        12,
        {
            "MinAtar-SpaceInvaders-v1/proportional/s9": RunProgress(
                120_000, 500_000, 1234.0, "pack 10/30"
            ),
            "MinAtar-SpaceInvaders-v1/uniform/s9": RunProgress(
                120_000, 500_000, 99.0, "pack 10/30"
            ),
            "MinAtar-Asterix-v1/rank/s1": RunProgress(0, 500_000, pack="pack 9/30"),
            "CartPole-v1/uniform/s3": RunProgress(1000, 50_000, 500.0),
        },
    )
    _, *rest = shown.lines()
    assert rest == [
        "  CartPole-v1/uniform/s3  1,000/50,000 steps  500 SPS  ETA 0:01:38",
        "  pack 9/30  MinAtar-Asterix-v1/rank",
        "    s1  starting",
        "  pack 10/30  MinAtar-SpaceInvaders-v1",
        "    proportional/s9  120,000/500,000 steps  1,234 SPS  ETA 0:05:07",
        "    uniform/s9       120,000/500,000 steps  99 SPS  ETA 1:03:58",
    ]
    assert max(len(line) for line in shown.lines()) <= 80


@pytest.mark.slow
def test_a_local_sweep_shows_its_packs_runs_steps_and_speed_as_they_run(tmp_path):
    """Pins the local backend's display (issue 24 and 26: it printed nothing until a run ended):
    two CartPole runs in one pack on one worker report their steps and SPS at each log point,
    through the worker's queue, under their pack's line. Also pins a CI failure: a pack that
    ended within one 0.5 s wait of the sweep's loop showed none of its steps, because its
    reports were dropped with its result instead of shown before it."""
    from support import TINY, cartpole_config

    from per_dqn.sweeps import plan
    from per_dqn.sweeps.backends import local

    jobs = tuple(
        plan.Job(
            "CartPole-v1", "uniform", seed, f"uniform/s{seed}",
            cartpole_config(*TINY, f"run.seed={seed}", "train.total_env_steps=600",
                            "run.device=cpu").to_yaml(),
            "cartpole",
        )
        for seed in (0, 1)
    )  # fmt: skip
    sweep = plan.Sweep(tmp_path / "sweep", {"runs": []}, jobs)
    console, text = plain_console()
    with SweepProgress(2, console=console, plain_interval_s=0.0) as shown:
        result = local.run_sweep(sweep, workers=1, pack=2, progress=shown)
    assert not result.failed and not result.interrupted
    lines = text.getvalue().splitlines()
    assert "  pack 1/1  uniform" in lines
    # Each run's steps at its log points (every 100 env steps) as it ran, with its speed.
    for seed in (0, 1):
        seen = {
            int(m.group(1))
            for line in lines
            if (m := re.fullmatch(rf"    s{seed}  (\d+)/600 steps  [\d,]+ SPS  ETA [\d:]+", line))
        }
        # The display redraws every 0.5 s with the newest report of each run: which log
        # points it caught depends on the machine's speed, not that it caught some.
        assert seen and seen <= {100, 200, 300, 400, 500, 600}, "\n".join(lines)
    assert lines[-1].startswith("sweep 2/2 done, 0 running, 0 pending")


def test_the_report_display_prints_its_stage_off_a_terminal():
    """``report``'s display off a terminal: a plain line once due, naming the stage and how far
    it is; a stage of one step shows no count; one more line where it ended."""
    import time

    from per_dqn.sweeps.progress import ReportProgress

    buffer = io.StringIO()
    with ReportProgress(console=Console(file=buffer, width=80), plain_interval_s=0.2) as shown:
        shown.stage("reading runs", 0, 150)
        assert buffer.getvalue() == ""
        time.sleep(0.25)
        shown.stage("reading runs", 37, 150)
        shown.stage("figures", 0, 1)
    lines = buffer.getvalue().splitlines()
    assert re.fullmatch(r"progress: report: reading runs 37/150  elapsed 0:00:00", lines[0])
    assert lines[1] == "progress: report: figures  elapsed 0:00:00"
    assert len(lines) == 2


def test_a_run_s_reporter_sends_its_start_and_each_log_point():
    """``ProgressReporter``, both backends' run callback: ``(run dir, RunProgress)`` at the
    start (steps 0, no SPS yet: "starting") and at each log point with the logged SPS, its pack
    named in each."""
    from per_dqn.sweeps.progress import ProgressReporter

    sent: list = []
    reporter = ProgressReporter(lambda *a: sent.append(a), "uniform/s0", 500, "pack 1/2")
    reporter.on_log(100, {"perf/sps": 250.0, "train/loss": 0.1})
    reporter.on_log(200, {})
    assert sent[0] == ("uniform/s0", RunProgress(0, 500, pack="pack 1/2"))
    assert sent[0][1].text() == "starting"
    assert sent[1] == ("uniform/s0", RunProgress(100, 500, 250.0, "pack 1/2"))
    assert sent[2][1].env_steps == 200 and math.isnan(sent[2][1].sps)
