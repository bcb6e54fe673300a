"""A sweep's record (``sweep.json``) as ``per_dqn.sweeps.plan`` grows and writes it: merging an
old record with a new plan, by hand; what ``start_sweep`` writes and lists; the sweep dir's lock
and the dirs a refused sweep leaves behind.

tests/sweeps/test_ablate.py drives these through ``per-dqn ablate``; here each is called
directly, on plans that run nothing, and the expected records are written out in full."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from per_dqn.config import parse_override
from per_dqn.rundir import dirs as rundir
from per_dqn.sweeps import axes, plan
from per_dqn.sweeps.runs import SWEEP_FILE

STEPS = ["train.learning_starts=100", "run.device=cpu"]


def a_plan(out: Path, seeds=(0,), arms=("uniform",), grid=()) -> plan.Sweep:
    overrides = [parse_override(s) for s in STEPS]
    return plan.plan_sweep("cartpole.yaml", list(arms), list(seeds), 300, overrides, out, grid)


def finish(out: Path, run_dir: str, interrupted: bool = False) -> None:
    """Writes the summary a run leaves when it ends (``interrupted`` as given)."""
    (out / run_dir).mkdir(parents=True, exist_ok=True)
    (out / run_dir / "summary.json").write_text(json.dumps({"interrupted": interrupted}))


def run_entry(run_dir, seed, kind="uniform", arm="uniform", settings=None, point=None):
    return {
        "env_id": "CartPole-v1", "arm": arm, "kind": kind, "settings": settings or {},
        "point": point or {}, "seed": seed, "run_dir": run_dir,
    }  # fmt: skip


def test_merging_a_format_1_record_keeps_its_runs_and_adds_the_new_ones():
    """Pins the merge with a record written before arm settings and grids (format 1: no
    ``axes``, ``grid`` or ``arm_settings``): the sweep's own axes stand in for its axes, its runs
    come first, the new runs the old one lacks follow, and arms, seeds and envs are joined in
    first-seen order; the old provenance and growth log are kept, the new plan's fields win."""
    old = {
        "format": 1, "config": "cartpole.yaml", "arms": ["uniform"], "seeds": [0],
        "envs": ["CartPole-v1"], "runs": [run_entry("uniform/s0", 0)],
        "resolved_config": {"run": {"seed": None}, "train": {"lr": 1}},
        "provenance": {"host": "old"}, "grown": [{"runs_added": 1}],
    }  # fmt: skip
    new = {
        "format": 2, "config": "cartpole.yaml", "arms": ["rank", "uniform"], "arm_settings": {},
        "grid": {}, "seeds": [1, 0], "envs": ["CartPole-v1"], "axes": list(axes.SWEEP_AXES),
        "resolved_config": {"run": {"seed": 1}, "train": {"lr": 1}},
        "runs": [run_entry("uniform/s0", 0), run_entry("rank/s1", 1, "rank", "rank")],
    }  # fmt: skip
    assert plan.merge_records(old, new) == {
        "format": 2, "config": "cartpole.yaml", "arms": ["uniform", "rank"], "arm_settings": {},
        "grid": {}, "seeds": [0, 1], "envs": ["CartPole-v1"], "axes": list(axes.SWEEP_AXES),
        "resolved_config": {"run": {"seed": None}, "train": {"lr": 1}},
        "runs": [run_entry("uniform/s0", 0), run_entry("rank/s1", 1, "rank", "rank")],
        "provenance": {"host": "old"}, "grown": [{"runs_added": 1}],
    }  # fmt: skip


def test_merging_keeps_the_old_record_s_grid_arm_settings_and_axes():
    """Pins the merge of two format-2 records: a grid key of the old record only keeps its
    values, a key in both joins them (old first), a new key is added; the old arms' settings
    stay beside the new ones; the axes are the union, and the resolved config is blanked on
    every one of them (an old grid key included)."""
    old = {
        "arms": ["rank/alpha=0.7"], "arm_settings": {"rank/alpha=0.7": {"replay.alpha": 0.7}},
        "grid": {"agent.n_step": [1, 3], "agent.gamma": [0.9]}, "seeds": [0], "envs": ["E"],
        "axes": [*axes.SWEEP_AXES, "replay.alpha", "agent.n_step", "agent.gamma"], "runs": [],
    }  # fmt: skip
    new = {
        "arms": ["uniform"], "arm_settings": {}, "grid": {"agent.gamma": [0.99, 0.9],
        "train.lr": [1]}, "seeds": [0], "envs": ["E"],
        "axes": [*axes.SWEEP_AXES, "agent.gamma", "train.lr"], "runs": [],
        "resolved_config": {"agent": {"n_step": 5, "gamma": 0.9}, "replay": {"alpha": 0.6}},
    }  # fmt: skip
    merged = plan.merge_records(old, new)
    assert merged["grid"] == {"agent.n_step": [1, 3], "agent.gamma": [0.9, 0.99], "train.lr": [1]}
    assert merged["arm_settings"] == {"rank/alpha=0.7": {"replay.alpha": 0.7}}
    assert merged["arms"] == ["rank/alpha=0.7", "uniform"]
    assert merged["axes"] == [
        *axes.SWEEP_AXES,
        "replay.alpha",
        "agent.n_step",
        "agent.gamma",
        "train.lr",
    ]
    assert merged["resolved_config"] == {
        "agent": {"n_step": None, "gamma": None},
        "replay": {"alpha": None},
    }
    assert "provenance" not in merged and "grown" not in merged


def test_start_sweep_writes_the_record_with_its_provenance_and_lists_every_run(tmp_path):
    """Pins a new sweep's start: the dir is made (parents too), ``sweep.json`` is the plan's
    record plus the provenance of the command, and every run is left to do, in plan order."""
    out = tmp_path / "a" / "sweep"
    sweep = a_plan(out, seeds=(0, 1), arms=("uniform", "rank"))
    planned = json.loads(json.dumps(sweep.record))
    todo = plan.start_sweep(sweep)
    assert todo == list(sweep.jobs)
    assert [j.run_dir for j in todo] == ["uniform/s0", "rank/s0", "uniform/s1", "rank/s1"]
    written = json.loads((out / SWEEP_FILE).read_text())
    assert {k: v for k, v in written.items() if k != "provenance"} == planned
    assert written["provenance"]["command"] and "grown" not in written


def test_start_sweep_leaves_out_finished_runs_only(tmp_path):
    """Pins what is left to do: a run whose summary says ``interrupted: false`` is done; an
    interrupted one, one without a summary and one whose summary lacks the flag are not."""
    out = tmp_path / "sweep"
    sweep = a_plan(out, seeds=(0, 1, 2, 3))
    finish(out, "uniform/s0")
    finish(out, "uniform/s1", interrupted=True)
    (out / "uniform/s3").mkdir(parents=True)
    (out / "uniform/s3/summary.json").write_text("{}")
    todo = plan.start_sweep(sweep)
    assert [j.run_dir for j in todo] == ["uniform/s1", "uniform/s2", "uniform/s3"]
    assert [j.run_dir for j in sweep.pending()] == ["uniform/s1", "uniform/s2", "uniform/s3"]


def test_growing_a_sweep_logs_who_grew_it_and_keeps_the_first_provenance(tmp_path):
    """Pins the growth log: a plan with one more seed adds its run after the old ones, keeps the
    first command's provenance, and appends ``{"runs_added": 1, ...provenance}`` to ``grown``;
    the same plan again changes nothing on disk (``sweep.json`` is not rewritten)."""
    out = tmp_path / "sweep"
    plan.start_sweep(a_plan(out, seeds=(0,)))
    first = json.loads((out / SWEEP_FILE).read_text())
    grown = a_plan(out, seeds=(0, 1))
    plan.start_sweep(grown)
    record = json.loads((out / SWEEP_FILE).read_text())
    assert [r["run_dir"] for r in record["runs"]] == ["uniform/s0", "uniform/s1"]
    assert record["seeds"] == [0, 1]
    assert record["provenance"] == first["provenance"]
    assert len(record["grown"]) == 1 and record["grown"][0]["runs_added"] == 1
    assert record["grown"][0]["command"] == first["provenance"]["command"]
    before = (out / SWEEP_FILE).stat().st_mtime_ns, (out / SWEEP_FILE).read_bytes()
    plan.start_sweep(a_plan(out, seeds=(0, 1)))
    assert ((out / SWEEP_FILE).stat().st_mtime_ns, (out / SWEEP_FILE).read_bytes()) == before


def test_lock_sweep_dir_creates_the_dir_and_its_lock_and_refuses_a_second_holder(tmp_path):
    """Pins the sweep dir's lock: taken, it creates the dir and its lock file; a second
    ``ablate`` (another process) is refused with a line that calls it a sweep dir."""
    out = tmp_path / "new" / "sweep"
    sweep = a_plan(out)
    taken_r, taken_w = os.pipe()
    release_r, release_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        with plan.lock_sweep_dir(sweep):
            os.write(taken_w, b"1")
            os.read(release_r, 1)
        os._exit(0)
    try:
        assert os.read(taken_r, 1) == b"1"
        assert (out / rundir.LOCK_FILE).is_file()
        with pytest.raises(rundir.RunDirInUse, match="sweep dir"):
            plan.lock_sweep_dir(sweep)
    finally:
        os.write(release_w, b"1")
        os.waitpid(pid, 0)
        for fd in (taken_r, taken_w, release_r, release_w):
            os.close(fd)


def test_first_missing_is_the_outermost_dir_a_lock_would_create(tmp_path):
    """Pins ``first_missing``: None for a path that exists, else the outermost of it and its
    parents that does not (what ``remove_created`` may remove)."""
    assert plan.first_missing(tmp_path) is None
    assert plan.first_missing(tmp_path / "a") == tmp_path / "a"
    assert plan.first_missing(tmp_path / "a" / "b" / "c") == tmp_path / "a"
    (tmp_path / "a").mkdir()
    assert plan.first_missing(tmp_path / "a" / "b" / "c") == tmp_path / "a" / "b"


def test_remove_created_removes_the_lock_and_empty_dirs_up_to_top_only(tmp_path):
    """Pins ``remove_created``: the lock file (if there is one) and the empty dirs from ``path``
    up to ``top`` go, ``top``'s parent stays; a dir that holds something else stops the removal
    there."""
    top = tmp_path / "a"
    path = top / "b" / "sweep"
    path.mkdir(parents=True)
    (path / rundir.LOCK_FILE).write_bytes(b"")
    plan.remove_created(path, top)
    assert not top.exists() and tmp_path.exists()
    path.mkdir(parents=True)
    (top / "b" / "other").write_text("kept")
    plan.remove_created(path, top)
    assert not path.exists() and (top / "b" / "other").exists()
    path.mkdir()  # no lock file: a sweep refused before its lock was taken
    plan.remove_created(path, top)
    assert not path.exists()
