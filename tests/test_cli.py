"""The command line: exit codes and one-line messages for each kind of bad input, and that bad
input creates nothing on disk."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from per_dqn.cli import app
from per_dqn.config import load_config

runner = CliRunner()


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """An empty working directory; runs would land in its runs/."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*args: str):
    return runner.invoke(app, list(args))


def assert_bad_input(result, *lines: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [f"error: {line}" for line in lines]
    assert result.stdout == ""


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return path.name


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("train:\n  batch_size: [1,\n", "exp.yaml: line 3, column 1: invalid YAML: expected the "
                                        "node content, but found '<stream end>'"),
        ("replay:\n  alhpa: 0.5\n", "exp.yaml: replay.alhpa: unknown key; did you mean `alpha`?"),
        ("train:\n  batch_size: many\n", "exp.yaml: train.batch_size: must be an integer, got "
                                         "'many'"),
        ("replay:\n  alpha: -1\n", "exp.yaml: replay.alpha: must be >= 0, got -1"),
    ],
)  # fmt: skip
def test_bad_config_file(workdir, text, line):
    name = write(workdir / "exp.yaml", text)
    assert_bad_input(invoke("train", "--config", name), line)
    assert sorted(p.name for p in workdir.iterdir()) == ["exp.yaml"]  # no runs/ created


def test_missing_config_file(workdir):
    result = invoke("train", "--config", "nope.yaml")
    assert_bad_input(result, "nope.yaml: no such config file (the shipped configs are: "
                             "atari.yaml, atari100k.yaml, cartpole.yaml)")  # fmt: skip
    assert list(workdir.iterdir()) == []


def test_bad_overrides(workdir):
    assert_bad_input(
        invoke("train", "-c", "cartpole.yaml", "--set", "replay.alpha=-2", "--steps", "0"),
        "cartpole.yaml: replay.alpha: must be >= 0, got -2 (set by --set)",
        "cartpole.yaml: train.total_env_steps: must be >= 1, got 0 (set by --steps)",
    )
    assert_bad_input(
        invoke("train", "-c", "cartpole.yaml", "--set", "replay.alpha"),
        "--set 'replay.alpha': expected section.key=value",
    )
    assert_bad_input(
        invoke("train", "-c", "cartpole.yaml", "--set", "train.bach_size=3"),
        "cartpole.yaml: train.bach_size: unknown key; did you mean `batch_size`? (set by --set)",
    )
    assert list(workdir.iterdir()) == []


def test_bad_choice_option_is_a_usage_error(workdir):
    result = invoke("train", "-c", "cartpole.yaml", "--replay", "bogus")
    assert result.exit_code == 2
    assert "bogus" in result.output
    assert list(workdir.iterdir()) == []


def test_unusable_env_creates_nothing(workdir):
    assert_bad_input(
        invoke("train", "-c", "cartpole.yaml", "--set", "env.id=Pendulum-v1"),
        "cartpole.yaml: env.id: DQN needs a Discrete action space, got Box(-2.0, 2.0, (1,), "
        "float32)",
    )
    assert list(workdir.iterdir()) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda(workdir):
    assert_bad_input(
        invoke("train", "-c", "cartpole.yaml", "--device", "cuda"),
        "cartpole.yaml: run.device: 'cuda' was asked for but torch.cuda.is_available() is False",
    )
    assert list(workdir.iterdir()) == []


def test_refuses_a_non_empty_run_dir(workdir):
    run_dir = workdir / "mine"
    run_dir.mkdir()
    (run_dir / "keep.txt").write_text("precious")
    assert_bad_input(
        invoke("train", "-c", "cartpole.yaml", "--run-dir", "mine"),
        "run dir mine exists and is not empty; choose another --run-dir",
    )
    assert [p.name for p in run_dir.iterdir()] == ["keep.txt"]


def test_config_show_prints_the_resolved_config(workdir):
    result = invoke("config", "show", "cartpole", "--set", "replay.kind=rank")
    assert result.exit_code == 0, result.output
    (workdir / "shown.yaml").write_text(result.stdout)
    cfg = load_config(workdir / "shown.yaml")
    assert cfg.replay.kind == "rank"
    assert cfg.env.id == "CartPole-v1"


def test_config_validate(workdir):
    good = write(workdir / "good.yaml", "train:\n  batch_size: 32\n  learning_starts: 32\n")
    result = invoke("config", "validate", good)
    assert result.exit_code == 0 and result.stdout == "ok: good.yaml\n"
    bad = write(workdir / "bad.yaml", "train:\n  batch_size: 32\n  learning_starts: 8\n")
    assert_bad_input(
        invoke("config", "validate", bad),
        "bad.yaml: train.learning_starts: must be >= train.batch_size (32), got 8",
    )


def test_no_arguments_shows_help():
    result = invoke()
    assert "train" in result.output and "config" in result.output
