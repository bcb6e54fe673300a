"""What a run will hold in memory, worked out from its config before anything is allocated.

``per-dqn plan`` prints it; ``per-dqn train`` refuses a config whose replay memory cannot fit in
the machine's available RAM (one line, exit 2) instead of dying of OOM hours into the run. An
allocation that fails anyway (a process limited below the RAM, networks too wide) is turned into
one line by ``allocation_failure``.
"""

from __future__ import annotations

import math
import re
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from per_dqn.config import Config
from per_dqn.config.messages import one_line
from per_dqn.envs.make import EnvSpec, describe, make_eval_env
from per_dqn.logs.console import gib
from per_dqn.memory import planned_nbytes
from per_dqn.memory.bits import initial_pool_entries, link_dtype
from per_dqn.rundir.readback import available_ram_bytes
from per_dqn.training.build import uses_frame_storage
from per_dqn.training.health import ReplayHealth

# Resident memory of a training process apart from the replay memory (Python, torch, the
# networks and optimiser, the envs, batches): `benchmarks/atari.py` reports the measured figure.
PROCESS_OVERHEAD_BYTES = 1 << 30


@dataclass(frozen=True)
class MemoryPlan:
    """The replay memory's footprint against the machine's RAM.

    Attributes:
        kind: the replay kind.
        capacity: transitions.
        obs_shape: one observation's shape.
        dedup_frames: whether frames are stored once.
        parts: bytes by part (``observations``, ``fields``, ``index``, ``total``).
        available_bytes: RAM available now (None where the platform does not say).
        bit_packed: bool observations in a ``BitStorage`` (packed, next obs shared).
        checkpoints_kept: the checkpoints holding the memory a run keeps on disk
            (``checkpoint.keep_last``); None where its checkpoints hold no memory.
    """

    kind: str
    capacity: int
    obs_shape: tuple[int, ...]
    dedup_frames: bool
    parts: dict[str, int]
    available_bytes: int | None
    bit_packed: bool = False
    checkpoints_kept: int | None = None

    @property
    def bytes_per_transition(self) -> float:
        """The memory's bytes divided by its capacity."""
        return self.parts["total"] / self.capacity

    @property
    def checkpoint_bytes(self) -> int:
        """About what a checkpoint's memory part takes on disk once the memory is full: its
        arrays and priority index, and the PER health panel's 24 bytes a slot (the networks and
        the optimiser aside). Until then it is sized to the transitions held."""
        return self.parts["total"] + ReplayHealth.SLOT_BYTES * self.capacity

    @property
    def needed_bytes(self) -> int:
        """The memory plus the rest of a training process."""
        return self.parts["total"] + PROCESS_OVERHEAD_BYTES

    @property
    def fits(self) -> bool:
        """True when the need is within the available RAM (or the RAM is unknown)."""
        return self.available_bytes is None or self.needed_bytes <= self.available_bytes

    def refusal(self) -> str:
        """The one-line reason ``train`` gives when the memory does not fit."""
        return (
            f"replay.capacity: a {self.capacity:,}-transition {self.kind} memory needs "
            f"{gib(self.parts['total'])} (+{gib(PROCESS_OVERHEAD_BYTES)} for the rest of the "
            f"process) but only {gib(self.available_bytes or 0)} of RAM is available; "
            f"lower replay.capacity (see `per-dqn plan`)"
        )


def env_spec(config: Config) -> EnvSpec:
    """The observation and action spaces of ``config.env`` (one env is made and closed)."""
    env = make_eval_env(config.env)
    try:
        return describe(env)
    finally:
        env.close()


def memory_plan(config: Config, spec: EnvSpec | None = None) -> MemoryPlan:
    """The replay memory ``config`` asks for, sized without allocating it.

    Raises:
        ValueError: the env cannot be made (the message names ``env.id``).
    """
    spec = spec or env_spec(config)
    replay = config.replay
    dedup = uses_frame_storage(replay, spec)
    parts = planned_nbytes(
        replay.kind, replay.capacity, spec.obs_shape, spec.obs_dtype, dedup, replay.frame_slack
    )
    return MemoryPlan(
        kind=replay.kind,
        capacity=replay.capacity,
        obs_shape=spec.obs_shape,
        dedup_frames=dedup,
        parts=parts,
        available_bytes=available_ram_bytes(),
        bit_packed=not dedup and spec.obs_dtype == np.bool_,
        checkpoints_kept=(
            config.checkpoint.keep_last
            if config.checkpoint.enabled and config.checkpoint.replay
            else None
        ),
    )


def pack_refusal(plans: Sequence[MemoryPlan]) -> str | None:
    """The one line that refuses a pack whose replay memories (one per run, all held at once by
    its process) do not fit in the available RAM, naming the largest pack that fits; None when
    it fits (or the RAM is unknown)."""
    if not plans:
        return None
    totals = [plan.parts["total"] for plan in plans]
    return _refusal(plans[0].available_bytes, len(plans), sum(totals), max(totals))


def same_pack_refusal(plan: MemoryPlan, runs: int) -> str | None:
    """``pack_refusal`` of ``runs`` runs that each hold ``plan``'s memory (``plan --pack``),
    counted without making a list of them: any count is answered at once."""
    total = plan.parts["total"]
    return _refusal(plan.available_bytes, runs, total * runs, total)


def _refusal(available: int | None, runs: int, memories: int, largest: int) -> str | None:
    """The refusal of a pack of ``runs`` memories of ``memories`` bytes together, the largest
    ``largest``; None when it fits in ``available`` (or that is unknown)."""
    if available is None:
        return None
    if memories + PROCESS_OVERHEAD_BYTES <= available:
        return None
    fits = max(0, (available - PROCESS_OVERHEAD_BYTES) // max(largest, 1))
    advice = (
        f"the largest pack that fits is {fits} (--pack {fits})"
        if fits >= 1
        else "not one run fits; lower replay.capacity (see `per-dqn plan`)"
    )
    return (
        f"--pack {runs}: {runs} replay memories need {gib(memories)} "
        f"(+{gib(PROCESS_OVERHEAD_BYTES)} for the rest of the process) but only {gib(available)} "
        f"of RAM is available; {advice}"
    )


def describe_plan(plan: MemoryPlan, pack: int | None = None) -> list[str]:
    """The lines ``per-dqn plan`` prints; with ``pack``, one more for that many such memories
    held by one process (``ablate --pack``)."""
    frames = (
        "one frame stored per step" if plan.dedup_frames
        else "obs and next_obs packed eight cells a byte, a next_obs that is a later obs stored "
        "as a link to it" if plan.bit_packed
        else "whole obs and next_obs"
    )  # fmt: skip
    parts = plan.parts
    lines = [
        f"replay memory      {plan.kind}, {plan.capacity:,} transitions of {plan.obs_shape} "
        f"({frames})",
        f"per transition     {plan.bytes_per_transition:,.0f} bytes"
        + (" at the least (see next-obs pool)" if plan.bit_packed else ""),
        f"  observations     {gib(parts['observations'])}",
    ]
    if plan.bit_packed:
        # The pool is the one part whose size the config does not fix: say what it assumes.
        entries = initial_pool_entries(plan.capacity)
        entry = (math.prod(plan.obs_shape) + 7) // 8 + link_dtype(plan.capacity).itemsize
        lines.append(
            f"  next-obs pool    {entries:,} entries of {entry} bytes counted; a slot whose next "
            "obs is no later obs (an episode's last) needs one, and the pool grows by half when "
            "full"
        )
    lines += [
        f"  fields           {gib(parts['fields'])}",
        f"  priority index   {gib(parts['index'])}",
        f"memory total       {gib(parts['total'])}",
        f"process estimate   {gib(plan.needed_bytes)} (memory + {gib(PROCESS_OVERHEAD_BYTES)})",
    ]
    if plan.checkpoints_kept is not None:
        kept = plan.checkpoints_kept
        lines += [
            f"checkpoint         about {gib(plan.checkpoint_bytes)} once the memory is full, "
            f"sized to the transitions held until then; written from the memory (no copy in RAM)",
            f"  on disk          up to {kept + 1} at once (keep_last {kept}, and one being "
            f"written): about {gib((kept + 1) * plan.checkpoint_bytes)}",
        ]
    if plan.available_bytes is None:
        lines.append("available RAM      unknown on this platform")
    else:
        verdict = "fits" if plan.fits else "DOES NOT FIT"
        lines.append(f"available RAM      {gib(plan.available_bytes)}: {verdict}")
    if pack is not None and pack > 1:
        verdict = "fits" if same_pack_refusal(plan, pack) is None else "DOES NOT FIT"
        lines.append(
            f"pack of {pack:<10} {pack} x {gib(plan.parts['total'])} = "
            f"{gib(plan.parts['total'] * pack)} (+{gib(PROCESS_OVERHEAD_BYTES)}): {verdict}"
        )
    return lines


def allocation_failure(
    exc: BaseException, config: Config, plan: MemoryPlan | None = None
) -> str | None:
    """The one line for a run whose replay memory or networks could not be allocated.

    Which part failed is read from where ``exc`` was raised: inside ``per_dqn.memory`` it is the
    replay memory (numpy raises ``MemoryError``), anywhere else the Q-networks (torch raises
    ``RuntimeError`` on CPU, ``torch.OutOfMemoryError`` on CUDA).

    Args:
        exc: what building the trainer raised.
        config: the run's config.
        plan: ``memory_plan(config)`` if already made (else it is made here, if it can be).

    Returns:
        ``<key>: cannot allocate ...`` naming the key to change, with ``plan``'s estimate when the
        replay memory failed; None when ``exc`` is not an allocation failure.
    """
    reason = _allocation_reason(exc)
    if reason is None:
        return None
    if _raised_in(exc, "memory"):
        replay = config.replay
        line = (
            f"replay.capacity: cannot allocate the {replay.capacity:,}-transition {replay.kind} "
            f"replay memory ({reason})"
        )
        if plan is None:
            try:
                plan = memory_plan(config)
            except ValueError:
                return f"{line}; lower replay.capacity"
        line += (
            f"; `per-dqn plan` estimates {gib(plan.parts['total'])} for it "
            f"(+{gib(PROCESS_OVERHEAD_BYTES)} for the rest of the process)"
        )
        if plan.available_bytes is not None:
            line += f" and sees {gib(plan.available_bytes)} of RAM available"
            if plan.fits:
                line += ", more than this process may use (a ulimit -v or a container's limit?)"
        return f"{line}; lower replay.capacity"
    widths = list(config.agent.hidden_sizes)
    return (
        f"agent.hidden_sizes: cannot allocate the Q-networks for {widths} ({reason}); "
        "lower agent.hidden_sizes"
    )


# What an allocator's refusal says: torch on CPU and CUDA (RuntimeError and its subclass
# torch.OutOfMemoryError), and the C library's ENOMEM text.
_OUT_OF_MEMORY = re.compile(
    r"can't allocate memory|not enough memory|out of memory|cannot allocate memory", re.IGNORECASE
)
_TORCH_BYTES = re.compile(r"tried to allocate (\d+) bytes")


def _allocation_reason(exc: BaseException) -> str | None:
    """What the allocator said, in a few words; None if ``exc`` is not an allocation failure."""
    text = one_line(exc)
    if isinstance(exc, MemoryError):
        return text or "MemoryError"
    if not isinstance(exc, RuntimeError) or not _OUT_OF_MEMORY.search(text):
        return None
    asked = _TORCH_BYTES.search(text)
    if asked:  # torch's CPU message starts with an internal assertion; the size is what matters
        return f"torch could not allocate {gib(int(asked.group(1)))}"
    return text if len(text) <= 200 else text[:197] + "..."


def _raised_in(exc: BaseException, package: str) -> bool:
    """Whether ``exc`` was raised from inside ``per_dqn.<package>``."""
    root = Path(__file__).resolve().parents[1] / package
    frames = traceback.extract_tb(exc.__traceback__)
    return any(Path(frame.filename).resolve().is_relative_to(root) for frame in frames)
