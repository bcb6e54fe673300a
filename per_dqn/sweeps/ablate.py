"""Paired multi-seed sweeps: every env x replay arm x seed, run in worker processes.

A sweep dir ``DIR`` holds one normal run dir per run, ``DIR/<arm>/s<seed>`` (with several envs,
``DIR/<env>/<arm>/s<seed>``), so ``tensorboard --logdir DIR`` shows every curve together, and
``DIR/sweep.json``, the sweep's own record: config, arms, seeds, envs, the resolved config and the
planned runs. Seeds are paired: seed ``s`` sets ``run.seed = s`` in every arm, and the trainer
seeds torch (so the network initialisation), the envs and the memory from it, so the arms of one
seed start from the same network and see the same env seeds.

Re-running the same sweep skips finished runs (a ``summary.json`` with ``interrupted: false``)
and resumes the others from their newest usable checkpoint, as ``per-dqn train --resume`` would
(a run with none is cleared and redone from zero), so a sweep survives Ctrl-C, a crash or a
reboot. A re-run with different parameters against the same dir is refused rather than mixing
runs.

Each worker is a ``spawn``-ed process that builds a ``Trainer`` and runs it into its run dir
exactly as ``per-dqn train --quiet --run-dir ...`` would, one run at a time, torch on
``run.torch_threads`` threads (1 by default), holding the run dir's writer lock
(``metrics.RunDirLock``) so that no other command writes there meanwhile. Ctrl-C or SIGTERM
interrupts the runs in progress the way they interrupt ``per-dqn train`` (stop between two env
steps, checkpoint, summary marked ``interrupted``) and starts no new run.

A sweep dies as a whole: a worker whose parent dies, even by SIGKILL, gets SIGTERM from the kernel
(``prctl(PR_SET_PDEATHSIG)`` on Linux; elsewhere it notices at its next env step that its parent
changed) and stops its run the same way, so no orphan keeps writing into a run dir that the next
``ablate`` resumes.

Run dirs and ``sweep.json`` are read through ``per_dqn.sweeps.runs``, never the report writer, so
that deciding which runs are left to do imports no plotting and no statistics
(``tests/test_architecture.py`` checks it); the CLI writes the report once the sweep ends.
"""

from __future__ import annotations

import ctypes
import json
import multiprocessing as mp
import os
import queue
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from per_dqn import metrics as m
from per_dqn.config import (
    Config,
    ConfigError,
    Override,
    load_config,
    parse_yaml,
    resolve_config_path,
    validate_config,
)
from per_dqn.sweeps import runs
from per_dqn.sweeps.runs import ARMS, SWEEP_FILE

# The config keys a sweep sets per run; the rest of the resolved config is the sweep's own.
SWEEP_AXES = (("env", "id"), ("replay", "kind"), ("run", "seed"))
# After Ctrl-C, how long interrupted runs get to write their summaries before being killed.
STOP_GRACE_SECONDS = 60.0


@dataclass(frozen=True)
class Job:
    """One run of a sweep.

    Attributes:
        env_id: the env.
        arm: the replay kind.
        seed: the run seed.
        run_dir: the run dir relative to the sweep dir.
        config_yaml: the run's resolved config.
        config_name: the config's name (file stem), recorded in the summary.
    """

    env_id: str
    arm: str
    seed: int
    run_dir: str
    config_yaml: str
    config_name: str


@dataclass(frozen=True)
class Sweep:
    """A planned sweep: where it goes, what it runs and the record that identifies it.

    Attributes:
        out: the sweep dir.
        record: what ``sweep.json`` holds (and must hold, on a re-run).
        jobs: every run, env-major then arm then seed.
    """

    out: Path
    record: dict[str, Any]
    jobs: tuple[Job, ...]

    def pending(self) -> list[Job]:
        """The runs not finished yet."""
        return [j for j in self.jobs if not runs.is_finished(self.out / j.run_dir)]


def parse_arms(text: str) -> tuple[str, ...]:
    """``"uniform,rank"`` -> ``("uniform", "rank")``.

    Raises:
        ValueError: an unknown or repeated arm, or none at all.
    """
    arms = tuple(a.strip() for a in text.split(",") if a.strip())
    if not arms:
        raise ValueError(f"--replay must list at least one of {', '.join(ARMS)}, got {text!r}")
    for arm in arms:
        if arm not in ARMS:
            raise ValueError(f"--replay: unknown arm {arm!r}; choose from {', '.join(ARMS)}")
    if len(set(arms)) != len(arms):
        raise ValueError(f"--replay lists an arm twice, got {text!r}")
    return arms


# A seed list longer than this is a typo (10**9 runs), not a sweep.
MAX_SEEDS = 100_000


def parse_seeds(text: str) -> tuple[int, ...]:
    """``--seeds``: ``"10"`` -> seeds 0..9; ``"100-119"`` -> 100..119; ``"3,7,11"`` -> those.

    Raises:
        ValueError: one line naming the bad part: not a number, a negative seed, an empty or
            reversed range, a repeated seed, or more than ``MAX_SEEDS`` seeds.
    """
    text = text.strip()
    bad = f"--seeds: expected a count (10), a range (100-119) or a list (3,7,11), got {text!r}"
    if text.isdigit():
        count = int(text)
        if not 1 <= count <= MAX_SEEDS:
            raise ValueError(f"--seeds must be a count from 1 to {MAX_SEEDS:,}, got {count}")
        return tuple(range(count))
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(bad)
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"--seeds: range {part!r} ends before it starts")
        if len(seeds) + last - first + 1 > MAX_SEEDS:
            raise ValueError(f"--seeds lists more than {MAX_SEEDS:,} seeds, got {text!r}")
        seeds.extend(range(first, last + 1))
    repeated = sorted({s for s in seeds if seeds.count(s) > 1}) if len(seeds) < 10_000 else []
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds lists a seed twice ({repeated[:5] or 'several'}), got {text!r}")
    return tuple(seeds)


def check_workers(workers: int | None) -> int:
    """The worker count: ``workers`` if given (>= 1), else one per CPU core."""
    if workers is None:
        return os.cpu_count() or 1
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    return workers


def _split_envs(overrides: Sequence[Override]) -> tuple[list[str] | None, list[Override]]:
    """Takes the ``env.id`` overrides out: a list (or comma-separated ids) is the sweep's envs."""
    envs, rest = None, []
    for override in overrides:
        if override.path != "env.id":
            rest.append(override)
            continue
        value = override.value
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",")]
        if not isinstance(value, list) or not value:
            raise ValueError(f"--set env.id: expected an env id or a list of them, got {value!r}")
        if not all(isinstance(v, str) and v for v in value):
            raise ValueError(f"--set env.id: every env id must be a non-empty string, got {value}")
        if len(set(value)) != len(value):
            raise ValueError(f"--set env.id lists an env twice, got {value}")
        envs = value
    return envs, rest


def env_slug(env_id: str) -> str:
    """An env id as one path component: ``ALE/Pong-v5`` -> ``ALE-Pong-v5``."""
    return env_id.replace("/", "-")


def _normalised(config: Config) -> dict[str, Any]:
    """The resolved config as plain JSON data, with the sweep's own axes blanked."""
    data = json.loads(json.dumps(config.model_dump(mode="json")))
    for section, key in SWEEP_AXES:
        data[section][key] = None
    return data


def plan_sweep(
    config: str,
    arms: Sequence[str],
    seeds: Sequence[int],
    steps: int | None = None,
    overrides: Sequence[Override] = (),
    out: Path | None = None,
) -> Sweep:
    """Resolves and validates every run's config and checks the sweep dir; writes nothing.

    Args:
        config: a shipped config name or a path.
        arms: replay kinds, e.g. from ``parse_arms``.
        seeds: the run seeds (``parse_seeds``), the same in every arm.
        steps: ``train.total_env_steps`` of every run (None keeps the config's).
        overrides: ``--set`` overrides; an ``env.id`` list makes one sweep over several envs.
        out: the sweep dir; default ``<run.runs_root>/ablate__<envs>__<config name>``.

    Raises:
        ConfigError: a config problem, one line each.
        ValueError: bad arms, seeds or env list, or a sweep dir that holds something else
            (see ``check_out_dir``).
    """
    seeds = tuple(seeds)
    if not seeds:
        raise ValueError("--seeds must name at least one seed")
    if not arms:
        raise ValueError("arms must not be empty")
    path = resolve_config_path(config)
    name = path.stem
    env_list, rest = _split_envs(overrides)
    several = env_list is not None and len(env_list) > 1
    jobs, problems = [], []
    base: dict[str, Any] | None = None
    runs_root, envs = "runs", list(env_list or [])
    for env in env_list or [None]:  # None: the config's own env
        for arm in arms:
            for seed in seeds:
                extra = [
                    Override("replay.kind", arm, "--replay"),
                    Override("run.seed", seed, "--seeds"),
                ]
                if env is not None:
                    extra.append(Override("env.id", env, "--set"))
                if steps is not None:
                    extra.append(Override("train.total_env_steps", steps, "--steps"))
                try:
                    cfg = load_config(path, [*rest, *extra], display_name=config)
                except ConfigError as exc:
                    problems += [p for p in exc.problems if p not in problems]
                    continue
                base = base if base is not None else _normalised(cfg)
                runs_root, env_id = cfg.run.runs_root, cfg.env.id
                if env_id not in envs:
                    envs.append(env_id)
                run_dir = f"{env_slug(env_id)}/{arm}/s{seed}" if several else f"{arm}/s{seed}"
                jobs.append(Job(env_id, arm, seed, run_dir, cfg.to_yaml(), name))
    if problems:
        raise ConfigError(problems)
    if out is None:
        out = Path(runs_root) / f"ablate__{'+'.join(map(env_slug, envs))}__{name}"
    record = {
        "config": config,
        "config_name": name,
        "arms": list(arms),
        "seeds": list(seeds),
        "envs": list(envs),
        "steps": steps,
        "overrides": [f"{o.path}={json.dumps(o.value)}" for o in overrides],
        "resolved_config": base,
        "runs": [
            {"env_id": j.env_id, "arm": j.arm, "seed": j.seed, "run_dir": j.run_dir} for j in jobs
        ],
    }
    sweep = Sweep(out, record, tuple(jobs))
    check_out_dir(sweep)
    return sweep


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(data, dict):
        return {prefix: data}
    flat: dict[str, Any] = {}
    for key, value in data.items():
        flat.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return flat


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two sweep records, as ``what: old -> new``.

    A config key only one record has is not a difference: a newer per-dqn added it with a
    default that keeps the old behaviour, and refusing would strand every sweep across upgrades.
    """
    diffs = [
        f"{key}: {old.get(key)} -> {new[key]}"
        for key in ("arms", "seeds", "envs")
        if old.get(key) != new[key]
    ]
    old_cfg, new_cfg = _flatten(old.get("resolved_config")), _flatten(new["resolved_config"])
    for key in sorted(set(old_cfg) & set(new_cfg)):
        if old_cfg[key] != new_cfg[key]:
            diffs.append(f"{key}: {old_cfg[key]} -> {new_cfg[key]}")
    return diffs


def check_out_dir(sweep: Sweep) -> None:
    """Refuses a sweep dir that holds anything but this same sweep.

    Raises:
        ValueError: ``out`` is a file, a non-empty dir without ``sweep.json``, a sweep with
            different parameters (the message lists them), or cannot be created or written
            (a file where a parent folder should be, a read-only filesystem).
    """
    out = sweep.out
    if out.exists() and not out.is_dir():
        raise ValueError(f"sweep dir {out} exists and is not a directory")
    m.check_writable(out, "sweep dir")
    if not m.is_nonempty_dir(out):
        return
    old = runs.read_sweep(out)
    if old is None:
        raise ValueError(
            f"sweep dir {out} exists, is not empty and holds no {SWEEP_FILE}; choose another --out"
        )
    diffs = _differences(old, sweep.record)
    if diffs:
        raise ValueError(
            f"sweep dir {out} holds a sweep with other parameters ({'; '.join(diffs)}); "
            "repeat its command to resume it, or choose another --out"
        )


def preflight(sweep: Sweep) -> None:
    """Builds (and closes) one trainer per env, so that an unusable env or device fails before
    anything is written, as ``per-dqn train`` does.

    Raises:
        ValueError: the message starts with the config and the key to blame (an allocation
            that fails included).
    """
    from per_dqn.plan import allocation_failure
    from per_dqn.run import Trainer

    seen = set()
    for job in sweep.jobs:
        if job.env_id in seen:
            continue
        seen.add(job.env_id)
        config = _job_config(job)
        try:
            Trainer(config, job.config_name).close()
        except ValueError as exc:
            raise ValueError(f"{sweep.record['config']}: {exc}") from None
        except (MemoryError, RuntimeError) as exc:  # a replay memory or network too large
            line = allocation_failure(exc, config)
            if line is None:
                raise
            raise ValueError(f"{sweep.record['config']}: {line}") from None


def _job_config(job: Job) -> Config:
    label = f"{job.run_dir}/config.yaml"
    return validate_config(parse_yaml(job.config_yaml, label), label)


# --- running --------------------------------------------------------------------------------------


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
    """What ``run_sweep`` did.

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


def _run_job(job: Job, out: Path, should_stop: Callable[[], bool] | None = None) -> Outcome:
    """Runs one job in this process, as ``per-dqn train --quiet`` would, holding its run dir's
    lock: a run with a usable checkpoint is resumed from it (``train --resume``), any other
    unfinished run dir is cleared and the run starts from zero.

    Raises:
        RunDirInUse: another process writes the run dir.
    """
    from per_dqn import checkpoint as ckpt
    from per_dqn.run import Trainer

    config = _job_config(job)
    run_dir = out / job.run_dir
    with m.lock_run_dir(run_dir):
        summary = runs.read_summary(run_dir)
        if summary is not None and summary.get("interrupted") is False:
            # Finished by another command since this sweep was planned.
            return Outcome(job, summary["final_eval_return_mean"], summary["wall_seconds"])
        trainer = Trainer(config, job.config_name)
        try:
            found = ckpt.find_latest(ckpt.checkpoints_dir(run_dir))
            # A final checkpoint without a finished summary (killed between the two writes) is
            # not continued: that would evaluate a second time and score the run differently
            # from one never stopped.
            resumed = found.path is not None and not found.manifest.get("final")
            if resumed:
                try:
                    trainer.load_checkpoint(found.path)
                except ckpt.CheckpointError:
                    resumed = False
                    trainer.close()  # it may hold part of the checkpoint
                    trainer = Trainer(config, job.config_name)
            if not resumed:
                _clear_run_dir(run_dir)
            summary = trainer.run(run_dir, should_stop=should_stop)
        finally:
            trainer.close()
    return Outcome(
        job,
        final_return=summary["final_eval_return_mean"],
        wall_seconds=summary["wall_seconds"],
        interrupted=summary["interrupted"],
    )


def _clear_run_dir(run_dir: Path) -> None:
    """Deletes what an unfinished run left (its events would mix with the redo), lock aside."""
    import shutil

    for path in run_dir.iterdir():
        if path.name == m.LOCK_FILE:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


# Set in a worker by its first SIGINT or SIGTERM during a run; the run polls it between env steps.
_STOP_REQUESTED = False
# The sweep's process: a worker whose parent changes has lost it (it was reparented).
_PARENT_PID: int | None = None
# linux/prctl.h: deliver a signal to this process when the thread that created it exits.
_PR_SET_PDEATHSIG = 1


def _request_stop(signum: int, frame: Any) -> None:
    """Asks the run in progress to stop at its next env step; later SIGINTs are ignored (a
    terminal's Ctrl-C reaches a worker directly and again through the parent).

    Nothing is raised here: an exception thrown from a signal handler lands wherever the main
    thread happens to be, which can be inside a library holding a lock (TensorBoard's event
    writer, a queue), and the worker could then hang instead of writing its summary.
    """
    global _STOP_REQUESTED
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _STOP_REQUESTED = True


def _parent_is_gone() -> bool:
    return _PARENT_PID is not None and os.getppid() != _PARENT_PID


def _stop_requested() -> bool:
    # The getppid poll is the fallback where PR_SET_PDEATHSIG is missing: ~1 us a call (timeit
    # on the 2-core dev VM), next to the ~2 ms of a CartPole env step with learning.
    return _STOP_REQUESTED or _parent_is_gone()


def _die_with_parent(parent_pid: int) -> None:
    """Has the kernel send this process SIGTERM when its parent dies, however it dies.

    Linux only (``prctl``); elsewhere ``_stop_requested`` polls the parent's pid instead. A parent
    that died before the call is caught by that poll too.
    """
    global _PARENT_PID
    _PARENT_PID = parent_pid
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _worker(out: Path, jobs: Any, results: Any, stop: Any, parent_pid: int | None = None) -> None:
    """A worker process: runs jobs from ``jobs`` until a ``None``, ``stop`` is set, or the sweep's
    process (``parent_pid``) is gone.

    SIGINT is ignored between runs (the parent decides when the sweep stops) and, during one,
    asks ``Trainer.run`` to stop at its next env step, which it ends with a checkpoint and an
    interrupted summary. SIGTERM (also what the kernel sends when the parent dies) always asks
    for that stop, and between runs ends the worker.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _request_stop)
    if parent_pid is not None:
        _die_with_parent(parent_pid)
    while True:
        try:
            # A timeout, so that a worker left without its parent between runs notices.
            job = jobs.get(timeout=0.5)
        except queue.Empty:
            if _stop_requested():
                results.cancel_join_thread()  # nobody may be left to read it
                return
            continue
        if job is None or stop.is_set() or _stop_requested():
            return
        signal.signal(signal.SIGINT, _request_stop)
        try:
            outcome = _run_job(job, out, _stop_requested)
        except KeyboardInterrupt:
            outcome = Outcome(job, interrupted=True)
        except Exception as exc:
            lines = traceback.format_exception_only(exc)
            outcome = Outcome(job, error=" ".join("".join(lines).split()))
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        if _parent_is_gone():
            results.cancel_join_thread()
        results.put(outcome)
        if outcome.interrupted:
            return


def lock_sweep_dir(sweep: Sweep) -> m.RunDirLock:
    """Creates the sweep dir and takes its lock, so that a second ``ablate`` on the same dir is
    refused while this one runs (each run dir is locked by its worker as well).

    Raises:
        RunDirError: another process holds it, or it cannot be created.
    """
    lock = m.lock_run_dir(sweep.out, what="sweep dir")
    assert lock is not None  # created when absent
    return lock


def run_sweep(
    sweep: Sweep, workers: int, on_outcome: Callable[[Outcome], None] | None = None
) -> SweepResult:
    """Writes ``sweep.json`` and runs the unfinished runs in worker processes, each resuming its
    run from its newest usable checkpoint when it has one.

    Args:
        sweep: from ``plan_sweep`` (whose checks this relies on).
        workers: processes at most (never more than there are runs to do).
        on_outcome: called in this process as each run ends.

    Returns:
        What ran; ``interrupted`` if Ctrl-C or SIGTERM stopped it (runs in progress checkpoint,
        keep an interrupted summary, and are resumed by the next call).
    """
    out = sweep.out
    out.mkdir(parents=True, exist_ok=True)
    if runs.read_sweep(out) is None:
        m.write_json(out / SWEEP_FILE, sweep.record)
    result = SweepResult()
    todo = []
    for job in sweep.jobs:
        if runs.is_finished(out / job.run_dir):
            result.skipped += 1
        else:
            todo.append(job)
    if not todo:
        return result

    ctx = mp.get_context("spawn")
    jobs, results, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
    # After Ctrl-C, jobs no worker took stay queued; exiting must not wait to flush them.
    jobs.cancel_join_thread()
    count = min(workers, len(todo))
    for job in todo:
        jobs.put(job)
    for _ in range(count):
        jobs.put(None)
    procs = [
        ctx.Process(target=_worker, args=(out, jobs, results, stop, os.getpid()))
        for _ in range(count)
    ]
    ended: set[str] = set()

    def record(outcome: Outcome) -> None:
        ended.add(outcome.job.run_dir)
        result.outcomes.append(outcome)
        if outcome.interrupted:
            result.interrupted = True
        if on_outcome is not None:
            on_outcome(outcome)

    try:
        for proc in procs:
            proc.start()
        while len(ended) < len(todo) and any(p.is_alive() for p in procs):
            try:
                record(results.get(timeout=0.5))
            except queue.Empty:
                pass
        # Results put just before a worker exited may still be in the pipe.
        while len(ended) < len(todo):
            try:
                record(results.get(timeout=0.5))
            except queue.Empty:
                break
    except KeyboardInterrupt:
        result.interrupted = True
        _stop_workers(procs, stop, results, record)
    finally:
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join()
        jobs.close()
        results.close()
    if not result.interrupted:
        for job in todo:
            if job.run_dir not in ended:  # a worker died (killed, out of memory) mid-run
                record(Outcome(job, error="its worker process died without a result"))
    return result


def _stop_workers(procs: list, stop: Any, results: Any, record: Callable) -> None:
    """After Ctrl-C: no new runs; runs in progress are interrupted and write their summaries."""
    stop.set()
    # A terminal's Ctrl-C already reached the workers (same process group); a SIGINT sent to
    # this process alone did not, so pass it on. Idle workers ignore it.
    for proc in procs:
        if proc.is_alive() and proc.pid is not None:
            try:
                os.kill(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    try:
        while any(p.is_alive() for p in procs) and time.monotonic() < deadline:
            try:
                record(results.get(timeout=0.2))
            except queue.Empty:
                pass
    except KeyboardInterrupt:
        pass  # a second Ctrl-C: stop waiting; the caller kills what is left
