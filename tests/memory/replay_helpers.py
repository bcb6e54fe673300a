"""Helpers of the replay-memory tests: memories of any kind filled with deterministic transitions,
a kind's own settings picked from a wish list, a chi-square check of draw frequencies, and the
check that a refused state changes nothing.

The shared tests (``test_replay.py``, ``test_samplers.py``) run every kind in ``KINDS``; what one
kind alone computes is tested in its own file (``test_uniform.py``, ``test_proportional.py``,
``test_rank.py``).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import pytest
from support import assert_same_state

from per_dqn.memory import REPLAY_KINDS, make_memory

FRAME = dict(obs_shape=(4, 8, 8), obs_dtype=np.uint8, dedup_frames=True, frame_slack=0.5)


def settings_for(kind: str, **wanted: Any) -> dict[str, Any]:
    """The settings of ``wanted`` that ``kind`` takes (its registry entry's ``settings``), so that
    a shared test can ask for, e.g., ``td_error_clip=2.0`` wherever there is one to set."""
    return {key: value for key, value in wanted.items() if key in REPLAY_KINDS[kind].settings}


def filled(kind, capacity=100, n=None, seed=0, **kw):
    """A memory whose transition i has obs == [i, i], action i % 3, reward i (deterministic),
    written in one ``add_batch``."""
    mem = make_memory(kind, capacity=capacity, obs_shape=(2,), seed=seed, **kw)
    n = capacity if n is None else n
    obs = np.repeat(np.arange(n, dtype=np.float32)[:, None], 2, axis=1)
    mem.add_batch(obs, np.arange(n) % 3, np.arange(n), obs + 1, np.zeros(n, bool))
    return mem


def added(kind, capacity=40, n=50, seed=0, frames=False, **kw):
    """``n`` deterministic transitions (obs value i for transition i) in a memory of ``kind``,
    one ``add`` each (flat ``(2,)`` observations, or 4x8x8 uint8 stacks in frame storage)."""
    shape = FRAME if frames else dict(obs_shape=(2,))
    mem = make_memory(kind, capacity=capacity, seed=seed, **shape, **kw)
    for i in range(n):
        if frames:
            obs = np.stack([np.full((8, 8), (i + j) % 256, np.uint8) for j in range(4)])
            nxt = np.stack([np.full((8, 8), (i + j + 1) % 256, np.uint8) for j in range(4)])
        else:
            obs, nxt = np.full(2, i, np.float32), np.full(2, i + 1, np.float32)
        mem.add(obs, i % 3, float(i), nxt, i % 7 == 0)
    return mem


def as_full_capacity(mem, state: dict) -> dict:
    """``state`` as checkpoints held it before they were sized to their contents: every storage
    array (but the bit storage's pool, always as allocated) and the priorities at the memory's
    full length, the rows past those ``state`` holds taken from the memory itself (never-written
    slots and frames, as the old state copied them). ``state`` must be ``mem``'s own, whose held
    rows are checked to be the memory's."""
    storage = mem.storage
    full = copy.deepcopy(state)
    for name, rows in state["storage"].items():
        whole = getattr(storage, name, getattr(storage.observations, name, None))
        if isinstance(rows, np.ndarray) and name not in ("pool", "pool_free"):
            np.testing.assert_array_equal(rows, whole[: len(rows)], err_msg=name)
            full["storage"][name] = np.concatenate([rows, whole[len(rows) :]])
    if "priorities" in state:
        leaves = mem.sampler.sums.leaves
        np.testing.assert_array_equal(state["priorities"], leaves[: len(state["priorities"])])
        full["priorities"] = np.concatenate(
            [state["priorities"], leaves[len(state["priorities"]) :]]
        )
    return full


def chi_square_z(counts: np.ndarray, probs: np.ndarray) -> float:
    """Wilson-Hilferty z-score of Pearson's chi-square statistic (z > 4 means p < 3e-5)."""
    expected = probs * counts.sum()
    stat = float(((counts - expected) ** 2 / expected).sum())
    df = len(counts) - 1
    return ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))


def draw_counts(mem, n_draws, batch_size, size):
    """How often each of the ``size`` slots is drawn in ``n_draws`` draws (beta 0.5)."""
    counts = np.zeros(size)
    for _ in range(n_draws // batch_size):
        np.add.at(counts, mem.sample(batch_size, beta=0.5).indices, 1)
    return counts


def check_refused_state(kind: str, damage, message: str) -> None:
    """A state of a ``kind`` memory, damaged by ``damage(state)``, is refused by another memory
    of the kind with a ValueError matching ``message``, and that memory is left as it was."""
    source = added(kind, seed=1)
    source.update_priorities(np.arange(40), np.arange(40.0))
    state = copy.deepcopy(source.state_dict())
    damage(state)
    target = added(kind, n=13, seed=2)
    before = copy.deepcopy(target.state_dict())
    with pytest.raises(ValueError, match=message):
        target.load_state_dict(state)
    assert_same_state(target.state_dict(), before)
