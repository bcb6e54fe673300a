"""Packs of runs in one process (issue 24): each run of a pack writes what it writes alone.

``per_dqn.train_many``, ``ablate --pack`` and ``packs.run_pack`` against ``per_dqn.train`` and
``Trainer.run`` of the same configs: ``model.pt``, checkpoints and summaries byte for byte (the
fields that time or name a run aside), every logged curve point for point. Then the faults: a
member that diverges stops alone, a run resumed from a single run's checkpoint continues inside a
pack exactly, a SIGKILLed packed sweep resumes every member exactly.
"""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest
from support import VARYING, assert_no_duplicated_steps, read_scalars, summary_of

import per_dqn
from per_dqn.agent.pack import Pack
from per_dqn.config import load_config, parse_override, resolve_config_path
from per_dqn.logs import tags
from per_dqn.memory import KINDS, REPLAY_KINDS
from per_dqn.packs import grouping as packing
from per_dqn.packs.lockstep import run_pack
from per_dqn.rundir import checkpoint as ckpt
from per_dqn.rundir import latest
from per_dqn.sweeps.job import error_line
from per_dqn.training import checkpoints as run_ckpt
from per_dqn.training import run as run_module
from per_dqn.training.loop import DivergedError
from per_dqn.training.run import Trainer

SMALL = {
    "train.total_env_steps": 1_200, "train.learning_starts": 200, "train.eval_interval": 400,
    "train.eval_episodes": 2, "train.final_eval_episodes": 2, "train.log_interval": 200,
    "checkpoint.interval_steps": 400, "agent.hidden_sizes": [32, 32], "replay.capacity": 2_000,
    "run.device": "cpu",
}  # fmt: skip


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def timeless(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """The run's logged curves but its speed (a wall-clock measure)."""
    return {tag: points for tag, points in read_scalars(run_dir).items() if tag != tags.PERF_SPS}


def assert_same_files(packed: Path, alone: Path) -> None:
    """What a packed run wrote equals what the same run wrote alone: model.pt, each checkpoint's
    agent, memory and loop files, the summary (its run-specific fields aside) and the curves."""
    assert digest(packed / "model.pt") == digest(alone / "model.pt")
    ours, theirs = summary_of(packed), summary_of(alone)
    assert {k: v for k, v in ours.items() if k not in VARYING} == {
        k: v for k, v in theirs.items() if k not in VARYING
    }
    saved = [c.name for c in ckpt.list_checkpoints(ckpt.checkpoints_dir(alone))]
    assert [c.name for c in ckpt.list_checkpoints(ckpt.checkpoints_dir(packed))] == saved
    for name in saved:
        for part in sorted((ckpt.checkpoints_dir(alone) / name).iterdir()):
            if part.name != "manifest.json":  # it names the run's own id
                assert digest(ckpt.checkpoints_dir(packed) / name / part.name) == digest(part)
    assert timeless(packed) == timeless(alone)


def test_train_many_gives_each_run_what_train_gives_it(workdir):
    """Two replay kinds x two seeds in packs of at most 3 (one of 3, one of 1), against each run
    trained alone by ``per_dqn.train``: the same files, byte for byte; each summary names its
    pack."""
    many = per_dqn.train_many(
        "cartpole", seeds=[0, 1], arms=["uniform", "proportional"], overrides=SMALL,
        out="runs/many", pack=3,
    )  # fmt: skip
    assert [(r.arm, r.seed, r.error) for r in many] == [
        ("uniform", 0, None), ("uniform", 1, None),
        ("proportional", 0, None), ("proportional", 1, None),
    ]  # fmt: skip
    for r in many:
        alone = per_dqn.train(
            "cartpole", overrides={**SMALL, "replay.kind": r.arm, "run.seed": r.seed},
            run_dir=f"runs/alone/{r.arm}/s{r.seed}",
        )  # fmt: skip
        assert_same_files(r.run_dir, alone.run_dir)
        assert r.final_return == alone.final_return
    first = summary_of(many[0].run_dir)["provenance"]["pack"]
    assert first == {"size": 3, "members": ["uniform/s0", "uniform/s1", "proportional/s0"]}
    assert "pack" not in summary_of(many[3].run_dir)["provenance"]  # alone in its pack of one
    assert summary_of(many[0].run_dir)["provenance"]["call"]["function"] == "per_dqn.train_many"
    # One pack is one process's time: its members' sessions carry one pack id, which the
    # report's compute time counts once (a mutation run found each member given its own).
    ids = [[s["pack"] for s in summary_of(r.run_dir)["wall_sessions"]] for r in many]
    assert all(len(i) == 1 and len(i[0]) == 32 for i in ids)
    assert ids[0] == ids[1] == ids[2] != ids[3]


def test_every_replay_kind_in_one_pack_gives_each_run_what_train_gives_it(workdir):
    """Every registered kind (``KINDS``: a new one is taken without a line here) packed as
    ``pack_key`` groups them (the kinds whose update computes the same objective share a pack):
    each run's files are byte for byte what it writes alone, its memory's sampler included."""
    many = per_dqn.train_many(
        "cartpole", seeds=[1], arms=list(KINDS), overrides=SMALL, out="runs/many",
        pack=len(KINDS),
    )  # fmt: skip
    assert [(r.arm, r.error) for r in many] == [(kind, None) for kind in KINDS]
    objective_of = {kind: REPLAY_KINDS[kind].objective for kind in KINDS}
    for r in many:
        size = sum(o == objective_of[r.arm] for o in objective_of.values())
        pack = summary_of(r.run_dir)["provenance"].get("pack", {"size": 1})
        assert pack["size"] == size, r.arm
    assert max(list(objective_of.values()).count(o) for o in objective_of.values()) > 1
    for r in many:
        alone = per_dqn.train(
            "cartpole", overrides={**SMALL, "replay.kind": r.arm, "run.seed": 1},
            run_dir=f"runs/alone/{r.arm}",
        )  # fmt: skip
        assert_same_files(r.run_dir, alone.run_dir)


# One value per member key (``grouping.MEMBER_AGENT_KEYS``), other than cartpole.yaml's: under
# Adam, and under RMSprop for the keys only RMSprop reads.
ADAM_MEMBERS = {
    "agent.learning_rate": 3e-4, "agent.learning_rate_end": 1e-4, "agent.adam_eps": 1e-4,
    "agent.n_step": 1, "agent.gamma": 0.9, "agent.tau": 0.5, "agent.target_update_interval": 7,
    "agent.init": "xavier_uniform",
}  # fmt: skip
RMSPROP_MEMBERS = {
    "agent.rmsprop_alpha": 0.9, "agent.rmsprop_eps": 1e-3, "agent.rmsprop_centered": False,
}  # fmt: skip


def test_the_member_key_grid_covers_every_member_key():
    """A key added to ``MEMBER_AGENT_KEYS`` must join the grid below, or no test packs it."""
    keys = {key.removeprefix("agent.") for key in {**ADAM_MEMBERS, **RMSPROP_MEMBERS}}
    assert keys == packing.MEMBER_AGENT_KEYS


@pytest.mark.parametrize(
    "optimizer, members", [("adam", ADAM_MEMBERS), ("rmsprop", RMSPROP_MEMBERS)]
)
def test_members_that_differ_in_a_member_key_each_run_as_alone(workdir, optimizer, members):
    """Issue 46: packs were tested bit-identical only among members of one config, and a bug
    that gave every member the first member's discount survived. One pack of the base config
    and one member per member key, each differing from the base in that key alone: every
    member's files are byte for byte what it writes alone."""
    # The squared loss: under the Huber loss every |delta| of these first updates is past 1, so
    # the gradient is the sign of delta alone and the target net's values (tau) would not show.
    base = {**SMALL, "agent.optimizer": optimizer, "agent.loss": "mse",
            "train.total_env_steps": 800}  # fmt: skip
    arms = {"base": {}} | {key.removeprefix("agent."): {key: v} for key, v in members.items()}
    many = per_dqn.train_many("cartpole", seeds=[2], arms=arms, overrides=base, out="runs/many")
    assert [(r.arm, r.error) for r in many] == [(arm, None) for arm in arms]
    assert summary_of(many[0].run_dir)["provenance"]["pack"]["size"] == len(arms)
    for r in many:
        alone = per_dqn.train(
            "cartpole", overrides={**base, **arms[r.arm], "run.seed": 2},
            run_dir=f"runs/alone/{r.arm}",
        )  # fmt: skip
        assert_same_files(r.run_dir, alone.run_dir)
    # The members did differ: no two wrote the same weights.
    assert len({digest(r.run_dir / "model.pt") for r in many}) == len(arms)


def test_a_minatar_pack_gives_each_run_what_it_gives_alone(workdir):
    """MinAtar Breakout (the MinAtar CNN: convolutions per member, the rest stacked), two seeds
    packed against each alone."""
    pytest.importorskip("minatar")
    small = {**SMALL, "agent.hidden_sizes": [32], "train.total_env_steps": 800}
    many = per_dqn.train_many("minatar", seeds=[0, 1], overrides=small, out="runs/many")
    for r in many:
        assert r.error is None
        alone = per_dqn.train(
            "minatar", overrides={**small, "run.seed": r.seed}, run_dir=f"runs/alone/s{r.seed}"
        )
        assert_same_files(r.run_dir, alone.run_dir)


def test_a_pack_s_evaluations_act_in_one_forward_pass_per_step(workdir, monkeypatch):
    """The members of a pack evaluate at the same env steps, and each step of their evaluations
    is one forward pass of the pack for every member still playing (issue 24: acting is one
    forward pass for all K runs), not one per member. Training here never asks the network
    (epsilon 1 throughout), so every forward pass the pack makes is an evaluation's: as many as
    the longest member's evaluation steps, evaluation by evaluation. The runs are those they are
    alone (the whole files: ``test_train_many_gives_each_run_what_train_gives_it``)."""
    calls = []
    greedy = Pack.greedy_actions

    def counted(self, obs):
        calls.append(sorted(obs))
        return greedy(self, obs)

    monkeypatch.setattr(Pack, "greedy_actions", counted)
    overrides = {**SMALL, "train.epsilon_start": 1.0, "train.epsilon_end": 1.0,
                 "train.eval_epsilon": 0.0}  # fmt: skip
    many = per_dqn.train_many("cartpole", seeds=[0, 1, 2], overrides=overrides, out="runs/many",
                              pack=3)  # fmt: skip
    assert [r.error for r in many] == [None, None, None]
    episodes = overrides["train.eval_episodes"]
    assert overrides["train.final_eval_episodes"] == episodes
    # Each member's agent steps per evaluation, in the order it evaluated.
    steps = [
        [round(mean * episodes) for _, mean in read_scalars(r.run_dir)[tags.EVAL_LENGTH_MEAN]]
        for r in many
    ]
    assert len({len(s) for s in steps}) == 1 and len(steps[0]) >= 3
    longest = sum(max(column) for column in zip(*steps, strict=True))
    assert len(calls) == longest < sum(map(sum, steps))
    assert sum(len(slots) == 3 for slots in calls) >= min(map(min, steps)) * len(steps[0])


def test_a_member_that_diverges_stops_alone(workdir):
    """A learning rate of 1e30 diverges at its first update (a real divergence): that run ends
    with its ``DivergedError`` and writes no summary or model, as alone; its pack-mate goes on to
    the end and writes what it writes alone."""
    many = per_dqn.train_many(
        "cartpole", arms={"good": {}, "bad": {"agent.learning_rate": 1e30}}, overrides=SMALL,
        out="runs/many",
    )  # fmt: skip
    good, bad = many
    assert isinstance(bad.error, DivergedError) and bad.result is None
    assert "training diverged" in str(bad.error)
    assert not (bad.run_dir / "summary.json").exists() and not (bad.run_dir / "model.pt").exists()
    assert good.error is None
    alone = per_dqn.train("cartpole", overrides=SMALL, run_dir="runs/alone")
    assert_same_files(good.run_dir, alone.run_dir)


def test_an_error_in_the_pack_s_update_ends_each_run_that_asked_for_it(workdir, monkeypatch):
    """An error raised by the batched update itself (injected at its 60th call, near env step
    440: an out-of-memory on the device, say) is raised in each run that asked for the update,
    at its request, as in its update alone: each run ends with that error and writes no model,
    and its checkpoint of step 400 stays (a mutation run found this path unchecked: the error
    dropped, or raised in no run)."""
    real_learn, asked = Pack.learn, []

    def learn(self, batches):
        asked.append(sorted(batches))
        if len(asked) == 60:
            raise RuntimeError("out of memory (injected)")
        return real_learn(self, batches)

    monkeypatch.setattr(Pack, "learn", learn)
    many = per_dqn.train_many("cartpole", seeds=[0, 1], overrides=SMALL, out="runs/many")
    assert asked == [[0, 1]] * 60
    for run in many:
        assert isinstance(run.error, RuntimeError) and str(run.error) == "out of memory (injected)"
        assert run.result is None and not (run.run_dir / "model.pt").exists()
        assert [c.name for c in ckpt.list_checkpoints(ckpt.checkpoints_dir(run.run_dir))] == [
            ckpt.checkpoint_name(400)
        ]


def test_an_evaluation_and_a_training_step_of_other_shapes_act_in_their_own_passes(workdir):
    """Two sub-envs a run: training acts on 2 observations, an evaluation on 1. Members that
    evaluate at other steps (every 400 and every 600 env steps) ask for both shapes in one
    round, each shape gets its own forward pass, and each run writes what it writes alone (a
    mutation run found every asker put in one pass: no test had two sub-envs in a pack)."""
    two = {**SMALL, "env.num_envs": 2}
    arms = {"every400": {}, "every600": {"train.eval_interval": 600}}
    many = per_dqn.train_many("cartpole", arms=arms, overrides=two, out="runs/many")
    assert [r.error for r in many] == [None, None]
    for run, arm in zip(many, arms.values(), strict=True):
        alone = per_dqn.train("cartpole", overrides={**two, **arm}, run_dir=f"runs/alone/{run.arm}")
        assert_same_files(run.run_dir, alone.run_dir)


def test_a_full_disk_stops_the_member_that_cannot_write_with_one_line(workdir, monkeypatch):
    """ENOSPC at one member's second checkpoint (injected: no tmpfs here to fill): that run stops
    with its ``OSError`` (one line in a sweep's outcome), its first checkpoint intact and no
    second one; its pack-mate goes on to the end and writes what it writes alone; and the stopped
    run, resumed once the disk has room, ends as the run that never stopped."""
    real_save = run_ckpt.save_run_checkpoint

    def save_until_full(root, **kwargs):
        if "full" in Path(root).parts and kwargs["env_steps"] >= 800:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(root, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(run_ckpt, "save_run_checkpoint", save_until_full)
        good, full = per_dqn.train_many(
            "cartpole", arms={"room": {}, "full": {}}, overrides=SMALL, out="runs/many"
        )
    second = ckpt.checkpoints_dir(full.run_dir) / ckpt.checkpoint_name(800)
    assert isinstance(full.error, OSError) and full.error.errno == errno.ENOSPC
    # What a sweep prints for it (its `[n/N] ...: error:` line): one line naming the file.
    assert error_line(full.error) == f"WriteError: {second}: No space left on device"
    assert full.result is None and not (full.run_dir / "model.pt").exists()
    ckpt.verify_checkpoint(ckpt.checkpoints_dir(full.run_dir) / ckpt.checkpoint_name(400))
    assert ckpt.list_checkpoints(ckpt.checkpoints_dir(full.run_dir))[-1].name == (
        ckpt.checkpoint_name(400)
    )  # no half-written second one
    assert good.error is None
    alone = per_dqn.train("cartpole", overrides=SMALL, run_dir="runs/alone")
    assert_same_files(good.run_dir, alone.run_dir)
    resumed = per_dqn.resume(full.run_dir)
    assert resumed.final_return == alone.final_return
    assert digest(full.run_dir / "model.pt") == digest(alone.run_dir / "model.pt")


def config(**changes) -> object:
    texts = [f"{k}={v}" for k, v in {**SMALL, **changes}.items()]
    return load_config(resolve_config_path("cartpole.yaml"), [parse_override(t) for t in texts])


def test_a_single_run_s_checkpoint_resumes_inside_a_pack_exactly(tmp_path):
    """Format 3 from a run alone: stopped at its checkpoint of step 400, then resumed as a member
    of a pack beside a fresh run of another seed, it ends as the same run never stopped, byte for
    byte (with no step logged twice)."""

    class StopAt400:
        def on_checkpoint(self, env_steps, path):
            return env_steps >= 400

    stopped = Trainer(config(), "cartpole")
    try:
        summary = stopped.run(tmp_path / "resumed", callbacks=[StopAt400()])
    finally:
        stopped.close()
    assert summary["interrupted"] and summary["env_steps"] == 400
    resumed, other = Trainer(config(), "cartpole"), Trainer(config(**{"run.seed": 5}), "cartpole")
    try:
        found = latest.find_latest(ckpt.checkpoints_dir(tmp_path / "resumed"))
        assert ckpt.read_manifest(found.path)["format"] == 3
        resumed.load_checkpoint(found.path)
        results = run_pack([resumed, other], [tmp_path / "resumed", tmp_path / "other"])
    finally:
        resumed.close()
        other.close()
    assert [r.error for r in results] == [None, None]
    whole = Trainer(config(), "cartpole")
    try:
        whole.run(tmp_path / "whole")
    finally:
        whole.close()
    assert summary_of(tmp_path / "resumed")["resumed_from_env_steps"] == 400
    assert digest(tmp_path / "resumed" / "model.pt") == digest(tmp_path / "whole" / "model.pt")
    assert timeless(tmp_path / "resumed") == timeless(tmp_path / "whole")
    assert_no_duplicated_steps(tmp_path / "resumed")


class CtrlC:
    """A callback that raises ``KeyboardInterrupt`` at the log point of step 400 (where a Ctrl-C
    lands in a run's own code), noting the step in ``stopped``."""

    def __init__(self) -> None:
        self.stopped: list[int] = []

    def on_log(self, env_steps, values):
        if env_steps >= 400:
            self.stopped.append(env_steps)
            raise KeyboardInterrupt


def ctrl_c_in_the_second(tmp_path: Path, ctrl_c: CtrlC) -> list:
    """A pack of three CartPole runs (seeds 0, 1, 2) whose second gets ``ctrl_c``; its results."""
    trainers = [Trainer(config(**{"run.seed": seed}), "cartpole") for seed in (0, 1, 2)]
    dirs = [tmp_path / f"s{seed}" for seed in (0, 1, 2)]
    try:
        return run_pack(trainers, dirs, callbacks=[(), (ctrl_c,), ()])
    except KeyboardInterrupt:  # the pack's to end the runs with, not to pass on
        pytest.fail("a KeyboardInterrupt escaped run_pack")
    finally:
        for trainer in trainers:
            trainer.close()


def test_a_ctrl_c_in_one_member_s_code_stops_the_whole_pack(tmp_path):
    """A ``KeyboardInterrupt`` raised inside one run's own code (here its callback at the log
    point of step 400; a Ctrl-C lands wherever the process is) ends every run of the pack as it
    ends a run alone, interrupted, not only the run it landed in. Pins a bug: the run it landed
    in caught it and ended, and its pack-mates trained on to their budget."""
    results = ctrl_c_in_the_second(tmp_path, CtrlC())
    assert [r.run_dir for r in results] == [tmp_path / f"s{seed}" for seed in (0, 1, 2)]
    total = SMALL["train.total_env_steps"]
    for result in results:
        assert result.error is None and result.summary is not None
        assert result.summary["interrupted"] is True
        assert result.summary["env_steps"] < total
    assert results[1].summary["env_steps"] == 400


def test_a_member_that_cannot_write_its_interrupted_end_stops_with_its_error(tmp_path, monkeypatch):
    """A Ctrl-C in one member's code ends the pack; a pack-mate whose interrupted end cannot be
    written (its ``summary.json`` hits a full disk) ends with that error, as it would alone, and
    the others end interrupted without one (a mutation run found the interrupt dropping the
    error uncaught: the run looked finished)."""
    ctrl_c, real_write = CtrlC(), run_module.write_json

    def full_after_the_stop(path, value, *args, **kwargs):
        if ctrl_c.stopped and "s2" in Path(path).parts:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(path, value, *args, **kwargs)

    monkeypatch.setattr(run_module, "write_json", full_after_the_stop)
    results = ctrl_c_in_the_second(tmp_path, ctrl_c)
    assert ctrl_c.stopped == [400]
    assert isinstance(results[2].error, OSError) and results[2].error.errno == errno.ENOSPC
    assert results[2].summary is None
    for result in results[:2]:
        assert result.error is None and result.summary["interrupted"] is True


def test_a_pack_needs_one_run_dir_and_one_sequence_of_callbacks_per_trainer(tmp_path):
    """Refused before anything is written. Pins a bug: callbacks for fewer runs than the pack
    opened the first runs' sessions, then left them open when the zip over them ran short."""
    trainers = [Trainer(config(**{"run.seed": seed}), "cartpole") for seed in (0, 1)]
    dirs = [tmp_path / "s0", tmp_path / "s1"]
    try:
        with pytest.raises(ValueError, match=r"^run_pack needs one run dir per trainer$"):
            run_pack(trainers, dirs[:1])
        with pytest.raises(ValueError, match=r"^run_pack needs one sequence of callbacks per"):
            run_pack(trainers, dirs, callbacks=[()])
    finally:
        for trainer in trainers:
            trainer.close()
    assert not tmp_path.joinpath("s0").exists() and not tmp_path.joinpath("s1").exists()


def test_a_member_whose_run_dir_cannot_be_written_fails_alone(tmp_path):
    """A run whose session cannot open (its run dir lies under a file) ends with that error and
    writes nothing; its pack-mates on either side train to the end (a mutation run found the
    error dropped, and the runs after it skipped)."""
    (tmp_path / "file").write_text("not a directory")
    trainers = [Trainer(config(**{"run.seed": seed}), "cartpole") for seed in (0, 1, 2)]
    dirs = [tmp_path / "s0", tmp_path / "file" / "s1", tmp_path / "s2"]
    try:
        results = run_pack(trainers, dirs)
    finally:
        for trainer in trainers:
            trainer.close()
    assert isinstance(results[1].error, OSError) and results[1].summary is None
    for result in (results[0], results[2]):
        assert result.error is None
        assert result.summary["env_steps"] == SMALL["train.total_env_steps"]


def test_runs_of_other_shapes_go_to_other_packs():
    """Seeds, replay kinds, replay keys, the learning rate, n-step and the exploration schedule
    share a pack; network sizes, the batch size, the env and its sub-env count do not."""
    base = config()
    same = [
        config(**{"run.seed": 3}), config(**{"replay.kind": "rank"}),
        config(**{"replay.alpha": 0.4}), config(**{"agent.learning_rate": 3e-4}),
        config(**{"agent.n_step": 1}), config(**{"train.epsilon_decay_steps": 50}),
    ]  # fmt: skip
    other = [
        config(**{"agent.hidden_sizes": [64, 64]}), config(**{"train.batch_size": 16}),
        config(**{"env.id": "Acrobot-v1"}), config(**{"env.num_envs": 2}),
    ]  # fmt: skip
    assert all(packing.pack_key(c) == packing.pack_key(base) for c in same)
    assert all(packing.pack_key(c) != packing.pack_key(base) for c in other)
    packs = packing.group_into_packs([base, other[0], *same, other[0]], 4)
    assert packs == [[0, 2, 3, 4], [5, 6, 7], [1, 8]]


def test_the_objective_s_own_settings_and_laber_s_rows_split_packs():
    """A mutation run found ``objective_key`` unchecked: the settings an objective reads (PAL's
    ``alpha`` and ``min_priority``, LAP's ``min_priority``) and LaBER's large batch (the rows a
    member's update takes) split packs, while a setting only the sampling reads (LAP's
    ``alpha``) does not; and a pack size of 1 makes packs of one."""
    pal = config(**{"replay.kind": "pal"})
    assert packing.pack_key(config(**{"replay.kind": "pal", "replay.alpha": 0.4})) != (
        packing.pack_key(pal)
    )
    assert packing.pack_key(config(**{"replay.kind": "pal", "replay.min_priority": 2.0})) != (
        packing.pack_key(pal)
    )
    lap = config(**{"replay.kind": "lap"})
    assert packing.pack_key(config(**{"replay.kind": "lap", "replay.alpha": 0.4})) == (
        packing.pack_key(lap)
    )  # LAP's loss reads no alpha: its sampling does, which each member does alone
    assert packing.pack_key(config(**{"replay.kind": "lap", "replay.min_priority": 2.0})) != (
        packing.pack_key(lap)
    )
    laber = config(**{"replay.kind": "laber", "replay.large_batch": 4})
    assert packing.pack_key(config(**{"replay.kind": "laber", "replay.large_batch": 2})) != (
        packing.pack_key(laber)
    )
    assert packing.objective_key(laber)[2] == 4
    # Only LaBER reads its large batch: a config file may still set it beside another kind (an
    # override of it is refused), and it must not split that kind's packs.
    base = config()
    unread = base.model_copy(update={"replay": base.replay.model_copy(update={"large_batch": 8})})
    assert packing.pack_key(unread) == packing.pack_key(base)
    assert packing.group_into_packs([config(), config(), config()], 1) == [[0], [1], [2]]
    with pytest.raises(ValueError, match=r"^the pack size must be >= 1, got 0$"):
        packing.group_into_packs([config()], 0)


def test_runs_of_a_user_s_network_compute_alone(workdir):
    """A ``package.module:factory`` network cannot be stacked: each of its runs makes a pack of
    one (``packing.packable``) and computes through its own module, as ``train`` runs it.

    Bug pinned: such a run reached the pack driver with no pack (its agent has none) and
    crashed there, in a sweep as in ``train_many``."""
    from test_api import tiny_net

    network = f"{tiny_net.__module__}:tiny_net"
    assert not packing.packable(config(**{"agent.network": network}))
    many = per_dqn.train_many(
        "cartpole", seeds=[0, 1], overrides={**SMALL, "agent.network": network},
        out="runs/many", pack=2,
    )  # fmt: skip
    assert [r.error for r in many] == [None, None]
    assert all("pack" not in summary_of(r.run_dir)["provenance"] for r in many)
    for seed, run in zip((0, 1), many, strict=True):
        alone = per_dqn.train(
            "cartpole", overrides={**SMALL, "run.seed": seed}, network=tiny_net,
            run_dir=f"runs/alone{seed}",
        )  # fmt: skip
        assert digest(run.run_dir / "model.pt") == digest(alone.run_dir / "model.pt")
