"""``RMSprop`` (agent/rmsprop.py) against ``torch.optim.RMSprop``, the reference it mirrors: the
same weights bit for bit after every step, centred and not, and state dicts that load either
way (issue 25: the MinAtar paper's optimiser)."""

from __future__ import annotations

import pytest
import torch
from support import assert_same_modules, optimizer_steps, saved_bytes, tiny_network

from per_dqn.agent.optim import make_optimizer, step_all
from per_dqn.agent.rmsprop import RMSprop


@pytest.mark.parametrize("centered", [True, False])
def test_bit_identical_to_torch_rmsprop_step_by_step(centered):
    """MinAtar's settings (lr 2.5e-4, alpha 0.95, eps 0.01) and torch's multi-tensor RMSprop: the
    same weights after each of 25 steps, the same state dict bytes, and a changed step size
    followed alike."""
    ours_model, ref_model = tiny_network(), tiny_network()
    settings = dict(lr=2.5e-4, alpha=0.95, eps=0.01, centered=centered)
    ours = RMSprop(ours_model.parameters(), **settings)
    ref = torch.optim.RMSprop(ref_model.parameters(), foreach=True, **settings)
    for seed in range(25):
        optimizer_steps(ours_model, ours, 1, seed, target=1.0)
        optimizer_steps(ref_model, ref, 1, seed, target=1.0)
        assert_same_modules(ours_model, ref_model)
    assert saved_bytes(ours.state_dict()) == saved_bytes(ref.state_dict())
    ours.param_groups[0]["lr"] = ref.param_groups[0]["lr"] = 1e-3
    optimizer_steps(ours_model, ours, 5, target=1.0)
    optimizer_steps(ref_model, ref, 5, target=1.0)
    assert_same_modules(ours_model, ref_model)
    # The weights moved: the comparison is not of two untouched networks.
    assert not torch.equal(ours_model[0].weight, tiny_network()[0].weight)


def test_state_dicts_load_either_way_and_continue_identically():
    """A state dict written by torch's RMSprop continues in ours, and ours in torch's."""
    for first, second in ((RMSprop, torch.optim.RMSprop), (torch.optim.RMSprop, RMSprop)):
        model = tiny_network()
        optimizer = first(model.parameters(), lr=1e-3, alpha=0.95, eps=0.01, centered=True)
        optimizer_steps(model, optimizer, 4, target=1.0)
        saved = optimizer.state_dict()
        weights = {k: v.clone() for k, v in model.state_dict().items()}
        a_model, b_model = tiny_network(1), tiny_network(2)
        a_model.load_state_dict(weights)
        b_model.load_state_dict(weights)
        a = first(a_model.parameters(), lr=1e-3, alpha=0.95, eps=0.01, centered=True)
        b = second(b_model.parameters(), lr=1e-3, alpha=0.95, eps=0.01, centered=True)
        a.load_state_dict(saved)
        b.load_state_dict(saved)
        optimizer_steps(a_model, a, 3, seed=9, target=1.0)
        optimizer_steps(b_model, b, 3, seed=9, target=1.0)
        assert_same_modules(a_model, b_model)


def test_a_state_dict_that_lacks_the_mean_gradient_is_refused():
    """Pins an uncentred state loaded by a centred optimiser (the saved settings, or the
    loader's own that a resumed run puts back): a missing mean gradient is named at the load."""
    model = tiny_network()
    plain = RMSprop(model.parameters(), lr=1e-3, centered=False)
    optimizer_steps(model, plain, 1, target=1.0)
    saved = plain.state_dict()
    # An uncentred checkpoint into a centred optimiser (a config changed since): refused at the
    # load, not a KeyError at the next step.
    with pytest.raises(ValueError, match="no grad_avg"):
        RMSprop(tiny_network().parameters(), centered=True).load_state_dict(saved)
    saved["param_groups"][0]["centered"] = True
    with pytest.raises(ValueError, match="no grad_avg"):
        RMSprop(tiny_network().parameters(), centered=True).load_state_dict(saved)


def test_step_all_steps_each_optimiser_as_its_own_step():
    """Two RMSprops of different settings and an Adam stepped together by ``step_all`` give the
    weights each gives stepping alone."""
    kinds = [("rmsprop", {"rmsprop_alpha": 0.9}), ("rmsprop", {"rmsprop_eps": 1e-5}),
             ("adam", {})]  # fmt: skip
    together = [tiny_network(i) for i in range(3)]
    alone = [tiny_network(i) for i in range(3)]
    opts_t = [
        make_optimizer(k, m.parameters(), 1e-3, **kw)
        for (k, kw), m in zip(kinds, together, strict=True)
    ]
    opts_a = [
        make_optimizer(k, m.parameters(), 1e-3, **kw)
        for (k, kw), m in zip(kinds, alone, strict=True)
    ]
    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(3))
    for _ in range(3):
        for models, opts in ((together, opts_t), (alone, opts_a)):
            for m, o in zip(models, opts, strict=True):
                o.zero_grad()
                (m(x) ** 2).mean().backward()
        step_all([(o, [p.grad for p in o.param_groups[0]["params"]]) for o in opts_t])
        for o in opts_a:
            o.step()
    for a, b in zip(together, alone, strict=True):
        assert_same_modules(a, b)
    with pytest.raises(ValueError, match="`optimizer` must be one of adam, rmsprop, got 'sgd'"):
        make_optimizer("sgd", tiny_network().parameters(), 1e-3)
