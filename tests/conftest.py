"""Fixtures shared by test files in several folders (helper functions are in support.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workdir(tmp_path, monkeypatch) -> Path:
    """An empty working directory, made the cwd: runs and sweeps would land in its runs/."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
