"""Config problems as one printable line each: ``ConfigError`` and the translation of pydantic's
errors (and the models' cross-field checks) into ``<dotted.path>: <what is wrong>, got <value>``.

Values are echoed as the user typed them in YAML (``true``, ``null``, ``1e400``), bounds as the
models write them (``0`` rather than ``0.0``). This module knows no model: the root model is
passed in where a key's neighbours are listed.
"""

from __future__ import annotations

import difflib
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel


class ConfigError(ValueError):
    """A config that cannot be used; ``problems`` holds one printable line per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


@dataclass(frozen=True)
class CrossProblem:
    """One cross-field problem: the key to blame, the message, and the other keys it involves
    (so that an override of one of those is named too)."""

    path: str
    message: str
    involves: tuple[str, ...] = ()


class CrossFieldError(ValueError):
    """Several cross-section problems, each with its own dotted path."""

    def __init__(self, problems: list[CrossProblem]) -> None:
        super().__init__("; ".join(f"{p.path}: {p.message}" for p in problems))
        self.problems = problems


class NonFiniteFloat(float):
    """A YAML float that is inf or nan, with the text it was read from.

    ``1e400`` overflows to inf in Python; keeping ``text`` lets the error line show what the user
    wrote rather than an ``inf`` they never typed. The models refuse every non-finite float, so
    an instance never reaches a validated config.
    """

    text: str

    def __new__(cls, value: float, text: str) -> NonFiniteFloat:
        self = super().__new__(cls, value)
        self.text = text
        return self


def one_line(exc: object) -> str:
    """``exc``'s text with its whitespace (newlines included) collapsed to single spaces."""
    return " ".join(str(exc).split())


def error_text(exc: BaseException, limit: int = 300) -> str:
    """``TypeName: text`` of ``exc``, its text on one line and cut at ``limit`` characters: what
    a one-line message says of an error it wraps."""
    return f"{type(exc).__name__}: {one_line(exc)[:limit]}"


def _dotted(loc: tuple) -> str:
    """A pydantic location as the key's dotted path: ``("agent", "hidden_sizes", 0)`` ->
    ``agent.hidden_sizes[0]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        # A key with a line break, an escape sequence or a lone surrogate is shown quoted and
        # escaped: the problem stays one printable line.
        part = str(part) if str(part).isprintable() else repr(part)
        out += f".{part}" if out else part
    return out


def _num(value: Any) -> str:
    """A bound as written in the model (``0`` rather than ``0.0``)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def got(value: Any) -> str:
    """``value`` as the user typed it in YAML (``true``, ``null``, ``'abc'``, ``1e400``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, NonFiniteFloat):
        return value.text
    if isinstance(value, float) and not math.isfinite(value):
        return {math.inf: ".inf", -math.inf: "-.inf"}.get(value, ".nan")
    if _is_int(value):
        try:
            text = str(value)
        except ValueError:  # past Python's int-to-str limit (a YAML hex number gets there)
            return f"an integer of more than {sys.get_int_max_str_digits()} digits"
        if len(text) > _MAX_SHOWN_DIGITS:
            return f"an integer of {len(text.lstrip('-'))} digits"
    if isinstance(value, str | int | float):
        return repr(value)
    return f"a {type(value).__name__}"


# Longer ints are summarised: a 400-digit echo would bury the rest of the line.
_MAX_SHOWN_DIGITS = 30


_BOUNDS = {
    "greater_than_equal": (">=", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("<=", "le"),
    "less_than": ("<", "lt"),
}

_TYPE_NAMES = {
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "string_type": "a string",
    "tuple_type": "a list",
    "model_type": "a mapping of keys",
    "model_attributes_type": "a mapping of keys",
    "dict_type": "a mapping of keys",
}


def _model_at(root: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The model class whose field ``loc[-1]`` would be (``loc`` starting at ``root``), or None
    if ``loc`` leaves the models."""
    model = root
    for key in loc[:-1]:
        field = model.model_fields.get(key) if isinstance(key, str) else None
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def describe(
    error: dict[str, Any], root: type[BaseModel]
) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(dotted path, message, other keys involved)`` for one pydantic error of a ``root``
    model's validation (a cross check may give several)."""
    ctx = error.get("ctx") or {}
    if error["type"] == "value_error" and isinstance(ctx.get("error"), CrossFieldError):
        return [(p.path, p.message, p.involves) for p in ctx["error"].problems]
    return [(*problem, ()) for problem in _describe_field(error, root)]


def _describe_field(error: dict[str, Any], root: type[BaseModel]) -> list[tuple[str, str]]:
    """``(dotted path, message)`` for a pydantic error about one key."""
    kind, loc, value = error["type"], tuple(error["loc"]), error.get("input")
    ctx = error.get("ctx") or {}
    path = _dotted(loc)
    if kind == "extra_forbidden":
        model = _model_at(root, loc)
        valid = sorted(model.model_fields) if model is not None else []
        close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.6)
        hint = f"did you mean `{close[0]}`?" if close else f"valid keys: {', '.join(valid)}"
        return [(path, f"unknown key; {hint}")]
    if kind == "missing":
        return [(path, "required key is missing")]
    if kind in _BOUNDS:
        op, key = _BOUNDS[kind]
        return [(path, f"must be {op} {_num(ctx[key])}, got {got(value)}")]
    if kind == "literal_error":
        return [(path, f"must be one of {ctx['expected']}, got {got(value)}")]
    if kind == "finite_number" or (kind == "float_type" and _is_int(value)):
        # An int too large for a float (YAML `1` followed by 400 zeros) is as unusable as 1e400.
        return [(path, f"must be a finite number, got {got(value)}")]
    if kind in _TYPE_NAMES:
        return [(path, f"must be {_TYPE_NAMES[kind]}, got {got(value)}")]
    if kind == "value_error":
        return [(path, str(ctx.get("error", error["msg"])))]
    return [(path, f"{error['msg'][0].lower()}{error['msg'][1:]}, got {got(value)}")]


def printable(line: str) -> str:
    """``line`` with each character a terminal would act on (a line break, an escape sequence,
    a lone surrogate) written as its Python escape: a problem that echoes a value as the user
    gave it (an env id, a key, a path) or as a dir holds it (a run dir's name, an arm's name)
    stays one line, and cannot move the cursor, clear the screen or recolour."""
    if line.isprintable():
        return line
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)
