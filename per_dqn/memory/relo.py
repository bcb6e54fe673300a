"""Reducible-loss prioritization's sampler (ReLo; Sujit et al., NeurIPS 2023).

The kind ``relo``: proportional PER's sampler (sum tree, stratified draws, IS weights,
max-priority insertion), fed the learner's reducible loss instead of ``|delta|``. What a priority
is made of is the learner's (``per_dqn.agent.signals``, ``reducible_loss``); here it becomes
``p_i = (ReLo_i + priority_eps) ** alpha``, as shivakanthsujit/reducible-loss
``MinAtar/examples/per_buffer.py`` writes it.
"""

from __future__ import annotations

from typing import ClassVar

from per_dqn.memory.proportional import ProportionalSampler


class ReLoSampler(ProportionalSampler):
    """Proportional prioritized replay over reducible-loss priorities (see
    ``ProportionalSampler`` for the formulas and the arguments)."""

    kind: ClassVar[str] = "relo"
