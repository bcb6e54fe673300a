"""The published setups' presets (configs/literature/, issue 25), each key against a table of its
source's values, written here from the sources themselves (repository, file and line at the
commit each preset names), not from the presets."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from per_dqn.config import load_config, resolve_config_path, shipped_config_names

# kenjyoung/MinAtar examples/dqn.py at 4241f24685622cfb52f843cab9bbcf385a53484a.
MINATAR_PAPER = {
    "env.full_action_space": True,  # num_actions() of the game: six (dqn.py:269)
    "env.clip_rewards": False,  # dqn.py:237
    "agent.network": "minatar_cnn",
    "agent.conv_padding": "valid",  # Conv2d(in, 16, 3, stride=1) (dqn.py:72)
    "agent.hidden_sizes": (128,),  # dqn.py:80
    "agent.init": "torch",
    "agent.dueling": False,
    "agent.double": False,  # dqn.py:228-237
    "agent.n_step": 1,
    "agent.gamma": 0.99,  # dqn.py:47
    "agent.optimizer": "rmsprop",  # dqn.py:282
    "agent.learning_rate": 0.00025,  # dqn.py:44
    "agent.rmsprop_alpha": 0.95,  # dqn.py:45
    "agent.rmsprop_eps": 0.01,  # dqn.py:46
    "agent.rmsprop_centered": True,  # dqn.py:282
    "agent.loss": "huber",  # dqn.py:240
    "agent.grad_clip_norm": None,
    "agent.target_update_interval": 1000,  # dqn.py:38, in gradient updates (355-360)
    "agent.tau": 1.0,
    "replay.kind": "uniform",
    "replay.capacity": 100_000,  # dqn.py:37
    "train.total_env_steps": 5_000_000,  # dqn.py:40
    "train.learning_starts": 5000,  # dqn.py:42
    "train.batch_size": 32,  # dqn.py:36
    "train.replay_period": 1,  # dqn.py:39
    "train.gradient_steps": 1,
    "train.epsilon_start": 1.0,  # EPSILON (dqn.py:48)
    "train.epsilon_end": 0.1,  # dqn.py:43
    "train.epsilon_decay_steps": 100_000,  # FIRST_N_FRAMES (dqn.py:41)
    "train.epsilon_decay_from": "learning_starts",  # dqn.py:170-171
}

# JohanSamir/revisiting_rainbow at 7cd2bc6f64d08ebc2233d93210063cc64d2598a7,
# Configs/dqn_breakout.gin, on dopamine-rl 3.1.10.
DOPAMINE = {
    "env.full_action_space": True,  # minatar_env.py:21-22
    "env.clip_rewards": True,  # Runner(clip_rewards=True) (Dopamine 3.1.10)
    "agent.network": "minatar_cnn",
    "agent.conv_padding": "same",  # networks_new.py:90-95
    "agent.hidden_sizes": (),  # hidden_layer 0 (gin:38)
    "agent.init": "xavier_uniform",  # gin:33-36
    "agent.dueling": False,  # gin:31
    "agent.double": False,  # target_opt 0 (gin:29)
    "agent.n_step": 1,  # gin:17
    "agent.gamma": 0.99,  # gin:16
    "agent.optimizer": "adam",  # gin:22
    "agent.learning_rate": 0.00025,  # gin:45
    "agent.adam_eps": 3.125e-4,  # gin:46
    "agent.loss": "mse",  # mse_inf True (gin:30)
    "agent.grad_clip_norm": None,
    "agent.target_update_interval": 250,  # 1000 env steps / update_period 4 (gin:19-20)
    "agent.tau": 1.0,
    "replay.kind": "uniform",  # gin:28
    "replay.capacity": 100_000,  # gin:55
    "train.total_env_steps": 10_000_000,  # 10 x 1M (gin:51-52)
    "train.learning_starts": 1000,  # gin:18
    "train.batch_size": 32,  # gin:56
    "train.replay_period": 4,  # gin:19
    "train.gradient_steps": 1,
    "train.epsilon_start": 1.0,
    "train.epsilon_end": 0.01,  # Dopamine 3.1.10 dqn_agent.py:154-157
    "train.epsilon_decay_steps": 250_000,  # same lines
    "train.epsilon_decay_from": "learning_starts",  # dqn_agent.py:219-221
}

# Dopamine's PER (revisiting_rainbow Agents/dqn_agent_new.py:297-307, 327-336).
DOPAMINE_PER = {
    **DOPAMINE,
    "replay.kind": "proportional",
    "replay.priority_from": "loss",  # sqrt(loss + 1e-10)
    "replay.alpha": 0.5,
    "replay.priority_eps": 1e-10,
    "replay.td_error_clip": None,
    "replay.uniform_mix": 0.0,
    "replay.beta0": 0.5,  # 1 / sqrt(P(i) + 1e-10)
    "replay.beta_end": 0.5,
    "replay.weight_normalization": "batch",  # over the batch's largest
}

# shivakanthsujit/reducible-loss at 5f640239aed270598d3efc2fa8356febbe3ce326,
# MinAtar/examples/per_dqn.py and per_buffer.py.
REDUCIBLE_LOSS_PER = {
    **MINATAR_PAPER,
    "replay.kind": "proportional",
    "replay.priority_from": "loss",  # the per-sample Huber loss (per_dqn.py:151, 286-290)
    "replay.alpha": 0.6,  # per_dqn.py:36
    "replay.priority_eps": 1e-5,  # per_dqn.py:38
    "replay.td_error_clip": None,
    "replay.uniform_mix": 0.0,
    "replay.beta0": 0.4,  # per_dqn.py:37
    "replay.beta_end": 1.0,  # per_dqn.py:255, 276-281
    "replay.beta_anneal_steps": 5_000_000,  # NUM_FRAMES (per_dqn.py:26, 255)
    "replay.weight_normalization": "batch",  # per_buffer.py:228-235
}

# The same repository and commit, MinAtar/examples/relo_dqn.py (ReLo) and per_buffer.py.
REDUCIBLE_LOSS_RELO = {
    **MINATAR_PAPER,
    "replay.kind": "relo",  # ReLU(L_online - L_target) as the priority (relo_dqn.py:164-167, 180)
    "replay.capacity": 100_000,  # REPLAY_BUFFER_SIZE (relo_dqn.py:23)
    "replay.alpha": 0.6,  # PER_ALPHA (relo_dqn.py:37)
    "replay.priority_eps": 1e-5,  # PER_EPS (relo_dqn.py:39; per_buffer.py:239)
    "replay.td_error_clip": None,
    "replay.uniform_mix": 0.0,
    "replay.beta0": 0.4,  # PER_BETA (relo_dqn.py:38)
    "replay.beta_end": 1.0,  # min(beta + increase, 1) (relo_dqn.py:313-315)
    "replay.beta_anneal_steps": 5_000_000,  # (1 - PER_BETA) / (NUM_FRAMES - ...) (relo_dqn.py:288)
    "replay.weight_normalization": "batch",  # per_buffer.py:228-235
    "agent.target_update_interval": 1000,  # TARGET_NETWORK_UPDATE_FREQ (relo_dqn.py:24, 326-331)
    "agent.learning_rate": 0.00025,  # STEP_SIZE (relo_dqn.py:31)
    "train.total_env_steps": 5_000_000,  # NUM_FRAMES (relo_dqn.py:27)
    "train.learning_starts": 5000,  # REPLAY_START_SIZE (relo_dqn.py:29, 97)
}

PRESETS = {
    "literature/minatar_paper_dqn.yaml": MINATAR_PAPER,
    "literature/dopamine_minatar_dqn.yaml": DOPAMINE,
    "literature/dopamine_minatar_dqn_per.yaml": DOPAMINE_PER,
    "literature/reducible_loss_minatar_per.yaml": REDUCIBLE_LOSS_PER,
    "literature/reducible_loss_minatar_relo.yaml": REDUCIBLE_LOSS_RELO,
}

# Keys a preset may set that no source has: the game, this tool's greedy evaluations, its logs,
# checkpoints, seed and device.
TOOL_KEYS = {"env.id", "env.num_envs", "train.log_interval", "run.seed", "run.device"}
TOOL_PREFIXES = ("train.eval_", "train.final_eval_", "checkpoint.")


def flat(mapping: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in mapping.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_the_presets_ship_and_resolve_by_name():
    names = [n for n in shipped_config_names() if n.startswith("literature/")]
    assert names == sorted(PRESETS)
    for name in PRESETS:
        assert resolve_config_path(name.removesuffix(".yaml")).name == Path(name).name


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_key_is_its_source_s_value(name):
    """Each key the source sets, in the resolved config, is the source's value; and the preset
    file sets nothing but those keys and this tool's own (evaluation, logging, checkpoints)."""
    path = resolve_config_path(name)
    config = flat(load_config(path).model_dump())
    table = PRESETS[name]
    wrong = {key: (config[key], want) for key, want in table.items() if config[key] != want}
    assert not wrong, f"{name}: (preset, source) differ: {wrong}"
    written = flat(yaml.safe_load(path.read_text()))
    extra = {
        key for key in written
        if key not in table and key not in TOOL_KEYS and not key.startswith(TOOL_PREFIXES)
    }  # fmt: skip
    assert not extra, f"{name} sets keys no source table holds: {sorted(extra)}"
    assert config["env.id"].startswith("MinAtar/")
