"""Replay shards in Ray actor processes (``run.shards``, issue 47): the learner's view of them
by hand on a real local cluster, a real run whose actors feed them, a shard killed mid-run, and
the bad input refused."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from support import (
    CHECKOUT,
    assert_bad_input,
    ray_processes,
    read_scalars,
    runner,
    sets,
    start_cli,
    stop_group,
)

from per_dqn.cli import app
from per_dqn.logs import tags
from per_dqn.training.checkpoints import load_run_checkpoint

# Two shards of 8 over a real local cluster; each step's result printed as one JSON line.
SCRIPT = r"""
import json
import numpy as np
from per_dqn.cluster.connection import connect
from per_dqn.cluster.housekeeping import RayOptions
from per_dqn.config import load_config, parse_override, resolve_config_path
from per_dqn.distributed.shards import ShardedReplay
from per_dqn.envs.make import EnvSpec
from per_dqn.memory.types import PriorityUpdate
from per_dqn.training.nstep import Transitions

settings = ["run.actors=2", "run.shards=2", "replay.capacity=16", "train.batch_size=4",
            "replay.alpha=0.5", "replay.priority_eps=0.01"]
config = load_config(resolve_config_path("cartpole.yaml"), [parse_override(s) for s in settings])
spec = EnvSpec((4,), np.dtype(np.float32), 2)

def block(n, first):
    obs = np.arange(first, first + n, dtype=np.float32)[:, None].repeat(4, 1)
    return Transitions(obs, np.zeros(n, np.int64), np.ones(n, np.float32), obs + 1,
                       np.zeros(n, bool), np.ones(n, np.int64))

def leaves(replay):
    return [np.asarray(s["memory"]["priorities"]).tolist()
            for s in replay.state_dict()["shards"]]

out = {}
with connect(RayOptions(local_cpus=2)) as connection:
    ray = connection.ray
    replay = ShardedReplay(ray, config, spec)
    first = ray.get(replay.handles[0].add.remote(block(5, 0), None, [0.1, 0.2, 0.3, 0.4, 0.5]))
    second = ray.get(replay.handles[1].add.remote(block(3, 100), None, [0.6, 0.7, 0.8]))
    replay.stored(*first)
    replay.stored(*second)
    replay.stored(*first)  # a block noted twice (held by a checkpoint, then taken) counts once
    out["slots"] = [first[0].tolist(), second[0].tolist()]
    out["written_told"] = [first[1], second[1]]
    out["len"], out["capacity"] = len(replay), replay.capacity
    out["slots_in_use"] = replay.slots_in_use
    out["can_sample"] = [replay.can_sample(3), replay.can_sample(4), replay.can_sample(6)]
    batch = replay.sample(4, beta=1.0)
    out["batch"] = batch.indices.tolist()
    out["batch_obs"] = batch.obs[:, 0].tolist()
    replay.update(PriorityUpdate(batch.indices, np.full(4, 0.09)))
    out["leaves"] = leaves(replay)
    out["diagnostics"] = replay.diagnostics()
    try:
        replay.update(PriorityUpdate(np.array([7]), np.array([0.5])))
    except ValueError as exc:
        out["foreign"] = str(exc)
    # A batch drawn, then every slot of its shard overwritten: its update is dropped.
    batch = replay.sample(4, beta=1.0)
    shard = int(batch.indices[0]) // 8
    replay.stored(*ray.get(replay.handles[shard].add.remote(block(8, 200), None, [0.5] * 8)))
    replay.update(PriorityUpdate(batch.indices, np.full(4, 0.09)))
    state = replay.state_dict()
    out["dropped"] = replay.dropped
    out["written"] = [s["written"] for s in state["shards"]]
    for bad in ({"kind": "proportional", "shards": state["shards"][:1]}, {"kind": "rank"}):
        try:
            replay.load_state_dict(bad)
        except ValueError as exc:
            out.setdefault("refused", []).append(str(exc))
    # A new view of new shards, loaded from that state: the counts and the dropped updates go
    # on from it.
    replay.close()
    again = ShardedReplay(ray, config, spec)
    again.load_state_dict(state)
    out["loaded"] = [again.sizes(), again.dropped]
    again.close()
    # Shards that cannot start (here: an observation shape no memory takes) are one line.
    try:
        ShardedReplay(ray, config, EnvSpec((0,), np.dtype(np.float32), 2))
    except ValueError as exc:
        out["unstarted"] = str(exc)
print(json.dumps(out))
"""


@pytest.mark.ray
def test_the_learner_s_view_of_two_shards_by_hand(ray_env):
    """``ShardedReplay`` over two real shard processes (capacity 16: 8 each; proportional,
    alpha 0.5, eps 0.01): blocks of 5 and 3 stored with their actors' |delta| land at global
    slots 0-4 and 8-10; only shard 0 holds a batch of 4, so the batch is drawn there; its
    update sets those leaves to (0.09 + 0.01) ** 0.5 and leaves the others at their insertion
    priority; the merged mean priority is the mean of all 8 leaves (weighted by what each shard
    holds) and the max the largest (1, where each shard's starts); an update for a slot outside
    the last batch is refused; an update whose transitions were overwritten after the draw is
    dropped and counted; a state of another number of shards or kind is refused."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env={**os.environ, "PYTHONPATH": str(CHECKOUT)},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["slots"] == [[0, 1, 2, 3, 4], [8, 9, 10]]
    assert out["written_told"] == [5, 3]
    assert (out["len"], out["capacity"]) == (8, 16)
    assert out["slots_in_use"] == 8 + 3  # shard 1's range starts at 8
    assert out["can_sample"] == [True, True, False]
    assert all(0 <= i < 5 for i in out["batch"])
    assert out["batch_obs"] == [float(i) for i in out["batch"]]  # each slot's own transition
    inserted = [[(td + 0.01) ** 0.5 for td in (0.1, 0.2, 0.3, 0.4, 0.5)],
                [(td + 0.01) ** 0.5 for td in (0.6, 0.7, 0.8)]]  # fmt: skip
    expected = [list(inserted[0]), list(inserted[1])]
    for i in out["batch"]:
        expected[0][i] = (0.09 + 0.01) ** 0.5
    assert out["leaves"] == [pytest.approx(expected[0]), pytest.approx(expected[1])]
    every = expected[0] + expected[1]
    assert out["diagnostics"]["mean_priority"] == pytest.approx(sum(every) / 8)
    # Each shard's running max starts at the paper's p_1 = 1, which no |delta| here passes.
    assert out["diagnostics"]["max_priority"] == 1.0
    assert out["foreign"] == "a priority update for slot 7, not in the last batch drawn"
    assert out["dropped"] == 4
    assert out["written"] == [13, 3]
    assert out["loaded"] == [[8, 3], 4]
    assert out["unstarted"] == (
        "replay shard 0 could not start: ValueError: `obs_shape` dimensions must be >= 1, got (0,)"
    )
    assert out["refused"] == [
        "its memory holds 1 replay shards, this run has 2",
        "its memory is not the 2 proportional replay shards this run has (a run with "
        "run.shards resumes with the same number)",
    ]


SHORT = [
    "train.learning_starts=300", "train.eval_interval=800", "train.eval_episodes=2",
    "train.final_eval_episodes=3", "train.log_interval=400", "run.device=cpu",
    "agent.hidden_sizes=[32]", "agent.n_step=1",
]  # fmt: skip


@pytest.mark.ray
@pytest.mark.kill
def test_a_shard_killed_stops_the_run_with_one_line_and_its_checkpoint_resumes(ray_env, tmp_path):
    """Two actors, each feeding its own shard, from the CLI; SIGKILL to a shard's process once
    the run has a checkpoint: its transitions are gone, so the run stops with one ``error:``
    line naming the shard (exit 1), the checkpoint untouched. The Python API's ``resume`` starts
    new shards from it and finishes the run, which learned as a single run does (once per
    replay_period env steps from learning_starts), and whose last checkpoint holds both shards,
    each written exactly one transition per env step of the actor that feeds it (1-step
    transitions): every transition landed once, in its actor's shard."""
    run_dir = tmp_path / "run"
    args = ["train", "-c", "cartpole.yaml", "--actors", "2", "--shards", "2", "--quiet",
            "--run-dir", str(run_dir), "--steps", "40000",
            *sets(*SHORT, "checkpoint.interval_steps=1000")]  # fmt: skip
    proc = start_cli(args)
    try:
        deadline = time.monotonic() + 240
        while (
            not list((run_dir / "checkpoints").glob("step_*"))
            or len(ray_processes(proc.pid, "ShardProcess")) < 2
        ):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no checkpoint"
            time.sleep(0.5)
        os.kill(ray_processes(proc.pid, "ShardProcess")[1], signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            stop_group(proc, 10)
    assert proc.returncode == 1, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    # The learner or an actor meets the dead shard first, at whichever call: the line names
    # the shard and what the call was.
    assert re.match(
        r"error: replay shard [01] died \((sampling a batch|storing actor [01]'s block|"
        r"(updating|reading) priorities|saving a checkpoint)\); its transitions are gone: .*; "
        r"stopped \(the last checkpoint, .*, is untouched\)$",
        errors[0],
    ), errors[0]
    script = f"import per_dqn\nper_dqn.resume({str(run_dir)!r}, steps=4000)\n"
    resumed = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(CHECKOUT)},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert 4000 <= summary["env_steps"] <= 4000 + 2 * 2 * 50 and not summary["interrupted"]
    assert summary["resumed_from_env_steps"] >= 1000
    assert summary["update_steps"] == (summary["env_steps"] - 300) // 4 + 1
    assert tags.APEX_UPDATES_DROPPED in read_scalars(run_dir)
    # Pins a bug: the blocks a checkpoint held were counted into their shards again on resume
    # (they were already in the shards' saved state), so the learner's count of each shard ran
    # ahead of the shard. The final checkpoint's health panel covers exactly the slots in use:
    # shard 1's range starts at capacity / 2, and ends where what it holds ends.
    final = load_run_checkpoint(sorted((run_dir / "checkpoints").iterdir())[-1])
    written = [int(s["written"]) for s in final.parts["memory"]["shards"]]
    each = 50_000 // 2
    assert len(final.parts["loop"]["health"]["added_at"]) == each + min(written[1], each)
    # Every transition once, in its actor's shard (1-step: one an env step), those of the
    # blocks held at the end included (in their shards, not yet counted as received).
    apex = final.parts["loop"]["apex"]
    received = {actor: steps for actor, _, steps in apex["received"]}
    for i in (0, 1):
        held = sum(len(b["stored"]) for b in apex["held"] if int(b["actor"]) == i)
        assert written[i] == received[i] + held, (i, written, received)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--actors", "2", "--shards", "4"],
            "cartpole.yaml: run.shards: must be at most run.actors (2): more shards than actors "
            "leaves a shard that no actor feeds, got 4 (set by --shards) (run.actors set by "
            "--actors)",
        ),
        (
            ["--shards", "2"],
            "cartpole.yaml: run.shards: must be null without actors (the replay shards of a "
            "distributed run: run.actors, train --actors N), got 2 (set by --shards)",
        ),
        (
            ["--actors", "3", "--shards", "3"],
            "cartpole.yaml: run.shards: must divide replay.capacity (50,000) evenly: each shard "
            "holds an equal part, got 3 (set by --shards)",
        ),
        (["--actors", "2", "--shards", "0"], "cartpole.yaml: run.shards: must be >= 1, got 0 "
                                             "(set by --shards)"),
        (
            ["--actors", "8", "--shards", "8", "--set", "replay.capacity=256"],
            "cartpole.yaml: run.shards: must leave each shard a batch: replay.capacity (256) / 8 "
            "holds fewer than train.batch_size (64), and each batch comes from one shard, got 8 "
            "(set by --shards) (replay.capacity set by --set)",
        ),
    ],
)  # fmt: skip
def test_shards_a_run_cannot_have_are_one_line(args, line, tmp_path):
    result = runner.invoke(app, ["train", "-c", "cartpole.yaml", "--run-dir", str(tmp_path / "r"),
                                 *args])  # fmt: skip
    assert_bad_input(result, line)
    assert not (tmp_path / "r").exists()
