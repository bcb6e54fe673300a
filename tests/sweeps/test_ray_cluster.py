"""``ablate --backend ray``, and a distributed run's actors (``train --actors``), on a real
two-node Ray cluster, on this machine only.

Ray 2.60 puts a node on the host's interface address even when asked for 127.0.0.1, and the
switch that keeps one node on loopback (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``) refuses a second
node (issue 15). So each node lives in a network namespace of this module's own, the two joined
by a veth pair with addresses the module assigns: the head (and the sweep's driver, which must
reach it) in namespace A, a worker node in namespace B. Nothing routes out of either namespace.
Both share this machine's filesystem, so a sweep dir under /tmp is storage every node reaches.

Everything is created once for the module and removed at its end, namespaces included; they are
named after this process's pid, so that two test sessions never share one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import CHECKOUT, assert_same_runs, ray_args, sets, stop_group

from per_dqn.cluster import housekeeping as ray_cluster

pytestmark = pytest.mark.ray

# A /30 of the module's own: the veth pair between the two namespaces, and nothing else.
HEAD_IP, WORKER_IP, PREFIX = "10.231.0.1", "10.231.0.2", 30
# The head's GCS port; free, since nothing else listens in namespace A.
PORT = 6379
# Seconds for both nodes to come up and see each other (~15 s on 2 busy cores).
START_SECONDS = 120

# Run in namespace A once the `ray start` processes are up: waits for the head's port, connects,
# waits until both nodes are alive, prints ray.nodes()' view of them as JSON.
WAIT_FOR_NODES = """
import json, logging, socket, sys, time
host, port, want, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
deadline = time.monotonic() + seconds
while True:
    try:
        socket.create_connection((host, port), timeout=1).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit(f"no Ray head at {host}:{port}")
        time.sleep(0.2)
import ray
ray.init(address=f"{host}:{port}", logging_level=logging.ERROR, log_to_driver=False)
while True:
    nodes = [n for n in ray.nodes() if n["Alive"]]
    if len(nodes) >= want or time.monotonic() > deadline:
        break
    time.sleep(0.2)
print(json.dumps([[n["NodeManagerAddress"], n["NodeID"], n["Resources"].get("CPU")]
                  for n in nodes]))
"""


@dataclass(frozen=True)
class TwoNodes:
    """The cluster as the tests use it.

    Attributes:
        head_ns: the namespace of the head, where the driver must run too.
        address: the head's ``HOST:PORT``.
        env: the environment of every process of the cluster, the driver's included.
        node_ids: each node's id, by its address (from ``ray.nodes()``).
    """

    head_ns: str
    address: str
    env: dict[str, str]
    node_ids: dict[str, str]


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


def namespaces() -> set[str]:
    return {line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()}


def in_namespace(ns: str, args: list[str], env: dict[str, str], **kwargs) -> subprocess.Popen:
    """``args`` in network namespace ``ns`` (``ip netns exec`` execs it: same pid), in its own
    process group."""
    return subprocess.Popen(
        ["ip", "netns", "exec", ns, *args], env=env, start_new_session=True, **kwargs
    )


@pytest.fixture(scope="module")
def two_nodes(request):
    """A Ray head (1 CPU) in namespace A on ``HEAD_IP`` and a worker node (1 CPU) in namespace B
    on ``WORKER_IP``, joined. Removed at the end, and the namespaces checked to be gone."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and ip(8) for the nodes' network namespaces")
    if importlib.util.find_spec("ray") is None:  # not importorskip: this process needs no Ray
        pytest.skip("needs the ray extra")
    head_ns, worker_ns = f"pdq-a-{os.getpid()}", f"pdq-b-{os.getpid()}"
    # Short: Ray's unix sockets live under the temp dir, and a socket path has ~107 characters.
    base = Path(tempfile.mkdtemp(prefix="pdn", dir="/tmp"))
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT), "RAY_AUTH_MODE": "disabled"}
    env.pop(ray_cluster.LOOPBACK_SWITCH, None)  # it would refuse the second node
    ray_cli = str(Path(sys.executable).with_name("ray"))
    procs: list[subprocess.Popen] = []
    made: list[str] = []
    try:
        for ns in (head_ns, worker_ns):
            ip("netns", "add", ns)
            made.append(ns)
            ip("-n", ns, "link", "set", "lo", "up")
        # The veth pair, one end created in each namespace (interface names: 15 characters).
        pid = os.getpid()
        ends = {head_ns: (f"pqa{pid}", HEAD_IP), worker_ns: (f"pqb{pid}", WORKER_IP)}
        (a, _), (b, _) = ends.values()
        ip(*f"link add {a} netns {head_ns} type veth peer name {b} netns {worker_ns}".split())
        for ns, (dev, address) in ends.items():
            ip("-n", ns, "addr", "add", f"{address}/{PREFIX}", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
        common = ["--block", "--num-cpus", "1"]
        head = ["--head", "--port", str(PORT), "--include-dashboard", "false"]
        logs = {}
        for ns, args in (
            (head_ns, [*head, "--node-ip-address", HEAD_IP]),
            (worker_ns, ["--address", f"{HEAD_IP}:{PORT}", "--node-ip-address", WORKER_IP]),
        ):
            logs[ns] = base / f"{ns}.log"
            with logs[ns].open("w") as log:
                procs.append(in_namespace(
                    ns, [ray_cli, "start", *args, *common, "--temp-dir", str(base / ns)], env,
                    stdout=log, stderr=subprocess.STDOUT,
                ))  # fmt: skip
        request.getfixturevalue("local_reference")  # while the nodes start
        waiter = in_namespace(
            head_ns,
            [sys.executable, "-c", WAIT_FOR_NODES, HEAD_IP, str(PORT), "2", str(START_SECONDS)],
            env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        nodes_up = list(procs)
        procs.append(waiter)
        deadline = time.monotonic() + START_SECONDS + 60
        while waiter.poll() is None and time.monotonic() < deadline:
            if any(proc.poll() is not None for proc in nodes_up):  # a node failed to start
                waiter.kill()
            time.sleep(0.2)
        stdout, stderr = waiter.communicate(timeout=60)
        tails = "".join(f"\n{p.name}: ...{p.read_text()[-2000:]}" for p in logs.values())
        assert waiter.returncode == 0, stderr + tails
        nodes = json.loads(stdout)
        # Both nodes, each on the address this module gave it, with its 1 CPU.
        assert sorted((address, cpus) for address, _, cpus in nodes) == [
            (HEAD_IP, 1.0), (WORKER_IP, 1.0),
        ], stdout + tails  # fmt: skip
        yield TwoNodes(head_ns, f"{HEAD_IP}:{PORT}", env, {a: i for a, i, _ in nodes})
    finally:
        for proc in reversed(procs):  # the worker node before the head
            stop_group(proc, timeout=30)
        for ns in made:
            # Anything of the nodes' left in the namespace (all started by this fixture).
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in pids.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
            # Removes its end of the veth pair, and so the pair.
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        shutil.rmtree(base, ignore_errors=True)
        assert not {head_ns, worker_ns} & namespaces(), "a namespace of this test was left"


def beside_the_head(nodes: TwoNodes, args: list[str]) -> str:
    """``per-dqn ARGS`` in the head's namespace, waited for; asserts exit 0, returns stdout."""
    driver = in_namespace(
        nodes.head_ns, [sys.executable, "-m", "per_dqn.cli", *args], nodes.env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        stdout, stderr = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    assert driver.returncode == 0, stdout + stderr
    return stdout


def test_a_sweep_lands_runs_on_both_nodes_and_matches_the_local_backend(
    two_nodes, local_reference, tmp_path
):
    """The tiny sweep (4 runs, 1 CPU per node) from a driver beside the head: the driver sees
    both nodes, the storage check passes on both (the namespaces share the filesystem), runs land
    on each node (their provenance names the node's address and id), exit 0, and every summary
    and model.pt equals the local backend's: where a run ran changes nothing it computes."""
    out = tmp_path / "sweep"
    args = ray_args(out, "--address", two_nodes.address, *sets("run.device=cpu"))
    stdout = beside_the_head(two_nodes, args)
    assert f"ray: the Ray cluster at {two_nodes.address}: 2 nodes, 2 CPUs\n" in stdout
    assert "4 runs, 0 finished, 4 to run\n  on Ray\n" in stdout
    runs = assert_same_runs(out, local_reference)
    where = {rel: s["provenance"]["ray"] for rel, s in runs.items()}
    assert {w["node_ip"] for w in where.values()} == {HEAD_IP, WORKER_IP}, where
    for w in where.values():
        assert w["node_id"] == two_nodes.node_ids[w["node_ip"]] and w["attempt"] == 0, where
    assert "Runs used: 4 of 4 planned; missing: none." in (out / "report.md").read_text()


def test_a_distributed_run_has_an_actor_on_each_node_and_learns(two_nodes, tmp_path):
    """``train --actors 2 --address HEAD``, the learner in a driver beside the head: one actor on
    each node (1 CPU each), as the run's provenance records where each ran; the run learns: its
    final greedy evaluation at 10,000 env steps is past 50 (an untrained network's greedy play
    holds the pole about 9 steps, random play about 22; held-out runs with actors were at 108 to
    390 there). Exit 0, and the run dir is a single run's."""
    run_dir = tmp_path / "run"
    settings = sets("run.device=cpu", "train.eval_interval=0", "train.final_eval_episodes=10")
    args = ["train", "-c", "cartpole.yaml", "--actors", "2", "--address", two_nodes.address,
            "--steps", "10000", "--seed", "1", "--run-dir", str(run_dir), "--quiet",
            *settings]  # fmt: skip
    beside_the_head(two_nodes, args)
    summary = json.loads((run_dir / "summary.json").read_text())
    actors = summary["provenance"]["actors"]
    assert [a["index"] for a in actors] == [0, 1]
    assert {a["node_ip"] for a in actors} == {HEAD_IP, WORKER_IP}, actors
    for a in actors:
        assert a["node_id"] == two_nodes.node_ids[a["node_ip"]]
    assert summary["env_steps"] >= 10_000 and not summary["interrupted"]
    assert summary["final_eval_return_mean"] > 50, summary["final_eval_return_mean"]
    assert (run_dir / "model.pt").is_file()
