"""One sweep job in this process (``per_dqn.sweeps.job``): skip a finished run, resume one with a
usable checkpoint, redo any other from zero, each decided from what the run dir holds.

Every backend runs its jobs through ``run_job``, but in worker processes or Ray tasks; these tests
call it here, on a 300-step CartPole run of a 16-unit network (about 2 s)."""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path

import pytest
from support import tree

from per_dqn.config import parse_override
from per_dqn.rundir import checkpoint as ckpt
from per_dqn.rundir import dirs as rundir
from per_dqn.sweeps import job, plan

# A 300-step run with checkpoints at 100, 200 and 300 (two kept) and one final evaluation episode.
SETTINGS = [
    "train.learning_starts=100", "train.log_interval=100", "train.eval_interval=0",
    "train.final_eval_episodes=1", "train.epsilon_decay_steps=200",
    "checkpoint.interval_steps=100", "run.device=cpu", "agent.hidden_sizes=[16]",
    "replay.capacity=1000",
]  # fmt: skip


def one_job(out: Path, seed: int = 0) -> plan.Job:
    """The job of ``ablate --replay uniform --seeds <seed> --steps 300`` into ``out``."""
    overrides = [parse_override(s) for s in SETTINGS]
    return plan.plan_sweep("cartpole.yaml", ["uniform"], [seed], 300, overrides, out).jobs[0]


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


class StopAfter:
    """``should_stop`` that asks the run to stop once it has been asked ``calls`` times (the
    trainer asks once per env step)."""

    def __init__(self, calls: int) -> None:
        self.calls = calls

    def __call__(self) -> bool:
        self.calls -= 1
        return self.calls < 0


def test_a_new_job_runs_from_zero_and_its_outcome_is_its_summary(tmp_path):
    """Pins the outcome's fields to the summary the run wrote (final return, wall time, not
    interrupted), the run dir at ``<out>/<run_dir>``, a run from step 0, and the config's name
    in the summary (as ``per-dqn train`` records it)."""
    one = one_job(tmp_path)
    outcome = job.run_job(one, tmp_path)
    run_dir = tmp_path / "uniform" / "s0"
    written = summary(run_dir)
    assert outcome == job.Outcome(
        one, written["final_eval_return_mean"], written["wall_seconds"], False, None
    )
    assert written["env_steps"] == 300 and written["resumed_from_env_steps"] is None
    assert written["interrupted"] is False and written["config"] == "cartpole"


def test_a_finished_run_is_skipped_and_nothing_in_it_changes(tmp_path):
    """Pins the skip of a run finished since the sweep was planned: its outcome read from its
    ``summary.json`` and not one file of the run dir rewritten (no trainer built, no run)."""
    one = one_job(tmp_path)
    job.run_job(one, tmp_path)
    run_dir = tmp_path / one.run_dir
    before = tree(run_dir)
    written = summary(run_dir)
    outcome = job.run_job(one, tmp_path)
    assert outcome == job.Outcome(one, written["final_eval_return_mean"], written["wall_seconds"])
    assert tree(run_dir) == before


def test_an_interrupted_run_resumes_from_its_newest_checkpoint(tmp_path):
    """Pins the resume: a run stopped after its step-100 checkpoint continues from the checkpoint
    of the step it stopped at (not from zero, not from an older one) and ends finished; the
    stopped run's outcome says ``interrupted``."""
    one = one_job(tmp_path)
    stopped = job.run_job(one, tmp_path, should_stop=StopAfter(150))
    run_dir = tmp_path / one.run_dir
    assert stopped.interrupted and stopped.final_return is None
    at = summary(run_dir)["env_steps"]
    assert 100 < at < 300
    assert ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))[-1].name == ckpt.checkpoint_name(at)
    (run_dir / "stray.txt").write_text("kept by a resume")
    resumed = job.run_job(one, tmp_path)
    written = summary(run_dir)
    assert written["resumed_from_env_steps"] == at and written["env_steps"] == 300
    assert not resumed.interrupted and resumed.final_return == written["final_eval_return_mean"]
    assert (run_dir / "stray.txt").exists()  # a resume clears nothing


def test_a_final_checkpoint_without_a_finished_summary_is_redone_from_zero(tmp_path):
    """Pins the rule for a run killed between its final checkpoint and its summary: continuing it
    would evaluate a second time, so the run dir is cleared and the run redone from step 0."""
    one = one_job(tmp_path)
    job.run_job(one, tmp_path)
    run_dir = tmp_path / one.run_dir
    (run_dir / "summary.json").unlink()
    (run_dir / "stray.txt").write_text("cleared")
    job.run_job(one, tmp_path)
    assert summary(run_dir)["resumed_from_env_steps"] is None
    assert not (run_dir / "stray.txt").exists()


def test_an_unfinished_run_without_a_checkpoint_is_cleared_and_redone(tmp_path):
    """Pins the clearing of a run dir with nothing to resume: what it held is gone (its events
    would mix with the redo's), its lock file stays, and the run starts from step 0."""
    one = one_job(tmp_path)
    run_dir = tmp_path / one.run_dir
    (run_dir / "old").mkdir(parents=True)
    (run_dir / "old" / "events.out.tfevents.1").write_bytes(b"old")
    (run_dir / "stray.txt").write_text("cleared")
    job.run_job(one, tmp_path)
    assert not (run_dir / "old").exists() and not (run_dir / "stray.txt").exists()
    assert (run_dir / rundir.LOCK_FILE).exists()
    assert summary(run_dir)["resumed_from_env_steps"] is None


def test_a_checkpoint_refused_on_load_is_not_resumed_but_redone(tmp_path):
    """Pins the fallback when the newest checkpoint passes its checksums but ``load_checkpoint``
    refuses it (here: its run id is not the run dir's, as for a step dir copied from another
    run): the run dir is cleared and the run redone from zero by a new trainer, not left
    failed."""
    one = one_job(tmp_path)
    job.run_job(one, tmp_path, should_stop=StopAfter(150))
    run_dir = tmp_path / one.run_dir
    (run_dir / rundir.RUN_FILE).write_text(json.dumps({rundir.RUN_ID_KEY: "0" * 32}))
    (run_dir / "stray.txt").write_text("cleared")
    outcome = job.run_job(one, tmp_path)
    written = summary(run_dir)
    assert written["resumed_from_env_steps"] is None and written["env_steps"] == 300
    assert not outcome.interrupted and written["config"] == "cartpole"
    assert not (run_dir / "stray.txt").exists()


def test_a_newer_checkpoint_listing_a_file_no_training_reads_is_passed_over(tmp_path):
    """A job resumes from the newest checkpoint a training run may read
    (``training.checkpoints.TRAINING_FILES``): a newer one whose manifest also lists another file
    (here ``notes.txt``, signed and present) is passed over for the older one, not taken and then
    refused, which would redo the run from zero."""
    one = one_job(tmp_path)
    job.run_job(one, tmp_path, should_stop=StopAfter(150))
    run_dir = tmp_path / one.run_dir
    older, newest = ckpt.list_checkpoints(ckpt.checkpoints_dir(run_dir))[-2:]
    (newest / "notes.txt").write_text("not a training file")
    manifest = json.loads((newest / ckpt.MANIFEST_FILE).read_text())
    manifest["files"]["notes.txt"] = {
        "bytes": (newest / "notes.txt").stat().st_size,
        "sha256": ckpt.sha256_file(newest / "notes.txt"),
    }
    manifest[ckpt.MANIFEST_DIGEST_KEY] = ckpt.manifest_digest(manifest)
    (newest / ckpt.MANIFEST_FILE).write_text(json.dumps(manifest))
    job.run_job(one, tmp_path)
    assert summary(run_dir)["resumed_from_env_steps"] == ckpt.checkpoint_step(older)


def test_a_dir_on_the_way_swapped_for_a_link_after_the_plan_is_refused_where_it_clears(tmp_path):
    """Issue 43, E1, checked again where the deleting is done: ``_trainer`` is given a run dir
    whose arm dir became a link out of the sweep dir after ``run_jobs``' own check; it refuses
    it, by the sweep dir's own path, and the link's target keeps its files."""
    from per_dqn.training.run import Trainer

    one = one_job(tmp_path / "sweep")
    outside = tmp_path / "outside"
    (outside / "s0").mkdir(parents=True)
    (outside / "s0" / "keep").write_text("x")
    arm = (tmp_path / "sweep" / one.run_dir).parent
    arm.parent.mkdir(parents=True, exist_ok=True)
    arm.symlink_to(outside, target_is_directory=True)
    with pytest.raises(ValueError, match=re.escape(str(arm))):
        job._trainer(Trainer, ckpt, one, tmp_path / "sweep" / one.run_dir)
    assert (outside / "s0" / "keep").read_text() == "x"


def test_a_run_dir_that_is_a_link_fails_its_job_alone_in_a_pack(tmp_path):
    """Issue 43, E1, in a pack: the job whose run dir is a link gets that refusal as its outcome
    and the other job of the pack runs; alone, the refusal is raised (as ``run_job`` raises every
    error of a single job)."""
    out = tmp_path / "sweep"
    jobs = plan.plan_sweep(
        "cartpole.yaml", ["uniform"], [0, 1], 300, [parse_override(s) for s in SETTINGS], out
    ).jobs
    target = tmp_path / "target"
    target.mkdir()
    (target / "keep").write_text("x")
    link = out / jobs[0].run_dir
    link.parent.mkdir(parents=True)
    link.symlink_to(target, target_is_directory=True)
    with pytest.raises(ValueError, match="symbolic link"):
        job.run_jobs(jobs[:1], out)
    first, second = job.run_jobs(jobs, out)
    assert first.job == jobs[0] and first.error is not None and "symbolic link" in first.error
    assert second.error is None and second.final_return is not None
    assert (target / "keep").read_text() == "x" and sorted(os.listdir(target)) == ["keep"]


def test_a_run_dir_another_process_writes_is_refused(tmp_path):
    """Pins the writer lock: ``run_job`` raises ``RunDirInUse`` for a run dir whose lock another
    process holds, and writes nothing there."""
    one = one_job(tmp_path)
    run_dir = tmp_path / one.run_dir
    taken_r, taken_w = os.pipe()
    release_r, release_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the other writer: holds the lock until the test releases it
        with rundir.lock_run_dir(run_dir):
            os.write(taken_w, b"1")
            os.read(release_r, 1)
        os._exit(0)
    try:
        assert os.read(taken_r, 1) == b"1"
        with pytest.raises(rundir.RunDirInUse):
            job.run_job(one, tmp_path)
        assert [p.name for p in run_dir.iterdir()] == [rundir.LOCK_FILE]
    finally:
        os.write(release_w, b"1")
        os.waitpid(pid, 0)
        for fd in (taken_r, taken_w, release_r, release_w):
            os.close(fd)


def test_clear_run_dir_removes_files_dirs_and_links_but_not_the_lock_or_a_link_s_target(tmp_path):
    """Pins ``clear_run_dir``: files, dirs with their contents and links go, the lock file stays,
    and a link to a dir outside is unlinked, never followed (its target is kept whole)."""
    run_dir, outside = tmp_path / "run", tmp_path / "outside"
    (run_dir / "checkpoints" / "step_1").mkdir(parents=True)
    (run_dir / "checkpoints" / "step_1" / "agent.pt").write_bytes(b"x")
    (run_dir / "events").write_bytes(b"x")
    (run_dir / rundir.LOCK_FILE).write_bytes(b"")
    outside.mkdir()
    (outside / "keep.txt").write_text("kept")
    (run_dir / "linked").symlink_to(outside, target_is_directory=True)
    (run_dir / "dangling").symlink_to(tmp_path / "nowhere")
    job.clear_run_dir(run_dir)
    assert [p.name for p in run_dir.iterdir()] == [rundir.LOCK_FILE]
    assert (outside / "keep.txt").read_text() == "kept"


def test_error_line_is_the_exception_type_and_message_on_one_line():
    """Pins the one-line error a failed run is reported with: type, colon, the message with its
    line breaks and runs of spaces folded into single spaces."""
    assert job.error_line(ValueError("train.lr:\n  must be > 0")) == (
        "ValueError: train.lr: must be > 0"
    )
    assert job.error_line(KeyError("x")) == "KeyError: 'x'"


class Seen:
    """A run callback that records the checkpoints it is shown."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_checkpoint(self, env_steps, path) -> bool:
        self.steps.append(env_steps)
        return False


def test_a_job_s_callbacks_see_its_run(tmp_path):
    """Pins the callbacks a backend gives ``run_job`` (the Ray backend reports progress through
    them): the run calls them, here at its periodic checkpoints (100 and 200)."""
    seen = Seen()
    job.run_job(one_job(tmp_path), tmp_path, callbacks=[seen])
    assert seen.steps == [100, 200]


def test_error_line_names_a_file_that_could_not_be_written_as_train_does():
    """Pins a sweep's line for a full disk: ``OSError: [Errno 28] No space left on device: 'x'``
    became the file, then why, as ``per-dqn train`` puts it."""
    exc = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "run/checkpoints/step_000000800")
    assert job.error_line(exc) == (
        "OSError: run/checkpoints/step_000000800: No space left on device"
    )
    assert job.error_line(OSError("no file")) == "OSError: no file"


def test_error_line_keeps_an_exception_s_notes_on_its_line():
    """Pins the joining of a multi-line exception (Python 3.11 notes): its lines become one,
    separated by single spaces."""
    exc = ValueError("env.id: cannot make 'X'")
    exc.add_note("is the extra installed?")
    assert job.error_line(exc) == "ValueError: env.id: cannot make 'X' is the extra installed?"
