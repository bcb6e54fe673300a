"""Packs against single runs: the same sweep through ``per-dqn ablate``, unpacked and with
``--pack K``, whole wall time of each, side by side in one run (issue 24).

Goals (issue 24): CartPole, 20 seeds x 50k env steps, ``--workers 2 --pack 10`` against
``--workers 2``: >= 3x runs per hour; MinAtar Breakout, 10 seeds x 200k env steps: >= 2x.

Both sides run the command a user types, as a fresh process timed from its start to its exit
(imports, the worker processes, the runs and ``report.md`` included), each into a fresh sweep dir:

* unpacked: ``python -m per_dqn.cli ablate --config C --replay R --seeds N --steps S
  --workers W --out DIR --set run.device=cpu``: W worker processes, a run at a time each;
* packed: the same with ``--pack K``: W worker processes, a pack of up to K runs at a time each.

A run's numbers do not depend on its pack, so the two sides' runs must be bit-identical: the
script checks every run's ``final_eval_return_mean`` and ``model.pt`` across both sides and every
repeat, says so, and exits 1 where they differ. Repeats alternate which side goes first.

Then, in this process and one torch thread, the learner alone: the milliseconds of one update per
run (``Pack.learn``: the three forward passes, the loss, backward and the optimiser step; the
memory's sampling not included) for K agents of the section's config learning alone (packs of
one, as unpacked runs learn) and as one pack of K, on random batches of the config's batch size,
in alternating rounds. From it, a ceiling: the runs per hour a packed sweep would reach if
everything but its updates (the envs, acting, the memory, evaluations, start-up) cost nothing,
over the unpacked sweep's measured runs per hour. A ratio above the ceiling cannot be reached
without making the updates themselves cheaper.

    .venv/bin/python benchmarks/packs.py                      # both sections, the goals' sizes
    .venv/bin/python benchmarks/packs.py --section cartpole --seeds 10 --steps 20000
    .venv/bin/python benchmarks/packs.py --smoke              # tiny sizes; the figures mean nothing
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import (
    ROOT,
    add_mode_options,
    command_line,
    load_averages,
    machine_line,
    markdown_table,
    median,
    progress_log,
    rotated,
)

from per_dqn.agent.pack import Pack
from per_dqn.config import load_config, resolve_config_path
from per_dqn.config.loading import parse_override
from per_dqn.envs.make import EnvSpec
from per_dqn.memory import Batch
from per_dqn.training.build import make_agent
from per_dqn.training.memory_plan import env_spec


@dataclass(frozen=True)
class Section:
    """One comparison: a config, the replay kind, the sweep's size and the pack size."""

    config: str
    replay: str
    seeds: int
    steps: int
    pack: int
    goal: float  # packed runs per hour over unpacked


SECTIONS = {
    "cartpole": Section("cartpole.yaml", "proportional", 20, 50_000, 10, 3.0),
    "minatar": Section("minatar.yaml", "proportional", 10, 200_000, 5, 2.0),
}
SMOKE = {"cartpole": (2, 600), "minatar": (2, 600)}
SMOKE_SETS = ["train.learning_starts=200", "train.eval_interval=0", "train.final_eval_episodes=2"]
SIDES = ("unpacked", "packed")


@dataclass(frozen=True)
class Timed:
    """One ``ablate`` process: its wall time, each run's score and ``model.pt`` digest."""

    wall: float
    scores: dict[str, float]
    models: dict[str, str]


def run_ablate(section: Section, args: argparse.Namespace, side: str, out: Path) -> Timed:
    """One side's ``ablate`` as a fresh process, timed from start to exit; then its runs read."""
    command = [
        sys.executable, "-m", "per_dqn.cli", "ablate", "--config", section.config,
        "--replay", section.replay, "--seeds", str(args.seeds), "--steps", str(args.steps),
        "--workers", str(args.workers), "--out", str(out), "--set", "run.device=cpu",
    ]  # fmt: skip
    if side == "packed":
        command += ["--pack", str(args.pack)]
    for item in args.set:
        command += ["--set", item]
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"error: {side} ablate exited {done.returncode}:\n{done.stderr[-3000:]}")
    scores, models = {}, {}
    for summary in sorted(out.rglob("summary.json")):
        rel = summary.parent.relative_to(out).as_posix()
        scores[rel] = json.loads(summary.read_text())["final_eval_return_mean"]
        models[rel] = hashlib.sha256((summary.parent / "model.pt").read_bytes()).hexdigest()
    return Timed(wall, scores, models)


def disagreements(runs: dict[str, list[Timed]]) -> list[str]:
    """Runs whose score or model differs from the first unpacked sweep's, or that are missing."""
    first = runs["unpacked"][0]
    found = []
    for side, timed in runs.items():
        for i, t in enumerate(timed):
            if t.scores.keys() != first.scores.keys():
                found.append(f"{side} repeat {i + 1}: runs {sorted(t.scores)} against "
                             f"{sorted(first.scores)}")  # fmt: skip
                continue
            for rel in first.scores:
                if t.scores[rel] != first.scores[rel] or t.models[rel] != first.models[rel]:
                    found.append(f"{side} repeat {i + 1}: {rel} differs")
    return found


def render(name: str, section: Section, args: argparse.Namespace, runs: dict[str, list[Timed]]
           ) -> str:  # fmt: skip
    """The section's table and its ratio against the goal."""
    n = args.seeds
    rows = []
    walls = {side: median([t.wall for t in timed]) for side, timed in runs.items()}
    for side, timed in runs.items():
        label = f"--workers {args.workers}" + (f" --pack {args.pack}" if side == "packed" else "")
        rows.append([
            label, f"{walls[side]:.1f}", f"{min(t.wall for t in timed):.1f}",
            f"{n * 3600 / walls[side]:.0f}", ", ".join(f"{t.wall:.1f}" for t in timed),
        ])  # fmt: skip
    ratio = walls["unpacked"] / walls["packed"]
    met = "met" if ratio >= section.goal else "NOT met"
    lines = [
        f"## {name}: {section.config}, --replay {section.replay}, {n} seeds x {args.steps:,} "
        "env steps, CPU",
        "",
        markdown_table(["sweep", "wall s (median)", "min", "runs/hour", "wall s per repeat"], rows),
        "",
        f"packed / unpacked runs per hour (medians): {ratio:.2f}x; goal >= {section.goal:g}x: "
        f"{met}.",
    ]
    return "\n".join(lines)


def random_batch(rng: np.random.Generator, spec: EnvSpec, size: int) -> Batch:
    """A batch of ``size`` random transitions of ``spec``'s shapes (the values do not change what
    an update computes, only which numbers)."""

    def observations() -> np.ndarray:
        shape = (size, *spec.obs_shape)
        if spec.obs_dtype == np.bool_:
            return rng.random(shape) < 0.1
        if spec.obs_dtype == np.uint8:
            return rng.integers(0, 256, shape, dtype=np.uint8)
        return rng.standard_normal(shape).astype(spec.obs_dtype)

    return Batch(
        observations(), rng.integers(spec.num_actions, size=size),
        rng.standard_normal(size).astype(np.float32), observations(), rng.random(size) < 0.05,
        np.arange(size), np.ones(size, np.float32), np.ones(size, np.uint8),
    )  # fmt: skip


@dataclass(frozen=True)
class Learner:
    """Milliseconds of one update per run: alone (a pack of one each) and in one pack of K."""

    alone_ms: float
    packed_ms: float
    updates: int  # per run of the sweep


def updates_per_run(config: Any, steps: int) -> int:
    """The gradient steps a run of ``steps`` env steps on one env makes, by the loop's rule
    (``Loop.steps``): one due at ``max(learning_starts, 1)`` and every ``replay_period`` env steps
    after, each skipped (and passed) while the memory holds fewer than ``batch_size``
    transitions. The memory is taken to hold ``t - (n_step - 1)`` after env step ``t`` (an
    n-step window fills before its first transition); episode ends can only add earlier ones, so
    the count is never more than a run makes."""
    train = config.train
    first = max(train.learning_starts, 1)
    while first - (config.agent.n_step - 1) < train.batch_size:
        first += train.replay_period
    if steps < first:
        return 0
    return ((steps - first) // train.replay_period + 1) * train.gradient_steps


def time_learner(section: Section, args: argparse.Namespace) -> Learner:
    """The learner alone, K agents of the section's config learning alone and as one pack, in
    alternating rounds of ``args.learner_updates`` updates each; medians over the rounds."""
    sets = [*args.set, "run.device=cpu", f"replay.kind={section.replay}"]
    config = load_config(resolve_config_path(section.config), [parse_override(x) for x in sets])
    torch.set_num_threads(config.run.torch_threads)
    spec = env_spec(config)
    cpu = torch.device("cpu")
    alone = [make_agent(config, spec, cpu) for _ in range(args.pack)]
    members = [make_agent(config, spec, cpu) for _ in range(args.pack)]
    pack = Pack(members)  # slots 0..K-1, in this order
    rng = np.random.default_rng(0)
    batches = [random_batch(rng, spec, config.train.batch_size) for _ in range(args.pack)]
    per_run = args.learner_updates * args.pack

    def round_alone() -> float:
        start = time.perf_counter()
        for _ in range(args.learner_updates):
            for agent, batch in zip(alone, batches, strict=True):
                agent.learn(batch)
        return (time.perf_counter() - start) * 1e3 / per_run

    def round_packed() -> float:
        start = time.perf_counter()
        for _ in range(args.learner_updates):
            pack.learn(dict(enumerate(batches)))
        return (time.perf_counter() - start) * 1e3 / per_run

    round_alone(), round_packed()  # warm-up
    times: dict[str, list[float]] = {"alone": [], "packed": []}
    for i in range(args.learner_rounds):
        for side in rotated(("alone", "packed"), i):
            times[side].append(round_alone() if side == "alone" else round_packed())
    updates = updates_per_run(config, args.steps)
    return Learner(median(times["alone"]), median(times["packed"]), updates)


def render_learner(args: argparse.Namespace, learner: Learner, unpacked_wall: float) -> str:
    """The learner's table and the ceiling it sets on the sweep's ratio."""
    rows = [
        ["alone (a pack of one each)", f"{learner.alone_ms:.3f}", "1.00x"],
        [f"one pack of {args.pack}", f"{learner.packed_ms:.3f}",
         f"{learner.alone_ms / learner.packed_ms:.2f}x"],
    ]  # fmt: skip
    # The busiest worker trains at least this many runs however the packs are handed out: a
    # share of the runs, and never less than a whole pack.
    per_worker = max(-(-args.seeds // args.workers), min(args.pack, args.seeds))
    floor = per_worker * learner.updates * learner.packed_ms / 1e3
    lines = [
        f"The learner alone ({args.learner_rounds} alternating rounds of {args.learner_updates} "
        f"updates per run, medians; {learner.updates:,} updates per run of {args.steps:,} env "
        "steps):",
        "",
        markdown_table(["learner", "ms per update per run", "speed-up"], rows),
        "",
    ]
    if floor == 0:
        lines.append("Ceiling: none, the runs make no update.")
    else:
        lines.append(
            f"Ceiling: {per_worker} run{'s' * (per_worker != 1)} a worker x "
            f"{learner.updates:,} updates x {learner.packed_ms:.3f} ms = {floor:.1f} s, were all "
            f"else free, against the unpacked sweep's {unpacked_wall:.1f} s: packs can give at "
            f"most {unpacked_wall / floor:.2f}x here unless the updates get cheaper."
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_mode_options(parser)
    parser.add_argument("--section", choices=[*SECTIONS, "all"], default="all")
    parser.add_argument("--seeds", type=int, help="runs a sweep (the section's; smoke 2)")
    parser.add_argument("--steps", type=int, help="env steps a run (the section's; smoke 600)")
    parser.add_argument("--pack", type=int, help="--pack of the packed side (the section's)")
    parser.add_argument("--workers", type=int, default=2, help="--workers of both sides (2)")
    parser.add_argument("--repeats", type=int, help="sweeps a side (1)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for every run (repeatable)")  # fmt: skip
    parser.add_argument("--learner-rounds", type=int, help="rounds of the learner alone (5)")
    parser.add_argument("--learner-updates", type=int, help="updates a round (50; smoke 2)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    log = progress_log()
    names = list(SECTIONS) if args.section == "all" else [args.section]
    print(f"# {machine_line({'torch': version('torch')})}")  # per_dqn: this checkout's
    print(f"# load {load_averages()}; command `{command_line()}`")
    failed = []
    for name in names:
        section = SECTIONS[name]
        load_config(resolve_config_path(section.config))  # this checkout's, before any run
        run = argparse.Namespace(**vars(args))
        smoke_seeds, smoke_steps = SMOKE[name]
        run.seeds = args.seeds or (smoke_seeds if args.smoke else section.seeds)
        run.steps = args.steps or (smoke_steps if args.smoke else section.steps)
        run.pack = args.pack or (2 if args.smoke else section.pack)
        run.repeats = args.repeats or 1
        run.set = [*(SMOKE_SETS if args.smoke else []), *args.set]
        runs: dict[str, list[Timed]] = {side: [] for side in SIDES}
        with tempfile.TemporaryDirectory(prefix="bench-packs-") as tmp:
            for repeat in range(run.repeats):
                for side in rotated(SIDES, repeat):
                    timed = run_ablate(section, run, side, Path(tmp) / f"{name}-{side}-{repeat}")
                    runs[side].append(timed)
                    log(f"{name} repeat {repeat + 1}: {side} {timed.wall:.1f} s")
        run.learner_rounds = args.learner_rounds or (1 if args.smoke else 5)
        run.learner_updates = args.learner_updates or (2 if args.smoke else 50)
        learner = time_learner(section, run)
        print()
        print(render(name, section, run, runs))
        found = disagreements(runs)
        if found:
            print("Runs DIFFER between the sides: " + "; ".join(found))
            failed.extend(found)
        else:
            print(f"Runs agree: final_eval_return_mean and model.pt identical for all {run.seeds} "
                  f"runs, packed and unpacked, in each of {run.repeats} repeat(s).")  # fmt: skip
        print()
        print(render_learner(run, learner, median([t.wall for t in runs["unpacked"]])))
    if failed:
        raise SystemExit("error: packed and unpacked runs differ (listed above)")


if __name__ == "__main__":
    main()
