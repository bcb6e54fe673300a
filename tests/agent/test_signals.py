"""The priority signals (``per_dqn/agent/signals.py``): one registry, each signal by hand, and the
learner handing the memory its agent's signal, alone and in a pack."""

from __future__ import annotations

import typing

import numpy as np
import pytest
import torch
from agent_helpers import random_batch, tiny_agent
from torch.nn import functional as F

from per_dqn.agent import DQNAgent
from per_dqn.agent.pack import Pack
from per_dqn.agent.signals import (
    PRIORITY_SIGNALS,
    SIGNALS,
    SignalInputs,
    priority_signal,
    sample_losses,
)
from per_dqn.config import ConfigError, ReplayConfig, load_config
from per_dqn.memory import Batch

TD = np.array([0.0, 0.5, 0.999, 1.0, 2.0, 7.25], dtype=np.float32)


def test_one_registry_drives_the_config():
    assert SIGNALS == tuple(PRIORITY_SIGNALS)
    assert typing.get_args(ReplayConfig.model_fields["priority_from"].annotation) == SIGNALS
    assert all(name == signal.name and signal.summary for name, signal in PRIORITY_SIGNALS.items())


def test_an_unknown_signal_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"`priority_signal` must be one of .* got 'reloss'"):
        priority_signal("reloss")
    path = tmp_path / "c.yaml"
    path.write_text("replay:\n  priority_from: reloss\n")
    with pytest.raises(ConfigError, match=r"replay\.priority_from: must be one of .*'reloss'"):
        load_config(str(path))


def test_td_error_is_delta_itself():
    got = PRIORITY_SIGNALS["td_error"].compute(SignalInputs(TD, "huber"))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, TD)


@pytest.mark.parametrize(
    ("loss", "expected"),
    [
        # Huber, delta 1: 0.5 d^2 below 1, d - 0.5 from 1 on (the two agree at the kink).
        ("huber", [0.0, 0.125, 0.5 * 0.999**2, 0.5, 1.5, 6.75]),
        ("mse", [0.0, 0.25, 0.999**2, 1.0, 4.0, 7.25**2]),
    ],
)
def test_loss_is_the_sample_loss_by_hand(loss, expected):
    before = TD.copy()
    got = PRIORITY_SIGNALS["loss"].compute(SignalInputs(TD, loss))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    np.testing.assert_array_equal(got, sample_losses(TD, loss))
    np.testing.assert_array_equal(TD, before)  # the input is left as it was


@pytest.mark.parametrize("loss", ["huber", "mse"])
def test_the_loss_signal_is_the_update_s_own_per_sample_loss(loss):
    """The same numbers torch's loss gives each sample in the update, bit for bit."""
    reference = (F.smooth_l1_loss if loss == "huber" else F.mse_loss)(
        torch.from_numpy(TD), torch.zeros(len(TD)), reduction="none"
    )
    np.testing.assert_array_equal(sample_losses(TD, loss), reference.numpy())


def test_sample_losses_names_an_unknown_loss():
    with pytest.raises(ValueError, match="`loss` must be 'huber' or 'mse', got 'l1'"):
        sample_losses(TD, "l1")


def _agent(seed: int, signal: str, loss: str = "huber") -> DQNAgent:
    return tiny_agent(seed, loss=loss, priority_signal=signal)


def _batch(seed: int, size: int = 16) -> Batch:
    return random_batch(seed, size)


@pytest.mark.parametrize("loss", ["huber", "mse"])
def test_learn_hands_back_the_agent_s_signal(loss):
    """Two agents from one seed learn the same batches; the one with the ``loss`` signal hands
    back the per-sample loss of the |delta| the other hands back, on the same slots, and both
    report the same metrics (``td_error_abs`` stays the mean |delta|)."""
    by_delta, by_loss = _agent(0, "td_error", loss), _agent(0, "loss", loss)
    for step in range(5):
        a, b = by_delta.learn(_batch(step)), by_loss.learn(_batch(step))
        np.testing.assert_array_equal(a.priorities.indices, np.arange(16) + 100)
        np.testing.assert_array_equal(b.priorities.indices, a.priorities.indices)
        np.testing.assert_array_equal(b.td_abs, sample_losses(a.td_abs, loss))
        assert a.metrics == b.metrics
        assert a.metrics["td_error_abs"] == pytest.approx(float(a.td_abs.mean()))
    assert not np.array_equal(a.td_abs, b.td_abs)  # the two signals differ on this batch


def test_members_of_one_pack_keep_their_own_signals():
    """A pack of an agent prioritising by |delta| and one by its loss: each member's priorities
    are bit for bit those it hands back alone."""
    alone = {signal: _agent(3, signal) for signal in ("td_error", "loss")}
    packed = {signal: _agent(3, signal) for signal in ("td_error", "loss")}
    pack = Pack(list(packed.values()))
    for step in range(5):
        results = pack.learn({0: _batch(step), 1: _batch(step)})
        for slot, signal in enumerate(packed):
            expected = alone[signal].learn(_batch(step))
            np.testing.assert_array_equal(results[slot].td_abs, expected.td_abs)
            assert results[slot].metrics == expected.metrics
