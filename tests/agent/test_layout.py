"""The host-side NHWC interleave against numpy's transpose, and the agent path that uses it."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from per_dqn.agent import DQNAgent
from per_dqn.agent.layout import can_pack, stack_nhwc
from per_dqn.memory import Batch


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(1, 5),
    height=st.integers(1, 9),
    width=st.integers(1, 9),
    seed=st.integers(0, 2**32 - 1),
)
def test_stack_nhwc_is_the_transposed_concatenation(size, height, width, seed):
    rng = np.random.default_rng(seed)
    first = rng.integers(0, 256, (size, 4, height, width), dtype=np.uint8)
    second = rng.integers(0, 256, (size, 4, height, width), dtype=np.uint8)
    out = stack_nhwc(first, second)
    assert out.shape == (2 * size, height, width, 4) and out.dtype == np.uint8
    expected = np.concatenate((first, second)).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(out, expected)
    # As torch sees it: the NCHW batch, laid out channels_last.
    as_torch = torch.from_numpy(out).permute(0, 3, 1, 2)
    assert as_torch.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(as_torch, torch.from_numpy(np.concatenate((first, second))))


def test_can_pack_takes_only_contiguous_uint8_four_stacks():
    stacks = np.zeros((2, 4, 6, 6), np.uint8)
    assert can_pack(stacks)
    assert not can_pack(stacks.astype(np.float32))
    assert not can_pack(np.zeros((2, 3, 6, 6), np.uint8))
    assert not can_pack(np.zeros((2, 4, 36), np.uint8))
    assert not can_pack(np.zeros((2, 6, 6, 4), np.uint8).transpose(0, 3, 1, 2))


def test_channels_last_agent_learns_the_same_from_packed_and_torch_converted_batches():
    """The host interleave changes how the batch reaches the CNN, never what it computes."""

    def agent() -> DQNAgent:
        torch.manual_seed(0)
        return DQNAgent(
            obs_shape=(4, 40, 40), num_actions=3, hidden_sizes=(32,), dueling=True, double=True,
            gamma=0.99, learning_rate=1e-3, adam_eps=1.5e-4, loss="huber", grad_clip_norm=None,
            target_update_interval=2, tau=1.0, device=torch.device("cpu"), channels_last=True,
        )  # fmt: skip

    rng = np.random.default_rng(1)
    batches = [
        Batch(
            obs=rng.integers(0, 256, (8, 4, 40, 40), dtype=np.uint8),
            actions=rng.integers(0, 3, 8),
            rewards=rng.normal(size=8).astype(np.float32),
            next_obs=rng.integers(0, 256, (8, 4, 40, 40), dtype=np.uint8),
            terminated=rng.random(8) < 0.2,
            indices=np.arange(8),
            weights=rng.uniform(0.5, 1.0, 8).astype(np.float32),
            n_steps=np.ones(8, np.uint8),
        )
        for _ in range(3)
    ]
    packed, converted = agent(), agent()
    assert packed._nhwc_batches
    converted._nhwc_batches = False
    for batch in batches:
        a, b = packed.learn(batch), converted.learn(batch)
        np.testing.assert_array_equal(a.td_abs, b.td_abs)
        assert a.metrics == b.metrics
    for p, q in zip(packed.online.parameters(), converted.online.parameters(), strict=True):
        assert torch.equal(p, q)
