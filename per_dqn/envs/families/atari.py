"""The Atari family: Atari 2600 games (``ALE/<Game>-v5``) on ale-py's native vector env.

``ale_py.vector_env.AtariVectorEnv`` does the whole preprocessing protocol in C++ on its own
threads (no-op starts, frame skip with max-pooling, 84x84 grayscale resize, frame stack) and,
unlike gymnasium's ``AtariPreprocessing``, needs no OpenCV; ``benchmarks/atari_env.py`` times both
pipelines once ``opencv-python`` is installed. The env always reports raw rewards and full games:
reward clipping and terminal-on-life-loss are learning choices the training loop makes
(``info["lives"]`` says when a life is lost), so ``episode/return`` is always the game's score.

Its envs' state is not saved (the emulator's lives in C++, out of reach): a resumed run restarts
them from a seeded reset.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from per_dqn.envs.families.family import Family

if TYPE_CHECKING:
    import gymnasium as gym
    from gymnasium.vector import VectorEnv

    from per_dqn.config import EnvConfig

NAMESPACE = "ALE/"
# Atari's standard episode time limit in emulator frames, 30 minutes of play at 60 Hz (ALE v5;
# Machado et al., 2018): the training envs' cap and the evaluation episodes' cap alike.
EPISODE_FRAMES = 108_000
# Atari's evaluation phase in emulator frames: Dopamine's 125,000 agent steps at frame skip 4.
EVAL_TOTAL_FRAMES = 500_000
# The emulator's screen, (height, width, RGB): the same for every Atari 2600 game.
SCREEN_SHAPE = (210, 160, 3)
# What the filmed twin of the evaluation env must agree on with the agent's, step by step.
LOCKSTEP_INFO = ("episode_frame_number", "lives")


def atari_game(env_id: str) -> str:
    """The ROM name of an ``ALE/<Game>-v<N>`` id: ``ALE/MsPacman-v5`` -> ``ms_pacman``.

    Raises:
        ValueError: a malformed id or a game whose ROM ale-py does not ship.
    """
    from ale_py import roms

    match = re.fullmatch(rf"{re.escape(NAMESPACE)}([A-Za-z0-9]+)-v\d+", env_id)
    if match is None:
        raise ValueError(f"env.id: expected {NAMESPACE}<Game>-v5 for an Atari game, got {env_id!r}")
    game = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", match.group(1)).lower()
    if game not in roms.get_all_rom_ids():
        raise ValueError(f"env.id: ale-py ships no ROM for {game!r} (from {env_id!r})")
    return game


def atari_vector(config: EnvConfig, num_envs: int, screen: bool = False) -> VectorEnv:
    """ale-py's native vector env with the protocol ``config`` sets; raw rewards, full games.

    With ``screen``, observations are the emulator's own RGB screen (``SCREEN_SHAPE``, the last
    frame of each skip, one per step) instead of the agent's 84x84 grayscale stack; the
    emulation, its no-op starts and its sticky actions are the same.
    """
    from ale_py.vector_env import AtariVectorEnv
    from gymnasium.vector import AutoresetMode

    image: dict[str, Any] = {
        "img_height": 84, "img_width": 84, "grayscale": True, "stack_num": config.frame_stack,
        "maxpool": True,
    }  # fmt: skip
    if screen:
        height, width, _ = SCREEN_SHAPE
        image = {"img_height": height, "img_width": width, "grayscale": False, "stack_num": 1,
                 "maxpool": False}  # fmt: skip
    game = atari_game(config.id)
    # The cap in emulator frames: the family's whole, not its agent steps times the skip (a skip
    # that does not divide it would round it down).
    max_frames = (
        FAMILY.max_episode_frames
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


def make_vector(config: EnvConfig) -> VectorEnv:
    """``config.num_envs`` games in one ``AtariVectorEnv``."""
    return atari_vector(config, config.num_envs)


def make_eval(config: EnvConfig, render: bool, view: str) -> gym.Env:
    """One game behind the single-env API (``common.SingleFromVector``): evaluation sees exactly
    the preprocessing training saw. Filmed, ``view="agent"`` is the newest preprocessed frame as
    RGB (84x84, gray in all channels) and ``view="game"`` the emulator's own RGB screen (210x160),
    from a second emulator in lockstep."""
    from per_dqn.envs.common import SingleFromVector

    vector = atari_vector(config, 1)
    if not (render and view == "game"):
        return SingleFromVector(vector)
    try:
        screen = atari_vector(config, 1, screen=True)
    except BaseException:
        vector.close()
        raise
    return SingleFromVector(vector, screen, lockstep=LOCKSTEP_INFO)


FAMILY = Family(
    name="atari",
    title="Atari",
    description="Atari 2600 games on ale-py's native vector env (Machado et al., 2018)",
    namespace=NAMESPACE,
    example_id="ALE/Pong-v5",
    default_network="nature_cnn",
    frame_skip=4,
    max_episode_frames=EPISODE_FRAMES,
    eval_episode_frames=EPISODE_FRAMES,
    # An untrained agent that never serves in Breakout plays every episode to the time limit:
    # without a budget, 30 such episodes took 17 minutes.
    eval_total_frames=EVAL_TOTAL_FRAMES,
    env_keys=frozenset(
        (
            "terminal_on_life_loss",
            "sticky_action_prob",
            "noop_max",
            "frame_skip",
            "frame_stack",
            "full_action_space",
            "env_threads",
        )
    ),
    game_package="ale-py",
    make_vector=make_vector,
    make_eval=make_eval,
    saves_state=False,  # the emulator's state lives in C++, out of reach
    physics_fields={},
    wrapper_fields={},
    game_state=None,
)
