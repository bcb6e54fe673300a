"""A replay memory is a storage plus a sampler, whatever the kind.

``ReplayMemory(storage, sampler)`` is the one class the loop talks to: ``add``, ``add_batch``,
``sample(batch_size, beta) -> Batch`` (with the sampled priorities), ``update`` (a
``PriorityUpdate``), ``weighted``, ``diagnostics()``, ``len()``, ``state_dict`` and
``load_state_dict``. It checks every input at this boundary and hands the storage and the sampler
only checked values. ``make_memory(kind, ...)`` builds the pair from one set of keywords: the
storage the layout ``storage_layout`` picks (whole, bit-packed or frame-deduplicated) and the
sampler the kind's registry entry names (``kinds.py``). What only one kind has (a sum tree's
drift, a heap's ranks) is its sampler's: ``memory.sampler.ranks(indices)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from per_dqn.memory.bits import BitStorage
from per_dqn.memory.frames import FrameStorage
from per_dqn.memory.kinds import replay_kind
from per_dqn.memory.samplers import Sampler, in_range, positive_int
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
        sampler: a ``Sampler`` of the same capacity (the kind's: ``UniformSampler``,
            ``ProportionalSampler``, ``RankSampler``, ...).

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
        """The sampler's kind, one of ``KINDS``."""
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

    def add_batch(
        self, obs, actions, rewards, next_obs, terminated, n_steps=1, td_abs=None
    ) -> np.ndarray:
        """Stores ``B`` transitions (one vector-env step, or a block of them), in order; returns
        their slots.

        With ``td_abs`` (``B`` errors ``|delta|``), the transitions enter with the priorities those
        errors give, as ``update_priorities(slots, td_abs)`` would set them just after, instead of
        the sampler's insertion priority (max priority, for the prioritized kinds): Ape-X's actors
        compute them with their own copy of the network (Horgan et al., 2018).

        Raises:
            ValueError: a wrongly shaped observation batch, fields of different lengths, or a
                ``td_abs`` of another length or with a NaN, infinite or negative error; nothing
                is stored then.
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
        if td_abs is not None:
            td_abs = np.asarray(td_abs, dtype=np.float64).reshape(-1)
            if td_abs.shape[0] != n:
                raise ValueError(
                    f"`td_abs` must have {n} entries like `obs`, got {td_abs.shape[0]}"
                )
            bad = np.flatnonzero(~(np.isfinite(td_abs) & (td_abs >= 0.0)))
            if bad.size:
                raise ValueError(
                    f"`td_abs` must be finite and >= 0 (pass |delta|), "
                    f"got {float(td_abs[bad[0]])!r} at position {bad[0]}"
                )
        slots = st.write_batch(obs, actions, rewards, next_obs, terminated, n_steps)
        self._sampler.on_insert(slots)
        if td_abs is not None:
            self._sampler.update(_new_update(PriorityUpdate, (slots, td_abs)))
        return slots

    # --- sampling ----------------------------------------------------------------------------

    def sample(self, batch_size: int, beta: float = 1.0) -> Batch:
        """Draws a minibatch.

        Args:
            batch_size: number of transitions, at most ``len(self)``.
            beta: importance-sampling exponent in [0, 1] (ignored by uniform replay).

        Returns:
            The transitions, their slots (``indices``), IS weights and, for the prioritized kinds,
            the ``priorities`` the sampler read during the draw (None for uniform):
            ``sampler.rows(batch_size)`` of them, which is ``batch_size`` but for a kind whose
            learner picks ``batch_size`` out of a larger batch (LaBER), whose ``picks`` the batch
            then carries.

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
        batch = self._storage.gather(*self._sampler.draw(batch_size, beta, size))
        picks = self._sampler.picks(batch_size)
        return batch if picks is None else batch._replace(picks=picks)

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
        """Sets new priorities from absolute TD errors ``|delta|`` (see ``update``); what a
        priority is made of is the sampler's (proportional: ``(min(|delta|, clip) + eps) **
        alpha``, rank: the key ``min(|delta|, clip)``, uniform: nothing, after the checks).

        Raises:
            ValueError: an index outside the stored range, or a NaN, infinite or negative error.
                Nothing is changed then.
            TypeError: indices that are not integers.
        """
        self._sampler.update(self._check_update(indices, td_errors))

    def diagnostics(self, full: bool = False) -> dict[str, float]:
        """The sampler's numbers worth logging: ``{}`` for uniform replay, ``mean_priority`` and
        ``max_priority`` for the prioritized kinds, and with ``full`` (O(capacity), call it
        rarely) its costly checks, such as proportional's ``tree_drift``."""
        return self._sampler.diagnostics(full)

    # --- state -------------------------------------------------------------------------------

    def state_dict(self, copy: bool = True) -> dict[str, Any]:
        """Everything needed to continue exactly: contents, priorities and RNG state, of the
        stored transitions only (a memory of 51k transitions of 1M saves 51k).

        Args:
            copy: False returns views into the memory's arrays where it can (its storage's;
                the samplers' small arrays are copies), valid until the memory next changes:
                what a checkpoint streams to disk without holding the memory twice in RAM.
        """
        return {"kind": self.kind, "storage": self._storage.state_dict(copy)} | (
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


def make_memory(
    kind: str,
    *,
    capacity: int,
    obs_shape: tuple[int, ...],
    obs_dtype: Any = np.float32,
    seed: int | None = None,
    dedup_frames: bool = False,
    frame_slack: float = 0.02,
    **settings: Any,
) -> ReplayMemory:
    """A memory of ``kind`` (one of ``KINDS``): ``ReplayMemory(storage, sampler)``.

    Args:
        kind: the registry's name for it (``kinds.REPLAY_KINDS``).
        capacity: transitions kept; the oldest is overwritten first.
        obs_shape: shape of one observation, e.g. ``(4,)`` or ``(4, 84, 84)``.
        obs_dtype: storage dtype of observations (uint8 frames stay uint8).
        seed: seed of the sampler's random generator (None: fresh entropy).
        dedup_frames: store stacked uint8 image observations ``(stack, height, width)`` one
            distinct frame at a time (``FrameStorage``) instead of whole ``obs``/``next_obs``.
        frame_slack: with ``dedup_frames``, extra frames for episode starts, as a fraction of
            ``capacity``.
        **settings: the kind's own settings (its entry's ``settings``, e.g. ``alpha``), passed
            to its sampler; left out, the sampler's defaults.

    Raises:
        ValueError: an unknown ``kind``, or a value the sampler or the storage refuses.
        TypeError: a setting the kind does not take.
    """
    sampler = replay_kind(kind).sampler
    unknown = sorted(set(settings) - set(sampler.settings()))
    if unknown:
        raise TypeError(
            f"replay kind {kind!r} takes no {', '.join(f'`{name}`' for name in unknown)}; "
            f"its settings are {', '.join(sampler.settings()) or 'none'}"
        )
    built = sampler(capacity, seed=seed, **settings)
    storage = make_storage(capacity, obs_shape, obs_dtype, dedup_frames, frame_slack)
    return ReplayMemory(storage, built)
