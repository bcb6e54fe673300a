"""The optimisers an agent may use, by name, and one step for many of them (a pack's)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import torch

from per_dqn.agent.adam import FusedAdam, fused_adam_step
from per_dqn.agent.rmsprop import RMSprop, rmsprop_step

Optimizer = FusedAdam | RMSprop
OPTIMIZERS = ("adam", "rmsprop")


def make_optimizer(
    kind: Literal["adam", "rmsprop"],
    params: Iterable[torch.nn.Parameter],
    lr: float,
    *,
    adam_eps: float = 1e-8,
    rmsprop_alpha: float = 0.95,
    rmsprop_eps: float = 0.01,
    rmsprop_centered: bool = True,
) -> Optimizer:
    """``FusedAdam`` or ``RMSprop`` over ``params`` with the settings that kind takes.

    Raises:
        ValueError: an unknown kind.
    """
    if kind == "adam":
        return FusedAdam(params, lr=lr, eps=adam_eps)
    if kind == "rmsprop":
        return RMSprop(
            params, lr=lr, alpha=rmsprop_alpha, eps=rmsprop_eps, centered=rmsprop_centered
        )
    raise ValueError(f"`optimizer` must be one of {', '.join(OPTIMIZERS)}, got {kind!r}")


def step_all(items: list[tuple[Optimizer, list[torch.Tensor | None]]]) -> None:
    """One step of every ``(optimizer, grads)``, batched per kind (see ``fused_adam_step`` and
    ``rmsprop_step``): each optimiser's numbers are those of its own ``step``."""
    adams = [(o, g) for o, g in items if isinstance(o, FusedAdam)]
    others = [(o, g) for o, g in items if isinstance(o, RMSprop)]
    if len(adams) + len(others) != len(items):
        raise TypeError("step_all takes FusedAdam and RMSprop optimisers only")
    if adams:
        fused_adam_step(adams)
    if others:
        rmsprop_step(others)
