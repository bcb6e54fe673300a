"""The linear schedule used for epsilon and beta."""

import pytest

from per_dqn.training.schedules import LinearSchedule


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
