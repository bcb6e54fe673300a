"""One replay shard's capacity over Ray (issue 47): transitions in, batches out, updates back.

Ape-X (Horgan et al., 2018) feeds one replay from many actors while one learner samples it. The
figures its replications quote for the paper (they could not be read from the paper here: see
docs/benchmarks.md) are a learner at about 19 batches of 512 a second and actors sending blocks
of 50 transitions; at a frame skip of 4 and about 50,000 env frames a second, about 12,500
transitions a second come in. Goal: one shard, on one core, sustains that whole rate: about
12,500 transitions/s in while serving 19 batches of 512/s and their priority updates.

Set-up, on a Ray cluster this script starts on 127.0.0.1 with 2 CPUs, with the parts a run with
``--shards 1`` uses (``per_dqn.distributed.shards``):

* the shard: the shipped ``ShardProcess``, a Ray actor holding one CPU, built from
  ``cartpole.yaml`` made proportional (alpha 0.6) with ``replay.capacity`` ``--capacity`` for the
  row's observations, as a run's shard is built (Atari's stacks in the frame store, as in a run);
* the feeder: a second Ray actor that finds the shard by name and sends blocks of ``--block``
  transitions with their errors (``ShardProcess.add``) as fast as the shard takes them,
  ``--inflight`` calls in flight (the actors' side, in one process: what reaches the shard is
  the same);
* the learner: this process's ``ShardedReplay``, drawing batches of ``--batch`` with
  ``--prefetch`` batches ahead and sending each batch's priority update back (keyed by write
  serial), at most ``--batches-per-s`` a second (the paper's 19; 0: as fast as it can).

Each row runs ``--seconds`` after a warm-up that fills the shard, and reads the transitions the
shard reports written, the batches drawn and the updates dropped (an update whose transitions
were overwritten meanwhile is dropped). Four rows: CartPole's (4,) float32, MinAtar's
(4, 10, 10) bool layers, and Atari's (4, 84, 84) uint8 stacks of consecutive frames (3-step
windows; atari.yaml's actors send 1-step transitions, 3 fewer distinct frames a block), sent
whole (each frame about eight times, in the stacks of s and s') and each frame once, as a
distributed run's actors send them (``per_dqn.distributed.frames``: the shard rebuilds the stacks
before it stores them).

    .venv/bin/python benchmarks/apex_shard.py            # 4 rows of 20 s, capacity 100,000
    .venv/bin/python benchmarks/apex_shard.py --smoke    # one row of 1 s; the figures mean nothing
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np
from _common import (
    add_mode_options,
    available_bytes,
    command_line,
    fill_defaults,
    gb,
    local_ray_cluster,
    machine_line,
    markdown_table,
    package_versions,
    progress_log,
    require_at_least,
)

from per_dqn.memory import planned_nbytes

# The paper's rates as its replications quote them (see the module docstring).
GOAL_IN = 12_500  # transitions/s
GOAL_BATCHES = 19  # batches of 512 a second
SHAPES = {  # name -> (shape, dtype, each frame once)
    "CartPole (4,) float32": ((4,), np.float32, False),
    "MinAtar (4, 10, 10) bool": ((4, 10, 10), np.bool_, False),
    "Atari (4, 84, 84) uint8, whole stacks": ((4, 84, 84), np.uint8, False),
    "Atari (4, 84, 84) uint8, each frame once": ((4, 84, 84), np.uint8, True),
}
DEFAULTS = {  # (full, quick, smoke)
    "seconds": (20.0, 5.0, 1.0),
    "capacity": (100_000, 50_000, 2_000),
}


def shard_config(args: argparse.Namespace) -> Any:
    """The run config the shard is built from: cartpole.yaml, proportional at alpha 0.6, one
    actor and one shard of ``--capacity``, batches of ``--batch``."""
    from per_dqn.config import load_config, parse_override, resolve_config_path

    settings = ["replay.kind=proportional", "replay.alpha=0.6", f"replay.capacity={args.capacity}",
                f"train.batch_size={args.batch}", "run.actors=1", "run.shards=1"]  # fmt: skip
    return load_config(resolve_config_path("cartpole.yaml"), [parse_override(s) for s in settings])


class Feeder:
    """Sends prebuilt blocks to the shard named ``name`` as fast as it takes them; Atari's
    (``(4, 84, 84)`` uint8) are stacks of consecutive frames in 3-step windows (atari.yaml's
    actors send 1-step ones), each frame sent once with ``frames_once`` (``frames.pack``)."""

    def __init__(self, name: str, obs_shape: tuple[int, ...], dtype: Any, block: int,
                 frames_once: bool = False) -> None:  # fmt: skip
        import ray

        from per_dqn.distributed.frames import pack
        from per_dqn.training.nstep import Transitions

        rng = np.random.default_rng(1)
        if np.dtype(dtype) == np.uint8:  # stacks i = frames i..i+3, next stacks 3 steps on
            frames = rng.integers(0, 256, size=(block + 6, *obs_shape[1:]), dtype=np.uint8)
            window = np.arange(obs_shape[0])
            obs = np.stack([frames[i + window] for i in range(block)])
            obs = np.stack([obs, np.stack([frames[i + 3 + window] for i in range(block)])])
        elif np.dtype(dtype) == np.float32:
            obs = rng.normal(size=(2, block, *obs_shape)).astype(np.float32)
        else:
            obs = rng.integers(0, 2, size=(2, block, *obs_shape)).astype(dtype)
        self.shard = ray.get_actor(name)
        transitions = Transitions(
            obs[0], rng.integers(0, 4, block), rng.normal(size=block).astype(np.float32), obs[1],
            rng.random(block) < 0.01, np.full(block, 3, np.uint8),
        )  # fmt: skip
        self.block = pack(transitions) if frames_once else (transitions, None)
        self.td_abs = np.abs(rng.normal(size=block))
        self.last: Any = None  # the last block's (slots, written)

    def run(self, seconds: float, inflight: int) -> Any:
        """Sends for ``seconds``; returns the last block's slots and the shard's written."""
        import ray

        pending, end = [], time.perf_counter() + seconds
        while time.perf_counter() < end:
            while len(pending) < inflight:
                pending.append(self.shard.add.remote(*self.block, self.td_abs))
            done, pending = ray.wait(pending, num_returns=1)
            self.last = ray.get(done[0])
        for ref in pending:
            self.last = ray.get(ref)
        return self.last


def measure(ray: Any, args: argparse.Namespace, shape: tuple[int, ...], dtype: Any,
            frames_once: bool) -> dict:  # fmt: skip
    from per_dqn.distributed.shards import ShardedReplay
    from per_dqn.envs.make import EnvSpec
    from per_dqn.memory.types import PriorityUpdate

    replay = ShardedReplay(ray, shard_config(args), EnvSpec(shape, np.dtype(dtype), 4),
                           prefetch=args.prefetch)  # fmt: skip
    feeder = ray.remote(num_cpus=1)(Feeder).remote(
        replay.names[0], shape, dtype, args.block, frames_once
    )
    # Warm-up: the shard full, so that its sampling, eviction and dropped updates are the steady
    # state's.
    slots, written = ray.get(feeder.run.remote(0.5, args.inflight))
    while written < args.capacity:
        slots, written = ray.get(feeder.run.remote(0.5, args.inflight))
    replay.stored(slots, written)
    start, dropped_before = written, replay.dropped
    began = time.perf_counter()
    feeding = feeder.run.remote(args.seconds, args.inflight)
    rng = np.random.default_rng(0)
    batches, period = 0, 1.0 / args.batches_per_s if args.batches_per_s else 0.0
    next_at = began
    while time.perf_counter() - began < args.seconds:
        batch = replay.sample(args.batch, beta=0.4)
        replay.update(PriorityUpdate(batch.indices, np.abs(rng.normal(size=len(batch.indices)))))
        batches += 1
        if period:
            next_at += period
            time.sleep(max(0.0, next_at - time.perf_counter()))
    _, end = ray.get(feeding)
    wall = time.perf_counter() - began  # the feeder's last blocks are in
    replay.flush()  # every update answered
    dropped = replay.dropped - dropped_before
    ray.kill(feeder)
    replay.close()
    return {"in": (end - start) / wall, "batches": batches / wall,
            "set": batches * args.batch - dropped, "dropped": dropped}  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_mode_options(parser, quick="3 rows of 5 s, capacity 50,000")
    parser.add_argument("--seconds", type=float, help="measured time per row")
    parser.add_argument("--capacity", type=int, help="the shard's transitions")
    parser.add_argument("--block", type=int, default=50, help="transitions a block (50)")
    parser.add_argument("--inflight", type=int, default=4, help="the feeder's calls in flight")
    parser.add_argument("--batch", type=int, default=512, help="the learner's batch (512)")
    parser.add_argument("--prefetch", type=int, default=2, help="batches sampled ahead")
    parser.add_argument("--batches-per-s", type=float, default=GOAL_BATCHES,
                        help="the learner's pace; 0: as fast as it can")  # fmt: skip
    args = parser.parse_args(argv)
    fill_defaults(args, DEFAULTS)
    require_at_least(parser, args, 1, "capacity", "block", "inflight", "batch", "prefetch")
    require_at_least(parser, args, 0, "batches_per_s")
    if args.capacity < args.batch:
        parser.error(f"--capacity must be >= --batch ({args.batch}), got {args.capacity}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    log = progress_log()
    rows = []
    with local_ray_cluster() as cluster:
        ray = cluster.ray
        # A smoke run's one row runs every code path the others do.
        shapes = list(SHAPES.items())[: 1 if args.smoke else None]
        for name, (shape, dtype, frames_once) in shapes:
            need = planned_nbytes("proportional", args.capacity, shape, dtype)["total"]
            free = available_bytes()
            if free is not None and need > free // 2:
                log(f"{name}: skipped, {gb(need)} for the shard against {gb(free)} available")
                rows.append([name, f"skipped: {gb(need)} > half of {gb(free)}", "", "", "", ""])
                continue
            got = measure(ray, args, shape, dtype, frames_once)
            log(f"{name}: {got['in']:,.0f} transitions/s in, {got['batches']:.1f} batches/s")
            rows.append([
                name, f"{got['in']:,.0f}", f"{got['in'] / GOAL_IN:.2f}x",
                f"{got['batches']:.1f}", f"{got['set']:,}", f"{got['dropped']:,}",
            ])  # fmt: skip
    print(
        f"One shard on one core over Ray: blocks of {args.block} in ({args.inflight} in flight), "
        f"batches of {args.batch} out ({args.prefetch} ahead, at most {args.batches_per_s:g}/s) "
        f"with their updates, capacity {args.capacity:,}, {args.seconds:g} s a row.\n"
    )
    print(markdown_table(
        ["observations", "transitions/s in", f"of {GOAL_IN:,}/s", "batches/s out",
         "updates set", "updates dropped"], rows,
    ))  # fmt: skip
    print(f"\nMachine: {machine_line(package_versions('numpy', 'ray'))}")
    print(f"Command: `{command_line()}`")


if __name__ == "__main__":
    sys.exit(main())
