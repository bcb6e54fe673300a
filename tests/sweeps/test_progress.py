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
            if (
                m := re.fullmatch(
                    rf"    s{seed}  (\d+)/600 steps  [\d,]+ SPS  (?:ETA|learning in) [\d:]+", line
                )
            )
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


def test_a_run_s_reporter_sends_its_start_and_each_log_point(monkeypatch):
    """``ProgressReporter``, both backends' run callback: ``(run dir, RunProgress)`` at the
    start (steps 0, no SPS yet: "starting") and at each log point, its pack named in each. The
    speed is the one measured over its log points' wall times (issue 45: not the last log
    interval's alone); at the first log point, before there is one, the logged SPS."""
    from per_dqn.sweeps.progress import ProgressReporter

    clock = [50.0]
    monkeypatch.setattr("per_dqn.sweeps.progress.time.monotonic", lambda: clock[0])
    sent: list = []
    reporter = ProgressReporter(lambda *a: sent.append(a), "uniform/s0", 500, "pack 1/2")
    reporter.on_log(100, {"perf/sps": 250.0, "train/loss": 0.1})
    clock[0] += 0.5
    reporter.on_log(200, {"perf/sps": 999.0})
    clock[0] += 1.5
    reporter.on_log(300, {})
    assert sent[0] == ("uniform/s0", RunProgress(0, 500, pack="pack 1/2"))
    assert sent[0][1].text() == "starting"
    assert sent[1] == ("uniform/s0", RunProgress(100, 500, 250.0, "pack 1/2"))
    assert sent[2] == ("uniform/s0", RunProgress(200, 500, 200.0, "pack 1/2"))
    assert sent[3] == ("uniform/s0", RunProgress(300, 500, 100.0, "pack 1/2"))  # 200 in 2 s


def test_a_run_s_first_learning_log_point_has_no_speed_rather_than_the_warm_up_s(monkeypatch):
    """Pins a wrong ETA a review found: at a run's first log point past its warm-up the window
    restarts, and the reporter fell back to the log interval's speed, the warm-up's (2,000
    steps/s acting only), so the line read an ETA of minutes for a run of hours. Right after the
    warm-up the speed is unknown (``-``) until a second learning log point measures it."""
    from per_dqn.sweeps.progress import ProgressReporter

    clock = [0.0]
    monkeypatch.setattr("per_dqn.sweeps.progress.time.monotonic", lambda: clock[0])
    sent: list = []
    reporter = ProgressReporter(lambda *a: sent.append(a), "r", 1_000_000, learning_starts=50_000)
    reporter.on_log(10_000, {"perf/sps": 2_000.0})
    clock[0] = 20.0
    reporter.on_log(50_000, {"perf/sps": 2_000.0})
    assert math.isnan(sent[-1][1].sps)
    assert sent[-1][1].text() == "50,000/1,000,000 steps  - SPS  ETA -:--:--"
    clock[0] = 120.0
    reporter.on_log(60_000, {"perf/sps": 100.0})
    assert sent[-1][1].sps == 100.0


def test_a_run_in_its_warm_up_shows_when_learning_begins_not_an_eta():
    """Issue 45, item 4: a run's ETA projected its whole budget from its warm-up's speed (acting
    only: 15 times its learning speed on Atari). During the warm-up its line now says when
    learning begins; past it, the ETA."""
    warming = RunProgress(20_000, 1_000_000, 2_000.0, learning_starts=50_000)
    assert not warming.learning
    assert warming.text() == "20,000/1,000,000 steps  2,000 SPS  learning in 0:00:15"
    learning = RunProgress(60_000, 1_000_000, 100.0, learning_starts=50_000)
    assert learning.text() == "60,000/1,000,000 steps  100 SPS  ETA 2:36:40"


def test_the_sweep_s_eta_is_the_steps_left_at_the_learning_runs_summed_speed():
    """Issue 45, item 5: `ablate` gave no ETA for the whole sweep. Five runs of 500,000 steps
    running at 100 SPS each (one still in its warm-up, at 1,000 SPS, left out of the speed) and
    10 pending: (4 x 400,000 + 495,000 + 10 x 500,000) steps at 400 SPS."""
    shown = SweepProgress(20, done=5, console=Console(file=io.StringIO(), width=80))
    running = {f"uniform/s{k}": RunProgress(100_000, 500_000, 100.0) for k in range(4)}
    running["uniform/s4"] = RunProgress(5_000, 500_000, 1_000.0, learning_starts=10_000)
    shown.update(5, running)
    assert shown.pending == 10
    assert shown.eta_s() == pytest.approx((4 * 400_000 + 495_000 + 10 * 500_000) / 400.0)
    head = shown.lines()[0]
    assert head.startswith("sweep 5/20 done, 5 running, 10 pending  elapsed 0:00:0")
    assert head.endswith("  ETA 4:55:37") and len(head) <= 80
    # Nothing learning yet (starting, or in the warm-up): no ETA rather than a wrong one.
    shown.update(5, {"uniform/s0": RunProgress(0, 500_000)})
    assert math.isnan(shown.eta_s()) and shown.lines()[0].endswith("ETA -:--:--")
    shown.update(20, {})
    assert shown.lines()[0].endswith("ETA -:--:--")


@pytest.mark.slow
def test_a_worker_that_dies_mid_run_is_a_failed_run_under_the_display(tmp_path, monkeypatch):
    """Pins a crash the display's drain brought in: a worker that died without a result
    (killed, out of memory) was recorded after the sweep had closed its queues, and recording
    first drained the closed progress queue: ``ValueError: Queue is closed``, a traceback
    instead of the run's failure. The worker here dies as its network is built."""
    from support import TINY, cartpole_config

    from per_dqn.sweeps import plan
    from per_dqn.sweeps.backends import local

    (tmp_path / "dies_now.py").write_text(
        "import os\n\ndef factory(obs_shape, num_actions):\n    os._exit(9)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # the spawned worker gets this path too
    config = cartpole_config(*TINY, "train.total_env_steps=600", "run.device=cpu",
                             "agent.network=dies_now:factory")  # fmt: skip
    job = plan.Job("CartPole-v1", "uniform", 0, "uniform/s0", config.to_yaml(), "cartpole")
    sweep = plan.Sweep(tmp_path / "sweep", {"runs": []}, (job,))
    console, _ = plain_console()
    with SweepProgress(1, console=console, plain_interval_s=0.0) as shown:
        result = local.run_sweep(sweep, workers=1, pack=1, progress=shown)
    (outcome,) = result.outcomes
    assert outcome.error == "its worker process died without a result"
    assert result.failed == [outcome]
