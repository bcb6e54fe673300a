"""The replay-kind registry: one entry per kind, checked when it is made."""

from __future__ import annotations

import numpy as np
import pytest

from per_dqn.memory import (
    KINDS,
    REPLAY_KINDS,
    PrioritizedReplay,
    ProportionalSampler,
    ReplayKind,
    UniformReplay,
    UniformSampler,
    make_memory,
)


def test_every_kind_is_registered_once_in_kinds_order():
    assert tuple(REPLAY_KINDS) == KINDS
    assert all(entry.name == name == entry.sampler.kind for name, entry in REPLAY_KINDS.items())


def test_an_entry_missing_a_key_mapping_fails_naming_the_kind():
    """Issue 22: a kind whose sampler takes a keyword no config key maps would be built with the
    sampler's default for it, silently; the entry refuses to exist instead."""
    keys = dict(REPLAY_KINDS["proportional"].config_keys)
    del keys["uniform_mix"]
    with pytest.raises(ValueError, match=r"replay kind 'prop2'.*\['uniform_mix'\]"):
        ReplayKind("prop2", ProportionalSampler, PrioritizedReplay, config_keys=keys)


def test_an_entry_mapping_a_keyword_its_sampler_lacks_fails_naming_the_kind():
    with pytest.raises(ValueError, match=r"replay kind 'uniform'.*\['alpha'\].*does not take"):
        ReplayKind("uniform", UniformSampler, UniformReplay, config_keys={"alpha": "alpha"})


def test_an_entry_whose_sampler_is_of_another_kind_fails():
    with pytest.raises(ValueError, match=r"replay kind 'flat'.*says kind 'uniform'"):
        ReplayKind("flat", UniformSampler, UniformReplay)


def test_an_entry_names_a_config_key_the_config_lacks():
    """``keywords`` reads the mapped fields; one the config has not is named with the kind."""

    class Partial:
        alpha = 0.5

    with pytest.raises(ValueError, match=r"replay kind 'rank'.*\['td_error_clip', 'sort_i"):
        REPLAY_KINDS["rank"].keywords(Partial())


def test_the_mapping_is_read_only():
    with pytest.raises(TypeError):
        REPLAY_KINDS["rank"].config_keys["priority_eps"] = "priority_eps"  # type: ignore[index]


@pytest.mark.parametrize("capacity", [1, 3, 100, 1025])
@pytest.mark.parametrize("kind", KINDS)
def test_index_bytes_are_the_samplers(kind, capacity):
    memory = make_memory(kind, capacity=capacity, obs_shape=(2,))
    assert REPLAY_KINDS[kind].index_nbytes(capacity) == memory.sampler.nbytes


def test_an_unknown_kind_is_named():
    with pytest.raises(ValueError, match=r"`kind` must be one of .* got 'prio'"):
        make_memory("prio", capacity=4, obs_shape=(2,), obs_dtype=np.float32)
