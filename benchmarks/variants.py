"""Each replay kind's cost per gradient step against proportional PER's, on CartPole and MinAtar.

One gradient step is what the loop does every ``replay_period`` env steps: draw a batch
(``memory.sample``), learn from it (``agent.learn``: the forward passes, the loss of the kind's
objective, the backward pass, the optimiser step, the host copy, the priority signal) and hand
the priorities back (``memory.update``). Env stepping is left out: it is the same for every kind.
The memory and the agent are built from the shipped config exactly as training builds them
(``per_dqn.training.build``), the memory filled with ``--fill`` transitions of the env's observation
shape and dtype, so the priority index holds as many entries as in a run.

Each repeat times every kind once, in rotating order, for ``--steps`` gradient steps after an
untimed warm-up; the table gives the median microseconds per step over the repeats and the ratio
to proportional's (1.30x = 30 % more per step). Ratios measured in one run are what to compare
(the machine's speed drifts between runs). A last row times what LaBER cannot do without: the
three forward passes over its large batch that give it fresh ``|delta|`` (the online net on
``s`` and ``s'``, the target net on ``s'``), alone; proportional's step plus that row is the
least a LaBER step can cost.

    .venv/bin/python benchmarks/variants.py            # 2,000 steps x 5 repeats, both envs
    .venv/bin/python benchmarks/variants.py --smoke    # a few seconds, for make test
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
from _common import (
    add_mode_options,
    command_line,
    fill_defaults,
    load_averages,
    machine_line,
    markdown_table,
    median,
    package_versions,
    require_at_least,
    rotated,
)

from per_dqn.memory import KINDS

BASELINE = "proportional"
# env -> (shipped config, env id)
ENVS = {
    "CartPole": ("cartpole.yaml", "CartPole-v1"),
    "MinAtar Breakout": ("minatar.yaml", "MinAtar/Breakout-v1"),
}


def build(config_name: str, env_id: str, kind: str, fill: int, seed: int) -> tuple[Any, Any, Any]:
    """The kind's memory (filled) and agent from the shipped config, as training builds them."""
    import torch

    from per_dqn.config import Override, load_config, resolve_config_path
    from per_dqn.envs.make import describe, make_eval_env
    from per_dqn.training import build as factories

    config = load_config(
        resolve_config_path(config_name),
        [Override("replay.kind", kind), Override("env.id", env_id),
         Override("replay.capacity", max(fill, 1_000))],
    )  # fmt: skip
    env = make_eval_env(config.env)
    spec = describe(env)
    env.close()
    torch.manual_seed(seed)
    factories.set_torch_threads(torch.device("cpu"), config.run.torch_threads)
    memory = factories.make_memory(config.replay, spec, seed=seed)
    agent = factories.make_agent(config, spec, torch.device("cpu"))
    rng = np.random.default_rng(seed)
    shape = (fill, *spec.obs_shape)
    if spec.obs_dtype == np.bool_:
        obs = rng.random(shape) < 0.1
    else:
        obs = rng.normal(size=shape).astype(spec.obs_dtype)
    actions = rng.integers(0, spec.num_actions, fill)
    rewards = rng.normal(size=fill).astype(np.float32)
    terminated = rng.random(fill) < 0.01
    for start in range(0, fill, 1_000):
        end = min(start + 1_000, fill)
        nxt = np.roll(obs[start:end], -1, axis=0)
        memory.add_batch(obs[start:end], actions[start:end], rewards[start:end], nxt,
                         terminated[start:end])  # fmt: skip
    return config, memory, agent


def time_steps(config: Any, memory: Any, agent: Any, steps: int) -> float:
    """Seconds per gradient step: sample, learn, update, ``steps`` times."""
    batch_size, beta = config.train.batch_size, 0.5
    started = time.perf_counter()
    for _ in range(steps):
        batch = memory.sample(batch_size, beta)
        memory.update(agent.learn(batch).priorities)
    return (time.perf_counter() - started) / steps


def forward_floor(config: Any, memory: Any, agent: Any, steps: int) -> float:
    """Seconds a step of LaBER spends on its large batch's forward passes alone: three passes
    without gradients over ``large_batch * B`` rows (the online net on s and s', the target net
    on s'; the two nets are the same shape, so three online passes cost the same)."""
    batch = memory.sample(config.train.batch_size, 0.5)
    started = time.perf_counter()
    for _ in range(steps):
        for obs in (batch.obs, batch.next_obs, batch.next_obs):
            agent.q_values(obs)
    return (time.perf_counter() - started) / steps


def measure(args: argparse.Namespace, config_name: str, env_id: str) -> dict[str, list[float]]:
    """Each kind's seconds per step, one value per repeat."""
    built = {kind: build(config_name, env_id, kind, args.fill, args.seed) for kind in args.kinds}
    for kind in args.kinds:  # warm-up: kernels compiled, allocator settled
        time_steps(*built[kind], args.warmup)
    seconds: dict[str, list[float]] = {kind: [] for kind in args.kinds}
    floor = "laber: its large batch's 3 forward passes alone"
    if "laber" in built:
        seconds[floor] = []
    for repeat in range(args.repeats):
        for kind in rotated(args.kinds, repeat):
            seconds[kind].append(time_steps(*built[kind], args.steps))
        if "laber" in built:
            seconds[floor].append(forward_floor(*built["laber"], args.steps))
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, help="gradient steps a timing (2,000; smoke 20)")
    parser.add_argument("--repeats", type=int, help="timings of each kind (5; smoke 1)")
    parser.add_argument("--warmup", type=int, help="untimed steps first (300; smoke 5)")
    parser.add_argument("--fill", type=int, help="transitions in the memory (50,000; smoke 500)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds")
    add_mode_options(parser)
    args = parser.parse_args(argv)
    fill_defaults(args, {"steps": (2_000, 2_000, 20), "repeats": (5, 5, 1),
                         "warmup": (300, 300, 5), "fill": (50_000, 50_000, 500)})  # fmt: skip
    require_at_least(parser, args, 1, "steps", "repeats", "fill")
    args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in args.kinds if k not in KINDS]
    if unknown or BASELINE not in args.kinds:
        parser.error(f"--kinds must be kinds of {', '.join(KINDS)} including {BASELINE}")

    import torch

    print(f"`{command_line()}`\n")
    print(machine_line(package_versions("torch", "numpy", "numba", "minatar")))
    print(f"load averages before: {load_averages()}\n")
    for title, (config_name, env_id) in ENVS.items():
        seconds = measure(args, config_name, env_id)
        base = median(seconds[BASELINE])
        rows = [
            [kind, f"{median(v) * 1e6:,.0f}", f"{min(v) * 1e6:,.0f}", f"{max(v) * 1e6:,.0f}",
             f"{median(v) / base:.2f}x"]
            for kind, v in seconds.items()
        ]  # fmt: skip
        threads = torch.get_num_threads()
        print(f"{title} ({config_name}, batch {build_batch(config_name)}, torch threads "
              f"{threads}), {args.steps:,} gradient steps x {args.repeats}:\n")  # fmt: skip
        print(markdown_table(["kind", "us/step (median)", "min", "max", f"/ {BASELINE}"], rows))
        print()
    print(f"load averages after: {load_averages()}")


def build_batch(config_name: str) -> int:
    """The config's batch size (the table's caption)."""
    from per_dqn.config import load_config, resolve_config_path

    return load_config(resolve_config_path(config_name)).train.batch_size


if __name__ == "__main__":
    main()
