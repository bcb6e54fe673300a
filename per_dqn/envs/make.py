"""The only place gymnasium, ale-py and minatar environments and wrappers are chosen.

Which construction an id gets is its env family's (``per_dqn.envs.families``): ``ENV_MAKERS`` holds
each family's vector and evaluation env makers. The module is the project's whole boundary with
the environment libraries, construction and the state a checkpoint keeps alike, which is why it
is one module of over 500 lines: nothing else imports them.

Training uses a vector env in gymnasium 1.x's default ``NEXT_STEP`` autoreset mode: after a
sub-env's episode ends (terminated or truncated), the *next* ``step`` call only resets that
sub-env, returning its first observation with reward 0 and both flags False, and ignores the
action. The observation returned on the ending step is the true final observation (there is no
``final_obs`` in ``info`` in this mode). ``loop.py`` relies on exactly this; ``tests/test_envs.py``
pins it, for ``SyncVectorEnv`` and for ale-py's ``AtariVectorEnv`` alike.

Atari (``ALE/<Game>-v5`` ids) runs on ``ale_py.vector_env.AtariVectorEnv``, which does the whole
preprocessing protocol in C++ on its own threads (no-op starts, frame skip with max-pooling,
84x84 grayscale resize, frame stack) and, unlike gymnasium's ``AtariPreprocessing``, needs no
OpenCV; ``benchmarks/atari_env.py`` times both pipelines once ``opencv-python`` is installed.
The env always reports raw rewards and full games: reward clipping and terminal-on-life-loss
are learning choices the training loop makes (``info["lives"]`` says when a life is lost), so
``episode/return`` is always the game's score.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.registration import find_highest_version, parse_env_id
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

from per_dqn.config import EnvConfig
from per_dqn.config.messages import one_line
from per_dqn.envs import families

# The emulator's screen, (height, width, RGB): the same for every Atari 2600 game.
ATARI_SCREEN_SHAPE = (210, 160, 3)
# What an eval env's ``render()`` films: the game's own screen, or the agent's preprocessed view.
VIDEO_VIEWS = ("game", "agent")


def _register_minatar(env_id: str) -> None:
    """Registers MinAtar's gymnasium ids (the ``minatar`` extra), once: MinAtar's own
    (``minatar.gym``), or, for a release whose ``minatar.gym`` predates gymnasium (1.0.10 and
    older), the same ids on ``per_dqn.envs.minatar_gym.MinAtarEnv``.

    Raises:
        ValueError: the extra is not installed.
    """
    if env_id in gym.registry or _registered_under_a_version(env_id):
        return  # registering again would make gymnasium warn once per env
    from per_dqn.envs import minatar_gym

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


def _registered_under_a_version(env_id: str) -> bool:
    """Whether gymnasium has ``env_id``'s env under some version (an id given without one)."""
    try:
        namespace, base, version = parse_env_id(env_id)
    except gym.error.Error:
        return False
    return version is None and find_highest_version(namespace, base) is not None


class ChannelFirst(gym.ObservationWrapper):
    """MinAtar's ``(10, 10, C)`` bool object layers as ``(C, 10, 10)``, contiguous: the layout
    the convolution takes, kept bool (one byte a cell until the memory packs it)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        height, width, channels = env.observation_space.shape
        self.observation_space = gym.spaces.Box(0, 1, (channels, height, width), dtype=np.bool_)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(observation, -1, 0))


def atari_game(env_id: str) -> str:
    """The ROM name of an ``ALE/<Game>-v<N>`` id: ``ALE/MsPacman-v5`` -> ``ms_pacman``.

    Raises:
        ValueError: a malformed id or a game whose ROM ale-py does not ship.
    """
    from ale_py import roms

    namespace = families.ATARI.namespace
    match = re.fullmatch(rf"{re.escape(namespace)}([A-Za-z0-9]+)-v\d+", env_id)
    if match is None:
        raise ValueError(f"env.id: expected {namespace}<Game>-v5 for an Atari game, got {env_id!r}")
    game = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", match.group(1)).lower()
    if game not in roms.get_all_rom_ids():
        raise ValueError(f"env.id: ale-py ships no ROM for {game!r} (from {env_id!r})")
    return game


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


def episode_steps(config: EnvConfig) -> int | None:
    """The episode time limit in agent steps of an env made by ``gym.make``:
    ``env.max_episode_steps``, or else the family's ``max_episode_frames`` over its frame skip
    (None: the id's own limit). The Atari builder applies the same two in emulator frames."""
    if config.max_episode_steps is not None:
        return config.max_episode_steps
    family = families.of(config.id)
    if family.max_episode_frames is None:
        return None
    return family.max_episode_frames // (config.frame_skip if family.frame_skip else 1)


def _make_gym(config: EnvConfig, render_mode: str | None = None, **extra: Any) -> gym.Env:
    """One environment from ``gym.make``, with its registered wrappers (time limit included);
    ``extra`` goes to the env's constructor."""
    kwargs: dict[str, Any] = {} if render_mode is None else {"render_mode": render_mode}
    kwargs.update(extra)
    steps = episode_steps(config)
    if steps is not None:
        kwargs["max_episode_steps"] = steps
    _import_env_module(config.id)
    _check_versioned(config.id)
    try:
        # The passive checker costs a few microseconds per step and only re-checks what
        # `describe` verifies once.
        return gym.make(config.id, disable_env_checker=True, **kwargs)
    except gym.error.Error as exc:
        # One line: gymnasium's message repeats the id as given, line breaks included.
        raise ValueError(
            f"env.id: cannot make {config.id!r}: {' '.join(str(exc).split())}"
        ) from None


def _check_versioned(env_id: str) -> None:
    """Refuses an id without its version where gymnasium has the env only under versioned ids
    (``CartPole`` for ``CartPole-v1``): ``gym.make`` would take the latest with a warning, and
    runs of one env would then name it two ways, which a sweep's report counts as two envs.

    Raises:
        ValueError: one line naming the versioned id to write.
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
        prefix = env_id[: len(env_id) - len(name)]
        versioned = f"{prefix}{namespace + '/' if namespace else ''}{base}-v{latest}"
        raise ValueError(
            f"env.id: {env_id!r} names no version; write {versioned!r} (the latest registered), "
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
        reason = one_line(exc)[:300]
        raise ValueError(
            f"env.id: cannot import module {module!r} named by {env_id!r} "
            f"({type(exc).__name__}: {reason})"
        ) from None


def _make_minatar(config: EnvConfig, render_mode: str | None = None) -> gym.Env:
    """One MinAtar game, its layers channel first; ``env.full_action_space`` asks for MinAtar's
    six actions whatever the id's version registered."""
    _register_minatar(config.id)
    extra = {"use_minimal_action_set": False} if config.full_action_space else {}
    return ChannelFirst(_make_gym(config, render_mode, **extra))


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


def _make_atari_vector(config: EnvConfig, num_envs: int, screen: bool = False) -> VectorEnv:
    """ale-py's native vector env with the protocol ``config`` sets; raw rewards, full games.

    With ``screen``, observations are the emulator's own RGB screen (``ATARI_SCREEN_SHAPE``,
    the last frame of each skip, one per step) instead of the agent's 84x84 grayscale stack;
    the emulation, its no-op starts and its sticky actions are the same.
    """
    from ale_py.vector_env import AtariVectorEnv

    image: dict[str, Any] = {
        "img_height": 84, "img_width": 84, "grayscale": True, "stack_num": config.frame_stack,
        "maxpool": True,
    }  # fmt: skip
    if screen:
        height, width, _ = ATARI_SCREEN_SHAPE
        image = {"img_height": height, "img_width": width, "grayscale": False, "stack_num": 1,
                 "maxpool": False}  # fmt: skip
    game = atari_game(config.id)
    # The cap in emulator frames: the family's whole, not its agent steps times the skip (a skip
    # that does not divide it would round it down).
    max_frames = (
        families.of(config.id).max_episode_frames
        if config.max_episode_steps is None
        else config.max_episode_steps * config.frame_skip
    )
    return AtariVectorEnv(
        game,
        num_envs,
        num_threads=config.env_threads,
        max_num_frames_per_episode=max_frames,
        repeat_action_probability=config.sticky_action_prob,
        full_action_space=config.full_action_space,
        autoreset_mode=AutoresetMode.NEXT_STEP,
        frameskip=config.frame_skip,
        noop_max=config.noop_max,
        # Learning-side choices, made in the training loop so returns stay raw full-game scores.
        episodic_life=False,
        life_loss_info=False,
        reward_clipping=False,
        # No FIRE after reset: Machado et al. (2018) recommend against game-specific help.
        use_fire_reset=False,
        **image,
    )


def _sync_vector(config: EnvConfig, make_one: Callable[..., gym.Env]) -> VectorEnv:
    """``config.num_envs`` copies of ``make_one(config)`` in a ``SyncVectorEnv``."""
    first = make_one(config)  # fails fast, with our message, before any other copy is made
    envs = [first] + [make_one(config) for _ in range(config.num_envs - 1)]
    return SyncVectorEnv(
        [lambda env=env: env for env in envs], autoreset_mode=AutoresetMode.NEXT_STEP
    )


def make_vector_env(config: EnvConfig) -> VectorEnv:
    """``config.num_envs`` copies stepped in lock-step, autoreset on the next step.

    Raises:
        ValueError: an unknown or unsupported id, or spaces DQN cannot use.
    """
    vector = makers_of(config.id).vector(config)
    describe(vector)
    return vector


class SingleAtariEnv(gym.Env):
    """One Atari game behind the single-env API, for evaluation: a one-env ``AtariVectorEnv``.

    Evaluation then sees exactly the preprocessing training saw (the same C++ pipeline).
    ``render()`` returns, with ``view="agent"``, the newest preprocessed frame as RGB (84x84,
    gray in all channels); with ``view="game"``, the emulator's own RGB screen (210x160). ale-py's
    vector env does not expose the screen, so the game view steps a second emulator in lockstep,
    made with the same settings and given the same seeds and actions: ALE is deterministic given
    both, so it plays the same game (``tests/test_envs.py`` checks rewards, lives and frame
    numbers step by step), at twice the emulation cost.
    """

    metadata = {"render_modes": ["rgb_array"]}  # noqa: RUF012 - gymnasium's class attribute

    def __init__(self, config: EnvConfig, view: str = "agent") -> None:
        if view not in VIDEO_VIEWS:
            raise ValueError(f"`view` must be one of {list(VIDEO_VIEWS)}, got {view!r}")
        self._vector = _make_atari_vector(config, 1)
        self._screen = _make_atari_vector(config, 1, screen=True) if view == "game" else None
        self.view = view
        self.observation_space = self._vector.single_observation_space
        self.action_space = self._vector.single_action_space
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

    @staticmethod
    def _check_lockstep(
        info: dict[str, Any], screen_info: dict[str, Any], reward: float, screen_reward: float
    ) -> None:
        """Raises if the filming emulator no longer plays the agent's game (a film of another
        game would be worse than none)."""
        keys = ("episode_frame_number", "lives")
        if reward != screen_reward or any(info[k][0] != screen_info[k][0] for k in keys):
            raise RuntimeError(
                "the game view's emulator fell out of step with the agent's: "
                f"frame {info['episode_frame_number'][0]} vs "
                f"{screen_info['episode_frame_number'][0]}, reward {reward} vs {screen_reward}"
            )

    def render(self) -> np.ndarray:
        if self._obs is None:
            raise RuntimeError("render() before reset()")
        if self._frame is not None:
            return self._frame.copy()  # the next step writes over ale-py's buffer
        return np.repeat(self._obs[-1][:, :, None], 3, axis=2)

    def close(self) -> None:
        self._vector.close()
        if self._screen is not None:
            self._screen.close()


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
    return makers_of(config.id).eval(config, render, view)


def _single_eval(
    config: EnvConfig, render: bool, view: str, make_one: Callable[..., gym.Env]
) -> gym.Env:
    """``make_eval_env`` for a family of ``gym.make`` envs, which film only the game's view."""
    if render and view == "agent":
        raise ValueError(
            f"video view 'agent': {config.id}'s observations are not images; its video is the "
            "game's own render (view 'game')"
        )
    if render:
        return make_one(config, render_mode="rgb_array")
    return make_one(config)


def _atari_eval(config: EnvConfig, render: bool, view: str) -> gym.Env:
    """``make_eval_env`` for Atari: one game behind the single-env API."""
    return SingleAtariEnv(config, view if render else "agent")


@dataclass(frozen=True)
class EnvMakers:
    """How one env family's environments are built.

    Attributes:
        vector: ``config`` -> the training vector env (``make_vector_env`` checks its spaces).
        eval: ``(config, render, view)`` -> the evaluation env (``make_eval_env``; ``view`` is
            already one of ``VIDEO_VIEWS``).
    """

    vector: Callable[[EnvConfig], VectorEnv]
    eval: Callable[[EnvConfig, bool, str], gym.Env]


# Each family's construction, by ``families.Family.name``: a new family needs its entry here
# (``tests/test_families.py`` builds every family's example id through both makers).
ENV_MAKERS: dict[str, EnvMakers] = {
    families.CLASSIC.name: EnvMakers(
        vector=partial(_sync_vector, make_one=_make_gym),
        eval=partial(_single_eval, make_one=_make_gym),
    ),
    families.ATARI.name: EnvMakers(
        vector=lambda config: _make_atari_vector(config, config.num_envs), eval=_atari_eval
    ),
    families.MINATAR.name: EnvMakers(
        vector=partial(_sync_vector, make_one=_make_minatar),
        eval=partial(_single_eval, make_one=_make_minatar),
    ),
}


def makers_of(env_id: str) -> EnvMakers:
    """The construction of ``env_id``'s family (``families.of``).

    Raises:
        LookupError: the family has no entry in ``ENV_MAKERS`` (a family added to
            ``per_dqn.envs.families`` without its construction here).
    """
    family = families.of(env_id)
    try:
        return ENV_MAKERS[family.name]
    except KeyError:
        raise LookupError(
            f"env family {family.name!r} (of {env_id!r}) has no construction in envs.ENV_MAKERS"
        ) from None


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


# --- state for checkpoints ------------------------------------------------------------------------
#
# A checkpoint stores an env as a tree of arrays and JSON values, never as a pickle: resuming a
# run dir someone else wrote must not run whatever it holds. That means naming the state each
# supported env keeps, which gymnasium keeps in private attributes; they are read and written here
# only. An env with anything else in it (another wrapper, another env class, ale-py's emulators in
# C++) has no state: the resume says so and restarts it from a seeded reset.

# The physics state of each supported classic-control env: what `step` reads besides the RNG.
_PHYSICS_FIELDS: dict[str, tuple[str, ...]] = {
    "CartPoleEnv": ("state", "steps_beyond_terminated"),
    "AcrobotEnv": ("state",),
    "MountainCarEnv": ("state",),
    "Continuous_MountainCarEnv": ("state",),
    "PendulumEnv": ("state", "last_u"),
    # minatar.gym.BaseEnv (and minatar_gym.MinAtarEnv for MinAtar 1.0.10): the game's whole
    # state, read by `_minatar_state`.
    "BaseEnv": ("minatar",),
    "MinAtarEnv": ("minatar",),
}
# The MinAtar env classes: their state is the game's (`_minatar_state`).
_MINATAR_ENVS = ("BaseEnv", "MinAtarEnv")
# Wrappers gym.make adds, and the counter each keeps.
_WRAPPER_FIELDS: dict[str, tuple[str, ...]] = {
    "TimeLimit": ("_elapsed_steps",),
    "OrderEnforcing": ("_has_reset",),
    "ChannelFirst": (),
}


def env_state(env: gym.Env | VectorEnv) -> dict[str, Any] | None:
    """The state an env continues from, as a tree of arrays and JSON values; None if it cannot be
    captured.

    A single env gives its wrappers' counters (``TimeLimit``'s step count, ``OrderEnforcing``'s
    reset flag), the physics state (``_PHYSICS_FIELDS``) and its RNG's bit-generator state. A
    ``SyncVectorEnv`` gives its sub-envs' states and which of them only reset on their next step.
    Anything else, ale-py's ``AtariVectorEnv`` and ``SingleAtariEnv`` included, gives None.
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
    if name in _MINATAR_ENVS:
        physics["minatar"] = _minatar_state(layer)
    for field in _PHYSICS_FIELDS[name] if name not in _MINATAR_ENVS else ():
        value = getattr(layer, field)
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
    if kind in _MINATAR_ENVS:
        _check_minatar(layer, state["physics"]["minatar"])
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
    for field, value in state["physics"].items():
        if field == "minatar":
            _apply_minatar(layer, value)
            continue
        setattr(layer, field, value if value is None or isinstance(value, int) else np.array(value))
    rng = None
    if state["rng"] is not None:
        rng = np.random.Generator(np.random.PCG64())
        rng.bit_generator.state = state["rng"]
    layer._np_random = rng
    layer._np_random_seed = state["rng_seed"]


# --- MinAtar's game state -------------------------------------------------------------------------
#
# A MinAtar game keeps its whole state in plain attributes of two objects: the `Environment`
# (sticky-action memory, its RandomState) and the game inside it (positions, timers, lists of
# entities as lists of ints or None, numpy maps). They are read and written here as a tree of
# JSON values and arrays; the one RandomState both objects share stays shared.

_MINATAR_OUTER = ("last_action", "sticky_action_prob")
_MINATAR_SKIPPED = ("channels", "action_map", "random")  # constants, and the shared RandomState


def _plain(value: Any) -> Any:
    """A game attribute as JSON values and arrays (numpy scalars become Python ones)."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"a MinAtar game attribute of type {type(value).__name__} cannot be saved")


def _minatar_state(layer: Any) -> dict[str, Any]:
    game = layer.game
    name, keys, pos, has_gauss, cached = game.random.get_state()
    return {
        "outer": {key: _plain(getattr(game, key)) for key in _MINATAR_OUTER},
        "game": {
            key: _plain(value)
            for key, value in vars(game.env).items()
            if key not in _MINATAR_SKIPPED
        },
        "random": {"name": name, "keys": keys.copy(), "pos": int(pos),
                   "has_gauss": int(has_gauss), "cached": float(cached)},
    }  # fmt: skip


def _apply_minatar(layer: Any, state: Mapping[str, Any]) -> None:
    game = layer.game
    for key, value in state["outer"].items():
        setattr(game, key, value)
    for key, value in state["game"].items():
        setattr(game.env, key, value.copy() if isinstance(value, np.ndarray) else value)
    r = state["random"]
    game.random.set_state(
        (r["name"], np.asarray(r["keys"], dtype=np.uint32), r["pos"], r["has_gauss"], r["cached"])
    )


def _check_minatar(layer: Any, state: Mapping[str, Any]) -> None:
    """Raises ValueError for a MinAtar state of another game or a malformed one."""
    game = layer.game
    mine = set(vars(game.env)) - set(_MINATAR_SKIPPED)
    if set(state["game"]) != mine or set(state["outer"]) != set(_MINATAR_OUTER):
        raise ValueError(f"the checkpoint's MinAtar state is not {game.env_name}'s")
    r = state["random"]
    np.random.RandomState().set_state(
        (r["name"], np.asarray(r["keys"], dtype=np.uint32), r["pos"], r["has_gauss"], r["cached"])
    )
