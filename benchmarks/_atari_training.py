"""Sections 4 and 5 of ``benchmarks/atari.py``: the whole training loop, and Stable-Baselines3.

Short real runs of ``atari100k.yaml``: ``per_dqn``'s ``Trainer`` with uniform and proportional
replay (and with SB3's algorithm), against SB3's ``DQN("CnnPolicy")`` on the same env pipeline when
``stable_baselines3`` imports; repeats interleaved, each run in a fresh process; SPS, update
counts and peak resident memory. Also the config loader that the env section (1) shares.

Not a benchmark on its own: ``atari.py`` runs it (``--sections train``), and its docstring says
what is measured.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import gb, markdown_table, median, mode, peak_rss_bytes, relative_spread
from atari_env import quiet_ale

from per_dqn.config import Config, load_config, parse_override, resolve_config_path
from per_dqn.envs.make import make_eval_env
from per_dqn.training.memory_plan import PROCESS_OVERHEAD_BYTES
from per_dqn.training.run import Trainer

CONFIG = "atari100k.yaml"
HAVE_SB3 = importlib.util.find_spec("stable_baselines3") is not None
SB3_INSTALL = ".venv/bin/python -m pip install --constraint constraints.txt stable-baselines3"
TRAIN_CAPACITY = 10_000
TRAIN_MAX_EPISODE_STEPS = 500  # smoke: 20
PER_OVERHEAD_TARGET = 0.05


def load_atari_config(args: argparse.Namespace, extra: list[str] = ()) -> Config:
    """``atari100k.yaml`` with ``env.id`` set to ``--env-id`` and ``extra`` overrides."""
    overrides = [f"env.id={args.env_id}", *extra]
    return load_config(resolve_config_path(CONFIG), [parse_override(t) for t in overrides])


def train_overrides(args: argparse.Namespace, kind: str, steps: int, seed: int) -> list[str]:
    """The ``--set`` overrides of one short training run."""
    overrides = [
        f"replay.kind={kind}",
        f"replay.capacity={TRAIN_CAPACITY}",
        f"train.total_env_steps={steps}",
        f"train.learning_starts={args.learning_starts}",
        "train.eval_interval=0",
        "train.final_eval_episodes=1",
        f"env.max_episode_steps={20 if mode(args) == 'smoke' else TRAIN_MAX_EPISODE_STEPS}",
        "run.device=cpu",
        f"run.seed={seed}",
    ]
    if "checkpoint" in Config.model_fields:
        overrides.append("checkpoint.enabled=false")
    if args.train_threads:
        overrides.append(f"run.torch_threads={args.train_threads}")
    return overrides


# SB3 DQN's algorithm in per_dqn: what the parity row sets on top of atari100k.yaml.
SB3_ALGORITHM = ["agent.double=false", "agent.dueling=false", "agent.n_step=1"]


def train_run(args: argparse.Namespace, key: str, steps: int, run_dir: str) -> dict[str, Any]:
    """One ``Trainer`` run (in a fresh process); its SPS, counts and peak RSS.

    ``key`` is a replay kind, or ``parity``: uniform replay with SB3's algorithm.
    """
    quiet_ale()
    kind, extra = ("uniform", SB3_ALGORITHM) if key == "parity" else (key, [])
    config = load_atari_config(args, train_overrides(args, kind, steps, args.seed) + extra)
    trainer = Trainer(config, Path(CONFIG).stem)
    try:
        summary = trainer.run(Path(run_dir))
    finally:
        trainer.close()
    return {
        "sps": summary["sps"],
        "env_steps": summary["env_steps"],
        "update_steps": summary["update_steps"],
        "peak_rss": peak_rss_bytes(),
        "replay_nbytes": trainer.memory.nbytes,
    }


def sb3_run(args: argparse.Namespace, steps: int) -> dict[str, Any]:
    """SB3 DQN on the same env pipeline and settings (in a fresh process)."""
    # Imported here, in its own process, so SB3's import costs no per_dqn run any memory.
    import gymnasium as gym
    from stable_baselines3 import DQN

    quiet_ale()
    config = load_atari_config(args, train_overrides(args, "uniform", steps, args.seed))
    torch.set_num_threads(config.run.torch_threads)
    env = make_eval_env(config.env)
    if config.env.clip_rewards:
        env = gym.wrappers.TransformReward(env, lambda r: float(np.clip(r, -1.0, 1.0)))
    eval_env = make_eval_env(config.env)
    agent, train = config.agent, config.train
    model = DQN(
        "CnnPolicy",
        env,
        buffer_size=config.replay.capacity,
        learning_starts=train.learning_starts,
        batch_size=train.batch_size,
        train_freq=train.replay_period,
        gradient_steps=train.gradient_steps,
        target_update_interval=agent.target_update_interval,
        learning_rate=agent.learning_rate,
        gamma=agent.gamma,
        exploration_initial_eps=train.epsilon_start,
        exploration_final_eps=train.epsilon_end,
        exploration_fraction=train.epsilon_decay_steps / steps,  # > 1: still mid-decay at the end
        max_grad_norm=agent.grad_clip_norm,
        policy_kwargs={"optimizer_kwargs": {"eps": agent.adam_eps}},
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    obs, _ = eval_env.reset(seed=args.seed + 10_000)
    done = False
    while not done:
        action, _ = model.predict(obs, deterministic=True)
        obs, _, terminated, truncated, _ = eval_env.step(int(action))
        done = terminated or truncated
    wall = time.perf_counter() - start
    buffer = model.replay_buffer
    return {
        "sps": model.num_timesteps / wall,
        "env_steps": model.num_timesteps,
        # SB3 keeps its update count in a private field (logged as train/n_updates); it has no
        # public attribute for it.
        "update_steps": model._n_updates,
        "peak_rss": peak_rss_bytes(),
        "replay_nbytes": sum(v.nbytes for v in vars(buffer).values() if isinstance(v, np.ndarray)),
    }


def in_fresh_process(fn: Callable[..., dict[str, Any]], *fn_args: Any) -> dict[str, Any]:
    """Runs ``fn(*fn_args)`` in a new spawned process and returns its result.

    A smoke run (``args``, the first argument, says so) runs it in this process instead: a
    spawned process costs seconds of imports, and a smoke run's figures mean nothing anyway.
    """
    if mode(fn_args[0]) == "smoke":
        return fn(*fn_args)
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *fn_args).result()


TRAIN_ROWS = {
    "uniform": "per_dqn Trainer, replay uniform",
    "proportional": "per_dqn Trainer, replay proportional",
    "parity": "per_dqn Trainer, SB3's algorithm (uniform, 1-step, no dueling, no Double DQN)",
    "sb3": "SB3 DQN (CnnPolicy, uniform replay)",
}


def measure_training(args: argparse.Namespace, log: Callable[[str], None]) -> str:
    """Sections 4 and 5: short real runs, interleaved repeats, each run in its own process."""
    keys = ["uniform", "proportional", *(["parity", "sb3"] if HAVE_SB3 else [])]
    runs: dict[str, list[dict[str, Any]]] = {key: [] for key in keys}
    with tempfile.TemporaryDirectory(prefix="bench-atari-") as tmp:
        # Untimed warm-up: numba's on-disk cache of every replay kernel, torch's first calls.
        # (A smoke run trains in this process and times nothing that matters: no warm-up.)
        if mode(args) != "smoke":
            in_fresh_process(
                train_run, args, "proportional", args.learning_starts + 8, f"{tmp}/warm-up"
            )
            log("train: warm-up run done")
        for r in range(args.train_repeats):
            shift = r % len(keys)
            for key in keys[shift:] + keys[:shift]:
                if key == "sb3":
                    result = in_fresh_process(sb3_run, args, args.train_steps)
                else:
                    run_dir = f"{tmp}/{key}-{r}"
                    result = in_fresh_process(train_run, args, key, args.train_steps, run_dir)
                runs[key].append(result)
                log(f"train: {key} repeat {r + 1}: {result['sps']:.1f} SPS")
    rows = []
    for key in keys:
        sps = [run["sps"] for run in runs[key]]
        last = runs[key][-1]
        rows.append(
            [
                TRAIN_ROWS[key],
                f"{median(sps):.1f}",
                ", ".join(f"{s:.1f}" for s in sps),
                f"{last['env_steps']:,}",
                f"{last['update_steps']:,}",
                gb(max(run["peak_rss"] for run in runs[key])),
                gb(last["replay_nbytes"]),
            ]
        )
    headers = [
        "run",
        "SPS median",
        "SPS per repeat",
        "env steps",
        "updates",
        "peak RSS",
        "replay arrays",
    ]
    paired = [
        u["sps"] / p["sps"] - 1.0
        for u, p in zip(runs["uniform"], runs["proportional"], strict=True)
    ]
    overhead = median(paired)
    verdict = "met" if overhead <= PER_OVERHEAD_TARGET else "NOT met"
    spread = max(relative_spread([run["sps"] for run in runs[k]]) for k in runs)
    if args.train_repeats < 2:
        verdict += " (one repeat: no spread to tell noise by)"
    elif spread > PER_OVERHEAD_TARGET:
        verdict += (
            f" (but one row's repeats spread by {spread:.0%}, more than the target: "
            "the difference is within the noise of this machine)"
        )
    process = max(
        run["peak_rss"] - run["replay_nbytes"] for key in ("uniform", "proportional")
        for run in runs[key]
    )  # fmt: skip
    overrides = train_overrides(args, "<kind>", args.train_steps, args.seed)
    threads = load_atari_config(args, overrides[1:]).run.torch_threads
    source = "--train-threads" if args.train_threads else "the config's run.torch_threads"
    lines = [
        f"### 4. Whole training loop: {CONFIG}, {args.env_id}, {args.train_steps:,} env steps",
        "",
        f"Overrides: {', '.join(overrides)}, env.id={args.env_id}; torch threads {threads} "
        f"({source}). SPS = summary['sps'] (env steps / wall time of Trainer.run, final "
        f"1-episode evaluation included); {args.train_repeats} interleaved repeat(s), each run in "
        "a fresh process, after one untimed warm-up run.",
        "",
        markdown_table(headers, rows),
        "",
        f"- PER overhead (uniform SPS / proportional SPS - 1, median of per-repeat pairs): "
        f"{overhead:+.1%} (per-repeat {min(paired):+.1%} to {max(paired):+.1%}); target <= "
        f"{PER_OVERHEAD_TARGET:.0%}: {verdict}.",
        f"- Training process resident memory apart from the replay arrays (peak RSS - replay "
        f"nbytes, worst run): {gb(process)}; per_dqn.training.memory_plan assumes "
        f"{gb(PROCESS_OVERHEAD_BYTES)}.",
        "",
        "### 5. Stable-Baselines3 DQN on the same game",
        "",
    ]
    if HAVE_SB3:
        ratios = [
            p["sps"] / s["sps"] for p, s in zip(runs["proportional"], runs["sb3"], strict=True)
        ]
        parity = [p["sps"] / s["sps"] for p, s in zip(runs["parity"], runs["sb3"], strict=True)]
        lines += [
            f"- Measured in the table above (same repeats, same env pipeline and settings; SB3 "
            f"does no dueling, Double DQN, n-step or PER). per_dqn proportional SPS / SB3 SPS: "
            f"{median(ratios):.2f}x (per-repeat {min(ratios):.2f}x to {max(ratios):.2f}x).",
            f"- The same algorithm as SB3 ({', '.join(SB3_ALGORITHM)}, uniform replay): "
            f"{median(parity):.2f}x (per-repeat {min(parity):.2f}x to {max(parity):.2f}x). "
            "Double DQN adds a third forward pass to every update.",
        ]
    else:
        lines.append(
            f"- Not measured: stable_baselines3 is not importable. Install it with `{SB3_INSTALL}`"
            " (this benchmark feeds SB3 per_dqn's env, so OpenCV is not needed)."
        )
    return "\n".join(lines)
