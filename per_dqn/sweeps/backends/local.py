"""The local backend: a sweep's runs in worker processes on this machine.

Each worker is a ``spawn``-ed process that runs packs of jobs one at a time through
``job.run_jobs`` (each job as ``per-dqn train --quiet --run-dir ...`` would run it, holding its
run dir's lock; ``--pack K`` puts up to K jobs in one pack, one job by default), torch on
``run.torch_threads`` threads (1 by default). Ctrl-C or SIGTERM interrupts the runs in progress
the way they interrupt ``per-dqn train`` (stop between two env steps, checkpoint, summary marked
``interrupted``) and starts no new run.

A sweep dies as a whole: a worker whose parent dies, even by SIGKILL, gets SIGTERM from the kernel
(``prctl(PR_SET_PDEATHSIG)`` on Linux; elsewhere it notices at its next env step that its parent
changed) and stops its run the same way, so no orphan keeps writing into a run dir that the next
``ablate`` resumes.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import queue
import signal
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from per_dqn.sweeps.axes import check_workers
from per_dqn.sweeps.backends import STOP_GRACE_SECONDS, Options
from per_dqn.sweeps.job import (
    Outcome,
    SweepResult,
    describe_packs,
    error_line,
    job_config,
    pack_jobs,
    pack_memory_refusal,
    preflight,
    run_jobs,
)
from per_dqn.sweeps.plan import Job, Sweep, start_sweep
from per_dqn.sweeps.progress import ProgressReporter, RunProgress, SweepProgress
from per_dqn.training.stopping import StopSignals

# The ``backends.Options`` fields this backend takes.
OPTIONS = frozenset({"workers", "pack"})


class LocalBackend:
    """``backends.Backend`` on worker processes of this machine.

    Args:
        workers: processes at most (None: one per CPU core); checked in ``check``.
    """

    def __init__(self, workers: int | None, pack: int | None = None) -> None:
        self.requested = workers
        self.workers = 1
        self.pack = pack or 1

    def check(self, sweep: Sweep, todo: Sequence[Job]) -> None:
        """Checks the worker count and, when there is something to run, that each pack's replay
        memories fit in RAM together (``job.pack_memory_refusal``) and builds one trainer per
        env here, where the runs will be (``job.preflight``)."""
        self.workers = check_workers(self.requested)
        if todo:
            # The packs' memories first: nothing is allocated for that check.
            for members in pack_jobs(todo, self.pack, sweep.out):
                refused = pack_memory_refusal(members) if len(members) > 1 else None
                if refused is not None:
                    raise ValueError(refused)
            preflight(sweep)

    def prepare(self, sweep: Sweep, todo: Sequence[Job]) -> AbstractContextManager[list[str]]:
        """Nothing to prepare: ``check`` did it all before the sweep dir was locked."""
        return nullcontext([])

    def describe(self, todo: Sequence[Job]) -> str:
        packs = pack_jobs(todo, self.pack)  # how many and how large: the order does not matter
        used = min(self.workers, len(packs))
        where = f"{used} worker{'s' * (used > 1)}"
        return where if self.pack == 1 else f"{where}, {describe_packs(packs)}"

    def run(self, sweep: Sweep, on_outcome: Callable[[Outcome], None] | None = None) -> SweepResult:
        """Runs the sweep with the runs done, running (steps, SPS, by pack) and pending shown on
        stderr; the live display ends before the caller writes the report."""
        with SweepProgress(len(sweep.jobs)) as progress:
            return run_sweep(sweep, self.workers, on_outcome, self.pack, progress)


def create(options: Options) -> LocalBackend:
    """The local backend from ``ablate``'s options."""
    return LocalBackend(options.workers, options.pack)


# The sweep's process: a worker whose parent changes has lost it (it was reparented).
_PARENT_PID: int | None = None
# linux/prctl.h: deliver a signal to this process when the thread that created it exits.
_PR_SET_PDEATHSIG = 1


def _parent_is_gone() -> bool:
    return _PARENT_PID is not None and os.getppid() != _PARENT_PID


def _die_with_parent(parent_pid: int) -> None:
    """Has the kernel send this process SIGTERM when its parent dies, however it dies.

    Linux only (``prctl``); elsewhere the worker's ``should_stop`` polls the parent's pid instead.
    A parent that died before the call is caught by that poll too.
    """
    global _PARENT_PID
    _PARENT_PID = parent_pid
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _queue_sender(progress: Any) -> Callable[[str, RunProgress], None]:
    """``ProgressReporter``'s ``send`` through a worker's progress queue."""

    def send(run_dir: str, run: RunProgress) -> None:
        progress.put((run_dir, run))

    return send


def _worker(
    out: Path,
    jobs: Any,
    results: Any,
    stop: Any,
    parent_pid: int | None = None,
    progress: Any = None,
) -> None:
    """A worker process: runs jobs from ``jobs`` until a ``None``, ``stop`` is set, or the sweep's
    process (``parent_pid``) is gone.

    SIGINT is ignored between runs (the parent decides when the sweep stops) and, during one,
    asks ``Trainer.run`` to stop at its next env step, which it ends with a checkpoint and an
    interrupted summary. SIGTERM (also what the kernel sends when the parent dies) always asks
    for that stop, and between runs ends the worker. Signals after the first are ignored (a
    terminal's Ctrl-C reaches a worker directly and again through the parent); none raises
    anything, since an exception thrown from a handler lands wherever the main thread is, which
    can be inside a library holding a lock (TensorBoard's event writer, a queue), and the worker
    could then hang instead of writing its summary.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with StopSignals((signal.SIGTERM,), raise_again=False) as signals:
        if parent_pid is not None:
            _die_with_parent(parent_pid)
        _take_jobs(out, jobs, results, stop, signals, progress)


def _take_jobs(
    out: Path, jobs: Any, results: Any, stop: Any, signals: StopSignals, progress: Any = None
) -> None:
    """``_worker``'s loop, with its stop signals handled."""
    if progress is not None:
        # Reports may be lost: a worker must never wait at exit to flush them to a parent gone.
        progress.cancel_join_thread()

    def should_stop() -> bool:
        # The getppid poll is the fallback where PR_SET_PDEATHSIG is missing: ~1 us a call
        # (timeit on the 2-core dev VM), next to the ~2 ms of a CartPole env step with learning.
        return signals.should_stop() or _parent_is_gone()

    while True:
        try:
            # A timeout, so that a worker left without its parent between runs notices.
            job = jobs.get(timeout=0.5)
        except queue.Empty:
            if should_stop():
                results.cancel_join_thread()  # nobody may be left to read it
                return
            continue
        if job is None or stop.is_set() or should_stop():
            return
        label, pack = job  # one pack (packs.run_pack) and its label; one job by default
        try:
            hooks = None
            if progress is not None:
                trains = [job_config(one).train for one in pack]
                send = _queue_sender(progress)
                hooks = [
                    (
                        ProgressReporter(
                            send, one.run_dir, train.total_env_steps, label,
                            train.learning_starts,
                        ),
                    )
                    for one, train in zip(pack, trains, strict=True)
                ]  # fmt: skip
            with signals.watching(signal.SIGINT):
                outcomes = run_jobs(pack, out, should_stop, hooks)
        except KeyboardInterrupt:
            outcomes = [Outcome(one, interrupted=True) for one in pack]
        except Exception as exc:
            outcomes = [Outcome(one, error=error_line(exc)) for one in pack]
        if _parent_is_gone():
            results.cancel_join_thread()
        for outcome in outcomes:
            results.put(outcome)
        if any(outcome.interrupted for outcome in outcomes):
            return


def run_sweep(
    sweep: Sweep,
    workers: int,
    on_outcome: Callable[[Outcome], None] | None = None,
    pack: int = 1,
    progress: SweepProgress | None = None,
) -> SweepResult:
    """Writes ``sweep.json`` and runs the unfinished runs in worker processes, each resuming its
    run from its newest usable checkpoint when it has one.

    Args:
        sweep: from ``plan.plan_sweep`` (whose checks this relies on).
        workers: processes at most (never more than there are packs to run).
        on_outcome: called in this process as each run ends.
        pack: runs per pack at most (``job.pack_jobs``): a worker runs a pack at a time.
        progress: the display to keep up to date (the workers report each run's steps and SPS
            at its log points), or None.

    Returns:
        What ran; ``interrupted`` if Ctrl-C or SIGTERM stopped it (runs in progress checkpoint,
        keep an interrupted summary, and are resumed by the next call).
    """
    out = sweep.out
    todo = start_sweep(sweep)
    result = SweepResult(skipped=len(sweep.jobs) - len(todo))
    if not todo:
        return result
    if progress is not None:
        progress.update(result.skipped, {})

    ctx = mp.get_context("spawn")
    jobs, results, stop = ctx.Queue(), ctx.Queue(), ctx.Event()
    reports = ctx.Queue() if progress is not None else None
    # After Ctrl-C, jobs no worker took stay queued; exiting must not wait to flush them.
    jobs.cancel_join_thread()
    packs = pack_jobs(todo, pack, out)  # those begun before first
    count = min(workers, len(packs))
    for i, members in enumerate(packs):
        jobs.put((f"pack {i + 1}/{len(packs)}" if pack > 1 else "", members))
    for _ in range(count):
        jobs.put(None)
    procs = [
        ctx.Process(target=_worker, args=(out, jobs, results, stop, os.getpid(), reports))
        for _ in range(count)
    ]
    ended: set[str] = set()
    running: dict[str, RunProgress] = {}

    def show() -> None:
        if progress is None or reports is None:
            return
        while True:
            try:
                run_dir, where = reports.get_nowait()
            except (queue.Empty, ValueError, OSError):  # none left, or the queue is closed
                break
            if run_dir not in ended:
                running[run_dir] = where
        progress.update(progress.done, running)

    def record(outcome: Outcome) -> None:
        # The run's reports sent before its result are shown first, not dropped with it: a
        # pack that ends within one wait of the loop would otherwise never show its steps.
        show()
        ended.add(outcome.job.run_dir)
        running.pop(outcome.job.run_dir, None)
        if progress is not None:
            # Done means finished, as on Ray: a run stopped or failed is redone by a re-run.
            progress.done += outcome.final_return is not None
            progress.update(progress.done, running)
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
            show()
        # Results put just before a worker exited may still be in the pipe.
        while len(ended) < len(todo):
            try:
                record(results.get(timeout=0.5))
            except queue.Empty:
                break
        show()
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
        if reports is not None:
            reports.close()
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
