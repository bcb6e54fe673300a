"""Where a sweep's runs execute: the ``Backend`` protocol, and the registry the CLI picks from.

``per-dqn ablate`` drives every backend the same way, and prints the same lines for each:

1. ``create(name, options)``: the backend, its options checked (a bad one is one line, exit 2,
   before anything else is done);
2. ``backend.check(sweep, todo)``: what can be checked here before the sweep dir is locked, so
   that a refusal creates nothing (the local backend builds a trainer per env);
3. the CLI locks the sweep dir (``plan.lock_sweep_dir``);
4. ``with backend.prepare(sweep, todo) as lines``, only when there is something to run: connect,
   check storage, preflight where the runs will be; a ``ValueError`` (or ``Interrupted``)
   refuses the sweep, and the CLI removes the dir it created. ``lines`` are printed;
5. ``backend.run(sweep, on_outcome)``: writes ``sweep.json`` (``plan.start_sweep``), runs the
   unfinished runs, each pack through ``job.run_jobs``, and returns a ``job.SweepResult``; Ctrl-C or
   SIGTERM arrive as ``KeyboardInterrupt`` (``stopping.StopSignals(raise_first=True)``), after
   which it stops the runs in progress cleanly and returns the result marked ``interrupted``.

A new backend is one module under ``per_dqn/sweeps/backends/`` with ``OPTIONS`` (the ``Options``
fields it takes) and ``create(options) -> Backend``, plus one entry in ``BACKENDS``; the CLI lists
``BACKENDS`` as the choices of ``--backend``. Its modules are imported only when picked, so the
local backend never loads Ray.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from per_dqn.sweeps.job import Outcome, SweepResult
    from per_dqn.sweeps.plan import Job, Sweep

# After Ctrl-C, how long the runs in progress get to checkpoint and write their summaries before
# a backend gives up on them.
STOP_GRACE_SECONDS = 60.0
# name -> the module that implements it (``OPTIONS`` and ``create``).
BACKENDS = {
    "local": "per_dqn.sweeps.backends.local",
    "ray": "per_dqn.sweeps.backends.ray",
}


@dataclasses.dataclass(frozen=True)
class Options:
    """The ``ablate`` options a backend may take, as given on the command line (None: not given).

    Attributes:
        workers: ``--workers``: worker processes (local), or the local Ray cluster's CPUs.
        address: ``--address``: an existing Ray cluster.
        cpus_per_run: ``--cpus-per-run``: CPUs each Ray task holds.
        gpus_per_run: ``--gpus-per-run``: GPUs each Ray task holds.
        retries: ``--retries``: how often a Ray task whose worker died is retried.
        pack: ``--pack``: runs per pack at most (``per_dqn.packs``): a local worker, or a Ray
            task, runs a pack at a time.
        dashboard: ``--dashboard``: the local Ray cluster starts Ray's dashboard.
    """

    workers: int | None = None
    address: str | None = None
    cpus_per_run: float | None = None
    gpus_per_run: float | None = None
    retries: int | None = None
    pack: int | None = None
    dashboard: bool | None = None


class OptionError(ValueError):
    """Options given that the chosen backend does not take; one line each in ``problems``."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class Interrupted(Exception):
    """Ctrl-C or SIGTERM while a backend prepared, before any run started; whatever ``prepare``
    started is gone.

    Attributes:
        exit_code: 130 or 143 as the signal says; None where no signal of ours raised it.
    """

    def __init__(self, message: str, exit_code: int | None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Backend(Protocol):
    """Runs the jobs of a planned sweep somewhere (the module docstring gives the order)."""

    def check(self, sweep: Sweep, todo: Sequence[Job]) -> None:
        """Checks what can be checked before the sweep dir is locked or created.

        Raises:
            ValueError: one line naming the config and the key to blame.
        """

    def prepare(self, sweep: Sweep, todo: Sequence[Job]) -> AbstractContextManager[list[str]]:
        """Makes the backend ready to run ``todo`` (connects, checks storage, preflights) and
        undoes that on the way out; yields the lines to print once it is ready.

        Raises:
            ValueError: one line: the sweep is refused, nothing run.
            Interrupted: Ctrl-C or SIGTERM came first.
        """
        ...

    def describe(self, todo: Sequence[Job]) -> str:
        """Where the runs go, for the sweep's first line: ``2 workers``, ``Ray``."""
        ...

    def run(self, sweep: Sweep, on_outcome: Callable[[Outcome], None] | None) -> SweepResult:
        """Writes ``sweep.json`` and runs the unfinished runs; ``on_outcome`` is called in this
        process as each one ends. ``interrupted`` in the result if Ctrl-C or SIGTERM stopped it
        (the runs in progress checkpoint and keep an interrupted summary)."""
        ...


def flag(field: str) -> str:
    """An ``Options`` field as its command-line flag: ``cpus_per_run`` -> ``--cpus-per-run``."""
    return "--" + field.replace("_", "-")


def create(name: str, options: Options) -> Backend:
    """The backend called ``name``, made from ``options``.

    Raises:
        OptionError: options given that it does not take (they belong to another backend).
        ValueError: an unknown name, or one line naming a bad option and its value.
    """
    if name not in BACKENDS:
        raise ValueError(f"--backend: unknown backend {name!r}; choose from {', '.join(BACKENDS)}")
    module = importlib.import_module(BACKENDS[name])
    problems = []
    for field in dataclasses.fields(options):
        # An empty --address is no option at all.
        if getattr(options, field.name) in (None, "") or field.name in module.OPTIONS:
            continue
        owners = [other for other in BACKENDS if other != name and _takes(other, field.name)]
        whose = " or ".join(f"--backend {owner}'s" for owner in owners)
        problems.append(
            f"{flag(field.name)} cannot be used with --backend {name} (they are {whose})"
        )
    if problems:
        raise OptionError(problems)
    return module.create(options)


def _takes(name: str, field: str) -> bool:
    return field in importlib.import_module(BACKENDS[name]).OPTIONS
