"""What produced a run (``per_dqn.rundir.provenance``, issue 14 part 4 and issue 23 item 3): the
command line with its secrets redacted, or the API call in its place, the versions, the git commit,
the host and the device, checked by hand against what this process and this checkout are."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from support import CHECKOUT, summary_of

import per_dqn
from per_dqn.config import load_config, resolve_config_path
from per_dqn.rundir import provenance as prov

SHORT = {
    "train.total_env_steps": 600, "train.learning_starts": 200, "train.eval_interval": 500,
    "train.eval_episodes": 2, "train.final_eval_episodes": 2, "train.log_interval": 250,
    "checkpoint.interval_steps": 500, "agent.hidden_sizes": [32, 32], "replay.capacity": 2_000,
    "run.device": "cpu",
}  # fmt: skip


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> Path:
    """A finished run of ``per_dqn.train``."""
    run_dir = tmp_path_factory.mktemp("full") / "run"
    per_dqn.train("cartpole", overrides=SHORT, run_dir=run_dir)
    return run_dir


def test_provenance_names_the_command_versions_commit_host_and_device():
    argv = ["per-dqn", "train", "--set", "env.id=it's here"]
    record = prov.provenance("cpu", argv)
    assert record["command"] == argv
    assert shlex.split(record["command_line"]) == argv  # quoted for a shell, round trip
    assert record["call"] is None  # a command line, not an API call
    assert record["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    for name in ("torch", "gymnasium", "ale-py", "numpy", "minatar"):
        assert record["versions"][name] == metadata.version(name)
    assert record["device"] == "cpu" and record["cuda_device"] is None
    assert record["host"] == os.uname().nodename
    git = record["git"]
    if (CHECKOUT / ".git").exists():  # the suite runs from a checkout (a worktree has a file)
        head = subprocess.run(
            ["git", "-C", str(CHECKOUT), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        assert git["commit"] == head and isinstance(git["dirty"], bool)
    json.dumps(record)  # JSON values only


def test_git_state_is_null_outside_a_checkout_and_for_untracked_copies(tmp_path, monkeypatch):
    """A package copied outside any repository, or sitting untracked inside one (an install into
    a venv inside some project, whose own files are committed), has no commit of its own: null,
    never a failure. Once tracked: the commit, dirty when a tracked file changed, not for an
    untracked file beside it; by default the package is the one ``provenance.py`` sits in."""
    loose = tmp_path / "loose" / "per_dqn"
    loose.mkdir(parents=True)
    (loose / "__init__.py").write_text("")
    assert prov.git_state(loose) is None
    repo = tmp_path / "repo"
    inside = repo / ".venv" / "per_dqn"
    inside.mkdir(parents=True)
    (inside / "__init__.py").write_text("")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                              check=True, env=env)  # fmt: skip
        return done.stdout.strip()

    git("init", "-q")
    assert prov.git_state(inside) is None
    (repo / "README").write_text("the project's own file\n")
    git("add", "README")
    git("commit", "-qm", "project")
    assert prov.git_state(inside) is None  # a commit, but the package is not in it
    git("add", "-f", ".")
    git("commit", "-qm", "x")
    head = git("rev-parse", "HEAD")
    assert prov.git_state(inside) == {"commit": head, "dirty": False}
    (inside / "untracked.py").write_text("")
    assert prov.git_state(inside) == {"commit": head, "dirty": False}
    monkeypatch.setattr(prov, "__file__", str(inside / "rundir" / "provenance.py"))
    assert prov.git_state() == {"commit": head, "dirty": False}
    (inside / "__init__.py").write_text("x = 1\n")
    assert prov.git_state(inside) == {"commit": head, "dirty": True}


def test_summary_records_provenance(full):
    """A run of ``per_dqn.train`` records that call (its config and overrides as given), not the
    process's command line (here pytest's)."""
    record = summary_of(full)["provenance"]
    assert record["call"] == {"function": "per_dqn.train", "config": "cartpole", "overrides": SHORT}
    assert record["command"] is None and record["command_line"] is None
    assert record["device"] == "cpu"
    assert record["versions"]["torch"] == metadata.version("torch")


R = prov.REDACTED


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["s.py", "--hf-token=abc", "--db-password", "pw", "--steps", "5"],
         ["s.py", f"--hf-token={R}", "--db-password", R, "--steps", "5"]),
        # every secret word, any case; a flag followed by an option takes nothing from it
        (["s", "--API-KEY", "k", "--Secret=s", "--aws-credentials", "c", "--auth", "--quiet",
          "--user-pwd=p", "--passwd", "p"],
         ["s", "--API-KEY", R, f"--Secret={R}", "--aws-credentials", R, "--auth", "--quiet",
          f"--user-pwd={R}", "--passwd", R]),
        # NAME=VALUE with a secret NAME: --set's keys, Hydra's, an env-style HF_TOKEN=...
        (["s", "--set", "run.api_key=k", "--set=db.password=p", "HF_TOKEN=t", "--", "a.token=t"],
         ["s", "--set", f"run.api_key={R}", f"--set=db.password={R}", f"HF_TOKEN={R}", "--",
          f"a.token={R}"]),
        # a URL's password, under any option
        (["s", "--db-url", "postgres://me:hunter2@db/x", "--mirror=https://u:p@h/"],
         ["s", "--db-url", f"postgres://me:{R}@db/x", f"--mirror=https://u:{R}@h/"]),
        # nothing secret: left as it is (the program name never changes)
        (["per-dqn", "train", "-c", "cartpole", "--set", "env.id=it's here", "--run-dir", "a=b"],
         ["per-dqn", "train", "-c", "cartpole", "--set", "env.id=it's here", "--run-dir", "a=b"]),
        (["--token-dir/prog", "x"], ["--token-dir/prog", "x"]),
    ],
)  # fmt: skip
def test_redact_argv(argv, expected):
    """Issue 23 item 3: where a command line is recorded, the values of options whose names look
    secret are taken out, in both the ``--x-token=VALUE`` and the ``--x-token VALUE`` forms."""
    before = list(argv)
    assert prov.redact_argv(argv) == expected
    assert argv == before  # a new list
    assert prov.redact_argv(expected) == expected  # redacting twice changes nothing more
    assert prov.provenance(None, argv)["command"] == expected


def test_a_call_records_its_arguments_as_given_with_secrets_redacted():
    """``called``: the config by the name or path given, or by its kind; overrides as given,
    secret-looking keys' values redacted, in a mapping or as ``key=value`` strings; a Path as its
    text, a value JSON cannot hold as its repr, a None argument left out."""
    cases = [
        ({"config": "cartpole"}, {"config": "cartpole"}),
        ({"config": Path("a/b.yaml")}, {"config": "a/b.yaml"}),
        ({"config": {"env": {"id": "x"}}}, {"config": "a dict"}),
        ({"config": load_config(resolve_config_path("cartpole.yaml"))}, {"config": "a Config"}),
        ({"overrides": {"run.api_key": "k", "train.lr": 1e-3, "x": {1, 2}}},
         {"overrides": {"run.api_key": R, "train.lr": 1e-3, "x": "{1, 2}"}}),
        ({"overrides": ["run.api_key=k", "train.lr=0.1"]},
         {"overrides": [f"run.api_key={R}", "train.lr=0.1"]}),
        ({"run_dir": Path("/r/un"), "seed": None, "steps": 5, "obj": object},
         {"run_dir": "/r/un", "steps": 5, "obj": repr(object)}),
    ]  # fmt: skip
    for arguments, expected in cases:
        with prov.called("per_dqn.train", **arguments):
            record = prov.provenance("cpu")
        assert record["call"] == {"function": "per_dqn.train", **expected}
        assert record["command"] is None and record["command_line"] is None
    with prov.called("per_dqn.train"):
        assert prov.provenance()["call"] == {"function": "per_dqn.train"}
    assert prov.provenance()["call"] is None  # the block is over


def test_an_inner_call_keeps_the_outer_one_and_an_argv_given_wins(monkeypatch):
    """The call the user made is recorded, not the API's own calls inside it; a command line given
    to ``provenance`` is that command line, and without a block ``sys.argv`` is recorded,
    redacted. ``shareable_argv`` (what wandb keeps) is the program name alone inside a call."""
    monkeypatch.setattr(sys, "argv", ["prog", "--api-token", "t", "x"])
    with prov.called("per_dqn.resume", run_dir="a"):
        with prov.called("per_dqn.train", config="b"):
            record = prov.provenance()
            assert prov.shareable_argv() == ["prog"]
        assert prov.provenance(argv=["p", "q"])["command"] == ["p", "q"]
        assert prov.provenance(argv=["p", "q"])["call"] is None
    assert record["call"] == {"function": "per_dqn.resume", "run_dir": "a"}
    assert prov.shareable_argv() == ["prog", "--api-token", R, "x"]
    outside = prov.provenance()
    assert outside["command"] == ["prog", "--api-token", R, "x"]
    assert outside["command_line"] == f"prog --api-token '{R}' x"


def test_recorded_fields_add_up_in_nested_blocks_and_end_with_them():
    with prov.recorded(node="n1", ip="127.0.0.1"):
        with prov.recorded(node="n2"):
            inner = prov.provenance()
        outer = prov.provenance()
    assert (inner["node"], inner["ip"]) == ("n2", "127.0.0.1")
    assert (outer["node"], outer["ip"]) == ("n1", "127.0.0.1")
    assert "node" not in prov.provenance()


def test_a_version_that_cannot_be_read_is_none(monkeypatch):
    monkeypatch.setattr(prov, "DISTRIBUTIONS", ("numpy", "no-such-distribution-here"))
    assert prov.versions() == {
        "python": ".".join(map(str, sys.version_info[:3])),
        "numpy": metadata.version("numpy"),
        "no-such-distribution-here": None,
    }


def test_a_git_that_is_missing_or_slow_gives_none(monkeypatch, tmp_path):
    """Nothing here may fail a run: no git on the PATH, or one that does not answer within
    ``GIT_TIMEOUT_S``, gives a null ``git``."""
    monkeypatch.setenv("PATH", str(tmp_path))
    assert prov.git_state(CHECKOUT / "per_dqn") is None
    slow = tmp_path / "git"
    slow.write_text("#!/bin/sh\nexec /bin/sleep 5\n")
    slow.chmod(0o755)
    monkeypatch.setattr(prov, "GIT_TIMEOUT_S", 0.2)
    assert prov.git_state(CHECKOUT / "per_dqn") is None


def test_a_cuda_device_is_named_by_torch_and_a_failing_query_gives_none(monkeypatch):
    """No GPU here: torch's device query is stood in for, to check what is asked and kept."""
    import torch

    asked = []

    def name(device):
        asked.append(device)
        return f"GPU of {device}"

    monkeypatch.setattr(torch.cuda, "get_device_name", name)
    assert prov.provenance("cuda:1")["cuda_device"] == "GPU of cuda:1"
    assert asked == [torch.device("cuda:1")]

    def fails(device):
        raise RuntimeError("no CUDA GPUs are available")

    monkeypatch.setattr(torch.cuda, "get_device_name", fails)
    record = prov.provenance("cuda")
    assert record["device"] == "cuda" and record["cuda_device"] is None


def test_a_cpu_device_has_no_cuda_name_and_none_is_no_device():
    assert prov.provenance("cpu")["cuda_device"] is None
    record = prov.provenance(None)
    assert record["device"] is None and record["cuda_device"] is None
    assert record["host"] == os.uname().nodename
