"""``ablate --backend ray`` against a real Ray on loopback: the missing extra and bad options (one
line, nothing created), a local single-node cluster kept on 127.0.0.1 that runs the tiny sweep to
the same summaries and model.pt as the local backend, and a head node started by this module (in
its own mount namespace, so that one dir the driver sees is hidden from the workers) through the
CLI: the same sweep, and the unreachable-storage refusal.

Only one Ray cluster runs at a time: the local one of the first real test is shut down when it
ends; the head node is started once for the tests after it and stopped at the module's end.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from support import (
    CHECKOUT,
    TINY,
    TINY_RUN_DIRS,
    assert_bad_input,
    assert_no_duplicated_steps,
    assert_same_runs,
    curves,
    descendants,
    ray_args,
    run_cli,
    running,
    sets,
    start_cli,
    stop_group,
    summary_of,
)
from typer.testing import CliRunner

from per_dqn.cli import app
from per_dqn.cluster import housekeeping as ray_cluster
from per_dqn.config import parse_override
from per_dqn.rundir import checkpoint as ckpt
from per_dqn.rundir import dirs as rundir
from per_dqn.sweeps import plan
from per_dqn.sweeps.backends import ray as ray_backend
from per_dqn.sweeps.job import job_config
from per_dqn.training.run import Trainer

runner = CliRunner()


# --- without a cluster ----------------------------------------------------------------------------


def test_without_the_extra_the_ray_backend_is_one_line(workdir, monkeypatch):
    """`import ray` failing (the extra not installed) is one line naming the extra, exit 2,
    nothing created; the local backend does not import Ray at all."""
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets without the extra
    assert_bad_input(
        runner.invoke(app, ["ablate", "-c", "cartpole.yaml", "--backend", "ray", "--out", "o"]),
        ray_cluster.MISSING_RAY,
    )
    assert list(workdir.iterdir()) == []
    assert "per-dqn[ray]" in ray_cluster.MISSING_RAY


def test_importing_the_cli_and_the_local_backend_loads_no_ray_module():
    code = (
        "import sys; from per_dqn.sweeps import plan; from per_dqn.sweeps.backends import local; "
        "from per_dqn import cli; "
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    )
    found = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=CHECKOUT
    )
    assert found.stdout.strip() == "[]"


@pytest.mark.slow
def test_the_local_backend_never_imports_ray(tmp_path):
    """A whole local sweep runs, its report written, with a ``ray`` package first on the path of
    every process it starts (its workers inherit it) that leaves a marker when imported: no
    marker, so no ``import ray``, not even one guarded by an ``except``."""
    shadow = tmp_path / "shadow" / "ray"
    shadow.mkdir(parents=True)
    marker = tmp_path / "ray-imported"
    (shadow / "__init__.py").write_text(
        f"open({str(marker)!r}, 'w').close()\nraise ImportError('the local backend imported ray')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shadow.parent), str(CHECKOUT)])}
    sweep = subprocess.run(
        [sys.executable, "-m", "per_dqn.cli", "ablate", "-c", "cartpole.yaml", "--replay",
         "uniform", "--seeds", "1", "--steps", "600", "--set", "train.learning_starts=200",
         "--workers", "1", "--out", str(tmp_path / "sw")],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stderr[-2000:]
    assert not marker.exists()
    assert (tmp_path / "sw" / "report.md").is_file()
    assert (tmp_path / "sw" / "uniform" / "s0" / "summary.json").is_file()


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
        (["--dashboard"],
         "--dashboard cannot be used with --backend local (they are --backend ray's)"),
        (["--backend", "ray", "--address", "auto", "--dashboard"],
         "--dashboard cannot be used with --address: it starts the local cluster's "
         "dashboard, and a cluster at an address has the one it was started with"),
    ],
)  # fmt: skip
def test_bad_ray_options_get_one_line_and_exit_2(workdir, args, line):
    if importlib.util.find_spec("ray") is None:  # not importorskip: Ray is imported by the CLI,
        pytest.skip("needs the ray extra")  # after it has set the loopback switch
    assert_bad_input(runner.invoke(app, ["ablate", "-c", "cartpole.yaml", *args]), line)
    assert list(workdir.iterdir()) == []


# --- a real Ray -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_env():
    """Token authentication off for this module's clusters (loopback only): a head started in
    another process and this driver would otherwise need to share a token file."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_AUTH_MODE", "disabled")
        patch.setenv(ray_cluster.LOOPBACK_SWITCH, "0")  # before Ray is first imported
        pytest.importorskip("ray")
        yield


@pytest.mark.ray
def test_a_local_cluster_stays_on_loopback_and_matches_the_local_backend(
    ray_env, local_reference, tmp_path
):
    """With no --address, the cluster started for the sweep has one node, on 127.0.0.1 (Ray
    2.60 would put it on the host's interface address otherwise), and so does its dashboard
    (``--dashboard``), which answers there; its storage check passes; the
    tiny sweep run on it as Ray tasks gives the local backend's summaries and model.pt; its
    progress display, off a terminal, shows runs running with their steps and SPS, as the tasks
    report them, and then all four done; each run's provenance names that node and the task's
    first attempt. Its workers run at niceness 0, as this process does (pins Ray's default of
    15, under which a distributed run's actors, and a sweep's runs, yielded to any other work on
    the machine while the learner did not: a CartPole actor ran 20x slower beside two busy
    processes on 2 cores). The driver runs in its own process (tests/sweeps/ray_driver.py says
    why)."""
    out = tmp_path / "sweep"
    driver = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("ray_driver.py")), str(out)],
        env={**os.environ, "PYTHONPATH": str(CHECKOUT)},
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert driver.returncode == 0, driver.stdout + driver.stderr
    seen = json.loads(driver.stdout.splitlines()[-1])
    ((node_ip, node_id),) = seen["nodes"]
    assert node_ip == "127.0.0.1"
    assert seen["address"].startswith("127.0.0.1:") and seen["started"]
    assert seen["worker_niceness"] == os.nice(0) == 0
    assert seen["describe"].startswith(f"a local Ray cluster at {seen['address']}: 1 node")
    dashboard = seen["dashboard"]
    assert dashboard.startswith("127.0.0.1:")
    assert seen["describe"].endswith(f"; dashboard http://{dashboard}")
    assert seen["dashboard_status"] == 200
    assert seen["after_storage_check"] == []  # the marker is gone
    assert not seen["initialized_after"]
    assert seen["failed"] == 0 and not seen["interrupted"] and seen["outcomes"] == 4
    for s in assert_same_runs(out, local_reference).values():
        assert s["provenance"]["ray"] == {"node_ip": "127.0.0.1", "node_id": node_id, "attempt": 0}
    lines = seen["display"]
    heads = [line.split("  elapsed")[0] for line in lines if line.startswith("sweep ")]
    assert heads[-1] == "sweep 4/4 done, 0 running, 0 pending"
    # 2 CPUs: 2 tasks at a time (a run of 600 steps may start and end between two polls)
    assert any(" 2 running, " in head for head in heads)
    assert not any(" 3 running" in head or " 4 running" in head for head in heads)
    reported = [line.split() for line in lines if line.startswith("  ")]
    assert len({words[0] for words in reported}) >= 2
    assert {words[0] for words in reported} <= set(TINY_RUN_DIRS)
    # A run shown between two log points: steps of the 100-step log interval, and a speed. None
    # may be shown at all: a 600-step run can start and end between two of the driver's 1 s
    # polls (CI's faster CPU did so for all four), so board_lines pins that path without polls.
    steps = [words[1] for words in reported if words[1] != "starting"]
    assert all(s.endswith("/600") and int(s.split("/")[0]) % 100 == 0 for s in steps)
    # A speed, or "-" at the first log point past the warm-up (learning_starts 300), where the
    # last interval's speed is the warm-up's and no learning speed is measured yet.
    assert all(
        w[4] == "SPS" and (w[3] == "-" or float(w[3].replace(",", "")) > 0)
        for w in reported if w[1] != "starting"
    )  # fmt: skip
    assert seen["board_lines"] == [
        "sweep 1/4 done, 2 running, 1 pending",
        "  proportional/s1  starting",
        "  uniform/s0       300/600 steps  1,234 SPS  ETA 0:00:00",
        "sweep 2/4 done, 1 running, 1 pending",
        "  proportional/s1  starting",
    ]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.kill
@pytest.mark.ray
@pytest.mark.parametrize(
    ("signum", "code", "moment"),
    [(signal.SIGTERM, 143, "gcs"), (signal.SIGINT, 130, "agents")],
)
def test_a_stop_while_ray_starts_leaves_no_dir_and_no_cluster(
    ray_env, tmp_path, signum, code, moment
):
    """SIGTERM (or Ctrl-C) while the driver starts its local cluster, before any run: one line,
    exit 143 (130), the sweep dir it created removed, and none of the cluster's processes left.
    The stop lands early (1 s into Ray's start) or late (once the raylet's agents are up).

    Bugs pinned: `ray.init` put in a SIGTERM handler of its own that exits at once (code 15), so
    a SIGTERM then ended the command with no line and left the new sweep dir behind. And a stop
    late in Ray's start left orphans that `ray.shutdown` does not end: the raylet's dashboard
    and runtime-env agents, or the dashboard's multiprocessing forkserver and resource tracker
    (a clean-clone CI run saw two of them alive 10 s after the command had exited)."""
    out = tmp_path / "new" / "sweep"
    proc = start_cli([*ray_args(out, "--workers", "1"), *sets("run.device=cpu")], new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (
            out / rundir.LOCK_FILE
        ).exists():  # locked just before Ray is imported and started
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the sweep dir was never locked"
            time.sleep(0.01)
        if moment == "gcs":
            time.sleep(1.0)  # into ray.init, which takes several seconds here
        else:
            while not any(
                cmdline(pid).startswith(("ray::DashboardAgent", "ray::RuntimeEnvAgent"))
                for pid in descendants(proc.pid)
            ):
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the raylet's agents never started"
                time.sleep(0.02)
        started = descendants(proc.pid)
        assert not (out / "uniform").exists(), "too late: the runs had started"
        os.kill(proc.pid, signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, stdout + stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: interrupted while connecting to Ray, before any run started"]
    assert list(tmp_path.iterdir()) == []
    deadline = time.monotonic() + 10
    while [pid for pid in started if running(pid)] and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {pid: cmdline(pid)[:60] for pid in started if running(pid)}
    for pid in left:  # not left for the next test
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"the cluster's processes were left: {left}"


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
        env={**os.environ, "PYTHONPATH": str(CHECKOUT)},
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
        stop_group(head, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


def invoke_until_connected(args: list[str]):
    """The CLI against the head, in its own process (``run_cli``: the test process never
    connects to Ray), once the head accepts drivers (it starts in ~5 s)."""
    deadline = time.monotonic() + 90
    while True:
        result = run_cli(args)
        waiting = "cannot connect to Ray" in result.stderr or "no Ray cluster" in result.stderr
        if not waiting or time.monotonic() > deadline:
            return result
        time.sleep(1)


@pytest.mark.ray
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


@pytest.mark.ray
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


@pytest.mark.ray
def test_a_sweep_through_the_cli_on_a_cluster_matches_the_local_backend(
    ray_head, local_reference, tmp_path
):
    """`ablate --backend ray --address HOST:PORT`: the tiny sweep's runs, summaries and model.pt
    equal the local backend's, the report covers them all, and a re-run has nothing to do (and
    needs no cluster)."""
    address, _ = ray_head
    out = tmp_path / "sweep"
    args = ray_args(out, "--address", address, *sets("run.device=cpu"))
    result = invoke_until_connected(args)
    assert result.exit_code == 0, result.output
    assert f"ray: the Ray cluster at {address}: 1 node, 2 CPUs\n" in result.stdout
    assert "4 runs, 0 finished, 4 to run\n  on Ray\n" in result.stdout
    assert_same_runs(out, local_reference)
    assert "Runs used: 4 of 4 planned; missing: none." in (out / "report.md").read_text()
    assert not (out / ray_backend.STOP_FILE).exists()
    # the driver's command, not the Ray worker's own
    assert summary_of(out / "uniform/s0")["provenance"]["command"][1:] == args
    assert summary_of(out / "uniform/s0")["provenance"]["ray"]["node_ip"] == "127.0.0.1"

    again = runner.invoke(app, ray_args(out, "--address", "127.0.0.1:1", *sets("run.device=cpu")))
    assert again.exit_code == 0, again.output
    assert "4 runs, 4 finished, 0 to run\n" in again.stdout


def kill_its_worker_at_step_300(args: list[str], run_dir: Path) -> tuple[int, str, str]:
    """Runs ``per-dqn ARGS`` and SIGKILLs the Ray worker running ``run_dir`` (the process holding
    its lock) once the run has checkpointed at step 300; the command's exit code, stdout and
    stderr."""
    proc = start_cli(args, new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not (run_dir / "checkpoints" / ckpt.checkpoint_name(300)).exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never checkpointed"
            time.sleep(0.01)
        worker = rundir.lock_holder(run_dir)
        assert worker is not None and worker != proc.pid
        os.kill(worker, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, stdout, stderr


@pytest.mark.kill
@pytest.mark.ray
def test_a_killed_worker_is_retried_and_its_run_equals_an_uninterrupted_one(ray_head, tmp_path):
    """SIGKILL to the Ray worker running a run (the process holding its run dir's lock), once it
    has checkpointed: Ray retries the task, which resumes from that checkpoint; the sweep ends
    with exit 0, and the run's curves (no step twice), final score and model.pt equal those of
    the same run never stopped, trained in this process. Its provenance says that its task's
    second attempt (attempt 1) finished it."""
    address, _ = ray_head
    out = tmp_path / "sweep"
    texts = [*TINY, "checkpoint.interval_steps=300", "run.device=cpu"]
    args = ["ablate", "-c", "cartpole.yaml", "--replay", "uniform", "--seeds", "1", "--steps",
            "1200", "--out", str(out), "--backend", "ray", "--address", address,
            *sets(*texts)]  # fmt: skip
    run_dir = out / "uniform" / "s0"
    code, stdout, stderr = kill_its_worker_at_step_300(args, run_dir)
    assert code == 0, stdout + stderr
    s = summary_of(run_dir)
    assert not s["interrupted"] and s["env_steps"] == 1200
    assert s["resumed_from_env_steps"] is not None and 300 <= s["resumed_from_env_steps"] < 1200
    assert s["provenance"]["ray"]["attempt"] == 1
    assert_no_duplicated_steps(run_dir)

    job = plan.plan_sweep(
        "cartpole.yaml", ("uniform",), [0], 1200, [parse_override(t) for t in texts],
        tmp_path / "ref",
    ).jobs[0]  # fmt: skip
    trainer = Trainer(job_config(job), job.config_name)
    try:
        trainer.run(tmp_path / "ref" / "run")
    finally:
        trainer.close()
    twin = tmp_path / "ref" / "run"
    assert curves(run_dir) == curves(twin)
    assert s["final_eval_return_mean"] == summary_of(twin)["final_eval_return_mean"]
    assert (run_dir / "model.pt").read_bytes() == (twin / "model.pt").read_bytes()


@pytest.mark.kill
@pytest.mark.ray
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_on_the_driver_stops_every_run_with_a_checkpoint_and_the_command_resumes(
    ray_head, tmp_path, signum, code
):
    """SIGINT to the driver (a terminal's Ctrl-C reaches only the driver: Ray's workers are not
    in its process group), or SIGTERM (docker stop, Slurm, systemd): every run in progress stops
    between two env steps with a checkpoint of that step and an interrupted summary, exit 130
    (143 for SIGTERM), no stop file left; the same command then resumes both runs from those
    checkpoints, with no step logged twice. The resume is run after SIGINT only: SIGTERM leaves
    the same state (checked above), from which the same code resumes, and it saves ~10 s."""
    address, _ = ray_head
    out = tmp_path / "sweep"
    args = ["ablate", "-c", "cartpole.yaml", "--replay", "uniform", "--seeds", "2", "--steps",
            "10000", "--out", str(out), "--backend", "ray", "--address", address,
            *sets(*TINY, "checkpoint.interval_steps=300", "run.device=cpu")]  # fmt: skip
    run_dirs = [out / "uniform" / f"s{seed}" for seed in (0, 1)]
    proc = start_cli(args, new_session=True)
    try:
        deadline = time.monotonic() + 180
        # any checkpoint: the runs need not start together (one task may get a warm worker)
        while not all(ckpt.list_checkpoints(ckpt.checkpoints_dir(d)) for d in run_dirs):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the runs never checkpointed"
            time.sleep(0.01)
        os.kill(proc.pid, signum)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == code, stdout + stderr
    assert f"interrupted; re-run the same command to finish the sweep in {out}" in stdout
    assert not (out / ray_backend.STOP_FILE).exists()
    stopped = {}
    for run_dir in run_dirs:
        s = summary_of(run_dir)
        assert s["interrupted"] and 300 <= s["env_steps"] < 10000, s
        stopped[run_dir] = s["env_steps"]
        newest = ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))[-1]
        assert newest.name == ckpt.checkpoint_name(s["env_steps"])
    if signum != signal.SIGINT:
        return

    result = run_cli(args)
    assert result.exit_code == 0, result.output
    assert "2 runs, 0 finished, 2 to run\n  on Ray\n" in result.stdout
    for run_dir in run_dirs:
        s = summary_of(run_dir)
        assert not s["interrupted"] and s["env_steps"] == 10000
        assert s["resumed_from_env_steps"] == stopped[run_dir]
        assert_no_duplicated_steps(run_dir)


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


@pytest.mark.ray
def test_a_run_that_fails_on_its_own_terms_is_reported_and_not_retried(ray_head, tmp_path):
    """A run whose weights diverge (learning rate 1e30: a real divergence, nothing injected)
    fails in its task at env step 300, and Ray does not retry it although --retries is 3: its
    run dir holds the event file of one start only, next to its checkpoint of step 150 that a
    retry would have resumed from (and added a second event file). The other run of the grid
    finishes. The driver prints the run's `[n/2] ...: error:` line and the error on stderr, exit
    1, and report.md lists the run as missing, as the local backend's report does."""
    address, _ = ray_head
    out = tmp_path / "sweep"
    args = ["ablate", "-c", "cartpole.yaml", "--replay", "uniform", "--seeds", "1", "--steps",
            "600", "--grid", "agent.learning_rate=0.001,1e30", "--out", str(out), "--backend",
            "ray", "--address", address,
            *sets(*TINY, "checkpoint.interval_steps=150", "run.device=cpu")]  # fmt: skip
    result = invoke_until_connected(args)
    assert result.exit_code == 1, result.output
    failed, good = out / "uniform/lr=1e+30/s0", out / "uniform/lr=0.001/s0"
    assert len(list(failed.glob("events.out.tfevents.*"))) == 1  # one start: not retried
    checkpoints = ckpt.list_checkpoints(ckpt.checkpoints_dir(failed))
    assert [c.name for c in checkpoints] == [ckpt.checkpoint_name(150)]
    assert not (failed / "summary.json").exists()
    error = (
        "per_dqn.training.loop.DivergedError: the largest |weight| is 1e+30 at env step 300 "
        "(update step 1), more than 1000x the largest before (0.5): training diverged"
    )
    (line,) = [line for line in result.stdout.splitlines() if "uniform/lr=1e+30/s0:" in line]
    assert re.fullmatch(r"\[[01]/2\] uniform/lr=1e\+30/s0: error: " + re.escape(error), line)
    # stderr's other lines, if any: the progress display's, every 30 s off a terminal
    assert errors(result.stderr) == [f"error: run uniform/lr=1e+30/s0 failed: {error}"]
    s = summary_of(good)
    assert not s["interrupted"] and s["env_steps"] == 600 and s["provenance"]["ray"]["attempt"] == 0
    assert (
        "Runs used: 1 of 2 planned; missing: uniform/lr=1e+30/s0 (no summary: running or cut "
        "short)." in (out / "report.md").read_text()
    )


@pytest.mark.kill
@pytest.mark.ray
def test_a_worker_killed_more_often_than_retries_allow_fails_its_run_alone(ray_head, tmp_path):
    """--retries 0 and one SIGKILL to the worker running seed 0: that run is reported failed
    with one line (its Ray task failed after 0 retries), seed 1 finishes, exit 1; seed 0's run
    dir keeps its checkpoint, so the same command then resumes it from there to the end, with no
    step logged twice."""
    address, _ = ray_head
    out = tmp_path / "sweep"
    args = ["ablate", "-c", "cartpole.yaml", "--replay", "uniform", "--seeds", "2", "--steps",
            "1200", "--out", str(out), "--backend", "ray", "--address", address, "--retries",
            "0", *sets(*TINY, "checkpoint.interval_steps=300", "run.device=cpu")]  # fmt: skip
    killed, other = out / "uniform" / "s0", out / "uniform" / "s1"
    code, stdout, stderr = kill_its_worker_at_step_300(args, killed)
    assert code == 1, stdout + stderr
    # The sweep's own line only: Ray's driver also prints the raylet's "A worker died ..."
    # warning on stdout, which can name the task's run (seen under load: the test took that
    # warning for the sweep's line and failed), and which its log thread may leave without a
    # line break in front of the sweep's (seen once in a clean-clone `make test`: no line began
    # with the sweep's), so the sweep's line is looked for anywhere in a line.
    lines = re.findall(r"\[\d+/2\] uniform/s0: .*", stdout)
    assert len(lines) == 1, stdout + stderr
    failed = r"\[[01]/2\] uniform/s0: error: its Ray task failed after 0 retries: "
    assert re.match(failed, lines[0]), lines[0]
    (err,) = errors(stderr)
    assert err.startswith("error: run uniform/s0 failed: its Ray task failed after 0 retries: ")
    assert not summary_of(other)["interrupted"] and summary_of(other)["env_steps"] == 1200
    assert not (killed / "summary.json").exists()
    checkpoints = ckpt.list_checkpoints(ckpt.checkpoints_dir(killed))
    kept = [int(c.name.removeprefix("step_")) for c in checkpoints]
    assert kept and 300 <= kept[-1] < 1200

    result = run_cli(args)
    assert result.exit_code == 0, result.output
    assert "2 runs, 1 finished, 1 to run\n  on Ray\n" in result.stdout
    s = summary_of(killed)
    assert not s["interrupted"] and s["env_steps"] == 1200
    assert s["resumed_from_env_steps"] == kept[-1]
    assert_no_duplicated_steps(killed)
