"""The ``per-dqn`` command line: parse, load the config, call into the package, map errors to exits.

Exit codes: 0 done; 2 bad input (a bad option value, an unknown or missing option, config file,
``--set``, unusable env or device, a replay memory or networks that cannot be allocated, a run dir
that is not empty, cannot be created or written, or is in use by another per-dqn process), one
``error: ...`` line per problem on stderr and nothing created on disk; 130 stopped by Ctrl-C
(SIGINT) and 143 by SIGTERM (``docker stop``, Slurm, systemd): the run stops between two env steps,
checkpoints, marks its summary ``interrupted`` and prints the command that resumes it; 1 a file
could not be written (disk full, read-only filesystem, I/O error: one line naming it; the
checkpoints written before it are intact, so ``train --resume`` finishes the run once the cause is
gone), or (``ablate``) a run failed; 3 the loss became NaN or infinite, or the weights diverged (the
run stops; its last checkpoint is left as it was).
"""

from __future__ import annotations

import contextlib
import shlex
import sys
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from typer.core import TyperGroup

try:  # typer vendors click from 0.20 on
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - an older typer on a separate click
    from click.exceptions import ClickException, NoArgsIsHelpError, UsageError

from per_dqn import __version__
from per_dqn.config import (
    Config,
    ConfigError,
    Override,
    load_config,
    parse_override,
    resolve_config_path,
)
from per_dqn.memory import KINDS
from per_dqn.stopping import EXIT_INTERRUPTED, EXIT_TERMINATED, StopSignals
from per_dqn.sweeps.backends import BACKENDS

if TYPE_CHECKING:
    from per_dqn.run import Trainer
    from per_dqn.rundir import RunDirLock
    from per_dqn.sweeps.backends import Backend as SweepBackend
    from per_dqn.sweeps.job import Outcome
    from per_dqn.sweeps.plan import Job, Sweep

EXIT_WRITE_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 3


class _OneLineErrors(TyperGroup):
    """The command group, with click's usage errors (a bad choice, an unknown or missing option)
    as one plain ``error: ...`` line and exit 2, the style of every other bad input.

    Typer would draw them in a boxed rich panel (plain click: three lines). Overriding ``main``
    covers both ways in: the console script (``Typer.__call__``) and ``CliRunner``, which calls
    the click command's ``main`` directly.
    """

    def main(self, args: Any = None, prog_name: Any = None, complete_var: Any = None,
             standalone_mode: bool = True, **extra: Any) -> Any:  # fmt: skip
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except NoArgsIsHelpError as exc:  # a bare group (`per-dqn`, `per-dqn config`): its help
            typer.echo(exc.format_message(), err=True)
            sys.exit(EXIT_BAD_INPUT)
        except UsageError as exc:
            sys.exit(_usage_error(exc, sys.argv[1:] if args is None else list(args)))
        except ClickException as exc:
            typer.echo(f"error: {_one_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:  # end of input at a prompt; per-dqn prompts for nothing today
            typer.echo("error: aborted", err=True)
            sys.exit(1)
        # Without standalone mode a command's `typer.Exit(code)` comes back as its code; our
        # commands return nothing otherwise.
        sys.exit(code if isinstance(code, int) else 0)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _usage_error(exc: UsageError, args: list[str]) -> int:
    """Prints a click ``UsageError`` as one line naming the option and the value given, with the
    command whose ``--help`` explains it."""
    message = _lower_first(_one_line(exc.format_message()).rstrip("."))
    param = getattr(exc, "param", None)
    if param is not None and getattr(exc, "message", None):
        # `BadParameter`: click's reason may not echo the value (typer: "Input should be a valid
        # integer, ..."); the value is found where it was given.
        reason = _lower_first(_one_line(exc.message).removeprefix("Value error, ").rstrip("."))
        hint = " / ".join(repr(opt) for opt in param.opts) if param.opts else repr(param.name)
        value = _given_value(args, param.opts)
        shown = "" if value is None or repr(value) in reason else f"{value!r}: "
        message = f"invalid value for {hint}: {shown}{reason}"
    where = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
    typer.echo(f"error: {message}{where}", err=True)
    return EXIT_BAD_INPUT


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _given_value(args: list[str], opts: list[str]) -> str | None:
    """The value given to an option among ``opts`` (its last use), as typed; None if not found."""
    value = None
    for i, arg in enumerate(args):
        for opt in opts:
            if arg == opt and i + 1 < len(args):
                value = args[i + 1]
            elif opt.startswith("--") and arg.startswith(opt + "="):
                value = arg[len(opt) + 1 :]
    return value


app = typer.Typer(
    name="per-dqn",
    help="Double/Dueling DQN with Prioritized Experience Replay.",
    no_args_is_help=True,
    add_completion=False,
    cls=_OneLineErrors,
)
config_app = typer.Typer(help="Show or check experiment configs.", no_args_is_help=True)
app.add_typer(config_app, name="config")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"per-dqn {__version__}")
        raise typer.Exit()


@app.callback()
def _main_options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Double/Dueling DQN with Prioritized Experience Replay."""


Replay = StrEnum("Replay", {kind: kind for kind in KINDS})  # replay.kind


class VideoView(StrEnum):
    """What ``eval --video`` films."""

    game = "game"
    agent = "agent"


Backend = StrEnum("Backend", {name: name for name in BACKENDS})  # where ``ablate`` runs its runs


class Device(StrEnum):
    """Where the networks run (``run.device``)."""

    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Track(StrEnum):
    """Where a run's scalars go besides TensorBoard (``run.track``)."""

    none = "none"
    wandb = "wandb"


SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="SECTION.KEY=VALUE",
        help="Override one config value (YAML-typed, validated like the file). Repeatable.",
    ),
]


def _fail(problems: list[str]) -> NoReturn:
    for problem in problems:
        typer.echo(f"error: {problem}", err=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def _load(name_or_path: str, overrides: list[Override]) -> tuple[Config, str]:
    """The validated config and its name (file stem); exits 2 on any problem."""
    try:
        path = resolve_config_path(name_or_path)
        return load_config(path, overrides, display_name=name_or_path), path.stem
    except ConfigError as exc:
        _fail(exc.problems)


def _parse_sets(sets: list[str] | None) -> list[Override]:
    problems, overrides = [], []
    for text in sets or []:
        try:
            overrides.append(parse_override(text))
        except ConfigError as exc:
            problems += exc.problems
    if problems:
        _fail(problems)
    return overrides


@app.command()
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
            "(the optional wandb extra); overrides run.track."
        ),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            metavar="RUN_DIR",
            help="Continue the run in RUN_DIR from its newest checkpoint that passes its "
            "checksums, with RUN_DIR/config.yaml; only --steps (to extend the run) may be added.",
        ),
    ] = None,
) -> None:
    """Train an agent; write config.yaml, TensorBoard events, checkpoints and summary.json to the
    run dir."""
    if resume is not None:
        given = {"--config": config, "--replay": replay, "--seed": seed, "--run-dir": run_dir,
                 "--set": set_, "--device": device, "--track": track}  # fmt: skip
        _fail_if_given(given, "--resume: the resumed run's config is RUN_DIR/config.yaml")
        _resume(resume, steps, quiet)
        return
    if config is None:
        _fail(["--config is required (or --resume RUN_DIR to continue a run)"])
    overrides = _parse_sets(set_)
    for path, value, flag in (
        ("replay.kind", replay.value if replay else None, "--replay"),
        ("run.seed", seed, "--seed"),
        ("train.total_env_steps", steps, "--steps"),
        ("run.device", device.value if device else None, "--device"),
        ("run.track", track.value if track else None, "--track"),
    ):
        if value is not None:
            overrides.append(Override(path, value, flag))
    cfg, name = _load(config, overrides)

    # Imported only now: torch, gymnasium and tensorboard take seconds, and bad input must not
    # wait for them.
    from per_dqn import rundir

    if run_dir is None:
        run_name = rundir.default_run_name(
            cfg.env.id, name, cfg.replay.kind, cfg.run.seed, datetime.now()
        )
        run_dir = rundir.fresh_run_dir(Path(cfg.run.runs_root), run_name)
    try:
        rundir.check_run_dir(run_dir)
    except rundir.RunDirError as exc:
        _fail([str(exc)])
    trainer = _build_trainer(cfg, name, config)
    # Checked again under the lock: another command may have started in run_dir meanwhile.
    with _lock(run_dir, trainer, fresh=True):
        _run(trainer, run_dir, quiet)


def _build_trainer(cfg: Config, name: str, label: str) -> Trainer:
    """The run's Trainer; exits 2 with one line when its env, device, replay memory or networks
    cannot be had (nothing is on disk yet)."""
    from per_dqn import api

    try:
        return api.build_trainer(cfg, name)
    except ValueError as exc:
        _fail([f"{label}: {exc}"])


def _fail_if_given(given: dict[str, object], why: str) -> None:
    """Exits 2 with one line per flag in ``given`` that has a value."""
    problems = [f"{flag} cannot be used with {why}" for flag, value in given.items() if value]
    if problems:
        _fail(problems)


def _lock(run_dir: Path, trainer: Trainer, *, fresh: bool) -> RunDirLock:
    """``run_dir``'s writer lock (see ``rundir.RunDirLock``); exits 2, closing ``trainer``, when
    another process holds it or the dir cannot be used."""
    from per_dqn import rundir

    try:
        lock = rundir.lock_run_dir(run_dir, fresh=fresh)
    except rundir.RunDirError as exc:
        trainer.close()
        _fail([str(exc)])
    assert lock is not None  # created when absent
    return lock


def _resume_command(run_dir: Path) -> str:
    """The command that continues ``run_dir``, quoted for a shell."""
    return f"per-dqn train --resume {shlex.quote(str(run_dir))}"


def _resume_hint(run_dir: Path, env_steps: int | None = None) -> str:
    """How to continue ``run_dir``, for the line printed when a run stops early; names the
    checkpoint's step when it is not ``env_steps``, where the run stopped."""
    from per_dqn import checkpoint as ckpt

    saved = ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))
    if not saved:
        return "it has no checkpoint to resume from"
    command = f"resume with: {_resume_command(run_dir)}"
    at = int(saved[-1].name.removeprefix("step_"))
    return command if at == env_steps else f"{command} (from {saved[-1].name})"


def _run(trainer: Trainer, run_dir: Path, quiet: bool) -> None:
    """Runs ``trainer`` into ``run_dir``, closes it, prints the summary; exits 130 on Ctrl-C, 143
    on SIGTERM, 1 when a file cannot be written and 3 on a non-finite loss."""
    from per_dqn import console
    from per_dqn.checkpoint import checkpoints_dir, list_checkpoints
    from per_dqn.loop import DivergedError
    from per_dqn.tracking import TrackingError

    stop = StopSignals()
    try:
        total = trainer.config.train.total_env_steps
        with stop, console.ConsoleProgress(total, enabled=not quiet) as progress:
            summary = trainer.run(run_dir, progress, should_stop=stop)
    except TrackingError as exc:  # raised before the run wrote anything
        _fail([str(exc)])
    except DivergedError as exc:
        saved = list_checkpoints(checkpoints_dir(run_dir))
        kept = f"the last checkpoint, {saved[-1]}, is untouched" if saved else "no checkpoint"
        typer.echo(f"error: {exc}; stopped ({kept})", err=True)
        raise typer.Exit(EXIT_DIVERGED) from None
    except OSError as exc:
        saved = list_checkpoints(checkpoints_dir(run_dir))
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
    except KeyboardInterrupt:  # a second signal, during the stop
        typer.echo(
            f"error: stopped again before the run was saved; {_resume_hint(run_dir)}", err=True
        )
        raise typer.Exit(stop.exit_code) from None
    finally:
        trainer.close()
    console.print_summary(summary)
    if summary["interrupted"]:
        typer.echo(
            f"stopped at env step {summary['env_steps']:,}; "
            f"{_resume_hint(run_dir, summary['env_steps'])}",
            err=True,
        )
        raise typer.Exit(stop.exit_code)


def _resume(run_dir: Path, steps: int | None, quiet: bool) -> None:
    """``train --resume``: continues ``run_dir`` from its newest checkpoint that passes its
    checksums (a damaged newer one is named in a warning and skipped)."""
    from per_dqn import rundir

    lock = None
    if run_dir.is_dir():
        try:  # before reading anything: a run still writing here is refused at once
            lock = rundir.lock_run_dir(run_dir, create=False)
        except rundir.RunDirError as exc:
            _fail([str(exc)])
    try:
        _resume_locked(run_dir, steps, quiet, lock)
    finally:
        if lock is not None:
            lock.release()


def _resume_locked(run_dir: Path, steps: int | None, quiet: bool, lock: RunDirLock | None) -> None:
    """``_resume`` with the lock held, or with None when the run dir has no lock file yet."""
    from per_dqn import api

    def warn(line: str) -> None:
        typer.echo(f"warning: {line}", err=True)

    try:
        resumption = api.prepare_resume(run_dir, steps, warn)
    except ConfigError as exc:
        _fail(exc.problems)
    except ValueError as exc:  # CheckpointError and FormatError included
        _fail([str(exc)])
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


@app.command("eval")
def eval_(
    target: Annotated[
        Path,
        typer.Argument(
            metavar="RUN_DIR_OR_CHECKPOINT",
            help="A run dir (its newest usable checkpoint, else its model.pt) or a checkpoint "
            "dir (RUN_DIR/checkpoints/step_*).",
        ),
    ],
    episodes: Annotated[int, typer.Option(help="Episodes to play.")] = 10,
    epsilon: Annotated[
        float | None,
        typer.Option(
            help="Exploration epsilon (default: the run's train.eval_epsilon; 0 is greedy)."
        ),
    ] = None,
    video: Annotated[
        bool, typer.Option("--video", help="Write a GIF of the first episode to RUN_DIR/videos/.")
    ] = False,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Run seed whose evaluation episodes are played (default: the run's own, so "
            "the episodes are those training evaluated on)."
        ),
    ] = None,
    video_view: Annotated[
        VideoView | None,
        typer.Option(
            help="With --video: `game` films the game's own frames (Atari: the emulator's RGB "
            "screen; the default), `agent` the agent's 84x84 grayscale view (Atari only)."
        ),
    ] = None,
) -> None:
    """Play a trained agent: print the mean, std, min and max return over the episodes.

    The run's `train.eval_max_episode_steps` and `train.eval_max_total_steps` bound the
    episodes (a warning names the one reached)."""
    problems = []
    if video_view is not None and not video:
        problems.append(f"--video-view {video_view.value} needs --video")
    if episodes < 1:
        problems.append(f"--episodes must be >= 1, got {episodes}")
    if epsilon is not None and not 0.0 <= epsilon <= 1.0:
        problems.append(f"--epsilon must be in [0, 1], got {epsilon}")
    if seed is not None and seed < 0:
        problems.append(f"--seed must be >= 0, got {seed}")
    if problems:
        _fail(problems)
    from per_dqn import evaluate

    try:
        source = evaluate.resolve_source(target)
    except ValueError as exc:
        _fail([str(exc)])
    for line in source.warnings:
        typer.echo(f"warning: {line}", err=True)

    from per_dqn.build import make_agent

    try:
        result = evaluate.evaluate_source(
            source, make_agent, episodes=episodes, epsilon=epsilon, seed=seed, video=video,
            video_view=(video_view or VideoView.game).value,
        )  # fmt: skip
    except ValueError as exc:
        _fail([str(exc)])
    except OSError as exc:  # the video could not be written: disk full, read-only...
        where = exc.filename or source.run_dir / evaluate.VIDEO_DIR
        typer.echo(f"error: {where}: {exc.strerror or exc}", err=True)
        raise typer.Exit(EXIT_WRITE_FAILED) from None
    cut = result.episodes.cap_warning()
    if cut is not None:
        typer.echo(f"warning: {cut}", err=True)
    for line in result.lines():
        typer.echo(line)


@app.command()
def plan(
    config: Annotated[
        str,
        typer.Option("--config", "-c", help="A shipped config name or a path to a YAML file."),
    ],
    replay: Annotated[
        Replay | None, typer.Option(help="Replay memory; overrides replay.kind.")
    ] = None,
    set_: SetOption = None,
) -> None:
    """Print the replay memory's bytes per transition and total against the available RAM.

    Nothing is allocated. Exit 2 if the memory would not fit (`train` refuses the same config).
    """
    overrides = _parse_sets(set_)
    if replay is not None:
        overrides.append(Override("replay.kind", replay.value, "--replay"))
    cfg, _ = _load(config, overrides)
    from per_dqn.plan import describe_plan, memory_plan

    try:
        memory = memory_plan(cfg)
    except ValueError as exc:
        _fail([f"{config}: {exc}"])
    for line in describe_plan(memory):
        typer.echo(line)
    if not memory.fits:
        _fail([f"{config}: {memory.refusal()}"])


@config_app.command("show")
def config_show(
    name: Annotated[str, typer.Argument(help="A shipped config name or a path.")],
    set_: SetOption = None,
) -> None:
    """Print the resolved config (every key, defaults filled in) as YAML."""
    cfg, _ = _load(name, _parse_sets(set_))
    typer.echo(cfg.to_yaml(), nl=False)


@config_app.command("validate")
def config_validate(
    file: Annotated[str, typer.Argument(help="A config file (or a shipped config name).")],
) -> None:
    """Check a config; print `ok: FILE` or one `error:` line per problem (exit 2)."""
    _load(file, [])
    typer.echo(f"ok: {file}")


@app.command()
def ablate(
    config: Annotated[
        str,
        typer.Option("--config", "-c", help="A shipped config name or a path to a YAML file."),
    ],
    replay: Annotated[
        list[str] | None,
        typer.Option(
            metavar="ARMS",
            help="Arms, comma-separated (uniform, proportional, rank), each with its own settings "
            'if wanted: "rank:replay.alpha=0.7,replay.beta0=0.5". Repeatable. Default: all three.',
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
    cpus_per_run: Annotated[
        float | None, typer.Option(help="--backend ray: CPUs each run holds (default 1).")
    ] = None,
    gpus_per_run: Annotated[
        float | None,
        typer.Option(help="--backend ray: GPUs each run holds; 0.25 puts 4 runs on a GPU."),
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
    overrides = _parse_sets(set_)
    from per_dqn.sweeps import backends
    from per_dqn.sweeps import plan as sweeps

    options = backends.Options(workers, address, cpus_per_run, gpus_per_run, retries)
    try:
        runner = backends.create(backend.value, options)
    except backends.OptionError as exc:
        _fail(exc.problems)
    except ValueError as exc:
        _fail([str(exc)])
    try:
        sweep = sweeps.plan_sweep(
            config,
            sweeps.parse_arms(replay or [",".join(sweeps.ARMS)]),
            sweeps.parse_seeds(seeds),
            steps,
            overrides,
            out,
            sweeps.parse_grid(grid or []),
        )
        todo = sweep.pending()
        runner.check(sweep, todo)
    except ConfigError as exc:
        _fail(exc.problems)
    except ValueError as exc:
        _fail([str(exc)])
    created = sweeps.first_missing(sweep.out)
    try:
        lock = sweeps.lock_sweep_dir(sweep)
    except ValueError as exc:  # rundir.RunDirError: in use, or cannot be created
        _fail([str(exc)])
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
        _fail([str(refused)])


def _ablate_locked(sweep: Sweep, todo: list[Job], runner: SweepBackend) -> None:
    """``ablate`` once the sweep dir is locked and the backend prepared: runs the sweep, prints
    its progress, reports."""
    from per_dqn.sweeps import report as reports
    from per_dqn.sweeps.job import SweepResult
    from per_dqn.sweeps.plan import start_sweep

    total = len(sweep.jobs)
    workers_text = f" on {runner.describe(todo)}" if todo else ""
    typer.echo(
        f"sweep {sweep.out}: {total} runs, {total - len(todo)} finished, {len(todo)} to run"
        + workers_text
    )
    done = [total - len(todo)]

    def show(outcome: Outcome) -> None:
        done[0] += outcome.final_return is not None
        status = (
            f"error: {outcome.error}" if outcome.error
            else "interrupted" if outcome.interrupted
            else f"final eval return {outcome.final_return:.1f} ({outcome.wall_seconds:.0f} s)"
        )  # fmt: skip
        typer.echo(f"[{done[0]}/{total}] {outcome.job.run_dir}: {status}")

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
    try:
        files = reports.write_report(sweep.out)
        typer.echo(f"report: {files}")
    except ValueError as exc:  # every run failed: nothing to report
        typer.echo(f"error: {exc}", err=True)
    if result.failed:
        for outcome in result.failed:
            typer.echo(f"error: run {outcome.job.run_dir} failed: {outcome.error}", err=True)
        raise typer.Exit(1)


@app.command()
def report(
    sweep_dir: Annotated[
        Path, typer.Argument(help="A sweep dir written by `per-dqn ablate` (not one run's dir).")
    ],
    threshold: Annotated[
        list[str] | None,
        typer.Option(
            metavar="ENV_ID=VALUE",
            help="Steps-to-threshold target for an env, repeatable: for envs without gymnasium's "
            "reward_threshold (MinAtar), or to override it.",
        ),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            metavar="ARM",
            help="Pair every arm's P(>) against this arm (as report.md names it, e.g. "
            "proportional/weight_normalization=global) instead of uniform.",
        ),
    ] = None,
) -> None:
    """Write report.md, scores.csv and the figures (curves, performance profiles; PNG and SVG)
    into a sweep dir, from its run dirs alone."""
    from per_dqn.sweeps import report as reports

    try:
        files = reports.write_report(sweep_dir, reports.parse_thresholds(threshold or []), baseline)
    except ValueError as exc:
        _fail([str(exc)])
    typer.echo(f"report: {files}")


if __name__ == "__main__":
    app()
