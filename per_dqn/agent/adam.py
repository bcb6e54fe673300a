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


class FusedAdam:
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
        params = list(params)
        if not params:
            raise ValueError("`params` must hold at least one parameter, got none")
        if not lr >= 0.0:
            raise ValueError(f"`lr` must be >= 0, got {lr}")
        if not eps >= 0.0:
            raise ValueError(f"`eps` must be >= 0, got {eps}")
        if not all(0.0 <= beta < 1.0 for beta in betas):
            raise ValueError(f"`betas` must be in [0, 1), got {betas}")
        # torch.optim.Adam's group keys and defaults, so that state_dict() matches its own.
        self.param_groups: list[dict[str, Any]] = [
            {
                "params": params,
                "lr": lr,
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
            }
        ]
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

    @torch.no_grad()
    def step(self) -> None:
        """One Adam step for the parameters that have a gradient (``torch.optim.Adam``'s
        ``_fused_adam``, for one device and dtype)."""
        group = self.param_groups[0]
        params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state.get(p)
            if state is None:
                # As torch.optim.Adam's _init_group with fused=True: a float32 step on p's device.
                state = self.state[p] = {
                    "step": torch.zeros((), dtype=torch.float32, device=p.device),
                    "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                }
            params.append(p)
            grads.append(p.grad)
            exp_avgs.append(state["exp_avg"])
            exp_avg_sqs.append(state["exp_avg_sq"])
            steps.append(state["step"])
        if not params:
            return
        beta1, beta2 = group["betas"]
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(
            params, grads, exp_avgs, exp_avg_sqs, [], steps,
            amsgrad=False, lr=group["lr"], beta1=beta1, beta2=beta2,
            weight_decay=group["weight_decay"], eps=group["eps"], maximize=False,
            grad_scale=None, found_inf=None,
        )  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.Adam.state_dict()``'s layout: parameters as indices, the state's tensors
        themselves (not copies)."""
        group = self.param_groups[0]
        index = {id(p): i for i, p in enumerate(group["params"])}
        return {
            "state": {index[id(p)]: dict(s) for p, s in self.state.items()},
            # "params" last, as torch packs it: the same keys in the same order pickle alike.
            "param_groups": [
                {
                    **{key: value for key, value in group.items() if key != "params"},
                    "params": list(range(len(group["params"]))),
                }
            ],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores ``state_dict()`` output, or ``torch.optim.Adam``'s: copies of the moments on
        each parameter's device and dtype, the step as a float32 there (as ``torch.optim.Adam``
        with ``fused=True`` loads them), and the group's settings.

        Raises:
            ValueError: a state dict for another number of groups or parameters, or with moments
                of another shape.
        """
        params = self.param_groups[0]["params"]
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(params):
            sizes = [len(g["params"]) for g in groups]
            raise ValueError(
                f"loaded state dict has parameter groups of sizes {sizes}, this optimizer one of "
                f"{len(params)}"
            )
        new_state = {}
        for i, saved in state_dict["state"].items():
            p = params[groups[0]["params"].index(int(i))]
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
        settings = {key: value for key, value in groups[0].items() if key != "params"}
        self.state = new_state
        self.param_groups[0].update(settings)
