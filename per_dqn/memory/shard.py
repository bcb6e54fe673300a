"""A replay memory fed and updated out of step: what one replay shard of a distributed run holds.

In Ape-X (Horgan et al., 2018) actors add blocks of transitions with their own priorities while
a learner samples batches ahead and sends their priority updates back later. Between a sample and
its update, new blocks may overwrite the sampled slots: an update keyed by slot would then set
the priority of a transition it never saw. ``Shard`` keys every transition by its write serial,
the number of transitions written before it, and hands those out with each batch; an update whose
transition has been overwritten since is dropped, and counted.

Every write goes through the shard, so serial ``w`` lives at slot ``w % capacity`` until serial
``w + capacity`` replaces it: with ``written`` transitions written, the live serials are the last
``capacity`` of them. The memory itself is the project's (``ReplayMemory``), of any kind.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from per_dqn.memory.replay import ReplayMemory
from per_dqn.memory.types import Batch


class Shard:
    """A ``ReplayMemory`` behind write serials.

    Args:
        memory: an empty memory, which every later write goes to through this shard.

    Attributes:
        written: the transitions written so far (the next one's serial).
        dropped: the priority updates dropped because their transition was overwritten.

    Raises:
        ValueError: a memory that already holds transitions (their serials are unknown).
    """

    def __init__(self, memory: ReplayMemory) -> None:
        if len(memory) != 0:
            raise ValueError(f"a shard starts from an empty memory, got {len(memory)} transitions")
        self._memory = memory
        self.written = 0
        self.dropped = 0

    @property
    def memory(self) -> ReplayMemory:
        """The memory, to read (``diagnostics``, ``sampler``): a write that bypasses the shard
        would shift every serial, and the shard's next call refuses to go on."""
        return self._memory

    def __len__(self) -> int:
        return len(self._memory)

    def _check_in_step(self) -> None:
        """Raises where the memory was written around the shard (its size or next slot is not
        what ``written`` gives): its serials would name other transitions."""
        storage, capacity = self._memory.storage, self._memory.capacity
        if storage.cursor != self.written % capacity or storage.size != min(self.written, capacity):
            raise RuntimeError(
                f"the shard's memory holds {storage.size} transitions with its next at slot "
                f"{storage.cursor}, not what the {self.written} written through the shard give: "
                "it was written around the shard"
            )

    def add(
        self, obs, actions, rewards, next_obs, terminated, n_steps=1, td_abs=None
    ) -> np.ndarray:
        """Stores a block (``ReplayMemory.add_batch``, with its errors' priorities where
        ``td_abs`` is given); returns its transitions' serials.

        Raises:
            ValueError: what ``add_batch`` refuses; nothing is stored then.
        """
        self._check_in_step()
        slots = self._memory.add_batch(obs, actions, rewards, next_obs, terminated, n_steps, td_abs)
        serials = np.arange(self.written, self.written + len(slots), dtype=np.int64)
        self.written += len(slots)
        return serials

    def sample(self, batch_size: int, beta: float = 1.0) -> tuple[Batch, np.ndarray]:
        """A batch (``ReplayMemory.sample``) and the serials of its transitions, the keys its
        priority update comes back with."""
        self._check_in_step()
        batch = self._memory.sample(batch_size, beta)
        return batch, self.serials(batch.indices)

    def serials(self, slots) -> np.ndarray:
        """The serial of the transition each slot now holds: the last write to it.

        Raises:
            TypeError: slots that are not integers.
            ValueError: a slot that holds no transition.
        """
        slots = _integers("slots", slots)
        bad = np.flatnonzero((slots < 0) | (slots >= len(self._memory)))
        if bad.size:
            raise ValueError(
                f"`slots` must lie in [0, {len(self._memory)}) (stored), got {slots[bad[0]]}"
            )
        last = self.written - 1
        return last - (last - slots) % self._memory.capacity

    def update(self, serials, td_abs) -> int:
        """Sets the priorities of the transitions ``serials`` name from their errors ``td_abs``
        (``ReplayMemory.update_priorities``), but for those overwritten since they were sampled,
        which are dropped; returns how many were set.

        Raises:
            TypeError: serials that are not integers.
            ValueError: a serial never written, lengths that differ, or an error that is NaN,
                infinite or negative (a dropped transition's too); nothing is changed then.
        """
        self._check_in_step()
        serials = _integers("serials", serials)
        td_abs = np.asarray(td_abs, dtype=np.float64).reshape(-1)
        if serials.shape != td_abs.shape:
            raise ValueError(
                f"`serials` and `td_abs` must have the same length, "
                f"got {serials.shape[0]} and {td_abs.shape[0]}"
            )
        bad = np.flatnonzero((serials < 0) | (serials >= self.written))
        if bad.size:
            raise ValueError(
                f"`serials` must lie in [0, {self.written}) (written), got {serials[bad[0]]}"
            )
        bad = np.flatnonzero(~(np.isfinite(td_abs) & (td_abs >= 0.0)))
        if bad.size:
            raise ValueError(
                f"`td_abs` must be finite and >= 0 (pass |delta|), got "
                f"{float(td_abs[bad[0]])!r} at position {bad[0]} (serial {serials[bad[0]]})"
            )
        capacity = self._memory.capacity
        live = serials >= self.written - capacity
        self._memory.update_priorities(serials[live] % capacity, td_abs[live])
        applied = int(live.sum())
        self.dropped += serials.shape[0] - applied
        return applied

    def state_dict(self, copy: bool = True) -> dict[str, Any]:
        """The memory's state and the counters."""
        return {
            "memory": self._memory.state_dict(copy),
            "written": self.written,
            "dropped": self.dropped,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict()`` output.

        Raises:
            ValueError: counters that do not fit the memory's state (its size and next slot);
                nothing is changed then.
        """
        try:
            written, dropped = state["written"], state["dropped"]
            storage = state["memory"]["storage"]
            size, cursor = int(storage["size"]), int(storage["cursor"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed shard state ({type(exc).__name__}: {exc})") from None
        for name, value in (("written", written), ("dropped", dropped)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise ValueError(f"a shard's `{name}` must be an integer, got {value!r}")
        written, dropped = int(written), int(dropped)
        capacity = self._memory.capacity
        if (
            written < 0
            or dropped < 0
            or min(written, capacity) != size
            or written % capacity != cursor
        ):
            raise ValueError(
                f"a shard's `written` ({written}) must give the memory's size ({size}) and next "
                f"slot ({cursor}) at capacity {capacity}"
            )
        self._memory.load_state_dict(state["memory"])
        self.written, self.dropped = written, dropped


def _integers(name: str, values) -> np.ndarray:
    """``values`` as a 1-D int64 array; TypeError for anything but integers."""
    values = np.asarray(values)
    if values.dtype.kind not in "iu" and values.size:
        raise TypeError(f"`{name}` must be integers, got dtype {values.dtype}")
    return values.astype(np.int64).reshape(-1)
