"""The learner's side of an Ape-X run (issue 47) in this process: a real ``Trainer`` fed by two
actors' blocks, every transition stored once, env steps and learning as a single run counts
them, the weights' staleness bounded by the sync interval; blocks out of order refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import typer
from support import cartpole_config, read_scalars, summary_of

from per_dqn.api import list_checkpoints
from per_dqn.cli.train import _run
from per_dqn.distributed.learner import ApexLoop, LocalActors, OutOfOrderError, local_loop
from per_dqn.logs import tags
from per_dqn.training.asking import serve
from per_dqn.training.build import make_memory
from per_dqn.training.run import Trainer

SETTINGS = (
    "train.total_env_steps=1200", "train.learning_starts=200", "train.eval_interval=600",
    "train.eval_episodes=2", "train.final_eval_episodes=2", "train.log_interval=300",
    "checkpoint.interval_steps=0", "run.device=cpu", "agent.hidden_sizes=[32]",
    "replay.kind=proportional", "replay.capacity=5000",
)  # fmt: skip


class Recording:
    """A source that records what another hands out."""

    def __init__(self, inner):
        self.inner, self.sent = inner, []

    def blocks(self, wanted=float("inf")):
        blocks = self.inner.blocks(wanted)
        self.sent.extend(blocks)
        return blocks

    def __len__(self):
        return len(self.inner)

    def restarts(self):
        return self.inner.restarts()

    def pause(self):
        blocks, states = self.inner.pause()
        self.sent.extend(blocks)
        return blocks, states

    def restore(self, received, states):
        return self.inner.restore(received, states)

    def close(self):
        self.inner.close()


def test_a_trainer_fed_by_two_local_actors_stores_every_transition_once(tmp_path):
    """Two actors (epsilons 0.4 and 0.4 ** 8, the ladder's ends), blocks of 25 steps, weights
    pulled every 50: the memory holds exactly the blocks' transitions in arrival order; the
    run's env steps are
    the actors' sum; it learns every replay_period env steps from learning_starts; no block's
    weights are more updates old than the learner makes in one sync interval of both actors'
    steps; the run dir is a single run's (events, evaluation, summary)."""
    config = cartpole_config(*SETTINGS)
    recorded: list[Recording] = []

    def make_loop(config, agent, memory, envs, seeds):
        source = Recording(LocalActors(config, agent, actors=2, block_steps=25, sync_steps=50))
        recorded.append(source)
        return ApexLoop(config, agent, memory, envs, seeds, source)

    trainer = Trainer(config, "cartpole", make_loop=make_loop)
    try:
        summary = trainer.run(tmp_path / "run")
        loop, memory, agent = trainer.loop, trainer.memory, trainer.agent
    finally:
        trainer.close()
    (source,) = recorded
    assert [a.epsilon for a in source.inner.actors] == pytest.approx([0.4, 0.4**8])
    sent = source.sent
    assert [(b.actor, b.serial) for b in sent[:4]] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    total = sum(len(b) for b in sent)
    assert len(memory) == total < memory.capacity
    slots = np.arange(total)
    obs, _ = memory.storage.observations.gather(slots)
    np.testing.assert_array_equal(obs, np.concatenate([b.transitions.obs for b in sent]))
    actions = np.concatenate([b.transitions.actions for b in sent])
    np.testing.assert_array_equal(memory.storage.actions[:total], actions)
    env_steps = sum(max(b.env_steps for b in sent if b.actor == i) for i in (0, 1))
    assert loop.state.env_steps == env_steps >= 1200
    replay = config.train.replay_period
    assert agent.update_steps == (env_steps - 200) // replay + 1
    # Each actor plays 50 steps between pulls, so a block's weights are at most (50 + 25) steps
    # of both actors old: 150 env steps, one update per replay_period of them.
    assert 0 < loop.max_staleness <= -(-150 // replay)
    assert summary["env_steps"] == env_steps
    scalars = read_scalars(tmp_path / "run")
    assert scalars[tags.EVAL_RETURN_MEAN]
    returns = [r for b in sent for r, _ in b.episodes]
    assert [v for _, v in scalars[tags.EPISODE_RETURN]] == pytest.approx(returns)
    assert summary_of(tmp_path / "run")["env_steps"] == env_steps
    # The actors' panel at each log point, and no single exploration epsilon.
    assert tags.EXPLORE_EPSILON not in scalars
    steps = [step for step, _ in scalars[tags.APEX_BLOCKS_PER_S]]
    assert len(steps) >= 3 and steps == [s for s, _ in scalars[tags.PERF_SPS]]
    assert max(v for _, v in scalars[tags.APEX_STALENESS_MAX]) == loop.max_staleness
    for (_, low), (_, high) in zip(
        scalars[tags.APEX_ACTOR_SPS_MIN], scalars[tags.APEX_ACTOR_SPS_MAX], strict=True
    ):
        assert 0 < low <= high
    # Each actor's rate, and all of them together; the replay's and the learner's rates.
    each = [dict(scalars[tags.apex_actor(tags.APEX_ACTOR_SPS, i)]) for i in (0, 1)]
    for step, together in scalars[tags.APEX_ACTORS_SPS]:
        assert together == pytest.approx(each[0][step] + each[1][step])
        low = dict(scalars[tags.APEX_ACTOR_SPS_MIN])[step]
        assert low == pytest.approx(min(each[0][step], each[1][step]))
    updates = dict(scalars[tags.APEX_UPDATES_PER_S])
    for step, samples in scalars[tags.APEX_SAMPLES_PER_S]:
        assert samples == pytest.approx(updates[step] * config.train.batch_size)
    assert sum(v > 0 for _, v in scalars[tags.APEX_UPDATES_PER_S]) >= 2
    assert all(v > 0 for _, v in scalars[tags.APEX_INGEST_PER_S])
    # Each actor's returns at its epsilon: means of its own episodes, not the other's.
    for i in (0, 1):
        own = [r for b in sent if b.actor == i for r, _ in b.episodes]
        logged = [v for _, v in scalars[tags.apex_actor(tags.APEX_ACTOR_RETURN, i)]]
        assert logged and all(min(own) <= v <= max(own) for v in logged)


class Dropping(Recording):
    """A source that loses each actor's block ``lost`` (a serial) on the way."""

    def __init__(self, inner, lost):
        super().__init__(inner)
        self.lost = lost

    def blocks(self, wanted=float("inf")):
        return [b for b in self.inner.blocks(wanted) if b.serial != self.lost]


def dropping_trainer(lost: int, *settings: str) -> Trainer:
    def make_loop(config, agent, memory, envs, seeds):
        source = Dropping(LocalActors(config, agent, actors=1, block_steps=25), lost)
        return ApexLoop(config, agent, memory, envs, seeds, source)

    return Trainer(cartpole_config(*SETTINGS, *settings), "cartpole", make_loop=make_loop)


def test_a_block_out_of_order_is_refused(tmp_path):
    """A lost or repeated block (here: each actor's second block dropped) is refused."""
    trainer = dropping_trainer(1)
    try:
        with pytest.raises(
            OutOfOrderError, match=r"^actor 0's block 2 arrived where its block 1 was due"
        ):
            trainer.run(tmp_path / "run")
    finally:
        trainer.close()


def test_a_block_out_of_order_stops_the_cli_run_with_one_line(tmp_path, capsys):
    """Pins a bug: ``train --actors`` caught a lost actor or shard, but a block lost or repeated
    on the way (``OutOfOrderError``) reached the user as a traceback, where the guide promises
    one line. Through the CLI's run: one ``error:`` line naming the block, exit 1, and the
    checkpoint written before it untouched."""
    trainer = dropping_trainer(4, "checkpoint.interval_steps=50")
    run_dir = tmp_path / "run"
    with pytest.raises(typer.Exit) as stopped:
        _run(trainer, run_dir, quiet=True)
    assert stopped.value.exit_code == 1
    saved = list_checkpoints(run_dir)
    assert saved, "no checkpoint was written before the lost block"
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: actor 0's block 5 arrived where its block 4 was due: a block was lost or "
        f"repeated on the way; stopped (the last checkpoint, {saved[-1]}, is untouched)"
    ]


def test_local_loop_builds_the_run_s_actors():
    config = cartpole_config(*SETTINGS)
    trainer = Trainer(config, "cartpole", make_loop=local_loop(3, block_steps=10, sync_steps=10))
    try:
        actors = trainer.loop.source.actors
        assert [a.index for a in actors] == [0, 1, 2]
        assert [a.epsilon for a in actors] == pytest.approx([0.4, 0.4**4.5, 0.4**8])
    finally:
        trainer.close()
    assert all(a.envs.closed for a in actors)


def three_rounds(config):
    """A trainer fed by two local actors (blocks of 20 steps) after three of its steps, nothing
    learnt yet where learning starts later: the blocks sent, the memory, and the trainer (to
    close)."""
    recorded = []

    def make_loop(config, agent, memory, envs, seeds):
        recorded.append(Recording(LocalActors(config, agent, actors=2, block_steps=20)))
        return ApexLoop(config, agent, memory, envs, seeds, recorded[0])

    trainer = Trainer(config, "cartpole", make_loop=make_loop)
    try:
        for _ in range(3):
            serve(trainer.loop.steps(), trainer.agent)
    except BaseException:
        trainer.close()
        raise
    return recorded[0].sent, trainer.memory, trainer


def test_blocks_enter_the_memory_at_their_actors_priorities():
    """Before any learning, each stored transition's priority is what the memory makes of its
    actor's |delta| (proportional: |delta| + eps, to the alpha), as an update of the
    same errors gives it in a memory filled without them."""
    # Learning from env step 1,000: past the 3 rounds; errors unclipped, so that they differ.
    config = cartpole_config(*SETTINGS, "train.learning_starts=1000", "replay.td_error_clip=null")
    sent, memory, trainer = three_rounds(config)
    try:
        slots = np.arange(len(memory))
        assert len(slots) == sum(len(b) for b in sent) > 100
        reference = make_memory(config.replay, trainer.spec, seed=0)
        for block in sent:
            reference.add_batch(*block.transitions)
        reference.update_priorities(slots, np.concatenate([b.td_abs for b in sent]))
        assert len(set(memory.sampler.priorities(slots))) > 10
        np.testing.assert_array_equal(
            memory.sampler.priorities(slots), reference.sampler.priorities(slots)
        )
    finally:
        trainer.close()


def test_the_progress_display_shows_no_single_epsilon():
    """A distributed run's display leaves epsilon out ("-"): each actor has its own."""
    trainer = Trainer(cartpole_config(*SETTINGS), "cartpole", make_loop=local_loop(2))
    try:
        assert np.isnan(trainer.loop.exploration(0))
    finally:
        trainer.close()


class StopAtFirstCheckpoint:
    """A callback that stops the run once it has written a checkpoint."""

    def on_checkpoint(self, env_steps, path):
        return True


def test_a_run_of_local_actors_resumed_from_its_checkpoint_ends_as_the_run_never_stopped(
    tmp_path,
):
    """The checkpoint of a distributed run holds the learner, the replay and each actor's state
    after its last block (``settle``: here no block is in flight), and every actor pulls the
    learner's weights after it. With the actors in this process, where blocks arrive in a fixed
    order, a run stopped after its first checkpoint and resumed in a new trainer ends with the
    same weights, memory and counters as the run never stopped, bit for bit."""
    config = cartpole_config(*SETTINGS, "checkpoint.interval_steps=500")

    def trained(run_dir, stop_first, resume_from=None):
        trainer = Trainer(config, "cartpole", make_loop=local_loop(2, block_steps=20))
        try:
            if resume_from is not None:
                trainer.load_checkpoint(resume_from)
            summary = trainer.run(
                run_dir, callbacks=[StopAtFirstCheckpoint()] if stop_first else ()
            )
            return summary, trainer.agent.online.state_dict(), trainer.memory.state_dict()
        finally:
            trainer.close()

    whole, weights, memory = trained(tmp_path / "whole", stop_first=False)
    stopped, _, _ = trained(tmp_path / "run", stop_first=True)
    assert stopped["interrupted"] and 500 <= stopped["env_steps"] < 1200
    (checkpoint,) = (tmp_path / "run" / "checkpoints").iterdir()
    resumed, weights_after, memory_after = trained(tmp_path / "run", False, checkpoint)
    assert not resumed["interrupted"]
    for key in ("env_steps", "update_steps", "final_eval_return_mean"):
        assert resumed[key] == whole[key], key
    for name, tensor in weights.items():
        assert torch.equal(weights_after[name], tensor), name
    for part in ("actions", "rewards", "obs"):
        np.testing.assert_array_equal(memory_after["storage"][part], memory["storage"][part])
    np.testing.assert_array_equal(memory_after["priorities"], memory["priorities"])


def test_a_checkpoint_without_its_actors_state_is_refused(tmp_path):
    """A loop state with no ``apex`` part (a single run's), or one of another number of actors,
    is refused with one line."""
    trainer = Trainer(cartpole_config(*SETTINGS), "cartpole", make_loop=local_loop(2))
    try:
        loop = trainer.loop
        single = loop.state.state_dict()
        envs = trainer.environments.state_dict()
        with pytest.raises(ValueError, match=r"holds no actors' state \(`apex`\)"):
            loop.load_state_dict(single, envs)
        loop.settle()
        three = loop.state_dict()
        three["apex"]["actors"].append(None)
        with pytest.raises(ValueError, match="holds 3 actors' state, this run has 2 actors"):
            loop.load_state_dict(three, envs)
    finally:
        trainer.close()


def test_with_initial_priority_max_the_actors_send_no_priorities_and_blocks_enter_at_the_max():
    """``replay.initial_priority: max``: the actors compute no |delta| (their blocks carry
    none), and every transition enters at the memory's largest priority so far, as a single
    run's do: before any learning, all at the first one's, 1 (|delta| clipped to 1, to the
    alpha)."""
    config = cartpole_config(*SETTINGS, "train.learning_starts=1000", "replay.initial_priority=max")
    assert not config.actor_priorities()
    sent, memory, trainer = three_rounds(config)
    try:
        assert sent and all(b.td_abs is None for b in sent)
        slots = np.arange(len(memory))
        assert len(slots) == sum(len(b) for b in sent) > 100
        np.testing.assert_array_equal(memory.sampler.priorities(slots), 1.0)
    finally:
        trainer.close()


@pytest.mark.parametrize(
    ("settings", "actor_priorities"),
    [
        ((), True),  # proportional by |delta|: Ape-X's
        (("replay.initial_priority=actor", "run.actors=2"), True),
        (("replay.initial_priority=max",), False),
        (("replay.kind=rank",), True),
        (("replay.kind=lap", "replay.alpha=0.4"), True),
        (("replay.kind=relo",), False),  # by the reducible loss: not the actors' |delta|
        (("replay.priority_from=loss",), False),
        (("replay.kind=uniform",), False),  # no priorities kept
        (("replay.kind=laber",), False),
    ],
)
def test_which_runs_insert_at_their_actors_priorities(settings, actor_priorities):
    assert cartpole_config(*settings).actor_priorities() is actor_priorities


def test_actors_in_this_process_refuse_replay_shards():
    """Shards are Ray actor processes: a config asking for them with the in-process actors is
    refused, not run with the memory in this process unsaid."""
    config = cartpole_config("run.actors=2", "run.shards=2")
    with pytest.raises(ValueError, match=r"^run\.shards: 2: replay shards are Ray actor processes"):
        Trainer(config, "cartpole", make_loop=local_loop(2))
