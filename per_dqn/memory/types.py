"""The typed contract between a replay memory and a learner: ``Batch`` out,
``PriorityUpdate`` in."""

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
        picks: float64 uniforms in [0, 1), one per transition a learner learns from, for a kind
            whose learner picks them out of this larger batch (LaBER: ``B`` of ``m B``); None
            for every other kind.
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
    picks: np.ndarray | None = None


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
