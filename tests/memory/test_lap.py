"""LAP's sampler (``LAPSampler``, ``lap.py``) against hand computation and sfujim/LAP-PAL
(``discrete/LAP_DDQN.py`` and ``discrete/utils.py``); what every kind does is in
``test_replay.py`` and ``test_samplers.py``."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from replay_helpers import added, check_refused_state, chi_square_z, draw_counts, filled

from per_dqn.memory import PriorityUpdate
from per_dqn.memory.lap import LAPSampler


def test_priority_is_delta_floored_at_min_priority_then_raised_to_alpha_by_hand():
    """max(|delta|, k) ** alpha with k 1, alpha 0.5: 0.25 -> 1, 1 -> 1, 4 -> 2, 9 -> 3."""
    mem = filled("lap", capacity=10, alpha=0.5, min_priority=1.0)
    mem.update_priorities([0, 1, 2, 3], [0.25, 1.0, 4.0, 9.0])
    assert mem.sampler.priorities([0, 1, 2, 3]).tolist() == [1.0, 1.0, 2.0, 3.0]
    # The source's Atari setting: k 0.01 floors |delta| far lower.
    atari = filled("lap", capacity=10, alpha=0.6, min_priority=0.01)
    atari.update_priorities([0, 1], [0.0, 0.5])
    np.testing.assert_allclose(atari.sampler.priorities([0, 1]), [0.01**0.6, 0.5**0.6])


def test_new_transitions_enter_at_the_largest_priority_seen():
    """max_priority starts at 1 and follows the largest max(|delta|, k); a new slot's leaf is its
    alpha power (the source's max_priority, kept in the p^alpha domain, is the same number)."""
    mem = filled("lap", capacity=10, n=5, alpha=0.5)
    assert mem.sampler.priorities([0]).item() == 1.0
    mem.update_priorities([1], [16.0])
    slot = mem.add(np.zeros(2), 0, 0.0, np.zeros(2), False)
    assert mem.sampler.max_priority == 16.0 and mem.sampler.priorities([slot]).item() == 4.0
    mem.update_priorities([1], [0.5])  # a lower priority later does not lower the max
    assert mem.sampler.max_priority == 16.0


def test_frequencies_match_p_i_and_every_weight_is_one():
    n, alpha = 40, 0.6
    mem = filled("lap", capacity=n, alpha=alpha, min_priority=1.0, seed=7)
    td = np.linspace(0.0, 6.0, n)
    mem.update_priorities(np.arange(n), td)
    p = np.maximum(td, 1.0) ** alpha
    counts = draw_counts(mem, 100_000, 32, n)
    assert chi_square_z(counts, p / p.sum()) < 4
    assert chi_square_z(counts, np.full(n, 1 / n)) > 10  # the check can fail
    batch = mem.sample(32, beta=0.9)
    assert batch.weights.tolist() == [1.0] * 32 and mem.weighted is False


def test_draws_are_independent_masses_not_strata():
    """The source's SumTree.sample: B uniform masses in [0, total), each found in the tree. A
    generator seeded as the sampler's gives the same masses; the leaves they land in are the
    draws (stratified draws would put one in each B-th of the mass)."""
    sampler = LAPSampler(8, alpha=1.0, seed=11)
    sampler.on_insert(np.arange(8))
    sampler.update(_update(np.arange(8), np.arange(1.0, 9.0)))
    indices, weights, priorities = sampler.draw(6, 0.4, 8)
    masses = np.random.default_rng(11).random(6) * 36.0  # leaves 1..8 sum to 36
    expected = np.searchsorted(np.cumsum(np.arange(1.0, 9.0)), masses, side="right")
    np.testing.assert_array_equal(indices, expected)
    np.testing.assert_array_equal(priorities, indices + 1.0)
    assert weights.tolist() == [1.0] * 6


def _update(indices, td):
    return PriorityUpdate(indices.astype(np.int64), td)


def test_settings_are_checked():
    with pytest.raises(ValueError, match=r"`min_priority` must be > 0, got 0\.0"):
        LAPSampler(4, min_priority=0.0)
    with pytest.raises(ValueError, match=r"`alpha` must be in \[0.0, inf\], got -1.0"):
        LAPSampler(4, alpha=-1.0)


def test_a_damaged_state_is_refused_and_changes_nothing():
    check_refused_state(
        "lap", lambda s: s.__setitem__("max_priority", 0.5),
        r"`max_priority` must be finite and >= 1, got 0.5",
    )  # fmt: skip
    check_refused_state(
        "lap", lambda s: s["priorities"].__setitem__(3, np.nan),
        r"`priorities` must be finite and >= 0, got nan at slot 3",
    )  # fmt: skip
    # The bounds themselves: a missing max, an infinite one; exactly 1 (the initial max) loads.
    check_refused_state(
        "lap", lambda s: s.pop("max_priority"), r"`max_priority` must be finite and >= 1, got nan"
    )
    check_refused_state(
        "lap", lambda s: s.__setitem__("max_priority", np.inf),
        r"`max_priority` must be finite and >= 1, got inf",
    )  # fmt: skip
    fresh = added("lap", seed=1)
    state = fresh.state_dict()
    assert state["max_priority"] == 1.0
    target = added("lap", n=13, seed=2)
    target.load_state_dict(state)
    assert target.state_dict()["max_priority"] == 1.0


def test_single_inserts_past_capacity_keep_the_size_at_capacity():
    """Issue 44's mutation run: `_size < capacity` -> `<=` in the one-slot insert survived.
    Six single inserts into a ring of four hold four transitions, each at priority 1: their
    mean is 1, not the total over six."""
    sampler = LAPSampler(4, seed=0)
    for slot in (0, 1, 2, 3, 0, 1):
        sampler.on_insert(slot)
    assert sampler.mean_priority == 1.0
    assert sampler.state_dict()["priorities"].shape == (4,)


def test_an_infinite_floor_is_refused():
    """`min_priority` must be finite (issue 44's mutation run: `< inf` -> `<= inf` survived)."""
    with pytest.raises(ValueError, match=r"^`min_priority` must be > 0, got inf$"):
        LAPSampler(4, min_priority=np.inf)


def test_a_draw_at_the_top_of_the_unit_interval_stays_below_the_total():
    """The draw has no clamp: ``random()``'s largest value, ``1 - 2**-53``, times any total
    rounds below that total, so the tree never gets the total itself (which it refuses)."""
    top = np.nextafter(1.0, 0.0)
    assert top == 1.0 - 2.0**-53
    sampler = LAPSampler(4, alpha=0.6, min_priority=0.01, seed=0)
    sampler.on_insert(0)
    sampler.update(_update(np.array([0]), np.array([0.0])))  # one leaf, 0.01 ** 0.6 < 1

    class Top:
        def random(self, n):
            return np.full(n, top)

    sampler.rng = Top()
    for total_leaf in (0.01**0.6, 0.5, 1.0, 3.0, 2.0**-40, 7.0e12):
        sampler.sums.write(np.array([0]), np.array([total_leaf]))
        indices, _, _ = sampler.draw(3, 0.4, 1)
        assert indices.tolist() == [0, 0, 0]


def test_the_diagnostics_are_the_mean_and_the_largest_priority_by_hand():
    """Leaves 1, 1, 2, 3 (alpha 0.5, floor 1, |delta| 0.25, 1, 4, 9): the mean leaf 7/4 and the
    largest floored |delta| 9, under the names the PER panel logs (a mutation run found the
    names unchecked)."""
    mem = filled("lap", capacity=10, n=4, alpha=0.5, min_priority=1.0)
    mem.update_priorities([0, 1, 2, 3], [0.25, 1.0, 4.0, 9.0])
    assert mem.sampler.diagnostics() == {"mean_priority": 7 / 4, "max_priority": 9.0}


def test_a_partly_filled_memory_s_state_round_trips_sized_to_its_contents():
    """A memory holding 7 of its 40 slots saves 7 priorities; a memory holding 3 loads them,
    checked against the 7 transitions the state holds, and then draws as the source does (a
    mutation run found the stored count dropped on its way to that check and to the load
    unseen: the shared tests round-trip full memories)."""
    source = added("lap", n=7, seed=1)
    source.update_priorities(np.arange(7), np.arange(7.0) + 0.5)
    state = copy.deepcopy(source.state_dict())
    assert state["priorities"].shape == (7,)
    target = added("lap", n=3, seed=2)
    target.load_state_dict(state)
    np.testing.assert_array_equal(
        target.sampler.priorities(np.arange(40)), source.sampler.priorities(np.arange(40))
    )
    assert target.sampler.mean_priority == source.sampler.mean_priority
    for _ in range(3):
        np.testing.assert_array_equal(
            target.sample(4, beta=0.5).indices, source.sample(4, beta=0.5).indices
        )


def test_the_defaults_are_the_ones_documented():
    """A sampler built without settings (the Python API's ``LAPSampler(capacity)``) has the
    alpha and floor its docstring names: 0.6 and the paper's 1 (issue 44's mutation run:
    the default alpha -> 1.6 survived, since every built-in path passes ``replay.alpha``)."""
    sampler = LAPSampler(4)
    assert (sampler.alpha, sampler.min_priority) == (0.6, 1.0)
