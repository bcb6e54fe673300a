"""What every sampler is: the interface a replay kind implements, and the checks they share.

A sampler decides which stored transitions a replay memory draws, and with what weights. It keeps
the memory's priority index (none, sum and min trees, a rank heap, ...) and its random generator;
the storage keeps the transitions. Each kind's sampler lives in its own module (``uniform.py``,
``proportional.py``, ``rank.py``) and is registered once in ``kinds.py``.
``ReplayMemory(storage, sampler)`` validates every call at its public boundary and hands the
sampler only checked input:

- ``on_insert(slots)``: slots (an int from ``add``, an int64 array from ``add_batch``) now hold new
  transitions;
- ``draw(batch_size, beta, size) -> (indices, weights, priorities)``: a batch from the ``size``
  stored transitions, with importance-sampling weights and the priorities the draw read (None for
  uniform); ``picks(batch_size)``: uniforms for a learner that picks its samples out of a larger
  batch (LaBER), None for the others;
- ``update(PriorityUpdate)``: new ``|delta|`` for sampled slots;
- ``diagnostics(full)``: numbers worth logging, ``{}`` when there are none;
- ``state_dict()`` / ``check_state(state, size)`` / ``load_state_dict(state, size)``; ``nbytes``
  and, before any is allocated, ``planned_nbytes(capacity)``.

The beta schedule lives outside (``per_dqn.training.schedules``): the caller passes the current
beta.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

from per_dqn.memory.types import PriorityUpdate

# Keywords every sampler takes from the memory's own arguments, never from the kind's config.
SHARED_KEYWORDS = ("capacity", "seed")


def positive_int(name: str, value) -> int:
    """``value`` as an int, or TypeError/ValueError naming ``name`` unless it is an int >= 1."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"`{name}` must be an int, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"`{name}` must be >= 1, got {value}")
    return int(value)


def in_range(name: str, value, low: float, high: float) -> float:
    """``value`` as a float, or ValueError naming ``name`` unless it lies in ``[low, high]``."""
    value = float(value)
    if not low <= value <= high:  # also rejects NaN
        raise ValueError(f"`{name}` must be in [{low}, {high}], got {value}")
    return value


def optional_clip(name: str, value) -> float | None:
    """``value`` as a float or None; ValueError naming ``name`` unless None or in (0, inf)."""
    clip = None if value is None else float(value)
    if clip is not None and not 0.0 < clip < np.inf:
        raise ValueError(f"`{name}` must be > 0 or None, got {value}")
    return clip


def checked_priorities(state: dict[str, Any], capacity: int, size: int) -> np.ndarray:
    """A sampler state's ``priorities`` as ``capacity`` float64 leaves, or ValueError unless they
    are finite values >= 0, one for each of the ``size`` stored transitions (the leaves past them
    are 0) or, as checkpoints held them before they were sized to their contents, one a slot (the
    one check of the samplers that keep a leaf per slot)."""
    priorities = np.asarray(state["priorities"], dtype=np.float64)
    if priorities.shape not in {(size,), (capacity,)}:
        lengths = " or ".join(str(n) for n in sorted({size, capacity}))
        raise ValueError(f"`priorities` must have shape ({lengths},), got {priorities.shape}")
    bad = np.flatnonzero(~(np.isfinite(priorities) & (priorities >= 0.0)))
    if bad.size:
        raise ValueError(
            f"`priorities` must be finite and >= 0, "
            f"got {float(priorities[bad[0]])!r} at slot {bad[0]}"
        )
    if len(priorities) == capacity:
        return priorities
    leaves = np.zeros(capacity, dtype=np.float64)
    leaves[:size] = priorities
    return leaves


class Sampler(ABC):
    """The interface every sampler implements; it owns the random generator and its state.

    A new replay kind is a subclass in a module of its own plus its entry in
    ``per_dqn.memory.kinds.REPLAY_KINDS`` (``docs/extending.md``). Its constructor takes
    ``capacity`` and ``seed`` and, as keywords with defaults, its own settings: each is also a
    ``ReplayConfig`` field of the same name, kept as an attribute of the same name.

    Args:
        capacity: slots of the storage it samples from, an int >= 1.
        seed: seed of the sampler's own generator, or a ``np.random.Generator`` to use as is
            (None: fresh entropy).

    Attributes:
        kind: the name a memory's ``state_dict`` carries, one of ``per_dqn.memory.KINDS``.
        weighted: whether the IS weights ``draw`` returns depend on ``beta`` (the loop logs beta
            only then).
        rng: the generator every draw uses.
    """

    kind: ClassVar[str]
    weighted: ClassVar[bool]

    def __init__(self, capacity: int, seed: int | np.random.Generator | None = None) -> None:
        self.capacity = positive_int("capacity", capacity)
        self.rng = np.random.default_rng(seed)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity={self.capacity})"

    @classmethod
    def settings(cls) -> tuple[str, ...]:
        """The constructor's own keywords (its settings), in order: all but ``capacity`` and
        ``seed``."""
        return tuple(
            name for name in inspect.signature(cls).parameters if name not in SHARED_KEYWORDS
        )

    @staticmethod
    @abstractmethod
    def planned_nbytes(capacity: int) -> int:
        """Bytes ``nbytes`` will be for ``capacity``, computed without allocating (what
        ``per-dqn plan`` counts; a test checks it against ``nbytes``)."""

    @property
    @abstractmethod
    def nbytes(self) -> int:
        """Bytes held by the sampler's index arrays."""

    @abstractmethod
    def on_insert(self, slots: int | np.ndarray) -> None:
        """Slots that now hold new transitions: one int (``add``) or an int64 array (``add_batch``).

        Trusts its input: slots in ``[0, capacity)``, in the order the storage wrote them.
        """

    @abstractmethod
    def draw(
        self, batch_size: int, beta: float, size: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Draws ``batch_size`` of the ``size`` stored slots.

        Trusts its input (``ReplayMemory.sample`` checks it): ``1 <= batch_size <= size``,
        ``beta`` in [0, 1].

        Returns:
            ``(indices, weights, priorities)``: int64 slots, float64 IS weights, and the float64
            priorities read during the draw (None where there are no priorities).
        """

    def rows(self, batch_size: int) -> int:
        """Transitions ``draw`` returns for a batch of ``batch_size``: ``batch_size`` itself
        (the default), or more for a kind whose learner picks from a larger batch (LaBER)."""
        return batch_size

    def picks(self, batch_size: int) -> np.ndarray | None:
        """Uniforms in [0, 1), one per sample the learner learns from, drawn after ``draw`` for a
        kind whose learner picks ``batch_size`` samples out of the larger batch ``draw`` returned
        (LaBER); None (the default) for every other kind."""
        return None

    @abstractmethod
    def update(self, update: PriorityUpdate) -> None:
        """New ``|delta|`` for sampled slots.

        Trusts its input (``ReplayMemory.update`` checks it): ``indices`` int64 of stored slots,
        ``td_abs`` float64, finite and >= 0, of the same length.
        """

    @abstractmethod
    def diagnostics(self, full: bool = False) -> dict[str, float]:
        """Numbers worth logging about the priorities, by name (``{}`` when there are none).

        Args:
            full: also the O(capacity) checks (e.g. the sum tree's drift); call it rarely.
        """

    def state_dict(self) -> dict[str, Any]:
        """The sampler's part of a memory's ``state_dict``: its RNG state and priority index."""
        return {"rng": self.rng.bit_generator.state}

    def check_state(self, state: dict[str, Any], size: int) -> None:
        """Raises ValueError, changing nothing, unless ``state`` fits this sampler with ``size``
        stored transitions (a memory calls it before it restores any part)."""
        if "rng" not in state:
            raise ValueError("replay state has no `rng`")

    def load_state_dict(self, state: dict[str, Any], size: int) -> None:
        """Restores ``state_dict()`` output for a storage holding ``size`` transitions."""
        self.check_state(state, size)
        self.rng.bit_generator.state = state["rng"]
