"""Human-normalised scores."""

import ale_py
import gymnasium as gym
import pytest

from per_dqn.envs.atari_scores import RANDOM_HUMAN, game_name, human_normalized


def test_endpoints_by_hand():
    assert human_normalized("ALE/Pong-v5", -20.7) == 0.0
    assert human_normalized("ALE/Pong-v5", 14.6) == pytest.approx(1.0)
    # Breakout: (15.8 - 1.7) / (30.5 - 1.7) = 14.1 / 28.8
    assert human_normalized("ALE/Breakout-v5", 15.8) == pytest.approx(14.1 / 28.8)


def test_non_atari_envs_have_no_normalisation():
    assert human_normalized("CartPole-v1", 500.0) is None
    assert game_name("ALE/NotAGame-v5") is None


def test_every_game_is_a_registered_ale_env():
    gym.register_envs(ale_py)
    assert len(RANDOM_HUMAN) == 57
    missing = [name for name in RANDOM_HUMAN if f"ALE/{name}-v5" not in gym.registry]
    assert missing == []
