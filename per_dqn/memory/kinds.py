"""The replay kinds, registered once: each entry carries everything the rest of the project
needs to build, configure and size a memory of that kind.

A new kind is a ``Sampler`` subclass (``samplers.py``), a memory class that builds it
(``replay.py``; the readers it adds are its own), one ``ReplayKind`` entry below, and its name in
``per_dqn.memory.KINDS`` (kept there as a literal so that reading the list imports no numpy).
``make_memory`` here, ``per_dqn.build.make_memory`` (from a config) and ``planned_nbytes`` all
read the entry; nothing outside this module branches on a kind.

The entry is checked when it is made: ``config_keys`` must map every keyword of the sampler's
constructor beside ``capacity`` and ``seed``, so that a key left out fails at import, naming the
kind, instead of silently leaving the sampler at its default.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from per_dqn.memory import KINDS
from per_dqn.memory.heap import RankHeap
from per_dqn.memory.replay import PrioritizedReplay, RankBasedReplay, ReplayMemory, UniformReplay
from per_dqn.memory.samplers import ProportionalSampler, RankSampler, Sampler, UniformSampler
from per_dqn.memory.trees import SumTree

# Keywords every sampler takes from the memory's own arguments, never from the kind's config.
_SHARED_KEYWORDS = frozenset({"capacity", "seed"})


@dataclass(frozen=True)
class ReplayKind:
    """One replay kind: its sampler, the memory class that builds it, its config keys and the
    bytes of its priority index.

    Args:
        name: the kind's name (``replay.kind`` in the config, ``--replay`` on the CLI).
        sampler: the ``Sampler`` subclass.
        memory: the memory class ``make_memory(name, ...)`` builds; it takes the sampler's
            keywords and the storage's (``capacity``, ``obs_shape``, ``obs_dtype``, ``seed``,
            ``dedup_frames``, ``frame_slack``).
        config_keys: ``ReplayConfig`` field -> the constructor keyword it is passed as, for every
            keyword of ``sampler`` but ``capacity`` and ``seed``.
        index_nbytes: bytes of the sampler's priority index for a capacity, without allocating
            it (``planned_nbytes``; a test checks it against ``Sampler.nbytes``).

    Raises:
        ValueError: ``config_keys`` leaves a keyword of the sampler unmapped, or maps one it
            does not take; the message names the kind.
    """

    name: str
    sampler: type[Sampler]
    memory: type[ReplayMemory]
    config_keys: Mapping[str, str] = field(default_factory=dict)
    index_nbytes: Callable[[int], int] = lambda capacity: 0

    def __post_init__(self) -> None:
        taken = set(inspect.signature(self.sampler).parameters) - _SHARED_KEYWORDS
        mapped = set(self.config_keys.values())
        if taken - mapped:
            raise ValueError(
                f"replay kind {self.name!r}: `config_keys` maps no config key to "
                f"{sorted(taken - mapped)}, which {self.sampler.__name__} takes"
            )
        if mapped - taken:
            raise ValueError(
                f"replay kind {self.name!r}: `config_keys` maps to {sorted(mapped - taken)}, "
                f"which {self.sampler.__name__} does not take"
            )
        if self.sampler.kind != self.name:
            raise ValueError(
                f"replay kind {self.name!r}: its sampler {self.sampler.__name__} says kind "
                f"{self.sampler.kind!r}"
            )
        # Frozen: no caller can add a key to the kind's mapping after the check above.
        object.__setattr__(self, "config_keys", MappingProxyType(dict(self.config_keys)))

    def keywords(self, config: Any) -> dict[str, Any]:
        """The constructor keywords of this kind, read from ``config`` (a ``ReplayConfig``).

        Raises:
            ValueError: ``config`` lacks a field ``config_keys`` names (the message names the kind).
        """
        missing = [key for key in self.config_keys if not hasattr(config, key)]
        if missing:
            raise ValueError(
                f"replay kind {self.name!r}: the config has no {missing} for its `config_keys`"
            )
        return {keyword: getattr(config, key) for key, keyword in self.config_keys.items()}


def _sum_and_min_trees(capacity: int) -> int:
    return 2 * SumTree.planned_nbytes(capacity)  # the min tree has the sum tree's layout


REPLAY_KINDS: Mapping[str, ReplayKind] = MappingProxyType({
    kind.name: kind
    for kind in (
        ReplayKind("uniform", UniformSampler, UniformReplay),
        ReplayKind(
            "proportional", ProportionalSampler, PrioritizedReplay,
            config_keys={key: key for key in (
                "alpha", "priority_eps", "td_error_clip", "uniform_mix", "weight_normalization",
            )},
            index_nbytes=_sum_and_min_trees,
        ),
        ReplayKind(
            "rank", RankSampler, RankBasedReplay,
            config_keys={key: key for key in ("alpha", "td_error_clip", "sort_interval")},
            # the heap, and the sampler's cumulative power-law table (one float64 a slot)
            index_nbytes=lambda capacity: RankHeap.planned_nbytes(capacity) + capacity * 8,
        ),
    )
})  # fmt: skip
if tuple(REPLAY_KINDS) != KINDS:  # a kind registered here but not listed there, or the reverse
    raise ImportError(
        f"per_dqn.memory: KINDS {KINDS} and the registered kinds {tuple(REPLAY_KINDS)} disagree"
    )


def replay_kind(kind: str) -> ReplayKind:
    """The registry entry of ``kind``.

    Raises:
        ValueError: an unknown ``kind``.
    """
    entry = REPLAY_KINDS.get(kind)
    if entry is None:
        raise ValueError(f"`kind` must be one of {KINDS}, got {kind!r}")
    return entry


def make_memory(kind: str, **kwargs: Any) -> ReplayMemory:
    """The memory of ``kind`` (one of ``KINDS``), built with its constructor's keywords.

    Raises:
        ValueError: an unknown ``kind``, or a keyword value the constructor refuses.
        TypeError: a keyword that kind does not take.
    """
    return replay_kind(kind).memory(**kwargs)
