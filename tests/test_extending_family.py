"""``docs/extending.md``'s env-family recipe, followed literally with its throwaway family
``toytext`` (issue 46: a throwaway family touched 8 files, and the doc named 4).

The recipe's code blocks, and nothing else, are written into a copy of the repository: the family's
module, its shipped config and its own test. The copy's shared family tests must then pick the
family up under its own name, its envs must save and restore exactly, and the command line must
train on it, without a line edited anywhere else.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from support import copy_of_the_repo, run_in_copy

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "extending.md"
# The shared tests a new family must reach, each under the family's name.
SHARED = {
    "test_every_family_states_every_field",
    "test_every_family_builds_its_training_and_evaluation_envs",
    "test_every_family_s_default_network_is_built",
    "test_every_family_s_eval_caps_fill_the_config",
    "test_each_family_s_envs_restore_exactly_or_the_family_says_they_cannot",
    "test_the_families_import_only_each_other_at_their_top",
}


def recipe() -> dict[str, str]:
    """The env-family section's code blocks, by the path each names on its first line."""
    text = DOC.read_text()
    section = text[text.index("## An env family") :]
    section = section[: section.index("\n## ", 1)]
    blocks = {}
    for block in re.findall(r"```(?:python|yaml)\n(.*?)```", section, re.S):
        code = textwrap.dedent(block)
        first = code.partition("\n")[0]
        blocks[first.removeprefix("# ")] = code
    return blocks


def test_the_recipe_is_one_module_one_config_and_one_test():
    assert list(recipe()) == [
        "per_dqn/envs/families/toytext.py", "per_dqn/configs/toytext.yaml",
        "tests/test_toytext.py",
    ]  # fmt: skip


@pytest.mark.slow
def test_a_family_built_from_the_recipe_alone_reaches_the_shared_tests_and_the_cli(tmp_path):
    copy = copy_of_the_repo(tmp_path)
    for path, code in recipe().items():
        assert not (copy / path).exists(), path
        (copy / path).write_text(code)

    where = run_in_copy(copy, "-c", "import per_dqn; print(per_dqn.__file__)")
    assert where.stdout.strip() == str(copy / "per_dqn" / "__init__.py"), where.stderr

    tests = run_in_copy(
        copy, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-n", "0",
        "-o", "addopts=", "-rA", "tests/test_families.py", "tests/test_toytext.py",
        "tests/test_env_state.py::"
        "test_each_family_s_envs_restore_exactly_or_the_family_says_they_cannot",
        "tests/test_architecture.py::test_the_families_import_only_each_other_at_their_top",
    )  # fmt: skip
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    passed = re.findall(r"^PASSED \S+::(\S+)", tests.stdout, re.M)
    reached = {name.split("[")[0] for name in passed if "toytext" in name}
    assert reached >= SHARED, sorted(SHARED - reached)
    assert "test_every_family_has_a_shipped_config" in passed
    assert "test_the_grid_s_state_reaches_the_agent_one_hot" in passed

    run_dir = copy / "runs" / "toytext"
    train = run_in_copy(
        copy, "-m", "per_dqn.cli", "train", "--config", "toytext.yaml", "--steps", "800",
        "--set", "train.eval_interval=0", "--set", "train.final_eval_episodes=2",
        "--device", "cpu", "-q", "--run-dir", str(run_dir),
    )  # fmt: skip
    assert train.returncode == 0, train.stderr[-3000:]
    assert (run_dir / "summary.json").is_file() and (run_dir / "model.pt").is_file()
    assert "id: ToyText/FrozenLake-v1" in (run_dir / "config.yaml").read_text()
