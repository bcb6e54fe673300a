"""A replay memory is a storage plus a sampler; the three kinds are thin constructors of the pair.

``ReplayMemory(storage, sampler)`` is the one class the loop talks to, whatever the kind: ``add``,
``add_batch``, ``sample(batch_size, beta) -> Batch`` (with the sampled priorities), ``update``
(a ``PriorityUpdate``), ``weighted``, ``diagnostics()``, ``len()``, ``state_dict`` and
``load_state_dict``. It checks every input at this boundary and hands the storage and the sampler
only checked values. ``UniformReplay``, ``PrioritizedReplay`` and ``RankBasedReplay`` build the
storage (the layout ``storage_layout`` picks: whole, bit-packed or frame-deduplicated) and the
sampler from one set of keywords, and keep the kind-specific readers (``priorities``,
``mean_priority``, ``ranks``, ...); ``kinds.py`` registers each.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from per_dqn.memory.bits import BitStorage
from per_dqn.memory.frames import FrameStorage
from per_dqn.memory.samplers import (
    ProportionalSampler,
    RankSampler,
    Sampler,
    UniformSampler,
    in_range,
    positive_int,
)
from per_dqn.memory.storage import RingStorage, TransitionStorage
from per_dqn.memory.trees import first_invalid_update
from per_dqn.memory.types import Batch, PriorityUpdate

_INT64 = np.dtype(np.int64)
# PriorityUpdate(a, b) without the Python frame of the NamedTuple's generated __new__ (~0.1 us a
# gradient step; the result is the same tuple subclass instance).
_new_update = tuple.__new__


def storage_layout(
    obs_dtype: Any, dedup_frames: bool = False, frame_slack: float = 0.02
) -> tuple[type[RingStorage], dict[str, Any]]:
    """Which storage holds these observations, with its keywords: the one place that chooses
    (``make_storage`` builds it, ``planned_nbytes`` sizes it).

    Returns:
        ``FrameStorage`` with ``frame_slack`` for ``dedup_frames``, else ``BitStorage`` for bool
        observations (MinAtar's layers, eight a byte, losslessly), else ``TransitionStorage``.
    """
    if dedup_frames:
        return FrameStorage, {"frame_slack": frame_slack}
    if np.dtype(obs_dtype) == np.bool_:
        return BitStorage, {}
    return TransitionStorage, {}


def make_storage(
    capacity: int,
    obs_shape: tuple[int, ...],
    obs_dtype: Any = np.float32,
    dedup_frames: bool = False,
    frame_slack: float = 0.02,
) -> RingStorage:
    """A flat ``TransitionStorage`` (a ``BitStorage`` for bool observations), or a
    ``FrameStorage`` with ``dedup_frames`` (see ``storage_layout``).

    Raises:
        TypeError, ValueError: a ``capacity`` or ``obs_shape`` that is not a positive int / tuple
            of positive ints, or a frame storage's constraint (see ``FrameStorage``).
    """
    capacity = positive_int("capacity", capacity)
    try:
        obs_shape = tuple(int(d) for d in obs_shape)
    except TypeError:
        raise TypeError(f"`obs_shape` must be a tuple of ints, got {obs_shape!r}") from None
    if any(d < 1 for d in obs_shape):
        raise ValueError(f"`obs_shape` dimensions must be >= 1, got {obs_shape}")
    cls, options = storage_layout(obs_dtype, dedup_frames, frame_slack)
    return cls(capacity, obs_shape, obs_dtype, **options)


class ReplayMemory:
    """Experience replay: transitions in ``storage``, drawn and weighted by ``sampler``.

    Args:
        storage: a ``RingStorage`` (``TransitionStorage``, ``BitStorage`` or ``FrameStorage``;
            see ``make_storage``).
        sampler: a ``Sampler`` of the same capacity (``UniformSampler``, ``ProportionalSampler``
            or ``RankSampler``).

    Raises:
        ValueError: storage and sampler of different capacities.
    """

    def __init__(self, storage: RingStorage, sampler: Sampler) -> None:
        if storage.capacity != sampler.capacity:
            raise ValueError(
                f"`sampler` capacity must be the storage's ({storage.capacity}), "
                f"got {sampler.capacity}"
            )
        self._storage = storage
        self._sampler = sampler

    @property
    def storage(self) -> RingStorage:
        """Where the transitions live."""
        return self._storage

    @property
    def sampler(self) -> Sampler:
        """What draws them: priorities, weights and the random generator."""
        return self._sampler

    @property
    def kind(self) -> str:
        """``"uniform"``, ``"proportional"`` or ``"rank"`` (one of ``KINDS``): the sampler's."""
        return self._sampler.kind

    @property
    def weighted(self) -> bool:
        """Whether ``sample``'s IS weights depend on beta (False for uniform replay)."""
        return self._sampler.weighted

    @property
    def capacity(self) -> int:
        """Maximum number of transitions kept."""
        return self._storage.capacity

    def __len__(self) -> int:
        return self._storage.size

    @property
    def nbytes(self) -> int:
        """Bytes held by the memory's arrays: storage plus priority index."""
        return self._storage.nbytes + self._sampler.nbytes

    # --- writing -----------------------------------------------------------------------------

    def add(self, obs, action, reward, next_obs, terminated, n_steps: int = 1) -> int:
        """Stores one transition and returns its slot.

        ``n_steps`` is the number of env steps from ``obs`` to ``next_obs`` (1 unless the caller
        builds n-step returns); ``reward`` is then the discounted sum over those steps.

        Raises:
            ValueError: ``obs`` or ``next_obs`` of the wrong shape or of an uncastable dtype.
        """
        st = self._storage
        obs = st.check_obs("obs", obs, batched=False)
        next_obs = st.check_obs("next_obs", next_obs, batched=False)
        slot = st.write(obs, action, reward, next_obs, terminated, n_steps)
        self._sampler.on_insert(slot)
        return slot

    def add_batch(self, obs, actions, rewards, next_obs, terminated, n_steps=1) -> np.ndarray:
        """Stores ``B`` transitions (one vector-env step), in order; returns their slots.

        Raises:
            ValueError: a wrongly shaped observation batch or fields of different lengths.
        """
        st = self._storage
        obs = st.check_obs("obs", obs, batched=True)
        next_obs = st.check_obs("next_obs", next_obs, batched=True)
        actions = np.asarray(actions).reshape(-1)
        rewards = np.asarray(rewards).reshape(-1)
        terminated = np.asarray(terminated).reshape(-1)
        n = obs.shape[0]
        n_steps = np.broadcast_to(np.asarray(n_steps, dtype=np.uint8).reshape(-1), (n,))
        for name, arr in (
            ("next_obs", next_obs), ("actions", actions), ("rewards", rewards),
            ("terminated", terminated),
        ):  # fmt: skip
            if arr.shape[0] != n:
                raise ValueError(f"`{name}` must have {n} entries like `obs`, got {arr.shape[0]}")
        slots = st.write_batch(obs, actions, rewards, next_obs, terminated, n_steps)
        self._sampler.on_insert(slots)
        return slots

    # --- sampling ----------------------------------------------------------------------------

    def sample(self, batch_size: int, beta: float = 1.0) -> Batch:
        """Draws a minibatch.

        Args:
            batch_size: number of transitions, at most ``len(self)``.
            beta: importance-sampling exponent in [0, 1] (ignored by uniform replay).

        Returns:
            The transitions, their slots (``indices``), IS weights and, for the prioritized kinds,
            the ``priorities`` the sampler read during the draw (None for uniform).

        Raises:
            ValueError: an empty memory, ``batch_size`` out of range, or ``beta`` outside [0, 1].
        """
        batch_size = positive_int("batch_size", batch_size)
        size = self._storage.size
        if size == 0:
            raise ValueError("cannot sample from an empty replay memory")
        if batch_size > size:
            raise ValueError(
                f"`batch_size` must be <= stored transitions ({size}), got {batch_size}"
            )
        beta = in_range("beta", beta, 0.0, 1.0)
        # draw -> (indices, weights, priorities), the arguments of gather
        return self._storage.gather(*self._sampler.draw(batch_size, beta, size))

    # --- priorities --------------------------------------------------------------------------

    def _check_update(self, indices, td_errors) -> PriorityUpdate:
        # This runs once per gradient step: the `is`/`ndim` tests skip the no-op cast and
        # reshapes of the usual input (1-D int64 and float64 arrays), ~0.3 us of a ~4 us update.
        indices = np.asarray(indices)
        td_errors = np.asarray(td_errors, dtype=np.float64)
        if td_errors.ndim != 1:
            td_errors = td_errors.reshape(-1)
        if indices.dtype is not _INT64:
            if indices.dtype.kind not in "iu":
                raise TypeError(f"`indices` must be integers, got dtype {indices.dtype}")
            indices = indices.astype(np.int64)
        if indices.ndim != 1:
            indices = indices.reshape(-1)
        if indices.shape != td_errors.shape:
            raise ValueError(
                f"`indices` and `td_errors` must have the same length, "
                f"got {indices.shape[0]} and {td_errors.shape[0]}"
            )
        bad = first_invalid_update(indices, self._storage.size, td_errors)
        if bad >= 0:
            raise ValueError(
                f"`indices` must lie in [0, {self._storage.size}) (stored transitions), "
                f"got {indices[bad]} at position {bad}"
            )
        if bad < -1:
            bad = -2 - bad
            raise ValueError(
                f"`td_errors` must be finite and >= 0 (pass |delta|), "
                f"got {float(td_errors[bad])!r} at position {bad} (index {indices[bad]})"
            )
        return _new_update(PriorityUpdate, (indices, td_errors))

    def update(self, update: PriorityUpdate) -> None:
        """Hands a learner's ``PriorityUpdate(indices, td_abs)`` to the sampler, checked.

        The same as ``update_priorities(update.indices, update.td_abs)``: a no-op for uniform
        replay, but the input is still validated, so a NaN loss is caught whichever memory is in
        use. Repeated indices: the last error wins.

        Raises:
            ValueError: an index outside the stored range, or a NaN, infinite or negative error.
                Nothing is changed then.
            TypeError: indices that are not integers.
        """
        self._sampler.update(self._check_update(update.indices, update.td_abs))

    def update_priorities(self, indices, td_errors) -> None:
        """Sets new priorities from absolute TD errors ``|delta|`` (see ``update``).

        Proportional: ``p_i = (min(|delta_i|, clip) + priority_eps) ** alpha``; rank: the key
        ``min(|delta_i|, clip)``; uniform: nothing (after the checks).

        Raises:
            ValueError: an index outside the stored range, or a NaN, infinite or negative error.
                Nothing is changed then.
            TypeError: indices that are not integers.
        """
        self._sampler.update(self._check_update(indices, td_errors))

    def diagnostics(self, full: bool = False) -> dict[str, float]:
        """The sampler's numbers worth logging: ``{}`` for uniform replay, ``mean_priority`` and
        ``max_priority`` for the prioritized kinds, and with ``full`` (O(capacity), call it
        rarely) ``tree_drift`` for proportional."""
        return self._sampler.diagnostics(full)

    # --- state -------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: contents, priorities and RNG state."""
        return {"kind": self.kind, "storage": self._storage.state_dict()} | (
            self._sampler.state_dict()
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict()`` output.

        Raises:
            ValueError: a state for another kind or layout; nothing is changed then.
        """
        if state.get("kind") != self.kind:
            raise ValueError(f"state is for a `{state.get('kind')}` memory, not `{self.kind}`")
        size = int(np.asarray(state["storage"]["size"]))
        self._sampler.check_state(state, size)  # before the storage changes
        self._storage.load_state_dict(state["storage"])
        self._sampler.load_state_dict(state, size)


class UniformReplay(ReplayMemory):
    """Uniform experience replay: every stored transition equally likely, weights all 1.

    Args:
        capacity: transitions kept; the oldest is overwritten first.
        obs_shape: shape of one observation, e.g. ``(4,)`` or ``(4, 84, 84)``.
        obs_dtype: storage dtype of observations (uint8 frames stay uint8).
        seed: seed of the sampler's random generator (None: fresh entropy).
        dedup_frames: store stacked uint8 image observations ``(stack, height, width)`` one
            distinct frame at a time (``FrameStorage``) instead of whole ``obs``/``next_obs``.
        frame_slack: with ``dedup_frames``, extra frames for episode starts, as a fraction of
            ``capacity``.
    """

    def __init__(
        self,
        *,
        capacity: int,
        obs_shape: tuple[int, ...],
        obs_dtype: Any = np.float32,
        seed: int | None = None,
        dedup_frames: bool = False,
        frame_slack: float = 0.02,
    ) -> None:
        sampler = UniformSampler(capacity, seed)
        storage = make_storage(capacity, obs_shape, obs_dtype, dedup_frames, frame_slack)
        super().__init__(storage, sampler)


class _PrioritizedReplay(ReplayMemory):
    """What the two prioritized kinds share: building from keywords, and the readers every
    prioritized sampler has (``alpha``, ``td_error_clip``, ``max_priority``, ``priorities``,
    ``mean_priority``)."""

    def __init__(
        self, sampler: type[ProportionalSampler | RankSampler], keywords: dict, base: dict
    ) -> None:
        seed = base.pop("seed", None)
        prioritized = sampler(base.get("capacity"), seed=seed, **keywords)
        super().__init__(make_storage(**base), prioritized)
        self._prioritized = prioritized

    @property
    def alpha(self) -> float:
        """The exponent of the priorities (proportional) or of the ranks (rank)."""
        return self._prioritized.alpha

    @property
    def td_error_clip(self) -> float | None:
        """Where ``|delta|`` is clipped (None: nowhere)."""
        return self._prioritized.td_error_clip

    @property
    def max_priority(self) -> float:
        """The largest raw priority seen, initially 1: ``min(|delta|, clip) + priority_eps``
        (proportional) or the ranking key ``min(|delta|, clip)`` (rank)."""
        return self._prioritized.max_priority

    def priorities(self, indices) -> np.ndarray:
        """Leaf priorities ``p_i`` (alpha applied; proportional) or ranking keys
        ``min(|delta|, clip)`` (rank) at ``indices``."""
        return self._prioritized.priorities(indices)

    @property
    def mean_priority(self) -> float:
        """Mean of ``priorities`` over the stored transitions (0 when empty)."""
        return self._prioritized.mean_priority


class PrioritizedReplay(_PrioritizedReplay):
    """Proportional prioritized replay over a sum tree: ``ProportionalSampler`` has the formulas.

    Args:
        alpha: prioritisation exponent >= 0; 0.6 in the paper's proportional Atari runs.
        priority_eps: added to ``|delta|`` so no transition gets priority 0; > 0 (1e-6 default).
        td_error_clip: clip ``|delta|`` at this value before prioritising (None: no clip).
        uniform_mix: probability in [0, 1) that a draw is uniform instead of prioritized; the
            weights use the resulting mixture distribution.
        weight_normalization: ``"global"`` (the paper's max over the memory) or ``"batch"``.
        **base: ``capacity``, ``obs_shape``, ``obs_dtype``, ``seed``, ``dedup_frames``,
            ``frame_slack`` (see ``UniformReplay``).
    """

    def __init__(
        self,
        *,
        alpha: float = 0.6,
        priority_eps: float = 1e-6,
        td_error_clip: float | None = None,
        uniform_mix: float = 0.0,
        weight_normalization: str = "global",
        **base: Any,
    ) -> None:
        keywords = dict(
            alpha=alpha, priority_eps=priority_eps, td_error_clip=td_error_clip,
            uniform_mix=uniform_mix, weight_normalization=weight_normalization,
        )  # fmt: skip
        super().__init__(ProportionalSampler, keywords, base)
        self._proportional = self._prioritized

    @property
    def priority_eps(self) -> float:
        """Added to ``|delta|`` before the exponent."""
        return self._proportional.priority_eps

    @property
    def uniform_mix(self) -> float:
        """Share of uniform draws."""
        return self._proportional.uniform_mix

    @property
    def weight_normalization(self) -> str:
        """``"global"`` or ``"batch"``."""
        return self._proportional.weight_normalization

    @property
    def total_priority(self) -> float:
        """Sum of all leaf priorities (the sum tree's root)."""
        return self._proportional.sums.total

    def tree_drift(self) -> float:
        """Relative gap between the sum tree's root and an exact sum of its leaves; O(capacity)."""
        return self._proportional.tree_drift()


class RankBasedReplay(_PrioritizedReplay):
    """Rank-based prioritized replay over a binary heap: ``RankSampler`` has the formulas.

    Args:
        alpha: rank exponent >= 0; 0.7 in the paper's rank-based Atari runs.
        td_error_clip: clip ``|delta|`` at this value before ranking (None: no clip).
        sort_interval: priority updates between full re-sorts of the heap (>= 1).
        **base: ``capacity``, ``obs_shape``, ``obs_dtype``, ``seed``, ``dedup_frames``,
            ``frame_slack`` (see ``UniformReplay``).
    """

    def __init__(
        self,
        *,
        alpha: float = 0.7,
        td_error_clip: float | None = None,
        sort_interval: int = 1000,
        **base: Any,
    ) -> None:
        keywords = dict(alpha=alpha, td_error_clip=td_error_clip, sort_interval=sort_interval)
        super().__init__(RankSampler, keywords, base)
        self._rank = self._prioritized

    @property
    def sort_interval(self) -> int:
        """Priority updates between full re-sorts."""
        return self._rank.sort_interval

    def sort(self) -> None:
        """Sorts the heap array by decreasing ``|delta|``, ties newest first, so that positions
        are exact ranks (a sorted array is a valid heap)."""
        self._rank.sort()

    def ranks(self, indices) -> np.ndarray:
        """Current 1-based rank (heap position + 1) of each stored index."""
        return self._rank.ranks(indices)
