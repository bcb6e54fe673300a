"""Stable-Baselines3's DQN on CartPole-v1 with rl-baselines3-zoo's hyperparameters, one run.

Not a benchmark on its own: ``benchmarks/cartpole_vs_sb3.py`` runs this file as a subprocess and
times the whole process, as it times ``per-dqn train``. It imports neither ``per_dqn`` nor
``_common``, so SB3's side pays only for SB3. It trains for ``--steps``, evaluates the greedy
policy for ``--eval-episodes`` episodes, and prints one JSON line.

The hyperparameters are rl-baselines3-zoo's ``hyperparams/dqn.yml`` entry ``CartPole-v1``
("Almost Tuned"; commit ce95481b), the settings ``python train.py --algo dqn --env CartPole-v1``
trains with: ``n_timesteps: 5e4``, ``policy: MlpPolicy``, ``learning_rate: 2.3e-3``,
``batch_size: 64``, ``buffer_size: 100000``, ``learning_starts: 1000``, ``gamma: 0.99``,
``target_update_interval: 10``, ``train_freq: 256``, ``gradient_steps: 128``,
``exploration_fraction: 0.16``, ``exploration_final_eps: 0.04``,
``policy_kwargs: dict(net_arch=[256, 256])``; one env, SB3's defaults for everything else.
"""

from __future__ import annotations

import torch
from _sb3_result import print_result, run_parser
from stable_baselines3 import DQN

ENV_ID = "CartPole-v1"
ZOO = {
    "learning_rate": 2.3e-3,
    "batch_size": 64,
    "buffer_size": 100_000,
    "learning_starts": 1000,
    "gamma": 0.99,
    "target_update_interval": 10,
    "train_freq": 256,
    "gradient_steps": 128,
    "exploration_fraction": 0.16,
    "exploration_final_eps": 0.04,
    "policy_kwargs": {"net_arch": [256, 256]},
}


def main() -> None:
    """Trains, evaluates, prints ``{"env_steps", "updates", "final_eval_return_mean"}``."""
    parser = run_parser(__doc__.splitlines()[0])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = DQN("MlpPolicy", ENV_ID, seed=args.seed, device="cpu", verbose=0, **ZOO)
    model.learn(total_timesteps=args.steps)
    print_result(model, ENV_ID, args.seed, args.eval_episodes)


if __name__ == "__main__":
    main()
