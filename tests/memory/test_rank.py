"""Rank-based prioritized replay (``RankSampler``, ``rank.py``, over ``RankHeap``) against hand
computation and the paper's segmented power law; what every kind does is in ``test_replay.py``
and ``test_samplers.py``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from replay_helpers import added, check_refused_state, chi_square_z, draw_counts, filled

from per_dqn.memory import PriorityUpdate, make_memory


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
    mem = filled("rank", capacity=n, alpha=alpha, seed=11)
    td = np.random.default_rng(0).permutation(n).astype(float)  # distinct |delta|
    mem.update_priorities(np.arange(n), td)
    mem.sampler.sort()
    rank_of_slot = mem.sampler.ranks(np.arange(n))
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
    mem = filled("rank", capacity=n, alpha=alpha, seed=4)
    mem.update_priorities(np.arange(n), np.arange(n, dtype=float))
    mem.sampler.sort()
    probs = reference_rank_probs(n, batch, alpha)
    raw = (n * probs) ** -beta
    b = mem.sample(batch, beta=beta)
    expected = raw[mem.sampler.ranks(b.indices) - 1] / raw.max()
    np.testing.assert_allclose(b.weights, expected, rtol=1e-6)


def test_rank_based_new_transitions_go_to_the_top():
    mem = filled("rank", capacity=50, n=20)
    mem.update_priorities(np.arange(20), np.linspace(0.1, 2.0, 20))
    slot = mem.add(np.zeros(2), 0, 0.0, np.zeros(2), False)
    assert mem.sampler.priorities([slot]).item() == 2.0  # the running max, tied with slot 19
    assert mem.sampler.ranks([slot]).item() == 1


@pytest.mark.parametrize("sort_interval", [1, 1000])
def test_rank_based_new_transitions_win_ties_with_clipped_errors(sort_interval):
    """Pins the bug where a new transition tied with clipped |delta| stayed near the bottom.

    With ``td_error_clip = 1`` every stored key below is exactly 1.0, the key a new transition
    enters with. The newest transition must rank 1, the one before it 2, and so on, in the heap,
    after a full re-sort, and for a slot overwritten after wrap-around.
    """
    mem = filled("rank", capacity=8, n=6, td_error_clip=1.0, sort_interval=sort_interval)
    mem.update_priorities(np.arange(6), np.full(6, 5.0))  # all clipped to 1.0
    a = mem.add(np.zeros(2), 0, 0.0, np.zeros(2), False)
    b = mem.add(np.zeros(2), 0, 0.0, np.zeros(2), False)
    assert mem.sampler.priorities([a, b]).tolist() == [1.0, 1.0]
    assert mem.sampler.ranks([b, a]).tolist() == [1, 2]
    mem.sampler.sort()
    assert mem.sampler.ranks([b, a]).tolist() == [1, 2]
    c = mem.add(np.zeros(2), 0, 0.0, np.zeros(2), False)  # wraps: overwrites slot 0
    assert c == 0
    assert mem.sampler.ranks([c]).item() == 1  # heap positions below the root are approximate ranks
    mem.sampler.sort()
    assert mem.sampler.ranks([c, b, a]).tolist() == [1, 2, 3]
    mem.update_priorities([c], [0.5])  # replayed with a small error: below every tie
    mem.sampler.sort()
    assert mem.sampler.ranks([c]).item() == 8


def test_rank_based_heap_is_resorted_periodically():
    mem = filled("rank", capacity=64, sort_interval=3, seed=1)
    rng = np.random.default_rng(2)
    for _ in range(3):
        mem.update_priorities(np.arange(64), rng.random(64))
    keys = mem.sampler.priorities(mem.sampler.heap.order())
    assert (np.diff(keys) <= 0).all()  # a re-sort just happened: positions are exact ranks


def test_rank_based_heavy_head_keeps_every_segment_non_empty():
    """alpha = 3 puts > 1/B of the mass on rank 1; every segment must still hold a rank."""
    mem = filled("rank", capacity=40, alpha=3.0, seed=0)
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
    mem = make_memory(
        "rank", capacity=capacity, obs_shape=(1,), seed=0, td_error_clip=1.0, sort_interval=10**6
    )
    key, stamp, clock = {}, {}, 0  # reference: slot -> key, slot -> insertion stamp
    errors = st.sampled_from([0.0, 0.25, 0.5, 1.0, 3.0])  # 1.0 and 3.0 both clip to the max
    for _ in range(data.draw(st.integers(1, 60))):
        if not key or data.draw(st.booleans()):
            slot = mem.add(np.zeros(1), 0, 0.0, np.zeros(1), False)
            key[slot], stamp[slot], clock = mem.sampler.max_priority, clock, clock + 1
        else:
            slots = data.draw(st.lists(st.sampled_from(sorted(key)), min_size=1, max_size=4))
            errs = [data.draw(errors) for _ in slots]
            mem.update_priorities(slots, errs)
            for s, e in zip(slots, errs, strict=True):  # repeated slots: the last error wins
                key[s] = min(e, 1.0)
        expected = sorted(key, key=lambda s: (-key[s], -stamp[s]))
        n = len(key)
        order = mem.sampler.heap.order()
        heap = [(mem.sampler.priorities([s]).item(), stamp[s]) for s in order]
        assert all(heap[(i - 1) // 2] > heap[i] for i in range(1, n))  # heap order, no ties
        assert len(order) == n and order[0] == expected[0]
    mem.sampler.sort()
    assert mem.sampler.ranks(expected).tolist() == list(range(1, len(expected) + 1))


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


def test_wrap_around_overwrites_the_priority():
    """Slots 0 and 1 now hold new transitions: both enter with the running max key, 5 (the data
    is checked for every kind in ``test_replay.py``)."""
    mem = filled("rank", capacity=4)  # obs 0..3 in slots 0..3
    mem.update_priorities([0, 1, 2, 3], [0.001, 5.0, 0.001, 0.001])
    obs = np.array([[10.0, 10.0], [11.0, 11.0]], np.float32)
    assert mem.add_batch(obs, [0, 1], [10.0, 11.0], obs + 1, [False, True]).tolist() == [0, 1]
    assert mem.sampler.priorities([0, 1]).tolist() == [5.0, 5.0]


def test_repeated_index_in_one_update_keeps_the_last_error():
    """Pins the documented rule on the path training runs (``update_priorities``, not the tree
    classes): a batch that sampled slot 3 three times leaves the priority of its last error."""
    mem = filled("rank", capacity=8, alpha=1.0)
    mem.update_priorities([3, 5, 3, 3], [5.0, 1.0, 7.0, 2.0])
    assert mem.sampler.priorities([3]).item() == pytest.approx(2.0, rel=1e-5)


def test_weighted_and_diagnostics():
    """What the loop reads instead of asking for the type: rank's weights depend on beta, and it
    logs its mean and max ranking key (nothing more with ``full``)."""
    rank = added("rank")
    assert rank.weighted is True
    rank.update_priorities([0, 1], [3.0, 0.0])
    # rank: 38 keys at the initial max 1, one at 3, one at 0 -> mean 41 / 40
    assert rank.diagnostics() == {"mean_priority": 41 / 40, "max_priority": 3.0}
    assert rank.diagnostics(full=True) == rank.diagnostics()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda s: s.update(heap_keys=s["heap_keys"][:-1]), "must have 40 entries"),
        (lambda s: s.pop("heap_stamps"), "no `heap_stamps`"),
    ],
)
def test_a_refused_state_changes_nothing(damage, message):
    """Pins the order of ``load_state_dict``: the sampler's part is checked before the storage is
    overwritten, so a refused checkpoint leaves the memory as it was (here the rank heap's)."""
    check_refused_state("rank", damage, message)


def test_rank_batches_always_hold_the_global_maximum_weight():
    """Why ``weight_normalization`` is proportional-only: a rank batch draws once from every
    equal-mass segment, the last (most ranks, least probability each) included, so the largest
    weight in every batch is the global maximum, 1, and batch normalisation would change
    nothing. Checked over many draws, betas and batch sizes after the keys have been spread."""
    mem = added("rank", capacity=64, n=64, seed=3)
    rng = np.random.default_rng(0)
    for step in range(200):
        batch = mem.sample(int(rng.integers(1, 33)), beta=float(rng.random()))
        assert batch.weights.max() == 1.0, step
        mem.update(PriorityUpdate(batch.indices, rng.random(batch.indices.size) * 5))
    proportional = added("proportional", capacity=64, n=64, seed=3)
    for _ in range(50):
        batch = proportional.sample(8, beta=1.0)
        proportional.update(PriorityUpdate(batch.indices, rng.random(8) * 5))
    # the negative control: proportional's global normalisation leaves most batches below 1
    assert min(proportional.sample(8, beta=1.0).weights.max() for _ in range(20)) < 1.0
