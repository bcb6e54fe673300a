"""The package's import directions (see ../shared STYLE): checked on the source, statically."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "per_dqn"

# module prefix -> top-level names it must never import
FORBIDDEN = {
    "per_dqn.memory": {"torch", "gymnasium", "ale_py", "per_dqn.agent", "per_dqn.run",
                       "per_dqn.loop", "per_dqn.build", "per_dqn.cli", "per_dqn.envs",
                       "per_dqn.metrics", "per_dqn.config"},
    "per_dqn.schedules": {"per_dqn", "torch", "numpy", "gymnasium"},
    # Checkpoints store trees of arrays and know no component.
    "per_dqn.checkpoint": {"per_dqn.agent", "per_dqn.memory", "per_dqn.envs", "per_dqn.loop",
                           "per_dqn.run", "per_dqn.build", "gymnasium"},
    # The loop does no I/O: no files, run dirs or TensorBoard writer of its own.
    "per_dqn.loop": {"per_dqn.checkpoint", "per_dqn.run", "per_dqn.cli", "per_dqn.evaluate"},
    "per_dqn.agent": {"gymnasium", "ale_py", "per_dqn.run", "per_dqn.loop", "per_dqn.cli",
                      "per_dqn.metrics", "per_dqn.envs"},
}  # fmt: skip
NOBODY_IMPORTS = {"per_dqn.cli", "per_dqn.run"}
# `ablate` is a second composition root: it runs Trainers in worker processes, as `cli` runs one;
# `api` is the Python entry point beside the CLI.
ALLOWED_TO_IMPORT_TRAIN = {"per_dqn.cli", "per_dqn.ablate", "per_dqn.sweeps.ablate", "per_dqn.api"}


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
