"""Keys a replay kind does not read (``per_dqn.config.kind_ignores``): each kind's list by hand,
an override of one refused with one line and exit 2 (``train``, ``ablate``'s arms, the API),
and the cases that are not refusals (a file written for another kind, a sweep-wide ``--set``
beside an arm that does not read it). The same for an ``env`` key its env's family does not
read (``families.ignored_env_keys``), and for an optimiser's own setting under the other
optimiser (``per_dqn.config.optimizer_ignores``)."""

from __future__ import annotations

import pytest
import torch
import yaml
from support import assert_bad_input
from typer.testing import CliRunner

import per_dqn
from per_dqn.agent.optim import make_optimizer
from per_dqn.cli import app
from per_dqn.cli.config import mark_unread_keys
from per_dqn.config import (
    ConfigError,
    kind_ignores,
    load_config,
    optimizer_ignores,
    parse_override,
    unread_keys,
)
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


# What each optimiser reads of its own settings, by hand from ``agent/optim.py``.
OPTIMIZER_READS = {
    "adam": {"agent.adam_eps"},
    "rmsprop": {"agent.rmsprop_alpha", "agent.rmsprop_eps", "agent.rmsprop_centered"},
}
# A value other than the default for each, and the keyword ``make_optimizer`` takes it by.
OTHER_VALUE = {"agent.adam_eps": 1e-2, "agent.rmsprop_alpha": 0.5, "agent.rmsprop_eps": 1e-5,
               "agent.rmsprop_centered": False}  # fmt: skip


def _after_steps(optimizer, **settings):
    """A small linear layer's weights after three steps of ``optimizer`` on fixed gradients."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 2)
    opt = make_optimizer(optimizer, layer.parameters(), 1e-2, **settings)
    for k in range(3):
        for p in layer.parameters():
            p.grad = torch.full_like(p, 0.1 * (k + 1)) * torch.linspace(-1, 1, p.numel()).view_as(p)
        opt.step()
    return torch.cat([p.detach().flatten() for p in layer.parameters()])


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZER_READS))
def test_each_optimizer_s_unread_keys_by_hand_and_against_its_steps(optimizer):
    """The keys ``optimizer_ignores`` names change nothing of the optimiser's steps; the keys it
    reads each do (so the list is not merely written twice)."""
    every = set().union(*OPTIMIZER_READS.values())
    assert optimizer_ignores(optimizer) == every - OPTIMIZER_READS[optimizer]
    base = _after_steps(optimizer)
    for key in sorted(every):
        changed = _after_steps(optimizer, **{key.removeprefix("agent."): OTHER_VALUE[key]})
        assert torch.equal(changed, base) == (key in optimizer_ignores(optimizer)), key


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["-c", "minatar.yaml", "--set", "agent.rmsprop_eps=0.1"],
         "minatar.yaml: agent.rmsprop_eps: optimizer 'adam' does not read it (set by --set)"),
        (["-c", "literature/minatar_paper_dqn", "--set", "agent.adam_eps=0.1"],
         "literature/minatar_paper_dqn: agent.adam_eps: optimizer 'rmsprop' does not read it "
         "(set by --set)"),
        (["-c", "cartpole.yaml", "--set", "agent.optimizer=rmsprop", "--set", "agent.adam_eps=1"],
         "cartpole.yaml: agent.adam_eps: optimizer 'rmsprop' does not read it (set by --set)"),
    ],
)  # fmt: skip
def test_train_refuses_a_setting_of_the_optimizer_it_does_not_use(workdir, args, line):
    """Pins a silent no-op: ``--set agent.adam_eps=0.1`` on the MinAtar paper's preset (RMSprop)
    ran as if it were not given, exit 0."""
    result = runner.invoke(app, ["train", "--steps", "6000", *args])
    assert_bad_input(result, line)
    assert list(workdir.iterdir()) == []


def test_the_optimizer_a_run_uses_takes_its_own_settings():
    config = load_config(
        per_dqn.config.resolve_config_path("cartpole.yaml"),
        [parse_override("agent.optimizer=rmsprop"), parse_override("agent.rmsprop_eps=0.1")],
    )
    assert config.agent.rmsprop_eps == 0.1


def test_a_sweep_wide_optimizer_setting_reaches_only_the_runs_of_its_optimizer(tmp_path):
    """``--grid agent.optimizer=adam,rmsprop --set agent.adam_eps=1e-4``: Adam's runs have it,
    RMSprop's keep the config's value (they would not read it)."""
    sweep = plan.plan_sweep(
        "cartpole.yaml", ("uniform",), range(1), 2000, [parse_override("agent.adam_eps=1e-4")],
        tmp_path / "sw", grid=[("agent.optimizer", ("adam", "rmsprop"))],
    )  # fmt: skip
    eps = {
        (agent := yaml.safe_load(job.config_yaml)["agent"])["optimizer"]: agent["adam_eps"]
        for job in sweep.jobs
    }
    default = load_config(per_dqn.config.resolve_config_path("cartpole.yaml")).agent.adam_eps
    assert eps == {"adam": 1e-4, "rmsprop": default}
    assert default != 1e-4


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--replay", "uniform", "--set", "replay.alpha=0.7"],
         "cartpole.yaml: replay.alpha: none of the sweep's runs reads it (set by --set)"),
        (["--replay", "uniform,proportional", "--set", "agent.rmsprop_eps=0.1"],
         "cartpole.yaml: agent.rmsprop_eps: none of the sweep's runs reads it (set by --set)"),
    ],
)  # fmt: skip
def test_a_sweep_wide_key_none_of_its_runs_reads_is_refused(workdir, args, line):
    """Pins a silent no-op: ``ablate --replay uniform --set replay.alpha=0.7`` left the key out of
    every run (uniform does not read it) and ran the sweep as if it were not given."""
    result = runner.invoke(app, ["ablate", "-c", "cartpole.yaml", "--seeds", "1", "--steps",
                                 "2000", *args])  # fmt: skip
    assert_bad_input(result, line)
    assert list(workdir.iterdir()) == []


def test_a_re_run_of_one_arm_keeps_the_sweep_s_key_its_other_arms_read(tmp_path):
    """A re-run naming only the uniform arm of a sweep over uniform and proportional, with the
    sweep's own ``--set replay.alpha=0.7``, plans uniform's runs: proportional's, of the sweep
    it re-runs, read the key."""
    out = tmp_path / "sw"
    sets = [parse_override("replay.alpha=0.7")]
    plan.start_sweep(plan.plan_sweep("cartpole.yaml", ("uniform", "proportional"), range(1),
                                     2000, sets, out))  # fmt: skip
    again = plan.plan_sweep("cartpole.yaml", ("uniform",), range(1), 2000, sets, out)
    assert [job.arm for job in again.jobs] == ["uniform"]


@pytest.mark.parametrize(
    ("name", "sets"),
    [("cartpole.yaml", ["replay.kind=uniform"]), ("atari.yaml", ["replay.kind=lap"]),
     ("literature/minatar_paper_dqn", [])],
)  # fmt: skip
def test_config_show_marks_every_key_the_run_does_not_read(name, sets):
    """``config show`` marks each key of ``unread_keys`` with what does not read it, and no other
    key; its output loads back as the same config."""
    args = [a for s in sets for a in ("--set", s)]
    result = runner.invoke(app, ["config", "show", name, *args])
    assert result.exit_code == 0, result.output
    config = load_config(per_dqn.config.resolve_config_path(name), map(parse_override, sets))
    marked, section = {}, None
    for line in result.output.splitlines():
        if not line.startswith(" "):
            section = line.rstrip(":")
        elif "  # not read by " in line:
            key, by = line.strip().split("  # not read by ")
            marked[f"{section}.{key.split(':')[0]}"] = by
    assert marked == unread_keys(config)
    assert set(marked.values()) >= {f"optimizer {config.agent.optimizer!r}",
                                    f"replay kind {config.replay.kind!r}"}  # fmt: skip
    assert yaml.safe_load(result.output) == yaml.safe_load(config.to_yaml())
    assert mark_unread_keys(config.to_yaml(), config) == result.output


def test_a_run_dir_differing_only_in_its_unused_optimizer_s_setting_is_its_run(tmp_path):
    """A sweep made before a sweep-wide optimiser setting was left out of the runs of the other
    optimiser wrote it into their configs: RMSprop's run dir holding ``adam_eps: 1e-4`` is still
    its run on a re-run; a difference in a key RMSprop reads is refused."""
    out = tmp_path / "sw"
    sets = [parse_override("agent.adam_eps=1e-4")]
    grid = [("agent.optimizer", ("adam", "rmsprop"))]
    sweep = plan.plan_sweep("cartpole.yaml", ("uniform",), range(1), 2000, sets, out, grid=grid)
    plan.start_sweep(sweep)
    (job,) = [j for j in sweep.jobs if "rmsprop" in j.run_dir]
    (out / job.run_dir).mkdir(parents=True)
    held = yaml.safe_load(job.config_yaml)
    held["agent"]["adam_eps"] = 1e-4
    (out / job.run_dir / "config.yaml").write_text(yaml.safe_dump(held))
    again = plan.plan_sweep("cartpole.yaml", ("uniform",), range(1), 2000, sets, out, grid=grid)
    assert sorted(j.run_dir for j in again.jobs) == sorted(j.run_dir for j in sweep.jobs)
    held["agent"]["rmsprop_eps"] = 0.5
    (out / job.run_dir / "config.yaml").write_text(yaml.safe_dump(held))
    with pytest.raises(ValueError, match=r"holds a run of another config \(agent.rmsprop_eps: "):
        plan.plan_sweep("cartpole.yaml", ("uniform",), range(1), 2000, sets, out, grid=grid)
