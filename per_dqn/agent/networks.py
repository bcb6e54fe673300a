"""Q-network: an MLP torso for vector observations and a linear or dueling head.

The forward pass calls ``F.linear`` on the layers' parameters instead of calling each submodule:
for networks this small, PyTorch's per-module call overhead (hooks, dispatch) costs more than the
arithmetic, and the loop runs three forwards per gradient step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F


class QNetwork(nn.Module):
    """Maps a batch of observations to one Q-value per action.

    Torso: ``Linear -> ReLU`` for each hidden width, on the flattened observation. Head: one
    linear layer, or the dueling head (Wang et al., 2016, eq. 9)::

        Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')

    whose mean-subtraction makes ``V`` identifiable: the mean over actions of ``Q`` is exactly
    ``V``. Both dueling streams are single linear layers on the shared torso.

    Args:
        obs_shape: shape of one observation.
        num_actions: number of discrete actions.
        hidden_sizes: widths of the hidden layers, at least one.
        dueling: dueling head instead of a linear one.
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        num_actions: int,
        hidden_sizes: Sequence[int],
        dueling: bool,
    ) -> None:
        super().__init__()
        if not hidden_sizes:
            raise ValueError("`hidden_sizes` must list at least one width, got []")
        in_features = 1
        for dim in obs_shape:
            in_features *= int(dim)
        self.hidden = nn.ModuleList()
        for width in hidden_sizes:
            self.hidden.append(nn.Linear(in_features, width))
            in_features = width
        self.dueling = dueling
        # Under dueling, `advantage` is A(s, .) and `value` is V(s); otherwise `advantage` is the
        # plain Q head and `value` is absent.
        self.advantage = nn.Linear(in_features, num_actions)
        self.value = nn.Linear(in_features, 1) if dueling else None

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """The torso's output for float observations of shape ``(B, *obs_shape)``."""
        x = obs.flatten(1)
        for layer in self.hidden:
            x = torch.relu(F.linear(x, layer.weight, layer.bias))
        return x

    def head(self, features: torch.Tensor) -> torch.Tensor:
        """Q-values from torso features, shape ``(B, num_actions)``."""
        advantage = F.linear(features, self.advantage.weight, self.advantage.bias)
        if self.value is None:
            return advantage
        value = F.linear(features, self.value.weight, self.value.bias)
        return value + (advantage - advantage.mean(dim=1, keepdim=True))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values for float observations of shape ``(B, *obs_shape)``."""
        return self.head(self.features(obs))

    def greedy_actions(self, obs: torch.Tensor) -> torch.Tensor:
        """``argmax_a Q(obs, a)``; under dueling only ``A`` is computed, as ``V`` and
        ``mean A`` shift every action's value alike and cannot change the argmax."""
        features = self.features(obs)
        return F.linear(features, self.advantage.weight, self.advantage.bias).argmax(dim=1)
