"""A training run: the run dir, logging, evaluation, the checkpoint cadence, the stop flag and the
summary, around the loop of ``loop.py``.

``Trainer`` builds every part from the config (``build.py``) before anything is written, then
``run`` drives ``Loop.step`` and decides, at each env step, what is logged, evaluated and saved.
A checkpoint is the tree of the parts' ``state_dict()``s: the agent, the replay memory, the envs
and the loop's ``LoopState``; ``checkpoint.py`` stores it and knows none of them.

One module though past 500 lines: ``Trainer`` and the ``_Session`` of one ``run`` call are the
one place that decides, step by step, what a run writes; the logger (``metrics``), the display
(``console``), the files (``fileio``, ``rundir``) and the checkpoint format live elsewhere.
"""

from __future__ import annotations

import contextlib
import io
import math
import time
import uuid
import warnings
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from per_dqn.config import Config, ConfigError, parse_yaml, validate_config
from per_dqn.envs.make import Envs
from per_dqn.logs import tags, tracking
from per_dqn.logs.console import ConsoleProgress, gib
from per_dqn.logs.metrics import (
    DEFAULT_VARYING,
    TensorBoardLogger,
    config_as_markdown,
    flatten_config,
)
from per_dqn.rundir import arrays
from per_dqn.rundir import checkpoint as ckpt
from per_dqn.rundir.dirs import display_name, ensure_run_id, read_run_id, sweep_axes, trial_name
from per_dqn.rundir.fileio import write_bytes_atomic, write_json, write_text_atomic, writing
from per_dqn.rundir.provenance import provenance
from per_dqn.rundir.summary import SESSIONS_KEY, WALL_TOTAL_KEY, read_sessions
from per_dqn.training import checkpoints as run_ckpt
from per_dqn.training.asking import Request, serve
from per_dqn.training.build import make_agent, make_memory, resolve_device, set_torch_threads
from per_dqn.training.evaluate import Episodes, episode_requests
from per_dqn.training.loop import DivergedError, Loop, upgrade_format_2
from per_dqn.training.memory_plan import memory_plan
from per_dqn.training.seeding import RunSeeds

__all__ = ["Callback", "DivergedError", "StopRequested", "Trainer", "eval_scalars"]

# The tree-drift check is O(capacity); every this many log points is "now and then".
TREE_DRIFT_EVERY_LOGS = 10
# Env steps between progress-display refreshes: often enough to look live, rare enough to cost
# nothing.
PROGRESS_INTERVAL_STEPS = 250


class StopRequested(KeyboardInterrupt):
    """The run's ``should_stop`` (or a callback) asked it to stop; raised between two env steps,
    where the loop's state is exact and can be checkpointed (a ``KeyboardInterrupt`` raised
    anywhere else may land mid-step)."""


class Callback(Protocol):
    """Hooks a run calls; each may return True to stop the run (early stopping).

    A stopped run is checkpointed where it stopped (when checkpoints are on), its summary says
    ``interrupted``, and ``per-dqn train --resume`` continues it. Every hook is optional: a
    callback object needs only the methods it uses.
    """

    def on_log(self, env_steps: int, values: dict[str, float]) -> bool | None:
        """A log point: the scalars just written to TensorBoard, by tag."""

    def on_eval(self, env_steps: int, returns: np.ndarray) -> bool | None:
        """A periodic evaluation's episode returns (the final evaluation is not a hook: the run
        ends there anyway)."""

    def on_checkpoint(self, env_steps: int, path: Path) -> bool | None:
        """A checkpoint was written to ``path``."""


def eval_scalars(episodes: Episodes) -> dict[str, float]:
    """The ``eval/*`` TensorBoard values of an evaluation."""
    return {
        tags.EVAL_RETURN_MEAN: float(episodes.returns.mean()),
        tags.EVAL_RETURN_STD: float(episodes.returns.std()),
        tags.EVAL_LENGTH_MEAN: float(episodes.lengths.mean()),
    }


def upgrade_parts(checkpoint: run_ckpt.RunCheckpoint) -> dict[str, Any]:
    """The checkpoint's parts in this version's shape (format 2 is moved into format 3's)."""
    if checkpoint.format == 2:
        try:
            return upgrade_format_2(checkpoint.parts)
        except ValueError as exc:
            raise ckpt.CheckpointError(f"{checkpoint.path}: {exc}") from None
    return checkpoint.parts


class Trainer:
    """Everything a run needs, built (and checked) before anything is written to disk.

    Args:
        config: the validated experiment.
        config_name: the config's name (file stem), recorded in the summary.
        make_loop: builds the loop from ``(config, agent, memory, envs, seeds)``: ``Loop``, or
            a distributed run's learner side (``per_dqn.distributed``), whose transitions come
            from actors; one that carries a ``make_memory(config, spec)`` builds the run's
            replay memory too (replay shards in their own processes, ``run.shards``).

    Raises:
        ValueError: an environment, device or tracker the config asks for cannot be had; the
            message starts with the config key to blame.
    """

    def __init__(
        self, config: Config, config_name: str, make_loop: Callable[..., Loop] = Loop
    ) -> None:
        run = config.run
        if run.actors is not None and make_loop is Loop:
            raise ValueError(
                f"run.actors: {run.actors}: a distributed run's actors start with its learner: "
                "per-dqn train --actors N, or --resume of its run dir (a sweep cannot run one "
                "yet)"
            )
        self.config = config
        self.config_name = config_name
        tracking.check_available(run.track)  # before seconds of building, and before any write
        self.device = resolve_device(run.device)
        set_torch_threads(self.device, run.torch_threads)
        self.seeds = RunSeeds.from_seed(run.seed)  # one independent stream per consumer
        torch.manual_seed(self.seeds.network)
        self.environments = Envs(config.env)
        self.spec = self.environments.spec
        # Every entry point builds its runs here (train, resume, the API, ablate's jobs on either
        # backend, packs): the memory planner is asked before the memory is allocated (issue 43,
        # E4: an ablate job allocated a memory `train` refuses, and the OOM killer ended it).
        plan = memory_plan(config, self.spec)
        if not plan.fits:
            self.environments.close()
            raise ValueError(plan.refusal())
        # A distributed run whose replay lives in shard processes builds its own (``run.shards``:
        # ``make_loop.make_memory``, ``per_dqn.distributed.shards``).
        make_shards = getattr(make_loop, "make_memory", None)
        if make_shards is None:
            self.memory = make_memory(config.replay, self.spec, self.seeds.replay)
        else:
            self.memory = make_shards(config, self.spec)
        self.agent = make_agent(config, self.spec, self.device)
        self.loop = make_loop(config, self.agent, self.memory, self.environments, self.seeds)
        self._resumed_from: int | None = None
        # The sessions before this call (the resumed checkpoint's ``summary.SESSIONS_KEY``); None
        # where one went untimed (a checkpoint from before the record).
        self._sessions_before: list[dict[str, Any]] | None = []
        # This call's session: its pack's id and ``time.perf_counter()`` when it opened.
        self._session_clock: tuple[str, float] | None = None
        # The run dir's id (``rundir.ensure_run_id``), set by ``run``: every checkpoint carries it.
        self.run_id: str | None = None

    @property
    def envs(self) -> Any:
        """The training vector env."""
        return self.environments.train

    @property
    def eval_env(self) -> Any:
        """The evaluation env."""
        return self.environments.eval

    def close(self) -> None:
        """Closes the loop and the environments."""
        self.loop.close()
        self.environments.close()

    def load_checkpoint(self, path: Path) -> list[str]:
        """Loads a training checkpoint into every part so that ``run`` continues it; returns
        one-line notes for the user on what is not exact.

        Raises:
            CheckpointError: the checkpoint fails its checksums, cannot be read, belongs to
                another run than the run dir it sits in (``training.checkpoints.check_owner``), or
                does not fit this config. Its parts are all checked before the loop's state changes.
        """
        # Whose it is, before seconds of loading: a step dir copied in from another run is refused.
        run_ckpt.check_owner(path, ckpt.read_manifest(path), run_ckpt.run_dir_of(path))
        checkpoint = run_ckpt.load_run_checkpoint(path, self.device)
        # Again on the manifest that was loaded, through the one handle its files were read by:
        # the step dir could have been swapped since the first look.
        run_ckpt.check_owner(path, checkpoint.manifest, run_ckpt.run_dir_of(path))
        parts = upgrade_parts(checkpoint)
        env_steps = checkpoint.env_steps
        loop = parts.get("loop")
        if isinstance(loop, dict) and loop.get("env_steps") != env_steps:
            raise ckpt.CheckpointError(
                f"{path}: its loop state is at env step {loop.get('env_steps')}, its manifest at "
                f"{env_steps}"
            )
        try:
            self.agent.load_state_dict(parts["agent"])
        except ValueError as exc:
            raise ckpt.CheckpointError(str(exc)) from None
        notes = []
        if "memory" not in parts:
            notes.append(
                f"{path.name} holds no replay memory (checkpoint.replay: false): the resumed run "
                "starts from an empty memory"
            )
        else:
            try:
                self.memory.load_state_dict(parts["memory"])
            except ValueError as exc:
                raise ckpt.CheckpointError(
                    f"{path}: its replay memory does not fit this config ({exc})"
                ) from None
        try:
            saved = validate_config(parse_yaml(checkpoint.config_yaml, str(path)), str(path))
        except ConfigError:
            saved = None
        budget = {"total_env_steps": self.config.train.total_env_steps}
        if (
            saved is None
            or saved.model_copy(update={"train": saved.train.model_copy(update=budget)})
            != self.config
        ):
            notes.append(
                f"this config differs from the one {path.name} was written with (beyond "
                "train.total_env_steps): the resume follows this config and is not exact"
            )
        try:
            exact = self.loop.load_state_dict(loop, parts.get("envs"))
        except ValueError as exc:
            raise ckpt.CheckpointError(f"{path}: {exc}") from None
        if not exact:
            notes.append(
                f"{self.config.env.id} envs cannot be saved: they restart from a fresh reset "
                "seeded from run.seed and the env step, so this resume is not exact"
            )
        self._resumed_from = env_steps
        self._sessions_before = read_sessions(checkpoint.manifest.get(SESSIONS_KEY))
        return notes

    def wall_sessions(self, seconds: float | None = None) -> list[dict[str, Any]] | None:
        """The run's sessions so far (``summary.SESSIONS_KEY``): the resumed checkpoint's, then
        this call's, of ``seconds`` (default: since it opened). None where a session before went
        untimed, or outside a session."""
        if self._sessions_before is None or self._session_clock is None:
            return None
        pack, start = self._session_clock
        seconds = time.perf_counter() - start if seconds is None else seconds
        return [*self._sessions_before, {"pack": pack, "seconds": seconds}]

    def state_dict(self, copy: bool = True) -> dict[str, Any]:
        """The run's state by part: what a checkpoint holds (the memory only when
        ``checkpoint.replay`` is on). A distributed run's loop must be settled first
        (``Loop.settle``, as ``_save_checkpoint`` does).

        Args:
            copy: False leaves the memory's arrays as views into it (``ReplayMemory.state_dict``),
                valid until the run's next step: what a checkpoint writes from.
        """
        parts = {
            "agent": self.agent.state_dict(),
            "loop": self.loop.state_dict(len(self.memory)),
            "envs": self.environments.state_dict(),
        }
        if self.config.checkpoint.replay:
            parts["memory"] = self.memory.state_dict(copy=copy)
        return parts

    def _save_checkpoint(
        self,
        run_dir: Path,
        logger: TensorBoardLogger,
        final: bool,
        progress: ConsoleProgress | None = None,
        stopping: bool = False,
    ) -> Path:
        """Writes a checkpoint of every part, shown on ``progress`` as it is written; a stop's
        (``stopping``) says so in a line first, with its size."""
        self.loop.settle()  # a distributed run's blocks in flight taken first
        cfg, env_steps = self.config.checkpoint, self.loop.state.env_steps
        # Every point logged up to this step reaches the event file before the state that follows
        # it is saved: a resumed run purges only what comes after.
        logger.flush()
        root = ckpt.checkpoints_dir(run_dir)
        parts = self.state_dict(copy=False)  # streamed from the memory: no second copy of it
        agent = parts.pop("agent")
        size = arrays.tree_nbytes(parts) + arrays.tree_nbytes(agent)
        if progress is not None and stopping:
            progress.say(f"stopping: saving a checkpoint ({gib(size)}) at env step "
                         f"{env_steps:,}")  # fmt: skip
        # A failed write leaves the earlier checkpoints whole (see ``checkpoint.write_checkpoint``).
        with writing(root / ckpt.checkpoint_name(env_steps)):
            return run_ckpt.save_run_checkpoint(
                root,
                env_steps=env_steps,
                weights={"agent": agent},
                trees=parts,
                config_yaml=self.config.to_yaml(),
                keep_last=cfg.keep_last,
                progress=None
                if progress is None
                else lambda done, total: progress.saving(done, total, size),
                meta={
                    "update_steps": self.agent.update_steps,
                    "final": final,
                    "config_name": self.config_name,
                    ckpt.RUN_ID_KEY: self.run_id,
                    SESSIONS_KEY: self.wall_sessions(),
                },
            )

    def run(
        self,
        run_dir: Path,
        progress: ConsoleProgress | None = None,
        should_stop: Callable[[], bool] | None = None,
        callbacks: Sequence[Any] = (),
    ) -> dict[str, Any]:
        """Trains, evaluates, and writes ``config.yaml``, events, checkpoints and ``summary.json``.

        After ``load_checkpoint`` the run continues that checkpoint in ``run_dir``: its event
        files get no duplicated points (see ``TensorBoardLogger``'s ``purge_step``).

        A ``KeyboardInterrupt`` stops the loop cleanly: the summary is written with
        ``interrupted: true`` and no final evaluation, and the event file is closed; no checkpoint
        is written then (the state may be mid-step), so a resume starts from the last periodic one.
        ``should_stop`` is the same stop asked for cooperatively: polled once per env step (and
        before the final evaluation), it ends the run as an interrupt does, but always between
        two steps, never inside a library call, so the state is exact and is checkpointed first
        (when checkpoints are on and the step has none yet): a resume then loses nothing. The CLI
        turns Ctrl-C and SIGTERM into this stop, and a sweep's workers stop their runs this way.
        A callback (see ``Callback``) that returns True stops the run the same way.

        The run is a pack of one: ``per_dqn.packs.lockstep.run_pack`` runs several trainers'
        sessions together, each as this method runs it alone.

        Returns:
            The summary (also written to ``run_dir / "summary.json"``); ``wall_seconds`` and
            ``sps`` cover this call only; ``wall_sessions`` lists every call of the run (those
            before a resume as its checkpoint recorded them; None where that checkpoint
            predates the record) and ``wall_seconds_total`` sums them. Work done after the
            resumed checkpoint and lost with a kill is not counted, nor is building the trainer
            or loading the checkpoint.

        Raises:
            DivergedError: a non-finite loss or diverged weights; nothing is written after it (no
                checkpoint, model or summary).
            TrackingError: ``run.track``'s tracker could not start the run; nothing is written.
            WriteError: a file could not be written (disk full, read-only...); it names the file
                or checkpoint. Checkpoints written before it are left whole.
        """
        with self.session(run_dir, progress, should_stop, callbacks) as session:
            return session.wrap_up(*serve(session.play(), self.agent))

    @contextlib.contextmanager
    def session(
        self,
        run_dir: Path,
        progress: ConsoleProgress | None = None,
        should_stop: Callable[[], bool] | None = None,
        callbacks: Sequence[Any] = (),
        pack_id: str | None = None,
    ) -> Iterator[_Session]:
        """The run opened (its tracker started, ``config.yaml`` and the run id written, the event
        file open) as a ``_Session``, whose ``play`` and ``wrap_up`` the caller drives; closed
        however the block ends, the tracker told the summary's outcome. ``pack_id`` names the
        pack the session trains in, the same for each of its runs (``wall_sessions``); default:
        a new id, a pack of one."""
        config_yaml = self.config.to_yaml()
        fresh = self._resumed_from is None
        # Read before anything else runs: the command, versions, commit, host and device.
        origin = provenance(self.device)
        tracker = None
        if self.config.run.track == "wandb":  # first: a tracker that cannot start stops the run
            tracker = tracking.WandbTracker(
                run_dir,
                self.config.model_dump(mode="json"),
                display_name(run_dir),
                resume=not fresh,
            )
        try:
            with writing(run_dir / "config.yaml"):
                run_dir.mkdir(parents=True, exist_ok=True)
                write_text_atomic(run_dir / "config.yaml", config_yaml)
            # A new run's id, or the resumed run dir's (one from before run ids gets one now, and
            # records its id-less checkpoints as legacy).
            legacy = None
            if not fresh and read_run_id(run_dir) is None:
                found = ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))
                legacy = max((ckpt.checkpoint_step(p) for p in found), default=None)
            self.run_id = ensure_run_id(run_dir, legacy)
            start_steps = self._resumed_from or 0
            # The checkpoint was written after every point of its step was logged.
            logger = TensorBoardLogger(run_dir, None if fresh else start_steps + 1, mirror=tracker)
            start = time.perf_counter()
            self._session_clock = (pack_id or uuid.uuid4().hex, start)
            try:
                if fresh:
                    logger.text(tags.CONFIG_TEXT, config_as_markdown(config_yaml))
                    flat = flatten_config(self.config.model_dump(mode="json"))
                    varying = sweep_axes(run_dir) or DEFAULT_VARYING
                    logger.hparams(flat, time.time(), name=trial_name(run_dir), varying=varying)
                    logger.custom_scalars(tags.CUSTOM_SCALARS_LAYOUT)
                session = _Session(self, run_dir, logger, progress, should_stop, list(callbacks),
                                   start_steps, start, origin)  # fmt: skip
                yield session
            except BaseException:
                # The first failure is the one to report; closing a writer that failed fails again.
                with contextlib.suppress(OSError):
                    logger.close()
                raise
            logger.close()
        except BaseException:
            if tracker is not None:
                with contextlib.suppress(Exception):  # the run's own failure is the one to report
                    tracker.finish(None, exit_code=1)
            raise
        if tracker is not None:
            summary = session.summary
            tracker.finish(summary, exit_code=1 if summary is None or summary["interrupted"] else 0)


class _Session:
    """One ``Trainer.run`` call: the I/O around the loop's steps."""

    def __init__(
        self,
        trainer: Trainer,
        run_dir: Path,
        logger: TensorBoardLogger,
        progress: ConsoleProgress | None,
        should_stop: Callable[[], bool] | None,
        callbacks: list[Any],
        start_steps: int,
        start: float,
        origin: dict[str, Any],
    ) -> None:
        self.trainer = trainer
        self.config = trainer.config
        self.loop = trainer.loop
        self.run_dir = run_dir
        self.logger = logger
        self.progress = progress
        self.should_stop = should_stop
        self.callbacks = callbacks
        self.start_steps = start_steps
        self.start = start
        self.origin = origin
        self.summary: dict[str, Any] | None = None
        self.checkpoints = self.config.checkpoint.enabled
        self.saved_at = self.loop.state.env_steps  # the step of the newest checkpoint
        self.stop_asked = False  # a callback asked to stop
        self.last_eval = math.nan
        self.last_loss = math.nan

    # --- hooks ---------------------------------------------------------------------------------

    def _call(self, hook: str, *args: Any) -> None:
        for callback in self.callbacks:
            method = getattr(callback, hook, None)
            if method is not None and method(*args):
                self.stop_asked = True

    def _stopping(self) -> bool:
        return self.stop_asked or (self.should_stop is not None and self.should_stop())

    # --- the run -------------------------------------------------------------------------------

    def play(self) -> Generator[Request, Any, tuple[bool, bool, Episodes | None]]:
        """The training and the final evaluation, as a generator of the loop's requests to the
        agent (``Loop.steps``); returns ``(interrupted, stopped between two steps, the final
        evaluation or None)`` for ``wrap_up``. A ``KeyboardInterrupt`` (one thrown in included)
        ends it as interrupted."""
        try:
            yield from self._train()
            if self._stopping():
                raise StopRequested
            self.loop.check_weights()
            return False, False, (yield from self._final_eval())
        except KeyboardInterrupt as exc:
            return True, isinstance(exc, StopRequested), None

    def wrap_up(
        self, interrupted: bool, stopped_between_steps: bool, final: Episodes | None
    ) -> dict[str, Any]:
        """After ``play``: the last checks and checkpoint, ``model.pt`` and the summary."""
        trainer, loop, config = self.trainer, self.loop, self.config
        state = loop.state
        start_steps, start, origin = self.start_steps, self.start, self.origin
        # However the loop ended (Ctrl-C included), the weights are checked before they are
        # written.
        loop.check_weights()
        # A stop between two steps is checkpointed there, so that a resume loses nothing; not at
        # the budget's end, where a checkpoint would read as a finished run.
        if (
            interrupted
            and stopped_between_steps
            and self.checkpoints
            and self.saved_at < state.env_steps < config.train.total_env_steps
        ):
            trainer._save_checkpoint(
                self.run_dir, self.logger, final=False, progress=self.progress, stopping=True
            )
        record = state.record
        auc = None if record is None else record.auc()
        is_weight_mean = None
        if record is not None and loop.memory.weighted:
            is_weight_mean = record.is_weight_mean()
        if final is not None:
            # The HParams tab's metrics, before the final checkpoint (which flushes them), and
            # only for a finished run: a stopped run's resume must log the curves of the run
            # never stopped, no extra point.
            finals = {
                tags.SUMMARY_FINAL_RETURN: float(final.returns.mean()),
                tags.SUMMARY_AUC: math.nan if auc is None else auc,
                # Uniform replay's weights are all 1: the HParams tab needs the number to keep
                # the run in its parallel-coordinates and scatter views (scores.csv says 1 too).
                tags.SUMMARY_IS_WEIGHT_MEAN: (
                    1.0
                    if not loop.memory.weighted
                    else math.nan
                    if is_weight_mean is None
                    else is_weight_mean
                ),
            }
            self.logger.scalars(finals, state.env_steps)
        if final is not None and self.checkpoints:
            trainer._save_checkpoint(self.run_dir, self.logger, final=True, progress=self.progress)
        wall = time.perf_counter() - start
        sessions = trainer.wall_sessions(wall)
        # Atomic: `eval` beside this run reads the old file or the new one, never half.
        buffer = io.BytesIO()
        # Copies: a packed agent's tensors are views into its pack's.
        torch.save(trainer.agent.weights(), buffer)
        with writing(self.run_dir / "model.pt"):
            write_bytes_atomic(self.run_dir / "model.pt", buffer.getvalue())
        summary = {
            "final_eval_return_mean": None if final is None else float(final.returns.mean()),
            "final_eval_return_std": None if final is None else float(final.returns.std()),
            "final_eval_episodes": 0 if final is None else len(final.returns),
            "env_steps": state.env_steps,
            "update_steps": trainer.agent.update_steps,
            "wall_seconds": wall,
            "sps": (state.env_steps - start_steps) / wall if wall > 0 else 0.0,
            WALL_TOTAL_KEY: None if sessions is None else sum(s["seconds"] for s in sessions),
            SESSIONS_KEY: sessions,
            "replay": config.replay.kind,
            "seed": config.run.seed,
            "env_id": config.env.id,
            "config": trainer.config_name,
            "device": str(trainer.device),
            "interrupted": interrupted,
            "resumed_from_env_steps": trainer._resumed_from,
            "run_dir": str(self.run_dir),
            # Over the evaluations so far (periodic and final); None when there is none, or when
            # the run resumed a checkpoint that predates the record.
            "auc": auc,
            # The mean of the logged per/is_weight_mean points: the effective step size's scale
            # (issue 14, part 5); None for uniform replay.
            "is_weight_mean": is_weight_mean,
            "provenance": origin,
        }
        write_json(self.run_dir / "summary.json", summary)
        self.summary = summary
        return summary

    def _next_checkpoint(self) -> float:
        """The env step of the next periodic checkpoint: the next multiple of the interval."""
        interval = self.config.checkpoint.interval_steps
        if not self.checkpoints or interval == 0:
            return math.inf
        return (self.loop.state.env_steps // interval + 1) * interval

    def _train(self) -> Generator[Request, Any, None]:
        """Steps until ``total_env_steps``, logging, evaluating and checkpointing as they fall
        due; the order within a step (episodes, log, eval, progress, checkpoint last) puts
        everything logged at a step before the checkpoint that follows it."""
        loop, state, train = self.loop, self.loop.state, self.config.train
        total = train.total_env_steps
        self.clock = (time.perf_counter(), state.env_steps)  # (time, env steps) at the last log
        next_checkpoint = self._next_checkpoint()
        next_progress = state.env_steps + PROGRESS_INTERVAL_STEPS
        logger = self.logger
        while state.env_steps < total:
            if self._stopping():
                raise StopRequested
            for ret, length in (yield from loop.steps()):
                logger.scalars(
                    {tags.EPISODE_RETURN: ret, tags.EPISODE_LENGTH: length}, state.env_steps
                )
            if loop.log_due():
                loop.check_weights()
                self._write_log()
            if loop.eval_due():
                loop.check_weights()
                result = yield from self._evaluate(
                    train.eval_episodes, f"the evaluation at env step {state.env_steps:,}"
                )
                self._call("on_eval", state.env_steps, result.returns)
            if self.progress is not None and state.env_steps >= next_progress:
                next_progress = state.env_steps + PROGRESS_INTERVAL_STEPS
                self._update_progress()
            # Last in the step, so that everything logged at this env step precedes it.
            if state.env_steps >= next_checkpoint and state.env_steps < total:
                next_checkpoint = self._next_checkpoint()
                loop.check_weights()
                path = self.trainer._save_checkpoint(
                    self.run_dir, self.logger, final=False, progress=self.progress
                )
                self.saved_at = state.env_steps
                self._call("on_checkpoint", state.env_steps, path)

    def _evaluate(self, episodes: int, what: str) -> Generator[Request, Any, Episodes]:
        """Plays an evaluation within ``train``'s caps, shown on the progress display, asking
        for its greedy actions as training does (so that a pack answers its runs' evaluations
        together); logs it, and warns (one line naming the cap and its key) when a cap cut it."""
        loop, train, progress = self.loop, self.config.train, self.progress
        result = yield from episode_requests(
            loop.agent.num_actions, loop.envs.eval, episodes, train.eval_epsilon,
            loop.state.eval_rng,
            max_episode_steps=train.eval_max_episode_steps,
            max_total_steps=train.eval_max_total_steps,
            on_progress=None if progress is None else progress.evaluating,
        )  # fmt: skip
        self.logger.scalars(eval_scalars(result), loop.state.env_steps)
        self.last_eval = float(result.returns.mean())
        if loop.state.record is not None:
            loop.state.record.add_eval(loop.state.env_steps, self.last_eval)
        warning = result.cap_warning()
        if warning is not None:
            line = f"{what}: {warning}"
            if progress is not None:
                progress.warn(line)
            else:
                warnings.warn(line, RuntimeWarning, stacklevel=2)
        if progress is not None:
            self._update_progress()
        return result

    def _write_log(self) -> None:
        loop, state = self.loop, self.loop.state
        step = state.env_steps
        clock, steps = self.clock
        now = time.perf_counter()
        sps = (step - steps) / (now - clock) if now > clock else 0.0
        self.clock = (now, step)
        values = loop.log_values(step)
        values[tags.PERF_SPS] = sps
        if loop.learning_rate is not None:
            values[tags.TRAIN_LEARNING_RATE] = loop.learning_rate(step)
        learned = state.learn_means.pop_means()
        values.update(tags.learner_scalars(learned))
        values.update(state.health.pop_means())
        memory = loop.memory
        if memory.weighted:
            values[tags.PER_BETA] = loop.beta(step)
        full = state.logs_written % TREE_DRIFT_EVERY_LOGS == 0
        values.update(tags.diagnostic_scalars(memory.diagnostics(full=full)))
        # Whether PER is prioritising, as one curve: > 1 when what is drawn has a higher priority
        # than what is stored (issue 14, part 4).
        sampled, stored = values.get(tags.PER_SAMPLED_PRIORITY), values.get(tags.PER_MEAN_PRIORITY)
        if memory.weighted and sampled is not None and stored:
            values[tags.PER_PRIORITY_RATIO] = sampled / stored
        self.logger.scalars(values, step)
        if state.record is not None:
            state.record.add_log(values)
        state.logs_written += 1
        if "loss" in learned:
            self.last_loss = learned["loss"]
        self._call("on_log", step, values)

    def _update_progress(self) -> None:
        assert self.progress is not None
        loop, state = self.loop, self.loop.state
        recent = state.recent_returns
        self.progress.update(
            state.env_steps,
            ret=float(np.mean(recent)) if recent else math.nan,
            eps=loop.exploration(state.env_steps),
            # An unweighted memory (uniform, LAP, LaBER, PAL) has no beta to show.
            beta=loop.beta(state.env_steps) if loop.memory.weighted else math.nan,
            loss=self.last_loss,
            last_eval=self.last_eval,
        )

    def _final_eval(self) -> Generator[Request, Any, Episodes]:
        """The final evaluation, logged at the last env step."""
        if self.progress is not None:
            self._update_progress()
        episodes = self.config.train.final_eval_episodes
        return (yield from self._evaluate(episodes, "the final evaluation"))
