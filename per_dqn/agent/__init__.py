"""The learner: Q-networks (MLP or Nature CNN torso, dueling head), the Double-DQN update and the
priority signals it computes (``signals.py``).

The names below are imported on first use, so that asking ``signals`` (as the config does, to
check ``replay.priority_from``) loads no torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> submodule that defines it
_EXPORTS = {
    "DQNAgent": "dqn",
    "LearnResult": "result",
    "td_targets": "dqn",
    "NatureCNN": "networks",
    "QNetwork": "networks",
    "make_q_network": "networks",
}

__all__ = ["DQNAgent", "LearnResult", "NatureCNN", "QNetwork", "make_q_network", "td_targets"]

if TYPE_CHECKING:
    from per_dqn.agent.dqn import DQNAgent, td_targets
    from per_dqn.agent.networks import NatureCNN, QNetwork, make_q_network
    from per_dqn.agent.result import LearnResult

if set(__all__) != set(_EXPORTS):  # the two lists above must name the same things
    raise ImportError("per_dqn.agent: __all__ and _EXPORTS disagree")


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
