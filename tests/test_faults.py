"""Faults around a real CartPole run, in real processes: one writer per run dir (two `train`s on one
dir, a `--resume` of a run still going, a lock that dies with its process), SIGTERM and Ctrl-C
(stop between two steps, checkpoint, exit 143 / 130, the resume command printed, and a resume
that is the uninterrupted run bit for bit), a disk that fills up mid-run (a real tmpfs), and run
dirs that cannot be used (a file in the way is in test_cli.py; a read-only mount here)."""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import (
    CHECKOUT,
    RESUMABLE,
    assert_same_run,
    cartpole_config,
    cli_as_started,
    resume,
    run_trainer,
    start_cli,
    summary_of,
    train_args,
)
from typer.testing import CliRunner

from per_dqn.cli import app
from per_dqn.logs import metrics, tags
from per_dqn.rundir import checkpoint as ckpt
from per_dqn.rundir import dirs as rundir
from per_dqn.rundir import fileio
from per_dqn.training import checkpoints as run_ckpt

# A 2,000-transition memory keeps each checkpoint small enough for a tmpfs of a few MB.
SETTINGS = [*RESUMABLE, "replay.capacity=2000"]
FIRST_CHECKPOINT = ckpt.checkpoint_name(300)

runner = CliRunner()


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            pytest.fail(f"the run ended before {path.name} appeared: {process.communicate()}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"{path} never appeared")
        time.sleep(0.01)


def event_files(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("events.out.tfevents.*"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The run never stopped."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    run_trainer(cartpole_config(*SETTINGS), run_dir)
    return run_dir


def in_use(run_dir: Path, pid: int, what: str = "run dir") -> str:
    return (
        f"error: {what} {run_dir} is in use by another per-dqn process (pid {pid}); wait for it "
        "to end or stop it"
    )


# --- one writer per run dir -----------------------------------------------------------------------


@pytest.mark.slow
def test_two_writers_on_one_run_dir_are_refused(reference, tmp_path):
    """Two ``train`` commands started together on one ``--run-dir``: one runs, the other is
    refused with one line naming the holder; a ``train --resume`` of the run while it is still
    going is refused the same way. The run that went on is the uninterrupted run bit for bit,
    with one event file: nobody else wrote into it.

    Bug pinned: both used to pass the "absent or empty" check and write into the same dir (two
    event streams, checkpoints overwriting each other), and a resume of a running run started a
    second writer beside it."""
    run_dir = tmp_path / "run"
    first, second = (
        start_cli(train_args(run_dir, *SETTINGS), tmp_path),
        start_cli(train_args(run_dir, *SETTINGS), tmp_path),
    )
    try:
        path, deadline = ckpt.checkpoints_dir(run_dir) / FIRST_CHECKPOINT, time.monotonic() + 180
        while not path.exists() and time.monotonic() < deadline:
            assert first.poll() is None or second.poll() is None, "both ended"
            time.sleep(0.01)
        config_before = (run_dir / "config.yaml").read_bytes()
        files_before = sorted(p.name for p in run_dir.iterdir())
        refused_resume = resume(run_dir)
        results = [p.communicate(timeout=180) for p in (first, second)]
    finally:
        for p in (first, second):
            if p.poll() is None:
                p.kill()
    codes = [first.returncode, second.returncode]
    assert sorted(codes) == [0, 2], results
    winner = (first, second)[codes.index(0)]
    out, err = results[codes.index(2)]
    assert out == "" and err == in_use(run_dir, winner.pid) + "\n"

    assert refused_resume.exit_code == 2, refused_resume.output
    assert refused_resume.stderr == in_use(run_dir, winner.pid) + "\n"
    assert refused_resume.stdout == ""
    assert (run_dir / "config.yaml").read_bytes() == config_before
    assert set(files_before) <= {p.name for p in run_dir.iterdir()}

    assert len(event_files(run_dir)) == 1
    assert_same_run(run_dir, reference)


@pytest.mark.kill
def test_the_lock_dies_with_its_process(tmp_path):
    """A process holding a run dir's lock is killed with SIGKILL (no handler, no cleanup): the lock
    file stays, yet the next command takes the lock at once; no manual cleanup."""
    run_dir = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from per_dqn.rundir.dirs import lock_run_dir; lock = lock_run_dir(Path(sys.argv[1])); "
         "print('locked', flush=True); time.sleep(120)", str(run_dir)],
        env={**os.environ, "PYTHONPATH": str(CHECKOUT)},
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(rundir.RunDirInUse, match=rf"\(pid {holder.pid}\)"):
            rundir.lock_run_dir(run_dir)
    finally:
        holder.kill()
        holder.communicate()
    assert (run_dir / rundir.LOCK_FILE).exists()
    lock = rundir.lock_run_dir(run_dir)
    assert lock is not None
    lock.release()


# --- SIGTERM and Ctrl-C ---------------------------------------------------------------------------


@pytest.mark.kill
@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["sigterm", "sigint"]
)
def test_a_signal_stops_between_steps_with_a_checkpoint(reference, tmp_path, signum, code):
    """SIGTERM (docker stop, Slurm, systemd) is handled like Ctrl-C: the run stops at the next env
    step, writes a checkpoint of exactly that step, marks summary.json interrupted, prints the
    command that resumes it and exits 143 (130 for SIGINT) within 10 s. The resume is the
    uninterrupted run bit for bit.

    Bug pinned: SIGTERM killed the run with no summary and no checkpoint, and Ctrl-C raised
    KeyboardInterrupt mid-step and wrote none, so a resume lost every step since the last
    periodic checkpoint."""
    run_dir = tmp_path / "run"
    process = start_cli(train_args(run_dir, *SETTINGS), tmp_path)
    try:
        wait_for(ckpt.checkpoints_dir(run_dir) / FIRST_CHECKPOINT, process)
        process.send_signal(signum)
        sent = time.monotonic()
        _, err = process.communicate(timeout=60)
        took = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == code, err
    assert took < 10
    summary = summary_of(run_dir)
    stopped = summary["env_steps"]
    assert summary["interrupted"] and 300 <= stopped < 1500
    assert "Traceback" not in err
    assert err.splitlines()[-1] == (
        f"stopped at env step {stopped:,}; resume with: {cli_as_started()} train --resume {run_dir}"
    )
    newest = ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))[-1]
    assert newest.name == ckpt.checkpoint_name(stopped)
    assert ckpt.verify_checkpoint(newest)["env_steps"] == stopped
    if signum == signal.SIGINT:
        return  # the same stop as SIGTERM's; one resume is enough
    result = resume(run_dir)
    assert result.exit_code == 0, result.output
    assert summary_of(run_dir)["resumed_from_env_steps"] == stopped
    assert_same_run(run_dir, reference)


# --- disk full and read-only mounts ---------------------------------------------------------------


def mount_tmpfs(path: Path, size: str) -> str | None:
    """Mounts a tmpfs of ``size`` at ``path``; None, or why the mount was refused."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
            capture_output=True,
            text=True,
        )
    except OSError as exc:
        return f"mount: {exc}"
    return None if done.returncode == 0 else done.stderr.strip() or f"exit {done.returncode}"


def unmount(path: Path) -> None:
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)  # busy: detach it


@pytest.fixture(scope="module")
def mount_refused(tmp_path_factory) -> str | None:
    """Why this machine refuses ``mount -t tmpfs`` (needs root or CAP_SYS_ADMIN), or None."""
    probe = tmp_path_factory.mktemp("probe")
    why = mount_tmpfs(probe, "1m")
    if why is None:
        unmount(probe)
    return why


@pytest.fixture
def small_disk(tmp_path, mount_refused) -> Path:
    """A real 8 MiB tmpfs, unmounted after the test."""
    if mount_refused:
        pytest.skip(f"mount -t tmpfs is refused here ({mount_refused}); see the fault-injected "
                    "test_disk_full_by_fault_injection")  # fmt: skip
    path = tmp_path / "disk"
    assert mount_tmpfs(path, "8m") is None
    try:
        yield path
    finally:
        unmount(path)


def fill(path: Path) -> None:
    """Writes ``path`` until its filesystem has no room left."""
    with open(path, "ab", buffering=0) as file:
        for chunk in (1 << 20, 4096, 1):
            try:
                while True:
                    file.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC


@pytest.mark.slow
def test_disk_full_mid_run_stops_with_one_line_and_resumes(reference, small_disk, tmp_path):
    """The disk fills up while a real run writes (a tmpfs filled by another file): one ``error:``
    line naming the path that failed, exit 1, no traceback; every checkpoint written before is
    intact; once space is back, ``--resume`` finishes the run, bit for bit the uninterrupted one.

    Bug pinned: the write failed with a traceback (torch's "unexpected pos" RuntimeError, or an
    OSError from TensorBoard's writer thread printed twice)."""
    run_dir = small_disk / "run"
    process = start_cli(train_args(run_dir, *SETTINGS), tmp_path)
    try:
        wait_for(ckpt.checkpoints_dir(run_dir) / FIRST_CHECKPOINT, process)
        fill(small_disk / "filler")
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, out + err
    (line,) = err.splitlines()
    where = re.escape(str(run_dir))
    match = re.fullmatch(
        rf"error: ({where}/\S+): (No space left on device|torch could not write it \(.*\)); "
        rf"stopped \(the last checkpoint, ({where}/checkpoints/step_\d+), is intact; once it can "
        rf"be written, resume with: {re.escape(cli_as_started())} train --resume {where}\)",
        line,
    )
    assert match, line
    saved = ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))
    assert str(saved[-1]) == match.group(3)
    for path in saved:
        ckpt.verify_checkpoint(path)

    (small_disk / "filler").unlink()
    result = resume(run_dir)
    assert result.exit_code == 0, result.output
    assert_same_run(run_dir, reference)


def test_the_event_writer_thread_failure_surfaces_as_one_error(small_disk, capfd):
    """TensorBoard writes events from a background thread: when the disk is full there, the next
    log call raises a ``WriteError`` naming the event file, and the thread prints no traceback."""
    logger = metrics.TensorBoardLogger(small_disk / "run")
    fill(small_disk / "filler")
    with pytest.raises(fileio.WriteError) as info:
        for step in range(100_000):
            logger.scalars({tags.TRAIN_LOSS: 1.0}, step)
    assert info.value.filename == str(logger.path)
    assert logger.path.parent == small_disk / "run" and logger.path.name.startswith("events.out")
    assert info.value.strerror == "No space left on device"
    with pytest.raises(fileio.WriteError):
        logger.close()
    captured = capfd.readouterr()
    assert "Traceback" not in captured.err and "Exception in thread" not in captured.err


@pytest.mark.slow
def test_a_video_on_a_full_disk_gets_one_line(reference, small_disk):
    """``eval --video`` into a run dir whose disk is full: one line naming where the GIF was going
    and why, exit 1, no traceback (Pillow's OSError used to escape)."""
    run_dir = Path(shutil.copytree(reference, small_disk / "run"))
    fill(small_disk / "filler")
    result = runner.invoke(app, ["eval", str(run_dir), "--episodes", "1", "--video"])
    assert result.exit_code == 1, result.output
    playing, line = result.stderr.splitlines()  # what it played, then the one error line
    assert playing.startswith(f"playing {run_dir}/")
    assert line.startswith(f"error: {run_dir / 'videos'}")
    assert line.endswith(": No space left on device")


def test_disk_full_by_fault_injection(reference, tmp_path, mount_refused, monkeypatch):
    """Where no tmpfs can be mounted (so a real full disk cannot be made here), ENOSPC is injected
    at the second checkpoint's write; the line, the exit code, the intact first checkpoint and
    the exact resume are checked as on a real full disk."""
    if not mount_refused:
        pytest.skip("a real tmpfs fills up here: test_disk_full_mid_run_stops_with_one_line_...")
    real_save = run_ckpt.save_run_checkpoint

    def save_until_full(root, **kwargs):
        if kwargs["env_steps"] >= 600:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(root, **kwargs)

    run_dir = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(run_ckpt, "save_run_checkpoint", save_until_full)
        result = runner.invoke(app, train_args(run_dir, *SETTINGS))
    assert result.exit_code == 1, result.output
    first = ckpt.checkpoints_dir(run_dir) / FIRST_CHECKPOINT
    assert result.stderr == (
        f"error: {ckpt.checkpoints_dir(run_dir) / ckpt.checkpoint_name(600)}: No space left on "
        f"device; stopped (the last checkpoint, {first}, is intact; once it can be written, "
        f"resume with: per-dqn train --resume {run_dir})\n"
    )
    ckpt.verify_checkpoint(first)
    result = resume(run_dir)
    assert result.exit_code == 0, result.output
    assert_same_run(run_dir, reference)


@pytest.fixture
def read_only(tmp_path, mount_refused, reference) -> tuple[Path, str]:
    """A read-only directory holding a copy of the reference run, and why it cannot be written:
    a tmpfs remounted read-only (root ignores permission bits), else, for a non-root user, a
    directory without write permission."""
    path = tmp_path / "ro"
    if not mount_refused:
        assert mount_tmpfs(path, "16m") is None
        try:
            shutil.copytree(reference, path / "run")
            subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
            yield path, "is on a read-only filesystem"
        finally:
            unmount(path)
        return
    if os.geteuid() == 0:
        pytest.skip(f"root with mount refused ({mount_refused}): no way to make a read-only dir")
    path.mkdir()
    shutil.copytree(reference, path / "run")
    for p in (path / "run", path):
        p.chmod(0o555)
    try:
        yield path, "is not writable (permission denied)"
    finally:
        for p in (path, path / "run"):
            p.chmod(0o755)


def test_a_read_only_run_dir_gets_one_line(read_only, tmp_path, monkeypatch):
    """``train``, ``train --resume`` and ``ablate`` into a read-only place: one line naming the
    dir and why, exit 2, nothing created or changed, before any run starts.

    Bug pinned: a traceback (OSError: [Errno 30] Read-only file system) after the trainer was
    built."""
    ro, why = read_only
    monkeypatch.chdir(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    checks = [
        (train_args(ro / "new", *SETTINGS), f"run dir {ro / 'new'}: {ro} {why}"),
        (["ablate", "-c", "cartpole.yaml", "--out", str(ro / "sweep")],
         f"sweep dir {ro / 'sweep'}: {ro} {why}"),
        (["train", "--resume", str(ro / "run"), "--steps", "1800"],
         f"run dir {ro / 'run'}: {ro / 'run'} {why}"),
    ]  # fmt: skip
    for args, line in checks:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, result.output
        assert result.stderr == f"error: {line}\n"
        assert result.stdout == ""
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
