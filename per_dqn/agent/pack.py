"""K DQN agents of one architecture that act and learn as one: a pack.

Every ``DQNAgent`` with a built-in network belongs to a pack; a single run's agent is a pack of
one, so a run computes the same way alone and packed (issue 24).

How it computes:

- Each member keeps its own ``online`` and ``target`` modules, but the weights and biases of their
  linear layers (the MLP's hidden layers, the CNNs' fc layer, the head) are views into tensors of
  the pack stacked along a first dim of K: ``(K, out, in)`` and ``(K, out)``. A linear layer of
  the whole pack is one ``torch.baddbmm``. The dueling head's two streams are one stacked layer of
  ``num_actions + 1`` outputs (the advantage rows, then the value row).
- Convolutions run per member, on the member's own conv parameters, as a single agent runs them.
- Adam is torch's fused kernel over every member's parameter tensors (each member's slice of a
  stacked tensor is a tensor of its own to the kernel), one call per learning rate; RMSprop is
  torch's foreach ops over them, one run per setting (``agent/optim.py``).
- Gradient clipping, the target update and the update counter are per member.

Why the outcome does not depend on who else is in the pack: on CPU, each slice of a ``baddbmm``
over K members is bit-equal to the same ``baddbmm`` over any other set of members holding it
(forward and backward, any batch size, outputs of two or more: ``tests/agent/test_pack.py``
checks the whole update, pack of 1 against packs of 4 and 16). One output is the exception
(a ``baddbmm`` over one member then takes another kernel), which is why the dueling head's value
row rides with the advantage rows. A ``torch.nn.functional.linear`` per member, or a grouped
convolution, is not invariant so: they take other kernels for one member than for several.
Elementwise ops, reductions along the last dim and the fused Adam kernel work row by row or
tensor by tensor, so a member's numbers never meet another's.

A member that learns alone (the others are not due) learns through copies of its slices, which
keeps the invariance: the copies hold the same numbers.

One module though past 500 lines: stacking the members' layers and moments, the one forward pass and
the one update, and each member's own slices handed back all rest on one layout of the stacked
tensors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import nn

from per_dqn.agent import layout
from per_dqn.agent.adam import FusedAdam
from per_dqn.agent.networks import QNetwork
from per_dqn.agent.optim import step_all
from per_dqn.agent.result import HostLayout, LearnResult, learn_result
from per_dqn.memory import Batch

if TYPE_CHECKING:
    from per_dqn.agent.dqn import DQNAgent


def can_pack(network: nn.Module) -> bool:
    """Whether a network's linear layers can be stacked: the built-in networks only (a user's
    ``package.module:factory`` network is an opaque module)."""
    return isinstance(network, QNetwork)


def pack_key(agent: DQNAgent) -> tuple:
    """What must be equal for agents to share a pack: the network's class and every tensor's
    shape, and the update's settings other than the learning rate (and the discount, applied on
    the host per member)."""
    shapes = tuple((name, tuple(p.shape)) for name, p in agent.online.named_parameters())
    return (
        type(agent.online).__name__,
        shapes,
        agent.online.dueling,
        agent.double,
        agent.loss_name,
        agent.objective,
        type(agent.optimizer).__name__,
        agent.grad_clip_norm,
        agent.precision,
        str(agent.device),
        getattr(agent.online, "channels_last", False),
    )


def _linears(net: QNetwork) -> list[tuple[str, list[nn.Linear]]]:
    """The stacked layers' members in the network: each hidden layer, then the head (the
    advantage layer and, under dueling, the value layer, stacked as one)."""
    layers = [(f"hidden.{i}", [layer]) for i, layer in enumerate(net.hidden)]
    head = [net.advantage] if net.value is None else [net.advantage, net.value]
    return [*layers, ("head", head)]


class _StackedLinear(torch.autograd.Function):
    """``h @ weight^T + bias`` over a pack, ``(K, B, in)`` by ``(K, out, in)``, whose backward
    gives the weight's gradient as ``grad^T @ h``, ``(K, out, in)`` in the weight's own layout.

    Autograd's backward of the same ``baddbmm`` computes ``h^T @ grad`` (``(K, in, out)``, a
    slower product here) and hands its transpose to the leaf, which copies it into the weight's
    layout on every step: on a CPU, most of the layer's backward (MinAtar's fc layer, 1024 in and
    128 out, in a pack of 5). Each slice of both products is bit-equal across pack sizes
    (``tests/agent/test_pack.py``), as the forward's is.
    """

    @staticmethod
    def forward(ctx, h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(h, weight)
        return torch.baddbmm(bias.unsqueeze(1), h, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        h, weight = ctx.saved_tensors
        grad_h = torch.bmm(grad, weight) if ctx.needs_input_grad[0] else None
        grad_weight = torch.bmm(grad.transpose(1, 2), h) if ctx.needs_input_grad[1] else None
        grad_bias = grad.sum(dim=1) if ctx.needs_input_grad[2] else None
        return grad_h, grad_weight, grad_bias


@dataclass
class _Stack:
    """One stacked linear layer: ``weight`` ``(K, out, in)`` and ``bias`` ``(K, out)``."""

    weight: torch.Tensor
    bias: torch.Tensor


def _stack(nets: Sequence[QNetwork], grad: bool) -> list[_Stack]:
    """Stacks the nets' linear layers (copies of their values) and re-points each net's layers at
    its slices, so that the net and the pack share the numbers from then on."""
    stacks = []
    for index, (_, _) in enumerate(_linears(nets[0])):
        per_net = [_linears(net)[index][1] for net in nets]
        weight = torch.stack([torch.cat([x.weight.detach() for x in ls]) for ls in per_net])
        bias = torch.stack([torch.cat([x.bias.detach() for x in ls]) for ls in per_net])
        weight.requires_grad_(grad)
        bias.requires_grad_(grad)
        for k, layers in enumerate(per_net):
            row = 0
            for layer in layers:
                rows = layer.out_features
                layer.weight = nn.Parameter(weight[k, row : row + rows], requires_grad=grad)
                layer.bias = nn.Parameter(bias[k, row : row + rows], requires_grad=grad)
                row += rows
        stacks.append(_Stack(weight, bias))
    return stacks


class Pack:
    """Agents that act and learn as one (see the module docstring).

    Building a pack stacks the members' current weights and Adam moments and re-points the
    members at their slices; each member keeps working through its own methods (``learn``,
    ``greedy_actions``, ``state_dict``...), which call the pack with itself alone.

    Args:
        agents: the members, all with one ``pack_key``; each is left in this pack (an agent's
            previous pack, its pack of one, is dropped).

    Raises:
        ValueError: members that cannot share a pack (one line naming the first difference).
    """

    def __init__(self, agents: Sequence[DQNAgent]) -> None:
        if not agents:
            raise ValueError("a pack needs at least one agent")
        first = agents[0]
        if not can_pack(first.online):
            raise ValueError(
                "agent.network: a network from 'package.module:factory' cannot be packed"
            )
        key = pack_key(first)
        for agent in agents[1:]:
            if pack_key(agent) != key:
                raise ValueError(
                    "agents of different networks or update settings cannot share a pack"
                )
        self.agents = list(agents)
        self.size = len(agents)
        self.device = first.device
        self.dueling = first.online.dueling
        self.num_actions = first.num_actions
        self.double = first.double
        self.objective = first.objective
        self.grad_clip_norm = first.grad_clip_norm
        self.precision = first.precision
        # A network with a stem (convolutions) runs it per member.
        self.cnn = bool(first._conv_params())
        self.nhwc_batches = first._nhwc_batches
        # The moments first (they are copied from each member's own), then the weights.
        moments = [agent.optimizer.export_moments() for agent in agents]
        self.online = _stack([a.online for a in agents], grad=True)
        self.target = _stack([a.target for a in agents], grad=False)
        for k, agent in enumerate(agents):
            agent._join(self, k)
        self._stack_moments(moments)
        # Per member, fixed from here on: its parameters in order (online, target, the convs it
        # keeps), and where each online parameter's gradient lies: a (layer, first row, rows)
        # of the stacked layers, or None for a conv parameter (its own .grad).
        self._params = [list(a.online.parameters()) for a in agents]
        self._target_params = [list(a.target.parameters()) for a in agents]
        self._convs = [a._conv_params() for a in agents]
        self._grad_at: list[list[tuple[int, str, int, int] | None]] = []
        for agent, params in zip(agents, self._params, strict=True):
            where: dict[int, tuple[int, str, int, int]] = {}
            for index, (_, layers) in enumerate(_linears(agent.online)):
                row = 0
                for layer in layers:
                    rows = layer.out_features
                    where[id(layer.weight)] = (index, "weight", row, row + rows)
                    where[id(layer.bias)] = (index, "bias", row, row + rows)
                    row += rows
            self._grad_at.append([where.get(id(p)) for p in params])

    def _stack_moments(self, moments: list[list[tuple[torch.Tensor, torch.Tensor, float]]]) -> None:
        """Gives each member an Adam whose moments of stacked layers are views into stacked
        tensors (``self.exp_avg``, ``self.exp_avg_sq``), and those of its convs its own. Members
        with another optimiser (RMSprop) keep their state in tensors of their own: no stacks."""
        stacked = {}
        adam = all(isinstance(agent.optimizer, FusedAdam) for agent in self.agents)
        for which in ("exp_avg", "exp_avg_sq") if adam else ():
            stacked[which] = [
                (torch.zeros_like(s.weight, requires_grad=False),
                 torch.zeros_like(s.bias, requires_grad=False))
                for s in self.online
            ]  # fmt: skip
        self.exp_avg, self.exp_avg_sq = stacked.get("exp_avg", []), stacked.get("exp_avg_sq", [])
        for k, agent in enumerate(self.agents):
            views = {}
            for index, (_, layers) in enumerate(_linears(agent.online)):
                row = 0
                for layer in layers:
                    rows = layer.out_features
                    views[id(layer.weight)] = tuple(
                        stacked[w][index][0][k, row : row + rows] for w in stacked
                    )
                    views[id(layer.bias)] = tuple(
                        stacked[w][index][1][k, row : row + rows] for w in stacked
                    )
                    row += rows
            agent.optimizer.adopt(list(agent.online.parameters()), views, moments[k])

    # --- acting --------------------------------------------------------------------------------

    def _autocast(self) -> torch.autocast:
        return torch.autocast(
            self.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16"
        )

    def _layers(self, stacks: list[_Stack], slots: Sequence[int], grad: bool) -> list[_Stack]:
        """The stacked layers for ``slots``: the pack's own tensors when every member takes part,
        else copies of the slots' slices (leaves of their own when ``grad``)."""
        if len(slots) == self.size and list(slots) == list(range(self.size)):
            return stacks
        index = torch.as_tensor(list(slots), device=self.device)
        out = []
        for s in stacks:
            weight = s.weight.detach().index_select(0, index)
            bias = s.bias.detach().index_select(0, index)
            out.append(_Stack(weight.requires_grad_(grad), bias.requires_grad_(grad)))
        return out

    def _features(self, which: str, slots: Sequence[int], x: list[torch.Tensor]) -> torch.Tensor:
        """``(K', B, F)``: each slot's input through its conv torso (per member), flattened and
        stacked; an MLP's prepared inputs stacked as they are."""
        if not self.cnn:
            return torch.stack(x)
        return torch.stack([self._conv_torso(which, k, xk) for k, xk in zip(slots, x, strict=True)])

    def _conv_torso(self, which: str, slot: int, x: torch.Tensor) -> torch.Tensor:
        """A member's stem (its convolutions) on its prepared input, flattened ``(B, F)``."""
        return getattr(self.agents[slot], which).stem(x)

    def _linear(self, s: _Stack, h: torch.Tensor) -> torch.Tensor:
        """One stacked linear layer on ``(K', B, in)``: through ``_StackedLinear`` where autograd
        records it (the weights' gradient in their layout), else a plain ``baddbmm``. Under bf16
        autocast autograd's own backward runs (autocast casts the product's inputs)."""
        if torch.is_grad_enabled() and s.weight.requires_grad and self.precision != "bf16":
            return _StackedLinear.apply(h, s.weight, s.bias)
        return torch.baddbmm(s.bias.unsqueeze(1), h, s.weight.transpose(1, 2))

    def _q(self, layers: list[_Stack], h: torch.Tensor) -> torch.Tensor:
        """Q-values ``(K', B, A)`` from stacked features ``(K', B, F)``."""
        for s in layers[:-1]:
            h = torch.relu(self._linear(s, h))
        out = self._linear(layers[-1], h)
        if not self.dueling:
            return out
        advantage, value = out[..., : self.num_actions], out[..., self.num_actions :]
        return value + (advantage - advantage.mean(dim=-1, keepdim=True))

    def _advantage(self, layers: list[_Stack], h: torch.Tensor) -> torch.Tensor:
        """The head's advantage outputs (the Q-values without dueling): what the greedy action
        needs, as ``V`` and ``mean A`` shift every action alike."""
        for s in layers[:-1]:
            h = torch.relu(self._linear(s, h))
        return self._linear(layers[-1], h)[..., : self.num_actions]

    def _host_obs(self, obs: np.ndarray) -> torch.Tensor:
        obs = obs if obs.dtype == np.uint8 else obs.astype(np.float32, copy=False)
        return torch.as_tensor(obs, device=self.device)

    def _span(self, stacks: list[_Stack], lo: int, hi: int) -> list[_Stack]:
        """Views of slots ``lo`` to ``hi - 1`` of the stacked layers (no copy)."""
        if lo == 0 and hi == self.size:
            return stacks
        return [_Stack(s.weight[lo:hi], s.bias[lo:hi]) for s in stacks]

    def _inference(self, obs: Mapping[int, np.ndarray], advantage_only: bool) -> dict:
        """The head's outputs for each member's observations: the pack's layers over the span
        of slots that asked, as views, with zeros in for a slot in between that did not (its
        rows are computed and dropped: cheaper than copying the askers' slices out)."""
        slots = sorted(obs)
        lo, hi = slots[0], slots[-1] + 1
        x = {k: self.agents[k].online.prepare(self._host_obs(obs[k])) for k in slots}
        with self._autocast():
            if self.cnn:
                feats = {k: self._conv_torso("online", k, x[k]) for k in slots}
            else:
                feats = x
            first = feats[slots[0]]
            h = torch.stack([feats[k] if k in feats else torch.zeros_like(first)
                             for k in range(lo, hi)])  # fmt: skip
            layers = self._span(self.online, lo, hi)
            out = self._advantage(layers, h) if advantage_only else self._q(layers, h)
        return {k: out[k - lo] for k in slots}

    @torch.inference_mode()
    def greedy_actions(self, obs: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        """``argmax_a Q(obs, a)`` for each member's batch of observations (one shape for all)."""
        out = self._inference(obs, advantage_only=True)
        slots = sorted(out)
        host = torch.stack([out[k].argmax(dim=-1) for k in slots]).cpu().numpy()
        return {k: host[i] for i, k in enumerate(slots)}

    @torch.inference_mode()
    def q_values(self, obs: Mapping[int, np.ndarray]) -> dict[int, np.ndarray]:
        """``Q(obs, .)`` of each member's online network, float32 ``(B, num_actions)``."""
        out = self._inference(obs, advantage_only=False)
        return {k: q.float().cpu().numpy() for k, q in out.items()}

    # --- learning ------------------------------------------------------------------------------

    def _batch_obs(self, agent: DQNAgent, batch: Batch) -> torch.Tensor:
        """A member's s and s' ``(2B, ...)`` on the device, as ``DQNAgent.learn`` took them."""
        if self.nhwc_batches and layout.can_pack(batch.obs) and layout.can_pack(batch.next_obs):
            nhwc = torch.as_tensor(layout.stack_nhwc(batch.obs, batch.next_obs), device=self.device)
            return nhwc.permute(0, 3, 1, 2)
        both = np.concatenate((batch.obs, batch.next_obs))
        return self._host_obs(both)

    def learn(self, batches: Mapping[int, Batch]) -> dict[int, LearnResult]:
        """One gradient step for each member given a batch (one batch size for all), as
        ``DQNAgent.learn`` documents it; returns each member's ``LearnResult``."""

        slots = sorted(batches)
        agents = [self.agents[k] for k in slots]
        size = batches[slots[0]].actions.shape[0]
        if any(batches[k].actions.shape[0] != size for k in slots):
            raise ValueError("every member of a pack learns from batches of one size")
        scalars = np.stack(
            [
                np.stack(
                    (
                        batches[k].rewards,
                        agent._gamma_powers[batches[k].n_steps] * ~batches[k].terminated,
                        batches[k].weights,
                    )
                )
                for k, agent in zip(slots, agents, strict=True)
            ],
            axis=1,
        ).astype(np.float32)
        rewards, discounts, weights = torch.as_tensor(scalars, device=self.device)  # (K', B)
        actions = torch.as_tensor(np.stack([batches[k].actions for k in slots]), device=self.device)
        both = [
            agent.online.prepare(self._batch_obs(agent, batches[k]))
            for k, agent in zip(slots, agents, strict=True)
        ]
        # Members whose priority signal reads the target net's Q(s, a) (reducible loss): a pass
        # of their own, so that the other members' numbers are those of a run alone.
        asking = [i for i, agent in enumerate(agents) if agent.priority_signal.needs_target]
        online = self._layers(self.online, slots, True)
        target = self._layers(self.target, slots, False)
        objective = self.objective
        s_x = [x[:size] for x in both]
        with self._autocast():
            if objective.entry.pick is None:
                h = self._features("online", slots, s_x)
                q_pred = self._q(online, h)
            with torch.no_grad():
                next_x = [x[size:] for x in both]
                h_next = self._features("online", slots, next_x) if self.double else None
                next_q_online = None if h_next is None else self._q(online, h_next)
                h_target = self._features("target", slots, next_x)
                next_q_target = self._q(target, h_target)
        next_q_target = next_q_target.float()
        if next_q_online is None:
            next_value = next_q_target.max(dim=-1).values
        else:
            best = next_q_online.float().argmax(dim=-1, keepdim=True)
            next_value = next_q_target.gather(-1, best).squeeze(-1)
        targets = (rewards + discounts * next_value).detach()
        picked = None
        if objective.entry.pick is not None:
            # The large batch's Q(s, a) without gradients, the picks, then the forward pass with
            # gradients on the picked samples alone.
            with torch.no_grad(), self._autocast():
                q_all = self._q(online, self._features("online", slots, s_x))
            q_all = q_all.float().gather(-1, actions.unsqueeze(-1)).squeeze(-1)
            uniforms = np.stack([batches[k].picks for k in slots])
            picks = torch.as_tensor(uniforms, dtype=torch.float32, device=self.device)
            picked = objective.pick(q_all, targets, picks)
            chosen = picked.chosen
            s_x = [x.index_select(0, chosen[i]) for i, x in enumerate(s_x)]
            targets, actions, weights = (
                targets.gather(-1, chosen), actions.gather(-1, chosen), picked.weights,
            )  # fmt: skip
            with self._autocast():
                q_pred = self._q(online, self._features("online", slots, s_x))
        q_target = None
        if asking:
            with torch.no_grad(), self._autocast():
                q_target = self._target_q([slots[i] for i in asking], target, slots,
                                          [s_x[i] for i in asking])  # fmt: skip
        taken = actions.unsqueeze(-1)
        q_taken = q_pred.float().gather(-1, taken).squeeze(-1)
        out = objective(q_taken, targets, weights)
        loss = out.loss

        conv_params = [p for k in slots for p in self._convs[k]]
        for p in conv_params:
            p.grad = None
        for s in online:
            s.weight.grad = None
            s.bias.grad = None
        loss.sum().backward()
        grads = self._member_grads(slots, online)
        extras = [loss.detach(), out.per_sample.detach().mean(dim=1)]
        with torch.no_grad():
            if self.grad_clip_norm is not None:
                extras.append(self._clip(grads))
            if picked is not None:
                extras.extend(picked.metrics.values())
            extras.extend(out.metrics.values())
            step_all([(agent.optimizer, g) for agent, g in zip(agents, grads, strict=True)])
            due = []
            for agent in agents:
                agent.update_steps += 1
                if agent.update_steps % agent.target_update_interval == 0:
                    due.append(agent)
            if due:
                self._update_targets(due)

        rows = [targets, q_taken.detach()]
        if q_target is not None:
            full = torch.zeros_like(targets)
            full[asking] = q_target.float().gather(-1, taken[asking]).squeeze(-1)
            rows.append(full)
        if picked is not None:
            rows.append(picked.chosen.float())
        host = torch.cat((*rows, torch.stack(extras, dim=1)), dim=1)
        host = host.cpu().numpy()
        metrics = (*(picked.metrics if picked is not None else ()), *out.metrics)
        host_layout = HostLayout(
            out.per_sample.shape[-1], q_target is not None, picked is not None,
            self.grad_clip_norm is not None, metrics,
        )  # fmt: skip
        return {
            k: learn_result(host[i], batches[k].indices, host_layout, agent.priority_signal,
                            agent.loss_name)
            for i, (k, agent) in enumerate(zip(slots, agents, strict=True))
        }  # fmt: skip

    def _target_q(
        self, asking: list[int], target: list[_Stack], slots: list[int], x: list[torch.Tensor]
    ) -> torch.Tensor:
        """The target nets' ``Q(s, .)`` ``(len(asking), B, A)`` of the members in ``asking``
        (slots), on their prepared ``s``; ``target`` is the stacked target layers of ``slots``."""
        layers = target if asking == slots else self._layers(self.target, asking, False)
        return self._q(layers, self._features("target", asking, x))

    def _member_grads(self, slots: Sequence[int], online: list[_Stack]) -> list[list[torch.Tensor]]:
        """Each member's gradients in the order of its ``online.parameters()``, also set as
        those parameters' ``.grad`` (views: no copy), where torch users look for them."""
        out = []
        for i, slot in enumerate(slots):
            grads = []
            for p, at in zip(self._params[slot], self._grad_at[slot], strict=True):
                if at is None:
                    grad = p.grad if p.grad is not None else torch.zeros_like(p)
                else:
                    index, which, first, last = at
                    grad = getattr(online[index], which).grad[i, first:last]
                    p.grad = grad
                grads.append(grad)
            out.append(grads)
        return out

    def _clip(self, grads: list[list[torch.Tensor]]) -> torch.Tensor:
        """Scales each member's gradients to a global norm of at most ``grad_clip_norm`` (as
        ``torch.nn.utils.clip_grad_norm_``); returns each member's norm before clipping."""
        norms = []
        for member in grads:
            norm = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(g) for g in member])
            )
            coef = torch.clamp(self.grad_clip_norm / (norm + 1e-6), max=1.0)
            torch._foreach_mul_(member, coef)
            norms.append(norm)
        return torch.stack(norms)

    def _update_targets(self, agents: Sequence[DQNAgent]) -> None:
        """``target <- tau * online + (1 - tau) * target`` for each agent (a copy at ``tau == 1``),
        on its own tensors (its modules' parameters, views): one foreach call per ``tau``."""
        by_tau: dict[float, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        for agent in agents:
            targets, onlines = by_tau.setdefault(float(agent.tau), ([], []))
            targets.extend(self._target_params[agent._slot])
            onlines.extend(p.detach() for p in self._params[agent._slot])
        for tau, (targets, onlines) in by_tau.items():
            if tau == 1.0:
                torch._foreach_copy_(targets, onlines)
            else:
                torch._foreach_lerp_(targets, onlines, tau)
