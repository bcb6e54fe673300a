"""Env families: which kind of environment an ``env.id`` names, and what follows from that.

A family is the set of ids one construction serves: classic control and any other gymnasium id
(CartPole-like), Atari 2600 games (``ALE/<Game>-v5``, ale-py), and the MinAtar games
(``MinAtar/<Game>-v1``). Each ``Family`` states its id test, its constants (frame skip, the
time limit in emulator frames), its default evaluation caps and the Q-network ``agent.network:
auto`` builds for it. The config (eval caps), ``envs`` (construction), ``build`` and
``agent.networks`` (network names) ask this module; nothing else knows a family.

Adding a family is one entry in ``FAMILIES`` plus its construction in ``envs.ENV_MAKERS``;
``tests/test_families.py`` fails, naming the family, where one of the two is missing.

This module imports nothing (no torch, gymnasium, ale-py, minatar, nor the rest of the package),
so the config can ask it without loading an environment library.
"""

from __future__ import annotations

from dataclasses import dataclass

# The Q-networks ``agent.networks`` builds by name; ``auto`` picks the env family's default.
# They live here rather than in the agent because the config checks ``agent.network`` against
# them and must not import torch.
AUTO_NETWORK = "auto"
NETWORK_NAMES = ("mlp", "nature_cnn", "minatar_cnn")

# Atari's standard episode time limit in emulator frames, 30 minutes of play at 60 Hz (ALE v5;
# Machado et al., 2018): the training envs' cap and the evaluation episodes' cap alike.
ATARI_EPISODE_FRAMES = 108_000
# Atari's evaluation phase in emulator frames: Dopamine's 125,000 agent steps at frame skip 4.
ATARI_EVAL_TOTAL_FRAMES = 500_000


@dataclass(frozen=True)
class Family:
    """One env family. Every field is set by each family (there are no defaults), so a new
    family states each of them.

    Attributes:
        name: short name (``classic``, ``atari``, ``minatar``); ``envs.ENV_MAKERS``' key.
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
            of those are ignored by its envs (``config show`` marks them).
        game_package: the distribution whose code is the game (``ale-py``, ``minatar``): a
            release can change the game itself (MinAtar 1.0.11 fixed Seaquest's oxygen bar;
            ale-py's releases bring the ROMs and the emulator), so a run's provenance records its
            version and the report names it; None where the game is gymnasium's own.
        saves_state: whether its envs' state goes into a checkpoint, so that a resumed run
            continues the same episodes exactly (``envs.state.env_state``); False where it cannot
            be captured (ale-py's emulators), and a resumed run restarts them from a seeded
            reset.
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
    saves_state: bool

    def claims(self, env_id: str) -> bool:
        """Whether ``env_id`` starts with this family's namespace (never, for the fallback)."""
        return self.namespace is not None and env_id.startswith(self.namespace)


CLASSIC = Family(
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
    env_keys=frozenset(),
    game_package=None,  # gymnasium's, recorded for every run
    saves_state=True,  # the classic-control envs' physics (envs.state._PHYSICS_FIELDS)
)
ATARI = Family(
    name="atari",
    title="Atari",
    description="Atari 2600 games on ale-py's native vector env (Machado et al., 2018)",
    namespace="ALE/",
    example_id="ALE/Pong-v5",
    default_network="nature_cnn",
    frame_skip=4,
    max_episode_frames=ATARI_EPISODE_FRAMES,
    eval_episode_frames=ATARI_EPISODE_FRAMES,
    # An untrained agent that never serves in Breakout plays every episode to the time limit:
    # without a budget, 30 such episodes took 17 minutes.
    eval_total_frames=ATARI_EVAL_TOTAL_FRAMES,
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
    saves_state=False,  # the emulator's state lives in C++, out of reach
)
MINATAR = Family(
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
    saves_state=True,  # the game's whole state (envs.state._minatar_state)
)

# Every family. An id no namespace claims is the fallback's (``CLASSIC``).
FAMILIES: tuple[Family, ...] = (CLASSIC, ATARI, MINATAR)
FALLBACK = CLASSIC
# The ``env.*`` keys some family reads and another ignores; every family reads the rest (``id``,
# ``num_envs``, ``max_episode_steps``, ``clip_rewards``).
FAMILY_ENV_KEYS: frozenset[str] = frozenset().union(*(family.env_keys for family in FAMILIES))


def ignored_env_keys(env_id: str) -> frozenset[str]:
    """The ``env.*`` keys that ``env_id``'s family ignores."""
    return FAMILY_ENV_KEYS - of(env_id).env_keys


def families_reading(key: str) -> list[Family]:
    """The families that read ``env.<key>`` (every family for a key not in ``FAMILY_ENV_KEYS``)."""
    if key not in FAMILY_ENV_KEYS:
        return list(FAMILIES)
    return [family for family in FAMILIES if key in family.env_keys]


def of(env_id: str) -> Family:
    """The family ``env_id`` belongs to: the one whose namespace it starts with, else
    ``FALLBACK``."""
    for family in FAMILIES:
        if family.claims(env_id):
            return family
    return FALLBACK


def game_package(env_id: str) -> str | None:
    """The distribution whose code is ``env_id``'s game (``Family.game_package``), or None."""
    return of(env_id).game_package


# The distributions whose versions a run's provenance records: torch and gymnasium, each
# family's game package, numpy and per-dqn itself.
GAME_PACKAGES = tuple(f.game_package for f in FAMILIES if f.game_package is not None)
