"""The package's import directions (see ../shared STYLE): checked on the source, statically."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "per_dqn"

# module prefix -> top-level names it must never import
FORBIDDEN = {
    "per_dqn.memory": {"torch", "gymnasium", "ale_py", "per_dqn.agent", "per_dqn.train",
                       "per_dqn.cli", "per_dqn.envs", "per_dqn.metrics", "per_dqn.config"},
    "per_dqn.schedules": {"per_dqn", "torch", "numpy", "gymnasium"},
    "per_dqn.agent": {"gymnasium", "ale_py", "per_dqn.train", "per_dqn.cli", "per_dqn.metrics",
                      "per_dqn.envs"},
}  # fmt: skip
NOBODY_IMPORTS = {"per_dqn.cli", "per_dqn.train"}
# `ablate` is a second composition root: it runs Trainers in worker processes, as `cli` runs one.
ALLOWED_TO_IMPORT_TRAIN = {"per_dqn.cli", "per_dqn.ablate"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def hits(imported: set[str], banned: set[str]) -> set[str]:
    return {m for m in imported for b in banned if m == b or m.startswith(b + ".")}


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_import_directions(path):
    name = module_name(path)
    imported = imports_of(path)
    for prefix, banned in FORBIDDEN.items():
        if name == prefix or name.startswith(prefix + "."):
            assert not hits(imported, banned - {name}), f"{name} imports {hits(imported, banned)}"
    if name not in ALLOWED_TO_IMPORT_TRAIN:
        bad = hits(imported, NOBODY_IMPORTS - {name})
        assert not bad, f"{name} imports {bad}"


def test_the_checker_sees_imports():
    """Guards against a vacuous pass: the memory package's own imports are found."""
    found = imports_of(PACKAGE / "memory" / "replay.py")
    assert {"numpy", "per_dqn.memory"} <= found


def test_memory_runs_without_torch_gymnasium_or_the_agent():
    """The memory is a standalone library: every name it exports, and a full add / sample /
    update / diagnostics / state round of each kind, load none of torch, gymnasium, ale_py or any
    other per_dqn module (checked at run time, in a fresh interpreter, beyond the static check)."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "import per_dqn.memory as memory\n"
        "from per_dqn.memory import *\n"
        "for kind in KINDS:\n"
        "    m = make_memory(kind, capacity=8, obs_shape=(2,), seed=0)\n"
        "    m.add_batch(np.zeros((5, 2)), [0] * 5, [0.0] * 5, np.ones((5, 2)), [False] * 5)\n"
        "    b = m.sample(4, 0.5)\n"
        "    m.update(PriorityUpdate(b.indices, np.ones(4)))\n"
        "    m.diagnostics(full=True)\n"
        "    m.load_state_dict(m.state_dict())\n"
        "top = {'.'.join(n.split('.')[:2]) for n in sys.modules}\n"
        "bad = [n for n in top if n.split('.')[0] in ('torch', 'gymnasium', 'ale_py')\n"
        "       or (n.startswith('per_dqn.') and n != 'per_dqn.memory')]\n"
        "print(len(memory.__all__))\n"
        "print(','.join(sorted(bad)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        cwd=PACKAGE.parent,
    )  # fmt: skip
    count, bad = out.stdout.split("\n")[:2]
    assert int(count) > 10  # the star import above loaded every exported name
    assert bad == "", f"per_dqn.memory loaded {bad}"
