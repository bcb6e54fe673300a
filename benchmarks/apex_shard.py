"""One replay shard's capacity over Ray (issue 47): transitions in, batches out, updates back.

Ape-X (Horgan et al., 2018) feeds one replay from many actors while one learner samples it. The
figures its replications quote for the paper (they could not be read from the paper here: see
docs/benchmarks.md) are a learner at about 19 batches of 512 a second and actors sending blocks
of 50 transitions; at a frame skip of 4 and about 50,000 env frames a second, about 12,500
transitions a second come in. Goal: one shard, on one core, sustains that whole rate: about
12,500 transitions/s in while serving 19 batches of 512/s and their priority updates.

Set-up, on a Ray cluster this script starts on 127.0.0.1 with 2 CPUs:

* the shard: a Ray actor holding one CPU, ``per_dqn.memory.Shard`` over the project's
  proportional memory (``make_memory``), sized ``--capacity``;
* the feeder: a second Ray actor that sends blocks of ``--block`` transitions with their errors
  (``Shard.add(..., td_abs=)``) as fast as the shard takes them, ``--inflight`` calls in flight
  (the actors' side, in one process: what reaches the shard is the same);
* the learner: this process, sampling batches of ``--batch`` with ``--prefetch`` calls ahead and
  sending each batch's priority update back (``Shard.update`` by write serial), at most
  ``--batches-per-s`` a second (the paper's 19; 0: as fast as it can).

Each row runs ``--seconds`` after a warm-up that fills the shard, and reads the shard's own
counters: transitions in, batches out, updates set and dropped (an update whose transitions
were overwritten meanwhile is dropped: ``Shard``). Four rows: CartPole's (4,) float32,
MinAtar's (4, 10, 10) bool layers, and Atari's (4, 84, 84) uint8 stacks, sent whole (each frame
about eight times, in the stacks of s and s') and each frame once, as a distributed run's actors
send them (``per_dqn.distributed.frames``: the shard rebuilds the stacks before it stores them).

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


class ShardHost:
    """The shard inside its Ray actor, with the counters the table reads."""

    def __init__(self, capacity: int, obs_shape: tuple[int, ...], dtype: Any) -> None:
        from per_dqn.memory import Shard, make_memory

        memory = make_memory("proportional", capacity=capacity, obs_shape=obs_shape,
                             obs_dtype=dtype, alpha=0.6, seed=0)  # fmt: skip
        self.shard = Shard(memory)
        self.batches = 0

    def add(self, obs, actions, rewards, next_obs, terminated, n_steps, td_abs) -> int:
        self.shard.add(obs, actions, rewards, next_obs, terminated, n_steps, td_abs)
        return len(self.shard)

    def add_packed(self, transitions: Any, packed: Any, td_abs: np.ndarray) -> int:
        """A block whose frames come once (``frames.pack``): rebuilt, then stored."""
        from per_dqn.distributed.frames import unpack

        self.shard.add(*unpack(transitions, packed), td_abs)
        return len(self.shard)

    def sample(self, batch_size: int) -> tuple[Any, np.ndarray]:
        self.batches += 1
        return self.shard.sample(batch_size, beta=0.4)

    def update(self, serials: np.ndarray, td_abs: np.ndarray) -> int:
        return self.shard.update(serials, td_abs)

    def counters(self) -> dict[str, int]:
        return {"written": self.shard.written, "batches": self.batches,
                "dropped": self.shard.dropped, "stored": len(self.shard)}  # fmt: skip


class Feeder:
    """Sends prebuilt blocks to the shard as fast as it takes them; with ``frames_once``, a
    block of consecutive 4-frame stacks (3-step windows, as an Atari actor's), each frame sent
    once (``frames.pack``)."""

    def __init__(self, shard: Any, obs_shape: tuple[int, ...], dtype: Any, block: int,
                 frames_once: bool = False) -> None:  # fmt: skip
        rng = np.random.default_rng(1)
        if frames_once:  # stacks i = frames i..i+3, next stacks 3 steps on
            frames = rng.integers(0, 256, size=(block + 6, *obs_shape[1:]), dtype=np.uint8)
            window = np.arange(obs_shape[0])
            obs = np.stack([frames[i + window] for i in range(block)])
            obs = np.stack([obs, np.stack([frames[i + 3 + window] for i in range(block)])])
        elif np.dtype(dtype) == np.float32:
            obs = rng.normal(size=(2, block, *obs_shape)).astype(np.float32)
        else:
            high = 2 if np.dtype(dtype) == np.bool_ else 256
            obs = rng.integers(0, high, size=(2, block, *obs_shape)).astype(dtype)
        self.shard = shard
        self.block = (obs[0], rng.integers(0, 4, block), rng.normal(size=block).astype(np.float32),
                      obs[1], rng.random(block) < 0.01, np.full(block, 3, np.uint8),
                      np.abs(rng.normal(size=block)))  # fmt: skip
        self.packed = None
        if frames_once:
            from per_dqn.distributed.frames import pack
            from per_dqn.training.nstep import Transitions

            self.packed = pack(Transitions(*self.block[:6]))

    def run(self, seconds: float, inflight: int) -> int:
        import ray

        sent, pending, end = 0, [], time.perf_counter() + seconds
        while time.perf_counter() < end:
            while len(pending) < inflight:
                if self.packed is None:
                    pending.append(self.shard.add.remote(*self.block))
                else:
                    pending.append(self.shard.add_packed.remote(*self.packed, self.block[6]))
                sent += 1
            _, pending = ray.wait(pending, num_returns=1)
        ray.get(pending)
        return sent


def measure(ray: Any, args: argparse.Namespace, shape: tuple[int, ...], dtype: Any,
            frames_once: bool) -> dict:  # fmt: skip
    host = ray.remote(num_cpus=1)(ShardHost).remote(args.capacity, shape, dtype)
    feeder = ray.remote(num_cpus=1)(Feeder).remote(host, shape, dtype, args.block, frames_once)
    # Warm-up: the shard full, so that its sampling, eviction and dropped updates are the steady
    # state's.
    while ray.get(host.counters.remote())["stored"] < args.capacity:
        ray.get(feeder.run.remote(0.5, args.inflight))
    start = ray.get(host.counters.remote())
    began = time.perf_counter()
    feeding = feeder.run.remote(args.seconds, args.inflight)
    ahead = [host.sample.remote(args.batch) for _ in range(args.prefetch)]
    updates, period, next_at = [], 1.0 / args.batches_per_s if args.batches_per_s else 0.0, began
    while time.perf_counter() - began < args.seconds:
        _, serials = ray.get(ahead[0])
        ahead = [*ahead[1:], host.sample.remote(args.batch)]
        td = np.abs(np.random.default_rng(len(updates)).normal(size=len(serials)))
        updates.append(host.update.remote(serials, td))
        if period:
            next_at += period
            time.sleep(max(0.0, next_at - time.perf_counter()))
    ray.get(feeding)
    wall = time.perf_counter() - began  # the feeder's last blocks are in
    end = ray.get(host.counters.remote())
    set_ = sum(ray.get(updates))
    ray.get(ahead)
    ray.kill(feeder)
    ray.kill(host)
    batches = len(updates)
    return {"in": (end["written"] - start["written"]) / wall, "batches": batches / wall,
            "set": set_, "dropped": end["dropped"] - start["dropped"]}  # fmt: skip


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
