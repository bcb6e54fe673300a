"""The linear schedule used for epsilon and beta."""

import numpy as np
import pytest

from per_dqn.training.schedules import LinearSchedule, epsilon_ladder


def test_linear_ramp_by_hand():
    beta = LinearSchedule(start=0.4, end=1.0, duration_steps=100)
    assert beta(0) == 0.4
    assert beta(25) == pytest.approx(0.55)
    assert beta(50) == pytest.approx(0.7)
    assert beta(100) == 1.0  # exactly, no float residue
    assert beta(10_000) == 1.0


def test_begin_step_delays_the_ramp():
    eps = LinearSchedule(start=1.0, end=0.1, duration_steps=10, begin_step=5)
    assert [eps(t) for t in (0, 5)] == [1.0, 1.0]
    assert eps(10) == pytest.approx(0.55)
    assert eps(15) == 0.1


def test_zero_duration_jumps_to_end():
    assert LinearSchedule(start=1.0, end=0.0, duration_steps=0)(0) == 0.0


def test_negative_duration_is_refused():
    with pytest.raises(ValueError, match="`duration_steps` must be >= 0, got -1"):
        LinearSchedule(start=1.0, end=0.0, duration_steps=-1)


def test_the_epsilon_ladder_by_hand():
    """Ape-X's ladder, 0.4 ** (1 + 7 i / (N - 1)): two actors at 0.4 and 0.4 ** 8 = 6.5536e-4;
    three at 0.4, 0.4 ** 4.5 = 0.0161909 and 6.5536e-4; one at 0.4."""
    assert epsilon_ladder(1) == [0.4]
    assert epsilon_ladder(2) == pytest.approx([0.4, 6.5536e-4], rel=1e-12)
    assert epsilon_ladder(3) == pytest.approx([0.4, 0.4**4.5, 6.5536e-4], rel=1e-12)
    assert epsilon_ladder(3)[1] == pytest.approx(0.0161909, rel=1e-5)
    ladder = epsilon_ladder(16)
    assert ladder == sorted(ladder, reverse=True) and ladder[-1] == pytest.approx(0.4**8)
    assert epsilon_ladder(4, epsilon=0.5, alpha=0.0) == [0.5] * 4
    assert epsilon_ladder(np.int64(2)) == epsilon_ladder(2)  # a count from numpy is a count


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"actors": 0}, r"`actors` must be an integer >= 1, got 0"),
        ({"actors": True}, r"got True"),
        ({"actors": 2, "epsilon": 0.0}, r"`epsilon` must be in \(0, 1\], got 0.0"),
        ({"actors": 2, "epsilon": 1.5}, r"got 1.5"),
        ({"actors": 2, "alpha": -1.0}, r"`alpha` must be >= 0, got -1.0"),
        ({"actors": 2, "alpha": float("nan")}, r"got nan"),
        ({"actors": 2, "epsilon": "0.4"}, r"`epsilon` must be in \(0, 1\], got 0.4"),
    ],
)
def test_the_epsilon_ladder_refuses_what_it_cannot_be(kwargs, message):
    with pytest.raises(ValueError, match=message):
        epsilon_ladder(**kwargs)
