"""A run's environments, from its config: ``make_vector_env`` (training), ``make_eval_env``
(evaluation), ``describe`` (what the agent and the memory need to know of them) and ``Envs`` (both,
with their state for checkpoints).

Which construction an id gets is its env family's (``per_dqn.envs.families``: ``Family.make_vector``
and ``make_eval``); what the families' constructions share is ``common``, and what a checkpoint
keeps of an env is ``state``. With them, the family modules are the project's whole boundary with
the environment libraries: nothing else imports them.

Training uses a vector env in gymnasium 1.x's default ``NEXT_STEP`` autoreset mode: after a
sub-env's episode ends (terminated or truncated), the *next* ``step`` call only resets that
sub-env, returning its first observation with reward 0 and both flags False, and ignores the
action. The observation returned on the ending step is the true final observation (there is no
``final_obs`` in ``info`` in this mode). ``loop.py`` relies on exactly this; ``tests/test_envs.py``
pins it, for ``SyncVectorEnv`` and for ale-py's ``AtariVectorEnv`` alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import VectorEnv

from per_dqn.config import EnvConfig
from per_dqn.envs import families
from per_dqn.envs.state import check_env_state, env_state, load_env_state

# What an eval env's ``render()`` films: the game's own screen, or the agent's preprocessed view.
VIDEO_VIEWS = ("game", "agent")


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


def describe(env: gym.Env | VectorEnv) -> EnvSpec:
    """Checks that the spaces suit DQN and returns their shapes.

    Raises:
        ValueError: a non-discrete action space or a non-Box observation space.
    """
    if isinstance(env, VectorEnv):
        obs_space, act_space = env.single_observation_space, env.single_action_space
    else:
        obs_space, act_space = env.observation_space, env.action_space
    if not isinstance(act_space, gym.spaces.Discrete):
        raise ValueError(f"env.id: DQN needs a Discrete action space, got {act_space}")
    if not isinstance(obs_space, gym.spaces.Box):
        raise ValueError(f"env.id: expected a Box observation space, got {obs_space}")
    return EnvSpec(tuple(obs_space.shape), np.dtype(obs_space.dtype), int(act_space.n))


def make_vector_env(config: EnvConfig) -> VectorEnv:
    """``config.num_envs`` copies stepped in lock-step, autoreset on the next step.

    Raises:
        ValueError: an unknown or unsupported id, or spaces DQN cannot use.
    """
    vector = families.of(config.id).make_vector(config)
    describe(vector)
    return vector


def make_eval_env(config: EnvConfig, render: bool = False, view: str = "game") -> gym.Env:
    """A single environment, separate from the training ones, for evaluation.

    Args:
        config: the env section.
        render: make ``render()`` return RGB frames (for videos).
        view: what ``render()`` films: ``game``, the game's own screen (Atari's 210x160 RGB,
            CartPole's drawing), or ``agent``, the observation the agent acts on (Atari's 84x84
            grayscale; only envs whose observations are images have one).

    Raises:
        ValueError: an unknown or unsupported id, or an ``agent`` view of an env whose
            observations are not images.
    """
    if view not in VIDEO_VIEWS:
        raise ValueError(f"video view must be one of {list(VIDEO_VIEWS)}, got {view!r}")
    return families.of(config.id).make_eval(config, render, view)


class Envs:
    """A run's environments: the training vector env and the separate evaluation env, with
    their state for checkpoints.

    Args:
        config: the env section.

    Raises:
        ValueError: an unknown or unsupported id, or spaces DQN cannot use.
    """

    def __init__(self, config: EnvConfig) -> None:
        self.train = make_vector_env(config)
        try:
            self.eval = make_eval_env(config)
        except BaseException:
            self.train.close()
            raise
        self.spec = describe(self.train)

    def close(self) -> None:
        """Closes both."""
        self.train.close()
        self.eval.close()

    @property
    def restorable(self) -> bool:
        """Whether both envs' states can be captured (classic control yes, ale-py no)."""
        return env_state(self.train) is not None and env_state(self.eval) is not None

    def state_dict(self) -> dict[str, Any]:
        """``{"train": ..., "eval": ...}``, each ``env_state``'s tree or None where the env's state
        cannot be captured."""
        return {"train": env_state(self.train), "eval": env_state(self.eval)}

    def check_state_dict(self, state: Mapping[str, Any]) -> None:
        """Raises the ``ValueError`` that ``load_state_dict`` would, and changes nothing."""
        if not isinstance(state, Mapping) or set(state) != {"train", "eval"}:
            raise ValueError("the envs' state must hold `train` and `eval`")
        for key, env in (("train", self.train), ("eval", self.eval)):
            if state[key] is not None:
                try:
                    check_env_state(env, state[key])
                except ValueError as exc:
                    raise ValueError(f"{key} env: {exc}") from None

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores ``state_dict()`` output; a None part (an env that could not be saved) leaves
        that env as it is: the caller restarts it from a seeded reset.

        Raises:
            ValueError: a state of other envs (checked whole before anything changes).
        """
        self.check_state_dict(state)
        for key, env in (("train", self.train), ("eval", self.eval)):
            if state[key] is not None:
                load_env_state(env, state[key])
