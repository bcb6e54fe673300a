"""Replay memories fed by a real learning stream: CartPole transitions, the shipped config's agent
and its TD errors clipped at 1, as `per-dqn train --config cartpole.yaml` produces them."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from per_dqn.config import Override, load_config, resolve_config_path
from per_dqn.envs.make import describe
from per_dqn.training.build import make_agent, make_memory


def first_replay_delays(kind: str, env_steps: int = 5000, seed: int = 0) -> np.ndarray:
    """For each transition stored after learning starts: transitions stored between it and its
    first replay (inf if it was never replayed).

    One CartPole env, epsilon-greedy on the learning agent, 1-step transitions, and every
    ``replay_period`` steps a batch is drawn, learnt from, and its |delta| written back, exactly
    the loop's order; cartpole.yaml sets ``replay.td_error_clip: 1``.
    """
    overrides = [Override("replay.kind", kind), Override("agent.n_step", 1)]
    cfg = load_config(resolve_config_path("cartpole.yaml"), overrides)
    train = cfg.train
    assert cfg.replay.td_error_clip == 1.0  # the tie this test is about needs the clip
    torch.manual_seed(seed)
    env = gym.make(cfg.env.id)
    spec = describe(env)
    memory = make_memory(cfg.replay, spec, seed)
    agent = make_agent(cfg, spec, torch.device("cpu"))
    rng = np.random.default_rng(seed)
    stored_at = np.full(memory.capacity, -1)
    first_replay = np.full(memory.capacity, np.inf)
    obs, _ = env.reset(seed=seed)
    for t in range(env_steps):
        eps = max(train.epsilon_end, 1.0 - t / train.epsilon_decay_steps)
        if rng.random() < eps:
            action = int(rng.integers(spec.num_actions))
        else:
            action = int(agent.greedy_actions(obs[None])[0])
        next_obs, reward, terminated, truncated, _ = env.step(action)
        slot = memory.add(obs, action, reward, next_obs, terminated)
        stored_at[slot] = t
        obs = env.reset()[0] if terminated or truncated else next_obs
        if t >= train.learning_starts and t % train.replay_period == 0:
            batch = memory.sample(train.batch_size, beta=0.4)
            fresh = batch.indices[np.isinf(first_replay[batch.indices])]
            first_replay[fresh] = t
            memory.update_priorities(batch.indices, agent.learn(batch).td_abs)
    env.close()
    late = stored_at >= train.learning_starts
    return first_replay[late] - stored_at[late]


@pytest.mark.slow
def test_rank_based_new_transitions_are_replayed_sooner_than_uniform():
    """Pins the bug where rank-based PER inserted new transitions among clipped ties.

    With ``td_error_clip`` every |delta| >= clip is stored as exactly the running maximum, the
    key new transitions enter with; a strict sift-up then left a new transition tied near the
    heap's bottom (median first replay ~520 transitions later, against ~280 under uniform). New
    transitions must be the highest-ranked item, as in Schaul et al. (2016, Algorithm 1), so
    their median wait for a first replay must be at most half of uniform's.
    """
    rank = np.median(first_replay_delays("rank"))
    uniform = np.median(first_replay_delays("uniform"))
    assert uniform > 20  # a wait long enough for the comparison to mean something
    assert rank <= 0.5 * uniform, (rank, uniform)
