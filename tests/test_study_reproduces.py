"""The MinAtar study's archived runs are what this per-dqn makes of their configs: the code path of
the uniform, proportional and rank arms is unchanged since they ran, so the grown study
(``docs/results/minatar.md``, issue 44) takes them as they are instead of running them again.

Each arm's seed-0 Breakout run is made again from its archived ``config.yaml`` for its first
10,000 env steps (9,000 of them learning: 2,250 updates, with their priorities and IS weights),
and every point it logs there must equal the archive's, bit for bit: each episode's return at
its step (about 1,000 episodes) and, for the PER arms, the mean IS weight of each log interval.

The grown study's LAP arm (``minatar-study-six-arms.tar.xz``) is checked the same way: LAP's
loss and draws were rewritten as fused steps (``agent/fused_losses.py``, ``SumTree.sample``)
after its runs were made, and the rewrite keeps their bits.
"""

from __future__ import annotations

import csv
import io
import tarfile
from pathlib import Path

import pytest

import per_dqn
from per_dqn.logs.tags import EPISODE_RETURN, PER_IS_WEIGHT_MEAN
from per_dqn.sweeps import runs

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "results" / "data"
STUDY = DATA / "minatar-study.tar.xz"
GROWN = DATA / "minatar-study-six-arms.tar.xz"
PREFIX_STEPS = 10_000
ARMS = (
    (STUDY, "uniform"),
    (STUDY, "proportional/alpha=0.6,beta0=0.4"),
    (STUDY, "rank/alpha=0.7,beta0=0.5"),
    (GROWN, "lap/alpha=0.4"),
)
TAGS = (EPISODE_RETURN, PER_IS_WEIGHT_MEAN)


class StopAt:
    """Stops a run at its first log point at or past ``steps``."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def on_log(self, env_steps: int, values: dict[str, float]) -> bool:
        return env_steps >= self.steps


def archived_run(archive: Path, arm: str, into: Path) -> dict[str, list[tuple[int, float]]]:
    """Writes the arm's seed-0 Breakout ``config.yaml`` from ``archive`` into ``into``; returns
    its archived points of ``TAGS`` up to ``PREFIX_STEPS``, as ``read_curves`` gives them.
    No skip under another torch: the pinned one (constraints.txt) made these runs, and where
    its floats differ the archive's runs are not this per-dqn's to reuse."""
    run = f"MinAtar-Breakout-v1/{arm}/s0"
    with tarfile.open(archive) as tar:
        config = tar.extractfile(f"{run}/config.yaml").read()
        scalars = tar.extractfile(f"{run}/scalars.csv").read().decode()

    (into / "config.yaml").write_bytes(config)
    points: dict[str, list[tuple[int, float]]] = {tag: [] for tag in TAGS}
    for tag, step, value in list(csv.reader(io.StringIO(scalars)))[1:]:
        if tag in points and int(step) <= PREFIX_STEPS:
            points[tag].append((int(step), float(value)))
    return {tag: pts for tag, pts in points.items() if pts}


def _has_amx() -> bool:
    """This CPU has AMX (a Sapphire Rapids class one, AVX512-FP16 too): its matmul kernels round
    differently from those of the CPU the study's runs were made on (``tests/test_resume.py``'s
    format-2 test measured 6e-8 on weights there). A run made again on it leaves the archived
    trajectory at its first differing ulp, so bit for bit can only be checked on the other class."""
    try:
        return "amx_tile" in Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False


# On a CPU with AMX the prioritised arms' runs leave their archived trajectories (measured: the
# proportional, rank and LAP cases); the uniform arm's keep their bits there, and are checked.
ON_THIS_CPU = [
    pytest.param(archive, arm, id=arm, marks=pytest.mark.skipif(
        _has_amx() and arm != "uniform",
        reason="made on a CPU without AMX; its bits hold only on that class (see _has_amx)"))
    for archive, arm in ARMS
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(("archive", "arm"), ON_THIS_CPU)
def test_an_archived_study_run_is_made_again_bit_for_bit(archive, arm, tmp_path):
    want = archived_run(archive, arm, tmp_path)
    assert len(want[EPISODE_RETURN]) > 500
    if arm != "uniform":
        assert len(want[PER_IS_WEIGHT_MEAN]) == PREFIX_STEPS // 5000
    made = per_dqn.train(
        tmp_path / "config.yaml", overrides=["run.device=cpu"],  # as made, also where CUDA is
        run_dir=tmp_path / "run", callbacks=[StopAt(PREFIX_STEPS)],
    )  # fmt: skip
    assert made.summary["interrupted"]  # stopped by the callback at the prefix's end
    got = {
        tag: [(s, v) for s, v in pts if s <= PREFIX_STEPS]
        for tag, pts in runs.read_curves(made.run_dir, TAGS).items()
    }
    assert {tag: pts for tag, pts in got.items() if pts} == want
