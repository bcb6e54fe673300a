"""Reducible-loss prioritization (ReLo; shivakanthsujit/reducible-loss
``MinAtar/examples/relo_dqn.py``): the signal by hand, the learner's priorities against the
source's formula on a tiny network, and a ReLo member of a pack against itself alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from agent_helpers import random_batch, tiny_agent
from torch.nn import functional as F

from per_dqn.agent import DQNAgent
from per_dqn.agent.pack import Pack
from per_dqn.agent.signals import PRIORITY_SIGNALS, SignalInputs
from per_dqn.memory import REPLAY_KINDS, Batch

RELO = PRIORITY_SIGNALS["reducible_loss"]


def test_relo_is_the_online_loss_minus_the_target_s_clipped_at_zero_by_hand():
    """Huber (delta 1): online |delta| 0.5 -> 0.125, 2 -> 1.5, 0.2 -> 0.02, 3 -> 2.5; target
    |delta| 0.1 -> 0.005, 1 -> 0.5, 0.4 -> 0.08, 3 -> 2.5: ReLo 0.12, 1.0, -0.06 (clipped to 0)
    and 0 (equal losses)."""
    online = np.array([0.5, 2.0, 0.2, 3.0], dtype=np.float32)
    target = np.array([0.1, 1.0, 0.4, 3.0], dtype=np.float32)
    inputs = SignalInputs(online, "huber", target)
    np.testing.assert_allclose(RELO.compute(inputs), [0.12, 1.0, 0.0, 0.0], atol=1e-7)
    assert (RELO.compute(inputs) >= 0).all() and RELO.needs_target
    report = RELO.report(inputs)
    assert report["reducible_loss"] == pytest.approx((0.12 + 1.0 - 0.06 + 0.0) / 4, abs=1e-7)
    assert report["irreducible_loss"] == pytest.approx((0.005 + 0.5 + 0.08 + 2.5) / 4, abs=1e-7)
    assert report["reducible_clipped_share"] == 0.5  # -0.06 and the exact 0


def test_relo_under_a_squared_loss_by_hand():
    """MSE: 0.5^2 - 0.1^2 = 0.24 and 2^2 - 1^2 = 3."""
    inputs = SignalInputs(np.float32([0.5, 2.0]), "mse", np.float32([0.1, 1.0]))
    np.testing.assert_allclose(RELO.compute(inputs), [0.24, 3.0], rtol=1e-6)


def _agent(seed: int, signal: str = "reducible_loss", double: bool = False) -> DQNAgent:
    return tiny_agent(seed, dueling=False, double=double, gamma=0.9, learning_rate=1e-2,
                      target_update_interval=1000, priority_signal=signal)  # fmt: skip


def _batch(seed: int, size: int = 12) -> Batch:
    return random_batch(seed, size, first_index=7)


def test_the_learner_s_relo_is_the_source_s_formula_on_a_tiny_network():
    """relo_dqn.py's ``train``: y = r + gamma (1 - done) max_a' Q_tgt(s', a') (the DQN target),
    ReLo = Huber(y - Q(s, a)) - Huber(y - Q_tgt(s, a)), both before the step, clipped at 0. The
    target net is made to differ from the online net first (a few steps, no sync)."""
    agent = _agent(0)
    for step in range(3):
        agent.learn(_batch(100 + step))
    batch = _batch(5)
    with torch.no_grad():
        obs, nxt = torch.from_numpy(batch.obs), torch.from_numpy(batch.next_obs)
        actions = torch.from_numpy(batch.actions).unsqueeze(1)
        y = (
            torch.from_numpy(batch.rewards)
            + 0.9
            * torch.from_numpy((~batch.terminated).astype(np.float32))
            * agent.target(nxt).max(dim=1).values
        )
        online = F.smooth_l1_loss(agent.online(obs).gather(1, actions).squeeze(1), y,
                                  reduction="none")  # fmt: skip
        target = F.smooth_l1_loss(agent.target(obs).gather(1, actions).squeeze(1), y,
                                  reduction="none")  # fmt: skip
    expected = torch.clamp(online - target, min=0).numpy()
    result = agent.learn(batch)
    np.testing.assert_allclose(result.priorities.td_abs, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(result.priorities.indices, batch.indices)
    assert 0 < (expected > 0).sum() < len(expected)  # both sides of the clip are exercised
    assert result.metrics["reducible_loss"] == pytest.approx(float((online - target).mean()),
                                                             rel=1e-5, abs=1e-6)  # fmt: skip
    assert result.metrics["irreducible_loss"] == pytest.approx(float(target.mean()), rel=1e-5)


def test_relo_right_after_a_target_sync_is_zero():
    """With the target a copy of the online net, both losses are equal: every priority is 0 (the
    source's priority is then eps ** alpha for the whole batch, once per sync)."""
    agent = _agent(1)
    result = agent.learn(_batch(2))
    assert result.priorities.td_abs.tolist() == [0.0] * 12
    assert result.metrics["reducible_clipped_share"] == 1.0


def test_a_relo_member_of_a_pack_is_what_it_is_alone():
    """A pack of a ReLo agent between two |delta| agents (the target pass on s runs for the ReLo
    member only): every member's priorities and metrics are bit for bit its own alone."""
    signals = ("td_error", "reducible_loss", "td_error")
    alone = [_agent(3 + i, s, double=True) for i, s in enumerate(signals)]
    packed = [_agent(3 + i, s, double=True) for i, s in enumerate(signals)]
    pack = Pack(packed)
    for step in range(6):
        results = pack.learn({k: _batch(10 * k + step) for k in range(3)})
        for k, agent in enumerate(alone):
            expected = agent.learn(_batch(10 * k + step))
            np.testing.assert_array_equal(results[k].td_abs, expected.td_abs)
            assert results[k].metrics == expected.metrics
    assert "reducible_loss" in results[1].metrics and "reducible_loss" not in results[0].metrics


def test_the_relo_kind_is_proportional_replay_fed_the_reducible_loss():
    """The registry's ``relo``: proportional PER's settings and sampler, the reducible-loss
    signal, the weighted objective (IS weights, as the source's loss)."""
    relo, proportional = REPLAY_KINDS["relo"], REPLAY_KINDS["proportional"]
    assert relo.settings == proportional.settings
    assert issubclass(relo.sampler, proportional.sampler)
    assert (relo.signal, relo.objective) == ("reducible_loss", "weighted")
