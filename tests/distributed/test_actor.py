"""An Ape-X actor's work without Ray (issue 47): its priorities by hand on a tiny network, its
greedy actions, its blocks losing and repeating nothing, its streams its own."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from per_dqn.config import Override, load_config, resolve_config_path
from per_dqn.distributed.actor import Actor
from per_dqn.training.seeding import RunSeeds

GAMMA, N_STEP = 0.9, 2


def tiny_config(**more):
    """CartPole with a 4-3-2 MLP (no dueling head), Double DQN targets over 2-step windows."""
    overrides = {
        "agent.hidden_sizes": [3],
        "agent.dueling": False,
        "agent.double": True,
        "agent.n_step": N_STEP,
        "agent.gamma": GAMMA,
        **more,
    }
    return load_config(
        resolve_config_path("cartpole.yaml"), [Override(k, v) for k, v in overrides.items()]
    )


def known_weights(seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    shapes = {"hidden.0.weight": (3, 4), "hidden.0.bias": (3,), "advantage.weight": (2, 3),
              "advantage.bias": (2,)}  # fmt: skip
    return {k: torch.randn(shape, generator=generator) for k, shape in shapes.items()}


def q_by_hand(weights: dict[str, torch.Tensor], obs: np.ndarray) -> np.ndarray:
    """``W2 relu(W1 s + b1) + b2`` in float64."""
    w = {k: v.double().numpy() for k, v in weights.items()}
    hidden = np.maximum(obs.astype(np.float64) @ w["hidden.0.weight"].T + w["hidden.0.bias"], 0)
    return hidden @ w["advantage.weight"].T + w["advantage.bias"]


def test_an_actor_s_priorities_are_delta_under_its_weights_by_hand():
    """``|R + gamma^n Q_target(s', argmax_a Q_online(s', a)) (1 - terminated) - Q_online(s, a)|``
    of each transition, online and target networks set apart, against the block's ``td_abs``;
    the block names the weights it used."""
    online, target = known_weights(1), known_weights(2)
    with Actor(tiny_config(), 0, 0.5, RunSeeds.for_actor(0, 0)) as actor:
        actor.set_weights(online, target, version=3)
        block = actor.collect(60)
    t = block.transitions
    assert len(block) > 40 and block.version == 3 and block.actor == 0 and block.serial == 0
    assert t.terminated.any() and (t.n_steps == 1).any() and (t.n_steps == 2).any()
    best = q_by_hand(online, t.next_obs).argmax(axis=1)
    bootstrap = q_by_hand(target, t.next_obs)[np.arange(len(block)), best]
    y = t.rewards + GAMMA ** t.n_steps.astype(np.float64) * bootstrap * ~t.terminated
    q_taken = q_by_hand(online, t.obs)[np.arange(len(block)), t.actions]
    np.testing.assert_allclose(block.td_abs, np.abs(y - q_taken), rtol=1e-5, atol=1e-5)


def test_at_epsilon_0_every_action_is_greedy_under_the_held_weights():
    online = known_weights(4)
    with Actor(tiny_config(**{"agent.n_step": 1}), 2, 0.0, RunSeeds.for_actor(0, 2)) as actor:
        actor.set_weights(online, online, version=0)
        block = actor.collect(40)
    np.testing.assert_array_equal(
        block.transitions.actions, q_by_hand(online, block.transitions.obs).argmax(axis=1)
    )


def test_blocks_lose_and_repeat_nothing():
    """Blocks of 7, 1, 30 and 12 steps hold, in order, the transitions one block of 50 steps
    holds, with the same episodes; one-step transitions chain (each next observation the next
    transition's observation, but across an episode's end) and every env step is one
    transition. The priorities, computed over a block's rows at once, are the one block's within
    float32 rounding: on a CPU with AMX (Sapphire Rapids class) a batch of 7 rows and one of 46
    take different matmul kernels, which round 4 of 46 values 2.4e-7 apart."""
    config = tiny_config(**{"agent.n_step": 1})
    weights = known_weights(5)
    with Actor(config, 1, 0.3, RunSeeds.for_actor(7, 1)) as whole:
        whole.set_weights(weights, weights, version=0)
        one = whole.collect(50)
    with Actor(config, 1, 0.3, RunSeeds.for_actor(7, 1)) as parts:
        parts.set_weights(weights, weights, version=0)
        blocks = [parts.collect(steps) for steps in (7, 1, 30, 12)]
    assert [b.serial for b in blocks] == [0, 1, 2, 3]
    for field in one.transitions._fields:
        joined = np.concatenate([getattr(b.transitions, field) for b in blocks])
        np.testing.assert_array_equal(joined, getattr(one.transitions, field), err_msg=field)
    joined = np.concatenate([b.td_abs for b in blocks])
    np.testing.assert_allclose(joined, one.td_abs, rtol=1e-6, atol=0)
    assert [e for b in blocks for e in b.episodes] == one.episodes
    assert blocks[-1].env_steps == one.env_steps == len(one)
    t = one.transitions
    ends = t.terminated[:-1] | (np.cumsum([0, *[n for _, n in one.episodes]])[None, :] - 1
                                == np.arange(len(one) - 1)[:, None]).any(axis=1)  # fmt: skip
    chained = np.all(t.next_obs[:-1] == t.obs[1:], axis=1)
    np.testing.assert_array_equal(chained, ~ends)


def test_each_actor_has_its_own_streams():
    """Two actors of one run, an actor and its restart, and an actor and the run's learner,
    share no stream."""
    a, b, run = RunSeeds.for_actor(0, 0), RunSeeds.for_actor(0, 1), RunSeeds.from_seed(0)
    again = RunSeeds.for_actor(0, 0, incarnation=1)
    values = [v for seeds in (a, b, run, again) for v in vars(seeds).values()]
    assert len(set(values)) == len(values)
    assert RunSeeds.for_actor(0, 0) == a


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: Actor(c, -1, 0.1, RunSeeds.for_actor(0, 0)), "`index` must be an integer >= 0"),
        (lambda c: Actor(c, 0, 1.5, RunSeeds.for_actor(0, 0)), r"`epsilon` must be in \[0, 1\]"),
        (lambda c: RunSeeds.for_actor(0, -1), "must be >= 0, got 0, -1 and 0"),
    ],
)
def test_bad_actor_settings_are_one_line(call, message):
    with pytest.raises(ValueError, match=message):
        call(tiny_config())


def test_weights_go_forward_only_and_a_bad_set_leaves_the_held_ones():
    with Actor(tiny_config(), 0, 0.1, RunSeeds.for_actor(0, 0)) as actor:
        held = known_weights(1)
        actor.set_weights(held, held, version=2)
        with pytest.raises(ValueError, match="version must be an integer >= the held 2, got 1"):
            actor.set_weights(held, held, version=1)
        with pytest.raises(ValueError, match="weights of other networks"):
            actor.set_weights({"hidden.0.weight": torch.zeros(5, 5)}, held, version=3)
        assert actor.version == 2
        for key, value in actor.agent.online.state_dict().items():
            assert torch.equal(value, held[key])
        with pytest.raises(ValueError, match="`steps` must be an integer >= 1, got 0"):
            actor.collect(0)


def assert_same_blocks(got, expected):
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert (a.actor, a.serial, a.version, a.env_steps) == (
            b.actor, b.serial, b.version, b.env_steps
        )  # fmt: skip
        assert a.episodes == b.episodes
        for x, y in zip(a.transitions, b.transitions, strict=True):
            np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(a.td_abs, b.td_abs)


def test_an_actor_continued_from_its_state_plays_on_as_if_never_stopped():
    """A distributed run's checkpoint holds each actor's state after its last block: an actor
    of other streams (another seed, another index's epsilon aside) loaded with it plays the
    same next blocks, transitions, priorities, episodes and counters, as the actor it came
    from, given the same weights: CartPole's envs, the open n-step windows and episodes and the
    exploration stream all carried over."""
    online, target = known_weights(1), known_weights(2)
    config = tiny_config()
    with Actor(config, 1, 0.3, RunSeeds.for_actor(0, 1)) as actor:
        actor.set_weights(online, target, version=0)
        for _ in range(3):
            actor.collect(40)
        state = actor.state_dict()
        assert actor.state.nstep.state_dict()  # windows open mid-episode
        expected = [actor.collect(40) for _ in range(3)]
    with Actor(config, 1, 0.3, RunSeeds.for_actor(7, 1)) as other:
        other.set_weights(online, target, version=0)
        assert other.load_state_dict(state) is True
        assert_same_blocks([other.collect(40) for _ in range(3)], expected)
    assert expected[0].serial == 3 and any(b.episodes for b in expected)


def test_an_actor_state_of_another_shape_or_form_is_refused_and_changes_nothing():
    """A state of other observations, or not an actor's, is refused with one line before the
    actor changes: its next block is the one it would have played."""
    config = tiny_config()
    with Actor(config, 0, 0.5, RunSeeds.for_actor(0, 0)) as actor:
        state = actor.state_dict()
        bad = {**state, "loop": {**state["loop"], "obs": np.zeros((1, 5), np.float32)}}
        with pytest.raises(ValueError, match=r"observations of shape \(1, 5\)"):
            actor.load_state_dict(bad)
        with pytest.raises(ValueError, match="must hold `loop`, `envs` and `blocks`"):
            actor.load_state_dict({"loop": state["loop"]})
        with pytest.raises(ValueError, match="`blocks` must be an integer >= 0, got -1"):
            actor.load_state_dict({**state, "blocks": -1})
        got = actor.collect(30)
    with Actor(config, 0, 0.5, RunSeeds.for_actor(0, 0)) as fresh:
        assert_same_blocks([got], [fresh.collect(30)])


def test_a_block_saved_and_read_back_is_the_same_block():
    """A checkpoint holds the blocks in flight (``Block.state_dict``): read back, every field is
    the same; a state that is not a block's is refused with one line."""
    from per_dqn.distributed.actor import Block

    with Actor(tiny_config(), 0, 0.5, RunSeeds.for_actor(0, 0)) as actor:
        block = actor.collect(60)
    assert block.episodes
    assert_same_blocks([Block.from_state_dict(block.state_dict())], [block])
    state = block.state_dict()
    with pytest.raises(ValueError, match="not a block's state"):
        Block.from_state_dict({**state, "td_abs": state["td_abs"][:-1]})
    with pytest.raises(ValueError, match="not a block's state"):
        Block.from_state_dict({k: v for k, v in state.items() if k != "serial"})
