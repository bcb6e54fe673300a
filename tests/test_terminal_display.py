"""The live displays as a person sees them: the real command on a pseudo-terminal of 80 and 120
columns, its output read through a terminal emulator (``tests/terminal.py``), and the screen it
leaves asserted line by line (issue 45, item 1).
"""

from __future__ import annotations

import re
import sys

import pytest
from support import TINY, TINY_RUN_DIRS
from terminal import final_screen

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-m", "per_dqn.cli"]


@pytest.mark.parametrize("columns", [80, 120])
def test_ablate_leaves_one_final_frame_below_every_result_line(tmp_path, columns):
    """Pins the stale frames: at each pack change and at the end, an old frame of the display
    stayed on screen with its last row overwritten, and the `[n/N]` result lines were lost under
    it (click wrote them past the live display's hold on stdout, so its redraws erased them).
    Now the screen holds the start line, each result line once and in order, one final frame
    and the report line, none wrapped."""
    out = "runs/sweep"  # under the pty's working dir, tmp_path: a path a person would type
    args = ["ablate", "-c", "cartpole.yaml", "--replay", "uniform,proportional", "--seeds", "2",
            "--steps", "600", "--pack", "1", "--workers", "1", "--out", out,
            *[a for s in TINY for a in ("--set", s)]]  # fmt: skip
    lines, code = final_screen([*CLI, *args], columns, cwd=tmp_path)
    assert code == 0, "\n".join(lines)
    text = "\n".join(lines)
    assert lines[0] == f"sweep {out}: 4 runs, 0 finished, 4 to run", text
    assert lines[1] == "  on 1 worker", text
    results = [line for line in lines if re.match(r"\[\d/4\] ", line)]
    assert [r.split(":")[0] for r in results] == [
        "[1/4] uniform/s0", "[2/4] proportional/s0", "[3/4] uniform/s1", "[4/4] proportional/s1",
    ], text  # fmt: skip
    assert all(
        re.fullmatch(r"\[\d/4\] \S+: final eval return [\d.]+ \(\d+ s\)", r) for r in results
    )
    frames = [line for line in lines if line.startswith("sweep ") and " done, " in line]
    assert len(frames) == 1 and frames[0].startswith("sweep 4/4 done, 0 running, 0 pending"), text
    assert lines.index(frames[0]) > lines.index(results[-1])
    assert lines[-2:] == [
        f"report: {out}/report.md",
        "  beside it: scores.csv, and as PNG and SVG: curves, profiles",
    ], text


@pytest.mark.parametrize("columns", [80, 120])
def test_train_eval_and_report_each_leave_their_final_frame_once(tmp_path, columns):
    """`train`: the run dir, one final frame of two lines (the bar at the budget, then the
    learning line) and the summary table; `eval`: what it plays, one final bar row, then the
    results; `report`: one final stage line, then where the report is. No frame repeated, none
    left half drawn, no line past the screen's width."""
    sets = [a for s in [*TINY, "train.eval_interval=300"] for a in ("--set", s)]
    lines, code = final_screen([*CLI, "train", "-c", "cartpole.yaml", "--steps", "600",
                                "--run-dir", "r", *sets], columns, cwd=tmp_path)  # fmt: skip
    text = "\n".join(lines)
    assert code == 0, text
    assert lines[0] == "run dir: r"
    bars = [line for line in lines if line.startswith("train ")]
    assert len(bars) == 1 and bars[0].endswith("ETA 0:00:00"), text
    assert re.search(r" 600/600 steps  [\d,]+ SPS  elapsed \d+:\d\d:\d\d  ETA 0:00:00$", bars[0])
    assert lines[2].startswith("return ") and " beta 1.000" in lines[2], text
    assert [line.split()[0] for line in lines[3:]] == [
        "run", "replay", "seed", "env", "update", "wall", "final",
    ], text  # fmt: skip

    lines, code = final_screen([*CLI, "eval", "r", "--episodes", "3"], columns, cwd=tmp_path)
    text = "\n".join(lines)
    assert code == 0, text
    assert lines[0].startswith("playing r/checkpoints/step_000000600 (env step 600) on"), text
    rows = [line for line in lines if line.startswith("eval ")]
    assert len(rows) == 1 and " 3/3 episodes  mean return " in rows[0], text
    assert [line.split(":")[0] for line in lines[-4:]] == ["weights", "env", "return", "length"]

    out = "sw"
    lines, code = final_screen([*CLI, "ablate", "-c", "cartpole.yaml", "--replay", "uniform",
                                "--seeds", "1", "--steps", "600", "--out", out, *sets],
                               columns, cwd=tmp_path)  # fmt: skip
    assert code == 0, "\n".join(lines)
    lines, code = final_screen([*CLI, "report", out], columns, cwd=tmp_path)
    text = "\n".join(lines)
    assert code == 0, text
    assert len(lines) == 3 and re.fullmatch(r"report: writing 6/6  elapsed \d+:\d\d:\d\d", lines[0])
    beside = "  beside it: scores.csv, and as PNG and SVG: curves, profiles"
    assert lines[1:] == [f"report: {out}/report.md", beside], text


@pytest.mark.parametrize("columns", [80, 120])
def test_ctrl_c_says_it_saves_a_checkpoint_and_how_large_then_leaves_one_frame(tmp_path, columns):
    """Issue 45, item 3: Ctrl-C on an Atari run froze the display for about 25 s with no word
    while it wrote its checkpoint. Now a line says a checkpoint is being saved, its size and the
    env step, above one final frame of the run (the training view, not the save's), and the
    run ends as interrupted with its resume command."""
    sets = [a for s in TINY for a in ("--set", s)]
    lines, code = final_screen(
        [*CLI, "train", "-c", "cartpole.yaml", "--steps", "1000000", "--run-dir", "r", *sets],
        columns, cwd=tmp_path, interrupt_when=r" [1-9][\d,]*/1\.00M steps",
    )  # fmt: skip
    text = "\n".join(lines)
    assert code == 130, text
    saving = [line for line in lines if line.startswith("stopping: saving a checkpoint")]
    assert len(saving) == 1, text
    match = re.fullmatch(
        r"stopping: saving a checkpoint \(([\d.]+) (KiB|MiB)\) at env step ([\d,]+)", saving[0]
    )
    assert match, saving
    step = int(match[3].replace(",", ""))
    checkpoint = tmp_path / "r" / "checkpoints" / f"step_{step:09d}"
    assert checkpoint.is_dir(), text
    assert [line for line in lines if line.startswith(("train ", "save "))] == [
        line for line in lines if line.startswith("train ")
    ], text  # the save's bar is gone once it is done
    assert len([line for line in lines if line.startswith("train ")]) == 1, text
    assert all(len(line) <= columns for line in lines)
    assert any("--resume r" in line for line in lines), text


@pytest.mark.ray
def test_ablate_on_ray_leaves_one_final_frame_below_every_result_line(tmp_path):
    """The same screen from the Ray backend, whose display the driver redraws from its board's
    polls: the cluster's line, the start lines, the four result lines, one final frame and the
    report line."""
    args = ["ablate", "-c", "cartpole.yaml", "--replay", "uniform,proportional", "--seeds", "2",
            "--steps", "600", "--backend", "ray", "--out", "sw",
            *[a for s in TINY for a in ("--set", s)]]  # fmt: skip
    lines, code = final_screen([*CLI, *args], 80, cwd=tmp_path)
    text = "\n".join(lines)
    assert code == 0, text
    assert re.fullmatch(r"ray: a local Ray cluster at 127\.0\.0\.1:\d+: 1 node, \d+ CPUs", lines[0])
    assert lines[1:3] == ["sweep sw: 4 runs, 0 finished, 4 to run", "  on Ray"], text
    results = [line for line in lines if re.match(r"\[\d/4\] ", line)]
    assert sorted(r.split(":")[0][6:] for r in results) == sorted(TINY_RUN_DIRS), text
    assert [r[:5] for r in results] == ["[1/4]", "[2/4]", "[3/4]", "[4/4]"]
    frames = [line for line in lines if line.startswith("sweep ") and " done, " in line]
    assert len(frames) == 1 and frames[0].startswith("sweep 4/4 done, 0 running, 0 pending"), text
    assert lines[-2:] == [
        "report: sw/report.md", "  beside it: scores.csv, and as PNG and SVG: curves, profiles",
    ], text  # fmt: skip


def test_ablate_s_result_lines_reach_a_redirected_stdout_not_the_display(tmp_path):
    """``ablate ... > log`` with the display on the terminal's stderr: the start, result and
    report lines are stdout's, in the file, and none of them on the screen (a review found the
    fix above sent them through the display, to stderr)."""
    args = ["ablate", "-c", "cartpole.yaml", "--replay", "uniform", "--seeds", "2", "--steps",
            "600", "--out", "sw", *[a for s in TINY for a in ("--set", s)]]  # fmt: skip
    lines, code = final_screen([*CLI, *args], 80, cwd=tmp_path, stdout=tmp_path / "log")
    assert code == 0, "\n".join(lines)
    log = (tmp_path / "log").read_text().splitlines()
    assert log[:2] == ["sweep sw: 2 runs, 0 finished, 2 to run", "  on 2 workers"]
    assert [line[:5] for line in log[2:4]] == ["[1/2]", "[2/2]"]
    assert {line.split(":")[0][6:] for line in log[2:4]} == {"uniform/s0", "uniform/s1"}
    assert log[4:] == [
        "report: sw/report.md",
        "  beside it: scores.csv, and as PNG and SVG: curves, profiles",
    ]
    assert not any(line.startswith(("[1/2]", "[2/2]", "report:", "sweep sw:")) for line in lines)
    frames = [line for line in lines if line.startswith("sweep ") and " done, " in line]
    assert len(frames) == 1 and frames[0].startswith("sweep 2/2 done"), "\n".join(lines)
