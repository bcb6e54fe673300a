"""Training checkpoints on disk: atomic writes, checksummed manifests, the last K kept, and a
fallback past a damaged checkpoint to the one before it.

A run's checkpoints live in ``RUN_DIR/checkpoints``, one directory each::

    checkpoints/
        step_000050000/
            manifest.json   written last: format, env step, and every file's size and SHA-256
            agent.pt        online and target networks, optimiser state, update_steps
            loop.pt         the training loop: counters, RNG states, n-step windows, env states,
                            episode accumulators, PER health arrays
            memory.npz      the replay memory's arrays, priorities included (uncompressed npz)
            memory.json     the memory's other values: cursor, size, RNG state, max priority
            config.yaml     the resolved config this state belongs to
        .tmp-step_000060000-4242/   a write in progress (or one whose process died): never read

Writing (``write_checkpoint``): the files go into a temp dir and are fsynced, the manifest is
written and fsynced last, the temp dir is fsynced and renamed to its final name, and the parent is
fsynced. A directory under a final name therefore holds a complete checkpoint, and a process killed
at any moment leaves every earlier checkpoint as it was. Only then are old checkpoints deleted,
down to the newest ``keep_last``.

Reading (``find_latest``): checkpoints are tried newest first. One whose manifest is missing or
unreadable, or one of whose files is missing, has another size or fails its SHA-256, is skipped
with a one-line warning, and the previous one is used.

``loop.pt`` is a pickle (it holds the environments' Python objects, RNGs included): the checksum
guards against damage, not against a malicious file, so resume only from checkpoints you made.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMAT_VERSION = 1
CHECKPOINTS_DIR = "checkpoints"
MANIFEST_FILE = "manifest.json"
AGENT_FILE = "agent.pt"
LOOP_FILE = "loop.pt"
MEMORY_ARRAYS_FILE = "memory.npz"
MEMORY_META_FILE = "memory.json"
CONFIG_FILE = "config.yaml"

_NAME = re.compile(r"step_(\d+)")
_TMP_PREFIX = ".tmp-"
# Marks where an array sat in a JSON tree whose arrays went to the npz.
_ARRAY_KEY = "__array__"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message is one line naming it and the problem."""


def checkpoints_dir(run_dir: Path) -> Path:
    """Where a run's checkpoints live."""
    return Path(run_dir) / CHECKPOINTS_DIR


def checkpoint_name(env_steps: int) -> str:
    """``step_000050000``: zero-padded, so names sort like the steps up to 10^9 env steps."""
    return f"step_{env_steps:09d}"


def list_checkpoints(root: Path) -> list[Path]:
    """The checkpoint dirs under their final names in ``root``, oldest (fewest env steps) first.

    A dir under a final name was complete when it was renamed; whether it is still intact is
    ``verify_checkpoint``'s question.
    """
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        match = _NAME.fullmatch(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


# --- writing --------------------------------------------------------------------------------------


def _fsync_path(path: Path) -> None:
    """Flushes a file's or a directory's data and metadata to the device."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    """Replaces ``path`` with ``text`` so that a crash leaves either the old or the new file."""
    tmp = path.with_name(f"{_TMP_PREFIX}{path.name}-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, path)
    _fsync_path(path.parent)


def write_checkpoint(
    root: Path,
    env_steps: int,
    write_files: Callable[[Path], None],
    *,
    keep_last: int,
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Writes one checkpoint atomically, then deletes all but the newest ``keep_last``.

    Args:
        root: the checkpoints dir (created if absent).
        env_steps: the env step the state belongs to; names the checkpoint.
        write_files: writes the checkpoint's files into the directory it is given (flat, no
            subdirectories); everything it writes is checksummed.
        keep_last: checkpoints to keep, this one included.
        meta: extra JSON values for the manifest.

    Returns:
        The checkpoint's final directory.

    Checkpoints of more env steps than this one are deleted too: resuming always starts from the
    newest usable checkpoint, so a later one still on disk is one that failed its checks (and a
    damaged checkpoint must not count among the ``keep_last`` and push out a good one). A damaged
    checkpoint of the same step is replaced.

    Raises:
        ValueError: ``keep_last`` < 1 or ``env_steps`` < 0.
    """
    if keep_last < 1:
        raise ValueError(f"`keep_last` must be >= 1, got {keep_last}")
    if env_steps < 0:
        raise ValueError(f"`env_steps` must be >= 0, got {env_steps}")
    root.mkdir(parents=True, exist_ok=True)
    _remove_temp_dirs(root)
    name = checkpoint_name(env_steps)
    final = root / name
    tmp = root / f"{_TMP_PREFIX}{name}-{os.getpid()}"
    tmp.mkdir()
    try:
        write_files(tmp)
        files = {}
        for path in sorted(tmp.iterdir()):
            _fsync_path(path)
            files[path.name] = {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
        manifest = {
            "format": FORMAT_VERSION,
            "env_steps": env_steps,
            **(meta or {}),
            "files": files,
        }
        with open(tmp / MANIFEST_FILE, "w", encoding="utf-8") as file:
            file.write(json.dumps(manifest, indent=2) + "\n")
            file.flush()
            os.fsync(file.fileno())
        _fsync_path(tmp)
        if final.exists():
            # A damaged checkpoint of this step that resuming skipped. Killed between the two
            # renames, neither copy has a final name and the older checkpoints are used.
            stale = root / f"{_TMP_PREFIX}replaced-{name}-{os.getpid()}"
            os.rename(final, stale)
            os.rename(tmp, final)
            shutil.rmtree(stale)
        else:
            os.rename(tmp, final)
        _fsync_path(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    existing = list_checkpoints(root)
    kept = [path for path in existing if _step(path) <= env_steps][-keep_last:]
    for path in existing:
        if path not in kept:
            shutil.rmtree(path)
    return final


def _step(path: Path) -> int:
    match = _NAME.fullmatch(path.name)
    assert match is not None  # only called on list_checkpoints' output
    return int(match.group(1))


def _remove_temp_dirs(root: Path) -> None:
    """Deletes what killed writers left behind (a run dir has one writer at a time)."""
    for path in root.iterdir():
        if path.name.startswith(_TMP_PREFIX):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


# --- reading --------------------------------------------------------------------------------------


def read_manifest(path: Path) -> dict[str, Any]:
    """The checkpoint's manifest, checked for shape but not against the files.

    Raises:
        CheckpointError: no manifest, or one that is not a checkpoint manifest of this format.
    """
    try:
        manifest = json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no {MANIFEST_FILE}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        reason = " ".join(str(exc).split())
        raise CheckpointError(f"{path}: unreadable {MANIFEST_FILE} ({reason})") from None
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT_VERSION
        or not isinstance(manifest.get("files"), dict)
        or not isinstance(manifest.get("env_steps"), int)
    ):
        raise CheckpointError(
            f"{path}: {MANIFEST_FILE} is not a format-{FORMAT_VERSION} checkpoint manifest"
        )
    return manifest


def verify_checkpoint(path: Path, files: Iterable[str] | None = None) -> dict[str, Any]:
    """Checks a checkpoint's files against its manifest and returns the manifest.

    Args:
        path: the checkpoint dir.
        files: check only these (each must be listed); None checks every listed file.

    Raises:
        CheckpointError: a missing or unreadable manifest, or a file that is missing, unlisted,
            of another size than listed (truncated) or whose SHA-256 differs (corrupted).
    """
    manifest = read_manifest(path)
    listed = manifest["files"]
    for name in listed if files is None else files:
        entry = listed.get(name)
        if not isinstance(entry, dict):
            raise CheckpointError(f"{path}: {name} is not listed in its {MANIFEST_FILE}")
        try:
            size = (path / name).stat().st_size
        except FileNotFoundError:
            raise CheckpointError(f"{path}: {name} is missing") from None
        if size != entry.get("bytes"):
            raise CheckpointError(
                f"{path}: {name} has {size:,} bytes, its manifest says {entry.get('bytes'):,}"
            )
        if sha256_file(path / name) != entry.get("sha256"):
            raise CheckpointError(f"{path}: {name} fails its SHA-256 check")
    return manifest


@dataclass(frozen=True)
class Found:
    """The outcome of ``find_latest``.

    Attributes:
        path: the newest checkpoint that passed its checks, or None.
        manifest: its manifest (empty when ``path`` is None).
        warnings: one line per newer checkpoint that failed, naming it, the problem and what is
            used instead.
        candidates: how many checkpoints were on disk.
    """

    path: Path | None
    manifest: dict[str, Any]
    warnings: list[str]
    candidates: int


def find_latest(root: Path, files: Iterable[str] | None = None) -> Found:
    """The newest checkpoint in ``root`` that passes ``verify_checkpoint(path, files)``."""
    files = None if files is None else tuple(files)
    problems: list[str] = []
    candidates = list_checkpoints(root)
    for path in reversed(candidates):
        try:
            manifest = verify_checkpoint(path, files)
        except CheckpointError as exc:
            problems.append(str(exc))
            continue
        fallback = f"using the previous one, {path.name}"
        warnings = [f"checkpoint {problem}; {fallback}" for problem in problems]
        return Found(path, manifest, warnings, len(candidates))
    warnings = [f"checkpoint {problem}; no earlier checkpoint is usable" for problem in problems]
    return Found(None, {}, warnings, len(candidates))


# --- array trees: the replay memory ---------------------------------------------------------------


def save_tree(npz_path: Path, json_path: Path, tree: Any) -> None:
    """Writes a nested dict whose leaves are arrays or JSON values: arrays to an uncompressed
    ``.npz`` (streamed, no pickle), everything else to a JSON file that marks where each array was.

    JSON keeps Python ints of any size (a PCG64 state is 128 bits) and floats exactly.
    """
    arrays: dict[str, np.ndarray] = {}
    skeleton = _split(tree, "", arrays)
    with open(npz_path, "wb") as file:
        np.savez(file, **arrays)
    json_path.write_text(json.dumps(skeleton, indent=1) + "\n", encoding="utf-8")


def load_tree(npz_path: Path, json_path: Path) -> Any:
    """Reads what ``save_tree`` wrote."""
    skeleton = json.loads(json_path.read_text(encoding="utf-8"))
    with np.load(npz_path, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    return _join(skeleton, arrays)


def _split(node: Any, path: str, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(node, Mapping):
        out = {}
        for key, value in node.items():
            if not isinstance(key, str) or key == _ARRAY_KEY:
                raise TypeError(f"tree keys must be strings other than {_ARRAY_KEY!r}, got {key!r}")
            out[key] = _split(value, f"{path}.{key}" if path else key, arrays)
        return out
    if isinstance(node, np.ndarray):
        arrays[path] = node
        return {_ARRAY_KEY: path}
    if isinstance(node, np.generic):
        return node.item()
    if isinstance(node, list | tuple):
        return [_split(value, f"{path}.{i}", arrays) for i, value in enumerate(node)]
    if node is None or isinstance(node, bool | int | float | str):
        return node
    raise TypeError(f"cannot store {type(node).__name__} at {path!r} in a checkpoint tree")


def _join(node: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(node, dict):
        if set(node) == {_ARRAY_KEY}:
            return arrays[node[_ARRAY_KEY]]
        return {key: _join(value, arrays) for key, value in node.items()}
    if isinstance(node, list):
        return [_join(value, arrays) for value in node]
    return node


# --- environments ---------------------------------------------------------------------------------


def env_state(env: Any) -> bytes | None:
    """A pickled copy of a single env (wrappers, physics state, RNG, time-limit counter), or None
    if it cannot be pickled (an emulator behind a C++ handle, say)."""
    try:
        return pickle.dumps(env)
    except Exception:  # pickling raises TypeError, AttributeError, PicklingError... by object
        return None


def load_env_state(env: Any, blob: bytes) -> None:
    """Makes ``env`` (the same object, which others hold) continue from ``env_state``'s copy.

    Raises:
        CheckpointError: the copy is of another env class.
    """
    saved = pickle.loads(blob)
    if type(saved) is not type(env):
        raise CheckpointError(
            f"the checkpoint's env is a {type(saved).__name__}, this run's a {type(env).__name__}"
        )
    state = vars(env)
    state.clear()
    state.update(vars(saved))


def vector_env_state(envs: Any) -> dict[str, Any] | None:
    """The sub-envs of a gymnasium ``SyncVectorEnv``, pickled, and which of them reset on their
    next step; None for any other vector env (ale-py's ``AtariVectorEnv`` keeps its emulators in
    C++) or when a sub-env cannot be pickled."""
    from gymnasium.vector import SyncVectorEnv

    if not isinstance(envs, SyncVectorEnv):
        return None
    blob = env_state(list(envs.envs))
    if blob is None:
        return None
    # gymnasium 1.x keeps the next-step autoreset flags in this attribute; without them a sub-env
    # that just ended would be stepped instead of reset.
    return {"envs": blob, "autoreset": np.array(envs._autoreset_envs, dtype=np.bool_)}


def load_vector_env_state(envs: Any, state: Mapping[str, Any]) -> None:
    """Makes a ``SyncVectorEnv`` continue from ``vector_env_state``'s copy.

    Raises:
        CheckpointError: another number of sub-envs.
    """
    saved = pickle.loads(state["envs"])
    if len(saved) != envs.num_envs:
        raise CheckpointError(
            f"the checkpoint has {len(saved)} sub-envs, this run {envs.num_envs} (env.num_envs)"
        )
    envs.envs = saved
    envs._autoreset_envs = np.array(state["autoreset"], dtype=np.bool_)


# --- a training run's checkpoint ------------------------------------------------------------------


def agent_state(agent: Any) -> dict[str, Any]:
    """A ``DQNAgent``'s networks, optimiser and update counter."""
    return {
        "online": agent.online.state_dict(),
        "target": agent.target.state_dict(),
        "optimizer": agent.optimizer.state_dict(),
        "update_steps": agent.update_steps,
    }


def load_agent_state(agent: Any, state: Mapping[str, Any]) -> None:
    """Restores ``agent_state``'s output into a ``DQNAgent`` built from the same config.

    Raises:
        CheckpointError: networks of another shape (the config changed since).
    """
    # The optimiser's settings (learning rate, eps, ...) stay the config's: a resumed run follows
    # its config.yaml. Only the moments and step counts come from the checkpoint.
    settings = [
        {key: value for key, value in group.items() if key != "params"}
        for group in agent.optimizer.param_groups
    ]
    try:
        agent.online.load_state_dict(state["online"])
        agent.target.load_state_dict(state["target"])
        agent.optimizer.load_state_dict(state["optimizer"])
        for group, kept in zip(agent.optimizer.param_groups, settings, strict=True):
            group.update(kept)
    except (RuntimeError, ValueError, KeyError) as exc:
        reason = " ".join(str(exc).split())[:300]
        raise CheckpointError(f"the networks do not match this config ({reason})") from None
    agent.update_steps = int(state["update_steps"])


def save_run_checkpoint(
    root: Path,
    *,
    env_steps: int,
    agent: Any,
    loop_state: Mapping[str, Any],
    memory_state: Mapping[str, Any] | None,
    config_yaml: str,
    keep_last: int,
    meta: Mapping[str, Any] | None = None,
) -> Path:
    """Writes a training checkpoint (see the module docstring for its files).

    Args:
        root: the run's checkpoints dir.
        env_steps: the loop's env step.
        agent: the ``DQNAgent``.
        loop_state: the loop's state (pickled with ``torch.save``).
        memory_state: the replay memory's ``state_dict()``, or None to leave the memory out.
        config_yaml: the resolved config.
        keep_last: checkpoints to keep.
        meta: extra manifest values.
    """
    import torch

    def write(directory: Path) -> None:
        torch.save(agent_state(agent), directory / AGENT_FILE)
        torch.save(dict(loop_state), directory / LOOP_FILE)
        if memory_state is not None:
            save_tree(directory / MEMORY_ARRAYS_FILE, directory / MEMORY_META_FILE, memory_state)
        (directory / CONFIG_FILE).write_text(config_yaml, encoding="utf-8")

    meta = {"replay_included": memory_state is not None, **(meta or {})}
    return write_checkpoint(root, env_steps, write, keep_last=keep_last, meta=meta)


@dataclass(frozen=True)
class RunCheckpoint:
    """A training checkpoint, verified and loaded.

    Attributes:
        path: its directory.
        manifest: its manifest (``env_steps``, ``final``, ``config_name``, ...).
        agent: ``agent_state`` output, tensors on the requested device.
        loop: the loop's state.
        memory: the replay memory's ``state_dict``, or None if it was left out.
        config_yaml: the config the state belongs to.
    """

    path: Path
    manifest: dict[str, Any]
    agent: dict[str, Any]
    loop: dict[str, Any]
    memory: dict[str, Any] | None
    config_yaml: str

    @property
    def env_steps(self) -> int:
        """The env step the state belongs to."""
        return int(self.manifest["env_steps"])


def load_run_checkpoint(path: Path, device: Any = "cpu") -> RunCheckpoint:
    """Verifies every file of a training checkpoint against its manifest, then loads it.

    Raises:
        CheckpointError: it fails its checks or cannot be read.
    """
    import torch

    manifest = verify_checkpoint(path)
    for name in (AGENT_FILE, LOOP_FILE, CONFIG_FILE):
        if name not in manifest["files"]:
            raise CheckpointError(f"{path}: no {name} (not a training checkpoint)")
    try:
        agent = torch.load(path / AGENT_FILE, map_location=device, weights_only=True)
        # The loop's state holds pickled envs and RNG states: not a weights-only file.
        loop = torch.load(path / LOOP_FILE, map_location="cpu", weights_only=False)
        memory = None
        if MEMORY_ARRAYS_FILE in manifest["files"]:
            memory = load_tree(path / MEMORY_ARRAYS_FILE, path / MEMORY_META_FILE)
        config_yaml = (path / CONFIG_FILE).read_text(encoding="utf-8")
    except Exception as exc:  # unpickling and unzipping raise many kinds; the checksums passed
        reason = " ".join(str(exc).split())[:300]
        raise CheckpointError(f"{path}: cannot load ({type(exc).__name__}: {reason})") from None
    return RunCheckpoint(path, manifest, agent, loop, memory, config_yaml)
