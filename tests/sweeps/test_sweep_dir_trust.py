"""Issue 43, the trust boundary's second ring: a sweep dir read back by ``ablate`` (a re-run,
``--reuse``), ``report`` and ``archive`` is data from anywhere. Each test pins one of the
defects the adversarial trial found (E1, E4, E5, E6, E9, E10), and fails on the code before its
fix: a link that had ``ablate`` delete outside the sweep dir, a memory ``train`` refuses that
``ablate`` allocated, FIFOs and oversized files that hung or were read whole, an event-file link
out of the sweep dir, a deep nest that was a ``RecursionError``, malformed records that were
tracebacks. Every command runs under a time limit (``support.time_limit``), so a hang fails."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from support import TINY, nest, sets, time_limit, tree
from typer.testing import CliRunner

from per_dqn.cli import app
from per_dqn.rundir.readback import KINDS

runner = CliRunner()


def ablate_args(out: Path, *extra: str) -> list[str]:
    """One uniform CartPole run, 600 steps, in this process's one worker."""
    return ["ablate", "-c", "cartpole.yaml", "--replay", "uniform", "--seeds", "1", "--steps",
            "600", "--workers", "1", "--out", str(out), *sets(*TINY), *extra]  # fmt: skip


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished one-run sweep (``uniform/s0``)."""
    out = tmp_path_factory.mktemp("trust") / "sweep"
    result = runner.invoke(app, ablate_args(out))
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def sweep(finished, tmp_path) -> Path:
    """A copy of the finished sweep, to damage."""
    return Path(shutil.copytree(finished, tmp_path / "sweep", symlinks=True))


def one_error(result, *parts: str) -> str:
    """The result is exit 2 with one ``error:`` line holding each of ``parts``; returns it."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if not line.startswith("progress: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


# --- E1: ablate never clears, writes or trains through a link ------------------------------------


@pytest.mark.slow
def test_a_run_dir_that_is_a_link_is_refused_by_name_and_its_target_kept(sweep, tmp_path):
    """Issue 43, E1: a run dir of a sweep replaced by a link to any directory had ``ablate``'s
    re-run clear the link's target with ``clear_run_dir`` (its files deleted) and train there,
    exit 0. Now the link is refused by name in one line, before any run starts, exit 2, and
    the directory it leads to is as it was."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years of work\n")
    (victim / "data").mkdir()
    (victim / "data" / "raw.csv").write_text("1,2,3\n")
    before = tree(victim)
    shutil.rmtree(sweep / "uniform" / "s0")
    (sweep / "uniform" / "s0").symlink_to(victim, target_is_directory=True)
    with time_limit(120):
        result = runner.invoke(app, ablate_args(sweep))
    one_error(result, f"{sweep / 'uniform' / 's0'} is a symbolic link (to {victim})", "refused")
    assert tree(victim) == before


@pytest.mark.slow
def test_an_arm_dir_that_is_a_link_is_refused_too(sweep, tmp_path):
    """Issue 43, E1: a link higher up, the arm's dir (``uniform``), leads every run of the arm
    out of the sweep dir just as well; it is refused by name."""
    elsewhere = tmp_path / "elsewhere"
    shutil.move(sweep / "uniform", elsewhere)
    shutil.rmtree(elsewhere / "s0" / "checkpoints", ignore_errors=True)
    (elsewhere / "s0" / "summary.json").unlink()  # unfinished: a re-run would clear it
    (sweep / "uniform").symlink_to(elsewhere, target_is_directory=True)
    before = tree(elsewhere)
    with time_limit(120):
        result = runner.invoke(app, ablate_args(sweep))
    one_error(result, f"{sweep / 'uniform'} is a symbolic link")
    assert tree(elsewhere) == before


def test_clear_run_dir_refuses_a_link_where_it_deletes(tmp_path):
    """Issue 43, E1, the second guard: ``clear_run_dir`` itself refuses a run dir that is a
    link (one made after the sweep was planned), and deletes nothing through it."""
    from per_dqn.sweeps.job import clear_run_dir

    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("x")
    link = tmp_path / "run"
    link.symlink_to(target, target_is_directory=True)
    with pytest.raises(ValueError) as refused:
        clear_run_dir(link)
    assert str(refused.value) == (
        f"{link} is a symbolic link; refused: a run dir is never cleared through one"
    )
    assert (target / "keep").read_text() == "x"


# --- E4: every entry point consults the memory planner ------------------------------------------

HUGE = "replay.capacity=1000000000000"  # ~tens of TiB for CartPole: no machine holds it


def test_train_and_the_api_refuse_it_the_same_way(tmp_path):
    """Issue 43, E4 (``ablate``'s own test: ``tests/test_cli.py``, its preflight): ``train`` and
    ``per_dqn.train`` (and so resume and packs, which build their runs the same way, in
    ``Trainer``) give the planner's line too."""
    import per_dqn

    with time_limit(120):
        result = runner.invoke(app, ["train", "-c", "cartpole.yaml", "--run-dir",
                                     str(tmp_path / "run"), "--set", HUGE])  # fmt: skip
    line = one_error(result, "replay.capacity: a 1,000,000,000,000-transition")
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match=r"needs .* but only .* of RAM is available") as caught:
        per_dqn.train("cartpole.yaml", run_dir=tmp_path / "api", overrides={
            "replay.capacity": 10**12})  # fmt: skip

    # The RAM available is read again by the second call and moves meanwhile: the rest is equal.
    def shown(text: str) -> str:
        return re.sub(r"only [\d.]+ GiB", "only N GiB", text.split("replay.capacity: ")[1])

    assert shown(str(caught.value)) == shown(line)


# --- E5: bounded readers: FIFOs, oversized files, /dev/zero ---------------------------------------


def fifo_in_place_of(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize("command", ["report", "ablate", "archive"])
def test_a_fifo_as_sweep_json_is_refused_at_once(sweep, tmp_path, command):
    """Issue 43, E5: a FIFO as ``sweep.json`` hung ``report``, ``ablate`` and ``archive`` (a
    plain ``read_text`` blocks until a writer opens it). Now it is refused in one line, exit 2."""
    fifo_in_place_of(sweep / "sweep.json")
    args = {"report": ["report", str(sweep)], "ablate": ablate_args(sweep),
            "archive": ["archive", str(sweep), str(tmp_path / "a.tar.xz")]}[command]  # fmt: skip
    with time_limit(60):
        result = runner.invoke(app, args)
    one_error(result, "sweep.json: a FIFO, not a regular file")


def test_sweep_json_linked_to_dev_zero_is_refused_unread(sweep):
    """Issue 43, E5: ``sweep.json`` linked to ``/dev/zero`` was read until memory ran out. A link
    out of the sweep dir is refused before it is opened."""
    (sweep / "sweep.json").unlink()
    (sweep / "sweep.json").symlink_to("/dev/zero")
    with time_limit(60):
        result = runner.invoke(app, ["report", str(sweep)])
    one_error(result, "sweep.json: leads outside", "(to /dev/zero)")


def test_an_oversized_sweep_json_is_refused_by_its_size_unread(sweep):
    """Issue 43, E5: a 1 GiB file was read whole (2.1-2.4 GB resident). A ``sweep.json`` over
    its cap (64 MiB) is refused from its size alone: a sparse file, never read."""
    cap = KINDS["sweep"].max_bytes
    with open(sweep / "sweep.json", "r+b") as file:
        file.truncate(cap + 1)
    with time_limit(60):
        result = runner.invoke(app, ["report", str(sweep)])
    one_error(result, f"{cap + 1:,} bytes, over the {cap:,} a sweep.json may have")


@pytest.mark.parametrize("name", ["config.yaml", "summary.json", "events"])
def test_a_fifo_in_a_run_dir_never_blocks_report(sweep, name):
    """Issue 43, E5: a FIFO as a run's ``config.yaml`` blocked ``report`` forever (it read the
    run's exploration from it: ``_exploration``), as did one as an event file. Now report goes
    on: a FIFO summary or event file skips its run with a warning naming it, a FIFO config only
    loses the run's exploration text."""
    run_dir = sweep / "uniform" / "s0"
    if name == "events":
        (path,) = run_dir.glob("events.out.tfevents.*")
    else:
        path = run_dir / name
    fifo_in_place_of(path)
    with time_limit(60):
        result = runner.invoke(app, ["report", str(sweep)])
    if name == "config.yaml":
        assert result.exit_code == 0, result.output
    else:
        # The sweep's one run is skipped, so nothing is left to report: one error, exit 2.
        assert result.exit_code == 2, result.output
        assert f"warning: {path}: not a regular file; run skipped" in result.stderr


def test_a_fifo_config_in_a_run_dir_never_blocks_an_ablate_rerun(sweep):
    """Issue 43, E5: an ``ablate`` re-run read every held run's ``config.yaml`` with a plain
    ``read_text`` (a FIFO hung it); now it is skipped as unreadable and the re-run finds its run
    finished."""
    fifo_in_place_of(sweep / "uniform" / "s0" / "config.yaml")
    with time_limit(60):
        result = runner.invoke(app, ablate_args(sweep))
    assert result.exit_code == 0, result.output


# --- E6: every file TensorBoard reads is confined -----------------------------------------------


def test_an_event_file_link_of_any_tfevents_name_out_of_the_sweep_dir_skips_its_run(
    sweep, finished, tmp_path
):
    """Issue 43, E6: ``report`` confined only ``events.out.tfevents.*``, but TensorBoard reads
    every name holding ``tfevents``: an ``x.tfevents`` link out of the sweep dir put another
    run's curves into ``report.md`` without a warning. Now the run is skipped, named."""
    other = Path(shutil.copytree(finished, tmp_path / "other"))
    (event,) = (other / "uniform" / "s0").glob("events.out.tfevents.*")
    link = sweep / "uniform" / "s0" / "x.tfevents"
    link.symlink_to(event)
    with time_limit(60):
        result = runner.invoke(app, ["report", str(sweep)])
    assert result.exit_code == 2, result.output  # its one run skipped
    assert f"warning: {link}: a symlink out of the sweep dir; run skipped" in result.stderr


# --- E9: a deep nest is no RecursionError -------------------------------------------------------


@pytest.mark.parametrize("command", ["report", "archive", "reuse"])
def test_a_nest_1200_dirs_deep_is_no_recursion_error(sweep, tmp_path, command):
    """Issue 43, E9: a directory nest 1,200 levels deep gave a ``RecursionError`` in ``report``
    (a dir without ``sweep.json``), ``archive`` and ``ablate --reuse``: ``os.walk`` and
    ``rglob`` recurse once a level. Now the tree is walked without recursion, to a bounded
    depth (``readback.MAX_WALK_DEPTH``), and the run near the top is found."""
    if command == "report":
        (sweep / "sweep.json").unlink()
    source = sweep if command != "reuse" else Path(shutil.copytree(sweep, tmp_path / "src"))
    args = {
        "report": ["report", str(sweep)],
        "archive": ["archive", str(sweep), str(tmp_path / "a.tar.xz")],
        "reuse": ablate_args(tmp_path / "fresh", "--reuse", str(source)),
    }[command]
    with nest(source, 1200), time_limit(120):
        result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "RecursionError" not in result.output
    if command == "reuse":
        assert "1 to take from --reuse, 0 to run" in result.output, result.output


# --- E10: a malformed record is one line -------------------------------------------------------

MALFORMED = {
    "runs not a list": {"runs": 1},
    "a run not an object": {"runs": [1]},
    "a run without run_dir": {"runs": [{"seed": 0}]},
    "run_dir not a string": {"runs": [{"run_dir": 7}]},
    "seed a string": {"runs": [{"run_dir": "uniform/s0", "seed": "0"}]},
    "settings a list": {"runs": [{"run_dir": "uniform/s0", "settings": []}]},
    "arms a string": {"arms": "uniform"},
    "arm_settings a list": {"arm_settings": []},
    "envs of numbers": {"envs": [1]},
    "arms null": {"arms": None},
    "seeds null": {"seeds": None},
    "grid null": {"grid": None},
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_an_ablate_rerun_refuses_a_malformed_record_in_one_line(sweep, case):
    """Issue 43, E10: an ``ablate`` re-run trusted the shape of ``sweep.json``: 7 of 8 malformed
    records gave a traceback (``"runs": [1]``: a ``TypeError``; a null list, found in review,
    too). Now the record is validated by a strict model (``sweeps.record``) and a bad one is one
    line naming it, exit 2."""
    record = json.loads((sweep / "sweep.json").read_text())
    record.update(MALFORMED[case])
    (sweep / "sweep.json").write_text(json.dumps(record))
    with time_limit(60):
        result = runner.invoke(app, ablate_args(sweep))
    one_error(result, str(sweep / "sweep.json"))


def test_report_refuses_arm_settings_that_are_a_list_in_one_line(sweep):
    """Issue 43, E10: ``report`` gave a traceback when ``arm_settings`` was a list."""
    record = json.loads((sweep / "sweep.json").read_text())
    record["arm_settings"] = ["uniform"]
    (sweep / "sweep.json").write_text(json.dumps(record))
    result = runner.invoke(app, ["report", str(sweep)])
    one_error(result, "sweep.json: not a SweepRecord record: arm_settings")


def test_a_run_to_reuse_holding_a_deep_nest_is_not_taken(sweep, tmp_path):
    """Issue 43, E9 (found in review): a finished run dir holding a nest past the walk's depth
    bound passed the check for links (the walk stopped at 16 levels) and was then copied by the
    recursive ``shutil.copytree``: a ``RecursionError``. A dir at the bound is named like a link,
    so the run is not taken, and is run instead."""
    with nest(sweep / "uniform" / "s0", 1200), time_limit(120):
        result = runner.invoke(app, ablate_args(tmp_path / "fresh", "--reuse", str(sweep)))
    assert result.exit_code == 0, result.output
    assert "1 runs, 0 finished, 1 to run\n  on 1 worker" in result.output, result.output


def test_a_record_missing_its_lists_is_read_as_empty(sweep):
    """Issue 43, E10 (found in review): an older record may lack ``arms``, ``seeds``, ``envs``
    or ``grid``; the re-run merged it with ``old["arms"]``, a ``KeyError``. Absent, they read as
    empty, and the re-run finds its run finished."""
    record = json.loads((sweep / "sweep.json").read_text())
    for key in ("arms", "seeds", "envs", "grid", "arm_settings", "overrides"):
        del record[key]
    (sweep / "sweep.json").write_text(json.dumps(record))
    with time_limit(60):
        result = runner.invoke(app, ablate_args(sweep))
    assert result.exit_code == 0, result.output
    assert "1 runs, 1 finished, 0 to run" in result.output, result.output
