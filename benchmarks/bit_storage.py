"""MinAtar's bit storage with shared next observations against the same bits with each next
observation stored whole, on a real Seaquest stream, in one run: bytes a transition, the
overflow pool's use, and the time of a write and of a gather of 32.

The stream is a random policy playing ``MinAtar/Seaquest-v1`` (sticky actions, episode ends as
the game makes them) through ``per_dqn``'s env wrapper, so the observations are the ``(10, 10,
10)`` bool layers training stores. Both sides store the same transitions into ``--capacity``
slots (wrapping when the stream is longer):

* shared: ``BitStorage`` (``per_dqn.memory.make_storage`` for bool observations): one packed obs
  a slot, a 4-byte link to where its next obs lives, an overflow pool for the rest;
* whole: ``TransitionStorage`` of packed rows (``np.packbits`` of obs and of next_obs, 125 bytes
  each), what the storage did before it shared next observations; a gather unpacks both.

Bytes a transition are ``nbytes / capacity`` after the stream (the pool as allocated). Times are
the median of 5 alternating blocks over the last ``--timed`` transitions of the stream.

    .venv/bin/python benchmarks/bit_storage.py            # 120k transitions into 100k slots
    .venv/bin/python benchmarks/bit_storage.py --smoke    # a few seconds
"""

from __future__ import annotations

import argparse
import time
from importlib.metadata import version

import numpy as np
from _common import (
    add_mode_options,
    command_line,
    fill_defaults,
    machine_line,
    markdown_table,
    median,
)

from per_dqn.config import EnvConfig
from per_dqn.envs.make import make_eval_env
from per_dqn.memory import BitStorage, TransitionStorage, make_storage

ENV_ID = "MinAtar/Seaquest-v1"


def stream(steps: int, seed: int) -> tuple[np.ndarray, ...]:
    """``steps`` transitions of a random policy: obs, actions, rewards, next_obs, terminated."""
    env = make_eval_env(EnvConfig(id=ENV_ID))
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    shape = obs.shape
    o = np.empty((steps, *shape), np.bool_)
    n = np.empty((steps, *shape), np.bool_)
    a = rng.integers(env.action_space.n, size=steps)
    r = np.empty(steps, np.float32)
    t = np.empty(steps, np.bool_)
    for i in range(steps):
        o[i] = obs
        obs, r[i], t[i], truncated, _ = env.step(int(a[i]))
        n[i] = obs
        if t[i] or truncated:
            obs, _ = env.reset()
    env.close()
    return o, a, r, n, t


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_mode_options(parser)
    parser.add_argument("--steps", type=int, help="stream length (120,000; smoke 3,000)")
    parser.add_argument("--capacity", type=int, help="slots (100,000; smoke 2,000)")
    parser.add_argument("--timed", type=int, help="transitions timed (20,000; smoke 1,000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    fill_defaults(args, {"steps": (120_000, None, 3_000), "capacity": (100_000, None, 2_000),
                         "timed": (20_000, None, 1_000)})  # fmt: skip
    if not 0 < args.timed <= args.steps:
        parser.error(f"--timed must be in [1, --steps], got {args.timed}")
    print(f"# {machine_line({'numpy': version('numpy'), 'minatar': version('minatar')})}")
    print(f"# {ENV_ID}, random policy, {args.steps:,} transitions into {args.capacity:,} slots; "
          f"command `{command_line()}`")  # fmt: skip
    o, a, r, n, t = stream(args.steps, args.seed)
    shared = make_storage(args.capacity, o.shape[1:], np.bool_)
    assert isinstance(shared, BitStorage)
    row = np.packbits(o[0].reshape(-1)).shape
    whole = TransitionStorage(args.capacity, row, np.uint8)
    cells = int(np.prod(o.shape[1:]))

    def write_shared(i: int) -> None:
        shared.write(o[i], a[i], r[i], n[i], t[i], 1)

    def write_whole(i: int) -> None:
        whole.write(np.packbits(o[i].reshape(-1)), a[i], r[i], np.packbits(n[i].reshape(-1)),
                    t[i], 1)  # fmt: skip

    head = args.steps - args.timed
    for i in range(head):
        write_shared(i)
        write_whole(i)
    writes = {"shared": [], "whole": []}
    block = max(1, args.timed // 5)
    for start in range(head, args.steps, block):
        stop = min(start + block, args.steps)
        for name, write in (("shared", write_shared), ("whole", write_whole)):
            began = time.perf_counter()
            for i in range(start, stop):
                write(i)
            writes[name].append((time.perf_counter() - began) / (stop - start))
    rng = np.random.default_rng(args.seed)
    ones = np.ones(32, np.float32)
    gathers = {"shared": [], "whole": []}
    for _ in range(5):
        picks = [rng.integers(min(args.steps, args.capacity), size=32) for _ in range(200)]
        began = time.perf_counter()
        for idx in picks:
            shared.gather(idx, ones)
        gathers["shared"].append((time.perf_counter() - began) / len(picks))
        began = time.perf_counter()
        for idx in picks:
            batch = whole.gather(idx, ones)
            np.unpackbits(batch.obs, axis=-1, count=cells)
            np.unpackbits(batch.next_obs, axis=-1, count=cells)
        gathers["whole"].append((time.perf_counter() - began) / len(picks))
    # Exactness: every stored slot's next_obs, the same bits in both.
    stored = np.arange(min(args.steps, args.capacity))
    got = shared.gather(stored, np.ones(stored.size, np.float32)).next_obs
    want = whole.gather(stored, np.ones(stored.size, np.float32)).next_obs
    assert np.array_equal(np.packbits(got.reshape(stored.size, -1), axis=-1), want)
    rows = [
        ["shared (BitStorage)", f"{shared.nbytes / args.capacity:.1f}",
         f"{shared.observations.pool_used:,} of {shared.observations.pool.shape[0]:,}",
         f"{median(writes['shared']) * 1e6:.1f}", f"{median(gathers['shared']) * 1e6:.1f}"],
        ["whole (packed obs and next_obs)", f"{whole.nbytes / args.capacity:.1f}", "-",
         f"{median(writes['whole']) * 1e6:.1f}", f"{median(gathers['whole']) * 1e6:.1f}"],
    ]  # fmt: skip
    print()
    print(markdown_table(["storage", "bytes a transition", "pool entries used", "write us",
                          "gather of 32 us"], rows))  # fmt: skip
    print()
    print("Every stored slot's next_obs is the same bits in both (checked).")


if __name__ == "__main__":
    main()
