"""The PER health panel's bookkeeping (``ReplayHealth``) and the running means a log interval
averages (``MeanAccumulator``).

The panel needs per-transition history (when it was added, when its priority was last set, how
often it was replayed). That history lives here, indexed by the slots the memory returns, so the
memory stays a pure data structure. numpy only: the loop owns these (in ``LoopState``) and does no
I/O; the run reads their means out at each log point.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from per_dqn.logs.tags import (
    PER_IS_WEIGHT_ESS,
    PER_IS_WEIGHT_MEAN,
    PER_IS_WEIGHT_MIN,
    PER_NEVER_REPLAYED,
    PER_PRIORITY_AGE,
    PER_SAMPLE_AGE,
    PER_SAMPLED_PRIORITY,
)


class MeanAccumulator:
    """Running sums of named values, read out as means and reset."""

    def __init__(self) -> None:
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def add(self, values: Mapping[str, float]) -> None:
        """Adds one observation of each named value."""
        for name, value in values.items():
            self._sums[name] = self._sums.get(name, 0.0) + value
            self._counts[name] = self._counts.get(name, 0) + 1

    def pop_means(self) -> dict[str, float]:
        """Mean of each value since the last call; clears the sums."""
        means = {name: s / self._counts[name] for name, s in self._sums.items()}
        self._sums.clear()
        self._counts.clear()
        return means

    def state_dict(self) -> dict[str, Any]:
        """The running sums and counts (copies), for a checkpoint."""
        return {"sums": dict(self._sums), "counts": dict(self._counts)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict()`` output."""
        self._sums, self._counts = dict(state["sums"]), dict(state["counts"])


class ReplayHealth:
    """Per-slot replay history for the PER health panel, kept outside the memory.

    Arrays are indexed by the slots the memory's ``add``/``add_batch`` return; a slot overwritten
    by a new transition starts a new history. The loop feeds it at two points: ``record_add`` for
    the transitions it stores, ``record_learn`` for each gradient step.

    Args:
        capacity: the memory's capacity.
    """

    _SLOT_ARRAYS = ("added_at", "priority_set_at", "replay_count")
    # Bytes a slot takes in these int64 arrays (a checkpoint holds them for each stored slot).
    SLOT_BYTES = len(_SLOT_ARRAYS) * np.dtype(np.int64).itemsize

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.added_at = np.zeros(capacity, dtype=np.int64)
        self.priority_set_at = np.zeros(capacity, dtype=np.int64)
        self.replay_count = np.zeros(capacity, dtype=np.int64)
        self._acc = MeanAccumulator()

    def record_add(self, slots: np.ndarray | int, env_step: int) -> None:
        """New transitions at ``slots``: they enter with a priority set now and no replays."""
        self.added_at[slots] = env_step
        self.priority_set_at[slots] = env_step
        self.replay_count[slots] = 0

    def record_sample(
        self,
        indices: np.ndarray,
        weights: np.ndarray,
        env_step: int,
        priorities: np.ndarray | None = None,
    ) -> None:
        """Accumulates one batch's statistics, then counts its transitions as replayed.

        Args:
            indices: the batch's slots.
            weights: its IS weights.
            env_step: the current env step.
            priorities: the sampled transitions' priorities (prioritized memories only).
        """
        w = weights.astype(np.float64)
        w_sum = w.sum()
        values = {
            PER_IS_WEIGHT_MEAN: w_sum / w.size,
            PER_IS_WEIGHT_MIN: w.min(),
            PER_IS_WEIGHT_ESS: w_sum * w_sum / (w @ w) / w.size,
            PER_NEVER_REPLAYED: np.count_nonzero(self.replay_count[indices] == 0) / indices.size,
            PER_SAMPLE_AGE: env_step - self.added_at[indices].mean(),
            PER_PRIORITY_AGE: env_step - self.priority_set_at[indices].mean(),
        }
        if priorities is not None:
            values[PER_SAMPLED_PRIORITY] = priorities.mean()
        self._acc.add(values)
        # A slot drawn twice in one batch counts once: only "never vs. ever replayed" is reported.
        self.replay_count[indices] += 1

    def record_priority_update(self, indices: np.ndarray, env_step: int) -> None:
        """The priorities at ``indices`` were set from fresh TD errors at ``env_step``."""
        self.priority_set_at[indices] = env_step

    def record_learn(
        self,
        sampled: np.ndarray,
        weights: np.ndarray,
        priorities: np.ndarray | None,
        updated: np.ndarray,
        env_step: int,
    ) -> None:
        """One gradient step, as the loop feeds it once the memory took its priority update: the
        batch drawn (``record_sample``), then the slots whose priorities were set
        (``record_priority_update``).

        The batch's statistics read only this panel's arrays, which nothing between the draw and
        the update changes, so they are what they were at the draw.

        Args:
            sampled: the batch's slots (``Batch.indices``).
            weights: its IS weights (``Batch.weights``).
            priorities: the priorities the draw read (``Batch.priorities``; None for uniform).
            updated: the slots the learner's priority update set (``PriorityUpdate.indices``).
            env_step: the current env step.
        """
        self.record_sample(sampled, weights, env_step, priorities)
        self.record_priority_update(updated, env_step)

    def pop_means(self) -> dict[str, float]:
        """Means of the batch statistics since the last call."""
        return {tag: float(v) for tag, v in self._acc.pop_means().items()}

    def state_dict(self, stored: int) -> dict[str, Any]:
        """The per-slot arrays of the ``stored`` slots that hold a transition (the memory's
        ``len``: it fills its ring from slot 0) and the pending batch statistics (copies), for a
        checkpoint."""
        state: dict[str, Any] = {
            name: getattr(self, name)[:stored].copy() for name in self._SLOT_ARRAYS
        }
        state["acc"] = self._acc.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict()`` output (or one written before checkpoints held the stored
        slots only, at the full capacity).

        Raises:
            ValueError: arrays of unequal lengths, or longer than the capacity; nothing is
                changed then.
        """
        arrays = [np.asarray(state[name]) for name in self._SLOT_ARRAYS]
        stored = len(arrays[0]) if arrays[0].ndim == 1 else -1
        for name, got in zip(self._SLOT_ARRAYS, arrays, strict=True):
            if got.ndim != 1 or len(got) != stored or stored > self.capacity:
                raise ValueError(
                    f"replay health `{name}` must have shape [n] with n <= {self.capacity}, the "
                    f"same n for each of {', '.join(self._SLOT_ARRAYS)}; got {list(got.shape)}"
                )
        for name, got in zip(self._SLOT_ARRAYS, arrays, strict=True):
            have = getattr(self, name)
            have[:stored] = got
            have[stored:] = 0  # slots that hold no transition: as a fresh panel has them
        self._acc.load_state_dict(state["acc"])
