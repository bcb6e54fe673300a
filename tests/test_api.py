"""The Python API (per_dqn.api): train/resume/load, callbacks, custom networks; docs/api.md's
examples run in tests/test_docs.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import per_dqn
from per_dqn import api
from per_dqn.config import ConfigError
from per_dqn.rundir.dirs import RunDirError

ROOT = Path(__file__).resolve().parents[1]
SHORT = {
    "train.total_env_steps": 1_500, "train.learning_starts": 200, "train.eval_interval": 500,
    "train.eval_episodes": 2, "train.final_eval_episodes": 2, "train.log_interval": 250,
    "checkpoint.interval_steps": 500, "agent.hidden_sizes": [32, 32], "replay.capacity": 2_000,
}  # fmt: skip


def tiny_net(obs_shape, num_actions):
    """A module-level factory, importable as tests.test_api:tiny_net."""
    return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(obs_shape)), 16), nn.ReLU(),
                         nn.Linear(16, num_actions))  # fmt: skip


class _Floored(nn.Module):
    """Q-values floored at a buffer of -inf: a mask a user's network may keep."""

    def __init__(self, obs_shape, num_actions):
        super().__init__()
        self.body = tiny_net(obs_shape, num_actions)
        self.register_buffer("floor", torch.tensor(float("-inf")))

    def forward(self, x):
        return torch.maximum(self.body(x), self.floor)


def floored_net(obs_shape, num_actions):
    return _Floored(obs_shape, num_actions)


def wrong_width(obs_shape, num_actions):
    return nn.Linear(int(np.prod(obs_shape)), num_actions + 1)


class _WithExtraState(nn.Linear):
    def get_extra_state(self):
        return {"note": "not a tensor"}

    def set_extra_state(self, state):
        pass


def extra_state(obs_shape, num_actions):
    return _WithExtraState(int(np.prod(obs_shape)), num_actions)


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "model.pt", weights_only=True)


class Recorder:
    def __init__(self) -> None:
        self.logs, self.evals = [], []

    def on_log(self, env_steps, values):
        self.logs.append((env_steps, dict(values)))

    def on_eval(self, env_steps, returns):
        self.evals.append((env_steps, returns.copy()))


@pytest.mark.slow
def test_a_run_stopped_by_a_callback_resumes_to_the_uninterrupted_run(tmp_path):
    """Early stopping keeps a run resumable, exactly: stopped by a callback at its step-500
    checkpoint, then resumed, it ends with the weights of the same run never stopped (CPU)."""
    # Imported here: a CLI process imports this module as `tests.test_api` (for its network
    # factories), where `support` is not on the path.
    from support import StopAtCheckpoint

    full = per_dqn.train("cartpole", overrides=SHORT, run_dir=tmp_path / "full")
    stopper = StopAtCheckpoint(500)
    stopped = per_dqn.train(
        "cartpole", overrides=SHORT, run_dir=tmp_path / "stopped", callbacks=[stopper]
    )
    assert stopper.seen == [(500, "step_000000500")]
    assert stopped.summary["interrupted"] and stopped.summary["env_steps"] == 500
    resumed = per_dqn.resume(tmp_path / "stopped")
    assert not resumed.summary["interrupted"] and resumed.summary["resumed_from_env_steps"] == 500
    assert resumed.final_return == full.final_return
    a, b = weights(tmp_path / "full"), weights(tmp_path / "stopped")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_callbacks_see_every_log_point_and_evaluation(tmp_path):
    recorder = Recorder()
    per_dqn.train("cartpole", overrides=SHORT, run_dir=tmp_path / "run", callbacks=[recorder])
    assert [step for step, _ in recorder.logs] == [250, 500, 750, 1000, 1250, 1500]
    assert "train/loss" in recorder.logs[-1][1] and "per/beta" in recorder.logs[-1][1]
    # Periodic evaluations only: the one due at the budget's end is the final evaluation.
    assert [step for step, _ in recorder.evals] == [500, 1000]
    assert all(r.shape == (2,) for _, r in recorder.evals)


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    with pytest.raises(ConfigError) as caught:
        per_dqn.train({"replay": {"kind": "prop"}}, run_dir=tmp_path / "a")
    assert str(caught.value).startswith("config: replay.kind: ")
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match=r"cartpole: replay\.capacty: unknown key"):
        per_dqn.train("cartpole", overrides=["replay.capacty=5"], run_dir=tmp_path / "b")
    with pytest.raises(ValueError, match=r"network: .*lambda.* cannot be found again by name"):
        per_dqn.train("cartpole", network=lambda shape, n: nn.Linear(4, n), run_dir=tmp_path / "c")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("someone else's")
    with pytest.raises(RunDirError, match="exists and is not empty"):
        per_dqn.train("cartpole", overrides=SHORT, run_dir=tmp_path / "d")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


INSIDE_OUT = "cannot name a run dir inside out (<out>/<arm>/s<seed>)"
KEY_VALUE = "expected a mapping or a list of 'key=value', got"


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        # train_many's arguments (each reached numpy, a TypeError or an IndexError, or wrote
        # where it should not).
        (dict(seeds=5), ValueError, "seeds: expected a list of non-negative integers, got 5"),
        (dict(seeds=[None]), ValueError, "seeds: expected non-negative integers, got None"),
        (dict(seeds=[1.7]), ValueError, "seeds: expected non-negative integers, got 1.7"),
        (dict(seeds=[0, 0]), ValueError, "seeds: 0 is given twice (its runs would share a "),
        (dict(pack="2"), ValueError, "pack must be an integer >= 1, got '2'"),
        (dict(arms=[]), ValueError, "arms: no arm given (None trains the config as it is)"),
        (dict(arms={"a": 5}), ConfigError, f"arms: 'a': {KEY_VALUE} 5"),
        (dict(arms={"..": {}}), ValueError, f"arms: '..' {INSIDE_OUT}"),
        (dict(arms={"/tmp/x": {}}), ValueError, f"arms: '/tmp/x' {INSIDE_OUT}"),
        (dict(arms={"a": {}, "a/s0": {}}), ValueError, "arms: 'a' and 'a/s0' would put their "),
        (dict(arms={"a": {}, "a/": {}}), ValueError, "arms: 'a' and 'a/' would put their runs "),
        (dict(arms={"a": {"agent.gamma": object()}}), ConfigError, "arms: 'a': agent.gamma: <"),
        (dict(overrides=5), ConfigError, f"overrides: {KEY_VALUE} 5"),
        # A generator is read once, not emptied by the check (the review of this change found
        # it dropped), and a numpy integer is a pack size: each gets as far as the config.
        (dict(overrides=(t for t in ["replay.capacty=5"])), ConfigError, "cartpole: replay.capa"),
        (dict(pack=np.int64(2), arms={"a": ["replay.capacty=5"]}), ConfigError, "cartpole: re"),
        (dict(callbacks=5), ValueError, "callbacks: expected a list of callback objects, got 5"),
        # train's.
        (dict(train=True, overrides=[5]), ConfigError, "overrides: expected 'key=value' texts"),
        (dict(train=True, overrides=5), ConfigError, f"overrides: {KEY_VALUE} 5"),
        (dict(train=True, callbacks=5), ValueError, "callbacks: expected a list of callback"),
    ],
)
def test_bad_arguments_are_one_line_before_anything_is_written(tmp_path, call, error, message):
    """Pins bugs found by calling the API with bad arguments: each raised a TypeError,
    AttributeError or IndexError from deep inside, or (``train_many``'s arm ``..``) wrote its runs
    outside ``out``, or (a seed twice) claimed another process held the run dir. Each is now the
    documented error, one line naming the argument, and nothing is written."""
    call = dict(call)
    with pytest.raises(error) as caught:
        if call.pop("train", False):
            per_dqn.train(
                "cartpole", run_dir=tmp_path / "out" / "run", **{"overrides": SHORT, **call}
            )
        else:
            per_dqn.train_many("cartpole", out=tmp_path / "out", **{"overrides": SHORT, **call})
    assert str(caught.value).startswith(message), str(caught.value)
    assert "\n" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []


def test_resume_refuses_bad_callbacks_before_it_changes_the_run(tmp_path):
    """Pins a bug: ``resume(run, steps=N, callbacks=...)`` with callbacks that are not a list (None
    or 5) wrote ``steps`` into the run's config.yaml and then failed with a TypeError, so a later
    plain ``resume`` trained to N. Now 5 is refused first, and the run is as it was; None means
    no callbacks."""
    from support import tree

    run = per_dqn.train("cartpole", overrides={**SHORT, "train.total_env_steps": 500},
                        run_dir=tmp_path / "run")  # fmt: skip
    before = tree(run.run_dir)
    with pytest.raises(
        ValueError, match=r"^callbacks: expected a list of callback objects, got 5$"
    ):
        per_dqn.resume(run.run_dir, steps=1000, callbacks=5)
    assert tree(run.run_dir) == before
    assert per_dqn.resume(run.run_dir, steps=1000, callbacks=None).summary["env_steps"] == 1000


EPISODES = "episodes: must be an integer in [1, 1,000,000], got"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(episodes=0), f"{EPISODES} 0"),
        (dict(episodes=1.5), f"{EPISODES} 1.5"),
        (dict(episodes=10**30), f"{EPISODES} {10**30}"),
        (dict(epsilon=2.0), "epsilon: must be in [0, 1], got 2.0"),
        (dict(epsilon=float("nan")), "epsilon: must be in [0, 1], got nan"),
        (dict(epsilon="x"), "epsilon: must be in [0, 1], got 'x'"),
        (dict(seed=-1), "seed: must be a non-negative integer, got -1"),
        (dict(seed=1.5), "seed: must be a non-negative integer, got 1.5"),
    ],
)
def test_evaluation_arguments_are_checked_before_anything_is_played(kwargs, message, tmp_path):
    """Pins bugs: ``evaluate_run(episodes=0)`` returned an empty report whose lines then failed
    in numpy, a negative or huge count or a float reached numpy, and an epsilon of 2 or NaN was
    played without a word, though ``Policy.act`` refuses it. ``evaluate_run``, ``Policy.evaluate``
    and ``load``'s seed now refuse them in one line (the bound on episodes is the config's)."""
    with pytest.raises(ValueError) as caught:
        api.evaluate_run(tmp_path / "no-run", **kwargs)
    assert str(caught.value) == message
    if "seed" in kwargs:
        with pytest.raises(ValueError, match=r"^seed: must be a non-negative integer"):
            per_dqn.load(tmp_path / "no-run", **kwargs)


def test_a_name_too_long_for_the_filesystem_is_a_run_dir_error(tmp_path):
    """Issue 23 item 4: a run-dir component over 255 bytes is a ``RunDirError`` naming its
    length, before anything is created (not an ``OSError``, and no parent left behind); reading
    one back (``load``) is the same line, not a bare ``OSError``."""
    long = "a" * 300
    for call in (
        lambda: per_dqn.train("cartpole", overrides=SHORT, run_dir=tmp_path / "x" / long / "y"),
        lambda: per_dqn.resume(tmp_path / long),
        lambda: per_dqn.load(tmp_path / long),
    ):
        with pytest.raises(RunDirError, match=r"is 300 bytes long, more than the filesystem's"):
            call()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_network_with_an_infinite_buffer_loads_and_plays(tmp_path):
    """The load's refusal of non-finite weights looks at parameters only: a buffer of -inf
    (trained with, as training's divergence check allows it) loads and plays."""
    run = per_dqn.train("cartpole", overrides=SHORT, network=floored_net, run_dir=tmp_path / "run")
    policy = per_dqn.load(run.run_dir, network=floored_net)
    assert policy.agent.online.module.floor.item() == float("-inf")
    assert len(policy.evaluate(episodes=1).returns) == 1


@pytest.mark.slow
def test_custom_network_trains_evaluates_and_loads(tmp_path):
    """A user's network trains, loads with the run's own weights (every tensor of model.pt,
    bit for bit), acts by its Q-values, and plays back the run's final evaluation (no periodic
    one, so the run seed's first evaluation episodes are the final's)."""
    overrides = {**SHORT, "train.eval_interval": 0}
    run = per_dqn.train("cartpole", overrides=overrides, network=tiny_net, run_dir=tmp_path / "run")
    # Passing the factory again is the user's consent to the import the run's config names.
    policy = per_dqn.load(run.run_dir, network=tiny_net)
    assert policy.config.agent.network == f"{tiny_net.__module__}:tiny_net"
    assert isinstance(policy.agent.online.module, nn.Sequential)
    saved = torch.load(run.run_dir / "model.pt", weights_only=True)
    loaded = policy.agent.online.state_dict()
    assert saved.keys() == loaded.keys()
    assert all(torch.equal(saved[key], loaded[key]) for key in saved)
    obs = np.zeros((3, 4), dtype=np.float32)
    expected = policy.agent.online.module(torch.as_tensor(obs)).argmax(1).numpy()
    np.testing.assert_array_equal(policy.act(obs), expected)
    episodes = policy.evaluate(episodes=SHORT["train.final_eval_episodes"])
    assert float(np.mean(episodes.returns)) == run.final_return


@pytest.mark.slow
@pytest.mark.parametrize(
    ("network", "message"),
    [
        ("no_such_module:f", "agent.network: cannot import 'no_such_module:f' "
                             "(ModuleNotFoundError: No module named 'no_such_module')"),
        ("tests.test_api:wrong_width", "agent.network: tests.test_api:wrong_width's module must "
                                       "map a batch of shape (2, 4) to Q-values of shape (2, 2), "
                                       "got (2, 3)"),
        ("not a name", "agent.network: must be 'auto', 'mlp', 'nature_cnn', 'minatar_cnn' or "
                       "'package.module:factory', got 'not a name' (set by --set)"),
        ("tests.test_api:extra_state", "agent.network: tests.test_api:extra_state's module holds "
                                       "'_extra_state' (a dict) in its state_dict: a checkpoint, "
                                       "and the weights a distributed run's actors pull, carry "
                                       "tensors only (move it into a buffer, or leave it out of "
                                       "the state)"),
        ("nature_cnn", "agent.network 'nature_cnn': `obs_shape` must be (stack, height, width) "
                       "for the CNN, got (4,)"),
    ],
)  # fmt: skip
def test_cli_names_a_bad_network_in_one_line(tmp_path, network, message):
    """A network the run cannot build or use, refused before the run dir is made. The fourth
    pins a bug: a module with extra state in its ``state_dict`` (``get_extra_state``) trained
    to the end, then its run died with a traceback writing the final checkpoint (and a
    distributed run's, publishing its first weights). The last pins another: a built-in network
    that cannot take the env's observations (a CNN on CartPole) was refused without naming
    ``agent.network``."""
    done = subprocess.run(
        [sys.executable, "-m", "per_dqn.cli", "train", "--config", "cartpole.yaml",
         "--set", f"agent.network={network}", "--run-dir", str(tmp_path / "run"), "-q"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: ") and line.endswith(message), line
    assert not (tmp_path / "run").exists()


def test_policy_acts_on_batches_and_checks_its_input(tmp_path):
    run = per_dqn.train("cartpole", overrides=SHORT, run_dir=tmp_path / "run")
    policy = per_dqn.load(run.run_dir, seed=3)
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    greedy = policy.q_values(obs).argmax(1)
    np.testing.assert_array_equal(policy.act(obs), greedy)
    explored = policy.act(obs, epsilon=1.0)
    assert explored.shape == (64,) and set(explored) <= {0, 1}
    assert not np.array_equal(explored, greedy)  # uniformly random, not greedy
    with pytest.raises(ValueError, match=r"obs: expected a batch of shape \(B, 4\), got \(4,\)"):
        policy.act(obs[0])
    # Pins a bug: q_values had no shape check, so one observation reached torch (IndexError).
    with pytest.raises(ValueError, match=r"obs: expected a batch of shape \(B, 4\), got \(2, 5\)"):
        policy.q_values(np.zeros((2, 5), np.float32))
    with pytest.raises(ValueError, match="epsilon: must be in"):
        policy.act(obs, epsilon=2.0)
    with pytest.raises(ValueError, match=r"^epsilon: must be in \[0, 1\], got None$"):
        policy.act(obs, epsilon=None)
    played = policy.evaluate(episodes=2)
    assert played.returns.shape == (2,) and played.lengths.min() >= 8
    with pytest.raises(ValueError, match="env_id: Acrobot-v1 has observations"):
        policy.evaluate("Acrobot-v1", episodes=1)
    # A checkpoint dir loads too, at its own step.
    assert per_dqn.load(run.run_dir / "checkpoints" / "step_000001000").env_steps == 1000


def test_dir_of_the_package_lists_the_api_without_importing_torch():
    """Pins ``dir(per_dqn)`` showing only ``Any`` (issue 26: a notebook's completion found
    nothing, since the API is imported on first use): it lists every public name, each one
    resolves, and listing them imports no torch."""
    code = (
        "import sys, per_dqn; names = [n for n in dir(per_dqn) if not n.startswith('_')]; "
        "print(names, 'torch' in sys.modules); "
        "print(all(getattr(per_dqn, n) is not None for n in names))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    listed, resolved = done.stdout.splitlines()
    assert listed == (
        "['ManyResult', 'Policy', 'TrainResult', 'load', 'resume', 'train', 'train_many'] False"
    )
    assert resolved == "True"
