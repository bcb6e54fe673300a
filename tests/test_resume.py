"""Resuming real CartPole runs: after Ctrl-C, after SIGKILL and past a damaged checkpoint, the
resumed run ends with exactly the curves, weights and memory of the run that was never stopped;
TensorBoard sees no duplicated step; a NaN loss stops the run and leaves the last checkpoint; and
``--resume`` refuses what it cannot continue."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

from per_dqn import checkpoint as ckpt
from per_dqn import metrics as m
from per_dqn.agent import DQNAgent
from per_dqn.cli import app
from per_dqn.config import load_config, parse_override, resolve_config_path
from per_dqn.train import Trainer

# Checkpoints at 300, 600, ..., 1500 (the last one the final one), evaluations at 500 and 1000.
SETTINGS = [
    "train.total_env_steps=1500", "train.learning_starts=300", "train.log_interval=100",
    "train.eval_interval=500", "train.eval_episodes=2", "train.final_eval_episodes=3",
    "train.epsilon_decay_steps=600", "checkpoint.interval_steps=300", "checkpoint.keep_last=3",
    "run.device=cpu",
]  # fmt: skip
# A Ctrl-C on this gradient step lands at env step ~1100: after the checkpoint at 900, with
# points logged past it that a resume must not duplicate.
INTERRUPT_AT_LEARN_CALL = 200

runner = CliRunner()


def train_args(run_dir: Path, *extra: str) -> list[str]:
    args = ["train", "-c", "cartpole.yaml", "--run-dir", str(run_dir), "-q"]
    for text in [*SETTINGS, *extra]:
        args += ["--set", text]
    return args


def read_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return {t: [(e.step, e.value) for e in events.Scalars(t)] for t in events.Tags()["scalars"]}


def curves(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar but the wall-clock one."""
    scalars = read_scalars(run_dir)
    scalars.pop(m.PERF_SPS)
    return scalars


def assert_no_duplicated_steps(run_dir: Path) -> None:
    for tag, points in read_scalars(run_dir).items():
        steps = [step for step, _ in points]
        assert all(a < b for a, b in itertools.pairwise(steps)), tag


def assert_same_weights(a: Path, b: Path) -> None:
    first, second = torch.load(a, weights_only=True), torch.load(b, weights_only=True)
    assert first.keys() == second.keys()
    for key in first:
        assert torch.equal(first[key], second[key]), key


def final_manifest(run_dir: Path) -> dict:
    newest = ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))[-1]
    return ckpt.verify_checkpoint(newest)


def assert_same_run(resumed: Path, reference: Path) -> None:
    """Same curves, same final weights, and a final checkpoint whose agent (online, target, Adam)
    and replay memory (contents, priorities, RNG) are byte for byte the reference's."""
    assert curves(resumed) == curves(reference)
    assert_no_duplicated_steps(resumed)
    assert_same_weights(resumed / "model.pt", reference / "model.pt")
    got, want = final_manifest(resumed), final_manifest(reference)
    assert got["env_steps"] == want["env_steps"] == 1500 and got["final"]
    for name in (ckpt.AGENT_FILE, ckpt.MEMORY_ARRAYS_FILE, ckpt.MEMORY_META_FILE):
        assert got["files"][name] == want["files"][name], name
    summary, expected = (json.loads((d / "summary.json").read_text()) for d in (resumed, reference))
    assert summary["final_eval_return_mean"] == expected["final_eval_return_mean"]
    assert summary["update_steps"] == expected["update_steps"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The run never stopped."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    config = load_config(resolve_config_path("cartpole.yaml"), map(parse_override, SETTINGS))
    trainer = Trainer(config, "cartpole")
    try:
        trainer.run(run_dir)
    finally:
        trainer.close()
    return run_dir


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> Path:
    """The same run stopped by Ctrl-C mid-way, through the CLI (tests take copies)."""
    run_dir = tmp_path_factory.mktemp("interrupted") / "run"
    real_learn = DQNAgent.learn
    calls = []

    def learn_then_interrupt(self, batch):
        calls.append(1)
        if len(calls) == INTERRUPT_AT_LEARN_CALL:
            raise KeyboardInterrupt
        return real_learn(self, batch)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DQNAgent, "learn", learn_then_interrupt)
        result = runner.invoke(app, train_args(run_dir))
    assert result.exit_code == 130, result.output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] and 900 < summary["env_steps"] < 1200
    return run_dir


def copy_of(run_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run_dir, tmp_path / "run"))


def resume(run_dir: Path, *extra: str):
    return runner.invoke(app, ["train", "--resume", str(run_dir), "-q", *extra])


def test_resume_after_ctrl_c_is_the_uninterrupted_run(interrupted, reference, tmp_path):
    """The issue's acceptance test: on CPU, curves and final weights equal the run that was never
    stopped, and TensorBoard reads each tag's steps strictly increasing (the points the stopped
    run logged after its last checkpoint are purged, not duplicated)."""
    run_dir = copy_of(interrupted, tmp_path)
    assert max(s for s, _ in read_scalars(run_dir)[m.TRAIN_LOSS]) > 900  # points past it exist
    result = resume(run_dir)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [f"resuming {run_dir} from step_000000900 "
                                          "(900 of 1,500 env steps)"]  # fmt: skip
    assert "final eval return" in result.stdout
    assert_same_run(run_dir, reference)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["resumed_from_env_steps"] == 900 and not summary["interrupted"]
    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert len(events.Tensors(f"{m.CONFIG_TEXT}/text_summary")) == 1  # logged once, not again
    assert [p.name for p in ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))] == [
        "step_000000900", "step_000001200", "step_000001500",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "damage", "problem"),
    [
        (ckpt.MEMORY_ARRAYS_FILE, "truncate", "memory.npz has"),
        (ckpt.LOOP_FILE, "flip", "loop.pt fails its SHA-256 check"),
    ],
)
def test_damaged_newest_checkpoint_falls_back_to_the_previous(
    interrupted, reference, tmp_path, name, damage, problem
):
    """A truncated or corrupted file is caught by the manifest: one warning line naming the
    checkpoint, the previous one is used, and the run still ends exactly as the reference."""
    run_dir = copy_of(interrupted, tmp_path)
    newest = ckpt.checkpoints_dir(run_dir) / "step_000000900"
    path = newest / name
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        path.write_bytes(bytes(data[: len(data) - 100]))
    else:
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    result = resume(run_dir)
    assert result.exit_code == 0, result.output
    warning, resuming = result.stderr.splitlines()
    assert warning.startswith(f"warning: checkpoint {newest}: {problem}")
    assert warning.endswith("; using the previous one, step_000000600")
    assert resuming == f"resuming {run_dir} from step_000000600 (600 of 1,500 env steps)"
    assert_same_run(run_dir, reference)
    assert ckpt.verify_checkpoint(newest)["env_steps"] == 900  # rewritten whole by the resume


def test_an_edited_config_is_followed_with_a_note(interrupted, reference, tmp_path):
    """Each checkpoint keeps the config it was written with; a RUN_DIR/config.yaml edited since is
    what the resume uses, and the user is told the result is no longer the same run."""
    run_dir = copy_of(interrupted, tmp_path)
    path = run_dir / "config.yaml"
    text = path.read_text()
    assert text.count("learning_rate: 0.002\n") == 1
    path.write_text(text.replace("learning_rate: 0.002\n", "learning_rate: 0.001\n"))
    result = resume(run_dir)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[1:] == [
        "note: this config differs from the one step_000000900 was written with (beyond "
        "train.total_env_steps): the resume follows this config and is not exact"
    ]
    assert curves(run_dir)[m.TRAIN_LOSS] != curves(reference)[m.TRAIN_LOSS]


def test_sigkill_mid_run_resumes_from_the_last_complete_checkpoint(reference, tmp_path):
    """A real ``per-dqn train`` process killed with SIGKILL (no handler runs, nothing is flushed
    on the way out) after its first checkpoint, then resumed: the same run as never stopped."""
    run_dir = tmp_path / "run"
    per_dqn = Path(sys.executable).with_name("per-dqn")
    process = subprocess.Popen(
        [str(per_dqn), *train_args(run_dir)],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    first = ckpt.checkpoints_dir(run_dir) / "step_000000300"
    deadline = time.monotonic() + 120
    while not first.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL, stderr.decode()
    assert not (run_dir / "summary.json").exists()  # it really died mid-run
    assert ckpt.find_latest(ckpt.checkpoints_dir(run_dir)).path is not None

    result = resume(run_dir)
    assert result.exit_code == 0, result.output
    assert_same_run(run_dir, reference)


def test_resume_can_extend_the_budget(reference, tmp_path):
    """``--steps`` with ``--resume`` continues a finished run from its final checkpoint; the final
    evaluation at 1,500 stays in the curves and nothing is duplicated."""
    run_dir = copy_of(reference, tmp_path)
    result = resume(run_dir, "--steps", "1800")
    assert result.exit_code == 0, result.output
    assert load_config(run_dir / "config.yaml").train.total_env_steps == 1800
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 1800 and summary["resumed_from_env_steps"] == 1500
    assert_no_duplicated_steps(run_dir)
    eval_steps = [s for s, _ in read_scalars(run_dir)[m.EVAL_RETURN_MEAN]]
    assert eval_steps == [500, 1000, 1500, 1800]
    before = curves(reference)[m.TRAIN_LOSS]
    assert curves(run_dir)[m.TRAIN_LOSS][: len(before)] == before  # the history is kept as it was
    assert max(s for s, _ in curves(run_dir)[m.TRAIN_LOSS]) == 1800


def test_nan_loss_stops_the_run_and_keeps_the_last_checkpoint(tmp_path):
    """A learning rate of 1e30 (a real divergence, nothing injected) turns the loss NaN within a
    few updates: exit 3 with one line naming the step and the value, and the checkpoint written
    before it is still the only one, intact; no model or summary from the bad weights."""
    run_dir = tmp_path / "run"
    result = runner.invoke(
        app,
        train_args(run_dir, "agent.learning_rate=1e30", "checkpoint.interval_steps=250"),
    )
    assert result.exit_code == 3, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: train/loss is ")
    value, step = line.split()[3], int(line.split()[7].replace(",", ""))
    assert value in ("nan", "inf", "-inf") and 300 <= step < 500
    checkpoints = ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))
    assert [p.name for p in checkpoints] == ["step_000000250"]
    assert line.endswith(f"stopped (the last checkpoint, {checkpoints[0]}, is untouched)")
    ckpt.verify_checkpoint(checkpoints[0])
    assert not (run_dir / "model.pt").exists() and not (run_dir / "summary.json").exists()


def test_resume_refuses_what_it_cannot_continue(reference, tmp_path):
    def assert_refused(result, *lines):
        assert result.exit_code == 2, result.output
        assert result.stderr.splitlines() == [f"error: {line}" for line in lines]
        assert result.stdout == ""

    empty = tmp_path / "empty"
    empty.mkdir()
    assert_refused(resume(empty), f"{empty}: not a run dir (no config.yaml)")
    shutil.copy(reference / "config.yaml", empty / "config.yaml")
    assert_refused(resume(empty), f"{empty}: nothing to resume from: it has no checkpoint")
    assert_refused(
        resume(reference, "--config", "cartpole.yaml", "--seed", "3"),
        "--config cannot be used with --resume: the resumed run's config is RUN_DIR/config.yaml",
        "--seed cannot be used with --resume: the resumed run's config is RUN_DIR/config.yaml",
    )
    assert_refused(
        resume(reference),
        f"{reference}: the run is complete (1,500 of 1,500 env steps); pass --steps N to extend it",
    )
    assert_refused(
        resume(reference, "--steps", "1000"),
        "--steps must be more than the checkpoint's 1,500 env steps, got 1000",
    )
    assert_refused(
        runner.invoke(app, ["train"]),
        "--config is required (or --resume RUN_DIR to continue a run)",
    )
