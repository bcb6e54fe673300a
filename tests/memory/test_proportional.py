"""Proportional prioritized replay (``ProportionalSampler``, ``proportional.py``) against hand
computation and the paper's formulas; what every kind does is in ``test_replay.py`` and
``test_samplers.py``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from replay_helpers import added, check_refused_state, chi_square_z, draw_counts, filled

from per_dqn.memory import make_memory


def test_proportional_frequencies_match_p_i():
    """P(i) = p_i / sum p with p_i = (|delta_i| + eps)^alpha, over 100k draws."""
    n, alpha, eps = 40, 0.6, 1e-6
    mem = filled("proportional", capacity=n, alpha=alpha, priority_eps=eps, seed=7)
    td = np.linspace(0.0, 3.0, n)
    mem.update_priorities(np.arange(n), td)
    p = (td + eps) ** alpha
    counts = draw_counts(mem, 100_000, 32, n)
    assert chi_square_z(counts, p / p.sum()) < 4


def test_proportional_frequencies_can_fail():
    """The chi-square check above is not vacuous: the uniform law is rejected for the same data."""
    n = 40
    mem = filled("proportional", capacity=n, seed=7)
    mem.update_priorities(np.arange(n), np.linspace(0.0, 3.0, n))
    counts = draw_counts(mem, 100_000, 32, n)
    assert chi_square_z(counts, np.full(n, 1 / n)) > 10


def test_high_priority_transition_is_drawn_far_above_its_uniform_share():
    """One slot at priority 100 against 99 at 0.01: P = 100^a / (100^a + 99 * 0.01^a) ~ 0.717."""
    mem = filled("proportional", capacity=100, alpha=0.6, priority_eps=1e-9, seed=2)
    mem.update_priorities(np.arange(100), np.r_[100.0, np.full(99, 0.01)])
    counts = draw_counts(mem, 32_000, 32, 100)
    share = counts[0] / counts.sum()
    expected = 100**0.6 / (100**0.6 + 99 * 0.01**0.6)
    assert share > 50 * (1 / 100)
    assert abs(share - expected) < 0.01


def test_alpha_is_applied_exactly_once():
    """A new item's leaf is max_priority ** alpha, with max_priority kept in the raw domain."""
    mem = filled("proportional", capacity=10, n=5, alpha=0.5, priority_eps=0.25)
    assert mem.sampler.priorities([0]).item() == 1.0  # initial max priority 1, 1 ** alpha
    mem.update_priorities([2], [8.75])  # raw (8.75 + 0.25) = 9
    assert mem.sampler.max_priority == 9.0
    assert mem.sampler.priorities([2]).item() == 3.0  # 9 ** 0.5, not 9 ** 0.25
    slot = mem.add(np.zeros(2), 0, 0.0, np.zeros(2), False)
    assert mem.sampler.priorities([slot]).item() == 3.0


def test_td_error_clip_bounds_the_priority():
    mem = filled("proportional", capacity=10, alpha=1.0, priority_eps=0.5, td_error_clip=1.0)
    mem.update_priorities([0, 1], [100.0, 0.25])
    assert mem.sampler.priorities([0, 1]).tolist() == [1.5, 0.75]
    assert mem.sampler.max_priority == 1.5


@pytest.mark.parametrize("normalization", ["global", "batch"])
def test_is_weights_closed_form(normalization):
    """w_i = (N P(i))^-beta / max w, with the max over the memory (global) or the batch."""
    n, alpha, beta = 8, 1.0, 0.7
    mem = filled(
        "proportional", capacity=n, alpha=alpha, priority_eps=1e-12,
        weight_normalization=normalization,
    )  # fmt: skip
    td = np.array([1.0, 2.0, 4.0, 8.0, 1.0, 2.0, 4.0, 8.0])
    mem.update_priorities(np.arange(n), td)
    p = td**alpha
    prob = p / p.sum()
    raw = (n * prob) ** -beta
    for _ in range(20):
        batch = mem.sample(4, beta=beta)
        ref = raw.max() if normalization == "global" else raw[batch.indices].max()
        np.testing.assert_allclose(batch.weights, raw[batch.indices] / ref, rtol=1e-6)


def test_uniform_mix_weights_use_the_mixture():
    n, mix, beta = 10, 0.25, 1.0
    mem = filled("proportional", capacity=n, alpha=1.0, priority_eps=1e-12, uniform_mix=mix)
    td = np.arange(1.0, n + 1)
    mem.update_priorities(np.arange(n), td)
    prob = mix / n + (1 - mix) * td / td.sum()
    raw = (n * prob) ** -beta
    batch = mem.sample(10, beta=beta)
    np.testing.assert_allclose(batch.weights, raw[batch.indices] / raw.max(), rtol=1e-6)
    counts = draw_counts(mem, 100_000, 10, n)
    assert chi_square_z(counts, prob) < 4


def test_alpha_zero_behaves_like_uniform():
    mem = filled("proportional", capacity=30, alpha=0.0, seed=5)
    mem.update_priorities(np.arange(30), np.linspace(0, 100, 30))
    batch = mem.sample(16, beta=0.4)
    assert batch.weights.tolist() == [1.0] * 16
    counts = draw_counts(mem, 96_000, 16, 30)
    assert chi_square_z(counts, np.full(30, 1 / 30)) < 4


def test_tree_drift_and_mean_priority():
    mem = filled("proportional", capacity=16, alpha=1.0, priority_eps=1e-12)
    mem.update_priorities(np.arange(16), np.arange(16.0))
    assert mem.sampler.mean_priority == pytest.approx(7.5)
    assert mem.sampler.tree_drift() < 1e-15


def test_no_drift_on_the_training_update_path():
    """The root stays within float64 rounding of ``math.fsum`` of the leaves after 20,000
    batched updates through ``update_priorities`` (the path training runs), with non-dyadic
    priorities spanning 12 orders of magnitude, which no binary fraction represents exactly.

    A sum of n positive terms through a tree of depth d is within d * 2**-53 of the exact sum
    (relative); a tree that accumulated deltas, or rounded its nodes to float32, is not.
    """
    capacity = 1000
    mem = filled("proportional", capacity=capacity, alpha=0.6, priority_eps=1e-6)
    rng = np.random.default_rng(0)
    for _ in range(20_000):
        mem.update_priorities(rng.integers(0, capacity, 32), 10.0 ** rng.uniform(-6, 6, 32) / 3)
    leaves = mem.sampler.priorities(np.arange(capacity))
    assert len(set(leaves.tolist())) > 900 and not np.all(leaves == np.round(leaves))
    exact = math.fsum(leaves.tolist())
    depth = math.ceil(math.log2(capacity))
    assert abs(mem.sampler.sums.total - exact) <= depth * 2.0**-53 * exact
    assert mem.sampler.tree_drift() <= depth * 2.0**-53


def test_proportional_sampling_is_stratified():
    """Pins stratified sampling (Schaul et al., Appendix B.2.1): draw k of B falls in the k-th
    of B equal slices of the total priority mass. With B equal priorities and B transitions each
    slice is one transition, so a batch is every slot exactly once, in order; independent draws
    over the whole range would repeat slots (P(no repeat) = 32!/32**32, about 1e-13)."""
    mem = filled("proportional", capacity=64, n=32, seed=3)
    for _ in range(20):
        assert mem.sample(32, beta=0.4).indices.tolist() == list(range(32))
    # Unequal priorities: the k-th draw's prefix-sum interval meets the k-th slice.
    mem.update_priorities(np.arange(32), np.random.default_rng(1).uniform(0.1, 3.0, 32))
    leaves = mem.sampler.priorities(np.arange(32))
    upper = np.cumsum(leaves)
    lower = upper - leaves
    total, batch = upper[-1], 8
    for _ in range(50):
        idx = mem.sample(batch, beta=0.4).indices
        k = np.arange(batch)
        assert np.all(lower[idx] < (k + 1) * total / batch)
        assert np.all(upper[idx] > k * total / batch)


def test_wrap_around_overwrites_the_priority():
    """Slot 0 had priority 0.001 but now holds a new transition: it enters at the max, as slot 1
    (overwritten too) does, at ``max_priority ** alpha`` with the raw max kept (the data is
    checked for every kind in ``test_replay.py``)."""
    mem = filled("proportional", capacity=4)  # obs 0..3 in slots 0..3
    mem.update_priorities([0, 1, 2, 3], [0.001, 5.0, 0.001, 0.001])
    obs = np.array([[10.0, 10.0], [11.0, 11.0]], np.float32)
    assert mem.add_batch(obs, [0, 1], [10.0, 11.0], obs + 1, [False, True]).tolist() == [0, 1]
    new_leaf = mem.sampler.max_priority**mem.sampler.alpha
    assert mem.sampler.priorities([0, 1]).tolist() == [new_leaf, new_leaf]
    assert mem.sampler.max_priority == 5.0 + mem.sampler.priority_eps


def test_repeated_index_in_one_update_keeps_the_last_error():
    """Pins the documented rule on the path training runs (``update_priorities``, not the tree
    classes): a batch that sampled slot 3 three times leaves the priority of its last error."""
    mem = filled("proportional", capacity=8, alpha=1.0)
    mem.update_priorities([3, 5, 3, 3], [5.0, 1.0, 7.0, 2.0])
    assert mem.sampler.priorities([3]).item() == pytest.approx(2.0, rel=1e-5)
    others = mem.sampler.priorities([0, 1, 2, 4, 5, 6, 7])
    assert mem.sampler.sums.total == pytest.approx(others.sum() + 2.0 + 1e-6)


def test_batch_priorities_with_uniform_mix_are_the_drawn_leaves():
    """With ``uniform_mix`` some draws are replaced by uniform slots: their priorities too."""
    mem = added("proportional", uniform_mix=0.5)
    mem.update_priorities(np.arange(40), np.arange(40.0))
    for _ in range(10):
        batch = mem.sample(32, 0.5)
        np.testing.assert_array_equal(batch.priorities, mem.sampler.priorities(batch.indices))


def test_weighted_and_diagnostics():
    """What the loop reads instead of asking for the type: proportional's weights depend on beta,
    it logs its mean and max priority and, with ``full``, the sum tree's drift."""
    prop = added("proportional")
    assert prop.weighted is True
    prop.update_priorities([0, 1], [3.0, 0.0])
    expected = {"mean_priority": prop.sampler.mean_priority, "max_priority": 3.000001}
    assert prop.diagnostics() == expected
    full = prop.diagnostics(full=True)
    assert list(full) == ["mean_priority", "max_priority", "tree_drift"]
    assert full["tree_drift"] == prop.sampler.tree_drift() < 1e-15


def test_mean_priority_counts_only_stored_transitions():
    """The proportional sampler counts stored transitions as the ring does: min(n, capacity).
    Hand computation: 5 of 10 slots at leaf 1, then slot 0 at (3 + 1)**1 = 4 -> mean 8 / 5."""
    mem = make_memory("proportional", capacity=10, obs_shape=(1,), alpha=1.0, priority_eps=1.0)
    assert mem.diagnostics()["mean_priority"] == 0.0
    mem.add_batch(np.zeros((5, 1)), np.zeros(5), np.zeros(5), np.zeros((5, 1)), np.zeros(5))
    mem.update_priorities([0], [3.0])
    assert mem.diagnostics()["mean_priority"] == 8 / 5
    mem.add_batch(np.zeros((25, 1)), np.zeros(25), np.zeros(25), np.zeros((25, 1)), np.zeros(25))
    assert len(mem) == 10 and mem.diagnostics()["mean_priority"] == 4.0  # all at max 4 ** 1


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda s: s.update(priorities=s["priorities"][:-1]), r"shape \(40,\)"),
        (lambda s: s["priorities"].__setitem__(3, -1.0), r"got -1.0 at slot 3"),
    ],
)
def test_a_refused_state_changes_nothing(damage, message):
    """Pins the order of ``load_state_dict``: the sampler's part is checked before the storage is
    overwritten, so a refused checkpoint leaves the memory as it was (here proportional's leaf
    priorities)."""
    check_refused_state("proportional", damage, message)
