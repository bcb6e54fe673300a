"""The Python entry points: ``train``, ``resume`` and ``load`` (docs/api.md shows them at work).

::

    import per_dqn

    result = per_dqn.train("cartpole", overrides={"train.total_env_steps": 20_000})
    print(result.summary["final_eval_return_mean"], result.run_dir)

    policy = per_dqn.load(result.run_dir)
    actions = policy.act(observations)            # a batch of observations -> greedy actions
    episodes = policy.evaluate(episodes=10)       # returns and lengths

Every failure a user can cause is raised as a ``ValueError`` whose message is one line naming the
key, the path or the value (``ConfigError`` for configs, ``RunDirError`` for run dirs,
``CheckpointError`` for checkpoints, ``UntrustedCodeError`` for a run dir's config that names
code to import, which ``load`` and ``resume`` refuse unless allowed: ``trust_code=True``, or
``network=`` the factory it names); a run dir another process is writing is refused, and a
refused call leaves nothing on disk; a run whose loss or weights diverged raises ``DivergedError``
and a file that cannot be written ``WriteError`` (an ``OSError`` naming the file).

The command line calls the same code, and only through this module: beside ``train`` and
``resume`` it uses their steps, which a script may use too (``new_run_dir``, ``build_trainer``,
``lock_run_dir``, ``run_trainer``; ``check_name_lengths``, ``prepare_resume``;
``list_checkpoints``), ``evaluate_run`` (``per-dqn eval``) and ``memory_plan`` (``per-dqn plan``).
``Policy``, ``load`` and ``evaluate_run`` live in ``per_dqn.policy``.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from per_dqn.config import (
    Config,
    ConfigError,
    Override,
    UntrustedCodeError,
    config_from_data,
    load_config,
    parse_override,
    resolve_config_path,
)
from per_dqn.distributed import ActorLostError, RunStoppedError
from per_dqn.logs.console import EvalDisplay
from per_dqn.logs.tracking import TrackingError
from per_dqn.policy import Policy, check_run_code, evaluate_run, load
from per_dqn.rundir import checkpoint as ckpt
from per_dqn.rundir import dirs as rundir
from per_dqn.rundir import latest, provenance
from per_dqn.rundir.checkpoint import CheckpointError
from per_dqn.rundir.dirs import RunDirError, RunDirInUse, check_name_lengths, lock_run_dir
from per_dqn.rundir.fileio import WriteError, inside
from per_dqn.training import checkpoints as run_ckpt
from per_dqn.training.evaluate import read_run_config

if TYPE_CHECKING:  # imported on first use, by `__getattr__` below
    from per_dqn.training.loop import DivergedError

__all__ = [
    "ActorLostError",
    "CheckpointError",
    "ConfigError",
    "DivergedError",
    "EvalDisplay",
    "Policy",
    "Resumption",
    "RunDirError",
    "RunDirInUse",
    "RunStoppedError",
    "TrackingError",
    "TrainResult",
    "UntrustedCodeError",
    "WriteError",
    "build_trainer",
    "check_name_lengths",
    "check_run_code",
    "describe_memory_plan",
    "distributed_loop",
    "evaluate_run",
    "list_checkpoints",
    "load",
    "lock_run_dir",
    "memory_plan",
    "new_run_dir",
    "prepare_resume",
    "resume",
    "run_trainer",
    "train",
]


def __getattr__(name: str) -> Any:
    # `DivergedError` lives with the loop, which imports torch: it is loaded on first use, so that
    # importing the API (the CLI does, before it has checked its input) stays free of torch.
    if name == "DivergedError":
        from per_dqn.training.loop import DivergedError

        return DivergedError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


ConfigLike = str | Path | Mapping[str, Any] | Config


@dataclass(frozen=True)
class TrainResult:
    """What ``train`` and ``resume`` return.

    Attributes:
        summary: the run's ``summary.json`` (final evaluation, steps, wall time, whether a stop
            or callback ``interrupted`` it).
        run_dir: where the run wrote its config, events, checkpoints, model and summary.
    """

    summary: dict[str, Any]
    run_dir: Path

    @property
    def final_return(self) -> float | None:
        """The final evaluation's mean return (None for a run stopped before it)."""
        return self.summary["final_eval_return_mean"]

    def print_summary(self) -> None:
        """Prints the end-of-run table ``per-dqn train`` shows: the run dir, replay, seed, steps,
        wall time and the final evaluation."""
        from per_dqn.logs import console

        console.print_summary(self.summary)


def _overrides(overrides: Mapping[str, Any] | Iterable[str] | None) -> list[Override]:
    """``{"replay.alpha": 0.5}`` or ``["replay.alpha=0.5"]`` as ``Override``s."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [Override(str(key), value, "overrides") for key, value in overrides.items()]
    expected = f"overrides: expected a mapping or a list of 'key=value', got {overrides!r}"
    if isinstance(overrides, str) or not isinstance(overrides, Iterable):
        raise ConfigError([expected])
    out = []
    for text in overrides:
        if not isinstance(text, str):
            raise ConfigError([f"overrides: expected 'key=value' texts, got {text!r}"])
        override = parse_override(text)
        out.append(Override(override.path, override.value, "overrides"))
    return out


def check_callbacks(callbacks: Any) -> list[Any]:
    """``callbacks`` as a list (None: none), refused before anything is written when it is not
    a list of objects (a string, a number, a single callback).

    Raises:
        ValueError: one line naming what was given.
    """
    if callbacks is None:
        return []
    if isinstance(callbacks, str | bytes) or not isinstance(callbacks, Iterable):
        raise ValueError(f"callbacks: expected a list of callback objects, got {callbacks!r}")
    return list(callbacks)


def load_any_config(
    config: ConfigLike,
    overrides: Mapping[str, Any] | Iterable[str] | None = None,
    network: str | Callable[..., Any] | None = None,
) -> tuple[Config, str]:
    """A validated config and its name from a path, a shipped config's name, a dict or a
    ``Config``, with ``overrides`` (and ``network``, as ``agent.network``) applied and validated
    like the rest.

    Raises:
        ConfigError: one line per problem, naming the key and the value.
        ValueError: a ``network`` callable that cannot be found again by name.
    """
    changes = _overrides(overrides)
    if network is not None:
        from per_dqn.agent.networks import network_name

        changes.append(Override("agent.network", network_name(network), "network"))
    if isinstance(config, Config):
        return config_from_data(config.model_dump(mode="json"), "config", changes), "config"
    if isinstance(config, Mapping):
        return config_from_data(dict(config), "config", changes), "config"
    path = resolve_config_path(str(config))
    return load_config(path, changes, display_name=str(config)), path.stem


def train(
    config: ConfigLike,
    *,
    overrides: Mapping[str, Any] | Iterable[str] | None = None,
    run_dir: str | Path | None = None,
    callbacks: Sequence[Any] = (),
    network: str | Callable[..., Any] | None = None,
    progress: bool = False,
    address: str | None = None,
) -> TrainResult:
    """Trains one run and returns its summary and run dir.

    Args:
        config: a YAML path, a shipped config's name (``"cartpole"``), a dict of sections, or a
            ``Config``.
        overrides: ``{"section.key": value}`` or ``["section.key=value", ...]``, validated like
            the config's own values.
        run_dir: where to write (absent or empty); default
            ``<run.runs_root>/<env>__<config>__<replay>__s<seed>__<time>``.
        callbacks: objects with any of ``on_log(env_steps, values)``, ``on_eval(env_steps,
            returns)``, ``on_checkpoint(env_steps, path)``; one that returns True stops the run
            (see ``run.Callback``), which stays resumable with ``resume``.
        network: a Q-network factory ``factory(obs_shape, num_actions) -> nn.Module`` or its
            ``"package.module:factory"`` name; sets ``agent.network``.
        progress: draw the progress display on stderr.
        address: for an Ape-X run (``run.actors`` set), the Ray cluster's ``HOST:PORT`` or
            ``auto``; None starts one on 127.0.0.1 for the run (``distributed_loop``).

    Raises:
        ConfigError: a bad config or override.
        RunDirError: ``run_dir`` is not empty, cannot be created, or another process writes it.
        ValueError: ``callbacks`` that are not a list, or an env, device, network or replay
            memory the config asks for cannot be had (before anything is written).
        DivergedError: the loss or the weights diverged (the run stops; see ``loop``).
        WriteError: a file could not be written.
    """
    callbacks = check_callbacks(callbacks)  # before the run dir is made
    if isinstance(overrides, Iterable) and not isinstance(overrides, Mapping | str):
        overrides = list(overrides)  # read twice: for the config and for the record
    cfg, name = load_any_config(config, overrides, network)
    run_dir = new_run_dir(cfg, name, run_dir)
    with contextlib.ExitStack() as cluster:
        make_loop = None
        if cfg.run.actors is not None:  # an Ape-X run: its actors on a Ray cluster
            make_loop = cluster.enter_context(distributed_loop(cfg, address))
        trainer = build_trainer(cfg, name, make_loop)
        # summary.json records this call, never the calling script's command line (issue 23).
        from per_dqn.agent.networks import network_name

        named = None if network is None else network_name(network)
        call = provenance.called("per_dqn.train", config=config, overrides=overrides, network=named)
        try:
            lock = lock_run_dir(run_dir, fresh=True)
            assert lock is not None
            with lock, call:
                return run_trainer(trainer, run_dir, callbacks=callbacks, progress=progress)
        finally:
            trainer.close()


def new_run_dir(config: Config, name: str, run_dir: str | Path | None = None) -> Path:
    """Where a new run of ``config`` writes, checked to be usable (nothing is created).

    Args:
        config: the run's config.
        name: the config's name (a file's stem), part of the default run dir's name.
        run_dir: the dir asked for; default a fresh
            ``<run.runs_root>/<env>__<name>__<replay>__s<seed>__<time>``.

    Raises:
        RunDirError: ``run_dir`` is not empty or cannot be created.
    """
    if run_dir is None:
        run_name = rundir.default_run_name(
            config.env.id, name, config.replay.kind, config.run.seed, datetime.now()
        )
        run_dir = rundir.fresh_run_dir(Path(config.run.runs_root), run_name)
    run_dir = Path(run_dir)
    rundir.check_run_dir(run_dir)
    return run_dir


def memory_plan(config: Config) -> Any:
    """The replay memory ``config`` asks for, sized against the available RAM; nothing is
    allocated (``per-dqn plan``; ``train`` refuses a memory whose plan does not fit).

    Returns:
        ``plan.MemoryPlan``: ``bytes_per_transition``, ``needed_bytes``, ``fits`` and
        ``refusal()``, the one line a refused run prints.

    Raises:
        ValueError: the env cannot be made to learn its observation shape (one line).
    """
    from per_dqn.training import memory_plan as plan

    return plan.memory_plan(config)


def describe_memory_plan(memory: Any, pack: int | None = None) -> list[str]:
    """``memory_plan``'s result as the lines ``per-dqn plan`` prints (with ``pack``, a line for
    that many such memories in one process)."""
    from per_dqn.training import memory_plan as plan

    return plan.describe_plan(memory, pack)


def check_memory_fits(config: Config) -> None:
    """Refuses a replay memory that cannot fit in the available RAM, before it is allocated.

    Raises:
        ValueError: one line naming ``replay.capacity`` and the sizes.
    """
    plan = memory_plan(config)
    if not plan.fits:
        raise ValueError(plan.refusal())


def build_trainer(config: Config, name: str, make_loop: Callable[..., Any] | None = None) -> Any:
    """The run's ``Trainer``, once its replay memory is known to fit; ``make_loop`` as the
    ``Trainer`` takes it (a distributed run's, from ``distributed_loop``).

    Raises:
        ValueError: an env, device or network that cannot be had, or memory that cannot be
            allocated (one line).
    """
    from per_dqn.training.memory_plan import allocation_failure
    from per_dqn.training.run import Trainer

    try:
        # It asks the memory planner before it allocates.
        return Trainer(config, name) if make_loop is None else Trainer(config, name, make_loop)
    except (MemoryError, RuntimeError) as exc:
        line = allocation_failure(exc, config, None)
        if line is None:
            raise
        raise ValueError(line) from None


def distributed_loop(config: Config, address: str | None = None) -> Any:
    """A context manager for an Ape-X run of ``config`` (``run.actors`` actors): it connects to
    the Ray cluster at ``address`` (None: starts one on loopback with a CPU per actor) and
    yields the ``make_loop`` to build its trainer with (``build_trainer``); on the way out it
    ends the actors and disconnects.

    Raises:
        ValueError: Ray is not installed, or no cluster answers at ``address`` (one line).
    """
    from per_dqn.distributed.remote import ray_loop

    return ray_loop(config, address)


def run_trainer(
    trainer: Any,
    run_dir: Path,
    *,
    callbacks: Sequence[Any] = (),
    progress: bool = False,
    should_stop: Callable[[], bool] | None = None,
) -> TrainResult:
    """Runs a built ``Trainer`` (from ``build_trainer`` or ``prepare_resume``) into ``run_dir``.

    The caller holds ``run_dir``'s lock (``lock_run_dir``) and closes the trainer afterwards, as
    ``train`` and ``resume`` do.

    Args:
        trainer: the run's ``Trainer``.
        run_dir: from ``new_run_dir``, or the resumed run's dir.
        callbacks: as ``train``'s.
        progress: draw the progress display on stderr.
        should_stop: asked between env steps; True stops the run there, checkpointed and
            resumable (``per_dqn.training.stopping.StopSignals`` is one: Ctrl-C or SIGTERM).

    Raises:
        DivergedError: the loss or the weights diverged (the last checkpoint is left as it was).
        WriteError: a file could not be written (the checkpoints written before it are intact).
        TrackingError: the tracker (``run.track``) could not start; nothing was written.
    """
    from per_dqn.logs import console

    train = trainer.config.train
    with console.ConsoleProgress(
        train.total_env_steps, enabled=progress, learning_starts=train.learning_starts
    ) as bar:
        summary = trainer.run(run_dir, bar, should_stop=should_stop, callbacks=callbacks)
    return TrainResult(summary, run_dir)


@dataclass
class Resumption:
    """A run dir's training, loaded from its newest usable checkpoint and ready to ``run``.

    Attributes:
        trainer: the ``Trainer``, every part loaded.
        checkpoint: the checkpoint dir it continues.
        env_steps: the checkpoint's env step.
        notes: one-line notes on what is not exact.
        warnings: one-line warnings (damaged newer checkpoints that were skipped).
    """

    trainer: Any
    checkpoint: Path
    env_steps: int
    notes: list[str]
    warnings: list[str]


def prepare_resume(
    run_dir: Path,
    steps: int | None = None,
    warn: Callable[[str], None] | None = None,
    *,
    network: str | Callable[..., Any] | None = None,
    trust_code: bool = False,
    track: str | None = None,
    distributed: Callable[[Config], Any] | None = None,
) -> Resumption:
    """Loads ``run_dir``'s newest checkpoint that passes its checks into a new ``Trainer``.

    Args:
        run_dir: a run dir written by ``train``.
        steps: a new ``train.total_env_steps`` (to extend a finished run).
        warn: called with each warning as it is found (damaged newer checkpoints skipped), so
            that they are shown even when the call then fails.
        network: as ``resume``'s.
        trust_code: as ``resume``'s (``per-dqn train --resume RUN_DIR --trust-code``).
        track: as ``resume``'s (``per-dqn train --resume RUN_DIR --track wandb``).
        distributed: for an Ape-X run (``run.actors`` in its config): called with the config,
            returns the ``make_loop`` to build its trainer with (the caller keeps the cluster
            connected, as ``distributed_loop`` does, until the run ends).

    Raises:
        UntrustedCodeError: ``RUN_DIR/config.yaml`` names code, or a tracker (``run.track``),
            that was not allowed.
        ValueError (``ConfigError``, ``CheckpointError``): not a run dir, no usable checkpoint,
            a run already complete, a checkpoint that does not fit, or a distributed run with no
            ``distributed``; one line.
    """
    config_path = inside(run_dir, "config.yaml")
    if not config_path.is_file():
        raise ValueError(f"{run_dir}: not a run dir (no config.yaml)")
    found = latest.find_latest(ckpt.checkpoints_dir(run_dir), only=run_ckpt.TRAINING_FILES)
    for line in found.warnings if warn is not None else ():
        warn(line)
    if found.path is None:
        why = (
            f"none of its {found.candidates} checkpoints passes its checks"
            if found.candidates
            else "it has no checkpoint"
        )
        raise ValueError(f"{run_dir}: nothing to resume from: {why}")
    at = found.manifest["env_steps"]
    overrides = [] if steps is None else [Override("train.total_env_steps", steps, "--steps")]
    cfg = read_run_config(config_path, overrides)
    # A run dir is data: nothing it names is imported, and no tracker it names is started (wandb
    # would send the run with the user's credentials: issue 43, E2), unless the user allows it.
    check_run_code(
        cfg, str(config_path), trust_code=trust_code, network=network, trains=True, track=track
    )
    total = cfg.train.total_env_steps
    if total <= at:
        if steps is None:
            raise ValueError(
                f"{run_dir}: the run is complete ({at:,} of {total:,} env steps); pass "
                "--steps N to extend it"
            )
        raise ValueError(
            f"--steps must be more than the checkpoint's {at:,} env steps, got {steps}"
        )
    name = str(found.manifest.get("config_name", config_path.stem))
    make_loop = None
    if cfg.run.actors is not None:
        if distributed is None:
            raise ValueError(
                f"{run_dir}: a distributed run (run.actors: {cfg.run.actors}); it resumes on a "
                "Ray cluster (per-dqn train --resume RUN_DIR [--address HOST:PORT])"
            )
        make_loop = distributed(cfg)
    try:
        trainer = build_trainer(cfg, name, make_loop)
    except ValueError as exc:
        raise ValueError(f"{config_path}: {exc}") from None
    try:
        notes = trainer.load_checkpoint(found.path)
    except BaseException:
        trainer.close()
        raise
    return Resumption(trainer, found.path, at, notes, list(found.warnings))


def resume(
    run_dir: str | Path,
    *,
    steps: int | None = None,
    callbacks: Sequence[Any] = (),
    progress: bool = False,
    network: str | Callable[..., Any] | None = None,
    trust_code: bool = False,
    track: str | None = None,
    address: str | None = None,
) -> TrainResult:
    """Continues a stopped (or, with ``steps``, a finished) run from its newest usable
    checkpoint, exactly where it stopped (a distributed run as near as its actors' timing
    allows: see docs/guides/distributed.md); see ``train`` for the rest. A damaged newer checkpoint
    passed over is named in a ``RuntimeWarning`` (the line ``train --resume`` prints).

    A run dir is data: a ``config.yaml`` that names code (a network factory, a
    ``module:EnvName`` env id) is refused before anything is imported, and one that turns on a
    tracker (``run.track: wandb``) before it starts, unless allowed.

    Args:
        network: the Q-network factory the run was trained with (the callable or its
            ``"package.module:factory"`` name), when its config names one: passing it allows
            that import (and nothing else).
        trust_code: allow every import the run's config names, and its tracker; only for a run
            dir whose origin you trust. Never stored.
        track: the tracker the run's config names (``"wandb"``): passing it allows that tracker
            to start (and nothing else), as ``network`` does its import.
        address: for an Ape-X run (``run.actors``), the Ray cluster's ``HOST:PORT`` or
            ``auto``; None starts one on 127.0.0.1 (``distributed_loop``).

    Raises:
        UntrustedCodeError: the config names code, or a tracker, that was not allowed (one
            line per key).
        ValueError: ``callbacks`` that are not a list (before anything is written); as
            ``prepare_resume``; ``RunDirInUse`` when another process writes it.
    """
    callbacks = check_callbacks(callbacks)  # before --steps is written into config.yaml
    run_dir = Path(run_dir)
    check_name_lengths(run_dir)
    lock = lock_run_dir(run_dir, create=False) if run_dir.is_dir() else None
    try:
        cluster = contextlib.ExitStack()
        resumption = prepare_resume(
            run_dir,
            steps,
            lambda line: warnings.warn(line, RuntimeWarning, stacklevel=4),
            network=network,
            trust_code=trust_code,
            track=track,
            distributed=lambda cfg: cluster.enter_context(distributed_loop(cfg, address)),
        )
        try:
            if lock is None:
                lock = lock_run_dir(run_dir)
            with provenance.called("per_dqn.resume", run_dir=run_dir, steps=steps):
                return run_trainer(
                    resumption.trainer, run_dir, callbacks=callbacks, progress=progress
                )
        finally:
            resumption.trainer.close()
    finally:
        cluster.close()
        if lock is not None:
            lock.release()


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """A run dir's checkpoint dirs, oldest (fewest env steps) first; whether each still passes
    its checks is for ``resume`` and ``load`` to find (they take the newest one that does)."""
    return ckpt.list_checkpoints(ckpt.checkpoints_dir(Path(run_dir)))
