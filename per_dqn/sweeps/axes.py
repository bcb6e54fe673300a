"""A sweep's axes as ``ablate`` is given them: its arms (``--replay "rank:replay.alpha=0.7"``),
its grid (``--grid replay.alpha=0.4,0.6``), its seeds (``--seeds 5``, ``--seeds 0,3,7``), its envs
(``--set env.id=A,B``) and its worker count, parsed and checked, each refusal one line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from per_dqn.config import ConfigError, Override, parse_override
from per_dqn.sweeps.naming import settings_label
from per_dqn.sweeps.runs import ARMS

# The config keys every sweep sets per run; arms' settings and grid keys join them in a sweep.
SWEEP_AXES = ("env.id", "replay.kind", "run.seed")


@dataclass(frozen=True)
class Arm:
    """One arm of a sweep: a replay kind and the settings it carries.

    Attributes:
        kind: the replay kind.
        settings: config overrides only this arm applies (``replay.alpha=0.7``), in the order
            given.
    """

    kind: str
    settings: tuple[Override, ...] = ()


def _split_top_level(text: str) -> list[str]:
    """Splits at the commas outside brackets: ``"[64],[128,128]"`` -> ``["[64]", "[128,128]"]``."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def parse_arms(texts: str | Sequence[str]) -> tuple[Arm, ...]:
    """``--replay`` values -> arms.

    Each value lists arms separated by commas; an arm is a kind, optionally followed by ``:`` and
    its settings, ``KEY=VALUE`` pairs separated by commas (values read as YAML, as ``--set``
    reads them). A comma-separated part that is not a kind continues the previous arm's settings:
    ``"uniform,rank:replay.alpha=0.7,replay.beta0=0.5"`` is two arms.

    Raises:
        ValueError: one line naming the bad part: an unknown kind, a setting without an arm, a
            setting that is not ``KEY=VALUE``, a key set twice in one arm, an arm setting a key
            the sweep itself sets, or an arm given twice.
    """
    values = [texts] if isinstance(texts, str) else list(texts)
    arms: list[tuple[str, list[Override]]] = []
    for text in values:
        if not text.strip():
            raise ValueError(f"--replay must list at least one of {', '.join(ARMS)}, got {text!r}")
        for part in _split_top_level(text):
            kind, colon, setting = part.partition(":")
            kind = kind.strip()
            if colon or "=" not in part:
                if kind not in ARMS:
                    raise ValueError(
                        f"--replay: unknown arm {kind!r}; choose from {', '.join(ARMS)}"
                    )
                arms.append((kind, []))
                if not colon:
                    continue
                part = setting
            if not arms:
                raise ValueError(f"--replay: setting {part!r} comes before any arm in {text!r}")
            try:
                override = parse_override(part.strip())
            except ConfigError as exc:
                line = exc.problems[0].replace("--set", f"--replay {arms[-1][0]}:", 1)
                raise ValueError(line) from None
            arm_kind, settings = arms[-1]
            source = f"--replay {arm_kind}:"
            if override.path in SWEEP_AXES:
                raise ValueError(
                    f"{source} an arm cannot set {override.path} (the sweep sets it per run)"
                )
            if any(o.path == override.path for o in settings):
                raise ValueError(f"{source} sets {override.path} twice")
            settings.append(Override(override.path, override.value, source))
    result = tuple(Arm(kind, tuple(settings)) for kind, settings in arms)
    names = [arm_label(a) for a in result]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"--replay lists the arm {name!r} twice")
    return result


def parse_grid(texts: Sequence[str]) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """``--grid KEY=V1,V2,...`` values -> ``((key, values), ...)``, values read as YAML.

    Commas inside brackets belong to one value: ``agent.hidden_sizes=[64],[128,128]``.

    Raises:
        ValueError: one line naming the bad ``--grid``: no ``=``, an empty or repeated value, a
            key given twice, or a key the sweep sets some other way (replay.kind: ``--replay``;
            run.seed: ``--seeds``).
    """
    grid: list[tuple[str, tuple[Any, ...]]] = []
    for text in texts:
        key, sep, raw = text.partition("=")
        key = key.strip()
        bad = f"--grid {text!r}: expected KEY=VALUE1,VALUE2,..."
        if not sep or not key or any(not part for part in key.split(".")):
            raise ValueError(bad)
        if key == "replay.kind":
            raise ValueError(f"--grid {key}: replay kinds are the arms; give them with --replay")
        if key == "run.seed":
            raise ValueError(f"--grid {key}: give seeds with --seeds")
        if any(k == key for k, _ in grid):
            raise ValueError(f"--grid gives {key} twice")
        values = []
        for raw_value in _split_top_level(raw):
            if not raw_value:
                raise ValueError(f"--grid {text!r}: an empty value")
            try:
                values.append(parse_override(f"{key}={raw_value}").value)
            except ConfigError as exc:
                raise ValueError(exc.problems[0].replace("--set", "--grid", 1)) from None
        encoded = [json.dumps(v, sort_keys=True) for v in values]
        if len(set(encoded)) != len(encoded):
            raise ValueError(f"--grid {key} lists a value twice, got {raw!r}")
        grid.append((key, tuple(values)))
    return tuple(grid)


# A seed list longer than this is a typo (10**9 runs), not a sweep.
MAX_SEEDS = 100_000


def parse_seeds(text: str) -> tuple[int, ...]:
    """``--seeds``: ``"10"`` -> seeds 0..9; ``"100-119"`` -> 100..119; ``"3,7,11"`` -> those.

    Raises:
        ValueError: one line naming the bad part: not a number, a negative seed, an empty or
            reversed range, a repeated seed, or more than ``MAX_SEEDS`` seeds.
    """
    text = text.strip()
    bad = f"--seeds: expected a count (10), a range (100-119) or a list (3,7,11), got {text!r}"
    if text.isdigit():
        count = int(text)
        if not 1 <= count <= MAX_SEEDS:
            raise ValueError(f"--seeds must be a count from 1 to {MAX_SEEDS:,}, got {count}")
        return tuple(range(count))
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(bad)
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"--seeds: range {part!r} ends before it starts")
        if len(seeds) + last - first + 1 > MAX_SEEDS:
            raise ValueError(f"--seeds lists more than {MAX_SEEDS:,} seeds, got {text!r}")
        seeds.extend(range(first, last + 1))
    repeated = sorted({s for s in seeds if seeds.count(s) > 1}) if len(seeds) < 10_000 else []
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds lists a seed twice ({repeated[:5] or 'several'}), got {text!r}")
    return tuple(seeds)


def check_workers(workers: int | None) -> int:
    """The worker count: ``workers`` if given (>= 1), else one per CPU core."""
    if workers is None:
        return os.cpu_count() or 1
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    return workers


def env_list_of(value: Any, source: str) -> list[str]:
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",")]
    if not isinstance(value, list) or not value:
        raise ValueError(f"{source} env.id: expected an env id or a list of them, got {value!r}")
    if not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{source} env.id: every env id must be a non-empty string, got {value}")
    if len(set(value)) != len(value):
        raise ValueError(f"{source} env.id lists an env twice, got {value}")
    return value


def split_envs(overrides: Sequence[Override]) -> tuple[list[str] | None, list[Override]]:
    """Takes the ``env.id`` overrides out: a list (or comma-separated ids) is the sweep's envs."""
    envs, rest = None, []
    for override in overrides:
        if override.path != "env.id":
            rest.append(override)
            continue
        envs = env_list_of(override.value, "--set")
    return envs, rest


def env_slug(env_id: str) -> str:
    """An env id as one path component: ``ALE/Pong-v5`` -> ``ALE-Pong-v5``."""
    return env_id.replace("/", "-")


def arm_label(arm: Arm) -> str:
    """An arm as report and run dirs name it: ``rank`` or ``rank/alpha=0.7,beta0=0.5``."""
    text = settings_label([(o.path, o.value) for o in arm.settings])
    return f"{arm.kind}/{text}" if text else arm.kind
