"""What a gradient step minimises, given ``Q(s, a)`` and its targets: the learner's objectives,
one entry each, beside the priority signals (``signals.py``).

A replay kind names the objective its learner uses (``per_dqn.memory.kinds``); every function
works over the last dimension, so that one call serves a learner alone ``(B,)`` and a pack's
members at once ``(K, B)``:

- ``weighted``: ``mean_i w_i L(y_i - Q(s_i, a_i))`` with ``L`` the agent's loss (Huber, delta 1,
  or squared) and ``w`` the batch's importance-sampling weights (all 1 under uniform replay);
- ``lap``: Loss-Adjusted Prioritized replay's loss (Fujimoto, Meger & Precup, 2020;
  sfujim/LAP-PAL ``discrete/LAP_DDQN.py``): ``mean_i H_k(delta_i)`` with
  ``H_k(d) = 0.5 d^2`` below ``k`` and ``k |d|`` from ``k`` on (``k`` = ``replay.min_priority``),
  and no IS weights: sampling by ``max(|delta|, k)^alpha`` makes its expected gradient unbiased;
- ``pal``: Prioritized Approximation Loss, the same expected gradient under uniform sampling
  (``discrete/PAL_DDQN.py``): per sample ``k^alpha 0.5 d^2`` below ``k`` and
  ``k |d|^(1 + alpha) / (1 + alpha)`` from ``k`` on, averaged and divided by
  ``lambda = mean_i max(|delta_i|, k)^alpha`` (no gradient through ``lambda``);
- ``laber``: Large Batch Experience Replay, LaBER-mean (Lahire, Geist & Rachelson, 2022;
  SuReLI/laber ``MinAtar_experiments/agents/dqn_LABER.py``): the batch is ``m B`` transitions
  drawn uniformly; the surrogate ``p_i = min(|delta_i|, 1)`` (``|delta_i|`` under a squared loss,
  whose per-sample gradient is not clipped) is computed with the current network without
  gradients, ``B`` of them are drawn in proportion with replacement (``Objective.pick``), and
  the learner's forward pass with gradients runs on those ``B`` alone, each weighted by
  ``mean_j p_j / p_i`` in the agent's loss, as the source's second pass does.

``OBJECTIVES`` lists them, with the ``replay.*`` settings each reads. The module imports no
torch until an objective is computed, so that the config can check names without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import torch


class ObjectiveOutput(NamedTuple):
    """One step's objective, per learner (leading dims) and per sample (last dim).

    Attributes:
        loss: ``(...,)`` what is minimised, one per learner.
        per_sample: ``(..., B)`` the per-sample losses it averages, without IS weights (their
            plain mean is ``train/loss_unweighted``).
        metrics: the objective's own numbers, ``(...,)`` each, logged as ``train/<name>``.
    """

    loss: torch.Tensor
    per_sample: torch.Tensor
    metrics: dict[str, torch.Tensor]


class Picked(NamedTuple):
    """What an objective that subsamples (``Objective.pick``) chose from a larger batch.

    Attributes:
        chosen: ``(..., B)`` int64 positions in the large batch of the samples to learn from.
        weights: ``(..., B)`` their weights in the loss.
        metrics: numbers about the large batch, ``(...,)`` each, logged as ``train/<name>``.
    """

    chosen: torch.Tensor
    weights: torch.Tensor
    metrics: dict[str, torch.Tensor]


@dataclass(frozen=True)
class Objective:
    """One learner objective.

    Args:
        name: the name a replay kind's entry gives (``ReplayKind.objective``).
        compute: ``(q_taken, targets, weights, spec) -> ObjectiveOutput``, over the last
            dimension.
        settings: the ``replay.*`` keys it reads (each an ``ObjectiveSpec`` field).
        metrics: the names of its metrics, in order: ``Picked.metrics``' then
            ``ObjectiveOutput.metrics``'.
        pick: for an objective that learns from ``B`` samples picked out of a larger batch,
            ``(q_taken, targets, picks, spec) -> Picked``, from the large batch's ``Q(s, a)``
            (no gradient) and targets and ``B`` uniforms in [0, 1); the learner then runs its
            forward pass with gradients on the ``B`` picked only, with ``Picked.weights`` as
            their weights; None for the others.
        summary: one line on what it is, for the config reference.
        reads_loss: whether it uses the agent's loss (``agent.loss``); LAP's and PAL's are their
            own.
    """

    name: str
    compute: Callable[..., ObjectiveOutput]
    settings: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    pick: Callable[..., Picked] | None = None
    summary: str = ""
    reads_loss: bool = True

    @property
    def subsamples(self) -> bool:
        """Whether it learns from samples picked out of a larger batch (it has a ``pick``)."""
        return self.pick is not None


@dataclass(frozen=True)
class ObjectiveSpec:
    """An objective with its settings: what a learner is built with.

    Attributes:
        name: one of ``OBJECTIVES``.
        loss: the agent's loss, ``huber`` (delta 1) or ``mse`` (``agent.loss``), for the
            objectives that use it (``weighted``, ``laber``).
        min_priority: LAP's and PAL's ``k`` (``replay.min_priority``).
        alpha: PAL's exponent (``replay.alpha``).
    """

    name: str = "weighted"
    loss: str = "huber"
    min_priority: float = 1.0
    alpha: float = 0.6
    _entry: Objective | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_entry", objective(self.name))
        if self.loss not in ("huber", "mse"):
            raise ValueError(f"`loss` must be 'huber' or 'mse', got {self.loss!r}")
        if not 0.0 < float(self.min_priority) < float("inf"):
            raise ValueError(f"`min_priority` must be > 0, got {self.min_priority}")
        if not 0.0 <= float(self.alpha) < float("inf"):
            raise ValueError(f"`alpha` must be >= 0, got {self.alpha}")

    @property
    def entry(self) -> Objective:
        """The registry entry."""
        assert self._entry is not None
        return self._entry

    def __call__(self, q_taken, targets, weights) -> ObjectiveOutput:
        """The objective over the last dimension (see ``Objective.compute``)."""
        return self.entry.compute(q_taken, targets, weights, self)

    def pick(self, q_taken, targets, picks) -> Picked:
        """The samples to learn from (see ``Objective.pick``).

        Raises:
            ValueError: the objective does not subsample.
        """
        if self.entry.pick is None:
            raise ValueError(f"objective {self.name!r} picks no samples")
        return self.entry.pick(q_taken, targets, picks, self)


def base_losses(q_taken: torch.Tensor, targets: torch.Tensor, loss: str) -> torch.Tensor:
    """Per-sample ``huber`` (torch's smooth L1, delta 1) or ``mse`` (``d^2``) losses."""
    from torch.nn import functional as F

    if loss == "huber":
        return F.smooth_l1_loss(q_taken, targets, reduction="none")
    return F.mse_loss(q_taken, targets, reduction="none")


def _weighted(q_taken, targets, weights, spec: ObjectiveSpec) -> ObjectiveOutput:
    per_sample = base_losses(q_taken, targets, spec.loss)
    return ObjectiveOutput((weights * per_sample).mean(dim=-1), per_sample, {})


def _lap(q_taken, targets, weights, spec: ObjectiveSpec) -> ObjectiveOutput:
    from per_dqn.agent.fused_losses import LAPLoss

    per_sample = LAPLoss.apply(q_taken, targets, spec.min_priority)
    return ObjectiveOutput(per_sample.mean(dim=-1), per_sample, {})


def _pal(q_taken, targets, weights, spec: ObjectiveSpec) -> ObjectiveOutput:
    from per_dqn.agent.fused_losses import PALLoss

    per_sample, lam = PALLoss.apply(q_taken, targets, spec.min_priority, spec.alpha)
    return ObjectiveOutput(per_sample.mean(dim=-1), per_sample, {"pal_lambda": lam})


def laber_pick(surrogate: torch.Tensor, picks: torch.Tensor) -> torch.Tensor:
    """Positions drawn in proportion to ``surrogate`` (>= 0) over its last dim, with
    replacement, one per uniform in ``picks``: the first position whose running sum exceeds
    ``u * total`` (inverse CDF). A zero surrogate is never drawn; an all-zero row is drawn
    uniformly."""
    import torch

    empty = surrogate.sum(dim=-1, keepdim=True) == 0
    surrogate = torch.where(empty, torch.ones_like(surrogate), surrogate)
    cdf = surrogate.cumsum(dim=-1)
    chosen = torch.searchsorted(cdf, picks * cdf[..., -1:], right=True)
    # u * total may round up to the total: the last position with mass, then.
    size = surrogate.shape[-1]
    last = size - 1 - (surrogate > 0).flip(-1).to(torch.int64).argmax(dim=-1, keepdim=True)
    return torch.minimum(chosen, last)


def _laber_pick(q_taken, targets, picks, spec: ObjectiveSpec) -> Picked:
    """LaBER-mean: the surrogate ``min(|delta|, 1)`` (``|delta|`` under a squared loss) of every
    sample of the large batch, ``B`` of them drawn in proportion, weighted ``mean_j p_j / p_i``
    (an all-zero batch: drawn uniformly, weights 1)."""
    import torch

    td_abs = (q_taken - targets).abs()
    surrogate = td_abs.clamp(max=1.0) if spec.loss == "huber" else td_abs
    chosen = laber_pick(surrogate, picks)
    mass = torch.where(
        surrogate.sum(dim=-1, keepdim=True) == 0, torch.ones_like(surrogate), surrogate
    )
    weights = mass.mean(dim=-1, keepdim=True) / mass.gather(-1, chosen)
    metrics = {
        "large_batch_td_mean": td_abs.mean(dim=-1),
        "large_batch_td_std": td_abs.std(dim=-1),
        "picked_weight_mean": weights.mean(dim=-1),
    }
    return Picked(chosen, weights, metrics)


OBJECTIVES: Mapping[str, Objective] = MappingProxyType({
    entry.name: entry
    for entry in (
        Objective(
            "weighted", _weighted,
            summary="mean IS weight x agent.loss (Huber or squared) of each sample",
        ),
        Objective(
            "lap", _lap, ("min_priority",),
            summary="LAP's Huber with threshold replay.min_priority, no IS weights",
            reads_loss=False,
        ),
        Objective(
            "pal", _pal, ("alpha", "min_priority"), ("pal_lambda",),
            summary="PAL: LAP's expected gradient under uniform sampling", reads_loss=False,
        ),
        Objective(
            "laber", _weighted, (),
            ("large_batch_td_mean", "large_batch_td_std", "picked_weight_mean"),
            pick=_laber_pick,
            summary="LaBER-mean: B of m B picked by min(|delta|, 1), weighted mean(p) / p_i",
        ),
    )
})  # fmt: skip

OBJECTIVE_NAMES: tuple[str, ...] = tuple(OBJECTIVES)


def objective(name: str) -> Objective:
    """The registry entry of ``name``.

    Raises:
        ValueError: an unknown ``name``.
    """
    entry = OBJECTIVES.get(name)
    if entry is None:
        raise ValueError(f"`objective` must be one of {OBJECTIVE_NAMES}, got {name!r}")
    return entry


def spec_from(name: str, loss: str, settings: Mapping[str, Any]) -> ObjectiveSpec:
    """An ``ObjectiveSpec`` of ``name`` with the settings it reads taken from ``settings``."""
    entry = objective(name)
    return ObjectiveSpec(name, loss, **{key: settings[key] for key in entry.settings})
