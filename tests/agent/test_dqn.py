"""The DQN update against hand computation: targets, n-step discounts, IS weights, target net."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from per_dqn.agent import DQNAgent, QNetwork, objectives, td_targets
from per_dqn.memory import Batch


def make_agent(**overrides) -> DQNAgent:
    torch.manual_seed(0)
    kwargs = dict(
        obs_shape=(3,), num_actions=2, hidden_sizes=(8,), dueling=True, double=True, gamma=0.9,
        learning_rate=1e-3, adam_eps=1e-8, loss="huber", grad_clip_norm=None,
        target_update_interval=1000, tau=1.0, device=torch.device("cpu"),
    )  # fmt: skip
    kwargs.update(overrides)
    return DQNAgent(**kwargs)


def make_batch(rewards, terminated, n_steps, weights=None, seed=0) -> Batch:
    size = len(rewards)
    rng = np.random.default_rng(seed)
    return Batch(
        obs=rng.normal(size=(size, 3)).astype(np.float32),
        actions=rng.integers(0, 2, size).astype(np.int64),
        rewards=np.asarray(rewards, dtype=np.float32),
        next_obs=rng.normal(size=(size, 3)).astype(np.float32),
        terminated=np.asarray(terminated, dtype=np.bool_),
        indices=np.arange(size, dtype=np.int64),
        weights=np.ones(size, np.float32) if weights is None else np.asarray(weights, np.float32),
        n_steps=np.asarray(n_steps, dtype=np.uint8),
    )


def test_double_dqn_target_by_hand():
    """Online picks the action, target evaluates it; vanilla takes the target's max.

    next_q_target = [[1, 5], [3, 2]], next_q_online = [[4, 0], [1, 2]]:
      double:  a* = [0, 1] -> values [1, 2] -> y = [1 + .9 * 1, 2 + 0 * 2] = [1.9, 2.0]
      vanilla: max        -> values [5, 3] -> y = [1 + .9 * 5, 2 + 0 * 3] = [5.5, 2.0]
    """
    rewards, discounts = torch.tensor([1.0, 2.0]), torch.tensor([0.9, 0.0])
    q_target = torch.tensor([[1.0, 5.0], [3.0, 2.0]])
    q_online = torch.tensor([[4.0, 0.0], [1.0, 2.0]])
    torch.testing.assert_close(
        td_targets(rewards, discounts, q_target, q_online), torch.tensor([1.9, 2.0])
    )
    torch.testing.assert_close(td_targets(rewards, discounts, q_target), torch.tensor([5.5, 2.0]))


@pytest.mark.parametrize("double", [True, False])
def test_learn_returns_td_errors_of_the_n_step_target(double):
    """|y - Q(s, a)| with y = R + gamma**n * (1 - terminated) * Q_target(s', a*), computed
    independently from copies of the nets taken before the step.

    Rows: a 1-step window; a 3-step window cut by truncation (bootstraps with 0.9**3); a 2-step
    window ending in termination (no bootstrap).
    """
    agent = make_agent(double=double)
    # A target net that differs from the online one, so that double and vanilla targets differ.
    with torch.no_grad():
        for p in agent.target.parameters():
            p.add_(0.3 * torch.randn_like(p))
    batch = make_batch(rewards=[1.0, 2.5, -1.0], terminated=[False, False, True], n_steps=[1, 3, 2])
    online, target = copy.deepcopy(agent.online), copy.deepcopy(agent.target)

    result = agent.learn(batch)

    with torch.no_grad():
        obs, next_obs = torch.from_numpy(batch.obs), torch.from_numpy(batch.next_obs)
        q_next_target = target(next_obs)
        if double:
            chosen = online(next_obs).argmax(1)
        else:
            chosen = q_next_target.argmax(1)
        bootstrap = q_next_target[torch.arange(3), chosen].numpy()
        q_sa = online(obs)[torch.arange(3), torch.from_numpy(batch.actions)].numpy()
    discounts = np.array([0.9, 0.9**3, 0.0])
    expected = np.abs(batch.rewards + discounts * bootstrap - q_sa)
    np.testing.assert_allclose(result.td_abs, expected, rtol=1e-5, atol=1e-6)
    assert result.metrics["td_error_abs"] == pytest.approx(expected.mean(), rel=1e-5)
    assert result.metrics["q_mean"] == pytest.approx(q_sa.mean(), rel=1e-5)


def zeroed(agent: DQNAgent) -> DQNAgent:
    """All parameters 0, so Q = 0 everywhere and a terminal target equals its reward."""
    with torch.no_grad():
        for p in [*agent.online.parameters(), *agent.target.parameters()]:
            p.zero_()
    return agent


@pytest.mark.parametrize(
    ("loss", "per_sample"),
    [("huber", [2.5, 0.125]), ("mse", [9.0, 0.25])],
)
def test_is_weights_scale_the_loss(loss, per_sample):
    """Q = 0 and terminal targets 3 and 0.5: Huber gives 3 - .5 = 2.5 and .5 * .5**2 = .125,
    squared error 9 and .25; the loss is the weighted mean, mean(w_i * L_i)."""
    batch = make_batch(rewards=[3.0, 0.5], terminated=[True, True], n_steps=[1, 1])
    weights = np.array([0.2, 1.0], dtype=np.float32)
    plain = zeroed(make_agent(loss=loss)).learn(batch)
    weighted = zeroed(make_agent(loss=loss)).learn(batch._replace(weights=weights))
    assert plain.metrics["loss"] == pytest.approx(np.mean(per_sample))
    assert weighted.metrics["loss"] == pytest.approx(np.mean(weights * per_sample))
    np.testing.assert_allclose(plain.td_abs, [3.0, 0.5])


@pytest.mark.parametrize(
    ("loss", "per_sample"),
    [("huber", [2.5, 0.125]), ("mse", [9.0, 0.25])],
)
def test_is_weights_scale_a_user_network_s_loss(loss, per_sample):
    """As above, for a user's network (``agent.network: "module:factory"``), which learns
    through ``DQNAgent.learn``'s own steps rather than a pack's: its loss is the IS-weighted
    mean too. Pins the gap ``make mutants``' ``is-weights-ignored`` found on that path."""
    batch = make_batch(rewards=[3.0, 0.5], terminated=[True, True], n_steps=[1, 1])
    weights = np.array([0.2, 1.0], dtype=np.float32)
    agent = make_agent(loss=loss, network="support:zero_q_network")
    assert agent.pack is None
    weighted = agent.learn(batch._replace(weights=weights))
    assert weighted.metrics["loss"] == pytest.approx(np.mean(weights * per_sample))
    assert weighted.metrics["loss_unweighted"] == pytest.approx(np.mean(per_sample))


def test_unweighted_loss_is_the_plain_mean_of_the_per_sample_losses():
    """Q = 0 and terminal targets 3, 0.5 and -0.25: Huber per-sample losses 2.5, 0.125 and
    0.5 * 0.25**2 = 0.03125. With weights [0.2, 1, 0.5] the IS-weighted loss is
    (0.5 + 0.125 + 0.015625) / 3 and the unweighted one (2.5 + 0.125 + 0.03125) / 3; equal weights
    of 1 (uniform replay) make the two the same number."""
    batch = make_batch(rewards=[3.0, 0.5, -0.25], terminated=[True] * 3, n_steps=[1, 1, 1])
    weights = np.array([0.2, 1.0, 0.5], dtype=np.float32)
    weighted = zeroed(make_agent()).learn(batch._replace(weights=weights)).metrics
    assert weighted["loss"] == pytest.approx((0.5 + 0.125 + 0.015625) / 3, rel=1e-6)
    assert weighted["loss_unweighted"] == pytest.approx((2.5 + 0.125 + 0.03125) / 3, rel=1e-6)
    plain = zeroed(make_agent()).learn(batch).metrics
    assert plain["loss"] == plain["loss_unweighted"]


def test_zero_weight_sample_contributes_no_gradient():
    """The gradient of mean(w * L) with w = [1, 0] is half that of the first sample alone."""
    both = make_batch(rewards=[3.0, -7.0], terminated=[True, False], n_steps=[1, 1])
    first = Batch(*(None if field is None else np.asarray(field)[:1] for field in both))
    a, b = make_agent(), make_agent()
    a.learn(both._replace(weights=np.array([1.0, 0.0], dtype=np.float32)))
    b.learn(first)
    for pa, pb in zip(a.online.parameters(), b.online.parameters(), strict=True):
        torch.testing.assert_close(pa.grad, pb.grad / 2)


def test_dueling_identity():
    """mean_a Q(s, a) == V(s) and Q - mean Q == A - mean A, for any weights."""
    torch.manual_seed(1)
    net = QNetwork((5,), 4, (16, 16), dueling=True)
    obs = torch.randn(7, 5)
    with torch.no_grad():
        q = net(obs)
        features = net.features(obs)
        value = net.value(features)
        advantage = net.advantage(features)
    torch.testing.assert_close(q.mean(dim=1, keepdim=True), value)
    torch.testing.assert_close(
        q - q.mean(dim=1, keepdim=True), advantage - advantage.mean(dim=1, keepdim=True)
    )
    torch.testing.assert_close(net.greedy_actions(obs), q.argmax(dim=1))


def test_linear_head_without_dueling():
    net = QNetwork((5,), 4, (16,), dueling=False)
    assert net.value is None
    obs = torch.randn(3, 5)
    torch.testing.assert_close(net(obs), net.advantage(net.features(obs)))


def test_hard_target_update_every_interval():
    agent = make_agent(target_update_interval=2)
    batch = make_batch(rewards=[1.0, 0.0], terminated=[False, True], n_steps=[1, 1])
    before = [p.clone() for p in agent.target.parameters()]
    agent.learn(batch)
    for p, old in zip(agent.target.parameters(), before, strict=True):
        torch.testing.assert_close(p, old)  # not yet
    agent.learn(batch)
    for p, q in zip(agent.target.parameters(), agent.online.parameters(), strict=True):
        torch.testing.assert_close(p, q)


def test_soft_target_update():
    """tau = 0.25: target <- 0.25 * online + 0.75 * target."""
    agent = make_agent(target_update_interval=1, tau=0.25)
    with torch.no_grad():
        for p in agent.target.parameters():
            p.fill_(1.0)
    agent.learn(make_batch(rewards=[1.0], terminated=[False], n_steps=[1]))
    for p, q in zip(agent.target.parameters(), agent.online.parameters(), strict=True):
        torch.testing.assert_close(p, 0.25 * q + 0.75)


def test_grad_norm_reported_only_when_clipping():
    batch = make_batch(rewards=[100.0], terminated=[True], n_steps=[1])
    assert "grad_norm" not in make_agent().learn(batch).metrics
    clipped = make_agent(grad_clip_norm=0.5)
    metrics = clipped.learn(batch).metrics
    assert metrics["grad_norm"] > 0.5
    norm = torch.linalg.vector_norm(
        torch.cat([p.grad.flatten() for p in clipped.online.parameters()])
    )
    assert float(norm) == pytest.approx(0.5, rel=1e-4)


def test_greedy_actions_are_the_argmax():
    agent = make_agent(dueling=False)
    obs = np.random.default_rng(0).normal(size=(6, 3)).astype(np.float32)
    with torch.no_grad():
        expected = agent.online(torch.from_numpy(obs)).argmax(1).numpy()
    np.testing.assert_array_equal(agent.greedy_actions(obs), expected)


# Q = 0 and terminal targets 3, 0.5, 0.2 and 0: |delta| = 3, 0.5, 0.2, 0. Each objective's loss by
# hand (LaBER: surrogates 1, 0.5, 0.2, 0, running sums 1, 1.5, 1.7, 1.7; picks 0.1 and 0.9 ->
# masses 0.17 and 1.53 -> positions 0 and 2, weights 0.425 / 1 and 0.425 / 0.2).
OBJECTIVE_LOSSES = {
    "lap": ((3.0 + 0.125 + 0.02 + 0.0) / 4, [0, 1, 2, 3]),
    "pal": ((3.0**1.4 / 1.4 + 0.125 + 0.02) / 4 / ((3.0**0.4 + 3) / 4), [0, 1, 2, 3]),
    "laber": ((0.425 * 2.5 + 2.125 * 0.02) / 2, [0, 2]),
}


@pytest.mark.parametrize("name", sorted(OBJECTIVE_LOSSES))
@pytest.mark.parametrize("network", ["auto", "support:zero_q_network"])
def test_each_objective_by_hand_on_a_built_in_and_a_user_s_network(name, network):
    """The same loss and the same slots by hand through a pack (the built-in network) and through
    ``DQNAgent.learn``'s own steps (a user's network, which computes alone)."""
    spec = objectives.ObjectiveSpec(name, alpha=0.4, min_priority=1.0)
    agent = make_agent(network=network, objective=spec)
    if network == "auto":
        zeroed(agent)
    assert (agent.pack is None) == (network != "auto")
    batch = make_batch(rewards=[3.0, 0.5, 0.2, 0.0], terminated=[True] * 4, n_steps=[1] * 4)
    if name == "laber":
        batch = batch._replace(picks=np.array([0.1, 0.9]))
    result = agent.learn(batch)
    loss, slots = OBJECTIVE_LOSSES[name]
    assert result.metrics["loss"] == pytest.approx(loss, rel=1e-5)
    np.testing.assert_array_equal(result.priorities.indices, slots)
    np.testing.assert_allclose(result.td_abs, np.array([3.0, 0.5, 0.2, 0.0])[slots], atol=1e-7)


@pytest.mark.parametrize("network", ["auto", "support:zero_q_network"])
def test_the_reducible_loss_signal_on_a_built_in_and_a_user_s_network(network):
    """Q = 0 for both nets: the online and the target losses are equal, so every priority is 0,
    and the irreducible loss is the plain Huber mean, (2.5 + 0.125 + 0.02 + 0) / 4."""
    agent = make_agent(network=network, priority_signal="reducible_loss")
    if network == "auto":
        zeroed(agent)
    batch = make_batch(rewards=[3.0, 0.5, 0.2, 0.0], terminated=[True] * 4, n_steps=[1] * 4)
    result = agent.learn(batch)
    assert result.td_abs.tolist() == [0.0] * 4
    assert result.metrics["irreducible_loss"] == pytest.approx(2.645 / 4, rel=1e-6)
    assert result.metrics["reducible_clipped_share"] == 1.0


def linear_agent(double: bool) -> DQNAgent:
    """A head on the observation alone, Q(s) = W s, with W = [[1, 0], [0, 2]] in both nets."""
    agent = make_agent(obs_shape=(2,), hidden_sizes=(), dueling=False, double=double)
    with torch.no_grad():
        for net in (agent.online, agent.target):
            net.advantage.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 2.0]]))
            net.advantage.bias.zero_()
    return agent


@pytest.mark.parametrize("double", [True, False])
def test_an_actor_s_initial_priorities_are_its_td_errors_by_hand(double):
    """Issue 47: an Ape-X actor sends each transition with |delta| under its own weights at
    sending time (``DQNAgent.td_errors``), learning nothing. By hand, Q(s) = [s0, 2 s1],
    gamma 0.9:
      row 0: s = (1, 1), a = 1, r = 0.5, s' = (2, 0.5), 1 step: Q(s', .) = [2, 1], a* = 0 both
             ways, y = 0.5 + 0.9 * 2 = 2.3, Q(s, 1) = 2: |delta| = 0.3;
      row 1: s = (3, 0), a = 0, r = 1, s' = (0, 1), 3 steps: Q(s', .) = [0, 2], y = 1 + 0.729 * 2
             = 2.458, Q(s, 0) = 3: |delta| = 0.542;
      row 2: as row 1 but s' terminal: y = 1, |delta| = 2.
    The online and target nets agree, so double and vanilla targets are the same here."""
    agent = linear_agent(double)
    batch = Batch(
        obs=np.array([[1, 1], [3, 0], [3, 0]], dtype=np.float32),
        actions=np.array([1, 0, 0], dtype=np.int64),
        rewards=np.array([0.5, 1.0, 1.0], dtype=np.float32),
        next_obs=np.array([[2, 0.5], [0, 1], [0, 1]], dtype=np.float32),
        terminated=np.array([False, False, True]),
        indices=np.arange(3, dtype=np.int64),
        weights=np.ones(3, np.float32),
        n_steps=np.array([1, 3, 3], dtype=np.uint8),
    )
    before = copy.deepcopy(agent.state_dict())
    td = agent.td_errors(batch)
    assert td.dtype == np.float64 and td.shape == (3,)
    np.testing.assert_allclose(td, [0.3, 0.542, 2.0], rtol=1e-6)
    after = agent.state_dict()
    for part in ("online", "target"):
        for key in before[part]:
            assert torch.equal(before[part][key], after[part][key])
    assert after["update_steps"] == before["update_steps"] == 0


@pytest.mark.parametrize("double", [True, False])
def test_td_errors_are_what_the_next_learn_step_reports(double):
    """The reference: ``learn``'s own ``td_abs`` (the errors it computes before its step, the
    |delta| signal) from a copy of the agent, on the n-step rows of the test above it."""
    agent = make_agent(double=double)
    with torch.no_grad():
        for p in agent.target.parameters():
            p.add_(0.3 * torch.randn_like(p))
    batch = make_batch(rewards=[1.0, 2.5, -1.0], terminated=[False, False, True], n_steps=[1, 3, 2])
    twin = copy.deepcopy(agent)
    np.testing.assert_allclose(agent.td_errors(batch), twin.learn(batch).td_abs, rtol=1e-6)
