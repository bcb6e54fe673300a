"""What the SB3 children of the benchmarks share (``_sb3_cartpole.py``, ``_sb3_minatar.py``):
their command line, and what each prints when it has trained, a greedy evaluation and one JSON
line. It imports only SB3 and gymnasium, so the children still pay for nothing of per_dqn's."""

from __future__ import annotations

import argparse
import json
from typing import Any

import gymnasium as gym
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor


def run_parser(description: str) -> argparse.ArgumentParser:
    """``--steps``, ``--seed``, ``--threads`` and ``--eval-episodes``, all required."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True, help="torch threads")
    parser.add_argument("--eval-episodes", type=int, required=True)
    return parser


def print_result(model: Any, env_id: str, seed: int, episodes: int) -> None:
    """Evaluates ``model`` greedily for ``episodes`` episodes on a fresh ``env_id`` (reset with
    ``seed + 10_000``) and prints ``{"env_steps", "updates", "final_eval_return_mean"}``."""
    eval_env = Monitor(gym.make(env_id))
    eval_env.reset(seed=seed + 10_000)
    returns, _ = evaluate_policy(
        model, eval_env, n_eval_episodes=episodes, deterministic=True,
        return_episode_rewards=True,
    )  # fmt: skip
    print(
        json.dumps(
            {
                "env_steps": model.num_timesteps,
                # SB3 keeps its update count in a private field and logs it as train/n_updates;
                # there is no public attribute for it.
                "updates": model._n_updates,
                "final_eval_return_mean": sum(returns) / len(returns),
            }
        )
    )
