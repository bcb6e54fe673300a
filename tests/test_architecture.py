"""The package's import directions (see ../shared STYLE): checked on the source, statically."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "per_dqn"

# The modules that write a sweep's report; the sweep runner loads none of them.
REPORT_WRITER = {"per_dqn.sweeps.report", "per_dqn.sweeps.measure", "per_dqn.sweeps.markdown",
                 "per_dqn.sweeps.figures", "per_dqn.sweeps.stats"}  # fmt: skip
# The one module that draws; no other module of the package imports matplotlib.
PLOTTING = "per_dqn.sweeps.figures"
# module prefix -> top-level names it must never import
_RUN_IO = {
    "per_dqn.logs.metrics",
    "per_dqn.rundir.dirs",
    "per_dqn.rundir.fileio",
    "per_dqn.logs.console",
}
FORBIDDEN = {
    "per_dqn.memory": {"torch", "gymnasium", "ale_py", "per_dqn.agent", "per_dqn.training.run",
                       "per_dqn.training.loop", "per_dqn.training.build", "per_dqn.cli",
                       "per_dqn.envs.make", "per_dqn.config", "per_dqn.training.health",
                       "per_dqn.rundir.summary", "per_dqn.logs.tags", *_RUN_IO},
    # The learner's contract with the memory: importing it compiles nothing.
    "per_dqn.memory.types": {"per_dqn", "numba"},
    "per_dqn.training.schedules": {"per_dqn", "torch", "numpy", "gymnasium"},
    # Checkpoints store trees of arrays and know no component.
    "per_dqn.rundir.checkpoint": {"per_dqn.agent", "per_dqn.memory", "per_dqn.envs.make",
                                  "per_dqn.training.loop", "per_dqn.training.run",
                                  "per_dqn.training.build", "gymnasium"},
    # The loop does no I/O: no files, run dirs, TensorBoard writer or console of its own.
    "per_dqn.training.loop": {"per_dqn.rundir.checkpoint", "per_dqn.training.run", "per_dqn.cli",
                              "per_dqn.training.evaluate", *_RUN_IO},
    "per_dqn.agent": {"gymnasium", "ale_py", "per_dqn.training.run", "per_dqn.training.loop",
                      "per_dqn.cli", "per_dqn.envs.make", *_RUN_IO},
    # The logger writes what it is handed; it reaches into no part of a run.
    "per_dqn.logs.metrics": {"per_dqn.training.run", "per_dqn.training.loop", "per_dqn.agent",
                             "per_dqn.memory", "per_dqn.cli", "per_dqn.rundir.dirs",
                             "per_dqn.logs.console"},
    # The sweep runner reads run dirs through `runs`; the report writer (its measuring, text and
    # plotting) is the CLI's to call once a sweep ends (issue 13: "ablate imports the report
    # writer"). Planning builds no trainer and knows no backend; a job knows no backend.
    "per_dqn.sweeps.plan": REPORT_WRITER | {"matplotlib", "per_dqn.training.run",
                                            "per_dqn.sweeps.job", "per_dqn.sweeps.backends"},
    "per_dqn.sweeps.job": REPORT_WRITER | {"matplotlib", "per_dqn.sweeps.backends"},
    # A backend is driven by the CLI and never reaches back into it.
    "per_dqn.sweeps.backends": REPORT_WRITER | {"matplotlib", "per_dqn.cli"},
    "per_dqn.sweeps.runs": REPORT_WRITER | {"per_dqn.sweeps.plan", "per_dqn.sweeps.job",
                                            "per_dqn.sweeps.backends", "matplotlib"},
    # One signal helper for every command, a sweep's worker processes included.
    "per_dqn.training.stopping": {"per_dqn"},
    # The report's steps point one way: report -> markdown, figures -> measure -> stats, runs.
    "per_dqn.sweeps.measure": {"per_dqn.sweeps.report", "per_dqn.sweeps.markdown",
                               "per_dqn.sweeps.figures", "matplotlib"},
    "per_dqn.sweeps.markdown": {"per_dqn.sweeps.report", "matplotlib"},
    "per_dqn.sweeps.figures": {"per_dqn.sweeps.report", "per_dqn.sweeps.markdown"},
    "per_dqn.sweeps.stats": {"per_dqn", "matplotlib"},
    # Checking a config (the CLI's first step) must not pay for torch or an environment library.
    "per_dqn.config": {"torch", "gymnasium", "ale_py", "minatar", "per_dqn.envs.make",
                       "per_dqn.agent", "per_dqn.training.build", "per_dqn.training.run",
                       "per_dqn.training.loop", "per_dqn.cli"},
    # Provenance reads the process and its packages, nothing of a run, so `ablate` can use it.
    "per_dqn.rundir.provenance": {"per_dqn"},
    # A tracker receives what the run hands it; it never reaches into the run's parts.
    "per_dqn.logs.tracking": {"per_dqn.training.run", "per_dqn.training.loop", "per_dqn.agent",
                              "per_dqn.memory", "per_dqn.cli", "torch"},
}  # fmt: skip
# The leaves of the house: module -> all it may import beyond the standard library. The tag
# catalogue imports nothing; the health panel and the run record are numpy (and the tags) only,
# so the loop that owns them stays free of I/O; writing files, naming run dirs and drawing the
# console know no part of a run.
ONLY = {
    "per_dqn.logs.tags": set(),
    # What a run asks of its agent: shared by the loop, the evaluation and the pack.
    "per_dqn.training.asking": set(),
    "per_dqn.training.health": {"numpy", "per_dqn.logs.tags"},
    "per_dqn.rundir.summary": {"numpy", "per_dqn.logs.tags"},
    "per_dqn.rundir.fileio": set(),
    # The one reader of what a run dir or sweep dir holds (issue 43): strict models, one-line
    # messages, nothing of a run.
    "per_dqn.rundir.readback": {"pydantic", "per_dqn.config.messages"},
    "per_dqn.rundir.dirs": {"per_dqn.rundir.fileio", "per_dqn.rundir.readback"},
    "per_dqn.logs.console": {"rich"},
    # numpy for its annotations alone (under TYPE_CHECKING): see TABLES.
    "per_dqn.agent.signals": {"numpy"},
    # torch inside the functions that compute an objective, and for annotations: importing the
    # table loads none (test_config_and_families_load_neither_torch_nor_an_env_library).
    "per_dqn.agent.objectives": {"torch", "torch.nn", "per_dqn.agent.fused_losses"},
    # LAP's and PAL's losses as single autograd nodes: torch alone.
    "per_dqn.agent.fused_losses": {"torch"},
    "per_dqn.logs.video": {"numpy", "PIL", "per_dqn.rundir.fileio"},
}
# Tables any layer may ask, though they live in a package it may not import: the priority signals
# and the objectives sit beside the loss, in the agent, and the config checks `replay.*` keys
# against them. Each imports nothing at its top (ONLY), so asking one loads nothing of its
# package.
TABLES = {"per_dqn.agent.signals", "per_dqn.agent.objectives", "per_dqn.envs.families"}
# The package's layers, bottom up (docs/layout.md): a module may import its own layer's and those
# below, and of the layers above only the TABLES. "__init__" is the package root, per_dqn itself.
LAYERS = (
    ("memory",),
    ("config",),
    ("rundir", "logs"),
    ("agent", "envs"),
    ("training",),
    ("api", "policy", "packs", "distributed", "cluster"),
    ("sweeps",),
    ("cli", "__init__"),
)
NOBODY_IMPORTS = {"per_dqn.cli", "per_dqn.training.run"}
# A sweep's job is a second composition root: it runs a Trainer in a worker process or a Ray task;
# `api` is the Python entry point, and the CLI's one way in to training (see CLI_MAY_IMPORT).
ALLOWED_TO_IMPORT_TRAIN = {"per_dqn.sweeps.job", "per_dqn.api"}
# The CLI parses, loads, calls and maps errors to exit codes (issue 22): of the package it imports
# only these, besides its own modules and the root package's `__version__`. Everything else (the
# Trainer, run dirs, checkpoints, evaluation) it reaches through `api`; the env families' table
# and the memory plan's pack refusal and env check, which only the CLI asks for, it asks directly
# (issue 46: the API holds the API only).
CLI_MAY_IMPORT = {"per_dqn.api", "per_dqn.config", "per_dqn.sweeps", "per_dqn.training.stopping",
                  "per_dqn.envs.families", "per_dqn.training.memory_plan",
                  "per_dqn.cli", "per_dqn.__version__"}  # fmt: skip


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, typing: bool = True) -> set[str]:
    """What ``path`` imports, at its top or inside a function; with ``typing`` False, not what
    it imports under ``if TYPE_CHECKING:`` (for annotations alone: nothing runs it)."""
    tree = ast.parse(path.read_text())
    typing_only = set() if typing else {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        for stmt in node.body
        for inner in ast.walk(stmt)
    }  # fmt: skip
    names = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            # `from per_dqn.sweeps import report` imports the module per_dqn.sweeps.report.
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def hits(imported: set[str], banned: set[str]) -> set[str]:
    """The names in ``imported`` that are, or lie under, a ``banned`` one (a ``TABLES`` one
    excepted)."""
    return {
        m for m in imported for b in banned
        if (m == b or m.startswith(b + "."))
        and not any(m == t or m.startswith(t + ".") for t in TABLES)
    }  # fmt: skip


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_import_directions(path):
    name = module_name(path)
    imported = imports_of(path)
    for prefix, banned in FORBIDDEN.items():
        if name == prefix or name.startswith(prefix + "."):
            assert not hits(imported, banned - {name}), f"{name} imports {hits(imported, banned)}"
    if name not in ALLOWED_TO_IMPORT_TRAIN:
        # A package's own modules import each other (per_dqn.cli.train imports per_dqn.cli.common).
        banned = {b for b in NOBODY_IMPORTS if not (name == b or name.startswith(b + "."))}
        bad = hits(imported, banned)
        assert not bad, f"{name} imports {bad}"


def per_dqn_outside(imported: set[str], allowed: set[str]) -> set[str]:
    """The per_dqn modules (and names) in ``imported`` beyond ``allowed`` and their submodules
    (a bare package, ``per_dqn.envs`` of ``from per_dqn.envs import families``, is no import of
    a module)."""
    return {
        m
        for m in imported
        if m.startswith("per_dqn.")
        and not _is_package(m)
        and not any(m == a or m.startswith(a + ".") for a in allowed)
    }


CLI_MODULES = sorted((PACKAGE / "cli").rglob("*.py"))


@pytest.mark.parametrize("path", CLI_MODULES, ids=lambda p: module_name(p))
def test_the_cli_reaches_the_package_only_through_api_config_sweeps_and_stopping(path):
    """Issue 22: every module of ``per_dqn.cli`` imports, of the package, only ``api``,
    ``config``, ``sweeps``, ``stopping``, its own modules and ``__version__`` (imports inside
    functions and under ``TYPE_CHECKING`` included)."""
    bad = per_dqn_outside(imports_of(path), CLI_MAY_IMPORT)
    assert not bad, f"{module_name(path)} imports {bad}"


def test_the_cli_check_sees_what_is_not_allowed(tmp_path):
    """Negative control for the test above: the CLI is a package of one module per command, and
    the imports the one-file CLI made before issue 22 (the Trainer, run dirs, checkpoints, the
    loop's error, the memory's kinds), at the top, in a function or for typing only, are found;
    the allowed ones are not."""
    assert {"train", "evaluate", "plan", "config", "ablate", "report"} <= {
        p.stem for p in CLI_MODULES
    }
    module = tmp_path / "old_cli.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "from per_dqn import __version__, api\n"
        "from per_dqn.config import Config\n"
        "from per_dqn.memory import KINDS\n"
        "from per_dqn.training.stopping import StopSignals\n"
        "from per_dqn.sweeps import plan\n"
        "from per_dqn.cli.common import fail\n"
        "if TYPE_CHECKING:\n"
        "    from per_dqn.training.run import Trainer\n"
        "def train():\n"
        "    from per_dqn.rundir import dirs\n"
        "    import per_dqn.rundir.checkpoint\n"
        "    from per_dqn.training.loop import DivergedError\n"
    )
    found = per_dqn_outside(imports_of(module), CLI_MAY_IMPORT)
    assert found == {
        "per_dqn.memory", "per_dqn.memory.KINDS", "per_dqn.training.run",
        "per_dqn.training.run.Trainer", "per_dqn.rundir.dirs",
        "per_dqn.rundir.checkpoint", "per_dqn.training.loop",
        "per_dqn.training.loop.DivergedError",
    }  # fmt: skip


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` for a chain of attributes on a name; None for anything else (a call, a
    subscript)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


PACKAGE_MODULES = {module_name(p) for p in MODULES}


def private_uses(path: Path) -> list[str]:
    """Where ``path`` uses another module's private name: ``from per_dqn.x import _name``, a
    ``_private`` module in an import, or ``module._name`` on a per_dqn module it imported (by
    ``import per_dqn.x [as y]`` or ``from per_dqn import x [as y]``). A relative import is
    counted too: the check could not follow it, and the package imports absolutely."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found, bound = [], {}  # bound: a local name -> the per_dqn module it names
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            found.append(f"{path.name}:{node.lineno} relative import")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "per_dqn":
            for alias in node.names:
                parts = [*node.module.split("."), alias.name]
                found += [f"{path.name}:{node.lineno} {p}" for p in parts if _private(p)]
                if f"{node.module}.{alias.name}" in PACKAGE_MODULES:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "per_dqn":
                    found += [
                        f"{path.name}:{node.lineno} {p}"
                        for p in alias.name.split(".")
                        if _private(p)
                    ]
                    bound[alias.asname or "per_dqn"] = alias.name if alias.asname else "per_dqn"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = _dotted(node.value)
            if owner is None or owner.split(".")[0] not in bound:
                continue
            head, _, rest = owner.partition(".")
            module = bound[head] + (f".{rest}" if rest else "")
            if module in PACKAGE_MODULES:
                found.append(f"{path.name}:{node.lineno} {module}.{node.attr}")
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_no_module_uses_another_modules_private_names(path):
    """Issue 22: a ``_name`` is its module's own; a name another module needs is made public
    (the benchmarks' own check is in test_benchmarks.py). Attributes of objects (``self._x``,
    ``memory._storage``) are for code review: only names reached through a module are checked."""
    assert private_uses(path) == []


def test_the_private_name_check_sees_private_uses(tmp_path):
    """Negative control for the test above: each way of reaching a private name through a per_dqn
    module is found, once; public names, dunders and private attributes of objects are not."""
    module = tmp_path / "peeks.py"
    module.write_text(
        "import per_dqn.memory.trees\n"
        "import per_dqn.rundir.dirs as rd\n"
        "from per_dqn import __version__\n"
        "from per_dqn.rundir import checkpoint as ckpt\n"
        "from per_dqn.memory import trees\n"
        "from per_dqn.memory.trees import _jit, checked_capacity\n"
        "from per_dqn.cli.main import app, _usage_error\n"
        "from . import sibling\n"
        "ckpt._NAME, ckpt.CHECKPOINTS_DIR, rd._in_use, trees._jit, trees.__name__\n"
        "per_dqn.memory.trees._jit\n"
        "def f(self, other):\n"
        "    return self._fd, other._storage, app._private_field\n"
    )
    assert sorted(private_uses(module)) == sorted([
        "peeks.py:6 _jit", "peeks.py:7 _usage_error", "peeks.py:8 relative import",
        "peeks.py:9 per_dqn.rundir.checkpoint._NAME", "peeks.py:9 per_dqn.rundir.dirs._in_use",
        "peeks.py:9 per_dqn.memory.trees._jit", "peeks.py:10 per_dqn.memory.trees._jit",
    ])  # fmt: skip


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_only_the_figures_module_imports_matplotlib(path):
    """Plotting has one home, ``per_dqn.sweeps.figures``: anything else that drew would load
    matplotlib where no figure is wanted (a training run, the sweep runner, the CLI's parsing)."""
    if module_name(path) != PLOTTING:
        assert not hits(imports_of(path), {"matplotlib"}), f"{module_name(path)} imports matplotlib"


def test_the_checker_sees_matplotlib_where_it_is_imported():
    """Guards against a vacuous pass of the test above: the imports inside the figures module's
    functions are seen."""
    assert {"matplotlib", "matplotlib.figure"} <= imports_of(PACKAGE / "sweeps" / "figures.py")


def outside(imported: set[str], allowed: set[str]) -> set[str]:
    """The names in ``imported`` beyond the standard library and ``allowed`` (``from
    per_dqn.logs import tags`` also names the bare package, which is no import of a module: each
    package's ``__init__`` is its docstring)."""
    return {
        m
        for m in imported
        if m.split(".")[0] not in sys.stdlib_module_names
        and m != "__future__"
        and not _is_package(m)
        and not any(m == a or m.startswith(a + ".") for a in allowed)
    }


def _is_package(name: str) -> bool:
    """Whether ``name`` is ``per_dqn`` or one of its subpackages whose ``__init__`` imports
    nothing (its docstring alone): importing it runs none of the package's code."""
    parts = name.split(".")
    init = PACKAGE.parent.joinpath(*parts) / "__init__.py"
    if parts[0] != "per_dqn" or not init.is_file():
        return False
    return name == "per_dqn" or not imports_of(init)


@pytest.mark.parametrize("name", sorted(ONLY))
def test_leaf_modules_import_only_what_they_may(name):
    path = PACKAGE.joinpath(*name.split(".")[1:]).with_suffix(".py")
    assert not outside(imports_of(path), ONLY[name]), (
        f"{name} imports {outside(imports_of(path), ONLY[name])}"
    )


def test_the_leaf_check_sees_what_is_not_allowed():
    """Negative control for the two checks above: the loop's imports (torch, the agent, the
    health panel) are outside what the health panel may import, and an import of the TensorBoard
    logger is one the loop may not make."""
    found = outside(imports_of(PACKAGE / "training" / "loop.py"), ONLY["per_dqn.training.health"])
    assert {"torch", "per_dqn.agent.result", "per_dqn.training.health"} <= found
    assert "numpy" not in found and "math" not in found
    assert hits(
        {"per_dqn.logs.metrics", "per_dqn.logs.metrics.TensorBoardLogger"},
        FORBIDDEN["per_dqn.training.loop"],
    )


def test_the_checker_sees_imports():
    """Guards against a vacuous pass: the memory package's own imports are found."""
    found = imports_of(PACKAGE / "memory" / "replay.py")
    assert {"numpy", "per_dqn.memory.samplers"} <= found


def test_the_checker_sees_modules_imported_by_from_import():
    """Guards against a vacuous pass: ``from per_dqn.sweeps import runs`` names the module, not
    just its package (the checker once saw only ``per_dqn.sweeps`` there)."""
    assert "per_dqn.sweeps.runs" in imports_of(PACKAGE / "sweeps" / "plan.py")
    assert "per_dqn.sweeps.runs" in imports_of(PACKAGE / "sweeps" / "report.py")


# Run in a fresh interpreter: imports the modules named, then plans a sweep and reads a sweep dir
# back (the run-dir reading a re-run does), and prints which of WATCHED got loaded on the way.
_PROBE = """
import json, sys
from pathlib import Path
for module in sys.argv[2].split(","):
    __import__(module)
if sys.argv[1] == "plan":
    from per_dqn.rundir.fileio import write_json
    from per_dqn.sweeps import plan
    sweep = plan.plan_sweep("cartpole.yaml", ("uniform",), [0], 2000, [], Path("sweep"))
    sweep.out.mkdir()
    write_json(sweep.out / plan.SWEEP_FILE, sweep.record)
    sweep = plan.plan_sweep("cartpole.yaml", ("uniform",), [0], 2000, [], Path("sweep"))
    assert [j.run_dir for j in sweep.pending()] == ["uniform/s0"]
watched = ["per_dqn.sweeps.report", "per_dqn.sweeps.measure", "per_dqn.sweeps.markdown",
           "per_dqn.sweeps.figures", "per_dqn.sweeps.stats", "matplotlib"]
print(json.dumps(sorted(name for name in watched if name in sys.modules)))
"""


def loaded_by(modules: list[str], plan: bool, cwd: Path) -> list[str]:
    """Which of the probe's watched modules a fresh ``python`` loads importing ``modules``."""
    root = str(PACKAGE.parent)
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, "plan" if plan else "import", ",".join(modules)],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": root},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_sweep_runner_never_loads_the_report_writer_or_matplotlib(tmp_path):
    """Issue 13's "ablate imports the report writer": importing the sweep runner, planning a
    sweep and reading its dir back (what a re-run does to skip finished runs) load neither
    ``per_dqn.sweeps.report``, its statistics, nor matplotlib. The CLI loads the report writer
    only once a sweep has ended."""
    modules = ["per_dqn.sweeps.plan", "per_dqn.sweeps.job", "per_dqn.sweeps.backends",
               "per_dqn.sweeps.backends.local", "per_dqn.sweeps.backends.ray",
               "per_dqn.sweeps.runs"]  # fmt: skip
    assert loaded_by(modules, True, tmp_path) == []
    assert (tmp_path / "sweep" / "sweep.json").is_file()  # the probe did read a sweep dir


def test_the_import_probe_sees_the_report_writer(tmp_path):
    """Negative control for the test above: the same probe reports the report writer, its
    measuring, text, figures and statistics when they are imported, and matplotlib when the
    plotting is (importing the report writer alone loads no matplotlib: it draws only when
    asked)."""
    writer = ["per_dqn.sweeps.figures", "per_dqn.sweeps.markdown", "per_dqn.sweeps.measure",
              "per_dqn.sweeps.report", "per_dqn.sweeps.stats"]  # fmt: skip
    assert loaded_by(["per_dqn.sweeps.report"], False, tmp_path) == writer
    found = loaded_by(["per_dqn.sweeps.report", "matplotlib.figure"], False, tmp_path)
    assert found == ["matplotlib", *writer]


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
        "    m.update(PriorityUpdate(b.indices, np.ones(len(b.indices))))\n"
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


def test_config_and_families_load_neither_torch_nor_an_env_library():
    """Beyond the static check: loading and validating a shipped config, asking a family, and
    the tables it checks against (the priority signals, the objectives, what may share a pack)
    load none of torch, gymnasium, ale_py, minatar or numpy (checked in a fresh interpreter)."""
    code = (
        "import sys\n"
        "from per_dqn.envs import families\n"
        "from per_dqn.packs import grouping as packing\n"
        "from per_dqn.agent import objectives, signals\n"
        "from per_dqn.config import load_config, resolve_config_path\n"
        "for name in ('cartpole.yaml', 'atari.yaml', 'minatar.yaml'):\n"
        "    config = load_config(resolve_config_path(name))\n"
        "    families.of(config.env.id), packing.pack_key(config), objectives.objective('pal')\n"
        "heavy = ('torch', 'gymnasium', 'ale_py', 'minatar', 'numpy')\n"
        "print(','.join(sorted({n.split('.')[0] for n in sys.modules} & set(heavy))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        cwd=PACKAGE.parent, env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)},
    )  # fmt: skip
    assert out.stdout.strip() == "", f"loading a config loaded {out.stdout.strip()}"


def top_imports(path: Path) -> set[str]:
    """What ``path`` imports when it is imported: its module-level imports, those inside a
    top-level ``try``, ``if``, ``with`` or loop included, not those inside a function or class or
    under ``if TYPE_CHECKING:``; a relative import as ``.name``."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                names.add("." * node.level + (node.module or ""))
            elif isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for part in (node.body, *(h.body for h in node.handlers), node.orelse,
                             node.finalbody):  # fmt: skip
                    visit(part)
            elif isinstance(node, ast.If | ast.With | ast.For | ast.While):
                visit(node.body)
                visit(getattr(node, "orelse", []))

    visit(ast.parse(path.read_text()).body)
    return names


def outside_stdlib_and_families(imported: set[str]) -> set[str]:
    """The names in ``imported`` that are neither the standard library's nor of the families
    package (a relative import counts as outside: the package imports absolutely)."""
    return {
        m for m in imported
        if not m.startswith("per_dqn.envs.families")
        and (m.startswith(".") or m.split(".")[0] not in sys.stdlib_module_names)
    }  # fmt: skip


FAMILY_MODULES = sorted((PACKAGE / "envs" / "families").glob("*.py"))


@pytest.mark.parametrize("path", FAMILY_MODULES, ids=lambda p: module_name(p))
def test_the_families_import_only_each_other_at_their_top(path):
    """The env families are a table every layer asks (config, envs, build, the networks), so
    importing them loads nothing: at its top, each module of ``per_dqn.envs.families`` imports
    the standard library and its own package only. A family's construction imports gymnasium,
    its game's package and ``envs.common`` inside its functions."""
    bad = outside_stdlib_and_families(top_imports(path))
    assert not bad, f"{module_name(path)} imports {bad} at its top"


def test_the_top_import_check_sees_a_top_import_and_not_a_lazy_one(tmp_path):
    """Negative control for the test above: an import at the top, in a top-level ``try`` or
    ``if``, a relative one and a game package of any name are seen; one under ``TYPE_CHECKING``
    or in a function is not."""
    module = tmp_path / "fam.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "import numpy\n"
        "from per_dqn.envs.families.family import Family\n"
        "from . import sibling\n"
        "try:\n"
        "    import procgen\n"
        "except ImportError:\n"
        "    import json\n"
        "if True:\n"
        "    import cv2\n"
        "if TYPE_CHECKING:\n"
        "    import gymnasium\n"
        "def make():\n"
        "    from per_dqn.envs.common import make_gym\n"
    )
    found = top_imports(module)
    assert found == {"typing", "numpy", "per_dqn.envs.families.family", ".", "procgen", "json",
                     "cv2"}  # fmt: skip
    assert outside_stdlib_and_families(found) == {"numpy", ".", "procgen", "cv2"}


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports at run time (a name imported from a module,
    ``from per_dqn.agent import dqn``, is the module ``per_dqn.agent.dqn`` where that exists)."""
    root = package.name
    names = {
        ".".join(p.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__"): p
        for p in sorted(package.rglob("*.py"))
    }
    return {
        name: {m for m in imports_of(path, typing=False) if m in names and m != name and m != root}
        for name, path in names.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: each strongly connected set of two or more modules
    (Tarjan's algorithm), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_cycles():
    """Issue 46: no two modules of the package import each other, directly or round a longer
    loop, at their top or inside a function (``agent/dqn.py`` and ``agent/pack.py`` did, and so
    did ``api.py`` and ``policy.py``); imports under ``TYPE_CHECKING`` are annotations and do not
    count."""
    assert cycles(import_graph(PACKAGE)) == []


def test_the_cycle_check_sees_cycles(tmp_path):
    """Negative control: a loop through a function-level import and a three-module loop are
    found; an import under TYPE_CHECKING back the other way is not a loop."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("def f():\n    from pkg import a\n")
    (package / "c.py").write_text("import pkg.d\n")
    (package / "d.py").write_text("from pkg import e\n")
    (package / "e.py").write_text("from pkg.c import x\n")
    (package / "h.py").write_text(
        "import typing\nif typing.TYPE_CHECKING:\n    from pkg import f\n"
    )
    (package / "f.py").write_text("from pkg import a\nfrom pkg import h\n")
    assert cycles(import_graph(package)) == [["pkg.a", "pkg.sub.b"], ["pkg.c", "pkg.d", "pkg.e"]]


def _layer_of(module: str) -> str:
    """The layer name of a ``per_dqn`` module: its subpackage or root module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward_imports(path: Path, layer: str | None = None) -> list[str]:
    """The imports of ``path`` (top, function, TYPE_CHECKING) into a higher layer than its own
    (``layer``, or the one its place in the package gives), the TABLES and bare packages aside."""
    rank = {name: i for i, group in enumerate(LAYERS) for name in group}
    mine = rank[layer or _layer_of(module_name(path))]
    return sorted(
        m for m in imports_of(path)
        if m.startswith("per_dqn.") and m != "per_dqn.__version__" and not _is_package(m)
        and not any(m == x or m.startswith(x + ".") for x in TABLES)
        and rank[_layer_of(m)] > mine
    )  # fmt: skip


def test_every_module_is_in_a_layer():
    """A new subpackage or root module joins LAYERS (and docs/layout.md) before it is used."""
    named = {name for group in LAYERS for name in group}
    found = {_layer_of(module_name(path)) for path in MODULES}
    found |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert found - {"configs"} == named


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_imports_point_down_the_layers(path):
    """Issue 46: the layout shows the layers (docs/layout.md). memory, then config, then the
    files a run writes and what it logs, then the learner and the envs, then training, then the
    API (with the packs that run runs together), then the sweeps, then the CLI: no module imports
    a layer above its own, save a TABLE."""
    assert upward_imports(path) == []


def test_the_layer_check_sees_an_upward_import(tmp_path):
    """Negative control: the memory importing the Trainer, the TensorBoard logger importing the
    Trainer under TYPE_CHECKING and the training loop importing a sweep are found; config asking
    the families and the objectives (tables) and training importing the memory are not."""
    for name, text, expected in [
        ("memory/x.py", "def f():\n    from per_dqn.training.run import Trainer\n",
         ["per_dqn.training.run", "per_dqn.training.run.Trainer"]),
        ("logs/x.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from per_dqn.training import run\n", ["per_dqn.training.run"]),
        ("training/x.py", "from per_dqn.sweeps import plan\nfrom per_dqn.memory import KINDS\n",
         ["per_dqn.sweeps.plan"]),
        ("config/x.py", "from per_dqn.envs import families\n"
                        "from per_dqn.agent.objectives import objective\n", []),
    ]:  # fmt: skip
        module = tmp_path / "per_dqn" / name
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text(text)
        assert upward_imports(module, name.split("/")[0]) == expected, name
