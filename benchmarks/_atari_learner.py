"""Section 3 of ``benchmarks/atari.py``, the learner: ``DQNAgent.learn`` on learner.py's Atari
batches (channels_last off and on, fp32 and bf16, at 1 and 2 torch threads) against the ``plain``
update of ``benchmarks/learner.py``, rows interleaved; and the channels-last layout of one batch,
the agent's way and torch's.

Not a benchmark on its own: ``atari.py`` runs it (``--sections learner``), and its docstring says
what is measured.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from _common import markdown_table, median, mode, rotated
from learner import BATCH, NUM_ACTIONS, SCREEN, STACK, Learner, NatureDuelingQ, Variant, make_batch

from per_dqn.agent import DQNAgent
from per_dqn.agent.layout import stack_nhwc
from per_dqn.memory import Batch

THREAD_COUNTS = (1, 2)  # smoke: 1 only
LEARNER_WARM_UP = 3  # untimed updates per row (smoke 1)
BLOCK = 5

# (channels_last, precision) of the timed DQNAgent rows.
LEARNER_VARIANTS = [(False, "fp32"), (True, "fp32"), (True, "bf16")]


def numpy_batch(batch: Any) -> Batch:
    """learner.py's torch batch as the numpy ``Batch`` a per_dqn memory returns."""
    size = batch.actions.shape[0]
    return Batch(
        obs=batch.obs.numpy(),
        actions=batch.actions.numpy(),
        rewards=batch.rewards.numpy(),
        next_obs=batch.next_obs.numpy(),
        terminated=batch.terminated.numpy() > 0.5,
        indices=np.arange(size),
        weights=batch.weights.numpy(),
        n_steps=np.ones(size, dtype=np.uint8),
    )


def make_agent(channels_last: bool, precision: str = "fp32") -> DQNAgent:
    """The Atari agent, sized like learner.py's network (6 actions), without gradient clipping."""
    return DQNAgent(
        obs_shape=(STACK, SCREEN, SCREEN),
        num_actions=NUM_ACTIONS,
        hidden_sizes=[512],
        dueling=True,
        double=True,
        gamma=0.99,
        learning_rate=6.25e-5,
        adam_eps=1.5e-4,
        loss="huber",
        grad_clip_norm=None,
        target_update_interval=1_000_000,
        tau=1.0,
        device=torch.device("cpu"),
        network="nature_cnn",
        channels_last=channels_last,
        precision=precision,
    )


@dataclass
class LearnerRow:
    """One timed learner: a label, its thread count, one update on batch ``i``."""

    label: str
    threads: int
    update: Callable[[int], object]
    plain: bool = False
    times: list[float] = field(default_factory=list)


def measure_learner(args: argparse.Namespace, log: Callable[[str], None]) -> str:
    """Section 3: ``DQNAgent.learn`` variants against learner.py's plain update."""
    previous_threads = torch.get_num_threads()
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    torch_batches = [make_batch(rng) for _ in range(4)]
    np_batches = [numpy_batch(b) for b in torch_batches]
    init_state = NatureDuelingQ(NUM_ACTIONS).state_dict()
    smoke = mode(args) == "smoke"
    thread_counts = THREAD_COUNTS[:1] if smoke else THREAD_COUNTS
    warm_ups = 1 if smoke else LEARNER_WARM_UP
    rows: list[LearnerRow] = []
    for threads in thread_counts:
        plain = Learner(replace(Variant("plain"), threads=threads), init_state)
        rows.append(
            LearnerRow(
                f"plain (benchmarks/learner.py), {threads} thread(s)",
                threads,
                lambda i, p=plain: p.update(torch_batches[i]),
                plain=True,
            )
        )
    # (channels_last, precision) -> agent, all from the same weights.
    agents = {key: make_agent(*key) for key in LEARNER_VARIANTS}
    reference = agents[LEARNER_VARIANTS[0]]
    for agent in agents.values():
        agent.online.load_state_dict(reference.online.state_dict())
        agent.target.load_state_dict(reference.target.state_dict())
    first_loss = {key: agent.learn(np_batches[0]).metrics["loss"] for key, agent in agents.items()}
    for (cl, precision), agent in agents.items():
        for threads in thread_counts:
            rows.append(
                LearnerRow(
                    f"DQNAgent.learn, channels_last={cl}, {precision}, {threads} thread(s)",
                    threads,
                    lambda i, a=agent: a.learn(np_batches[i]),
                )
            )
    try:
        for row in rows:  # warm-up, untimed
            torch.set_num_threads(row.threads)
            for i in range(warm_ups):
                row.update(i % len(torch_batches))
        turn = 0
        while any(len(row.times) < args.updates for row in rows):
            for row in rotated(rows, turn):
                torch.set_num_threads(row.threads)
                for _ in range(min(BLOCK, args.updates - len(row.times))):
                    i = len(row.times) % len(torch_batches)
                    start = time.perf_counter()
                    row.update(i)
                    row.times.append(time.perf_counter() - start)
            turn += 1
    finally:
        torch.set_num_threads(previous_threads)
    log("learner: timed")
    layout_calls = 5 if smoke else 50
    layout_ms = measure_nhwc(np_batches[0], layout_calls)
    plain_ms = {row.threads: median(row.times) * 1e3 for row in rows if row.plain}
    most = max(thread_counts)
    table = []
    for row in rows:
        med, p10, p90 = (float(np.percentile(row.times, q)) * 1e3 for q in (50, 10, 90))
        table.append(
            [
                row.label,
                f"{med:.1f}",
                f"{p10:.1f}",
                f"{p90:.1f}",
                f"{plain_ms[row.threads] / med:.2f}x",
                f"{plain_ms[most] / med:.2f}x",
            ]
        )
    headers = [
        "learner",
        "ms median",
        "p10",
        "p90",
        "vs plain, same threads",
        f"vs plain, {most} threads",
    ]
    return "\n".join(
        [
            "### 3. Learner update: Double-DQN, dueling Nature CNN, batch 32 uint8 (4, 84, 84), "
            f"{NUM_ACTIONS} actions",
            "",
            f"{args.updates} timed updates per row after {warm_ups} warm-up, rows interleaved in "
            f"blocks of {BLOCK}. plain takes ready torch tensors; DQNAgent.learn takes the numpy "
            "batch a memory returns.",
            "",
            markdown_table(headers, table),
            "",
            "- DQNAgent's first update from the same weights and batch: loss "
            + ", ".join(
                f"{loss:.6g} ({'channels_last' if cl else 'NCHW'}, {precision})"
                for (cl, precision), loss in first_loss.items()
            )
            + ". bf16 runs the forward passes under bfloat16 autocast (`agent.precision`); its "
            "speed depends on the CPU's bf16 units (AMX, AVX512-BF16).",
            f"- s and s' of one batch ({2 * BATCH} uint8 stacks) to NHWC, 1 thread: "
            f"per_dqn.agent.layout.stack_nhwc {layout_ms['stack_nhwc']:.2f} ms, torch's "
            f"`.contiguous(memory_format=torch.channels_last)` {layout_ms['torch']:.2f} ms "
            f"(median of {layout_calls} each).",
        ]
    )


def measure_nhwc(batch: Batch, calls: int = 50) -> dict[str, float]:
    """Milliseconds to lay one batch's s and s' out channels-last, the agent's way and torch's."""
    both = torch.from_numpy(np.concatenate((batch.obs, batch.next_obs)))
    ways = {
        "stack_nhwc": lambda: stack_nhwc(batch.obs, batch.next_obs),
        "torch": lambda: both.contiguous(memory_format=torch.channels_last),
    }
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(calls):
            for name, way in ways.items():
                start = time.perf_counter()
                way()
                times[name].append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(previous_threads)
    return {name: median(t) * 1e3 for name, t in times.items()}
