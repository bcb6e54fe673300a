"""The fuzz harness of issue 23: what a user types and what a shared disk holds, drawn at random.

- Config documents and ``--set`` values (deep nesting, huge numbers, odd unicode, wrong types,
  duplicate and unhashable keys, non-finite floats, YAML tags, anchors and "billion laughs"
  aliases, binary junk) through the real CLI (``config validate``, ``plan``, ``train`` stopped
  before it builds anything) and the API's config loading: a valid config, or one ``error:``
  line per problem and exit 2 (a ``ConfigError`` whose problems are one line each); never a
  traceback, never a hang, nothing written.
- Damaged run dirs (byte flips, truncation, symlinks inside and out, FIFOs, swapped files,
  edited manifests re-signed or not, deleted files, a huge ``config.yaml``) through ``report``,
  ``eval``, ``per_dqn.load`` and ``train --resume``: an exit code of 0-3 with ``error:`` /
  ``warning:`` lines, a damaged checkpoint refused or skipped with a warning, nothing outside
  the run's sweep dir changed, every call under a time limit (a FIFO must never block).

Budget: ``make test`` runs all of it in about a minute on 2 cores (the run-dir part, marked
slow, in about 40 s). ``PER_DQN_FUZZ_SCALE=N`` multiplies every example count, for a longer
hunt. Under ``CI=true`` the draws are derandomized (the same examples every run, seeded from
each test's name) and no example database is read or written, so CI is reproducible; elsewhere
hypothesis draws afresh each run and keeps failing examples in ``.hypothesis/`` to replay.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import traceback
import warnings
import zlib
from pathlib import Path
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st
from support import Hung, runner, time_limit

import per_dqn
from per_dqn import api
from per_dqn.cli import app
from per_dqn.config import ConfigError, load_config, resolve_config_path
from per_dqn.config.loading import MAX_CONFIG_BYTES, MAX_YAML_NODES
from per_dqn.rundir import checkpoint as ckpt

CI = os.environ.get("CI") == "true"
SCALE = int(os.environ.get("PER_DQN_FUZZ_SCALE", "1"))


def fuzz(examples: int) -> settings:
    """``examples`` (times ``PER_DQN_FUZZ_SCALE``) draws, no deadline (a call is bounded by
    ``time_limit`` instead), derandomized and without a database under CI."""
    return settings(
        max_examples=examples * SCALE,
        deadline=None,
        derandomize=CI,
        database=None if CI else settings.default.database,
        phases=[p for p in Phase if p is not Phase.explain],  # minutes on a failing run-dir case
        # A failing case prints the blob that replays it exactly (``@reproduce_failure``).
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.large_base_example, HealthCheck.filter_too_much],
    )  # fmt: skip


# --- running a command, bounded -------------------------------------------------------------------


def invoke(args: list[str], cwd: Path, seconds: int = 60):
    """``per-dqn ARGS`` in this process, from ``cwd``, under ``time_limit``."""
    with contextlib.chdir(cwd), time_limit(seconds):
        return runner.invoke(app, args)


def check_cli(result, args: list[str], codes: set[int], prefixes: tuple[str, ...] = ("error: ",)):
    """No exception escaped (a traceback is exit 1 with ``result.exception`` set), the exit
    code is one of ``codes`` and every stderr line starts with one of ``prefixes``."""
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        trace = "".join(traceback.format_exception(exc))
        raise AssertionError(f"per-dqn {shown(args)} raised:\n{trace}")
    assert "Traceback" not in result.output, (shown(args), result.output)
    assert result.exit_code in codes, (shown(args), result.exit_code, result.output)
    for line in result.stderr.splitlines():
        assert line.startswith(prefixes) and line.isprintable(), (shown(args), line)


def shown(args: list[str]) -> str:
    return " ".join(a if len(a) < 200 else f"{a[:200]}...({len(a)} chars)" for a in args)


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root`` (links not followed): kind, and a file's bytes and mtime, a
    link's target: "nothing changed here"."""
    found = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(top, name)
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                found[str(path.relative_to(root))] = ("link", os.readlink(path))
            elif stat.S_ISREG(info.st_mode):
                found[str(path.relative_to(root))] = ("file", info.st_mtime_ns, path.read_bytes())
            else:
                found[str(path.relative_to(root))] = (stat.S_IFMT(info.st_mode), info.st_mtime_ns)
    return found


def assert_unchanged(around: dict, after: dict) -> None:
    """Each part of ``around`` (snapshots taken before a command) is as ``after`` found it."""
    for part in around:
        assert after[part] == around[part], f"{part} changed"


def one_line_problems(exc: ConfigError) -> None:
    assert exc.problems, exc
    for problem in exc.problems:  # (the CLI escapes what a terminal would act on: check_cli)
        assert isinstance(problem, str) and len(problem.splitlines()) == 1, problem


# --- config documents and --set values ------------------------------------------------------------

SHIPPED = load_config(resolve_config_path("cartpole.yaml")).model_dump(mode="json")
DOTTED = [f"{section}.{key}" for section, keys in SHIPPED.items() for key in keys]

# Characters that break naive handling: line and paragraph separators (YAML reads NEL, LS and PS
# as line breaks), bidi overrides, zero-width and combining marks, a BOM, NUL, ANSI escapes,
# lone surrogates (how Python decodes undecodable argv bytes), astral code points.
ODD_CHARS = ["\n", "\r", "\x85", "\u2028", "\u2029", "\u202e", "\u200b", "\u0301", "\ufeff",
             "\x00", "\x1b[31m", "\udcff", "\ud800", "\U0001f600", "\t", "'", '"', ":", "#",
             "\\", "{", "[", "&", "*", "!", "|", ">", "%", "@", "`", ","]  # fmt: skip
odd_text = st.lists(
    st.one_of(st.sampled_from(ODD_CHARS), st.text(min_size=1, max_size=4)), max_size=6
).map("".join)

# YAML scalars and small flow collections, each on one line, that a loader reads in a surprising
# way or refuses: nulls, YAML 1.1 booleans, non-finite and overflowing floats, base-60, octal,
# hex, binary and underscored ints, dates (one impossible), every standard tag and a few
# Python ones, undefined aliases, unhashable keys, duplicate keys, merge keys, unclosed
# brackets and quotes, block indicators, directives and document markers.
ODD_SCALARS = [
    "~", "null", "", "yes", "no", "on", "off", "True", "y", ".nan", ".NaN", ".inf", "-.inf",
    "+.INF", "1e400", "-1e400", "1e-400", "1E3", "0x1F", "0o17", "017", "0b101", "1_000",
    "190:20:30",
    "+1", "-0", "0.", ".5", "2001-12-14", "2001-13-45", "2001-12-14t21:59:43.10-05:00",
    "!!binary aGk=", "!!binary '%%%'", "!!set {a, b}", "!!timestamp 2001-13-45", "!!str 3",
    "!!int '3'", "!!int 'x'", "!!float 'x'", "!!bool 'x'", "!!null 'x'", "!!omap [{a: 1}]",
    "!!omap [1]", "!!pairs [{a: 1}]", "!!map [1]", "!!seq {a: 1}", "!!merge 1", "!!value 1",
    "!!python/object/apply:os.system [echo]", "!!python/name:os.system ''",
    "!!python/tuple [1]", "!foo 3", "!<tag:x> 1", "*undefined", "&anchor 3", "{? [1]: 2}",
    "{[1]: 2}", "{{a: 1}: 2}", "{a: 1, a: 2}", "{<<: {a: 1}}", "{<<: 1}", "[1, 2", "{a",
    "'unterminated", '"\\x"', '"\\ud800"', "|", ">-", "- 1", "? a", "%YAML 1.2", "---", "...",
    "@x", "`x", "\t1", "[]", "{}", "[[]]", "[{}]",
]  # fmt: skip


def laughs(depth: int, width: int, mapping: bool) -> str:
    """A "billion laughs" value: ``depth`` levels of ``width`` aliases of the level below, in
    one flow collection (``width ** depth`` leaves once expanded)."""
    if mapping:
        levels = ["l0: &l0 {" + ", ".join(f"k{i}: lol" for i in range(width)) + "}"]
        levels += [f"l{d}: &l{d} {{" + ", ".join(f"k{i}: *l{d - 1}" for i in range(width)) + "}"
                   for d in range(1, depth)]  # fmt: skip
        return "{" + ", ".join(levels) + "}"
    levels = ["&l0 [" + ", ".join(["lol"] * width) + "]"]
    levels += [f"&l{d} [" + ", ".join([f"*l{d - 1}"] * width) + "]" for d in range(1, depth)]
    return "[" + ", ".join(levels) + f", *l{depth - 1}]"


def nested(depth: int, opener: str, inner: str) -> str:
    closer = {"[": "]", "{a: ": "}", "{": "}"}[opener]
    return opener * depth + inner + closer * depth


scalars = st.one_of(
    st.sampled_from(ODD_SCALARS),
    st.integers().map(str),
    st.floats().map(repr),
    st.integers(1, 6000).map(lambda n: "9" * n),  # past Python's 4,300-digit int limit too
    st.integers(1, 6000).map(lambda n: "-0x" + "f" * n),
    st.integers(1, 400).map(lambda n: "1e" + "9" * n),
    odd_text.map(json.dumps),  # a double-quoted string: \u escapes, lone surrogates included
    odd_text.map(lambda s: json.dumps(s, ensure_ascii=False)),
    st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=12),  # a plain word
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(st.tuples(scalars, inner), max_size=3).map(
            lambda kvs: "{" + ", ".join(f"{k}: {v}" for k, v in kvs) + "}"
        ),
    ),
    max_leaves=8,
) | st.one_of(
    st.builds(laughs, st.integers(1, 12), st.integers(1, 12), st.booleans()),
    st.builds(
        nested,
        st.integers(1, 3000),
        st.sampled_from(["[", "{a: ", "{"]),
        st.sampled_from(["1", "", "x"]),
    ),
    st.integers(0, 300).map(lambda n: "[" + "1," * n + "1]"),  # a long list (too long: below)
)
# What a key is called: a real one (a wrong section's, too), a near miss, odd text, or a value
# that YAML reads as something else than a string.
keys = st.one_of(
    st.sampled_from(sorted({d.split(".")[1] for d in DOTTED} | set(SHIPPED))),
    odd_text.map(json.dumps),
    st.sampled_from(["~", "1", "true", ".nan", "[1]", "{a: 1}", "? [1, 2]", "<<", "*undefined",
                     "&a run", "!!binary aGk=", "'run'", "run ", "Run", "rün"]),
)  # fmt: skip
# env.id values: importing a module named by a random "module:Env" id could run anything
# installed, so ids with a colon come from this list only.
env_ids = st.one_of(
    st.sampled_from(["CartPole-v1", "MountainCar-v0", "MinAtar/Breakout-v1", "ALE/Pong-v5",
                     "nosuchmod:CartPole-v1", "NoSuchEnv-v0", "CartPole-v999", "CartPole"]),
    odd_text.filter(lambda s: ":" not in s).map(json.dumps),
)  # fmt: skip


@st.composite
def mutated_documents(draw) -> bytes:
    """The shipped cartpole.yaml, in block style, with keys changed, dropped, added, repeated,
    sections replaced, anchors defined and used."""
    lines = []
    for section, body in SHIPPED.items():
        choice = draw(st.sampled_from(["keep", "keep", "keep", "value", "drop", "dup"]))
        if choice == "drop":
            continue
        if choice == "value":
            lines.append(f"{section}: {draw(values)}")
            continue
        lines.append(f"{section}:")
        for key, value in body.items():
            what = draw(st.sampled_from(["keep"] * 12 + ["change", "drop", "dup", "odd_key"]))
            text = yaml.safe_dump(value, default_flow_style=True).strip()
            text = text.removesuffix("\n...").removesuffix("...").strip() or "null"
            if what == "drop":
                continue
            if what == "change":
                text = draw(env_ids if (section, key) == ("env", "id") else values)
            if what == "odd_key":
                key = draw(keys)
            lines.append(f"  {key}: {text}")
            if what == "dup":
                lines.append(f"  {key}: {text}")
        if choice == "dup":
            lines.append(f"{section}: {{}}")
    for _ in range(draw(st.integers(0, 2))):  # an extra top-level key
        lines.insert(draw(st.integers(0, len(lines))), f"{draw(keys)}: {draw(values)}")
    text = "\n".join(lines) + "\n"
    return text.encode("utf-8", "surrogatepass")


@st.composite
def junk_documents(draw) -> bytes:
    """Bytes that are hardly a config: random bytes, random text, a document cut short or with
    bytes spliced in, a huge one, one nested far too deep."""
    shipped = resolve_config_path("cartpole.yaml").read_bytes()
    kind = draw(st.sampled_from(["bytes", "text", "cut", "splice", "huge", "deep", "laughs"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "text":
        return draw(st.text(max_size=300)).encode("utf-8", "surrogatepass")
    if kind == "cut":
        return shipped[: draw(st.integers(0, len(shipped)))]
    if kind == "splice":
        at = draw(st.integers(0, len(shipped)))
        return shipped[:at] + draw(st.binary(min_size=1, max_size=20)) + shipped[at:]
    if kind == "huge":
        size = draw(st.sampled_from([MAX_CONFIG_BYTES + 1, 3 << 20]))  # (at the limit: below)
        return shipped + b"#" * (size - len(shipped))
    if kind == "deep":
        return f"agent: {nested(draw(st.integers(60, 25000)), '[', '1')}\n".encode()
    return f"train: {laughs(draw(st.integers(8, 30)), 10, draw(st.booleans()))}\n".encode()


documents = st.one_of(
    st.just(resolve_config_path("cartpole.yaml").read_bytes()), mutated_documents(),
    junk_documents(),
)  # fmt: skip
set_texts = st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(DOTTED), values),
    st.builds(lambda v: f"env.id={v}", env_ids),
    st.builds(
        lambda k, v: f"{k}={v}", st.lists(keys, min_size=1, max_size=3).map(".".join), values
    ),
    odd_text,  # no "=" at all, or an empty key
)


class Reached(Exception):
    """``train`` got past every check and would now build the trainer."""


def refuse_to_build(*args, **kwargs):
    raise Reached


def check_config_commands(work: Path, file: str, sets: list[str]) -> None:
    """``config validate FILE``, ``plan`` and ``train`` (stopped before it builds anything) with
    ``--set``s, and the API's ``load_any_config``: they agree whether the config is valid; a
    bad one is one ``error:`` line per problem and exit 2; nothing is written."""
    before = snapshot(work)
    with contextlib.chdir(work), time_limit(60):
        try:
            api.load_any_config(file)
            valid = True
        except ConfigError as exc:
            one_line_problems(exc)
            valid, problems = False, exc.problems
        try:
            api.load_any_config(file, overrides=sets)
            valid_with_sets = True
        except ConfigError as exc:
            one_line_problems(exc)
            valid_with_sets = False
    event(f"valid: {valid}, with --set: {valid_with_sets}")

    args = ["config", "validate", file]
    result = invoke(args, work)
    check_cli(result, args, {0, 2})
    if valid:
        assert result.exit_code == 0 and result.stdout == f"ok: {file}\n", result.output
    else:  # the same lines the API's ConfigError holds
        assert result.exit_code == 2 and result.stdout == "", result.output
        assert result.stderr == "".join(f"error: {p}\n" for p in problems)

    options = [arg for text in sets for arg in ("--set", text)]
    args = ["plan", "--config", file, *options]
    result = invoke(args, work)
    check_cli(result, args, {0, 2} if valid_with_sets else {2})
    event(f"plan: exit {result.exit_code}")

    args = ["train", "--config", file, *options]
    with mock.patch.object(api, "build_trainer", refuse_to_build):
        result = invoke(args, work)
    if isinstance(result.exception, Reached):
        assert valid_with_sets, shown(args)
        event("train: reached the trainer")
    else:
        check_cli(result, args, {2})
        event("train: exit 2")
    assert snapshot(work) == before, "a command wrote under the working dir"


@pytest.fixture(scope="module")
def config_work(tmp_path_factory) -> Path:
    """The working dir of the config fuzz: holds the drawn file, nothing else."""
    return tmp_path_factory.mktemp("fuzz-config")


@fuzz(examples=60)
@given(doc=documents, sets=st.lists(set_texts, max_size=2))
def test_config_documents_are_valid_or_one_line_each_and_exit_2(config_work, doc, sets):
    """A config document (the shipped one, one with keys changed, or junk) and ``--set``s give a
    valid config everywhere or ``error:`` lines and exit 2 everywhere; nothing is written."""
    for path in config_work.iterdir():
        path.unlink()
    (config_work / "c.yaml").write_bytes(doc)
    check_config_commands(config_work, "c.yaml", sets)


@fuzz(examples=60)
@given(sets=st.lists(set_texts, min_size=1, max_size=4))
def test_set_values_are_valid_or_one_line_each_and_exit_2(config_work, sets):
    """``--set`` values on the shipped cartpole.yaml: as the document test, and ``config show``
    prints a config that loads back the same, or refuses in one line per problem."""
    for path in config_work.iterdir():
        path.unlink()
    check_config_commands(config_work, "cartpole.yaml", sets)
    args = ["config", "show", "cartpole.yaml", *[a for t in sets for a in ("--set", t)]]
    result = invoke(args, config_work)
    check_cli(result, args, {0, 2})
    if result.exit_code == 0:
        (config_work / "shown.yaml").write_text(result.stdout)
        shown_again = load_config(config_work / "shown.yaml").model_dump(mode="json")
        assert shown_again == yaml.safe_load(result.stdout)


# Python values the API's overrides mapping may be handed: anything at all.
python_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(),
        st.binary(max_size=8),
        st.complex_numbers(),
        st.decimals(),
        st.fractions(),
        st.dates(),
        st.datetimes(),
        st.integers(4000, 6000).map(lambda n: 10**n),  # too long to print as a decimal
        st.sampled_from([object(), Path("x"), ..., NotImplemented, float, print, range(3)]),
        odd_text,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.frozensets(st.integers()),
        st.dictionaries(st.one_of(st.text(max_size=5), st.integers()), inner, max_size=3),
    ),
    max_leaves=6,
)


@fuzz(examples=100)
@given(
    changes=st.dictionaries(
        st.one_of(st.sampled_from(DOTTED), st.sampled_from(sorted(SHIPPED)), odd_text),
        python_values,
        min_size=1,
        max_size=3,
    ),
    as_data=st.booleans(),
)
def test_api_configs_of_any_python_value_are_valid_or_a_config_error(changes, as_data):
    """``load_any_config`` with ``overrides={key: value}`` of any Python value, or with a dict
    of sections holding it: a ``Config``, or a ``ConfigError`` (a ``ValueError``) of one-line
    problems; nothing else escapes."""
    with time_limit(30):
        try:
            if as_data:
                data = json.loads(json.dumps(SHIPPED))
                for key, value in changes.items():
                    section, _, leaf = key.partition(".")
                    target = data.get(section)
                    if leaf and isinstance(target, dict):
                        target[leaf] = value
                    else:
                        data[key] = value
                api.load_any_config(data)
            else:
                api.load_any_config("cartpole.yaml", overrides=changes)
            event("valid")
        except ConfigError as exc:
            one_line_problems(exc)
            event("ConfigError")


# --- what the fuzz found --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["? [1, 2]\n: 3\n", "agent:\n  ? {a: 1}\n  : 3\n", "run: {seed: {[1]: 2}}\n"],
)
def test_an_unhashable_key_is_one_line_and_exit_2(workdir, text):
    """Issue 23 (found by the fuzz harness): a list or a mapping used as a key (``? [1, 2]``,
    ``{[1]: 2}``) in a config file or a ``--set`` value was a ``TypeError`` traceback and exit
    1 from every command that reads a config."""
    Path("c.yaml").write_text(text)
    result = runner.invoke(app, ["config", "validate", "c.yaml"])
    assert result.exit_code == 2, result.output
    assert re.fullmatch(r"error: c\.yaml: line \d+, column \d+: invalid YAML: a (list|dict) as a "
                        r"key\n", result.stderr)  # fmt: skip
    result = runner.invoke(app, ["plan", "-c", "cartpole.yaml", "--set", "run.seed={[1]: 2}"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: --set 'run.seed={[1]: 2}': value is not valid YAML "
                                     "(a list as a key")  # fmt: skip
    with pytest.raises(ConfigError, match=r"a (list|dict) as a key"):
        api.load_any_config({}, overrides=["run.seed={[1]: 2}"])


@pytest.mark.parametrize(
    "body, line",
    [
        ("# " + "x" * 1000 + "\n", f"larger than the {MAX_CONFIG_BYTES:,} bytes a config may have"),
        ("x: [" + "1, " * MAX_YAML_NODES + "1]\n",
         f"invalid YAML: more than {MAX_YAML_NODES:,} values"),
    ],
)  # fmt: skip
def test_a_huge_config_is_refused_at_once(workdir, body, line):
    """Issue 23 (found by the fuzz harness): a config.yaml of a few megabytes, or a list of a
    few hundred thousand items, held ``config validate``, ``eval``, ``per_dqn.load`` and ``train
    --resume`` of a run dir holding it for minutes (PyYAML reads about a megabyte of comments or
    20,000 list items a second); now it is one line and exit 2 in well under a second."""
    text = resolve_config_path("cartpole.yaml").read_text()
    text += body * (MAX_CONFIG_BYTES // len(body) + 1) if body.startswith("#") else body
    Path("c.yaml").write_text(text)
    with time_limit(5):
        result = runner.invoke(app, ["config", "validate", "c.yaml"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: c.yaml: ") and result.stderr.count("\n") == 1
    assert line in result.stderr


@pytest.mark.filterwarnings("ignore:.*unversioned environment:UserWarning")
def test_a_key_or_env_id_with_a_line_break_or_an_escape_is_one_printable_line(workdir):
    """Issue 23 (found by the fuzz harness): a key or an env id holding a line break (YAML's
    ``"a\\nb"``) gave an error of two lines, and an escape sequence reached the terminal as
    is; each is now escaped, on one line."""
    Path("c.yaml").write_text('run:\n  "se\\ned": 1\n  "\\e[31mx": 2\n')
    result = runner.invoke(app, ["config", "validate", "c.yaml"])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "error: c.yaml: run.'se\\ned': unknown key; did you mean `seed`?",
        "error: c.yaml: run.'\\x1b[31mx': unknown key; valid keys: actor_epsilon, "
        "actor_epsilon_alpha, actors, device, runs_root, seed, shards, torch_threads, track",
    ]
    with pytest.raises(ConfigError) as caught:
        api.load_any_config("c.yaml")
    assert all(p.isprintable() for p in caught.value.problems)
    result = runner.invoke(app, ["plan", "-c", "cartpole.yaml", "--set", 'env.id="a\\nb-v0"'])
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("error: cartpole.yaml: env.id: cannot make 'a\\nb-v0': ")


def test_a_run_dir_name_that_cannot_be_a_file_name_is_one_line(workdir):
    """Issue 23 (found by the fuzz harness): a lone surrogate in the run dir's name (YAML's
    ``"\\ud800"`` in ``run.runs_root`` or ``env.id``) was a ``UnicodeEncodeError`` traceback
    and exit 1 from ``train``; it is one line and exit 2, and nothing is created."""
    for setting in ('run.runs_root="\\ud800"', 'env.id="\\ud800"'):
        result = runner.invoke(app, ["train", "-c", "cartpole.yaml", "--set", setting])
        assert result.exit_code == 2, result.output
        [line] = result.stderr.splitlines()
        assert line.startswith("error: ") and line.isprintable(), line
        assert list(workdir.iterdir()) == []
    assert (
        "cannot be a file name (surrogates not allowed)"
        in runner.invoke(
            app, ["train", "-c", "cartpole.yaml", "--set", 'run.runs_root="\\ud800"']
        ).stderr
    )


@pytest.mark.parametrize(
    "value, problem",
    [
        ("!!map [1]", "line 1, column 1: invalid YAML: expected a mapping, found a sequence"),
        ("!!bool x", "invalid YAML: a value its tag cannot hold (KeyError: 'x')"),
        ("!!timestamp x", "invalid YAML: a value its tag cannot hold (AttributeError: 'NoneType' "
                          "object has no attribute 'groupdict')"),
        ("!!int ''", "invalid YAML: a value its tag cannot hold (IndexError: string index out of "
                     "range)"),
    ],
)  # fmt: skip
def test_a_tag_on_a_value_it_cannot_hold_is_one_line_and_exit_2(workdir, value, problem):
    """Issue 23 (found by the fuzz harness): ``!!map`` on a list, ``!!bool``, ``!!timestamp``
    or ``!!int`` on a string they cannot convert, in a config or a ``--set`` value, was a
    ``TypeError``, ``KeyError``, ``AttributeError`` or ``IndexError`` traceback and exit 1."""
    Path("c.yaml").write_text(f"run:\n  seed: {value}\n")
    result = runner.invoke(app, ["config", "validate", "c.yaml"])
    assert result.exit_code == 2, result.output
    line = problem.replace("line 1, column 1", "line 2, column 9")
    assert result.stderr == f"error: c.yaml: {line}\n"
    result = runner.invoke(app, ["plan", "-c", "cartpole.yaml", "--set", f"run.seed={value}"])
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and problem.split("invalid YAML: ")[1] in result.stderr


# --- damaged run dirs -----------------------------------------------------------------------------

# A finished CartPole run in a few seconds: checkpoints at 200 and 400 (the final one), small
# networks and memory so that each copy is ~200 KB.
RUN = {
    "train.total_env_steps": 400, "train.learning_starts": 100, "train.log_interval": 100,
    "train.eval_interval": 200, "train.eval_episodes": 1, "train.final_eval_episodes": 1,
    "train.epsilon_decay_steps": 200, "train.eval_max_episode_steps": 50,
    "train.batch_size": 16, "checkpoint.interval_steps": 200, "checkpoint.keep_last": 3,
    "agent.hidden_sizes": [16], "replay.capacity": 500, "run.device": "cpu",
}  # fmt: skip
STEPS = ("step_000000200", "step_000000400")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """One small finished CartPole run, made once; every example copies it."""
    root = tmp_path_factory.mktemp("fuzz-run")
    with contextlib.chdir(root):
        run_dir = per_dqn.train("cartpole", overrides=RUN, run_dir=root / "run").run_dir
    assert [p.name for p in api.list_checkpoints(run_dir)] == list(STEPS)
    return run_dir


@pytest.mark.parametrize("kind", ["fifo", "file"])
def test_a_checkpoint_dir_replaced_by_a_fifo_is_written_over_without_blocking(
    finished_run, tmp_path, kind
):
    """Issue 23 (found while fuzzing run dirs): a FIFO where the newest checkpoint dir was is
    passed over (as no checkpoint; named in a warning since), and the resume then writes that
    step's checkpoint over it:
    it moved the FIFO aside and deleted it with ``shutil.rmtree``, which opens the path first
    and blocked forever. Now the resume finishes, and the step is a checkpoint dir again."""
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    newest = run / "checkpoints" / STEPS[-1]
    shutil.rmtree(newest)
    os.mkfifo(newest) if kind == "fifo" else newest.write_text("not a checkpoint")
    with time_limit(60):
        result = runner.invoke(app, ["train", "--resume", str(run), "-q", "--steps", "450"])
    assert not isinstance(result.exception, Hung), "the resume blocked"
    assert result.exit_code == 0, result.output
    what = "a FIFO" if kind == "fifo" else "a file"
    warned, resuming = result.stderr.splitlines()[:2]
    assert warned == (
        f"warning: checkpoint {newest}: not a directory but {what}; using the previous one, "
        f"{STEPS[0]}"
    )
    assert resuming.startswith(f"resuming {run} from {STEPS[0]} ")
    names = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert names == [*STEPS, "step_000000450"]  # nothing moved aside is left
    assert ckpt.verify_checkpoint(newest)["env_steps"] == 400


LINK_TARGETS = ["inside_file", "inside_dir", "outside_file", "outside_dir", "outside_twin",
                "dangling", "loop", "/dev/zero", "/dev/null", "/"]  # fmt: skip
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), odd_text,
              st.sampled_from(["../../outside/secret.txt", "/dev/zero", "agent.pt", "0" * 32])),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=4,
)  # fmt: skip
damages = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, 2**32), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.integers(0, 99)),
    st.tuples(st.just("link"), st.integers(0, 10**6), st.sampled_from(LINK_TARGETS),
              st.integers(0, 10**6), st.booleans()),
    st.tuples(st.just("fifo"), st.integers(0, 10**6)),
    st.tuples(st.just("swap"), st.integers(0, 10**6), st.integers(0, 10**6)),
    st.tuples(st.just("manifest"), st.sampled_from(STEPS),
              st.sampled_from(["change", "remove", "add_file", "file_entry", "run_id",
                               "env_steps"]),
              st.integers(0, 10**6), json_values, st.booleans()),
    st.tuples(st.just("delete"), st.integers(0, 10**6)),
    st.tuples(st.just("huge_config"), st.sampled_from(["config.yaml", *STEPS]),
              st.sampled_from(["comments", "list"])),
)  # fmt: skip


def entries(run: Path, files_only: bool = False) -> list[Path]:
    """Everything under ``run`` (links not followed), sorted; regular files only if asked."""
    found = []
    for top, dirs, files in os.walk(run):
        for name in dirs + files:
            path = Path(top, name)
            if not files_only or stat.S_ISREG(path.lstat().st_mode):
                found.append(path)
    return sorted(found)


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def damage(run: Path, outside: Path, what: tuple) -> str:
    """Applies one drawn damage to ``run``; returns what it did, in words (or "" if it could
    not apply: nothing left to pick)."""
    kind, *args = what
    files, every = entries(run, files_only=True), entries(run)
    if kind == "flip" and files:
        path = files[args[0] % len(files)]
        data = bytearray(path.read_bytes())
        if not data:
            return ""
        data[args[1] % len(data)] ^= args[2]
        path.write_bytes(bytes(data))
        return f"flipped a byte of {path.relative_to(run)}"
    if kind == "truncate" and files:
        path = files[args[0] % len(files)]
        data = path.read_bytes()
        if not data:
            return ""
        path.write_bytes(data[: len(data) * args[1] // 100])
        return f"truncated {path.relative_to(run)} to {args[1]}%"
    if kind == "link" and every:
        path, where, pick, relative = every[args[0] % len(every)], args[1], args[2], args[3]
        inside = [p for p in entries(run) if p != path and path not in p.parents]
        target = {
            "inside_file": next((p for p in inside[pick % max(len(inside), 1):] if p.is_file()),
                                run / "config.yaml"),
            "inside_dir": run / "checkpoints",
            "outside_file": outside / "secret.txt",
            "outside_dir": outside / "dir",
            "outside_twin": outside / "twin" / path.relative_to(run),
            "dangling": outside / "nothing-here",
            "loop": path,
        }.get(where, Path(where))  # fmt: skip
        remove(path)
        shown_target = os.path.relpath(target, path.parent) if relative else str(target)
        path.symlink_to(shown_target)
        return f"{path.relative_to(run)} -> {shown_target}"
    if kind == "fifo" and every:
        path = every[args[0] % len(every)]
        remove(path)
        os.mkfifo(path)
        return f"{path.relative_to(run)} is a FIFO"
    if kind == "swap" and len(every) > 1:
        a, b = every[args[0] % len(every)], every[args[1] % len(every)]
        if a == b or a in b.parents or b in a.parents:
            return ""
        a.rename(run / "swapping")
        b.rename(a)
        (run / "swapping").rename(b)
        return f"swapped {a.relative_to(run)} and {b.relative_to(run)}"
    if kind == "manifest":
        step, edit, pick, value, resign = args
        path = run / "checkpoints" / step / "manifest.json"
        try:
            manifest = json.loads(path.read_bytes()) if path.is_file() else None
        except ValueError:
            manifest = None
        if not isinstance(manifest, dict):
            return ""
        keys = sorted(manifest)
        key = keys[pick % len(keys)]
        if edit == "change":
            manifest[key] = value
        elif edit == "remove":
            del manifest[key]
        elif edit == "add_file":
            name = ["../../../outside/secret.txt", "/dev/zero", "model.pt", ".", "x" * 300,
                    "manifest.json"][pick % 6]  # fmt: skip
            manifest.setdefault("files", {})[name] = {"bytes": 1, "sha256": "0" * 64}
        elif edit == "file_entry" and isinstance(manifest.get("files"), dict) and manifest["files"]:
            names = sorted(manifest["files"])
            manifest["files"][names[pick % len(names)]] = value
        elif edit == "run_id":
            manifest["run_id"] = "f" * 32  # another run's
        elif edit == "env_steps":
            manifest["env_steps"] = value
        if resign:
            manifest[ckpt.MANIFEST_DIGEST_KEY] = ckpt.manifest_digest(manifest)
        path.write_text(json.dumps(manifest, indent=2))
        return f"{step}/manifest.json: {edit} {key}" + (", re-signed" if resign else "")
    if kind == "huge_config":
        where, fill = args
        path = (
            run / where if where == "config.yaml" else run / "checkpoints" / where / "config.yaml"
        )
        if not path.is_file() or path.is_symlink():
            return ""
        try:
            text = path.read_text()
        except UnicodeDecodeError:  # an earlier swap put a binary file there: nothing to grow
            return ""
        if fill == "comments":
            text += ("# " + "x" * 78 + "\n") * (3 * MAX_CONFIG_BYTES // 80)
        else:
            text = text.replace("agent:\n", "agent:\n  extra: [" + "1, " * 200_000 + "1]\n", 1)
        path.write_text(text)
        return f"{path.relative_to(run)} is huge ({fill})"
    if kind == "delete" and every:
        path = every[args[0] % len(every)]
        remove(path)
        return f"deleted {path.relative_to(run)}"
    return ""


# What each command reads of a checkpoint: eval and load its weights and config, a resume all.
READ_BY_EVAL = ("agent.pt", "config.yaml")
# Manifest keys a reader checks a file or the checkpoint's identity against.
CHECKED_KEYS = ("files", "env_steps", "run_id", "format")


def damaged_steps(run: Path, pristine: Path, read: tuple[str, ...] | None = None) -> set[str]:
    """The checkpoint dirs still there (under their names) that a reader of the files ``read``
    (None: all) can tell are not as they were written: a dir that is a link, a FIFO or another
    file now; one of those files missing, not a regular file, or of other bytes; or a manifest
    that fails its own digest, or whose file list or checked keys changed (one re-signed after
    an edit of another key is a forgery no checksum can tell, and is not counted). A checkpoint
    deleted whole, or whose name is no directory now, is no damaged checkpoint."""
    found = set()
    for step in STEPS:
        now, was = run / "checkpoints" / step, pristine / "checkpoints" / step
        if not now.is_dir():
            # Gone, or no directory even through a link (a FIFO, a link to a file): every
            # command passes over such a name as no checkpoint, without a word (reported).
            continue
        if not stat.S_ISDIR(now.lstat().st_mode) or not stat.S_ISDIR(
            (run / "checkpoints").lstat().st_mode
        ):
            found.add(step)
            continue
        manifest = json.loads((was / "manifest.json").read_bytes())
        names = list(manifest["files"]) if read is None else list(read)
        if any(not same_file(now / name, was / name) for name in names) or not same_manifest(
            now / "manifest.json", manifest, names
        ):
            found.add(step)
    return found


def same_file(now: Path, was: Path) -> bool:
    return (
        os.path.lexists(now)
        and stat.S_ISREG(now.lstat().st_mode)
        and now.read_bytes() == was.read_bytes()
    )


def same_manifest(now: Path, was: dict, names: list[str]) -> bool:
    if not os.path.lexists(now) or not stat.S_ISREG(now.lstat().st_mode):
        return False
    try:
        manifest = json.loads(now.read_bytes())
    except ValueError:
        return False
    if not isinstance(manifest, dict):
        return False
    if manifest.get(ckpt.MANIFEST_DIGEST_KEY) != ckpt.manifest_digest(manifest):
        return False
    files = manifest.get("files")
    return (
        isinstance(files, dict)
        and set(files) == set(was["files"])
        and all(files[name] == was["files"][name] for name in names)
        and all(manifest.get(key) == was[key] for key in CHECKED_KEYS if key != "files")
    )


def check_choice(used: str | None, damaged: set[str], warned: bool, what: str) -> None:
    """The checkpoint a command used (a step dir name, or None for model.pt) is not a damaged
    one, and one damaged newer than it was warned of."""
    assert used not in damaged, f"{what} used the damaged {used}"
    newer = {s for s in damaged if used is None or s > used}
    assert warned or not newer, f"{what} skipped the damaged {sorted(newer)} without a warning"


def step_of(path_text: str) -> str | None:
    match = re.search(r"(step_\d{9})", path_text)
    return match.group(1) if match else None


CLI_PREFIXES = ("error: ", "warning: ", "note: ", "resuming ", "playing ", "progress: ")


@pytest.mark.slow
@fuzz(examples=35)
@given(
    what=st.lists(damages, min_size=1, max_size=3),
    eval_step=st.booleans(),
    report=st.booleans(),
)
def test_a_damaged_run_dir_is_refused_or_used_with_a_warning(
    finished_run, tmp_path_factory, what, eval_step, report
):
    """A copy of a finished run, damaged at random, through ``report`` (the sweep dir holding
    it), ``eval`` (of the run dir or its newest checkpoint), ``per_dqn.load`` and ``train
    --resume --steps``: no traceback, no hang, exit 0-3 with ``error:``/``warning:`` lines (and
    resume's own), a damaged checkpoint never used and one skipped named in a warning, and
    nothing changed outside the sweep dir (links to an outside dir and to a twin of the run
    included)."""
    ex = tmp_path_factory.mktemp("fuzz-damage")
    run, outside, work = ex / "sweep" / "s0", ex / "outside", ex / "work"
    shutil.copytree(finished_run, run, symlinks=True)
    shutil.copytree(finished_run, outside / "twin", symlinks=True)
    (outside / "dir").mkdir()
    (outside / "secret.txt").write_text("outside\n")
    work.mkdir()
    done = [d for d in (damage(run, outside, w) for w in what) if d]
    for w in what:
        event(f"damage: {w[0]}")
    damaged = damaged_steps(run, finished_run)  # as a resume reads them
    damaged_weights = damaged_steps(run, finished_run, READ_BY_EVAL)  # as eval and load do
    around = {"outside": snapshot(outside), "work": snapshot(work), "ex": sorted(os.listdir(ex)),
              "fixture": snapshot(finished_run)}  # fmt: skip
    note = f"damage: {done}; damaged checkpoints: {sorted(damaged)}, weights {damaged_weights}"

    try:
        if report:
            args = ["report", str(ex / "sweep")]
            result = invoke(args, work)
            check_cli(result, args, {0, 1, 2, 3}, CLI_PREFIXES)
            event(f"report: exit {result.exit_code}")

        target = run / "checkpoints" / STEPS[-1] if eval_step else run
        args = ["eval", str(target), "--episodes", "1"]
        result = invoke(args, work)
        check_cli(result, args, {0, 1, 2, 3}, CLI_PREFIXES)
        event(f"eval: exit {result.exit_code}")
        if result.exit_code == 0:
            used = step_of(result.stdout.splitlines()[0])
            check_choice(used, damaged_weights, "warning: " in result.stderr, "eval")

        with contextlib.chdir(work), time_limit(60), warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            try:
                policy = per_dqn.load(run, device="cpu")
            except ValueError as exc:
                assert "\n" not in str(exc), str(exc)
                event("load: refused")
            else:
                event("load: loaded")
                lines = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
                assert all("\n" not in line for line in lines), lines
                check_choice(step_of(str(policy.source)), damaged_weights, bool(lines), "load")

        args = ["train", "--resume", str(run), "-q", "--steps", "450"]
        result = invoke(args, work, seconds=120)
        check_cli(result, args, {0, 1, 2, 3}, CLI_PREFIXES)
        event(f"resume: exit {result.exit_code}")
        if result.exit_code == 0:
            started = next(x for x in result.stderr.splitlines() if x.startswith("resuming "))
            check_choice(step_of(started), damaged, "warning: " in result.stderr, "resume")

        assert_unchanged(around, {"outside": snapshot(outside), "work": snapshot(work),
                                  "ex": sorted(os.listdir(ex)),
                                  "fixture": snapshot(finished_run)})  # fmt: skip
    except AssertionError as exc:
        raise AssertionError(f"{note}: {exc}") from exc
    finally:
        shutil.rmtree(ex)


# --- sweep dirs (issue 43) ------------------------------------------------------------------------

SWEEP_ARGS = ["-c", "cartpole.yaml", "--replay", "uniform", "--seeds", "1", "--steps", "400",
              "--workers", "1", *(a for k, v in RUN.items() if k != "train.total_env_steps"
                                  for a in ("--set", f"{k}={json.dumps(v)}"))]  # fmt: skip
# What report, an ablate re-run, archive and ablate --reuse read of a sweep dir.
SWEEP_TARGETS = ["sweep.json", "uniform", "uniform/s0", "uniform/s0/summary.json",
                 "uniform/s0/config.yaml", "uniform/s0/run.json", "uniform/s0/model.pt",
                 "uniform/s0/events", "uniform/s0/x.tfevents"]  # fmt: skip
SWEEP_DAMAGES = ["fifo", "link_out", "link_dev_zero", "link_in", "huge", "deep", "junk",
                 "field", "delete"]  # fmt: skip
# A command may grow its peak resident memory by at most this much on any case: a file read
# whole where it should be refused unread (a 2 GiB sparse one) breaks it.
MAX_RSS_GROWTH_BYTES = 768 << 20


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory) -> Path:
    """A finished one-run sweep, made once; every example copies it."""
    out = tmp_path_factory.mktemp("fuzz-sweep") / "sweep"
    result = runner.invoke(app, ["ablate", *SWEEP_ARGS, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def damage_sweep(sweep: Path, outside: Path, target: str, how: str, value) -> str:
    """Puts ``how`` in place of ``target`` under ``sweep``; returns what it did, in words."""
    path = sweep / target
    for parent in path.relative_to(sweep).parents:  # an earlier damage replaced a dir above it
        if not os.path.lexists(sweep / parent) or not stat.S_ISDIR(
            os.lstat(sweep / parent).st_mode
        ):
            return ""
    if target.endswith("/events"):
        path = next(path.parent.glob("events.out.tfevents.*"), path)
    if os.path.lexists(path):
        remove(path)
    if how == "fifo":
        os.mkfifo(path)
    elif how == "link_out":
        path.symlink_to(outside / "secret.txt")
    elif how == "link_dev_zero":
        path.symlink_to("/dev/zero")
    elif how == "link_in":
        path.symlink_to(sweep / "sweep.json")
    elif how == "huge":  # sparse: what is read of it, not the disk, is what costs
        with open(path, "wb") as file:
            file.truncate(2 << 30)
    elif how == "deep":
        path.write_text("[" * 5000 + "]" * 5000)
    elif how == "junk":
        path.write_bytes(bytes(range(256)) * 4)
    elif how == "field":  # a JSON file with one field of another shape
        was = sweep.parent / "pristine" / target
        try:
            record = json.loads(was.read_bytes()) if was.is_file() else {}
        except ValueError:
            record = {}
        if not isinstance(record, dict) or not record:
            path.write_text(json.dumps(value))
        else:  # a key picked by the value's digest: set to it, to null, or removed
            pick = zlib.crc32(json.dumps(value).encode())
            key = sorted(record)[pick % len(record)]
            if pick % 3 == 0:
                del record[key]
            else:
                record[key] = None if pick % 3 == 1 else value
            path.write_text(json.dumps(record))
    return f"{target}: {how}"


def peak_rss() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@pytest.mark.slow
@fuzz(examples=12)
@given(
    what=st.lists(
        st.tuples(st.sampled_from(SWEEP_TARGETS), st.sampled_from(SWEEP_DAMAGES), json_values),
        min_size=1,
        max_size=2,
    ),
    command=st.sampled_from(["report", "ablate", "archive", "reuse"]),
)
def test_a_damaged_sweep_dir_is_refused_or_read_as_far_as_it_can_be(
    finished_sweep, tmp_path_factory, what, command
):
    """Issue 43: a copy of a finished sweep, a file or dir of it replaced at random by a FIFO, a
    link (out, to /dev/zero, inside), a 2 GiB sparse file, JSON nested 5,000 deep, junk or a
    record with a field of another shape, through ``report``, the ``ablate`` re-run, ``archive``
    and ``ablate --reuse``: no traceback, no hang (a time limit), no file read whole past its
    cap (the peak resident memory grows by at most ``MAX_RSS_GROWTH_BYTES``), exit 0-3 with
    ``error:``/``warning:`` lines, and nothing outside the sweep dir changed or deleted."""
    ex = tmp_path_factory.mktemp("fuzz-sweep-damage")
    sweep, outside, work = ex / "sweep", ex / "outside", ex / "work"
    shutil.copytree(finished_sweep, sweep, symlinks=True)
    shutil.copytree(finished_sweep, ex / "pristine", symlinks=True)
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.txt").write_text("outside\n")
    work.mkdir()
    done = [d for d in (damage_sweep(sweep, outside, *w) for w in what) if d]
    for _, how, _ in what:
        event(f"sweep damage: {how}")
    around = {"outside": snapshot(outside), "pristine": snapshot(ex / "pristine"),
              "fixture": snapshot(finished_sweep)}  # fmt: skip
    args = {
        "report": ["report", str(sweep)],
        "ablate": ["ablate", *SWEEP_ARGS, "--out", str(sweep)],
        "archive": ["archive", str(sweep), str(ex / "sweep.tar.xz")],
        "reuse": ["ablate", *SWEEP_ARGS, "--out", str(ex / "fresh"), "--reuse", str(sweep)],
    }[command]
    try:
        before = peak_rss()
        result = invoke(args, work, seconds=120)
        grown = peak_rss() - before
        check_cli(result, args, {0, 1, 2, 3}, CLI_PREFIXES)
        event(f"{command}: exit {result.exit_code}")
        assert grown <= MAX_RSS_GROWTH_BYTES, f"peak RSS grew by {grown:,} bytes"
        assert_unchanged(around, {"outside": snapshot(outside),
                                  "pristine": snapshot(ex / "pristine"),
                                  "fixture": snapshot(finished_sweep)})  # fmt: skip
    except AssertionError as exc:
        raise AssertionError(f"damage: {done}: {exc}") from exc
    finally:
        shutil.rmtree(ex)
