"""The training loop's state and step (``per_dqn.training.loop``) checked directly, against values
worked out by hand: the format-2 checkpoint upgrade, ``LoopState``'s checks, and the step's episode
bookkeeping.

tests/test_train.py and tests/test_resume.py run whole runs through the loop; these pin the
pieces whose bugs a whole run would hide (a counter off by one, a key lost on a resume)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from support import cartpole_config

from per_dqn.envs.make import EnvSpec
from per_dqn.training.asking import ACT, serve
from per_dqn.training.build import make_agent, make_memory
from per_dqn.training.loop import DivergedError, Loop, LoopState, upgrade_format_2
from per_dqn.training.seeding import RunSeeds, restart_seed

# --- the format-2 upgrade -------------------------------------------------------------------------


def test_a_format_2_checkpoint_is_moved_into_format_3_s_shape():
    """Pins ``upgrade_format_2``: the cursor's keys join the loop state, the envs' states move to
    an ``envs`` part as ``train`` and ``eval``, every other part and key is kept as it was, and
    the parts given are not changed."""
    parts = {
        "agent": {"a": 1},
        "memory": {"m": 2},
        "loop": {
            "cursor": {"env_steps": 5, "obs": np.arange(3)},
            "envs": {"kind": "SyncVectorEnv"},
            "eval_env": {"kind": "CartPoleEnv"},
            "rng": {"state": 7},
        },
    }
    given = copy.deepcopy(parts)
    upgraded = upgrade_format_2(parts)
    assert upgraded.keys() == {"agent", "memory", "loop", "envs"}
    assert upgraded["agent"] == {"a": 1} and upgraded["memory"] == {"m": 2}
    assert upgraded["envs"] == {"train": {"kind": "SyncVectorEnv"}, "eval": {"kind": "CartPoleEnv"}}
    loop = upgraded["loop"]
    assert loop.keys() == {"env_steps", "obs", "rng"}
    assert loop["env_steps"] == 5 and loop["rng"] == {"state": 7}
    np.testing.assert_array_equal(loop["obs"], np.arange(3))
    assert parts.keys() == given.keys() and parts["loop"].keys() == given["loop"].keys()


def test_a_format_2_loop_without_env_states_upgrades_to_none_parts():
    """Pins the missing env states of a format-2 loop as None parts (envs that restart from a
    seeded reset, as an Atari run's do), not a KeyError traceback on resume."""
    upgraded = upgrade_format_2({"loop": {"cursor": {"env_steps": 1}}})
    assert upgraded["envs"] == {"train": None, "eval": None}
    assert upgraded["loop"] == {"env_steps": 1}


@pytest.mark.parametrize("loop", [None, [1], {"env_steps": 1}, {"cursor": [1]}])
def test_a_format_2_loop_without_a_cursor_is_one_line(loop):
    """Pins the refusal of a loop part that is not format 2's (not a mapping, or no cursor
    mapping): the line a resume reports, not an AttributeError or KeyError."""
    with pytest.raises(ValueError) as caught:
        upgrade_format_2({"loop": loop})
    assert str(caught.value) == "its format-2 loop state lacks cursor"


# --- the step, on a scripted vector env -----------------------------------------------------------


class ScriptedVector:
    """A vector env that plays a script: step ``t`` returns row ``t`` (rewards, terminated,
    truncated) and observations ``[t, i, 0, 0]`` for sub-env ``i``; ``lives`` (one row per
    reset and step) adds ``info["lives"]``. The actions it is given are kept."""

    def __init__(self, rows, num_envs, lives=None) -> None:
        self.rows, self.num_envs, self.lives = rows, num_envs, lives
        self.t, self.actions, self.seeds = 0, [], []

    def observations(self) -> np.ndarray:
        return np.array([[self.t, i, 0, 0] for i in range(self.num_envs)], dtype=np.float32)

    def info(self) -> dict:
        return {} if self.lives is None else {"lives": np.array(self.lives[self.t])}

    def reset(self, seed=None):
        self.seeds.append(seed)
        return self.observations(), self.info()

    def step(self, actions):
        self.actions.append(np.array(actions))
        rewards, terminated, truncated = (np.array(x) for x in self.rows[self.t])
        self.t += 1
        return self.observations(), rewards.astype(float), terminated, truncated, self.info()


class ScriptedEnvs:
    """Stands in for a run's ``Envs``: the scripted training env, and an eval env that is only
    reset."""

    def __init__(self, rows, num_envs, lives=None) -> None:
        self.train = ScriptedVector(rows, num_envs, lives)
        self.eval = ScriptedVector([], 1)

    def check_state_dict(self, state) -> None:
        """Takes only what ale-py's envs give a checkpoint: no state at all."""
        assert state == {"train": None, "eval": None}

    def load_state_dict(self, state) -> None:
        self.check_state_dict(state)


def make_loop(rows, *settings, num_envs=2, lives=None) -> Loop:
    """A loop over ``rows`` with CartPole's agent and a uniform memory of one-step transitions;
    no learning unless ``settings`` bring it forward."""
    config = cartpole_config(
        f"env.num_envs={num_envs}", "agent.n_step=1", "agent.hidden_sizes=[8]",
        "replay.kind=uniform", "replay.capacity=64", "train.learning_starts=1000", *settings,
    )  # fmt: skip
    spec = EnvSpec((4,), np.dtype(np.float32), 2)
    memory = make_memory(config.replay, spec, 0)
    agent = make_agent(config, spec, torch.device("cpu"))
    return Loop(config, agent, memory, ScriptedEnvs(rows, num_envs, lives), RunSeeds.from_seed(0))


def stored(loop: Loop) -> dict[str, np.ndarray]:
    """The memory's transitions, oldest first."""
    storage = loop.memory.state_dict()["storage"]
    return {k: v[: storage["size"]] for k, v in storage.items() if isinstance(v, np.ndarray)}


F, T = False, True


def test_episode_bookkeeping_through_ends_and_reset_only_steps():
    """Pins the step's episode bookkeeping on two sub-envs, by hand.

    step 1: rewards 1, 2.  step 2: 3, 4; sub-env 0 terminates (return 1+3 = 4, 2 steps).
    step 3: sub-env 0 only resets (not counted, not stored); sub-env 1 earns 5 and is truncated
    (return 2+4+5 = 11, 3 steps).  step 4: sub-env 0 earns 6; sub-env 1 only resets.
    Env steps 2, 4, 5, 6; six transitions stored, the one that ended in a termination marked
    terminal, the truncated one not."""
    rows = [
        ([1, 2], [F, F], [F, F]), ([3, 4], [T, F], [F, F]), ([0, 5], [F, F], [F, T]),
        ([6, 0], [F, F], [F, F]),
    ]  # fmt: skip
    loop = make_loop(rows)
    state = loop.state
    got = []
    for _ in rows:
        got.append((loop.step(), state.env_steps, state.autoreset.tolist()))
    assert got == [
        ([], 2, [F, F]), ([(4.0, 2)], 4, [T, F]), ([(11.0, 3)], 5, [F, T]), ([], 6, [F, F]),
    ]  # fmt: skip
    assert state.ep_return.tolist() == [6.0, 0.0] and state.ep_length.tolist() == [1, 0]
    assert list(state.recent_returns) == [4.0, 11.0]
    np.testing.assert_array_equal(state.obs, loop.envs.train.observations())
    memory = stored(loop)
    assert memory["rewards"].tolist() == [1, 2, 3, 4, 5, 6]
    assert memory["terminated"].tolist() == [F, F, T, F, F, F]
    assert memory["obs"][:, :2].tolist() == [[0, 0], [0, 1], [1, 0], [1, 1], [2, 1], [3, 0]]
    assert memory["next_obs"][:, :2].tolist() == [[1, 0], [1, 1], [2, 0], [2, 1], [3, 1], [4, 0]]
    assert memory["actions"].tolist() == [
        loop.envs.train.actions[0][0], loop.envs.train.actions[0][1],
        loop.envs.train.actions[1][0], loop.envs.train.actions[1][1],
        loop.envs.train.actions[2][1], loop.envs.train.actions[3][0],
    ]  # fmt: skip


def test_a_step_where_every_sub_env_only_resets_counts_nothing_and_draws_nothing():
    """Pins the reset-only step of every sub-env (both episodes ended together): no env step is
    counted, nothing is stored, the actions sent are zeros and exploration draws no number (its
    generator is where it was); the step after it is a normal one."""
    rows = [([1, 1], [T, F], [F, T]), ([0, 0], [F, F], [F, F]), ([2, 2], [F, F], [F, F])]
    loop = make_loop(rows)
    assert loop.step() == [(1.0, 1), (1.0, 1)]
    rng_before = loop.state.rng.bit_generator.state
    assert loop.step() == []
    assert loop.state.env_steps == 2 and len(loop.memory) == 2
    assert loop.envs.train.actions[1].tolist() == [0, 0]
    # Integers, as every step's: ale-py's vector env asserts on a float action array.
    assert loop.envs.train.actions[1].dtype == np.int64
    assert loop.state.rng.bit_generator.state == rng_before
    assert loop.state.autoreset.tolist() == [F, F]
    loop.step()
    assert loop.state.env_steps == 4 and loop.state.ep_return.tolist() == [2.0, 2.0]


def test_clipped_rewards_are_learnt_from_and_raw_ones_reported():
    """Pins ``env.clip_rewards``: the memory stores rewards clipped to [-1, 1], the episode's
    return (``episode/return``) adds the raw ones."""
    rows = [([5, -3], [F, F], [F, F]), ([0.5, -0.25], [T, T], [F, F])]
    loop = make_loop(rows, "env.clip_rewards=true")
    loop.step()
    assert loop.step() == [(5.5, 2), (-3.25, 2)]
    assert stored(loop)["rewards"].tolist() == [1.0, -1.0, 0.5, -0.25]
    unclipped = make_loop(rows)
    unclipped.step()
    unclipped.step()
    assert stored(unclipped)["rewards"].tolist() == [5.0, -3.0, 0.5, -0.25]


def test_a_lost_life_ends_the_learning_transition_but_not_the_episode():
    """Pins ``env.terminal_on_life_loss``: the transition where sub-env 0 drops from 3 lives to 2
    is stored as terminal, its episode goes on (its return keeps adding); the reset step that
    brings a new game's 3 lives is no loss; without the setting nothing is terminal."""
    rows = [([1, 1], [F, F], [F, F]), ([1, 1], [F, F], [F, F]), ([1, 1], [T, F], [F, F]),
            ([0, 1], [F, F], [F, F]), ([1, 1], [F, F], [F, F])]  # fmt: skip
    lives = [[3, 3], [3, 3], [2, 3], [1, 3], [3, 3], [3, 3]]
    loop = make_loop(rows, "env.terminal_on_life_loss=true", lives=lives)
    finished = [loop.step() for _ in rows]
    assert finished == [[], [], [(3.0, 3)], [], []]
    assert stored(loop)["terminated"].tolist() == [F, F, T, F, T, F, F, F, F]
    assert loop.state.prev_lives.tolist() == [3, 3]
    plain = make_loop(rows, lives=lives)
    for _ in rows:
        plain.step()
    assert stored(plain)["terminated"].tolist() == [F, F, F, F, T, F, F, F, F]


def count_learns(loop: Loop, seen=None) -> list:
    """Wraps the loop's agent's ``learn`` (what ``Loop.step`` asks for each gradient step) with a
    counter; returns the list it appends the env step to, or ``seen()`` when given."""
    calls: list = []
    learn = loop.agent.learn

    def counted(batch):
        calls.append(loop.state.env_steps if seen is None else seen())
        return learn(batch)

    loop.agent.learn = counted
    return calls


def test_learning_starts_then_comes_every_replay_period_times_gradient_steps():
    """Pins the learning schedule, by hand: two sub-envs (2 env steps a step), learning from env
    step 4 every 3 env steps, 2 gradient steps each, once the memory holds a batch of 2.
    Due at 4, 7, 10, 13: the steps reaching 4, 8, 10 and 14 learn twice each."""
    rows = [([0, 0], [F, F], [F, F])] * 7
    loop = make_loop(rows, "train.learning_starts=4", "train.replay_period=3",
                     "train.gradient_steps=2", "train.batch_size=2")  # fmt: skip
    calls = count_learns(loop)
    for _ in rows:
        loop.step()
    assert calls == [4, 4, 8, 8, 10, 10, 14, 14]
    assert loop.state.next_update == 16


def test_learning_catches_up_when_one_step_passes_several_due_points():
    """Pins the catch-up: with 4 sub-envs and a replay period of 1, learning from env step 4,
    the first step reaches one due point (4) and each later step passes four (5-8, 9-12), and
    learns once for each (no update lost to a wide vector env)."""
    rows = [([0] * 4, [F] * 4, [F] * 4)] * 3
    loop = make_loop(rows, "train.learning_starts=4", "train.replay_period=1",
                     "train.batch_size=2", num_envs=4)  # fmt: skip
    calls = count_learns(loop)
    for _ in rows:
        loop.step()
    assert calls == [4] + [8] * 4 + [12] * 4


def test_no_learning_before_the_memory_holds_a_batch():
    """Pins the batch guard: 3-step windows fill the memory two env steps behind (one sub-env),
    so at the due points 4 and 5 it holds 2 and 3 transitions, fewer than a batch of 4, and
    those points pass without learning (not made up later); from 6 on it learns at each."""
    rows = [([0], [F], [F])] * 8
    loop = make_loop(rows, "agent.n_step=3", "train.learning_starts=4", "train.replay_period=1",
                     "train.batch_size=4", num_envs=1)  # fmt: skip
    calls = count_learns(loop)
    for _ in rows:
        loop.step()
    assert calls == [6, 7, 8]
    assert len(loop.memory) == 6


# --- schedule points ------------------------------------------------------------------------------


def test_a_log_point_is_due_once_per_interval_and_skips_past_a_jump():
    """Pins ``log_due`` with a log interval of 100: not before env step 100, once at it; a step
    that jumps past several points (to 350) logs once and moves the next point to 400."""
    loop = make_loop([], "train.log_interval=100")
    due = []
    for steps in (99, 100, 100, 199, 350, 399, 400):
        loop.state.env_steps = steps
        due.append((loop.log_due(), loop.state.next_log))
    assert due == [(F, 100), (T, 200), (F, 200), (F, 200), (T, 400), (F, 400), (T, 500)]


def test_an_evaluation_is_due_each_interval_but_not_on_the_last_step():
    """Pins ``eval_due`` with evaluations every 100 env steps of a 300-step run: due at 100 and
    200; at 300 the final evaluation stands in, so it is not due, but the schedule still moves
    (to 400: a run extended by ``--resume --steps`` evaluates at 400, not at 301); with an
    interval of 0 nothing is ever due."""
    loop = make_loop([], "train.eval_interval=100", "train.total_env_steps=300",
                     "train.learning_starts=100")  # fmt: skip
    due = []
    for steps in (99, 100, 150, 200, 300, 301):
        loop.state.env_steps = steps
        due.append((loop.eval_due(), loop.state.next_eval))
    assert due == [(F, 100), (T, 200), (F, 200), (T, 300), (F, 400), (F, 400)]
    never = make_loop([], "train.eval_interval=0")
    never.state.env_steps = 10**9
    assert not never.eval_due() and never.state.next_eval == float("inf")


# --- LoopState's checks ---------------------------------------------------------------------------


def test_a_loop_state_missing_keys_names_them_all():
    """Pins the missing-keys line: every key the state lacks, in the state's order, except
    ``record`` (added later: a checkpoint from before it is loaded with an unknown start)."""
    state = make_loop([]).state.state_dict()
    for key in ("nstep", "rng", "record"):
        del state[key]
    with pytest.raises(ValueError) as caught:
        LoopState.check_state_dict(state)
    assert str(caught.value) == "its loop state lacks rng, nstep"
    with pytest.raises(ValueError) as caught:
        LoopState.check_state_dict([])
    assert str(caught.value).startswith("its loop state lacks env_steps, obs, autoreset, ")


def test_a_loop_state_with_a_bad_generator_or_torch_state_is_refused():
    """Pins the generator and torch checks: a bit-generator state numpy refuses names the key;
    a torch RNG state that is not a uint8 array is refused; the loop is not changed."""
    loop = make_loop([])
    state = loop.state.state_dict()
    env_steps = loop.state.env_steps
    for key in ("rng", "eval_rng"):
        bad = {**state, key: {"bit_generator": "MT19937"}}
        with pytest.raises(ValueError, match=rf"^its loop state's {key}: "):
            loop.state.load_state_dict(bad)
    bad = {**state, "torch_rng": state["torch_rng"].astype(np.int64)}
    with pytest.raises(ValueError) as caught:
        loop.state.load_state_dict(bad)
    assert str(caught.value) == "its loop state's torch_rng is not a uint8 array"
    assert loop.state.env_steps == env_steps


def test_a_loop_state_numpy_or_torch_cannot_take_is_one_line_not_a_traceback():
    """Pins the checks a resealed, edited ``loop.json`` / ``loop.npz`` met with a traceback and
    exit 1 on ``train --resume`` (found while checking mutants of these checks): a generator
    state with an integer past 64 bits (numpy raised OverflowError), a torch RNG state of the
    wrong size or that is no MT19937 state (torch raised RuntimeError, after part of the state
    was loaded). Each is now the ``ValueError`` a resume reports in one line, raised before
    anything changes."""
    loop = make_loop([])
    state = loop.state.state_dict()
    torch_before = torch.get_rng_state()
    rng = copy.deepcopy(state["rng"])
    rng["state"]["state"] = 10**50
    with pytest.raises(ValueError) as caught:
        loop.state.load_state_dict({**state, "rng": rng})
    assert str(caught.value) == "its loop state's rng: Python int too large to convert to C long"
    for torch_rng, reason in [
        (np.zeros(5, dtype=np.uint8), "Expected a CPUGeneratorImplState of size"),
        (np.zeros(state["torch_rng"].size, dtype=np.uint8), "Invalid mt19937 state"),
    ]:
        with pytest.raises(ValueError, match=rf"^its loop state's torch_rng: {reason}"):
            loop.state.load_state_dict({**state, "torch_rng": torch_rng, "env_steps": 99})
        assert loop.state.env_steps == 0
    assert torch.equal(torch.get_rng_state(), torch_before)


# --- exploration, serving, and the restart of envs that could not be saved ------------------------


def test_epsilon_greedy_mixes_the_network_s_actions_with_the_generator_s_draws():
    """Pins the mixed case of epsilon-greedy (some sub-envs explore, some do not), which a run
    at epsilon 1 or 0 never reaches: the exploring sub-envs take ``rng.integers`` draws made
    after the ``rng.random`` coin flips, the others the network's greedy actions. Worked out by
    replaying the run's exploration generator by hand."""
    num_envs = 16
    rows = [([0] * num_envs, [F] * num_envs, [F] * num_envs)]
    loop = make_loop(rows, "train.epsilon_start=0.5", "train.epsilon_end=0.5", num_envs=num_envs)
    obs = loop.state.obs
    greedy = loop.agent.greedy_actions(obs)
    rng = np.random.default_rng(RunSeeds.from_seed(0).explore)
    explore = rng.random(num_envs) < 0.5
    assert 0 < explore.sum() < num_envs  # the mixed case
    expected = greedy.copy()
    expected[explore] = rng.integers(2, size=int(explore.sum()))
    loop.step()
    np.testing.assert_array_equal(loop.envs.train.actions[0], expected)
    assert loop.state.rng.bit_generator.state == rng.bit_generator.state


def _requests(raised: list[BaseException]):
    """A generator of ``Loop.steps``' kind that asks for actions twice and catches what the
    first answer raised, then returns what it was given."""
    try:
        yield ACT, np.zeros((1, 4), dtype=np.float32)
    except ValueError as exc:
        raised.append(exc)
    second = yield ACT, np.ones((1, 4), dtype=np.float32)
    return second


class _Agent:
    """An agent whose first ``greedy_actions`` raises ``error``."""

    def __init__(self, error: BaseException | None) -> None:
        self.error, self.calls = error, 0

    def greedy_actions(self, obs):
        self.calls += 1
        if self.calls == 1 and self.error is not None:
            raise self.error
        return obs.sum(axis=1).astype(np.int64)

    def learn(self, batch):
        raise AssertionError("not asked")


def test_serve_raises_the_agent_s_error_in_the_generator_which_may_go_on():
    """Pins ``serve``'s contract: what the agent raises is thrown into the generator at its
    request; a generator that handles it is served on to its end (its return value is
    ``serve``'s), one that does not lets it through unchanged (a KeyboardInterrupt stays one)."""
    raised: list[BaseException] = []
    error = ValueError("bad batch")
    assert serve(_requests(raised), _Agent(error)).tolist() == [4]
    assert raised == [error]
    with pytest.raises(KeyboardInterrupt):
        serve(_requests([]), _Agent(KeyboardInterrupt()))


def test_a_resume_without_env_states_restarts_the_envs_from_the_checkpoint_s_seed():
    """Pins ``Loop.load_state_dict`` for envs whose state a checkpoint cannot hold (ale-py's):
    the training envs reset with ``restart_seed(run seed, env steps)``, the eval env with that
    seed past every sub-env, and the open episodes, windows, lives and autoreset flags start
    afresh (none may span the reset); the resume is reported as not exact. The counters and
    the generators come from the checkpoint."""
    rows = [([1, 2, 3], [F, T, F], [F, F, F]), ([1, 2, 3], [F, F, F], [F, F, F])] * 2
    lives = [[3, 3, 3]] * 4
    source = make_loop(
        rows, "env.terminal_on_life_loss=true", "run.seed=7", num_envs=3, lives=lives
    )
    for _ in range(3):
        source.step()
    saved = source.state.state_dict()
    assert saved["ep_return"].tolist() == [3.0, 0.0, 9.0]
    assert saved["autoreset"].tolist() == [F, T, F]
    target = make_loop([([0] * 3, [F] * 3, [F] * 3)], "env.terminal_on_life_loss=true",
                       "run.seed=7", num_envs=3, lives=[[2, 2, 2]] * 3)  # fmt: skip
    exact = target.load_state_dict(saved, {"train": None, "eval": None})
    assert exact is False
    seed = restart_seed(7, saved["env_steps"])
    assert target.envs.train.seeds[-1] == seed
    assert target.envs.eval.seeds[-1] == seed + 3
    state = target.state
    assert state.env_steps == saved["env_steps"] == 8
    np.testing.assert_array_equal(state.obs, target.envs.train.observations())
    assert state.autoreset.dtype == np.bool_ and state.autoreset.tolist() == [F, F, F]
    assert state.ep_return.tolist() == [0.0, 0.0, 0.0]
    assert state.ep_length.dtype == np.int64 and state.ep_length.tolist() == [0, 0, 0]
    assert state.prev_lives.tolist() == [2, 2, 2]
    assert state.nstep.state_dict() == target.state.nstep.__class__(3, 1, 0.99).state_dict()
    assert state.rng.bit_generator.state == saved["rng"]
    target.step()  # a normal step from the fresh reset: three transitions, nothing ends
    assert state.env_steps == 11 and state.ep_return.tolist() == [0.0, 0.0, 0.0]


def test_a_loop_state_round_trip_keeps_autoreset_lives_and_episodes():
    """Pins ``LoopState.load_state_dict``'s copy of the per-sub-env arrays, with a sub-env
    waiting for its reset-only step: it resumes as one (not stepped, not counted), and the
    open episodes' returns, lengths and lives carry on."""
    rows = [([1, 2], [T, F], [F, F]), ([0, 5], [F, F], [F, F])]
    lives = [[3, 3], [3, 3], [3, 2]]
    source = make_loop(rows, "env.terminal_on_life_loss=true", lives=lives)
    source.step()
    saved = copy.deepcopy(source.state.state_dict())
    target = make_loop(rows, "env.terminal_on_life_loss=true", lives=lives)
    target.envs.train.t = 1
    target.state.load_state_dict(saved)
    assert target.state.autoreset.tolist() == [T, F]
    assert target.state.prev_lives.tolist() == [3, 3]
    assert target.step() == [] and target.state.env_steps == 3
    assert target.state.ep_return.tolist() == [0.0, 7.0]
    assert target.state.ep_length.tolist() == [0, 2]
    assert stored(target)["terminated"].tolist() == [T]  # sub-env 1 lost a life


def test_a_saved_cuda_generator_state_is_restored_where_cuda_is(monkeypatch):
    """Pins the CUDA half of the loop state's RNG restore, on a machine without CUDA: with CUDA
    reported present, the saved per-device states go to ``torch.cuda.set_rng_state_all`` as
    uint8 tensors, and a state saved without CUDA (None) restores nothing; without CUDA a saved
    CUDA state is kept but not applied. torch's CUDA calls are the only stand-ins: this machine
    has no GPU to run them."""
    loop = make_loop([])
    saved = loop.state.state_dict()
    states = [np.arange(16, dtype=np.uint8), np.arange(16, 32, dtype=np.uint8)]
    applied: list = []
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", applied.append)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    loop.state.load_state_dict({**saved, "cuda_rng": states})
    assert len(applied) == 1 and [t.dtype for t in applied[0]] == [torch.uint8] * 2
    assert [t.tolist() for t in applied[0]] == [s.tolist() for s in states]
    assert loop.state.cuda_rng is states
    loop.state.load_state_dict({**saved, "cuda_rng": None})
    assert len(applied) == 1
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    loop.state.load_state_dict({**saved, "cuda_rng": states})
    assert len(applied) == 1 and loop.state.cuda_rng is states


def test_a_loop_state_s_arrays_are_taken_in_the_loop_s_dtypes():
    """Pins ``LoopState.load_state_dict``'s conversions: per-sub-env values that come as plain
    lists or other dtypes (JSON-like trees, an edited and resealed checkpoint) are taken as
    bool autoreset flags, float64 returns and int64 lengths, and CUDA generator states as uint8;
    without them an int return array made the next step's float reward fail to add, and an int
    autoreset flag was bit-inverted (``~1 == -2``) instead of negated."""
    rows = [([0.5, 1.5], [F, F], [F, F])]
    loop = make_loop(rows)
    saved = loop.state.state_dict()
    loop.state.load_state_dict(
        {**saved, "autoreset": [1, 0], "ep_return": [2, 3], "ep_length": [4.0, 5.0]}
    )
    state = loop.state
    assert (state.autoreset.dtype, state.ep_return.dtype, state.ep_length.dtype) == (
        np.dtype(np.bool_),
        np.dtype(np.float64),
        np.dtype(np.int64),
    )
    assert loop.step() == [] and state.env_steps == 1  # sub-env 0 only reset
    assert state.ep_return.tolist() == [2.0, 4.5] and state.ep_length.tolist() == [4, 6]


def test_cuda_generator_states_given_as_lists_are_restored_as_bytes(monkeypatch):
    """The CUDA half of the dtype conversions: states that come as lists of ints reach
    ``torch.cuda.set_rng_state_all`` as uint8 tensors (torch refuses any other dtype). torch's
    CUDA calls are the only stand-ins: this machine has no GPU."""
    loop = make_loop([])
    applied: list = []
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", applied.append)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    loop.state.load_state_dict({**loop.state.state_dict(), "cuda_rng": [[1, 2, 255]]})
    ((state,),) = applied
    assert state.dtype == torch.uint8 and state.tolist() == [1, 2, 255]


def test_a_loop_state_with_a_damaged_run_record_is_refused_before_anything_changes():
    """Pins the run-record check of ``LoopState.check_state_dict``: a record whose evaluation
    steps and returns differ in number is refused by the check itself, so ``Loop.load_state_dict``
    raises before the loop's state or its envs are touched (without it, the state was half
    loaded, its counters from the checkpoint, when the record's own load raised)."""
    loop = make_loop([])
    state, seeds = loop.state.state_dict(), list(loop.envs.train.seeds)
    bad = {**state, "env_steps": 99, "record": {**state["record"], "eval_steps": [10]}}
    with pytest.raises(ValueError) as caught:
        LoopState.check_state_dict(bad)
    assert str(caught.value) == "its run record has 1 evaluation steps but 0 returns"
    with pytest.raises(ValueError, match=r"^its run record has 1 evaluation steps"):
        loop.load_state_dict(bad, {"train": None, "eval": None})
    assert loop.state.env_steps == 0 and loop.envs.train.seeds == seeds


def test_a_restart_without_life_loss_keeps_no_lives():
    """Pins ``prev_lives`` as None on a restart of envs that report lives (ale-py's) when the
    run does not end transitions on a lost life: the loop state holds lives only for
    ``env.terminal_on_life_loss``, as a fresh run's does."""
    rows = [([0, 0], [F, F], [F, F])] * 2
    lives = [[3, 3]] * 3
    source = make_loop(rows, lives=lives)
    assert source.state.prev_lives is None
    source.step()
    saved = source.state.state_dict()
    target = make_loop(rows, lives=lives)
    assert target.load_state_dict(saved, {"train": None, "eval": None}) is False
    assert target.state.prev_lives is None and target.state.state_dict()["prev_lives"] is None


def _scale_weights(loop: Loop, largest: float) -> None:
    """Sets the online network's first weight to ``largest`` and every other weight of both
    networks to 0, so that the largest |weight| is exactly ``largest``."""
    with torch.no_grad():
        for p in [*loop.agent.online.parameters(), *loop.agent.target.parameters()]:
            p.zero_()
        next(loop.agent.online.parameters()).view(-1)[0] = largest


@pytest.mark.parametrize(
    ("scale", "largest", "diverged"),
    [(0.5, 501.0, True), (0.5, 500.0, False), (0.5, 499.0, False), (2.0, 600.0, False),
     (2.0, 2001.0, True), (2.0, float("nan"), True)],
)  # fmt: skip
def test_weights_diverge_past_a_thousand_times_the_largest_before(scale, largest, diverged):
    """Pins ``Loop.check_weights``'s bound, by hand: diverged when the largest |weight| is
    non-finite or more than 1000x ``weight_scale`` (1000 x 0.5 = 500: 501 is past it, 500 is not;
    1000 x 2 = 2000: 600 is within it); a check that passes raises the scale to what it saw."""
    loop = make_loop([])
    loop.state.weight_scale = scale
    _scale_weights(loop, largest)
    if diverged:
        with pytest.raises(DivergedError, match=r"training diverged$"):
            loop.check_weights()
        assert loop.state.weight_scale == scale
    else:
        loop.check_weights()
        assert loop.state.weight_scale == max(scale, largest)


# --- the feeds of the health panel and the learning-rate schedule ---------------------------------


def test_the_health_panel_records_the_slots_each_step_added_and_each_update_set():
    """Pins the slots the loop hands the health panel: each transition's slot gets the env step
    it was added at, and a gradient step's priority update marks only the slots it set (a slot
    array lost to None marked every slot of the memory, the empty ones included, and so skewed
    the panel's age and staleness tags). One sub-env, learning from env step 3, batches of 2,
    on a proportional memory of 64 slots."""
    rows = [([0], [F], [F])] * 4
    loop = make_loop(rows, "replay.kind=proportional", "train.learning_starts=3",
                     "train.replay_period=1", "train.batch_size=2", num_envs=1)  # fmt: skip
    updated: list[tuple[int, list[int]]] = []
    update = loop.memory.update

    def kept(priority_update):
        updated.append((loop.state.env_steps, sorted(set(priority_update.indices.tolist()))))
        return update(priority_update)

    loop.memory.update = kept
    for _ in rows:
        loop.step()
    health = loop.state.health
    assert health.added_at[:4].tolist() == [1, 2, 3, 4]
    assert [step for step, _ in updated] == [3, 4]
    expected = [1, 2, 3, 4]
    for step, slots in updated:
        for slot in slots:
            expected[slot] = step
    assert health.priority_set_at[:4].tolist() == expected
    assert health.added_at[4:].tolist() == [0] * 60  # the empty slots: as the panel began
    assert health.priority_set_at[4:].tolist() == [0] * 60


def test_a_learning_rate_schedule_sets_each_gradient_step_s_rate():
    """Pins ``agent.learning_rate_end``: from ``learning_starts`` (2) to the run's end (12) the
    step size moves linearly from 0.01 to 0.001, and each gradient step learns at the value of
    its env step, by hand: 0.01 at 2, 0.0091 at 3, 0.0082 at 4."""
    rows = [([0], [F], [F])] * 4
    loop = make_loop(rows, "agent.learning_rate=0.01", "agent.learning_rate_end=0.001",
                     "train.total_env_steps=12", "train.learning_starts=2",
                     "train.replay_period=1", "train.batch_size=1", num_envs=1)  # fmt: skip
    rates = count_learns(
        loop, lambda: (loop.state.env_steps, loop.agent.optimizer.param_groups[0]["lr"])
    )
    for _ in rows:
        loop.step()
    assert [step for step, _ in rates] == [2, 3, 4]
    np.testing.assert_allclose([lr for _, lr in rates], [0.01, 0.0091, 0.0082], rtol=1e-12)


def test_keep_torch_rng_keeps_the_cuda_generators_only_where_cuda_is(monkeypatch):
    """Pins ``LoopState.keep_torch_rng``'s CUDA half: with CUDA, each device's generator state is
    kept (as bytes) for the run's checkpoints; without it, None, and torch's CUDA generators are
    not asked for (they raise in a build without CUDA). torch's CUDA calls are the only
    stand-ins: this machine has no GPU."""
    loop = make_loop([])
    device_states = [torch.tensor([1, 2, 255], dtype=torch.uint8), torch.tensor([7]).byte()]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: device_states)
    loop.state.keep_torch_rng()
    assert [s.tolist() for s in loop.state.cuda_rng] == [[1, 2, 255], [7]]
    assert all(isinstance(s, np.ndarray) and s.dtype == np.uint8 for s in loop.state.cuda_rng)

    def no_cuda():
        raise AssertionError("asked for CUDA generators without CUDA")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", no_cuda)
    loop.state.keep_torch_rng()
    assert loop.state.cuda_rng is None


def test_the_schedules_edges_an_interval_of_one_and_learning_from_step_one():
    """Pins the loop's schedules at their smallest settings, by hand: evaluations every env step
    (``eval_interval=1``) are due from step 1, not never; learning from env step 1 (the least the
    config allows: ``learning_starts >= batch_size >= 1``) first learns on step 1, not 2."""
    every = make_loop([], "train.eval_interval=1", "train.total_env_steps=3",
                      "train.learning_starts=1", "train.batch_size=1")  # fmt: skip
    every.state.env_steps = 1
    assert every.state.next_eval == 1 and every.eval_due()
    rows = [([0], [F], [F])] * 2
    early = make_loop(rows, "train.learning_starts=1", "train.replay_period=1",
                      "train.batch_size=1", num_envs=1)  # fmt: skip
    calls = count_learns(early)
    for _ in rows:
        early.step()
    assert calls == [1, 2]


def test_a_fresh_loop_state_holds_the_dtypes_a_resumed_one_does():
    """Pins the fresh loop state's per-sub-env arrays in the dtypes ``load_state_dict`` gives a
    resumed one (bool flags, float64 returns, int64 lengths), so that a checkpoint holds the
    same whether or not its run was resumed before."""
    state = make_loop([]).state
    assert (state.autoreset.dtype, state.ep_return.dtype, state.ep_length.dtype) == (
        np.dtype(np.bool_), np.dtype(np.float64), np.dtype(np.int64),
    )  # fmt: skip
