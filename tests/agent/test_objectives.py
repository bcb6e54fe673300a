"""The learner's objectives (``per_dqn/agent/objectives.py``), each by hand against its source's
formula: LAP's and PAL's losses (sfujim/LAP-PAL ``discrete/LAP_DDQN.py``, ``PAL_DDQN.py``),
LaBER-mean's picks and weights (SuReLI/laber ``MinAtar_experiments/agents/dqn_LABER.py``), the
registry, and an agent of each objective packed against itself alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from agent_helpers import random_batch, tiny_agent
from hypothesis import given, settings
from hypothesis import strategies as st

from per_dqn.agent import DQNAgent
from per_dqn.agent.fused_losses import rowwise_pow
from per_dqn.agent.objectives import (
    OBJECTIVE_NAMES,
    OBJECTIVES,
    ObjectiveSpec,
    laber_pick,
    objective,
    spec_from,
)
from per_dqn.agent.pack import Pack
from per_dqn.memory import REPLAY_KINDS, Batch

Q = torch.tensor([1.0, 2.0, 0.0, -1.0])
Y = torch.tensor([1.5, 0.0, 0.005, 2.0])  # |delta| = 0.5, 2, 0.005, 3
W = torch.tensor([1.0, 0.5, 0.25, 0.125])


def lap_losses(td_abs: torch.Tensor, kappa: float) -> torch.Tensor:
    """The reference: LAP's ``H_k(d)`` as sfujim/LAP-PAL ``discrete/LAP_DDQN.py`` writes it,
    ``torch.where(x < min_priority, 0.5 * x.pow(2), min_priority * x)``, differentiated by
    autograd (the fused node, ``fused_losses.LAPLoss``, writes its gradient out)."""
    return torch.where(td_abs < kappa, 0.5 * td_abs * td_abs, kappa * td_abs)


def pal_reference(q, targets, kappa: float, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference: PAL's per-sample loss over lambda, and lambda, as ``discrete/PAL_DDQN.py``
    computes them, differentiated by autograd (lambda detached, as there)."""
    td_abs = (q - targets).abs()
    floored = rowwise_pow(td_abs.clamp(min=kappa), alpha)
    inside = kappa**alpha * 0.5 * td_abs * td_abs
    outside = kappa * td_abs * floored / (1.0 + alpha)
    lam = floored.detach().mean(dim=-1)
    return torch.where(td_abs < kappa, inside, outside) / lam.unsqueeze(-1), lam


def test_every_kind_names_a_registered_objective_and_the_registry_is_whole():
    assert OBJECTIVE_NAMES == tuple(OBJECTIVES)
    assert {kind.objective for kind in REPLAY_KINDS.values()} <= set(OBJECTIVES)
    assert all(name == entry.name and entry.summary for name, entry in OBJECTIVES.items())
    with pytest.raises(ValueError, match=r"`objective` must be one of .* got 'lapp'"):
        objective("lapp")


def test_weighted_is_the_is_weighted_huber_mean_by_hand():
    """Huber (delta 1) of 0.5, 2, 0.005, 3: 0.125, 1.5, 1.25e-5, 2.5; weighted mean
    (0.125 + 0.75 + 3.125e-6 + 0.3125) / 4."""
    out = ObjectiveSpec()(Q, Y, W)
    np.testing.assert_allclose(out.per_sample, [0.125, 1.5, 1.25e-5, 2.5], rtol=1e-5)
    assert float(out.loss) == pytest.approx((0.125 + 0.75 + 3.125e-6 + 0.3125) / 4, rel=1e-6)
    assert out.metrics == {} and OBJECTIVES["weighted"].pick is None


@pytest.mark.parametrize(
    ("kappa", "expected"),
    [
        # k = 1 (the paper): 0.5 d^2 below 1, d from 1 on: 0.125, 2, 1.25e-5, 3.
        (1.0, [0.125, 2.0, 1.25e-5, 3.0]),
        # k = 0.01 (the source's Atari): 0.01 d from 0.01 on: 0.005, 0.02, 1.25e-5, 0.03.
        (0.01, [0.005, 0.02, 1.25e-5, 0.03]),
    ],
)
def test_lap_s_loss_by_hand_and_it_ignores_the_is_weights(kappa, expected):
    spec = ObjectiveSpec("lap", min_priority=kappa)
    out = spec(Q, Y, W)
    np.testing.assert_allclose(out.per_sample, expected, rtol=1e-5)
    assert float(out.loss) == pytest.approx(np.mean(expected), rel=1e-5)
    assert float(spec(Q, Y, torch.ones(4)).loss) == float(out.loss)  # weights not read


def test_lap_s_gradient_is_delta_inside_and_kappa_sign_outside():
    """The source's Huber without its constant: d/dQ of H_k(|Q - y|) is (Q - y) below k and
    k sign(Q - y) from k on."""
    q = Q.clone().requires_grad_(True)
    ObjectiveSpec("lap")(q, Y, W).per_sample.sum().backward()
    np.testing.assert_allclose(q.grad, [-0.5, 1.0, -0.005, -1.0], rtol=1e-6)


def test_pal_s_loss_by_hand():
    """alpha 0.4, k 1: per sample 0.5 d^2 below 1 and d^1.4 / 1.4 from 1 on; lambda is the mean
    of max(d, 1)^0.4 = (1 + 2^0.4 + 1 + 3^0.4) / 4; the loss their mean over lambda."""
    spec = ObjectiveSpec("pal", alpha=0.4, min_priority=1.0)
    out = spec(Q, Y, W)
    lam = (1 + 2**0.4 + 1 + 3**0.4) / 4
    raw = np.array([0.125, 2**1.4 / 1.4, 1.25e-5, 3**1.4 / 1.4])
    np.testing.assert_allclose(out.per_sample, raw / lam, rtol=1e-5)
    assert float(out.loss) == pytest.approx(raw.mean() / lam, rel=1e-5)
    assert float(out.metrics["pal_lambda"]) == pytest.approx(lam, rel=1e-6)


def test_pal_s_loss_at_exactly_k_is_the_outer_branch_as_in_the_source():
    """sfujim/LAP-PAL's PAL takes ``x.abs() < min_priority`` for its inner branch, and its two
    branches do not meet at k (0.5 k^2 k^alpha inside, k^(2 + alpha) / (1 + alpha) outside):
    at |delta| == k exactly the sample is on the outer one (a mutation run found ``<=``
    unseen). alpha 0.4, k 1, |delta| 1 and 0.5: lambda 1, per sample 1 / 1.4 and 0.125."""
    spec = ObjectiveSpec("pal", alpha=0.4, min_priority=1.0)
    out = spec(torch.tensor([2.0, 1.5]), torch.tensor([1.0, 1.0]), torch.ones(2))
    np.testing.assert_allclose(out.per_sample, [1 / 1.4, 0.125], rtol=1e-6)
    assert float(out.metrics["pal_lambda"]) == 1.0


def test_pal_s_expected_gradient_under_uniform_sampling_is_lap_s_under_its_sampling():
    """The paper's equivalence, on a whole 'memory' of 4 samples: the gradient of PAL's loss over
    all of them (uniform sampling's expectation) equals the expectation of LAP's gradient under
    P(i) = max(d_i, 1)^alpha / sum_j max(d_j, 1)^alpha, with LAP's lambda-free loss."""
    alpha = 0.6
    q_pal = Q.clone().requires_grad_(True)
    ObjectiveSpec("pal", alpha=alpha)(q_pal, Y, W).loss.backward()
    d = (Q - Y).abs()
    p = d.clamp(min=1.0).pow(alpha)
    q_lap = Q.clone().requires_grad_(True)
    per_sample = lap_losses((q_lap - Y).abs(), 1.0)
    (per_sample * p / p.sum()).sum().backward()  # E_P[the gradient of one sample's LAP loss]
    np.testing.assert_allclose(q_pal.grad, q_lap.grad, rtol=1e-5)
    assert q_pal.grad.abs().min() > 0  # every sample moves


def test_laber_picks_by_inverse_cdf_by_hand():
    """Surrogates 0.5, 1 (clipped from 2), 0.005, 1 (from 3): running sums 0.5, 1.5, 1.505,
    2.505. u * 2.505 picks the first position whose running sum exceeds it."""
    surrogate = torch.tensor([0.5, 1.0, 0.005, 1.0])
    picks = torch.tensor([0.0, 0.19, 0.2, 0.5, 0.5999, 0.6, 0.9999])
    # 0 -> 0; 0.476 -> 0; 0.501 -> 1; 1.2525 -> 1; 1.5027 -> 2; 1.503 -> 2; 2.5047 -> 3
    assert laber_pick(surrogate, picks).tolist() == [0, 0, 1, 1, 2, 2, 3]


def test_laber_never_picks_a_zero_surrogate_and_an_all_zero_row_uniformly():
    surrogate = torch.tensor([[0.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    picks = torch.tensor([[0.0, 0.5, 0.999999], [0.0, 0.3, 0.99]])
    assert laber_pick(surrogate, picks).tolist() == [[1, 1, 1], [0, 1, 3]]
    # u * total rounding up to the total falls back on the last position with mass
    assert laber_pick(torch.tensor([1.0, 3.0, 0.0]), torch.tensor([1.0])).tolist() == [1]


def test_laber_mean_s_picks_weights_and_loss_by_hand():
    """m B = 4, B = 3, picks as above: positions 1, 3, 0; surrogate mean 2.505 / 4; weights
    mean / p: 0.62625 / 1, 0.62625 / 1, 0.62625 / 0.5; the loss is the agent's Huber of the
    picked |delta| 2, 3, 0.5 under those weights."""
    spec = ObjectiveSpec("laber")
    picked = spec.pick(Q, Y, torch.tensor([0.3, 0.9, 0.1]))
    assert picked.chosen.tolist() == [1, 3, 0]
    mean = 2.505 / 4
    np.testing.assert_allclose(picked.weights, [mean, mean, mean / 0.5], rtol=1e-6)
    assert float(picked.metrics["picked_weight_mean"]) == pytest.approx(4 * mean / 3, rel=1e-6)
    assert float(picked.metrics["large_batch_td_mean"]) == pytest.approx(5.505 / 4, rel=1e-6)
    assert float(picked.metrics["large_batch_td_std"]) == pytest.approx(
        np.std([0.5, 2, 0.005, 3], ddof=1), rel=1e-5
    )
    out = spec(Q[picked.chosen], Y[picked.chosen], picked.weights)
    expected = (mean / 1 * 1.5 + mean / 1 * 2.5 + mean / 0.5 * 0.125) / 3
    assert float(out.loss) == pytest.approx(expected, rel=1e-5)
    np.testing.assert_allclose(out.per_sample, [1.5, 2.5, 0.125], rtol=1e-6)


def test_laber_s_surrogate_under_a_squared_loss_is_delta_unclipped():
    """Under MSE the per-sample gradient is not clipped, so neither is the surrogate (the
    authors' SAC version): |delta| 0.5, 2, 0.005, 3, total 5.505."""
    picked = ObjectiveSpec("laber", loss="mse").pick(Q, Y, torch.tensor([0.1, 0.2]))
    # 0.5505 -> 1 (0.5 < 0.5505 < 2.5); 1.101 -> 1
    assert picked.chosen.tolist() == [1, 1]
    np.testing.assert_allclose(picked.weights, [5.505 / 4 / 2] * 2, rtol=1e-6)


def test_only_laber_picks():
    with pytest.raises(ValueError, match="objective 'lap' picks no samples"):
        ObjectiveSpec("lap").pick(Q, Y, torch.tensor([0.5]))


def test_an_objective_spec_checks_its_values():
    """k must be finite and above 0, alpha finite and 0 or more (0 is uniform: PAL's loss with
    every priority at its floor). Issue 44's mutation run: an infinite k or alpha let through,
    alpha 0 refused, and alpha's message emptied survived."""
    with pytest.raises(ValueError, match=r"^`min_priority` must be > 0, got 0$"):
        ObjectiveSpec("lap", min_priority=0)
    with pytest.raises(ValueError, match=r"^`min_priority` must be > 0, got inf$"):
        ObjectiveSpec("lap", min_priority=float("inf"))
    with pytest.raises(ValueError, match=r"^`alpha` must be >= 0, got -0\.1$"):
        ObjectiveSpec("pal", alpha=-0.1)
    with pytest.raises(ValueError, match=r"^`alpha` must be >= 0, got inf$"):
        ObjectiveSpec("pal", alpha=float("inf"))
    assert ObjectiveSpec("pal", alpha=0.0).alpha == 0.0
    with pytest.raises(ValueError, match="`loss` must be 'huber' or 'mse', got 'l1'"):
        ObjectiveSpec(loss="l1")


def test_spec_from_takes_the_settings_its_objective_reads_and_no_other():
    """Issue 44's mutation run: a spec built with its defaults in place of the settings given
    survived."""
    settings = {"alpha": 0.3, "min_priority": 2.0, "large_batch": 4}
    assert spec_from("pal", "mse", settings) == ObjectiveSpec("pal", "mse", 2.0, 0.3)
    assert spec_from("lap", "huber", settings) == ObjectiveSpec("lap", "huber", 2.0)
    assert spec_from("weighted", "huber", settings) == ObjectiveSpec()


def _agent(seed: int, spec: ObjectiveSpec) -> DQNAgent:
    return tiny_agent(seed, gamma=0.9, learning_rate=1e-2, loss=spec.loss, grad_clip_norm=1.0,
                      target_update_interval=4, objective=spec)  # fmt: skip


def _batch(seed: int, rows: int = 12, picks: int | None = None) -> Batch:
    return random_batch(seed, rows, first_index=50, picks=picks)


SPECS = {
    "lap": ObjectiveSpec("lap", min_priority=0.5),
    "pal": ObjectiveSpec("pal", alpha=0.4, min_priority=0.5),
    "laber": ObjectiveSpec("laber"),
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_pack_of_one_objective_gives_each_member_what_it_learns_alone(name):
    """Three agents of one objective in a pack: every member's priorities (slots included),
    metrics and weights are bit for bit its own alone."""
    spec = SPECS[name]
    picks = 4 if spec.entry.subsamples else None
    alone = [_agent(k, spec) for k in range(3)]
    pack = Pack([_agent(k, spec) for k in range(3)])
    for step in range(6):
        results = pack.learn({k: _batch(10 * k + step, 12, picks) for k in range(3)})
        for k, agent in enumerate(alone):
            expected = agent.learn(_batch(10 * k + step, 12, picks))
            np.testing.assert_array_equal(
                results[k].priorities.indices, expected.priorities.indices
            )
            np.testing.assert_array_equal(results[k].td_abs, expected.td_abs)
            assert results[k].metrics == expected.metrics
    for k, agent in enumerate(alone):
        for a, b in zip(agent.online.parameters(), pack.agents[k].online.parameters(), strict=True):
            assert torch.equal(a, b)


def test_laber_learns_from_the_picked_samples_by_hand():
    """LaBER learns from B = 4 of the 12, as the source: the large batch's |delta| without
    gradients, the picks by hand from it (inverse CDF of min(|delta|, 1)), then the update
    names those 4 slots with their |delta|, and its loss is the weighted Huber of those."""
    agent = _agent(0, SPECS["laber"])
    batch = _batch(1, 12, 4)
    with torch.no_grad():
        obs, nxt = torch.from_numpy(batch.obs), torch.from_numpy(batch.next_obs)
        actions = torch.from_numpy(batch.actions).unsqueeze(1)
        best = agent.online(nxt).argmax(dim=1, keepdim=True)  # Double DQN
        y = torch.from_numpy(batch.rewards) + 0.9 * torch.from_numpy(
            (~batch.terminated).astype(np.float32)
        ) * agent.target(nxt).gather(1, best).squeeze(1)
        td = (agent.online(obs).gather(1, actions).squeeze(1) - y).abs().numpy()
    p = np.minimum(td, 1.0)
    cdf = np.cumsum(p)
    chosen = np.searchsorted(cdf, batch.picks * cdf[-1], side="right")
    weights = p.mean() / p[chosen]
    result = agent.learn(batch)
    np.testing.assert_array_equal(result.priorities.indices, batch.indices[chosen])
    np.testing.assert_allclose(result.td_abs, td[chosen], rtol=1e-5, atol=1e-6)
    huber = np.where(td[chosen] < 1, 0.5 * td[chosen] ** 2, td[chosen] - 0.5)
    assert result.metrics["loss"] == pytest.approx(float((weights * huber).mean()), rel=1e-5)
    assert result.metrics["large_batch_td_mean"] == pytest.approx(float(td.mean()), rel=1e-5)
    assert result.metrics["picked_weight_mean"] == pytest.approx(float(weights.mean()), rel=1e-5)
    assert result.metrics["td_error_abs"] == pytest.approx(float(result.td_abs.mean()))


def test_agents_of_different_objectives_cannot_share_a_pack():
    with pytest.raises(ValueError, match="cannot share a pack"):
        Pack([_agent(0, SPECS["lap"]), _agent(1, ObjectiveSpec())])


def test_laber_weights_a_batch_whose_surrogates_sum_to_1_by_them_and_rows_apart():
    """Issue 44's mutation run: the all-zero fallback tested `sum == 1` and `sum(dim=None)`
    and survived. Surrogates 0.25 and 0.75 sum to 1: picks 0.1, 0.3, 0.9 fall at 0, 1, 1 and
    weigh mean 0.5 over 0.25, 0.75, 0.75. In a pack's two rows, an all-zero row is drawn and
    weighted uniformly while the other keeps its proportions."""
    q, y = torch.tensor([0.25, 0.75]), torch.zeros(2)
    picked = ObjectiveSpec("laber").pick(q, y, torch.tensor([0.1, 0.3, 0.9]))
    assert picked.chosen.tolist() == [0, 1, 1]
    np.testing.assert_allclose(picked.weights, [2.0, 2 / 3, 2 / 3], rtol=1e-6)
    rows = ObjectiveSpec("laber").pick(
        torch.tensor([[0.0, 0.0], [0.25, 0.75]]), torch.zeros(2, 2),
        torch.tensor([[0.1, 0.9, 0.3], [0.1, 0.3, 0.9]]),
    )  # fmt: skip
    assert rows.chosen.tolist() == [[0, 1, 0], [0, 1, 1]]
    np.testing.assert_allclose(rows.weights, [[1.0, 1.0, 1.0], [2.0, 2 / 3, 2 / 3]], rtol=1e-6)


def test_lap_s_loss_at_exactly_kappa_is_the_linear_branch():
    """LAP's H_k(d) switches at d = k to k d (the source's `torch.where(x < min_priority,
    0.5 x^2, min_priority x)`), a jump from 0.5 k^2: at d = k = 1 the loss is 1, not 0.5
    (issue 44's mutation run: `<` -> `<=` survived)."""
    losses = ObjectiveSpec("lap")(torch.tensor([0.5, 1.0, 2.0]), torch.zeros(3), torch.ones(3))
    np.testing.assert_allclose(losses.per_sample, [0.125, 1.0, 2.0])


def test_laber_s_rounding_fallback_is_the_last_position_with_mass_below_1_too():
    """u * total rounding up to the total falls back on the last position whose surrogate is
    above 0, also where every surrogate is below 1 (issue 44's mutation run: `> 0` -> `> 1`
    there survived, the test above having a surrogate of 3)."""
    assert laber_pick(torch.tensor([0.5, 0.25, 0.0]), torch.tensor([1.0])).tolist() == [1]


@pytest.mark.parametrize("shape", [(64, 37), (64, 1), (1, 37), (37,), (2, 3, 37), (1, 64, 1)])
def test_rowwise_pow_gives_each_row_the_bits_it_gets_alone(shape):
    """Pins ``rowwise_pow`` against each row's own ``pow``, the bits a pack's member gets alone:
    torch computes a power over a tensor's bulk with vector instructions and over its tail in
    scalar code, which differ in the last bit at 0.6 (checked here, so the test can fail), so
    rows taken one element at a time, or grouped along the wrong axis, give other bits (a
    mutation run found both unseen)."""
    torch.manual_seed(0)
    x = torch.rand(shape) * 5 + 0.01
    rows = x.reshape(-1, shape[-1])
    want = torch.stack([row.pow(0.6) for row in rows.unbind(0)]).reshape(shape)
    assert torch.equal(rowwise_pow(x, 0.6), want)
    if shape in {(64, 37), (64, 1), (1, 64, 1)}:
        assert not torch.equal(x.pow(0.6), want)


def _grid_or_any(data, size: int) -> torch.Tensor:
    """``size`` float32 values: on a grid of eighths (so that ``|q - y|`` hits ``k`` and 0
    exactly) or any float in [-50, 50] that is 0 or at least 2^-60 in size (so that no gradient
    term falls below float32's normal range, where halving is inexact: hypothesis found that
    ``d`` of 2^-126 gives autograd's halves another last bit)."""
    grid = st.integers(-400, 400).map(lambda k: k / 8)
    anything = st.floats(-50, 50, width=32).filter(lambda v: v == 0 or abs(v) >= 2**-60)
    values = data.draw(st.lists(st.one_of(grid, anything), min_size=size, max_size=size))
    return torch.tensor(values, dtype=torch.float32)


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    members=st.sampled_from([None, 1, 3]),
    batch=st.integers(1, 70),
    kappa=st.sampled_from([1.0, 0.5, 2.0, 0.01]),
)
def test_lap_s_fused_node_gives_autograd_s_bits(data, members, batch, kappa):
    """``LAPLoss`` writes out ``dH_k/dq = clamp(q - y, -k, k)``: its losses and its gradient
    must be autograd's over the source's formula bit for bit (the LAP runs made before it, the
    study's arm among them, are then what this per-dqn makes), for any batch size, alone or
    packed, ``|q - y|`` at exactly 0 and ``k`` included."""
    shape = (batch,) if members is None else (members, batch)
    q = _grid_or_any(data, int(np.prod(shape))).reshape(shape)
    y = _grid_or_any(data, int(np.prod(shape))).reshape(shape)
    fused, ref = q.clone().requires_grad_(True), q.clone().requires_grad_(True)
    out = ObjectiveSpec("lap", min_priority=kappa)(fused, y, torch.ones(shape))
    out.loss.sum().backward()
    want = lap_losses((ref - y).abs(), kappa)
    want.mean(dim=-1).sum().backward()
    assert torch.equal(out.per_sample, want)
    assert torch.equal(fused.grad, ref.grad)


@settings(max_examples=100, deadline=None)
@given(
    data=st.data(),
    members=st.sampled_from([None, 1, 3]),
    batch=st.integers(1, 70),
    kappa=st.sampled_from([1.0, 0.5, 0.01]),
    alpha=st.sampled_from([0.0, 0.4, 0.6, 1.0]),
)
def test_pal_s_fused_node_matches_autograd(data, members, batch, kappa, alpha):
    """``PALLoss`` writes out ``dL/dq = clamp(d, -k, k) max(|d|, k)^alpha / lambda``: lambda is
    the source formula's bits, and its losses and gradient the source's and autograd's to
    float32 rounding (both multiply in another order), for any batch size, alone or packed."""
    shape = (batch,) if members is None else (members, batch)
    q = _grid_or_any(data, int(np.prod(shape))).reshape(shape)
    y = _grid_or_any(data, int(np.prod(shape))).reshape(shape)
    fused, ref = q.clone().requires_grad_(True), q.clone().requires_grad_(True)
    out = ObjectiveSpec("pal", min_priority=kappa, alpha=alpha)(fused, y, torch.ones(shape))
    out.loss.sum().backward()
    want, lam = pal_reference(ref, y, kappa, alpha)
    want.mean(dim=-1).sum().backward()
    np.testing.assert_allclose(out.per_sample.detach(), want.detach(), rtol=2e-6, atol=1e-30)
    assert torch.equal(out.metrics["pal_lambda"], lam)
    assert not out.metrics["pal_lambda"].requires_grad
    np.testing.assert_allclose(fused.grad, ref.grad, rtol=2e-6, atol=1e-12)


@pytest.mark.parametrize("name", ["lap", "pal"])
@pytest.mark.parametrize("grads", ["q", "y", "both"])
def test_the_fused_nodes_give_the_targets_their_gradient_too(name, grads):
    """The fused losses differentiate in ``y`` as autograd does over the source's formula
    (``-dL/dq``), whichever of ``q`` and ``y`` asks for a gradient: the learner's targets never
    do, but a caller's may (issue 44's mutation run: the targets' gradient dropped, its sign
    flipped or given by the wrong input's flag survived)."""
    torch.manual_seed(0)
    q, y = torch.randn(3, 20) * 2, torch.randn(3, 20) * 2
    spec = ObjectiveSpec(name, min_priority=0.5, alpha=0.4)
    fused = [
        t.clone().requires_grad_(grads in (which, "both")) for t, which in ((q, "q"), (y, "y"))
    ]
    ref = [t.clone().requires_grad_(grads in (which, "both")) for t, which in ((q, "q"), (y, "y"))]
    spec(*fused, torch.ones(3, 20)).loss.sum().backward()
    if name == "lap":
        want = lap_losses((ref[0] - ref[1]).abs(), 0.5)
    else:
        want = pal_reference(ref[0], ref[1], 0.5, 0.4)[0]
    want.mean(dim=-1).sum().backward()
    for got, expected in zip(fused, ref, strict=True):
        if expected.grad is None:
            assert got.grad is None
        else:
            np.testing.assert_allclose(got.grad, expected.grad, rtol=2e-6, atol=1e-12)
            assert got.grad.abs().max() > 0
