"""Milliseconds per Atari learner update on CPU: a plain implementation against faster variants.

What is measured: one full Double-DQN update of a dueling Nature CNN at batch 32, as the Atari
path will run it: online forward on ``obs`` (with grad), online forward on ``next_obs`` (its argmax
picks the next action), target forward on ``next_obs`` (it evaluates that action), the
IS-weighted Huber loss, backward, and an Adam step (lr 6.25e-5, eps 1.5e-4). Inputs are uint8
``(32, 4, 84, 84)`` stacks, already torch tensors (the replay gather is not timed), scaled by
1/255 inside the network. The network (Mnih et al., 2015; Wang et al., 2016): conv 32 8x8 s4,
conv 64 4x4 s2, conv 64 3x3 s1, fc 512, then a value head (1) and an advantage head (6 actions)
on the shared fc layer, ``Q = V + A - mean(A)``.

Rows are one change against ``plain`` each (what the change buys on its own), then combinations.
``plain`` is the textbook code: separate forwards for ``obs`` and ``next_obs``, the target net's
parameters requiring grad and its forward (and the online ``next_obs`` forward) recorded by
autograd, the target detached afterwards, ``Adam``'s defaults (the single-tensor loop on CPU) and
``zero_grad()`` (``set_to_none=True``, torch's default since 2.0).

Timing: ``torch.set_num_threads(2)`` (unless a row says otherwise); each update is timed on its
own with ``perf_counter``; every variant first runs its warm-up updates (for ``torch.compile``, the
first call's time is reported as compile time), then the variants take turns in blocks of a few
updates, in rotating order, so that load from other processes on a shared machine hits all rows
alike. Cells are the median, p10 and p90 of ``--updates`` timed updates; speed-up is plain's
median over the row's median.

Numerics: every variant starts from the same initial weights and makes its first update on the
same batch. For each row the table gives ``|loss - plain loss|``, ``max |theta - plain theta|``
after that step and the worst tensor's relative L2 distance of its gradient to plain's, and says
whether loss and parameters are ``allclose(rtol=1e-5, atol=1e-5)`` to plain's (for scale: Adam's
first step moves every parameter by up to lr = 6.25e-5).

    .venv/bin/python benchmarks/learner.py            # ~3-5 minutes, most of it compiling
    .venv/bin/python benchmarks/learner.py --quick    # no torch.compile rows, 10 updates each
    .venv/bin/python benchmarks/learner.py --smoke    # seconds: batch 4, 2 updates each
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
import torch
from _common import (
    add_mode_options,
    command_line,
    fill_defaults,
    load_averages,
    machine_line,
    markdown_table,
    mode,
    progress_log,
    require_at_least,
    rotated,
)
from torch import nn
from torch.nn import functional as F

BATCH = 32
NUM_ACTIONS = 6  # Pong's minimal action set
STACK = 4
SCREEN = 84
GAMMA = 0.99
LR = 6.25e-5
ADAM_EPS = 1.5e-4
THREADS = 2
RTOL = ATOL = 1e-5


class NatureDuelingQ(nn.Module):
    """The Nature DQN torso with a dueling head on its fc layer; uint8 in, Q-values out.

    Args:
        num_actions: size of the advantage head.
        in_place_scale: scale with ``x.float().mul_(1/255)`` (one float buffer) instead of
            ``x.float() / 255`` (two); the results differ in the last bit.
    """

    def __init__(self, num_actions: int, in_place_scale: bool = False) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(STACK, 32, 8, stride=4)
        self.conv2 = nn.Conv2d(32, 64, 4, stride=2)
        self.conv3 = nn.Conv2d(64, 64, 3, stride=1)
        self.fc = nn.Linear(64 * 7 * 7, 512)
        self.value = nn.Linear(512, 1)
        self.advantage = nn.Linear(512, num_actions)
        self.in_place_scale = in_place_scale

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values ``(B, num_actions)`` for uint8 stacks ``(B, 4, 84, 84)``."""
        x = obs.float().mul_(1.0 / 255) if self.in_place_scale else obs.float() / 255
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.relu(self.conv3(x))
        x = F.relu(self.fc(x.flatten(1)))
        advantage = self.advantage(x)
        return self.value(x) + (advantage - advantage.mean(dim=1, keepdim=True))


class Batch(NamedTuple):
    """One sampled minibatch, as torch tensors on the CPU."""

    obs: torch.Tensor  # (B, 4, 84, 84) uint8
    actions: torch.Tensor  # (B,) int64
    rewards: torch.Tensor  # (B,) float32, clipped
    next_obs: torch.Tensor  # (B, 4, 84, 84) uint8
    terminated: torch.Tensor  # (B,) float32, 1.0 where the episode terminated
    weights: torch.Tensor  # (B,) float32, IS weights


def make_batch(rng: np.random.Generator, size: int = BATCH) -> Batch:
    """Random uint8 frames and random transition fields (the values do not change the cost)."""
    shape = (size, STACK, SCREEN, SCREEN)
    return Batch(
        obs=torch.from_numpy(rng.integers(0, 256, shape, dtype=np.uint8)),
        actions=torch.from_numpy(rng.integers(0, NUM_ACTIONS, size)),
        rewards=torch.from_numpy(rng.choice(np.float32([-1, 0, 1]), size)),
        next_obs=torch.from_numpy(rng.integers(0, 256, shape, dtype=np.uint8)),
        terminated=torch.from_numpy((rng.random(size) < 0.05).astype(np.float32)),
        weights=torch.from_numpy(rng.uniform(0.2, 1.0, size).astype(np.float32)),
    )


@dataclass(frozen=True)
class Variant:
    """One way to write the update; the defaults are ``plain``."""

    name: str
    # Online forward on cat(obs, next_obs) as one batch of 64 (with grad); target under no_grad.
    cat_online: bool = False
    # How the target side (online argmax on next_obs, target forward) runs: "graph" records it
    # with autograd and detaches the target (plain), "no_grad" or "inference_mode" do not.
    target_mode: str = "graph"
    channels_last: bool = False
    bf16: bool = False
    compile_mode: str | None = None  # torch.compile(model, mode=...) on both networks
    adam: str = "default"  # "default" (single-tensor loop on CPU), "foreach" or "fused"
    set_to_none: bool = True
    in_place_scale: bool = False
    threads: int = THREADS
    mkldnn: bool = True

    @property
    def fp32(self) -> bool:
        """Whether the variant computes in float32 throughout (so should match plain)."""
        return not self.bf16


def build_variants(compile_rows: bool, threads: int = THREADS) -> list[Variant]:
    """The rows, in table order; the ``torch.compile`` ones only with ``compile_rows``; ``threads``
    for every row but ``7c 1 thread``."""
    plain = Variant("1 plain", threads=threads)
    lean = replace(plain, target_mode="no_grad", adam="fused")
    rows = [
        plain,
        replace(plain, name="2 cat(obs, next_obs) online, target no_grad", cat_online=True),
        replace(plain, name="3 channels_last", channels_last=True),
    ]
    if compile_rows:
        rows += [
            replace(plain, name="4a torch.compile default", compile_mode="default"),
            replace(
                plain,
                name="4b torch.compile max-autotune-no-cudagraphs",
                compile_mode="max-autotune-no-cudagraphs",
            ),
        ]
    rows += [
        replace(plain, name="5a bf16 autocast", bf16=True),
        replace(plain, name="5b channels_last + bf16 autocast", channels_last=True, bf16=True),
        replace(plain, name="6a no_grad target side", target_mode="no_grad"),
        replace(plain, name="6b inference_mode target side", target_mode="inference_mode"),
        replace(plain, name="6c zero_grad(set_to_none=False)", set_to_none=False),
        replace(plain, name="6d Adam foreach=True", adam="foreach"),
        replace(plain, name="6e Adam fused=True", adam="fused"),
        replace(plain, name="7a uint8->float with in-place mul_(1/255)", in_place_scale=True),
        replace(plain, name="7b oneDNN (mkldnn) off", mkldnn=False),
        replace(plain, name="7c 1 thread", threads=1),
        replace(lean, name="8a lean = no_grad + fused Adam"),
        replace(lean, name="8b lean + channels_last", channels_last=True),
        replace(lean, name="8c lean + channels_last + bf16", channels_last=True, bf16=True),
    ]
    if compile_rows:
        rows.append(replace(lean, name="8d lean + torch.compile default", compile_mode="default"))
    return rows


@contextlib.contextmanager
def mkldnn_enabled(enabled: bool) -> Iterator[None]:
    """``torch.backends.mkldnn.flags`` that also works as a no-op when oneDNN stays on."""
    if enabled:
        yield
    else:
        with torch.backends.mkldnn.flags(enabled=False):
            yield


@dataclass
class Learner:
    """An online/target pair, its optimizer and the update written as ``variant`` says."""

    variant: Variant
    init_state: dict[str, torch.Tensor]
    online: nn.Module = field(init=False)
    target: nn.Module = field(init=False)
    optimizer: torch.optim.Optimizer = field(init=False)
    online_fn: Callable[[torch.Tensor], torch.Tensor] = field(init=False)
    target_fn: Callable[[torch.Tensor], torch.Tensor] = field(init=False)

    def __post_init__(self) -> None:
        v = self.variant
        self.online = NatureDuelingQ(NUM_ACTIONS, v.in_place_scale)
        self.online.load_state_dict(self.init_state)
        self.target = copy.deepcopy(self.online)  # plain keeps requires_grad=True, as deepcopy does
        if v.target_mode != "graph":
            self.target.requires_grad_(False)
        if v.channels_last:
            self.online.to(memory_format=torch.channels_last)
            self.target.to(memory_format=torch.channels_last)
        adam_kwargs = {"foreach": {"foreach": True}, "fused": {"fused": True}}.get(v.adam, {})
        self.optimizer = torch.optim.Adam(
            self.online.parameters(), lr=LR, eps=ADAM_EPS, **adam_kwargs
        )
        if v.compile_mode is None:
            self.online_fn, self.target_fn = self.online, self.target
        else:
            self.online_fn = torch.compile(self.online, mode=v.compile_mode)
            self.target_fn = torch.compile(self.target, mode=v.compile_mode)

    def _target_context(self) -> contextlib.AbstractContextManager:
        mode = self.variant.target_mode
        if mode == "no_grad":
            return torch.no_grad()
        if mode == "inference_mode":
            return torch.inference_mode()
        return contextlib.nullcontext()

    def update(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """One gradient step; returns the loss and the |TD errors| (PER's new priorities)."""
        v = self.variant
        obs, next_obs = batch.obs, batch.next_obs
        if v.channels_last:
            obs = obs.contiguous(memory_format=torch.channels_last)
            next_obs = next_obs.contiguous(memory_format=torch.channels_last)
        autocast = (
            torch.autocast("cpu", dtype=torch.bfloat16) if v.bf16 else contextlib.nullcontext()
        )
        with autocast:
            if v.cat_online:
                q_all = self.online_fn(torch.cat((obs, next_obs)))
                size = obs.shape[0]
                q, next_q_online = q_all[:size], q_all[size:].detach()
                with torch.no_grad():
                    next_q_target = self.target_fn(next_obs)
            else:
                q = self.online_fn(obs)
                with self._target_context():
                    next_q_online = self.online_fn(next_obs)
                    next_q_target = self.target_fn(next_obs)
        with self._target_context():
            # Double DQN (van Hasselt et al., 2016): the online net picks, the target evaluates.
            next_action = next_q_online.argmax(dim=1, keepdim=True)
            next_value = next_q_target.gather(1, next_action).squeeze(1).float()
            targets = batch.rewards + GAMMA * (1.0 - batch.terminated) * next_value
        if v.target_mode == "inference_mode":
            targets = targets.clone()  # inference tensors cannot be saved for backward
        else:
            targets = targets.detach()
        q_taken = q.gather(1, batch.actions.unsqueeze(1)).squeeze(1).float()
        loss = (batch.weights * F.smooth_l1_loss(q_taken, targets, reduction="none")).mean()
        self.optimizer.zero_grad(set_to_none=v.set_to_none)
        loss.backward()
        self.optimizer.step()
        return loss.detach(), (targets - q_taken.detach()).abs()

    def timed_update(self, batch: Batch) -> float:
        """Seconds one update takes, under the variant's thread count and oneDNN setting."""
        previous = torch.get_num_threads()
        torch.set_num_threads(self.variant.threads)
        try:
            with mkldnn_enabled(self.variant.mkldnn):
                start = time.perf_counter()
                self.update(batch)
                return time.perf_counter() - start
        finally:
            torch.set_num_threads(previous)


@dataclass
class Row:
    """What one variant measured."""

    variant: Variant
    learner: Learner | None = None
    first_call_s: float = 0.0
    loss: float = float("nan")
    params: list[torch.Tensor] = field(default_factory=list)
    grads: list[torch.Tensor] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    error: str | None = None


def first_update(row: Row, check_batch: Batch, init_state: dict[str, torch.Tensor]) -> None:
    """Builds the learner and makes its first update on the numerics batch (compiles, if any)."""
    previous = torch.get_num_threads()
    try:
        row.learner = Learner(row.variant, init_state)
        torch.set_num_threads(row.variant.threads)
        with mkldnn_enabled(row.variant.mkldnn):
            start = time.perf_counter()
            loss, _ = row.learner.update(check_batch)
            row.first_call_s = time.perf_counter() - start
        row.loss = float(loss)
        online = list(row.learner.online.parameters())
        row.params = [p.detach().clone() for p in online]
        row.grads = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in online]
    except Exception as exc:  # a variant that cannot run here is reported, not fatal
        row.learner = None
        row.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    finally:
        torch.set_num_threads(previous)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (linear interpolation)."""
    return float(np.percentile(values, q))


def render(rows: list[Row], args: argparse.Namespace) -> str:
    """The table, the numerics verdicts, machine and command."""
    plain = rows[0]
    plain_ms = percentile(plain.times, 50) * 1e3
    table = []
    for row in rows:
        v = row.variant
        if row.error is not None or not row.times:
            table.append([v.name, "failed", "", "", "", "", "", "", row.error or "no timings"])
            continue
        med, p10, p90 = (percentile(row.times, q) * 1e3 for q in (50, 10, 90))
        loss_diff = abs(row.loss - plain.loss)
        param_diff = max(
            float((a - b).abs().max()) for a, b in zip(row.params, plain.params, strict=True)
        )
        close = abs(row.loss - plain.loss) <= ATOL + RTOL * abs(plain.loss) and all(
            torch.allclose(a, b, rtol=RTOL, atol=ATOL)
            for a, b in zip(row.params, plain.params, strict=True)
        )
        # Relative L2 error of the first update's gradients, worst tensor: the scale-free view of
        # how far apart two fp32 orders of summation land (Adam's first step divides by |g|, so a
        # parameter whose gradient is tiny can move by up to lr from rounding noise alone).
        grad_err = max(
            float((a - b).norm() / b.norm().clamp_min(1e-30))
            for a, b in zip(row.grads, plain.grads, strict=True)
        )
        exact = row.loss == plain.loss and all(
            torch.equal(a, b) for a, b in zip(row.params, plain.params, strict=True)
        )
        verdict = "bit-exact" if exact else ("allclose" if close else "NOT close")
        if not v.fp32:
            verdict += " (bf16)"
        notes = f"compile {row.first_call_s:.1f} s" if v.compile_mode else ""
        table.append(
            [
                v.name,
                f"{med:.1f}",
                f"{p10:.1f}",
                f"{p90:.1f}",
                f"{plain_ms / med:.2f}x",
                f"{loss_diff:.1e}",
                f"{param_diff:.1e}",
                f"{grad_err:.1e}",
                f"{verdict}{'; ' + notes if notes else ''}",
            ]
        )
    headers = [
        "variant",
        "ms median",
        "p10",
        "p90",
        "speed-up",
        "|dloss|",
        "max |dtheta|",
        "grad rel. err",
        "numerics vs plain",
    ]
    versions = {"torch": torch.__version__, "numpy": np.__version__}
    return "\n".join(
        [
            f"Double-DQN update, dueling Nature CNN, batch {args.batch} of uint8 (4, 84, 84), "
            f"{NUM_ACTIONS} actions, Adam lr {LR} eps {ADAM_EPS}; {args.updates} timed updates "
            f"per row after {args.warmup} warm-up, torch threads {args.threads} unless stated.",
            "",
            markdown_table(headers, table),
            "",
            f"Numerics: one update from the same weights on the same batch; allclose = "
            f"rtol {RTOL:g}, atol {ATOL:g} on the loss and every parameter.",
            f"Machine: {machine_line(versions)}; CPU capability "
            f"{torch.backends.cpu.get_cpu_capability()}; load average at the end "
            f"{load_averages()}.",
            f"Command: `{command_line()}`",
        ]
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options; ``--quick`` drops the torch.compile rows, ``--smoke`` shrinks all."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_mode_options(parser, quick="10 updates per row, no torch.compile rows")
    parser.add_argument("--updates", type=int, help="timed updates per row (40, quick 10, smoke 2)")
    parser.add_argument("--warmup", type=int, help="untimed updates per row (3, smoke 1)")
    parser.add_argument("--block", type=int, help="updates per turn in the rotation (5, smoke 1)")
    parser.add_argument("--batch", type=int, help=f"batch size ({BATCH}, smoke 4)")
    parser.add_argument(
        "--threads", type=int, help=f"torch threads of every row but 7c ({THREADS}, smoke 1)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    fill_defaults(
        args,
        {
            "updates": (40, 10, 2),
            "warmup": (3, 3, 1),
            "block": (5, 5, 1),
            "batch": (BATCH, BATCH, 4),
            "threads": (THREADS, THREADS, 1),
        },
    )
    require_at_least(parser, args, 1, "updates", "block", "batch", "threads")
    require_at_least(parser, args, 0, "warmup")
    return args


def main(argv: list[str] | None = None) -> None:
    """Builds every variant, checks its first update, times the rest, prints the report."""
    args = parse_args(argv)
    log = progress_log()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    init_state = copy.deepcopy(NatureDuelingQ(NUM_ACTIONS).state_dict())
    check_batch = make_batch(rng, args.batch)
    batches = [make_batch(rng, args.batch) for _ in range(4)]
    rows = [Row(v) for v in build_variants(mode(args) == "full", args.threads)]
    for row in rows:
        first_update(row, check_batch, init_state)
        if row.learner is not None:
            for i in range(args.warmup):
                row.learner.timed_update(batches[i % len(batches)])
        log(f"{row.variant.name}: first update {row.first_call_s:.2f} s ({row.error or 'ok'})")
    live = [row for row in rows if row.learner is not None]
    turn = 0
    while any(len(row.times) < args.updates for row in live):
        for row in rotated(live, turn):
            assert row.learner is not None  # for the type checker: `live` filters them
            for _ in range(min(args.block, args.updates - len(row.times))):
                batch = batches[len(row.times) % len(batches)]
                row.times.append(row.learner.timed_update(batch))
        turn += 1
    log("timing done")
    print(render(rows, args))


if __name__ == "__main__":
    main()
