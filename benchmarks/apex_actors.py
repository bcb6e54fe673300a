"""Ape-X actors' throughput (issue 47): env steps a second per actor against a single run's
acting-only rate, and one Ray actor against two with the learner paused.

Each row plays one shipped config's env (CartPole, MinAtar Breakout, Atari Pong) for ``--seconds``
after a warm-up, on the config's network (greedy actions at each actor's epsilon, its n-step
windows, its priorities: the production code, nothing stubbed):

* **single run, acting only**: a ``Trainer``'s loop (``Loop.step``) with learning never due:
  epsilon-greedy play, the n-step windows and the replay memory's inserts, in this process;
* **1 actor, in process**: one ``Actor`` playing blocks of 50 steps (its ``|delta|`` priorities
  per block included), in this process;
* **1 actor / 2 actors on Ray**: ``RayActors`` (the run's own source of blocks), each actor a
  Ray actor process holding one CPU, two blocks in flight each, on a cluster this script starts
  on 127.0.0.1 with 2 CPUs; this process takes their blocks and learns nothing (the learner
  paused), so what is measured is what the actors deliver.

Every row explores at epsilon 0.4 (the ladder's first actor; the two Ray actors both, their
ladder flat), so that the network runs as often in each. The table gives env steps a second (all
actors together, and per actor) and, for two actors, the scaling: their total over one actor's,
and the share of a core this process spent taking their blocks (what the two actors did not have
of the two cores). On a 2-core machine
two actors have a core each only if nothing else runs: run it on a quiet machine.

    .venv/bin/python benchmarks/apex_actors.py            # rows of 20 s
    .venv/bin/python benchmarks/apex_actors.py --smoke    # CartPole, rows of 1 s; means nothing
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from _common import (
    add_mode_options,
    command_line,
    fill_defaults,
    local_ray_cluster,
    machine_line,
    markdown_table,
    package_versions,
    progress_log,
)

from per_dqn.config import Override, load_config, resolve_config_path
from per_dqn.distributed.actor import Actor
from per_dqn.distributed.learner import BLOCK_STEPS
from per_dqn.distributed.remote import RayActors
from per_dqn.training.run import Trainer
from per_dqn.training.seeding import RunSeeds

CONFIGS = {  # name -> (shipped config, the game)
    "CartPole": ("cartpole.yaml", "CartPole-v1"),
    "MinAtar Breakout": ("minatar.yaml", "MinAtar/Breakout-v1"),
    "Atari Pong": ("atari.yaml", "ALE/Pong-v5"),
}
DEFAULTS = {"seconds": (20.0, 5.0, 1.0)}  # (full, quick, smoke)
# Every row's exploration: the first actor's of the paper's ladder.
EPSILON = 0.4


def config_of(name: str, actors: int | None = None) -> Any:
    """The shipped config, on CPU, learning never due, exploring at ``EPSILON`` throughout (an
    actor's, so that the network runs as often in each row), with a memory just large enough.
    With ``actors``, a distributed run's, its ladder flat at ``EPSILON`` (exponent 0): the
    paper's ladder would put the second of two actors at 0.4 ** 8, acting greedily, so running
    the network on nearly every step."""
    path, _ = CONFIGS[name]
    overrides = {"run.device": "cpu", "train.total_env_steps": 10**9 + 1,
                 "train.learning_starts": 10**9, "replay.capacity": 100_000,
                 "train.epsilon_start": EPSILON, "train.epsilon_end": EPSILON,
                 "train.eval_interval": 0, "run.torch_threads": 1}  # fmt: skip
    if actors is not None:
        overrides.update({"run.actors": actors, "run.actor_epsilon": EPSILON,
                          "run.actor_epsilon_alpha": 0.0})  # fmt: skip
    return load_config(resolve_config_path(path), [Override(k, v) for k, v in overrides.items()])


def single_run(config: Any, seconds: float) -> float:
    """A single run's loop acting only: env steps a second."""
    trainer = Trainer(config, "bench")
    try:
        loop = trainer.loop
        for _ in range(50):
            loop.step()
        start, began = loop.state.env_steps, time.perf_counter()
        while time.perf_counter() - began < seconds:
            for _ in range(50):
                loop.step()
        return (loop.state.env_steps - start) / (time.perf_counter() - began)
    finally:
        trainer.close()


def in_process(config: Any, seconds: float) -> float:
    """One actor playing blocks in this process: env steps a second."""
    with Actor(config, 0, EPSILON, RunSeeds.for_actor(0, 0)) as actor:
        actor.collect(BLOCK_STEPS)
        start, began = actor.state.env_steps, time.perf_counter()
        while time.perf_counter() - began < seconds:
            actor.collect(BLOCK_STEPS)
        return (actor.state.env_steps - start) / (time.perf_counter() - began)


def on_ray(ray: Any, name: str, actors: int, seconds: float) -> tuple[list[float], float]:
    """``actors`` Ray actors of ``name``'s config, each at ``EPSILON``, delivering blocks to this
    process: each one's env steps a second, counted from its first block (its start-up left
    out), and the share of a core this process spent taking their blocks meanwhile."""
    trainer = Trainer(config_of(name), "bench")  # the learner whose weights they pull, paused
    try:
        source = RayActors(ray, config_of(name, actors), trainer.agent, actors)
    except BaseException:
        trainer.close()
        raise
    try:
        first: dict[int, tuple[float, int]] = {}
        last: dict[int, tuple[float, int]] = {}
        while len(first) < actors:  # warm-up: every actor has delivered a block
            for block in source.blocks():
                first.setdefault(block.actor, (time.perf_counter(), block.env_steps))
        began, cpu = time.perf_counter(), time.process_time()
        while time.perf_counter() - began < seconds:
            for block in source.blocks():
                last[block.actor] = (time.perf_counter(), block.env_steps)
        share = (time.process_time() - cpu) / (time.perf_counter() - began)
        rates = [
            (last[i][1] - first[i][1]) / (last[i][0] - first[i][0]) if i in last else 0.0
            for i in range(actors)
        ]
        return rates, share
    finally:
        source.close()
        trainer.close()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_mode_options(parser, quick="rows of 5 s")
    parser.add_argument("--seconds", type=float, help="measured time per row")
    parser.add_argument("--envs", nargs="+", choices=list(CONFIGS), help="which configs' envs")
    args = parser.parse_args(argv)
    fill_defaults(args, DEFAULTS)
    if args.envs is None:
        args.envs = ["CartPole"] if args.smoke else list(CONFIGS)
    if args.seconds <= 0:
        parser.error(f"--seconds must be > 0, got {args.seconds}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    log = progress_log()
    rows = []
    with local_ray_cluster() as cluster:
        for name in args.envs:
            config = config_of(name)
            single = single_run(config, args.seconds)
            alone = in_process(config, args.seconds)
            one, _ = on_ray(cluster.ray, name, 1, args.seconds)
            two, share = on_ray(cluster.ray, name, 2, args.seconds)
            log(f"{name}: single {single:,.0f}, in process {alone:,.0f}, Ray 1 {one[0]:,.0f}, "
                f"Ray 2 {sum(two):,.0f} steps/s")  # fmt: skip
            rows.append([
                name, f"{single:,.0f}", f"{alone:,.0f}", f"{alone / single:.2f}x",
                f"{one[0]:,.0f}", f"{sum(two):,.0f}", " / ".join(f"{r:,.0f}" for r in two),
                f"{sum(two) / one[0]:.2f}x", f"{share:.2f}",
            ])  # fmt: skip
    print(
        f"Ape-X actors' env steps a second at epsilon {EPSILON}: blocks of {BLOCK_STEPS} steps, "
        f"{args.seconds:g} s a row after a warm-up, the learner paused (taking blocks only: the "
        "last column is the share of a core it spent so); Ray on 127.0.0.1 with 2 CPUs.\n"
    )
    print(markdown_table(
        ["env", "single run, acting only", "1 actor, in process", "of single", "1 actor, Ray",
         "2 actors, Ray", "each of the 2", "2 against 1", "learner's cores, 2 actors"], rows,
    ))  # fmt: skip
    print(f"\nMachine: {machine_line(package_versions('torch', 'ray', 'gymnasium'))}")
    print(f"Command: `{command_line()}`")


if __name__ == "__main__":
    sys.exit(main())
