"""Adam through torch's fused kernel, without ``torch.optim``'s import of ``torch._dynamo``.

Every public method of ``torch.optim.Optimizer`` (construction included) is wrapped in
``torch._disable_dynamo``, whose first call imports ``torch._dynamo``: 1.1 s of a CartPole run's
~4 s start on the 2-core development machine, the largest single cost after ``import torch``
itself (``python -X importtime``). ``foreach`` or single-tensor Adam import it just the same.

``FusedAdam`` calls the very kernel ``torch.optim.Adam(fused=True)`` calls
(``torch._fused_adam_``, after adding 1 to each parameter's float32 step count), with the same
arguments, so the weights it produces are bit for bit those of ``torch.optim.Adam(fused=True)``
(``tests/agent/test_adam.py`` compares them step by step). Its ``state_dict`` has
``torch.optim.Adam``'s layout and values, so a checkpoint written with either loads into either.

Only what ``DQNAgent`` uses is offered: one parameter group, no weight decay, no AMSGrad, no
gradient scaler.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from per_dqn.agent.group import OneGroupOptimizer, by_setting


class FusedAdam(OneGroupOptimizer):
    """Adam (Kingma & Ba, 2015) for one group of parameters, on torch's fused kernel.

    Args:
        params: the parameters to optimise.
        lr: step size.
        betas: the moments' decay rates.
        eps: the denominator guard.

    Raises:
        ValueError: no parameters, or a setting out of range.
    """

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        if not all(0.0 <= beta < 1.0 for beta in betas):
            raise ValueError(f"`betas` must be in [0, 1), got {betas}")
        # torch.optim.Adam's group keys and defaults, so that state_dict() matches its own.
        super().__init__(
            params,
            lr,
            eps,
            {
                "betas": tuple(betas),
                "eps": eps,
                "weight_decay": 0,
                "amsgrad": False,
                "maximize": False,
                "foreach": None,
                "capturable": False,
                "differentiable": False,
                "fused": True,
                "decoupled_weight_decay": False,
            },
        )

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step for the parameters that have a gradient (``torch.optim.Adam``'s
        ``_fused_adam``, for one device and dtype)."""
        fused_adam_step([(self, [p.grad for p in self.param_groups[0]["params"]])])

    def _state_of(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        """``p``'s state, created as torch.optim.Adam's _init_group does with fused=True (a
        float32 step on p's device) when it has none yet."""
        state = self.state.get(p)
        if state is None:
            state = self.state[p] = {
                "step": torch.zeros((), dtype=torch.float32, device=p.device),
                "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
            }
        return state

    # --- in a pack (agent/pack.py) -------------------------------------------------------------

    def export_moments(self) -> list[tuple[torch.Tensor, torch.Tensor, float] | None]:
        """Each parameter's ``(exp_avg, exp_avg_sq, step)`` (copies), None where it has none."""
        out: list[tuple[torch.Tensor, torch.Tensor, float] | None] = []
        for p in self.param_groups[0]["params"]:
            state = self.state.get(p)
            if state is None:
                out.append(None)
            else:
                out.append(
                    (state["exp_avg"].clone(), state["exp_avg_sq"].clone(), float(state["step"]))
                )
        return out

    def adopt(
        self,
        params: list[torch.nn.Parameter],
        views: dict[int, tuple[torch.Tensor, torch.Tensor]],
        moments: list[tuple[torch.Tensor, torch.Tensor, float] | None],
    ) -> None:
        """Takes ``params`` (the same parameters, re-pointed by a pack) in place of the old ones,
        with every parameter's state created now: its moments in ``views[id(param)]`` where the
        pack stacks them, else tensors of its own, holding ``moments`` (``export_moments``)."""
        if len(params) != len(self.param_groups[0]["params"]) or len(moments) != len(params):
            raise ValueError("a pack re-pointed a different number of parameters")
        self.param_groups[0]["params"] = params
        self.state = {}
        for p, saved in zip(params, moments, strict=True):
            view = views.get(id(p))
            if view is None:
                state = self._state_of(p)
            else:
                state = self.state[p] = {
                    "step": torch.zeros((), dtype=torch.float32, device=p.device),
                    "exp_avg": view[0],
                    "exp_avg_sq": view[1],
                }
            if saved is not None:
                state["exp_avg"].copy_(saved[0])
                state["exp_avg_sq"].copy_(saved[1])
                state["step"].fill_(saved[2])

    def _saved(self, state: dict[str, torch.Tensor]) -> bool:
        # A parameter never stepped has no state, as in torch.optim.Adam (a pack creates every
        # state up front, at step 0).
        return float(state["step"]) > 0

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores ``state_dict()`` output, or ``torch.optim.Adam``'s: copies of the moments on
        each parameter's device and dtype, the step as a float32 there (as ``torch.optim.Adam``
        with ``fused=True`` loads them), and the group's settings.

        Raises:
            ValueError: a state dict for another number of groups or parameters, or with moments
                of another shape.
        """
        params = self.param_groups[0]["params"]
        indices, settings = self._loaded_group(state_dict)
        new_state = {}
        for i, saved in state_dict["state"].items():
            p = params[indices.index(int(i))]
            moments = {}
            for key in ("exp_avg", "exp_avg_sq"):
                value = torch.as_tensor(saved[key])
                if value.shape != p.shape:
                    raise ValueError(
                        f"loaded state dict's {key} has shape {list(value.shape)}, its parameter "
                        f"{list(p.shape)}"
                    )
                moments[key] = value.to(device=p.device, dtype=p.dtype, copy=True)
            step = torch.as_tensor(saved["step"]).to(device=p.device, dtype=torch.float32)
            new_state[p] = {"step": step.clone(), **moments}
        # Into the existing tensors, which may be a pack's views; a parameter the dict gives no
        # state (never stepped) gets zeros at step 0.
        for p in params:
            state = self.state.get(p)
            loaded = new_state.get(p)
            if state is None:
                if loaded is not None:
                    self.state[p] = loaded
                continue
            for key in ("exp_avg", "exp_avg_sq"):
                if loaded is None:
                    state[key].zero_()
                else:
                    state[key].copy_(loaded[key])
            state["step"].copy_(loaded["step"] if loaded is not None else 0.0)
        self.param_groups[0].update(settings)


@torch.no_grad()
def fused_adam_step(items: list[tuple[FusedAdam, list[torch.Tensor | None]]]) -> None:
    """One Adam step for several optimisers at once: each ``(optimizer, grads)`` gives the
    gradients of its parameters in order (None: that parameter has none and is not stepped).
    One call of torch's fused kernel per distinct ``(lr, betas, eps)``; the kernel treats every
    tensor on its own, so each optimiser's numbers are those of its own ``step``."""
    groups = by_setting(
        items,
        lambda group: (float(group["lr"]), tuple(group["betas"]), float(group["eps"])),
        ("exp_avg", "exp_avg_sq", "step"),
    )
    for (lr, (beta1, beta2), eps), t in groups.items():
        torch._foreach_add_(t["step"], 1)
        torch._fused_adam_(
            t["params"], t["grads"], t["exp_avg"], t["exp_avg_sq"], [], t["step"],
            amsgrad=False, lr=lr, beta1=beta1, beta2=beta2, weight_decay=0, eps=eps,
            maximize=False, grad_scale=None, found_inf=None,
        )  # fmt: skip
