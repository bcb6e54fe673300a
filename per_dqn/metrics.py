"""What a run reports: TensorBoard tags and writer, the PER health panel, run dirs, the console.

The PER health panel needs per-transition history (when it was added, when its priority was last
set, how often it was replayed). That bookkeeping lives here, in ``ReplayHealth``, indexed by the
slots the memory returns, so the memory stays a pure data structure.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import shutil
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from rich.console import Console
from rich.table import Table

# --- tags -----------------------------------------------------------------------------------------

PER_SAMPLED_PRIORITY = "per/sampled_priority"
PER_MEAN_PRIORITY = "per/mean_priority"
PER_MAX_PRIORITY = "per/max_priority"
PER_BETA = "per/beta"
PER_IS_WEIGHT_MEAN = "per/is_weight_mean"
PER_IS_WEIGHT_MIN = "per/is_weight_min"
PER_IS_WEIGHT_ESS = "per/is_weight_ess"
PER_NEVER_REPLAYED = "per/never_replayed_share"
PER_SAMPLE_AGE = "per/sample_age_steps"
PER_PRIORITY_AGE = "per/priority_age_steps"
PER_TREE_DRIFT = "per/tree_drift"
PER_PRIORITY_RATIO = "per/priority_ratio"
TRAIN_LOSS = "train/loss"
TRAIN_LOSS_UNWEIGHTED = "train/loss_unweighted"
TRAIN_Q_MEAN = "train/q_mean"
TRAIN_TD_ERROR_ABS = "train/td_error_abs"
TRAIN_GRAD_NORM = "train/grad_norm"
TRAIN_LEARNING_RATE = "train/learning_rate"
EXPLORE_EPSILON = "explore/epsilon"
EPISODE_RETURN = "episode/return"
EPISODE_LENGTH = "episode/length"
EVAL_RETURN_MEAN = "eval/return_mean"
EVAL_RETURN_STD = "eval/return_std"
EVAL_LENGTH_MEAN = "eval/length_mean"
PERF_SPS = "perf/sps"
# The run's final metrics, written once at the end of a finished run; the HParams tab reads them.
SUMMARY_FINAL_RETURN = "summary/final_eval_return_mean"
SUMMARY_AUC = "summary/auc"
SUMMARY_IS_WEIGHT_MEAN = "summary/is_weight_mean"
CONFIG_TEXT = "config"

# Every scalar tag with its one-line meaning; the README's table says the same. Values "averaged
# over the log interval" are means over every update since the previous write.
SCALAR_TAGS: dict[str, str] = {
    PER_SAMPLED_PRIORITY: "mean priority of the sampled batches (proportional: p_i^alpha; "
    "rank: |delta|), averaged over the log interval",
    PER_MEAN_PRIORITY: "mean priority over the whole memory, same units as sampled_priority",
    PER_MAX_PRIORITY: "largest raw priority seen (what a new transition enters with)",
    PER_BETA: "importance-sampling exponent, annealed from replay.beta0 to 1",
    PER_IS_WEIGHT_MEAN: "mean IS weight of the sampled batches",
    PER_IS_WEIGHT_MIN: "smallest IS weight of the sampled batches",
    PER_IS_WEIGHT_ESS: "effective sample size of a batch's IS weights, (sum w)^2 / sum w^2 / B "
    "(1: all equal)",
    PER_NEVER_REPLAYED: "share of sampled transitions that had never been replayed before",
    PER_SAMPLE_AGE: "mean age in env steps of the sampled transitions",
    PER_PRIORITY_AGE: "mean env steps since the sampled transitions' priorities were last set",
    PER_TREE_DRIFT: "relative gap between the sum tree's root and an exact sum of its leaves "
    "(proportional only, checked every few log points)",
    PER_PRIORITY_RATIO: "sampled_priority / mean_priority at the log point: 1 under uniform "
    "sampling, above 1 when high-priority transitions are drawn more often (weighted memories "
    "only)",
    TRAIN_LOSS: "IS-weighted TD loss",
    TRAIN_LOSS_UNWEIGHTED: "the same per-sample TD losses, plainly averaged (no IS weights): "
    "equal to train/loss under uniform replay",
    TRAIN_Q_MEAN: "mean Q(s, a) of the sampled batches",
    TRAIN_TD_ERROR_ABS: "mean |delta| of the sampled batches",
    TRAIN_GRAD_NORM: "gradient norm before clipping (only when agent.grad_clip_norm is set)",
    TRAIN_LEARNING_RATE: "Adam's step size (only when agent.learning_rate_end anneals it)",
    EXPLORE_EPSILON: "exploration epsilon",
    EPISODE_RETURN: "undiscounted return of each finished training episode",
    EPISODE_LENGTH: "length in env steps of each finished training episode",
    EVAL_RETURN_MEAN: "mean return of the greedy evaluation episodes (the last point is the final "
    "evaluation)",
    EVAL_RETURN_STD: "standard deviation of those returns",
    EVAL_LENGTH_MEAN: "mean length of those episodes",
    PERF_SPS: "env steps per second of wall time since the previous write, learning included",
    SUMMARY_FINAL_RETURN: "summary.json's final_eval_return_mean, one point at a finished run's "
    "last step (an HParams metric)",
    SUMMARY_AUC: "summary.json's auc, the normalised area under eval/return_mean, one point at a "
    "finished run's last step (an HParams metric)",
    SUMMARY_IS_WEIGHT_MEAN: "summary.json's is_weight_mean, the mean of the logged "
    "per/is_weight_mean, one point at a finished run's last step (weighted memories only; an "
    "HParams metric)",
}

# The HParams tab's metrics: (scalar tag, the column's name).
HPARAMS_METRICS = (
    (SUMMARY_FINAL_RETURN, "final eval return"),
    (SUMMARY_AUC, "AUC"),
    (SUMMARY_IS_WEIGHT_MEAN, "mean IS weight"),
)

# The Custom Scalars tab's layout: the charts that compare tags on one scale. Tags are regular
# expressions there, hence the anchors.
CUSTOM_SCALARS_LAYOUT = {
    "PER": {
        "priority: sampled vs memory mean": [
            "Multiline", [f"^{PER_SAMPLED_PRIORITY}$", f"^{PER_MEAN_PRIORITY}$"],
        ],
        "loss: IS-weighted vs unweighted": [
            "Multiline", [f"^{TRAIN_LOSS}$", f"^{TRAIN_LOSS_UNWEIGHTED}$"],
        ],
    }
}  # fmt: skip

# Tags only a prioritized memory has.
PRIORITY_TAGS = (PER_SAMPLED_PRIORITY, PER_MEAN_PRIORITY, PER_MAX_PRIORITY)


# --- run directories ------------------------------------------------------------------------------


def default_run_name(env_id: str, config_name: str, replay: str, seed: int, now: datetime) -> str:
    """``<env>__<config>__<replay>__s<seed>__<YYYYmmdd-HHMMSS>``; ``/`` in ids becomes ``-``."""
    env = env_id.replace("/", "-")
    return f"{env}__{config_name}__{replay}__s{seed}__{now:%Y%m%d-%H%M%S}"


# The lock file a run dir's writer holds (see ``RunDirLock``); it stays when the lock is released.
LOCK_FILE = ".per-dqn.lock"
# What `per-dqn ablate` writes into a sweep dir (per_dqn.sweeps.runs reads it): a run dir below
# one is a run of that sweep.
SWEEP_FILE = "sweep.json"


class RunDirError(ValueError):
    """A run dir (or sweep dir) this command must not or cannot write into; a one-line message."""


class RunDirInUse(RunDirError):
    """Another live process holds the dir's lock."""


def is_nonempty_dir(path: Path) -> bool:
    """True if ``path`` is a directory with at least one entry besides its lock file."""
    return path.is_dir() and any(p.name != LOCK_FILE for p in path.iterdir())


def check_run_dir(path: Path) -> None:
    """Refuses a path a fresh run must not or cannot write into, before anything is built.

    ``lock_run_dir`` checks again when it takes the lock: this early call only saves the seconds a
    ``Trainer`` takes to build before a refusal.

    Raises:
        RunDirError: ``path`` is not a directory, is another writer's run dir (``RunDirInUse``),
            is not empty, or cannot be created (a file where a parent folder should be, a
            read-only filesystem).
    """
    if path.exists() and not path.is_dir():
        raise RunDirError(f"run dir {path} exists and is not a directory")
    if path.is_dir():
        _refuse_if_locked(path)
    if is_nonempty_dir(path):
        raise RunDirError(f"run dir {path} exists and is not empty; choose another --run-dir")
    check_writable(path, "run dir")


def _nearest_existing(path: Path) -> Path:
    """``path`` itself if it exists, else its nearest ancestor that does."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_writable(path: Path, what: str) -> None:
    """Refuses a directory that cannot be created or written: its nearest existing ancestor must
    be a directory this process may write, on a filesystem mounted read-write.

    Raises:
        RunDirError: naming ``path`` and the ancestor to blame.
    """
    ancestor = _nearest_existing(path)
    if not ancestor.is_dir():
        raise RunDirError(f"{what} {path}: {ancestor} is a file, not a directory")
    # statvfs first: root passes every permission check, but not a read-only mount.
    if os.statvfs(ancestor).f_flag & os.ST_RDONLY:
        raise RunDirError(f"{what} {path}: {ancestor} is on a read-only filesystem")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise RunDirError(f"{what} {path}: {ancestor} is not writable (permission denied)")


def fresh_run_dir(root: Path, name: str) -> Path:
    """``root/name``, or ``root/name-2``, ``-3``... if a run of that name already wrote there."""
    path, k = root / name, 1
    while path.exists() and (not path.is_dir() or is_nonempty_dir(path)):
        k += 1
        path = root / f"{name}-{k}"
    return path


class RunDirLock:
    """An exclusive ``flock`` on ``DIR/.per-dqn.lock``, held while one process writes ``DIR``.

    The kernel drops the lock when its process ends, however it ends (SIGKILL, out of memory, a
    power cut), so a crashed run never leaves a stale lock to clear by hand: the next command
    takes it at once. The file stays after ``release``: deleting it could let a third process lock
    a new file of the same name while a second still holds the old one. It stays empty: a refused
    command finds the holder's pid in ``/proc/locks``.

    Use ``lock_run_dir`` to take one.
    """

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        """Releases the lock (closing the file releases it); a second call does nothing."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunDirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_holder(path: Path) -> int | None:
    """The pid holding ``path``'s writer lock, from ``/proc/locks`` (Linux); None when nobody
    holds it or the system does not say. The lock file itself is never written: a refused
    command must change nothing, not even a pid in it."""
    try:
        info = (path / LOCK_FILE).stat()
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    where = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF"; a waiter's line has "->" second
        if fields[1:4] == ["FLOCK", "ADVISORY", "WRITE"] and fields[5] == where:
            return int(fields[4])
    return None


def _in_use(path: Path, what: str = "run dir") -> RunDirInUse:
    pid = lock_holder(path)
    return RunDirInUse(
        f"{what} {path} is in use by another per-dqn process (pid {pid or 'unknown'}); wait for "
        "it to end or stop it"
    )


def _refuse_if_locked(path: Path, what: str = "run dir") -> None:
    """Raises ``RunDirInUse`` if a live process holds ``path``'s lock; creates, changes nothing."""
    try:
        fd = os.open(path / LOCK_FILE, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _in_use(path, what) from None
    finally:
        os.close(fd)  # also drops the shared lock just taken


def lock_run_dir(
    path: Path, *, fresh: bool = False, create: bool = True, what: str = "run dir"
) -> RunDirLock | None:
    """Takes ``path``'s writer lock without waiting, before anything is written into it.

    Args:
        path: the run dir (or sweep dir).
        fresh: the caller starts a new run: after taking the lock, ``path`` must still be empty
            (another process may have run there since ``check_run_dir``).
        create: create ``path`` and its lock file if absent. False takes the lock only if the
            lock file exists and returns None otherwise (a refused command must create nothing;
            the caller takes it with ``create=True`` once it is about to write).
        what: how messages call ``path``.

    Raises:
        RunDirInUse: another live process holds the lock (the message names its pid).
        RunDirError: ``path`` cannot be created or its lock file cannot be opened (the message
            names the path and the reason: a file in the way, a read-only filesystem, a full
            disk), or, with ``fresh``, ``path`` holds another run.
    """
    lock_path = path / LOCK_FILE
    made = []
    if create:
        check_writable(path, what)
        missing = [p for p in (path, *path.parents) if not p.exists()]
    try:
        if not create:
            try:
                fd = os.open(lock_path, os.O_RDWR)
            except FileNotFoundError:
                return None
        else:
            path.mkdir(parents=True, exist_ok=True)
            made = missing
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        for p in made:  # a refused command leaves nothing behind
            with contextlib.suppress(OSError):
                p.rmdir()
        raise RunDirError(f"{what} {path}: cannot use it: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise _in_use(path, what) from None
    lock = RunDirLock(path, fd)
    if fresh and is_nonempty_dir(path):
        lock.release()
        raise RunDirError(f"run dir {path} exists and is not empty; choose another --run-dir")
    return lock


# --- write failures -------------------------------------------------------------------------------


class WriteError(OSError):
    """A file of a run could not be written (disk full, quota, read-only, I/O error).

    An ``OSError`` whose ``filename`` is the file or checkpoint that failed and whose ``strerror``
    says why, so the command line prints one line naming it.
    """


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Re-raises a failure to write ``path`` as a ``WriteError`` naming ``path``.

    Torch's serializer reports a full disk as ``RuntimeError("[enforce fail at
    inline_container.cc:...] . unexpected pos ...")`` with no errno; that one is translated too,
    with the free space of the filesystem as the reason.
    """
    try:
        yield
    except WriteError:
        raise
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise WriteError(exc.errno, reason, str(path)) from exc
    except RuntimeError as exc:
        text = str(exc)
        if "inline_container" not in text and "PytorchStreamWriter" not in text:
            raise
        raise _torch_write_error(path) from exc


def _torch_write_error(path: Path) -> WriteError:
    """What torch's errno-less write failure most likely was: ENOSPC when the filesystem has no
    byte left, else an I/O error with the free space in the message."""
    try:
        free = shutil.disk_usage(_nearest_existing(path)).free
    except OSError:
        return WriteError(errno.EIO, "torch could not write it", str(path))
    if free == 0:
        return WriteError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    return WriteError(
        errno.EIO, f"torch could not write it ({free:,} bytes free on its filesystem)", str(path)
    )


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Writes ``data`` as indented JSON, replacing ``path`` atomically and durably (the one atomic
    writer, ``checkpoint.write_bytes_atomic``: temp file, fsync, rename, dir fsync).

    Raises:
        WriteError: it could not be written (``path`` is then as it was).
    """
    from per_dqn.checkpoint import write_text_atomic

    with writing(path):
        write_text_atomic(path, json.dumps(data, indent=2) + "\n")


# --- TensorBoard ----------------------------------------------------------------------------------


class ScalarSink(Protocol):
    """Another tracker that receives the scalars TensorBoard does (``tracking.WandbTracker``)."""

    def log(self, values: Mapping[str, float], step: int) -> None:
        """One point per tag at env step ``step``."""


HParamValue = bool | int | float | str


def flatten_config(data: Mapping[str, Any], prefix: str = "") -> dict[str, HParamValue]:
    """A config dump (``Config.model_dump(mode="json")``) as ``{"section.key": value}``, as the
    HParams tab takes it: bools, numbers and strings as they are, lists and None as their JSON
    text (``"[256, 256]"``, ``"null"``)."""
    flat: dict[str, HParamValue] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_config(value, f"{name}."))
        elif isinstance(value, bool | int | float | str):
            flat[name] = value
        else:
            flat[name] = json.dumps(value)
    return flat


class TensorBoardLogger:
    """Writes scalars and text to a TensorBoard event file under ``run_dir``.

    Args:
        run_dir: directory that receives the ``events.out.tfevents.*`` file.
        purge_step: a resumed run's first env step that may be logged again: readers
            (TensorBoard's Python loader and its Rust data server alike) drop the points at or
            after it that earlier event files in ``run_dir`` hold, so a curve continues from the
            checkpoint without duplicated points.
        mirror: receives every scalar written, at the same step (a Weights & Biases run).
    """

    def __init__(
        self, run_dir: Path, purge_step: int | None = None, mirror: ScalarSink | None = None
    ) -> None:
        # Imported here: it pulls in tensorboard, which a config check never needs.
        from torch.utils.tensorboard import SummaryWriter

        self.mirror = mirror

        if purge_step is not None:
            _wait_for_a_later_event_file_name(run_dir)
        _silence_event_writer_threads()
        self.path = run_dir / "events.out.tfevents.*"  # until the writer names its file
        with writing(self.path):
            self._writer = SummaryWriter(log_dir=str(run_dir), purge_step=purge_step)
        name = getattr(self._writer.file_writer.event_writer, "_file_name", None)
        if name is not None:
            self.path = Path(name)

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        """One point per tag at env step ``step``; NaN values are skipped.

        Raises:
            WriteError: the event file could not be written (here or, earlier, in the writer's
                background thread, whose failure surfaces at the next call).
        """
        kept = {tag: value for tag, value in values.items() if not math.isnan(value)}
        with writing(self.path):
            for tag, value in kept.items():
                self._writer.add_scalar(tag, value, step)
        if self.mirror is not None and kept:
            self.mirror.log(kept, step)

    def hparams(self, hparams: Mapping[str, HParamValue], start_time: float) -> None:
        """The HParams plugin's experiment and session-start records, in this event file (not a
        subfolder, as ``SummaryWriter.add_hparams`` would make): ``hparams`` are the session's
        values, ``HPARAMS_METRICS`` its metrics (scalar tags written at the end of the run).

        TensorBoard keeps the first record of a tag in a run dir, so a resumed run does not write
        them again.
        """
        from tensorboard.plugins.hparams import summary_v2 as hp

        experiment = hp.hparams_config_pb(
            hparams=[hp.HParam(name) for name in hparams],
            metrics=[hp.Metric(tag, display_name=name) for tag, name in HPARAMS_METRICS],
            time_created_secs=start_time,
        )
        session = hp.hparams_pb(dict(hparams), start_time_secs=start_time)
        with writing(self.path):
            self._writer.file_writer.add_summary(experiment)
            self._writer.file_writer.add_summary(session)

    def custom_scalars(self, layout: Mapping[str, Any]) -> None:
        """The Custom Scalars tab's layout: ``{category: {chart title: ["Multiline", [tag
        regexes]]}}``."""
        with writing(self.path):
            self._writer.add_custom_scalars(dict(layout))

    def text(self, tag: str, text: str, step: int = 0) -> None:
        """A text entry (TensorBoard renders it as Markdown)."""
        with writing(self.path):
            self._writer.add_text(tag, text, step)

    def flush(self) -> None:
        """Writes every pending event to disk."""
        with writing(self.path):
            self._writer.flush()

    def close(self) -> None:
        """Flushes and closes the event file."""
        with writing(self.path):
            self._writer.close()


_previous_excepthook = threading.excepthook


def _silence_event_writer_threads() -> None:
    """Keeps a failed write in TensorBoard's writer thread from printing a traceback.

    The thread stores its exception and ``_AsyncWriter`` raises it in the main thread at the next
    write, flush or close, where ``TensorBoardLogger`` turns it into a ``WriteError``; the
    traceback ``threading`` would print as well is noise on top of that one-line error.
    """
    if getattr(threading.excepthook, "_per_dqn", False):
        return
    from tensorboard.summary.writer.event_file_writer import _AsyncWriterThread

    def hook(args: threading.ExceptHookArgs) -> None:
        if isinstance(args.thread, _AsyncWriterThread) and isinstance(args.exc_value, OSError):
            return
        _previous_excepthook(args)

    hook._per_dqn = True  # type: ignore[attr-defined]
    threading.excepthook = hook


def _wait_for_a_later_event_file_name(run_dir: Path) -> None:
    """Sleeps until a new event file's name sorts after every existing one in ``run_dir``.

    Readers load a dir's event files in name order, and a name is
    ``events.out.tfevents.<unix seconds>.<host>.<pid>.<n>``: within one second the pid (compared as
    text) could put a resumed run's file before the file it continues, and the purge would then
    hit the wrong points. A resume costs at most one second here.
    """
    newest = 0
    for path in run_dir.glob("events.out.tfevents.*"):
        stamp = path.name.split(".")[3]
        if stamp.isdigit():
            newest = max(newest, int(stamp))
    while time.time() < newest + 1:
        time.sleep(0.05)


def display_name(run_dir: Path) -> str:
    """A run's name for trackers: its dir's name, or, for a run of a sweep (a dir up to four
    levels above holds ``sweep.json``), its path from the sweep dir's parent:
    ``ablate__MinAtar-Breakout-v1__minatar/proportional/alpha=0.4/s0``."""
    run_dir = Path(os.path.abspath(run_dir))
    for parent in list(run_dir.parents)[:4]:
        if (parent / SWEEP_FILE).is_file():
            return run_dir.relative_to(parent.parent).as_posix()
    return run_dir.name


def normalized_auc(curve: list[tuple[int, float]] | tuple[tuple[int, float], ...]) -> float:
    """The area under an evaluation curve divided by the env steps it spans: the curve's mean
    return over training, in return units, so runs of different budgets compare.

    ``AUC = sum_k (s_{k+1} - s_k) * (v_k + v_{k+1}) / 2 / (s_last - s_first)`` (trapezoids between
    the evaluated points, sorted by step; no value is assumed before the first evaluation). A
    curve of one point is that point's value.

    Args:
        curve: ``(env_step, eval return mean)`` points, e.g. from ``sweeps.runs.read_curve``.

    Raises:
        ValueError: an empty curve, two points at one step, or a value that is not finite.
    """
    if not curve:
        raise ValueError("normalized_auc needs at least one evaluation point, got none")
    points = sorted((int(s), float(v)) for s, v in curve)
    steps = np.array([s for s, _ in points], dtype=np.float64)
    values = np.array([v for _, v in points], dtype=np.float64)
    if not np.isfinite(values).all():
        raise ValueError(f"normalized_auc: every value must be finite, got {values.tolist()}")
    if len(points) == 1:
        return float(values[0])
    widths = np.diff(steps)
    if (widths == 0).any():
        raise ValueError(f"normalized_auc: two points at one env step in {steps.tolist()}")
    area = float(np.sum(widths * (values[:-1] + values[1:]) / 2.0))
    return area / float(steps[-1] - steps[0])


def config_as_markdown(config_yaml: str) -> str:
    """The resolved config as a Markdown code block (indented, so TensorBoard keeps the layout)."""
    return "\n".join("    " + line for line in config_yaml.splitlines())


# --- accumulation ---------------------------------------------------------------------------------


class MeanAccumulator:
    """Running sums of named values, read out as means and reset."""

    def __init__(self) -> None:
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def add(self, values: Mapping[str, float]) -> None:
        """Adds one observation of each named value."""
        for name, value in values.items():
            self._sums[name] = self._sums.get(name, 0.0) + value
            self._counts[name] = self._counts.get(name, 0) + 1

    def pop_means(self) -> dict[str, float]:
        """Mean of each value since the last call; clears the sums."""
        means = {name: s / self._counts[name] for name, s in self._sums.items()}
        self._sums.clear()
        self._counts.clear()
        return means

    def state_dict(self) -> dict[str, Any]:
        """The running sums and counts (copies), for a checkpoint."""
        return {"sums": dict(self._sums), "counts": dict(self._counts)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict()`` output."""
        self._sums, self._counts = dict(state["sums"]), dict(state["counts"])


class RunRecord:
    """What ``summary.json`` reports about the whole run, kept in the loop's checkpointed state so
    that a resumed run reports what the uninterrupted one would: the evaluation curve (for the
    AUC) and the running sum of the logged ``per/is_weight_mean`` points."""

    def __init__(self) -> None:
        self.eval_curve: list[tuple[int, float]] = []
        self.is_weight_mean_sum = 0.0
        self.is_weight_mean_logs = 0

    def add_eval(self, env_steps: int, return_mean: float) -> None:
        """An evaluation (periodic or final) at ``env_steps``."""
        self.eval_curve.append((int(env_steps), float(return_mean)))

    def add_log(self, values: Mapping[str, float]) -> None:
        """A log point's scalars, by tag."""
        value = values.get(PER_IS_WEIGHT_MEAN)
        if value is not None and not math.isnan(value):
            self.is_weight_mean_sum += float(value)
            self.is_weight_mean_logs += 1

    def auc(self) -> float | None:
        """``normalized_auc`` of the evaluation curve; None before the first evaluation."""
        return normalized_auc(self.eval_curve) if self.eval_curve else None

    def is_weight_mean(self) -> float | None:
        """The mean of the logged ``per/is_weight_mean`` points; None before the first."""
        if not self.is_weight_mean_logs:
            return None
        return self.is_weight_mean_sum / self.is_weight_mean_logs

    def state_dict(self) -> dict[str, Any]:
        """JSON values (floats round-trip exactly), for a checkpoint."""
        return {
            "eval_steps": [step for step, _ in self.eval_curve],
            "eval_returns": [value for _, value in self.eval_curve],
            "is_weight_mean_sum": self.is_weight_mean_sum,
            "is_weight_mean_logs": self.is_weight_mean_logs,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores ``state_dict()`` output.

        Raises:
            ValueError: a state that is not ``state_dict()``'s shape.
        """
        try:
            steps, returns = list(state["eval_steps"]), list(state["eval_returns"])
            total, logs = float(state["is_weight_mean_sum"]), int(state["is_weight_mean_logs"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"its run record does not fit ({exc!r})") from None
        if len(steps) != len(returns):
            raise ValueError(
                f"its run record has {len(steps)} evaluation steps but {len(returns)} returns"
            )
        self.eval_curve = [(int(s), float(v)) for s, v in zip(steps, returns, strict=True)]
        self.is_weight_mean_sum, self.is_weight_mean_logs = total, logs


class ReplayHealth:
    """Per-slot replay history for the PER health panel, kept outside the memory.

    Arrays are indexed by the slots the memory's ``add``/``add_batch`` return; a slot overwritten
    by a new transition starts a new history.

    Args:
        capacity: the memory's capacity.
    """

    def __init__(self, capacity: int) -> None:
        self.added_at = np.zeros(capacity, dtype=np.int64)
        self.priority_set_at = np.zeros(capacity, dtype=np.int64)
        self.replay_count = np.zeros(capacity, dtype=np.int64)
        self._acc = MeanAccumulator()

    def record_add(self, slots: np.ndarray | int, env_step: int) -> None:
        """New transitions at ``slots``: they enter with a priority set now and no replays."""
        self.added_at[slots] = env_step
        self.priority_set_at[slots] = env_step
        self.replay_count[slots] = 0

    def record_sample(
        self,
        indices: np.ndarray,
        weights: np.ndarray,
        env_step: int,
        priorities: np.ndarray | None = None,
    ) -> None:
        """Accumulates one batch's statistics, then counts its transitions as replayed.

        Args:
            indices: the batch's slots.
            weights: its IS weights.
            env_step: the current env step.
            priorities: the sampled transitions' priorities (prioritized memories only).
        """
        w = weights.astype(np.float64)
        w_sum = w.sum()
        values = {
            PER_IS_WEIGHT_MEAN: w_sum / w.size,
            PER_IS_WEIGHT_MIN: w.min(),
            PER_IS_WEIGHT_ESS: w_sum * w_sum / (w @ w) / w.size,
            PER_NEVER_REPLAYED: np.count_nonzero(self.replay_count[indices] == 0) / indices.size,
            PER_SAMPLE_AGE: env_step - self.added_at[indices].mean(),
            PER_PRIORITY_AGE: env_step - self.priority_set_at[indices].mean(),
        }
        if priorities is not None:
            values[PER_SAMPLED_PRIORITY] = priorities.mean()
        self._acc.add(values)
        # A slot drawn twice in one batch counts once: only "never vs. ever replayed" is reported.
        self.replay_count[indices] += 1

    def record_priority_update(self, indices: np.ndarray, env_step: int) -> None:
        """The priorities at ``indices`` were set from fresh TD errors at ``env_step``."""
        self.priority_set_at[indices] = env_step

    def pop_means(self) -> dict[str, float]:
        """Means of the batch statistics since the last call."""
        return {tag: float(v) for tag, v in self._acc.pop_means().items()}

    def state_dict(self) -> dict[str, Any]:
        """The per-slot arrays and the pending batch statistics (copies), for a checkpoint."""
        return {
            "added_at": self.added_at.copy(),
            "priority_set_at": self.priority_set_at.copy(),
            "replay_count": self.replay_count.copy(),
            "acc": self._acc.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores ``state_dict()`` output.

        Raises:
            ValueError: the arrays are for another capacity.
        """
        for name in ("added_at", "priority_set_at", "replay_count"):
            have, got = getattr(self, name), np.asarray(state[name])
            if got.shape != have.shape:
                raise ValueError(
                    f"replay health `{name}` must have shape {list(have.shape)}, "
                    f"got {list(got.shape)}"
                )
            have[...] = got
        self._acc.load_state_dict(state["acc"])


# --- console --------------------------------------------------------------------------------------


# Seconds between two plain progress lines when stderr is not a terminal.
PLAIN_PROGRESS_INTERVAL_S = 30.0


def format_duration(seconds: float) -> str:
    """``H:MM:SS`` (hours unbounded: a 50M-step Atari run takes days), ``-:--:--`` if unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "-:--:--"
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def format_steps(steps: int) -> str:
    """``12,500`` below a million, ``12.50M`` from there (a 50M budget must fit in 80 columns)."""
    return f"{steps:,}" if steps < 1_000_000 else f"{steps / 1e6:.2f}M"


def _number(value: float, spec: str) -> str:
    return "-" if not math.isfinite(value) else format(value, spec)


class ConsoleProgress:
    """What a person watching a run sees: progress, speed, learning, and an evaluation underway.

    On a terminal, a two-line rich display that fits in 80 columns::

        train ━━━━━━━━━━━━━━━━━         12,500/50,000 steps  1,234 SPS  elapsed 0:00:10  ETA 0:00:30
        return 45.2  last eval 120.0  loss 0.0123  eps 0.050  beta 0.550

    (the bar takes what the text leaves). Where stderr is not a terminal (nohup, Slurm, CI, a
    pipe) a redrawn bar would print nothing until the end, so one plain line is printed every
    ``plain_interval_s`` seconds instead, with the same fields::

        progress: 12,500/50,000 env steps (25.0%)  1,234 SPS  return 45.2  last eval 120.0  ...

    The ETA is the steps left at the SPS shown (the loop's speed over its last log interval);
    it leaves out the final evaluation, which ``evaluating`` shows while it runs.

    Args:
        total_env_steps: the run's budget.
        console: where to draw (stderr by default, so stdout stays clean for the summary).
        enabled: False draws nothing (tests, ``--quiet``); ``warn`` still prints.
        plain_interval_s: seconds between plain lines when ``console`` is not a terminal.
    """

    def __init__(
        self,
        total_env_steps: int,
        console: Console | None = None,
        enabled: bool = True,
        plain_interval_s: float = PLAIN_PROGRESS_INTERVAL_S,
    ) -> None:
        self.console = console or Console(stderr=True)
        self.total = total_env_steps
        self.enabled = enabled
        self.plain = not self.console.is_terminal
        self.plain_interval_s = plain_interval_s
        self.env_steps = 0
        self.sps = self.ret = self.loss = self.last_eval = math.nan
        self.eps = self.beta = math.nan
        self.eval_state: tuple[int, int, int | None] | None = None  # done, total, agent steps
        self._started = time.monotonic()
        self._next_line = self._started + plain_interval_s
        self._lines = 0
        self._live: Any = None

    def __enter__(self) -> ConsoleProgress:
        self._started = time.monotonic()
        self._next_line = self._started + self.plain_interval_s
        if self.enabled and not self.plain:
            from rich.live import Live

            self._live = Live(self, console=self.console, refresh_per_second=4)
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        elif self.enabled and self.plain and self._lines:
            self._print_line()  # where the run ended, after the lines that came before

    def update(
        self,
        env_steps: int,
        sps: float,
        ret: float,
        eps: float,
        beta: float,
        *,
        loss: float = math.nan,
        last_eval: float = math.nan,
    ) -> None:
        """Shows the training state at ``env_steps`` (and ends an ``evaluating`` display).

        Args:
            env_steps: env steps done.
            sps: env steps per second lately.
            ret: mean return of the recent training episodes (NaN: none finished yet).
            eps: exploration epsilon.
            beta: PER's importance-sampling exponent.
            loss: the latest TD loss (NaN: no update yet).
            last_eval: mean return of the latest evaluation (NaN: none yet).
        """
        self.env_steps, self.sps, self.ret, self.eps, self.beta = env_steps, sps, ret, eps, beta
        self.loss, self.last_eval = loss, last_eval
        self.eval_state = None
        self._tick()

    def evaluating(
        self, episodes_done: int, episodes_total: int, agent_steps: int | None = None
    ) -> None:
        """Shows an evaluation underway: ``episodes_done`` of ``episodes_total`` finished, and
        the agent steps it has taken so far. The next ``update`` returns to training."""
        self.eval_state = (episodes_done, episodes_total, agent_steps)
        self._tick()

    def warn(self, line: str) -> None:
        """Prints ``warning: line`` above the display (also when the display is disabled)."""
        self.console.print(f"warning: {line}", markup=False, highlight=False, soft_wrap=True)

    def _tick(self) -> None:
        if not self.enabled or not self.plain:
            return  # a live display redraws itself from these fields
        now = time.monotonic()
        if now >= self._next_line:
            self._next_line = now + self.plain_interval_s
            self._print_line()

    def _print_line(self) -> None:
        self._lines += 1
        self.console.print(
            f"progress: {self.plain_line()}", markup=False, highlight=False, soft_wrap=True
        )

    # --- what is shown ----------------------------------------------------------------------------

    def _elapsed(self) -> str:
        return format_duration(time.monotonic() - self._started)

    def _eta(self) -> str:
        left = self.total - self.env_steps
        if left <= 0:
            return format_duration(0)
        return format_duration(left / self.sps) if self.sps > 0 else format_duration(math.nan)

    def _eval_text(self) -> str:
        assert self.eval_state is not None
        done, total, steps = self.eval_state
        text = f"evaluating: {done}/{total} episodes"
        return text if steps is None else f"{text}, {steps:,} agent steps"

    def _learning_text(self) -> str:
        return (
            f"return {_number(self.ret, '.1f')}  last eval {_number(self.last_eval, '.1f')}  "
            f"loss {_number(self.loss, '.3g')}  eps {_number(self.eps, '.3f')}  "
            f"beta {_number(self.beta, '.3f')}"
        )

    def plain_line(self) -> str:
        """The plain progress line (without its ``progress:`` prefix)."""
        share = 100.0 * self.env_steps / self.total if self.total else 100.0
        head = f"{self.env_steps:,}/{self.total:,} env steps ({share:.1f}%)"
        times = f"elapsed {self._elapsed()}  ETA {self._eta()}"
        if self.eval_state is not None:
            return f"{head}  {self._eval_text()}  {times}"
        return f"{head}  {_number(self.sps, ',.0f')} SPS  {self._learning_text()}  {times}"

    def __rich__(self) -> Any:
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.text import Text

        label = "eval " if self.eval_state is not None else "train"
        steps = f"{format_steps(self.env_steps)}/{format_steps(self.total)} steps"
        right = (
            f"{steps}  {_number(self.sps, ',.0f')} SPS  elapsed {self._elapsed()}  "
            f"ETA {self._eta()}"
        )
        top = Table.grid(padding=(0, 1), expand=True)
        top.add_column(no_wrap=True)
        top.add_column(ratio=1)
        top.add_column(no_wrap=True)
        top.add_row(
            Text(label, style="bold"),
            ProgressBar(total=max(self.total, 1), completed=min(self.env_steps, self.total)),
            Text(right),
        )
        second = self._eval_text() if self.eval_state is not None else self._learning_text()
        return Group(top, Text(second, no_wrap=True, overflow="ellipsis"))


def print_summary(summary: Mapping[str, Any], console: Console | None = None) -> None:
    """The end-of-run table: where the run went and how it ended."""
    table = Table(show_header=False, box=None, pad_edge=False)
    final = summary.get("final_eval_return_mean")
    rows = [
        ("run dir", str(summary["run_dir"])),
        ("replay", str(summary["replay"])),
        ("seed", str(summary["seed"])),
        ("env steps", f"{summary['env_steps']:,}"),
        ("update steps", f"{summary['update_steps']:,}"),
        ("wall time", f"{summary['wall_seconds']:.1f} s ({summary['sps']:,.0f} SPS)"),
        (
            "final eval return",
            "not run (interrupted)"
            if final is None
            else f"{final:.1f} ± {summary['final_eval_return_std']:.1f} "
            f"over {summary['final_eval_episodes']} episodes",
        ),
    ]
    for key, value in rows:
        table.add_row(f"[bold]{key}", value)
    (console or Console()).print(table)
