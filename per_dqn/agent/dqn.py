"""Double/Dueling DQN learner: targets, the IS-weighted loss, the optimiser and the target net.

The agent never logs and never touches the replay memory: ``learn`` returns metrics and a
``PriorityUpdate`` (the sampled slots with their new priorities, made of the agent's priority
signal, ``signals.py``), and the training loop hands it to the memory whole (Acme's losses return
keys with their priorities the same way).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from per_dqn.agent import layout, signals
from per_dqn.agent.networks import NatureCNN, QNetwork, initialize, make_q_network
from per_dqn.agent.objectives import ObjectiveSpec
from per_dqn.agent.optim import make_optimizer
from per_dqn.agent.pack import Pack, can_pack
from per_dqn.agent.result import HostLayout, LearnResult, learn_result
from per_dqn.agent.signals import LOSSES
from per_dqn.config.messages import one_line
from per_dqn.memory import Batch


def td_targets(
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    next_q_target: torch.Tensor,
    next_q_online: torch.Tensor | None = None,
) -> torch.Tensor:
    """Bootstrapped targets ``y = R + discount * Q_target(s', a*)``.

    With ``next_q_online`` this is the Double-DQN target (van Hasselt et al., 2016, eq. 4): the
    online net picks ``a* = argmax_a Q_online(s', a)`` and the target net evaluates it, which
    removes the max operator's overestimation bias. Without it, ``a* = argmax_a Q_target(s', a)``
    (Mnih et al., 2015).

    Args:
        rewards: ``(B,)`` discounted n-step rewards ``R = sum_k gamma**k r_{t+k}``.
        discounts: ``(B,)`` ``gamma ** n_steps`` where ``s'`` is not terminal, 0 where it is
            (truncation is not termination: a truncated window still bootstraps).
        next_q_target: ``(B, A)`` target-net Q-values at ``s'``.
        next_q_online: ``(B, A)`` online-net Q-values at ``s'`` (Double DQN), or None.

    Returns:
        ``(B,)`` targets, detached from both nets.
    """
    if next_q_online is None:
        next_value = next_q_target.max(dim=1).values
    else:
        best = next_q_online.argmax(dim=1, keepdim=True)
        next_value = next_q_target.gather(1, best).squeeze(1)
    return (rewards + discounts * next_value).detach()


class DQNAgent:
    """Online and target Q-networks, their optimiser (Adam or RMSprop), and the DQN update.

    Args:
        obs_shape: shape of one observation.
        num_actions: number of discrete actions.
        hidden_sizes: MLP widths (the CNN's fc width).
        dueling: dueling head.
        double: Double-DQN targets.
        gamma: discount per env step.
        learning_rate: the optimiser's step size.
        adam_eps: Adam's denominator guard.
        optimizer: ``adam`` (``FusedAdam``) or ``rmsprop`` (``RMSprop``, with
            ``rmsprop_alpha``, ``rmsprop_eps`` and ``rmsprop_centered``).
        init: the networks' initial weights, ``torch`` or ``xavier_uniform``
            (``networks.initialize``).
        conv_padding: the MinAtar CNN's padding, ``valid`` or ``same``.
        loss: ``huber`` (smooth L1, delta 1) or ``mse``.
        priority_signal: what ``learn``'s priorities are made of, a name in
            ``signals.PRIORITY_SIGNALS`` (``replay.priority_from``): ``td_error`` is ``|delta|``.
        objective: what a step minimises (``objectives.ObjectiveSpec``; None: ``weighted``, the
            IS-weighted ``loss``); its ``loss`` must be ``loss``.
        grad_clip_norm: global gradient-norm clip (None: none).
        target_update_interval: gradient steps between target updates.
        tau: target update weight, ``target <- tau * online + (1 - tau) * target``; 1 is a copy.
        device: where the networks live.
        network: ``auto`` (CNN for 3-D observations, else MLP), ``mlp`` or ``nature_cnn``.
        channels_last: NHWC activations for the CNN (faster convolutions on CPU).
        precision: ``fp32``, or ``bf16`` to run every forward pass (acting and learning) under
            bfloat16 autocast; parameters, gradients, Adam, the loss and the targets stay float32.
    """

    def __init__(
        self,
        *,
        obs_shape: Sequence[int],
        num_actions: int,
        hidden_sizes: Sequence[int],
        dueling: bool,
        double: bool,
        gamma: float,
        learning_rate: float,
        adam_eps: float,
        loss: Literal["huber", "mse"],
        grad_clip_norm: float | None,
        target_update_interval: int,
        tau: float,
        device: torch.device,
        network: str = "auto",
        channels_last: bool = False,
        precision: Literal["fp32", "bf16"] = "fp32",
        optimizer: Literal["adam", "rmsprop"] = "adam",
        rmsprop_alpha: float = 0.95,
        rmsprop_eps: float = 0.01,
        rmsprop_centered: bool = True,
        init: str = "torch",
        conv_padding: str = "valid",
        priority_signal: str = "td_error",
        objective: ObjectiveSpec | None = None,
    ) -> None:
        if loss not in LOSSES:
            raise ValueError(f"`loss` must be 'huber' or 'mse', got {loss!r}")
        self.priority_signal = signals.priority_signal(priority_signal)
        self.objective = ObjectiveSpec(loss=loss) if objective is None else objective
        if self.objective.loss != loss:
            raise ValueError(
                f"`objective` computes the {self.objective.loss!r} loss, not the agent's {loss!r}"
            )
        if precision not in ("fp32", "bf16"):
            raise ValueError(f"`precision` must be 'fp32' or 'bf16', got {precision!r}")
        self.device = device
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.num_actions = num_actions
        self.double = double
        self.gamma = gamma
        self.grad_clip_norm = grad_clip_norm
        self.target_update_interval = target_update_interval
        self.tau = tau
        self.loss_name = loss
        online = make_q_network(
            obs_shape, num_actions, hidden_sizes, dueling, network, channels_last, conv_padding
        )
        if isinstance(online, QNetwork):
            initialize(online, init)
        elif init != "torch":
            raise ValueError(f"agent.init: a user's network keeps its own, got {init!r}")
        self.online = online.to(device)
        self.target = copy.deepcopy(self.online)
        # A channels_last CNN gets its uint8 batches interleaved to NHWC on the host.
        self._nhwc_batches = channels_last and isinstance(self.online, NatureCNN)
        self.target.requires_grad_(False)
        # Adam: torch's fused kernel, the whole step in one call on CPU and CUDA, called as
        # torch.optim.Adam(fused=True) calls it, without torch.optim's 1.1 s import of
        # torch._dynamo (agent/adam.py); RMSprop: torch.optim.RMSprop's foreach step, likewise.
        self.optimizer = make_optimizer(
            optimizer, self.online.parameters(), learning_rate, adam_eps=adam_eps,
            rmsprop_alpha=rmsprop_alpha, rmsprop_eps=rmsprop_eps,
            rmsprop_centered=rmsprop_centered,
        )  # fmt: skip
        # gamma ** n for every n a uint8 n_steps can hold, so discounts are one lookup on the host.
        self._gamma_powers = gamma ** np.arange(256, dtype=np.float64)
        self.update_steps = 0
        self.precision = precision
        # A built-in network computes as a pack (agent/pack.py): alone, a pack of one; a user's
        # network computes through its own module.
        self._pack: Pack | None = None
        self._slot = 0
        if can_pack(self.online):
            Pack([self])

    def _join(self, pack: Pack, slot: int) -> None:
        """Called by ``Pack``: this agent is member ``slot`` of ``pack`` from now on."""
        self._pack = pack
        self._slot = slot

    def _conv_params(self) -> list[nn.Parameter]:
        """The online network's parameters outside its linear layers (its stem: a CNN's
        convolutions), those a pack leaves to each member; none for a user's network."""
        net = self.online
        if not isinstance(net, QNetwork):
            return []
        linear = {id(p) for m in (*net.hidden, net.advantage, net.value) if m is not None
                  for p in m.parameters()}  # fmt: skip
        return [p for p in net.parameters() if id(p) not in linear]

    @property
    def pack(self) -> Pack | None:
        """The pack this agent computes in (None for a user's network)."""
        return self._pack

    def _autocast(self) -> torch.autocast:
        """The forward passes' precision context (a no-op under fp32)."""
        return torch.autocast(
            self.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16"
        )

    @torch.inference_mode()
    def greedy_actions(self, obs: np.ndarray) -> np.ndarray:
        """``argmax_a Q(obs, a)`` for a batch of observations, as an int64 array."""
        if self._pack is not None:
            return self._pack.greedy_actions({self._slot: obs})[self._slot]
        obs_t = torch.as_tensor(self._host_obs(obs), device=self.device)
        with self._autocast():
            return self.online.greedy_actions(obs_t).cpu().numpy()

    @torch.inference_mode()
    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """``Q(obs, .)`` of the online network for a batch of observations, float32
        ``(B, num_actions)``."""
        if self._pack is not None:
            return self._pack.q_values({self._slot: obs})[self._slot]
        obs_t = torch.as_tensor(self._host_obs(obs), device=self.device)
        with self._autocast():
            return self.online(obs_t).float().cpu().numpy()

    @staticmethod
    def _host_obs(obs: np.ndarray) -> np.ndarray:
        """Observations as the network takes them: uint8 as is, anything else as float32."""
        return obs if obs.dtype == np.uint8 else obs.astype(np.float32, copy=False)

    @torch.inference_mode()
    def td_errors(self, batch: Batch) -> np.ndarray:
        """``|y - Q(s, a)|`` of ``batch`` under the networks as they are, without learning: the
        errors an Ape-X actor sends with its transitions as their initial priorities (Horgan et
        al., 2018; ``ReplayMemory.add_batch(..., td_abs=)``). ``y`` is ``learn``'s target
        (``td_targets``: ``R + gamma ** n * Q_target(s', a*)``, 0 past a terminal ``s'``, ``a*``
        the online net's where ``double``); float64 ``(B,)``. It runs the agent's own modules,
        not its pack's stacked layers: the values agree with ``learn``'s ``td_abs`` to float32
        rounding, not bit for bit.
        """
        size = batch.actions.shape[0]
        discounts = self._gamma_powers[batch.n_steps] * ~batch.terminated
        scalars = np.stack((batch.rewards, discounts)).astype(np.float32)
        rewards, discounts_t = torch.as_tensor(scalars, device=self.device)
        both_obs = np.concatenate((batch.obs, batch.next_obs))
        both_x = self.online.prepare(torch.as_tensor(self._host_obs(both_obs), device=self.device))
        with self._autocast():
            q = self.online.q_values(both_x[:size])
            next_q_online = self.online.q_values(both_x[size:]) if self.double else None
            next_q_target = self.target.q_values(both_x[size:])
        next_q_online = None if next_q_online is None else next_q_online.float()
        targets = td_targets(rewards, discounts_t, next_q_target.float(), next_q_online)
        actions = torch.as_tensor(batch.actions, device=self.device).unsqueeze(1)
        q_taken = q.float().gather(1, actions).squeeze(1)
        return (targets - q_taken).abs().cpu().numpy().astype(np.float64)

    def learn(self, batch: Batch) -> LearnResult:
        """One gradient step on an IS-weighted TD loss.

        ``loss = mean_i w_i * L(y_i - Q(s_i, a_i))`` with ``L`` Huber or squared error, ``y`` from
        ``td_targets`` and ``w_i`` the batch's importance-sampling weights (all 1 under uniform
        replay); then a target-net update every ``target_update_interval`` steps. The metrics
        also report ``mean_i L(y_i - Q(s_i, a_i))``, the loss without the weights.

        A built-in network learns through its pack (``Pack.learn``, the same arithmetic batched
        over members); a user's network through the steps below.
        """
        if self._pack is not None:
            return self._pack.learn({self._slot: batch})[self._slot]
        size = batch.actions.shape[0]
        # Per-sample scalars are prepared with numpy and moved in one transfer: a numpy op on 64
        # numbers costs a microsecond, a torch op several, and on CUDA each copy is a sync.
        discounts = self._gamma_powers[batch.n_steps] * ~batch.terminated
        scalars = np.stack((batch.rewards, discounts, batch.weights)).astype(np.float32)
        rewards, discounts_t, weights = torch.as_tensor(scalars, device=self.device)
        # s and s' travel (and, for Double DQN, go through the online net) together.
        # uint8 frames travel as uint8 (a quarter of the bytes) and are scaled inside the CNN.
        if self._nhwc_batches and layout.can_pack(batch.obs) and layout.can_pack(batch.next_obs):
            nhwc = torch.as_tensor(layout.stack_nhwc(batch.obs, batch.next_obs), device=self.device)
            both_obs = nhwc.permute(0, 3, 1, 2)  # (2B, C, H, W), channels_last in memory
        else:
            both_obs = torch.as_tensor(
                self._host_obs(np.concatenate((batch.obs, batch.next_obs))), device=self.device
            )
        actions = torch.as_tensor(batch.actions, device=self.device)

        # One conversion (dtype, scale, layout) for s and s', shared by the online and target
        # nets, which are the same class.
        both_x = self.online.prepare(both_obs)
        next_x = both_x[size:]
        signal, objective = self.priority_signal, self.objective
        s_x = both_x[:size]
        with self._autocast():
            if objective.entry.pick is None:
                q_pred = self.online.q_values(s_x)
            with torch.no_grad():
                # A separate no-grad pass over s': folding it into the forward above would halve
                # the calls but double the backward's matrix products, which cost more here.
                next_q_online = self.online.q_values(next_x) if self.double else None
                next_q_target = self.target.q_values(next_x)
        # Targets, the loss and the TD errors in float32 whatever the forward passes ran in.
        next_q_online = None if next_q_online is None else next_q_online.float()
        targets = td_targets(rewards, discounts_t, next_q_target.float(), next_q_online)
        picked = None
        if objective.entry.pick is not None:
            # The large batch's Q(s, a) without gradients, the picks, then the forward pass with
            # gradients on the picked samples alone (``Pack.learn`` does the same).
            with torch.no_grad(), self._autocast():
                q_all = self.online.q_values(s_x)
            q_all = q_all.float().gather(1, actions.unsqueeze(1)).squeeze(1)
            picks = torch.as_tensor(batch.picks, dtype=torch.float32, device=self.device)
            picked = objective.pick(q_all, targets, picks)
            s_x = s_x.index_select(0, picked.chosen)
            targets, actions = targets.gather(0, picked.chosen), actions.gather(0, picked.chosen)
            weights = picked.weights
            with self._autocast():
                q_pred = self.online.q_values(s_x)
        q_target = None
        if signal.needs_target:
            with torch.no_grad(), self._autocast():
                q_target = self.target.q_values(s_x)
        taken = actions.unsqueeze(1)
        q_taken = q_pred.float().gather(1, taken).squeeze(1)
        out = objective(q_taken, targets, weights)
        loss = out.loss

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        # The plain mean beside the weighted one: IS weights far below 1 make the weighted loss
        # look tiny next to |delta| (issue 14). It rides the one host copy below: no extra sync.
        extras = [loss.detach(), out.per_sample.detach().mean()]
        if self.grad_clip_norm is not None:
            extras.append(nn.utils.clip_grad_norm_(self.online.parameters(), self.grad_clip_norm))
        if picked is not None:
            extras.extend(picked.metrics.values())
        extras.extend(out.metrics.values())
        self.optimizer.step()
        self.update_steps += 1
        if self.update_steps % self.target_update_interval == 0:
            self.update_target()

        # One device-to-host copy for targets, predictions and scalars: a single sync per step.
        rows = [targets, q_taken.detach()]
        if q_target is not None:
            rows.append(q_target.float().gather(1, taken).squeeze(1))
        if picked is not None:
            rows.append(picked.chosen.float())
        host = torch.cat((*rows, torch.stack(extras))).cpu().numpy()
        metrics = (*(picked.metrics if picked is not None else ()), *out.metrics)
        host_layout = HostLayout(
            len(out.per_sample), q_target is not None, picked is not None,
            self.grad_clip_norm is not None, metrics,
        )  # fmt: skip
        return learn_result(host, batch.indices, host_layout, signal, self.loss_name)

    def state_dict(self) -> dict[str, Any]:
        """The networks, the optimiser's moments and step counts, and the update counter: copies
        (a packed agent's tensors are views into its pack's, which ``torch.save`` would write
        whole)."""
        optimizer = self.optimizer.state_dict()
        optimizer["state"] = {
            i: {key: value.detach().clone() for key, value in entry.items()}
            for i, entry in optimizer["state"].items()
        }
        return {
            "online": _copies(self.online.state_dict()),
            "target": _copies(self.target.state_dict()),
            "optimizer": optimizer,
            "update_steps": self.update_steps,
        }

    def weights(self) -> dict[str, torch.Tensor]:
        """The online network's state dict as copies of its own: what ``model.pt`` holds."""
        return _copies(self.online.state_dict())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores ``state_dict()`` output into an agent built from the same config.

        The optimiser's settings (learning rate, eps, ...) stay this agent's: a resumed run
        follows its config. Only the moments and step counts come from ``state``.

        Raises:
            ValueError: networks or an optimiser of another shape (the config changed since);
                one line.
        """
        settings = [
            {key: value for key, value in group.items() if key != "params"}
            for group in self.optimizer.param_groups
        ]
        try:
            self.online.load_state_dict(state["online"])
            self.target.load_state_dict(state["target"])
            self.optimizer.load_state_dict(state["optimizer"])
            for group, kept in zip(self.optimizer.param_groups, settings, strict=True):
                group.update(kept)
            update_steps = int(state["update_steps"])
        except (RuntimeError, ValueError, KeyError, TypeError) as exc:
            reason = one_line(exc)[:300]
            raise ValueError(f"the networks do not match this config ({reason})") from None
        self.update_steps = update_steps

    def set_learning_rate(self, learning_rate: float) -> None:
        """Sets Adam's step size for the next updates (a schedule's current value)."""
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate

    @torch.no_grad()
    def update_target(self) -> None:
        """``target <- tau * online + (1 - tau) * target`` (a hard copy when ``tau == 1``)."""
        if self._pack is not None:
            self._pack._update_targets([self])
            return
        for target, online in zip(self.target.parameters(), self.online.parameters(), strict=True):
            if self.tau == 1.0:
                target.copy_(online)
            else:
                target.lerp_(online, self.tau)


def _copies(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A state dict's tensors as contiguous copies of their own."""
    return {key: value.detach().clone(memory_format=torch.contiguous_format)
            for key, value in state.items()}  # fmt: skip
