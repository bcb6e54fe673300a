"""RMSprop as ``torch.optim.RMSprop`` computes it, without ``torch.optim``'s import of
``torch._dynamo`` (see ``agent/adam.py``): the MinAtar paper's optimiser (centred, alpha 0.95,
eps 0.01; Young & Tian, 2019, ``examples/dqn.py``).

The step is ``torch.optim.RMSprop``'s multi-tensor one (``foreach=True``), op for op::

    v <- alpha v + (1 - alpha) g^2
    m <- m + (1 - alpha) (g - m)                  (centred only)
    p <- p - lr g / (sqrt(v - m^2) + eps)         (centred; else sqrt(v))

so the weights it produces are bit for bit torch's (``tests/agent/test_rmsprop.py`` compares
them step by step), and its ``state_dict`` has torch's layout and values: a checkpoint written
with either loads into either. Only what ``DQNAgent`` uses is offered: one parameter group, no
momentum, no weight decay.

Like ``FusedAdam``, it offers a pack (``agent/pack.py``) ``export_moments`` and ``adopt``, and
``rmsprop_step`` steps several optimisers at once, one call per distinct setting, each tensor on
its own: a member's numbers are those of its own ``step``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from per_dqn.agent.group import OneGroupOptimizer, by_setting

_MOMENTS = ("square_avg", "grad_avg")


class RMSprop(OneGroupOptimizer):
    """RMSprop (Tieleman & Hinton, 2012) for one group of parameters.

    Args:
        params: the parameters to optimise.
        lr: step size.
        alpha: decay of the squared-gradient average.
        eps: the denominator guard, added outside the square root.
        centered: subtract the squared mean gradient (Graves, 2013).

    Raises:
        ValueError: no parameters, or a setting out of range.
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        centered: bool = False,
    ) -> None:
        if not 0.0 <= alpha < 1.0:
            raise ValueError(f"`alpha` must be in [0, 1), got {alpha}")
        # torch.optim.RMSprop's group keys and defaults, so that state_dict() matches its own.
        super().__init__(
            params,
            lr,
            eps,
            {
                "momentum": 0,
                "alpha": alpha,
                "eps": eps,
                "centered": bool(centered),
                "weight_decay": 0,
                "capturable": False,
                "foreach": True,
                "maximize": False,
                "differentiable": False,
            },
        )

    def step(self) -> None:
        """One RMSprop step for the parameters that have a gradient."""
        rmsprop_step([(self, [p.grad for p in self.param_groups[0]["params"]])])

    def _state_of(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        """``p``'s state, created as torch.optim.RMSprop's _init_group does (a float32 step,
        zero averages) when it has none yet."""
        state = self.state.get(p)
        if state is None:
            state = self.state[p] = {
                "step": torch.zeros((), dtype=torch.float32),
                "square_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
            }
            if self.param_groups[0]["centered"]:
                state["grad_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    # --- in a pack (agent/pack.py) -------------------------------------------------------------

    def export_moments(self) -> list[dict[str, Any] | None]:
        """Each parameter's state (copies), None where it has none."""
        out: list[dict[str, Any] | None] = []
        for p in self.param_groups[0]["params"]:
            state = self.state.get(p)
            out.append(None if state is None else {k: v.clone() for k, v in state.items()})
        return out

    def adopt(
        self,
        params: list[torch.nn.Parameter],
        views: dict[int, Any],
        moments: list[dict[str, Any] | None],
    ) -> None:
        """Takes ``params`` (the same parameters, re-pointed by a pack) in place of the old ones,
        with ``moments`` (``export_moments``) as their state. The averages stay tensors of this
        optimiser's own: ``views`` (where a pack would stack Adam's moments) are not used."""
        del views
        if len(params) != len(self.param_groups[0]["params"]) or len(moments) != len(params):
            raise ValueError("a pack re-pointed a different number of parameters")
        self.param_groups[0]["params"] = params
        self.state = {}
        for p, saved in zip(params, moments, strict=True):
            if saved is not None:
                self.state[p] = saved

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores ``state_dict()`` output, or ``torch.optim.RMSprop``'s (copies on each
        parameter's device and dtype), and the group's settings.

        Raises:
            ValueError: a state dict for another number of groups or parameters, averages of
                another shape, or one that lacks the mean gradient of a centred RMSprop.
        """
        params = self.param_groups[0]["params"]
        indices, settings = self._loaded_group(state_dict)
        # A centred step needs the mean gradient, whichever side is centred (the caller may put
        # its own settings back after loading).
        centred = settings.get("centered") or self.param_groups[0]["centered"]
        wanted = _MOMENTS if centred else _MOMENTS[:1]
        new_state = {}
        for i, saved in state_dict["state"].items():
            p = params[indices.index(int(i))]
            entry = {"step": torch.as_tensor(saved["step"]).to(dtype=torch.float32).clone()}
            for key in wanted:
                if key not in saved:
                    raise ValueError(f"loaded state dict has no {key} for parameter {i}")
                value = torch.as_tensor(saved[key])
                if value.shape != p.shape:
                    raise ValueError(
                        f"loaded state dict's {key} has shape {list(value.shape)}, its parameter "
                        f"{list(p.shape)}"
                    )
                entry[key] = value.to(device=p.device, dtype=p.dtype, copy=True)
            new_state[p] = entry
        self.state = new_state
        self.param_groups[0].update(settings)


@torch.no_grad()
def rmsprop_step(items: list[tuple[RMSprop, list[torch.Tensor | None]]]) -> None:
    """One RMSprop step for several optimisers at once: each ``(optimizer, grads)`` gives the
    gradients of its parameters in order (None: not stepped). One run of foreach calls per
    distinct ``(lr, alpha, eps, centered)``; each op treats every tensor on its own."""
    groups = by_setting(
        items,
        lambda g: (float(g["lr"]), float(g["alpha"]), float(g["eps"]), bool(g["centered"])),
        ("square_avg", "step", "grad_avg"),  # the mean gradient: centred only
    )
    for (lr, alpha, eps, centered), t in groups.items():
        params, grads, squares, means = t["params"], t["grads"], t["square_avg"], t["grad_avg"]
        torch._foreach_add_(t["step"], 1)
        torch._foreach_mul_(squares, alpha)
        torch._foreach_addcmul_(squares, grads, grads, value=1 - alpha)
        if centered:
            torch._foreach_lerp_(means, grads, 1 - alpha)
            avg = torch._foreach_addcmul(squares, means, means, value=-1)
            torch._foreach_sqrt_(avg)
            torch._foreach_add_(avg, eps)
        else:
            avg = torch._foreach_sqrt(squares)
            torch._foreach_add_(avg, eps)
        torch._foreach_addcdiv_(params, grads, avg, value=-lr)
