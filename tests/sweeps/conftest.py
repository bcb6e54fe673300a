"""Fixtures shared by the sweep tests of several modules."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import runner, sets, tiny_args

from per_dqn.cli import app


@pytest.fixture(scope="session")
def local_reference(tmp_path_factory) -> Path:
    """The tiny sweep on the local backend, in 2 worker processes, on CPU: what the Ray backend
    must reproduce, on one node (test_ray_backend) or two (test_ray_cluster). Run once."""
    out = tmp_path_factory.mktemp("local") / "sweep"
    result = runner.invoke(app, [*tiny_args(out), *sets("run.device=cpu")])
    assert result.exit_code == 0, result.output
    return out
