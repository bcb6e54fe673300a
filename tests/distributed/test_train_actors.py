"""``per-dqn train --actors N`` (issue 47): a real Ape-X run on a Ray cluster started on
127.0.0.1, in a process of its own (``run_cli`` says why), and the bad input it refuses."""

from __future__ import annotations

import os
import queue
import re
import signal
import threading
import time

import pytest
from support import (
    api_run,
    assert_bad_input,
    descendants,
    ray_processes,
    read_scalars,
    run_cli,
    runner,
    running,
    sets,
    start_cli,
    summary_of,
)

from per_dqn.cli import app
from per_dqn.logs import tags
from per_dqn.training.checkpoints import load_run_checkpoint

SHORT = sets(
    "train.learning_starts=300", "train.eval_interval=800", "train.eval_episodes=2",
    "train.final_eval_episodes=3", "train.log_interval=400", "run.device=cpu",
    "agent.hidden_sizes=[32]",
)  # fmt: skip


@pytest.mark.ray
def test_a_run_of_two_actors_on_a_local_cluster_is_a_single_run_s_run_dir(ray_env, tmp_path):
    """Two actors on a cluster started for the run, from the Python API (``per_dqn.train`` with
    ``run.actors``; the CLI's ``--actors`` is the kill test's): the run dir holds what a single
    run's does (config.yaml with run.actors, events with episode returns and an evaluation,
    checkpoints, model.pt, summary.json, whose provenance says where each actor ran); its env
    steps reach the budget (past it by the blocks in flight at most: 2 actors x 2 blocks x 50
    steps); the learner learned once per replay_period env steps from learning_starts;
    evaluations fall due at block boundaries; each actor plays at its epsilon of the ladder the
    config sets (top 0.3, exponent 2: 0.3 and 0.3 ** 3; the paper's own is test_learner's)."""
    run_dir = tmp_path / "run"
    overrides = [s for s in SHORT if s != "--set"] + [
        "run.actors=2", "train.total_env_steps=1500", "run.actor_epsilon=0.3",
        "run.actor_epsilon_alpha=2",
    ]  # fmt: skip
    summary = api_run("cartpole", overrides, run_dir)
    assert 1500 <= summary["env_steps"] <= 1500 + 2 * 2 * 50
    assert summary["update_steps"] == (summary["env_steps"] - 300) // 4 + 1
    assert "actors: 2" in (run_dir / "config.yaml").read_text()
    assert (run_dir / "model.pt").is_file()
    assert [p.name for p in (run_dir / "checkpoints").iterdir()]
    scalars = read_scalars(run_dir)
    assert len(scalars[tags.EPISODE_RETURN]) > 10
    # Evaluated when the blocks' env steps pass 800 (the blocks in flight after it at most).
    assert 800 <= scalars[tags.EVAL_RETURN_MEAN][0][0] <= 800 + 2 * 2 * 50
    assert summary["final_eval_return_mean"] is not None
    # Where each actor ran, at its epsilon of the config's ladder.
    actors = summary["provenance"]["actors"]
    assert [(a["index"], a["node_ip"]) for a in actors] == [(0, "127.0.0.1"), (1, "127.0.0.1")]
    assert [a["epsilon"] for a in actors] == pytest.approx([0.3, 0.3**3])


@pytest.mark.ray
def test_an_atari_run_with_actors_sends_each_frame_once_and_learns_from_whole_stacks(
    ray_env, tmp_path
):
    """Pong with two actors on a local cluster (the shipped atari.yaml, cut short): its blocks
    travel with each frame once and are rebuilt into 4-frame stacks on arrival (a block without
    its stacks could not be stored: the run would stop), the learner updates from them, and the
    run dir is a single run's, with a checkpoint of the deduplicated memory."""
    run_dir = tmp_path / "run"
    settings = [
        "run.actors=2", "train.total_env_steps=600", "train.learning_starts=300",
        "train.eval_interval=0", "train.final_eval_episodes=1", "replay.capacity=2000",
        "train.eval_max_episode_steps=200", "run.device=cpu", "train.log_interval=300",
    ]  # fmt: skip
    summary = api_run("atari", settings, run_dir)
    assert 600 <= summary["env_steps"] <= 600 + 2 * 2 * 50
    assert summary["update_steps"] == (summary["env_steps"] - 300) // 4 + 1
    (saved,) = (run_dir / "checkpoints").iterdir()
    memory = load_run_checkpoint(saved).parts["memory"]
    # 1-step transitions (atari.yaml): one a step, every block in flight taken at the checkpoint.
    assert int(memory["storage"]["size"]) == summary["env_steps"]


def test_address_takes_the_actors_from_the_config_too(ray_env, tmp_path):
    """Pins a bug: ``--address`` looked only at the ``--actors`` flag, so a config (or ``--set``)
    holding ``run.actors`` was refused with "it needs --actors N". Now such a run goes on to
    connect: here (in a process of its own, as the tests that connect to Ray do) to a port where
    no cluster listens, which is its own one line, exit 2, with no run dir made."""
    ran = run_cli(["train", "-c", "cartpole.yaml", "--run-dir", str(tmp_path / "r"),
                   "--set", "run.actors=1", "--address", "127.0.0.1:1"], timeout=120)  # fmt: skip
    assert ran.exit_code == 2, ran.output
    (line,) = ran.stderr.splitlines()
    assert line.startswith("error: --address 127.0.0.1:1: no Ray cluster answers there ("), line
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--actors", "0"], "cartpole.yaml: run.actors: must be >= 1, got 0 (set by --actors)"),
        (
            ["--address", "auto"],
            "--address: the Ray cluster of a distributed run; it needs --actors N",
        ),
    ],
)
def test_bad_distributed_input_is_one_line(args, line, tmp_path):
    result = runner.invoke(app, ["train", "-c", "cartpole.yaml", "--run-dir", str(tmp_path / "r"),
                                 *args])  # fmt: skip
    assert_bad_input(result, line)
    assert not (tmp_path / "r").exists()


def test_a_distributed_config_outside_train_actors_is_refused(tmp_path):
    """A config naming run.actors, trained without its actors (a sweep of it), is refused with
    one line rather than run in one process, before the sweep dir is made."""
    result = runner.invoke(app, ["ablate", "-c", "cartpole.yaml", "--seeds", "1", "--steps", "1500",
                                 "--replay", "uniform", "--out", str(tmp_path / "s"),
                                 *sets("run.actors=2")])  # fmt: skip
    assert_bad_input(
        result,
        "cartpole.yaml: run.actors: 2: a distributed run's actors start with its learner: per-dqn "
        "train --actors N, or --resume of its run dir (a sweep cannot run one yet)",
    )
    assert not os.path.exists(tmp_path / "s")


@pytest.mark.ray
@pytest.mark.kill
def test_an_actor_killed_is_restarted_ctrl_c_leaves_no_process_and_resume_goes_on(
    ray_env, tmp_path
):
    """SIGKILL to one actor's process mid-run, from the CLI: Ray starts it again and the run
    goes on, with a warning naming the actor and what was lost once the new process's first
    block arrives; then Ctrl-C stops the run as a single run's (exit 130, an interrupted
    summary, a checkpoint to resume from) and none of the cluster's processes outlives it.
    The stop's checkpoint holds the replay and every actor as of one moment (the blocks in
    flight taken first: the actors' env steps received add up to the run's), and
    ``train --resume`` continues it on a new cluster to a finished run whose actors' counters
    went on from the checkpoint's."""
    run_dir = tmp_path / "run"
    proc = start_cli(["train", "-c", "cartpole.yaml", "--actors", "2", "--steps", "1000000",
                      "--run-dir", str(run_dir), "--quiet", *SHORT,
                      *sets("checkpoint.interval_steps=500")])  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stderr], daemon=True)
    reader.start()
    restarted = re.compile(
        r"actor ([01]) \(epsilon (?:0\.4|0\.000655)\) died and was restarted \(1 of 3\); the "
        r"blocks it was playing and its open episodes are lost"
    )
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 300
        while len(ray_processes(proc.pid, "ActorProcess")) < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.5)
        actors = ray_processes(proc.pid, "ActorProcess")
        assert len(actors) == 2
        time.sleep(2)  # blocks under way
        os.kill(actors[0], signal.SIGKILL)
        deadline = time.monotonic() + 300
        while not any(restarted.search(line) for line in seen) and time.monotonic() < deadline:
            try:
                seen.append(lines.get(timeout=1))
            except queue.Empty:
                assert proc.poll() is None, "".join(seen)
        assert any(restarted.search(line) for line in seen), "".join(seen)
        cluster = descendants(proc.pid)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    assert proc.returncode == 130, "".join(seen)
    assert summary_of(run_dir)["interrupted"] is True
    assert list((run_dir / "checkpoints").iterdir())
    deadline = time.monotonic() + 30
    while any(running(p) for p in cluster) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [p for p in cluster if running(p)]

    saved = sorted((run_dir / "checkpoints").iterdir())[-1]
    at = int(saved.name.removeprefix("step_"))
    before = load_run_checkpoint(saved).parts["loop"]
    received = {actor: steps for actor, _, steps in before["apex"]["received"]}
    assert sum(received.values()) == before["env_steps"] == at
    # The blocks in flight, held beside the replay; the actor never killed is at the env steps
    # its blocks received and held bring it to.
    reached = dict(received)
    for block in before["apex"]["held"]:
        reached[int(block["actor"])] = int(block["env_steps"])
    killed = int(next(m for m in map(restarted.search, seen) if m).group(1))
    alive = 1 - killed
    assert before["apex"]["actors"][alive]["loop"]["env_steps"] == reached[alive]
    ran = run_cli(["train", "--resume", str(run_dir), "--steps", str(at + 800), "--quiet"])
    assert ran.exit_code == 0, ran.stderr
    assert f"resuming {run_dir} from {saved.name}" in ran.stderr
    summary = summary_of(run_dir)
    assert summary["interrupted"] is False and summary["env_steps"] >= at + 800
    final = sorted((run_dir / "checkpoints").iterdir())[-1]
    after = load_run_checkpoint(final).parts["loop"]
    went_on = {actor: steps for actor, _, steps in after["apex"]["received"]}
    assert sum(went_on.values()) == after["env_steps"] == summary["env_steps"]
    assert all(went_on[actor] > reached[actor] >= received[actor] for actor in (0, 1))
    assert after["apex"]["restarts"] == 1  # the kill before the resume, still counted


@pytest.mark.parametrize(
    ("settings", "line"),
    [
        (
            ["replay.initial_priority=actor"],
            "replay.initial_priority: must not be 'actor' without actors to compute the "
            "priorities (a distributed run: run.actors, train --actors N), got 'actor'",
        ),
        (
            ["replay.kind=relo", "replay.initial_priority=actor", "run.actors=2"],
            "replay.initial_priority: must not be 'actor' for replay.kind 'relo', which "
            "prioritises by reducible_loss (the actors compute |delta|), got 'actor'",
        ),
        (
            ["replay.kind=uniform", "replay.initial_priority=max"],
            "cartpole.yaml: replay.initial_priority: replay kind 'uniform' does not read it (set "
            "by --set)",
        ),
    ],
)
def test_an_initial_priority_a_run_cannot_honour_is_one_line(settings, line, tmp_path):
    """``actor`` with no actors, or with a kind whose priorities are not |delta|; any value with
    a kind that keeps no priorities (a key it does not read)."""
    result = runner.invoke(app, ["train", "-c", "cartpole.yaml", "--run-dir", str(tmp_path / "r"),
                                 *sets(*settings)])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert line in result.stderr
    assert not (tmp_path / "r").exists()


def test_resume_with_an_address_of_a_run_without_actors_is_one_line(tmp_path):
    """``--address`` belongs to a distributed run's resume; with a single run's dir it is refused
    with one line and exit 2, before the run goes on (its checkpoint stays the newest)."""
    run_dir = tmp_path / "run"
    first = runner.invoke(app, ["train", "-c", "cartpole.yaml", "--steps", "400", "--quiet",
                                "--run-dir", str(run_dir), *SHORT,
                                *sets("train.learning_starts=200")])  # fmt: skip
    assert first.exit_code == 0, first.output
    before = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    result = runner.invoke(app, ["train", "--resume", str(run_dir), "--steps", "800",
                                 "--address", "auto"])  # fmt: skip
    assert_bad_input(
        result, f"--address: {run_dir} is not a distributed run (its config has no run.actors)"
    )
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == before


@pytest.mark.ray
def test_an_actor_that_cannot_build_the_network_is_one_line(ray_env, tmp_path):
    """Pins a bug: a config whose network an actor's process cannot import (a module missing
    from its node) stopped the run with Ray's traceback. It is one line naming the actor and
    what its process raised, exit 2, and no run dir."""
    network = "tests.distributed.actorless_network:make"
    result = run_cli(["train", "-c", "cartpole.yaml", "--actors", "2", "--quiet", "--run-dir",
                      str(tmp_path / "r"), *sets(f"agent.network={network}")])  # fmt: skip
    assert_bad_input(
        result,
        f"cartpole.yaml: actor 0 could not start: ValueError: agent.network: cannot import "
        f"'{network}' (ImportError: no such module on this node)",
    )
    assert not (tmp_path / "r").exists()
