"""n-step windows against hand computation: full windows, termination, truncation, resets."""

from __future__ import annotations

import numpy as np
import pytest

from per_dqn.training.nstep import NStepAccumulator, stack

GAMMA = 0.5


def feed_raw(acc, steps):
    """Feeds ``(obs, action, reward, next_obs, terminated, truncated, active)`` rows of one env;
    returns every transition emitted."""
    out = []
    for obs, action, reward, next_obs, terminated, truncated, active in steps:
        out += acc.step(
            np.array([[obs]], dtype=np.float32),
            np.array([action]),
            np.array([reward], dtype=np.float64),
            np.array([[next_obs]], dtype=np.float32),
            np.array([terminated]),
            np.array([truncated]),
            np.array([active]),
        )
    return out


def feed(acc, steps):
    """``feed_raw`` as plain ``(obs, action, R, next_obs, terminated, k)`` tuples."""
    return [
        (float(t.obs[0]), t.action, t.reward, float(t.next_obs[0]), t.terminated, t.n_steps)
        for t in feed_raw(acc, steps)
    ]


def episode(length, terminated, truncated, first_obs=0.0):
    """Obs ``first_obs + t``, action ``t``, reward ``t + 1``; the last step ends the episode."""
    rows = []
    for t in range(length):
        last = t == length - 1
        rows.append(
            (first_obs + t, t, t + 1.0, first_obs + t + 1, last and terminated,
             last and truncated, True)
        )  # fmt: skip
    return rows


def test_terminated_episode_three_step():
    """Five steps, n=3, ends in termination: 2 full windows, then 3 tail windows, all terminal.

    o0..o5 with rewards 1..5 and gamma 0.5:
      (o0, 1 + .5*2 + .25*3 = 2.75, o3, n=3)   (o1, 2 + .5*3 + .25*4 = 4.5, o4, n=3)
      at the end: (o2, 3 + 2 + 1.25 = 6.25, o5, 3)  (o3, 4 + 2.5 = 6.5, o5, 2)  (o4, 5, o5, 1)
    """
    got = feed(NStepAccumulator(1, 3, GAMMA), episode(5, terminated=True, truncated=False))
    assert got == [
        (0.0, 0, 2.75, 3.0, False, 3),
        (1.0, 1, 4.5, 4.0, False, 3),
        (2.0, 2, 6.25, 5.0, True, 3),
        (3.0, 3, 6.5, 5.0, True, 2),
        (4.0, 4, 5.0, 5.0, True, 1),
    ]


def test_truncated_episode_bootstraps_from_the_last_obs():
    """Same episode cut by a time limit: the same windows, none marked terminal."""
    got = feed(NStepAccumulator(1, 3, GAMMA), episode(5, terminated=False, truncated=True))
    assert [g[:4] for g in got] == [
        (0.0, 0, 2.75, 3.0), (1.0, 1, 4.5, 4.0), (2.0, 2, 6.25, 5.0), (3.0, 3, 6.5, 5.0),
        (4.0, 4, 5.0, 5.0),
    ]  # fmt: skip
    assert [g[4] for g in got] == [False] * 5
    assert [g[5] for g in got] == [3, 3, 3, 2, 1]


def test_episode_shorter_than_n():
    """Two steps with n=3: only tail windows, (o0, 1 + .5*2, o2, 2) and (o1, 2, o2, 1)."""
    got = feed(NStepAccumulator(1, 3, GAMMA), episode(2, terminated=True, truncated=False))
    assert got == [(0.0, 0, 2.0, 2.0, True, 2), (1.0, 1, 2.0, 2.0, True, 1)]


def test_windows_never_span_episodes_and_reset_steps_are_skipped():
    """Episode A (3 steps, terminal), a reset-only step, episode B (4 steps, truncated).

    Regression: a window that survived the end of A would pair A's observations with B's.
    """
    reset_step = (3.0, 0, 0.0, 100.0, False, False, False)  # gymnasium's next-step autoreset
    rows = [
        *episode(3, terminated=True, truncated=False),
        reset_step,
        *episode(4, terminated=False, truncated=True, first_obs=100.0),
    ]
    got = feed(NStepAccumulator(1, 2, GAMMA), rows)
    assert len(got) == 3 + 4  # one transition per real step, none for the reset
    for obs, _, _, next_obs, _, k in got:
        assert (obs < 100) == (next_obs < 100), "window spans two episodes"
        assert next_obs - obs == k
    assert [g[4] for g in got] == [False, True, True, False, False, False, False]


def test_one_step_is_the_plain_transition():
    got = feed(NStepAccumulator(1, 1, GAMMA), episode(3, terminated=True, truncated=False))
    assert got == [
        (0.0, 0, 1.0, 1.0, False, 1),
        (1.0, 1, 2.0, 2.0, False, 1),
        (2.0, 2, 3.0, 3.0, True, 1),
    ]


def test_envs_keep_separate_windows():
    """Two envs stepped together with n=2: env 1 ends after one step, env 0 goes on."""
    acc = NStepAccumulator(2, 2, GAMMA)
    first = acc.step(
        np.array([[0.0], [10.0]]), np.array([0, 1]), np.array([1.0, 5.0]),
        np.array([[1.0], [11.0]]), np.array([False, True]), np.array([False, False]),
        np.array([True, True]),
    )  # fmt: skip
    assert [(t.obs[0], t.reward, t.terminated, t.n_steps) for t in first] == [(10.0, 5.0, True, 1)]
    second = acc.step(
        np.array([[1.0], [11.0]]), np.array([0, 0]), np.array([2.0, 0.0]),
        np.array([[2.0], [20.0]]), np.array([False, False]), np.array([False, False]),
        np.array([True, False]),
    )  # fmt: skip
    assert [(t.obs[0], t.next_obs[0], t.reward, t.n_steps) for t in second] == [
        (0.0, 2.0, 1.0 + GAMMA * 2.0, 2)
    ]


def test_stack_matches_add_batch_layout():
    transitions = feed_raw(NStepAccumulator(1, 1, GAMMA), episode(2, True, False))
    stacked = stack(transitions)
    np.testing.assert_array_equal(stacked.obs, [[0.0], [1.0]])
    np.testing.assert_array_equal(stacked.actions, [0, 1])
    assert stacked.actions.dtype == np.int64 and stacked.n_steps.dtype == np.uint8
    np.testing.assert_array_equal(stacked.terminated, [False, True])
    np.testing.assert_array_equal(stacked.rewards, np.array([1.0, 2.0], np.float32))


def test_rejects_n_below_one():
    with pytest.raises(ValueError, match="n_step"):
        NStepAccumulator(1, 0, GAMMA)


def test_a_state_of_other_sub_envs_or_of_full_windows_is_refused():
    """Pins ``load_state_dict``'s checks, each one line: another number of sub-envs; a window of
    ``n_step`` steps or more (a full window is always emitted, so none can be saved open). A
    window of ``n_step - 1`` steps is a state that can occur and loads; a refused state leaves
    the windows as they were."""
    step = (np.zeros(1, dtype=np.float32), 0, 1.0)
    acc = NStepAccumulator(2, 3, GAMMA)
    acc.load_state_dict({"windows": [[step, step], []]})
    assert acc.state_dict()["windows"] == [[step, step], []]
    with pytest.raises(ValueError) as caught:
        acc.load_state_dict({"windows": [[]]})
    assert str(caught.value) == "n-step state has 1 sub-envs, expected 2"
    with pytest.raises(ValueError) as caught:
        acc.load_state_dict({"windows": [[], [step] * 3]})
    assert str(caught.value) == "n-step state has a window of 3 or more steps"
    assert acc.state_dict()["windows"] == [[step, step], []]
