"""The only place gymnasium (and, later, ale-py) environments and wrappers are chosen.

Training uses a ``SyncVectorEnv`` in gymnasium 1.x's default ``NEXT_STEP`` autoreset mode: after a
sub-env's episode ends (terminated or truncated), the *next* ``step`` call only resets that
sub-env, returning its first observation with reward 0 and both flags False, and ignores the
action. The observation returned on the ending step is the true final observation (there is no
``final_obs`` in ``info`` in this mode). ``train.py`` relies on exactly this; ``tests/test_envs.py``
pins it.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from per_dqn.config import EnvConfig

# Ids in this namespace are Atari games: they need the ALE preprocessing pipeline, which a later
# issue adds here. Refusing them now beats training a CNN-less agent on raw frames.
_ATARI_NAMESPACE = "ALE/"


@dataclass(frozen=True)
class EnvSpec:
    """What the agent and the memory need to know about an environment.

    Attributes:
        obs_shape: shape of one observation.
        obs_dtype: numpy dtype of observations (stored as is by the memory).
        num_actions: size of the discrete action space.
    """

    obs_shape: tuple[int, ...]
    obs_dtype: np.dtype
    num_actions: int


def _make_one(config: EnvConfig) -> gym.Env:
    """One environment with its registered wrappers (time limit included)."""
    if config.id.startswith(_ATARI_NAMESPACE):
        raise ValueError(f"env.id: Atari environments are not supported yet, got {config.id!r}")
    kwargs = {}
    if config.max_episode_steps is not None:
        kwargs["max_episode_steps"] = config.max_episode_steps
    try:
        # The passive checker costs a few microseconds per step and only re-checks what
        # `describe` verifies once.
        return gym.make(config.id, disable_env_checker=True, **kwargs)
    except gym.error.Error as exc:
        raise ValueError(f"env.id: cannot make {config.id!r}: {exc}") from None


def describe(env: gym.Env | SyncVectorEnv) -> EnvSpec:
    """Checks that the spaces suit DQN and returns their shapes.

    Raises:
        ValueError: a non-discrete action space or a non-Box observation space.
    """
    if isinstance(env, SyncVectorEnv):
        obs_space, act_space = env.single_observation_space, env.single_action_space
    else:
        obs_space, act_space = env.observation_space, env.action_space
    if not isinstance(act_space, gym.spaces.Discrete):
        raise ValueError(f"env.id: DQN needs a Discrete action space, got {act_space}")
    if not isinstance(obs_space, gym.spaces.Box):
        raise ValueError(f"env.id: expected a Box observation space, got {obs_space}")
    return EnvSpec(tuple(obs_space.shape), np.dtype(obs_space.dtype), int(act_space.n))


def make_vector_env(config: EnvConfig) -> SyncVectorEnv:
    """``config.num_envs`` copies stepped in lock-step, autoreset on the next step.

    Raises:
        ValueError: an unknown or unsupported id, or spaces DQN cannot use.
    """
    first = _make_one(config)  # fails fast, with our message, before any other copy is made
    envs = [first] + [_make_one(config) for _ in range(config.num_envs - 1)]
    vector = SyncVectorEnv(
        [lambda env=env: env for env in envs], autoreset_mode=AutoresetMode.NEXT_STEP
    )
    describe(vector)
    return vector


def make_eval_env(config: EnvConfig) -> gym.Env:
    """A single environment, separate from the training ones, for greedy evaluation.

    Raises:
        ValueError: an unknown or unsupported id.
    """
    return _make_one(config)
