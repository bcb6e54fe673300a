"""Reading a config: files, shipped names, ``section.key=value`` overrides, and validation into
a ``Config``. The package's only YAML reader.

Every failure is a ``ConfigError`` whose ``problems`` are one line each, naming the file and the
dotted path of the offending key (``messages`` words them).
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from per_dqn.config.messages import ConfigError, NonFiniteFloat, describe, one_line
from per_dqn.config.models import Config, unread_keys

SHIPPED_CONFIG_PACKAGE = "per_dqn"
SHIPPED_CONFIG_DIR = "configs"


@dataclass(frozen=True)
class Override:
    """One ``section.key=value`` change applied before validation.

    Attributes:
        path: dotted path, e.g. ``replay.alpha``.
        value: the already typed value.
        source: how the user gave it, for error messages (``--set``, ``--seed``, ...).
    """

    path: str
    value: Any
    source: str = "--set"


def parse_override(text: str) -> Override:
    """Parses ``section.key=value``; the value is read as YAML (``3`` int, ``1e-3`` float, ...).

    Raises:
        ConfigError: no ``=``, an empty key, or a value that is not valid YAML.
    """
    path, sep, raw = text.partition("=")
    path = path.strip()
    if not sep or not path or any(not part for part in path.split(".")):
        raise ConfigError([f"--set {_shown(text)}: expected section.key=value"])
    try:
        value = _read_yaml(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(
            [f"--set {_shown(text)}: value is not valid YAML ({one_line(exc)})"]
        ) from None
    return Override(path, value)


# Folders of shipped configs named as ``folder/name.yaml`` (published setups: issue 25).
SHIPPED_CONFIG_FOLDERS = ("literature",)


def shipped_config_names() -> list[str]:
    """Names of the configs that ship with the package, sorted: the top-level files, then those
    of ``SHIPPED_CONFIG_FOLDERS`` as ``folder/name.yaml``."""
    root = resources.files(SHIPPED_CONFIG_PACKAGE) / SHIPPED_CONFIG_DIR
    names = sorted(p.name for p in root.iterdir() if p.name.endswith((".yaml", ".yml")))
    for folder in SHIPPED_CONFIG_FOLDERS:
        sub = root / folder
        if sub.is_dir():
            names += sorted(
                f"{folder}/{p.name}" for p in sub.iterdir() if p.name.endswith((".yaml", ".yml"))
            )
    return names


def resolve_config_path(name_or_path: str) -> Path:
    """Finds a config: an existing file as given, else a bare name among the shipped configs.

    ``cartpole.yaml`` and ``cartpole`` both name the shipped ``cartpole.yaml`` when no such file
    exists in the working directory, so ``per-dqn train --config cartpole.yaml`` works from any
    directory after install; ``literature/minatar_paper_dqn`` names a published setup's preset
    likewise.

    Raises:
        ConfigError: neither a file nor a shipped config; the message lists the shipped names.
    """
    given = Path(name_or_path)
    if given.is_file():
        return given
    local = Path(f"{name_or_path}.yaml")
    if not given.suffix and local.is_file():  # `literature/x` for a `./literature/x.yaml`
        return local
    folder = given.parent.as_posix()
    if given.name == name_or_path or (
        folder in SHIPPED_CONFIG_FOLDERS and given.parent.parent == Path(".")
    ):  # a bare name, or one in a shipped folder
        root = resources.files(SHIPPED_CONFIG_PACKAGE) / SHIPPED_CONFIG_DIR
        for candidate in (name_or_path, f"{name_or_path}.yaml"):
            shipped = root / candidate
            if shipped.is_file():
                return Path(str(shipped))
    shipped_names = ", ".join(shipped_config_names()) or "none"
    raise ConfigError(
        [f"{name_or_path}: no such config file (the shipped configs are: {shipped_names})"]
    )


def load_config(
    path: str | Path,
    overrides: Iterable[Override] = (),
    display_name: str | None = None,
    check_unread: bool = True,
) -> Config:
    """Reads, overrides and validates a config file.

    Args:
        path: the YAML file (see ``resolve_config_path`` for bare names).
        overrides: changes applied to the parsed YAML before validation, so they are validated
            exactly like the file's own values.
        display_name: how to name the file in error messages (defaults to ``path``).
        check_unread: refuse an override of a key the run does not read (its replay kind's, its
            env family's or its optimiser's; see ``config_from_data``).

    Raises:
        ConfigError: unreadable file, YAML syntax, unknown keys, wrong types, out-of-range or
            inconsistent values; one problem per line, ``<file>: <dotted.path>: <what is wrong>``.
    """
    path = Path(path)
    label = display_name or str(path)
    try:
        with path.open("rb") as file:  # never read whole (a run dir's is read by readback)
            data = file.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError([f"{label}: {_TOO_LARGE}"])
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{label}: no such config file"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{label}: cannot read ({one_line(exc)})"]) from None
    return config_from_data(parse_yaml(text, label), label, overrides, check_unread)


def config_from_data(
    data: dict[str, Any],
    label: str,
    overrides: Iterable[Override] = (),
    check_unread: bool = True,
) -> Config:
    """Applies ``overrides`` to parsed sections (a dict, changed in place) and validates the
    result, exactly as ``load_config`` does a file's; ``label`` names it in errors. With
    ``check_unread``, an override of a key the run does not read is refused (``--replay laber
    --set replay.alpha=0.5`` would change nothing; ``_refuse_unread``).

    Raises:
        ConfigError: see ``load_config``.
    """
    overrides = list(overrides)
    problems = [f"{label}: {msg}" for msg in _apply_overrides(data, overrides)]
    if problems:
        raise ConfigError(problems)
    config = validate_config(data, label, overrides)
    if check_unread:
        _refuse_unread(config, label, overrides)
    return config


def _refuse_unread(config: Config, label: str, overrides: Sequence[Override]) -> None:
    """Refuses an override of a key the run does not read (``models.unread_keys``): a replay key
    its kind does not read, an ``env`` key its env's family does not read, or an optimiser
    setting of the optimiser it does not use. A ``--set replay.alpha=0.5`` beside ``--replay
    laber``, ``--set env.frame_skip=2`` on CartPole or ``--set agent.adam_eps=1e-4`` under
    RMSprop would change nothing, silently. A file's own keys are not checked: a run dir's
    ``config.yaml`` holds every key, and a file written for one kind or env may be run with
    another (``--replay``, ``--set env.id``).

    Raises:
        ConfigError: one line per such override, naming the key, what does not read it, and the
            flag.
    """
    unread = unread_keys(config)
    problems = [
        f"{label}: {o.path}: {unread[o.path]} {_does(unread[o.path])} not read it (set by "
        f"{o.source})"
        for o in overrides
        if o.path in unread
    ]
    if problems:
        raise ConfigError(problems)


def _does(subject: str) -> str:
    """The verb for ``unread_keys``' subject: "CartPole-like envs do", "replay kind 'x' does"."""
    return "do" if subject.endswith(" envs") else "does"


def parse_yaml(text: str, label: str) -> dict[str, Any]:
    """Parses config YAML into a dict (an empty file is an empty dict).

    Raises:
        ConfigError: a syntax error, a duplicate key, nesting too deep to read, an integer too
            long to convert, a document too large, or a top level that is not a mapping.
    """
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError([f"{label}: {_TOO_LARGE}"])  # characters: at least as many bytes
    try:
        data = _read_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError([f"{label}: {_yaml_error_line(exc)}"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            [f"{label}: the top level must be a mapping of sections, got {type(data).__name__}"]
        )
    return data


def validate_config(data: dict[str, Any], label: str, overrides: Sequence[Override] = ()) -> Config:
    """Validates parsed YAML; see ``load_config`` for the error format."""
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            for path, msg, involves in describe(error, Config):
                source = _override_source(path, overrides)
                if source:
                    msg += f" (set by {source})"
                for other in involves:
                    other_source = _override_source(other, overrides)
                    if other_source and other_source != source:
                        msg += f" ({other} set by {other_source})"
                problems.append(f"{label}: {path}: {msg}" if path else f"{label}: {msg}")
        raise ConfigError(problems) from None


def _override_source(path: str, overrides: Sequence[Override]) -> str | None:
    """The flag of the last override that wrote at, above or below ``path``, if any."""
    for override in reversed(overrides):
        shorter, longer = sorted((path, override.path), key=len)
        if longer == shorter or longer.startswith((shorter + ".", shorter + "[")):
            return override.source
    return None


# --- YAML details ---------------------------------------------------------------------------------


# Nodes deeper than this are refused: a config is four deep (the document, a section, a key's
# list, its items). PyYAML composes recursively and its scanner slows with every open bracket,
# so a document nested 20,000 deep took seconds to end in a RecursionError (issue 23 item 6).
MAX_YAML_DEPTH = 64
# A config is a few kilobytes of about a hundred nodes; PyYAML reads about a megabyte of
# comments or 20,000 list items a second, so a run dir's config.yaml of a few megabytes (a
# damaged or planted one) held `eval`, `load` and `--resume` for minutes (issue 23's fuzz
# harness). Larger documents, or more nodes, are refused before they are read whole. An alias
# is no new node: a "billion laughs" document stays as small as its text once read.
MAX_CONFIG_BYTES = 1 << 20
MAX_YAML_NODES = 10_000
_TOO_LARGE = f"larger than the {MAX_CONFIG_BYTES:,} bytes a config may have"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys, unhashable keys, nesting past ``MAX_YAML_DEPTH``
    and more than ``MAX_YAML_NODES`` nodes, and reads ``1e-3`` as a float.

    PyYAML follows YAML 1.1, where a float needs a dot, so ``learning_rate: 1e-3`` would arrive as
    the string "1e-3" and fail the strict float check; YAML 1.2 (and every user) reads a float.
    """

    _depth = 0
    _nodes = 0

    def _too_deep(self, mark: yaml.Mark) -> yaml.MarkedYAMLError:
        return yaml.composer.ComposerError(
            None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", mark
        )

    def fetch_flow_collection_start(self, token_class: type) -> None:
        # The scanner's count of open brackets, refused before it looks ahead past every one.
        if self.flow_level >= MAX_YAML_DEPTH:
            raise self._too_deep(self.get_mark())
        super().fetch_flow_collection_start(token_class)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise self._too_deep(self.peek_event().start_mark)
            self._nodes += 1
            if self._nodes > MAX_YAML_NODES:
                raise yaml.composer.ComposerError(
                    None, None, f"more than {MAX_YAML_NODES:,} values", self.peek_event().start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_StrictLoader.yaml_implicit_resolvers = {
    key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.VERBOSE,
    ),
    list("-+0123456789."),
)


def _construct_float(loader: _StrictLoader, node: yaml.ScalarNode) -> float:
    value = loader.construct_yaml_float(node)
    if math.isfinite(value):
        return value
    return NonFiniteFloat(value, str(node.value))


_StrictLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)


def _construct_mapping_no_duplicates(loader: _StrictLoader, node: yaml.MappingNode) -> dict:
    if not isinstance(node, yaml.MappingNode):  # `!!map [1]`: a TypeError traceback otherwise
        raise yaml.constructor.ConstructorError(
            None, None, f"expected a mapping, found a {node.id}", node.start_mark
        )
    seen: dict[Any, yaml.Node] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:  # `? [1, 2]` or `{[1]: 2}`: a TypeError traceback otherwise
            raise yaml.constructor.ConstructorError(
                None, None, f"a {type(key).__name__} as a key", key_node.start_mark
            ) from None
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen[key] = key_node
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping_no_duplicates
)


def _construct_int(loader: _StrictLoader, node: yaml.ScalarNode) -> int:
    try:
        return loader.construct_yaml_int(node)
    except ValueError:
        # Python refuses to convert a decimal string of more digits than this (CVE-2020-10735);
        # no config key has a use for such a number (issue 23 item 6).
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"an integer of more than {sys.get_int_max_str_digits()} digits",
            node.start_mark,
        ) from None


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _read_yaml(text: str) -> Any:
    """``text`` read by the strict loader.

    Raises:
        yaml.YAMLError: YAML syntax, a duplicate key, nesting past ``MAX_YAML_DEPTH``, and also
            (issue 23 item 6) what PyYAML lets out as ``RecursionError``, ``ValueError`` or
            another error: a value its constructor refuses (a timestamp like ``2001-13-45``, a
            ``!!bool x``).
    """
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except RecursionError:
        problem = "nested too deeply to read (a config is a few levels deep)"
    except ValueError as exc:
        problem = one_line(exc)
    except (LookupError, TypeError, AttributeError) as exc:
        # A tagged value its constructor cannot convert: `!!bool x` (a KeyError), `!!timestamp
        # x` (an AttributeError), `!!int ''` (an IndexError); found by tests/test_fuzz.py.
        problem = f"a value its tag cannot hold ({type(exc).__name__}: {one_line(exc)})"
    raise yaml.error.MarkedYAMLError(problem=problem)


# Longer ``--set`` texts are cut in error lines: the value may be a whole nested document.
_MAX_SHOWN_SET = 100


def _shown(text: str) -> str:
    """A ``--set`` text as its error line shows it: quoted, cut past ``_MAX_SHOWN_SET``."""
    if len(text) <= _MAX_SHOWN_SET:
        return repr(text)
    return f"{text[:_MAX_SHOWN_SET]!r}... ({len(text):,} characters)"


def _yaml_error_line(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return f"{where}invalid YAML: {one_line(problem)}"


def _apply_overrides(data: dict[str, Any], overrides: Sequence[Override]) -> list[str]:
    """Writes each override into ``data`` in place; returns a message per override that clashes."""
    problems = []
    for override in overrides:
        *parents, leaf = override.path.split(".")
        node = data
        for depth, key in enumerate(parents):
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                where = ".".join(parents[: depth + 1])
                problems.append(
                    f"{where}: is not a section, cannot set {override.path} "
                    f"(set by {override.source})"
                )
                break
            node = child
        else:
            node[leaf] = override.value
    return problems
