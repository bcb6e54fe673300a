"""``ablate --pack``: a sweep's runs in packs (issue 24) give the runs of an unpacked sweep, and a
packed sweep killed with SIGKILL resumes every member exactly."""

from __future__ import annotations

import hashlib
import os
import signal
import time
from pathlib import Path

import pytest
from support import (
    TINY,
    TINY_RUN_DIRS,
    assert_bad_input,
    assert_no_duplicated_steps,
    assert_same_runs,
    descendants,
    read_scalars,
    running,
    sets,
    start_cli,
    summary_of,
    tiny_args,
)
from typer.testing import CliRunner

from per_dqn.cli import app
from per_dqn.config import parse_override
from per_dqn.logs import tags
from per_dqn.rundir import checkpoint as ckpt
from per_dqn.rundir import dirs as rundir
from per_dqn.sweeps import plan
from per_dqn.sweeps.job import job_config
from per_dqn.training.run import Trainer

runner = CliRunner()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def timeless(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """The run's logged curves but its speed (a wall-clock measure)."""
    return {tag: points for tag, points in read_scalars(run_dir).items() if tag != tags.PERF_SPS}


@pytest.mark.slow
def test_ablate_with_packs_gives_the_local_backend_s_runs(tmp_path, local_reference):
    """The tiny sweep (uniform and proportional, seeds 0 and 1) in packs of 3 on one worker: the
    header says how it was packed, and every run's summary and model.pt equal the unpacked local
    backend's."""
    out = tmp_path / "sweep"
    result = runner.invoke(
        app, [*tiny_args(out, workers=1), "--pack", "3", *sets("run.device=cpu")]
    )
    assert result.exit_code == 0, result.output
    assert "4 runs, 0 finished, 4 to run\n  on 1 worker, 2 packs: 1 of 3, 1 of 1\n" in result.stdout
    assert_same_runs(out, local_reference)
    # The report's cost counts the two packs, each once, by its longest run; the runs of one
    # pack share its id.
    sessions = {d: summary_of(out / d)["wall_sessions"] for d in TINY_RUN_DIRS}
    longest: dict[str, float] = {}
    for (session,) in sessions.values():
        longest[session["pack"]] = max(longest.get(session["pack"], 0.0), session["seconds"])
    assert len(longest) == 2
    text = (out / "report.md").read_text()
    amount = f"{sum(longest.values()) / 60:,.1f} minutes"
    assert f"- Compute: {amount} of training time in 2 pack sessions (" in text


@pytest.mark.parametrize(
    ("value", "line"), [("0", "--pack must be >= 1, got 0"), ("-2", "--pack must be >= 1, got -2")]
)
def test_a_bad_pack_size_is_one_line(workdir, value, line):
    assert_bad_input(runner.invoke(app, [*tiny_args(Path("o")), "--pack", value]), line)
    assert list(workdir.iterdir()) == []


@pytest.mark.kill
def test_a_killed_packed_sweep_resumes_every_member_exactly(tmp_path):
    """SIGKILL to a sweep running one pack of two runs: its worker stops both between two steps
    with a checkpoint each (it gets SIGTERM from the kernel), and the same command then resumes
    the pack; each run ends as that run alone, never stopped: the same curves (no step twice),
    final score and model.pt."""
    out = tmp_path / "sweep"
    steps = 2400
    texts = [*TINY, "checkpoint.interval_steps=300", "checkpoint.keep_last=10", "run.device=cpu",
             "agent.hidden_sizes=[32,32]"]  # fmt: skip
    args = ["ablate", "-c", "cartpole.yaml", "--replay", "uniform", "--seeds", "2", "--steps",
            str(steps), "--workers", "1", "--pack", "2", "--out", str(out),
            *sets(*texts)]  # fmt: skip
    run_dirs = [out / "uniform" / f"s{seed}" for seed in (0, 1)]
    proc = start_cli(args, new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not all(ckpt.list_checkpoints(ckpt.checkpoints_dir(d)) for d in run_dirs):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the pack never checkpointed"
            time.sleep(0.01)
        workers = descendants(proc.pid)
        (writer,) = {rundir.lock_holder(d) for d in run_dirs}  # one process holds both
        assert writer in workers
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        killed = time.monotonic()
        while any(running(pid) for pid in workers) and time.monotonic() < killed + 10:
            time.sleep(0.05)
        assert not [pid for pid in workers if running(pid)], "orphans after 10 s"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    for run_dir in run_dirs:
        s = summary_of(run_dir)
        assert s["interrupted"] and 300 <= s["env_steps"] < steps
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    for seed, run_dir in enumerate(run_dirs):
        assert not summary_of(run_dir)["interrupted"]
        assert_no_duplicated_steps(run_dir)
        overrides = [parse_override(t) for t in texts]
        job = plan.plan_sweep(
            "cartpole.yaml", ("uniform",), [seed], steps, overrides, tmp_path / f"ref{seed}"
        ).jobs[0]
        alone = Trainer(job_config(job), job.config_name)
        try:
            alone.run(tmp_path / f"alone{seed}")
        finally:
            alone.close()
        assert timeless(run_dir) == timeless(tmp_path / f"alone{seed}")
        assert digest(run_dir / "model.pt") == digest(tmp_path / f"alone{seed}" / "model.pt")


@pytest.mark.kill
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["ctrl-c", "sigterm"])  # fmt: skip
def test_ctrl_c_and_sigterm_checkpoint_every_member_of_a_pack(tmp_path, signum, code):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) or SIGTERM to a sweep running
    one pack of three runs: exit 130 or 143, and each member stops between two steps with a
    checkpoint of that step and an interrupted summary, as a run alone does (issue 24, 3.)."""
    out = tmp_path / "sweep"
    args = ["ablate", "-c", "cartpole.yaml", "--replay", "uniform,proportional", "--seeds", "2",
            "--steps", "200000", "--workers", "1", "--pack", "3", "--out", str(out),
            *sets(*TINY, "run.device=cpu")]  # fmt: skip
    proc = start_cli(args, new_session=True)
    try:
        deadline = time.monotonic() + 60
        started: list[Path] = []
        while time.monotonic() < deadline and len(started) < 3:
            time.sleep(0.2)
            started = [p for p in out.glob("*/s*") if any(p.glob("events.out.tfevents*"))]
        assert len(started) == 3, "the pack never started its three runs"
        time.sleep(0.5)
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)
        else:
            os.kill(proc.pid, signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == code, stdout + stderr
    assert "re-run the same command" in stdout
    begun = sorted(p.relative_to(out).as_posix() for p in out.glob("*/s*"))
    assert begun == sorted(p.relative_to(out).as_posix() for p in started)  # no other pack
    for run_dir in started:
        s = summary_of(run_dir)
        assert s["interrupted"] is True and 0 < s["env_steps"] < 200_000
        assert s["provenance"]["pack"]["size"] == 3
        newest = ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))[-1]
        assert newest.name == ckpt.checkpoint_name(s["env_steps"])


def test_a_pack_whose_memories_do_not_fit_is_refused_naming_the_largest_that_fits(workdir):
    """One run's replay memory fits in the available RAM, four of them in one process do not:
    ``ablate --pack 4`` is one line naming the largest pack that fits (2), exit 2, before
    anything is written; ``plan --pack 4`` says the same."""
    from per_dqn.training import memory_plan as memory

    one = memory.memory_plan(memory_config())
    available = one.available_bytes
    assert available is not None
    capacity = int((available - memory.PROCESS_OVERHEAD_BYTES) / 2.5 / one.bytes_per_transition)
    sized = [f"replay.capacity={capacity}"]
    args = ["ablate", "-c", "cartpole.yaml", "--replay", "proportional", "--seeds", "4",
            "--pack", "4", "--out", "sweep", *sets(*sized)]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: --pack 4: 4 replay memories need ")
    assert line.endswith("of RAM is available; the largest pack that fits is 2 (--pack 2)")
    assert list(workdir.iterdir()) == []
    shown = runner.invoke(app, ["plan", "-c", "cartpole.yaml", "--pack", "4", *sets(*sized)])
    assert shown.exit_code == 2
    assert "pack of 4" in shown.stdout and shown.stdout.rstrip().endswith("DOES NOT FIT")
    assert shown.stderr.endswith("the largest pack that fits is 2 (--pack 2)\n")


def test_plan_answers_a_pack_of_any_size_at_once(workdir, monkeypatch):
    """Pins a bug: ``plan --pack K`` built a list of K memory plans, so ``--pack 1000000000000``
    died of a MemoryError traceback. Now the count is arithmetic: one line naming the largest
    pack that fits, exit 2, as for ``--pack 4``; the figure is the one ``pack_refusal`` gives for
    a list of that many plans. (The RAM available is held at 8 GiB, so the figure is fixed.)"""
    from per_dqn.training import memory_plan as memory

    monkeypatch.setattr(memory, "available_ram_bytes", lambda: 8 * 2**30)
    one = memory.memory_plan(memory_config())
    fits = (one.available_bytes - memory.PROCESS_OVERHEAD_BYTES) // one.parts["total"]
    assert memory.same_pack_refusal(one, fits + 1) == memory.pack_refusal([one] * (fits + 1))
    assert memory.same_pack_refusal(one, fits) is None is memory.pack_refusal([one] * fits)
    shown = runner.invoke(app, ["plan", "-c", "cartpole.yaml", "--pack", "1000000000000"])
    assert shown.exit_code == 2, shown.output
    (line,) = shown.stderr.splitlines()
    assert line.startswith("error: cartpole.yaml: --pack 1000000000000: 1000000000000 replay "
                           "memories need ")  # fmt: skip
    assert line.endswith(f"the largest pack that fits is {fits} (--pack {fits})")


def memory_config():
    from per_dqn.config import load_config, resolve_config_path

    return load_config(
        resolve_config_path("cartpole.yaml"), [parse_override("replay.kind=proportional")]
    )
