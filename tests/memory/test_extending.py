"""``docs/extending.md``'s replay-kind recipe, followed literally with its throwaway kind ``scan``.

The recipe's code blocks, and nothing else, are written into a copy of the repository: the
sampler module, the registry entry and the kind's own test. The copy's shared tests must then
pick the kind up, and the command line must train with it, without a line edited anywhere else.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from support import copy_of_the_repo, run_in_copy

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "extending.md"
# The registry's closing lines in kinds.py: "after the last entry" is just before them.
REGISTRY_END = "    )\n})  # fmt: skip\n"
# Test files whose tests a new kind must reach: the memory's contract, an exact resume, packs
# bit for bit, and its own.
SHARED = ("test_kinds.py", "test_build.py", "test_replay.py", "test_footprint.py", "test_resume.py",
          "test_packs.py", "test_scan.py")  # fmt: skip


def recipe() -> dict[str, str]:
    """The replay-kind section's code blocks, by the path each names on its first line."""
    text = DOC.read_text()
    section = text[text.index("## A replay kind") :]
    section = section[: section.index("\n## ", 1)]
    blocks = {}
    for block in re.findall(r"```python\n(.*?)```", section, re.S):
        code = textwrap.dedent(block)
        first, _, body = code.partition("\n")
        path = first.removeprefix("# ").split(":")[0]
        blocks[path] = body if path.endswith("kinds.py") else code
    return blocks


def test_the_recipe_is_one_module_one_entry_and_one_test():
    assert list(recipe()) == [
        "per_dqn/memory/scan.py", "per_dqn/memory/kinds.py", "tests/memory/test_scan.py",
    ]  # fmt: skip


@pytest.mark.slow
def test_a_kind_built_from_the_recipe_alone_reaches_the_shared_tests_and_the_cli(tmp_path):
    copy = copy_of_the_repo(tmp_path, ("per_dqn", "tests", "configs"))
    blocks = recipe()
    kinds = copy / "per_dqn/memory/kinds.py"
    registry = kinds.read_text()
    assert registry.count(REGISTRY_END) == 1
    entry = textwrap.indent(blocks.pop("per_dqn/memory/kinds.py"), " " * 8)
    kinds.write_text(registry.replace(REGISTRY_END, entry + REGISTRY_END))
    for path, code in blocks.items():
        (copy / path).write_text(code)

    where = run_in_copy(copy, "-c", "import per_dqn; print(per_dqn.__file__)")
    assert where.stdout.strip() == str(copy / "per_dqn" / "__init__.py"), where.stderr

    tests = run_in_copy(
        copy, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "0",
        "-o", "addopts=", "-rA", "-k", "scan or every_replay_kind", "tests/memory",
        "tests/test_build.py", "tests/test_resume.py", "tests/test_packs.py",
    )  # fmt: skip
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    passed = re.findall(r"^PASSED (\S+)", tests.stdout, re.M)
    reached = {Path(node.split("::")[0]).name for node in passed}
    assert set(SHARED) <= reached, sorted(reached)
    assert len(passed) >= 20, passed

    run_dir = copy / "runs" / "scan"
    train = run_in_copy(
        copy, "-m", "per_dqn.cli", "train", "--config", "cartpole.yaml", "--replay", "scan",
        "--steps", "600", "--set", "train.learning_starts=200", "--set", "train.eval_interval=0",
        "--set", "train.final_eval_episodes=1", "--device", "cpu", "-q", "--run-dir",
        str(run_dir),
    )  # fmt: skip
    assert train.returncode == 0, train.stderr[-3000:]
    assert (run_dir / "summary.json").is_file() and (run_dir / "model.pt").is_file()
    assert "kind: scan" in (run_dir / "config.yaml").read_text()

    helped = run_in_copy(copy, "-m", "per_dqn.cli", "ablate", "--help")
    assert re.search(r"Arms, comma-separated replay kinds \([^)]*\bscan\)", helped.stdout), (
        helped.stdout
    )
    planned = run_in_copy(copy, "-m", "per_dqn.cli", "plan", "--config", "cartpole.yaml",
                          "--replay", "scan")  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    assert "replay memory      scan, " in planned.stdout
