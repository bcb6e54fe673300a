"""Keys a replay kind does not read (``per_dqn.config.kind_ignores``): each kind's list by hand,
an override of one refused with one line and exit 2 (``train``, ``ablate``'s arms, the API),
and the cases that are not refusals (a file written for another kind, a sweep-wide ``--set``
beside an arm that does not read it). The same for an ``env`` key its env's family does not
read (``families.ignored_env_keys``)."""

from __future__ import annotations

import pytest
import yaml
from support import assert_bad_input
from typer.testing import CliRunner

import per_dqn
from per_dqn.cli import app
from per_dqn.config import ConfigError, kind_ignores, load_config, parse_override
from per_dqn.memory import KINDS
from per_dqn.sweeps import plan

runner = CliRunner()

EVERY = {"replay.kind", "replay.capacity", "replay.dedup_frames", "replay.frame_slack"}
BETA = {"replay.beta0", "replay.beta_end", "replay.beta_anneal_steps"}
PROPORTIONAL = {"replay.alpha", "replay.priority_eps", "replay.td_error_clip",
                "replay.uniform_mix", "replay.weight_normalization"}  # fmt: skip
# Read by the kinds that keep a priority per transition (a distributed run's actors may set it).
KEEPS = {"replay.initial_priority"}
# What each kind reads, written out by hand from its sampler, its objective and its signal.
READS = {
    "uniform": EVERY | {"agent.loss"},
    "proportional": EVERY | PROPORTIONAL | BETA | KEEPS | {"replay.priority_from", "agent.loss"},
    "rank": EVERY
    | BETA
    | KEEPS
    | {
        "replay.alpha",
        "replay.td_error_clip",
        "replay.sort_interval",
        "replay.priority_from",
        "agent.loss",
    },
    "relo": EVERY | PROPORTIONAL | BETA | KEEPS | {"agent.loss"},
    "lap": EVERY | KEEPS | {"replay.alpha", "replay.min_priority"},
    "pal": EVERY | {"replay.alpha", "replay.min_priority"},
    "laber": EVERY | {"replay.large_batch", "agent.loss"},
}
ALL = {f"replay.{key}" for key in per_dqn.config.ReplayConfig.model_fields} | {"agent.loss"}


def test_every_kind_s_unread_keys_by_hand():
    assert set(READS) == set(KINDS)
    for kind, reads in READS.items():
        assert kind_ignores(kind) == ALL - reads, kind


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--replay", "laber", "--set", "replay.alpha=0.5"],
         "cartpole.yaml: replay.alpha: replay kind 'laber' does not read it (set by --set)"),
        (["--replay", "lap", "--set", "agent.loss=mse"],
         "cartpole.yaml: agent.loss: replay kind 'lap' does not read it (set by --set)"),
        (["--replay", "relo", "--set", "replay.priority_from=loss"],
         "cartpole.yaml: replay.priority_from: replay kind 'relo' does not read it (set by "
         "--set)"),
        (["--set", "replay.kind=uniform", "--set", "replay.beta0=0.3"],
         "cartpole.yaml: replay.beta0: replay kind 'uniform' does not read it (set by --set)"),
        (["--replay", "laber", "--set", "replay.large_batch=0"],
         "cartpole.yaml: replay.large_batch: must be >= 1, got 0 (set by --set)"),
    ],
)  # fmt: skip
def test_train_refuses_a_key_its_kind_does_not_read(workdir, args, line):
    result = runner.invoke(app, ["train", "-c", "cartpole.yaml", "--steps", "2000", *args])
    assert_bad_input(result, line)
    assert list(workdir.iterdir()) == []


def test_an_arm_s_own_setting_its_kind_does_not_read_is_refused(workdir):
    result = runner.invoke(
        app, ["ablate", "-c", "cartpole.yaml", "--replay", "uniform,laber:replay.alpha=0.7",
              "--seeds", "1", "--steps", "2000"],
    )  # fmt: skip
    assert_bad_input(
        result,
        "cartpole.yaml: replay.alpha: replay kind 'laber' does not read it (set by --replay "
        "laber:)",
    )
    assert list(workdir.iterdir()) == []


def test_a_sweep_wide_key_reaches_only_the_arms_that_read_it(tmp_path):
    """``--set replay.alpha=0.7`` beside uniform, proportional and LaBER: proportional's runs
    have it, uniform's and LaBER's keep the config's value (they would not read it), and the
    sweep's record still holds it (a re-run with another alpha is another sweep)."""
    sweep = plan.plan_sweep(
        "cartpole.yaml", ("uniform", "proportional", "laber"), range(1), 2000,
        [parse_override("replay.alpha=0.7")], tmp_path / "sw",
    )  # fmt: skip
    alpha = {job.arm: yaml.safe_load(job.config_yaml)["replay"]["alpha"] for job in sweep.jobs}
    default = load_config(per_dqn.config.resolve_config_path("cartpole.yaml")).replay.alpha
    assert alpha == {"uniform": default, "proportional": 0.7, "laber": default}
    assert default != 0.7
    assert sweep.record["resolved_config"]["replay"]["alpha"] == 0.7


def test_a_file_written_for_another_kind_runs_with_any_kind(tmp_path):
    """A file's own keys are not checked: ``reducible_loss_minatar_per`` sets proportional PER's
    keys (priority_from, beta, ...), and ``--replay laber`` runs it as LaBER."""
    config = load_config(
        per_dqn.config.resolve_config_path("literature/reducible_loss_minatar_per"),
        [parse_override("replay.kind=laber")],
    )
    assert config.replay.kind == "laber" and config.replay.priority_from == "loss"


def test_the_api_refuses_it_in_one_line():
    """PAL reads alpha (its loss's exponent), not rank's sort interval."""
    with pytest.raises(ConfigError) as info:
        per_dqn.train("cartpole", overrides={"replay.kind": "pal", "replay.alpha": 0.3,
                                             "replay.sort_interval": 5})  # fmt: skip
    assert info.value.problems == [
        "cartpole: replay.sort_interval: replay kind 'pal' does not read it (set by overrides)"
    ]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["-c", "cartpole.yaml", "--set", "env.frame_skip=2"],
         "cartpole.yaml: env.frame_skip: CartPole-like envs do not read it (set by --set)"),
        (["-c", "minatar.yaml", "--set", "env.noop_max=0"],
         "minatar.yaml: env.noop_max: MinAtar envs do not read it (set by --set)"),
        (["-c", "atari.yaml", "--set", "env.id=CartPole-v1", "--set", "train.learning_starts=100",
          "--set",
          "env.sticky_action_prob=0"],
         "atari.yaml: env.sticky_action_prob: CartPole-like envs do not read it (set by --set)"),
    ],
)  # fmt: skip
def test_train_refuses_an_env_key_its_env_s_family_does_not_read(workdir, args, line):
    """Pins a silent no-op: ``--set env.frame_skip=2`` on CartPole, or Atari's ``noop_max`` on
    MinAtar, ran as if it were not given, exit 0. The family is the one of the env the run
    plays, after every override (an Atari file run on CartPole is judged as CartPole)."""
    result = runner.invoke(app, ["train", "--steps", "2000", *args])
    assert_bad_input(result, line)
    assert list(workdir.iterdir()) == []


def test_a_file_s_own_env_keys_are_not_checked():
    """``atari.yaml`` sets Atari's keys; run on CartPole (``--set env.id``), it loads."""
    config = load_config(
        per_dqn.config.resolve_config_path("atari.yaml"),
        [parse_override("env.id=CartPole-v1")],
    )
    assert config.env.id == "CartPole-v1" and config.env.noop_max == 30


def test_a_sweep_wide_env_key_reaches_only_the_envs_that_read_it(tmp_path):
    """``--set env.frame_skip=2`` over Pong and MinAtar Breakout: Pong's runs skip 2 frames,
    Breakout's keep the config's value (MinAtar does not read it)."""
    sweep = plan.plan_sweep(
        "minatar.yaml", ("uniform",), range(1), 2000,
        [parse_override("env.id=ALE/Pong-v5,MinAtar/Breakout-v1"),
         parse_override("env.frame_skip=2")], tmp_path / "sw",
    )  # fmt: skip
    skip = {job.env_id: yaml.safe_load(job.config_yaml)["env"]["frame_skip"] for job in sweep.jobs}
    default = load_config(per_dqn.config.resolve_config_path("minatar.yaml")).env.frame_skip
    assert skip == {"ALE/Pong-v5": 2, "MinAtar/Breakout-v1": default}
    assert default != 2


def test_a_sweep_wide_env_key_none_of_its_envs_reads_is_refused(workdir):
    result = runner.invoke(
        app, ["ablate", "-c", "cartpole.yaml", "--grid", "env.id=CartPole-v1,MinAtar/Breakout-v1",
              "--set", "env.frame_skip=2", "--seeds", "1", "--steps", "2000"],
    )  # fmt: skip
    assert_bad_input(
        result, "cartpole.yaml: env.frame_skip: none of the sweep's envs reads it (set by --set)"
    )
    assert list(workdir.iterdir()) == []


def test_the_api_refuses_an_env_key_in_one_line():
    with pytest.raises(ConfigError) as info:
        per_dqn.train("cartpole", overrides={"env.frame_skip": 2})
    assert info.value.problems == [
        "cartpole: env.frame_skip: CartPole-like envs do not read it (set by overrides)"
    ]


def test_a_re_run_naming_one_env_keeps_the_sweep_s_env_key(tmp_path):
    """A re-run that names only MinAtar of a sweep over Pong and MinAtar, with the sweep's own
    ``--set env.frame_skip=2``, plans MinAtar's runs (the key left out of them), not "none of
    the sweep's envs reads it": Pong, of the sweep it re-runs, reads it."""
    out = tmp_path / "sw"
    sets = [parse_override("env.frame_skip=2")]
    both = plan.plan_sweep(
        "minatar.yaml", ("uniform",), range(1), 2000,
        [parse_override("env.id=ALE/Pong-v5,MinAtar/Breakout-v1"), *sets], out,
    )  # fmt: skip
    plan.start_sweep(both)
    again = plan.plan_sweep(
        "minatar.yaml", ("uniform",), range(1), 2000,
        [parse_override("env.id=MinAtar/Breakout-v1"), *sets], out,
    )  # fmt: skip
    assert [job.env_id for job in again.jobs] == ["MinAtar/Breakout-v1"]


def test_a_grid_over_an_env_key_some_envs_do_not_read_is_refused(tmp_path):
    """Pins run dirs named ``frame_skip=2`` whose configs held the config's 4: a --grid point was
    left out of the runs of an env that does not read its key, as a --set is."""
    with pytest.raises(ConfigError) as info:
        plan.plan_sweep(
            "minatar.yaml", ("uniform",), range(1), 2000,
            [parse_override("env.id=ALE/Pong-v5,MinAtar/Breakout-v1")], tmp_path / "sw",
            grid=[("env.frame_skip", (2, 3))],
        )  # fmt: skip
    assert info.value.problems == [
        "minatar.yaml: env.frame_skip: MinAtar envs do not read it (set by --grid)"
    ]


def test_a_run_dir_differing_only_in_a_key_its_run_does_not_read_is_its_run(tmp_path):
    """A sweep made before a sweep-wide ``--set`` was left out of the envs that ignore it wrote
    it into their runs' configs: MinAtar's ``frame_skip: 2`` differs from the plan's 4 only in a
    key MinAtar does not read, so the re-run plans that run dir as its own, not "holds a run of
    another config"; a difference in a key it reads is still refused."""
    out = tmp_path / "sw"
    overrides = [parse_override("env.id=ALE/Pong-v5,MinAtar/Breakout-v1"),
                 parse_override("env.frame_skip=2")]  # fmt: skip
    sweep = plan.plan_sweep("minatar.yaml", ("uniform",), range(1), 2000, overrides, out)
    plan.start_sweep(sweep)
    (job,) = [j for j in sweep.jobs if j.env_id == "MinAtar/Breakout-v1"]
    run_dir = out / job.run_dir
    run_dir.mkdir(parents=True)
    held = yaml.safe_load(job.config_yaml)
    held["env"]["frame_skip"] = 2
    (run_dir / "config.yaml").write_text(yaml.safe_dump(held))
    again = plan.plan_sweep("minatar.yaml", ("uniform",), range(1), 2000, overrides, out)
    assert sorted(j.run_dir for j in again.jobs) == sorted(j.run_dir for j in sweep.jobs)
    held["agent"]["gamma"] = 0.9
    (run_dir / "config.yaml").write_text(yaml.safe_dump(held))
    with pytest.raises(ValueError, match=r"holds a run of another config \(agent.gamma: 0.9 -> "):
        plan.plan_sweep("minatar.yaml", ("uniform",), range(1), 2000, overrides, out)
