"""Stable-Baselines3's DQN on a MinAtar game with the settings of per-dqn's ``minatar.yaml``.

Not a benchmark on its own: ``benchmarks/minatar_vs_sb3.py`` runs this file as a subprocess and
times the whole process, as it times ``per-dqn train``. It does not import ``per_dqn``, so SB3's
side pays only for SB3 (and minatar). It trains for ``--steps``, evaluates the greedy policy for
``--eval-episodes`` episodes, and prints one JSON line.

The settings are ``minatar.yaml``'s (Dopamine's MinAtar DQN): Adam at 2.5e-4 with eps 3.125e-4,
gamma 0.99, learning from 1,000 transitions, one gradient step every 4 env steps, a target copy
every 1,000 env steps, a 100,000-transition memory, batches of 32, epsilon from 1 to 0.01 over
250,000 env steps, Huber loss, no gradient clipping, and the MinAtar paper's network (a 3x3
convolution of 16 channels, 128 units, a linear head) as a features extractor. SB3's DQN has no
Double-DQN target, so each of its updates runs one forward pass fewer than per_dqn's.
"""

from __future__ import annotations

import math

import gymnasium as gym
import minatar.gym
import torch
from _sb3_result import print_result, run_parser
from stable_baselines3 import DQN
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

EPSILON_DECAY_STEPS = 250_000


class MinAtarTorso(BaseFeaturesExtractor):
    """The MinAtar paper's torso on SB3's float observations ``(B, 10, 10, C)``: channels first,
    a 3x3 convolution of 16 channels (stride 1, padding 0), ReLU, a 128-unit layer, ReLU."""

    def __init__(self, observation_space: gym.spaces.Box) -> None:
        super().__init__(observation_space, features_dim=128)
        height, width, channels = observation_space.shape
        self.conv = nn.Conv2d(channels, 16, kernel_size=3, stride=1)
        self.linear = nn.Linear(16 * (height - 2) * (width - 2), 128)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(obs.permute(0, 3, 1, 2)))
        return torch.relu(self.linear(x.flatten(1)))


def main() -> None:
    """Trains, evaluates, prints ``{"env_steps", "updates", "final_eval_return_mean"}``."""
    parser = run_parser(__doc__.splitlines()[0])
    parser.add_argument("--env-id", required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    minatar.gym.register_envs()
    model = DQN(
        "MlpPolicy", args.env_id, seed=args.seed, device="cpu", verbose=0,
        learning_rate=2.5e-4, buffer_size=100_000, learning_starts=1_000, batch_size=32,
        gamma=0.99, train_freq=4, gradient_steps=1, target_update_interval=1_000,
        exploration_initial_eps=1.0, exploration_final_eps=0.01,
        exploration_fraction=min(1.0, EPSILON_DECAY_STEPS / args.steps),
        max_grad_norm=math.inf,
        policy_kwargs={"features_extractor_class": MinAtarTorso, "net_arch": [],
                       "optimizer_kwargs": {"eps": 3.125e-4}},
    )  # fmt: skip
    model.learn(total_timesteps=args.steps)
    print_result(model, args.env_id, args.seed, args.eval_episodes)


if __name__ == "__main__":
    main()
