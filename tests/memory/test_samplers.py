"""The memory as storage plus sampler: the loop-facing API every kind shares, against references."""

from __future__ import annotations

import copy
import typing

import numpy as np
import pytest
from support import assert_same_state

from per_dqn.memory import (
    KINDS,
    PrioritizedReplay,
    PriorityUpdate,
    ProportionalSampler,
    RankBasedReplay,
    RankSampler,
    ReplayMemory,
    UniformReplay,
    UniformSampler,
    make_memory,
    make_storage,
)

CLASSES = {"uniform": UniformReplay, "proportional": PrioritizedReplay, "rank": RankBasedReplay}
FRAME = dict(obs_shape=(4, 8, 8), obs_dtype=np.uint8, dedup_frames=True, frame_slack=0.5)


def filled(kind, capacity=40, n=50, seed=0, frames=False, **kw):
    """``n`` deterministic transitions (obs value i for transition i) in a memory of ``kind``."""
    shape = FRAME if frames else dict(obs_shape=(2,))
    mem = make_memory(kind, capacity=capacity, seed=seed, **shape, **kw)
    for i in range(n):
        if frames:
            obs = np.stack([np.full((8, 8), (i + j) % 256, np.uint8) for j in range(4)])
            nxt = np.stack([np.full((8, 8), (i + j + 1) % 256, np.uint8) for j in range(4)])
        else:
            obs, nxt = np.full(2, i, np.float32), np.full(2, i + 1, np.float32)
        mem.add(obs, i % 3, float(i), nxt, i % 7 == 0)
    return mem


def test_one_list_of_kinds_drives_config_cli_and_factory():
    """Pins the single list: the config's Literal, the CLI's enum, the factory and every
    memory's ``kind`` are ``KINDS``, in its order."""
    from per_dqn.cli.common import Replay
    from per_dqn.config import ReplayConfig

    assert KINDS == ("uniform", "proportional", "rank")
    assert typing.get_args(ReplayConfig.model_fields["kind"].annotation) == KINDS
    assert tuple(r.value for r in Replay) == KINDS
    for kind in KINDS:
        mem = make_memory(kind, capacity=4, obs_shape=(1,))
        assert mem.kind == kind and mem.state_dict()["kind"] == kind
        assert isinstance(mem, CLASSES[kind])


def test_make_memory_names_an_unknown_kind():
    with pytest.raises(ValueError, match=r"`kind` must be one of .*got 'prio'"):
        make_memory("prio", capacity=4, obs_shape=(1,))


@pytest.mark.parametrize("frames", [False, True], ids=["flat", "frames"])
@pytest.mark.parametrize("kind", KINDS)
def test_batch_priorities_are_what_memory_priorities_returns(kind, frames):
    """The priorities the draw read equal a second lookup (which the loop no longer makes): the
    leaf p_i for proportional, the ranking key for rank; None for uniform."""
    mem = filled(kind, frames=frames, td_error_clip=2.0) if kind != "uniform" else filled(kind)
    rng = np.random.default_rng(0)
    for beta in (0.0, 0.4, 1.0):
        batch = mem.sample(16, beta)
        if kind == "uniform":
            assert batch.priorities is None
        else:
            assert batch.priorities.dtype == np.float64
            np.testing.assert_array_equal(batch.priorities, mem.priorities(batch.indices))
        mem.update(PriorityUpdate(batch.indices, rng.exponential(size=16) * 2))
    if kind != "uniform":  # not all equal, so the check above could fail
        assert len(set(mem.priorities(np.arange(len(mem))).tolist())) > 5


def test_batch_priorities_with_uniform_mix_are_the_drawn_leaves():
    """With ``uniform_mix`` some draws are replaced by uniform slots: their priorities too."""
    mem = filled("proportional", uniform_mix=0.5)
    mem.update_priorities(np.arange(40), np.arange(40.0))
    for _ in range(10):
        batch = mem.sample(32, 0.5)
        np.testing.assert_array_equal(batch.priorities, mem.priorities(batch.indices))


@pytest.mark.parametrize("kind", KINDS)
def test_update_with_priority_update_equals_update_priorities(kind):
    """``update(PriorityUpdate(i, d))`` is ``update_priorities(i, d)``: same state after both,
    repeated indices (last wins) included, and the same next draws."""
    a, b = filled(kind, sort_interval=3) if kind == "rank" else filled(kind), None
    b = copy.deepcopy(a)
    rng = np.random.default_rng(1)
    for _ in range(7):
        batch_a, batch_b = a.sample(8, 0.6), b.sample(8, 0.6)
        np.testing.assert_array_equal(batch_a.indices, batch_b.indices)
        td = rng.exponential(size=8)
        a.update(PriorityUpdate(batch_a.indices, td))
        b.update_priorities(batch_b.indices, td)
        a.update(PriorityUpdate(np.array([3, 3]), np.array([9.0, 0.5])))
        b.update_priorities([3, 3], [9.0, 0.5])
    assert_same_state(a.state_dict(), b.state_dict())


@pytest.mark.parametrize("kind", KINDS)
def test_update_validates_whatever_the_kind(kind):
    """A NaN from the learner is refused by every kind, uniform included; nothing changes."""
    mem = filled(kind)
    before = copy.deepcopy(mem.state_dict())
    with pytest.raises(ValueError, match=r"got nan at position 1 \(index 5\)"):
        mem.update(PriorityUpdate(np.array([4, 5]), np.array([0.5, np.nan])))
    with pytest.raises(ValueError, match=r"\[0, 40\).*got 40 at position 0"):
        mem.update(PriorityUpdate(np.array([40]), np.array([0.5])))
    with pytest.raises(TypeError, match="`indices` must be integers, got dtype float64"):
        mem.update(PriorityUpdate(np.array([1.0]), np.array([0.5])))
    assert_same_state(mem.state_dict(), before)


def test_weighted_and_diagnostics_per_kind():
    """What the loop reads instead of asking for the type."""
    uniform, prop, rank = (filled(kind) for kind in KINDS)
    assert (uniform.weighted, prop.weighted, rank.weighted) == (False, True, True)
    assert uniform.diagnostics() == {} and uniform.diagnostics(full=True) == {}
    prop.update_priorities([0, 1], [3.0, 0.0])
    rank.update_priorities([0, 1], [3.0, 0.0])
    assert prop.diagnostics() == {"mean_priority": prop.mean_priority, "max_priority": 3.000001}
    full = prop.diagnostics(full=True)
    assert list(full) == ["mean_priority", "max_priority", "tree_drift"]
    assert full["tree_drift"] == prop.tree_drift() < 1e-15
    # rank: 38 keys at the initial max 1, one at 3, one at 0 -> mean 41 / 40
    assert rank.diagnostics() == {"mean_priority": 41 / 40, "max_priority": 3.0}
    assert rank.diagnostics(full=True) == rank.diagnostics()


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
    ("sampler", "cls", "kw"),
    [
        (UniformSampler, UniformReplay, {}),
        (ProportionalSampler, PrioritizedReplay, dict(alpha=0.5, uniform_mix=0.1)),
        (RankSampler, RankBasedReplay, dict(alpha=0.5, sort_interval=4)),
    ],
)
def test_composing_storage_and_sampler_by_hand_is_the_constructor(sampler, cls, kw):
    """``ReplayMemory(make_storage(...), Sampler(...))`` draws exactly what the thin
    constructor's memory draws, and both report the same bytes."""
    built = cls(capacity=30, obs_shape=(3,), seed=4, **kw)
    composed = ReplayMemory(make_storage(30, (3,)), sampler(30, seed=4, **kw))
    rng = np.random.default_rng(0)
    obs = rng.random((45, 3))
    for mem in (built, composed):
        mem.add_batch(obs, np.zeros(45), np.ones(45), np.ones((45, 3)), [0] * 45)
    for _ in range(10):
        a, b = built.sample(8, 0.5), composed.sample(8, 0.5)
        for field in a._fields:
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
        td = rng.exponential(size=8)
        built.update_priorities(a.indices, td)
        composed.update(PriorityUpdate(b.indices, td))
    assert built.nbytes == composed.nbytes and composed.sampler.nbytes >= 0


def test_storage_and_sampler_of_different_capacities_are_refused():
    with pytest.raises(ValueError, match=r"`sampler` capacity must be the storage's \(8\), got 9"):
        ReplayMemory(make_storage(8, (2,)), UniformSampler(9))


def test_sampler_takes_a_generator_as_is():
    """A sampler given a Generator draws from that very generator (one stream for a caller)."""
    rng = np.random.default_rng(3)
    sampler = UniformSampler(10, rng)
    assert sampler.rng is rng
    indices, weights, priorities = sampler.draw(4, 0.5, 10)
    np.testing.assert_array_equal(indices, np.random.default_rng(3).integers(0, 10, 4))
    assert weights.tolist() == [1.0] * 4 and priorities is None


@pytest.mark.parametrize(
    ("kind", "damage", "message"),
    [
        ("proportional", lambda s: s.update(priorities=s["priorities"][:-1]), r"shape \(40,\)"),
        ("proportional", lambda s: s["priorities"].__setitem__(3, -1.0), r"got -1.0 at slot 3"),
        ("rank", lambda s: s.update(heap_keys=s["heap_keys"][:-1]), "must have 40 entries"),
        ("rank", lambda s: s.pop("heap_stamps"), "no `heap_stamps`"),
        ("uniform", lambda s: s.pop("rng"), "no `rng`"),
    ],
)
def test_a_refused_state_changes_nothing(kind, damage, message):
    """Pins the order of ``load_state_dict``: the sampler's part is checked before the storage is
    overwritten, so a refused checkpoint leaves the memory as it was."""
    source = filled(kind, seed=1)
    source.update_priorities(np.arange(40), np.arange(40.0))
    state = copy.deepcopy(source.state_dict())
    damage(state)
    target = filled(kind, n=13, seed=2)
    before = copy.deepcopy(target.state_dict())
    with pytest.raises(ValueError, match=message):
        target.load_state_dict(state)
    assert_same_state(target.state_dict(), before)


def test_rank_batches_always_hold_the_global_maximum_weight():
    """Why ``weight_normalization`` is proportional-only: a rank batch draws once from every
    equal-mass segment, the last (most ranks, least probability each) included, so the largest
    weight in every batch is the global maximum, 1, and batch normalisation would change
    nothing. Checked over many draws, betas and batch sizes after the keys have been spread."""
    mem = filled("rank", capacity=64, n=64, seed=3)
    rng = np.random.default_rng(0)
    for step in range(200):
        batch = mem.sample(int(rng.integers(1, 33)), beta=float(rng.random()))
        assert batch.weights.max() == 1.0, step
        mem.update(PriorityUpdate(batch.indices, rng.random(batch.indices.size) * 5))
    proportional = filled("proportional", capacity=64, n=64, seed=3)
    for _ in range(50):
        batch = proportional.sample(8, beta=1.0)
        proportional.update(PriorityUpdate(batch.indices, rng.random(8) * 5))
    # the negative control: proportional's global normalisation leaves most batches below 1
    assert min(proportional.sample(8, beta=1.0).weights.max() for _ in range(20)) < 1.0
