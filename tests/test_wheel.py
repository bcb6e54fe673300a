"""The package as a user of pip gets it: a wheel built from the checkout, installed into a
fresh venv, trains from any directory with the configs it ships (issue 45).

The venv borrows this one's dependencies (torch, gymnasium, ...) through a ``.pth`` line, which
adds their dir to the path without running its ``.pth`` files, so this checkout's editable
install does not come along: ``per_dqn`` there is the wheel's alone, which the test checks.
Installing the dependencies afresh would take minutes of downloads for no more coverage of
what the wheel itself holds.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_wheel_installs_into_a_fresh_venv_and_trains_from_its_shipped_config(tmp_path):
    # Built from a copy of what the wheel is made of: a build/ left in a checkout by an
    # earlier build keeps modules removed since, and setuptools would pack them again.
    source = tmp_path / "source"
    shutil.copytree(ROOT / "per_dqn", source / "per_dqn",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(wheels), str(source)],
        check=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    (wheel,) = wheels.glob("per_dqn-*-py3-none-any.whl")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                       check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    )  # fmt: skip
    borrowed = dict.fromkeys([sysconfig.get_path("purelib"), sysconfig.get_path("platlib")])
    (site / "borrowed-dependencies.pth").write_text("".join(f"{p}\n" for p in borrowed))
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
         str(wheel)],
        check=True, timeout=300,
    )  # fmt: skip
    work = tmp_path / "elsewhere"  # not the checkout: nothing of it on the path
    work.mkdir()
    where = subprocess.run(
        [python, "-c", "import per_dqn, sys; print(per_dqn.__file__)"],
        check=True, capture_output=True, text=True, cwd=work, timeout=120,
    ).stdout.strip()  # fmt: skip
    assert Path(where).is_relative_to(site), where
    assert (site / "per_dqn" / "configs" / "cartpole.yaml").is_file()
    assert (site / "per_dqn" / "configs" / "literature").is_dir()
    result = subprocess.run(
        [env_dir / "bin" / "per-dqn", "train", "--config", "cartpole.yaml", "--steps", "2000",
         "--run-dir", "run", "--quiet"],
        capture_output=True, text=True, cwd=work, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads((work / "run" / "summary.json").read_text())
    assert summary["env_steps"] == 2000 and summary["interrupted"] is False
