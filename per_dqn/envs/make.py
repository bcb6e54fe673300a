"""The only place gymnasium, ale-py and minatar environments and wrappers are chosen.

Which construction an id gets is its env family's (``per_dqn.envs.families``): ``ENV_MAKERS`` holds
each family's vector and evaluation env makers. With ``state`` (what a checkpoint keeps of an env)
it is the project's whole boundary with the environment libraries: nothing else imports them.
One module though past 500 lines: each family's training and evaluation construction, the
wrappers they share and the check of what they give (``describe``) are read against each other.

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
from per_dqn.config.messages import error_text
from per_dqn.envs import families
from per_dqn.envs.state import check_env_state, env_state, load_env_state

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
        raise ValueError(
            f"env.id: cannot import module {module!r} named by {env_id!r} ({error_text(exc)})"
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
