"""Ray's cluster housekeeping, for a sweep's Ray backend (``sweeps/backends/ray.py``) and a
distributed run (``per_dqn.distributed``): the options checked before anything starts, Ray
imported so that a cluster started here stays on loopback, an address probed before it is
joined, and a cluster this process started shut down with every process of it that outlives
``ray.shutdown`` (found through ``/proc``).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# What a user without the extra is told, in full.
MISSING_RAY = (
    "--backend ray and --actors need Ray, which is the optional `ray` extra: "
    "pip install 'per-dqn[ray]' (or ray[default]>=2.60)"
)


# Set to 0 before Ray is imported, it keeps a single-node cluster on 127.0.0.1 (ray 2.60).
LOOPBACK_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


# Ray retries a task whose worker died this many times unless --retries says otherwise.
DEFAULT_RETRIES = 3


def import_ray(loopback: bool = False) -> Any:
    """The ``ray`` module.

    Args:
        loopback: keep the clusters this process starts or joins on 127.0.0.1 (the module
            docstring says why). Ray reads the switch once, when it is first imported, so it is
            set here, before that.

    Raises:
        ValueError: ``MISSING_RAY``, when the extra is not installed.
    """
    if loopback:
        os.environ.setdefault(LOOPBACK_SWITCH, "0")
    try:
        import ray
    except ImportError:
        raise ValueError(MISSING_RAY) from None
    return ray


@dataclass(frozen=True)
class RayOptions:
    """How a sweep uses Ray.

    Attributes:
        address: ``HOST:PORT`` or ``auto`` of an existing cluster; None starts a local one.
        cpus_per_run: CPUs each run's task holds.
        gpus_per_run: GPUs each run's task holds; a fraction shares one GPU among runs.
        retries: how many times a run whose worker died is retried.
        local_cpus: the CPUs of the local cluster (None: one per core); only without ``address``.
        pack: runs per task at most.
        dashboard: start the local cluster with Ray's dashboard, on 127.0.0.1; only without
            ``address`` (an existing cluster has the dashboard it was started with). Off by
            default: on a 2-core machine a packed CartPole sweep took 13.8% more wall time on Ray
            than on the local backend with it, 3.2% without (docs/guides/ray.md).
    """

    address: str | None = None
    cpus_per_run: float = 1.0
    gpus_per_run: float = 0.0
    retries: int = DEFAULT_RETRIES
    local_cpus: int | None = None
    pack: int = 1
    dashboard: bool = False


def check_options(options: RayOptions) -> RayOptions:
    """Validates the options, before anything is created.

    Raises:
        ValueError: one line naming the option and its value.
    """
    if options.address is not None and options.address != "auto":
        host, colon, port = options.address.rpartition(":")
        if not colon or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ValueError(f"--address: expected auto or HOST:PORT, got {options.address!r}")
    if not options.cpus_per_run > 0:
        raise ValueError(f"--cpus-per-run must be > 0, got {options.cpus_per_run}")
    if not options.gpus_per_run >= 0:
        raise ValueError(f"--gpus-per-run must be >= 0, got {options.gpus_per_run}")
    if options.gpus_per_run > 1 and options.gpus_per_run != int(options.gpus_per_run):
        # Ray's own rule: above one GPU, a task holds whole GPUs.
        raise ValueError(
            f"--gpus-per-run above 1 must be a whole number, got {options.gpus_per_run}"
        )
    if options.retries < 0:
        raise ValueError(f"--retries must be >= 0, got {options.retries}")
    if options.address is not None and options.local_cpus is not None:
        raise ValueError(
            "--workers sizes the local Ray cluster; with --address the cluster's own CPUs "
            f"decide, got --workers {options.local_cpus}"
        )
    if options.address is not None and options.dashboard:
        raise ValueError(
            "--dashboard cannot be used with --address: it starts the local cluster's "
            "dashboard, and a cluster at an address has the one it was started with"
        )
    if options.local_cpus is not None and options.local_cpus < 1:
        raise ValueError(f"--workers must be >= 1, got {options.local_cpus}")
    import_ray(loopback=wants_loopback(options))
    return options


def wants_loopback(options: RayOptions) -> bool:
    return options.address is None or is_loopback(options.address)


def is_loopback(address: str) -> bool:
    if address == "auto":
        return False
    host = address.rpartition(":")[0].strip("[]")
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


# How long the driver waits for the head's port to accept a connection before giving up.
CONNECT_SECONDS = 10.0


def check_reachable(address: str) -> None:
    """Fails fast where nothing listens at ``HOST:PORT``: ``ray.init`` itself retries for ever.

    Raises:
        ValueError: one line naming the address and why.
    """
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS):
            pass
    except OSError as exc:
        raise ValueError(
            f"--address {address}: no Ray cluster answers there ({exc.strerror or exc})"
        ) from None


def shutdown(ray: Any, others: dict[int, str] | None) -> None:
    """Disconnects from Ray; for a cluster this process started (``others`` given: the
    descendants it had before), also ends any of the cluster's processes that outlive
    ``ray.shutdown``.

    Ray ends the processes it started, but not always their own children: stopped while it was
    starting, the dashboard's multiprocessing forkserver and resource tracker, or the raylet's
    dashboard and runtime-env agents, stayed alive as orphans (seen with ray 2.60). So this
    process's descendants, less ``others`` and theirs, are listed before the shutdown, and those
    still alive after it get SIGTERM, then SIGKILL after 2 s.
    """
    before = descendants(others) if others is not None else {}
    ray.shutdown()
    if not before:
        return
    left = {pid: start for pid, start in before.items() if alive(pid, start)}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 2.0
        while True:
            for pid in list(left):
                with contextlib.suppress(ChildProcessError, OSError):
                    os.waitpid(pid, os.WNOHANG)  # a child of this process: reaped, not a zombie
            left = {pid: start for pid, start in left.items() if alive(pid, start)}
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if not left:
            return


def proc_stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def descendants(others: dict[int, str]) -> dict[int, str]:
    """This process's live descendants, pid to start time (a reused pid is not the same
    process), less ``others`` and their own; empty where there is no ``/proc``."""
    parents: dict[int, tuple[int, str]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and (fields := proc_stat(entry.name)):
                parents[int(entry.name)] = (int(fields[1]), fields[19])
    found: dict[int, str] = {}
    frontier = {os.getpid()}
    while frontier:
        frontier = {
            pid
            for pid, (parent, start) in parents.items()
            if parent in frontier and others.get(pid) != start
        }
        found |= {pid: parents[pid][1] for pid in frontier}
    return found


def alive(pid: int, start: str) -> bool:
    """Whether ``pid`` is the process that started at ``start`` and is not a zombie."""
    fields = proc_stat(pid)
    return fields is not None and fields[0] != "Z" and fields[19] == start
