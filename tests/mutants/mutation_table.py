"""The per-module table of a mutmut run (`make mutation`), from the results mutmut keeps in
``mutants/``, with the equivalent mutants of ``docs/mutation.md`` set apart.

    python tests/mutants/mutation_table.py              # the table; exit 1 if a module is < 90%
    python tests/mutants/mutation_table.py --survivors  # and every unexplained survivor's diff
    python tests/mutants/mutation_table.py --run-args   # what `make mutation` runs next

A mutant is *caught* when a test failed (``killed``) or it ran past mutmut's time limit
(``timeout``: a mutant that hangs the program is seen by any user). The score of a module is
caught / (mutants - equivalent): an equivalent mutant (the program behaves the same) cannot be
caught by any test, and docs/mutation.md says why each one is. A survivor named there that a
test now kills is reported as stale, and so is a name that matches no mutant.

Only ``SCOPE``'s functions count in a module that has one (envs.py: its state capture and
restore); `make mutation` runs only those.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "mutation.md"
GOAL = 0.90

# mutmut's exit codes per mutant (mutmut/stats.py), grouped as the table counts them.
KILLED = {1, 3}
TIMEOUT = {-24, 24, 152, 255, 36}
SURVIVED = {0}
NO_TESTS = {5, 33}

# Functions counted per module (mutmut's mangled names: ``x_f`` for a function, ``xǁCǁm`` for a
# method); a module absent here counts whole.
SCOPE: dict[str, tuple[str, ...]] = {
    "per_dqn/envs/make.py": (
        "xǁEnvsǁstate_dict", "xǁEnvsǁcheck_state_dict", "xǁEnvsǁload_state_dict",
    ),
    "per_dqn/envs/state.py": (
        "x_env_state", "x_load_env_state", "x_check_env_state", "x__check", "x__apply",
    ),
    # MinAtar's game state, saved and put back (not its construction).
    "per_dqn/envs/families/minatar.py": ("x__plain", "x_save_game", "x_load_game", "x_check_game"),
    # The code check of a run dir's config, and the reader that calls it.
    "per_dqn/policy.py": ("x_check_run_code", "x__config_file", "x_load"),
    # What reads a checkpoint back: listing, manifest, verification, the choice of the newest
    # usable one, the arrays and weights, and the owner check (not the writer).
    "per_dqn/rundir/checkpoint.py": (
        "x_list_checkpoints", "x_strays", "x__entry_kind", "x_manifest_digest",
        "x_checkpoint_step", "x_read_manifest", "x__read_manifest_at", "x__reason",
        "x__parse_manifest", "xǁMissingǁ__init__", "x__entry", "x__check_size",
        "x__check_digest", "x_file_kind", "x__open_file", "x__open_dir", "x__digest",
        "x_verify_checkpoint", "x_read_verified", "x__read_checked", "x_load_parts",
        "x__load_arrays", "x__tree",
    ),
    # The choice of the newest usable checkpoint, the arrays and the weights read back, and a
    # training checkpoint's loader and owner check (each reader, not its writer).
    "per_dqn/rundir/latest.py": (
        "x__warnings", "x_find_latest", "x_read_latest", "x__dir_stamp", "x__rotated_away",
    ),
    "per_dqn/rundir/arrays.py": ("x_load_tree", "x_join_tree"),
    "per_dqn/rundir/weights.py": ("x_load_weights", "x_unpickling_reason"),
    "per_dqn/training/checkpoints.py": ("x_load_run_checkpoint", "x_run_dir_of", "x_check_owner"),
    # The report's curves, bands and performance profiles (issue 44), not its other figures.
    "per_dqn/sweeps/figures.py": (
        "x_plot_curves", "x_plot_training", "x_profile_taus", "x_plot_profiles",
    ),
}  # fmt: skip


def module_name(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def run_patterns(paths: list[str]) -> list[str]:
    """The mutant names `make mutation` passes to ``mutmut run``: every module whole, or its
    ``SCOPE`` functions."""
    patterns = []
    for path in paths:
        name = module_name(path)
        if path in SCOPE:
            patterns += [f"{name}.{function}__mutmut_*" for function in SCOPE[path]]
        else:
            patterns.append(f"{name}.*")
    return patterns


def function_of(key: str) -> str:
    """The mangled function a mutant's name belongs to (``x_f``, ``xǁCǁm``)."""
    return key.rpartition("__mutmut_")[0].rpartition(".")[2]


def function_in_scope(path: str, function: str) -> bool:
    """Whether ``function`` (mangled) of ``path`` is in the mutation run's scope."""
    return path not in SCOPE or function in SCOPE[path]


def in_scope(path: str, key: str) -> bool:
    return function_in_scope(path, function_of(key))


def equivalents(doc: Path = DOC) -> dict[str, str]:
    """The mutant ids in docs/mutation.md's table of equivalents, each with its row."""
    found = {}
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("|"):
            for key in re.findall(r"`(per_dqn\.[^`]+__mutmut_\d+)`", line):
                found[key] = line
    return found


@dataclass
class Row:
    module: str
    total: int = 0
    killed: int = 0
    timeout: int = 0
    survived: int = 0
    no_tests: int = 0
    equivalent: int = 0
    unchecked: int = 0

    @property
    def score(self) -> float | None:
        judged = self.total - self.equivalent - self.unchecked
        return (self.killed + self.timeout) / judged if judged else None


def collect(paths: list[str], equivalent: dict[str, str]) -> tuple[list[Row], list[str], list[str]]:
    """The rows, the unexplained survivors, and the stale lines of docs/mutation.md."""
    rows, unexplained, stale = [], [], []
    seen = set()
    for path in paths:
        meta = ROOT / "mutants" / f"{path}.meta"
        if not meta.exists():
            raise SystemExit(f"{meta}: no mutmut results; run `make mutation` first")
        codes = json.loads(meta.read_text(encoding="utf-8"))["exit_code_by_key"]
        row = Row(module_name(path))
        for key, code in codes.items():
            if not in_scope(path, key):
                continue
            seen.add(key)
            row.total += 1
            if code is None and key in equivalent:
                row.equivalent += 1  # explained; run_args runs it, to confirm it survives
            elif code is None:
                row.unchecked += 1
            elif code in KILLED or code in TIMEOUT:
                row.killed += code in KILLED
                row.timeout += code in TIMEOUT
                if key in equivalent:
                    stale.append(f"{key} is caught now: remove its row")
            elif key in equivalent:
                row.equivalent += 1
            elif code in SURVIVED or code in NO_TESTS:
                row.survived += code in SURVIVED
                row.no_tests += code in NO_TESTS
                unexplained.append(key)
            else:  # suspicious, segfault, skipped, ...: neither caught nor explained
                row.survived += 1
                unexplained.append(key)
        rows.append(row)
    stale += [f"{key} matches no mutant" for key in sorted(set(equivalent) - seen)]
    return rows, unexplained, stale


def table(rows: list[Row]) -> str:
    head = "| module | mutants | killed | timeout | survived | no tests | equivalent | score |"
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    total = Row("all")
    for row in rows:
        for name in ("total", "killed", "timeout", "survived", "no_tests", "equivalent",
                     "unchecked"):  # fmt: skip
            setattr(total, name, getattr(total, name) + getattr(row, name))
    for row in [*rows, total]:
        score = "-" if row.score is None else f"{100 * row.score:.1f}%"
        unchecked = f" ({row.unchecked} not run)" if row.unchecked else ""
        lines.append(
            f"| {row.module} | {row.total}{unchecked} | {row.killed} | {row.timeout} | "
            f"{row.survived} | {row.no_tests} | {row.equivalent} | {score} |"
        )
    return "\n".join(lines)


def run_args(paths: list[str], equivalent: dict[str, str], root: Path = ROOT) -> list[str]:
    """What `make mutation` gives ``mutmut run``: every mutant of a module without results in
    ``mutants/`` (``run_patterns``: a module new to the run, or a first run); of a module with
    results, every one in scope that was not run (a long run stopped part way) or not caught (a
    survivor, or one without tests: tests may have been added since), but the documented
    equivalents once run (a documented one not yet run is run, to confirm that it survives),
    and every mutant of a function whose code changed since its results (mutmut forgets those
    results when it next generates the module's mutants, and runs a name it is given again);
    nothing when none is left. A function new to a module with results is not seen: delete the
    module's ``.meta`` to run it."""
    names = []
    for path in paths:
        meta = root / "mutants" / f"{path}.meta"
        if not meta.exists():
            names += run_patterns([path])
            continue
        results = json.loads(meta.read_text(encoding="utf-8"))
        changed = changed_functions((root / path).read_text(encoding="utf-8"),
                                    results.get("hash_by_function_name", {}))  # fmt: skip
        name = module_name(path)
        names += [f"{name}.{function}__mutmut_*" for function in changed
                  if function_in_scope(path, function)]  # fmt: skip
        for key, code in results["exit_code_by_key"].items():
            if function_of(key) in changed:
                continue
            caught = code in KILLED or code in TIMEOUT
            explained = key in equivalent and code is not None
            if in_scope(path, key) and not caught and not explained:
                names.append(key)
    return names


def changed_functions(source: str, hashes: dict[str, str]) -> list[str]:
    """The functions of ``hashes`` (mutmut's mangled name -> the hash of its code when its
    mutants were made) whose code in ``source`` differs now (mutmut's own hash of a function's
    syntax tree, so a comment or a blank line changes nothing; a function gone has no mutants
    left to run)."""
    from mutmut.mutation.file_mutation import compute_function_hashes

    now = compute_function_hashes(source)
    return [f for f, digest in hashes.items() if f in now and now[f] != digest]


def mutated_paths() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return list(config["tool"]["mutmut"]["only_mutate"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--survivors", action="store_true", help="show each survivor's diff")
    parser.add_argument(
        "--patterns",
        action="store_true",
        help="print the mutant names a fresh `mutmut run` is given, and exit",
    )
    parser.add_argument(
        "--run-args",
        action="store_true",
        help="print what `make mutation` runs next (nothing: all done), and exit",
    )
    args = parser.parse_args(argv)  # fmt: skip
    paths = mutated_paths()
    if args.patterns:
        print(" ".join(run_patterns(paths)))
        return 0
    if args.run_args:
        print(" ".join(run_args(paths, equivalents())))
        return 0
    rows, unexplained, stale = collect(paths, equivalents())
    print(table(rows))
    for line in stale:
        print(f"docs/mutation.md: {line}")
    if unexplained:
        print(f"\n{len(unexplained)} survivors neither killed nor in docs/mutation.md:")
        for key in unexplained:
            print(f"  {key}")
            if args.survivors:
                diff = subprocess.run([Path(sys.executable).with_name("mutmut"), "show", key],
                                      cwd=ROOT, capture_output=True, text=True).stdout  # fmt: skip
                print("    " + diff.strip().replace("\n", "\n    "))
    below = [r.module for r in rows if r.score is not None and r.score < GOAL]
    if below:
        print(f"\nbelow {GOAL:.0%} of non-equivalent mutants caught: {', '.join(below)}")
    return 1 if below or stale else 0


if __name__ == "__main__":
    sys.exit(main())
