"""Sweeps: planning and its checks (no training), a tiny real sweep in worker processes producing
all three report files, resume of an interrupted sweep, a real Ctrl-C, a real SIGKILL of the sweep
(its workers stop, a re-run resumes them exactly), and one-line errors."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import sys
import time
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from support import (
    TINY,
    TINY_RUN_DIRS,
    assert_bad_input,
    assert_no_duplicated_steps,
    curves,
    descendants,
    running,
    sets,
    start_cli,
    summary_of,
    tiny_args,
    tree,
)
from typer.testing import CliRunner

from per_dqn.cli import app
from per_dqn.config import ConfigError, parse_override, shipped_config_names
from per_dqn.logs import tags
from per_dqn.memory import KINDS
from per_dqn.rundir import checkpoint as ckpt
from per_dqn.rundir import dirs as rundir
from per_dqn.rundir import fileio
from per_dqn.rundir.provenance import redact_argv
from per_dqn.sweeps import axes, plan, runs
from per_dqn.sweeps.backends import local
from per_dqn.sweeps.job import job_config
from per_dqn.training.run import Trainer

runner = CliRunner()


# --- planning -------------------------------------------------------------------------------------


def test_parse_arms():
    assert axes.parse_arms("uniform, rank") == (axes.Arm("uniform"), axes.Arm("rank"))
    for text, message in (
        ("", "must list at least one"),
        ("uniform,greedy", f"unknown arm 'greedy'; choose from {', '.join(KINDS)}"),
        ("rank,rank", "lists the arm 'rank' twice"),
        ("replay.alpha=0.7", "setting 'replay.alpha=0.7' comes before any arm"),
        ("rank:replay.alpha", "--replay rank: 'replay.alpha': expected section.key=value"),
        ("rank:replay.alpha=1,replay.alpha=2", "--replay rank: sets replay.alpha twice"),
        ("rank:run.seed=3", "--replay rank: an arm cannot set run.seed"),
    ):
        with pytest.raises(ValueError, match=message):
            axes.parse_arms(text)


def test_arms_carry_their_own_settings_the_way_the_per_paper_ran_them():
    """A part that is not a kind continues the previous arm's settings; values are YAML-typed."""
    arms = axes.parse_arms(
        ["uniform,rank:replay.alpha=0.7,replay.beta0=0.5,agent.learning_rate=6.25e-5",
         "proportional:replay.alpha=0.6"]
    )  # fmt: skip
    assert [(a.kind, [(o.path, o.value) for o in a.settings]) for a in arms] == [
        ("uniform", []),
        ("rank", [("replay.alpha", 0.7), ("replay.beta0", 0.5), ("agent.learning_rate", 6.25e-5)]),
        ("proportional", [("replay.alpha", 0.6)]),
    ]
    assert [axes.arm_label(a) for a in arms] == [
        "uniform", "rank/alpha=0.7,beta0=0.5,lr=6.25e-05", "proportional/alpha=0.6",
    ]  # fmt: skip
    # the same kind twice, with different settings, is two arms
    two = axes.parse_arms(["rank:replay.alpha=0.5", "rank:replay.alpha=0.7"])
    assert [axes.arm_label(a) for a in two] == ["rank/alpha=0.5", "rank/alpha=0.7"]


def test_parse_grid():
    assert axes.parse_grid(["replay.alpha=0.4,0.6", "agent.hidden_sizes=[64],[128, 128]"]) == (
        ("replay.alpha", (0.4, 0.6)),
        ("agent.hidden_sizes", ([64], [128, 128])),
    )
    for texts, message in (
        (["replay.alpha"], "--grid 'replay.alpha': expected KEY=VALUE1,VALUE2"),
        (["replay.alpha=0.4,,0.6"], "an empty value"),
        (["replay.alpha=0.4,0.4"], "--grid replay.alpha lists a value twice"),
        (["replay.alpha=0.4", "replay.alpha=0.6"], "--grid gives replay.alpha twice"),
        (["replay.kind=uniform,rank"], "replay kinds are the arms; give them with --replay"),
        (["run.seed=1,2"], "give seeds with --seeds"),
        (["agent.hidden_sizes=[64"], "--grid 'agent.hidden_sizes=\\[64': value is not valid"),
    ):
        with pytest.raises(ValueError, match=message):
            axes.parse_grid(texts)


def test_plan_pairs_seeds_across_arms(tmp_path):
    """Seed s sets run.seed = s in every arm, and the arms' configs differ only in replay.kind.
    Runs are ordered seed first, so a sweep stopped halfway has every arm at about as many seeds."""
    # Budgets in these planning tests stay above cartpole.yaml's learning_starts (1000).
    sweep = plan.plan_sweep(
        "cartpole.yaml", ("uniform", "rank"), range(3), 1500, [], tmp_path / "o"
    )
    assert [j.run_dir for j in sweep.jobs] == [
        "uniform/s0", "rank/s0", "uniform/s1", "rank/s1", "uniform/s2", "rank/s2",
    ]  # fmt: skip
    configs = [yaml.safe_load(j.config_yaml) for j in sweep.jobs]
    assert [c["run"]["seed"] for c in configs] == [0, 0, 1, 1, 2, 2]
    assert {c["train"]["total_env_steps"] for c in configs} == {1500}
    uniform_s1, rank_s1 = configs[2], configs[3]
    assert rank_s1["replay"].pop("kind") == "rank"
    assert uniform_s1["replay"].pop("kind") == "uniform"
    assert uniform_s1 == rank_s1
    assert sweep.record["seeds"] == [0, 1, 2] and sweep.record["envs"] == ["CartPole-v1"]


def test_a_grid_crosses_arms_and_keys_with_readable_run_dirs(tmp_path):
    """Every arm x grid point x seed is one run whose config holds exactly those values, in a run
    dir that names them all, uncut; the record lists each run's settings and point."""
    arms = axes.parse_arms(["uniform", "rank:replay.alpha=0.7,replay.beta0=0.5"])
    grid = axes.parse_grid(["agent.n_step=1,3", "agent.learning_rate=1e-4,2.5e-4"])
    sweep = plan.plan_sweep("cartpole.yaml", arms, [100], 1500, [], tmp_path / "o", grid)
    assert [j.run_dir for j in sweep.jobs] == [
        "uniform/n=1,lr=0.0001/s100", "uniform/n=1,lr=0.00025/s100",
        "uniform/n=3,lr=0.0001/s100", "uniform/n=3,lr=0.00025/s100",
        "rank/alpha=0.7,beta0=0.5,n=1,lr=0.0001/s100",
        "rank/alpha=0.7,beta0=0.5,n=1,lr=0.00025/s100",
        "rank/alpha=0.7,beta0=0.5,n=3,lr=0.0001/s100",
        "rank/alpha=0.7,beta0=0.5,n=3,lr=0.00025/s100",
    ]  # fmt: skip
    for job in sweep.jobs:
        config = yaml.safe_load(job.config_yaml)
        expected = {"replay.kind": job.kind, "run.seed": 100, **dict(job.settings),
                    **dict(job.point)}  # fmt: skip
        for key, value in expected.items():
            section, name = key.split(".")
            assert config[section][name] == value, (job.run_dir, key)
        if job.kind == "uniform":
            assert config["replay"]["alpha"] == 0.6  # the arm's settings stay in its arm
    rank = sweep.record["runs"][4]
    assert rank == {
        "env_id": "CartPole-v1", "arm": "rank/alpha=0.7,beta0=0.5,n=1,lr=0.0001", "kind": "rank",
        "settings": {"replay.alpha": 0.7, "replay.beta0": 0.5},
        "point": {"agent.n_step": 1, "agent.learning_rate": 0.0001}, "seed": 100,
        "run_dir": "rank/alpha=0.7,beta0=0.5,n=1,lr=0.0001/s100",
    }  # fmt: skip
    assert sweep.record["grid"] == {"agent.n_step": [1, 3], "agent.learning_rate": [1e-4, 2.5e-4]}
    assert sweep.record["arm_settings"] == {
        "rank/alpha=0.7,beta0=0.5": {"replay.alpha": 0.7, "replay.beta0": 0.5}
    }


def test_run_dir_names_keep_two_keys_with_one_last_part_apart():
    assert plan.settings_label([("replay.alpha", 0.5), ("agent.alpha", 1)]) == (
        "replay.alpha=0.5,agent.alpha=1"
    )
    assert plan.settings_label([("env.id", "MinAtar/Breakout-v1"), ("agent.dueling", True)]) == (
        "id=MinAtar-Breakout-v1,dueling=true"
    )


def test_a_key_set_two_ways_is_refused(tmp_path):
    rank = axes.parse_arms("rank:replay.alpha=0.7")
    alpha = axes.parse_grid(["replay.alpha=0.4,0.6"])
    for arms, grid, texts, message in (
        (rank, alpha, [], "--grid replay.alpha is also set by an arm's settings; give it once"),
        (rank, (), ["replay.alpha=0.5"], "--set replay.alpha is also set by an arm's settings"),
        (("rank",), alpha, ["replay.alpha=0.5"], "--set replay.alpha is also set by --grid"),
    ):
        with pytest.raises(ValueError, match=message):
            plan.plan_sweep(
                "cartpole.yaml",
                arms,
                [0],
                1500,
                [parse_override(t) for t in texts],
                tmp_path,
                grid,
            )


def test_every_grid_value_is_validated_before_anything_starts(workdir):
    result = runner.invoke(
        app, ["ablate", "-c", "cartpole.yaml", "--grid", "replay.alpha=0.5,-1", "--grid",
              "agent.loss=huber,cubic", "--seeds", "1", "--steps", "1500"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "cartpole.yaml: replay.alpha: must be >= 0, got -1 (set by --grid)" in result.stderr
    assert "cartpole.yaml: agent.loss:" in result.stderr and "'cubic'" in result.stderr
    assert list(workdir.iterdir()) == []  # nothing created


@pytest.mark.parametrize("value", ["[CartPole-v1, Acrobot-v1]", "CartPole-v1,Acrobot-v1"])
def test_several_envs_in_one_sweep(tmp_path, value):
    sweep = plan.plan_sweep(
        "cartpole.yaml", ("uniform",), [0], None, [parse_override(f"env.id={value}")], tmp_path
    )
    assert [(j.env_id, j.run_dir) for j in sweep.jobs] == [
        ("CartPole-v1", "CartPole-v1/uniform/s0"),
        ("Acrobot-v1", "Acrobot-v1/uniform/s0"),
    ]
    assert sweep.record["envs"] == ["CartPole-v1", "Acrobot-v1"]


def test_default_out_dir(workdir):
    sweep = plan.plan_sweep("cartpole.yaml", ("uniform",), [0])
    assert sweep.out == Path("runs/ablate__CartPole-v1__cartpole")


def test_config_problems_are_reported_once(tmp_path):
    with pytest.raises(ConfigError) as info:
        plan.plan_sweep(
            "cartpole.yaml", ("proportional", "rank", "relo"), range(4), 0,
            [parse_override("replay.alpha=-1")], tmp_path,
        )  # fmt: skip
    assert info.value.problems == [
        "cartpole.yaml: replay.alpha: must be >= 0, got -1 (set by --set)",
        "cartpole.yaml: train.total_env_steps: must be >= 1, got 0 (set by --steps)",
    ]


# --- the command line: bad arguments --------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--replay", "uniform,bogus"], f"--replay: unknown arm 'bogus'; choose from "
                                        f"{', '.join(KINDS)}"),
        (["--seeds", "0"], "--seeds must be a count from 1 to 100,000, got 0"),
        (["--workers", "0"], "--workers must be >= 1, got 0"),
        (["--steps", "0"], "cartpole.yaml: train.total_env_steps: must be >= 1, got 0 (set by "
                           "--steps)"),
        (["--set", "env.id=[]"], "--set env.id: expected an env id or a list of them, got []"),
        (["--set", "env.id=Pendulum-v1"], "cartpole.yaml: env.id: DQN needs a Discrete action "
                                          "space, got Box(-2.0, 2.0, (1,), float32)"),
        (["-c", "nope.yaml"], "nope.yaml: no such config file (the shipped configs are: "
                              f"{', '.join(shipped_config_names())})"),
    ],
)  # fmt: skip
def test_bad_arguments_get_one_line_and_exit_2(workdir, args, line):
    assert_bad_input(runner.invoke(app, ["ablate", "-c", "cartpole.yaml", *args]), line)
    assert list(workdir.iterdir()) == []  # nothing created


def test_a_reuse_dir_that_is_missing_or_inside_the_sweep_is_one_line(workdir):
    assert_bad_input(
        runner.invoke(app, ["ablate", "-c", "cartpole.yaml", "--reuse", "old"]),
        "--reuse old: no such directory",
    )
    assert list(workdir.iterdir()) == []
    (workdir / "sw" / "old").mkdir(parents=True)
    for reuse in ("sw", "sw/old"):
        assert_bad_input(
            runner.invoke(app, ["ablate", "-c", "cartpole.yaml", "--out", "sw", "--reuse", reuse]),
            f"--reuse {reuse}: is in the sweep dir itself (--out sw)",
        )
    assert [p.name for p in (workdir / "sw").iterdir()] == ["old"]


def test_refuses_a_dir_that_is_not_a_sweep(workdir):
    (workdir / "mine").mkdir()
    (workdir / "mine" / "keep.txt").write_text("precious")
    assert_bad_input(
        runner.invoke(app, ["ablate", "-c", "cartpole.yaml", "--out", "mine"]),
        f"sweep dir mine exists, is not empty and holds no {plan.SWEEP_FILE}; choose another --out",
    )
    assert [p.name for p in (workdir / "mine").iterdir()] == ["keep.txt"]


def test_refuses_to_mix_sweeps(workdir):
    """A re-run with other parameters against the same dir names what differs and runs nothing."""
    sweep = plan.plan_sweep("cartpole.yaml", ("uniform", "rank"), range(2), 1600, [], Path("sw"))
    sweep.out.mkdir()
    fileio.write_json(sweep.out / plan.SWEEP_FILE, sweep.record)
    result = runner.invoke(
        app, ["ablate", "-c", "cartpole.yaml", "--replay", "uniform,rank", "--seeds", "3",
              "--steps", "1700", "--out", "sw", "--set", "replay.alpha=0.5"],
    )  # fmt: skip
    assert_bad_input(
        result,
        "sweep dir sw holds a sweep with other settings (replay.alpha: 0.6 -> 0.5; "
        "train.total_env_steps: 1600 -> 1700); repeat its command (adding seeds, arms, envs or "
        "grid values is fine) to resume or grow it, or choose another --out",
    )
    assert [p.name for p in sweep.out.iterdir()] == [plan.SWEEP_FILE]


def finish(out: Path, run_dir: str) -> None:
    """Marks a planned run finished, as far as planning can tell (its summary says so)."""
    (out / run_dir).mkdir(parents=True)
    fileio.write_json(out / run_dir / "summary.json", {"interrupted": False})


def test_a_wider_grid_or_more_seeds_plans_only_what_is_new(workdir):
    alpha = axes.parse_grid(["replay.alpha=0.4,0.6"])
    first = plan.plan_sweep("cartpole.yaml", ("proportional",), [0], 1500, [], Path("sw"), alpha)
    first.out.mkdir()
    fileio.write_json(first.out / plan.SWEEP_FILE, first.record)
    for job in first.jobs:
        finish(first.out, job.run_dir)
    wider = axes.parse_grid(["replay.alpha=0.4,0.6,0.8"])
    grown = plan.plan_sweep(
        "cartpole.yaml", ("proportional", "rank"), [0, 1], 1500, [], Path("sw"), wider
    )
    assert [j.run_dir for j in grown.pending()] == [
        "proportional/alpha=0.8/s0", "rank/alpha=0.4/s0", "rank/alpha=0.6/s0", "rank/alpha=0.8/s0",
        "proportional/alpha=0.4/s1", "proportional/alpha=0.6/s1", "proportional/alpha=0.8/s1",
        "rank/alpha=0.4/s1", "rank/alpha=0.6/s1", "rank/alpha=0.8/s1",
    ]  # fmt: skip
    record = grown.record
    assert record["grid"] == {"replay.alpha": [0.4, 0.6, 0.8]}
    assert record["arms"] == ["proportional", "rank"] and record["seeds"] == [0, 1]
    assert [r["run_dir"] for r in record["runs"][:2]] == [j.run_dir for j in first.jobs]
    assert len(record["runs"]) == 12
    # a narrower re-run afterwards keeps the union: nothing planned is forgotten
    narrow = plan.plan_sweep("cartpole.yaml", ("rank",), [1], 1500, [], Path("sw"), alpha)
    merged = plan.merge_records(record, narrow.record)
    assert merged["runs"] == record["runs"] and merged["arms"] == record["arms"]


def test_a_run_dir_holding_another_configs_run_is_refused(workdir):
    """A run dir whose config.yaml disagrees with the run planned there is never resumed into."""
    sweep = plan.plan_sweep("cartpole.yaml", ("uniform",), [0], 1500, [], Path("sw"))
    sweep.out.mkdir()
    fileio.write_json(sweep.out / plan.SWEEP_FILE, sweep.record)
    (sweep.out / "uniform/s0").mkdir(parents=True)
    held = sweep.jobs[0].config_yaml.replace("gamma: 0.99", "gamma: 0.9")
    assert held != sweep.jobs[0].config_yaml
    (sweep.out / "uniform/s0/config.yaml").write_text(held)
    with pytest.raises(ValueError, match="run dir uniform/s0 holds a run of another config "
                                         r"\(agent.gamma: 0.9 -> 0.99\)"):  # fmt: skip
        plan.plan_sweep("cartpole.yaml", ("uniform",), [0], 1500, [], Path("sw"))


@pytest.mark.parametrize(
    ("replay", "grid"),
    [
        (["proportional"], ["replay.alpha=1,1.0"]),
        (["rank:replay.alpha=0.7,replay.beta0=0.5", "rank:replay.beta0=0.5,replay.alpha=0.7"], []),
    ],
    ids=["int-and-float", "settings-reordered"],
)
def test_one_setting_spelled_two_ways_is_refused(workdir, replay, grid):
    """Pins a bug: a grid value given as 1 and 1.0, or an arm's settings in two orders, named two
    run dirs for one config; both were run, and the sensitivity table counted each seed twice."""
    with pytest.raises(ValueError, match=r"would hold the same run \(the same config\)"):
        plan.plan_sweep("cartpole.yaml", axes.parse_arms(replay), [0], 1500, [], Path("sw"),
                          axes.parse_grid(grid))  # fmt: skip


def test_growing_a_sweep_with_a_value_spelled_another_way_is_refused(workdir):
    """Pins a bug: a sweep run with ``alpha=0.5,1`` and grown with ``alpha=0.5,1.0`` planned the
    finished ``alpha=1`` runs again as ``alpha=1.0``."""
    first = plan.plan_sweep("cartpole.yaml", ("proportional",), [0], 1500, [], Path("sw"),
                              axes.parse_grid(["replay.alpha=0.5,1"]))  # fmt: skip
    first.out.mkdir()
    fileio.write_json(first.out / plan.SWEEP_FILE, first.record)
    for job in first.jobs:
        finish(first.out, job.run_dir)
        (first.out / job.run_dir / "config.yaml").write_text(job.config_yaml)
    wider = axes.parse_grid(["replay.alpha=0.5,1.0,0.8"])
    refused = "run dirs proportional/alpha=1/s0 and proportional/alpha=1.0/s0 would hold the same"
    with pytest.raises(ValueError, match=re.escape(refused)):
        plan.plan_sweep("cartpole.yaml", ("proportional",), [0], 1500, [], Path("sw"), wider)
    same = axes.parse_grid(["replay.alpha=0.5,1,0.8"])
    grown = plan.plan_sweep("cartpole.yaml", ("proportional",), [0], 1500, [], Path("sw"), same)
    assert [j.run_dir for j in grown.pending()] == ["proportional/alpha=0.8/s0"]


def test_a_config_key_added_since_is_not_a_difference(workdir):
    """A sweep recorded before a per-dqn upgrade added a (defaulted) config key still resumes."""
    sweep = plan.plan_sweep("cartpole.yaml", ("uniform",), [0], 1600, [], Path("sw"))
    record = json.loads(json.dumps(sweep.record))
    del record["resolved_config"]["replay"]["sort_interval"]
    sweep.out.mkdir()
    fileio.write_json(sweep.out / plan.SWEEP_FILE, record)
    again = plan.plan_sweep("cartpole.yaml", ("uniform",), [0], 1600, [], Path("sw"))
    assert again.pending() == list(again.jobs)


# --- real sweeps ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory) -> Path:
    """2 arms x 2 seeds x 600 steps, through the CLI, in 2 worker processes."""
    out = tmp_path_factory.mktemp("ablate") / "sweep"
    result = runner.invoke(app, tiny_args(out))
    assert result.exit_code == 0, result.output
    assert "4 runs, 0 finished, 4 to run\n  on 2 workers" in result.stdout
    return out


@pytest.mark.slow
def test_tiny_sweep_writes_run_dirs_and_the_report(tiny_sweep):
    out = tiny_sweep
    run_dirs = [out / arm / f"s{s}" for arm in ("uniform", "proportional") for s in (0, 1)]
    for run_dir in run_dirs:
        assert any(p.name.startswith("events.out.tfevents") for p in run_dir.iterdir())
        s = summary_of(run_dir)
        assert s["interrupted"] is False and s["env_steps"] == 600
    assert [(summary_of(d)["replay"], summary_of(d)["seed"]) for d in run_dirs] == [
        ("uniform", 0), ("uniform", 1), ("proportional", 0), ("proportional", 1),
    ]  # fmt: skip
    # scores.csv holds exactly the summaries' final scores
    with (out / "scores.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["run_dir"], float(r["final_return"])) for r in rows] == [
        (d.relative_to(out).as_posix(), summary_of(d)["final_eval_return_mean"]) for d in run_dirs
    ]
    text = (out / "report.md").read_text()
    assert "Runs used: 4 of 4 planned; missing: none." in text
    assert "| uniform | 2 |" in text and "| proportional | 2 |" in text
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    record = json.loads((out / "sweep.json").read_text())
    assert record["arms"] == ["uniform", "proportional"] and record["seeds"] == [0, 1]


def test_a_run_dir_four_levels_down_still_names_its_sweep_dir(tmp_path):
    """Pins a bug: a run of a multi-env sweep with settings (<env>/<kind>/<settings>/s<seed>)
    sits four levels below its sweep dir; the refusal looked three levels up only and lost the
    "pass its sweep dir" hint."""
    sweep = tmp_path / "sw"
    run = sweep / "MinAtar-Breakout-v1" / "proportional" / "alpha=0.6" / "s0"
    run.mkdir(parents=True)
    (sweep / runs.SWEEP_FILE).write_text("{}")
    (run / "config.yaml").write_text("env: {}\n")
    with pytest.raises(ValueError, match=re.escape(f"pass its sweep dir, {sweep}")):
        runs.check_not_a_run_dir(run)


@pytest.mark.slow
def test_report_refuses_a_single_run_dir(tiny_sweep, tmp_path):
    """Pins a bug: `per-dqn report RUN_DIR` on one training run's dir (config.yaml,
    summary.json, model.pt) read it as a sweep of one run and wrote report.md, curves.png and
    scores.csv into it, exit 0. Now: one line naming the path and what to pass instead, exit 2,
    nothing written, for a run inside a sweep (the line names its sweep dir) and a lone one."""
    before = tree(tiny_sweep)
    inside = tiny_sweep / "uniform" / "s0"
    assert_bad_input(
        runner.invoke(app, ["report", str(inside)]),
        f"{inside} is the run dir of one training run (it holds config.yaml), not a sweep dir; "
        f"pass its sweep dir, {tiny_sweep}",
    )
    assert tree(tiny_sweep) == before

    lone = tmp_path / "one"
    shutil.copytree(inside, lone)  # what `per-dqn train --quiet --run-dir` leaves
    before = tree(lone)
    assert {"config.yaml", "summary.json", "model.pt"} <= set(before)
    assert_bad_input(
        runner.invoke(app, ["report", str(lone)]),
        f"{lone} is the run dir of one training run (it holds config.yaml), not a sweep dir; "
        "pass the sweep dir that `per-dqn ablate` wrote (the one holding sweep.json), or a "
        "folder of run dirs",
    )
    assert tree(lone) == before
    # Its parent is a folder of run dirs, which a report reads as before.
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "Runs used: 1 (no sweep.json)" in (tmp_path / "report.md").read_text()


@pytest.mark.slow
def test_resume_redoes_only_unfinished_runs(tiny_sweep, tmp_path):
    """Finished runs are kept as they are; an interrupted run and one killed before its summary,
    with no checkpoint to continue (only the final one, which would evaluate twice), are cleared
    and run again."""
    out = tmp_path / "sweep"
    shutil.copytree(tiny_sweep, out)
    for rel in ("uniform/s1", "proportional/s0"):
        (out / rel / "kept.txt").write_text("")
    killed, interrupted = out / "uniform/s0", out / "proportional/s1"
    (killed / "summary.json").unlink()
    (killed / "partial.txt").write_text("")
    data = summary_of(interrupted) | {"interrupted": True, "final_eval_return_mean": None}
    fileio.write_json(interrupted / "summary.json", data)
    (out / "report.md").unlink()

    result = runner.invoke(app, tiny_args(out, workers=1))  # --workers may change
    assert result.exit_code == 0, result.output
    assert "4 runs, 2 finished, 2 to run\n  on 1 worker\n" in result.stdout
    assert (out / "uniform/s1/kept.txt").exists() and (out / "proportional/s0/kept.txt").exists()
    assert not (killed / "partial.txt").exists()
    assert summary_of(killed)["interrupted"] is False
    assert summary_of(interrupted)["interrupted"] is False
    assert "Runs used: 4 of 4 planned; missing: none." in (out / "report.md").read_text()

    again = runner.invoke(app, tiny_args(out))  # nothing left to do
    assert again.exit_code == 0, again.output
    assert "4 runs, 4 finished, 0 to run\n" in again.stdout


@pytest.mark.slow
def test_growing_a_finished_sweep_runs_only_the_new_runs(tiny_sweep, tmp_path):
    """More seeds and an arm with its own settings: only those runs run; the finished ones are
    left byte for byte, the record and the report cover the union."""
    out = tmp_path / "sweep"
    shutil.copytree(tiny_sweep, out)
    in_runs = [p for p in out.rglob("*") if p.is_file() and len(p.relative_to(out).parts) > 2]
    before = {p: p.read_bytes() for p in in_runs}
    args = tiny_args(out, workers=1)
    args[args.index("--replay") + 1] = "uniform,proportional,rank:replay.alpha=0.5"
    args[args.index("--seeds") + 1] = "0-2"
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "9 runs, 4 finished, 5 to run\n  on 1 worker\n" in result.stdout
    assert {p: p.read_bytes() for p in before} == before
    new = ["rank/alpha=0.5/s0", "rank/alpha=0.5/s1", "uniform/s2", "proportional/s2",
           "rank/alpha=0.5/s2"]  # fmt: skip
    assert all(summary_of(out / d)["interrupted"] is False for d in new)
    assert yaml.safe_load((out / new[0] / "config.yaml").read_text())["replay"]["alpha"] == 0.5
    record = json.loads((out / "sweep.json").read_text())
    assert record["arms"] == ["uniform", "proportional", "rank/alpha=0.5"]
    assert record["seeds"] == [0, 1, 2] and len(record["runs"]) == 9
    # who made the sweep, and who grew it by how many runs
    # in-process: pytest's own command line, secrets (none here) redacted
    assert record["provenance"]["command"] == redact_argv(sys.argv)
    assert record["provenance"]["versions"]["torch"] == metadata.version("torch")
    assert [g["runs_added"] for g in record["grown"]] == [5]
    assert "rank/alpha=0.5" in (out / "report.md").read_text()
    assert "Runs used: 9 of 9 planned; missing: none." in (out / "report.md").read_text()


@pytest.mark.slow
def test_reuse_takes_the_finished_runs_of_the_same_config_and_runs_the_rest(tiny_sweep, tmp_path):
    """``--reuse DIR``: a planned run that a finished run under DIR already is (the same config)
    is copied in whole instead of run; an unfinished run there, and runs of other configs, are
    run; sweep.json says what was taken from where, and the report covers every run. Planning
    alone: a config that differs in one key takes nothing, and a run dir the sweep already has
    is never replaced."""
    source = tmp_path / "old"
    shutil.copytree(tiny_sweep, source)
    unfinished = source / "proportional/s1"
    data = summary_of(unfinished) | {"interrupted": True, "final_eval_return_mean": None}
    fileio.write_json(unfinished / "summary.json", data)
    out = tmp_path / "new"
    args = tiny_args(out, workers=1)
    args[args.index("--replay") + 1] = "uniform,proportional,rank"
    result = runner.invoke(app, [*args, "--reuse", str(source)])
    assert result.exit_code == 0, result.output
    assert "6 runs, 0 finished, 3 to take from --reuse, 3 to run\n  on 1 worker\n" in result.stdout
    taken = ["uniform/s0", "proportional/s0", "uniform/s1"]  # the plan's order: seed first
    for run_dir in taken:
        files = {k: data for k, (_, data) in tree(out / run_dir).items()}
        held = {k: data for k, (_, data) in tree(source / run_dir).items()}
        assert rundir.LOCK_FILE not in files
        assert files == {k: v for k, v in held.items() if k != rundir.LOCK_FILE}
    ran = ["proportional/s1", "rank/s0", "rank/s1"]
    assert all(summary_of(out / d)["interrupted"] is False for d in ran)
    # the one run that ran here again is the same run, bit for bit
    assert (out / "proportional/s1/model.pt").read_bytes() == (
        tiny_sweep / "proportional/s1/model.pt"
    ).read_bytes()
    record = json.loads((out / "sweep.json").read_text())
    assert record["reused"] == [{"run_dir": d, "from": str(source / d)} for d in taken]
    assert "Runs used: 6 of 6 planned; missing: none." in (out / "report.md").read_text()
    assert not list(out.rglob(".reuse-*"))
    again = runner.invoke(app, [*args, "--reuse", str(source)])
    assert again.exit_code == 0, again.output
    assert "6 runs, 6 finished, 0 to run\n" in again.stdout

    def planned(out: Path, *sets_: str) -> plan.Sweep:
        overrides = [parse_override(t) for t in [*TINY, *sets_]]
        return plan.plan_sweep(
            "cartpole.yaml", ("uniform", "proportional"), (0, 1), 600, overrides, out,
            reuse=[tiny_sweep],
        )  # fmt: skip

    assert sorted(d for d, _ in planned(tmp_path / "same").reuse) == sorted(TINY_RUN_DIRS)
    assert planned(tmp_path / "other", "agent.learning_rate=0.001").reuse == ()
    assert planned(out).reuse == ()  # every run dir exists there


@pytest.mark.slow
def test_reuse_takes_no_run_without_weights_or_with_a_key_only_one_side_has(tiny_sweep, tmp_path):
    """Not taken: a run without model.pt (one rebuilt by `per-dqn unarchive`: a copy would pass
    for a whole run), a run whose config lacks a key the plan sets to other than its default (an
    older per-dqn's, which ran that key's default), and one with a key the plan lacks. Taken: a
    run whose config lacks a key the plan sets to its default, which is what the older per-dqn
    ran.

    Pins a bug: the MinAtar study's runs, made before `replay.beta_anneal_steps` existed, were
    refused by every later sweep of the same configs (whose plans hold the key at its default,
    null), so `ablate --reuse` re-ran them."""
    source = tmp_path / "src"
    shutil.copytree(tiny_sweep, source)
    (source / "uniform/s0/model.pt").unlink()
    edits = (
        ("uniform/s1", "train", "eval_episodes"),  # the plan's 2, not the default
        ("proportional/s0", "replay", "extra"),
        ("proportional/s1", "replay", "beta_anneal_steps"),  # the plan's null, the default
    )
    for rel, section, key in edits:
        path = source / rel / "config.yaml"
        data = yaml.safe_load(path.read_text())
        if key in data[section]:
            del data[section][key]
        else:
            data[section][key] = 1
        path.write_text(yaml.safe_dump(data))
    sweep = plan.plan_sweep(
        "cartpole.yaml", ("uniform", "proportional"), (0, 1), 600,
        [parse_override(t) for t in TINY], tmp_path / "new", reuse=[source],
    )  # fmt: skip
    assert [d for d, _ in sweep.reuse] == ["proportional/s1"]


@pytest.mark.kill
@pytest.mark.parametrize(
    ("to_group", "signum", "code", "sigint_ignored"),
    [(True, signal.SIGINT, 130, False), (False, signal.SIGINT, 130, False),
     (False, signal.SIGTERM, 143, False), (False, signal.SIGINT, 130, True)],
    ids=["ctrl-c", "kill-int", "kill-term", "kill-int-background-job"],
)  # fmt: skip
def test_ctrl_c_stops_the_sweep_cleanly(tmp_path, to_group, signum, code, sigint_ignored):
    """SIGINT to the sweep: exit 130, the runs in progress stop between two steps with a
    checkpoint and an interrupted summary, and no new run starts. A terminal's Ctrl-C signals the
    whole process group (workers included); `kill -INT` signals the parent alone, which passes it
    on. SIGTERM (docker stop, Slurm) stops it the same way, with exit 143.

    Pins a bug: a sweep started as a background job of a non-interactive shell (`( ... & )`),
    which starts it with SIGINT ignored, ignored `kill -INT` and ran on (`train` did stop)."""
    out = tmp_path / "sweep"
    args = tiny_args(out, workers=1)
    args[args.index("--steps") + 1] = "200000"
    proc = start_cli(args, new_session=True, sigint_ignored=sigint_ignored)
    try:
        deadline = time.monotonic() + 60
        started = []
        while time.monotonic() < deadline and not started:
            time.sleep(0.2)
            started = [p for p in out.glob("*/s*") if any(p.glob("events.out.tfevents*"))]
        assert len(started) == 1, "the worker never started a run"
        time.sleep(0.5)
        if to_group:
            os.killpg(proc.pid, signum)
        else:
            os.kill(proc.pid, signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == code, stdout + stderr
    assert "re-run the same command" in stdout
    begun = sorted(p.relative_to(out).as_posix() for p in out.glob("*/s*"))
    assert begun == sorted(p.relative_to(out).as_posix() for p in started)  # nothing new
    for run_dir in started:
        s = summary_of(run_dir)
        assert s["interrupted"] is True and 0 < s["env_steps"] < 200_000
        newest = ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))[-1]
        assert newest.name == ckpt.checkpoint_name(s["env_steps"])
    assert not (out / "report.md").exists()


@pytest.mark.slow
def test_a_failing_run_is_reported_not_fatal(tmp_path):
    """A run that raises in its worker ends as an error outcome; the sweep returns and the run
    dir is left unfinished, to be redone by the next call."""
    job = plan.Job("CartPole-v1", "uniform", 0, "uniform/s0", "train:\n  batch_size: 0\n", "x")
    sweep = plan.Sweep(tmp_path / "sweep", {"runs": []}, (job,))
    seen = []
    result = local.run_sweep(sweep, workers=2, on_outcome=seen.append)
    assert not result.interrupted and result.skipped == 0
    (failed,) = result.failed
    assert seen == [failed] and failed.job == job
    assert "train.batch_size: must be >= 1, got 0" in failed.error
    assert sweep.pending() == [job]


# --- a sweep dies as a whole ----------------------------------------------------------------------


@pytest.mark.kill
def test_sigkill_stops_every_worker_and_a_rerun_resumes_each_run(tmp_path):
    """SIGKILL to a sweep (no handler of its can run): within 5 s no worker is left, each run in
    progress stopped between two steps with a checkpoint of that step. While it ran, a second
    ``ablate`` on its dir was refused with one line. Re-running the same command resumes both
    runs from those checkpoints: each run dir holds one run, whose merged curves (TensorBoard's
    reading, purge_step applied) have no step twice and equal an uninterrupted run's, bit for bit.

    Bug pinned: the workers went on after their parent died, and a re-run deleted their run dirs
    and redid them from zero while the orphans still wrote there (mixed event files, duplicated
    steps)."""
    out = tmp_path / "sweep"
    # Long enough that one run cannot end before the other has its first checkpoint, on a
    # loaded machine too (at 2,400 steps one did once, beside two training packs).
    steps = 4800
    # keep_last above the run's checkpoint count: none is deleted while the test looks for them.
    args = ["ablate", "-c", "cartpole.yaml", "--replay", "uniform", "--seeds", "2", "--steps",
            str(steps), "--workers", "2", "--out", str(out),
            *sets(*TINY, "checkpoint.interval_steps=300", "checkpoint.keep_last=20",
                  "run.device=cpu")]  # fmt: skip
    run_dirs = [out / "uniform" / f"s{seed}" for seed in (0, 1)]
    proc = start_cli(args, new_session=True)
    try:
        deadline = time.monotonic() + 180

        def wait_for(done, what: str) -> None:
            while not done():
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, what
                time.sleep(0.01)

        # Both workers hold their run dirs, so the sweep holds its dir: a second command now
        # must be refused (before, it could start a sweep of its own).
        wait_for(lambda: all(rundir.lock_holder(d) for d in run_dirs), "the workers never started")
        workers = descendants(proc.pid)
        writers = {rundir.lock_holder(d) for d in run_dirs}
        assert len(writers) == 2 and writers <= workers  # one worker per run dir
        second = runner.invoke(app, args)
        assert_bad_input(
            second,
            f"sweep dir {out} is in use by another per-dqn process (pid {proc.pid}); wait for it "
            "to end or stop it",
        )

        # Then the kill as soon as each run has a checkpoint past learning_starts (300), so the
        # resume restores an optimiser and a target net that have been updated, with most of
        # both runs to go.
        def updated(run_dir: Path) -> bool:
            found = ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))
            return bool(found) and ckpt.checkpoint_step(found[-1]) >= 600

        wait_for(lambda: all(updated(d) for d in run_dirs), "the workers never checkpointed")
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        killed = time.monotonic()
        while any(running(pid) for pid in workers) and time.monotonic() < killed + 5:
            time.sleep(0.05)
        assert not [pid for pid in workers if running(pid)], "orphans after 5 s"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    stopped = {}
    for run_dir in run_dirs:
        s = summary_of(run_dir)
        assert s["interrupted"] and 600 <= s["env_steps"] < steps
        stopped[run_dir] = s["env_steps"]
        newest = ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))[-1]
        assert newest.name == ckpt.checkpoint_name(s["env_steps"])

    result = runner.invoke(app, args)  # the same command
    assert result.exit_code == 0, result.output
    assert "2 runs, 0 finished, 2 to run\n  on 2 workers" in result.stdout
    for run_dir in run_dirs:
        s = summary_of(run_dir)
        assert not s["interrupted"] and s["env_steps"] == steps
        assert s["resumed_from_env_steps"] == stopped[run_dir]
        assert_no_duplicated_steps(run_dir)

    # seed 0 never stopped, in this process
    job = plan.plan_sweep("cartpole.yaml", ("uniform",), [0], steps,
                            [parse_override(t) for t in args[args.index("--set") + 1 :: 2]],
                            tmp_path / "ref").jobs[0]  # fmt: skip
    trainer = Trainer(job_config(job), job.config_name)
    try:
        trainer.run(tmp_path / "ref" / "run")
    finally:
        trainer.close()
    assert curves(run_dirs[0]) == curves(tmp_path / "ref" / "run")
    assert (
        summary_of(run_dirs[0])["final_eval_return_mean"]
        == summary_of(tmp_path / "ref" / "run")["final_eval_return_mean"]
    )


@pytest.mark.parametrize(
    ("text", "seeds"),
    [("3", (0, 1, 2)), ("100-103", (100, 101, 102, 103)), ("3,7,11", (3, 7, 11)),
     ("0-1, 5", (0, 1, 5)), ("7-7", (7,))],
)  # fmt: skip
def test_seeds_as_a_count_a_range_or_a_list(text, seeds):
    assert axes.parse_seeds(text) == seeds


@pytest.mark.parametrize(
    ("text", "message"),
    [("0", "a count from 1"), ("5-3", "ends before it starts"), ("1,1", "a seed twice"),
     ("a-b", "expected a count"), ("-3", "expected a count"), ("1,,2", "expected a count"),
     ("0-200000", "more than 100,000")],
)  # fmt: skip
def test_bad_seeds_are_one_line(text, message):
    with pytest.raises(ValueError, match=message):
        axes.parse_seeds(text)


def test_a_seed_range_plans_those_seeds_in_every_arm(tmp_path):
    result = CliRunner().invoke(
        app, ["ablate", "-c", "cartpole.yaml", "--replay", "uniform,rank", "--steps", "1500",
              "--out", str(tmp_path / "sw"), "--seeds", "5-4"],
    )  # fmt: skip
    assert result.exit_code == 2 and "ends before it starts" in result.output
    assert not (tmp_path / "sw").exists()
    sweep = plan.plan_sweep("cartpole.yaml", ("uniform", "rank"), axes.parse_seeds("100-101"),
                              1500, [], tmp_path / "sw")  # fmt: skip
    assert [j.run_dir for j in sweep.jobs] == [
        "uniform/s100", "rank/s100", "uniform/s101", "rank/s101"
    ]  # fmt: skip
    assert sweep.record["seeds"] == [100, 101]


def test_the_hparams_tab_names_each_run_and_shows_the_sweep_s_axes_first(tiny_sweep):
    """Pins the HParams tab of a sweep (issue 26): rows were named by hashes of the values
    (two runs of one config and seed merged), the columns shown first were keys equal in every
    run, uniform runs had no mean IS weight (dropped from the parallel-coordinates and scatter
    views) and seeds read 1.0000. Read back from each run's event file: the session is named by
    the run's path in its sweep, the sweep's axes (``sweep.json``) that its runs vary are its
    columns, marked as differing, the seed is ``"1"``, and a uniform run's
    ``summary/is_weight_mean`` is 1."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata as hparams_metadata

    axes = json.loads((tiny_sweep / "sweep.json").read_text())["axes"]
    assert axes[:3] == ["env.id", "replay.kind", "run.seed"]
    names = set()
    for rel in TINY_RUN_DIRS:
        acc = EventAccumulator(str(tiny_sweep / rel), size_guidance={"tensors": 0, "scalars": 0})
        acc.Reload()
        content = acc.PluginTagToContent("hparams")
        start = hparams_metadata.parse_session_start_info_plugin_data(
            content[hparams_metadata.SESSION_START_INFO_TAG]
        )
        assert start.group_name == rel  # inside the sweep: its name is every row's (issue 45)
        names.add(start.group_name)
        assert start.hparams["run.seed"].string_value == rel[-1]
        experiment = hparams_metadata.parse_experiment_plugin_data(
            content[hparams_metadata.EXPERIMENT_TAG]
        )
        infos = experiment.hparam_infos
        # The axes alone are columns (issue 45: five default columns, two of them config keys
        # equal in every run, pushed the metrics off a 1280-pixel screen); the session keeps
        # every key.
        varied = ["replay.kind", "run.seed"]  # one env: env.id varies in no run
        assert [info.name for info in infos] == varied and all(info.differs for info in infos)
        assert "agent.adam_eps" in start.hparams
        ((_, weight),) = [(e.step, e.value) for e in acc.Scalars(tags.SUMMARY_IS_WEIGHT_MEAN)]
        if rel.startswith("uniform/"):
            assert weight == 1.0
        else:
            assert 0 < weight < 1
    assert len(names) == len(TINY_RUN_DIRS)
