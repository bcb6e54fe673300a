"""Uniform, proportional and rank-based replay against hand computation and the paper's formulas."""

from __future__ import annotations

import copy
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import assert_same_state

from per_dqn.memory import PrioritizedReplay, RankBasedReplay, UniformReplay

KINDS = [UniformReplay, PrioritizedReplay, RankBasedReplay]


def filled(cls, capacity=100, n=None, seed=0, **kw):
    """A memory whose transition i has obs == [i, i], action i % 3, reward i (deterministic)."""
    mem = cls(capacity=capacity, obs_shape=(2,), seed=seed, **kw)
    n = capacity if n is None else n
    obs = np.repeat(np.arange(n, dtype=np.float32)[:, None], 2, axis=1)
    mem.add_batch(obs, np.arange(n) % 3, np.arange(n), obs + 1, np.zeros(n, bool))
    return mem


def chi_square_z(counts: np.ndarray, probs: np.ndarray) -> float:
    """Wilson-Hilferty z-score of Pearson's chi-square statistic (z > 4 means p < 3e-5)."""
    expected = probs * counts.sum()
    stat = float(((counts - expected) ** 2 / expected).sum())
    df = len(counts) - 1
    return ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))


def draw_counts(mem, n_draws, batch_size, size):
    counts = np.zeros(size)
    for _ in range(n_draws // batch_size):
        np.add.at(counts, mem.sample(batch_size, beta=0.5).indices, 1)
    return counts


def test_importing_memory_pulls_in_neither_torch_nor_gymnasium():
    code = (
        "import sys, per_dqn.schedules; from per_dqn.memory import *; "
        "bad = [m for m in ('torch', 'gymnasium', 'ale_py') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


# --- shared behaviour ------------------------------------------------------------------------


@pytest.mark.parametrize("cls", KINDS)
def test_batch_contents_match_what_was_added(cls):
    mem = filled(cls, capacity=50)
    batch = mem.sample(16, beta=0.4)
    i = batch.indices
    np.testing.assert_array_equal(batch.obs[:, 0], i)
    np.testing.assert_array_equal(batch.next_obs[:, 1], i + 1)
    np.testing.assert_array_equal(batch.actions, i % 3)
    np.testing.assert_array_equal(batch.rewards, i)
    assert batch.obs.dtype == np.float32 and batch.weights.dtype == np.float32
    assert batch.n_steps.tolist() == [1] * 16


@pytest.mark.parametrize("cls", KINDS)
def test_uint8_observations_stay_uint8(cls):
    mem = cls(capacity=8, obs_shape=(4, 84, 84), obs_dtype=np.uint8, seed=0)
    frame = np.full((4, 84, 84), 255, np.uint8)
    mem.add(frame, 1, 0.0, frame, True)
    batch = mem.sample(1)
    assert batch.obs.dtype == np.uint8 and batch.obs.max() == 255 and batch.terminated[0]
    with pytest.raises(ValueError, match="`obs` must be castable to uint8, got float64"):
        mem.add(frame.astype(np.float64), 1, 0.0, frame, False)


@pytest.mark.parametrize("cls", KINDS)
def test_unfilled_slots_are_never_sampled(cls):
    mem = filled(cls, capacity=1000, n=10)
    seen = np.concatenate([mem.sample(10, beta=1.0).indices for _ in range(2000)])
    assert seen.min() >= 0 and seen.max() <= 9
    assert set(seen.tolist()) == set(range(10))


@pytest.mark.parametrize("cls", KINDS)
def test_wrap_around_overwrites_data_and_priority(cls):
    mem = filled(cls, capacity=4)  # obs 0..3 in slots 0..3
    if cls is not UniformReplay:
        mem.update_priorities([0, 1, 2, 3], [0.001, 5.0, 0.001, 0.001])
    obs = np.array([[10.0, 10.0], [11.0, 11.0]], np.float32)
    slots = mem.add_batch(obs, [0, 1], [10.0, 11.0], obs + 1, [False, True])
    assert slots.tolist() == [0, 1] and len(mem) == 4
    batch = mem.sample(4, beta=1.0)
    by_slot = dict(zip(batch.indices.tolist(), batch.obs[:, 0].tolist(), strict=True))
    for slot, value in by_slot.items():
        assert value == {0: 10.0, 1: 11.0, 2: 2.0, 3: 3.0}[slot]
    if cls is PrioritizedReplay:
        # slot 0 had priority 0.001 but now holds a new transition: it enters at the max
        new_leaf = mem.max_priority**mem.alpha
        assert mem.priorities([0, 1]).tolist() == [new_leaf, new_leaf]
        assert mem.max_priority == 5.0 + mem.priority_eps
    if cls is RankBasedReplay:
        assert mem.priorities([0, 1]).tolist() == [5.0, 5.0]


@pytest.mark.parametrize("cls", KINDS)
def test_bad_input_raises_and_changes_nothing(cls):
    mem = filled(cls, capacity=20, n=10)
    before = copy.deepcopy(mem.state_dict())
    cases = [
        (
            lambda: mem.update_priorities([1, 2], [0.5, np.nan]),
            r"got nan at position 1 \(index 2\)",
        ),
        (
            lambda: mem.update_priorities([1, 2], [np.inf, 0.5]),
            r"got inf at position 0 \(index 1\)",
        ),
        (lambda: mem.update_priorities([3], [-0.5]), r"got -0.5 at position 0 \(index 3\)"),
        (lambda: mem.update_priorities([10], [0.5]), r"\[0, 10\).*got 10 at position 0"),
        (lambda: mem.update_priorities([1, 2], [0.5]), r"same length"),
        (lambda: mem.sample(11), r"`batch_size` must be <= stored transitions \(10\), got 11"),
        (lambda: mem.sample(0), r"`batch_size` must be >= 1, got 0"),
        (lambda: mem.sample(4, beta=1.5), r"`beta` must be in \[0.0, 1.0\], got 1.5"),
        (lambda: mem.add(np.zeros(3), 0, 0.0, np.zeros(2), False), r"`obs` must have shape \(2,\)"),
        (
            lambda: mem.add_batch(np.zeros((2, 2)), [0], [0, 0], np.zeros((2, 2)), [0, 0]),
            r"`actions` must have 2 entries",
        ),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()
    after = mem.state_dict()
    for key in ("storage", "rng"):
        assert repr(after[key]) == repr(before[key])
    for key in ("priorities", "heap_slots", "heap_keys", "heap_stamps", "max_priority"):
        if key in before:
            np.testing.assert_array_equal(after[key], before[key])


@pytest.mark.parametrize("cls", KINDS)
def test_empty_memory_cannot_be_sampled(cls):
    mem = cls(capacity=4, obs_shape=(2,), seed=0)
    with pytest.raises(ValueError, match="empty replay memory"):
        mem.sample(1)


@pytest.mark.parametrize("cls", KINDS)
def test_state_dict_round_trip_reproduces_next_samples(cls):
    mem = filled(cls, capacity=64, n=80, seed=3)
    rng = np.random.default_rng(1)
    for _ in range(20):
        batch = mem.sample(8, beta=0.6)
        mem.update_priorities(batch.indices, rng.exponential(size=8))
    clone = cls(capacity=64, obs_shape=(2,), seed=999)
    clone.load_state_dict(copy.deepcopy(mem.state_dict()))
    for _ in range(5):
        a, b = mem.sample(8, beta=0.6), clone.sample(8, beta=0.6)
        for field in a._fields:
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
        td = rng.exponential(size=8)
        mem.update_priorities(a.indices, td)
        clone.update_priorities(b.indices, td)
        slot = mem.add(np.ones(2), 0, 0.0, np.ones(2), False)
        assert clone.add(np.ones(2), 0, 0.0, np.ones(2), False) == slot


def test_state_dict_for_another_kind_is_refused():
    with pytest.raises(ValueError, match="state is for a `uniform` memory, not `proportional`"):
        filled(PrioritizedReplay).load_state_dict(filled(UniformReplay).state_dict())


def test_uniform_weights_are_one_and_sampling_is_uniform():
    mem = filled(UniformReplay, capacity=50)
    assert mem.sample(32, beta=0.3).weights.tolist() == [1.0] * 32
    counts = draw_counts(mem, 100_000, 32, 50)
    assert chi_square_z(counts, np.full(50, 1 / 50)) < 4


# --- proportional ------------------------------------------------------------------------


def test_proportional_frequencies_match_p_i():
    """P(i) = p_i / sum p with p_i = (|delta_i| + eps)^alpha, over 100k draws."""
    n, alpha, eps = 40, 0.6, 1e-6
    mem = filled(PrioritizedReplay, capacity=n, alpha=alpha, priority_eps=eps, seed=7)
    td = np.linspace(0.0, 3.0, n)
    mem.update_priorities(np.arange(n), td)
    p = (td + eps) ** alpha
    counts = draw_counts(mem, 100_000, 32, n)
    assert chi_square_z(counts, p / p.sum()) < 4


def test_proportional_frequencies_can_fail():
    """The chi-square check above is not vacuous: the uniform law is rejected for the same data."""
    n = 40
    mem = filled(PrioritizedReplay, capacity=n, seed=7)
    mem.update_priorities(np.arange(n), np.linspace(0.0, 3.0, n))
    counts = draw_counts(mem, 100_000, 32, n)
    assert chi_square_z(counts, np.full(n, 1 / n)) > 10


def test_high_priority_transition_is_drawn_far_above_its_uniform_share():
    """One slot at priority 100 against 99 at 0.01: P = 100^a / (100^a + 99 * 0.01^a) ~ 0.717."""
    mem = filled(PrioritizedReplay, capacity=100, alpha=0.6, priority_eps=1e-9, seed=2)
    mem.update_priorities(np.arange(100), np.r_[100.0, np.full(99, 0.01)])
    counts = draw_counts(mem, 32_000, 32, 100)
    share = counts[0] / counts.sum()
    expected = 100**0.6 / (100**0.6 + 99 * 0.01**0.6)
    assert share > 50 * (1 / 100)
    assert abs(share - expected) < 0.01


def test_alpha_is_applied_exactly_once():
    """A new item's leaf is max_priority ** alpha, with max_priority kept in the raw domain."""
    mem = filled(PrioritizedReplay, capacity=10, n=5, alpha=0.5, priority_eps=0.25)
    assert mem.priorities([0]).item() == 1.0  # initial max priority 1, 1 ** alpha
    mem.update_priorities([2], [8.75])  # raw (8.75 + 0.25) = 9
    assert mem.max_priority == 9.0
    assert mem.priorities([2]).item() == 3.0  # 9 ** 0.5, not 9 ** 0.25
    slot = mem.add(np.zeros(2), 0, 0.0, np.zeros(2), False)
    assert mem.priorities([slot]).item() == 3.0


def test_td_error_clip_bounds_the_priority():
    mem = filled(PrioritizedReplay, capacity=10, alpha=1.0, priority_eps=0.5, td_error_clip=1.0)
    mem.update_priorities([0, 1], [100.0, 0.25])
    assert mem.priorities([0, 1]).tolist() == [1.5, 0.75]
    assert mem.max_priority == 1.5


@pytest.mark.parametrize("normalization", ["global", "batch"])
def test_is_weights_closed_form(normalization):
    """w_i = (N P(i))^-beta / max w, with the max over the memory (global) or the batch."""
    n, alpha, beta = 8, 1.0, 0.7
    mem = filled(
        PrioritizedReplay, capacity=n, alpha=alpha, priority_eps=1e-12,
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
    mem = filled(PrioritizedReplay, capacity=n, alpha=1.0, priority_eps=1e-12, uniform_mix=mix)
    td = np.arange(1.0, n + 1)
    mem.update_priorities(np.arange(n), td)
    prob = mix / n + (1 - mix) * td / td.sum()
    raw = (n * prob) ** -beta
    batch = mem.sample(10, beta=beta)
    np.testing.assert_allclose(batch.weights, raw[batch.indices] / raw.max(), rtol=1e-6)
    counts = draw_counts(mem, 100_000, 10, n)
    assert chi_square_z(counts, prob) < 4


def test_alpha_zero_behaves_like_uniform():
    mem = filled(PrioritizedReplay, capacity=30, alpha=0.0, seed=5)
    mem.update_priorities(np.arange(30), np.linspace(0, 100, 30))
    batch = mem.sample(16, beta=0.4)
    assert batch.weights.tolist() == [1.0] * 16
    counts = draw_counts(mem, 96_000, 16, 30)
    assert chi_square_z(counts, np.full(30, 1 / 30)) < 4


def test_tree_drift_and_mean_priority():
    mem = filled(PrioritizedReplay, capacity=16, alpha=1.0, priority_eps=1e-12)
    mem.update_priorities(np.arange(16), np.arange(16.0))
    assert mem.mean_priority == pytest.approx(7.5)
    assert mem.tree_drift() < 1e-15


def test_no_drift_on_the_training_update_path():
    """The root stays within float64 rounding of ``math.fsum`` of the leaves after 20,000
    batched updates through ``update_priorities`` (the path training runs), with non-dyadic
    priorities spanning 12 orders of magnitude, which no binary fraction represents exactly.

    A sum of n positive terms through a tree of depth d is within d * 2**-53 of the exact sum
    (relative); a tree that accumulated deltas, or rounded its nodes to float32, is not.
    """
    capacity = 1000
    mem = filled(PrioritizedReplay, capacity=capacity, alpha=0.6, priority_eps=1e-6)
    rng = np.random.default_rng(0)
    for _ in range(20_000):
        mem.update_priorities(rng.integers(0, capacity, 32), 10.0 ** rng.uniform(-6, 6, 32) / 3)
    leaves = mem.priorities(np.arange(capacity))
    assert len(set(leaves.tolist())) > 900 and not np.all(leaves == np.round(leaves))
    exact = math.fsum(leaves.tolist())
    depth = math.ceil(math.log2(capacity))
    assert abs(mem.total_priority - exact) <= depth * 2.0**-53 * exact
    assert mem.tree_drift() <= depth * 2.0**-53


@pytest.mark.parametrize("cls", [PrioritizedReplay, RankBasedReplay])
def test_repeated_index_in_one_update_keeps_the_last_error(cls):
    """Pins the documented rule on the path training runs (``update_priorities``, not the tree
    classes): a batch that sampled slot 3 three times leaves the priority of its last error."""
    mem = filled(cls, capacity=8, alpha=1.0)
    mem.update_priorities([3, 5, 3, 3], [5.0, 1.0, 7.0, 2.0])
    assert mem.priorities([3]).item() == pytest.approx(2.0, rel=1e-5)
    if cls is PrioritizedReplay:
        others = mem.priorities([0, 1, 2, 4, 5, 6, 7])
        assert mem.total_priority == pytest.approx(others.sum() + 2.0 + 1e-6)


def test_proportional_sampling_is_stratified():
    """Pins stratified sampling (Schaul et al., Appendix B.2.1): draw k of B falls in the k-th
    of B equal slices of the total priority mass. With B equal priorities and B transitions each
    slice is one transition, so a batch is every slot exactly once, in order; independent draws
    over the whole range would repeat slots (P(no repeat) = 32!/32**32, about 1e-13)."""
    mem = filled(PrioritizedReplay, capacity=64, n=32, seed=3)
    for _ in range(20):
        assert mem.sample(32, beta=0.4).indices.tolist() == list(range(32))
    # Unequal priorities: the k-th draw's prefix-sum interval meets the k-th slice.
    mem.update_priorities(np.arange(32), np.random.default_rng(1).uniform(0.1, 3.0, 32))
    leaves = mem.priorities(np.arange(32))
    upper = np.cumsum(leaves)
    lower = upper - leaves
    total, batch = upper[-1], 8
    for _ in range(50):
        idx = mem.sample(batch, beta=0.4).indices
        k = np.arange(batch)
        assert np.all(lower[idx] < (k + 1) * total / batch)
        assert np.all(upper[idx] > k * total / batch)


# --- rank-based --------------------------------------------------------------------------


def reference_rank_probs(n: int, batch: int, alpha: float) -> np.ndarray:
    """P(rank) of the scheme the paper describes, computed independently of the kernels.

    Rank r (1-based) has power-law mass m_r = r^-alpha and cumulative mass c_r; it belongs to
    segment k = ceil(B c_r / C) - 1 (segments are B equal slices of the total C). Each segment
    is drawn once per batch and a rank uniformly inside it: P(r) = 1 / (B * |segment|).
    """
    mass = np.arange(1, n + 1, dtype=np.float64) ** -alpha
    cum = np.cumsum(mass)
    segment = np.ceil(batch * cum / cum[-1]).astype(int) - 1
    sizes = np.bincount(segment, minlength=batch)
    assert (sizes > 0).all(), "choose n, batch so that no segment is empty"
    return 1.0 / (batch * sizes[segment])


def test_rank_based_frequencies_match_the_segmented_power_law():
    n, batch, alpha = 1000, 16, 0.7
    mem = filled(RankBasedReplay, capacity=n, alpha=alpha, seed=11)
    td = np.random.default_rng(0).permutation(n).astype(float)  # distinct |delta|
    mem.update_priorities(np.arange(n), td)
    mem.sort()
    rank_of_slot = mem.ranks(np.arange(n))
    assert sorted(rank_of_slot.tolist()) == list(range(1, n + 1))
    assert rank_of_slot[np.argmax(td)] == 1 and rank_of_slot[np.argmin(td)] == n
    probs_by_rank = reference_rank_probs(n, batch, alpha)
    counts = draw_counts(mem, 320_000, batch, n)
    assert chi_square_z(counts, probs_by_rank[rank_of_slot - 1]) < 4
    # the segmented law stays close to the ideal (1/rank)^alpha law: within 2x for every rank
    ideal = np.arange(1, n + 1) ** -alpha
    ratio = probs_by_rank / (ideal / ideal.sum())
    assert ratio.min() > 0.5 and ratio.max() < 2.0


def test_rank_based_weights_are_exact_for_the_segments():
    n, batch, alpha, beta = 1000, 16, 0.7, 0.5
    mem = filled(RankBasedReplay, capacity=n, alpha=alpha, seed=4)
    mem.update_priorities(np.arange(n), np.arange(n, dtype=float))
    mem.sort()
    probs = reference_rank_probs(n, batch, alpha)
    raw = (n * probs) ** -beta
    b = mem.sample(batch, beta=beta)
    expected = raw[mem.ranks(b.indices) - 1] / raw.max()
    np.testing.assert_allclose(b.weights, expected, rtol=1e-6)


def test_rank_based_new_transitions_go_to_the_top():
    mem = filled(RankBasedReplay, capacity=50, n=20)
    mem.update_priorities(np.arange(20), np.linspace(0.1, 2.0, 20))
    slot = mem.add(np.zeros(2), 0, 0.0, np.zeros(2), False)
    assert mem.priorities([slot]).item() == 2.0  # the running max, tied with slot 19
    assert mem.ranks([slot]).item() == 1


@pytest.mark.parametrize("sort_interval", [1, 1000])
def test_rank_based_new_transitions_win_ties_with_clipped_errors(sort_interval):
    """Pins the bug where a new transition tied with clipped |delta| stayed near the bottom.

    With ``td_error_clip = 1`` every stored key below is exactly 1.0, the key a new transition
    enters with. The newest transition must rank 1, the one before it 2, and so on, in the heap,
    after a full re-sort, and for a slot overwritten after wrap-around.
    """
    mem = filled(RankBasedReplay, capacity=8, n=6, td_error_clip=1.0, sort_interval=sort_interval)
    mem.update_priorities(np.arange(6), np.full(6, 5.0))  # all clipped to 1.0
    a = mem.add(np.zeros(2), 0, 0.0, np.zeros(2), False)
    b = mem.add(np.zeros(2), 0, 0.0, np.zeros(2), False)
    assert mem.priorities([a, b]).tolist() == [1.0, 1.0]
    assert mem.ranks([b, a]).tolist() == [1, 2]
    mem.sort()
    assert mem.ranks([b, a]).tolist() == [1, 2]
    c = mem.add(np.zeros(2), 0, 0.0, np.zeros(2), False)  # wraps: overwrites slot 0
    assert c == 0
    assert mem.ranks([c]).item() == 1  # heap positions below the root are approximate ranks
    mem.sort()
    assert mem.ranks([c, b, a]).tolist() == [1, 2, 3]
    mem.update_priorities([c], [0.5])  # replayed with a small error: below every tie
    mem.sort()
    assert mem.ranks([c]).item() == 8


def test_rank_based_heap_is_resorted_periodically():
    mem = filled(RankBasedReplay, capacity=64, sort_interval=3, seed=1)
    rng = np.random.default_rng(2)
    for _ in range(3):
        mem.update_priorities(np.arange(64), rng.random(64))
    keys = mem.priorities(mem.sampler.heap.order())
    assert (np.diff(keys) <= 0).all()  # a re-sort just happened: positions are exact ranks


def test_rank_based_heavy_head_keeps_every_segment_non_empty():
    """alpha = 3 puts > 1/B of the mass on rank 1; every segment must still hold a rank."""
    mem = filled(RankBasedReplay, capacity=40, alpha=3.0, seed=0)
    mem.update_priorities(np.arange(40), np.arange(40.0))
    seen = np.concatenate([mem.sample(32, beta=1.0).indices for _ in range(50)])
    assert len(set(seen.tolist())) > 32
    weights = mem.sample(32, beta=1.0).weights
    assert (weights > 0).all() and weights.max() == 1.0


@settings(max_examples=60, deadline=None)
@given(data=st.data(), capacity=st.integers(1, 24))
def test_rank_heap_matches_a_reference_ordering(data, capacity):
    """Any mix of inserts (with wrap-around) and clipped updates keeps a valid heap whose root is
    the reference's first item, and a re-sort gives exactly the reference ranking: key
    descending, ties newest first."""
    mem = RankBasedReplay(
        capacity=capacity, obs_shape=(1,), seed=0, td_error_clip=1.0, sort_interval=10**6
    )
    key, stamp, clock = {}, {}, 0  # reference: slot -> key, slot -> insertion stamp
    errors = st.sampled_from([0.0, 0.25, 0.5, 1.0, 3.0])  # 1.0 and 3.0 both clip to the max
    for _ in range(data.draw(st.integers(1, 60))):
        if not key or data.draw(st.booleans()):
            slot = mem.add(np.zeros(1), 0, 0.0, np.zeros(1), False)
            key[slot], stamp[slot], clock = mem.max_priority, clock, clock + 1
        else:
            slots = data.draw(st.lists(st.sampled_from(sorted(key)), min_size=1, max_size=4))
            errs = [data.draw(errors) for _ in slots]
            mem.update_priorities(slots, errs)
            for s, e in zip(slots, errs, strict=True):  # repeated slots: the last error wins
                key[s] = min(e, 1.0)
        expected = sorted(key, key=lambda s: (-key[s], -stamp[s]))
        n = len(key)
        order = mem.sampler.heap.order()
        heap = [(mem.priorities([s]).item(), stamp[s]) for s in order]
        assert all(heap[(i - 1) // 2] > heap[i] for i in range(1, n))  # heap order, no ties
        assert len(order) == n and order[0] == expected[0]
    mem.sort()
    assert mem.ranks(expected).tolist() == list(range(1, len(expected) + 1))


@settings(max_examples=100, deadline=None)
@given(data=st.data(), n=st.integers(1, 40))
def test_tie_break_pass_matches_a_full_sort(data, n):
    """The O(n) pass that orders tied keys newest first gives ``np.lexsort``'s order, and refuses
    (changing nothing) to break ties with stamps that are not the contiguous range it relies on."""
    from per_dqn.memory.heap import break_ties_newest_first

    keys = np.array(data.draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=n,
                                       max_size=n)))  # fmt: skip
    newest = data.draw(st.integers(n - 1, 10**6))
    stamps = newest - np.random.default_rng(data.draw(st.integers(0, 99))).permutation(n)
    order = np.argsort(keys)[::-1].copy()
    assert break_ties_newest_first(order, keys, stamps, newest)
    np.testing.assert_array_equal(order, np.lexsort((-stamps, -keys)))
    if n == 1:
        return
    keys[-1] = keys[0]  # a tie, so the stamps are needed
    before = np.argsort(keys)[::-1].copy()
    gapped = stamps.copy()
    gapped[0] = newest + 1  # outside the live range
    copy = before.copy()
    assert not break_ties_newest_first(copy, keys, gapped, newest)
    np.testing.assert_array_equal(copy, before)


@pytest.mark.parametrize("cls", KINDS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_one_transition_through_add_is_a_batch_of_one(cls, data):
    """The loop stores a step's single transition with ``add`` and several with ``add_batch``
    (``Loop.steps``: ``add`` costs a third as much). The property: any sequence of steps, with
    priority updates between them, leaves a memory fed that way and one fed only through
    ``add_batch`` in the same state (contents, priorities, sampler and RNG), with the same
    slots returned and the same next batch drawn."""
    capacity = data.draw(st.integers(1, 6), label="capacity")
    one, batched = (cls(capacity=capacity, obs_shape=(2,), seed=3) for _ in range(2))
    t = 0
    for _ in range(data.draw(st.integers(1, 8), label="steps")):
        n = data.draw(st.integers(1, 3), label="transitions")
        obs = np.arange(t, t + n, dtype=np.float32)[:, None].repeat(2, axis=1)
        actions, rewards = np.arange(t, t + n) % 3, np.arange(t, t + n) * 0.5
        terminated = np.arange(t, t + n) % 4 == 3
        t += n
        if n == 1:
            slots = [one.add(obs[0], actions[0], rewards[0], obs[0] + 1, terminated[0])]
        else:
            slots = one.add_batch(obs, actions, rewards, obs + 1, terminated).tolist()
        assert slots == batched.add_batch(obs, actions, rewards, obs + 1, terminated).tolist()
        indices = data.draw(st.lists(st.integers(0, len(one) - 1), max_size=3), label="updated")
        errors = data.draw(
            st.lists(st.floats(0, 10), min_size=len(indices), max_size=len(indices)), label="td"
        )
        for mem in (one, batched):
            mem.update_priorities(np.array(indices, dtype=np.int64), errors)
    assert_same_state(one.state_dict(), batched.state_dict())
    size = min(len(one), 2)
    a, b = one.sample(size, beta=0.5), batched.sample(size, beta=0.5)
    assert a.indices.tolist() == b.indices.tolist() and a.weights.tolist() == b.weights.tolist()
