"""Fixtures shared by test files in several folders (helper functions are in support.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """An empty working directory, made the cwd: runs and sweeps would land in its runs/."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def pytest_sessionstart(session) -> None:
    """Under xdist each worker computes on one torch thread, as every run the project starts does
    (`run.torch_threads`). torch's default is one thread per core, so two workers on a two-core
    machine ran four threads, and the tests that build agents directly (the pack exactness tests
    among them: about 3 s alone, 15-51 s in `make test`) spent their time contending."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)


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
