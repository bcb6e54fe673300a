"""The planning rules of ``per_dqn.sweeps.plan`` at their edges: the seed limits, the worker
count, env lists and their run-dir names, a run dir recorded for another run, values spelled
two ways in a grown sweep, and ``preflight``'s one trainer per env.

tests/sweeps/test_ablate.py has the common cases through ``per-dqn ablate``; these are the
boundaries and messages it leaves open, each checked against the value or line written out."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import ClassVar

import pytest

from per_dqn.config import parse_override
from per_dqn.memory import KINDS
from per_dqn.rundir import dirs as rundir
from per_dqn.rundir import fileio
from per_dqn.sweeps import axes, job, plan
from per_dqn.sweeps.runs import SWEEP_FILE

ONE_OF_KINDS = ", ".join(repr(kind) for kind in KINDS[:-1]) + f" or {KINDS[-1]!r}"


def a_plan(out: Path, arms=("uniform",), seeds=(0,), sets=(), grid=()) -> plan.Sweep:
    overrides = [parse_override(s) for s in ["train.learning_starts=100", *sets]]
    return plan.plan_sweep("cartpole.yaml", list(arms), list(seeds), 300, overrides, out, grid)


def record_of(out: Path) -> dict:
    return json.loads((out / SWEEP_FILE).read_text())


# --- --seeds and --workers ------------------------------------------------------------------------


def test_seed_counts_and_ranges_up_to_the_limit_are_accepted():
    """Pins ``MAX_SEEDS`` (100,000) as inclusive, for a count, a range and a list of ranges."""
    assert axes.parse_seeds("100000") == tuple(range(100_000))
    assert axes.parse_seeds("0-99999") == tuple(range(100_000))
    assert axes.parse_seeds("0-99998,99999") == tuple(range(100_000))


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("100001", "--seeds must be a count from 1 to 100,000, got 100001"),
        ("0-100000", "--seeds lists more than 100,000 seeds, got '0-100000'"),
        ("0-99999,100000", "--seeds lists more than 100,000 seeds, got '0-99999,100000'"),
        ("5,100-100099,0-99894", "--seeds lists more than 100,000 seeds, got "
                                 "'5,100-100099,0-99894'"),
    ],
)  # fmt: skip
def test_one_seed_past_the_limit_is_refused(text, line):
    """Pins the limit's arithmetic: a count, a range or a list one seed past 100,000 is refused
    with the line naming the limit and the text given."""
    with pytest.raises(ValueError) as caught:
        axes.parse_seeds(text)
    assert str(caught.value) == line


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("7,3,3,7,1", "[3, 7]"),
        ("1,1,2,2,3,3,4,4,5,5,6,6", "[1, 2, 3, 4, 5]"),
        ("0-9998,5", "several"),
        ("0-99990,5", "several"),
    ],
)  # fmt: skip
def test_a_repeated_seed_is_named_in_a_short_list_and_not_searched_for_in_a_long_one(text, shown):
    """Pins the repeated-seed line: below 10,000 seeds it names the repeated ones (sorted, at
    most five); from 10,000 seeds on it says "several", so a long list is not searched
    quadratically (100,000 seeds would take minutes)."""
    with pytest.raises(ValueError) as caught:
        axes.parse_seeds(text)
    assert str(caught.value) == f"--seeds lists a seed twice ({shown}), got {text!r}"


def test_the_worker_count_is_one_per_core_by_default_and_at_least_one(monkeypatch):
    """Pins ``check_workers``: None gives one worker per CPU core (one where the count is
    unknown), 1 is allowed, 0 is refused with one line."""
    monkeypatch.setattr("os.cpu_count", lambda: 6)
    assert axes.check_workers(None) == 6
    monkeypatch.setattr("os.cpu_count", lambda: None)
    assert axes.check_workers(None) == 1
    assert axes.check_workers(1) == 1
    with pytest.raises(ValueError) as caught:
        axes.check_workers(0)
    assert str(caught.value) == "--workers must be >= 1, got 0"


# --- --replay ------------------------------------------------------------------------------------


def test_an_empty_replay_list_names_the_arms():
    with pytest.raises(ValueError) as caught:
        axes.parse_arms(" ")
    assert str(caught.value) == (f"--replay must list at least one of {', '.join(KINDS)}, got ' '")


def test_a_bad_arm_setting_is_named_as_the_arm_s_and_only_its_own_flag_is_renamed():
    """Pins the arm-setting lines: a setting that is not KEY=VALUE is named as ``--replay
    <kind>:``, and text of the user's own that reads ``--set`` is echoed as typed."""
    with pytest.raises(ValueError) as caught:
        axes.parse_arms("rank:a--set")
    assert str(caught.value) == "--replay rank: 'a--set': expected section.key=value"


def test_an_arm_setting_the_config_refuses_is_blamed_on_the_arm(tmp_path):
    """Pins the source an arm's settings carry into the config's checks: a bad value is reported
    as set by ``--replay <kind>:``, not by ``--set``."""
    from per_dqn.config import ConfigError

    with pytest.raises(ConfigError) as caught:
        a_plan(tmp_path / "sw", arms=axes.parse_arms("rank:replay.alpha=-1"))
    assert caught.value.problems == [
        "cartpole.yaml: replay.alpha: must be >= 0, got -1 (set by --replay rank:)"
    ]


# --- several envs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "line"),
    [
        ('[CartPole-v1, ""]', "--set env.id: every env id must be a non-empty string, got "
                              "['CartPole-v1', '']"),
        ("[CartPole-v1, 3]", "--set env.id: every env id must be a non-empty string, got "
                             "['CartPole-v1', 3]"),
        ("[CartPole-v1, Acrobot-v1, CartPole-v1]", "--set env.id lists an env twice, got "
                                                   "['CartPole-v1', 'Acrobot-v1', 'CartPole-v1']"),
    ],
)  # fmt: skip
def test_a_bad_env_list_is_one_line_naming_it(tmp_path, value, line):
    """Pins the env-list checks: every id a non-empty string, none twice."""
    with pytest.raises(ValueError) as caught:
        a_plan(tmp_path / "sw", sets=[f"env.id={value}"])
    assert str(caught.value) == line


def test_an_env_id_with_a_slash_is_one_run_dir_level():
    """Pins ``env_slug``: the slash of a namespaced id becomes a dash, so each env of a sweep is
    one directory level (``ALE-Pong-v5/uniform/s0``, not ``ALE/Pong-v5/uniform/s0``)."""
    assert axes.env_slug("ALE/Pong-v5") == "ALE-Pong-v5"
    assert axes.env_slug("MinAtar/Breakout-v1") == "MinAtar-Breakout-v1"
    assert axes.env_slug("CartPole-v1") == "CartPole-v1"


@pytest.mark.parametrize("how", ["--set", "--grid"])
def test_a_rerun_naming_one_env_of_a_sweep_over_several_keeps_the_env_level(tmp_path, how):
    """Pins the run dirs of a re-run that names one env of a sweep over several (to finish that
    env's runs first): they keep the sweep's env level (``Acrobot-v1/uniform/s0``), so they are
    the sweep's runs. The bug: the re-run named them ``uniform/s0``, and was refused as one run
    under two run dirs."""
    out = tmp_path / "sw"
    plan.start_sweep(a_plan(out, sets=["env.id=[CartPole-v1, Acrobot-v1]"]))
    if how == "--set":
        one = a_plan(out, sets=["env.id=Acrobot-v1"])
    else:
        one = a_plan(out, grid=axes.parse_grid(["env.id=Acrobot-v1"]))
    assert [j.run_dir for j in one.jobs] == ["Acrobot-v1/uniform/s0"]
    assert [r["run_dir"] for r in one.record["runs"]] == [
        "CartPole-v1/uniform/s0",
        "Acrobot-v1/uniform/s0",
    ]
    alone = a_plan(tmp_path / "alone", sets=["env.id=Acrobot-v1"])
    assert [j.run_dir for j in alone.jobs] == ["uniform/s0"]


def test_a_sweep_over_one_env_grown_by_another_keeps_its_runs_where_they_are(tmp_path):
    """Pins growing a sweep over one env by a second env, which the docs allow ("adding seeds,
    arms, envs or grid values is fine"): the first env's runs keep their run dirs
    (``uniform/s0``, no env level) and only the new env's take one. The bug: the grown plan
    named the first env's run ``CartPole-v1/uniform/s0`` and was refused as one run under two
    run dirs, whose message blamed an arm spelled two ways."""
    out = tmp_path / "sw"
    first = a_plan(out, sets=["env.id=CartPole-v1"])
    plan.start_sweep(first)
    (out / "uniform/s0").mkdir(parents=True)
    (out / "uniform/s0/config.yaml").write_text(first.jobs[0].config_yaml)
    grown = a_plan(out, sets=["env.id=[CartPole-v1, Acrobot-v1]"])
    assert [j.run_dir for j in grown.jobs] == ["uniform/s0", "Acrobot-v1/uniform/s0"]
    assert grown.record["envs"] == ["CartPole-v1", "Acrobot-v1"]
    plan.start_sweep(grown)
    assert [j.run_dir for j in a_plan(out, sets=["env.id=Acrobot-v1"]).jobs] == [
        "Acrobot-v1/uniform/s0"
    ]
    assert [j.run_dir for j in a_plan(out, sets=["env.id=CartPole-v1"]).jobs] == ["uniform/s0"]
    record = record_of(out)
    record["runs"][1]["run_dir"] = "../elsewhere/s0"  # edited by hand
    fileio.write_json(out / SWEEP_FILE, record)
    assert [j.run_dir for j in a_plan(out, sets=["env.id=Acrobot-v1"]).jobs] == [
        "Acrobot-v1/uniform/s0"
    ]


# --- a run dir recorded for another run ---------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [("env_id", "Acrobot-v1"), ("kind", "rank"), ("seed", 9), ("settings", {"replay.alpha": 1}),
     ("point", {"agent.n_step": 3})],
)  # fmt: skip
def test_a_run_dir_the_record_gives_to_another_run_is_refused(tmp_path, key, value):
    """Pins the record check of a grown sweep: a run dir that ``sweep.json`` records for a run of
    another env, kind, seed, arm settings or grid point (a record edited by hand) is refused
    with one line naming the dir and the recorded run, whichever field differs."""
    out = tmp_path / "sw"
    plan.start_sweep(a_plan(out))
    record = record_of(out)
    record["runs"][0][key] = value
    fileio.write_json(out / SWEEP_FILE, record)
    with pytest.raises(ValueError) as caught:
        a_plan(out)
    assert str(caught.value) == (
        f"sweep dir {out}: run dir uniform/s0 is recorded for another run "
        f"({record['runs'][0]}); choose another --out"
    )


def test_a_record_that_lacks_a_field_is_not_compared_on_it(tmp_path):
    """Pins the tolerance for older records: a field the recorded run lacks is not compared,
    the fields it has still are."""
    out = tmp_path / "sw"
    plan.start_sweep(a_plan(out))
    record = record_of(out)
    del record["runs"][0]["point"], record["runs"][0]["settings"]
    fileio.write_json(out / SWEEP_FILE, record)
    assert [j.run_dir for j in a_plan(out).jobs] == ["uniform/s0"]


def test_arm_settings_in_any_key_order_match_their_record(tmp_path):
    """Pins the order-free comparison with the record: an arm whose settings were given
    ``beta0`` first (recorded in that order), planned again, matches its run dir's record; and so
    does a record whose keys were sorted by a JSON tool."""
    out = tmp_path / "sw"
    arm = "rank:replay.beta0=0.5,replay.alpha=0.7"
    plan.start_sweep(a_plan(out, arms=axes.parse_arms(arm)))
    assert list(record_of(out)["runs"][0]["settings"]) == ["replay.beta0", "replay.alpha"]
    again = a_plan(out, arms=axes.parse_arms(arm))
    assert [j.run_dir for j in again.jobs] == ["rank/beta0=0.5,alpha=0.7/s0"]
    (out / SWEEP_FILE).write_text(json.dumps(record_of(out), indent=2, sort_keys=True))
    assert [j.run_dir for j in a_plan(out, arms=axes.parse_arms(arm)).jobs] == [
        "rank/beta0=0.5,alpha=0.7/s0"
    ]


def test_a_run_dir_holding_a_config_that_differs_in_two_keys_names_both(tmp_path):
    """Pins the line for a run dir whose ``config.yaml`` is another run's: each differing key
    with its held and planned values, joined by "; "."""
    out = tmp_path / "sw"
    sweep = a_plan(out)
    plan.start_sweep(sweep)
    (out / "uniform/s0").mkdir(parents=True)
    held = sweep.jobs[0].config_yaml.replace("gamma: 0.99", "gamma: 0.9")
    held = held.replace("batch_size: 64", "batch_size: 32")
    (out / "uniform/s0/config.yaml").write_text(held)
    with pytest.raises(ValueError) as caught:
        a_plan(out)
    assert str(caught.value) == (
        f"sweep dir {out}: run dir uniform/s0 holds a run of another config (agent.gamma: 0.9 "
        "-> 0.99; train.batch_size: 32 -> 64); choose another --out"
    )


def test_a_grid_value_spelled_in_another_key_order_is_recorded_once(tmp_path):
    """Pins the order-free union of a grown sweep's grid: a mapping value given again with its
    keys in another order is the value already recorded, not a second one."""
    out = tmp_path / "sw"
    plan.start_sweep(a_plan(out, grid=axes.parse_grid(["agent={n_step: 3, gamma: 0.9}"])))
    grown = axes.parse_grid(["agent={gamma: 0.9, n_step: 3},{n_step: 1, gamma: 0.9}"])
    plan.start_sweep(a_plan(out, grid=grown))
    assert record_of(out)["grid"] == {
        "agent": [{"n_step": 3, "gamma": 0.9}, {"n_step": 1, "gamma": 0.9}]
    }


# --- preflight ------------------------------------------------------------------------------------


class CountingTrainer:
    """Stands in for ``per_dqn.training.run.Trainer`` in ``preflight``: records each env it is built
    for; ``bad`` envs fail as an unusable env does."""

    built: ClassVar[list[str]] = []
    bad: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config, config_name) -> None:
        CountingTrainer.built.append(config.env.id)
        if config.env.id in CountingTrainer.bad:
            raise ValueError(f"env.id: cannot make {config.env.id!r}")

    def close(self) -> None:
        pass


def test_preflight_builds_one_trainer_per_env_and_names_the_config_of_a_bad_one(
    tmp_path, monkeypatch
):
    """Pins ``preflight``: one trainer per env however many runs it has (three seeds, two arms,
    two envs: two trainers), every env checked (the second included), and a failure's line
    prefixed with the sweep's config."""
    monkeypatch.setattr("per_dqn.training.run.Trainer", CountingTrainer)
    monkeypatch.setattr(CountingTrainer, "built", [])
    sweep = a_plan(tmp_path / "sw", arms=("uniform", "rank"), seeds=(0, 1, 2),
                   sets=["env.id=[CartPole-v1, Acrobot-v1]"])  # fmt: skip
    job.preflight(sweep)
    assert CountingTrainer.built == ["CartPole-v1", "Acrobot-v1"]
    monkeypatch.setattr(CountingTrainer, "bad", ("Acrobot-v1",))
    with pytest.raises(ValueError) as caught:
        job.preflight(sweep)
    assert str(caught.value) == "cartpole.yaml: env.id: cannot make 'Acrobot-v1'"


# --- --grid ---------------------------------------------------------------------------------------


def test_grid_values_split_only_at_top_level_commas():
    """Pins ``parse_grid``'s splitting: commas inside brackets and braces (nested too) belong to
    one value; other characters, an ``X`` included, are plain text."""
    assert axes.parse_grid(["agent={hidden_sizes: [64, 64], n_step: 3},{hidden_sizes: [32]}"]) == (
        ("agent", ({"hidden_sizes": [64, 64], "n_step": 3}, {"hidden_sizes": [32]})),
    )
    assert axes.parse_grid(["env.id=mymod:XEnv-v0,CartPole-v1"]) == (
        ("env.id", ("mymod:XEnv-v0", "CartPole-v1")),
    )


def test_a_grid_value_may_hold_an_equals_sign():
    """Pins the split at the first ``=``: the key is before it, the values after it."""
    assert axes.parse_grid(["env.id=CartPole-v1,mymod:Env=2"]) == (
        ("env.id", ("CartPole-v1", "mymod:Env=2")),
    )


@pytest.mark.parametrize("text", ["agent..gamma=1", ".gamma=1", "agent.=1", "=1", "agent.gamma"])
def test_a_grid_key_with_an_empty_part_or_no_value_is_refused(text):
    """Pins the KEY=VALUES shape: no ``=``, an empty key or an empty dotted part is one line."""
    with pytest.raises(ValueError) as caught:
        axes.parse_grid([text])
    assert str(caught.value) == f"--grid {text!r}: expected KEY=VALUE1,VALUE2,..."


def test_a_grid_value_that_is_not_yaml_is_named_as_the_grid_s():
    """Pins the YAML error line: the flag is renamed ``--grid`` once, text of the user's own that
    reads ``--set`` is echoed as typed."""
    with pytest.raises(ValueError) as caught:
        axes.parse_grid(["agent.gamma=[--set"])
    assert str(caught.value).startswith("--grid 'agent.gamma=[--set': value is not valid YAML")


def test_a_grid_mapping_given_twice_in_another_key_order_is_refused():
    with pytest.raises(ValueError) as caught:
        axes.parse_grid(["agent={n_step: 3, gamma: 0.9},{gamma: 0.9, n_step: 3}"])
    assert str(caught.value) == (
        "--grid agent lists a value twice, got '{n_step: 3, gamma: 0.9},{gamma: 0.9, n_step: 3}'"
    )


def test_an_env_id_grid_is_the_sweep_s_envs(tmp_path):
    """Pins ``--grid env.id=...`` as the sweep's env list (an env level in the run dirs, no grid
    key), like ``--set env.id=[...]``, checked as one (a line naming ``--grid``), and the two
    together refused."""
    grid = axes.parse_grid(["env.id=CartPole-v1,Acrobot-v1"])
    sweep = a_plan(tmp_path / "sw", grid=grid)
    assert [j.run_dir for j in sweep.jobs] == ["CartPole-v1/uniform/s0", "Acrobot-v1/uniform/s0"]
    assert sweep.record["envs"] == ["CartPole-v1", "Acrobot-v1"] and sweep.record["grid"] == {}
    with pytest.raises(ValueError) as caught:
        a_plan(tmp_path / "sw", grid=grid, sets=["env.id=[CartPole-v1, Acrobot-v1]"])
    assert str(caught.value) == "--grid env.id and --set env.id both list envs; give one"
    with pytest.raises(ValueError) as caught:
        a_plan(tmp_path / "sw", grid=axes.parse_grid(["env.id=CartPole-v1,3"]))
    assert str(caught.value) == (
        "--grid env.id: every env id must be a non-empty string, got ['CartPole-v1', 3]"
    )


def test_set_overrides_after_an_env_list_still_apply(tmp_path):
    """Pins ``_split_envs``: taking the env list out of the ``--set`` overrides keeps every other
    one, before and after it."""
    sweep = a_plan(tmp_path / "sw", sets=["env.id=[CartPole-v1, Acrobot-v1]", "agent.gamma=0.9"])
    assert [j.env_id for j in sweep.jobs] == ["CartPole-v1", "Acrobot-v1"]
    assert all("gamma: 0.9\n" in j.config_yaml for j in sweep.jobs)
    assert all("learning_starts: 100\n" in j.config_yaml for j in sweep.jobs)


def test_empty_seeds_or_arms_are_refused_by_the_api(tmp_path):
    """Pins ``plan_sweep``'s own checks, for callers of the Python API (the CLI's parsers never
    give an empty list)."""
    with pytest.raises(ValueError) as caught:
        a_plan(tmp_path / "sw", seeds=())
    assert str(caught.value) == "--seeds must name at least one seed"
    with pytest.raises(ValueError) as caught:
        a_plan(tmp_path / "sw", arms=())
    assert str(caught.value) == "arms must not be empty"


# --- the sweep dir and its record ---------------------------------------------------------------


def test_a_sweep_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "sw").write_text("a file")
    with pytest.raises(ValueError) as caught:
        a_plan(tmp_path / "sw")
    assert str(caught.value) == f"sweep dir {tmp_path / 'sw'} exists and is not a directory"


def test_a_sweep_of_another_config_name_is_refused_even_with_the_same_settings(tmp_path):
    """Pins the config-name check: a sweep dir planned from ``mine.yaml`` (a copy of
    cartpole.yaml, so every setting is the same) is not grown from ``cartpole.yaml``; the line
    names the old and new names."""
    import shutil

    from per_dqn.config import resolve_config_path

    mine = tmp_path / "mine.yaml"
    shutil.copy(resolve_config_path("cartpole.yaml"), mine)
    out = tmp_path / "sw"
    overrides = [parse_override("train.learning_starts=100")]
    plan.start_sweep(plan.plan_sweep(str(mine), ["uniform"], [0], 300, overrides, out))
    with pytest.raises(ValueError) as caught:
        a_plan(out)
    assert str(caught.value).startswith(
        f"sweep dir {out} holds a sweep with other settings (config_name: mine -> cartpole); "
    )


def test_a_format_1_record_is_grown_and_a_narrower_rerun_keeps_the_old_grid_axis(tmp_path):
    """Pins the reading of old records: a record without ``axes``, ``grid``, ``arm_settings`` or
    ``resolved_config`` (format 1) is grown by a plan of the same settings; and a sweep with a
    grid over ``agent.gamma``, re-run without the grid, is accepted (gamma is one of the old
    record's axes, so it is not a difference)."""
    out = tmp_path / "sw"
    plan.start_sweep(a_plan(out))
    record = record_of(out)
    for key in ("axes", "grid", "arm_settings", "resolved_config"):
        del record[key]
    record["format"] = 1
    fileio.write_json(out / SWEEP_FILE, record)
    grown = a_plan(out, seeds=(0, 1))
    assert [r["run_dir"] for r in grown.record["runs"]] == ["uniform/s0", "uniform/s1"]
    other = tmp_path / "sw2"
    plan.start_sweep(a_plan(other, grid=axes.parse_grid(["agent.gamma=0.9,0.95"])))
    narrower = a_plan(other)
    assert [j.run_dir for j in narrower.jobs] == ["uniform/s0"]
    assert narrower.record["grid"] == {"agent.gamma": [0.9, 0.95]}


def test_the_recorded_config_blanks_the_sweep_s_axes_with_null(tmp_path):
    """Pins the record's ``resolved_config``: the keys the sweep sets per run (env, kind, seed,
    arm settings, grid keys) are null there, the others hold the config's values."""
    sweep = a_plan(tmp_path / "sw", arms=axes.parse_arms("rank:replay.alpha=0.7"),
                   grid=axes.parse_grid(["agent.gamma=0.9,0.95"]))  # fmt: skip
    config = sweep.record["resolved_config"]
    assert config["env"]["id"] is None and config["replay"]["kind"] is None
    assert config["run"]["seed"] is None and config["replay"]["alpha"] is None
    assert config["agent"]["gamma"] is None and config["train"]["learning_starts"] == 100


def test_a_run_spelled_two_ways_is_found_past_an_unreadable_run_dir(tmp_path):
    """Pins the same-config check against the run dirs a sweep holds: one whose config.yaml
    cannot be read is skipped, and the ones after it are still compared, so ``alpha=1.0`` is
    refused beside a held ``alpha=1`` run; the line names both run dirs."""
    out = tmp_path / "sw"
    first = a_plan(out, arms=("uniform", "proportional"), grid=axes.parse_grid(["replay.alpha=1"]))
    plan.start_sweep(first)
    for one in first.jobs:
        (out / one.run_dir).mkdir(parents=True)
        (out / one.run_dir / "config.yaml").write_text(one.config_yaml)
    (out / first.jobs[0].run_dir / "config.yaml").write_text("[not: a mapping")
    with pytest.raises(ValueError) as caught:
        a_plan(out, arms=("proportional",), grid=axes.parse_grid(["replay.alpha=1.0"]))
    assert str(caught.value) == (
        "run dirs proportional/alpha=1/s0 and proportional/alpha=1.0/s0 would hold the same run "
        "(the same config): an arm or grid value is given twice, spelled two ways; give it once, "
        "spelled as before"
    )


# --- what the plan sets per run, and its record -------------------------------------------------


@pytest.mark.parametrize(
    ("arms", "seeds", "problem"),
    [
        (("nosuch",), (0,), f"replay.kind: must be one of {ONE_OF_KINDS}, "
                            "got 'nosuch' (set by --replay)"),
        (("uniform",), (-1,), "run.seed: must be >= 0, got -1 (set by --seeds)"),
    ],
)  # fmt: skip
def test_a_value_the_sweep_sets_per_run_is_blamed_on_its_option(tmp_path, arms, seeds, problem):
    """Pins the sources of the per-run overrides: a bad kind is ``--replay``'s, a bad seed
    ``--seeds``' (API callers can pass what the CLI's parsers would refuse)."""
    from per_dqn.config import ConfigError

    with pytest.raises(ConfigError) as caught:
        a_plan(tmp_path / "sw", arms=arms, seeds=seeds)
    assert caught.value.problems == [f"cartpole.yaml: {problem}"]


def test_a_one_env_list_has_no_env_level_and_a_default_out_names_every_env(workdir):
    """Pins the env level of run dirs: only a sweep of several envs has one (a list of one env is
    that env's sweep); the default sweep dir joins the envs' slugs with ``+``."""
    one = a_plan(None, sets=["env.id=[Acrobot-v1]"])
    assert [j.run_dir for j in one.jobs] == ["uniform/s0"]
    assert one.out == Path("runs/ablate__Acrobot-v1__cartpole")
    two = a_plan(None, sets=["env.id=[CartPole-v1, Acrobot-v1]"])
    assert two.out == Path("runs/ablate__CartPole-v1+Acrobot-v1__cartpole")


def test_the_planned_record_by_hand(tmp_path):
    """Pins ``sweep.json``'s fields for one plan (the resolved config aside: its own test)."""
    sweep = a_plan(tmp_path / "sw", seeds=(3,), sets=["agent.gamma=0.9"])
    record = {k: v for k, v in sweep.record.items() if k != "resolved_config"}
    assert record == {
        "format": 2, "config": "cartpole.yaml", "config_name": "cartpole", "arms": ["uniform"],
        "arm_settings": {}, "grid": {}, "seeds": [3], "envs": ["CartPole-v1"], "steps": 300,
        "overrides": ["train.learning_starts=100", "agent.gamma=0.9"],
        "axes": ["env.id", "replay.kind", "run.seed"],
        "runs": [{"env_id": "CartPole-v1", "arm": "uniform", "kind": "uniform", "settings": {},
                  "point": {}, "seed": 3, "run_dir": "uniform/s3"}],
    }  # fmt: skip
    assert sweep.jobs[0].config_name == "cartpole"


def test_two_runs_whose_names_read_alike_are_refused(tmp_path):
    """Pins the shared-run-dir check: grid values that differ but name the same run dir (``/``
    becomes ``-`` in a name) are refused, naming the dir."""
    with pytest.raises(ValueError) as caught:
        a_plan(tmp_path / "sw", grid=axes.parse_grid(["run.runs_root=x/y,x-y"]))
    assert (
        str(caught.value)
        == "two runs of this sweep would share the run dir uniform/runs_root=x-y/s0"
    )


def test_a_locked_sweep_dir_is_refused_with_the_line_that_names_it(tmp_path):
    """Pins the lock's line for a sweep dir (held here by another process)."""
    out = tmp_path / "sw"
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
        with pytest.raises(rundir.RunDirInUse) as caught:
            plan.lock_sweep_dir(sweep)
        assert str(caught.value) == (
            f"sweep dir {out} is in use by another per-dqn process (pid {pid}); wait for it to "
            "end or stop it"
        )
    finally:
        os.write(release_w, b"1")
        os.waitpid(pid, 0)
        for fd in (taken_r, taken_w, release_r, release_w):
            os.close(fd)


def test_start_sweep_grows_the_record_on_disk_not_the_one_planned(tmp_path):
    """Pins the re-read under the lock: a sweep planned before another command grew the same
    sweep dir keeps that command's runs when it starts (its plan's merge is stale by then)."""
    out = tmp_path / "sw"
    plan.start_sweep(a_plan(out, seeds=(0,)))
    mine = a_plan(out, seeds=(0, 1))
    plan.start_sweep(a_plan(out, seeds=(0, 2)))  # another ablate, between plan and start
    plan.start_sweep(mine)
    assert [r["run_dir"] for r in record_of(out)["runs"]] == [
        "uniform/s0",
        "uniform/s2",
        "uniform/s1",
    ]


def test_every_growth_of_a_sweep_is_logged(tmp_path):
    """Pins the growth log across two growths: one entry each, in order, with its run count."""
    out = tmp_path / "sw"
    plan.start_sweep(a_plan(out, seeds=(0,)))
    plan.start_sweep(a_plan(out, seeds=(0, 1)))
    plan.start_sweep(a_plan(out, seeds=(0, 1, 2, 3)))
    assert [g["runs_added"] for g in record_of(out)["grown"]] == [1, 2]
