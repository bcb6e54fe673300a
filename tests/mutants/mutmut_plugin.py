"""A pytest plugin for `make mutation` only (``[tool.mutmut]`` in pyproject.toml loads it).

Two adjustments to how mutmut drives pytest, neither of which changes what a test checks:

* mutmut first runs the suite once in "stats" mode, to learn which tests call which mutated
  function; it says so through ``MUTANT_UNDER_TEST=stats`` in the environment, which the tests'
  own ``per-dqn`` subprocesses inherit. There, in another working directory, mutmut's recorder
  looks for its config, finds none and raises, and the test fails. Its record would be lost with
  the subprocess anyway, so the subprocesses of the stats run are given no ``MUTANT_UNDER_TEST``
  and run the unmutated code; this process stays in stats mode through mutmut's process-local
  copy of the name. In the runs of each mutant the variable is left alone, so a mutant also runs
  in the subprocesses and a test that drives the CLI can kill it.
* For each mutant, mutmut hands pytest the tests that call the mutated function, in no
  particular order, and stops at the first failure. They are run cheapest first, each file's
  tests together, cheapest files first: a mutant that a unit test kills is then killed in a
  second, and a file's module-scoped fixtures (a trained run, for the evaluation tests) are built
  once per mutant, not once per stretch of that file's tests. The costs are each test's setup,
  call and teardown in the stats run, which this plugin writes to ``DURATIONS`` (mutmut records
  the call alone, which puts a file whose fixtures train a run among the cheapest).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

# The modes mutmut sets besides a mutant's name.
_NOT_A_MUTANT = {"", "stats", "fail", "list_all_tests", "mutant_generation"}
# Each test's seconds in the stats run, setup and teardown included (in mutants/, the cwd).
DURATIONS = Path("mutmut-test-durations.json")

_stats_run = False
_measured: dict[str, float] = defaultdict(float)


def pytest_configure(config) -> None:
    global _stats_run
    if os.environ.get("MUTANT_UNDER_TEST") == "stats":
        del os.environ["MUTANT_UNDER_TEST"]
        _stats_run = True


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
