"""How a run's settings are named: in run dir names (``uniform/alpha=0.4,n=3/s0``), arm names
and the report's rows, each key by its last part or a common abbreviation (``SHORT_KEYS``), each
value as it reads in a path.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

# How a key appears in run dir names when its last part is not short enough; any other key
# appears as its last part (``replay.alpha`` -> ``alpha``), or whole if two keys of one run share
# that last part.
SHORT_KEYS = {"agent.n_step": "n", "agent.learning_rate": "lr"}


def format_value(value: Any) -> str:
    """A setting's value as run dir names show it: ``0.0001``, ``true``, ``[128,128]``, ``huber``;
    ``/`` becomes ``-`` so that the name stays one path component."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, float):
        text = repr(value)
    else:
        text = json.dumps(value, separators=(",", ":"))
    return text.replace("/", "-")


def short_keys(keys: Sequence[str]) -> dict[str, str]:
    """How each key of one run's label is written: ``SHORT_KEYS`` or its last part, the whole
    dotted key where two keys would read alike."""
    short = {k: SHORT_KEYS.get(k, k.rsplit(".", 1)[-1]) for k in keys}
    clashes = {s for s in short.values() if list(short.values()).count(s) > 1}
    return {k: (k if s in clashes else s) for k, s in short.items()}


def settings_label(pairs: Sequence[tuple[str, Any]]) -> str:
    """``[("replay.alpha", 0.4), ("agent.n_step", 3)]`` -> ``"alpha=0.4,n=3"``."""
    short = short_keys([k for k, _ in pairs])
    return ",".join(f"{short[k]}={format_value(v)}" for k, v in pairs)
