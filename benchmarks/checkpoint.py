"""What a checkpoint costs: bytes on disk per file, and seconds to write it and to verify + load it.

Two cases, each written by the code a training run uses (``Trainer._save_checkpoint`` for
CartPole, ``checkpoint.save_run_checkpoint`` for Atari):

* ``cartpole``: the shipped ``cartpole.yaml`` trained for its 50,000 env steps; the final
  checkpoint it writes (memory of 50,000 transitions, full).
* ``atari``: the shipped ``atari.yaml``'s agent (Nature CNN) and memory (proportional, 1,000,000
  transitions of 4x84x84 uint8 stacks, frame-deduplicated), the memory filled by real ``add``
  calls with distinct frames, and the PER health arrays of that capacity. The rest of the loop's
  state is a few KB; here it is the health arrays and one observation.

Writing includes the memory's ``state_dict()`` copy, the fsyncs and the SHA-256 of every file;
loading includes verifying every checksum. The page cache is warm for the read-back.

    .venv/bin/python benchmarks/checkpoint.py               # both cases
    .venv/bin/python benchmarks/checkpoint.py atari --capacity 100000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _common import command_line, machine_line, markdown_table

from per_dqn import checkpoint as ckpt
from per_dqn import metrics as m
from per_dqn.build import make_agent, make_memory
from per_dqn.config import load_config, parse_override, resolve_config_path
from per_dqn.envs import EnvSpec
from per_dqn.run import Trainer


def sizes(path: Path) -> list[tuple[str, int]]:
    return sorted((p.name, p.stat().st_size) for p in path.iterdir())


def report(case: str, path: Path, write_s: float, load_s: float, extra: list[str]) -> None:
    files = sizes(path)
    rows = [[name, f"{size / 1e6:,.2f}"] for name, size in files]
    rows.append(["**total**", f"**{sum(s for _, s in files) / 1e6:,.2f}**"])
    print(f"\n### {case}\n")
    print(markdown_table(["file", "MB"], rows))
    print(f"\nwrite {write_s:.2f} s, verify + load {load_s:.2f} s; " + "; ".join(extra))


def cartpole(root: Path) -> None:
    config = load_config(resolve_config_path("cartpole.yaml"), [parse_override("run.device=cpu")])
    trainer = Trainer(config, "cartpole")
    timings: list[float] = []
    save = trainer._save_checkpoint

    def timed_save(*args, **kwargs):
        start = time.perf_counter()
        path = save(*args, **kwargs)
        timings.append(time.perf_counter() - start)
        return path

    trainer._save_checkpoint = timed_save
    try:
        summary = trainer.run(root / "run")
    finally:
        trainer.close()
    path = ckpt.find_latest(ckpt.checkpoints_dir(root / "run")).path
    assert path is not None
    start = time.perf_counter()
    ckpt.load_run_checkpoint(path)
    load_s = time.perf_counter() - start
    report(
        "CartPole, cartpole.yaml at 50,000 env steps",
        path,
        timings[-1],
        load_s,
        [f"run wall time {summary['wall_seconds']:.1f} s"],
    )


def atari(root: Path, capacity: int) -> None:
    config = load_config(
        resolve_config_path("atari.yaml"),
        [parse_override(f"replay.capacity={capacity}"), parse_override("run.device=cpu")],
    )
    spec = EnvSpec((4, 84, 84), np.dtype(np.uint8), 6)  # Pong's minimal action set
    memory = make_memory(config.replay, spec, seed=0)
    agent = make_agent(config, spec, torch.device("cpu"))
    health = m.ReplayHealth(capacity)
    rng = np.random.default_rng(0)
    pool = rng.integers(0, 256, size=(4096, 84, 84), dtype=np.uint8)  # > dedup window: distinct
    start = time.perf_counter()
    for t in range(capacity):
        frames = np.take(pool, np.arange(t, t + 5) % len(pool), axis=0)
        slot = memory.add(frames[:4], t % 6, 0.0, frames[1:], t % 2000 == 1999)
        health.record_add(slot, t)
    fill_s = time.perf_counter() - start
    agent.learn(memory.sample(config.train.batch_size, 0.4))  # Adam's moments exist from here on
    obs = pool[None, :4].copy()

    start = time.perf_counter()
    memory_state = memory.state_dict()
    copy_s = time.perf_counter() - start
    start = time.perf_counter()
    path = ckpt.save_run_checkpoint(
        root / "checkpoints",
        env_steps=capacity,
        agent=agent,
        loop_state={"health": health.state_dict(), "cursor": {"obs": obs}},
        memory_state=memory_state,
        config_yaml=config.to_yaml(),
        keep_last=1,
    )
    write_s = time.perf_counter() - start
    del memory_state
    start = time.perf_counter()
    ckpt.load_run_checkpoint(path)
    load_s = time.perf_counter() - start
    report(
        f"Atari, atari.yaml with {capacity:,} transitions (frame-deduplicated)",
        path,
        copy_s + write_s,
        load_s,
        [
            f"of the write, memory.state_dict() copy {copy_s:.2f} s",
            f"memory arrays in RAM {memory.nbytes / 1e9:.2f} GB",
            f"filling took {fill_s:.0f} s",
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("case", nargs="?", choices=["cartpole", "atari", "all"], default="all")
    parser.add_argument("--capacity", type=int, default=1_000_000, help="Atari memory capacity")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(command_line())
    print(machine_line({"torch": torch.__version__, "numpy": np.__version__}))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        if args.case in ("cartpole", "all"):
            cartpole(Path(tmp) / "cartpole")
        if args.case in ("atari", "all"):
            atari(Path(tmp) / "atari", args.capacity)


if __name__ == "__main__":
    main()
