"""The config keys that published DQN and PER setups need (issue 25), each checked against hand
computation or the reference it follows: the optimiser, the initialisation, the MinAtar CNN's
padding, MinAtar's full action set, epsilon decay after the warm-up, a fixed beta and a priority
taken from the loss. (``tests/agent/test_rmsprop.py`` holds RMSprop against torch's; the plain max
target and MSE, which existed before, are in ``tests/agent/test_dqn.py``.)"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from support import cartpole_config, fill_with_random_play
from torch.nn import functional as F

from per_dqn.agent.networks import MinAtarCNN, initialize, make_q_network
from per_dqn.agent.rmsprop import RMSprop
from per_dqn.agent.signals import priority_signal, sample_losses
from per_dqn.config import ConfigError, load_config, parse_override, resolve_config_path
from per_dqn.envs.make import EnvSpec
from per_dqn.training.build import make_agent, make_memory, resolve_device
from per_dqn.training.run import Trainer


def minatar(*sets: str):
    return load_config(resolve_config_path("minatar.yaml"), [parse_override(s) for s in sets])


def test_rmsprop_is_built_with_its_keys_and_adam_stays_the_default():
    spec = EnvSpec((4, 10, 10), np.dtype(np.uint8), 3)
    config = minatar("agent.optimizer=rmsprop", "agent.learning_rate=0.00025",
                     "agent.rmsprop_alpha=0.9", "agent.rmsprop_eps=0.02",
                     "agent.rmsprop_centered=false")  # fmt: skip
    agent = make_agent(config, spec, torch.device("cpu"))
    assert isinstance(agent.optimizer, RMSprop)
    group = agent.optimizer.param_groups[0]
    assert (group["lr"], group["alpha"], group["eps"], group["centered"]) == (
        0.00025, 0.9, 0.02, False,
    )  # fmt: skip
    default = make_agent(minatar(), spec, torch.device("cpu"))
    assert type(default.optimizer).__name__ == "FusedAdam"


def test_xavier_uniform_draws_glorot_bounds_and_zero_biases():
    """Glorot's uniform bound sqrt(6 / (fan_in + fan_out)), a convolution's fans counting its
    3x3 kernel: every weight within it, the spread of a uniform on it, biases zero."""
    torch.manual_seed(0)
    net = MinAtarCNN((4, 10, 10), 6, (128,), dueling=False)
    initialize(net, "xavier_uniform")
    conv_bound = math.sqrt(6 / (4 * 9 + 16 * 9))
    fc_bound = math.sqrt(6 / (1024 + 128))
    for weight, bound in ((net.conv.weight, conv_bound), (net.hidden[0].weight, fc_bound)):
        assert weight.abs().max() <= bound
        # The standard deviation of U(-b, b) is b / sqrt(3).
        assert weight.std().item() == pytest.approx(bound / math.sqrt(3), rel=0.05)
    for bias in (net.conv.bias, net.hidden[0].bias, net.advantage.bias):
        assert torch.count_nonzero(bias) == 0
    # torch's own init is left alone, and its biases are not zero.
    torch.manual_seed(0)
    plain = MinAtarCNN((4, 10, 10), 6, (128,), dueling=False)
    before = plain.conv.weight.clone()
    initialize(plain, "torch")
    assert torch.equal(plain.conv.weight, before)
    assert torch.count_nonzero(plain.conv.bias) > 0


def test_same_padding_keeps_minatar_s_10x10_maps():
    """Valid padding: 16 x 8 x 8 = 1,024 features into the fc layer (the MinAtar paper's
    network); same: 16 x 10 x 10 = 1,600 (Dopamine's), and the border cells reach the output."""
    valid = make_q_network((4, 10, 10), 3, (128,), False, "minatar_cnn")
    same = make_q_network((4, 10, 10), 3, (128,), False, "minatar_cnn", conv_padding="same")
    assert valid.hidden[0].in_features == 1024
    assert same.hidden[0].in_features == 1600
    x = torch.zeros(1, 4, 10, 10)
    x[0, 0, 0, 0] = 1.0  # a corner cell: only a padded convolution centres a kernel on it
    assert same.stem(x).shape == (1, 1600)
    with pytest.raises(ValueError, match=r"agent\.conv_padding: must be 'valid' for network 'mlp'"):
        make_q_network((4,), 2, (8,), False, "mlp", conv_padding="same")


def test_same_padding_on_another_network_is_one_line_naming_the_key():
    line = r"agent\.conv_padding: must be 'valid' for network 'auto' \(only 'minatar_cnn' takes"
    with pytest.raises(ConfigError, match=line + r" 'same'\), got 'same'"):
        cartpole_config("agent.conv_padding=same")


def test_minatar_s_full_action_set_is_six_actions():
    """Breakout's minimal set is 3 actions; ``env.full_action_space`` gives MinAtar's 6."""
    from per_dqn.envs.make import make_eval_env

    minimal = make_eval_env(minatar().env)
    full = make_eval_env(minatar("env.full_action_space=true").env)
    try:
        assert (minimal.action_space.n, full.action_space.n) == (3, 6)
    finally:
        minimal.close()
        full.close()


def make_loop(*sets: str):
    from test_loop import ScriptedEnvs

    from per_dqn.training.loop import Loop
    from per_dqn.training.seeding import RunSeeds

    config = cartpole_config("agent.hidden_sizes=[8]", "replay.capacity=64", *sets)
    spec = EnvSpec((4,), np.dtype(np.float32), 2)
    memory = make_memory(config.replay, spec, 0)
    agent = make_agent(config, spec, torch.device("cpu"))
    return Loop(config, agent, memory, ScriptedEnvs([], 1), RunSeeds.from_seed(0))


def test_epsilon_decay_can_start_after_the_warm_up():
    """Dopamine's linearly_decaying_epsilon and MinAtar's examples/dqn.py: epsilon holds its
    start value through the warm-up, then falls over ``epsilon_decay_steps``."""
    sets = ("train.learning_starts=5000", "train.epsilon_start=1.0", "train.epsilon_end=0.1",
            "train.epsilon_decay_steps=100000", "train.total_env_steps=500000")  # fmt: skip
    after = make_loop(*sets, "train.epsilon_decay_from=learning_starts").epsilon
    assert after(0) == after(5000) == 1.0
    assert after(5000 + 50_000) == pytest.approx(0.55)
    assert after(105_000) == after(400_000) == 0.1
    at_start = make_loop(*sets).epsilon
    assert at_start(50_000) == pytest.approx(0.55)
    assert at_start(100_000) == 0.1


def test_beta_can_be_fixed_or_end_below_one():
    fixed = make_loop("replay.beta0=0.5", "replay.beta_end=0.5", "train.total_env_steps=2000")
    assert [fixed.beta(s) for s in (0, 1000, 2000)] == [0.5, 0.5, 0.5]
    ramp = make_loop("replay.beta0=0.4", "replay.beta_end=0.8", "train.total_env_steps=2000")
    assert [ramp.beta(s) for s in (0, 1000, 2000)] == [0.4, pytest.approx(0.6), 0.8]


def test_beta_anneals_over_beta_anneal_steps_however_long_the_run():
    """A 2,000-step run on a 10,000-step schedule (reducible-loss's 1M-frame rows on its 5M-frame
    schedule, scaled) stops a fifth of the way: 0.4 + 0.6 / 5 = 0.52 at its last step, where
    the default schedule would have reached 1. Pins the preset's 1M-step rows having annealed to
    1 instead of the source's 0.52."""
    short = make_loop("replay.beta_anneal_steps=10000", "train.total_env_steps=2000")
    assert short.beta(0) == 0.4
    assert [short.beta(s) for s in (1000, 2000)] == [pytest.approx(0.46), pytest.approx(0.52)]
    assert short.beta(10_000) == short.beta(20_000) == 1.0
    whole = make_loop("train.total_env_steps=2000")
    assert whole.beta(2000) == 1.0
    longer_run = make_loop("replay.beta_anneal_steps=1000", "train.total_env_steps=2000")
    assert longer_run.beta(500) == pytest.approx(0.7) and longer_run.beta(1000) == 1.0


@pytest.mark.parametrize("loss", ["huber", "mse"])
def test_sample_losses_are_the_update_s_per_sample_losses(loss):
    """|delta| -> the unweighted per-sample loss torch computes in the update, around Huber's
    kink at 1 too."""
    td = torch.tensor([0.0, 0.3, 0.999, 1.0, 1.5, 7.0])
    reference = (F.smooth_l1_loss if loss == "huber" else F.mse_loss)(
        td, torch.zeros_like(td), reduction="none"
    )
    np.testing.assert_allclose(sample_losses(td.numpy(), loss), reference.numpy(), rtol=1e-6)


def test_a_priority_from_the_loss_lands_on_the_sampled_slots(tmp_path):
    """Dopamine's PER: after one update, each sampled slot's priority is
    ``(L_i + eps) ** alpha`` with ``L_i`` the Huber loss of the |delta| a reference copy of the
    agent computes on the same batch (``alpha`` 0.5, ``eps`` 1e-10: ``sqrt(loss + 1e-10)``)."""
    config = cartpole_config(
        "train.total_env_steps=2000", "train.eval_interval=0", "train.final_eval_episodes=1",
        "replay.priority_from=loss", "replay.alpha=0.5", "replay.priority_eps=1e-10",
        "replay.td_error_clip=null",
    )  # fmt: skip
    trainer = Trainer(config, "cartpole")
    try:
        fill_with_random_play(trainer)  # real CartPole transitions
        memory_copy = make_memory(config.replay, trainer.spec, 0)
        memory_copy.load_state_dict(trainer.memory.state_dict())
        agent_copy = make_agent(config, trainer.spec, resolve_device("cpu"))
        agent_copy.load_state_dict(trainer.agent.state_dict())
        agent_copy.priority_signal = priority_signal("td_error")  # |delta|, to compute by hand
        trainer.loop.learn()
        batch = memory_copy.sample(config.train.batch_size, trainer.loop.beta(0))
        td_abs = agent_copy.learn(batch).td_abs.astype(np.float64)
        huber = np.where(td_abs < 1, 0.5 * td_abs**2, td_abs - 0.5)
        last = dict(zip(batch.indices.tolist(), huber.tolist(), strict=True))
        slots = np.array(sorted(last))
        expected = np.sqrt(np.array([last[s] for s in slots]) + 1e-10)
        np.testing.assert_allclose(trainer.memory.sampler.priorities(slots), expected, rtol=1e-6)
        # Not |delta| ** 0.5: the loss made them (the two differ for every delta but 0 and 2).
        by_td = dict(zip(batch.indices.tolist(), td_abs.tolist(), strict=True))
        from_td = np.sqrt(np.array([by_td[s] for s in slots]) + 1e-10)
        assert not np.allclose(trainer.memory.sampler.priorities(slots), from_td, rtol=1e-3)
    finally:
        trainer.close()


def test_an_init_for_a_user_s_network_is_one_config_line():
    with pytest.raises(ConfigError, match=r"agent\.init: must be 'torch' for a network from "):
        cartpole_config("agent.network=my_nets:mlp", "agent.init=xavier_uniform")


def test_a_local_file_comes_before_a_shipped_preset_of_its_name(tmp_path, monkeypatch):
    """Pins ``--config literature/x`` choosing the shipped preset over ``./literature/x.yaml``,
    where ``--config literature/x.yaml`` chose the local file: both now take the local one."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "literature").mkdir()
    mine = tmp_path / "literature" / "minatar_paper_dqn.yaml"
    mine.write_text("env:\n  id: CartPole-v1\n")
    assert resolve_config_path("literature/minatar_paper_dqn") == Path(
        "literature/minatar_paper_dqn.yaml"
    )
    mine.unlink()
    assert resolve_config_path("literature/minatar_paper_dqn").parent.name == "literature"
    assert resolve_config_path("literature/minatar_paper_dqn").is_absolute()
