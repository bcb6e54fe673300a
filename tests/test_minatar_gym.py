"""``per_dqn.envs.minatar_gym``: MinAtar's games behind gymnasium for MinAtar 1.0.10, whose own
``minatar.gym`` is written for the old ``gym`` (issue 25: the published results ran 1.0.10 or
older, before Seaquest's oxygen fix). Checked step for step against MinAtar's own gymnasium env on
the installed release, and run on 1.0.10 (``make test`` installs it into ``.minatar-1.0.10``) in
processes of their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from support import CHECKOUT, sets, summary_of

from per_dqn.envs import minatar_gym
from per_dqn.envs.common import ChannelFirst
from per_dqn.envs.state import env_state, load_env_state

pytest.importorskip("minatar")

LEGACY = CHECKOUT / ".minatar-1.0.10"
# A dive that never surfaces: down and fire by turns, no sticky actions. Seed 1 runs out of
# oxygen on both releases; 1.0.11 ends the game at the frame oxygen reaches 0, 1.0.10 one later.
DIVE = """
import json
from per_dqn.envs import minatar_gym
env = minatar_gym.MinAtarEnv("seaquest", sticky_action_prob=0.0)
env.reset(seed=1)
frames, done = 0, False
while not done:
    done = env.step(5 if frames % 2 else 4)[2]
    frames += 1
print(json.dumps({"frames": frames, "oxygen": int(env.game.env.oxygen),
                  "release": list(minatar_gym.release()),
                  "gymnasium": minatar_gym.has_gymnasium_envs()}))
"""


def python(args: list[str], legacy: bool, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python ARGS`` in a process of its own importing this checkout, and MinAtar 1.0.10 first
    when ``legacy``."""
    path = [str(CHECKOUT)]
    if legacy:
        if not (LEGACY / "minatar").is_dir():
            pytest.fail(f"{LEGACY} holds no MinAtar 1.0.10: `make test` installs it there")
        path.insert(0, str(LEGACY))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize("game", minatar_gym.GAMES)
@pytest.mark.parametrize("minimal", [False, True], ids=["v0", "v1"])
def test_it_plays_as_minatar_s_own_gymnasium_env(game, minimal):
    """The same seed and actions give the same observations, rewards and ends as
    ``minatar.gym.BaseEnv`` (the reference, on the installed release), over 600 steps and the
    episodes' resets."""
    from minatar.gym import BaseEnv

    ours = minatar_gym.MinAtarEnv(game, use_minimal_action_set=minimal)
    theirs = BaseEnv(game, use_minimal_action_set=minimal)
    assert ours.action_space == theirs.action_space
    assert ours.observation_space == theirs.observation_space
    rng = np.random.default_rng(7)
    a, _ = ours.reset(seed=11)
    b, _ = theirs.reset(seed=11)
    assert np.array_equal(a, b)
    ends = 0
    for i in range(600):
        action = int(rng.integers(ours.action_space.n))
        ra = ours.step(action)
        rb = theirs.step(action)
        assert np.array_equal(ra[0], rb[0]) and ra[1:4] == rb[1:4], (game, i)
        if ra[2]:
            ends += 1
            a, _ = ours.reset(seed=i)
            b, _ = theirs.reset(seed=i)
            assert np.array_equal(a, b)
    assert ends or game == "freeway"  # episodes did end (Freeway's last 2,500 frames)


def test_its_state_is_checkpointed_and_restored_exactly():
    """``env_state`` captures a ``MinAtarEnv`` (its game and RandomState) mid-episode, and the
    env restored from it continues as the original did."""
    spec = gym.envs.registration.EnvSpec(
        "MinAtarLegacyTest/Seaquest-v1", entry_point="per_dqn.envs.minatar_gym:MinAtarEnv",
        kwargs={"game": "seaquest", "use_minimal_action_set": True},
    )  # fmt: skip
    env = ChannelFirst(gym.make(spec, disable_env_checker=True))
    env.reset(seed=5)
    for _ in range(40):
        env.step(4)
    saved = env_state(env)
    assert saved is not None
    actions = np.random.default_rng(0).integers(env.action_space.n, size=60)
    first = [env.step(int(a))[:3] for a in actions]
    load_env_state(env, saved)
    again = [env.step(int(a))[:3] for a in actions]
    for x, y in zip(first, again, strict=True):
        assert np.array_equal(x[0], y[0]) and x[1:] == y[1:]


def test_a_legacy_env_films_a_colour_per_layer():
    env = minatar_gym.MinAtarEnv("breakout", render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (10, 10, 3) and frame.dtype == np.uint8
    assert (frame == 0).all(axis=2).any() and (frame != 0).any()
    with pytest.raises(ValueError, match="renders 'array' or 'rgb_array', got 'human'"):
        minatar_gym.MinAtarEnv("breakout", render_mode="human")


@pytest.mark.slow
def test_minatar_1_0_10_plays_through_the_same_ids_and_keeps_its_seaquest(tmp_path):
    """On MinAtar 1.0.10 the ``MinAtar/...`` ids are this module's env, seeded as 1.0.10 seeds;
    a dive that runs out of oxygen ends one frame later than on the installed release (the oxygen
    fix of 1.0.11, the one change of behaviour between them); and ``per-dqn train`` runs a
    Seaquest DQN on it, its summary naming MinAtar 1.0.10."""
    ran = python(["-c", DIVE], legacy=False)
    assert ran.returncode == 0, ran.stderr
    new = json.loads(ran.stdout)
    ran = python(["-c", DIVE], legacy=True)
    assert ran.returncode == 0, ran.stderr
    old = json.loads(ran.stdout)
    assert old["release"] == [1, 0, 10] and not old["gymnasium"]
    assert new["gymnasium"] and tuple(new["release"]) >= minatar_gym.FIRST_GYMNASIUM_RELEASE
    assert old["frames"] == new["frames"] + 1
    assert new["oxygen"] < 0 and old["oxygen"] == new["oxygen"] - 1
    train = ["-m", "per_dqn.cli", "train", "-c", "minatar.yaml", "--steps", "1500", "-q",
             "--run-dir", "run", *sets("env.id=MinAtar/Seaquest-v1", "train.learning_starts=500",
                                       "train.eval_interval=0", "train.final_eval_episodes=2",
                                       "run.device=cpu")]  # fmt: skip
    ran = python(train, legacy=True, cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    summary = summary_of(tmp_path / "run")
    assert summary["provenance"]["versions"]["minatar"] == "1.0.10"
    assert summary["env_steps"] == 1500
