"""The replay kinds, registered once: a kind is its name, its sampler and that sampler's settings.

A new kind is one ``Sampler`` subclass in a module of its own and one ``ReplayKind`` entry below
(``docs/extending.md``). Everything else that lists the kinds reads ``REPLAY_KINDS``: ``KINDS``,
``replay.kind`` in the config, ``--replay`` and ``ablate``'s arms, the generated config
reference, ``make_memory``, ``planned_nbytes`` and the shared tests.

An entry names its sampler as ``"module:Class"`` (as Gymnasium's ``register`` names an env's entry
point) and lists its settings as data, so that reading the registry, as the config and the command
line do, imports no numpy or numba: the class is imported on first use (``ReplayKind.sampler``),
and checked then against the entry.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from per_dqn.memory.samplers import Sampler


@dataclass(frozen=True)
class ReplayKind:
    """One replay kind.

    Args:
        name: the kind's name (``replay.kind`` in the config, ``--replay`` on the CLI).
        entry_point: ``"package.module:SamplerClass"``, the kind's ``Sampler`` subclass.
        settings: the sampler's own constructor keywords, each a ``ReplayConfig`` field of the
            same name (``ReplayKind.sampler`` checks the list against the constructor).
        summary: one line on what the kind does, for the config reference and ``--help``.
        objective: what its learner minimises, a name in ``per_dqn.agent.objectives.OBJECTIVES``
            (``weighted``: the IS-weighted ``agent.loss``); the objective's own settings are
            ``ReplayConfig`` fields too.
        signal: the priority signal its learner hands back, a name in
            ``per_dqn.agent.signals.PRIORITY_SIGNALS``; None: ``replay.priority_from`` chooses.
        weighted: whether its draws carry IS weights that depend on beta (its sampler's
            ``weighted``; ``ReplayKind.sampler`` checks the two agree): only then does it read
            ``replay.beta0``, ``beta_end`` and ``beta_anneal_steps``.
        keeps_priorities: whether its sampler keeps a priority per stored transition, set by
            the learner's signal (and, in a distributed run, by the actors' |delta| on entry):
            only then does it read ``replay.initial_priority``.
        default_arm: whether ``per-dqn ablate`` runs it when ``--replay`` is not given (the
            three arms of Schaul et al.'s comparison: uniform, proportional and rank).
    """

    name: str
    entry_point: str
    settings: tuple[str, ...] = ()
    summary: str = ""
    objective: str = "weighted"
    signal: str | None = "td_error"
    weighted: bool = False
    keeps_priorities: bool = False
    default_arm: bool = False

    @property
    def sampler(self) -> type[Sampler]:
        """The sampler class, imported on first use and checked against this entry.

        Raises:
            ImportError: the entry point does not name a class; it is not a ``Sampler`` of this
                kind; or ``settings`` differs from the constructor's own keywords. Each message
                names the kind.
        """
        module_name, _, class_name = self.entry_point.partition(":")
        cls = getattr(importlib.import_module(module_name), class_name, None)
        from per_dqn.memory.samplers import Sampler  # numpy: only once a sampler is wanted

        if not (isinstance(cls, type) and issubclass(cls, Sampler)):
            raise ImportError(
                f"replay kind {self.name!r}: {self.entry_point!r} is not a Sampler subclass"
            )
        if getattr(cls, "kind", None) != self.name:
            raise ImportError(
                f"replay kind {self.name!r}: its sampler {cls.__name__} says kind "
                f"{getattr(cls, 'kind', None)!r}"
            )
        if cls.weighted != self.weighted:
            raise ImportError(
                f"replay kind {self.name!r}: the entry says weighted={self.weighted}, but "
                f"{cls.__name__} says {cls.weighted}"
            )
        if cls.settings() != self.settings:
            raise ImportError(
                f"replay kind {self.name!r}: the entry lists settings {self.settings}, but "
                f"{cls.__name__} takes {cls.settings()}"
            )
        return cls

    def keywords(self, config: Any) -> dict[str, Any]:
        """The sampler's settings as ``config`` (a ``ReplayConfig``) holds them.

        Raises:
            ValueError: ``config`` lacks one of ``settings`` (the message names the kind).
        """
        missing = [key for key in self.settings if not hasattr(config, key)]
        if missing:
            raise ValueError(f"replay kind {self.name!r}: the config has no {missing}")
        return {key: getattr(config, key) for key in self.settings}


REPLAY_KINDS: Mapping[str, ReplayKind] = MappingProxyType({
    kind.name: kind
    for kind in (
        ReplayKind(
            "uniform", "per_dqn.memory.uniform:UniformSampler",
            summary="every stored transition equally likely (no priorities)", default_arm=True,
        ),
        ReplayKind(
            "proportional", "per_dqn.memory.proportional:ProportionalSampler",
            ("alpha", "priority_eps", "td_error_clip", "uniform_mix", "weight_normalization"),
            summary="PER, P(i) proportional to p_i^alpha over a sum tree (Schaul et al., 2016)",
            signal=None, weighted=True, keeps_priorities=True, default_arm=True,
        ),
        ReplayKind(
            "rank", "per_dqn.memory.rank:RankSampler",
            ("alpha", "td_error_clip", "sort_interval"),
            summary="PER, P(i) proportional to rank(i)^-alpha over a heap (Schaul et al., 2016)",
            signal=None, weighted=True, keeps_priorities=True, default_arm=True,
        ),
        ReplayKind(
            "relo", "per_dqn.memory.relo:ReLoSampler",
            ("alpha", "priority_eps", "td_error_clip", "uniform_mix", "weight_normalization"),
            summary="proportional PER by the reducible loss, ReLo (Sujit et al., 2023)",
            signal="reducible_loss", weighted=True, keeps_priorities=True,
        ),
        ReplayKind(
            "lap", "per_dqn.memory.lap:LAPSampler", ("alpha", "min_priority"),
            summary="LAP: P(i) by max(|delta|, k)^alpha, no IS weights, LAP's Huber loss "
            "(Fujimoto et al., 2020)",
            objective="lap", keeps_priorities=True,
        ),
        ReplayKind(
            "pal", "per_dqn.memory.pal:PALSampler",
            summary="PAL: uniform replay with LAP's expected gradient (Fujimoto et al., 2020)",
            objective="pal",
        ),
        ReplayKind(
            "laber", "per_dqn.memory.laber:LaBERSampler", ("large_batch",),
            summary="LaBER-mean: B picked by fresh |delta| from m B uniform (Lahire et al., 2022)",
            objective="laber",
        ),
    )
})  # fmt: skip

KINDS: tuple[str, ...] = tuple(REPLAY_KINDS)
"""The replay kinds' names, in the registry's order (the CLI's and the report's order)."""

DEFAULT_ARMS: tuple[str, ...] = tuple(k.name for k in REPLAY_KINDS.values() if k.default_arm)
"""The kinds ``per-dqn ablate`` compares when ``--replay`` is not given."""


def replay_kind(kind: str) -> ReplayKind:
    """The registry entry of ``kind``.

    Raises:
        ValueError: an unknown ``kind``.
    """
    entry = REPLAY_KINDS.get(kind)
    if entry is None:
        raise ValueError(f"`kind` must be one of {KINDS}, got {kind!r}")
    return entry
