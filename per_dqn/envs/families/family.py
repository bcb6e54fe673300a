"""What an env family states: ``Family``, and ``GameState`` for envs whose state is a whole game.

This module imports nothing beyond the standard library (the types of the construction's
arguments are for annotations alone), so every family module can import it at its top.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import gymnasium as gym
    from gymnasium.vector import VectorEnv

    from per_dqn.config import EnvConfig

# The Q-networks ``agent.networks`` builds by name; ``auto`` picks the env family's default.
# They live here rather than in the agent because the config checks ``agent.network`` against
# them and must not import torch.
AUTO_NETWORK = "auto"
NETWORK_NAMES = ("mlp", "nature_cnn", "minatar_cnn")


@dataclass(frozen=True)
class GameState:
    """How the state of an env that keeps it in a game object (MinAtar's) is read and written: a
    tree of JSON values and arrays, under one name among the env's physics fields.

    Attributes:
        field: the name it is stored under (one of the env class's ``Family.physics_fields``).
        save: ``env -> tree``; raises ``TypeError`` for a value it cannot store.
        check: ``(env, tree) -> None``; raises ``ValueError`` for another game's tree or a
            malformed one, and changes nothing.
        load: ``(env, tree) -> None``; puts a checked tree back.
    """

    field: str
    save: Callable[[Any], dict[str, Any]]
    check: Callable[[Any, Mapping[str, Any]], None]
    load: Callable[[Any, Mapping[str, Any]], None]


# eq=False: a family is one object, compared by identity (``families.of(id) is ATARI``), and its
# mappings are not hashable.
@dataclass(frozen=True, eq=False)
class Family:
    """One env family. Every field is set by each family (there are no defaults), so a new
    family states each of them.

    Attributes:
        name: short name (``classic``, ``atari``, ``minatar``): its module's name.
        title: its name for people (``Atari``).
        description: one line for people.
        namespace: the id prefix that marks the family (``ALE/``); None for the fallback
            family, which takes every id no other family claims.
        example_id: an id of the family, for tests and messages.
        default_network: the Q-network ``agent.network: auto`` builds: one of
            ``NETWORK_NAMES``, or ``auto`` to leave it to the observations' shape (an MLP for
            vectors, the Nature CNN for image stacks; see ``agent.networks.make_q_network``).
        frame_skip: the default ``env.frame_skip``, emulator frames per agent step; None for a
            family that steps once per agent step (``env.frame_skip`` is ignored there).
        max_episode_frames: the episode time limit in emulator frames when
            ``env.max_episode_steps`` is left out; None keeps the id's registered limit.
        eval_episode_frames: the default ``train.eval_max_episode_steps``, in emulator frames
            (divided by the frame skip); None: no cap beyond the env's own.
        eval_total_frames: the default ``train.eval_max_total_steps``, in emulator frames; None:
            no budget.
        env_keys: the family-specific ``env.*`` keys it reads (``FAMILY_ENV_KEYS``); the others
            of those are ignored by its envs (``config show`` marks them, and a ``--set`` of one
            is refused).
        game_package: the distribution whose code is the game (``ale-py``, ``minatar``): a
            release can change the game itself (MinAtar 1.0.11 fixed Seaquest's oxygen bar;
            ale-py's releases bring the ROMs and the emulator), so a run's provenance records its
            version and the report names it; None where the game is gymnasium's own.
        make_vector: ``config -> `` the training vector env, ``config.num_envs`` sub-envs that
            autoreset on the next step (``envs.make.make_vector_env`` checks its spaces).
        make_eval: ``(config, render, view) -> `` the single evaluation env; ``view`` is already
            one of ``envs.make.VIDEO_VIEWS``.
        saves_state: whether its envs' state goes into a checkpoint, so that a resumed run
            continues the same episodes exactly (``envs.state.env_state``); False where it cannot
            be captured (ale-py's emulators), and a resumed run restarts them from a seeded
            reset.
        physics_fields: its env classes, by class name, and the attributes ``step`` reads
            besides the RNG (what ``envs.state`` saves of each); empty where it saves no state.
        wrapper_fields: its own wrappers, by class name, and the counters each keeps (gymnasium's
            ``TimeLimit`` and ``OrderEnforcing`` are every family's).
        game_state: for env classes whose state is a game object, how it is saved; None.
    """

    name: str
    title: str
    description: str
    namespace: str | None
    example_id: str
    default_network: str
    frame_skip: int | None
    max_episode_frames: int | None
    eval_episode_frames: int | None
    eval_total_frames: int | None
    env_keys: frozenset[str]
    game_package: str | None
    make_vector: Callable[[EnvConfig], VectorEnv]
    make_eval: Callable[[EnvConfig, bool, str], gym.Env]
    saves_state: bool
    physics_fields: Mapping[str, tuple[str, ...]]
    wrapper_fields: Mapping[str, tuple[str, ...]]
    game_state: GameState | None

    def claims(self, env_id: str) -> bool:
        """Whether ``env_id`` starts with this family's namespace (never, for the fallback)."""
        return self.namespace is not None and env_id.startswith(self.namespace)
