"""What one gradient step produced (``LearnResult``), and how it is read from a learner's row of
the update's one host copy (``HostLayout``, ``learn_result``): shared by the agent alone and the
pack (``pack.py``), which each make that copy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from per_dqn.agent.signals import PrioritySignal, SignalInputs
from per_dqn.memory import PriorityUpdate


@dataclass(frozen=True)
class LearnResult:
    """What one gradient step produced.

    Attributes:
        priorities: the sampled slots with their new priorities (float32, batch order), the
            agent's priority signal (``|y - Q(s, a)|`` unless ``priority_signal`` says
            otherwise), measured before the step as in Schaul et al. (Algorithm 1); hand it whole
            to ``memory.update`` (as Acme's learners return keys with their priorities, so no
            index is ever paired with an error by hand).
        metrics: ``loss`` (the IS-weighted loss), ``loss_unweighted`` (the plain mean of the
            same per-sample losses), ``q_mean`` (mean ``Q(s, a)`` of the batch), ``td_error_abs``
            (mean ``|delta|``) and, when clipping, ``grad_norm`` (before clipping). The run logs
            each as ``train/<name>``: a new one needs its entry in ``tags.SCALAR_TAGS``.
    """

    priorities: PriorityUpdate
    metrics: dict[str, float]

    @property
    def td_abs(self) -> np.ndarray:
        """The new priority per sample (``|delta|`` for the ``td_error`` signal), in batch
        order."""
        return self.priorities.td_abs


@dataclass(frozen=True)
class HostLayout:
    """Where each number lies in one learner's row of an update's host copy: the learned
    samples' targets, then their ``Q(s, a)``, then (``target_q``) the target net's ``Q(s, a)``,
    then (``chosen``) their positions in a larger batch, then the objective's loss, the plain
    mean of its per-sample losses, (``clipped``) the gradient norm and the objective's
    ``metrics``."""

    size: int
    target_q: bool = False
    chosen: bool = False
    clipped: bool = False
    metrics: tuple[str, ...] = ()


def learn_result(
    host: np.ndarray, indices: np.ndarray, layout: HostLayout, signal: PrioritySignal, loss: str
) -> LearnResult:
    """A ``LearnResult`` from one learner's row of an update's host copy (``HostLayout``); the
    priorities are ``signal``'s, computed from it (``loss``: ``agent.loss``)."""
    size = layout.size
    targets, q_taken = host[:size], host[size : 2 * size]
    at = 2 * size
    target_td_abs = None
    if layout.target_q:
        target_td_abs = np.abs(targets - host[at : at + size])
        at += size
    if layout.chosen:
        indices = indices[host[at : at + size].astype(np.int64)]
        at += size
    td_abs = np.abs(targets - q_taken)
    metrics = {
        "loss": float(host[at]),
        "loss_unweighted": float(host[at + 1]),
        "q_mean": float(q_taken.mean()),
        "td_error_abs": float(td_abs.mean()),
    }
    at += 2
    if layout.clipped:
        metrics["grad_norm"] = float(host[at])
        at += 1
    for offset, name in enumerate(layout.metrics):
        metrics[name] = float(host[at + offset])
    inputs = SignalInputs(td_abs, loss, target_td_abs)
    if signal.report is not None:
        metrics.update(signal.report(inputs))
    return LearnResult(PriorityUpdate(indices, signal.compute(inputs)), metrics)
