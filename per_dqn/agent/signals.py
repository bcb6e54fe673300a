"""What a transition's new priority is made of: the priority signals, one entry each.

After each gradient step the learner hands the memory a ``PriorityUpdate`` of the sampled slots
with one number each, their new priority before the sampler's own transform (proportional's
``(x + eps) ** alpha``, rank's ordering). Which number that is, is the signal's:

- ``td_error``: ``|delta| = |y - Q(s, a)|``, measured before the step (Schaul et al., 2016,
  Algorithm 1);
- ``loss``: the sample's own unweighted loss, Huber (delta 1) or squared as ``agent.loss``
  says, from the same ``|delta|`` (Dopamine's PER prioritises by ``sqrt(loss + 1e-10)``, which is
  ``alpha`` 0.5 and ``priority_eps`` 1e-10 here);
- ``reducible_loss``: ReLo (Sujit et al., 2023; shivakanthsujit/reducible-loss
  ``MinAtar/examples/relo_dqn.py``), the part of the loss the network can still reduce:
  ``max(L(y - Q(s, a)) - L(y - Q_target(s, a)), 0)``, the online loss minus the target
  network's loss on the same target ``y``, both before the step (``needs_target``: the learner
  also runs the target network on ``s``).

``replay.priority_from`` names one (``PRIORITY_SIGNALS``). A new signal is a function of
``SignalInputs`` and one entry below. The functions use only the arrays' own operators, and this
module imports nothing, so that the config can check a name without loading numpy or torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import numpy as np

LOSSES = ("huber", "mse")


class SignalInputs(NamedTuple):
    """What a signal is computed from, for one learner's batch, in batch order.

    Attributes:
        td_abs: ``|y - Q(s, a)|`` per sample (float32), before the step.
        loss: the learner's loss, ``huber`` or ``mse`` (``agent.loss``).
        target_td_abs: ``|y - Q_target(s, a)|`` per sample, for a signal that ``needs_target``
            (None otherwise).
    """

    td_abs: np.ndarray
    loss: str
    target_td_abs: np.ndarray | None = None


@dataclass(frozen=True)
class PrioritySignal:
    """One priority signal.

    Args:
        name: ``replay.priority_from``'s value for it.
        compute: ``SignalInputs`` -> one finite number >= 0 per sample, in batch order.
        summary: one line on what it is, for the config reference.
        needs_target: whether it reads ``SignalInputs.target_td_abs``.
        report: ``SignalInputs`` -> the signal's own numbers of the batch, logged as
            ``train/<name>`` (None: none).
    """

    name: str
    compute: Callable[[SignalInputs], np.ndarray]
    summary: str
    needs_target: bool = False
    report: Callable[[SignalInputs], dict[str, float]] | None = None


def sample_losses(td_abs: np.ndarray, loss: str) -> np.ndarray:
    """Each sample's unweighted loss from its ``|delta|``, as the update computes it: ``huber``
    (delta 1) ``0.5 d^2`` below 1 and ``d - 0.5`` from 1 on, ``mse`` ``d^2``.

    Raises:
        ValueError: ``loss`` not one of ``LOSSES``.
    """
    if loss == "mse":
        return td_abs * td_abs
    if loss == "huber":
        losses = td_abs - 0.5
        small = td_abs < 1.0
        losses[small] = 0.5 * (td_abs[small] * td_abs[small])
        return losses
    raise ValueError(f"`loss` must be 'huber' or 'mse', got {loss!r}")


def _td_error(inputs: SignalInputs) -> np.ndarray:
    return inputs.td_abs


def _loss(inputs: SignalInputs) -> np.ndarray:
    return sample_losses(inputs.td_abs, inputs.loss)


def reducible_losses(inputs: SignalInputs) -> np.ndarray:
    """ReLo per sample, before its clip at 0: the online loss minus the target net's loss."""
    online = sample_losses(inputs.td_abs, inputs.loss)
    return online - sample_losses(inputs.target_td_abs, inputs.loss)


def _reducible_loss(inputs: SignalInputs) -> np.ndarray:
    return reducible_losses(inputs).clip(0.0, None)  # ReLU


def _reducible_report(inputs: SignalInputs) -> dict[str, float]:
    """What reducible-loss logs of a batch: ReLo before the clip, the target's loss (the
    irreducible part) and the share of samples clipped to 0."""
    relo = reducible_losses(inputs)
    return {
        "reducible_loss": float(relo.mean()),
        "irreducible_loss": float(sample_losses(inputs.target_td_abs, inputs.loss).mean()),
        "reducible_clipped_share": float((relo <= 0).mean()),
    }


PRIORITY_SIGNALS: Mapping[str, PrioritySignal] = MappingProxyType({
    signal.name: signal
    for signal in (
        PrioritySignal("td_error", _td_error, "|y - Q(s, a)|, the paper's |delta|"),
        PrioritySignal(
            "loss", _loss, "the sample's unweighted loss, Huber or squared as agent.loss says",
        ),
        PrioritySignal(
            "reducible_loss", _reducible_loss,
            "ReLo: max(online loss - target net's loss on the same target, 0)",
            needs_target=True, report=_reducible_report,
        ),
    )
})  # fmt: skip

SIGNALS: tuple[str, ...] = tuple(PRIORITY_SIGNALS)
"""The signals' names, in the registry's order."""


def priority_signal(name: str) -> PrioritySignal:
    """The registry entry of ``name``.

    Raises:
        ValueError: an unknown ``name``.
    """
    signal = PRIORITY_SIGNALS.get(name)
    if signal is None:
        raise ValueError(f"`priority_signal` must be one of {SIGNALS}, got {name!r}")
    return signal
