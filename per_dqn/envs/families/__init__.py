"""Env families: which kind of environment an ``env.id`` names, and what follows from that.

A family is the set of ids one construction serves: classic control and any other gymnasium id
(CartPole-like), Atari 2600 games (``ALE/<Game>-v5``, ale-py), and the MinAtar games
(``MinAtar/<Game>-v1``). Each is one module of this package (``classic``, ``atari``,
``minatar``) whose ``FAMILY`` states everything about it (``family.Family``): its id test, its
constants (frame skip, the time limit in emulator frames), its default evaluation caps, the
Q-network ``agent.network: auto`` builds for it, its construction and what a checkpoint keeps of
its envs. This package finds them: every module here but ``family`` is one, and nothing lists
them by hand. The config (eval caps), ``envs.make`` (construction), ``envs.state``, ``build``
and ``agent.networks`` (network names) ask it; nothing else knows a family.

Importing it imports every family module, and none imports anything at its top but ``family`` and
the standard library: a family's construction imports gymnasium and its game's package when it is
called. So the config can ask it without loading numpy, torch or an environment library
(``tests/test_architecture.py`` checks both).
"""

from __future__ import annotations

import importlib
import itertools
import pkgutil
from collections.abc import Iterable

from per_dqn.envs.families.family import AUTO_NETWORK, NETWORK_NAMES, Family, GameState

__all__ = [
    "AUTO_NETWORK", "FALLBACK", "FAMILIES", "FAMILY_ENV_KEYS", "GAME_PACKAGES", "NETWORK_NAMES",
    "Family", "GameState", "discover", "families_reading", "game_package", "ignored_env_keys",
    "named", "of",
]  # fmt: skip

# The module of this package that is not a family.
_NOT_FAMILIES = ("family",)


def discover(package: str, paths: Iterable[str]) -> tuple[Family, ...]:
    """Every family module's ``FAMILY`` in the package ``package`` (its ``__path__`` is ``paths``):
    the fallback (no namespace) first, then by name.

    Raises:
        TypeError: a module of the package without a ``Family`` named ``FAMILY``, or one whose
            family's name is not the module's.
        ValueError: no fallback or two; two families under one name or namespace, a
            namespace that is a prefix of another (it would shadow it), or two families that
            declare the state of one env or wrapper class (``envs.state`` keys it by name).
    """
    found = []
    for module_info in pkgutil.iter_modules(list(paths)):
        if module_info.name in _NOT_FAMILIES:
            continue
        module = importlib.import_module(f"{package}.{module_info.name}")
        family = getattr(module, "FAMILY", None)
        if not isinstance(family, Family) or family.name != module_info.name:
            raise TypeError(
                f"{module.__name__}: an env family's module needs FAMILY = Family(name="
                f"{module_info.name!r}, ...)"
            )
        found.append(family)
    fallbacks = [f.name for f in found if f.namespace is None]
    if len(fallbacks) != 1:
        raise ValueError(f"env families: exactly one has no namespace (the fallback): {fallbacks}")
    namespaces = sorted(f.namespace for f in found if f.namespace is not None)
    for a, b in itertools.pairwise(namespaces):
        if b.startswith(a):
            raise ValueError(f"env families: namespace {a!r} would shadow {b!r}")
    owners: dict[str, str] = {}
    for family in found:
        for name in (*family.physics_fields, *family.wrapper_fields):
            if owners.setdefault(name, family.name) != family.name:
                raise ValueError(
                    f"env families: {owners[name]!r} and {family.name!r} both declare the state "
                    f"of {name!r}"
                )
    return tuple(sorted(found, key=lambda f: (f.namespace is not None, f.name)))


# Every family. An id no namespace claims is the fallback's.
FAMILIES: tuple[Family, ...] = discover(__name__, __path__)
FALLBACK = FAMILIES[0]
# The ``env.*`` keys some family reads and another ignores; every family reads the rest (``id``,
# ``num_envs``, ``max_episode_steps``, ``clip_rewards``).
FAMILY_ENV_KEYS: frozenset[str] = frozenset().union(*(family.env_keys for family in FAMILIES))
# The distributions whose versions a run's provenance records: torch and gymnasium, each
# family's game package, numpy and per-dqn itself.
GAME_PACKAGES = tuple(f.game_package for f in FAMILIES if f.game_package is not None)


def named(name: str) -> Family:
    """The family called ``name``.

    Raises:
        LookupError: no family has that name.
    """
    for family in FAMILIES:
        if family.name == name:
            return family
    raise LookupError(f"no env family {name!r}; there are {[f.name for f in FAMILIES]}")


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
