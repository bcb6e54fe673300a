"""``build.make_memory``: a config's replay keys reach the memory the registry says they do."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from per_dqn.config import Config, ReplayConfig
from per_dqn.envs.make import EnvSpec
from per_dqn.memory import KINDS, REPLAY_KINDS, FrameStorage
from per_dqn.training.build import make_memory

# A value for each ReplayConfig field a kind can map, different from the config's default and
# from every sampler's: a key that does not arrive leaves the sampler at its default and fails.
NON_DEFAULT = {
    "alpha": 0.35,
    "priority_eps": 0.01,
    "td_error_clip": 2.5,
    "uniform_mix": 0.25,
    "weight_normalization": "batch",
    "sort_interval": 7,
    "min_priority": 0.05,
    "large_batch": 3,
}
VECTOR = EnvSpec(obs_shape=(4,), obs_dtype=np.dtype(np.float32), num_actions=2)


def test_the_non_default_values_differ_from_every_default():
    """Guards against a vacuous pass: no value below is what a kind would get anyway.

    Pins a bug of this test itself: it looked the value up by the sampler's keyword instead of
    the config field, so a kind whose field and keyword differ (``uniform2_bias`` -> ``bias``)
    failed with a bare KeyError."""
    for key, value in NON_DEFAULT.items():
        assert ReplayConfig.model_fields[key].default != value, key
    for entry in REPLAY_KINDS.values():
        params = inspect.signature(entry.sampler).parameters
        for key in entry.settings:
            assert params[key].default != NON_DEFAULT[key], (entry.name, key)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_built_from_a_config_gets_each_of_its_keys(kind):
    """Issue 22: a kind whose keys ``build`` did not pass silently got the sampler's defaults.

    Each setting the registry lists for the kind is set to a non-default value in a real ``Config``,
    the memory is built by ``build.make_memory`` and the sampler must hold every value."""
    entry = REPLAY_KINDS[kind]
    unlisted = set(entry.settings) - set(NON_DEFAULT)
    assert not unlisted, f"give {sorted(unlisted)} (replay kind {kind!r}) a value in NON_DEFAULT"
    replay = {"kind": kind, "capacity": 128} | {key: NON_DEFAULT[key] for key in entry.settings}
    config = Config.model_validate({"replay": replay})
    memory = make_memory(config.replay, VECTOR, seed=3)
    assert memory.kind == kind and isinstance(memory.sampler, entry.sampler)
    assert memory.capacity == 128
    for key in entry.settings:
        assert getattr(memory.sampler, key) == NON_DEFAULT[key], (kind, key)


@pytest.mark.parametrize("kind", KINDS)
def test_frame_storage_keys_arrive_for_every_kind(kind):
    """``dedup_frames`` and ``frame_slack`` reach the storage of stacked uint8 frames: with
    ``dedup_frames`` (the default) each frame is kept once, with slack for the stacks' frames;
    without it, whole stacks."""
    config = Config.model_validate({"replay": {"kind": kind, "capacity": 1000, "frame_slack": 0.5}})
    frames = EnvSpec(obs_shape=(4, 8, 8), obs_dtype=np.dtype(np.uint8), num_actions=2)
    memory = make_memory(config.replay, frames, seed=3)
    assert isinstance(memory.storage, FrameStorage)
    assert memory.storage.observations.frames.shape[0] == 1000 + 500
    whole = Config.model_validate(
        {"replay": {"kind": kind, "capacity": 1000, "dedup_frames": False}}
    )
    memory = make_memory(whole.replay, frames, seed=3)
    assert not isinstance(memory.storage, FrameStorage)
