"""A distributed run's epsilon ladder from its config: ``run.actor_epsilon`` and
``run.actor_epsilon_alpha`` (Ape-X's 0.4 and 7 where null), refused without actors. The ladder
a run's actors play is pinned end to end by ``test_learner.py`` (the paper's, in-process actors)
and ``test_train_actors.py`` (a config's, on a cluster)."""

from __future__ import annotations

import pytest
from support import assert_bad_input, runner

from per_dqn.cli import app
from per_dqn.config import Override, load_config, resolve_config_path
from per_dqn.training.schedules import epsilon_ladder


def ladder(actors: int, **run: float) -> list[float]:
    """The ladder the actors are given (``LocalActors`` and ``RayActors`` alike) for a config
    with ``run`` set."""
    overrides = [Override("run.actors", actors)]
    overrides += [Override(f"run.{key}", value) for key, value in run.items()]
    config = load_config(resolve_config_path("cartpole.yaml"), overrides)
    return epsilon_ladder(actors, config.run.actor_epsilon, config.run.actor_epsilon_alpha)


def test_the_ladder_is_ape_x_s_unless_the_config_sets_its_top_and_exponent():
    """Null settings: the paper's 0.4 ** (1 + 7 i / (N - 1)). Set: e ** (1 + a i / (N - 1)) by
    hand, 0.2, 0.2 ** 1.5 and 0.2 ** 2 for three actors at 0.2 and 1; a ladder of exponent 0 is
    every actor at its top; one actor plays at the top."""
    assert ladder(2) == pytest.approx([0.4, 0.4**8], rel=1e-12)
    assert ladder(3, actor_epsilon=0.2, actor_epsilon_alpha=1.0) == pytest.approx(
        [0.2, 0.2**1.5, 0.04], rel=1e-12
    )
    assert ladder(2, actor_epsilon=0.1) == pytest.approx([0.1, 0.1**8], rel=1e-12)
    assert ladder(4, actor_epsilon_alpha=0.0) == [0.4] * 4
    assert ladder(1, actor_epsilon=0.05, actor_epsilon_alpha=3.0) == [0.05]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--set", "run.actor_epsilon=0.1"],
            "cartpole.yaml: run.actor_epsilon: must be null without actors (the epsilon ladder of "
            "a distributed run: run.actors, train --actors N), got 0.1 (set by --set)",
        ),
        (
            ["--set", "run.actor_epsilon_alpha=2"],
            "cartpole.yaml: run.actor_epsilon_alpha: must be null without actors (the epsilon "
            "ladder of a distributed run: run.actors, train --actors N), got 2.0 (set by --set)",
        ),
        (["--actors", "2", "--set", "run.actor_epsilon=0"],
         "cartpole.yaml: run.actor_epsilon: must be > 0, got 0 (set by --set)"),
        (["--actors", "2", "--set", "run.actor_epsilon=1.5"],
         "cartpole.yaml: run.actor_epsilon: must be <= 1, got 1.5 (set by --set)"),
        (["--actors", "2", "--set", "run.actor_epsilon_alpha=-1"],
         "cartpole.yaml: run.actor_epsilon_alpha: must be >= 0, got -1 (set by --set)"),
    ],
)  # fmt: skip
def test_ladder_settings_a_run_cannot_have_are_one_line(args, line, tmp_path):
    result = runner.invoke(app, ["train", "-c", "cartpole.yaml", "--run-dir", str(tmp_path / "r"),
                                 *args])  # fmt: skip
    assert_bad_input(result, line)
    assert not (tmp_path / "r").exists()
