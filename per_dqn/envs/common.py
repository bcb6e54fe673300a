"""What the env families' constructions share: ``gym.make`` with a family's time limit, a
``SyncVectorEnv`` of copies, the single evaluation env, channel-first image layers, and one env of
a one-env vector env behind the single-env API.

A family's module (``per_dqn.envs.families``) imports this module inside its construction, so
that asking a family loads no environment library. This module knows no family: a caller passes
its own ``Family``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import find_highest_version, parse_env_id
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

from per_dqn.config import EnvConfig
from per_dqn.config.messages import error_text

if TYPE_CHECKING:
    from per_dqn.envs.families import Family


def episode_steps(config: EnvConfig, family: Family) -> int | None:
    """The episode time limit in agent steps of an env made by ``gym.make``:
    ``env.max_episode_steps``, or else the family's ``max_episode_frames`` over its frame skip
    (None: the id's own limit). The Atari builder applies the same two in emulator frames."""
    if config.max_episode_steps is not None:
        return config.max_episode_steps
    if family.max_episode_frames is None:
        return None
    return family.max_episode_frames // (config.frame_skip if family.frame_skip else 1)


def make_gym(
    config: EnvConfig,
    family: Family,
    render_mode: str | None = None,
    gym_id: str | None = None,
    **extra: Any,
) -> gym.Env:
    """One environment from ``gym.make``, with its registered wrappers (time limit included).

    Args:
        config: the env section.
        family: ``config.id``'s family, whose time limit applies (``episode_steps``).
        render_mode: gymnasium's, where the env is filmed.
        gym_id: the id gymnasium registered, where the family's ids name it another way;
            ``config.id`` if None.
        extra: keywords for the env's constructor.

    Raises:
        ValueError: one line naming ``env.id``: an id gymnasium cannot make (its own
            dependency missing included), one without its version, or a ``module:`` whose
            import fails.
    """
    env_id = config.id if gym_id is None else gym_id
    kwargs: dict[str, Any] = {} if render_mode is None else {"render_mode": render_mode}
    kwargs.update(extra)
    steps = episode_steps(config, family)
    if steps is not None:
        kwargs["max_episode_steps"] = steps
    _import_env_module(env_id)
    _check_versioned(env_id, config.id)
    try:
        # The passive checker costs a few microseconds per step and only re-checks what
        # `describe` verifies once.
        return gym.make(env_id, disable_env_checker=True, **kwargs)
    except gym.error.Error as exc:
        # One line: gymnasium's message repeats the id as given, line breaks included.
        raise ValueError(
            f"env.id: cannot make {config.id!r}: {' '.join(str(exc).split())}"
        ) from None
    except ImportError as exc:  # a registered env whose own dependency is missing (jax, mujoco)
        raise ValueError(
            f"env.id: cannot make {config.id!r}: it needs a package that is not installed: "
            f"{' '.join(str(exc).split())}"
        ) from None


def registered_under_a_version(env_id: str) -> bool:
    """Whether gymnasium has ``env_id``'s env under some version (an id given without one)."""
    try:
        namespace, base, version = parse_env_id(env_id)
    except gym.error.Error:
        return False
    return version is None and find_highest_version(namespace, base) is not None


def _check_versioned(env_id: str, written: str) -> None:
    """Refuses an id without its version where gymnasium has the env only under versioned ids
    (``CartPole`` for ``CartPole-v1``): ``gym.make`` would take the latest with a warning, and
    runs of one env would then name it two ways, which a sweep's report counts as two envs.
    ``written`` is ``env.id`` as the config has it (a family may prefix gymnasium's id).

    Raises:
        ValueError: one line naming the versioned ``env.id`` to write.
    """
    name = env_id.partition(":")[2] or env_id
    if name in gym.registry:
        return
    try:
        namespace, base, version = parse_env_id(name)
    except gym.error.Error:
        return  # a malformed id: gym.make says what is wrong with it
    latest = find_highest_version(namespace, base) if version is None else None
    if latest is not None:
        prefix = written[: len(written) - len(name)] if written.endswith(name) else ""
        versioned = f"{prefix}{namespace + '/' if namespace else ''}{base}-v{latest}"
        raise ValueError(
            f"env.id: {written!r} names no version; write {versioned!r} (the latest registered), "
            "so that every run names the env one way"
        )


def _import_env_module(env_id: str) -> None:
    """Imports the module a ``module:EnvName`` id names, as ``gym.make`` would, so that a module
    that is missing or fails on import is one line naming ``env.id`` (issue 23 item 5): gymnasium
    lets out the import's own exception, whatever its type.

    Raises:
        ValueError: more than one colon, or the module's import failed.
    """
    module, colon, rest = env_id.partition(":")
    if not colon:
        return
    if ":" in rest:
        raise ValueError(f"env.id: {env_id!r} has more than one ':' (expected module:EnvName)")
    try:
        importlib.import_module(module)
    except Exception as exc:
        raise ValueError(
            f"env.id: cannot import module {module!r} named by {env_id!r} ({error_text(exc)})"
        ) from None


def sync_vector(config: EnvConfig, make_one: Callable[[EnvConfig], gym.Env]) -> VectorEnv:
    """``config.num_envs`` copies of ``make_one(config)`` in a ``SyncVectorEnv`` that autoresets
    on the next step."""
    first = make_one(config)  # fails fast, with our message, before any other copy is made
    envs = [first] + [make_one(config) for _ in range(config.num_envs - 1)]
    return SyncVectorEnv(
        [lambda env=env: env for env in envs], autoreset_mode=AutoresetMode.NEXT_STEP
    )


def single_eval(
    config: EnvConfig, render: bool, view: str, make_one: Callable[..., gym.Env]
) -> gym.Env:
    """The evaluation env of a family of ``gym.make`` envs, which film only the game's view:
    ``make_one(config)``, with ``render_mode="rgb_array"`` where it is filmed.

    Raises:
        ValueError: the ``agent`` view, which these envs do not have.
    """
    if render and view == "agent":
        raise ValueError(
            f"video view 'agent': {config.id}'s observations are not images; its video is the "
            "game's own render (view 'game')"
        )
    if render:
        return make_one(config, render_mode="rgb_array")
    return make_one(config)


class ChannelFirst(gym.ObservationWrapper):
    """``(10, 10, C)`` bool object layers (MinAtar's) as ``(C, 10, 10)``, contiguous: the layout
    the convolution takes, kept bool (one byte a cell until the memory packs it)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        height, width, channels = env.observation_space.shape
        self.observation_space = gym.spaces.Box(0, 1, (channels, height, width), dtype=np.bool_)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(observation, -1, 0))


class SingleFromVector(gym.Env):
    """One env behind the single-env API, for evaluation: a one-env vector env, so that
    evaluation sees exactly the preprocessing training saw (Atari's C++ pipeline).

    ``render()`` returns the newest frame of the observation's stack as RGB (gray in all
    channels): the agent's view. With ``screen``, a second one-env vector env made with the same
    settings and given the same seeds and actions, it returns that env's frames instead (Atari's
    own RGB screen, which ale-py's vector env does not expose): a deterministic emulator plays the
    same game at twice the cost, and each step checks that it does (rewards and ``lockstep``'s
    info keys), as ``tests/test_envs.py`` does step by step.

    Args:
        vector: the agent's one-env vector env.
        screen: the filmed twin, or None to film the agent's view.
        lockstep: the info keys both must agree on at every step.
    """

    metadata = {"render_modes": ["rgb_array"]}  # noqa: RUF012 - gymnasium's class attribute

    def __init__(
        self, vector: VectorEnv, screen: VectorEnv | None = None, lockstep: tuple[str, ...] = ()
    ) -> None:
        self._vector = vector
        self._screen = screen
        self._lockstep = lockstep
        self.observation_space = vector.single_observation_space
        self.action_space = vector.single_action_space
        self.render_mode = "rgb_array"
        self._obs: np.ndarray | None = None
        self._frame: np.ndarray | None = None
        self._needs_reset = True

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self._vector.reset(seed=seed)
        if self._screen is not None:
            screen, screen_info = self._screen.reset(seed=seed)
            self._frame = screen[0, 0]
            self._check_lockstep(info, screen_info, 0.0, 0.0)
        self._obs, self._needs_reset = obs[0], False
        return obs[0], {key: value[0] for key, value in info.items()}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self._needs_reset:
            raise RuntimeError("step() after the episode ended: call reset() first")
        actions = np.asarray([action], dtype=np.int64)
        obs, rewards, terminated, truncated, info = self._vector.step(actions)
        if self._screen is not None:
            screen, screen_rewards, _, _, screen_info = self._screen.step(actions)
            self._frame = screen[0, 0]
            self._check_lockstep(info, screen_info, rewards[0], screen_rewards[0])
        self._obs = obs[0]
        self._needs_reset = bool(terminated[0] or truncated[0])
        info = {key: value[0] for key, value in info.items()}
        return obs[0], float(rewards[0]), bool(terminated[0]), bool(truncated[0]), info

    def _check_lockstep(
        self, info: dict[str, Any], screen_info: dict[str, Any], reward: float, screen_reward: float
    ) -> None:
        """Raises if the filming env no longer plays the agent's game (a film of another game
        would be worse than none)."""
        if reward != screen_reward or any(info[k][0] != screen_info[k][0] for k in self._lockstep):
            pairs = [f"{k} {info[k][0]} vs {screen_info[k][0]}" for k in self._lockstep]
            raise RuntimeError(
                "the game view's emulator fell out of step with the agent's: "
                + ", ".join([*pairs, f"reward {reward} vs {screen_reward}"])
            )

    def render(self) -> np.ndarray:
        if self._obs is None:
            raise RuntimeError("render() before reset()")
        if self._frame is not None:
            return self._frame.copy()  # the next step writes over the vector env's buffer
        return np.repeat(self._obs[-1][:, :, None], 3, axis=2)

    def close(self) -> None:
        self._vector.close()
        if self._screen is not None:
            self._screen.close()
