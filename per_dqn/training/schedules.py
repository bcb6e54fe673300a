"""Schedules for exploration epsilon and the importance-sampling exponent beta. Pure Python."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LinearSchedule:
    """Moves linearly from ``start`` to ``end`` over ``duration_steps``, then stays at ``end``.

    ``value(t)`` is ``start`` at ``t <= begin_step`` and exactly ``end`` (no float residue) at
    ``t >= begin_step + duration_steps``; so beta annealed over the whole run reaches exactly 1.0
    on the last step.

    Args:
        start: value before and at ``begin_step``.
        end: value from ``begin_step + duration_steps`` on.
        duration_steps: length of the ramp, >= 0 (0 jumps straight to ``end``).
        begin_step: step at which the ramp starts.
    """

    start: float
    end: float
    duration_steps: int
    begin_step: int = 0

    def __post_init__(self) -> None:
        if self.duration_steps < 0:
            raise ValueError(f"`duration_steps` must be >= 0, got {self.duration_steps}")

    def __call__(self, step: int) -> float:
        """The value at ``step``."""
        elapsed = step - self.begin_step
        if elapsed >= self.duration_steps:
            return float(self.end)
        if elapsed <= 0:
            return float(self.start)
        return self.start + (self.end - self.start) * (elapsed / self.duration_steps)
