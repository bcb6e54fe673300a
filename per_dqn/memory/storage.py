"""Ring-buffer storage of transitions: preallocated arrays written in place, no per-item objects."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Batch(NamedTuple):
    """A sampled minibatch: the typed contract between a replay memory and the learner.

    Attributes:
        obs: observations ``s_t``, shape ``(B, *obs_shape)``, the storage dtype (uint8 stays uint8).
        actions: int64 actions ``a_t``, shape ``(B,)``.
        rewards: float32 rewards ``r_t``, shape ``(B,)``.
        next_obs: observations ``s_{t+1}``, shape ``(B, *obs_shape)``.
        terminated: bool, True where ``s_{t+1}`` is terminal (no bootstrapping); truncation is not
            termination and is never stored here.
        indices: int64 slots the transitions came from; hand them back to ``update_priorities``.
        weights: float32 importance-sampling weights (all 1 for uniform replay).
        n_steps: uint8 number of env steps between ``obs`` and ``next_obs`` (1 for one-step
            transitions); an n-step target bootstraps with ``gamma ** n_steps``, which stays right
            for the shorter windows at the end of an episode.
        priorities: float64 priorities of the sampled transitions as the sampler read them during
            the draw (proportional: the leaf ``p_i``, alpha applied; rank: the ranking key
            ``min(|delta|, clip)``), so that nobody has to look them up again; None for uniform
            replay (and by default, for a batch built by hand).
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminated: np.ndarray
    indices: np.ndarray
    weights: np.ndarray
    n_steps: np.ndarray
    priorities: np.ndarray | None = None


class PriorityUpdate(NamedTuple):
    """New priorities for sampled transitions, keyed by their slots: what a learner hands back.

    The indices travel with their errors (as Acme's learner returns ``(keys, priorities)``), so
    the errors can never be paired with other slots than the ones they were computed for.

    Attributes:
        indices: integer slots: ``Batch.indices`` of the batch the errors were computed on.
        td_abs: absolute TD errors ``|delta|``, one per index (finite and >= 0).
    """

    indices: np.ndarray
    td_abs: np.ndarray


class TransitionStorage:
    """Stores ``(obs, action, reward, next_obs, terminated)`` in preallocated ring arrays.

    Args:
        capacity: number of transitions kept; the oldest is overwritten first.
        obs_shape: shape of one observation.
        obs_dtype: storage dtype of observations; input is cast to it only where numpy's
            ``same_kind`` rule allows (float64 -> float32 yes, float -> uint8 no).
    """

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], obs_dtype) -> None:
        self.capacity = int(capacity)
        self.obs_shape = tuple(int(d) for d in obs_shape)
        self.obs_dtype = np.dtype(obs_dtype)
        self.obs = np.zeros((self.capacity, *self.obs_shape), dtype=self.obs_dtype)
        self.next_obs = np.zeros_like(self.obs)
        self.actions = np.zeros(self.capacity, dtype=np.int64)
        self.rewards = np.zeros(self.capacity, dtype=np.float32)
        self.terminated = np.zeros(self.capacity, dtype=np.bool_)
        self.n_steps = np.ones(self.capacity, dtype=np.uint8)
        self.cursor = 0
        self.size = 0

    _FIELDS = ("obs", "next_obs", "actions", "rewards", "terminated", "n_steps")

    @property
    def nbytes(self) -> int:
        """Bytes held by all arrays of the storage."""
        return sum(getattr(self, name).nbytes for name in self._FIELDS)

    def check_obs(self, name: str, obs, batched: bool) -> np.ndarray:
        """Returns ``obs`` as an array, or raises ValueError naming ``name`` and the bad shape."""
        obs = np.asarray(obs)
        want = obs.shape[1:] if batched else obs.shape
        if want != self.obs_shape:
            shape = ("B", *self.obs_shape) if batched else self.obs_shape
            raise ValueError(f"`{name}` must have shape {shape}, got {obs.shape}")
        if obs.dtype != self.obs_dtype and not np.can_cast(obs.dtype, self.obs_dtype, "same_kind"):
            raise ValueError(f"`{name}` must be castable to {self.obs_dtype}, got {obs.dtype}")
        return obs

    def write(self, obs, action, reward, next_obs, terminated, n_steps) -> int:
        """Writes one transition at the cursor; returns its slot."""
        slot = self.cursor
        self.n_steps[slot] = n_steps
        self.obs[slot] = obs
        self.next_obs[slot] = next_obs
        self.actions[slot] = action
        self.rewards[slot] = reward
        self.terminated[slot] = terminated
        self.cursor = (slot + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)
        return slot

    def write_batch(self, obs, actions, rewards, next_obs, terminated, n_steps) -> np.ndarray:
        """Writes ``B`` transitions in order, wrapping around; returns their slots."""
        n = obs.shape[0]
        slots = (self.cursor + np.arange(n, dtype=np.int64)) % self.capacity
        if n > self.capacity:  # only the last `capacity` items survive; write just those
            keep = slice(n - self.capacity, n)
            obs, actions, rewards = obs[keep], actions[keep], rewards[keep]
            next_obs, terminated, kept = next_obs[keep], terminated[keep], slots[keep]
            n_steps = n_steps[keep]
        else:
            kept = slots
        self.obs[kept] = obs
        self.next_obs[kept] = next_obs
        self.actions[kept] = actions
        self.rewards[kept] = rewards
        self.terminated[kept] = terminated
        self.n_steps[kept] = n_steps
        self.cursor = int((self.cursor + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)
        return slots

    def gather(
        self, indices: np.ndarray, weights: np.ndarray, priorities: np.ndarray | None = None
    ) -> Batch:
        """The transitions at ``indices`` as a Batch, with the sampler's weights and priorities."""
        # Positional, in Batch's field order: ~0.15 us cheaper a sample than keywords.
        return Batch(
            self.obs[indices],  # obs
            self.actions[indices],
            self.rewards[indices],
            self.next_obs[indices],  # next_obs
            self.terminated[indices],
            indices,
            weights.astype(np.float32),
            self.n_steps[indices],
            priorities,
        )

    def state_dict(self) -> dict:
        """Contents and cursor, as arrays (copies)."""
        state = {name: getattr(self, name).copy() for name in self._FIELDS}
        state["cursor"] = self.cursor
        state["size"] = self.size
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restores what ``state_dict`` returned; raises ValueError on a mismatched layout."""
        for name in self._FIELDS:
            have, got = getattr(self, name), np.asarray(state[name])
            if got.shape != have.shape or got.dtype != have.dtype:
                raise ValueError(
                    f"storage field `{name}` must be {have.dtype}{list(have.shape)}, "
                    f"got {got.dtype}{list(got.shape)}"
                )
        cursor, size = int(state["cursor"]), int(state["size"])
        if not (0 <= size <= self.capacity and 0 <= cursor < self.capacity):
            raise ValueError(f"storage `size`/`cursor` out of range: {size}/{cursor}")
        for name in self._FIELDS:
            getattr(self, name)[...] = state[name]
        self.cursor, self.size = cursor, size


class BitStorage(TransitionStorage):
    """``TransitionStorage`` for bool observations (MinAtar's object layers), eight cells a byte.

    ``obs`` and ``next_obs`` are kept as ``np.packbits`` of the flattened observation: a Seaquest
    observation of 10 x 10 x 10 cells takes 125 bytes instead of 1,000. Packing is lossless, so
    a sampled batch is exactly what was added (bool, the logical shape).

    Args:
        capacity: number of transitions kept.
        obs_shape: shape of one observation.
        obs_dtype: must be bool.
    """

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], obs_dtype=np.bool_) -> None:
        if np.dtype(obs_dtype) != np.bool_:
            raise ValueError(f"`obs_dtype` must be bool for bit-packed storage, got {obs_dtype}")
        shape = tuple(int(d) for d in obs_shape)
        self._cells = int(np.prod(shape))
        super().__init__(capacity, ((self._cells + 7) // 8,), np.uint8)
        # What callers see: the logical observation (``check_obs``, ``gather``).
        self.obs_shape = shape
        self.obs_dtype = np.dtype(np.bool_)

    def _pack(self, obs: np.ndarray, batched: bool) -> np.ndarray:
        flat = np.asarray(obs, dtype=np.bool_).reshape((obs.shape[0], -1) if batched else (-1,))
        return np.packbits(flat, axis=-1)

    def _unpack(self, packed: np.ndarray) -> np.ndarray:
        cells = np.unpackbits(packed, axis=-1, count=self._cells)
        return cells.view(np.bool_).reshape(packed.shape[0], *self.obs_shape)

    def write(self, obs, action, reward, next_obs, terminated, n_steps) -> int:
        """Writes one transition at the cursor, its observations packed; returns its slot."""
        return super().write(
            self._pack(obs, False), action, reward, self._pack(next_obs, False), terminated,
            n_steps,
        )  # fmt: skip

    def write_batch(self, obs, actions, rewards, next_obs, terminated, n_steps) -> np.ndarray:
        """Writes ``B`` transitions in order, their observations packed; returns their slots."""
        return super().write_batch(
            self._pack(obs, True), actions, rewards, self._pack(next_obs, True), terminated,
            n_steps,
        )  # fmt: skip

    def gather(
        self, indices: np.ndarray, weights: np.ndarray, priorities: np.ndarray | None = None
    ) -> Batch:
        """The transitions at ``indices``, observations unpacked to bool."""
        batch = super().gather(indices, weights, priorities)
        return batch._replace(obs=self._unpack(batch.obs), next_obs=self._unpack(batch.next_obs))
