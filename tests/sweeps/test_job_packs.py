"""Packs of sweep jobs in this process (``per_dqn.sweeps.job``): ``pack_jobs``, ``describe_packs``,
``pack_memory_refusal`` and ``run_jobs``, called here rather than through ``ablate --pack`` in a
worker process, so that each is pinned by a fast test of its own.

The runs are 200-step CartPole runs of a 16-unit network (a checkpoint at 100 and 200, one final
evaluation episode of at most 50 steps): a pack of two takes about a second.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import pytest
from support import VARYING, summary_of, tree

from per_dqn.config import parse_override
from per_dqn.rundir import dirs as rundir
from per_dqn.sweeps import axes, job, plan
from per_dqn.training import memory_plan as memory
from per_dqn.training.loop import DivergedError

STEPS = 200
# What every job here shares; a 16-unit network unless a sweep's arms or grid set another.
SHARED = [
    "train.learning_starts=100", "train.log_interval=100", "train.eval_interval=0",
    "train.final_eval_episodes=1", "train.eval_max_total_steps=50",
    "train.epsilon_decay_steps=200", "checkpoint.interval_steps=100", "run.device=cpu",
    "replay.capacity=1000",
]  # fmt: skip
SMALL_NET = "agent.hidden_sizes=[16]"
# A network that cannot be built (its module does not exist) and a learning rate that diverges
# at the first update: a run that cannot start and a run that fails.
NO_NETWORK = "agent.network=no_such_module:factory"
DIVERGING = "agent.learning_rate=1.0e+30"


def sweep_jobs(
    out: Path,
    arms: str = "uniform",
    seeds: tuple[int, ...] = (0, 1),
    grid: list[tuple[str, list]] | None = None,
    extra: tuple[str, ...] = (SMALL_NET,),
) -> list[plan.Job]:
    """The jobs of ``ablate --replay ARMS --seeds SEEDS --steps 200`` into ``out`` (in sweep
    order), with ``SHARED`` and ``extra`` set."""
    overrides = [parse_override(s) for s in (*SHARED, *extra)]
    arms_ = axes.parse_arms(arms)
    return plan.plan_sweep("cartpole.yaml", arms_, seeds, STEPS, overrides, out, grid or ()).jobs


def dirs(packs: list[list[plan.Job]]) -> list[list[str]]:
    return [[member.run_dir for member in members] for members in packs]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def finished(one: plan.Job, run_dir: Path) -> job.Outcome:
    """The outcome of a run that finished, from its summary."""
    written = summary_of(run_dir)
    assert written["interrupted"] is False and written["env_steps"] == STEPS
    return job.Outcome(one, written["final_eval_return_mean"], written["wall_seconds"], False)


# pack_jobs


@pytest.mark.parametrize("size", [1, 0, -3])
def test_pack_jobs_of_size_one_or_less_keeps_each_job_alone_in_sweep_order(tmp_path, size):
    """Pins ``pack_jobs`` for sizes <= 1: one job per pack, in sweep order, even when runs of two
    pack keys alternate (grouping them by key would reorder them) and for sizes that
    ``group_into_packs`` refuses (0 and below)."""
    jobs = sweep_jobs(tmp_path, "uniform,uniform:agent.hidden_sizes=[32]", extra=())
    assert [j.run_dir for j in jobs] == [
        "uniform/s0", "uniform/hidden_sizes=[32]/s0", "uniform/s1", "uniform/hidden_sizes=[32]/s1"
    ]  # fmt: skip
    packs = job.pack_jobs(jobs, size)
    assert packs == [[j] for j in jobs]
    assert all(member is j for (member,), j in zip(packs, jobs, strict=True))


def test_pack_jobs_groups_runs_that_share_a_pack_key_in_sweep_order_at_most_size_a_pack(tmp_path):
    """Pins the grouping: two replay kinds x five seeds share one pack key, so the ten runs fill
    packs of ``size`` in sweep order (the last one short); a size past the run count makes one
    pack."""
    jobs = sweep_jobs(tmp_path, "uniform,proportional", seeds=(0, 1, 2, 3, 4))
    order = [f"{kind}/s{seed}" for seed in range(5) for kind in ("uniform", "proportional")]
    assert [j.run_dir for j in jobs] == order
    assert dirs(job.pack_jobs(jobs, 4)) == [order[0:4], order[4:8], order[8:10]]
    assert dirs(job.pack_jobs(jobs, 2)) == [order[0:2], order[2:4], order[4:6], order[6:8],
                                            order[8:10]]  # fmt: skip
    assert dirs(job.pack_jobs(jobs, 3)) == [order[0:3], order[3:6], order[6:9], order[9:10]]
    assert dirs(job.pack_jobs(jobs, 10)) == [order]
    assert dirs(job.pack_jobs(jobs, 99)) == [order]


def test_pack_jobs_puts_runs_of_other_networks_batch_sizes_or_envs_in_other_packs(tmp_path):
    """Pins the pack key ``pack_jobs`` groups by: runs of another network width, batch size or env
    go to another pack (each group in the order of its first run), while replay kinds share
    one."""
    nets = sweep_jobs(tmp_path / "a", "uniform,proportional,uniform:agent.hidden_sizes=[32]",
                      extra=())  # fmt: skip
    assert dirs(job.pack_jobs(nets, 4)) == [
        ["uniform/s0", "proportional/s0", "uniform/s1", "proportional/s1"],
        ["uniform/hidden_sizes=[32]/s0", "uniform/hidden_sizes=[32]/s1"],
    ]
    batches = sweep_jobs(tmp_path / "b", grid=[("train.batch_size", [16, 32])])
    assert dirs(job.pack_jobs(batches, 4)) == [
        ["uniform/batch_size=16/s0", "uniform/batch_size=16/s1"],
        ["uniform/batch_size=32/s0", "uniform/batch_size=32/s1"],
    ]
    envs = sweep_jobs(tmp_path / "c", grid=[("env.id", ["CartPole-v1", "Acrobot-v1"])])
    assert dirs(job.pack_jobs(envs, 4)) == [
        ["CartPole-v1/uniform/s0", "CartPole-v1/uniform/s1"],
        ["Acrobot-v1/uniform/s0", "Acrobot-v1/uniform/s1"],
    ]


def checkpointed(run_dir: Path, *steps: int, final: bool = False) -> None:
    """Checkpoints of ``steps`` in ``run_dir`` (the last one ``final`` if asked), each holding one
    small file: ``pack_jobs`` reads their manifests only."""
    from per_dqn.rundir import checkpoint as ckpt

    for step in steps:
        meta = {"final": True} if final and step == steps[-1] else None
        ckpt.write_checkpoint(ckpt.checkpoints_dir(run_dir), step,
                              lambda d: (d / "state.bin").write_bytes(b"x"), keep_last=9,
                              meta=meta)  # fmt: skip


def test_checkpointed_steps_is_where_a_re_run_resumes_from(tmp_path):
    """Pins ``checkpointed_steps``: the newest checkpoint's env steps; past a newer one whose
    manifest is gone (a re-run resumes from the older); 0 with none, with a file under a
    checkpoint's name, with a final checkpoint (a run killed before its summary is redone from
    zero), and with a ``checkpoints`` link out of the run dir (never resumed from)."""
    checkpointed(tmp_path / "a", 100, 300)
    assert job.checkpointed_steps(tmp_path / "a") == 300
    checkpointed(tmp_path / "b", 100, 200)
    (tmp_path / "b/checkpoints/step_000000200/manifest.json").unlink()
    assert job.checkpointed_steps(tmp_path / "b") == 100
    checkpointed(tmp_path / "c", 100, 200, final=True)
    assert job.checkpointed_steps(tmp_path / "c") == 0
    (tmp_path / "d/checkpoints").mkdir(parents=True)
    (tmp_path / "d/checkpoints/step_000000900").write_text("not a checkpoint")
    assert job.checkpointed_steps(tmp_path / "d") == 0
    (tmp_path / "e").mkdir()
    (tmp_path / "e/checkpoints").symlink_to(tmp_path / "a/checkpoints")
    assert job.checkpointed_steps(tmp_path / "e") == 0
    assert job.checkpointed_steps(tmp_path / "none") == 0


@pytest.mark.parametrize("size", [1, 2])
def test_pack_jobs_given_the_sweep_dir_puts_packs_begun_first_the_furthest_on_first(tmp_path, size):
    """Pins the order a re-run takes (issue 24: a re-run of the MinAtar study began new packs while
    four it had checkpointed part-way waited): given ``out``, the runs with a checkpoint come
    first, the furthest on first, and packs keep them together; runs that tie, and those not
    begun, keep sweep order."""
    out = tmp_path / "sweep"
    jobs = sweep_jobs(out, "uniform,proportional", seeds=(0, 1, 2, 3))
    order = [j.run_dir for j in jobs]
    assert order == [f"{kind}/s{seed}" for seed in range(4) for kind in ("uniform", "proportional")]
    assert dirs(job.pack_jobs(jobs, size, out)) == dirs(job.pack_jobs(jobs, size))  # none begun
    checkpointed(out / "uniform/s1", 100)
    checkpointed(out / "proportional/s1", 100, 300)
    checkpointed(out / "proportional/s3", 250)
    checkpointed(out / "uniform/s3", 250)
    if size == 1:
        assert dirs(job.pack_jobs(jobs, 1, out)) == [
            ["proportional/s1"], ["uniform/s3"], ["proportional/s3"], ["uniform/s1"],
            ["uniform/s0"], ["proportional/s0"], ["uniform/s2"], ["proportional/s2"],
        ]  # fmt: skip
    else:
        assert dirs(job.pack_jobs(jobs, 2, out)) == [
            ["proportional/s1", "uniform/s3"], ["proportional/s3", "uniform/s1"],
            ["uniform/s0", "proportional/s0"], ["uniform/s2", "proportional/s2"],
        ]  # fmt: skip


def test_pack_jobs_keeps_runs_begun_together_when_finished_runs_shift_the_packs(tmp_path):
    """Pins the grouping of begun runs (a review of the first version: packs were cut from the
    unfinished runs in sweep order, so when earlier runs had finished unevenly two begun runs
    fell into two packs, each beside a fresh one, and both packs ran first with a fresh run
    each): the two begun runs make one pack, run first."""
    out = tmp_path / "sweep"
    jobs = sweep_jobs(out, "uniform,proportional", seeds=(0, 1))
    checkpointed(out / "proportional/s0", 300)
    checkpointed(out / "uniform/s1", 300)
    assert dirs(job.pack_jobs(jobs, 2)) == [["uniform/s0", "proportional/s0"],
                                            ["uniform/s1", "proportional/s1"]]  # fmt: skip
    assert dirs(job.pack_jobs(jobs, 2, out)) == [["proportional/s0", "uniform/s1"],
                                                 ["uniform/s0", "proportional/s1"]]  # fmt: skip


def test_pack_jobs_puts_each_run_of_a_user_network_in_a_pack_of_its_own(tmp_path):
    """Pins the user's ``package.module:factory`` network: its runs cannot be stacked, so each is
    a pack of one, after the pack of the built-in network's runs (whose key came first)."""
    jobs = sweep_jobs(tmp_path, "uniform,uniform:agent.network=some_package.nets:factory")
    user = "uniform/network=some_package.nets:factory"
    assert [j.run_dir for j in jobs] == ["uniform/s0", f"{user}/s0", "uniform/s1", f"{user}/s1"]
    assert dirs(job.pack_jobs(jobs, 4)) == [["uniform/s0", "uniform/s1"], [f"{user}/s0"],
                                            [f"{user}/s1"]]  # fmt: skip


# describe_packs

ONE = plan.Job("CartPole-v1", "uniform", 0, "uniform/s0", "", "cartpole")


@pytest.mark.parametrize(
    ("sizes", "line"),
    [
        ([1], "1 pack of 1"),
        ([2], "1 pack of 2"),
        ([1, 1], "2 packs of 1"),
        ([2, 1], "2 packs: 1 of 2, 1 of 1"),
        ([4, 4, 4], "3 packs of 4"),
        ([3, 1, 2, 1], "4 packs: 1 of 3, 1 of 2, 2 of 1"),
    ],
)
def test_describe_packs_counts_runs_and_packs_with_their_plurals(sizes, line):
    """Pins ``describe_packs``' line: the number of packs, "pack" singular for exactly one,
    then their one size, or how many of each size, largest first (issue 45: a sweep of 30 packs
    listed all 30 sizes and wrapped at 80 columns)."""
    assert job.describe_packs([[ONE] * n for n in sizes]) == line


def test_describe_packs_of_a_sweep_as_pack_jobs_packs_it(tmp_path):
    """Pins the header ``ablate --pack 4`` prints for 12 runs sharing one pack key."""
    jobs = sweep_jobs(tmp_path, "uniform,proportional", seeds=tuple(range(6)))
    assert job.describe_packs(job.pack_jobs(jobs, 4)) == "3 packs of 4"
    assert job.describe_packs(job.pack_jobs(jobs, 5)) == "3 packs: 2 of 5, 1 of 2"
    assert job.describe_packs(job.pack_jobs(jobs, 1)) == "12 packs of 1"


# pack_memory_refusal


def total_bytes(one: plan.Job) -> int:
    """One job's replay memory as ``per-dqn plan`` sizes it."""
    return memory.memory_plan(job.job_config(one)).parts["total"]


def test_pack_memory_refusal_is_none_when_the_pack_fits_and_makes_each_env_once(
    tmp_path, monkeypatch
):
    """Pins the fitting case (None) and the env made once per env of the pack, not once per run,
    to learn its observations' shape: four runs over two envs make two envs, in sweep order."""
    jobs = sweep_jobs(tmp_path, "uniform,proportional",
                      grid=[("env.id", ["CartPole-v1", "Acrobot-v1"])])  # fmt: skip
    assert len(jobs) == 8
    made: list[str] = []
    real = memory.env_spec

    def counted(config):
        made.append(config.env.id)
        return real(config)

    monkeypatch.setattr(memory, "env_spec", counted)
    monkeypatch.setattr(memory, "available_ram_bytes", lambda: 64 << 30)
    assert job.pack_memory_refusal(jobs) is None
    assert made == ["CartPole-v1", "Acrobot-v1"]


def test_pack_memory_refusal_sums_each_run_s_memory_and_names_the_largest_pack_that_fits(
    tmp_path, monkeypatch
):
    """Pins the refusal line for 2 uniform + 2 proportional memories (each run sized by its own
    config: a proportional memory holds a sum tree more): with RAM for the process and two and a
    half of the largest, the pack of 4 is refused naming 2 as the largest pack that fits; with
    RAM for all four it fits; with less than one, not one run fits."""
    jobs = sweep_jobs(tmp_path, "uniform,proportional", extra=(SMALL_NET, "replay.capacity=50000"))
    uniform, proportional = total_bytes(jobs[0]), total_bytes(jobs[1])
    assert [total_bytes(j) for j in jobs] == [uniform, proportional] * 2
    assert proportional > uniform
    overhead = memory.PROCESS_OVERHEAD_BYTES
    needed = 2 * uniform + 2 * proportional
    available = overhead + 2 * proportional + proportional // 2
    monkeypatch.setattr(memory, "available_ram_bytes", lambda: available)
    assert job.pack_memory_refusal(jobs) == (
        f"--pack 4: 4 replay memories need {memory.gib(needed)} (+1.00 GiB for the rest of the "
        f"process) but only {memory.gib(available)} of RAM is available; the largest pack that "
        "fits is 2 (--pack 2)"
    )
    assert job.pack_memory_refusal(jobs[:2]) is None  # 1 + 1 fit in 2.5
    monkeypatch.setattr(memory, "available_ram_bytes", lambda: overhead + needed)
    assert job.pack_memory_refusal(jobs) is None
    monkeypatch.setattr(memory, "available_ram_bytes", lambda: overhead + proportional - 1)
    assert job.pack_memory_refusal(jobs[1:3]) == (
        f"--pack 2: 2 replay memories need {memory.gib(uniform + proportional)} (+1.00 GiB for "
        f"the rest of the process) but only {memory.gib(overhead + proportional - 1)} of RAM is "
        "available; not one run fits; lower replay.capacity (see `per-dqn plan`)"
    )


# run_jobs


class Seen:
    """A run callback that records the checkpoints it is shown."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_checkpoint(self, env_steps, path) -> bool:
        self.steps.append(env_steps)
        return False


class StopAfter:
    """``should_stop`` that asks the runs to stop once it has been asked ``calls`` times (each run
    asks once per env step)."""

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def __call__(self) -> bool:
        self.calls -= 1
        return self.calls < 0


def test_run_jobs_runs_a_pack_and_each_run_writes_what_it_writes_alone(tmp_path):
    """Pins ``run_jobs`` on a fresh pack of two (no callbacks given): one outcome per job, in
    order, each its run's summary (final return, wall time, not interrupted); each run dir at
    ``<out>/<run_dir>`` with the whole run, its summary naming its config and its pack; and the
    second run's ``model.pt`` and summary those of the same job run alone by ``run_job``."""
    out = tmp_path / "sweep"
    jobs = sweep_jobs(out)
    outcomes = job.run_jobs(jobs, out)
    assert outcomes == [finished(j, out / j.run_dir) for j in jobs]
    for j in jobs:
        written = summary_of(out / j.run_dir)
        assert written["resumed_from_env_steps"] is None and written["seed"] == j.seed
        assert written["config"] == "cartpole"  # the job's config name, as `train` records it
        assert written["provenance"]["pack"] == {"size": 2, "members": ["s0", "s1"]}
    (alone,) = sweep_jobs(tmp_path / "alone", seeds=(1,))
    assert job.run_job(alone, tmp_path / "alone").error is None
    packed, single = out / "uniform" / "s1", tmp_path / "alone" / "uniform" / "s1"
    assert digest(packed / "model.pt") == digest(single / "model.pt")
    ours, theirs = summary_of(packed), summary_of(single)
    assert {k: v for k, v in ours.items() if k not in VARYING} == {
        k: v for k, v in theirs.items() if k not in VARYING
    }


def test_run_jobs_skips_a_finished_run_reports_a_locked_one_and_runs_the_rest(tmp_path):
    """Pins the per-job start of a pack: a run finished since the sweep was planned is skipped
    (its outcome read from its summary, not one of its files rewritten); a run dir whose lock is
    held elsewhere is that job's ``RunDirInUse`` outcome, not an exception, and nothing is written
    there; the job after both still runs to the end. Outcomes come in job order."""
    out = tmp_path / "sweep"
    jobs = sweep_jobs(out, seeds=(0, 1, 2))
    job.run_job(jobs[0], out)
    skipped = finished(jobs[0], out / jobs[0].run_dir)
    before = tree(out / jobs[0].run_dir)
    locked = out / jobs[1].run_dir
    with rundir.lock_run_dir(locked):  # a second open file: refused as another process would be
        outcomes = job.run_jobs(jobs, out)
    in_use = (
        f"per_dqn.rundir.dirs.RunDirInUse: run dir {locked} is in use by another per-dqn process "
        f"(pid {os.getpid()}); wait for it to end or stop it"
    )
    assert outcomes == [
        skipped,
        job.Outcome(jobs[1], error=in_use),
        finished(jobs[2], out / jobs[2].run_dir),
    ]
    assert tree(out / jobs[0].run_dir) == before
    assert [p.name for p in locked.iterdir()] == [rundir.LOCK_FILE]
    assert summary_of(out / jobs[2].run_dir)["resumed_from_env_steps"] is None


def test_run_jobs_passes_should_stop_and_each_run_s_callbacks_and_a_stopped_pack_resumes(
    tmp_path,
):
    """Pins what ``run_jobs`` hands the pack: ``should_stop`` (polled by both runs: stopped after
    300 polls, each ends interrupted between its checkpoints of 100 and 200, with no final
    return) and each job's own callbacks (each shown its run's step-100 checkpoint). Run again
    without them, each run resumes from the checkpoint of the step it stopped at and finishes."""
    out = tmp_path / "sweep"
    jobs = sweep_jobs(out)
    seen = [Seen(), Seen()]
    stopped = job.run_jobs(jobs, out, StopAfter(300), [[seen[0]], [seen[1]]])
    at = []
    for j, outcome in zip(jobs, stopped, strict=True):
        written = summary_of(out / j.run_dir)
        assert written["interrupted"] is True and 100 < written["env_steps"] < STEPS
        assert outcome == job.Outcome(j, None, written["wall_seconds"], True)
        at.append(written["env_steps"])
    assert [s.steps for s in seen] == [[100], [100]]
    resumed = job.run_jobs(jobs, out)
    assert resumed == [finished(j, out / j.run_dir) for j in jobs]
    assert [summary_of(out / j.run_dir)["resumed_from_env_steps"] for j in jobs] == at


@pytest.mark.slow
def test_a_re_run_local_sweep_finishes_the_pack_it_had_begun_before_it_begins_another(tmp_path):
    """Pins the local backend's use of that order (issue 24: a re-run began new packs first): a
    sweep of two packs whose second was stopped part-way, re-run on one worker, runs the second
    first, resumed from its checkpoint, and the first after it from zero."""
    from per_dqn.sweeps.backends import local

    out = tmp_path / "sweep"
    overrides = [parse_override(s) for s in (*SHARED, SMALL_NET)]
    arms = axes.parse_arms("uniform,proportional")
    sweep = plan.plan_sweep("cartpole.yaml", arms, (0, 1), STEPS, overrides, out, ())
    first, second = job.pack_jobs(sweep.jobs, 2)
    assert dirs([first, second]) == [["uniform/s0", "proportional/s0"],
                                     ["uniform/s1", "proportional/s1"]]  # fmt: skip
    stopped = job.run_jobs(second, out, StopAfter(300))
    at = [summary_of(out / j.run_dir)["env_steps"] for j in second]
    assert all(o.interrupted for o in stopped) and all(100 < s < STEPS for s in at)
    result = local.run_sweep(sweep, workers=1, pack=2)
    assert not result.failed and not result.interrupted
    assert [o.job.run_dir for o in result.outcomes] == dirs([second, first])[0] + dirs([first])[0]
    resumed = [summary_of(out / j.run_dir)["resumed_from_env_steps"] for j in (*second, *first)]
    assert resumed == [*at, None, None]


def test_run_jobs_a_run_that_cannot_start_or_that_diverges_is_its_own_outcome(tmp_path):
    """Pins the faults inside a pack: a run whose trainer cannot be built (its network's module
    does not exist) and a run that diverges at its first update each end as one ``Outcome``
    carrying the error's line, and the run after them still finishes."""
    out = tmp_path / "sweep"
    arms = f"uniform:{NO_NETWORK},uniform:{DIVERGING},uniform"
    jobs = sweep_jobs(out, arms, seeds=(0,))
    assert [j.run_dir for j in jobs] == [
        "uniform/network=no_such_module:factory/s0", "uniform/lr=1e+30/s0", "uniform/s0"
    ]  # fmt: skip
    no_network, diverged, good = job.run_jobs(jobs, out)
    assert no_network == job.Outcome(
        jobs[0],
        error="ValueError: agent.network: cannot import 'no_such_module:factory' "
        "(ModuleNotFoundError: No module named 'no_such_module')",
    )
    assert dataclasses.replace(diverged, error=None) == job.Outcome(jobs[1])
    assert diverged.error is not None
    assert diverged.error.startswith(
        "per_dqn.training.loop.DivergedError: the largest |weight| is 1e+30"
    )
    assert diverged.error.endswith("training diverged")
    assert not (out / jobs[1].run_dir / "summary.json").exists()
    assert good == finished(jobs[2], out / jobs[2].run_dir)


def test_run_job_raises_what_ends_a_run_alone(tmp_path):
    """Pins a pack of one (``run_job``): the trainer that cannot be built and the divergence are
    raised, not turned into an outcome, as ``per-dqn train`` would raise them."""
    out = tmp_path / "sweep"
    no_network, diverged = sweep_jobs(out, f"uniform:{NO_NETWORK},uniform:{DIVERGING}", (0,))
    with pytest.raises(ValueError, match=r"^agent\.network: cannot import 'no_such_module:"):
        job.run_job(no_network, out)
    with pytest.raises(DivergedError, match="training diverged"):
        job.run_job(diverged, out)
    with pytest.raises(DivergedError, match="training diverged"):
        job.run_jobs([diverged], tmp_path / "again")


def test_run_jobs_refuses_a_pack_whose_memories_do_not_fit_but_never_a_pack_of_one(
    tmp_path, monkeypatch
):
    """Pins the memory check before a pack starts: with RAM for less than one run's memory, a pack
    of two gives each job an ``Outcome`` carrying ``pack_memory_refusal``'s line as a
    ``ValueError`` and writes nothing; a pack of one is refused by the memory planner its
    ``Trainer`` asks (issue 43, E4: it was not checked, and allocated), before its memory is
    allocated: ``run_job``'s one line, the run dir left without a run."""
    out = tmp_path / "sweep"
    jobs = sweep_jobs(out)
    available = memory.PROCESS_OVERHEAD_BYTES + total_bytes(jobs[0]) - 1
    monkeypatch.setattr(memory, "available_ram_bytes", lambda: available)
    line = (
        f"--pack 2: 2 replay memories need {memory.gib(2 * total_bytes(jobs[0]))} (+1.00 GiB "
        f"for the rest of the process) but only {memory.gib(available)} of RAM is available; "
        "not one run fits; lower replay.capacity (see `per-dqn plan`)"
    )
    assert job.run_jobs(jobs, out) == [job.Outcome(j, error=f"ValueError: {line}") for j in jobs]
    assert not out.exists()
    with pytest.raises(
        ValueError, match=r"^replay\.capacity: a .* but only .* of RAM is available"
    ):
        job.run_jobs(jobs[:1], out)
    assert not (out / jobs[0].run_dir / "summary.json").exists()
