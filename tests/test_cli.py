"""The command line: exit codes and one-line messages for each kind of bad input, and that bad
input creates nothing on disk."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from support import assert_bad_input, tree
from typer.testing import CliRunner

from per_dqn import __version__
from per_dqn.cli import app
from per_dqn.config import load_config, resolve_config_path, shipped_config_names
from per_dqn.memory import KINDS

CHOICES = ", ".join(repr(kind) for kind in KINDS)  # click's wording of the choices

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return path.name


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("train:\n  batch_size: [1,\n", "exp.yaml: line 3, column 1: invalid YAML: expected the "
                                        "node content, but found '<stream end>'"),
        ("replay:\n  alhpa: 0.5\n", "exp.yaml: replay.alhpa: unknown key; did you mean `alpha`?"),
        ("train:\n  batch_size: many\n", "exp.yaml: train.batch_size: must be an integer, got "
                                         "'many'"),
        ("replay:\n  alpha: -1\n", "exp.yaml: replay.alpha: must be >= 0, got -1"),
    ],
)  # fmt: skip
def test_bad_config_file(workdir, text, line):
    name = write(workdir / "exp.yaml", text)
    assert_bad_input(invoke("train", "--config", name), line)
    assert sorted(p.name for p in workdir.iterdir()) == ["exp.yaml"]  # no runs/ created


def test_missing_config_file(workdir):
    result = invoke("train", "--config", "nope.yaml")
    # Every shipped config, the top-level ones first (a new one is listed without an edit here).
    names = shipped_config_names()
    top = [n for n in names if "/" not in n]
    assert names == top + [n for n in names if "/" in n]
    assert {"atari.yaml", "cartpole.yaml", "minatar.yaml"} <= set(top)
    assert "literature/reducible_loss_minatar_relo.yaml" in names
    shipped = ", ".join(names)
    assert_bad_input(result, f"nope.yaml: no such config file (the shipped configs are: {shipped})")
    assert list(workdir.iterdir()) == []


def test_bad_overrides(workdir):
    assert_bad_input(
        invoke("train", "-c", "cartpole.yaml", "--set", "replay.alpha=-2", "--steps", "0"),
        "cartpole.yaml: replay.alpha: must be >= 0, got -2 (set by --set)",
        "cartpole.yaml: train.total_env_steps: must be >= 1, got 0 (set by --steps)",
    )
    assert_bad_input(
        invoke("train", "-c", "cartpole.yaml", "--set", "replay.alpha"),
        "--set 'replay.alpha': expected section.key=value",
    )
    assert_bad_input(
        invoke("train", "-c", "cartpole.yaml", "--set", "train.bach_size=3"),
        "cartpole.yaml: train.bach_size: unknown key; did you mean `batch_size`? (set by --set)",
    )
    assert list(workdir.iterdir()) == []


def test_bad_choice_option_is_a_usage_error(workdir):
    """One line naming the flag, the value and every kind the registry holds, exit 2."""
    result = invoke("train", "-c", "cartpole.yaml", "--replay", "bogus")
    assert_bad_input(
        result,
        f"invalid value for '--replay': 'bogus' is not one of {CHOICES} (see per-dqn train --help)",
    )
    assert list(workdir.iterdir()) == []


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0
    assert result.stdout == f"per-dqn {__version__}\n"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["train", "-c", "cartpole.yaml", "--replay", "prop"],
         f"invalid value for '--replay': 'prop' is not one of {CHOICES} "
         "(see per-dqn train --help)"),
        (["eval", "run", "--episodes=x"],
         "invalid value for '--episodes': 'x': input should be a valid integer, unable to parse "
         "string as an integer (see per-dqn eval --help)"),
        (["train", "-c", "cartpole.yaml", "--bogus", "1"],
         "no such option: --bogus (see per-dqn train --help)"),
        (["plan"], "missing option '--config' / '-c' (see per-dqn plan --help)"),
        (["eval"], "missing argument 'RUN_DIR_OR_CHECKPOINT' (see per-dqn eval --help)"),
    ],
)  # fmt: skip
def test_usage_errors_are_one_plain_line(workdir, args, line):
    """Bug pinned: a bad choice (`--replay prop`), an unknown or a missing option got typer's
    boxed rich panel, while every other bad input gets one `error:` line; now all of them name
    the option and the value on one line, exit 2, and create nothing."""
    result = runner.invoke(app, args, prog_name="per-dqn")
    assert_bad_input(result, line)
    assert list(workdir.iterdir()) == []


def test_usage_errors_from_a_real_process(workdir):
    """The console script's path (``Typer.__call__``), which ``CliRunner`` does not take: the
    same one line on stderr, nothing on stdout, exit 2; `--version` too."""
    command = [sys.executable, "-m", "per_dqn.cli"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([*command, "train", "-c", "cartpole.yaml", "--replay", "prop"],
                          capture_output=True, text=True, env=env, cwd=workdir)  # fmt: skip
    assert done.returncode == 2
    assert done.stdout == ""
    python = shutil.which("python", path=env.get("PATH"))
    same = python is not None and os.path.samefile(python, sys.executable)
    shown = "python" if same else sys.executable
    assert done.stderr == (
        f"error: invalid value for '--replay': 'prop' is not one of {CHOICES} "
        f"(see {shown} -m per_dqn.cli train --help)\n"
    )
    done = subprocess.run([*command, "--version"], capture_output=True, text=True, env=env)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"per-dqn {__version__}\n", "")
    assert list(workdir.iterdir()) == []


def test_unusable_env_creates_nothing(workdir):
    assert_bad_input(
        invoke("train", "-c", "cartpole.yaml", "--set", "env.id=Pendulum-v1"),
        "cartpole.yaml: env.id: DQN needs a Discrete action space, got Box(-2.0, 2.0, (1,), "
        "float32)",
    )
    assert list(workdir.iterdir()) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda(workdir):
    assert_bad_input(
        invoke("train", "-c", "cartpole.yaml", "--device", "cuda"),
        "cartpole.yaml: run.device: 'cuda' was asked for but torch.cuda.is_available() is False",
    )
    assert list(workdir.iterdir()) == []


def test_refuses_a_non_empty_run_dir(workdir):
    run_dir = workdir / "mine"
    run_dir.mkdir()
    (run_dir / "keep.txt").write_text("precious")
    assert_bad_input(
        invoke("train", "-c", "cartpole.yaml", "--run-dir", "mine"),
        "run dir mine exists and is not empty; choose another --run-dir",
    )
    assert [p.name for p in run_dir.iterdir()] == ["keep.txt"]


def test_a_file_where_a_run_dir_should_be(workdir):
    """A file at the run dir's path, or where one of its parent folders should be (``--run-dir``,
    ``run.runs_root``, ``ablate --out``): one line naming the path and the file, exit 2, nothing
    created. Bug pinned: a file in a parent's place passed the check and the run died later with
    a NotADirectoryError traceback."""
    (workdir / "afile").write_text("precious")
    result = invoke("train", "-c", "cartpole.yaml", "--run-dir", "afile")
    assert_bad_input(result, "run dir afile exists and is not a directory")
    result = invoke("train", "-c", "cartpole.yaml", "--run-dir", "afile/run")
    assert_bad_input(result, "run dir afile/run: afile is a file, not a directory")
    result = invoke("train", "-c", "cartpole.yaml", "--set", "run.runs_root=afile/runs")
    assert result.exit_code == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: run dir afile/runs/CartPole-v1__cartpole__proportional__s0__")
    assert line.endswith(": afile is a file, not a directory")
    result = invoke("ablate", "-c", "cartpole.yaml", "--out", "afile/sweep")
    assert_bad_input(result, "sweep dir afile/sweep: afile is a file, not a directory")
    assert [p.name for p in workdir.iterdir()] == ["afile"]
    assert (workdir / "afile").read_text() == "precious"


def test_a_name_too_long_for_the_filesystem_is_one_line_and_creates_nothing(workdir):
    """Issue 23 item 4: a run-dir or sweep-dir component over the filesystem's 255 bytes, given
    (``--run-dir``, ``ablate --out``, ``train --resume``) or built (the default run name from a
    long config name), is one line naming the component (shortened) and its length, exit 2,
    before anything is created. Bugs pinned: a traceback and exit 1 where a parent existed, and
    a refused ``--run-dir x/<300 chars>/y`` that left an empty ``x/`` behind."""
    long = "a" * 300
    shown = f"'{'a' * 24}...{'a' * 12}'"
    too_long = f"the name {shown} is 300 bytes long, more than the filesystem's limit of 255"
    (workdir / "there").mkdir()
    cases = [
        (["train", "-c", "cartpole.yaml", "--run-dir", f"x/{long}/y"], "run dir"),
        (["train", "-c", "cartpole.yaml", "--run-dir", f"there/{long}"], "run dir"),
        (["train", "--resume", f"there/{long}"], "run dir"),
        (["ablate", "-c", "cartpole.yaml", "--out", f"x/{long}/y"], "sweep dir"),
        (["ablate", "-c", "cartpole.yaml", "--out", f"there/{long}"], "sweep dir"),
    ]
    for args, what in cases:
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"error: {what} ")
        assert line.endswith(f"{too_long}; choose a shorter one")
        assert long not in line  # the line stays readable
    # 2 bytes a character: 150 of them are 300 bytes
    result = invoke("train", "-c", "cartpole.yaml", "--run-dir", "é" * 150)
    assert result.exit_code == 2 and "is 300 bytes long" in result.stderr
    # The default name: <env>__<config>__<replay>__s<seed>__<time> from a 230-character config
    shipped = Path(__file__).resolve().parents[1] / "configs" / "cartpole.yaml"
    config = write(workdir / f"{'c' * 230}.yaml", shipped.read_text())
    result = invoke("train", "-c", config, "--set", "run.runs_root=runs")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: run dir runs/CartPole-v1__cccccccccc")
    assert "bytes long, more than the filesystem's limit of 255" in line
    assert sorted(p.name for p in workdir.iterdir()) == [config, "there"]
    assert list((workdir / "there").iterdir()) == []


def test_report_archive_and_unarchive_refuse_a_name_too_long_in_one_line(workdir):
    """issue 43, E12: ``report`` of a path with a 300-byte name was an ``OSError`` traceback,
    exit 1; ``archive`` and ``unarchive`` gave one line (``File name too long``), but exit 1, as
    for a disk that failed. Now each names the component and its length in one line, exit 2,
    as ``train``, ``eval`` and ``ablate`` do, and creates nothing."""
    long, archive = "a" * 300, "a" * 293 + ".tar.xz"  # 300 bytes each

    def too_long(name: str) -> str:
        shown = f"'{name[:24]}...{name[-12:]}'"
        return f"the name {shown} is 300 bytes long, more than the filesystem's limit of 255"

    (workdir / "there").mkdir()
    cases = [
        (["report", long], "sweep dir", long),
        (["report", f"there/{long}"], "sweep dir", long),
        (["archive", long, "sweep.tar.xz"], "sweep dir", long),
        (["archive", "there", archive], "archive", archive),
        (["unarchive", archive, "restored"], "archive", archive),
        (["unarchive", "sweep.tar.xz", long], "sweep dir", long),
        (["unarchive", "sweep.tar.xz", f"there/{long}"], "sweep dir", long),
    ]
    for args, what, name in cases:
        result = invoke(*args)
        assert result.exit_code == 2, (args[0], result.output, result.exception)
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"error: {what} ")
        assert line.endswith(f"{too_long(name)}; choose a shorter one")
        assert name not in line  # the line stays readable
        assert result.stdout == ""
    assert [p.name for p in workdir.iterdir()] == ["there"]
    assert list((workdir / "there").iterdir()) == []


def test_config_show_prints_the_resolved_config(workdir):
    result = invoke("config", "show", "cartpole", "--set", "replay.kind=rank")
    assert result.exit_code == 0, result.output
    (workdir / "shown.yaml").write_text(result.stdout)
    cfg = load_config(workdir / "shown.yaml")
    assert cfg.replay.kind == "rank"
    assert cfg.env.id == "CartPole-v1"


def test_config_validate(workdir):
    good = write(workdir / "good.yaml", "train:\n  batch_size: 32\n  learning_starts: 32\n")
    result = invoke("config", "validate", good)
    assert result.exit_code == 0 and result.stdout == "ok: good.yaml\n"
    bad = write(workdir / "bad.yaml", "train:\n  batch_size: 32\n  learning_starts: 8\n")
    assert_bad_input(
        invoke("config", "validate", bad),
        "bad.yaml: train.learning_starts: must be >= train.batch_size (32), got 8",
    )


def test_no_arguments_shows_help():
    """The usage and every command, on stderr, exit 2 (no command given is a usage error)."""
    result = invoke()
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("Usage: per-dqn [OPTIONS] COMMAND [ARGS]...")
    commands = result.stderr.split("Commands:", 1)[1].split()
    for name in ("train", "eval", "plan", "ablate", "report", "archive", "unarchive", "config"):
        assert name in commands, name


# --- numbers, budgets and allocations (issue items 6-8) -------------------------------------------

REPO = Path(__file__).resolve().parents[1]
# A Q-network 10**12 units wide: 16 TB of weights, which torch fails to allocate at once on any
# machine (the C library refuses it) without touching a page of RAM.
HUGE_WIDTH = "agent.hidden_sizes=[1000000000000]"


@pytest.mark.parametrize(
    ("option", "text"),
    [("--set", "agent.learning_rate=1e400"), ("--set", "replay.alpha=.nan"),
     ("--set", "train.epsilon_end=-.inf")],
)  # fmt: skip
def test_non_finite_numbers_are_refused_with_one_line(workdir, option, text):
    """Issue item 6 from the command line: what the user wrote comes back, 1e400 included."""
    path, value = text.split("=")
    assert_bad_input(
        invoke("train", "-c", "cartpole.yaml", option, text),
        f"cartpole.yaml: {path}: must be a finite number, got {value} (set by --set)",
    )
    name = write(workdir / "exp.yaml", f"agent:\n  gamma: {value}\n")
    assert_bad_input(
        invoke("train", "-c", name), f"exp.yaml: agent.gamma: must be a finite number, got {value}"
    )
    assert sorted(p.name for p in workdir.iterdir()) == ["exp.yaml"]


def test_absurd_thread_counts_are_refused(workdir):
    """torch segfaults at set_num_threads(10**6); the config stops it at 1024."""
    assert_bad_input(
        invoke("train", "-c", "cartpole.yaml", "--set", "run.torch_threads=1000000",
               "--set", "env.env_threads=4294967296"),
        "cartpole.yaml: env.env_threads: must be <= 1024, got 4294967296 (set by --set)",
        "cartpole.yaml: run.torch_threads: must be <= 1024, got 1000000 (set by --set)",
    )  # fmt: skip
    assert list(workdir.iterdir()) == []


STARTS_AFTER_BUDGET = (
    "cartpole.yaml: train.learning_starts: must be < train.total_env_steps (500), got 1000: the "
    "run would end before its first update; lower train.learning_starts or raise "
    "train.total_env_steps (train.total_env_steps set by --steps)"
)


def test_learning_starts_beyond_steps_is_refused_before_anything_starts(workdir):
    """Issue item 7: `--steps 500` under cartpole.yaml's learning_starts of 1000 used to train
    for 500 steps without one update and exit 0."""
    assert_bad_input(invoke("train", "-c", "cartpole.yaml", "--steps", "500"), STARTS_AFTER_BUDGET)
    assert list(workdir.iterdir()) == []


def test_ablate_refuses_learning_starts_beyond_steps_once(workdir):
    """The same check in every run of a sweep, reported once, and no sweep dir."""
    assert_bad_input(
        invoke("ablate", "-c", "cartpole.yaml", "--seeds", "3", "--steps", "500"),
        STARTS_AFTER_BUDGET,
    )
    assert list(workdir.iterdir()) == []


def test_train_refuses_a_network_too_large_to_allocate(workdir):
    """Issue item 8: torch's RuntimeError from the allocator used to end in a traceback."""
    assert_bad_input(
        invoke("train", "-c", "cartpole.yaml", "--set", HUGE_WIDTH),
        "cartpole.yaml: agent.hidden_sizes: cannot allocate the Q-networks for [1000000000000] "
        "(torch could not allocate 14.55 TiB); lower agent.hidden_sizes",
    )
    assert list(workdir.iterdir()) == []


def test_ablate_preflight_refuses_a_network_too_large_to_allocate(workdir):
    assert_bad_input(
        invoke("ablate", "-c", "cartpole.yaml", "--seeds", "2", "--set", HUGE_WIDTH),
        "cartpole.yaml: agent.hidden_sizes: cannot allocate the Q-networks for [1000000000000] "
        "(torch could not allocate 14.55 TiB); lower agent.hidden_sizes",
    )
    assert list(workdir.iterdir()) == []


def test_ablate_preflight_names_the_replay_memory_and_plan_s_estimate(workdir):
    """Issue 43, E4: `ablate` skipped the memory planner and went on to allocate a memory that
    `train` refuses from the planner's estimate (here numpy refused 15 TiB of observations; a
    memory below the machine's RAM but above what is available was allocated until the OOM
    killer ended the worker). Now the planner's one line, as `train` gives it, before any run dir
    is made."""
    result = invoke("ablate", "-c", "cartpole.yaml", "--replay", "uniform", "--seeds", "1",
                    "--set", "replay.capacity=1000000000000")  # fmt: skip
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        "error: cartpole.yaml: replay.capacity: a 1,000,000,000,000-transition uniform memory "
        "needs 41.84 TiB (+1.00 GiB for the rest of the process) but only "
    )
    assert line.endswith("of RAM is available; lower replay.capacity (see `per-dqn plan`)")
    assert list(workdir.iterdir()) == []


LIMITED_CLI = """
import resource, sys
import per_dqn.training.run  # torch, gymnasium, numba: loaded before the limit
from per_dqn.cli import app

vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize:"))
limit = vm + (256 << 20)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
app(sys.argv[1:])
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmSize from /proc")
def test_train_names_plan_s_estimate_when_the_replay_memory_cannot_be_allocated(workdir):
    """Issue item 8, the memory: a real `per-dqn train` process whose address space is limited
    (RLIMIT_AS, as `ulimit -v` or a batch system sets it) to 256 MiB past what its imports use.
    `plan` sees the machine's available RAM and lets a 0.86 GiB memory through; numpy's
    MemoryError then used to end in a traceback. Now: one line with plan's estimate, exit 2,
    nothing on disk."""
    result = subprocess.run(
        [sys.executable, "-c", LIMITED_CLI, "train", "-c", "cartpole.yaml", "-q",
         "--set", "replay.kind=uniform", "--set", "replay.capacity=20000000"],
        cwd=workdir, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        "error: cartpole.yaml: replay.capacity: cannot allocate the 20,000,000-transition uniform "
        "replay memory (Unable to allocate "
    )
    assert "`per-dqn plan` estimates 0.86 GiB for it (+1.00 GiB for the rest of the process) " in (
        line
    )
    assert line.endswith(
        "of RAM available, more than this process may use (a ulimit -v or a container's limit?); "
        "lower replay.capacity"
    )
    assert result.stdout == ""
    assert list(workdir.iterdir()) == []


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A real 300-step CartPole run with a final checkpoint (about 3 s)."""
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    settings = ["train.learning_starts=100", "train.batch_size=32", "replay.capacity=1000",
                "agent.hidden_sizes=[16]", "train.eval_interval=0", "train.final_eval_episodes=1",
                "train.log_interval=100", "run.device=cpu"]  # fmt: skip
    args = ["train", "-c", "cartpole.yaml", "--run-dir", str(run_dir), "-q", "--steps", "300"]
    for text in settings:
        args += ["--set", text]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return run_dir


def edited_copy(run_dir: Path, dest: Path, **train_or_agent: object) -> Path:
    """A copy of ``run_dir`` whose config.yaml was edited by hand (``section__key=value``)."""
    shutil.copytree(run_dir, dest)
    config = yaml.safe_load((dest / "config.yaml").read_text())
    for name, value in train_or_agent.items():
        section, key = name.split("__")
        config[section][key] = value
    (dest / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return dest


def test_resume_refuses_learning_starts_beyond_the_new_budget(finished_run, tmp_path):
    """Issue item 7 under `train --resume --steps`: the budget from --steps is checked against
    a config.yaml whose learning_starts was raised by hand; nothing in the run dir changes."""
    run_dir = edited_copy(finished_run, tmp_path / "run", train__learning_starts=2000)
    before = tree(run_dir)
    config = run_dir / "config.yaml"
    assert_bad_input(
        invoke("train", "--resume", str(run_dir), "--steps", "1000", "-q"),
        f"{config}: train.learning_starts: must be < train.total_env_steps (1000), got 2000: the "
        "run would end before its first update; lower train.learning_starts or raise "
        "train.total_env_steps (train.total_env_steps set by --steps)",
    )
    assert tree(run_dir) == before


def test_resume_refuses_a_network_too_large_to_allocate(finished_run, tmp_path):
    """Issue item 8 under `train --resume`: one line, and the run dir is left as it was."""
    run_dir = edited_copy(finished_run, tmp_path / "run", agent__hidden_sizes=[10**12])
    before = tree(run_dir)
    assert_bad_input(
        invoke("train", "--resume", str(run_dir), "--steps", "600", "-q"),
        f"{run_dir / 'config.yaml'}: agent.hidden_sizes: cannot allocate the Q-networks for "
        "[1000000000000] (torch could not allocate 14.55 TiB); lower agent.hidden_sizes",
    )
    assert tree(run_dir) == before


def test_only_allocation_failures_become_an_allocation_line():
    """Any other RuntimeError while building the trainer is a bug and keeps its traceback. (The
    CUDA text is torch.OutOfMemoryError's wording; this machine has no GPU to raise it.)"""
    from per_dqn.config import Config
    from per_dqn.training.memory_plan import allocation_failure

    assert allocation_failure(RuntimeError("mat1 and mat2 shapes cannot be multiplied"),
                              Config()) is None  # fmt: skip
    line = allocation_failure(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"),
                              Config())  # fmt: skip
    assert line == (
        "agent.hidden_sizes: cannot allocate the Q-networks for [128, 128] (CUDA out of memory. "
        "Tried to allocate 2.00 GiB); lower agent.hidden_sizes"
    )


ENV_IMPORT_FAILS = [
    ("nosuchmod:CartPole-v1", "cannot import module 'nosuchmod' named by 'nosuchmod:CartPole-v1' "
                              "(ModuleNotFoundError: No module named 'nosuchmod')"),
    ("failing_env_module:CartPole-v1", "cannot import module 'failing_env_module' named by "
                                       "'failing_env_module:CartPole-v1' (RuntimeError: broken "
                                       "on import)"),
    ("a:b:CartPole-v1", "'a:b:CartPole-v1' has more than one ':' (expected module:EnvName)"),
]  # fmt: skip


@pytest.mark.parametrize("command", ["train", "plan", "ablate"])
@pytest.mark.parametrize(("env_id", "why"), ENV_IMPORT_FAILS, ids=["missing", "raises", "colons"])
def test_an_env_module_that_does_not_import_is_one_line(workdir, monkeypatch, command, env_id, why):
    """Issue 23 item 5: ``--set env.id=nosuchmod:CartPole-v1`` was a traceback and exit 1 in
    ``train``, ``plan`` and ``ablate``: only gymnasium's own error type was caught, and a
    module's import lets out its own (whatever its type)."""
    modules = workdir / "modules"
    modules.mkdir()
    (modules / "failing_env_module.py").write_text("raise RuntimeError('broken on import')\n")
    monkeypatch.syspath_prepend(str(modules))
    extra = ["--seeds", "1", "--replay", "uniform"] if command == "ablate" else []
    result = invoke(command, "-c", "cartpole.yaml", "--set", f"env.id={env_id}", *extra)
    assert_bad_input(result, f"cartpole.yaml: env.id: {why}")
    assert list(workdir.iterdir()) == [modules]


def test_a_resumed_run_s_config_the_reader_cannot_hold_is_one_line(finished_run, tmp_path):
    """Issue 23 item 6 under ``train --resume`` and ``eval``: a run dir's config.yaml nested
    20,000 deep, or holding an integer of over 4,300 digits, was a traceback and exit 1."""
    for name, text, why in [
        ("deep", f"env:\n  id: {'[' * 20_000}{']' * 20_000}\n",
         "line 2, column 71: invalid YAML: nested deeper than 64 levels"),
        ("long", f"train:\n  batch_size: {'9' * 5_000}\n",
         "line 2, column 15: invalid YAML: an integer of more than 4300 digits"),
    ]:  # fmt: skip
        run_dir = tmp_path / name
        shutil.copytree(finished_run, run_dir)
        config = run_dir / "config.yaml"
        config.write_text(text)
        before = tree(run_dir)
        assert_bad_input(invoke("train", "--resume", str(run_dir), "-q"), f"{config}: {why}")
        shutil.rmtree(run_dir / "checkpoints")  # eval reads the run dir's config.yaml
        assert_bad_input(invoke("eval", str(run_dir)), f"{config}: {why}")
        assert tree(run_dir) == {k: v for k, v in before.items() if "checkpoints" not in k}


def test_a_config_file_or_set_the_reader_cannot_hold_is_one_line(workdir):
    """Issue 23 item 6 from the command line: a file and a ``--set``."""
    name = write(workdir / "deep.yaml", "train:\n  batch_size: " + "[" * 20_000 + "]" * 20_000)
    for command in ("train", "plan", "ablate"):
        assert_bad_input(
            invoke(command, "-c", name),
            "deep.yaml: line 2, column 79: invalid YAML: nested deeper than 64 levels",
        )
    result = invoke("plan", "-c", "cartpole.yaml", "--set", "train.batch_size=" + "9" * 5_000)
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "value is not valid YAML (an integer of more than 4300 digits" in line
    assert sorted(p.name for p in workdir.iterdir()) == ["deep.yaml"]


@pytest.mark.parametrize(
    "command", [[], ["train"], ["eval"], ["plan"], ["ablate"], ["report"], ["config"],
                ["config", "show"], ["config", "validate"]],
)  # fmt: skip
def test_help_reads_whole_in_80_columns(command):
    """Pins two blemishes of ``--help`` (issue 26): a ``<bool>`` beside every flag, and command
    summaries broken at their docstrings' line ends (the list read "... summary.json to the",
    "run dir." on the next line). Now no flag shows a type, and each command in a group's list
    is one whole sentence on one line."""
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output
    lines = result.output.splitlines()
    if "Commands:" in lines:
        listed = lines[lines.index("Commands:") + 1 :]
        assert listed and all(line.rstrip().endswith(".") for line in listed if line.strip())
        assert all(not line.rstrip().endswith("...") for line in listed)
        assert all(len(line) <= 80 for line in listed)


def test_config_show_marks_the_env_keys_the_env_does_not_read():
    """Pins ``config show`` printing Atari-only keys (``sticky_action_prob: 0.25``,
    ``frame_skip``) for CartPole with no sign that CartPole ignores them (issue 26): each such
    key now carries ``# not read by <family> envs``, MinAtar keeps ``full_action_space``
    unmarked, Atari none, and the output still loads as the same config. The comment names the
    family, not the id: an id with a newline or a control character in it (hypothesis found
    one) broke the YAML the command printed."""
    for name, family, unmarked in [
        ("cartpole.yaml", "CartPole-like", {"terminal_on_life_loss"}),  # an id may have lives
        ("minatar.yaml", "MinAtar", {"full_action_space"}),
        ("atari.yaml", "Atari", None),
    ]:
        result = runner.invoke(app, ["config", "show", name])
        assert result.exit_code == 0, result.output
        marked = {
            line.split(":")[0].strip()
            for line in result.output.splitlines()
            if line.endswith(f"  # not read by {family} envs")
        }
        if unmarked is None:
            assert " envs" not in result.output
            continue
        expected = {"terminal_on_life_loss", "sticky_action_prob", "noop_max", "frame_skip",
                    "frame_stack", "full_action_space", "env_threads"} - unmarked  # fmt: skip
        assert marked == expected
        shipped = load_config(resolve_config_path(name))
        assert yaml.safe_load(result.output) == yaml.safe_load(shipped.to_yaml())


def test_config_validate_makes_the_env(tmp_path):
    """Pins ``config validate`` saying ``ok`` for an env id that does not exist (issue 26): the
    env is now made once, so the id is one line and exit 2, as ``train`` would refuse it."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("env:\n  id: NoSuch-v1\n")
    result = runner.invoke(app, ["config", "validate", str(bad)])
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {bad}: env.id: cannot make 'NoSuch-v1'")
    assert len(result.output.strip().splitlines()) == 1
    ok = runner.invoke(app, ["config", "validate", "cartpole.yaml"])
    assert ok.exit_code == 0 and ok.output == "ok: cartpole.yaml\n"


def test_hints_paste_from_a_venv_that_is_not_activated(tmp_path):
    """Pins the tool's hints failing with "command not found" outside an activated venv (issue
    26): `see per-dqn train --help` and `resume with: per-dqn train --resume ...` named a
    program not on PATH. Run as ``.venv/bin/per-dqn`` with the venv off PATH, the hint names
    ``.venv/bin/per-dqn`` as typed, and that command runs; with the venv on PATH, ``per-dqn``."""
    script = Path(sys.executable).with_name("per-dqn")
    typed = os.path.relpath(script, REPO) if script.is_relative_to(REPO) else str(script)
    bare = {**os.environ, "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [typed, "train", "-c", "cartpole.yaml", "--replay", "prop"], cwd=REPO, env=bare,
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2
    hint = done.stderr.rsplit("(see ", 1)[1].removesuffix(")\n")
    assert hint == f"{typed} train --help"
    again = subprocess.run(shlex.split(hint), cwd=REPO, env=bare, capture_output=True, text=True)
    assert again.returncode == 0 and "Usage:" in again.stdout
    on_path = {**os.environ, "PATH": f"{script.parent}:/usr/bin:/bin"}
    done = subprocess.run(
        [typed, "train", "-c", "cartpole.yaml", "--replay", "prop"], cwd=REPO, env=on_path,
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.stderr.endswith("(see per-dqn train --help)\n")


def test_the_resume_hint_names_the_program_as_it_was_run(monkeypatch, tmp_path):
    """The resume line's command (``resume with: ...``) follows ``invoked_as``: the script's
    path as typed when PATH has no per-dqn, ``per-dqn`` when it has this one."""
    from per_dqn.cli.train import _resume_command

    script = Path(sys.executable).with_name("per-dqn")
    monkeypatch.setattr(sys, "argv", [str(script), "train"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert _resume_command(tmp_path / "a run") == f"{script} train --resume '{tmp_path}/a run'"
    monkeypatch.setenv("PATH", f"{script.parent}:/usr/bin:/bin")
    assert _resume_command(tmp_path / "r") == f"per-dqn train --resume {tmp_path}/r"


def test_config_show_stays_yaml_whatever_the_env_id():
    """Pins the fuzz finding against the marks above: ``--set env.id`` with a newline and a
    control character, or surrogates, gave a comment that broke the printed YAML (or could not
    be encoded). The output loads back with the same id."""
    for env_id in ("a\nb\u001f", "x: y # z", "\ud800\udc00"):
        result = runner.invoke(app, ["config", "show", "cartpole.yaml", "--set",
                                     f"env.id={json.dumps(env_id)}"])  # fmt: skip
        assert result.exit_code == 0, result.output
        assert yaml.safe_load(result.output)["env"]["id"] == env_id
        assert "# not read by CartPole-like envs" in result.output


def test_evaluations_count_the_periodic_ones_below_the_budget_and_the_final_one():
    """The points of a run's evaluation curve, by hand: one at each multiple of eval_interval
    below the budget (``Loop.eval_due``: the last step's is the final evaluation's), and the
    final one."""
    from per_dqn.config.models import TrainConfig

    def points(total: int, interval: int) -> int:
        return TrainConfig(total_env_steps=total, eval_interval=interval,
                           learning_starts=0).evaluations  # fmt: skip

    assert points(10_000, 10_000) == 1  # the final one stands in for the one at 10,000
    assert points(10_001, 10_000) == 2
    assert points(25_000, 10_000) == 3
    assert points(8_000, 10_000) == 1
    assert points(50_000, 0) == 1  # 0: only the final one
    assert TrainConfig(total_env_steps=20_000, eval_interval=10_000).schedule_warning() is None
    # The interval it suggests, and the points that gives, by hand: ceil(T / 10), ceil(T / it).
    assert (
        TrainConfig(total_env_steps=1_005, learning_starts=0)
        .schedule_warning()
        .endswith("(train.eval_interval=101 gives 10)")
    )
    assert (
        TrainConfig(total_env_steps=15, learning_starts=0)
        .schedule_warning()
        .endswith("(train.eval_interval=2 gives 8)")
    )
    assert (
        TrainConfig(total_env_steps=1, learning_starts=0)
        .schedule_warning()
        .endswith("the AUC is the final score")
    )


def test_a_budget_of_one_evaluation_is_warned_in_one_line_before_the_run(workdir):
    """Issue 45, item 2: the README's first sweep (`--steps 8000` under cartpole.yaml's
    eval_interval of 10,000) evaluated each run once, so its curves were dots and its AUC the
    final score, and nothing said so. `train` and `ablate` now say it before they start, once,
    with an interval that gives 10 points; a budget that draws curves gets no warning."""
    line = (
        "warning: train.total_env_steps 1,000 with train.eval_interval 10,000 gives 1 "
        "evaluation: the curves are one point and the AUC is the final score "
        "(train.eval_interval=100 gives 10)"
    )
    quick = ("--set", "train.learning_starts=100", "--quiet")
    result = invoke("train", "-c", "cartpole.yaml", "--steps", "1000", *quick)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == line
    result = invoke("ablate", "-c", "cartpole.yaml", "--replay", "uniform", "--seeds", "2",
                    "--steps", "1000", *quick[:2], "--out", "sw")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == line.replace("warning: ", "warning: 2 runs: ")
    assert result.stderr.count("warning:") == 1
    result = invoke("train", "-c", "cartpole.yaml", "--steps", "1000",
                    "--set", "train.eval_interval=500", *quick)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr
