"""Config models and the YAML reader: shipped files validate, and each bad input says where."""

from __future__ import annotations

from pathlib import Path

import pydantic
import pytest

from per_dqn.config import (
    Config,
    ConfigError,
    Override,
    load_config,
    parse_override,
    resolve_config_path,
    shipped_config_names,
)

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_file_in_configs_validates(path):
    load_config(path)


def test_top_level_configs_are_the_shipped_ones():
    """configs/ (top level) and the package's configs are the same files."""
    assert sorted(p.name for p in CONFIG_DIR.glob("*.yaml")) == shipped_config_names()
    assert "cartpole.yaml" in shipped_config_names()


def test_bare_name_resolves_to_the_shipped_config_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("cartpole.yaml", "cartpole"):
        path = resolve_config_path(name)
        assert path.name == "cartpole.yaml" and path.is_file()


def test_an_existing_path_wins_over_a_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("cartpole.yaml").write_text("train:\n  batch_size: 32\n  learning_starts: 32\n")
    assert resolve_config_path("cartpole.yaml") == Path("cartpole.yaml")
    assert load_config("cartpole.yaml").train.batch_size == 32


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    return path


def problems(tmp_path, text: str, overrides=()) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), overrides, display_name="exp.yaml")
    return info.value.problems


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("replay:\n  alpha: -1\n", ["exp.yaml: replay.alpha: must be >= 0, got -1"]),
        ("replay:\n  beta0: 1.5\n", ["exp.yaml: replay.beta0: must be <= 1, got 1.5"]),
        ("agent:\n  gamma: 0\n", ["exp.yaml: agent.gamma: must be > 0, got 0"]),
        ("replay:\n  uniform_mix: 1.0\n", ["exp.yaml: replay.uniform_mix: must be < 1, got 1.0"]),
        ("train:\n  bach_size: 64\n", ["exp.yaml: train.bach_size: unknown key; did you mean "
                                       "`batch_size`?"]),
        ("trian:\n  batch_size: 64\n", ["exp.yaml: trian: unknown key; did you mean `train`?"]),
        ("train:\n  batch_size: 1.5\n", ["exp.yaml: train.batch_size: must be an integer, "
                                         "got 1.5"]),
        ("agent:\n  dueling: 'yes'\n", ["exp.yaml: agent.dueling: must be true or false, "
                                        "got 'yes'"]),
        ("replay:\n  kind: prio\n", ["exp.yaml: replay.kind: must be one of 'uniform', "
                                     "'proportional' or 'rank', got 'prio'"]),
        ("replay:\n  td_error_clip: big\n", ["exp.yaml: replay.td_error_clip: must be a number, "
                                             "got 'big'"]),
        ("agent:\n  hidden_sizes: [64, 0]\n", ["exp.yaml: agent.hidden_sizes: every width must "
                                               "be >= 1, got [64, 0]"]),
        ("agent:\n  hidden_sizes: [64, x]\n", ["exp.yaml: agent.hidden_sizes[1]: must be an "
                                               "integer, got 'x'"]),
        ("train: 5\n", ["exp.yaml: train: must be a mapping of keys, got 5"]),
        ("- 1\n", ["exp.yaml: the top level must be a mapping of sections, got list"]),
        ("train:\n  batch_size: [1,\n", ["exp.yaml: line 3, column 1: invalid YAML: expected the "
                                         "node content, but found '<stream end>'"]),
        ("train:\n  batch_size: 1\n  batch_size: 2\n", ["exp.yaml: line 3, column 3: invalid "
                                                        "YAML: duplicate key 'batch_size'"]),
    ],
)  # fmt: skip
def test_one_line_per_problem_naming_file_and_path(tmp_path, text, expected):
    assert problems(tmp_path, text) == expected


def test_several_problems_are_all_reported(tmp_path):
    got = problems(tmp_path, "replay:\n  alpha: -1\n  beta0: 2\ntrain:\n  bach_size: 1\n")
    assert len(got) == 3
    assert all(line.startswith("exp.yaml: ") for line in got)


def test_cross_field_checks(tmp_path):
    got = problems(
        tmp_path,
        "train:\n  batch_size: 128\n  learning_starts: 100\nreplay:\n  capacity: 64\n",
    )
    assert got == [
        "exp.yaml: train.learning_starts: must be >= train.batch_size (128), got 100",
        "exp.yaml: replay.capacity: must be >= train.batch_size (128), got 64",
    ]


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        resolve_config_path(str(tmp_path / "nope.yaml"))
    (line,) = info.value.problems
    assert line.endswith("nope.yaml: no such config file (the shipped configs are: "
                         f"{', '.join(shipped_config_names())})")  # fmt: skip


def test_empty_file_is_all_defaults(tmp_path):
    assert load_config(write(tmp_path, "")) == Config()


def test_exponent_floats_without_a_dot(tmp_path):
    """PyYAML alone reads `1e-3` as a string (YAML 1.1); users mean a float."""
    cfg = load_config(write(tmp_path, "agent:\n  learning_rate: 1e-3\n  adam_eps: 1.5E-4\n"))
    assert cfg.agent.learning_rate == 0.001
    assert cfg.agent.adam_eps == 1.5e-4


def test_overrides_are_yaml_typed_and_revalidated(tmp_path):
    path = write(tmp_path, "")
    cfg = load_config(
        path,
        [parse_override("train.batch_size=32"), parse_override("agent.hidden_sizes=[16, 16]"),
         parse_override("agent.learning_rate=5e-4"), parse_override("agent.grad_clip_norm=null"),
         Override("run.seed", 7, "--seed")],
    )  # fmt: skip
    assert cfg.train.batch_size == 32
    assert cfg.agent.hidden_sizes == (16, 16)
    assert cfg.agent.learning_rate == 5e-4
    assert cfg.agent.grad_clip_norm is None
    assert cfg.run.seed == 7
    assert problems(tmp_path, "", [parse_override("train.batch_size=0")]) == [
        "exp.yaml: train.batch_size: must be >= 1, got 0 (set by --set)"
    ]
    assert problems(tmp_path, "", [Override("train.total_env_steps", -5, "--steps")]) == [
        "exp.yaml: train.total_env_steps: must be >= 1, got -5 (set by --steps)"
    ]
    assert problems(
        tmp_path, "train:\n  batch_size: 8\n", [parse_override("train.batch_size.x=1")]
    ) == [
        "exp.yaml: train.batch_size: is not a section, cannot set train.batch_size.x (set by --set)"
    ]
    assert problems(tmp_path, "", [parse_override("train.batch_size.x=1")]) == [
        "exp.yaml: train.batch_size: must be an integer, got a dict (set by --set)"
    ]


@pytest.mark.parametrize("text", ["train.batch_size", "=3", "train..x=1", "a.b=[1,"])
def test_malformed_override(text):
    with pytest.raises(ConfigError, match="--set"):
        parse_override(text)


def test_config_is_frozen():
    cfg = Config()
    with pytest.raises(pydantic.ValidationError):
        cfg.train.batch_size = 3  # type: ignore[misc]


def test_resolved_yaml_round_trips(tmp_path):
    cfg = load_config(resolve_config_path("cartpole.yaml"), [parse_override("replay.kind=rank")])
    path = tmp_path / "config.yaml"
    path.write_text(cfg.to_yaml())
    assert load_config(path) == cfg
