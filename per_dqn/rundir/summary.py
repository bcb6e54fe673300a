"""What ``summary.json`` says about a whole run beyond its last step: the evaluation curve's
normalised area (``normalized_auc``) and the mean of the logged IS weights, kept in the loop's
checkpointed state (``RunRecord``) so that a resumed run reports what the uninterrupted one would;
and the run's sessions (``SESSIONS_KEY``, read back by ``read_sessions``), which each checkpoint
carries so that a resumed run's summary times every session, not only its last.

A module of its own, not ``run.py``: the loop carries the record (and must import no I/O module),
and the sweep report computes the same AUC from event files (``sweeps/report.py``). numpy and the
tag catalogue only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from per_dqn.logs.tags import PER_IS_WEIGHT_MEAN

# A run's sessions (one per ``Trainer.run`` call or pack it trained in): ``[{"pack": id,
# "seconds": s}, ...]``, in each checkpoint's manifest up to its step and in the summary whole;
# ``pack`` is shared by the runs of one pack (one process), so a sweep's cost counts it once.
SESSIONS_KEY = "wall_sessions"
# Their sum, in the summary: the run's wall time over every session.
WALL_TOTAL_KEY = "wall_seconds_total"


def read_sessions(value: Any) -> list[dict[str, Any]] | None:
    """``value`` as a run's sessions (``SESSIONS_KEY``) if it is one: a list of ``{"pack": str,
    "seconds": finite number >= 0}``; else None (a checkpoint or summary from before the record,
    or one edited), so that a run's time is unknown rather than wrong."""
    if not isinstance(value, list):
        return None
    sessions = []
    for entry in value:
        if not isinstance(entry, dict) or set(entry) != {"pack", "seconds"}:
            return None
        pack, seconds = entry["pack"], entry["seconds"]
        number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
        if not isinstance(pack, str) or not (number and math.isfinite(seconds) and seconds >= 0):
            return None
        sessions.append({"pack": pack, "seconds": float(seconds)})
    return sessions


def normalized_auc(curve: list[tuple[int, float]] | tuple[tuple[int, float], ...]) -> float:
    """The area under an evaluation curve divided by the env steps it spans: the curve's mean
    return over training, in return units, so runs of different budgets compare.

    ``AUC = sum_k (s_{k+1} - s_k) * (v_k + v_{k+1}) / 2 / (s_last - s_first)`` (trapezoids between
    the evaluated points, sorted by step; no value is assumed before the first evaluation). A
    curve of one point is that point's value.

    Args:
        curve: ``(env_step, eval return mean)`` points, e.g. from ``sweeps.runs.read_curve``.

    Raises:
        ValueError: an empty curve, two points at one step, or a value that is not finite.
    """
    if not curve:
        raise ValueError("normalized_auc needs at least one evaluation point, got none")
    points = sorted((int(s), float(v)) for s, v in curve)
    steps = np.array([s for s, _ in points], dtype=np.float64)
    values = np.array([v for _, v in points], dtype=np.float64)
    if not np.isfinite(values).all():
        raise ValueError(f"normalized_auc: every value must be finite, got {values.tolist()}")
    if len(points) == 1:
        return float(values[0])
    widths = np.diff(steps)
    if (widths == 0).any():
        raise ValueError(f"normalized_auc: two points at one env step in {steps.tolist()}")
    area = float(np.sum(widths * (values[:-1] + values[1:]) / 2.0))
    return area / float(steps[-1] - steps[0])


class RunRecord:
    """What ``summary.json`` reports about the whole run, kept in the loop's checkpointed state so
    that a resumed run reports what the uninterrupted one would: the evaluation curve (for the
    AUC) and the running sum of the logged ``per/is_weight_mean`` points."""

    def __init__(self) -> None:
        self.eval_curve: list[tuple[int, float]] = []
        self.is_weight_mean_sum = 0.0
        self.is_weight_mean_logs = 0

    def add_eval(self, env_steps: int, return_mean: float) -> None:
        """An evaluation (periodic or final) at ``env_steps``."""
        self.eval_curve.append((int(env_steps), float(return_mean)))

    def add_log(self, values: Mapping[str, float]) -> None:
        """A log point's scalars, by tag."""
        value = values.get(PER_IS_WEIGHT_MEAN)
        if value is not None and not math.isnan(value):
            self.is_weight_mean_sum += float(value)
            self.is_weight_mean_logs += 1

    def auc(self) -> float | None:
        """``normalized_auc`` of the evaluation curve; None before the first evaluation."""
        return normalized_auc(self.eval_curve) if self.eval_curve else None

    def is_weight_mean(self) -> float | None:
        """The mean of the logged ``per/is_weight_mean`` points; None before the first."""
        if not self.is_weight_mean_logs:
            return None
        return self.is_weight_mean_sum / self.is_weight_mean_logs

    def state_dict(self) -> dict[str, Any]:
        """JSON values (floats round-trip exactly), for a checkpoint."""
        return {
            "eval_steps": [step for step, _ in self.eval_curve],
            "eval_returns": [value for _, value in self.eval_curve],
            "is_weight_mean_sum": self.is_weight_mean_sum,
            "is_weight_mean_logs": self.is_weight_mean_logs,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores ``state_dict()`` output.

        Raises:
            ValueError: a state that is not ``state_dict()``'s shape.
        """
        try:
            steps, returns = list(state["eval_steps"]), list(state["eval_returns"])
            total, logs = float(state["is_weight_mean_sum"]), int(state["is_weight_mean_logs"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"its run record does not fit ({exc!r})") from None
        if len(steps) != len(returns):
            raise ValueError(
                f"its run record has {len(steps)} evaluation steps but {len(returns)} returns"
            )
        self.eval_curve = [(int(s), float(v)) for s, v in zip(steps, returns, strict=True)]
        self.is_weight_mean_sum, self.is_weight_mean_logs = total, logs
