"""MinAtar's games as gymnasium envs for MinAtar releases whose own ``minatar.gym`` predates
gymnasium (1.0.10 and older: it is written for the old ``gym`` package).

Why: the published MinAtar results ran MinAtar 1.0.10 or older, whose Seaquest ends a dive one
frame later than 1.0.11's (its oxygen test, ``oxygen < 0``, became ``oxygen <= 0``), and MinAtar's
README warns that results before and after the fix may differ (issue 25). With 1.0.10 installed
(`make minatar-1.0.10`), ``envs`` registers the ``MinAtar/<Game>-v0`` and ``-v1`` ids on
``MinAtarEnv`` instead of ``minatar.gym``: the same games, the same ids and the same interface as
``minatar.gym.BaseEnv`` of 1.0.11 and later (``-v1``: the game's minimal action set), seeded the
way each release seeds (1.0.10 in ``Environment``'s constructor, later ones by ``seed``).
``tests/test_minatar_gym.py`` checks it step for step against ``minatar.gym.BaseEnv`` on the
installed release, and on 1.0.10 in a process of its own.
"""

from __future__ import annotations

import colorsys
from importlib import metadata
from typing import Any

import gymnasium as gym
import numpy as np

# The MinAtar release whose `minatar.gym` is gymnasium's (1.0.11, October 2022).
FIRST_GYMNASIUM_RELEASE = (1, 0, 11)
GAMES = ("asterix", "breakout", "freeway", "seaquest", "space_invaders")


def release() -> tuple[int, ...] | None:
    """The installed MinAtar's version as numbers (None: not installed, or unreadable)."""
    try:
        text = metadata.version("minatar")
    except metadata.PackageNotFoundError:
        return None
    numbers = []
    for part in text.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers) or None


def has_gymnasium_envs() -> bool:
    """Whether the installed MinAtar's ``minatar.gym`` is written for gymnasium."""
    found = release()
    return found is None or found >= FIRST_GYMNASIUM_RELEASE


def register_envs() -> None:
    """Registers ``MinAtar/<Game>-v0`` (six actions) and ``-v1`` (the game's minimal set) on
    ``MinAtarEnv``, as ``minatar.gym.register_envs`` does on its ``BaseEnv``."""
    for game in GAMES:
        name = game.title().replace("_", "")
        for version, minimal in (("v0", False), ("v1", True)):
            gym.register(
                id=f"MinAtar/{name}-{version}",
                entry_point="per_dqn.envs.minatar_gym:MinAtarEnv",
                kwargs={"game": game, "use_minimal_action_set": minimal},
            )


class MinAtarEnv(gym.Env):
    """One MinAtar game behind gymnasium's interface (see the module docstring).

    Args:
        game: the game's module name (``seaquest``).
        use_minimal_action_set: the game's own actions only, else all six.
        render_mode: None, ``array`` (the observation itself) or ``rgb_array`` (the grid as a
            ``(10, 10, 3)`` uint8 image, a colour per object layer on black).
        **kwargs: ``minatar.Environment``'s (``sticky_action_prob``, ``difficulty_ramping``).
    """

    metadata = {"render_modes": ["array", "rgb_array"]}  # noqa: RUF012 (gymnasium's attribute)

    def __init__(
        self,
        game: str,
        use_minimal_action_set: bool = False,
        render_mode: str | None = None,
        **kwargs: Any,
    ) -> None:
        from minatar import Environment

        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"MinAtarEnv renders 'array' or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self._environment = Environment
        self._game_name = game
        self._kwargs = kwargs
        self.game = Environment(env_name=game, **kwargs)
        minimal = self.game.minimal_action_set() if use_minimal_action_set else None
        self.action_set = list(minimal) if minimal is not None else list(range(6))
        self.action_space = gym.spaces.Discrete(len(self.action_set))
        self.observation_space = gym.spaces.Box(0.0, 1.0, self.game.state_shape(), dtype=bool)

    def seed(self, seed: int | None = None) -> None:
        """Seeds the game's RandomState (shared by the sticky actions and the game) as the
        installed release does: ``Environment.seed``, or a new ``Environment`` given the seed."""
        if hasattr(self.game, "seed"):
            self.game.seed(seed)
        else:
            self.game = self._environment(
                env_name=self._game_name, random_seed=seed, **self._kwargs
            )

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        if seed is not None:
            self.seed(seed)
        self.game.reset()
        return self.game.state(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        reward, done = self.game.act(self.action_set[action])
        return self.game.state(), reward, done, False, {}

    def render(self) -> np.ndarray | None:
        state = self.game.state()
        if self.render_mode == "array":
            return state
        if self.render_mode != "rgb_array":
            return None
        layers = state.shape[-1]
        # Each cell takes the colour of its highest layer; hues evenly spaced, black for none.
        palette = [(0, 0, 0)] + [
            tuple(round(255 * c) for c in colorsys.hsv_to_rgb(i / layers, 0.8, 1.0))
            for i in range(layers)
        ]
        index = np.amax(state * np.arange(1, layers + 1), axis=2)
        return np.asarray(palette, dtype=np.uint8)[index]
