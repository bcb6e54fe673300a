"""Pins gymnasium 1.x's next-step autoreset, which the training loop is written against."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from typer.testing import CliRunner

from per_dqn.cli import app
from per_dqn.config import EnvConfig
from per_dqn.envs import common
from per_dqn.envs.families import classic
from per_dqn.envs.make import describe, make_eval_env, make_vector_env


def test_the_step_after_an_episode_end_only_resets():
    """After a terminal step, the next step returns a reset obs, reward 0 and no flags.

    The loop must not store that step as a transition; if gymnasium switched to same-step
    autoreset, this test fails before the loop silently stores wrong transitions.
    """
    envs = make_vector_env(EnvConfig(id="CartPole-v1", num_envs=1))
    envs.reset(seed=0)
    for _ in range(1000):  # always pushing right ends an episode within a few dozen steps
        obs, reward, terminated, truncated, _ = envs.step(np.array([1]))
        if terminated[0]:
            break
    else:
        pytest.fail("CartPole never terminated")
    assert abs(obs[0, 2]) > 0.2 or abs(obs[0, 0]) > 2.4, "terminal step returns the final obs"
    obs, reward, terminated, truncated, _ = envs.step(np.array([1]))
    assert reward[0] == 0.0 and not terminated[0] and not truncated[0]
    assert np.all(np.abs(obs[0]) <= 0.05), "a CartPole reset obs lies in [-0.05, 0.05]"
    envs.close()


def test_truncation_returns_the_true_last_obs():
    """With a time limit of 3, the truncating step's obs is the state after the third step."""
    envs = make_vector_env(EnvConfig(id="CartPole-v1", num_envs=1, max_episode_steps=3))
    reference = make_eval_env(EnvConfig(id="CartPole-v1"))
    obs, _ = envs.reset(seed=5)
    ref_obs, _ = reference.reset(seed=5)
    np.testing.assert_array_equal(obs[0], ref_obs)
    for _ in range(3):
        obs, _, terminated, truncated, info = envs.step(np.array([0]))
        ref_obs, *_ = reference.step(0)
        np.testing.assert_array_equal(obs[0], ref_obs)
    assert truncated[0] and not terminated[0]
    assert "final_obs" not in info
    envs.close()


def test_describe_cartpole():
    spec = describe(make_eval_env(EnvConfig(id="CartPole-v1")))
    assert spec.obs_shape == (4,)
    assert spec.obs_dtype == np.float32
    assert spec.num_actions == 2


@pytest.mark.parametrize(
    ("env_id", "message"),
    [
        ("NoSuchEnv-v0", "cannot make 'NoSuchEnv-v0'"),
        ("ALE/Pongg-v5", "ale-py ships no ROM for 'pongg'"),
        ("Pendulum-v1", "DQN needs a Discrete action space"),
        # Pins a bug: an id without its version was made (gymnasium takes the latest, with a
        # warning), so runs of one env could name it two ways and a report count two envs.
        ("CartPole", "'CartPole' names no version; write 'CartPole-v1'"),
        ("MinAtar/Breakout", "'MinAtar/Breakout' names no version; write 'MinAtar/Breakout-v1'"),
        (
            "gymnasium.envs.classic_control:Acrobot",
            "write 'gymnasium.envs.classic_control:Acrobot-v1'",
        ),
    ],
)
def test_unusable_envs_name_the_key(env_id, message):
    with pytest.raises(ValueError, match=message) as info:
        make_vector_env(EnvConfig(id=env_id))
    assert str(info.value).startswith("env.id: ")


def test_an_env_whose_own_dependency_is_missing_is_one_line(workdir):
    """Pins a bug: an id gymnasium has registered but cannot import the code of (its own
    dependency missing: ``phys2d/CartPole-v1`` without jax, ``Reacher-v2`` without mujoco) raised
    ``ImportError`` past the check that names ``env.id``, so ``train``, ``plan``, ``config
    validate`` and ``ablate`` showed a traceback. Here a throwaway env whose entry point's package
    is absent: ``train`` gives one line naming the key and the package, exit 2, and makes no run
    dir."""
    gym.register("Throwaway/NeedsMissing-v0", entry_point="no_such_package_for_per_dqn.envs:Env")
    try:
        result = CliRunner().invoke(app, ["train", "--config", "cartpole.yaml", "--set",
                                          "env.id=Throwaway/NeedsMissing-v0"])  # fmt: skip
    finally:
        del gym.registry["Throwaway/NeedsMissing-v0"]
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "error: cartpole.yaml: env.id: cannot make 'Throwaway/NeedsMissing-v0': it needs a "
        "package that is not installed: No module named 'no_such_package_for_per_dqn'"
    ]
    assert list(workdir.iterdir()) == []


def test_an_unversioned_id_a_family_prefixes_is_named_as_the_config_wrote_it():
    """A family whose ids prefix gymnasium's (docs/extending.md's ``ToyText/FrozenLake-v1``, made
    as ``FrozenLake-v1``): the refusal names ``env.id`` as written, and the id to write keeps the
    family's prefix (it named gymnasium's, which would move the run to another family)."""
    config = EnvConfig(id="ToyText/FrozenLake")
    with pytest.raises(ValueError, match=r"^env.id: 'ToyText/FrozenLake' names no version; "
                                         r"write 'ToyText/FrozenLake-v1'"):  # fmt: skip
        common.make_gym(config, classic.FAMILY, gym_id="FrozenLake")


def test_an_unversioned_minatar_id_is_refused_again_without_registering_every_env_again():
    """Pins a bug: each try of an unversioned MinAtar id registered MinAtar's ids again, and
    gymnasium warned once per env (ten warning lines above the one-line error)."""
    import warnings

    for _ in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(ValueError, match="names no version; write 'MinAtar/Breakout-v1'"):
                make_eval_env(EnvConfig(id="MinAtar/Breakout"))


@pytest.mark.atari
def test_atari_game_view_films_the_emulator_s_rgb_screen_in_lockstep():
    """Issue 13, part 3, item 5: `eval --video` filmed the agent's 84x84 grayscale view. The
    game view renders the emulator's own 210x160 RGB screen from a second emulator stepped in
    lockstep (same seeds, same actions, sticky actions and no-op starts included); the env checks
    frame numbers, lives and rewards at every step, across episode ends, and refuses a film of
    another game."""
    config = EnvConfig(id="ALE/Breakout-v5", max_episode_steps=60, sticky_action_prob=0.25)
    env = make_eval_env(config, render=True, view="game")
    agent_view = make_eval_env(config, render=True, view="agent")
    rng = np.random.default_rng(0)
    try:
        for episode in range(3):
            seed = 5 if episode == 0 else None
            obs, _ = env.reset(seed=seed)
            np.testing.assert_array_equal(obs, agent_view.reset(seed=seed)[0])
            done = False
            while not done:
                action = int(rng.integers(env.action_space.n))
                obs, reward, terminated, truncated, _ = env.step(action)
                other = agent_view.step(action)
                np.testing.assert_array_equal(obs, other[0])  # the agent's input is unchanged
                assert reward == other[1]
                done = terminated or truncated
        frame = env.render()
        assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8
        colours = np.unique(frame.reshape(-1, 3), axis=0)
        assert (colours[:, 0] != colours[:, 2]).any()  # colour, not gray in three channels
        assert agent_view.render().shape == (84, 84, 3)
        gray = agent_view.render()
        assert (gray[..., 0] == gray[..., 2]).all()
        # A negative control: the filming emulator reset with another seed is caught.
        env.reset(seed=1)
        env._screen.reset(seed=2)
        with pytest.raises(RuntimeError, match="fell out of step"):
            for _ in range(60):
                env.step(0)
    finally:
        env.close()
        agent_view.close()


def test_agent_view_of_a_vector_observation_is_refused():
    with pytest.raises(ValueError, match="CartPole-v1's observations are not images"):
        make_eval_env(EnvConfig(id="CartPole-v1"), render=True, view="agent")
