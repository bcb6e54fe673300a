"""Q-networks: an MLP torso for vector observations or the Nature CNN for stacked frames, each with
a linear or dueling head.

The forward pass calls ``F.linear`` on the layers' parameters instead of calling each submodule:
for networks this small, PyTorch's per-module call overhead (hooks, dispatch) costs more than the
arithmetic, and the loop runs three forwards per gradient step.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from per_dqn.config.messages import error_text
from per_dqn.envs import families


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
        hidden_sizes: widths of the hidden layers; none makes Q linear in the observation (a
            CNN's head then sits on its convolutions, as in Dopamine's MinAtar network).
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

    def prepare(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations ``(B, *obs_shape)`` (any dtype) as the torso takes them: flat float32.

        ``DQNAgent.learn`` prepares s' once for both the online and the target net (the two are
        the same class), so the conversion is paid once per batch, not once per forward.
        """
        return obs.flatten(1).float()

    def torso(self, x: torch.Tensor) -> torch.Tensor:
        """The torso's output for ``prepare``'d observations."""
        for layer in self.hidden:
            x = torch.relu(F.linear(x, layer.weight, layer.bias))
        return x

    def stem(self, x: torch.Tensor) -> torch.Tensor:
        """What comes before the linear layers (a CNN's convolutions), flattened to
        ``(B, features)``: the part a pack (``agent/pack.py``) runs per member. The MLP has
        none."""
        return x

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """The torso's output for observations of shape ``(B, *obs_shape)`` (any dtype)."""
        return self.torso(self.prepare(obs))

    def head(self, features: torch.Tensor) -> torch.Tensor:
        """Q-values from torso features, shape ``(B, num_actions)``."""
        advantage = F.linear(features, self.advantage.weight, self.advantage.bias)
        if self.value is None:
            return advantage
        value = F.linear(features, self.value.weight, self.value.bias)
        return value + (advantage - advantage.mean(dim=1, keepdim=True))

    def q_values(self, x: torch.Tensor) -> torch.Tensor:
        """Q-values ``(B, num_actions)`` for ``prepare``'d observations."""
        return self.head(self.torso(x))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values for observations of shape ``(B, *obs_shape)``."""
        return self.q_values(self.prepare(obs))

    def greedy_actions(self, obs: torch.Tensor) -> torch.Tensor:
        """``argmax_a Q(obs, a)``; under dueling only ``A`` is computed, as ``V`` and
        ``mean A`` shift every action's value alike and cannot change the argmax."""
        features = self.features(obs)
        return F.linear(features, self.advantage.weight, self.advantage.bias).argmax(dim=1)


class NatureCNN(QNetwork):
    """The Nature-DQN convolutional torso (Mnih et al., 2015) under the same heads as ``QNetwork``.

    ``uint8`` stacks of shape ``(B, stack, 84, 84)`` go in as they are and are scaled to [0, 1]
    inside the network, so the replay memory, the host-to-device copy and the batch stay uint8
    (a quarter of the bytes of float32). Torso: conv 32 8x8 stride 4, conv 64 4x4 stride 2,
    conv 64 3x3 stride 1, each with ReLU, then a fully connected layer of ``hidden_sizes[0]``
    units (512 in the paper). Dueling (Wang et al., 2016) puts both streams on that layer.

    Args:
        obs_shape: ``(stack, height, width)``; height and width of at least 36 (what the three
            convolutions need).
        num_actions: number of discrete actions.
        hidden_sizes: one width, the fully connected layer's.
        dueling: dueling head instead of a linear one.
        channels_last: keep activations in NHWC layout, which oneDNN's CPU convolutions run
            faster (``benchmarks/learner.py`` measures it); the values are the same.
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        num_actions: int,
        hidden_sizes: Sequence[int],
        dueling: bool,
        channels_last: bool = False,
    ) -> None:
        if len(obs_shape) != 3:
            raise ValueError(
                f"`obs_shape` must be (stack, height, width) for the CNN, got {tuple(obs_shape)}"
            )
        if len(hidden_sizes) > 1:
            raise ValueError(
                "`hidden_sizes` must hold one width (the CNN's fc layer) or none, got "
                f"{list(hidden_sizes)}"
            )
        stack, height, width = (int(d) for d in obs_shape)
        if min(height, width) < 36:
            raise ValueError(f"the CNN needs frames of at least 36x36, got {height}x{width}")
        convs = nn.Sequential(
            nn.Conv2d(stack, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
        )  # fmt: skip
        with torch.no_grad():
            flat = convs(torch.zeros(1, stack, height, width)).numel()
        # The heads and the fc layer come from the MLP's constructor, on the conv output.
        super().__init__((flat,), num_actions, hidden_sizes, dueling)
        self.convs = convs
        self.channels_last = channels_last
        if channels_last:
            self.to(memory_format=torch.channels_last)

    def prepare(self, obs: torch.Tensor) -> torch.Tensor:
        """``uint8`` (or float, 0..255) stacks ``(B, stack, H, W)`` as float32 in [0, 1], NHWC in
        memory under ``channels_last``.

        The layout change is made on the uint8 stack, before the float conversion (which keeps
        the layout): it moves a quarter of the bytes.
        """
        if self.channels_last:
            obs = obs.contiguous(memory_format=torch.channels_last)
        return obs.float().mul_(1.0 / 255.0) if obs.dtype == torch.uint8 else obs / 255.0

    def stem(self, x: torch.Tensor) -> torch.Tensor:
        """The convolutions' output for ``prepare``'d stacks, flattened."""
        return self.convs(x).flatten(1)

    def torso(self, x: torch.Tensor) -> torch.Tensor:
        """The fc layer's output for ``prepare``'d stacks."""
        return super().torso(self.stem(x))


class MinAtarCNN(QNetwork):
    """The MinAtar paper's network (Young & Tian, 2019, Section 4): one 3x3 convolution of 16
    channels, stride 1, ReLU, then a fully connected layer (128 units in the paper;
    ``hidden_sizes``) and the linear or dueling head.

    Observations are MinAtar's object layers, channel first: ``(C, 10, 10)`` of 0/1 (bool or
    uint8), taken as float 0/1 (no scaling).

    ``padding``: ``valid`` (the paper's PyTorch network, ``examples/dqn.py``: 8x8 maps from
    10x10 layers) or ``same`` (Dopamine's Flax network for MinAtar: 10x10 maps).
    """

    def __init__(
        self,
        obs_shape: Sequence[int],
        num_actions: int,
        hidden_sizes: Sequence[int],
        dueling: bool,
        padding: str = "valid",
    ) -> None:
        if len(obs_shape) != 3:
            raise ValueError(
                f"`obs_shape` must be (channels, height, width) for the MinAtar CNN, got "
                f"{tuple(obs_shape)}"
            )
        if len(hidden_sizes) > 1:
            raise ValueError(
                "`hidden_sizes` must hold one width (the MinAtar CNN's fc layer) or none, got "
                f"{list(hidden_sizes)}"
            )
        if padding not in ("valid", "same"):
            raise ValueError(f"`padding` must be 'valid' or 'same', got {padding!r}")
        channels, height, width = (int(d) for d in obs_shape)
        same = padding == "same"
        conv = nn.Conv2d(channels, 16, 3, stride=1, padding=1 if same else 0)
        flat = 16 * height * width if same else 16 * (height - 2) * (width - 2)
        super().__init__((flat,), num_actions, hidden_sizes, dueling)
        self.conv = conv

    def prepare(self, obs: torch.Tensor) -> torch.Tensor:
        """0/1 layers ``(B, C, H, W)`` of any dtype as float32."""
        return obs.float()

    def stem(self, x: torch.Tensor) -> torch.Tensor:
        """The convolution's output for ``prepare``'d layers, flattened."""
        return torch.relu(self.conv(x)).flatten(1)

    def torso(self, x: torch.Tensor) -> torch.Tensor:
        """The fc layer's output for ``prepare``'d layers."""
        return super().torso(self.stem(x))


BUILTIN_NETWORKS = (families.AUTO_NETWORK, *families.NETWORK_NAMES)


class CustomQNetwork(nn.Module):
    """A user's Q-network, from a ``"package.module:factory"`` (see ``make_q_network``), behind
    the interface the agent calls.

    The factory is called as ``factory(obs_shape, num_actions)`` and returns a module mapping a
    float32 batch ``(B, *obs_shape)`` (observations as the env gives them, uint8 frames as
    0..255 floats) to Q-values ``(B, num_actions)``.
    """

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def prepare(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations as float32."""
        return obs.float()

    def q_values(self, x: torch.Tensor) -> torch.Tensor:
        """Q-values ``(B, num_actions)`` for ``prepare``'d observations."""
        return self.module(x)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values for observations of shape ``(B, *obs_shape)``."""
        return self.q_values(self.prepare(obs))

    def greedy_actions(self, obs: torch.Tensor) -> torch.Tensor:
        """``argmax_a Q(obs, a)``."""
        return self.forward(obs).argmax(dim=1)


def resolve_factory(spec: str) -> Callable[..., nn.Module]:
    """The callable a ``"package.module:factory"`` string names (``factory`` may be dotted, e.g.
    ``Class.method``).

    Raises:
        ValueError: one line starting with ``agent.network`` when it cannot be imported or is
            not callable.
    """
    module_name, sep, qualname = spec.partition(":")
    if not sep or not module_name or not qualname:
        raise ValueError(
            f"agent.network: must be one of {', '.join(BUILTIN_NETWORKS)} or "
            f"'package.module:factory', got {spec!r}"
        )
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
    except Exception as exc:  # an import runs user code, which may raise anything
        raise ValueError(
            f"agent.network: cannot import {spec!r} ({error_text(exc, 200)})"
        ) from None
    if not callable(target):
        raise ValueError(f"agent.network: {spec!r} is a {type(target).__name__}, not callable")
    return target


def network_name(network: str | Callable[..., Any]) -> str:
    """A Q-network factory as the ``"package.module:factory"`` string a config records.

    A callable must be importable by that name (a module-level function or class), so that
    ``load`` and ``--resume`` can build the network again from the run's ``config.yaml``.

    Raises:
        ValueError: a lambda, a nested function or anything else that cannot be found by name.
    """
    if isinstance(network, str):
        return network
    module = getattr(network, "__module__", None)
    qualname = getattr(network, "__qualname__", None)
    if not callable(network) or not module or not qualname or "<" in qualname:
        raise ValueError(
            f"network: {network!r} cannot be found again by name; pass a module-level function "
            "or class (or its 'package.module:factory' string)"
        )
    name = f"{module}:{qualname}"
    if resolve_factory(name) is not network:
        raise ValueError(f"network: {name} does not name {network!r} when imported")
    return name


def _custom(spec: str, obs_shape: Sequence[int], num_actions: int) -> CustomQNetwork:
    """Builds and probes a user's network (see ``CustomQNetwork``)."""
    factory = resolve_factory(spec)
    shape = tuple(int(d) for d in obs_shape)
    try:
        module = factory(shape, num_actions)
    except Exception as exc:
        raise ValueError(
            f"agent.network: {spec}{(shape, num_actions)} raised {error_text(exc, 200)}"
        ) from None
    if not isinstance(module, nn.Module):
        raise ValueError(
            f"agent.network: {spec} returned a {type(module).__name__}, not a torch.nn.Module"
        )
    if not any(True for _ in module.parameters()):
        raise ValueError(f"agent.network: {spec} returned a module without parameters")
    for key, value in module.state_dict().items():
        if not isinstance(value, torch.Tensor):
            # Checkpoints are read back with torch.load(weights_only=True), and a distributed
            # run's actors load the learner's weights: tensors only, nothing unpickled.
            raise ValueError(
                f"agent.network: {spec}'s module holds {key!r} (a {type(value).__name__}) in its "
                "state_dict: a checkpoint, and the weights a distributed run's actors pull, "
                "carry tensors only (move it into a buffer, or leave it out of the state)"
            )
    network = CustomQNetwork(module)
    try:
        with torch.no_grad():
            out = network(torch.zeros((2, *shape)))
    except Exception as exc:
        raise ValueError(
            f"agent.network: {spec}'s module fails on a batch of shape {(2, *shape)} "
            f"({error_text(exc, 200)})"
        ) from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, num_actions):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(
            f"agent.network: {spec}'s module must map a batch of shape {(2, *shape)} to Q-values "
            f"of shape {(2, num_actions)}, got {got}"
        )
    return network


# The built-in networks by name, ``(obs_shape, num_actions, hidden_sizes, dueling,
# channels_last) -> module``: one entry for each of ``families.NETWORK_NAMES``
# (``tests/test_families.py`` builds every family's default through ``make_q_network``).
NETWORKS: dict[str, Callable[..., nn.Module]] = {
    "mlp": lambda shape, actions, sizes, dueling, _: QNetwork(shape, actions, sizes, dueling),
    "nature_cnn": NatureCNN,
    "minatar_cnn": lambda shape, actions, sizes, dueling, _, padding="valid": MinAtarCNN(
        shape, actions, sizes, dueling, padding
    ),
}

INITS = ("torch", "xavier_uniform")


@torch.no_grad()
def initialize(network: nn.Module, init: str) -> None:
    """Re-initialises a built-in network's weights: ``torch`` keeps PyTorch's layer defaults
    (nothing to do); ``xavier_uniform`` draws every linear and convolution weight from Glorot's
    uniform distribution (fans as ``torch.nn.init`` and Flax count them: a convolution's include
    its kernel's size) and zeroes the biases, as Flax's ``Dense`` and ``Conv`` do with
    ``kernel_init=xavier_uniform()``. Layers in construction order, from torch's generator.

    Raises:
        ValueError: an unknown scheme.
    """
    if init not in INITS:
        raise ValueError(f"`init` must be one of {', '.join(INITS)}, got {init!r}")
    if init == "torch":
        return
    for module in network.modules():
        if isinstance(module, nn.Linear | nn.Conv2d):
            nn.init.xavier_uniform_(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def make_q_network(
    obs_shape: Sequence[int],
    num_actions: int,
    hidden_sizes: Sequence[int],
    dueling: bool,
    network: str = "auto",
    channels_last: bool = False,
    conv_padding: str = "valid",
) -> nn.Module:
    """The Q-network ``network`` names; ``auto`` picks the CNN for 3-D observations, and
    ``"package.module:factory"`` builds a user's network (``CustomQNetwork``).

    Raises:
        ValueError: an unknown ``network``, a factory that cannot be imported or builds a module
            of the wrong output shape, or a shape a built-in network cannot take.
    """
    if network == families.AUTO_NETWORK:
        network = "nature_cnn" if len(obs_shape) == 3 else "mlp"
    if conv_padding != "valid" and network != "minatar_cnn":
        raise ValueError(
            f"agent.conv_padding: must be 'valid' for network {network!r} (only 'minatar_cnn' "
            f"takes 'same'), got {conv_padding!r}"
        )
    if network not in NETWORKS:
        return _custom(network, obs_shape, num_actions)
    # Which observations an env gives is known only once it is made, so a built-in network that
    # cannot take them is refused here, naming the key that chose it.
    try:
        if network == "minatar_cnn":
            return NETWORKS[network](
                obs_shape, num_actions, hidden_sizes, dueling, False, conv_padding
            )
        return NETWORKS[network](obs_shape, num_actions, hidden_sizes, dueling, channels_last)
    except ValueError as exc:
        raise ValueError(f"agent.network {network!r}: {exc}") from None
