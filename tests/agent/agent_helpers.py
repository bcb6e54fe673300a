"""Helpers of the learner's tests: a tiny agent on 4-dimensional observations and 3 actions, and a
random batch for it, each from a seed."""

from __future__ import annotations

import numpy as np
import torch

from per_dqn.agent import DQNAgent
from per_dqn.memory import Batch


def tiny_agent(seed: int, **settings) -> DQNAgent:
    """A ``DQNAgent`` with 16 hidden units, built after ``torch.manual_seed(seed)``; ``settings``
    override the defaults below (dueling Double DQN, Adam 1e-3, Huber, target copy every 3)."""
    torch.manual_seed(seed)
    options = dict(
        obs_shape=(4,), num_actions=3, hidden_sizes=(16,), dueling=True, double=True,
        gamma=0.99, learning_rate=1e-3, adam_eps=1e-8, loss="huber", grad_clip_norm=None,
        target_update_interval=3, tau=1.0, device=torch.device("cpu"),
    )  # fmt: skip
    return DQNAgent(**(options | settings))


def random_batch(
    seed: int, size: int = 16, first_index: int = 100, picks: int | None = None
) -> Batch:
    """``size`` random transitions with slots ``first_index...``, rewards around 0 with sd 3, a
    fifth terminal; with ``picks``, that many uniforms for a learner that picks (LaBER)."""
    rng = np.random.default_rng(seed)
    return Batch(
        obs=rng.normal(size=(size, 4)).astype(np.float32),
        actions=rng.integers(0, 3, size),
        rewards=rng.normal(size=size).astype(np.float32) * 3,
        next_obs=rng.normal(size=(size, 4)).astype(np.float32),
        terminated=rng.random(size) < 0.2,
        indices=np.arange(size, dtype=np.int64) + first_index,
        weights=np.ones(size, dtype=np.float32),
        n_steps=np.ones(size, dtype=np.uint8),
        picks=None if picks is None else rng.random(picks),
    )
