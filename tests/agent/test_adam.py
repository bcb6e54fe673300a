"""``FusedAdam`` against its reference, ``torch.optim.Adam(fused=True)``: the same weights bit for
bit, the same state dict (down to torch.save's bytes), checkpoints that load either way, and no
import of ``torch._dynamo``, the 1.1 s it exists to save."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from support import assert_same_modules, optimizer_steps, saved_bytes, tiny_network

from per_dqn.agent.adam import FusedAdam

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bit_identical_to_torch_fused_adam_step_by_step():
    ours_model, ref_model = tiny_network(), tiny_network()
    ours = FusedAdam(ours_model.parameters(), lr=2e-3, eps=1e-6)
    ref = torch.optim.Adam(ref_model.parameters(), lr=2e-3, eps=1e-6, fused=True)
    for seed in range(25):
        optimizer_steps(ours_model, ours, 1, seed)
        optimizer_steps(ref_model, ref, 1, seed)
        assert_same_modules(ours_model, ref_model)
    assert saved_bytes(ours.state_dict()) == saved_bytes(ref.state_dict())
    # A changed step size (DQNAgent.set_learning_rate) is honoured the same way.
    ours.param_groups[0]["lr"] = ref.param_groups[0]["lr"] = 5e-4
    optimizer_steps(ours_model, ours, 5)
    optimizer_steps(ref_model, ref, 5)
    assert_same_modules(ours_model, ref_model)


def test_state_dicts_load_either_way_and_continue_identically():
    """A checkpoint written before FusedAdam (torch.optim.Adam's state dict) resumes the same
    run, and one written with it loads into torch.optim.Adam."""
    base = tiny_network()
    ref = torch.optim.Adam(base.parameters(), lr=1e-3, fused=True)
    optimizer_steps(base, ref, 7)
    saved = copy.deepcopy(ref.state_dict())

    resumed = copy.deepcopy(base)
    ours = FusedAdam(resumed.parameters(), lr=1e-3)
    ours.load_state_dict(saved)
    assert saved_bytes(ours.state_dict()) == saved_bytes(ref.state_dict())
    optimizer_steps(base, ref, 5, seed=9)
    optimizer_steps(resumed, ours, 5, seed=9)
    assert_same_modules(base, resumed)

    back = copy.deepcopy(resumed)
    torch_again = torch.optim.Adam(back.parameters(), lr=1e-3, fused=True)
    torch_again.load_state_dict(copy.deepcopy(ours.state_dict()))
    optimizer_steps(resumed, ours, 3, seed=11)
    optimizer_steps(back, torch_again, 3, seed=11)
    assert_same_modules(back, resumed)


def test_a_state_dict_of_another_network_is_refused():
    ours = FusedAdam(tiny_network().parameters())
    other = torch.nn.Linear(4, 2)
    ref = torch.optim.Adam(other.parameters(), fused=True)
    optimizer_steps(torch.nn.Sequential(other, torch.nn.Linear(2, 2)), ref, 1)
    with pytest.raises(
        ValueError, match="parameter groups of sizes \\[2\\], this optimizer one of 4"
    ):
        ours.load_state_dict(ref.state_dict())
    with pytest.raises(ValueError, match="`lr` must be >= 0, got -1"):
        FusedAdam(tiny_network().parameters(), lr=-1)
    with pytest.raises(ValueError, match="at least one parameter"):
        FusedAdam([])


def test_an_agent_s_update_does_not_import_torch_dynamo():
    """Issue 13, part 3, item 7: a CartPole run spent 1.1 s of its ~4 s start importing
    `torch._dynamo`, which any `torch.optim` optimizer imports on construction. Building the
    agent and learning must not import it (in a fresh process: this one may have it already)."""
    code = """
import sys
import numpy as np
import torch
from per_dqn.agent import DQNAgent
from per_dqn.memory import Batch
agent = DQNAgent(obs_shape=(4,), num_actions=2, hidden_sizes=(8,), dueling=True, double=True,
                 gamma=0.99, learning_rate=1e-3, adam_eps=1e-8, loss="huber", grad_clip_norm=10.0,
                 target_update_interval=1, tau=0.5, device=torch.device("cpu"))
n = 8
batch = Batch(obs=np.ones((n, 4), np.float32), actions=np.zeros(n, np.int64),
              rewards=np.ones(n, np.float32), next_obs=np.ones((n, 4), np.float32),
              terminated=np.zeros(n, np.bool_), n_steps=np.ones(n, np.uint8),
              weights=np.ones(n, np.float32), indices=np.arange(n))
agent.learn(batch)
agent.optimizer.load_state_dict(agent.optimizer.state_dict())
print("torch._dynamo" in sys.modules)
"""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "False\n"
