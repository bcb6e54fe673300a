"""``ablate --backend ray`` against a real Ray on loopback: the missing extra and bad options (one
line, nothing created), a local single-node cluster kept on 127.0.0.1 that runs the tiny sweep to
the same summaries and model.pt as the local backend, and a head node started by this module (in
its own mount namespace, so that one dir the driver sees is hidden from the workers) through the
CLI: the same sweep, and the unreachable-storage refusal.

Only one Ray cluster runs at a time: the local one of the first real test is shut down when it
ends; the head node is started once for the tests after it and stopped at the module's end.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from rich.console import Console
from test_ablate import (
    ROOT,
    TINY,
    assert_bad_input,
    assert_no_duplicated_steps,
    scalars,
    sets,
    start_per_dqn,
    summary,
    tiny_args,
)
from typer.testing import CliRunner

from per_dqn import checkpoint as ckpt
from per_dqn import metrics as m
from per_dqn.cli import app
from per_dqn.config import parse_override
from per_dqn.run import Trainer
from per_dqn.sweeps import ablate, ray_backend
from per_dqn.sweeps.progress import SweepProgress

runner = CliRunner()
# Run-specific fields of a summary: everything else must match between the backends.
VARYING = {"wall_seconds", "sps", "run_dir", "provenance"}
RUN_DIRS = [f"{arm}/s{seed}" for arm in ("uniform", "proportional") for seed in (0, 1)]


def ray_args(out: Path, *extra: str) -> list[str]:
    args = tiny_args(out)
    i = args.index("--workers")
    del args[i : i + 2]  # the local cluster's size; refused with --address
    return [*args, "--backend", "ray", *extra]


# --- without a cluster ----------------------------------------------------------------------------


def test_without_the_extra_the_ray_backend_is_one_line(tmp_path, monkeypatch):
    """`import ray` failing (the extra not installed) is one line naming the extra, exit 2,
    nothing created; the local backend does not import Ray at all."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets without the extra
    assert_bad_input(
        runner.invoke(app, ["ablate", "-c", "cartpole.yaml", "--backend", "ray", "--out", "o"]),
        ray_backend.MISSING_RAY,
    )
    assert list(tmp_path.iterdir()) == []
    assert "per-dqn[ray]" in ray_backend.MISSING_RAY


def test_the_local_backend_never_imports_ray(tmp_path):
    code = (
        "import sys; from per_dqn.sweeps import ablate; from per_dqn import cli; "
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert found.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--backend", "ray", "--address", "nohost"],
         "--address: expected auto or HOST:PORT, got 'nohost'"),
        (["--backend", "ray", "--address", "h:99999"],
         "--address: expected auto or HOST:PORT, got 'h:99999'"),
        (["--backend", "ray", "--cpus-per-run", "0"], "--cpus-per-run must be > 0, got 0.0"),
        (["--backend", "ray", "--gpus-per-run", "-1"], "--gpus-per-run must be >= 0, got -1.0"),
        (["--backend", "ray", "--gpus-per-run", "1.5"],
         "--gpus-per-run above 1 must be a whole number, got 1.5"),
        (["--backend", "ray", "--retries", "-1"], "--retries must be >= 0, got -1"),
        (["--backend", "ray", "--address", "auto", "--workers", "2"],
         "--workers sizes the local Ray cluster; with --address the cluster's own CPUs decide, "
         "got --workers 2"),
        (["--address", "auto"],
         "--address cannot be used with --backend local (they are --backend ray's)"),
        (["--backend", "ray", "--address", "127.0.0.1:1"],
         "--address 127.0.0.1:1: no Ray cluster answers there (Connection refused)"),
        (["--retries", "2"],
         "--retries cannot be used with --backend local (they are --backend ray's)"),
    ],
)  # fmt: skip
def test_bad_ray_options_get_one_line_and_exit_2(tmp_path, monkeypatch, args, line):
    if importlib.util.find_spec("ray") is None:  # not importorskip: Ray is imported by the CLI,
        pytest.skip("needs the ray extra")  # after it has set the loopback switch
    monkeypatch.chdir(tmp_path)
    assert_bad_input(runner.invoke(app, ["ablate", "-c", "cartpole.yaml", *args]), line)
    assert list(tmp_path.iterdir()) == []


# --- a real Ray -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_env():
    """Token authentication off for this module's clusters (loopback only): a head started in
    another process and this driver would otherwise need to share a token file."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_AUTH_MODE", "disabled")
        patch.setenv(ray_backend.LOOPBACK_SWITCH, "0")  # before Ray is first imported
        pytest.importorskip("ray")
        yield


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory) -> Path:
    """The tiny sweep on the local backend, in 2 worker processes, on CPU."""
    out = tmp_path_factory.mktemp("local") / "sweep"
    result = runner.invoke(app, [*tiny_args(out), *sets("run.device=cpu")])
    assert result.exit_code == 0, result.output
    return out


def assert_same_runs(out: Path, ref: Path) -> None:
    """Every run's summary (run-specific fields aside) and model.pt, byte for byte."""
    for rel in RUN_DIRS:
        ours, theirs = (json.loads((d / rel / "summary.json").read_text()) for d in (out, ref))
        assert {k: v for k, v in ours.items() if k not in VARYING} == {
            k: v for k, v in theirs.items() if k not in VARYING
        }, rel
        assert not ours["interrupted"] and ours["env_steps"] == 600
        assert (out / rel / "model.pt").read_bytes() == (ref / rel / "model.pt").read_bytes()


def test_a_local_cluster_stays_on_loopback_and_matches_the_local_backend(
    ray_env, local_reference, tmp_path
):
    """With no --address, the cluster started for the sweep has one node, on 127.0.0.1 (Ray
    2.60 would put it on the host's interface address otherwise); its storage check passes; the
    tiny sweep run on it as Ray tasks gives the local backend's summaries and model.pt; its
    progress display, off a terminal, shows runs running with their steps and SPS, as the tasks
    report them, and then all four done."""
    import ray

    overrides = [parse_override(t) for t in [*TINY, "run.device=cpu"]]
    sweep = ablate.plan_sweep(
        "cartpole.yaml", ("uniform", "proportional"), (0, 1), 600, overrides, tmp_path / "sweep"
    )
    sweep.out.mkdir()
    with ray_backend.connect(ray_backend.RayOptions(local_cpus=2)) as cluster:
        nodes = ray.nodes()
        assert [n["NodeManagerAddress"] for n in nodes] == ["127.0.0.1"]
        assert cluster.address.startswith("127.0.0.1:") and cluster.started
        assert cluster.describe().startswith(f"a local Ray cluster at {cluster.address}: 1 node")
        cluster.check_storage(sweep.out)
        assert list(sweep.out.iterdir()) == []  # the marker is gone
        text = io.StringIO()
        console = Console(file=text, force_terminal=False, width=200)
        with SweepProgress(4, console=console, plain_interval_s=0.0) as shown:
            result = cluster.run_sweep(sweep, progress=shown)
    assert not ray.is_initialized()
    assert not result.failed and not result.interrupted and len(result.outcomes) == 4
    assert_same_runs(sweep.out, local_reference)
    lines = text.getvalue().splitlines()
    heads = [line.split("  elapsed")[0] for line in lines if line.startswith("sweep ")]
    assert heads[-1] == "sweep 4/4 done, 0 running, 0 pending"
    # 2 CPUs: 2 tasks at a time (a run of 600 steps may start and end between two polls)
    assert any(" 2 running, " in head for head in heads)
    assert not any(" 3 running" in head or " 4 running" in head for head in heads)
    reported = [line.split() for line in lines if line.startswith("  ")]
    assert len({words[0] for words in reported}) >= 2
    assert {words[0] for words in reported} <= set(RUN_DIRS)
    # a run between two log points: steps of the 100-step log interval, and a speed
    steps = [words[1] for words in reported if words[1] != "starting"]
    assert steps and all(s.endswith("/600") and int(s.split("/")[0]) % 100 == 0 for s in steps)
    assert all(
        w[4] == "SPS" and float(w[3].replace(",", "")) > 0 for w in reported if w[1] != "starting"
    )


@pytest.fixture(scope="module")
def ray_head(ray_env):
    """A Ray head on 127.0.0.1 with 2 CPUs, in its own mount namespace, where a tmpfs covers
    ``hidden``: a dir the driver sees and the workers do not (a path that is not shared storage).
    Started once for the module, stopped (SIGTERM to `ray start --block`, which stops its
    processes; then its process group) at the end."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) for the head's mount namespace")
    # Short: Ray's unix sockets live under the temp dir, and a socket path has ~107 characters.
    base = Path(tempfile.mkdtemp(prefix="pdr", dir="/tmp"))
    hidden = base / "hidden"
    hidden.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray_cli = Path(sys.executable).with_name("ray")
    head = subprocess.Popen(
        ["unshare", "--mount", "sh", "-c", f"mount -t tmpfs tmpfs '{hidden}' && exec \"$0\" \"$@\"",
         str(ray_cli), "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
         "--port", str(port), "--num-cpus", "2", "--include-dashboard", "false",
         "--temp-dir", str(base / "ray")],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:  # the head's GCS port accepts connections once it is up (~5 s)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert head.poll() is None and time.monotonic() < deadline, "no Ray head"
                time.sleep(0.2)
        yield f"127.0.0.1:{port}", hidden
    finally:
        head.send_signal(signal.SIGTERM)
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(head.pid, signal.SIGKILL)  # anything of the head's left in its group
        except ProcessLookupError:
            pass
        head.wait()
        shutil.rmtree(base, ignore_errors=True)


def invoke_until_connected(args: list[str]):
    """The CLI against the head, once the head accepts drivers (it starts in ~5 s)."""
    deadline = time.monotonic() + 90
    while True:
        result = runner.invoke(app, args)
        waiting = "cannot connect to Ray" in result.stderr or "no Ray cluster" in result.stderr
        if not waiting or time.monotonic() > deadline:
            return result
        time.sleep(1)


def test_unreachable_storage_is_refused_before_any_run(ray_head):
    """A sweep dir the workers cannot see (on the head, a tmpfs covers it) is refused with one
    line naming the node, exit 2, before any run starts; the dir it created is removed."""
    address, hidden = ray_head
    out = hidden / "new" / "sweep"
    result = invoke_until_connected(ray_args(out, "--address", address))
    assert_bad_input(
        result,
        f"sweep dir {out}: the Ray workers on node 127.0.0.1 cannot read it (a marker written "
        "there read back as None); put --out on storage every node reaches, such as a shared "
        "filesystem",
    )
    assert list(hidden.iterdir()) == []


def test_a_run_that_cannot_start_on_the_workers_is_refused_before_any_run(ray_head, tmp_path):
    """The envs and the device are checked on a Ray worker holding a run's resources, not on the
    driver (a CPU-only driver may send runs to GPU nodes): here the cluster has no GPU, so
    `run.device=cuda` is one line naming the node and the key, exit 2, no sweep dir left."""
    address, _ = ray_head
    out = tmp_path / "new" / "sweep"
    result = invoke_until_connected(ray_args(out, "--address", address, *sets("run.device=cuda")))
    assert_bad_input(
        result,
        "on Ray node 127.0.0.1: cartpole.yaml: run.device: 'cuda' was asked for but "
        "torch.cuda.is_available() is False",
    )
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_through_the_cli_on_a_cluster_matches_the_local_backend(
    ray_head, local_reference, tmp_path
):
    """`ablate --backend ray --address HOST:PORT`: the tiny sweep's runs, summaries and model.pt
    equal the local backend's, the report covers them all, and a re-run has nothing to do (and
    needs no cluster)."""
    address, _ = ray_head
    out = tmp_path / "sweep"
    result = invoke_until_connected(ray_args(out, "--address", address, *sets("run.device=cpu")))
    assert result.exit_code == 0, result.output
    assert f"ray: the Ray cluster at {address}: 1 node, 2 CPUs\n" in result.stdout
    assert "4 runs, 0 finished, 4 to run on Ray\n" in result.stdout
    assert_same_runs(out, local_reference)
    assert "Runs used: 4 of 4 planned; missing: none." in (out / "report.md").read_text()
    assert not (out / ray_backend.STOP_FILE).exists()
    # the driver's command, not the Ray worker's own
    assert summary(out / "uniform/s0")["provenance"]["command"] == sys.argv

    again = runner.invoke(app, ray_args(out, "--address", "127.0.0.1:1", *sets("run.device=cpu")))
    assert again.exit_code == 0, again.output
    assert "4 runs, 4 finished, 0 to run\n" in again.stdout


def test_a_killed_worker_is_retried_and_its_run_equals_an_uninterrupted_one(ray_head, tmp_path):
    """SIGKILL to the Ray worker running a run (the process holding its run dir's lock), once it
    has checkpointed: Ray retries the task, which resumes from that checkpoint; the sweep ends
    with exit 0, and the run's curves (no step twice), final score and model.pt equal those of
    the same run never stopped, trained in this process."""
    address, _ = ray_head
    out = tmp_path / "sweep"
    texts = [*TINY, "checkpoint.interval_steps=300", "run.device=cpu"]
    args = ["ablate", "-c", "cartpole.yaml", "--replay", "uniform", "--seeds", "1", "--steps",
            "1200", "--out", str(out), "--backend", "ray", "--address", address,
            *sets(*texts)]  # fmt: skip
    run_dir = out / "uniform" / "s0"
    proc = start_per_dqn(args)
    try:
        deadline = time.monotonic() + 180
        while not (run_dir / "checkpoints" / ckpt.checkpoint_name(300)).exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never checkpointed"
            time.sleep(0.01)
        worker = m.lock_holder(run_dir)
        assert worker is not None and worker != proc.pid
        os.kill(worker, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stdout + stderr
    s = summary(run_dir)
    assert not s["interrupted"] and s["env_steps"] == 1200
    assert s["resumed_from_env_steps"] is not None and 300 <= s["resumed_from_env_steps"] < 1200
    assert_no_duplicated_steps(run_dir)

    job = ablate.plan_sweep(
        "cartpole.yaml", ("uniform",), [0], 1200, [parse_override(t) for t in texts],
        tmp_path / "ref",
    ).jobs[0]  # fmt: skip
    trainer = Trainer(ablate._job_config(job), job.config_name)
    try:
        trainer.run(tmp_path / "ref" / "run")
    finally:
        trainer.close()
    twin = tmp_path / "ref" / "run"
    assert scalars(run_dir) == scalars(twin)
    assert s["final_eval_return_mean"] == summary(twin)["final_eval_return_mean"]
    assert (run_dir / "model.pt").read_bytes() == (twin / "model.pt").read_bytes()


def test_ctrl_c_on_the_driver_stops_every_run_with_a_checkpoint_and_the_command_resumes(
    ray_head, tmp_path
):
    """SIGINT to the driver (a terminal's Ctrl-C reaches only the driver: Ray's workers are not
    in its process group): every run in progress stops between two env steps with a checkpoint
    of that step and an interrupted summary, exit 130, no stop file left; the same command then
    resumes both runs from those checkpoints, with no step logged twice."""
    address, _ = ray_head
    out = tmp_path / "sweep"
    args = ["ablate", "-c", "cartpole.yaml", "--replay", "uniform", "--seeds", "2", "--steps",
            "3000", "--out", str(out), "--backend", "ray", "--address", address,
            *sets(*TINY, "checkpoint.interval_steps=300", "run.device=cpu")]  # fmt: skip
    run_dirs = [out / "uniform" / f"s{seed}" for seed in (0, 1)]
    proc = start_per_dqn(args)
    try:
        deadline = time.monotonic() + 180
        # any checkpoint: the runs need not start together (one task may get a warm worker)
        while not all(ckpt.list_checkpoints(ckpt.checkpoints_dir(d)) for d in run_dirs):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the runs never checkpointed"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stdout + stderr
    assert f"interrupted; re-run the same command to finish the sweep in {out}" in stdout
    assert not (out / ray_backend.STOP_FILE).exists()
    stopped = {}
    for run_dir in run_dirs:
        s = summary(run_dir)
        assert s["interrupted"] and 300 <= s["env_steps"] < 3000, s
        stopped[run_dir] = s["env_steps"]
        newest = ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))[-1]
        assert newest.name == ckpt.checkpoint_name(s["env_steps"])

    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "2 runs, 0 finished, 2 to run on Ray\n" in result.stdout
    for run_dir in run_dirs:
        s = summary(run_dir)
        assert not s["interrupted"] and s["env_steps"] == 3000
        assert s["resumed_from_env_steps"] == stopped[run_dir]
        assert_no_duplicated_steps(run_dir)
