"""LAP's and PAL's per-sample losses as single autograd nodes with their gradients written out.

Autograd records each of the dozen small elementwise ops of these losses (a where, a clamp, a
power, the normaliser) and replays a dozen more backward; on a CPU and a batch of 32, that
bookkeeping, not the arithmetic, is what LAP and PAL cost over a Huber step
(``docs/benchmarks.md``).
Here each loss is one node, whose backward is the derivative in closed form:

- LAP: ``dH_k(|d|)/dq = clamp(d, -k, k)``, with ``d = q - y``. The same bits as autograd's
  chain through the where, the products and the abs: its terms are ``g 0.5 |d|`` twice (exact
  halves of ``g |d|``, summed exactly) or ``g k``, times ``sign(d)``
  (``tests/agent/test_objectives.py`` pins it, and with it the LAP runs made before). Only
  below float32's normal range (``|g d|`` under 2^-126, a TD error of about 1e-37) is a halving
  inexact, and a gradient may differ there in its last bit.
- PAL: ``dL/dq = clamp(d, -k, k) max(|d|, k)^alpha / lambda``, ``lambda`` held constant as the
  source detaches it; its losses to float32 rounding of the source's (two products fewer).

Both work over the last dimension, as the objectives do (``(B,)`` alone, ``(K, B)`` a pack),
and a pack's member gets the bits it gets alone (``rowwise_pow``). The module imports torch
alone: ``objectives.py`` imports it when a loss is first computed.
"""

from __future__ import annotations

import torch


def rowwise_pow(x: torch.Tensor, exponent: float) -> torch.Tensor:
    """``x ** exponent``, one call per row of the last dimension: torch computes a power with
    vector instructions over the bulk of a tensor and in scalar code over its tail, which can
    differ in the last bit, so a pack's member gets the bits it gets alone only if its row is
    computed alone."""
    if x.dim() == 1 or x.numel() == x.shape[-1]:
        return x.pow(exponent)
    rows = x.reshape(-1, x.shape[-1])
    return torch.stack([row.pow(exponent) for row in rows.unbind(0)]).reshape(x.shape)


class LAPLoss(torch.autograd.Function):
    """``H_k(|q - y|)`` per sample: ``0.5 d^2`` where ``|d| < k``, else ``k |d|``."""

    @staticmethod
    def forward(ctx, q_taken: torch.Tensor, targets: torch.Tensor, kappa: float) -> torch.Tensor:
        delta = q_taken - targets
        td_abs = delta.abs()
        ctx.save_for_backward(delta)
        ctx.kappa = kappa
        return torch.where(td_abs < kappa, 0.5 * td_abs * td_abs, kappa * td_abs)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        (delta,) = ctx.saved_tensors
        grad_q = grad * delta.clamp(-ctx.kappa, ctx.kappa)
        grad_y = -grad_q if ctx.needs_input_grad[1] else None
        return grad_q if ctx.needs_input_grad[0] else None, grad_y, None


class PALLoss(torch.autograd.Function):
    """PAL's per-sample loss, divided by ``lambda``, and ``lambda`` (no gradient) per row."""

    @staticmethod
    def forward(
        ctx, q_taken: torch.Tensor, targets: torch.Tensor, kappa: float, alpha: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        delta = q_taken - targets
        td_abs = delta.abs()
        # max(d, k) ** alpha: lambda's terms, and from k on d ** alpha, so that d ** (1 + alpha)
        # is d times it (one power, not two).
        floored = rowwise_pow(td_abs.clamp(min=kappa), alpha)
        lam = floored.mean(dim=-1, keepdim=True)
        # k^alpha 0.5 d^2 below k, k d^(1 + alpha) / (1 + alpha) from k on: d times one of two
        # scaled terms, six ops where the source's formula takes eight.
        scaled = torch.where(
            td_abs < kappa, td_abs * (kappa**alpha * 0.5), floored * (kappa / (1.0 + alpha))
        )
        per_sample = scaled * td_abs / lam
        ctx.save_for_backward(delta, floored, lam)
        ctx.kappa = kappa
        lam = lam.squeeze(-1)
        ctx.mark_non_differentiable(lam)
        return per_sample, lam

    @staticmethod
    def backward(
        ctx, grad: torch.Tensor, _grad_lam: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        delta, floored, lam = ctx.saved_tensors
        grad_q = grad * delta.clamp(-ctx.kappa, ctx.kappa) * floored / lam
        grad_y = -grad_q if ctx.needs_input_grad[1] else None
        return grad_q if ctx.needs_input_grad[0] else None, grad_y, None, None
