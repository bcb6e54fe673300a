"""What a checkpoint keeps of an env, and how it is put back: ``env_state``, ``check_env_state``,
``load_env_state`` (``make.Envs`` saves and restores a run's two envs with them).

A checkpoint stores an env as a tree of arrays and JSON values, never as a pickle: resuming a
run dir someone else wrote must not run whatever it holds. That means naming the state each
supported env keeps, which gymnasium keeps in private attributes: each env family names its env
classes' fields, its own wrappers' counters and, where an env's state is a whole game, how that
is read and written (``Family.physics_fields``, ``wrapper_fields``, ``game_state``); they are
read and written here only. An env with anything else in it (another wrapper, another env class,
ale-py's emulators in C++) has no state: the resume says so and restarts it from a seeded reset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import SyncVectorEnv, VectorEnv

from per_dqn.envs import families
from per_dqn.envs.families import GameState

# Every family's env classes and the attributes `step` reads besides the RNG; the game states
# by env class; and the wrappers' counters: gymnasium's that gym.make adds, and the families' own.
_PHYSICS_FIELDS: dict[str, tuple[str, ...]] = {
    name: fields for family in families.FAMILIES for name, fields in family.physics_fields.items()
}
_GAMES: dict[str, GameState] = {
    name: family.game_state
    for family in families.FAMILIES
    if family.game_state is not None
    for name, fields in family.physics_fields.items()
    if family.game_state.field in fields
}
_WRAPPER_FIELDS: dict[str, tuple[str, ...]] = {
    "TimeLimit": ("_elapsed_steps",),
    "OrderEnforcing": ("_has_reset",),
    **{
        name: fields
        for family in families.FAMILIES
        for name, fields in family.wrapper_fields.items()
    },
}


def env_state(env: gym.Env | VectorEnv) -> dict[str, Any] | None:
    """The state an env continues from, as a tree of arrays and JSON values; None if it cannot be
    captured.

    A single env gives its wrappers' counters (``TimeLimit``'s step count, ``OrderEnforcing``'s
    reset flag), the physics state (``_PHYSICS_FIELDS``) and its RNG's bit-generator state. A
    ``SyncVectorEnv`` gives its sub-envs' states and which of them only reset on their next step.
    Anything else, ale-py's ``AtariVectorEnv`` and its evaluation env included, gives None.
    """
    if isinstance(env, SyncVectorEnv):
        subs = [env_state(sub) for sub in env.envs]
        if any(sub is None for sub in subs):
            return None
        # gymnasium 1.x keeps the next-step autoreset flags here: without them a sub-env that just
        # ended would be stepped instead of reset.
        autoreset = np.array(env._autoreset_envs, dtype=np.bool_)
        return {"kind": "SyncVectorEnv", "envs": subs, "autoreset": autoreset}
    if isinstance(env, VectorEnv):
        return None
    wrappers = []
    layer: Any = env
    while isinstance(layer, gym.Wrapper):
        name = type(layer).__name__
        if name not in _WRAPPER_FIELDS:
            return None
        wrappers.append({"class": name, **{f: getattr(layer, f) for f in _WRAPPER_FIELDS[name]}})
        layer = layer.env
    name = type(layer).__name__
    if name not in _PHYSICS_FIELDS or not isinstance(layer, gym.Env):
        return None
    physics = {}
    game = _GAMES.get(name)
    for field in _PHYSICS_FIELDS[name]:
        if game is not None and field == game.field:
            physics[field] = game.save(layer)
            continue
        # An env may set a field only at its first reset (FrozenLake's `s`): before it (no RNG
        # made yet), the field is saved as None; after it, a field the env lacks is a family's
        # misspelt declaration, and raises.
        value = getattr(layer, field, None) if layer._np_random is None else getattr(layer, field)
        if isinstance(value, bool | int | np.integer):
            physics[field] = int(value)
        elif value is not None:
            # MountainCar keeps a tuple of float64s, the others arrays: an array of the same
            # dtype restores both exactly (`step` unpacks either).
            physics[field] = np.array(value)
        else:
            physics[field] = None
    rng = layer._np_random
    return {
        "kind": name,
        "wrappers": wrappers,
        "physics": physics,
        "rng": None if rng is None else rng.bit_generator.state,
        "rng_seed": layer._np_random_seed,
    }


def load_env_state(env: gym.Env | VectorEnv, state: Mapping[str, Any]) -> None:
    """Makes ``env`` (the same object, which others hold) continue from ``env_state``'s tree.

    The whole tree is checked before anything is changed, so a refused state leaves ``env`` as
    it was.

    Raises:
        ValueError: a state of another env, wrapper stack or number of sub-envs, or malformed.
    """
    check_env_state(env, state)
    _apply(env, state)


def check_env_state(env: gym.Env | VectorEnv, state: Mapping[str, Any]) -> None:
    """Raises the ``ValueError`` that ``load_env_state`` would, and changes nothing."""
    try:
        _check(env, state)
    except (KeyError, TypeError, AttributeError, IndexError, OverflowError) as exc:
        raise ValueError(f"malformed env state ({type(exc).__name__}: {exc})") from None


def _check(env: Any, state: Mapping[str, Any]) -> None:
    kind = state["kind"]
    if isinstance(env, SyncVectorEnv):
        if kind != "SyncVectorEnv":
            raise ValueError(f"the checkpoint's env is a {kind}, this run's a SyncVectorEnv")
        subs, autoreset = state["envs"], np.asarray(state["autoreset"])
        if len(subs) != env.num_envs or autoreset.shape != (env.num_envs,):
            raise ValueError(
                f"the checkpoint has {len(subs)} sub-envs, this run {env.num_envs} (env.num_envs)"
            )
        for sub_env, sub in zip(env.envs, subs, strict=True):
            _check(sub_env, sub)
        return
    if kind == "SyncVectorEnv":
        raise ValueError(
            f"the checkpoint's env is a SyncVectorEnv, this run's a {type(env).__name__}"
        )
    wrappers = []
    layer = env
    while isinstance(layer, gym.Wrapper):
        wrappers.append(type(layer).__name__)
        layer = layer.env
    mine = "/".join([*wrappers, type(layer).__name__])
    saved = "/".join([*(w["class"] for w in state["wrappers"]), kind])
    if mine != saved:
        raise ValueError(f"the checkpoint's env is {saved}, this run's {mine}")
    if set(state["physics"]) != set(_PHYSICS_FIELDS[kind]):
        raise ValueError(f"the {kind} state must hold {list(_PHYSICS_FIELDS[kind])}")
    game = _GAMES.get(kind)
    if game is not None:
        game.check(layer, state["physics"][game.field])
    if state["rng"] is not None:
        np.random.Generator(np.random.PCG64()).bit_generator.state = state["rng"]


def _apply(env: Any, state: Mapping[str, Any]) -> None:
    if isinstance(env, SyncVectorEnv):
        for sub_env, sub in zip(env.envs, state["envs"], strict=True):
            _apply(sub_env, sub)
        env._autoreset_envs = np.array(state["autoreset"], dtype=np.bool_)
        return
    layer = env
    for saved in state["wrappers"]:
        for field in _WRAPPER_FIELDS[saved["class"]]:
            setattr(layer, field, saved[field])
        layer = layer.env
    game = _GAMES.get(state["kind"])
    for field, value in state["physics"].items():
        if game is not None and field == game.field:
            game.load(layer, value)
            continue
        setattr(layer, field, value if value is None or isinstance(value, int) else np.array(value))
    rng = None
    if state["rng"] is not None:
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = state["rng"]
    layer._np_random = rng
    layer._np_random_seed = state["rng_seed"]
