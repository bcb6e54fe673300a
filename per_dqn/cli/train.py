"""``per-dqn train``: a new run, or ``--resume RUN_DIR`` to continue one; the run dir is locked
while it runs, and Ctrl-C, SIGTERM, a failed write or a diverged loss each end it with its own
exit code and one line saying what is left and how to resume."""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from per_dqn import api
from per_dqn.cli.common import (
    EXIT_DIVERGED,
    EXIT_WRITE_FAILED,
    Replay,
    SetOption,
    TrustCodeOption,
    fail,
    invoked_as,
    load_or_fail,
    parse_sets,
)
from per_dqn.config import Config, ConfigError, Override
from per_dqn.training.stopping import StopSignals

app = typer.Typer()


class Device(StrEnum):
    """Where the networks run (``run.device``)."""

    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Track(StrEnum):
    """Where a run's scalars go besides TensorBoard (``run.track``)."""

    none = "none"
    wandb = "wandb"


@app.command(short_help="Train an agent into a new run dir, or resume one.")
def train(
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            "-c",
            help="A shipped config name (cartpole.yaml) or a path to a YAML file.",
        ),
    ] = None,
    replay: Annotated[
        Replay | None, typer.Option(help="Replay memory; overrides replay.kind.")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="Seed; overrides run.seed.")] = None,
    steps: Annotated[
        int | None, typer.Option(help="Total env steps; overrides train.total_env_steps.")
    ] = None,
    run_dir: Annotated[
        Path | None,
        typer.Option(
            help="Exact output directory (must be absent or empty). "
            "Default: <runs_root>/<env>__<config>__<replay>__s<seed>__<time>.",
        ),
    ] = None,
    set_: SetOption = None,
    device: Annotated[
        Device | None, typer.Option(help="auto, cpu or cuda; overrides run.device.")
    ] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="No progress display (warnings still print).")
    ] = False,
    track: Annotated[
        Track | None,
        typer.Option(
            help="none, or wandb to send the scalars, config and summary to Weights & Biases too "
            "(the optional wandb extra); overrides run.track. With --resume: allows the tracker "
            "the run's config.yaml names (it must be that one), and nothing else."
        ),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            metavar="RUN_DIR",
            help="Continue the run in RUN_DIR from its newest checkpoint that passes its "
            "checksums, with RUN_DIR/config.yaml; of the settings, only --steps (to extend the "
            "run) may be added.",
        ),
    ] = None,
    trust_code: TrustCodeOption = False,
    actors: Annotated[
        int | None,
        typer.Option(
            help="An Ape-X run: this many actor processes on a Ray cluster (the optional ray "
            "extra) feed this process's learner; overrides run.actors.",
        ),
    ] = None,
    shards: Annotated[
        int | None,
        typer.Option(
            help="With --actors: the replay memory in this many Ray actor processes, each "
            "holding replay.capacity / N, fed by the actors and sampled ahead by the learner "
            "(at most --actors); default: in the learner's process; overrides run.shards.",
        ),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            help="With --actors (or run.actors), or --resume of a run with actors: the Ray "
            "cluster's HOST:PORT "
            "or auto; default: one started on 127.0.0.1 for the run, a CPU per actor and "
            "shard.",
        ),
    ] = None,
) -> None:
    """Train an agent; write config.yaml, TensorBoard events, checkpoints and summary.json to the
    run dir."""
    if resume is not None:
        given = {"--config": config, "--replay": replay, "--seed": seed, "--run-dir": run_dir,
                 "--set": set_, "--device": device, "--actors": actors,
                 "--shards": shards}  # fmt: skip
        _fail_if_given(given, "--resume: the resumed run's config is RUN_DIR/config.yaml")
        _resume(resume, steps, quiet, trust_code, track.value if track else None, address)
        return
    if config is None:
        fail(["--config is required (or --resume RUN_DIR to continue a run)"])
    if trust_code:
        fail(["--trust-code needs --resume (a --config file is your own and always trusted)"])
    overrides = parse_sets(set_)
    for path, value, flag in (
        ("replay.kind", replay.value if replay else None, "--replay"),
        ("run.seed", seed, "--seed"),
        ("train.total_env_steps", steps, "--steps"),
        ("run.device", device.value if device else None, "--device"),
        ("run.track", track.value if track else None, "--track"),
        ("run.actors", actors, "--actors"),
        ("run.shards", shards, "--shards"),
    ):
        if value is not None:
            overrides.append(Override(path, value, flag))
    cfg, name = load_or_fail(config, overrides)
    if address is not None and cfg.run.actors is None:  # --actors N, or run.actors in the config
        fail(["--address: the Ray cluster of a distributed run; it needs --actors N"])
    # The API loads torch, gymnasium and tensorboard (seconds) only once a trainer is built, so
    # bad input never waits for them.
    try:
        run_dir = api.new_run_dir(cfg, name, run_dir)
    except api.RunDirError as exc:
        fail([str(exc)])
    with _cluster(cfg, address) as make_loop:
        trainer = _build_trainer(cfg, name, config, make_loop)
        # Checked again under the lock: another command may have started in run_dir meanwhile.
        with _lock(run_dir, trainer, fresh=True):
            warning = cfg.train.schedule_warning()  # once nothing can refuse the run any more
            if warning is not None:
                typer.echo(f"warning: {warning}", err=True)
            if not quiet:  # where to look (TensorBoard, the files) before the run's first step
                typer.echo(f"run dir: {run_dir}", err=True)
            _run(trainer, run_dir, quiet)


@contextlib.contextmanager
def _cluster(cfg: Config, address: str | None) -> Iterator[Any]:
    """For a distributed run (``run.actors``), the Ray cluster it runs on, connected (exits 2
    with one line when it cannot be), yielding the trainer's ``make_loop``; else None."""
    if cfg.run.actors is None:
        yield None
        return
    with contextlib.ExitStack() as stack:
        try:
            make_loop = stack.enter_context(api.distributed_loop(cfg, address))
        except ValueError as exc:
            fail([str(exc)])
        yield make_loop


def _build_trainer(cfg: Config, name: str, label: str, make_loop: Any = None) -> Any:
    """The run's Trainer; exits 2 with one line when its env, device, replay memory or networks
    cannot be had (nothing is on disk yet)."""
    try:
        return api.build_trainer(cfg, name, make_loop)
    except ValueError as exc:
        fail([f"{label}: {exc}"])


def _fail_if_given(given: dict[str, object], why: str) -> None:
    """Exits 2 with one line per flag in ``given`` that was given (``--seed 0`` and ``--actors 0``
    too: a value that is 0 was still given)."""
    problems = [
        f"{flag} cannot be used with {why}"
        for flag, value in given.items()
        if value is not None and value != []
    ]
    if problems:
        fail(problems)


def _lock(run_dir: Path, trainer: Any, *, fresh: bool) -> Any:
    """``run_dir``'s writer lock (see ``api.lock_run_dir``); exits 2, closing ``trainer``, when
    another process holds it or the dir cannot be used."""
    try:
        lock = api.lock_run_dir(run_dir, fresh=fresh)
    except api.RunDirError as exc:
        trainer.close()
        fail([str(exc)])
    assert lock is not None  # created when absent
    return lock


def _resume_command(run_dir: Path) -> str:
    """The command that continues ``run_dir``, quoted for a shell."""
    return f"{invoked_as()} train --resume {shlex.quote(str(run_dir))}"


def _resume_hint(run_dir: Path, env_steps: int | None = None) -> str:
    """How to continue ``run_dir``, for the line printed when a run stops early; names the
    checkpoint's step when it is not ``env_steps``, where the run stopped."""
    saved = api.list_checkpoints(run_dir)
    if not saved:
        return "it has no checkpoint to resume from"
    command = f"resume with: {_resume_command(run_dir)}"
    at = int(saved[-1].name.removeprefix("step_"))
    return command if at == env_steps else f"{command} (from {saved[-1].name})"


def _run(trainer: Any, run_dir: Path, quiet: bool) -> None:
    """Runs ``trainer`` into ``run_dir``, closes it, prints the summary; exits 130 on Ctrl-C, 143
    on SIGTERM, 1 when a file cannot be written or a run with actors cannot go on, and 3 on a
    non-finite loss."""
    stop = StopSignals()
    try:
        with stop:
            result = api.run_trainer(trainer, run_dir, progress=not quiet, should_stop=stop)
    except api.TrackingError as exc:  # raised before the run wrote anything
        fail([str(exc)])
    except api.DivergedError as exc:
        saved = api.list_checkpoints(run_dir)
        kept = f"the last checkpoint, {saved[-1]}, is untouched" if saved else "no checkpoint"
        typer.echo(f"error: {exc}; stopped ({kept})", err=True)
        raise typer.Exit(EXIT_DIVERGED) from None
    except OSError as exc:
        saved = api.list_checkpoints(run_dir)
        then = (
            f"the last checkpoint, {saved[-1]}, is intact; once it can be written, resume with: "
            f"{_resume_command(run_dir)}"
            if saved
            else "no checkpoint to resume from"
        )
        typer.echo(
            f"error: {exc.filename or run_dir}: {exc.strerror or exc}; stopped ({then})", err=True
        )
        raise typer.Exit(EXIT_WRITE_FAILED) from None
    except api.RunStoppedError as exc:  # an actor, a shard or a block lost
        saved = api.list_checkpoints(run_dir)
        kept = f"the last checkpoint, {saved[-1]}, is untouched" if saved else "no checkpoint"
        typer.echo(f"error: {exc}; stopped ({kept})", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:  # a second signal, during the stop
        typer.echo(
            f"error: stopped again before the run was saved; {_resume_hint(run_dir)}", err=True
        )
        raise typer.Exit(stop.exit_code) from None
    finally:
        trainer.close()
    result.print_summary()
    summary = result.summary
    if summary["interrupted"]:
        typer.echo(
            f"stopped at env step {summary['env_steps']:,}; "
            f"{_resume_hint(run_dir, summary['env_steps'])}",
            err=True,
        )
        raise typer.Exit(stop.exit_code)


def _resume(
    run_dir: Path,
    steps: int | None,
    quiet: bool,
    trust_code: bool,
    track: str | None,
    address: str | None = None,
) -> None:
    """``train --resume``: continues ``run_dir`` from its newest checkpoint that passes its
    checksums (a damaged newer one is named in a warning and skipped)."""
    lock = None
    try:  # a name too long to exist fails every stat with a bare OSError
        api.check_name_lengths(run_dir)
    except api.RunDirError as exc:
        fail([str(exc)])
    if run_dir.is_dir():
        try:  # before reading anything: a run still writing here is refused at once
            lock = api.lock_run_dir(run_dir, create=False)
        except api.RunDirError as exc:
            fail([str(exc)])
    try:
        _resume_locked(run_dir, steps, quiet, lock, trust_code, track, address)
    finally:
        if lock is not None:
            lock.release()


def _resume_locked(
    run_dir: Path,
    steps: int | None,
    quiet: bool,
    lock: Any,
    trust_code: bool,
    track: str | None,
    address: str | None,
) -> None:
    """``_resume`` with the lock held, or with None when the run dir has no lock file yet."""

    def warn(line: str) -> None:
        typer.echo(f"warning: {line}", err=True)

    with contextlib.ExitStack() as cluster:

        def distributed(cfg: Any) -> Any:
            return cluster.enter_context(api.distributed_loop(cfg, address))

        try:
            resumption = api.prepare_resume(
                run_dir, steps, warn, trust_code=trust_code, track=track, distributed=distributed
            )
        except ConfigError as exc:
            fail(exc.problems)
        except ValueError as exc:  # CheckpointError and FormatError included
            fail([str(exc)])
        if address is not None and resumption.trainer.config.run.actors is None:
            resumption.trainer.close()
            fail([f"--address: {run_dir} is not a distributed run (its config has no run.actors)"])
        _resume_run(run_dir, resumption, quiet, lock)


def _resume_run(run_dir: Path, resumption: Any, quiet: bool, lock: Any) -> None:
    """Runs a loaded resumption under ``run_dir``'s lock (taken here where there was none)."""
    trainer = resumption.trainer
    if lock is None:  # a run dir from before per-dqn locked them
        lock = _lock(run_dir, trainer, fresh=False)
    total = trainer.config.train.total_env_steps
    typer.echo(
        f"resuming {run_dir} from {resumption.checkpoint.name} ({resumption.env_steps:,} of "
        f"{total:,} env steps)",
        err=True,
    )
    for note in resumption.notes:
        typer.echo(f"note: {note}", err=True)
    with lock:
        _run(trainer, run_dir, quiet)
