"""What a checkpoint costs: bytes on disk per file, and seconds to write it and to verify + load it.

Two cases, each written the way a training run writes one: ``Trainer.state_dict()`` (the tree of
every part's ``state_dict()``) handed to ``checkpoint.save_run_checkpoint``, the agent's part as
weights and the rest as array trees:

* ``cartpole``: the shipped ``cartpole.yaml`` trained for its 50,000 env steps; the final
  checkpoint of that run (memory of 50,000 transitions, full), written again from the finished
  trainer.
* ``atari``: a ``Trainer`` of the shipped ``atari.yaml`` (Pong, Nature CNN, proportional memory
  of 1,000,000 transitions of 4x84x84 uint8 stacks, frame-deduplicated), its memory filled by
  real ``add`` calls with distinct frames (and the loop's PER health arrays told of each add),
  one learning step taken so that Adam's moments exist. The rest of the loop's state is a few
  KB.

Writing includes the ``state_dict()`` copies, the fsyncs and the SHA-256 of every file; loading
includes verifying every checksum. The page cache is warm for the read-back.

    .venv/bin/python benchmarks/checkpoint.py               # both cases
    .venv/bin/python benchmarks/checkpoint.py atari --capacity 100000
    .venv/bin/python benchmarks/checkpoint.py --smoke       # seconds: 1,200 steps, capacity 2,000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _common import (
    add_mode_options,
    command_line,
    fill_defaults,
    machine_line,
    markdown_table,
    require_at_least,
)

from per_dqn import checkpoint as ckpt
from per_dqn.config import load_config, parse_override, resolve_config_path
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


def make_trainer(name: str, overrides: list[str]) -> Trainer:
    """A ``Trainer`` of a shipped config on the CPU."""
    config = load_config(
        resolve_config_path(name), [parse_override(t) for t in [*overrides, "run.device=cpu"]]
    )
    return Trainer(config, Path(name).stem)


def write(trainer: Trainer, root: Path, env_steps: int) -> tuple[Path, float, float]:
    """Writes a checkpoint of every part, as a run does; its path, and the seconds the
    ``state_dict()`` copies and the whole write (copies included) took."""
    start = time.perf_counter()
    parts = trainer.state_dict()
    copy_s = time.perf_counter() - start
    path = ckpt.save_run_checkpoint(
        root,
        env_steps=env_steps,
        weights={"agent": parts.pop("agent")},
        trees=parts,
        config_yaml=trainer.config.to_yaml(),
        keep_last=1,
        meta={"update_steps": trainer.agent.update_steps, "final": True},
    )
    return path, copy_s, time.perf_counter() - start


def timed_load(path: Path) -> float:
    """Seconds to verify and load a checkpoint."""
    start = time.perf_counter()
    ckpt.load_run_checkpoint(path)
    return time.perf_counter() - start


def cartpole(root: Path, steps: int) -> None:
    trainer = make_trainer("cartpole.yaml", [f"train.total_env_steps={steps}"])
    try:
        summary = trainer.run(root / "run")
        path, _, write_s = write(trainer, root / "checkpoints", summary["env_steps"])
    finally:
        trainer.close()
    report(
        f"CartPole, cartpole.yaml at {summary['env_steps']:,} env steps",
        path,
        write_s,
        timed_load(path),
        [f"run wall time {summary['wall_seconds']:.1f} s"],
    )


def atari(root: Path, capacity: int) -> None:
    trainer = make_trainer("atari.yaml", [f"replay.capacity={capacity}", "checkpoint.replay=true"])
    try:
        memory, health = trainer.memory, trainer.loop.state.health
        rng = np.random.default_rng(0)
        pool = rng.integers(0, 256, size=(4096, 84, 84), dtype=np.uint8)  # > dedup window
        start = time.perf_counter()
        for t in range(capacity):
            frames = np.take(pool, np.arange(t, t + 5) % len(pool), axis=0)
            slot = memory.add(frames[:4], t % 6, 0.0, frames[1:], t % 2000 == 1999)
            health.record_add(slot, t)
        fill_s = time.perf_counter() - start
        batch = memory.sample(trainer.config.train.batch_size, 0.4)
        trainer.agent.learn(batch)  # Adam's moments exist from here on
        path, copy_s, write_s = write(trainer, root / "checkpoints", capacity)
    finally:
        trainer.close()
    report(
        f"Atari, atari.yaml with {capacity:,} transitions (frame-deduplicated)",
        path,
        write_s,
        timed_load(path),
        [
            f"of the write, the state_dict() copies {copy_s:.2f} s",
            f"memory arrays in RAM {memory.nbytes / 1e9:.2f} GB",
            f"filling took {fill_s:.0f} s",
        ],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_mode_options(parser)
    parser.add_argument("case", nargs="?", choices=["cartpole", "atari", "all"], default="all")
    parser.add_argument("--capacity", type=int, help="Atari memory capacity (1M; smoke 2000)")
    parser.add_argument("--steps", type=int, help="CartPole env steps (50000; smoke 1200)")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp)")
    args = parser.parse_args()
    fill_defaults(args, {"capacity": (1_000_000, None, 2_000), "steps": (50_000, None, 1_200)})
    require_at_least(parser, args, 64, "capacity")
    require_at_least(parser, args, 1_001, "steps")  # cartpole.yaml learns from step 1,000
    torch.set_num_threads(1)
    print(command_line())
    print(machine_line({"torch": torch.__version__, "numpy": np.__version__}))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        if args.case in ("cartpole", "all"):
            cartpole(Path(tmp) / "cartpole", args.steps)
        if args.case in ("atari", "all"):
            atari(Path(tmp) / "atari", args.capacity)


if __name__ == "__main__":
    main()
