"""A pack computes each member as it computes that member alone, bit for bit (issue 24).

Agents built from one seed each learn from their own stream of batches, alone (a pack of one,
what a single run is), in a pack of 4 and in a pack of 16 with other members (other seeds, other
learning rates); after every update their TD errors and metrics, and at the end their networks,
target networks and Adam states, are compared with ``torch.equal``: equal bits, not closeness.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from per_dqn.agent import DQNAgent
from per_dqn.agent.pack import Pack
from per_dqn.agent.signals import SIGNALS
from per_dqn.memory import Batch

MLP = dict(obs_shape=(4,), hidden_sizes=(64, 64), network="auto")
MINATAR = dict(obs_shape=(4, 10, 10), hidden_sizes=(32,), network="minatar_cnn")
NATURE = dict(obs_shape=(4, 36, 36), hidden_sizes=(32,), network="nature_cnn", channels_last=True)


def agent(seed: int, net: dict, **overrides) -> DQNAgent:
    torch.manual_seed(seed)
    kwargs = dict(
        num_actions=3, dueling=True, double=True, gamma=0.99,
        learning_rate=1e-3 * (1 + seed % 3), adam_eps=1e-8, loss="huber", grad_clip_norm=None,
        target_update_interval=3, tau=1.0, device=torch.device("cpu"),
    )  # fmt: skip
    kwargs.update(net)
    kwargs.update(overrides)
    return DQNAgent(**kwargs)


def batch(rng: np.random.Generator, shape: tuple[int, ...], size: int = 32) -> Batch:
    if len(shape) == 1:
        obs = rng.normal(size=(2, size, *shape)).astype(np.float32)
    else:
        obs = rng.integers(0, 2 if shape[1] == 10 else 256, size=(2, size, *shape), dtype=np.uint8)
    return Batch(
        obs=obs[0],
        actions=rng.integers(0, 3, size).astype(np.int64),
        rewards=rng.normal(size=size).astype(np.float32),
        next_obs=obs[1],
        terminated=rng.random(size) < 0.1,
        indices=np.arange(size, dtype=np.int64),
        weights=rng.random(size).astype(np.float32),
        n_steps=rng.integers(1, 4, size).astype(np.uint8),
    )


def train(seeds: list[int], net: dict, updates: int, learns=None, **overrides):
    """Agents of ``seeds`` in one pack (alone for one seed), ``updates`` rounds; in each round
    the members ``learns(round, seed)`` allows (all by default) learn from their next batch.
    Returns the agents and, per seed, every ``(td_abs, metrics)`` in order."""
    agents = [agent(s, net, **overrides) for s in seeds]
    pack = agents[0].pack if len(agents) == 1 else Pack(agents)
    rngs = {s: np.random.default_rng(1000 + s) for s in seeds}
    seen: dict[int, list] = {s: [] for s in seeds}
    for round_ in range(updates):
        batches = {
            slot: batch(rngs[s], net["obs_shape"])
            for slot, s in enumerate(seeds)
            if learns is None or learns(round_, s)
        }
        if not batches:
            continue
        for slot, result in pack.learn(batches).items():
            seen[seeds[slot]].append((result.td_abs, result.metrics))
    return dict(zip(seeds, agents, strict=True)), seen


def assert_same_agent(a: DQNAgent, b: DQNAgent) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    for part in ("online", "target"):
        assert sa[part].keys() == sb[part].keys()
        for key in sa[part]:
            assert torch.equal(sa[part][key], sb[part][key]), (part, key)
    oa, ob = sa["optimizer"], sb["optimizer"]
    assert oa["param_groups"] == ob["param_groups"]
    assert oa["state"].keys() == ob["state"].keys()
    for i in oa["state"]:
        assert oa["state"][i].keys() == ob["state"][i].keys()
        for key in oa["state"][i]:  # Adam's step and moments, or RMSprop's step and averages
            assert torch.equal(oa["state"][i][key], ob["state"][i][key]), (i, key)
    assert sa["update_steps"] == sb["update_steps"]


def assert_same_stream(a: list, b: list) -> None:
    assert len(a) == len(b)
    for (td_a, m_a), (td_b, m_b) in zip(a, b, strict=True):
        assert np.array_equal(td_a, td_b)
        assert m_a == m_b


@pytest.mark.parametrize(
    ("net", "updates", "overrides"),
    [
        (MLP, 60, {}),
        (MLP, 30, {"grad_clip_norm": 0.5, "tau": 0.05, "target_update_interval": 1}),
        (MLP, 30, {"dueling": False, "double": False, "loss": "mse"}),
        (MINATAR, 20, {}),
        # The MinAtar paper's and Dopamine's settings (issue 25): RMSprop, Glorot's init, and
        # the same-padded convolution under the head (no hidden layer); uncentred RMSprop on the
        # MLP.
        (
            MINATAR,
            20,
            {
                "optimizer": "rmsprop",
                "init": "xavier_uniform",
                "conv_padding": "same",
                "hidden_sizes": (),
            },
        ),
        (MLP, 30, {"optimizer": "rmsprop", "rmsprop_centered": False, "rmsprop_alpha": 0.9}),
        # Every priority signal but |delta| (the default, above).
        *[(MLP, 20, {"priority_signal": name}) for name in SIGNALS if name != "td_error"],
        # ReLo's target-net Q(s, a) through each member's own convolutions (the MLP above
        # stacks its inputs as they are: a mutation run found the CNN's path unchecked).
        (MINATAR, 10, {"priority_signal": "reducible_loss"}),
    ],
    ids=[
        "mlp",
        "mlp-clip-soft",
        "mlp-plain-mse",
        "minatar-cnn",
        "minatar-rmsprop-same",
        "mlp-rmsprop-plain",
        *[f"mlp-signal-{name}" for name in SIGNALS if name != "td_error"],
        "minatar-signal-reducible_loss",
    ],
)
def test_a_member_learns_the_same_bits_alone_and_in_packs_of_4_and_16(net, updates, overrides):
    """Seed 3 alone, with 7, 12 and 5, and among 16: the same TD errors and metrics at every
    update, and the same networks, target networks, Adam moments and step counts at the end."""
    alone, alone_seen = train([3], net, updates, **overrides)
    four, four_seen = train([7, 3, 12, 5], net, updates, **overrides)
    sixteen, sixteen_seen = train(list(range(16)), net, updates, **overrides)
    assert_same_stream(alone_seen[3], four_seen[3])
    assert_same_stream(alone_seen[3], sixteen_seen[3])
    assert_same_agent(alone[3], four[3])
    assert_same_agent(alone[3], sixteen[3])
    assert_same_agent(four[12], sixteen[12])
    # The members did learn, each in its own way.
    assert alone[3].update_steps == updates
    first = next(iter(sixteen[3].online.parameters()))
    assert not torch.equal(first, next(iter(sixteen[4].online.parameters())))


def test_a_member_learning_without_the_others_learns_the_same_bits():
    """Members that are not due sit a round out (the pack then learns through copies of the
    slices of those that are): seed 3, which learns every round among members that learn every
    other round, ends as seed 3 alone."""
    alone, alone_seen = train([3], MLP, 40)
    mixed, mixed_seen = train(list(range(8)), MLP, 40, learns=lambda r, s: s == 3 or r % 2 == 0)
    assert_same_stream(alone_seen[3], mixed_seen[3])
    assert_same_agent(alone[3], mixed[3])
    assert mixed[5].update_steps == 20


def test_a_nature_cnn_member_learns_the_same_bits_alone_and_packed():
    """The Atari network (channels_last, uint8 stacks interleaved on the host), on small frames."""
    alone, alone_seen = train([1], NATURE, 6)
    packed, packed_seen = train([0, 1, 2], NATURE, 6)
    assert_same_stream(alone_seen[1], packed_seen[1])
    assert_same_agent(alone[1], packed[1])


def test_acting_is_the_same_alone_and_packed():
    """Greedy actions and Q-values of a member, for one observation and for several, from the
    pack and from the agent alone."""
    alone = agent(3, MLP)
    others = [agent(s, MLP) for s in (0, 1, 2)]
    pack = Pack([*others, agent(3, MLP)])
    member = pack.agents[3]
    rng = np.random.default_rng(0)
    for rows in (1, 5):
        obs = rng.normal(size=(rows, 4)).astype(np.float32)
        assert np.array_equal(alone.greedy_actions(obs), member.greedy_actions(obs))
        assert np.array_equal(alone.q_values(obs), member.q_values(obs))
        both = pack.greedy_actions({0: obs, 3: obs})
        assert np.array_equal(both[3], alone.greedy_actions(obs))


DEEP = dict(obs_shape=(4,), hidden_sizes=(16, 16, 16), network="auto")


@pytest.mark.parametrize("net", [DEEP, MINATAR], ids=["mlp-3-hidden", "minatar-cnn"])
@pytest.mark.parametrize("dueling", [True, False], ids=["dueling", "plain"])
def test_a_pack_s_actions_and_q_values_are_each_member_s_own_module_s(net, dueling):
    """The reference is each member's own ``torch.nn.Module`` forward, not a pack: a run alone
    is a pack of one, so the pack-against-alone tests cannot see a bug that both share. Three
    did survive them (the pack's mutation run): features all replaced by the zero rows that fill
    a slot that did not ask, Q-values without dueling's value and mean (the acting shortcut's
    advantage returned), and the head taken as the second layer, not the last. Here slot 1 does
    not ask (a zero row in between), the MLP has three hidden layers, and the CNN goes through
    its own convolutions."""
    agents = [agent(s, net, dueling=dueling) for s in range(3)]
    pack = Pack(agents)
    rng = np.random.default_rng(7)
    obs = {k: batch(rng, net["obs_shape"], size=64).obs for k in (0, 2)}
    q = pack.q_values(obs)
    actions = pack.greedy_actions(obs)
    assert sorted(q) == sorted(actions) == [0, 2]
    varied = False
    for k, o in obs.items():
        with torch.no_grad():
            reference = agents[k].online(torch.as_tensor(o)).numpy()
        np.testing.assert_allclose(q[k], reference, rtol=1e-5, atol=1e-6)
        assert np.array_equal(actions[k], reference.argmax(axis=1))
        varied |= len(set(reference.argmax(axis=1).tolist())) > 1
    assert varied  # the observations move the greedy action: a constant one would show


@pytest.mark.parametrize("net", [MLP, MINATAR, NATURE], ids=["mlp", "minatar-cnn", "nature-cnn"])
def test_a_pack_makes_its_tensors_on_its_own_device_not_torch_s_default(net):
    """On a GPU, a tensor made without the pack's device lands on torch's default device (the
    CPU) and the step fails. With no GPU here, torch's ``meta`` device as the default stands in:
    a tensor made there holds no data, so any such tensor fails or changes the result. The same
    pack acts and learns the same bits under it as outside it (a mutation run found the
    observations' ``device=`` dropped, unseen on a CPU-only machine)."""
    inside = Pack([agent(s, net) for s in range(2)])
    outside = Pack([agent(s, net) for s in range(2)])
    rng = np.random.default_rng(0)
    obs = {k: batch(rng, net["obs_shape"], size=8).obs for k in (0, 1)}
    batches = {k: batch(rng, net["obs_shape"]) for k in (0, 1)}
    want = outside.greedy_actions(obs), outside.q_values(obs), outside.learn(batches)
    with torch.device("meta"):
        got = inside.greedy_actions(obs), inside.q_values(obs), inside.learn(batches)
    for k in (0, 1):
        assert np.array_equal(got[0][k], want[0][k])
        assert np.array_equal(got[1][k], want[1][k])
        assert np.array_equal(got[2][k].td_abs, want[2][k].td_abs)
        assert_same_agent(inside.agents[k], outside.agents[k])


def test_uint8_observations_reach_the_network_as_uint8():
    """The Nature CNN scales a uint8 stack by multiplying with 1/255 and a float one by
    dividing by 255, which differ in the last bit (checked here), so the pack hands uint8
    observations on as they are, as learning does, and a quarter of the bytes moves (a mutation
    run found them converted to float32 on the host unseen). Other dtypes go as float32."""
    pack = Pack([agent(s, NATURE) for s in range(2)])
    obs = np.arange(256, dtype=np.uint8).reshape(1, 1, 16, 16).repeat(4, axis=1)
    obs = np.pad(obs, ((0, 0), (0, 0), (10, 10), (10, 10)))
    host = pack._host_obs(obs)
    assert host.dtype == torch.uint8
    net = pack.agents[0].online
    assert not torch.equal(net.prepare(host), net.prepare(host.float()))
    assert pack._host_obs(obs.astype(np.float64)).dtype == torch.float32


def test_a_member_s_state_dict_continues_identically_in_an_agent_alone():
    """A checkpoint's agent part from a packed member (copies, not views of the pack) loads into
    a new agent alone, which then learns exactly as the member goes on to learn in its pack."""
    packed, _ = train([0, 1, 2, 3], MLP, 10)
    member = packed[2]
    state = member.state_dict()
    assert all(t._base is None for t in state["online"].values())  # copies: torch.save writes each
    fresh = agent(99, MLP)
    fresh.load_state_dict(state)
    fresh.set_learning_rate(member.optimizer.param_groups[0]["lr"])
    assert_same_agent(fresh, member)
    rng = np.random.default_rng(5)
    for _ in range(5):
        b = batch(rng, (4,))
        td_member = member.pack.learn({2: b})[2].td_abs
        assert np.array_equal(fresh.learn(b).td_abs, td_member)
    assert_same_agent(fresh, member)


def test_members_of_different_shapes_cannot_share_a_pack():
    with pytest.raises(ValueError, match="cannot share a pack"):
        Pack([agent(0, MLP), agent(1, {**MLP, "hidden_sizes": (32, 32)})])


@pytest.mark.parametrize("members, inputs, outputs", [(1, 1024, 128), (5, 1024, 128), (3, 4, 7)])
def test_the_stacked_linear_layer_has_autograd_s_gradients_in_the_weight_s_layout(
    members, inputs, outputs
):
    """The pack's linear layer computes its weight's gradient as ``grad^T @ h``: the values of
    autograd's backward of the same ``baddbmm`` (float64, to 1e-12), and already in the weight's
    ``(K, out, in)`` layout, so the leaf takes it without the transposing copy autograd's own
    backward needed."""
    from per_dqn.agent.pack import _StackedLinear

    gen = torch.Generator().manual_seed(0)
    h = torch.randn(members, 32, inputs, generator=gen, dtype=torch.float64)
    weight = torch.randn(members, outputs, inputs, generator=gen, dtype=torch.float64)
    bias = torch.randn(members, outputs, generator=gen, dtype=torch.float64)
    grad = torch.randn(members, 32, outputs, generator=gen, dtype=torch.float64)
    ours = [t.clone().requires_grad_() for t in (h, weight, bias)]
    _StackedLinear.apply(*ours).backward(grad)
    theirs = [t.clone().requires_grad_() for t in (h, weight, bias)]
    torch.baddbmm(theirs[2].unsqueeze(1), theirs[0], theirs[1].transpose(1, 2)).backward(grad)
    for mine, reference in zip(ours, theirs, strict=True):
        torch.testing.assert_close(mine.grad, reference.grad, rtol=1e-12, atol=1e-12)
    # The gradient as the backward hands it over (before a leaf's layout contract copies it).
    leaf = weight.clone().requires_grad_()
    (mine,) = torch.autograd.grad(_StackedLinear.apply(h, leaf, bias), leaf, grad)
    (autograds,) = torch.autograd.grad(
        torch.baddbmm(bias.unsqueeze(1), h, leaf.transpose(1, 2)), leaf, grad
    )
    assert mine.is_contiguous() and not autograds.is_contiguous()
    # Without input gradient wanted (the first layer of an MLP), none is computed.
    ours = [h, weight.clone().requires_grad_(), bias.clone().requires_grad_()]
    _StackedLinear.apply(*ours).backward(grad)
    assert ours[0].grad is None and ours[1].grad is not None


@pytest.mark.parametrize("clip", [0.1, 10.0], ids=["active", "inactive"])
def test_each_member_s_gradients_are_clipped_as_torch_clips_them(clip):
    """A mutation run found ``Pack._clip`` unchecked: a member alone learns through a pack of
    one, so comparing members packed and alone could not see a wrong clip (one that scaled
    gradients up to twice, or divided by ``norm - 1e-6``), and the clip test's norms never
    reached its threshold. Here each member of a pack of 3, learning with ``grad_clip_norm``
    (0.1: below every norm, so it clips; 10: above them all), ends with its unclipped gradients
    (the same members learning without a clip) as ``torch.nn.utils.clip_grad_norm_`` scales
    them, bit for bit, and reports the norm before clipping."""
    seeds = [3, 7, 12]

    def learn(grad_clip_norm):
        agents = [agent(s, MLP, grad_clip_norm=grad_clip_norm) for s in seeds]
        batches = {k: batch(np.random.default_rng(100 + s), MLP["obs_shape"])
                   for k, s in enumerate(seeds)}  # fmt: skip
        results = Pack(agents).learn(batches)
        grads = [[p.grad.clone() for p in a.online.parameters()] for a in agents]
        return grads, results

    unclipped, _ = learn(None)
    clipped, results = learn(clip)
    for k, (raw, got) in enumerate(zip(unclipped, clipped, strict=True)):
        params = [torch.nn.Parameter(torch.zeros_like(g)) for g in raw]
        for p, g in zip(params, raw, strict=True):
            p.grad = g.clone()
        norm = torch.nn.utils.clip_grad_norm_(params, clip)
        assert results[k].metrics["grad_norm"] == float(norm)
        assert (float(norm) > clip) == (clip == 0.1)
        for p, g in zip(params, got, strict=True):
            assert torch.equal(p.grad, g)
