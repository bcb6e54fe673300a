"""Uniform replay (``UniformSampler``, ``uniform.py``): what only the kind ``uniform`` does, by
hand; what every kind does is in ``test_replay.py`` and ``test_samplers.py``."""

from __future__ import annotations

import numpy as np
from replay_helpers import added, chi_square_z, draw_counts, filled

from per_dqn.memory import UniformSampler


def test_uniform_weights_are_one_and_sampling_is_uniform():
    mem = filled("uniform", capacity=50)
    assert mem.sample(32, beta=0.3).weights.tolist() == [1.0] * 32
    counts = draw_counts(mem, 100_000, 32, 50)
    assert chi_square_z(counts, np.full(50, 1 / 50)) < 4


def test_uniform_draws_no_priorities():
    """Uniform keeps no priorities: its batches carry None and its sampler has no reader (so the
    shared tests' branch for a kind without priorities is the one uniform takes)."""
    mem = added("uniform")
    assert mem.sample(16, 0.4).priorities is None
    assert not hasattr(mem.sampler, "priorities")


def test_weighted_and_diagnostics():
    """What the loop reads instead of asking for the type: uniform's weights never depend on beta
    and it has nothing to log."""
    uniform = added("uniform")
    assert uniform.weighted is False
    assert uniform.diagnostics() == {} and uniform.diagnostics(full=True) == {}


def test_sampler_takes_a_generator_as_is():
    """A sampler given a Generator draws from that very generator (one stream for a caller)."""
    rng = np.random.default_rng(3)
    sampler = UniformSampler(10, rng)
    assert sampler.rng is rng
    indices, weights, priorities = sampler.draw(4, 0.5, 10)
    np.testing.assert_array_equal(indices, np.random.default_rng(3).integers(0, 10, 4))
    assert weights.tolist() == [1.0] * 4 and priorities is None
