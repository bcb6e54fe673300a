"""The README's claims about the code, checked against the code: the number of mutants `make
mutants` applies and the mutation run's table; and the training guide's pointer to the TensorBoard
tag reference, which the site generates from the code."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def section(text: str, heading: str) -> str:
    """The lines under ``heading`` up to the next heading of any level."""
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    following = re.search(r"^#+ ", text[start:], re.MULTILINE)
    return text[start : start + following.start()] if following else text[start:]


def test_the_training_guide_points_at_the_generated_tag_reference():
    """The tag table is generated from ``tags.SCALAR_TAGS`` into docs/reference/tags.md when the
    site builds (docs/_ext/reference.py), so no hand-written copy can drift; the training guide's
    "TensorBoard tags" section must link to that page rather than list tags of its own."""
    guide = section((ROOT / "docs/guides/training.md").read_text(), "## TensorBoard tags")
    assert "](../reference/tags.md)" in guide
    assert not [line for line in guide.splitlines() if line.startswith("|")], "a tag table by hand"


def load_mutants():
    """tests/mutants/mutants.py as the module ``mutants`` (test_mutants.py may have loaded it)."""
    if "mutants" in sys.modules:
        return sys.modules["mutants"]
    spec = importlib.util.spec_from_file_location("mutants", ROOT / "tests/mutants/mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutants"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", ["README.md", "docs/testing.md"])
def test_the_readme_mutant_count_is_the_mutant_list_s(page):
    """Pins drift between the `make mutants` paragraph of the README and of docs/testing.md ("it
    applies each of N one-line bugs ... all N caught") and ``MUTANTS`` in
    tests/mutants/mutants.py: a mutant added or removed without the paragraph following (the
    testing page said 20 while the list held 21)."""
    text = " ".join((ROOT / page).read_text().split())  # the paragraph is wrapped
    applied = re.search(r"`make mutants` .*?applies each of (\d+) one-line bugs", text)
    caught = re.search(r"all (\d+) caught", text)
    assert applied and caught, f"{page}: the `make mutants` paragraph changed shape"
    count = len(load_mutants().MUTANTS)
    assert int(applied.group(1)) == int(caught.group(1)) == count


def load_mutation_table():
    """tests/mutants/mutation_table.py (`make mutation`'s table) as a module."""
    path = ROOT / "tests/mutants/mutation_table.py"
    spec = importlib.util.spec_from_file_location("mutation_table", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation_table"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_readme_mutation_table_has_the_run_s_modules_and_the_documented_equivalents():
    """Pins drift between the README's `make mutation` table, the modules ``[tool.mutmut]``
    mutates and the equivalent mutants docs/mutation.md explains: a module run without a row (or
    a row for one no longer run), or an equivalent added to or dropped from the doc without the
    table's count following."""
    table = load_mutation_table()
    lines = section(README.read_text(), "### Mutation testing").splitlines()
    header = next(line for line in lines if line.startswith("| module |"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    rows = {}
    for line in lines:
        if line.startswith("| per_dqn."):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            rows[cells[0]] = dict(zip(columns, cells, strict=True))
    assert list(rows) == [table.module_name(path) for path in table.mutated_paths()]
    documented = {module: 0 for module in rows}
    for key, row in table.equivalents().items():
        module = key.rpartition(".x")[0]
        assert row.split("|")[1].strip() == module, f"docs/mutation.md: {key} under another module"
        documented[module] += 1
    assert {module: int(row["equivalent"]) for module, row in rows.items()} == documented


def test_the_mutation_run_counts_only_the_scoped_functions():
    """Pins what `make mutation` runs: every module whole but the envs' (their state capture and
    restore functions alone, MinAtar's game state's included, are given to mutmut and counted),
    policy.py (its code check and the loader that calls it) and the checkpoint modules (their
    readers, not their writers)."""
    table = load_mutation_table()
    patterns = table.run_patterns(table.mutated_paths())
    assert "per_dqn.training.loop.*" in patterns and "per_dqn.envs.make.*" not in patterns
    assert "per_dqn.envs.state.x_env_state__mutmut_*" in patterns
    assert "per_dqn.envs.make.xǁEnvsǁstate_dict__mutmut_*" in patterns
    assert table.in_scope("per_dqn/envs/state.py", "per_dqn.envs.state.x__check__mutmut_3")
    assert not table.in_scope(
        "per_dqn/envs/state.py", "per_dqn.envs.state.x__check_minatarX__mutmut_3"
    )
    assert not table.in_scope(
        "per_dqn/envs/families/minatar.py", "per_dqn.envs.families.minatar.x_make_one__mutmut_1"
    )
    assert table.in_scope(
        "per_dqn/envs/families/minatar.py", "per_dqn.envs.families.minatar.x_save_game__mutmut_1"
    )
    assert table.in_scope("per_dqn/training/loop.py", "per_dqn.training.loop.xǁLoopǁstep__mutmut_1")
    assert "per_dqn.rundir.readback.*" in patterns and "per_dqn.rundir.checkpoint.*" not in patterns
    assert "per_dqn.policy.x_check_run_code__mutmut_*" in patterns
    assert table.in_scope(
        "per_dqn/training/checkpoints.py", "per_dqn.training.checkpoints.x_check_owner__mutmut_2"
    )
    assert not table.in_scope(
        "per_dqn/rundir/checkpoint.py", "per_dqn.rundir.checkpoint.x_write_checkpoint__mutmut_2"
    )
    assert not table.in_scope("per_dqn/policy.py", "per_dqn.policy.xǁPolicyǁact__mutmut_1")


def test_the_readme_s_first_sweep_draws_curves():
    """Issue 45, item 2: the README's first sweep ran 8,000 steps under cartpole.yaml's
    eval_interval of 10,000, so each run was evaluated once: its curves were dots and its AUC the
    final score. Its command, as written, now gives ten evaluations a run and no warning."""
    import shlex

    from per_dqn.config import load_config, parse_override, resolve_config_path

    text = README.read_text()
    start = text.index(".venv/bin/per-dqn ablate -c cartpole.yaml")
    command = text[start : text.index("\n```", start)].split("\n.venv/bin/tensorboard")[0]
    args = shlex.split(command.replace("\\\n", " "))
    sets = [args[i + 1] for i, arg in enumerate(args) if arg == "--set"]
    steps = args[args.index("--steps") + 1]
    overrides = [parse_override(t) for t in [*sets, f"train.total_env_steps={steps}"]]
    train = load_config(resolve_config_path(args[args.index("-c") + 1]), overrides).train
    assert train.evaluations == 10 and train.schedule_warning() is None


def test_a_second_mutation_run_runs_new_modules_changed_functions_and_what_is_left(tmp_path):
    """Pins `make mutation`'s resume (``run_args``): a module new to the run gets its mutants
    alone (the first version gave mutmut every module's whole pattern, and mutmut runs again
    every mutant it is named: seen when the fused losses joined issue 44's run), a function whose
    code changed since its results gets all its mutants (the first version ran none of them),
    and the rest only what was not run or not caught, documented equivalents once run aside."""
    from mutmut.mutation.file_mutation import compute_function_hashes

    table = load_mutation_table()
    old = "def kept(x):\n    return x + 1\n\n\ndef changed(x):\n    return x - 1\n"
    (tmp_path / "per_dqn").mkdir()
    (tmp_path / "per_dqn" / "m.py").write_text(old.replace("x - 1", "x - 2"))
    (tmp_path / "mutants" / "per_dqn").mkdir(parents=True)
    codes = {"per_dqn.m.x_kept__mutmut_1": 1, "per_dqn.m.x_kept__mutmut_2": 0,
             "per_dqn.m.x_kept__mutmut_3": None, "per_dqn.m.x_kept__mutmut_4": 0,
             "per_dqn.m.x_changed__mutmut_1": 1}  # fmt: skip
    meta = {"exit_code_by_key": codes, "hash_by_function_name": compute_function_hashes(old)}
    (tmp_path / "mutants" / "per_dqn" / "m.py.meta").write_text(json.dumps(meta))
    equivalent = {"per_dqn.m.x_kept__mutmut_4": "a documented equivalent"}
    paths = ["per_dqn/m.py", "per_dqn/fresh.py"]
    assert table.run_args(paths, equivalent, root=tmp_path) == [
        "per_dqn.m.x_changed__mutmut_*", "per_dqn.m.x_kept__mutmut_2",
        "per_dqn.m.x_kept__mutmut_3", "per_dqn.fresh.*",
    ]  # fmt: skip
    (tmp_path / "per_dqn" / "m.py").write_text(old + "# a comment changes no function\n")
    assert table.run_args(paths[:1], equivalent, root=tmp_path) == [
        "per_dqn.m.x_kept__mutmut_2", "per_dqn.m.x_kept__mutmut_3",
    ]  # fmt: skip
