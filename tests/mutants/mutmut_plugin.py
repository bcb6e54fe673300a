"""A pytest plugin for `make mutation` only (``[tool.mutmut]`` in pyproject.toml loads it).

Two adjustments to how mutmut drives pytest, neither of which changes what a test checks:

* mutmut first runs the suite once in "stats" mode, to learn which tests call which mutated
  function; it says so through ``MUTANT_UNDER_TEST=stats`` in the environment, which the tests'
  own ``per-dqn`` subprocesses inherit. There, in another working directory, mutmut's recorder
  looks for its config, finds none and raises, and the test fails. Its record would be lost with
  the subprocess anyway, so the subprocesses of the stats run are given no ``MUTANT_UNDER_TEST``
  and run the unmutated code; this process stays in stats mode through mutmut's process-local
  copy of the name. A spawned process (a sweep's local worker) would run mutmut's script again,
  as Python runs its parent's main script in such a child, and fail the same way: mutmut's main
  module is made to name no file, so the child runs none. In the runs of each mutant the variable
  is left alone, so a mutant also runs in the subprocesses and a test that drives the CLI can
  kill it.
* For each mutant, mutmut hands pytest the tests that call the mutated function, in no
  particular order, and stops at the first failure. They are run cheapest first, each file's
  tests together, cheapest files first: a mutant that a unit test kills is then killed in a
  second, and a file's module-scoped fixtures (a trained run, for the evaluation tests) are built
  once per mutant, not once per stretch of that file's tests. The costs are each test's setup,
  call and teardown in the stats run, which this plugin writes to ``DURATIONS`` (mutmut records
  the call alone, which puts a file whose fixtures train a run among the cheapest).

And one narrowing of what a mutant is run against, which can only lower a score:

* A module in ``FOCUS`` is judged by its own test files alone. The reader of every file read
  back (``readback.py``), the run-dir helpers, the checkpoint readers and the provenance record
  are called by nearly every test that trains; run against all of them, each of their mutants
  would take minutes and the modules days. In the stats run, a test outside a module's focus
  files is not recorded as calling that module's functions, so their mutants run only the
  focus tests: a mutant that only some other test would catch counts as a survivor.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import pytest

# The modes mutmut sets besides a mutant's name.
_NOT_A_MUTANT = {"", "stats", "fail", "list_all_tests", "mutant_generation"}
# Each test's seconds in the stats run, setup and teardown included (in mutants/, the cwd).
DURATIONS = Path("mutmut-test-durations.json")

# Module -> the test files that judge it (paths from the repository root).
FOCUS: dict[str, tuple[str, ...]] = {
    "per_dqn.rundir.readback": (
        "tests/test_readback.py", "tests/sweeps/test_sweep_dir_trust.py",
        "tests/test_run_dir_paths.py", "tests/test_trust.py",
    ),
    "per_dqn.config.trust": ("tests/test_trust.py", "tests/test_run_dir_paths.py"),
    "per_dqn.policy": (
        "tests/test_trust.py", "tests/test_run_dir_paths.py", "tests/test_evaluate.py",
    ),
    "per_dqn.rundir.dirs": (
        "tests/test_run_dir_paths.py", "tests/test_readback.py", "tests/test_faults.py",
        "tests/test_api.py", "tests/sweeps/test_job.py", "tests/sweeps/test_sweep_dir_trust.py",
        "tests/test_metrics.py",
    ),
    "per_dqn.rundir.checkpoint": (
        "tests/test_checkpoint.py", "tests/test_readback.py", "tests/test_run_dir_paths.py",
        "tests/test_faults.py", "tests/test_resume.py", "tests/test_evaluate.py",
    ),
    "per_dqn.rundir.latest": (
        "tests/test_checkpoint.py", "tests/test_readback.py", "tests/test_run_dir_paths.py",
        "tests/test_faults.py", "tests/test_resume.py", "tests/test_evaluate.py",
    ),
    "per_dqn.rundir.arrays": (
        "tests/test_checkpoint.py", "tests/test_readback.py", "tests/test_run_dir_paths.py",
        "tests/test_faults.py", "tests/test_resume.py", "tests/test_evaluate.py",
    ),
    "per_dqn.rundir.weights": (
        "tests/test_checkpoint.py", "tests/test_readback.py", "tests/test_run_dir_paths.py",
        "tests/test_faults.py", "tests/test_resume.py", "tests/test_evaluate.py",
    ),
    "per_dqn.training.checkpoints": (
        "tests/test_checkpoint.py", "tests/test_readback.py", "tests/test_run_dir_paths.py",
        "tests/test_faults.py", "tests/test_resume.py", "tests/test_evaluate.py",
    ),
    "per_dqn.rundir.provenance": ("tests/test_provenance.py",),
    # Every run's learner is a pack (of one for a single run), so every test that trains calls
    # the pack's code; the packs' own tests, the agent's and the kinds' judge it.
    "per_dqn.agent.pack": (
        "tests/agent/test_pack.py", "tests/test_packs.py", "tests/agent/test_dqn.py",
        "tests/agent/test_objectives.py", "tests/agent/test_relo.py",
        "tests/agent/test_signals.py", "tests/agent/test_layout.py",
        "tests/test_kinds_everywhere.py",
    ),
    "per_dqn.packs.lockstep": (
        "tests/test_packs.py", "tests/sweeps/test_job_packs.py",
        "tests/sweeps/test_packed_sweeps.py", "tests/test_kinds_everywhere.py",
    ),
    "per_dqn.packs.grouping": (
        "tests/test_packs.py", "tests/sweeps/test_job_packs.py",
        "tests/sweeps/test_packed_sweeps.py",
    ),
    # Every update computes an objective and a priority signal, and every run of a kind
    # samples through its sampler: each is judged by its own tests and the learner's.
    "per_dqn.agent.objectives": (
        "tests/agent/test_objectives.py", "tests/agent/test_dqn.py", "tests/agent/test_pack.py",
        "tests/memory/test_laber.py", "tests/memory/test_relo_pal.py", "tests/test_packs.py",
    ),
    "per_dqn.agent.fused_losses": (
        "tests/agent/test_objectives.py", "tests/agent/test_dqn.py", "tests/agent/test_pack.py",
        "tests/memory/test_relo_pal.py", "tests/test_packs.py",
    ),
    "per_dqn.agent.signals": (
        "tests/agent/test_signals.py", "tests/agent/test_relo.py", "tests/agent/test_pack.py",
        "tests/agent/test_dqn.py",
    ),
    "per_dqn.memory.lap": (
        "tests/memory/test_lap.py", "tests/memory/test_relo_pal.py", "tests/memory/test_kinds.py",
        "tests/memory/test_replay.py", "tests/memory/test_samplers.py",
        "tests/agent/test_objectives.py", "tests/test_kind_keys.py",
    ),
    "per_dqn.memory.laber": (
        "tests/memory/test_laber.py", "tests/memory/test_kinds.py", "tests/memory/test_replay.py",
        "tests/memory/test_samplers.py", "tests/agent/test_objectives.py",
        "tests/test_kind_keys.py",
    ),
    "per_dqn.memory.relo": (
        "tests/memory/test_relo_pal.py", "tests/memory/test_kinds.py",
        "tests/memory/test_replay.py", "tests/memory/test_samplers.py", "tests/agent/test_relo.py",
        "tests/test_kind_keys.py",
    ),
    "per_dqn.memory.pal": (
        "tests/memory/test_relo_pal.py", "tests/memory/test_kinds.py",
        "tests/memory/test_replay.py", "tests/memory/test_samplers.py",
        "tests/agent/test_objectives.py", "tests/test_kind_keys.py",
    ),
}  # fmt: skip

_stats_run = False
_measured: dict[str, float] = defaultdict(float)


def pytest_configure(config) -> None:
    global _stats_run
    main = sys.modules.get("__main__")
    if Path(getattr(main, "__file__", None) or "").name == "mutmut":
        # A spawned process (a sweep's local worker) runs its parent's main script again: here
        # mutmut's, which looks for its config in the worker's working directory and raises.
        del main.__file__
    if os.environ.get("MUTANT_UNDER_TEST") == "stats":
        del os.environ["MUTANT_UNDER_TEST"]
        _stats_run = True


def _unfocused(module: str, test_file: str) -> bool:
    return module in FOCUS and test_file not in FOCUS[module]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Once mutmut's recorder has filed this test's calls: strike the test from those of each
    ``FOCUS`` module that it is not among the judges of."""
    yield
    if _stats_run:
        from mutmut.state import state

        test = item.nodeid.removeprefix("mutants/")
        test_file = test.split("::")[0]
        for name, tests in state().tests_by_mangled_function_name.items():
            if _unfocused(name.rpartition(".")[0], test_file):
                tests.discard(test)


def pytest_runtest_logreport(report) -> None:
    if _stats_run:
        _measured[report.nodeid] += report.duration


def pytest_sessionfinish(session) -> None:
    if not _stats_run or not _measured:
        return
    try:
        known = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    DURATIONS.write_text(json.dumps({**known, **_measured}), encoding="utf-8")


def _durations() -> dict[str, float] | None:
    try:
        return json.loads(DURATIONS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    try:
        return json.loads(Path("mutmut-stats.json").read_text(encoding="utf-8"))["duration_by_test"]
    except (OSError, ValueError, KeyError):
        return None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items) -> None:
    if os.environ.get("MUTANT_UNDER_TEST", "") in _NOT_A_MUTANT:
        return
    durations = _durations()
    if durations is None:
        return
    cost = {item.nodeid: durations.get(item.nodeid, 1.0) for item in items}
    per_file: dict[str, float] = defaultdict(float)
    for item in items:
        per_file[item.location[0]] += cost[item.nodeid]
    items.sort(key=lambda i: (per_file[i.location[0]], i.location[0], cost[i.nodeid]))
