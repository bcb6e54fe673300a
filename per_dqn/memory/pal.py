"""Prioritized Approximation Loss's sampler (PAL; Fujimoto, Meger & Precup, NeurIPS 2020).

The kind ``pal``: uniform replay. What makes PAL is its loss (``per_dqn.agent.objectives``,
``pal``), whose expected gradient under uniform sampling is LAP's under prioritized sampling;
sfujim/LAP-PAL ``discrete/main.py`` gives PAL the uniform buffer.
"""

from __future__ import annotations

from typing import ClassVar

from per_dqn.memory.uniform import UniformSampler


class PALSampler(UniformSampler):
    """Uniform replay for PAL's loss (see ``UniformSampler``)."""

    kind: ClassVar[str] = "pal"
