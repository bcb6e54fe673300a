"""The replay-kind registry: one entry per kind, its sampler checked against it when loaded."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import numpy as np
import pytest

from per_dqn.memory import KINDS, REPLAY_KINDS, ReplayKind, Sampler, make_memory

PROPORTIONAL = "per_dqn.memory.proportional:ProportionalSampler"


def test_every_kind_is_registered_once_in_kinds_order():
    assert tuple(REPLAY_KINDS) == KINDS
    assert len(set(KINDS)) == len(KINDS)
    assert all(entry.name == name for name, entry in REPLAY_KINDS.items())


@pytest.mark.parametrize("kind", list(REPLAY_KINDS))
def test_every_entry_loads_a_sampler_consistent_with_it(kind):
    """The entry point imports a ``Sampler`` subclass of this kind whose constructor keywords
    (beside ``capacity`` and ``seed``) are exactly the entry's settings, in order."""
    entry = REPLAY_KINDS[kind]
    sampler = entry.sampler
    assert isinstance(sampler, type) and issubclass(sampler, Sampler)
    assert sampler.kind == kind
    assert sampler.settings() == entry.settings
    assert isinstance(sampler.weighted, bool)
    assert entry.summary  # one line for the config reference and --help
    assert make_memory(kind, capacity=4, obs_shape=(2,)).kind == kind


def test_an_entry_missing_a_setting_fails_naming_the_kind():
    """Issue 22: a kind whose sampler takes a keyword its entry does not list would be built with
    the sampler's default for it, silently (the config's value never read); loading the entry's
    sampler refuses instead. (The entry keeps the sampler's own kind name: a name the sampler
    does not say fails earlier, below.)"""
    full = REPLAY_KINDS["proportional"].settings
    assert "uniform_mix" in full
    settings = tuple(key for key in full if key != "uniform_mix")
    entry = ReplayKind("proportional", PROPORTIONAL, settings=settings, weighted=True)
    message = (
        f"replay kind 'proportional': the entry lists settings {settings}, "
        f"but ProportionalSampler takes {full}"
    )
    with pytest.raises(ImportError, match=re.escape(message)):
        _ = entry.sampler


def test_an_entry_listing_a_setting_its_sampler_lacks_fails_naming_the_kind():
    entry = ReplayKind("uniform", "per_dqn.memory.uniform:UniformSampler", settings=("alpha",))
    with pytest.raises(ImportError, match=r"replay kind 'uniform'.*\('alpha',\).*takes \(\)"):
        _ = entry.sampler


def test_an_entry_listing_its_settings_in_another_order_fails_naming_the_kind():
    """The order is the sampler's (the config reference lists them so)."""
    entry = ReplayKind(
        "proportional", PROPORTIONAL, REPLAY_KINDS["proportional"].settings[::-1], weighted=True
    )
    with pytest.raises(ImportError, match=r"replay kind 'proportional': the entry lists"):
        _ = entry.sampler


def test_an_entry_whose_sampler_is_of_another_kind_fails():
    entry = ReplayKind("flat", "per_dqn.memory.uniform:UniformSampler")
    with pytest.raises(ImportError, match=r"replay kind 'flat'.*says kind 'uniform'"):
        _ = entry.sampler


@pytest.mark.parametrize(
    "entry_point",
    ["per_dqn.memory.trees:SumTree", "per_dqn.memory.samplers:positive_int",
     "per_dqn.memory.proportional:NoSuchSampler"],
)  # fmt: skip
def test_an_entry_point_that_is_not_a_sampler_fails_naming_the_kind(entry_point):
    entry = ReplayKind("odd", entry_point)
    with pytest.raises(ImportError, match=r"replay kind 'odd'.*is not a Sampler subclass"):
        _ = entry.sampler


def test_an_entry_names_a_setting_the_config_lacks():
    """``keywords`` reads the listed fields; one the config has not is named with the kind."""

    class Partial:
        alpha = 0.5

    with pytest.raises(ValueError, match=r"replay kind 'rank'.*\['td_error_clip', 'sort_i"):
        REPLAY_KINDS["rank"].keywords(Partial())


def test_keywords_are_the_settings_read_off_the_config():
    class Full:
        alpha, td_error_clip, sort_interval, priority_eps = 0.5, 2.0, 7, 1e-3

    assert REPLAY_KINDS["rank"].keywords(Full()) == dict(
        alpha=0.5, td_error_clip=2.0, sort_interval=7
    )


def test_the_registry_is_read_only():
    """Neither the mapping nor an entry can change after the checks that read them."""
    with pytest.raises(TypeError):
        REPLAY_KINDS["x"] = ReplayKind("x", PROPORTIONAL)  # type: ignore[index]
    assert "x" not in REPLAY_KINDS
    with pytest.raises(dataclasses.FrozenInstanceError):
        REPLAY_KINDS["rank"].settings = ()  # type: ignore[misc]


@pytest.mark.parametrize("capacity", [1, 3, 100, 1025])
@pytest.mark.parametrize("kind", KINDS)
def test_planned_index_bytes_are_the_samplers(kind, capacity):
    memory = make_memory(kind, capacity=capacity, obs_shape=(2,))
    assert REPLAY_KINDS[kind].sampler.planned_nbytes(capacity) == memory.sampler.nbytes


def test_an_unknown_kind_is_named():
    with pytest.raises(ValueError, match=r"`kind` must be one of .* got 'prio'"):
        make_memory("prio", capacity=4, obs_shape=(2,), obs_dtype=np.float32)


def test_a_setting_the_kind_does_not_take_is_named():
    with pytest.raises(TypeError, match=r"replay kind 'uniform' takes no `alpha`"):
        make_memory("uniform", capacity=4, obs_shape=(2,), alpha=0.5)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_refuses_a_setting_it_does_not_take(kind):
    with pytest.raises(TypeError, match=rf"replay kind '{kind}' takes no `not_a_setting`"):
        make_memory(kind, capacity=4, obs_shape=(2,), not_a_setting=1)


def test_reading_kinds_imports_neither_numpy_nor_numba():
    """The config and the command line read ``KINDS``; that must not cost numpy or numba."""
    code = (
        "import sys, per_dqn.memory as m; m.KINDS; "
        "assert 'numpy' not in sys.modules and 'numba' not in sys.modules, "
        "[n for n in ('numpy', 'numba') if n in sys.modules]"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
