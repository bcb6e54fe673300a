"""The memory as storage plus sampler: the loop-facing API every kind shares, against references.

Every test here runs each kind of the registry (``KINDS``) and asks the sampler what is kind
specific; what one kind alone computes is in ``test_uniform.py``, ``test_proportional.py`` and
``test_rank.py``.
"""

from __future__ import annotations

import copy
import re
import typing

import numpy as np
import pytest
from replay_helpers import added, check_refused_state, settings_for
from support import assert_same_state

from per_dqn.memory import (
    KINDS,
    REPLAY_KINDS,
    PriorityUpdate,
    ReplayMemory,
    make_memory,
    make_storage,
)


def test_one_list_of_kinds_drives_config_cli_and_factory():
    """Pins the single list: the config's Literal, the CLI's enum, the factory and every
    memory's ``kind`` are the registry's names (``KINDS``), in its order, and each memory draws
    with the sampler its registry entry names."""
    from per_dqn.cli.common import Replay
    from per_dqn.config import ReplayConfig

    names = tuple(REPLAY_KINDS)
    assert KINDS == names
    assert {"uniform", "proportional", "rank"} <= set(KINDS)  # none of the original kinds lost
    assert typing.get_args(ReplayConfig.model_fields["kind"].annotation) == names
    assert tuple(r.value for r in Replay) == names
    for kind in names:
        mem = make_memory(kind, capacity=4, obs_shape=(1,))
        assert mem.kind == kind and mem.state_dict()["kind"] == kind
        assert type(mem) is ReplayMemory
        assert type(mem.sampler) is REPLAY_KINDS[kind].sampler
    with pytest.raises(ValueError, match=re.escape(f"`kind` must be one of {names}")):
        make_memory("not-a-kind", capacity=4, obs_shape=(1,))


def test_make_memory_names_an_unknown_kind():
    with pytest.raises(ValueError, match=r"`kind` must be one of .*got 'prio'"):
        make_memory("prio", capacity=4, obs_shape=(1,))


@pytest.mark.parametrize("frames", [False, True], ids=["flat", "frames"])
@pytest.mark.parametrize("kind", KINDS)
def test_batch_priorities_are_what_memory_priorities_returns(kind, frames):
    """The priorities the draw read equal a second lookup (which the loop no longer makes) through
    the sampler's ``priorities``: the leaf p_i for proportional, the ranking key for rank; None
    for a kind whose sampler has no priorities (uniform)."""
    mem = added(kind, frames=frames, **settings_for(kind, td_error_clip=2.0))
    priorities = getattr(mem.sampler, "priorities", None)
    rng = np.random.default_rng(0)
    for beta in (0.0, 0.4, 1.0):
        batch = mem.sample(16, beta)
        if priorities is None:
            assert batch.priorities is None
        else:
            assert batch.priorities.dtype == np.float64
            np.testing.assert_array_equal(batch.priorities, priorities(batch.indices))
        mem.update(PriorityUpdate(batch.indices, rng.exponential(size=len(batch.indices)) * 2))
    if priorities is not None:  # not all equal, so the check above could fail
        assert len(set(priorities(np.arange(len(mem))).tolist())) > 5


@pytest.mark.parametrize("kind", KINDS)
def test_update_with_priority_update_equals_update_priorities(kind):
    """``update(PriorityUpdate(i, d))`` is ``update_priorities(i, d)``: same state after both,
    repeated indices (last wins) included, and the same next draws."""
    a = added(kind, **settings_for(kind, sort_interval=3))
    b = copy.deepcopy(a)
    rng = np.random.default_rng(1)
    for _ in range(7):
        batch_a, batch_b = a.sample(8, 0.6), b.sample(8, 0.6)
        np.testing.assert_array_equal(batch_a.indices, batch_b.indices)
        td = rng.exponential(size=len(batch_a.indices))
        a.update(PriorityUpdate(batch_a.indices, td))
        b.update_priorities(batch_b.indices, td)
        a.update(PriorityUpdate(np.array([3, 3]), np.array([9.0, 0.5])))
        b.update_priorities([3, 3], [9.0, 0.5])
    assert_same_state(a.state_dict(), b.state_dict())


@pytest.mark.parametrize("kind", KINDS)
def test_update_validates_whatever_the_kind(kind):
    """A NaN from the learner is refused by every kind, uniform included; nothing changes."""
    mem = added(kind)
    before = copy.deepcopy(mem.state_dict())
    with pytest.raises(ValueError, match=r"got nan at position 1 \(index 5\)"):
        mem.update(PriorityUpdate(np.array([4, 5]), np.array([0.5, np.nan])))
    with pytest.raises(ValueError, match=r"\[0, 40\).*got 40 at position 0"):
        mem.update(PriorityUpdate(np.array([40]), np.array([0.5])))
    with pytest.raises(TypeError, match="`indices` must be integers, got dtype float64"):
        mem.update(PriorityUpdate(np.array([1.0]), np.array([0.5])))
    assert_same_state(mem.state_dict(), before)


@pytest.mark.parametrize("kind", KINDS)
def test_weighted_and_diagnostics_per_kind(kind):
    """What the loop reads instead of asking for the type: ``weighted`` is the sampler's, and
    ``diagnostics(full=True)`` is ``diagnostics()`` (same names first, same values) plus the
    costly checks. The values each kind reports are pinned in its own test file."""
    mem = added(kind)
    mem.update_priorities([0, 1], [3.0, 0.0])
    assert mem.weighted is mem.sampler.weighted is REPLAY_KINDS[kind].sampler.weighted
    assert isinstance(mem.weighted, bool)
    values, full = mem.diagnostics(), mem.diagnostics(full=True)
    assert all(isinstance(name, str) and isinstance(v, float) for name, v in full.items())
    assert list(full)[: len(values)] == list(values)
    assert {name: full[name] for name in values} == values
    for name in ("mean_priority", "max_priority"):  # the sampler's reader, where it has one
        if name in values and hasattr(mem.sampler, name):
            assert values[name] == getattr(mem.sampler, name)


@pytest.mark.parametrize("kind", KINDS)
def test_composing_storage_and_sampler_by_hand_is_make_memory(kind):
    """``ReplayMemory(make_storage(...), Sampler(...))`` draws exactly what ``make_memory``'s
    memory draws (non-default settings included), and both report the same bytes."""
    sampler = REPLAY_KINDS[kind].sampler
    kw = settings_for(kind, alpha=0.5, uniform_mix=0.1, sort_interval=4)
    built = make_memory(kind, capacity=30, obs_shape=(3,), seed=4, **kw)
    composed = ReplayMemory(make_storage(30, (3,)), sampler(30, seed=4, **kw))
    rng = np.random.default_rng(0)
    obs = rng.random((45, 3))
    for mem in (built, composed):
        mem.add_batch(obs, np.zeros(45), np.ones(45), np.ones((45, 3)), [0] * 45)
    for _ in range(10):
        a, b = built.sample(8, 0.5), composed.sample(8, 0.5)
        for field in a._fields:
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
        td = rng.exponential(size=len(a.indices))
        built.update_priorities(a.indices, td)
        composed.update(PriorityUpdate(b.indices, td))
    assert built.nbytes == composed.nbytes and composed.sampler.nbytes >= 0


@pytest.mark.parametrize("kind", KINDS)
def test_storage_and_sampler_of_different_capacities_are_refused(kind):
    sampler = REPLAY_KINDS[kind].sampler(9)
    with pytest.raises(ValueError, match=r"`sampler` capacity must be the storage's \(8\), got 9"):
        ReplayMemory(make_storage(8, (2,)), sampler)


@pytest.mark.parametrize("kind", KINDS)
def test_every_sampler_takes_a_generator_as_is(kind):
    """A sampler given a Generator keeps that very generator (one stream for a caller), and draws
    what a sampler seeded with the generator's seed draws."""
    sampler = REPLAY_KINDS[kind].sampler
    rng = np.random.default_rng(3)
    given = sampler(10, seed=rng)
    assert given.rng is rng
    a = ReplayMemory(make_storage(10, (1,)), given)
    b = make_memory(kind, capacity=10, obs_shape=(1,), seed=3)
    for mem in (a, b):
        mem.add_batch(np.arange(10.0)[:, None], np.zeros(10), np.zeros(10), np.zeros((10, 1)),
                      np.zeros(10))  # fmt: skip
    for _ in range(3):
        x, y = a.sample(4, 0.5), b.sample(4, 0.5)
        np.testing.assert_array_equal(x.indices, y.indices)
        np.testing.assert_array_equal(x.weights, y.weights)
    assert_same_state(a.state_dict(), b.state_dict())


@pytest.mark.parametrize("kind", KINDS)
def test_a_refused_state_changes_nothing(kind):
    """Pins the order of ``load_state_dict``: the sampler's part is checked before the storage is
    overwritten, so a refused checkpoint leaves the memory as it was. Here a state without its
    RNG, which every sampler keeps; each kind's own parts are damaged in its test file."""
    check_refused_state(kind, lambda s: s.pop("rng"), "no `rng`")
