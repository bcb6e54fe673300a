"""The envs' state as a checkpoint keeps it (``per_dqn.envs.state``: ``env_state``,
``load_env_state``; ``per_dqn.envs.make.Envs.state_dict``): MinAtar's game state, the refusals,
and what a run's ``Envs`` saves.

tests/test_checkpoint.py has the classic-control envs and the vector env; here each MinAtar game
continues the same game after a restore (its positions, timers, entity lists, sticky action and
the RandomState both its objects share), and a state that does not fit is refused with the line
that names why, before anything changes."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
from test_families import shipped_config

from per_dqn.config import Override, load_config, resolve_config_path
from per_dqn.envs import state
from per_dqn.envs.families import FAMILIES
from per_dqn.envs.make import Envs, check_env_state, env_state, load_env_state, make_eval_env
from per_dqn.rundir import arrays

MINATAR_GAMES = [
    "MinAtar/Asterix-v1", "MinAtar/Breakout-v1", "MinAtar/Freeway-v1", "MinAtar/Seaquest-v1",
    "MinAtar/SpaceInvaders-v1",
]  # fmt: skip


def minatar(env_id: str):
    cfg = load_config(resolve_config_path("minatar.yaml"), [Override("env.id", env_id)])
    return make_eval_env(cfg.env)


def through_files(tree, tmp_path):
    """A tree as a checkpoint stores it: npz + JSON, read back."""
    arrays.save_tree(tmp_path / "t.npz", tmp_path / "t.json", tree)
    return arrays.load_tree(tmp_path / "t.npz", tmp_path / "t.json")


def play(env, actions):
    """Steps through ``actions``, resetting after each episode; every step's outputs."""
    out = []
    for action in actions:
        obs, reward, terminated, truncated, _ = env.step(int(action))
        out.append((obs.copy(), reward, terminated, truncated))
        if terminated or truncated:
            out.append((env.reset()[0].copy(), None, None, None))
    return out


def assert_same_play(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x[0], y[0])
        assert x[1:] == y[1:]


@pytest.mark.parametrize("env_id", MINATAR_GAMES)
def test_a_restored_minatar_game_plays_on_exactly(env_id, tmp_path):
    """Pins MinAtar's capture and restore: a game restored (through npz + JSON) into an env that
    was playing another game gives, for the same 600 actions, the same observations, rewards,
    ends and resets as the original (sticky actions and spawns draw from the restored
    RandomState; entity lists, timers and maps come back)."""
    env, other = minatar(env_id), minatar(env_id)
    try:
        actions = np.random.default_rng(0).integers(env.action_space.n, size=700)
        env.reset(seed=1)
        play(env, actions[:100])
        state = through_files(env_state(env), tmp_path)
        other.reset(seed=2)
        play(other, actions[300:350])
        load_env_state(other, state)
        assert_same_play(play(env, actions[100:]), play(other, actions[100:]))
    finally:
        env.close()
        other.close()


def test_a_restored_game_does_not_share_its_arrays_with_the_state(tmp_path):
    """Pins the copies on restore: Breakout's brick map, loaded from a state, belongs to the game
    alone, so the bricks the game breaks afterwards are not written into the state it came from
    (a second restore from it replays the same game)."""
    env = minatar("MinAtar/Breakout-v1")
    try:
        env.reset(seed=3)
        state = through_files(env_state(env), tmp_path)
        bricks = state["physics"]["minatar"]["game"]["brick_map"].copy()
        actions = np.random.default_rng(1).integers(env.action_space.n, size=600)
        load_env_state(env, state)
        first = play(env, actions)
        np.testing.assert_array_equal(state["physics"]["minatar"]["game"]["brick_map"], bricks)
        load_env_state(env, state)
        assert_same_play(first, play(env, actions))
    finally:
        env.close()


def test_a_captured_game_is_a_snapshot_of_that_moment():
    """Pins the copies on capture: a state taken, then left in memory while the game plays on,
    still restores the moment it was taken (the brick map is the game's at capture)."""
    env = minatar("MinAtar/Breakout-v1")
    try:
        env.reset(seed=3)
        actions = np.random.default_rng(1).integers(env.action_space.n, size=600)
        state = env_state(env)
        kept = copy.deepcopy(state)
        first = play(env, actions)
        load_env_state(env, state)
        np.testing.assert_array_equal(
            state["physics"]["minatar"]["game"]["brick_map"],
            kept["physics"]["minatar"]["game"]["brick_map"],
        )
        assert_same_play(first, play(env, actions))
    finally:
        env.close()


def test_a_minatar_state_of_another_game_is_refused_and_changes_nothing():
    """Pins the MinAtar checks: another game's state names the game it is not; a state whose
    sticky-action fields differ is refused; a RandomState that cannot be set is refused; and
    the game is untouched by each refusal.

    A RandomState with too few keys made numpy raise IndexError, which ``check_env_state`` let
    through: ``train --resume`` of such a checkpoint (resealed) ended in a traceback and exit 1
    instead of one line and exit 2."""
    seaquest, breakout = minatar("MinAtar/Seaquest-v1"), minatar("MinAtar/Breakout-v1")
    try:
        seaquest.reset(seed=1)
        breakout.reset(seed=1)
        before = env_state(breakout)
        with pytest.raises(ValueError, match=r"^the checkpoint's MinAtar state is not breakout's$"):
            load_env_state(breakout, env_state(seaquest))
        outer = env_state(breakout)
        del outer["physics"]["minatar"]["outer"]["last_action"]
        with pytest.raises(ValueError, match=r"^the checkpoint's MinAtar state is not breakout's$"):
            check_env_state(breakout, outer)
        bad_random = env_state(breakout)
        bad_random["physics"]["minatar"]["random"]["keys"] = np.zeros(3, dtype=np.uint32)
        with pytest.raises(ValueError, match=r"^malformed env state \(IndexError: "):
            load_env_state(breakout, bad_random)
        after = env_state(breakout)
        np.testing.assert_array_equal(
            after["physics"]["minatar"]["game"]["brick_map"],
            before["physics"]["minatar"]["game"]["brick_map"],
        )
        assert (
            after["physics"]["minatar"]["random"]["pos"]
            == (before["physics"]["minatar"]["random"]["pos"])
        )
    finally:
        seaquest.close()
        breakout.close()


def cartpole_envs(num_envs: int = 2) -> Envs:
    cfg = load_config(resolve_config_path("cartpole.yaml"), [Override("env.num_envs", num_envs)])
    return Envs(cfg.env)


def step_both(envs: Envs, actions: np.ndarray) -> list:
    """Steps the training envs and the eval env with ``actions`` (one row per step); every
    output of both."""
    out = []
    for row in actions:
        out.append([x.copy() for x in envs.train.step(row)[:4]])
        obs, reward, terminated, truncated, _ = envs.eval.step(int(row[0]))
        out.append([obs.copy(), reward, terminated, truncated])
        if terminated or truncated:
            out.append([envs.eval.reset()[0].copy()])
    return out


def assert_same_steps(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x, y, strict=True):
            np.testing.assert_array_equal(u, v)


def test_a_run_s_envs_state_holds_both_envs_and_restores_them_in_place(tmp_path):
    """Pins ``Envs.state_dict`` / ``load_state_dict``: the training vector env and the eval env
    are both captured (as ``train`` and ``eval``) and both continue exactly, in the objects the
    loop holds, after a restore into envs that were elsewhere."""
    saved, restored = cartpole_envs(), cartpole_envs()
    try:
        actions = np.random.default_rng(0).integers(2, size=(300, 2))
        saved.train.reset(seed=1)
        saved.eval.reset(seed=2)
        step_both(saved, actions[:30])
        state = through_files(saved.state_dict(), tmp_path)
        assert state["train"]["kind"] == "SyncVectorEnv" and state["eval"]["kind"] == "CartPoleEnv"
        train, evaluation = restored.train, restored.eval
        restored.train.reset(seed=5)
        restored.eval.reset(seed=6)
        restored.load_state_dict(state)
        assert restored.train is train and restored.eval is evaluation
        assert_same_steps(step_both(saved, actions[30:]), step_both(restored, actions[30:]))
    finally:
        saved.close()
        restored.close()


def test_a_part_saved_as_none_leaves_that_env_as_it_was(tmp_path):
    """Pins the None part (an env whose state could not be saved): the other env is restored,
    this one is left to the caller's seeded reset, untouched."""
    saved, restored = cartpole_envs(), cartpole_envs()
    try:
        saved.train.reset(seed=1)
        saved.eval.reset(seed=2)
        restored.train.reset(seed=5)
        restored.eval.reset(seed=6)
        state = saved.state_dict()
        state["eval"] = None
        eval_before = restored.state_dict()["eval"]
        restored.load_state_dict(state)
        np.testing.assert_array_equal(
            restored.eval.unwrapped.state, eval_before["physics"]["state"]
        )
        np.testing.assert_array_equal(
            restored.train.envs[0].unwrapped.state, saved.train.envs[0].unwrapped.state
        )
    finally:
        saved.close()
        restored.close()


def test_a_run_s_envs_state_that_does_not_fit_is_refused_naming_the_env():
    """Pins the refusals of ``Envs.check_state_dict``, each one line: a state without exactly
    ``train`` and ``eval``, then a part of other envs, prefixed with which env it is; and a
    refused state changes neither env (the whole is checked first)."""
    envs, three = cartpole_envs(2), cartpole_envs(3)
    acrobot = gym.make("Acrobot-v1", disable_env_checker=True)
    try:
        envs.train.reset(seed=1)
        envs.eval.reset(seed=2)
        three.train.reset(seed=1)
        acrobot.reset(seed=1)
        shape = r"^the envs' state must hold `train` and `eval`$"
        for bad in ([], {"train": None}, {"train": None, "eval": None, "more": None}):
            with pytest.raises(ValueError, match=shape):
                envs.check_state_dict(bad)
        state = envs.state_dict()
        wrong_train = {**state, "train": three.state_dict()["train"]}
        with pytest.raises(
            ValueError,
            match=r"^train env: the checkpoint has 3 sub-envs, this run 2 \(env.num_envs\)$",
        ):
            envs.load_state_dict(wrong_train)
        # A train part that fits (the envs one step on) and an eval part that does not.
        envs.train.step(np.zeros(2, dtype=np.int64))
        wrong_eval = {"train": envs.state_dict()["train"], "eval": env_state(acrobot)}
        envs.load_state_dict(state)
        before = envs.state_dict()
        with pytest.raises(ValueError, match=r"^eval env: the checkpoint's env is "):
            envs.load_state_dict(wrong_eval)
        after = envs.state_dict()
        for i in range(2):
            np.testing.assert_array_equal(
                after["train"]["envs"][i]["physics"]["state"],
                before["train"]["envs"][i]["physics"]["state"],
            )
    finally:
        envs.close()
        three.close()
        acrobot.close()


def test_a_minatar_game_attribute_that_cannot_be_saved_is_named_by_its_type():
    """Pins the refusal to save what the tree cannot hold: a MinAtar game attribute of a type
    other than arrays, numbers, strings, None and lists of them (a newer MinAtar could add one)
    is a ``TypeError`` naming the type, not a checkpoint that silently lacks it."""
    env = minatar("MinAtar/Breakout-v1")
    try:
        env.reset(seed=0)
        env.unwrapped.game.env.helper = object()
        with pytest.raises(TypeError) as caught:
            env_state(env)
        assert str(caught.value) == "a MinAtar game attribute of type object cannot be saved"
    finally:
        env.close()


def test_an_env_state_number_numpy_cannot_take_is_one_line_not_a_traceback():
    """Pins the check of numbers past what numpy's generators take, in a resealed, edited
    ``envs.json`` (found while checking mutants of these checks: an OverflowError escaped
    ``check_env_state``, and ``train --resume`` ended in a traceback and exit 1): an env RNG
    state word past 64 bits and a MinAtar RandomState position past a C long are each
    ``malformed env state``."""
    envs = cartpole_envs(1)
    breakout = minatar("MinAtar/Breakout-v1")
    try:
        envs.train.reset(seed=1)
        state = envs.state_dict()
        state["train"]["envs"][0]["rng"]["state"]["state"] = 10**50
        with pytest.raises(ValueError) as caught:
            envs.check_state_dict(state)
        assert str(caught.value) == (
            "train env: malformed env state (OverflowError: Python int too large to convert to C "
            "long)"
        )
        breakout.reset(seed=1)
        game = env_state(breakout)
        game["physics"]["minatar"]["random"]["pos"] = 10**20
        with pytest.raises(ValueError, match=r"^malformed env state \(OverflowError: "):
            load_env_state(breakout, game)
    finally:
        envs.close()
        breakout.close()


def test_each_refusal_of_an_env_state_names_what_differs(tmp_path):
    """Pins the lines ``check_env_state`` refuses with (mutation testing left them unchecked: a
    message dropped or naming the wrong thing survived): a single env's state against a vector
    env and the reverse, each naming both kinds; a vector state whose sub-env list and autoreset
    flags disagree with ``num_envs``, naming the counts; a state without its env's physics
    fields, naming them. Each is one ``ValueError`` line, before anything changes."""
    envs, single = cartpole_envs(2), gym.make("CartPole-v1", disable_env_checker=True)
    try:
        envs.train.reset(seed=1)
        single.reset(seed=2)
        vector_state = through_files(env_state(envs.train), tmp_path)
        single_state = env_state(single)
        with pytest.raises(
            ValueError, match=r"^the checkpoint's env is a CartPoleEnv, this run's a SyncVectorEnv$"
        ):
            check_env_state(envs.train, single_state)
        outer = type(single).__name__
        with pytest.raises(
            ValueError, match=rf"^the checkpoint's env is a SyncVectorEnv, this run's a {outer}$"
        ):
            check_env_state(single, vector_state)
        one_sub = {**vector_state, "envs": vector_state["envs"][:1]}  # two autoreset flags
        three_flags = {**vector_state, "autoreset": np.zeros(3, dtype=np.bool_)}
        for bad, subs in ((one_sub, 1), (three_flags, 2)):
            with pytest.raises(
                ValueError,
                match=rf"^the checkpoint has {subs} sub-envs, this run 2 \(env.num_envs\)$",
            ):
                check_env_state(envs.train, bad)
        no_steps = copy.deepcopy(single_state)
        del no_steps["physics"]["steps_beyond_terminated"]
        with pytest.raises(
            ValueError,
            match=r"^the CartPoleEnv state must hold \['state', 'steps_beyond_terminated'\]$",
        ):
            check_env_state(single, no_steps)
    finally:
        envs.close()
        single.close()


def test_a_restored_env_keeps_its_seed_and_an_unseeded_one_stays_unseeded():
    """Pins the RNG part of a restore (mutation testing left it unchecked): the restored env
    reports the seed the saved one was reset with (``np_random_seed``), and the state of an env
    never reset (no RNG yet, as an eval env before its first episode) leaves the restored env
    without one, so that its next reset draws a fresh one and plays, as the saved env's would,
    rather than failing on an RNG that is not one."""
    seeded, fresh = (gym.make("CartPole-v1", disable_env_checker=True) for _ in range(2))
    target = gym.make("CartPole-v1", disable_env_checker=True)
    try:
        seeded.reset(seed=7)
        target.reset(seed=3)
        load_env_state(target, env_state(seeded))
        assert target.unwrapped.np_random_seed == 7
        state = env_state(fresh)
        assert state["rng"] is None
        load_env_state(target, state)
        assert target.unwrapped._np_random is None
        obs, _ = target.reset()
        assert obs.shape == (4,) and target.step(0)[0].shape == (4,)
    finally:
        for env in (seeded, fresh, target):
            env.close()


def test_a_cartpole_past_its_end_restores_its_count_of_steps_beyond():
    """Pins the integer physics field (mutation testing found it unchecked: saving it as None
    survived): CartPole's ``steps_beyond_terminated`` is an int once the pole has fallen, and a
    restored env continues from it as the saved one does, the step after the end paying 0 and
    counting on, rather than paying 1 as if the pole had just fallen."""
    saved, restored = (gym.make("CartPole-v1", disable_env_checker=True) for _ in range(2))
    try:
        saved.reset(seed=0)
        restored.reset(seed=1)
        terminated = False
        while not terminated:
            terminated = saved.step(0)[2]
        state = env_state(saved)
        assert state["physics"]["steps_beyond_terminated"] == 0
        load_env_state(restored, state)
        with pytest.warns(UserWarning, match="already returned terminated = True"):
            outputs = [env.step(0) for env in (saved, restored)]
        assert [out[1] for out in outputs] == [0.0, 0.0]
        assert saved.unwrapped.steps_beyond_terminated == 1
        assert restored.unwrapped.steps_beyond_terminated == 1
    finally:
        saved.close()
        restored.close()


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_each_family_s_envs_restore_exactly_or_the_family_says_they_cannot(family, tmp_path):
    """Issue 46: a family whose envs were captured partly (a wrapper left out of the fields
    saved) resumed inexactly with a note, and no test caught it. Each family's example id, two
    sub-envs and the eval env, under its shipped config: where the family says its envs' state
    is saved (``Family.saves_state``), the restored envs continue step for step as the saved
    ones; where it says not (Atari), the state holds nothing for either env."""
    name = shipped_config(family)
    overrides = [Override("env.id", family.example_id), Override("env.num_envs", 2)]
    config = load_config(resolve_config_path(name), overrides)
    saved, restored = Envs(config.env), Envs(config.env)
    try:
        assert saved.restorable == family.saves_state
        if not family.saves_state:
            assert saved.state_dict() == {"train": None, "eval": None}
            return
        actions = np.random.default_rng(0).integers(saved.spec.num_actions, size=(200, 2))
        saved.train.reset(seed=1)
        saved.eval.reset(seed=2)
        step_both(saved, actions[:40])
        state = through_files(saved.state_dict(), tmp_path)
        restored.train.reset(seed=5)
        restored.eval.reset(seed=6)
        restored.load_state_dict(state)
        assert_same_steps(step_both(saved, actions[40:]), step_both(restored, actions[40:]))
    finally:
        saved.close()
        restored.close()


def test_an_env_whose_state_is_set_at_reset_is_saved_before_and_after_it(monkeypatch):
    """Pins a bug found by docs/extending.md's throwaway family (FrozenLake): ``env_state`` read
    each physics field with ``getattr``, and FrozenLake sets its ``s`` at its first reset, so
    asking a run's fresh envs whether they can be saved (``Envs.restorable``) raised
    AttributeError. Before the reset the field is saved as None; after it, a restored env takes
    the same steps."""
    monkeypatch.setitem(state._PHYSICS_FIELDS, "FrozenLakeEnv", ("s", "lastaction"))
    saved, restored = (gym.make("FrozenLake-v1", disable_env_checker=True) for _ in range(2))
    try:
        assert env_state(saved)["physics"] == {"s": None, "lastaction": None}
        saved.reset(seed=3)
        restored.reset(seed=9)
        for action in (1, 2, 2):
            saved.step(action)
        load_env_state(restored, env_state(saved))
        actions = np.random.default_rng(0).integers(4, size=30)
        steps = []
        for env in (saved, restored):
            steps.append([])
            for action in actions:
                obs, reward, terminated, truncated, _ = env.step(int(action))
                steps[-1].append((obs, reward, terminated, truncated))
                if terminated or truncated:
                    break
        assert steps[0] == steps[1] and len(steps[0]) >= 1
    finally:
        saved.close()
        restored.close()


def test_a_misspelt_physics_field_raises_once_the_env_has_reset(monkeypatch):
    """The other side of the test above: the None is for an env not yet reset only. A family
    that declares a field its env never has (``stat`` for CartPole's ``state``) is told at once,
    not saved as None and left unrestored."""
    monkeypatch.setitem(state._PHYSICS_FIELDS, "CartPoleEnv", ("stat",))
    env = gym.make("CartPole-v1", disable_env_checker=True)
    try:
        assert env_state(env)["physics"] == {"stat": None}
        env.reset(seed=0)
        with pytest.raises(AttributeError, match="stat"):
            env_state(env)
    finally:
        env.close()
