"""A training run's checkpoint: its parts and their files, written from and read back into the
run's components' states, and whose run it is.

Each part is some component's ``state_dict()``, stored by ``rundir.checkpoint`` (which knows no
component) as a ``NAME.pt`` or a tree of arrays::

    checkpoints/step_000050000/
        manifest.json   (rundir.checkpoint) with the parts, the run's id and the config's name
        agent.pt        the agent's state_dict: networks, optimiser state, update_steps
        loop.npz        the loop's arrays (LoopState): observations, torch's RNG state, n-step
                        windows, episode accumulators, PER health arrays
        loop.json       the loop's other values: counters, numpy bit-generator states, and
                        where each array of loop.npz sits
        envs.npz/.json  the envs' state (physics, time-limit counters, RNGs), where it can be
                        captured (CartPole yes, ale-py's emulators no)
        memory.npz      the replay memory's arrays, priorities included (uncompressed npz), of
                        the transitions it holds, not its capacity; streamed from the
                        memory's own arrays, never copied first
        memory.json     the memory's other values: cursor, size, RNG state, max priority
        config.yaml     the resolved config this state belongs to

A checkpoint knows its run: the manifest of one written since run ids carries the run's id
(``run_id``, from the run dir's ``run.json``, see ``rundir.dirs``), and ``check_owner`` refuses
one whose id is not its run dir's: a step dir copied in from another run. A checkpoint without one
(formats 2 and 3 written before run ids) is legacy and unchecked.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from per_dqn.rundir import dirs as rundir
from per_dqn.rundir.arrays import save_tree, tree_nbytes
from per_dqn.rundir.checkpoint import (
    CHECKPOINTS_DIR,
    PROGRESS_CHUNK_BYTES,
    RUN_ID_KEY,
    CheckpointError,
    load_parts,
    write_checkpoint,
)
from per_dqn.rundir.weights import load_weights

AGENT_FILE = "agent.pt"
LOOP_ARRAYS_FILE = "loop.npz"
LOOP_META_FILE = "loop.json"
ENVS_ARRAYS_FILE = "envs.npz"
ENVS_META_FILE = "envs.json"
MEMORY_ARRAYS_FILE = "memory.npz"
MEMORY_META_FILE = "memory.json"
CONFIG_FILE = "config.yaml"


# The files a training checkpoint may hold (``load_run_checkpoint`` refuses any other name).
TRAINING_FILES = frozenset(
    {AGENT_FILE, LOOP_ARRAYS_FILE, LOOP_META_FILE, ENVS_ARRAYS_FILE, ENVS_META_FILE,
     MEMORY_ARRAYS_FILE, MEMORY_META_FILE, CONFIG_FILE}
)  # fmt: skip


class _Meter:
    """Counts a checkpoint's bytes written and hashed, and tells ``report(done, total)`` every
    ``PROGRESS_CHUNK_BYTES`` or so (``total``: the arrays' bytes twice, once written, once hashed;
    the weights' once, hashed)."""

    def __init__(self, total: int, report: Callable[[int, int], None]) -> None:
        self.total, self.done, self._told, self._report = max(total, 1), 0, 0, report

    def add(self, n: int) -> None:
        self.done = min(self.done + n, self.total)
        if self.done - self._told >= PROGRESS_CHUNK_BYTES or self._told < self.done == self.total:
            self._told = self.done
            self._report(self.done, self.total)


def save_run_checkpoint(
    root: Path,
    *,
    env_steps: int,
    weights: Mapping[str, Any],
    trees: Mapping[str, Any],
    config_yaml: str,
    keep_last: int,
    meta: Mapping[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Writes a training checkpoint (see the module docstring for its files).

    The caller hands it named parts, each some component's ``state_dict()``, and each becomes
    files named after it.

    Args:
        root: the run's checkpoints dir.
        env_steps: the loop's env step.
        weights: parts holding torch tensors (the agent), each written to ``NAME.pt`` with
            ``torch.save`` and read back with ``torch.load(weights_only=True)``.
        trees: parts that are trees of arrays and JSON values (the loop, the envs, the replay
            memory), each written to ``NAME.npz`` + ``NAME.json`` (see ``save_tree``).
        config_yaml: the resolved config.
        keep_last: checkpoints to keep.
        meta: extra manifest values.
        progress: told ``(done, total)`` bytes as the trees' arrays are written and the files
            hashed (``total``: the trees' ``tree_nbytes`` twice, the weights' once), every
            16 MiB or so.
    """
    import torch

    total = 2 * tree_nbytes(trees) + tree_nbytes(weights)
    count = None if progress is None else _Meter(total, progress).add

    def write(directory: Path) -> None:
        for name, state in weights.items():
            torch.save(state, directory / f"{name}.pt")
        for name, tree in trees.items():
            save_tree(directory / f"{name}.npz", directory / f"{name}.json", tree, count)
        (directory / CONFIG_FILE).write_text(config_yaml, encoding="utf-8")

    meta = {"parts": sorted([*weights, *trees]), **(meta or {})}
    return write_checkpoint(root, env_steps, write, keep_last=keep_last, meta=meta, progress=count)


@dataclass(frozen=True)
class RunCheckpoint:
    """A training checkpoint, verified and loaded.

    Attributes:
        path: its directory.
        manifest: its manifest (``format``, ``env_steps``, ``final``, ``config_name``, ...).
        parts: each part's tree by name (``agent``, ``loop``, ``envs``, ``memory``), tensors on
            the requested device; a part the checkpoint leaves out (``memory`` under
            ``checkpoint.replay: false``) is absent.
        config_yaml: the config the state belongs to.
    """

    path: Path
    manifest: dict[str, Any]
    parts: dict[str, Any]
    config_yaml: str

    @property
    def env_steps(self) -> int:
        """The env step the state belongs to."""
        return int(self.manifest["env_steps"])

    @property
    def format(self) -> int:
        """The format version it was written in."""
        return int(self.manifest["format"])


def load_run_checkpoint(path: Path, device: Any = "cpu") -> RunCheckpoint:
    """Verifies every file of a training checkpoint against its manifest and loads each part,
    each file read through the handle that was verified (``rundir.checkpoint.load_parts``); the
    tensors go to ``device``.

    Raises:
        CheckpointError: it fails its checks, lists a file that is not a training checkpoint's,
            lacks one it must hold (the agent, the loop, the config), or cannot be read.
    """
    required = (AGENT_FILE, LOOP_ARRAYS_FILE, LOOP_META_FILE, CONFIG_FILE)
    weights = functools.partial(load_weights, device=device)
    manifest, parts, blobs = load_parts(path, TRAINING_FILES, required, weights)
    try:
        config_yaml = blobs[CONFIG_FILE].decode("utf-8")
    except UnicodeDecodeError as exc:
        problem = f"{path}: cannot load {CONFIG_FILE} (not UTF-8: {exc.reason})"
        raise CheckpointError(problem) from None
    return RunCheckpoint(path, manifest, parts, config_yaml)


def run_dir_of(path: Path) -> Path | None:
    """The run dir a checkpoint dir sits in (``RUN_DIR/checkpoints/step_*``), or None for one
    that sits elsewhere."""
    path = Path(path)
    return path.parent.parent if path.parent.name == CHECKPOINTS_DIR else None


def check_owner(path: Path, manifest: Mapping[str, Any], run_dir: Path | None) -> None:
    """Refuses a checkpoint of another run than ``run_dir``'s (a step dir copied in from run B
    into run A): its manifest's run id must be the one ``run_dir``'s ``run.json`` holds.

    A checkpoint without a run id is legacy (written before run ids) and is read unchecked only
    where that is what it can be: in a run dir without ``run.json`` (one from before run ids),
    or in one whose ``run.json`` records its id-less checkpoints (``rundir.LEGACY_KEY``: the run
    dir got its id when it was resumed) at this step or below. Elsewhere, in a run dir that has
    an id, it is refused (issue 43: a checkpoint stripped of its run id and re-signed was read
    unchecked). A checkpoint outside any run dir (``run_dir`` None: a checkpoint dir evaluated
    on its own) is not checked.

    Raises:
        CheckpointError: the ids differ, the checkpoint has one and ``run_dir`` none, it has none
            and ``run_dir`` one that does not record it as legacy, or ``run_dir``'s ``run.json``
            cannot be read; one line naming both.
    """
    if run_dir is None:
        return
    try:
        ours, legacy = rundir.read_run_record(run_dir)
    except rundir.RunDirError as exc:
        raise CheckpointError(str(exc)) from None
    theirs = manifest.get(RUN_ID_KEY)
    if theirs is None:
        step = manifest.get("env_steps")
        if ours is not None and (legacy is None or not isinstance(step, int) or step > legacy):
            raise CheckpointError(
                f"{path}: a checkpoint without a run id, but its run dir {run_dir} is run {ours}, "
                "whose checkpoints carry it; refused: a checkpoint stripped of its run id is not "
                "this run's"
            )
        return
    if theirs != ours:
        mine = f"is run {ours}" if ours is not None else f"records none (no {rundir.RUN_FILE})"
        raise CheckpointError(
            f"{path}: a checkpoint of run {theirs}, but its run dir {run_dir} {mine}; refused: "
            "a checkpoint copied from another run is not this run's"
        )
