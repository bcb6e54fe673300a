"""The classic family: classic control and any other gymnasium id (CartPole-like), via
``gym.make``. It is the fallback: it takes every id no other family's namespace claims.

Its envs' state is their physics (``PHYSICS_FIELDS``) and RNG, so a resumed run continues the same
episodes exactly. An env class not named there (a user's ``module:EnvName``) is not saved: the
resume says so and restarts it from a seeded reset.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from per_dqn.envs.families.family import AUTO_NETWORK, Family

if TYPE_CHECKING:
    import gymnasium as gym
    from gymnasium.vector import VectorEnv

    from per_dqn.config import EnvConfig

# The physics state of each supported classic-control env: what `step` reads besides the RNG.
PHYSICS_FIELDS: dict[str, tuple[str, ...]] = {
    "CartPoleEnv": ("state", "steps_beyond_terminated"),
    "AcrobotEnv": ("state",),
    "MountainCarEnv": ("state",),
    "Continuous_MountainCarEnv": ("state",),
    "PendulumEnv": ("state", "last_u"),
}


def make_vector(config: EnvConfig) -> VectorEnv:
    """``config.num_envs`` copies of ``gym.make(config.id)``."""
    from per_dqn.envs.common import make_gym, sync_vector

    return sync_vector(config, partial(make_gym, family=FAMILY))


def make_eval(config: EnvConfig, render: bool, view: str) -> gym.Env:
    """One ``gym.make(config.id)``, filmed by its own render."""
    from per_dqn.envs.common import make_gym, single_eval

    return single_eval(config, render, view, partial(make_gym, family=FAMILY))


FAMILY = Family(
    name="classic",
    title="CartPole-like",
    description="classic control and any other gymnasium id (CartPole-like), via gym.make",
    namespace=None,
    example_id="CartPole-v1",
    default_network=AUTO_NETWORK,
    frame_skip=None,
    max_episode_frames=None,
    eval_episode_frames=None,  # CartPole's time limit already ends an episode at 500
    eval_total_frames=None,
    # A gymnasium id whose info reports lives (Breakout-v4) loses them as Atari's do.
    env_keys=frozenset({"terminal_on_life_loss"}),
    game_package=None,  # gymnasium's, recorded for every run
    make_vector=make_vector,
    make_eval=make_eval,
    saves_state=True,
    physics_fields=PHYSICS_FIELDS,
    wrapper_fields={},
    game_state=None,
)
