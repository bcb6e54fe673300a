"""LaBER's sampler (``LaBERSampler``, ``laber.py``): the large batch drawn uniformly and the
learner's picks from the same generator; the picks and weights themselves are the learner's
(``tests/agent/test_objectives.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from replay_helpers import chi_square_z, draw_counts, filled

from per_dqn.memory.laber import LaBERSampler


def test_a_batch_of_b_is_m_b_uniform_rows_and_b_picks():
    """m 3, B 5: 15 slots from ``integers(0, size, 15)``, then 5 picks from ``random(5)``, of the
    sampler's one generator, in that order; weights 1, no priorities."""
    mem = filled("laber", capacity=50, large_batch=3, seed=4)
    batch = mem.sample(5, beta=0.7)
    rng = np.random.default_rng(4)
    np.testing.assert_array_equal(batch.indices, rng.integers(0, 50, 15))
    np.testing.assert_array_equal(batch.picks, rng.random(5))
    assert batch.weights.tolist() == [1.0] * 15 and batch.priorities is None
    assert mem.sampler.rows(5) == 15 and mem.weighted is False


def test_the_large_batch_is_uniform():
    mem = filled("laber", capacity=40, large_batch=4, seed=1)
    counts = draw_counts(mem, 100_000, 8, 40)
    assert chi_square_z(counts, np.full(40, 1 / 40)) < 4


def test_the_memory_may_hold_fewer_than_the_large_batch():
    """Draws are with replacement: 4 x 8 rows from 10 transitions is a batch like any other."""
    batch = filled("laber", capacity=100, n=10, large_batch=4).sample(8)
    assert len(batch.indices) == 32 and batch.indices.max() < 10


@pytest.mark.parametrize("bad", [0, -2])
def test_a_factor_below_one_is_refused(bad):
    with pytest.raises(ValueError, match=f"`large_batch` must be >= 1, got {bad}"):
        LaBERSampler(8, large_batch=bad)
    with pytest.raises(TypeError, match=r"`large_batch` must be an int, got float 1\.5"):
        LaBERSampler(8, large_batch=1.5)


def test_the_default_factor_is_the_documented_4():
    """A sampler built without settings (the Python API's ``LaBERSampler(capacity)``) draws
    4 B, the authors' factor (issue 44's mutation run: the default -> 5 survived, since every
    built-in path passes ``replay.large_batch``)."""
    assert LaBERSampler(8).rows(32) == 128
