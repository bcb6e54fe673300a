"""Fixtures of the distributed-run tests."""

from __future__ import annotations

import importlib.util

import pytest

from per_dqn.cluster import housekeeping


@pytest.fixture
def ray_env(monkeypatch):
    """Loopback clusters without token files, for the processes a test starts. Ray is not
    imported in the test process: imported there without the loopback switch, it would refuse
    a later test's local cluster in the same process."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("needs the ray extra")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv(housekeeping.LOOPBACK_SWITCH, "0")
