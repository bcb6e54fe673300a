"""Config models and the YAML reader: shipped files validate, and each bad input says where."""

from __future__ import annotations

import typing
from pathlib import Path

import pydantic
import pytest

from per_dqn.config import (
    Config,
    ConfigError,
    EnvConfig,
    Override,
    load_config,
    parse_override,
    resolve_config_path,
    shipped_config_names,
)
from per_dqn.memory import KINDS

ONE_OF_KINDS = ", ".join(repr(kind) for kind in KINDS[:-1]) + f" or {KINDS[-1]!r}"

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_file_in_configs_validates(path):
    load_config(path)


def test_top_level_configs_are_the_shipped_ones():
    """configs/ (top level) and the package's configs are the same files."""
    files = sorted(p.name for p in CONFIG_DIR.glob("*.yaml"))
    files += sorted(f"literature/{p.name}" for p in (CONFIG_DIR / "literature").glob("*.yaml"))
    assert files == shipped_config_names()
    assert "cartpole.yaml" in shipped_config_names()


@pytest.mark.parametrize("name", shipped_config_names())
def test_every_shipped_config_checkpoints_several_times(name):
    """Bug pinned: the default `checkpoint.interval_steps` (100k) was longer than CartPole's
    whole run (50k), so a Ctrl-C before the end lost everything. The loop writes one at every
    multiple of the interval below the budget and one at the end."""
    config = load_config(resolve_config_path(name))
    interval, budget = config.checkpoint.interval_steps, config.train.total_env_steps
    assert config.checkpoint.enabled
    assert interval > 0
    periodic = len(range(interval, budget, interval))  # multiples strictly below the budget
    assert periodic + 1 >= 3, (name, interval, budget)


def test_bare_name_resolves_to_the_shipped_config_from_anywhere(workdir):
    for name in ("cartpole.yaml", "cartpole"):
        path = resolve_config_path(name)
        assert path.name == "cartpole.yaml" and path.is_file()


def test_an_existing_path_wins_over_a_shipped_name(workdir):
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
        # Pins bugs found by running what the config check accepted: each of these was
        # accepted and then stopped a run with an OverflowError (alpha 1000 without a clip,
        # priority_eps 1e200 with alpha 2), a float32 overflow in LAP's loss (min_priority
        # 1e200), a 466 TiB allocation (large_batch 10**12), or a loop no signal could stop
        # (gradient_steps 10**12).
        ("replay:\n  alpha: 1.5\n", ["exp.yaml: replay.alpha: must be <= 1, got 1.5"]),
        ("replay:\n  priority_eps: 2\n", ["exp.yaml: replay.priority_eps: must be <= 1, got 2"]),
        ("replay:\n  kind: lap\n  min_priority: 1.0e+7\n",
         ["exp.yaml: replay.min_priority: must be <= 1000000, got 10000000.0"]),
        ("replay:\n  kind: laber\n  large_batch: 1025\n",
         ["exp.yaml: replay.large_batch: must be <= 1024, got 1025"]),
        ("train:\n  gradient_steps: 1001\n",
         ["exp.yaml: train.gradient_steps: must be <= 1000, got 1001"]),
        ("replay:\n  beta_anneal_steps: 0\n",
         ["exp.yaml: replay.beta_anneal_steps: must be >= 1, got 0"]),
        ("agent:\n  gamma: 0\n", ["exp.yaml: agent.gamma: must be > 0, got 0"]),
        ("replay:\n  uniform_mix: 1.0\n", ["exp.yaml: replay.uniform_mix: must be < 1, got 1.0"]),
        ("train:\n  bach_size: 64\n", ["exp.yaml: train.bach_size: unknown key; did you mean "
                                       "`batch_size`?"]),
        ("trian:\n  batch_size: 64\n", ["exp.yaml: trian: unknown key; did you mean `train`?"]),
        ("train:\n  batch_size: 1.5\n", ["exp.yaml: train.batch_size: must be an integer, "
                                         "got 1.5"]),
        ("agent:\n  dueling: 'yes'\n", ["exp.yaml: agent.dueling: must be true or false, "
                                        "got 'yes'"]),
        ("replay:\n  kind: prio\n", [f"exp.yaml: replay.kind: must be one of {ONE_OF_KINDS}, "
                                     "got 'prio'"]),
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


# --- numbers: non-finite floats, absurd ints, the budget ------------------------------------------


def fields_of(kind) -> list[str]:
    """Dotted paths of every key of every section whose type admits ``kind`` (alone, with None,
    or as a tuple's items), read from the models so that a key added later is covered too."""
    paths = []
    for section, field in Config.model_fields.items():
        for key, sub in field.annotation.model_fields.items():
            args = typing.get_args(sub.annotation)
            if sub.annotation is kind or kind in args:
                paths.append(f"{section}.{key}")
    return paths


FLOAT_FIELDS = fields_of(float)
INT_FIELDS = fields_of(int)
# What YAML users type for an unusable float: its infinities, its NaN, and a literal that
# overflows a double (Python reads 1e400 as inf; the line still shows 1e400).
NON_FINITE = [".inf", "-.inf", "+.inf", ".nan", ".NaN", "1e400", "-1e400", "1.5E+999"]


def schema_paths(json_type: str) -> set[str]:
    """The same walk done independently, over pydantic's JSON schema of ``Config``."""
    schema = Config.model_json_schema()
    paths = set()
    for section, ref in schema["properties"].items():
        name = ref.get("$ref", ref.get("allOf", [{}])[0].get("$ref", "")).rsplit("/", 1)[-1]
        for key, prop in schema["$defs"][name]["properties"].items():
            kinds = [prop, *prop.get("anyOf", []), prop.get("items", {})]
            if any(kind.get("type") == json_type for kind in kinds):
                paths.add(f"{section}.{key}")
    return paths


def test_the_field_walk_finds_every_numeric_key():
    """The walk below must see every float and int key, plain, optional or in a tuple: checked
    against the JSON schema, and against keys known to be of each kind."""
    assert set(FLOAT_FIELDS) == schema_paths("number")
    assert set(INT_FIELDS) == schema_paths("integer")
    assert {"agent.learning_rate", "agent.grad_clip_norm", "replay.td_error_clip",
            "env.sticky_action_prob"} <= set(FLOAT_FIELDS)  # fmt: skip
    assert {"train.total_env_steps", "env.max_episode_steps", "agent.hidden_sizes",
            "run.torch_threads", "env.env_threads"} <= set(INT_FIELDS)  # fmt: skip


@pytest.mark.parametrize("path", FLOAT_FIELDS)
def test_every_float_key_refuses_inf_nan_and_overflow(tmp_path, path):
    """Issue item 6: .inf, .nan and 1e400 used to pass every key without an upper bound (and
    .nan passed `learning_rate`'s `> 0`), to surface hours later as a NaN loss. Each is one line
    naming the key and echoing the value as written, from the file and from --set alike."""
    section, key = path.split(".")
    for text in NON_FINITE:
        expected = f"exp.yaml: {path}: must be a finite number, got {text}"
        assert problems(tmp_path, f"{section}:\n  {key}: {text}\n") == [expected]
        assert problems(tmp_path, "", [parse_override(f"{path}={text}")]) == [
            f"{expected} (set by --set)"
        ]
    # An int too large for a double is the same overflow, written without an exponent.
    assert problems(tmp_path, f"{section}:\n  {key}: 1{'0' * 400}\n") == [
        f"exp.yaml: {path}: must be a finite number, got an integer of 401 digits"
    ]


@pytest.mark.parametrize("path", INT_FIELDS)
def test_every_int_key_refuses_what_no_int64_holds(tmp_path, path):
    """2**63 fits no counter, index or checkpoint field; every int key refuses it with one line
    naming the key (its own bound, or the 64-bit one for a key without one)."""
    section, key = path.split(".")
    value = "[9223372036854775808]" if path == "agent.hidden_sizes" else "9223372036854775808"
    (line,) = problems(tmp_path, f"{section}:\n  {key}: {value}\n")
    assert line.startswith(f"exp.yaml: {path}: must be <= ")
    assert line.endswith(f"got {value.replace('[', '').replace(']', '')}") or line.endswith(
        f"got {value}"
    )
    (line,) = problems(tmp_path, "", [parse_override(f"{path}={value}")])
    assert line.endswith("(set by --set)")
    # Infinity is no integer either.
    (line,) = problems(tmp_path, f"{section}:\n  {key}: 1e400\n")
    assert line.endswith("got 1e400") and "must be" in line


def test_int64_is_the_limit_not_less(tmp_path):
    """The 64-bit cap refuses only what cannot be held: 2**63 - 1 itself is a valid budget."""
    cfg = load_config(write(tmp_path, f"train:\n  total_env_steps: {2**63 - 1}\n"))
    assert cfg.train.total_env_steps == 2**63 - 1


@pytest.mark.parametrize("path", ["run.torch_threads", "env.env_threads"])
def test_thread_counts_are_capped_at_1024(tmp_path, path):
    """torch segfaults at `set_num_threads(10**6)` and ale-py raises a TypeError past 2**31 - 1;
    1024 (num_envs' cap too) is no real machine's limit."""
    section, key = path.split(".")
    assert problems(tmp_path, f"{section}:\n  {key}: 1025\n") == [
        f"exp.yaml: {path}: must be <= 1024, got 1025"
    ]
    assert problems(tmp_path, f"{section}:\n  {key}: 1000000\n") == [
        f"exp.yaml: {path}: must be <= 1024, got 1000000"
    ]
    load_config(write(tmp_path, f"{section}:\n  {key}: 1024\n"))


def test_atari_frame_caps_keep_the_episode_limit_in_an_int32():
    """ale-py takes max_episode_steps * frame_skip as a 32-bit int (2**30 steps at frame_skip 4
    is a TypeError inside it); the two caps keep the product below 2**31 - 1."""
    env = EnvConfig.model_fields
    cap = {name: next(m.le for m in env[name].metadata if hasattr(m, "le"))
           for name in ("max_episode_steps", "frame_skip")}  # fmt: skip
    assert cap["max_episode_steps"] * cap["frame_skip"] <= 2**31 - 1


@pytest.mark.parametrize(("num_envs", "ok"), [(119, True), (120, False), (256, False)])
def test_a_budget_too_short_for_one_n_step_window_is_refused(tmp_path, num_envs, ok):
    """Pins a bug: 600 env steps over 256 envs at n_step 5 is 3 steps an env, so no 5-step
    window filled, no transition was stored and the run exited 0 with update steps 0, as a run
    whose learning_starts is past its budget would (which was refused). At 600 steps and n_step
    5, 119 envs take 6 steps each and pass; 120 take 5 and are refused."""
    text = (
        f"env:\n  num_envs: {num_envs}\nagent:\n  n_step: 5\n"
        "train:\n  total_env_steps: 600\n  learning_starts: 100\n  batch_size: 32\n"
    )
    if ok:
        load_config(write(tmp_path, text))
        return
    steps = -(-600 // num_envs)
    assert problems(tmp_path, text) == [
        f"exp.yaml: train.total_env_steps: must give each of env.num_envs ({num_envs}) envs more "
        f"than agent.n_step (5) steps, got 600 ({steps} each): no n-step window would fill; raise "
        "train.total_env_steps or lower env.num_envs"
    ]


@pytest.mark.parametrize(("total", "starts"), [(1000, 1000), (1000, 5000)], ids=["at", "beyond"])
def test_learning_starts_at_or_beyond_the_budget_is_refused(tmp_path, total, starts):
    """Issue item 7: such a run used to spend its whole budget collecting and exit 0 with an
    untrained network. One line names both keys and the fix, and which flag set the budget."""
    text = f"train:\n  total_env_steps: {total}\n  learning_starts: {starts}\n"
    why = (
        f"exp.yaml: train.learning_starts: must be < train.total_env_steps ({total}), got "
        f"{starts}: the run would end before its first update; lower train.learning_starts or "
        "raise train.total_env_steps"
    )
    assert problems(tmp_path, text) == [why]
    budget = Override("train.total_env_steps", total, "--steps")
    assert problems(tmp_path, f"train:\n  learning_starts: {starts}\n", [budget]) == [
        why + " (train.total_env_steps set by --steps)"
    ]
    # One step short of the budget leaves an update at the last step: accepted.
    text = f"train:\n  total_env_steps: {total}\n  learning_starts: {total - 1}\n"
    cfg = load_config(write(tmp_path, text))
    assert cfg.train.learning_starts == total - 1


DEEP = 20_000


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"env:\n  id: {'[' * DEEP}{']' * DEEP}\n",
         "exp.yaml: line 2, column 71: invalid YAML: nested deeper than 64 levels"),
        ("".join(f"{'  ' * i}k{i}:\n" for i in range(500)),  # under MAX_CONFIG_BYTES
         "exp.yaml: line 64, column 127: invalid YAML: nested deeper than 64 levels"),
        (f"train:\n  batch_size: {'9' * 5_000}\n",
         "exp.yaml: line 2, column 15: invalid YAML: an integer of more than 4300 digits"),
        # Python converts a hex number of any length; the key's own check names it.
        (f"train:\n  batch_size: 0x{'f' * 5_000}\n",
         "exp.yaml: train.batch_size: must be <= 9223372036854775807 (a 64-bit integer), got an "
         "integer of more than 4300 digits"),
        ("run:\n  seed: 2001-13-45\n", "exp.yaml: invalid YAML: month must be in 1..12"),
    ],
    ids=["deep-flow", "deep-block", "int-4300-digits", "hex-int", "bad-date"],
)  # fmt: skip
def test_what_the_yaml_reader_cannot_hold_is_one_line(tmp_path, text, expected):
    """Issue 23 item 6: YAML nested 20,000 deep (a RecursionError in the parser, after seconds
    of scanning) and an integer of over 4,300 digits (a ValueError from Python's int conversion)
    were tracebacks; so was a date the timestamp resolver refuses. Each is now one line naming
    the file (and where, when the reader knows)."""
    assert problems(tmp_path, text) == [expected]


def test_nesting_is_refused_past_64_levels_not_before():
    """The depth counts every node from the document down: ``a: [[1]]`` is four deep (the
    document's mapping, the list, the inner list, the ``1``)."""
    from per_dqn.config import parse_yaml

    value = parse_yaml("a: " + "[" * 62 + "1" + "]" * 62, "x")["a"]  # 64 deep
    for _ in range(61):
        (value,) = value
    assert value == [1]
    with pytest.raises(ConfigError, match=r"^x: line 1, column 67: .* deeper than 64 levels$"):
        parse_yaml("a: " + "[" * 63 + "1" + "]" * 63, "x")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("9" * 5_000, "an integer of more than 4300 digits in"),
        ("[" * DEEP + "]" * DEEP, "nested deeper than 64 levels in"),
    ],
    ids=["int-4300-digits", "deep"],
)
def test_what_a_set_cannot_hold_is_one_short_line(value, reason):
    """Issue 23 item 6 for ``--set``: one line, which cuts the echoed text short."""
    with pytest.raises(ConfigError) as caught:
        parse_override(f"train.batch_size={value}")
    (line,) = caught.value.problems
    assert line.startswith("--set 'train.batch_size=" + value[:83] + "'... (")
    assert f"characters): value is not valid YAML ({reason}" in line
    assert len(line) < 400


def test_an_api_override_too_long_to_print_is_one_line():
    """An int past Python's int-to-str limit, from a dict of overrides, used to fail inside the
    message that echoes it."""
    from per_dqn.config import config_from_data

    with pytest.raises(ConfigError) as caught:
        config_from_data({}, "config", [Override("train.batch_size", 2**20_000, "overrides")])
    assert caught.value.problems == [
        "config: train.batch_size: must be <= 9223372036854775807 (a 64-bit integer), got an "
        "integer of more than 4300 digits (set by overrides)"
    ]
