"""The MinAtar family: MinAtar's games (Young & Tian, 2019), ``MinAtar/<Game>-v1``, 10x10 bool
object layers, made by ``gym.make`` (the ``minatar`` extra) and laid out channel first.

A MinAtar game keeps its whole state in plain attributes of two objects: the ``Environment``
(sticky-action memory, its RandomState) and the game inside it (positions, timers, lists of
entities as lists of ints or None, numpy maps). ``GAME_STATE`` reads and writes them as a tree of
JSON values and arrays, so a resumed run continues the same episodes exactly; the one RandomState
both objects share stays shared.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from per_dqn.envs.families.family import Family, GameState

if TYPE_CHECKING:
    import gymnasium as gym
    from gymnasium.vector import VectorEnv

    from per_dqn.config import EnvConfig


def _register(env_id: str) -> None:
    """Registers MinAtar's gymnasium ids (the ``minatar`` extra), once: MinAtar's own
    (``minatar.gym``), or, for a release whose ``minatar.gym`` predates gymnasium (1.0.10 and
    older), the same ids on ``per_dqn.envs.minatar_gym.MinAtarEnv``.

    Raises:
        ValueError: the extra is not installed.
    """
    import gymnasium as gym

    from per_dqn.envs import minatar_gym
    from per_dqn.envs.common import registered_under_a_version

    if env_id in gym.registry or registered_under_a_version(env_id):
        return  # registering again would make gymnasium warn once per env
    try:
        import minatar
    except ImportError:
        raise ValueError(
            f"env.id: {env_id} needs the minatar package: pip install 'per-dqn[minatar]'"
        ) from None
    if not minatar_gym.has_gymnasium_envs():
        minatar_gym.register_envs()
        return
    import minatar.gym

    minatar.gym.register_envs()


def make_one(config: EnvConfig, render_mode: str | None = None) -> gym.Env:
    """One MinAtar game, its layers channel first; ``env.full_action_space`` asks for MinAtar's
    six actions whatever the id's version registered."""
    from per_dqn.envs.common import ChannelFirst, make_gym

    _register(config.id)
    extra = {"use_minimal_action_set": False} if config.full_action_space else {}
    return ChannelFirst(make_gym(config, FAMILY, render_mode, **extra))


def make_vector(config: EnvConfig) -> VectorEnv:
    """``config.num_envs`` copies of ``make_one``."""
    from per_dqn.envs.common import sync_vector

    return sync_vector(config, make_one)


def make_eval(config: EnvConfig, render: bool, view: str) -> gym.Env:
    """One ``make_one``, filmed by MinAtar's own render."""
    from per_dqn.envs.common import single_eval

    return single_eval(config, render, view, make_one)


# --- the game's state -----------------------------------------------------------------------------

# The Environment's own attributes; the game's are all of its attributes but the skipped.
_OUTER = ("last_action", "sticky_action_prob")
_SKIPPED = ("channels", "action_map", "random")  # constants, and the shared RandomState


def _plain(value: Any) -> Any:
    """A game attribute as JSON values and arrays (numpy scalars become Python ones)."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"a MinAtar game attribute of type {type(value).__name__} cannot be saved")


def save_game(layer: Any) -> dict[str, Any]:
    """The state of the MinAtar env ``layer`` (``minatar.gym.BaseEnv`` or
    ``minatar_gym.MinAtarEnv``) as a tree."""
    game = layer.game
    name, keys, pos, has_gauss, cached = game.random.get_state()
    return {
        "outer": {key: _plain(getattr(game, key)) for key in _OUTER},
        "game": {
            key: _plain(value) for key, value in vars(game.env).items() if key not in _SKIPPED
        },
        "random": {"name": name, "keys": keys.copy(), "pos": int(pos),
                   "has_gauss": int(has_gauss), "cached": float(cached)},
    }  # fmt: skip


def load_game(layer: Any, state: Mapping[str, Any]) -> None:
    """Puts ``save_game``'s tree back into ``layer``."""
    import numpy as np

    game = layer.game
    for key, value in state["outer"].items():
        setattr(game, key, value)
    for key, value in state["game"].items():
        setattr(game.env, key, value.copy() if isinstance(value, np.ndarray) else value)
    r = state["random"]
    game.random.set_state(
        (r["name"], np.asarray(r["keys"], dtype=np.uint32), r["pos"], r["has_gauss"], r["cached"])
    )


def check_game(layer: Any, state: Mapping[str, Any]) -> None:
    """Raises ValueError for a MinAtar state of another game or a malformed one."""
    import numpy as np

    game = layer.game
    mine = set(vars(game.env)) - set(_SKIPPED)
    if set(state["game"]) != mine or set(state["outer"]) != set(_OUTER):
        raise ValueError(f"the checkpoint's MinAtar state is not {game.env_name}'s")
    r = state["random"]
    np.random.RandomState().set_state(
        (r["name"], np.asarray(r["keys"], dtype=np.uint32), r["pos"], r["has_gauss"], r["cached"])
    )


GAME_STATE = GameState(field="minatar", save=save_game, check=check_game, load=load_game)

FAMILY = Family(
    name="minatar",
    title="MinAtar",
    description="MinAtar's games (Young & Tian, 2019): 10x10 bool object layers",
    namespace="MinAtar/",
    example_id="MinAtar/Breakout-v1",
    # The object layers are not frames: the MinAtar paper's network, not the Nature CNN.
    default_network="minatar_cnn",
    frame_skip=None,
    max_episode_frames=None,  # MinAtar sets no time limit
    eval_episode_frames=None,
    eval_total_frames=None,
    env_keys=frozenset({"full_action_space"}),  # its own sticky actions are MinAtar's (0.1)
    game_package="minatar",
    make_vector=make_vector,
    make_eval=make_eval,
    saves_state=True,
    # minatar.gym.BaseEnv, and minatar_gym.MinAtarEnv for MinAtar 1.0.10: the game's whole state.
    physics_fields={"BaseEnv": ("minatar",), "MinAtarEnv": ("minatar",)},
    wrapper_fields={"ChannelFirst": ()},
    game_state=GAME_STATE,
)
