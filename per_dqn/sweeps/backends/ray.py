"""Sweeps on a Ray cluster: the runs ``ablate`` plans, each a Ray task holding its resources.

``per-dqn ablate ... --backend ray`` runs the same plan as the local backend (``plan.plan_sweep``:
the pairing, the run dirs, the record) through the same ``job.run_jobs`` as a local worker, so
skipping finished runs, resuming from checkpoints and ``report`` are one code path, and a run on
CPU gives the same summary and ``model.pt`` under either backend. Only where a run executes
changes: a task on any node of the cluster, with ``--cpus-per-run`` CPUs and ``--gpus-per-run``
GPUs (fractions share one GPU among small runs). A task runs one pack of runs (``--pack K``, up
to K runs trained together; one run by default), and those resources are the pack's.

Where the cluster comes from:

- ``--address HOST:PORT`` or ``auto``: an existing cluster (``ray start --head`` on one node,
  ``ray start --address HEAD:PORT`` on the others; ``auto`` finds the one started on this node).
- none: a single-node cluster of ``--workers`` CPUs (default: one per core), started for this
  sweep and shut down after it, kept on loopback: Ray puts a node on the host's interface address
  even when asked for 127.0.0.1 (measured with ray 2.60), unless
  ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, which makes it a one-node, loopback-only cluster.

Storage: a run dir is written by whichever node runs it, so the sweep dir must be on storage every
node reaches (a shared filesystem path, today). ``Cluster.check_storage`` proves it before any run
starts: the driver writes a marker file into the sweep dir and a task on every alive node reads it
back; a node that cannot is one line naming it, and the sweep is refused.

Faults: a task whose worker process dies (SIGKILL, out of memory, a node leaving) is retried by
Ray up to ``--retries`` times; the retry's ``run_jobs`` resumes from the run's newest usable
checkpoint, as a re-run of the sweep would (the dead worker's run dir lock went with it). A run that
fails on its own terms (a bad config, the loss turning NaN) returns an ``Outcome`` with its error
instead of raising, so it is never retried, and is reported as on the local backend.

Ctrl-C or SIGTERM on the driver creates the stop file ``DIR/.ray-stop``; every task polls it (a
``stat`` every half second, as cheap as the local workers' signal flag) and stops its run the way
Ctrl-C stops ``per-dqn train``: between two env steps, with a checkpoint and an interrupted summary.
The same command then resumes the sweep. Since the tasks see the sweep dir (the storage check
proved it), the file reaches every node with no channel of its own. Ctrl-C or SIGTERM while the
cluster starts or is checked, before any run, shuts down what was started and ends the command
with one line (``RayBackend.prepare``).

The options' checks, Ray's import and the cluster's shutdown with its orphans are
``per_dqn.cluster``'s. One module though past 500 lines: the driver's side (the cluster's
lifecycle, the storage check, the stop file, the display's poll) and the tasks' side (``_run_task``,
``_StopFile``, the board) are two halves of one protocol, and each half is read against the other.
"""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from per_dqn.cluster.connection import Connection, connect
from per_dqn.cluster.housekeeping import (
    DEFAULT_RETRIES,
    RayOptions,
    check_options,
)
from per_dqn.rundir import provenance, readback
from per_dqn.sweeps.backends import STOP_GRACE_SECONDS, Interrupted, Options
from per_dqn.sweeps.job import (
    Outcome,
    SweepResult,
    describe_packs,
    error_line,
    job_config,
    pack_jobs,
    preflight,
    run_jobs,
)
from per_dqn.sweeps.plan import Job, Sweep, start_sweep
from per_dqn.sweeps.progress import ProgressReporter, RunProgress, SweepProgress
from per_dqn.training.stopping import EXIT_INTERRUPTED, EXIT_TERMINATED, StopSignals

# The file whose presence asks every task of the sweep to stop its run (Ctrl-C on the driver).
STOP_FILE = ".ray-stop"
# How often a task looks for the stop file, in seconds.
STOP_POLL_SECONDS = 0.5
# How long the storage check waits for its tasks (a busy cluster still runs a 0-CPU task soon).
STORAGE_CHECK_SECONDS = 120.0


class StorageError(ValueError):
    """The Ray workers cannot see the sweep dir."""


class Cluster(Connection):
    """A connected Ray cluster, as ``connect`` yields it to a sweep: a ``Connection`` that
    checks a sweep's storage and runs its packs as tasks."""

    def check_storage(self, out: Path) -> None:
        """Proves that every alive node sees ``out``: writes a marker with a fresh token there and
        has one task per node read it back. The marker is removed either way.

        Raises:
            StorageError: one line naming the node that could not read the marker.
        """
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self.ray
        token = uuid.uuid4().hex
        marker = out / f".ray-storage-check-{token}"
        marker.write_text(token, encoding="utf-8")
        try:
            read = ray.remote(num_cpus=0, max_retries=0)(_read_marker)
            refs = {
                read.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
                ).remote(str(marker)): n["NodeManagerAddress"]
                for n in ray.nodes()
                if n.get("Alive")
            }
            done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=STORAGE_CHECK_SECONDS)
            for ref, node in refs.items():
                seen = ray.get(ref) if ref in done else "(no answer)"
                if seen != token:
                    raise StorageError(
                        f"sweep dir {out}: the Ray workers on node {node} cannot read it (a "
                        f"marker written there read back as {seen!r}); put --out on storage "
                        "every node reaches, such as a shared filesystem"
                    )
        finally:
            marker.unlink(missing_ok=True)

    def preflight(self, sweep: Sweep) -> None:
        """``job.preflight`` as one Ray task holding a run's resources: the envs, the device
        and the memory are checked where the runs will be, not on the driver (a CPU-only driver
        may send runs to GPU nodes).

        Raises:
            ValueError: one line, naming the node, the config and the key to blame.
        """
        check = self.ray.remote(_preflight).options(
            num_cpus=self.options.cpus_per_run,
            num_gpus=self.options.gpus_per_run,
            max_retries=0,
        )
        line = self.ray.get(check.remote(sweep))
        if line is not None:
            raise ValueError(line)

    def run_sweep(
        self,
        sweep: Sweep,
        on_outcome: Callable[[Outcome], None] | None = None,
        progress: SweepProgress | None = None,
    ) -> SweepResult:
        """Writes ``sweep.json`` and runs the unfinished runs as Ray tasks, as
        ``local.run_sweep`` runs them in worker processes.

        Args:
            sweep: from ``plan.plan_sweep``, with the storage checked (``check_storage``).
            on_outcome: called in this process as each run ends.
            progress: shown the runs done, running (with each one's steps and SPS, which the
                tasks report through a Ray actor at every log point) and pending.

        Returns:
            What ran; ``interrupted`` if Ctrl-C or SIGTERM stopped it (the runs in progress
            checkpoint and keep an interrupted summary; the next call resumes them).
        """
        ray = self.ray
        out = sweep.out
        stop_file = out / STOP_FILE
        # A stop file left by a driver that was killed would stop every run at once.
        stop_file.unlink(missing_ok=True)
        todo = start_sweep(sweep)
        result = SweepResult(skipped=len(sweep.jobs) - len(todo))
        if not todo:
            return result
        done = len(sweep.jobs) - len(todo)
        # Holds no CPU, so it never takes a run's place; it lives as long as this driver.
        board = ray.remote(num_cpus=0)(_Board).remote()
        task = ray.remote(_run_task).options(
            num_cpus=self.options.cpus_per_run,
            num_gpus=self.options.gpus_per_run,
            max_retries=self.options.retries,
            # A run's own failure comes back as an Outcome, never as an exception: not retried.
            retry_exceptions=False,
        )
        argv = provenance.redact_argv(sys.argv)  # a secret never travels to the cluster
        # One task per pack (``--pack``; a pack of one job by default).
        pending = {
            task.remote(members, str(out), str(stop_file), argv, board): members
            for members in pack_jobs(todo, self.options.pack, out)  # those begun before first
        }
        shown = Shown(board, progress, done)

        def collect(timeout: float) -> None:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=timeout)
            for ref in ready:
                members = pending.pop(ref)
                for outcome in self._outcomes(ref, members):
                    result.outcomes.append(outcome)
                    result.interrupted |= outcome.interrupted
                    shown.done += outcome.final_return is not None
                    if on_outcome is not None:
                        on_outcome(outcome)
            shown.refresh(ray, {job.run_dir for members in pending.values() for job in members})

        try:
            while pending:
                collect(0.5)
        except KeyboardInterrupt:
            result.interrupted = True
            stop_file.touch()
            deadline = time.monotonic() + STOP_GRACE_SECONDS
            try:
                while pending and time.monotonic() < deadline:
                    collect(0.2)
            except KeyboardInterrupt:
                pass  # a second Ctrl-C: stop waiting
            for ref in pending:
                ray.cancel(ref, force=True)
        finally:
            stop_file.unlink(missing_ok=True)
            ray.kill(board)
        return result

    def _outcomes(self, ref: Any, members: list[Job]) -> list[Outcome]:
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            # The worker died more often than --retries allows, or the task was cancelled.
            error = (
                f"its Ray task failed after {self.options.retries} retries: "
                + error_line(exc).splitlines()[0][:500]
            )
            return [Outcome(job, error=error) for job in members]


# How often the driver asks the board where the running runs are, in seconds.
BOARD_POLL_SECONDS = 1.0


class Shown:
    """The driver's side of the progress display: asks the board where the running runs are
    (every ``BOARD_POLL_SECONDS``) and passes it on with the count of finished runs.

    Attributes:
        done: runs finished, those finished before this command included.
    """

    def __init__(self, board: Any, progress: SweepProgress | None, done: int) -> None:
        self.board, self.progress, self.done = board, progress, done
        self.next_poll = 0.0
        self.running: dict[str, RunProgress] = {}

    def refresh(self, ray: Any, unfinished: set[str]) -> None:
        """Updates the display; ``unfinished``: the run dirs whose tasks have not returned."""
        if self.progress is None:
            return
        now = time.monotonic()
        if now >= self.next_poll:
            self.next_poll = now + BOARD_POLL_SECONDS
            try:
                self.running = ray.get(self.board.snapshot.remote(), timeout=BOARD_POLL_SECONDS)
            except (ray.exceptions.RayError, TimeoutError):
                pass  # the display waits for the next poll; the sweep does not depend on it
        # A run whose task has returned is no longer running, whatever the board last heard.
        running = {k: v for k, v in self.running.items() if k in unfinished}
        self.progress.update(self.done, running)


# The ``backends.Options`` fields this backend takes.
OPTIONS = frozenset(
    {"workers", "address", "cpus_per_run", "gpus_per_run", "retries", "pack", "dashboard"}
)


def create(options: Options) -> RayBackend:
    """The Ray backend from ``ablate``'s options, checked (``check_options``).

    Raises:
        ValueError: one line naming a bad option and its value, or ``MISSING_RAY``.
    """
    return RayBackend(
        check_options(
            RayOptions(
                address=options.address,
                cpus_per_run=1.0 if options.cpus_per_run is None else options.cpus_per_run,
                gpus_per_run=0.0 if options.gpus_per_run is None else options.gpus_per_run,
                retries=DEFAULT_RETRIES if options.retries is None else options.retries,
                local_cpus=options.workers,
                pack=options.pack or 1,
                dashboard=bool(options.dashboard),
            )
        )
    )


class RayBackend:
    """``backends.Backend`` on a Ray cluster: ``prepare`` connects (or starts a local cluster),
    checks that the workers see the sweep dir and that a worker can build each env's trainer;
    ``run`` runs the sweep with a live display of the runs in progress.

    Args:
        options: from ``check_options``.
    """

    def __init__(self, options: RayOptions) -> None:
        self.options = options
        self.cluster: Cluster | None = None
        self.todo: Sequence[Job] = ()

    def check(self, sweep: Sweep, todo: Sequence[Job]) -> None:
        """Nothing to check on the driver: the envs and the device are checked on a worker, where
        the runs will be (a CPU-only driver may send runs to GPU nodes), in ``prepare``."""

    @contextlib.contextmanager
    def prepare(self, sweep: Sweep, todo: Sequence[Job]) -> Iterator[list[str]]:
        """Connects to the cluster (or starts a local one), checks the storage and preflights;
        disconnects (shutting a local cluster down) on the way out.

        Until it is ready, Ctrl-C or SIGTERM end the command with one line, leaving no cluster it
        started: they raise ``KeyboardInterrupt`` at once (``connect`` keeps that handler in place
        of Ray's own, which exits at once, code 15), and everything started is shut down before
        ``Interrupted`` is raised.

        Yields:
            The line to print: where the cluster is, its nodes, CPUs and dashboard.

        Raises:
            ValueError: no cluster, it cannot see the sweep dir, or a run cannot start on it.
            Interrupted: Ctrl-C or SIGTERM came first.
        """
        with contextlib.ExitStack() as connected:
            stop = StopSignals(raise_first=True)
            try:
                with stop:
                    cluster = connected.enter_context(connect(self.options, Cluster))
                    cluster.check_storage(sweep.out)
                    cluster.preflight(sweep)
            except KeyboardInterrupt:
                connected.close()  # the local cluster, if it was started, goes now
                code = EXIT_TERMINATED if stop.terminated else EXIT_INTERRUPTED
                raise Interrupted(
                    "interrupted while connecting to Ray, before any run started",
                    code if stop.received else None,  # None: not a signal of ours
                ) from None
            self.cluster, self.todo = cluster, todo
            try:
                yield [f"ray: {cluster.describe()}"]
            finally:
                self.cluster = None

    def describe(self, todo: Sequence[Job]) -> str:
        if self.options.pack == 1:
            return "Ray"
        return f"Ray, {describe_packs(pack_jobs(todo, self.options.pack))}"

    def run(self, sweep: Sweep, on_outcome: Callable[[Outcome], None] | None = None) -> SweepResult:
        """Runs the sweep on the prepared cluster, with the runs done, running (steps, SPS) and
        pending shown on stderr; the live display ends before the caller writes the report."""
        assert self.cluster is not None, "run() needs prepare()"
        finished = len(sweep.jobs) - len(self.todo)
        with SweepProgress(len(sweep.jobs), finished, self.cluster.dashboard_url) as progress:
            return self.cluster.run_sweep(sweep, on_outcome, progress)


# --- in a Ray worker ------------------------------------------------------------------------------


def _read_marker(path: str) -> str | None:
    """The storage check's task: the marker's text, or None where this node cannot read it."""
    try:  # a FIFO planted in its place must not block the task (``readback``)
        return readback.read_text(Path(path).parent, Path(path).name, readback.KINDS["text"])
    except readback.ReadBackError:
        return None


def _preflight(sweep: Sweep) -> str | None:
    """The preflight's task: None when every env's trainer builds on this node, else one line."""
    import ray

    try:
        preflight(sweep)
    except ValueError as exc:
        return f"on Ray node {ray.util.get_node_ip_address()}: {exc}"
    except Exception as exc:  # what the driver's own preflight would let through, as one line
        return f"on Ray node {ray.util.get_node_ip_address()}: {error_line(exc)}"
    return None


class _StopFile:
    """``should_stop`` for a run in a task: true once the driver has created the stop file.

    Called every env step; it looks at the file every ``STOP_POLL_SECONDS`` only (one
    ``time.monotonic()`` otherwise).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.next_look = 0.0
        self.seen = False

    def __call__(self) -> bool:
        if not self.seen:
            now = time.monotonic()
            if now >= self.next_look:
                self.next_look = now + STOP_POLL_SECONDS
                self.seen = self.path.exists()
        return self.seen


class _Board:
    """A Ray actor: where each running run of the sweep is, as its task last reported it."""

    def __init__(self) -> None:
        self.runs: dict[str, RunProgress] = {}

    def report(self, run_dir: str, progress: RunProgress) -> None:
        self.runs[run_dir] = progress

    def snapshot(self) -> dict[str, RunProgress]:
        return dict(self.runs)


def _where_this_runs() -> dict[str, Any]:
    """The Ray node this task runs on, for its run's provenance: ``node_ip`` and ``node_id`` as
    ``ray.nodes()`` names it (``NodeManagerAddress``, ``NodeID``), and ``attempt``, 0 on the
    task's first try and counting its retries after a worker died (None where Ray does not say).
    """
    import ray

    try:
        # Not in Ray's public API (ray 2.60): the core worker's count, which Ray's task events use.
        attempt = ray._private.worker.global_worker.core_worker.get_current_task_attempt_number()
    except Exception:
        attempt = None
    return {
        "node_ip": ray.util.get_node_ip_address(),
        "node_id": ray.get_runtime_context().get_node_id(),
        "attempt": attempt,
    }


def _run_task(
    members: list[Job], out: str, stop_file: str, argv: list[str], board: Any
) -> list[Outcome]:
    """One pack of runs in a Ray worker, exactly as a local worker runs it (``job.run_jobs``):
    each resumed from its newest usable checkpoint, stopped by the stop file, reporting its
    progress to ``board`` (a ``_Board`` actor). A run's own failure is returned, not raised, so
    that Ray does not retry it.

    ``argv`` is the driver's command line: the run's provenance records the ``per-dqn ablate``
    command that asked for it, as a local worker's does, not the Ray worker's own; its ``ray``
    field says where the run ran (``_where_this_runs``).
    """
    stop = _StopFile(Path(stop_file))
    if stop():
        return [Outcome(job, interrupted=True) for job in members]
    own_argv, sys.argv = sys.argv, list(argv)
    try:
        trains = [job_config(job).train for job in members]
        reporters = [
            (
                ProgressReporter(
                    board.report.remote, job.run_dir, train.total_env_steps,
                    learning_starts=train.learning_starts,
                ),
            )
            for job, train in zip(members, trains, strict=True)
        ]  # fmt: skip
        with provenance.recorded(ray=_where_this_runs()):
            return run_jobs(members, Path(out), stop, callbacks=reporters)
    except Exception as exc:
        return [Outcome(job, error=error_line(exc)) for job in members]
    finally:
        sys.argv = own_argv
