"""What a checkpoint costs: bytes on disk, seconds to write it and to verify + load it, and (Atari)
the peak resident memory while it is written.

Two cases, each written the way a training run writes one: ``Trainer.state_dict(copy=False)``
(the tree of every part's ``state_dict()``, the replay memory's arrays as views into it) handed to
``training.checkpoints.save_run_checkpoint``, the agent's part as weights and the rest as array
trees:

* ``cartpole``: the shipped ``cartpole.yaml`` trained for its 50,000 env steps; the final
  checkpoint of that run (memory of 50,000 transitions, full), written again from the finished
  trainer.
* ``atari``: the shipped ``atari.yaml`` (Pong, Nature CNN, proportional memory of 1,000,000
  4x84x84 uint8 stacks, frame-deduplicated) run on the real ALE under its warm-up policy, with a
  checkpoint written at each of ``--points`` env steps (50,000 and 500,000: the memory holds as
  many transitions); at the first, also one as checkpoints were written before they were sized to
  their contents (the whole capacity, copied first), unless ``--no-before``. Resident memory is
  read from ``/proc/self/status``, its peak reset before each write (Linux).

Writing includes the fsyncs and the SHA-256 of every file; loading includes verifying every
checksum. The page cache is warm for the read-back.

    .venv/bin/python benchmarks/checkpoint.py               # both cases (Atari: ~10 minutes)
    .venv/bin/python benchmarks/checkpoint.py atari --points 50000 --no-before
    .venv/bin/python benchmarks/checkpoint.py --smoke       # seconds: 1,200 steps, capacity 2,000
"""

from __future__ import annotations

import argparse
import math
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from _common import (
    add_mode_options,
    command_line,
    fill_defaults,
    machine_line,
    markdown_table,
    peak_rss_bytes,
    require_at_least,
    reset_peak_rss,
    rss_bytes,
)

from per_dqn.config import load_config, parse_override, resolve_config_path
from per_dqn.rundir import checkpoint as ckpt
from per_dqn.training import checkpoints as run_ckpt
from per_dqn.training.run import Trainer


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


def write(
    trainer: Trainer, root: Path, env_steps: int, state_of: Callable[[Trainer], dict] | None = None
) -> tuple[Path, float]:
    """Writes a checkpoint of every part as a run does (``Trainer.state_dict(copy=False)``, the
    memory streamed from where it is), or of the state ``state_of`` returns instead; its path,
    and the seconds taking the state and writing it took."""
    start = time.perf_counter()
    parts = trainer.state_dict(copy=False) if state_of is None else state_of(trainer)
    path = run_ckpt.save_run_checkpoint(
        root,
        env_steps=env_steps,
        weights={"agent": parts.pop("agent")},
        trees=parts,
        config_yaml=trainer.config.to_yaml(),
        keep_last=1,
        meta={"update_steps": trainer.agent.update_steps, "final": True},
    )
    return path, time.perf_counter() - start


def timed_load(path: Path) -> float:
    """Seconds to verify and load a checkpoint."""
    start = time.perf_counter()
    run_ckpt.load_run_checkpoint(path)
    return time.perf_counter() - start


def cartpole(root: Path, steps: int) -> None:
    trainer = make_trainer("cartpole.yaml", [f"train.total_env_steps={steps}"])
    try:
        summary = trainer.run(root / "run")
        path, write_s = write(trainer, root / "checkpoints", summary["env_steps"])
    finally:
        trainer.close()
    report(
        f"CartPole, cartpole.yaml at {summary['env_steps']:,} env steps",
        path,
        write_s,
        timed_load(path),
        [f"run wall time {summary['wall_seconds']:.1f} s"],
    )


class Save(NamedTuple):
    env_steps: int
    transitions: int
    memory_bytes: int  # the memory's arrays as allocated (its capacity)
    written: int  # the checkpoint's files on disk
    seconds: float
    rss_before: int  # bytes
    rss_peak: int  # bytes, during the save


def measured_save(
    trainer: Trainer, root: Path, env_steps: int, state_of: Callable[[Trainer], dict] | None = None
) -> Save:
    """``write``, with the peak resident size while the state was taken and written."""
    rss = rss_bytes()
    reset_peak_rss()
    path, seconds = write(trainer, root, env_steps, state_of)
    peak = peak_rss_bytes()
    written = sum(p.stat().st_size for p in path.iterdir())
    memory = trainer.memory
    return Save(env_steps, len(memory), memory.nbytes, written, seconds, rss, peak)


def state_as_before(trainer: Trainer) -> dict:
    """The run's state as checkpoints held it before they were sized to their contents: every
    array of the memory's storage copied whole, at its capacity (what ``state_dict`` returned)."""
    parts = trainer.state_dict(copy=False)
    storage = trainer.memory.storage
    whole = {}
    for name, value in parts["memory"]["storage"].items():
        array = getattr(storage, name, None)
        if array is None:
            array = getattr(storage.observations, name, None)
        whole[name] = array.copy() if isinstance(array, np.ndarray) else value
    sampler = trainer.memory.sampler
    parts["memory"] = dict(parts["memory"], storage=whole)
    if "priorities" in parts["memory"]:
        parts["memory"]["priorities"] = sampler.sums.leaves  # a copy of every leaf
    return parts


class Checkpointer:
    """A run's callback that writes and measures a checkpoint at each of ``points`` env steps
    (log points: the state is exact there), and at the first, with ``before``, one as
    checkpoints were written before too."""

    def __init__(self, trainer: Trainer, root: Path, points: list[int], before: bool) -> None:
        self.trainer, self.root, self.points, self.before = trainer, root, points, before
        self.saves: list[tuple[str, Save]] = []

    def on_log(self, env_steps: int, values: dict[str, float]) -> bool:
        if env_steps in self.points:
            if not self.saves:  # one learning step: Adam's moments exist, as in a run's agent.pt
                agent = self.trainer.agent
                agent.learn(self.trainer.memory.sample(self.trainer.config.train.batch_size, 0.4))
            if self.before and not self.saves:
                save = measured_save(self.trainer, self.root / "before", env_steps, state_as_before)
                self.saves.append(("before", save))
                shutil.rmtree(self.root / "before")
            self.saves.append(("now", measured_save(self.trainer, self.root / "now", env_steps)))
        return env_steps >= max(self.points)


def atari(root: Path, points: list[int], capacity: int | None, before: bool) -> None:
    """The shipped atari.yaml (Pong, proportional memory of 1M deduplicated frames) on the real
    ALE, acting under its warm-up policy (learning held off past the last point, so that 500k
    transitions take minutes, not a day; a checkpoint holds the same arrays whatever the policy),
    a checkpoint written at each point."""
    last = max(points)
    interval = math.gcd(*points)
    overrides = [
        f"train.total_env_steps={last + 2 * interval}", f"train.learning_starts={last + interval}",
        f"train.log_interval={interval}", "checkpoint.enabled=false",
        *([f"replay.capacity={capacity}"] if capacity is not None else []),
    ]  # fmt: skip
    trainer = make_trainer("atari.yaml", overrides)
    measure = Checkpointer(trainer, root, points, before)
    start = time.perf_counter()
    try:
        trainer.run(root / "run", callbacks=[measure])
        loaded = timed_load(ckpt.list_checkpoints(root / "now")[-1])
    finally:
        trainer.close()
    capacity = trainer.config.replay.capacity
    print(f"\n### Atari, atari.yaml on ALE/Pong-v5, a {capacity:,}-transition memory\n")
    gb = 1e9
    rows = [
        [f"{save.env_steps:,}" + (" as before" if how == "before" else ""),
         f"{save.transitions:,}", f"{save.written / gb:,.3f}", f"{save.seconds:.1f}",
         f"{save.rss_before / gb:.2f}", f"{(save.rss_peak - save.rss_before) / gb:+.2f}"]
        for how, save in measure.saves
    ]  # fmt: skip
    print(markdown_table(
        ["env steps", "transitions", "GB on disk", "seconds", "RSS before GB",
         "peak RSS over it GB"], rows))  # fmt: skip
    print(
        f"\nthe memory's arrays as allocated: {measure.saves[-1][1].memory_bytes / gb:.2f} GB; "
        f"verify + load of the last {loaded:.1f} s; acting and saving took "
        f"{time.perf_counter() - start:.0f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_mode_options(parser)
    parser.add_argument("case", nargs="?", choices=["cartpole", "atari", "all"], default="all")
    parser.add_argument("--capacity", type=int, help="Atari memory capacity (1M; smoke 2000)")
    parser.add_argument("--points", type=str, help="Atari env steps to checkpoint at "
                        "(50000,500000; smoke 600,1200)")  # fmt: skip
    parser.add_argument("--no-before", action="store_true", help="skip the write as before")
    parser.add_argument("--steps", type=int, help="CartPole env steps (50000; smoke 1200)")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp)")
    args = parser.parse_args()
    fill_defaults(args, {"capacity": (None, None, 2_000), "steps": (50_000, None, 1_200),
                         "points": ("50000,500000", "50000", "600,1200")})  # fmt: skip
    points = sorted(int(p) for p in args.points.split(","))
    require_at_least(parser, args, 1_001, "steps")  # cartpole.yaml learns from step 1,000
    if args.capacity is not None:
        require_at_least(parser, args, 64, "capacity")
    torch.set_num_threads(1)
    print(command_line())
    print(machine_line({"torch": torch.__version__, "numpy": np.__version__}))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        if args.case in ("cartpole", "all"):
            cartpole(Path(tmp) / "cartpole", args.steps)
        if args.case in ("atari", "all"):
            atari(Path(tmp) / "atari", points, args.capacity, not args.no_before)


if __name__ == "__main__":
    main()
