"""What ``FusedAdam`` and ``RMSprop`` share: one group of parameters in ``torch.optim``'s layout
(its ``param_groups``, its ``state_dict``), without importing ``torch.optim`` (agent/adam.py says
why)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch


def by_setting(
    items: Sequence[tuple[Any, Sequence[torch.Tensor | None]]],
    setting: Callable[[dict[str, Any]], tuple],
    fields: Sequence[str],
) -> dict[tuple, dict[str, list[torch.Tensor]]]:
    """Several optimisers' tensors for one batched step, grouped by ``setting(param_group)``:
    ``params``, ``grads`` and each state ``field`` (those a state holds), in order. Each
    ``(optimizer, grads)`` gives its parameters' gradients in order; a parameter whose gradient
    is None is left out (not stepped). The optimiser's ``_state_of`` creates a missing state."""
    groups: dict[tuple, dict[str, list[torch.Tensor]]] = {}
    for optimizer, grads in items:
        group = optimizer.param_groups[0]
        lists = groups.setdefault(
            setting(group), {name: [] for name in ("params", "grads", *fields)}
        )
        for p, grad in zip(group["params"], grads, strict=True):
            if grad is None:
                continue
            state = optimizer._state_of(p)
            lists["params"].append(p)
            lists["grads"].append(grad)
            for name in fields:
                if name in state:
                    lists[name].append(state[name])
    return {key: lists for key, lists in groups.items() if lists["params"]}


class OneGroupOptimizer:
    """One parameter group and its per-parameter state, laid out as ``torch.optim`` lays them
    out, so that a state dict written by either loads into the other.

    Args:
        params: the parameters to optimise.
        lr: step size.
        eps: the denominator guard.
        settings: the group's other keys, in ``torch.optim``'s order after ``lr`` (the same keys
            in the same order pickle alike).

    Raises:
        ValueError: no parameters, or a step size or guard below 0.
    """

    def __init__(
        self, params: Iterable[torch.nn.Parameter], lr: float, eps: float, settings: dict[str, Any]
    ) -> None:
        params = list(params)
        if not params:
            raise ValueError("`params` must hold at least one parameter, got none")
        if not lr >= 0.0:
            raise ValueError(f"`lr` must be >= 0, got {lr}")
        if not eps >= 0.0:
            raise ValueError(f"`eps` must be >= 0, got {eps}")
        self.param_groups: list[dict[str, Any]] = [{"params": params, "lr": lr, **settings}]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drops (or zeroes) every parameter's gradient."""
        for p in self.param_groups[0]["params"]:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.detach_().zero_()

    def _saved(self, state: dict[str, torch.Tensor]) -> bool:
        """Whether a parameter's state goes into ``state_dict`` (all, unless a kind says not)."""
        return True

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim``'s layout: parameters as indices, the state's tensors themselves (not
        copies)."""
        group = self.param_groups[0]
        index = {id(p): i for i, p in enumerate(group["params"])}
        return {
            "state": {index[id(p)]: dict(s) for p, s in self.state.items() if self._saved(s)},
            # "params" last, as torch packs it: the same keys in the same order pickle alike.
            "param_groups": [
                {
                    **{key: value for key, value in group.items() if key != "params"},
                    "params": list(range(len(group["params"]))),
                }
            ],
        }

    def _loaded_group(self, state_dict: dict[str, Any]) -> tuple[list[int], dict[str, Any]]:
        """A state dict's one group: its parameter indices and its settings.

        Raises:
            ValueError: another number of groups or of parameters than this optimiser's.
        """
        params = self.param_groups[0]["params"]
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(params):
            sizes = [len(g["params"]) for g in groups]
            raise ValueError(
                f"loaded state dict has parameter groups of sizes {sizes}, this optimizer one of "
                f"{len(params)}"
            )
        settings = {key: value for key, value in groups[0].items() if key != "params"}
        return list(groups[0]["params"]), settings
