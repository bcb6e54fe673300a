"""Schedules for exploration epsilon and the importance-sampling exponent beta. Pure Python."""

from __future__ import annotations

import numbers
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


# Ape-X's actors explore at fixed epsilons: actor i of N at 0.4 ** (1 + 7 i / (N - 1)) (Horgan et
# al., 2018, as RLlib's PerWorkerEpsilonGreedy gives it, citing the paper's page 5).
APEX_EPSILON = 0.4
APEX_ALPHA = 7.0


def epsilon_ladder(
    actors: int, epsilon: float | None = APEX_EPSILON, alpha: float | None = APEX_ALPHA
) -> list[float]:
    """Each of ``actors`` actors' exploration epsilon, ``epsilon ** (1 + alpha * i / (N - 1))``
    for actor ``i`` of ``N``: from ``epsilon`` down to ``epsilon ** (1 + alpha)`` (0.4 to about
    6.6e-4 by default); one actor explores at ``epsilon``. None for either is Ape-X's (a
    config's ``run.actor_epsilon`` and ``run.actor_epsilon_alpha`` left null).

    Raises:
        ValueError: fewer than one actor, ``epsilon`` outside (0, 1] or a negative ``alpha``.
    """
    if isinstance(actors, bool) or not isinstance(actors, numbers.Integral) or actors < 1:
        raise ValueError(f"`actors` must be an integer >= 1, got {actors!r}")
    actors = int(actors)
    epsilon = APEX_EPSILON if epsilon is None else epsilon
    alpha = APEX_ALPHA if alpha is None else alpha
    if not isinstance(epsilon, numbers.Real) or not 0.0 < epsilon <= 1.0:
        raise ValueError(f"`epsilon` must be in (0, 1], got {epsilon}")
    if not isinstance(alpha, numbers.Real) or not alpha >= 0.0:
        raise ValueError(f"`alpha` must be >= 0, got {alpha}")
    if actors == 1:
        return [float(epsilon)]
    return [float(epsilon) ** (1.0 + alpha * i / (actors - 1)) for i in range(actors)]
