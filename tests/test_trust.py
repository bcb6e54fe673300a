"""The trust boundary (issue 23): a run dir read back is data, never code.

A run dir's ``config.yaml`` has no checksum and may come from anyone, so a key that names code (a
network factory, a ``module:EnvName`` env id) is refused by ``eval``, ``train --resume``,
``per_dqn.load`` and ``per_dqn.resume`` before anything is imported, unless the user opts in for
that call (``--trust-code``, ``trust_code=True``, or ``network=`` the very factory it names).

Each attack plants a module that writes a marker file when imported and when its factory is
called, names it in a copied run dir's ``config.yaml``, and checks that the marker never appears
without the opt-in and that the run does play or resume with it. Each planted module has a name
of its own, so that an import by an earlier test cannot hide one by a later test.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml
from support import TINY, reseal, sets
from typer.testing import CliRunner

import per_dqn
from per_dqn.cli import app
from per_dqn.config import (
    CODE_KEYS,
    Config,
    UntrustedCodeError,
    code_keys,
    load_config,
    refuse_untrusted_code,
)
from per_dqn.config.trust import tracking_keys
from per_dqn.policy import check_run_code

ROOT = Path(__file__).resolve().parents[1]
SHORT = {
    "train.total_env_steps": 600, "train.learning_starts": 200, "train.eval_interval": 0,
    "train.final_eval_episodes": 1, "checkpoint.interval_steps": 300, "replay.capacity": 1_000,
    "run.device": "cpu",
}  # fmt: skip
runner = CliRunner()
_names = itertools.count()

# A Q-network factory that leaves a mark when its module is imported and when it is called; the
# same network every time, so that a run trained with one such module loads into another.
PLANT = """\
from pathlib import Path

from torch import nn

MARKER = Path({marker!r})
with MARKER.open("a") as out:
    out.write("imported\\n")


def factory(obs_shape, num_actions):
    with MARKER.open("a") as out:
        out.write("called\\n")
    return nn.Sequential(nn.Flatten(), nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, num_actions))
"""


def plant(where: Path, marker: Path) -> str:
    """Writes a planted module into ``where``; returns its (fresh) name."""
    name = f"planted_{os.getpid()}_{next(_names)}"
    (where / f"{name}.py").write_text(PLANT.format(marker=str(marker)))
    return name


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, str]:
    """A short CartPole run trained with a user's own factory (its module on ``sys.path``, as a
    user's is), and the factory's ``module:factory`` name."""
    base = tmp_path_factory.mktemp("trust")
    own = base / "own"
    own.mkdir()
    name = plant(own, base / "own-marker")
    sys.path.insert(0, str(own))
    try:
        run = per_dqn.train(
            "cartpole", overrides=SHORT, network=f"{name}:factory", run_dir=base / "run"
        )
    finally:
        sys.path.remove(str(own))
    return run.run_dir, f"{name}:factory"


@pytest.fixture
def attacked(trained, tmp_path, monkeypatch) -> tuple[Path, str, Path]:
    """A copy of the trained run whose ``config.yaml`` files an attacker edited to name a module
    planted in the run dir itself (on ``sys.path``, as a notebook or ``python -m`` run from the
    run dir puts it): the run dir's (no checksum) and each checkpoint's (manifest re-signed).
    Returns the run dir, the planted module and its marker."""
    run_dir = tmp_path / "run"
    shutil.copytree(trained[0], run_dir)
    marker = tmp_path / "marker"
    name = plant(run_dir, marker)
    edit_configs(run_dir, "agent", "network", f"{name}:factory")
    monkeypatch.syspath_prepend(str(run_dir))
    return run_dir, name, marker


def edit_configs(run_dir: Path, section: str, key: str, value: str) -> None:
    """Sets ``section.key`` in the run dir's ``config.yaml`` and in every checkpoint's, whose
    manifest is re-signed as someone who edits it on purpose can."""
    steps = sorted((run_dir / "checkpoints").iterdir())
    for path in [run_dir / "config.yaml"] + [step / "config.yaml" for step in steps]:
        data = yaml.safe_load(path.read_text())
        data[section][key] = value
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    for step in steps:
        reseal(step)


def refusal(config_file: Path, key: str, value: str) -> str:
    return (
        f"{config_file}: {key}: {value!r} names code to import, and a run dir read back runs "
        "none of its contents; if you trust where it came from, pass --trust-code (Python: "
        "trust_code=True)"
    )


def assert_refused(output: str, config_file: Path, key: str, value: str) -> None:
    (line,) = output.strip().splitlines()
    assert line == f"error: {refusal(config_file, key, value)}", line


def test_eval_refuses_a_planted_network_and_plays_it_with_trust_code(attacked):
    """Issue 23 item 1: ``per-dqn eval`` imported and called the factory an edited
    ``config.yaml`` named; now it exits 2 with one line and the planted module never runs, and
    ``--trust-code`` plays it."""
    run_dir, name, marker = attacked
    newest = run_dir / "checkpoints" / "step_000000600"
    done = runner.invoke(app, ["eval", str(run_dir), "--episodes", "1"])
    assert done.exit_code == 2
    assert_refused(done.output, newest / "config.yaml", "agent.network", f"{name}:factory")
    assert not marker.exists() and name not in sys.modules
    done = runner.invoke(app, ["eval", str(run_dir), "--episodes", "1", "--trust-code"])
    assert done.exit_code == 0, done.output
    assert "return: mean" in done.output
    assert marker.read_text().split() == ["imported", "called"]


def test_train_resume_refuses_a_planted_network_and_resumes_with_trust_code(attacked):
    """Issue 23 item 1: ``train --resume`` imported the factory an edited ``config.yaml``
    named; now it refuses, writes nothing, and resumes with ``--trust-code``, which is stored
    nowhere: the next command without it is refused again."""
    run_dir, name, marker = attacked
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    done = runner.invoke(app, ["train", "--resume", str(run_dir), "--steps", "900", "-q"])
    assert done.exit_code == 2
    assert_refused(done.output, run_dir / "config.yaml", "agent.network", f"{name}:factory")
    assert not marker.exists() and name not in sys.modules
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before
    done = runner.invoke(
        app, ["train", "--resume", str(run_dir), "--steps", "900", "-q", "--trust-code"]
    )
    assert done.exit_code == 0, done.output
    assert "called" in marker.read_text().split()
    assert (run_dir / "checkpoints" / "step_000000900").is_dir()
    # No config or manifest says "trust" (the command line the summary records may show the
    # flag, as a record of what was run; nothing reads it back as an allowance).
    for path in [*run_dir.rglob("config.yaml"), *run_dir.rglob("manifest.json")]:
        assert "trust" not in path.read_text(), path
    done = runner.invoke(app, ["eval", str(run_dir), "--episodes", "1"])
    assert done.exit_code == 2
    newest = run_dir / "checkpoints" / "step_000000900" / "config.yaml"
    assert_refused(done.output, newest, "agent.network", f"{name}:factory")


def test_train_trust_code_needs_resume():
    done = runner.invoke(app, ["train", "--config", "cartpole", "--trust-code"])
    assert done.exit_code == 2
    assert done.output.strip() == (
        "error: --trust-code needs --resume (a --config file is your own and always trusted)"
    )


def test_load_refuses_a_planted_network_unless_allowed(attacked):
    """Issue 23 item 1: ``per_dqn.load`` imported the factory an edited ``config.yaml`` named;
    now it raises ``UntrustedCodeError`` (a ``ValueError``, one line) for a run dir and for each
    of its checkpoints, and loads with ``trust_code=True``."""
    run_dir, name, marker = attacked
    value = f"{name}:factory"
    older = run_dir / "checkpoints" / "step_000000300"
    for target, config_file in [
        (run_dir, run_dir / "checkpoints" / "step_000000600" / "config.yaml"),
        (older, older / "config.yaml"),
    ]:
        with pytest.raises(UntrustedCodeError) as caught:
            per_dqn.load(target)
        assert str(caught.value) == refusal(config_file, "agent.network", value)
    # With no checkpoint, the weights are model.pt's and the config the run dir's.
    shutil.rmtree(run_dir / "checkpoints")
    with pytest.raises(ValueError) as caught:
        per_dqn.load(run_dir)
    assert str(caught.value) == refusal(run_dir / "config.yaml", "agent.network", value)
    assert not marker.exists() and name not in sys.modules
    policy = per_dqn.load(run_dir, trust_code=True)
    assert policy.config.agent.network == f"{name}:factory"
    assert marker.read_text().split() == ["imported", "called"]


def test_resume_refuses_a_planted_network_unless_allowed(attacked):
    """Issue 23 item 1: ``per_dqn.resume`` imported the factory an edited ``config.yaml``
    named; now it refuses before anything is imported and resumes with ``trust_code=True``."""
    run_dir, name, marker = attacked
    with pytest.raises(UntrustedCodeError, match=r"agent\.network: .* names code to import"):
        per_dqn.resume(run_dir, steps=900)
    assert not marker.exists() and name not in sys.modules
    result = per_dqn.resume(run_dir, steps=900, trust_code=True)
    assert result.summary["env_steps"] == 900
    assert "called" in marker.read_text().split()


def test_passing_the_run_s_own_factory_is_consent_for_it(trained, monkeypatch):
    """A user's own run keeps working: the factory given at train time, given again (the
    callable or its name), allows that one import; another factory is refused by name."""
    run_dir, name = trained
    with pytest.raises(UntrustedCodeError, match=rf"agent\.network: '{name}' names code"):
        per_dqn.load(run_dir)
    monkeypatch.syspath_prepend(str(run_dir.parent / "own"))
    module = __import__(name.partition(":")[0])
    assert per_dqn.load(run_dir, network=module.factory).config.agent.network == name
    assert per_dqn.load(run_dir, network=name).env_steps == 600
    other = re.escape(f"{plant.__module__}:plant")
    with pytest.raises(ValueError, match=rf"^network: '{other}' is not the network .* names"):
        per_dqn.load(run_dir, network=plant)
    report = per_dqn.api.evaluate_run(run_dir, episodes=1, network=module.factory)
    assert report.episodes.returns.shape == (1,)


def test_a_module_qualified_env_id_is_refused_unless_trusted(attacked):
    """Issue 23 item 1: ``env.id: "module:Env-v1"`` makes gymnasium import ``module``; read
    back from a run dir it is refused like a network, and played with ``--trust-code``."""
    run_dir, name, marker = attacked
    env_module = plant(run_dir, marker)
    edit_configs(run_dir, "env", "id", f"{env_module}:CartPole-v1")
    done = runner.invoke(app, ["eval", str(run_dir), "--episodes", "1"])
    assert done.exit_code == 2
    newest = run_dir / "checkpoints" / "step_000000600" / "config.yaml"
    assert done.output.strip().splitlines() == [  # one line per key
        f"error: {refusal(newest, 'agent.network', f'{name}:factory')}",
        f"error: {refusal(newest, 'env.id', f'{env_module}:CartPole-v1')}",
    ]
    assert not marker.exists() and env_module not in sys.modules
    done = runner.invoke(app, ["eval", str(run_dir), "--episodes", "1", "--trust-code"])
    assert done.exit_code == 0, done.output
    assert env_module in sys.modules


def test_the_cli_from_the_run_dir_runs_no_payload_it_holds(attacked):
    """Issue 23 item 1, as found: ``python -m per_dqn.cli eval .`` from inside the run dir puts
    it on ``sys.path``, so a ``payload.py`` there ran silently and the command exited 0."""
    run_dir, name, marker = attacked
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "per_dqn.cli", "eval", ".", "--episodes", "1"],
        cwd=run_dir, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    newest = Path("checkpoints") / "step_000000600" / "config.yaml"
    assert line == f"error: {refusal(newest, 'agent.network', f'{name}:factory')}"
    assert not marker.exists()


def test_a_config_the_user_passes_is_trusted(tmp_path):
    """The boundary is the run dir read back: the user's own config (``--config``, a dict) may
    name code, and is checked only by building the run."""
    config = load_config(ROOT / "per_dqn" / "configs" / "cartpole.yaml")
    own = config.model_copy(update={"agent": config.agent.model_copy(update={"network": "m:f"})})
    assert code_keys(own) == {"agent.network": "m:f"}
    refuse_untrusted_code(own, "x", trust_code=True)
    refuse_untrusted_code(own, "x", allowed=("agent.network",))
    with pytest.raises(UntrustedCodeError):
        refuse_untrusted_code(own, "x")
    assert code_keys(config) == {}


def track_refusal(config_file: Path | str, value: str = "wandb") -> str:
    return (
        f"{config_file}: run.track: {value!r} would send the run to a tracker's service with your "
        "credentials, and a run dir read back turns on no tracker; if you trust where it came "
        f"from, pass --track {value} (Python: track={value!r})"
    )


def test_a_read_back_run_track_is_refused_where_the_run_trains():
    """Issue 43, E2: ``run.track`` was not among the keys refused read back, so a run dir's
    ``config.yaml`` turned wandb on (with the user's API key) for ``train --resume`` and
    ``per_dqn.resume``, unasked. Now, for a caller that trains (``trains=True``), a tracker
    other than ``none`` is one more refused key, with the same opt-in as code; ``eval`` and
    ``load`` start no tracker and do not ask, and consent to a network is not consent to it."""
    config = load_config(ROOT / "per_dqn" / "configs" / "cartpole.yaml")
    tracked = config.model_copy(update={"run": config.run.model_copy(update={"track": "wandb"})})
    assert tracking_keys(tracked) == {"run.track": "wandb"} and tracking_keys(config) == {}
    assert code_keys(tracked) == {}
    refuse_untrusted_code(config, "x", trains=True)
    refuse_untrusted_code(tracked, "x")  # eval, load
    refuse_untrusted_code(tracked, "x", trains=True, trust_code=True)
    for allowed in ((), ("agent.network",)):
        with pytest.raises(UntrustedCodeError) as caught:
            refuse_untrusted_code(tracked, "x/config.yaml", trains=True, allowed=allowed)
        assert caught.value.problems == [track_refusal("x/config.yaml")]
    both = tracked.model_copy(update={"agent": tracked.agent.model_copy(update={"network": "m:f"})})
    with pytest.raises(UntrustedCodeError) as caught:
        refuse_untrusted_code(both, "c", trains=True)
    assert caught.value.problems == [refusal(Path("c"), "agent.network", "m:f"), track_refusal("c")]
    # the policy's check, by its defaults: nothing trusted unless asked for
    with pytest.raises(UntrustedCodeError) as caught:
        check_run_code(both, "c", trains=True)
    assert caught.value.problems == [refusal(Path("c"), "agent.network", "m:f"), track_refusal("c")]
    with pytest.raises(UntrustedCodeError) as caught:
        check_run_code(tracked, "c", trains=True, track=None)
    assert caught.value.problems == [track_refusal("c")]
    check_run_code(tracked, "c", trains=True, track="wandb")


def test_resume_refuses_a_planted_run_track_and_load_plays_it(trained, tmp_path, monkeypatch):
    """Issue 43, E2, through the API: ``per_dqn.resume`` of a run dir whose ``config.yaml`` says
    ``run.track: wandb`` (planted) raises before anything is built or written, even when the
    user passes the run's own network (consent to that import only); ``per_dqn.load`` of the
    same dir starts no tracker and loads; ``track="wandb"`` with the network resumes it."""
    monkeypatch.setenv("WANDB_MODE", "disabled")  # a wandb started anyway stays off the network
    run_dir = tmp_path / "run"
    shutil.copytree(trained[0], run_dir)
    edit_configs(run_dir, "run", "track", "wandb")
    monkeypatch.syspath_prepend(str(trained[0].parent / "own"))
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    with pytest.raises(UntrustedCodeError) as caught:
        per_dqn.resume(run_dir, steps=900, network=trained[1])
    assert str(caught.value) == track_refusal(run_dir / "config.yaml")
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before
    assert not (run_dir / "wandb").exists()
    policy = per_dqn.load(run_dir, network=trained[1])
    assert policy.config.run.track == "wandb" and policy.env_steps == 600
    assert not (run_dir / "wandb").exists()
    # ``track`` naming another tracker than the config's is no consent; naming it is, for it
    # alone (the network still needs its own).
    with pytest.raises(ValueError, match=r"track: 'none' is not the tracker .* names"):
        per_dqn.resume(run_dir, steps=900, network=trained[1], track="none")
    with pytest.raises(UntrustedCodeError, match=r"agent\.network"):
        per_dqn.resume(run_dir, steps=900, track="wandb")
    result = per_dqn.resume(run_dir, steps=900, network=trained[1], track="wandb")
    assert result.summary["env_steps"] == 900


def test_an_ablate_re_run_takes_no_tracker_from_its_run_dirs(tmp_path, monkeypatch):
    """Issue 43, E2, for ``ablate``: a sweep's runs are built from the user's ``--config``, never
    from what the sweep dir holds, so a ``run.track: wandb`` planted in an unfinished run's
    ``config.yaml`` (and its checkpoint's, re-signed) cannot turn wandb on in a re-run of the
    same command: the run dir is refused as holding another config, in one line, exit 2, before
    anything starts."""
    monkeypatch.setenv("WANDB_MODE", "disabled")  # a wandb started anyway stays off the network
    out = tmp_path / "sweep"
    args = ["ablate", "-c", "cartpole.yaml", "--replay", "uniform", "--seeds", "1", "--steps",
            "600", "--workers", "1", "--out", str(out), *sets(*TINY),
            "--set", "checkpoint.interval_steps=300"]  # fmt: skip
    assert runner.invoke(app, args).exit_code == 0
    run_dir = out / "uniform" / "s0"
    (run_dir / "summary.json").unlink()  # unfinished: a re-run would resume it
    edit_configs(run_dir, "run", "track", "wandb")
    done = runner.invoke(app, args)
    assert done.exit_code == 2, done.output
    (line,) = done.output.strip().splitlines()
    assert line.startswith(f"error: sweep dir {out}: run dir uniform/s0 holds a run of another ")
    assert "run.track: wandb -> none" in line
    assert not (run_dir / "wandb").exists() and not (run_dir / "summary.json").exists()


# Every string key of the config that names no code, by name: a new string key must be added
# here or to ``CODE_KEYS``, so that whether it can name code is decided once.
NAMES_NO_CODE = {"run.runs_root"}


def test_every_string_key_is_known_to_name_code_or_not():
    """``CODE_KEYS`` is the one list of keys that can name code; this keeps it complete as
    keys are added (a ``Literal`` names one of a fixed set, never a module)."""
    string_keys = set()
    for section, field in Config.model_fields.items():
        for key, info in field.annotation.model_fields.items():
            kinds = typing.get_args(info.annotation) or (info.annotation,)
            if str in kinds and typing.get_origin(info.annotation) is not typing.Literal:
                string_keys.add(f"{section}.{key}")
    assert string_keys == set(CODE_KEYS) | NAMES_NO_CODE
