"""``per-dqn ablate``: plan a sweep (arms x grid points x seeds), lock its dir, run what is not
finished on a backend (local worker processes or a Ray cluster), print each run's outcome and write
the report."""

from __future__ import annotations

import contextlib
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from per_dqn.cli.common import EXIT_WRITE_FAILED, ConfigOption, SetOption, fail, parse_sets, say
from per_dqn.config import ABLATE_DEFAULT_ARMS, REPLAY_KINDS, ConfigError
from per_dqn.sweeps.backends import BACKENDS
from per_dqn.training.stopping import EXIT_INTERRUPTED, EXIT_TERMINATED, StopSignals

if TYPE_CHECKING:
    from per_dqn.sweeps.backends import Backend as SweepBackend
    from per_dqn.sweeps.job import Outcome
    from per_dqn.sweeps.plan import Job, Sweep

app = typer.Typer()

Backend = StrEnum("Backend", {name: name for name in BACKENDS})  # where ``ablate`` runs its runs
ARMS_HELP = (
    f"Arms, comma-separated replay kinds ({', '.join(REPLAY_KINDS)}), each with its own settings "
    'if wanted: "rank:replay.alpha=0.7,replay.beta0=0.5". Repeatable. Default: '
    f"{', '.join(ABLATE_DEFAULT_ARMS)}."
)


@app.command(short_help="Run a paired multi-seed sweep of arms and grid values.")
def ablate(
    config: ConfigOption,
    replay: Annotated[
        list[str] | None,
        typer.Option(
            metavar="ARMS",
            help=ARMS_HELP,
        ),
    ] = None,
    grid: Annotated[
        list[str] | None,
        typer.Option(
            metavar="KEY=V1,V2",
            help="KEY=V1,V2,...: run every value of any config key, crossed with the arms and "
            "the other --grid keys. Repeatable.",
        ),
    ] = None,
    seeds: Annotated[
        str,
        typer.Option(
            help="Seeds, the same ones in every arm: a count N (0..N-1), a range A-B or a list "
            "A,B,C."
        ),
    ] = "10",
    steps: Annotated[
        int | None, typer.Option(help="Total env steps per run; overrides train.total_env_steps.")
    ] = None,
    workers: Annotated[
        int | None, typer.Option(help="Worker processes (default: one per CPU core).")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Sweep dir. Default: <runs_root>/ablate__<env>__<config>."),
    ] = None,
    set_: SetOption = None,
    backend: Annotated[
        Backend,
        typer.Option(
            help="local: worker processes on this machine; ray: Ray tasks on a cluster (the "
            "optional ray extra; the sweep dir must be on storage every node reaches)."
        ),
    ] = Backend.local,
    address: Annotated[
        str | None,
        typer.Option(
            help="--backend ray: the cluster, HOST:PORT or auto. Default: start a local "
            "single-node cluster of --workers CPUs."
        ),
    ] = None,
    pack: Annotated[
        int | None,
        typer.Option(
            help="Runs per process at most, trained in lock-step with one batched learner; "
            "each run's results are those it gives alone. Runs of other networks, batch sizes "
            "or envs go to other packs. Default 1."
        ),
    ] = None,
    cpus_per_run: Annotated[
        float | None,
        typer.Option(
            help="--backend ray: CPUs each Ray task holds; a task runs one pack (default 1)."
        ),
    ] = None,
    gpus_per_run: Annotated[
        float | None,
        typer.Option(
            help="--backend ray: GPUs each Ray task (one pack) holds; 0.25 puts 4 on a GPU."
        ),
    ] = None,
    dashboard: Annotated[
        bool,
        typer.Option(
            "--dashboard",
            help="--backend ray: start the local cluster with Ray's dashboard, on 127.0.0.1 "
            "(off by default: on a small machine its processes slow the runs).",
        ),
    ] = False,
    reuse: Annotated[
        list[Path] | None,
        typer.Option(
            metavar="DIR",
            help="Take each planned run that a finished run under DIR already is (the same "
            "config) from there instead of running it: copied whole into the sweep dir. "
            "Repeatable; a run dir the sweep has started is resumed, never replaced.",
        ),
    ] = None,
    retries: Annotated[
        int | None,
        typer.Option(
            help="--backend ray: retries of a run whose worker died, each resuming from its "
            "last checkpoint (default 3)."
        ),
    ] = None,
) -> None:
    """Run every arm x grid point x seed into DIR/<kind>/<settings>/s<seed>, then report.

    The <settings> level (an arm's settings and grid values, e.g. alpha=0.4,n=3) only where
    there are some. Unfinished runs are resumed; a re-run with more seeds, arms or grid values
    runs only what is new. `--set env.id=[A,B]` (or `--grid env.id=A,B`) sweeps several envs,
    into DIR/<env>/....
    Exit 1 if a run failed, 130 on Ctrl-C and 143 on SIGTERM (re-run the same command to resume).
    """
    overrides = parse_sets(set_)
    from per_dqn.sweeps import axes, backends
    from per_dqn.sweeps import plan as sweeps

    if pack is not None and pack < 1:
        fail([f"--pack must be >= 1, got {pack}"])
    options = backends.Options(
        workers, address, cpus_per_run, gpus_per_run, retries, pack, dashboard or None
    )
    try:
        runner = backends.create(backend.value, options)
    except backends.OptionError as exc:
        fail(exc.problems)
    except ValueError as exc:
        fail([str(exc)])
    try:
        sweep = sweeps.plan_sweep(
            config,
            axes.parse_arms(replay or [",".join(ABLATE_DEFAULT_ARMS)]),
            axes.parse_seeds(seeds),
            steps,
            overrides,
            out,
            axes.parse_grid(grid or []),
            reuse or (),
        )
        todo = sweep.pending()
        runner.check(sweep, todo)
    except ConfigError as exc:
        fail(exc.problems)
    except ValueError as exc:
        fail([str(exc)])
    created = sweeps.first_missing(sweep.out)
    try:
        lock = sweeps.lock_sweep_dir(sweep)
    except ValueError as exc:  # rundir.RunDirError: in use, or cannot be created
        fail([str(exc)])
    refused: Exception | None = None
    with lock, contextlib.ExitStack() as prepared:
        try:
            # Nothing to run needs no backend (no cluster is started for it).
            lines = prepared.enter_context(runner.prepare(sweep, todo)) if todo else []
        except (ValueError, backends.Interrupted) as exc:
            refused = exc
        else:
            for line in lines:
                typer.echo(line)
            _ablate_locked(sweep, todo, runner)
    if refused is not None:  # a refused sweep leaves no dir behind that it created
        if created is not None:
            sweeps.remove_created(sweep.out, created)
        code = getattr(refused, "exit_code", None)
        if code is not None:
            typer.echo(f"error: {refused}", err=True)
            raise typer.Exit(code)
        fail([str(refused)])


def _schedule_warnings(todo: list[Job]) -> None:
    """One line, before the sweep starts, for each budget of the runs to run that gives fewer
    than 2 evaluations (``TrainConfig.schedule_warning``): a report of them draws no curves."""
    from per_dqn.sweeps.job import job_config

    counts: dict[str, int] = {}
    for job in todo:
        warning = job_config(job).train.schedule_warning()
        if warning is not None:
            counts[warning] = counts.get(warning, 0) + 1
    for warning, count in counts.items():
        runs = "run" if count == 1 else "runs"
        typer.echo(f"warning: {count} {runs}: {warning}", err=True)


def _ablate_locked(sweep: Sweep, todo: list[Job], runner: SweepBackend) -> None:
    """``ablate`` once the sweep dir is locked and the backend prepared: runs the sweep, prints
    its progress, reports."""
    from per_dqn.cli.report import not_written, warning
    from per_dqn.sweeps import report as reports
    from per_dqn.sweeps.job import SweepResult
    from per_dqn.sweeps.plan import start_sweep

    _schedule_warnings(todo)  # once nothing can refuse the sweep any more
    total = len(sweep.jobs)
    taken = f"{len(sweep.reuse)} to take from --reuse, " if sweep.reuse else ""
    finished = total - len(todo) - len(sweep.reuse)
    say(f"sweep {sweep.out}: {total} runs, {finished} finished, {taken}{len(todo)} to run")
    if todo:  # on a line of its own, so that neither wraps at 80 columns
        say(f"  on {runner.describe(todo)}")
    done = [total - len(todo)]

    def show(outcome: Outcome) -> None:
        done[0] += outcome.final_return is not None
        status = (
            f"error: {outcome.error}" if outcome.error
            else "interrupted" if outcome.interrupted
            else f"final eval return {outcome.final_return:.1f} ({outcome.wall_seconds:.0f} s)"
        )  # fmt: skip
        say(f"[{done[0]}/{total}] {outcome.job.run_dir}: {status}")

    # Ctrl-C or SIGTERM (docker stop, Slurm, systemd) interrupt the backend's wait at once, even
    # where the sweep was started with SIGINT ignored (a background job of a non-interactive
    # shell inherits that), as `train` handles them too.
    stop = StopSignals(raise_first=True)
    try:
        with stop:
            if todo:
                result = runner.run(sweep, show)
            else:
                result = SweepResult(skipped=total - len(start_sweep(sweep)))
    except OSError as exc:  # the sweep's own record could not be written
        typer.echo(f"error: {exc.filename or sweep.out}: {exc.strerror or exc}", err=True)
        raise typer.Exit(EXIT_WRITE_FAILED) from None
    if result.interrupted:
        typer.echo(f"interrupted; re-run the same command to finish the sweep in {sweep.out}")
        raise typer.Exit(EXIT_TERMINATED if stop.terminated else EXIT_INTERRUPTED)
    reported = False
    try:
        files = reports.write_report(sweep.out, warn=warning)  # its warnings as `report`'s
        typer.echo("\n".join(files.lines()))
        reported = True
    except ValueError as exc:  # every run failed or cannot be read: nothing to report
        typer.echo(f"error: {exc}", err=True)
    except OSError as exc:  # a report file could not be written
        typer.echo(f"error: {not_written(exc, sweep.out)}", err=True)
    if result.failed:
        for outcome in result.failed:
            typer.echo(f"error: run {outcome.job.run_dir} failed: {outcome.error}", err=True)
        raise typer.Exit(1)
    if not reported:
        raise typer.Exit(1)
