"""Factories: the device, the envs, the replay memory and the agent a config describes.

Shared by training (``run``), ``per-dqn eval``, ``per-dqn plan`` and the benchmarks, so that every
one of them builds each part exactly as training does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from per_dqn import memory
from per_dqn.agent import DQNAgent, objectives
from per_dqn.config import Config, ReplayConfig
from per_dqn.envs import families
from per_dqn.envs.make import EnvSpec
from per_dqn.memory import REPLAY_KINDS, ReplayMemory


def resolve_device(name: str) -> torch.device:
    """``auto`` -> CUDA when available, else CPU.

    Raises:
        ValueError: a name other than ``auto``, ``cpu`` or ``cuda`` (the API takes any string;
            the config's checked already), or ``cuda`` asked for on a machine without a usable
            CUDA device.
    """
    if name not in ("auto", "cpu", "cuda"):
        raise ValueError(f"`device` must be 'auto', 'cpu' or 'cuda', got {name!r}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("run.device: 'cuda' was asked for but torch.cuda.is_available() is False")
    return torch.device(name)


def set_torch_threads(device: torch.device, threads: int) -> None:
    """``run.torch_threads`` intra-op threads on CPU: a small network gains nothing from more,
    which only contend with the envs (and 10 CartPole eval episodes took 6x longer on all cores)."""
    if device.type == "cpu":
        torch.set_num_threads(threads)


def uses_frame_storage(config: ReplayConfig, spec: EnvSpec) -> bool:
    """Whether the memory keeps frames once: asked for, and observations are uint8 stacks."""
    return config.dedup_frames and len(spec.obs_shape) == 3 and spec.obs_dtype == np.uint8


def make_memory(config: ReplayConfig, spec: EnvSpec, seed: int | None) -> ReplayMemory:
    """The replay memory ``config.kind`` names, sized for ``spec``'s observations.

    The kind's own settings are the ones its registry entry lists (``REPLAY_KINDS``), read from
    ``config``; nothing here knows a kind.
    """
    kind = REPLAY_KINDS[config.kind]
    kwargs: dict[str, Any] = {
        "capacity": config.capacity,
        "obs_shape": spec.obs_shape,
        "obs_dtype": spec.obs_dtype,
        "seed": seed,
    }
    if uses_frame_storage(config, spec):
        kwargs.update(dedup_frames=True, frame_slack=config.frame_slack)
    kwargs.update(kind.keywords(config))
    return memory.make_memory(config.kind, **kwargs)


def make_agent(config: Config, spec: EnvSpec, device: torch.device) -> DQNAgent:
    """The agent ``config.agent`` describes, sized for ``spec``."""
    agent = config.agent
    kind = REPLAY_KINDS[config.replay.kind]
    network = agent.network
    if network == families.AUTO_NETWORK:
        network = families.of(config.env.id).default_network
    return DQNAgent(
        obs_shape=spec.obs_shape,
        num_actions=spec.num_actions,
        hidden_sizes=agent.hidden_sizes,
        dueling=agent.dueling,
        double=agent.double,
        gamma=agent.gamma,
        learning_rate=agent.learning_rate,
        adam_eps=agent.adam_eps,
        loss=agent.loss,
        grad_clip_norm=agent.grad_clip_norm,
        target_update_interval=agent.target_update_interval,
        tau=agent.tau,
        device=device,
        network=network,
        channels_last=agent.channels_last,
        precision=agent.precision,
        optimizer=agent.optimizer,
        rmsprop_alpha=agent.rmsprop_alpha,
        rmsprop_eps=agent.rmsprop_eps,
        rmsprop_centered=agent.rmsprop_centered,
        init=agent.init,
        conv_padding=agent.conv_padding,
        priority_signal=config.priority_signal(),
        objective=objectives.spec_from(kind.objective, agent.loss, vars(config.replay)),
    )
