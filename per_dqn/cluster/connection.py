"""A Ray cluster's connection: ``connect`` joins the cluster at an address or starts one on
loopback, and on the way out disconnects, shutting a cluster it started down with its orphans
(``housekeeping.shutdown``); ``Connection`` says where it is and what it holds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from per_dqn.cluster.housekeeping import (
    LOOPBACK_SWITCH,
    RayOptions,
    check_reachable,
    descendants,
    import_ray,
    shutdown,
    wants_loopback,
)
from per_dqn.training.stopping import kept_handler


@dataclass
class Connection:
    """A connected Ray cluster, as ``connect`` yields it.

    Attributes:
        ray: the ``ray`` module.
        options: how the command uses it.
        address: the cluster's GCS address.
        dashboard_url: the Ray dashboard's address, when there is one.
        started: this process started the cluster (no ``--address``).
    """

    ray: Any
    options: RayOptions
    address: str
    dashboard_url: str | None
    started: bool

    def describe(self) -> str:
        """One line: where the cluster is, its nodes and CPUs, and its dashboard."""
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        cpus = sum(n.get("Resources", {}).get("CPU", 0) for n in nodes)
        gpus = sum(n.get("Resources", {}).get("GPU", 0) for n in nodes)
        kind = "a local Ray cluster" if self.started else "the Ray cluster"
        text = f"{kind} at {self.address}: {len(nodes)} node{'s' * (len(nodes) != 1)}, "
        text += f"{cpus:g} CPUs" + (f", {gpus:g} GPUs" if gpus else "")
        if self.dashboard_url:
            text += f"; dashboard http://{self.dashboard_url}"
        return text


C = TypeVar("C", bound=Connection)


@contextlib.contextmanager
def connect(options: RayOptions, kind: type[C] = Connection) -> Iterator[C]:  # type: ignore[assignment]
    """Connects to the cluster at ``options.address``, or starts a local one on loopback, and
    disconnects (shutting a local one down) on the way out; yields a ``kind`` (a
    ``Connection`` or a subclass of it).

    Raises:
        ValueError: one line when no cluster answers at the address.
    """
    ray = import_ray(loopback=wants_loopback(options))
    if wants_loopback(options) and getattr(
        getattr(getattr(ray, "_private", None), "ray_constants", None), "ENABLE_RAY_CLUSTER", False
    ):
        # Ray read the switch when first imported: without it, it would resolve 127.0.0.1 to the
        # host's network address and wait there for a cluster that is not.
        raise ValueError(
            f"Ray was imported before {LOOPBACK_SWITCH}=0 was set, so it cannot keep a "
            "cluster on loopback; set it in the environment"
        )
    if options.address not in (None, "auto"):
        check_reachable(options.address)
    kwargs: dict[str, Any] = {
        "logging_level": logging.ERROR,
        "log_to_driver": False,  # the trainers run --quiet; their stderr stays in Ray's logs
        "configure_logging": True,
    }
    if options.address is None:
        cpus = options.local_cpus or os.cpu_count() or 1
        # Ray starts its workers at niceness 15 unless told otherwise: on a machine busy with
        # other work, the actors of a run (and a sweep's runs) would yield to it all, while the
        # learner in this process would not (measured: a CartPole actor 20x slower beside two
        # busy processes on 2 cores).
        kwargs |= {"num_cpus": cpus, "include_dashboard": options.dashboard,
                   "_system_config": {"worker_niceness": 0}}  # fmt: skip
        if options.dashboard:
            kwargs["dashboard_host"] = "127.0.0.1"
    else:
        kwargs["address"] = options.address
    # the processes this one had before Ray's: never Ray's to end (a test's own head node, say)
    others = descendants({}) if options.address is None else None
    # ray.init puts a SIGTERM handler of its own in place, one that exits at once (code 15): the
    # caller's, which stops the sweep cleanly, is put back.
    with kept_handler(signal.SIGTERM) as handler:
        try:
            context = ray.init(**kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = options.address or "a local cluster"
            raise ValueError(f"--address {where}: cannot connect to Ray: {exc}") from None
        except SystemExit as exc:
            shutdown(ray, others)
            # Ray's own handler, in place while it starts, turns a SIGTERM into SystemExit(15):
            # the caller's handler gets the signal instead.
            if exc.code == signal.SIGTERM and callable(handler):
                handler(signal.SIGTERM, None)
            raise
        except BaseException:  # Ctrl-C while it started: nothing of it stays
            shutdown(ray, others)
            raise
    try:
        if options.address is None:
            # A cluster started for one sweep never listens beyond this machine: checked, since
            # a `ray` imported before `import_ray` set the switch would not have read it.
            exposed = sorted(
                {n["NodeManagerAddress"] for n in ray.nodes()} - {"127.0.0.1", "localhost", "::1"}
            )
            if exposed:
                raise ValueError(
                    f"the local Ray cluster came up on {', '.join(exposed)}, not on loopback; "
                    f"set {LOOPBACK_SWITCH}=0 before Ray is imported"
                )
        info = context.address_info
        yield kind(
            ray,
            options,
            address=info.get("gcs_address") or options.address or "?",
            dashboard_url=context.dashboard_url or None,
            started=options.address is None,
        )
    finally:
        shutdown(ray, others)
