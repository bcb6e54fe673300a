"""The driver side of test_ray_backend's local-cluster test, run in a process of its own.

``python tests/sweeps/ray_driver.py OUT`` plans the tiny sweep (uniform and proportional, seeds
0 and 1, 600 steps, on CPU) into OUT, starts a local 2-CPU Ray cluster with its dashboard with
``connect`` and asks the dashboard for its page, checks
its storage, runs the sweep on it with the progress display off a terminal, shows runs through a
real board actor (``board_lines``), shuts the cluster down, and prints what it saw as one JSON
object. The test asserts on that object.

Not in the test process: Ray's driver state is per process, and after several
``ray.init``/``ray.shutdown`` cycles the threads Ray left behind crashed pytest at exit (SIGSEGV
after every test had passed, in CI). Not collected by pytest (no ``test_`` prefix).
"""

from __future__ import annotations

import io
import json
import os
import sys
import urllib.request
from pathlib import Path

from rich.console import Console

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support
from support import TINY

from per_dqn.cluster.connection import connect
from per_dqn.cluster.housekeeping import RayOptions, import_ray
from per_dqn.config import parse_override
from per_dqn.logs import tags
from per_dqn.sweeps import plan
from per_dqn.sweeps.backends import ray as ray_backend
from per_dqn.sweeps.progress import ProgressReporter, SweepProgress


def board_lines(ray) -> list[str]:
    """What the display shows of runs that report through a real board actor, as the tasks'
    ``ProgressReporter`` does, with no race against the driver's polls: the reporter's first report
    (``starting``) and a log point's steps and SPS, then the same board after a run's task has
    returned (gone from the display, whatever the board last heard). Calls from one process to
    one actor run in order, so the snapshot sees both reports. The elapsed time is cut off.

    Pins the CI failure where the end-to-end test saw no run between two log points, and so
    checked no steps at all, because its runs were faster than the 1 s poll."""
    board = ray.remote(num_cpus=0)(ray_backend._Board).remote()
    # The actor's process is up before the display's poll, which waits 1 s at most.
    assert ray.get(board.snapshot.remote(), timeout=60) == {}
    text = io.StringIO()
    console = Console(file=text, force_terminal=False, width=200)
    try:
        with SweepProgress(4, done=1, console=console, plain_interval_s=0.0) as progress:
            shown = ray_backend.Shown(board, progress, done=1)
            send = board.report.remote  # what a task's reporter sends through
            ProgressReporter(send, "proportional/s1", 600)
            ProgressReporter(send, "uniform/s0", 600).on_log(300, {tags.PERF_SPS: 1234.4})
            shown.refresh(ray, {"proportional/s1", "uniform/s0"})
            shown.done = 2
            shown.refresh(ray, {"proportional/s1"})
    finally:
        ray.kill(board)
    return [line.split("  elapsed")[0] for line in text.getvalue().splitlines()]


def niceness() -> int:
    """This process's niceness (run as a Ray task)."""
    return os.nice(0)


def main(out: Path) -> dict:
    ray = import_ray(loopback=True)
    overrides = [parse_override(t) for t in [*TINY, "run.device=cpu"]]
    sweep = plan.plan_sweep(
        "cartpole.yaml", ("uniform", "proportional"), (0, 1), 600, overrides, out
    )
    sweep.out.mkdir()
    seen: dict = {}
    options = RayOptions(local_cpus=2, dashboard=True)
    with connect(options, ray_backend.Cluster) as cluster:
        nodes = ray.nodes()
        seen["nodes"] = [[n["NodeManagerAddress"], n["NodeID"]] for n in nodes]
        seen["address"] = cluster.address
        seen["worker_niceness"] = ray.get(ray.remote(num_cpus=0)(niceness).remote())
        seen["started"] = cluster.started
        seen["describe"] = cluster.describe()
        seen["dashboard"] = cluster.dashboard_url
        with urllib.request.urlopen(f"http://{cluster.dashboard_url}/", timeout=30) as page:
            seen["dashboard_status"] = page.status
        cluster.check_storage(sweep.out)
        seen["after_storage_check"] = sorted(p.name for p in sweep.out.iterdir())
        text = io.StringIO()
        console = Console(file=text, force_terminal=False, width=200)
        with SweepProgress(4, console=console, plain_interval_s=0.0) as shown:
            result = cluster.run_sweep(sweep, progress=shown)
        seen["display"] = text.getvalue().splitlines()
        seen["board_lines"] = board_lines(ray)
    seen["initialized_after"] = ray.is_initialized()
    seen["failed"] = len(result.failed)
    seen["interrupted"] = bool(result.interrupted)
    seen["outcomes"] = len(result.outcomes)
    return seen


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]))))
