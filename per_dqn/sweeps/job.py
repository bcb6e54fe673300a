"""Running one job of a sweep in this process, the same way under every backend.

A job runs exactly as ``per-dqn train --quiet --run-dir ...`` would, holding its run dir's writer
lock (``rundir.RunDirLock``) so that no other command writes there meanwhile: a run with a usable
checkpoint is resumed from it (``train --resume``), any other unfinished run dir is cleared and the
run starts from zero. A local worker process and a Ray task both call ``run_jobs`` (a pack of
jobs; ``run_job`` is a pack of one), so skipping
finished runs, resuming and the run dir's contents are one code path, and a run on CPU gives the
same summary and ``model.pt`` under either backend.

Also here: ``preflight``, the trainer built once per env before a sweep writes anything (it needs
what a job needs, and is the only other place a sweep builds a ``Trainer``).
"""

from __future__ import annotations

import contextlib
import shutil
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from per_dqn.config import Config, parse_yaml, validate_config
from per_dqn.rundir import dirs as rundir
from per_dqn.sweeps import runs
from per_dqn.sweeps.plan import Job, Sweep, check_run_dir_paths
from per_dqn.training.stopping import ShouldStop


def job_config(job: Job) -> Config:
    """The job's resolved config, validated (its ``config_yaml`` as ``run_dir/config.yaml``)."""
    label = f"{job.run_dir}/config.yaml"
    return validate_config(parse_yaml(job.config_yaml, label), label)


def preflight(sweep: Sweep) -> None:
    """Builds (and closes) one trainer per env, so that an unusable env or device fails before
    anything is written, as ``per-dqn train`` does.

    Raises:
        ValueError: the message starts with the config and the key to blame (an allocation
            that fails included).
    """
    from per_dqn.training.memory_plan import allocation_failure
    from per_dqn.training.run import Trainer

    seen = set()
    for job in sweep.jobs:
        if job.env_id in seen:
            continue
        seen.add(job.env_id)
        config = job_config(job)
        try:
            Trainer(config, job.config_name).close()
        except ValueError as exc:
            raise ValueError(f"{sweep.record['config']}: {exc}") from None
        except (MemoryError, RuntimeError) as exc:  # a replay memory or network too large
            line = allocation_failure(exc, config)
            if line is None:
                raise
            raise ValueError(f"{sweep.record['config']}: {line}") from None


def pack_jobs(jobs: Sequence[Job], size: int, out: Path | None = None) -> list[list[Job]]:
    """``jobs`` grouped into packs of at most ``size`` (``per_dqn.packs.grouping``'s
    ``group_into_packs``: runs whose networks, batch size or env differ go to different packs),
    in sweep order.

    Given the sweep's ``out``, the runs a stopped sweep left checkpointed part-way are grouped
    first, the furthest on first (``checkpointed_steps``), and their packs run first, so that a
    re-run finishes the runs it had begun before it begins others (a run's numbers do not depend
    on its pack, so this reorders nothing but the work)."""
    if out is not None:
        steps = {job.run_dir: checkpointed_steps(out / job.run_dir) for job in jobs}
        jobs = sorted(jobs, key=lambda job: -steps[job.run_dir])  # stable: ties keep sweep order
    if size <= 1:
        packs = [[job] for job in jobs]
    else:
        from per_dqn.packs.grouping import group_into_packs

        groups = group_into_packs([job_config(job) for job in jobs], size)
        packs = [[jobs[i] for i in members] for members in groups]
    if out is None:
        return packs
    # Grouping by pack key may put a later key's begun runs after an earlier key's fresh ones.
    furthest = [max(steps[job.run_dir] for job in members) for members in packs]
    return [packs[i] for i in sorted(range(len(packs)), key=lambda i: -furthest[i])]


def checkpointed_steps(run_dir: Path) -> int:
    """The env steps a re-run will resume the run from: its newest checkpoint whose manifest
    reads (a re-run passes over one that does not for an older one), 0 if that one is final (a
    run killed between its final checkpoint and its summary is redone from zero) or if there is
    none. Only manifests are read: a checkpoint's files are verified when it is loaded."""
    from per_dqn.rundir import checkpoint as ckpt

    try:
        found = ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))
    except (ckpt.CheckpointError, OSError):  # a link out of the run dir, an unreadable dir
        return 0
    for path in reversed(found):
        try:
            manifest = ckpt.read_manifest(path)
        except (ckpt.CheckpointError, OSError):
            continue
        return 0 if manifest.get("final") else ckpt.checkpoint_step(path)
    return 0


def pack_memory_refusal(jobs: Sequence[Job]) -> str | None:
    """``plan.pack_refusal`` for a pack of jobs: the one line that refuses it when its replay
    memories, held at once by one process, do not fit in the available RAM (the env of each is
    made once, to learn its observations' shape)."""
    from per_dqn.training import memory_plan as plan

    specs: dict[str, Any] = {}
    plans = []
    for job in jobs:
        config = job_config(job)
        if config.env.id not in specs:
            specs[config.env.id] = plan.env_spec(config)
        plans.append(plan.memory_plan(config, specs[config.env.id]))
    return plan.pack_refusal(plans)


def describe_packs(packs: Sequence[Sequence[Job]]) -> str:
    """How a sweep was packed, short enough for a line of 80 columns however many packs:
    ``30 packs of 5``, or by size, largest first, ``3 packs: 2 of 3, 1 of 1``."""
    counts: dict[int, int] = {}
    for members in packs:
        counts[len(members)] = counts.get(len(members), 0) + 1
    head = f"{len(packs)} pack{'s' * (len(packs) != 1)}"
    if len(counts) == 1:
        return f"{head} of {next(iter(counts))}"
    return f"{head}: " + ", ".join(f"{n} of {size}" for size, n in sorted(counts.items())[::-1])


@dataclass(frozen=True)
class Outcome:
    """How one run ended.

    Attributes:
        job: the run.
        final_return: its final evaluation's mean return (None unless it finished).
        wall_seconds: its wall time.
        interrupted: Ctrl-C stopped it.
        error: the exception that ended it, if one did.
    """

    job: Job
    final_return: float | None = None
    wall_seconds: float = 0.0
    interrupted: bool = False
    error: str | None = None


@dataclass
class SweepResult:
    """What a backend's ``run`` did.

    Attributes:
        skipped: runs already finished before this call.
        outcomes: one per run started, in the order they ended.
        interrupted: Ctrl-C stopped the sweep.
    """

    skipped: int = 0
    outcomes: list[Outcome] = field(default_factory=list)
    interrupted: bool = False

    @property
    def failed(self) -> list[Outcome]:
        """Runs that ended in an error."""
        return [o for o in self.outcomes if o.error is not None]


def run_job(
    job: Job,
    out: Path,
    should_stop: ShouldStop | None = None,
    callbacks: Sequence[Any] = (),
) -> Outcome:
    """Runs one job in this process, as ``per-dqn train --quiet`` would, holding its run dir's
    lock: a run with a usable checkpoint is resumed from it (``train --resume``), any other
    unfinished run dir is cleared and the run starts from zero. ``callbacks`` are the run's
    (``per_dqn.training.run.Callback``): the Ray backend's report its progress. A pack of one
    (``run_jobs``).

    Raises:
        RunDirInUse: another process writes the run dir.
    """
    (outcome,) = run_jobs([job], out, should_stop, [callbacks], raise_lock_errors=True)
    return outcome


def run_jobs(
    jobs: Sequence[Job],
    out: Path,
    should_stop: ShouldStop | None = None,
    callbacks: Sequence[Sequence[Any]] | None = None,
    raise_lock_errors: bool = False,
) -> list[Outcome]:
    """Runs jobs together in this process, as one pack (``per_dqn.packs.lockstep.run_pack``; their
    configs share a ``packs.pack_key``), each as ``run_job`` runs it alone: its run dir locked,
    skipped if finished since the sweep was planned, resumed from its newest usable checkpoint
    or cleared and started from zero. A job that cannot start (its run dir in use, its trainer
    not built) or that fails (a diverged loss) is one ``Outcome`` with its error; the others go
    on.

    Returns:
        One ``Outcome`` per job, in order.
    """
    from per_dqn.packs.lockstep import run_pack
    from per_dqn.rundir import checkpoint as ckpt
    from per_dqn.training.run import Trainer

    hooks = list(callbacks) if callbacks is not None else [() for _ in jobs]
    if len(jobs) > 1:
        refused = pack_memory_refusal(jobs)
        if refused is not None:
            return [Outcome(job, error=f"ValueError: {refused}") for job in jobs]
    outcomes: list[Outcome | None] = [None] * len(jobs)
    started: list[tuple[int, Any]] = []  # (index, trainer)
    with contextlib.ExitStack() as held:
        try:
            for i, job in enumerate(jobs):
                run_dir = out / job.run_dir
                try:
                    # Planned without links; checked again where it is written (issue 43, E1).
                    check_run_dir_paths(out, [job])
                except ValueError as exc:
                    if len(jobs) == 1:
                        raise
                    outcomes[i] = Outcome(job, error=error_line(exc))
                    continue
                try:
                    held.enter_context(rundir.lock_run_dir(run_dir))
                except rundir.RunDirInUse as exc:
                    if raise_lock_errors:
                        raise
                    outcomes[i] = Outcome(job, error=error_line(exc))
                    continue
                summary = runs.read_summary(run_dir)
                if summary is not None and summary.get("interrupted") is False:
                    # Finished by another command since this sweep was planned.
                    outcomes[i] = Outcome(
                        job, summary["final_eval_return_mean"], summary["wall_seconds"]
                    )
                    continue
                try:
                    trainer = _trainer(Trainer, ckpt, job, run_dir)
                except Exception as exc:
                    if len(jobs) == 1:
                        raise
                    outcomes[i] = Outcome(job, error=error_line(exc))
                    continue
                started.append((i, trainer))
            if started:
                ended = run_pack(
                    [t for _, t in started],
                    [out / jobs[i].run_dir for i, _ in started],
                    should_stop,
                    [hooks[i] for i, _ in started],
                )
                for (i, _), member in zip(started, ended, strict=True):
                    if member.error is not None:
                        if len(jobs) == 1:
                            raise member.error
                        outcomes[i] = Outcome(jobs[i], error=error_line(member.error))
                    else:
                        summary = member.summary
                        outcomes[i] = Outcome(
                            jobs[i],
                            final_return=summary["final_eval_return_mean"],
                            wall_seconds=summary["wall_seconds"],
                            interrupted=summary["interrupted"],
                        )
        finally:
            for _, trainer in started:
                trainer.close()
    return [o for o in outcomes if o is not None]


def _trainer(trainer_class: Any, ckpt: Any, job: Job, run_dir: Path) -> Any:
    """The job's trainer, resumed from the run dir's newest usable checkpoint, or fresh in a
    cleared run dir."""
    from per_dqn.rundir import latest
    from per_dqn.training import checkpoints as run_ckpt

    config = job_config(job)
    trainer = trainer_class(config, job.config_name)
    found = latest.find_latest(ckpt.checkpoints_dir(run_dir), only=run_ckpt.TRAINING_FILES)
    # A final checkpoint without a finished summary (killed between the two writes) is not
    # continued: that would evaluate a second time and score the run differently from one never
    # stopped.
    resumed = found.path is not None and not found.manifest.get("final")
    if resumed:
        try:
            trainer.load_checkpoint(found.path)
        except ckpt.CheckpointError:
            resumed = False
            trainer.close()  # it may hold part of the checkpoint
            trainer = trainer_class(config, job.config_name)
    if not resumed:
        try:
            # Again where it deletes: a dir on the way swapped for a link since the plan's check.
            check_run_dir_paths(run_dir.parents[len(Path(job.run_dir).parts) - 1], [job])
            clear_run_dir(run_dir)
        except BaseException:
            trainer.close()
            raise
    return trainer


def error_line(exc: BaseException) -> str:
    """An exception as one line, its type included: ``ValueError: train.lr: must be > 0``; a
    file that could not be written (or read) as ``per-dqn train`` names it:
    ``WriteError: DIR/checkpoints/step_000000800: No space left on device``."""
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{type(exc).__name__}: {exc.filename}: {exc.strerror}"
    return " ".join("".join(traceback.format_exception_only(exc)).split())


def clear_run_dir(run_dir: Path) -> None:
    """Deletes what an unfinished run left (its events would mix with the redo), lock aside.

    Raises:
        ValueError: ``run_dir`` is a link (issue 43, E1: its target's files were deleted and the
            run trained there); ``plan.check_run_dir_paths`` refuses it before a sweep starts,
            and this refuses it again where the deleting is done.
    """
    if run_dir.is_symlink():
        raise ValueError(f"{run_dir} is a symbolic link; refused: a run dir is never cleared "
                         "through one")  # fmt: skip
    for path in run_dir.iterdir():
        if path.name == rundir.LOCK_FILE:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
