"""Helpers shared by test files: reading what a run wrote, comparing two runs, starting the CLI.

Fixtures live in conftest.py; this module holds the plain functions and classes several files
call. pytest's default ("prepend") import mode puts tests/ on ``sys.path`` for the top-level
conftest.py, so ``from support import ...`` works from every folder under tests/.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

import per_dqn
from per_dqn.cli import app
from per_dqn.config import Config, load_config, parse_override, resolve_config_path
from per_dqn.logs import tags
from per_dqn.rundir import checkpoint as ckpt
from per_dqn.training import checkpoints as run_ckpt
from per_dqn.training.run import Trainer

# The checkout under test, for CLI processes started from another cwd (the venv's `per-dqn`
# script would import whichever checkout is installed).
CHECKOUT = Path(per_dqn.__file__).resolve().parents[1]

runner = CliRunner()

# --- what a run wrote -----------------------------------------------------------------------------


def api_run(config: str, overrides: list[str], run_dir: Path) -> dict:
    """``per_dqn.train(config, overrides=...)`` in a process of its own (``run_cli`` says why);
    the run's summary."""
    script = (
        "import per_dqn\n"
        f"per_dqn.train({config!r}, overrides={overrides!r}, run_dir={str(run_dir)!r})\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(CHECKOUT)},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return summary_of(run_dir)


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of every event file in ``run_dir``, merged as TensorBoard merges them (in name
    order, a later file's ``purge_step`` dropping the earlier points at or after it)."""
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return {t: [(e.step, e.value) for e in events.Scalars(t)] for t in events.Tags()["scalars"]}


def curves(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar but the wall-clock one (``perf/sps``): what two equal runs share exactly."""
    return {tag: points for tag, points in read_scalars(run_dir).items() if tag != tags.PERF_SPS}


def summary_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def tree(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``root`` with its modification time and bytes: "nothing changed"."""
    return {
        p.relative_to(root).as_posix(): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def assert_no_duplicated_steps(run_dir: Path) -> None:
    """Each tag's steps strictly increase: a resume purged what the stopped run logged past its
    last checkpoint instead of logging it twice."""
    for tag, points in read_scalars(run_dir).items():
        steps = [step for step, _ in points]
        assert all(a < b for a, b in itertools.pairwise(steps)), tag


def assert_same_weights(a: Path, b: Path) -> None:
    """Two ``model.pt`` files hold the same tensors, bit for bit."""
    first, second = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    assert first.keys() == second.keys()
    for key in first:
        assert torch.equal(first[key], second[key]), key


def final_manifest(run_dir: Path) -> dict:
    """The newest checkpoint's manifest, its checksums verified."""
    newest = ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))[-1]
    return ckpt.verify_checkpoint(newest)


def assert_same_run(run_dir: Path, reference: Path) -> None:
    """``run_dir`` (stopped and resumed) is the run never stopped: same curves with no step twice,
    same final weights, a final checkpoint whose agent (online, target, Adam) and replay memory
    (contents, priorities, RNG) are byte for byte the reference's, and the same finished summary.
    """
    assert curves(run_dir) == curves(reference)
    assert_no_duplicated_steps(run_dir)
    assert_same_weights(run_dir / "model.pt", reference / "model.pt")
    got, want = final_manifest(run_dir), final_manifest(reference)
    assert got["env_steps"] == want["env_steps"] and got["final"] and want["final"]
    for name in (run_ckpt.AGENT_FILE, run_ckpt.MEMORY_ARRAYS_FILE, run_ckpt.MEMORY_META_FILE):
        assert got["files"][name] == want["files"][name], name
    mine, theirs = summary_of(run_dir), summary_of(reference)
    assert not mine["interrupted"]
    assert mine["final_eval_return_mean"] == theirs["final_eval_return_mean"]
    assert mine["update_steps"] == theirs["update_steps"]


# --- running ----------------------------------------------------------------------------------

# The run test_resume.py and test_faults.py stop and resume: checkpoints at 300, 600, ..., 1500
# (the last one the final one), evaluations at 500 and 1000.
RESUMABLE = [
    "train.total_env_steps=1500", "train.learning_starts=300", "train.log_interval=100",
    "train.eval_interval=500", "train.eval_episodes=2", "train.final_eval_episodes=3",
    "train.epsilon_decay_steps=600", "checkpoint.interval_steps=300", "checkpoint.keep_last=3",
    "run.device=cpu",
]  # fmt: skip


def cartpole_config(*settings: str) -> Config:
    """The shipped cartpole.yaml with ``--set``-style ``settings`` applied."""
    return load_config(resolve_config_path("cartpole.yaml"), map(parse_override, settings))


def run_trainer(config: Config, run_dir: Path) -> dict:
    """One whole run in this process; returns its summary."""
    trainer = Trainer(config, "cartpole")
    try:
        return trainer.run(run_dir)
    finally:
        trainer.close()


def sets(*texts: str) -> list[str]:
    """``--set TEXT`` for each text."""
    return [arg for text in texts for arg in ("--set", text)]


def train_args(run_dir: Path, *settings: str) -> list[str]:
    """``per-dqn train`` on cartpole.yaml into ``run_dir``, quiet, with ``settings``."""
    return ["train", "-c", "cartpole.yaml", "--run-dir", str(run_dir), "-q", *sets(*settings)]


def resume(run_dir: Path, *extra: str):
    """``per-dqn train --resume RUN_DIR -q EXTRA``, in this process."""
    return runner.invoke(app, ["train", "--resume", str(run_dir), "-q", *extra])


def assert_bad_input(result, *lines: str) -> None:
    """Exit 2, ``error: LINE`` on stderr for each line and nothing else, nothing on stdout."""
    assert result.exit_code == 2, result.output
    assert result.stderr == "".join(f"error: {line}\n" for line in lines)
    assert result.stdout == ""


def start_cli(
    args: list[str],
    cwd: Path | None = None,
    *,
    new_session: bool = False,
    sigint_ignored: bool = False,
) -> subprocess.Popen:
    """``per-dqn ARGS`` in a real process running this checkout's package, stdout and stderr
    piped as text.

    Args:
        args: the command line after ``per-dqn``.
        cwd: its working directory (this one when None).
        new_session: in its own process group, as a shell starts a foreground job (so that
            ``os.killpg`` reaches it and its workers, and nothing else).
        sigint_ignored: started with SIGINT ignored, as a non-interactive shell starts a
            background job.
    """
    return subprocess.Popen(
        [sys.executable, "-m", "per_dqn.cli", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(CHECKOUT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=new_session,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
        if sigint_ignored
        else None,
    )


def cli_as_started() -> str:
    """How the processes ``start_cli`` starts name per-dqn in the commands their hints print
    (``per_dqn.cli.common.invoked_as``): ``python -m per_dqn.cli``, with the interpreter's path
    where ``python`` on PATH is another one."""
    python = shutil.which("python")
    same = python is not None and os.path.samefile(python, sys.executable)
    return f"{'python' if same else sys.executable} -m per_dqn.cli"


@dataclass(frozen=True)
class Ran:
    """What a CLI process did, read as a ``CliRunner`` result is (``exit_code``, ``stdout``,
    ``stderr``, ``output``), so that ``assert_bad_input`` and friends take either."""

    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_cli(args: list[str], cwd: Path | None = None, timeout: float = 600) -> Ran:
    """``per-dqn ARGS`` in a real process (``start_cli``), waited for.

    The tests that connect to Ray use this rather than ``CliRunner``: Ray's driver state is
    per process, and several ``ray.init``/``ray.shutdown`` cycles in the test process left Ray's
    threads behind that crashed the interpreter at exit (SIGSEGV after every test had passed)."""
    proc = start_cli(args, cwd)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return Ran(proc.returncode, stdout, stderr)


def stop_group(proc: subprocess.Popen, timeout: float) -> None:
    """SIGTERM to ``proc`` (a `ray start --block` stops its node's processes on it), up to
    ``timeout`` seconds to end, then SIGKILL to whatever is left in its process group; reaped."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid``, from /proc (Linux)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def ray_processes(pid: int, cls: str) -> list[int]:
    """The Ray actor processes of class ``cls`` (``ray::CLS...`` in their command line) below
    ``pid``."""
    found = []
    for child in descendants(pid):
        try:
            if f"ray::{cls}".encode() in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
        except OSError:
            continue
    return sorted(found)


def running(pid: int) -> bool:
    """True unless ``pid`` is gone or a zombie (dead, waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class StopAtCheckpoint:
    """A callback that stops the run at its first checkpoint at or past ``step``, recording every
    checkpoint it saw as ``(env_steps, dir name)``."""

    def __init__(self, step: int) -> None:
        self.step, self.seen = step, []

    def on_checkpoint(self, env_steps, path):
        self.seen.append((env_steps, path.name))
        return env_steps >= self.step


class Plant:
    """Unpickled, it creates ``marker``: stands in for any code a hostile file would run."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


# --- the tiny sweep (tests/sweeps) ----------------------------------------------------------------

# tests/test_train.py's SHORT, at 600 steps with one periodic evaluation.
TINY = [
    "train.learning_starts=300", "train.log_interval=100", "train.eval_interval=300",
    "train.eval_episodes=2", "train.final_eval_episodes=3", "train.epsilon_decay_steps=600",
]  # fmt: skip
# The tiny sweep's run dirs.
TINY_RUN_DIRS = [f"{arm}/s{seed}" for arm in ("uniform", "proportional") for seed in (0, 1)]
# Run-specific fields of a summary: everything else must match between the backends.
VARYING = {"wall_seconds", "wall_seconds_total", "wall_sessions", "sps", "run_dir", "provenance"}


def tiny_args(out: Path, workers: int = 2) -> list[str]:
    """``ablate``: uniform against proportional, 2 seeds, 600 steps, into ``out``."""
    return ["ablate", "-c", "cartpole.yaml", "--replay", "uniform,proportional", "--seeds",
            "2", "--steps", "600", "--workers", str(workers), "--out", str(out),
            *sets(*TINY)]  # fmt: skip


def ray_args(out: Path, *extra: str) -> list[str]:
    """The tiny sweep on ``--backend ray``, without ``--workers``."""
    args = tiny_args(out)
    i = args.index("--workers")
    del args[i : i + 2]  # the local cluster's size; refused with --address
    return [*args, "--backend", "ray", *extra]


def assert_same_runs(out: Path, ref: Path) -> dict[str, dict]:
    """Every run's summary (run-specific fields aside) and model.pt, byte for byte; the local
    backend's provenance (``ref``'s) says nothing of Ray. Returns ``out``'s summaries by run dir.
    """
    found = {}
    for rel in TINY_RUN_DIRS:
        ours, theirs = summary_of(out / rel), summary_of(ref / rel)
        assert {k: v for k, v in ours.items() if k not in VARYING} == {
            k: v for k, v in theirs.items() if k not in VARYING
        }, rel
        assert not ours["interrupted"] and ours["env_steps"] == 600
        assert (out / rel / "model.pt").read_bytes() == (ref / rel / "model.pt").read_bytes()
        assert "ray" not in theirs["provenance"]
        found[rel] = ours
    return found


class Hung(Exception):
    """A call still running after its time limit (the code under test blocked)."""


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Raises ``Hung`` in this (the main) thread once ``seconds`` have passed, so that a
    regression fails instead of hanging the suite: SIGALRM interrupts a blocking ``open`` of a
    FIFO and a read loop over ``/dev/zero`` alike (the handler raises, so neither is restarted)."""

    def alarm(signum, frame):
        raise Hung(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def reseal(path: Path, files: dict[str, dict] | None = None) -> None:
    """Rewrites a checkpoint's manifest to match its files as they now are (or to list ``files``),
    digest included: what someone who edits a checkpoint on purpose can do. Sizes, SHA-256s and
    the digest (SHA-256 of the manifest's JSON with sorted keys and no spaces, its own key left
    out) are computed by hashlib here, not by the code under test."""
    manifest_path = path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    if files is None:
        files = {}
        for name in manifest["files"]:
            data = (path / name).read_bytes()
            files[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest["files"] = files
    body = {key: value for key, value in manifest.items() if key != "manifest_sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    manifest["manifest_sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
    manifest_path.write_text(json.dumps(manifest, indent=2))


# --- optimisers against torch.optim (tests/agent/test_adam.py, test_rmsprop.py) ------------------


def tiny_network(seed: int = 0) -> Any:
    """A 4 -> 16 -> 2 MLP, initialised from ``seed``."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def optimizer_steps(
    model: Any, optimizer: Any, steps: int, seed: int = 1, target: float = 0.0
) -> None:
    """``steps`` steps on the squared distance of the outputs to ``target``, batches of 32 from
    ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(32, 4, generator=generator)
        optimizer.zero_grad(set_to_none=True)
        ((model(x) - target) ** 2).mean().backward()
        optimizer.step()


def saved_bytes(obj: Any) -> bytes:
    """What ``torch.save`` writes for ``obj``."""
    import io

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def assert_same_state(a: Any, b: Any) -> None:
    """Two state dicts (nested dicts of arrays and scalars, as memories and samplers give) are
    equal, bit for bit, keys in the same order and arrays of the same dtype."""
    assert list(a) == list(b)
    for key in a:
        if isinstance(a[key], dict):
            assert_same_state(a[key], b[key])
        else:
            np.testing.assert_array_equal(a[key], b[key], err_msg=key, strict=True)


def assert_same_modules(a: Any, b: Any) -> None:
    """Two modules hold the same tensors, bit for bit."""
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


def fill_with_random_play(trainer: Any, transitions: int = 300, seed: int = 0) -> None:
    """Adds ``transitions`` real transitions of a uniform random policy on the trainer's eval
    env to its replay memory (a memory with something to sample, without training)."""
    env, rng = trainer.eval_env, np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    for _ in range(transitions):
        action = int(rng.integers(trainer.spec.num_actions))
        next_obs, reward, terminated, truncated, _ = env.step(action)
        trainer.memory.add(obs, action, reward, next_obs, terminated)
        obs = env.reset()[0] if terminated or truncated else next_obs


def zero_q_network(obs_shape, num_actions) -> Any:
    """A user's Q-network factory (``agent.network: "support:zero_q_network"``): one linear
    layer with every weight 0, so Q = 0 everywhere."""
    import torch.nn as nn

    net = nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(obs_shape)), num_actions))
    nn.init.zeros_(net[1].weight)
    nn.init.zeros_(net[1].bias)
    return net


@contextlib.contextmanager
def nest(root: Path, depth: int) -> Iterator[None]:
    """``root/d/d/.../d``, ``depth`` dirs deep, made one at a time through dir descriptors
    (``Path.mkdir(parents=True)`` and ``os.makedirs`` recurse once a level themselves), and
    removed again the same way on the way out: ``shutil.rmtree`` recurses too, so pytest's own
    clean-up of its temp dirs would fail on it in a later session."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    made = 0
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            made += 1
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
    finally:
        os.close(fd)
    try:
        yield
    finally:
        for level in range(made, 0, -1):
            os.rmdir(root.joinpath(*["d"] * level))


def copy_of_the_repo(tmp_path: Path, names: tuple[str, ...] = ("per_dqn", "tests")) -> Path:
    """A copy of the repository's ``names`` and its pyproject.toml under ``tmp_path / "repo"``,
    for a doc's recipe followed literally (tests/memory/test_extending.py,
    tests/test_extending_family.py)."""
    root, copy = Path(__file__).resolve().parents[1], tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for name in names:
        shutil.copytree(root / name, copy / name, ignore=ignore)
    shutil.copy(root / "pyproject.toml", copy / "pyproject.toml")
    return copy


def run_in_copy(copy: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python ARGS`` in ``copy``, with the copy's ``per_dqn`` first on the path and nothing of
    this environment's but its interpreter."""
    env = {"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin", "HOME": str(copy)}
    return subprocess.run(
        [sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip
