"""Resuming real CartPole runs: after Ctrl-C, after SIGKILL and past a damaged or edited
checkpoint, the resumed run ends with exactly the curves, weights and memory of the run that was
never stopped; TensorBoard sees no duplicated or lost step; a NaN loss or diverged weights stop the
run and leave the last good checkpoint; a checkpoint whose files would run code is refused; and
``--resume`` refuses what it cannot continue."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from support import (
    RESUMABLE,
    Plant,
    assert_no_duplicated_steps,
    assert_same_run,
    cartpole_config,
    curves,
    read_scalars,
    reseal,
    resume,
    run_trainer,
    start_cli,
    summary_of,
    train_args,
)
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from typer.testing import CliRunner

import per_dqn
from per_dqn.agent import DQNAgent
from per_dqn.cli import app
from per_dqn.config import load_config
from per_dqn.logs import tags
from per_dqn.memory import KINDS
from per_dqn.rundir import checkpoint as ckpt
from per_dqn.rundir import latest
from per_dqn.training import checkpoints as run_ckpt

SETTINGS = RESUMABLE
# A Ctrl-C on this gradient step lands at env step ~1100: after the checkpoint at 900, with
# points logged past it that a resume must not duplicate.
INTERRUPT_AT_LEARN_CALL = 200

runner = CliRunner()


def resume_past_the_damaged(run_dir: Path, newest: Path, problem: str) -> None:
    """``--resume`` succeeds with one warning naming ``newest`` and ``problem``, and resumes from
    the checkpoint before it, step 600."""
    result = resume(run_dir)
    assert result.exit_code == 0, result.output
    warning, resuming = result.stderr.splitlines()
    assert warning.startswith(f"warning: checkpoint {newest}: {problem}")
    assert warning.endswith("; using the previous one, step_000000600")
    assert resuming == f"resuming {run_dir} from step_000000600 (600 of 1,500 env steps)"


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The run never stopped."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    run_trainer(cartpole_config(*SETTINGS), run_dir)
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
        result = runner.invoke(app, train_args(run_dir, *SETTINGS))
    assert result.exit_code == 130, result.output
    summary = summary_of(run_dir)
    assert summary["interrupted"] and 900 < summary["env_steps"] < 1200
    return run_dir


def copy_of(run_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run_dir, tmp_path / "run"))


def test_resume_after_ctrl_c_is_the_uninterrupted_run(interrupted, reference, tmp_path):
    """The issue's acceptance test: on CPU, curves and final weights equal the run that was never
    stopped, and TensorBoard reads each tag's steps strictly increasing (the points the stopped
    run logged after its last checkpoint are purged, not duplicated)."""
    run_dir = copy_of(interrupted, tmp_path)
    assert max(s for s, _ in read_scalars(run_dir)[tags.TRAIN_LOSS]) > 900  # points past it exist
    result = resume(run_dir)
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [f"resuming {run_dir} from step_000000900 "
                                          "(900 of 1,500 env steps)"]  # fmt: skip
    assert "final eval return" in result.stdout
    assert_same_run(run_dir, reference)
    summary = summary_of(run_dir)
    assert summary["resumed_from_env_steps"] == 900 and not summary["interrupted"]
    # The whole run's wall time: the stopped session's up to its checkpoint, then this session's.
    (first,) = ckpt.read_manifest(run_dir / "checkpoints/step_000000900")["wall_sessions"]
    assert first["seconds"] > 0
    (_, resumed) = summary["wall_sessions"]
    assert summary["wall_sessions"][0] == first and resumed["pack"] != first["pack"]
    assert resumed["seconds"] == summary["wall_seconds"]
    assert summary["wall_seconds_total"] == first["seconds"] + summary["wall_seconds"]
    assert f"; {summary['wall_seconds_total']:.1f} s over every session" in result.stdout
    events = EventAccumulator(str(run_dir))
    events.Reload()
    assert len(events.Tensors(f"{tags.CONFIG_TEXT}/text_summary")) == 1  # logged once, not again
    assert [p.name for p in ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))] == [
        "step_000000900", "step_000001200", "step_000001500",
    ]  # fmt: skip


def test_a_run_s_checkpoint_holds_its_stored_transitions_not_its_capacity(reference):
    """Issue 45, item 3, through a real run: a memory of 50,000 slots holding fewer writes its
    stored slots alone, and so does the loop's PER health panel (the run passes it the memory's
    size); the resume tests above load these and end bit for bit as the run never stopped."""
    newest = ckpt.list_checkpoints(reference / "checkpoints")[-1]
    with np.load(newest / "memory.npz") as memory, np.load(newest / "loop.npz") as loop:
        stored = json.loads((newest / "memory.json").read_text())["storage"]["size"]
        assert 1_000 < stored < 50_000
        assert memory["storage.actions"].shape == (stored,)
        assert memory["storage.obs"].shape == (stored, 4)
        assert memory["priorities"].shape == (stored,)
        assert loop["health.added_at"].shape == (stored,)


def test_a_run_never_stopped_times_its_one_session_and_each_checkpoint_its_time(reference):
    """A run of one session: ``wall_sessions`` holds that session, of ``wall_seconds``, which
    ``wall_seconds_total`` is; each checkpoint holds the same session timed to its step."""
    summary = summary_of(reference)
    (session,) = summary["wall_sessions"]
    assert session["seconds"] == summary["wall_seconds"] == summary["wall_seconds_total"] > 0
    timed = [
        ckpt.read_manifest(path)["wall_sessions"]
        for path in ckpt.list_checkpoints(ckpt.checkpoints_dir(reference))
    ]
    assert len(timed) >= 2 and all(len(sessions) == 1 for sessions in timed)
    assert {sessions[0]["pack"] for sessions in timed} == {session["pack"]}
    seconds = [sessions[0]["seconds"] for sessions in timed]
    assert seconds == sorted(seconds) and 0 < seconds[-1] <= session["seconds"]


@pytest.mark.parametrize(
    "recorded",
    [
        None,
        "1 hour",
        [{"pack": "p", "seconds": -1.0}],
        [{"pack": "p", "seconds": True}],
        [{"pack": 3, "seconds": 1.0}],
        [{"pack": "p", "seconds": 1.0, "more": 1}],
        [{"pack": "p", "seconds": 1.0}, "p"],
    ],
)
def test_a_checkpoint_without_a_valid_record_of_its_sessions_leaves_the_run_s_time_unknown(
    interrupted, tmp_path, recorded
):
    """A checkpoint from before ``wall_sessions`` (None here; a format 2 one has no key) or one
    whose record was edited into something else: the resumed run's sessions and total are null,
    not this session's time passed off as the whole run's."""
    run_dir = copy_of(interrupted, tmp_path)
    newest = run_dir / "checkpoints/step_000000900"
    manifest = json.loads((newest / "manifest.json").read_text())
    manifest["wall_sessions"] = recorded
    (newest / "manifest.json").write_text(json.dumps(manifest))
    reseal(newest)
    result = resume(run_dir)
    assert result.exit_code == 0, result.output
    summary = summary_of(run_dir)
    assert summary["wall_sessions"] is None and summary["wall_seconds_total"] is None
    assert summary["wall_seconds"] > 0


@pytest.mark.parametrize(
    ("name", "damage", "problem"),
    [
        (run_ckpt.MEMORY_ARRAYS_FILE, "truncate", "memory.npz has"),
        (run_ckpt.LOOP_ARRAYS_FILE, "flip", "loop.npz fails its SHA-256 check"),
        (run_ckpt.LOOP_META_FILE, "truncate", "loop.json has"),
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
    resume_past_the_damaged(run_dir, newest, problem)
    assert_same_run(run_dir, reference)
    assert ckpt.verify_checkpoint(newest)["env_steps"] == 900  # rewritten whole by the resume


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        ("one-digit", "manifest.json fails its own SHA-256 check"),
        ("resealed", "its manifest.json says env step 400, its name step 900"),
    ],
)
@pytest.mark.slow
def test_an_edited_manifest_is_skipped_and_the_merged_curves_keep_every_eval_point(
    interrupted, reference, tmp_path, edit, problem
):
    """Pins the bug where changing one digit of ``env_steps`` in manifest.json (900 -> 400) went
    unnoticed: the resume continued the loop from 900 but purged TensorBoard's points from 401,
    so the merged curve silently lost the evaluation at 500. Now the manifest's own digest fails
    (or, resealed with a fresh digest, its step disagrees with its dir name): one warning naming
    the checkpoint, the previous one is used, and all event files of the run dir, merged as
    TensorBoard merges them (purge_step applied), hold exactly the uninterrupted run's eval
    points, none hidden and none twice."""
    run_dir = copy_of(interrupted, tmp_path)
    newest = ckpt.checkpoints_dir(run_dir) / "step_000000900"
    path = newest / ckpt.MANIFEST_FILE
    text = path.read_text()
    assert text.count('"env_steps": 900,') == 1
    path.write_text(text.replace('"env_steps": 900,', '"env_steps": 400,'))
    if edit == "resealed":
        reseal(newest)
    resume_past_the_damaged(run_dir, newest, problem)
    merged = read_scalars(run_dir)[tags.EVAL_RETURN_MEAN]
    assert [step for step, _ in merged] == [500, 1000, 1500]
    assert merged == read_scalars(reference)[tags.EVAL_RETURN_MEAN]
    assert_same_run(run_dir, reference)


def change_one_thing(path: Path) -> None:
    """A text file gets its first digit changed (7 -> 8, 9 -> 0); a binary one a bit flipped."""
    data = path.read_bytes()
    if path.suffix in (".json", ".yaml"):
        match = re.search(rb"[0-9]", data)
        assert match is not None
        digit = str((int(match.group()) + 1) % 10).encode()
        path.write_bytes(data[: match.start()] + digit + data[match.end() :])
    else:
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x04
        path.write_bytes(bytes(flipped))


CHECKPOINT_FILES = [
    ckpt.MANIFEST_FILE, run_ckpt.AGENT_FILE, run_ckpt.LOOP_ARRAYS_FILE, run_ckpt.LOOP_META_FILE,
    run_ckpt.ENVS_ARRAYS_FILE, run_ckpt.ENVS_META_FILE, run_ckpt.MEMORY_ARRAYS_FILE,
    run_ckpt.MEMORY_META_FILE, run_ckpt.CONFIG_FILE,
]  # fmt: skip


@pytest.mark.parametrize("name", CHECKPOINT_FILES)
def test_a_change_to_any_file_of_a_checkpoint_skips_it(reference, tmp_path, name):
    """Every file of a real checkpoint, the manifest too, is covered: one changed digit or bit
    and ``--resume`` (and, for the files it reads, ``eval``) skips that checkpoint with a warning
    naming it and uses the previous one."""
    run_dir = copy_of(reference, tmp_path)
    root = ckpt.checkpoints_dir(run_dir)
    newest = root / "step_000001500"
    assert sorted(p.name for p in newest.iterdir()) == sorted(CHECKPOINT_FILES)
    change_one_thing(newest / name)
    found = latest.find_latest(root)
    assert found.path == root / "step_000001200"
    (warning,) = found.warnings
    assert warning.startswith(f"checkpoint {newest}: {name}")
    assert warning.endswith("; using the previous one, step_000001200")
    if name in (ckpt.MANIFEST_FILE, run_ckpt.AGENT_FILE, run_ckpt.CONFIG_FILE):
        read = latest.read_latest(root, (run_ckpt.AGENT_FILE, run_ckpt.CONFIG_FILE))
        assert read.path == root / "step_000001200" and read.warnings == found.warnings


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
    assert curves(run_dir)[tags.TRAIN_LOSS] != curves(reference)[tags.TRAIN_LOSS]


@pytest.mark.kill
def test_sigkill_mid_run_resumes_from_the_last_complete_checkpoint(reference, tmp_path):
    """A real ``per-dqn train`` process killed with SIGKILL (no handler runs, nothing is flushed
    on the way out) after its first checkpoint, then resumed: the same run as never stopped."""
    run_dir = tmp_path / "run"
    process = start_cli(train_args(run_dir, *SETTINGS), tmp_path)
    first = ckpt.checkpoints_dir(run_dir) / "step_000000300"
    deadline = time.monotonic() + 120
    while not first.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL, stderr
    assert not (run_dir / "summary.json").exists()  # it really died mid-run
    assert latest.find_latest(ckpt.checkpoints_dir(run_dir)).path is not None

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
    summary = summary_of(run_dir)
    assert summary["env_steps"] == 1800 and summary["resumed_from_env_steps"] == 1500
    assert_no_duplicated_steps(run_dir)
    eval_steps = [s for s, _ in read_scalars(run_dir)[tags.EVAL_RETURN_MEAN]]
    assert eval_steps == [500, 1000, 1500, 1800]
    before = curves(reference)[tags.TRAIN_LOSS]
    # the history is kept as it was
    assert curves(run_dir)[tags.TRAIN_LOSS][: len(before)] == before
    assert max(s for s, _ in curves(run_dir)[tags.TRAIN_LOSS]) == 1800


def test_nan_loss_stops_the_run_and_keeps_the_last_checkpoint(tmp_path):
    """A learning rate of 1e30 (a real divergence, nothing injected) turns the loss NaN within a
    few updates: exit 3 with one line naming the step and the value, and the checkpoint written
    before it is still the only one, intact; no model or summary from the bad weights."""
    run_dir = tmp_path / "run"
    # No log point, evaluation or checkpoint between the first update (300) and the NaN: the
    # loss check is what stops it (the weights check is the next test's).
    args = ["agent.learning_rate=1e30", "checkpoint.interval_steps=250", "train.log_interval=1000"]
    result = runner.invoke(app, train_args(run_dir, *SETTINGS, *args))
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


def largest_weight(checkpoint: Path) -> float:
    state = torch.load(checkpoint / run_ckpt.AGENT_FILE, weights_only=True)
    tensors = [*state["online"].values(), *state["target"].values()]
    return max(float(t.abs().max()) for t in tensors)


def test_diverged_weights_never_reach_a_checkpoint(tmp_path):
    """Pins the bug where, after the NaN stop, the newest checkpoint held weights near 1e30: one
    Adam step at learning rate 1e30 (mse loss, no gradient clip: a real divergence) moves every
    weight by ~1e30 while the loss it reports is still finite, and a checkpoint due at that step
    saved them before the next step's NaN. Now the weights are checked first: exit 3 with one
    line, and the newest checkpoint is the last good one. Bound by hand: PyTorch initialises a
    Linear layer within 1/sqrt(fan_in), at most 1/sqrt(4) = 0.5 here (CartPole's 4 inputs), so a
    checkpoint before any update holds no |weight| above 0.5, and the rule allows 1000x that."""
    run_dir = tmp_path / "run"
    args = [
        "agent.learning_rate=1e30", "agent.loss=mse", "agent.grad_clip_norm=null",
        "checkpoint.interval_steps=150", "train.log_interval=1000",
    ]  # fmt: skip
    result = runner.invoke(app, train_args(run_dir, *SETTINGS, *args))
    assert result.exit_code == 3, result.output
    (line,) = result.stderr.splitlines()
    checkpoints = ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))
    assert [p.name for p in checkpoints] == ["step_000000150"]  # not step_000000300
    found = re.fullmatch(
        r"error: the largest \|weight\| is (\S+) at env step 300 \(update step 1\), more than "
        r"1000x the largest before \((\S+)\): training diverged; stopped \(the last "
        r"checkpoint, (\S+), is untouched\)",
        line,
    )
    assert found is not None, line
    assert float(found.group(1)) > 1e29 and float(found.group(2)) <= 0.5
    assert found.group(3) == str(checkpoints[0])
    good = largest_weight(checkpoints[0])
    assert np.isfinite(good) and good <= 0.5 < float(found.group(1)) / 1000
    assert not (run_dir / "model.pt").exists() and not (run_dir / "summary.json").exists()


def test_planted_checkpoint_files_are_refused_without_running_code(reference, tmp_path):
    """A run dir is shared: a resume must not execute what its checkpoint holds. Each planted
    file would create a marker when unpickled (shown first, as a control); with its manifest
    resealed so every checksum passes, ``--resume`` refuses it with one line and the marker is
    never created. An envs.json swapped for another env's state is refused the same way, before
    the run writes anything."""
    marker = tmp_path / "ran"
    torch.load(_planted_torch_file(tmp_path / "control.pt", marker), weights_only=False)
    assert marker.exists()  # the plant is live
    marker.unlink()

    def plant_npz(path: Path) -> None:
        with open(path, "wb") as file:
            np.savez(file, plant=np.array([Plant(marker)], dtype=object), allow_pickle=True)

    def swap_env(path: Path) -> None:
        envs = json.loads(path.read_text())
        envs["train"]["envs"][0]["kind"] = "AcrobotEnv"
        path.write_text(json.dumps(envs))

    cases = [
        (run_ckpt.AGENT_FILE, lambda path: _planted_torch_file(path, marker),
         "agent.pt: refused: it holds more than tensors (Unsupported global: GLOBAL io.open was "
         "not an allowed global by default), and loading it could run code"),
        (run_ckpt.LOOP_ARRAYS_FILE, plant_npz,
         ": cannot load loop.npz (ValueError: Object arrays cannot be loaded when "
         "allow_pickle=False)"),
        (run_ckpt.ENVS_META_FILE, swap_env,
         ": train env: the checkpoint's env is TimeLimit/OrderEnforcing/AcrobotEnv, this run's "
         "TimeLimit/OrderEnforcing/CartPoleEnv"),
    ]  # fmt: skip
    for name, plant, problem in cases:
        run_dir = Path(shutil.copytree(reference, tmp_path / name))
        newest = ckpt.checkpoints_dir(run_dir) / "step_000001500"
        plant(newest / name)
        reseal(newest)
        before = sorted(p.name for p in run_dir.iterdir())
        result = resume(run_dir, "--steps", "1800")
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.splitlines()
        assert line.startswith(f"error: {newest}") and line.endswith(problem), line
        assert not marker.exists()
        assert sorted(p.name for p in run_dir.iterdir()) == before  # no event file, no summary


def _planted_torch_file(path: Path, marker: Path) -> Path:
    torch.save({"online": {"w": Plant(marker)}}, path)
    return path


def test_a_format_1_checkpoint_with_its_pickled_loop_is_refused(reference, tmp_path):
    """A checkpoint as per-dqn wrote it before format 2: a manifest of format 1 (no digest) that
    lists a pickled ``loop.pt``. Resuming it is refused with one line naming the format and what
    to do, and its pickle, which would create a marker, is never loaded."""
    run_dir = copy_of(reference, tmp_path)
    marker = tmp_path / "ran"
    newest = ckpt.checkpoints_dir(run_dir) / "step_000001500"
    (newest / "loop.pt").write_bytes(pickle.dumps(Plant(marker)))
    reseal(newest)
    manifest = json.loads((newest / ckpt.MANIFEST_FILE).read_text())
    del manifest["manifest_sha256"]
    manifest["format"] = 1
    data = (newest / "loop.pt").read_bytes()
    manifest["files"]["loop.pt"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (newest / ckpt.MANIFEST_FILE).write_text(json.dumps(manifest, indent=2))
    result = resume(run_dir, "--steps", "1800")
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"error: {newest}: a format-1 checkpoint (its loop state is a pickle, loop.pt, which "
        "this per-dqn never loads: it could run code); this per-dqn reads formats 2 and 3: resume "
        "it with the per-dqn release that wrote it, or start a new run"
    ]
    assert not marker.exists()


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
    # Pins a bug: a flag given the value 0 counted as not given, so `--resume RUN --seed 0`
    # resumed the run under its own seed and said nothing.
    assert_refused(
        resume(reference, "--seed", "0", "--actors", "0", "--shards", "0"),
        "--seed cannot be used with --resume: the resumed run's config is RUN_DIR/config.yaml",
        "--actors cannot be used with --resume: the resumed run's config is RUN_DIR/config.yaml",
        "--shards cannot be used with --resume: the resumed run's config is RUN_DIR/config.yaml",
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


FORMAT_2_RUN = Path(__file__).parent / "data" / "format2-cartpole"


def test_a_format_2_checkpoint_from_before_the_redesign_resumes_exactly(tmp_path):
    """Checkpoints carry a format version, and one written before the envs became their own part
    (format 2, by per-dqn at dcc030f; tests/data/format2-cartpole/README.md) still loads: the
    resumed run ends with the weights that the same run, uninterrupted, ended with under the code
    that wrote the checkpoint (its model.pt, kept beside it).

    Bit for bit on the CPU type that wrote them; within 1e-6 on any other. The files were written
    on a CPU whose kernels round differently from some others': on a Sapphire Rapids class one
    (AVX512-FP16, AMX), dcc030f's own code, rerun from step 0, ends 6e-8 away from them, and so
    does this resume. A part restored wrongly moves the weights by about 1e-2 (checked by hand:
    the Adam step count off by one, the replay generator one draw ahead, the largest priority
    1% off, the next update one env step late)."""
    run_dir = Path(shutil.copytree(FORMAT_2_RUN, tmp_path / "run"))
    manifest = json.loads((run_dir / "checkpoints/step_000000300/manifest.json").read_text())
    assert manifest["format"] == 2
    result = resume(run_dir)
    assert result.exit_code == 0, result.output
    assert "note:" not in result.stderr  # an exact resume
    resumed = torch.load(run_dir / "model.pt", weights_only=True)
    reference = torch.load(run_dir / "reference-model-step600.pt", weights_only=True)
    assert resumed.keys() == reference.keys()
    for key in reference:
        assert torch.allclose(resumed[key], reference[key], rtol=0, atol=1e-6), key
    newest = ckpt.verify_checkpoint(run_dir / "checkpoints/step_000000600")
    assert newest["format"] == ckpt.FORMAT_VERSION == 3
    # Its evaluations and IS weights before step 300 are unknown: the summary says so (null)
    # rather than report the resumed part as the run's.
    summary = summary_of(run_dir)
    assert summary["auc"] is None and summary["is_weight_mean"] is None
    assert summary["wall_sessions"] is None and summary["wall_seconds_total"] is None
    assert summary["final_eval_return_mean"] is not None


class _StopAt:
    """A callback that stops the run at its checkpoint at ``env_steps``."""

    def __init__(self, env_steps: int) -> None:
        self.env_steps = env_steps

    def on_checkpoint(self, env_steps: int, path: Path) -> bool:
        return env_steps == self.env_steps


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_a_run_of_every_kind_stopped_and_resumed_is_the_run_never_stopped(kind, tmp_path):
    """Every registered kind (a new one is taken without a line here): stopped at its checkpoint
    at step 600 and resumed through the API, the run ends with the curves, weights, memory
    (contents, priorities, RNG) and summary of the run never stopped."""
    settings = [*SETTINGS, f"replay.kind={kind}"]
    reference = per_dqn.train("cartpole", overrides=settings, run_dir=tmp_path / "ref").run_dir
    stopped = per_dqn.train(
        "cartpole", overrides=settings, run_dir=tmp_path / "run", callbacks=[_StopAt(600)]
    )
    assert stopped.summary["interrupted"] and stopped.summary["env_steps"] == 600
    per_dqn.resume(stopped.run_dir)
    assert_same_run(stopped.run_dir, reference)
