"""The kinds ``relo`` and ``pal``: a sampler each that is another kind's under its own name
(ReLo's is proportional PER's, fed the reducible loss; PAL's is uniform replay, under PAL's
loss). What makes them is the learner's (``tests/agent/test_relo.py``,
``tests/agent/test_objectives.py``); here, that the memory is the other kind's, draw for draw."""

from __future__ import annotations

import numpy as np
import pytest
from replay_helpers import filled


@pytest.mark.parametrize(("kind", "same_as"), [("relo", "proportional"), ("pal", "uniform")])
def test_a_kind_draws_what_the_kind_it_builds_on_draws(kind, same_as):
    ours, theirs = filled(kind, capacity=30, seed=5), filled(same_as, capacity=30, seed=5)
    rng = np.random.default_rng(0)
    for _ in range(5):
        a, b = ours.sample(8, 0.5), theirs.sample(8, 0.5)
        for field in a._fields:
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
        td = rng.exponential(size=8)
        ours.update_priorities(a.indices, td)
        theirs.update_priorities(b.indices, td)
    assert ours.kind == kind and ours.state_dict()["kind"] == kind
