"""Smoke runs of the scripts in ``benchmarks/``: they run at tiny sizes and print their table.

The figures of a smoke run mean nothing; these tests only keep the scripts working (and on the
public APIs they use) as the package changes under them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_script(name: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Runs ``benchmarks/<name>`` with this checkout's ``per_dqn`` first on the path."""
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / name), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


@pytest.mark.bench_smoke
def test_replay_benchmark_smoke_prints_a_table():
    proc = run_script("replay.py", "--smoke")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "baselines agree with PrioritizedReplay" in proc.stderr
    rows = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 7 and not set(cells[1]) <= {"-", ":"}:
            rows[cells[0]] = cells[1:]
    assert rows.pop("implementation")[0] == "add/s"
    for name in (
        "per_dqn UniformReplay",
        "per_dqn PrioritizedReplay (alpha 0.6, numba)",
        "vectorised-numpy sum tree (alpha 0.6)",
        "pure-Python sum tree (alpha 0.6)",
        "per_dqn RankBasedReplay (alpha 0.7)",
    ):
        cells = rows[name]
        numbers = cells if name != "per_dqn UniformReplay" else cells[:3] + cells[5:]
        assert all(re.fullmatch(r"[\d,]+(\.\d+)?", c) for c in numbers), (name, cells)
