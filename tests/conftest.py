"""Fixtures shared by test files in several folders (helper functions are in support.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """An empty working directory, made the cwd: runs and sweeps would land in its runs/."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


# The marks of the tests that take longest (each over ~5 s); xdist hands them out first.
LONG = ("slow", "kill", "ray", "bench_smoke")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    """`make test` runs on two pytest-xdist workers (``-n 2 --dist loadgroup``).

    * The tests that start a real Ray cluster share one worker, one after another: two clusters at
      once would each see two CPUs of a two-core machine and wait on each other's tasks. (This
      hook runs before xdist reads the groups; without xdist the mark does nothing.)
    * Under xdist the long tests come first, so that the last minutes are short tests on both
      workers rather than one long test on one while the other idles. Otherwise the order is
      the files' own."""
    for item in items:
        if item.get_closest_marker("ray") is not None:
            item.add_marker(pytest.mark.xdist_group("ray"))
    if config.getoption("dist", "no") != "no":
        items.sort(key=lambda item: not any(item.get_closest_marker(m) for m in LONG))
