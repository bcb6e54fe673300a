"""The tag catalogue and its derived maps, the PER health panel, run-dir rules and the console,
against hand computation."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from per_dqn.cli import app
from per_dqn.logs import tags
from per_dqn.logs.console import ConsoleProgress, Speedometer, format_duration, format_steps
from per_dqn.rundir import dirs as rundir
from per_dqn.training.health import MeanAccumulator, ReplayHealth


def test_health_panel_by_hand():
    """Slots 0-3 added at steps 10, 10, 20, 30; slot 1's priority refreshed at 25.

    At step 40 the batch [0, 1, 1, 3] with weights [1, 1, .5, .5]:
      never replayed: all four entries had 0 replays -> 1.0
      sample age: 40 - mean(10, 10, 10, 30) = 25
      priority age: 40 - mean(10, 25, 25, 30) = 17.5
      ESS: (sum w)^2 / sum w^2 / B = 9 / 2.5 / 4 = 0.9
    A second batch [0, 2] at step 50: slot 0 was replayed, slot 2 was not -> 0.5.
    """
    health = ReplayHealth(capacity=8)
    health.record_add(np.array([0, 1]), 10)
    health.record_add(np.array([2]), 20)
    health.record_add(3, 30)
    health.record_priority_update(np.array([1]), 25)
    health.record_sample(
        np.array([0, 1, 1, 3]), np.array([1.0, 1.0, 0.5, 0.5], np.float32), 40,
        priorities=np.array([2.0, 4.0, 4.0, 6.0]),
    )  # fmt: skip
    means = health.pop_means()
    assert means[tags.PER_NEVER_REPLAYED] == 1.0
    assert means[tags.PER_SAMPLE_AGE] == 25.0
    assert means[tags.PER_PRIORITY_AGE] == 17.5
    assert means[tags.PER_IS_WEIGHT_ESS] == pytest.approx(0.9)
    assert means[tags.PER_IS_WEIGHT_MEAN] == 0.75
    assert means[tags.PER_IS_WEIGHT_MIN] == 0.5
    assert means[tags.PER_SAMPLED_PRIORITY] == 4.0

    health.record_sample(np.array([0, 2]), np.ones(2, np.float32), 50)
    means = health.pop_means()
    assert means[tags.PER_NEVER_REPLAYED] == 0.5
    assert tags.PER_SAMPLED_PRIORITY not in means  # uniform replay has no priorities
    assert health.pop_means() == {}


def test_overwritten_slot_starts_a_new_history():
    health = ReplayHealth(capacity=2)
    health.record_add(np.array([0]), 1)
    health.record_sample(np.array([0]), np.ones(1, np.float32), 2)
    health.record_add(np.array([0]), 3)  # the ring wrapped: a new transition in slot 0
    health.pop_means()
    health.record_sample(np.array([0]), np.ones(1, np.float32), 4)
    assert health.pop_means()[tags.PER_NEVER_REPLAYED] == 1.0


def test_the_loops_one_feed_per_update_is_sample_then_priority_update():
    """`record_learn`, the loop's one call per gradient step (issue 22: four call sites became
    two), is `record_sample` then `record_priority_update`: the batch's priority age is read
    before the update resets it. Slot 1 added at 10, drawn at 40: priority age 30 (not 0), and a
    second draw at 50 sees the update made at 40 (age 10)."""
    fed, reference = ReplayHealth(capacity=4), ReplayHealth(capacity=4)
    for health in (fed, reference):
        health.record_add(np.array([0, 1]), 10)
    sampled, weights, priorities = np.array([1, 1]), np.array([1.0, 0.5]), np.array([2.0, 4.0])
    fed.record_learn(sampled, weights, priorities, sampled, 40)
    reference.record_sample(sampled, weights, 40, priorities)
    reference.record_priority_update(sampled, 40)
    means = fed.pop_means()
    assert means == reference.pop_means()
    assert means[tags.PER_PRIORITY_AGE] == 30.0 and means[tags.PER_SAMPLED_PRIORITY] == 3.0
    fed.record_learn(np.array([1]), np.ones(1), None, np.array([1]), 50)
    assert fed.pop_means()[tags.PER_PRIORITY_AGE] == 10.0
    assert fed.priority_set_at.tolist() == [10, 50, 0, 0]


def test_mean_accumulator():
    acc = MeanAccumulator()
    acc.add({"a": 1.0, "b": 2.0})
    acc.add({"a": 3.0})
    assert acc.pop_means() == {"a": 2.0, "b": 2.0}
    assert acc.pop_means() == {}


def test_default_run_name():
    name = rundir.default_run_name("ALE/Pong-v5", "atari", "rank", 3, datetime(2026, 1, 2, 3, 4, 5))
    assert name == "ALE-Pong-v5__atari__rank__s3__20260102-030405"


def test_run_dir_rules(tmp_path):
    rundir.check_run_dir(tmp_path / "absent")
    rundir.check_run_dir(tmp_path)  # exists but empty: fine
    (tmp_path / "x").write_text("")
    with pytest.raises(rundir.RunDirError, match="not empty"):
        rundir.check_run_dir(tmp_path)
    with pytest.raises(rundir.RunDirError, match="not a directory"):
        rundir.check_run_dir(tmp_path / "x")


def test_run_dir_lock(tmp_path):
    """One holder at a time (flock is per open file, so a second open in this same process is
    refused too), named from /proc/locks; the lock file alone does not make a dir "not empty";
    a fresh run refuses a dir another run wrote into between its check and its lock;
    ``create=False`` creates nothing."""
    run_dir = tmp_path / "run"
    lock = rundir.lock_run_dir(run_dir, fresh=True)
    assert lock is not None
    assert rundir.lock_holder(run_dir) == os.getpid()
    assert (
        run_dir / rundir.LOCK_FILE
    ).read_bytes() == b""  # never written: refusals change nothing
    for attempt in (rundir.lock_run_dir, rundir.check_run_dir):
        with pytest.raises(rundir.RunDirInUse) as refused:
            attempt(run_dir)
        assert str(refused.value) == (
            f"run dir {run_dir} is in use by another per-dqn process (pid {os.getpid()}); "
            "wait for it to end or stop it"
        )
    lock.release()
    lock.release()  # a second release does nothing
    assert rundir.lock_holder(run_dir) is None
    rundir.check_run_dir(run_dir)  # only the lock file: a fresh run may use it
    (run_dir / "events").write_text("")
    with pytest.raises(rundir.RunDirError, match="exists and is not empty"):
        rundir.lock_run_dir(run_dir, fresh=True)
    with rundir.lock_run_dir(run_dir, create=False) as again:  # a resume
        assert again is not None
    assert rundir.lock_run_dir(tmp_path / "other", create=False) is None
    assert not (tmp_path / "other").exists()


def test_each_lock_is_named_by_its_own_holder(tmp_path):
    """``lock_holder`` reads the line of ``/proc/locks`` for this dir's lock file, not the first
    write lock it finds: another process's lock on another dir is that process's."""
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from per_dqn.rundir import dirs as rundir; "
         f"lock = rundir.lock_run_dir(rundir.Path({str(theirs)!r})); print('locked', flush=True); "
         "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "locked\n"
        with rundir.lock_run_dir(ours):
            assert rundir.lock_holder(theirs) == holder.pid
            assert rundir.lock_holder(ours) == os.getpid()
        assert rundir.lock_holder(ours) is None
        assert rundir.lock_holder(theirs) == holder.pid
        with pytest.raises(rundir.RunDirInUse, match=rf"\(pid {holder.pid}\)"):
            rundir.check_run_dir(theirs)
    finally:
        holder.communicate("", timeout=30)
    assert rundir.lock_holder(theirs) is None
    rundir.check_run_dir(theirs)


def test_a_lock_file_that_is_a_link_is_never_followed(tmp_path):
    """A lock file that is a link, even to a file inside the run dir, is refused with one line
    (``O_NOFOLLOW``): following it would lock, or create, a file the link chose."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "other").write_text("")
    (run_dir / rundir.LOCK_FILE).symlink_to("other")
    for attempt in (rundir.check_run_dir, rundir.lock_run_dir):
        with pytest.raises(rundir.RunDirError) as refused:
            attempt(run_dir)
        assert str(refused.value).startswith(f"run dir {run_dir}: cannot use")


def test_a_dir_that_cannot_be_written_is_refused_naming_the_ancestor_to_blame(tmp_path):
    """``check_writable``: a file where a parent dir should be, and a dir this user may not write
    (checked as an unprivileged user: root passes every permission check)."""
    (tmp_path / "afile").write_text("")
    with pytest.raises(rundir.RunDirError) as caught:
        rundir.check_writable(tmp_path / "afile" / "run", "run dir")
    assert str(caught.value) == (
        f"run dir {tmp_path / 'afile' / 'run'}: {tmp_path / 'afile'} is a file, not a directory"
    )
    locked = Path(tempfile.mkdtemp(dir="/tmp"))  # /tmp: a user other than root can reach it
    try:
        locked.chmod(0o555)
        target = locked / "sweep" / "run"
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: drop to nobody, then check
            os.close(read)
            message = "no refusal"
            try:
                if os.getuid() == 0:
                    os.setgid(65534)
                    os.setuid(65534)
                rundir.check_writable(target, "sweep dir")
            except rundir.RunDirError as exc:
                message = str(exc)
            except BaseException as exc:  # any other failure is the test's to report
                message = repr(exc)
            finally:
                os.write(write, message.encode())
                os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            said = pipe.read().decode()
        os.waitpid(pid, 0)
        assert said == f"sweep dir {target}: {locked} is not writable (permission denied)"
    finally:
        locked.chmod(0o755)
        shutil.rmtree(locked)


def test_run_json_is_read_as_data_and_refused_in_one_line(tmp_path):
    """``read_run_record``: an id and the legacy step (0 is a step), or none for a run dir from
    before run ids; a ``run.json`` that leads out, cannot be read, is not JSON, holds no id or a
    legacy step that is not one is refused naming it. ``ensure_run_id`` gives the id it finds,
    and writes one only where there is none."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    path = run_dir / rundir.RUN_FILE
    assert rundir.read_run_record(run_dir) == (None, None)
    first = rundir.ensure_run_id(run_dir)
    assert rundir.ensure_run_id(run_dir) == first == rundir.read_run_id(run_dir)
    assert json.loads(path.read_text()) == {rundir.RUN_ID_KEY: first}
    run_id = "a" * 32
    for legacy in (0, 7):
        path.write_text(json.dumps({rundir.RUN_ID_KEY: run_id, rundir.LEGACY_KEY: legacy}))
        assert rundir.read_run_record(run_dir) == (run_id, legacy)
    for legacy in (-1, "7", 1.5, True):
        path.write_text(json.dumps({rundir.RUN_ID_KEY: run_id, rundir.LEGACY_KEY: legacy}))
        with pytest.raises(rundir.RunDirError) as caught:
            rundir.read_run_record(run_dir)
        assert str(caught.value) == (f"{path}: {rundir.LEGACY_KEY} {legacy!r} is not an env step")
    for text in ("{", "[" * 100 + "]" * 100, "[]", json.dumps({rundir.RUN_ID_KEY: "x"})):
        path.write_text(text)
        with pytest.raises(rundir.RunDirError) as caught:
            rundir.read_run_record(run_dir)
        assert str(caught.value) == f"{path}: holds no run id ('run_id': 32 hex digits)"
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(rundir.RunDirError) as caught:
        rundir.read_run_record(run_dir)
    assert str(caught.value) == f"{path}: cannot read it (a FIFO, not a regular file)"
    path.unlink()
    (tmp_path / "elsewhere.json").write_text(json.dumps({rundir.RUN_ID_KEY: run_id}))
    path.symlink_to(tmp_path / "elsewhere.json")
    for read in (rundir.read_run_record, rundir.ensure_run_id):
        with pytest.raises(rundir.RunDirError) as caught:
            read(run_dir)
        assert str(caught.value) == (
            f"{path}: leads outside {run_dir} (to {tmp_path / 'elsewhere.json'}); refused: "
            "a run dir's paths stay inside it"
        )


def test_lock_run_dir_names_what_it_locks_and_leaves_nothing_when_it_cannot(tmp_path, monkeypatch):
    """``lock_run_dir``'s refusals, each one line naming what the caller locks (``what``): a name
    too long for the filesystem; a lock file that is a dir, or a link (also for a resume's
    ``create=False``: never followed); and a lock file that cannot be created (the disk filled
    between the checks and the open, injected here), which removes the dirs it made, and keeps
    one another process wrote into meanwhile."""
    held = rundir.lock_run_dir(tmp_path / "held", what="sweep dir")
    assert held is not None and held.path == tmp_path / "held"
    with pytest.raises(rundir.RunDirInUse) as caught:
        rundir.lock_run_dir(tmp_path / "held", what="sweep dir")
    assert str(caught.value).startswith(f"sweep dir {tmp_path / 'held'} is in use by another")
    held.release()
    long = tmp_path / ("n" * 300)
    with pytest.raises(rundir.RunDirError) as caught:
        rundir.lock_run_dir(long, what="sweep dir")
    assert str(caught.value).startswith(f"sweep dir {tmp_path / ('n' * 24 + '...' + 'n' * 12)}: ")
    run_dir = tmp_path / "run"
    (run_dir / rundir.LOCK_FILE).mkdir(parents=True)
    for create in (True, False):
        with pytest.raises(rundir.RunDirError) as caught:
            rundir.lock_run_dir(run_dir, create=create, what="sweep dir")
        assert str(caught.value) == f"sweep dir {run_dir}: cannot use it: Is a directory"
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "other").write_text("")
    (linked / rundir.LOCK_FILE).symlink_to("other")
    with pytest.raises(rundir.RunDirError) as caught:
        rundir.lock_run_dir(linked, create=False)
    assert str(caught.value).startswith(f"run dir {linked}: cannot use it: ")
    real_open = os.open
    fresh = tmp_path / "new" / "sweep" / "run"

    def disk_full(path, flags, *args, **kwargs):
        if str(path).endswith(rundir.LOCK_FILE) and flags & os.O_CREAT:
            raise OSError(28, "No space left on device")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", disk_full)
    with pytest.raises(rundir.RunDirError) as caught:
        rundir.lock_run_dir(fresh)
    assert str(caught.value) == f"run dir {fresh}: cannot use it: No space left on device"
    assert not (tmp_path / "new").exists()  # every dir it made is gone

    def disk_full_and_a_writer(path, flags, *args, **kwargs):
        if str(path).endswith(rundir.LOCK_FILE) and flags & os.O_CREAT:
            (fresh.parent / "theirs").write_text("another process's file")
        return disk_full(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", disk_full_and_a_writer)
    with pytest.raises(rundir.RunDirError):
        rundir.lock_run_dir(fresh)
    assert not fresh.exists() and (fresh.parent / "theirs").exists()


def test_a_name_longer_than_the_filesystem_takes_is_refused_to_the_byte(tmp_path):
    """``check_name_lengths``: a component of exactly the filesystem's limit (255 bytes here) is
    taken, one byte more refused; the line shows each component of up to 40 characters whole and
    a longer one by its ends; a name no file can have (a lone surrogate) is refused too."""
    limit = os.pathconf(tmp_path, "PC_NAME_MAX")
    forty, forty_one = "f" * 40, "g" * 41
    rundir.check_name_lengths(tmp_path / forty / ("n" * limit))
    long = "n" * (limit + 1)
    with pytest.raises(rundir.RunDirError) as caught:
        rundir.check_run_dir(tmp_path / forty / forty_one / long)
    shown_long = "n" * 24 + "..." + "n" * 12
    shown = tmp_path / forty / ("g" * 24 + "..." + "g" * 12) / shown_long
    assert str(caught.value) == (
        f"run dir {shown}: the name {shown_long!r} is {limit + 1} bytes long, more than the "
        f"filesystem's limit of {limit}; choose a shorter one"
    )
    odd = tmp_path / "a\ud800b"
    with pytest.raises(rundir.RunDirError) as caught:
        rundir.check_name_lengths(odd, "sweep dir")
    assert str(caught.value) == (
        f"sweep dir {str(odd)!a}: the name 'a\\ud800b' cannot be a file name (surrogates not "
        "allowed); choose another"
    )


def test_a_run_dir_holding_a_nul_byte_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    """Pins a bug: a NUL byte in a run dir's path (YAML writes one as ``"\\0"`` in
    ``run.runs_root``) passed the name check, whose probe of the filesystem swallowed the
    ValueError, and the run then died on a bare ``ValueError: embedded null byte``. Now the check
    refuses it in one line, and ``train`` exits 2 having made nothing."""
    odd = tmp_path / "r\0x" / "run"
    with pytest.raises(rundir.RunDirError) as caught:
        rundir.check_name_lengths(odd)
    assert str(caught.value) == f"run dir {str(odd)!a}: a path holding a NUL byte; choose another"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(
        'run:\n  runs_root: "r\\0x"\ntrain:\n  total_env_steps: 600\n  learning_starts: 100\n'
    )
    result = CliRunner().invoke(app, ["train", "-c", "c.yaml", "-q"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: run dir 'r\\x00x/CartPole-v1__c__proportional__s0__")
    assert result.stderr.endswith("': a path holding a NUL byte; choose another\n")
    assert len(result.stderr.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


def test_fresh_run_dir_never_reuses_a_written_dir(tmp_path):
    assert rundir.fresh_run_dir(tmp_path, "run") == tmp_path / "run"
    (tmp_path / "run").mkdir()
    assert rundir.fresh_run_dir(tmp_path, "run") == tmp_path / "run"  # empty: reusable
    (tmp_path / "run" / "events").write_text("")
    assert rundir.fresh_run_dir(tmp_path, "run") == tmp_path / "run-2"
    (tmp_path / "run-2").write_text("a file, not a dir")
    assert rundir.fresh_run_dir(tmp_path, "run") == tmp_path / "run-3"


def test_every_documented_tag_has_a_meaning():
    assert all(desc.strip() for desc in tags.SCALAR_TAGS.values())
    assert set(tags.PRIORITY_TAGS) <= set(tags.SCALAR_TAGS)


# --- the console ----------------------------------------------------------------------------------


def _terminal(width: int = 80):
    import io

    from rich.console import Console

    buffer = io.StringIO()
    return Console(file=buffer, width=width, force_terminal=True, color_system=None), buffer


def _screen_lines(text: str) -> list[str]:
    """What a terminal shows, less rich's cursor codes; one entry per drawn line."""
    import re

    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "\n", text)
    return [line.rstrip() for line in plain.split("\n") if line.strip()]


def test_progress_bar_fits_80_columns_with_labelled_times_loss_and_last_eval(monkeypatch):
    """Issue 13, part 3, item 1: the bar showed `0:0…` (an unlabelled, cut ETA) at 80 columns,
    and neither the loss nor the last evaluation. Now every drawn line fits in 80 columns, even
    for a 50M-step Atari budget, and says what each time is."""
    clock = [1000.0]
    monkeypatch.setattr("per_dqn.logs.console.time.monotonic", lambda: clock[0])
    console, buffer = _terminal()
    with ConsoleProgress(50_000_000, console=console) as progress:
        clock[0] += 3_713.0
        progress.update(12_490_000, ret=-123.4, eps=0.05, beta=0.55)
        clock[0] += 10.0  # 1:02:03 after the start; 10,000 steps in 10 s
        progress.update(12_500_000, ret=-123.4, eps=0.05, beta=0.55,
                        loss=1.234e-5, last_eval=-12_345.6)  # fmt: skip
        progress._live.refresh()
        progress.evaluating(3, 30, 81_000)
        progress._live.refresh()
    lines = _screen_lines(buffer.getvalue())
    assert all(len(line) <= 80 and "…" not in line for line in lines), lines
    train = next(line for line in lines if line.startswith("train"))
    # 37.5M steps left at 1,000 SPS: 37,500 s
    assert train.endswith("12.50M/50.00M steps  1,000 SPS  elapsed 1:02:03  ETA 10:25:00")
    assert "return -123.4  last eval -12345.6  loss 1.23e-05  eps 0.050  beta 0.550" in lines
    assert "evaluating: 3/30 episodes, 81,000 agent steps" in lines
    assert any(line.startswith("eval ") for line in lines)


def test_plain_progress_lines_off_a_terminal(monkeypatch):
    """Issue 13, part 3, item 1: under nohup, Slurm or CI (stderr not a terminal) the output
    stayed empty until the run ended. Now one plain line every `plain_interval_s` seconds, with
    the steps, SPS, recent return, last eval, epsilon, beta and ETA; none before the first
    period, so a short run prints nothing extra."""
    import io

    from rich.console import Console

    clock = [1000.0]
    monkeypatch.setattr("per_dqn.logs.console.time.monotonic", lambda: clock[0])
    buffer = io.StringIO()
    console = Console(file=buffer, width=80)  # a file: not a terminal
    assert not console.is_terminal
    with ConsoleProgress(50_000, console=console, plain_interval_s=0.5) as progress:
        progress.update(2_500, ret=float("nan"), eps=1.0, beta=0.4)
        assert buffer.getvalue() == ""  # not yet due
        clock[0] += 8.0  # 10,000 steps in 8 s: 1,250 SPS
        progress.update(12_500, ret=45.25, eps=0.05, beta=0.55, loss=0.0123, last_eval=120.0)
        clock[0] += 0.2
        progress.update(12_750, ret=45.25, eps=0.05, beta=0.55)  # not yet due
        clock[0] += 0.6
        progress.evaluating(2, 20, 1_000)
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 3  # two due, and where the run ended
    assert lines[0].startswith(
        "progress: 12,500/50,000 env steps (25.0%)  1,250 SPS  return 45.2  last eval 120.0  "
        "loss 0.0123  eps 0.050  beta 0.550  elapsed 0:00:08"
    )
    assert lines[0].endswith("elapsed 0:00:08  ETA 0:00:30")  # 37,500 steps at 1,250 SPS
    assert lines[1].startswith(
        "progress: 12,750/50,000 env steps (25.5%)  evaluating: 2/20 episodes, 1,000 agent steps"
    )
    assert lines[2].startswith("progress: 12,750/50,000 env steps (25.5%)  evaluating: 2/20")


def test_disabled_progress_prints_only_warnings():
    import io

    from rich.console import Console

    buffer = io.StringIO()
    with ConsoleProgress(100, console=Console(file=buffer), enabled=False,
                           plain_interval_s=0.0) as progress:  # fmt: skip
        progress.update(50, ret=1.0, eps=0.5, beta=0.5)
        progress.warn("the final evaluation: something to say")
    assert buffer.getvalue() == "warning: the final evaluation: something to say\n"


def test_durations_and_step_counts():
    assert format_duration(0) == "0:00:00"
    assert format_duration(3_723.9) == "1:02:03"
    assert format_duration(100 * 3600) == "100:00:00"
    assert format_duration(float("nan")) == "-:--:--"
    assert format_steps(999_999) == "999,999"
    assert format_steps(12_500_000) == "12.50M"


def test_normalized_auc_is_the_trapezoid_area_over_the_span_by_hand():
    """Points (0, 0), (10, 10), (30, 10): area 50 + 200 = 250 over 30 steps -> 8.333..."""
    from per_dqn.rundir.summary import normalized_auc

    assert normalized_auc([(10, 10.0), (0, 0.0), (30, 10.0)]) == pytest.approx(250 / 30)
    assert normalized_auc([(5, 3.5)]) == 3.5
    # a flat curve's AUC is its value, whatever the spacing
    assert normalized_auc([(0, 2.0), (1, 2.0), (100, 2.0)]) == pytest.approx(2.0)
    for bad, why in (([], "got none"), ([(0, 1.0), (0, 2.0)], "two points at one env step"),
                     ([(0, 1.0), (5, float("nan"))], "every value must be finite")):  # fmt: skip
        with pytest.raises(ValueError, match=why):
            normalized_auc(bad)


def test_a_record_of_sessions_is_read_back_or_taken_as_unknown():
    """``read_sessions``: a list of ``{"pack": str, "seconds": finite >= 0}`` comes back as it is
    (integers as floats); anything else, one bad entry included, is None (unknown)."""
    from per_dqn.rundir.summary import read_sessions

    good = [{"pack": "a", "seconds": 1.5}, {"pack": "b", "seconds": 0}]
    assert read_sessions(good) == [{"pack": "a", "seconds": 1.5}, {"pack": "b", "seconds": 0.0}]
    assert read_sessions([]) == []
    for bad in (
        None, "1 hour", {"pack": "a", "seconds": 1.0}, [None],
        [{"pack": "a"}], [{"pack": "a", "seconds": 1.0, "more": 0}],
        [{"pack": 1, "seconds": 1.0}], [{"pack": "a", "seconds": "1"}],
        [{"pack": "a", "seconds": True}], [{"pack": "a", "seconds": -0.5}],
        [{"pack": "a", "seconds": float("nan")}], [{"pack": "a", "seconds": float("inf")}],
        [*good, "c"],
    ):  # fmt: skip
        assert read_sessions(bad) is None, bad


def test_display_name_is_the_path_from_the_sweep_dirs_parent_for_a_run_of_a_sweep(tmp_path):
    """Inside a sweep every run dir is named s<seed>; a tracker needs the cell and the sweep."""
    from per_dqn.rundir.dirs import display_name

    run = tmp_path / "sweeps" / "ablate__x" / "rank" / "alpha=0.7" / "s3"
    run.mkdir(parents=True)
    assert display_name(run) == "s3"  # no sweep.json: a run of its own
    (tmp_path / "sweeps" / "ablate__x" / "sweep.json").write_text("{}")
    assert display_name(run) == "ablate__x/rank/alpha=0.7/s3"


def test_a_trial_in_the_hparams_table_is_named_by_its_path_inside_its_sweep(tmp_path):
    """Pins unreadable trial IDs (issue 45): the HParams table shows a few characters of each
    trial's name, and every one read ``ablation-cartpol...``, the sweep's name. A run of a sweep
    is now its arm and seed there (with its env where the sweep has several), and that is the
    name its event file gives the HParams session."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata as hparams_metadata

    from per_dqn.logs.metrics import TensorBoardLogger
    from per_dqn.rundir.dirs import trial_name

    run = tmp_path / "ablation-cartpole" / "rank" / "alpha=0.7" / "s3"
    run.mkdir(parents=True)
    assert trial_name(run) == "s3"
    (tmp_path / "ablation-cartpole" / "sweep.json").write_text("{}")
    assert trial_name(run) == "rank/alpha=0.7/s3"
    logger = TensorBoardLogger(run)
    logger.hparams({"replay.kind": "rank"}, 0.0, name=trial_name(run))
    logger.close()
    acc = EventAccumulator(str(run))
    acc.Reload()
    content = acc.PluginTagToContent("hparams")[hparams_metadata.SESSION_START_INFO_TAG]
    start = hparams_metadata.parse_session_start_info_plugin_data(content)
    assert start.group_name == "rank/alpha=0.7/s3"


def test_a_run_reads_its_sweep_s_axes_and_takes_a_damaged_record_as_none(tmp_path):
    """``sweep_axes`` (what the HParams tab shows first): the enclosing ``sweep.json``'s axes;
    None for a run of no sweep and for a record that is not JSON, not an object, or whose axes
    are not a list of names (a sweep dir is data: it never stops a run)."""
    from per_dqn.rundir.dirs import sweep_axes

    run = tmp_path / "ablate__x" / "rank" / "alpha=0.7" / "s3"
    run.mkdir(parents=True)
    assert sweep_axes(run) is None
    record = tmp_path / "ablate__x" / "sweep.json"
    record.write_text('{"axes": ["env.id", "replay.kind", "run.seed", "replay.alpha"]}')
    assert sweep_axes(run) == ["env.id", "replay.kind", "run.seed", "replay.alpha"]
    for text in ("{not json", "[1, 2]", '{"axes": "env.id"}', '{"axes": ["a", 3]}'):
        record.write_text(text)
        assert sweep_axes(run) is None, text


def test_the_hparams_columns_are_the_axes_a_sweep_varies(tmp_path):
    """Issue 45, item 6: at 1280 pixels the HParams table showed the sweep's axes and cut off
    its metrics; an axis that one value fills (the env of a one-env sweep) is not a column. An
    arm's setting varies where another arm has none; a sweep varying nothing keeps them all."""
    import json

    from per_dqn.rundir.dirs import sweep_axes

    run = tmp_path / "sweep" / "rank" / "s1"
    run.mkdir(parents=True)
    axes = ["env.id", "replay.kind", "run.seed", "replay.alpha"]

    def entry(kind, seed, settings=None):
        return {"env_id": "CartPole-v1", "kind": kind, "seed": seed, "settings": settings or {},
                "point": {}}  # fmt: skip

    runs = [entry("uniform", 0), entry("uniform", 1), entry("rank", 0, {"replay.alpha": 0.7}),
            entry("rank", 1, {"replay.alpha": 0.7})]  # fmt: skip
    record = tmp_path / "sweep" / "sweep.json"
    record.write_text(json.dumps({"axes": axes, "runs": runs}))
    assert sweep_axes(run) == ["replay.kind", "run.seed", "replay.alpha"]
    record.write_text(json.dumps({"axes": axes, "runs": runs[:1]}))
    assert sweep_axes(run) == axes


def test_a_sweep_is_found_up_to_four_dirs_above_a_run_and_no_further(tmp_path):
    """A sweep's run dirs lie at most ``<env>/<arm>/<settings>/s<seed>`` below it: a
    ``sweep.json`` four dirs up is the run's sweep, one five dirs up (a run dir of its own inside
    some other sweep's tree) is not."""
    from per_dqn.rundir.dirs import sweep_axes

    (tmp_path / "sweep.json").write_text('{"axes": ["run.seed"]}')
    four = tmp_path / "env" / "arm" / "settings" / "s0"
    five = four / "deeper"
    five.mkdir(parents=True)
    assert sweep_axes(four) == ["run.seed"]
    assert sweep_axes(five) is None


def test_a_lock_file_is_made_readable_by_all_and_writable_by_its_owner(tmp_path):
    """The lock file's mode is 0o644 (under the usual umask 022): other users may read who holds
    a run dir (``/proc/locks`` and the file), only its owner may write it."""
    old = os.umask(0o022)
    try:
        lock = rundir.lock_run_dir(tmp_path / "run")
    finally:
        os.umask(old)
    assert lock is not None
    lock.release()
    assert lock.path == tmp_path / "run"
    assert os.stat(tmp_path / "run" / rundir.LOCK_FILE).st_mode & 0o777 == 0o644


def _learner_metric_names() -> set[str]:
    """Every key ``agent.learn``'s metrics can hold: one gradient step without and one with
    gradient clipping (``grad_norm``, the one optional metric), on a batch from a real memory."""
    import torch

    from per_dqn.agent import DQNAgent
    from per_dqn.memory import make_memory

    rng = np.random.default_rng(0)
    memory = make_memory("proportional", capacity=16, obs_shape=(3,), seed=0)
    obs = rng.normal(size=(16, 3)).astype(np.float32)
    memory.add_batch(obs, [0, 1] * 8, [1.0] * 16, obs[::-1].copy(), [False] * 16)
    names: set[str] = set()
    for clip in (None, 10.0):
        torch.manual_seed(0)
        agent = DQNAgent(
            obs_shape=(3,), num_actions=2, hidden_sizes=(8,), dueling=True, double=True,
            gamma=0.9, learning_rate=1e-3, adam_eps=1e-8, loss="huber", grad_clip_norm=clip,
            target_update_interval=1000, tau=1.0, device=torch.device("cpu"),
        )  # fmt: skip
        names |= set(agent.learn(memory.sample(8, 0.5)).metrics)
    return names


def test_every_learner_metric_has_a_catalogued_tag():
    """Issue 22: `run.py` mapped the learner's metric names to tags by a hand-written dict, so a
    new metric without its entry raised KeyError at the run's first log point. The map is now read
    off the catalogue (`tags.LEARNER_TAGS`: `train/<name>`), and this test fails, naming the
    metric, for one that `agent.learn` returns without a tag in `tags.SCALAR_TAGS`."""
    names = _learner_metric_names()
    assert {"loss", "grad_norm"} <= names  # both configurations ran
    missing = sorted(name for name in names if name not in tags.LEARNER_TAGS)
    assert not missing, f"learner metrics with no train/<name> tag in tags.SCALAR_TAGS: {missing}"
    logged = tags.learner_scalars(dict.fromkeys(sorted(names), 0.0))
    assert set(logged) <= set(tags.SCALAR_TAGS)
    # The tags the hand-written map gave the metrics it knew: what a run logs is unchanged (a
    # new metric beside them only needs its catalogue entry).
    assert {name: tags.LEARNER_TAGS[name] for name in names}.items() >= {
        "loss": "train/loss",
        "loss_unweighted": "train/loss_unweighted",
        "q_mean": "train/q_mean",
        "td_error_abs": "train/td_error_abs",
        "grad_norm": "train/grad_norm",
    }.items()


def test_a_learner_metric_without_a_tag_is_named():
    """Negative control for the test above: a made-up metric is caught, and the error names it and
    where its tag goes; the metrics beside it keep their order."""
    assert "made_up_metric" not in tags.LEARNER_TAGS
    with pytest.raises(KeyError, match=r"'made_up_metric' has no TensorBoard tag.*SCALAR_TAGS"):
        tags.learner_scalars({"loss": 1.0, "made_up_metric": 2.0})
    assert list(tags.learner_scalars({"q_mean": 1.0, "loss": 2.0})) == [
        "train/q_mean",
        "train/loss",
    ]


def test_every_memory_diagnostic_has_a_catalogued_tag():
    """The memory's diagnostics are logged as `per/<name>` the same way (`tags.DIAGNOSTIC_TAGS`):
    every kind's, with the full (tree-drift) check on, has a tag; a made-up one is named."""
    from per_dqn.memory import KINDS, make_memory

    seen = set()
    for kind in KINDS:
        memory = make_memory(kind, capacity=8, obs_shape=(2,), seed=0)
        memory.add_batch(np.zeros((5, 2)), [0] * 5, [0.0] * 5, np.ones((5, 2)), [False] * 5)
        diagnostics = memory.diagnostics(full=True)
        seen |= set(diagnostics)
        assert set(tags.diagnostic_scalars(diagnostics)) <= set(tags.SCALAR_TAGS), kind
    assert seen == {"mean_priority", "max_priority", "tree_drift"}
    with pytest.raises(KeyError, match="'made_up_diagnostic'"):
        tags.diagnostic_scalars({"made_up_diagnostic": 0.0})


def test_the_speed_is_measured_over_a_sliding_window_of_wall_time():
    """Issue 45, item 4: off a terminal a run printed ``0 SPS ... ETA -:--:--`` for about 77 s,
    because its speed was measured per 10,000-step log interval. The speed is now measured over
    the last 30 s of wall time from the display's own updates: known from the second one."""
    meter = Speedometer(1_000_000)
    meter.add(0, 0.0)
    assert math.isnan(meter.speed) and meter.eta_text() == "ETA -:--:--"
    meter.add(250, 0.5)
    assert meter.speed == 500.0
    for k in range(2, 121):  # 500 steps/s for 60 s
        meter.add(250 * k, 0.5 * k)
    assert meter.speed == 500.0
    # Slower for the last 40 s: the window holds the last 30 s, at 100 steps/s, only.
    t, steps = 60.0, 30_000
    for _ in range(80):
        t, steps = t + 0.5, steps + 50
        meter.add(steps, t)
    assert meter.speed == pytest.approx(100.0)
    assert meter.samples[0][0] == t - 30.0  # the oldest sample kept starts the window


def test_the_eta_knows_the_warm_up_and_learning_phases():
    """Issue 45, item 4: an Atari run showed 2,030 SPS and ETA 6:50 during its 50k warm-up,
    then 134 SPS and ETA 103:49 once learning began. During the warm-up the display now gives
    the time until learning begins, at the warm-up's speed; from there the ETA to the end at
    the learning speed, measured within that phase alone."""
    meter = Speedometer(1_000_000, learning_starts=50_000)
    meter.add(0, 0.0)
    meter.add(20_000, 10.0)  # 2,000 steps/s acting only
    assert meter.phase() == "warm-up"
    assert meter.eta_text() == "learning in 0:00:15"  # 30,000 steps left at 2,000/s
    meter.add(50_000, 25.0)  # learning begins: the warm-up's speed is not the run's
    assert meter.phase() == "learning" and math.isnan(meter.speed)
    assert meter.eta_text() == "ETA -:--:--"
    meter.add(51_000, 35.0)  # 100 steps/s learning
    assert meter.speed == 100.0
    assert meter.eta_text() == "ETA 2:38:10"  # 949,000 steps at 100/s: 9,490 s


def test_the_eta_at_the_last_step_past_the_budget_and_at_a_speed_of_zero():
    """The ETA's edge cases: 0 at the last step and past the budget (a resumed run with a
    smaller budget), unknown at a speed of 0 (a stalled run) rather than a division by 0."""
    meter = Speedometer(10_000)
    meter.add(9_000, 0.0)
    meter.add(9_000, 5.0)
    assert meter.speed == 0.0 and meter.eta_text() == "ETA -:--:--"
    meter.add(10_000, 6.0)
    assert meter.eta_text() == "ETA 0:00:00"
    meter.add(12_000, 7.0)
    assert meter.eta_text() == "ETA 0:00:00"
    # Two samples at one instant: no speed, not an infinite one.
    meter = Speedometer(10_000)
    meter.add(100, 1.0)
    meter.add(200, 1.0)
    assert math.isnan(meter.speed)
    # No warm-up (learning_starts 0): the ETA from the first speed on.
    meter = Speedometer(10_000, learning_starts=0)
    meter.add(0, 0.0)
    meter.add(1_000, 1.0)
    assert meter.phase() == "learning" and meter.eta_text() == "ETA 0:00:09"


def test_a_memory_without_is_weights_shows_no_beta(tmp_path):
    """Issue 45: a uniform run's display showed `beta 0.456`, an exponent it never uses. A run
    of an unweighted kind shows none; a proportional run shows its annealed beta."""
    import io

    from rich.console import Console

    from per_dqn import api

    shown = {}
    for kind in ("uniform", "proportional"):
        buffer = io.StringIO()
        console = Console(file=buffer, width=200)
        cfg, name = api.load_any_config(
            "cartpole", [f"replay.kind={kind}", "train.total_env_steps=600",
                         "train.learning_starts=100", "train.eval_interval=0",
                         "train.final_eval_episodes=1", "checkpoint.enabled=false"], None,
        )  # fmt: skip
        trainer = api.build_trainer(cfg, name)
        try:
            with ConsoleProgress(600, console=console, plain_interval_s=0.0) as bar:
                trainer.run(tmp_path / kind, bar)
        finally:
            trainer.close()
        shown[kind] = [line for line in buffer.getvalue().splitlines() if "SPS" in line]
    assert shown["uniform"] and not any("beta" in line for line in shown["uniform"])
    assert shown["proportional"] and all(" beta 0." in line or " beta 1." in line
                                         for line in shown["proportional"])  # fmt: skip


def test_the_end_of_run_table_folds_a_long_run_dir_whole_at_80_columns():
    """Issue 45: the Atari summary table cut its run dir at 80 columns (`runs/ALE-Pong-v5__at…`),
    so the path could not be read or pasted. A value longer than the line now folds onto the
    next one, every character kept."""
    import io

    from rich.console import Console

    from per_dqn.logs.console import print_summary

    run_dir = "runs/ALE-Breakout-v5__atari__proportional__s0__20261129-031522-extra-long-name"
    buffer = io.StringIO()
    print_summary({"run_dir": run_dir, "replay": "proportional", "seed": 0, "env_steps": 51_112,
                   "update_steps": 100, "wall_seconds": 25.0, "sps": 2044.5,
                   "final_eval_return_mean": None},
                  Console(file=buffer, width=80))  # fmt: skip
    lines = buffer.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines) and "…" not in buffer.getvalue()
    start = lines[0].index("runs/")
    folded = "".join(line[start:].rstrip() for line in lines[:2])
    assert lines[0].startswith("run dir") and folded == run_dir


def test_an_evaluation_s_time_is_left_out_of_the_training_speed(monkeypatch):
    """Pins a dip a review found: the display's update after an evaluation came at the same
    env step a minute later, so the speed read 0 (ETA ``-:--:--``) and took the whole window to
    recover. The evaluation's time is now left out: the speed after it is the speed before."""
    import io

    from rich.console import Console

    clock = [0.0]
    monkeypatch.setattr("per_dqn.logs.console.time.monotonic", lambda: clock[0])
    with ConsoleProgress(100_000, console=Console(file=io.StringIO()), enabled=False) as shown:
        shown.update(10_000, ret=1.0, eps=0.5, beta=0.5)
        clock[0] = 10.0
        shown.update(20_000, ret=1.0, eps=0.5, beta=0.5)  # 1,000 steps/s
        shown.evaluating(0, 5)
        clock[0] = 70.0  # a minute of evaluation
        shown.evaluating(5, 5)
        shown.update(20_000, ret=1.0, eps=0.5, beta=0.5)
        assert shown.sps == 1_000.0 and shown.speedometer.eta_text() == "ETA 0:01:20"
        clock[0] = 75.0
        shown.update(25_000, ret=1.0, eps=0.5, beta=0.5)
        assert shown.sps == 1_000.0


def test_a_checkpoint_being_written_is_shown_and_its_time_left_out_of_the_speed(monkeypatch):
    """Issue 45, item 3: Ctrl-C froze an Atari run's display for about 25 s with no message
    while a 7 GB checkpoint was written. Now the display shows the checkpoint's size and how much
    of it is written and checked, at 80 columns, and goes back to training once it is done; its
    time, like an evaluation's, is not training's."""
    clock = [0.0]
    monkeypatch.setattr("per_dqn.logs.console.time.monotonic", lambda: clock[0])
    console, buffer = _terminal()
    size = 3 * (1 << 30)
    with ConsoleProgress(100_000, console=console) as shown:
        shown.update(10_000, ret=1.0, eps=0.5, beta=0.5)
        clock[0] = 10.0
        shown.update(20_000, ret=1.0, eps=0.5, beta=0.5)  # 1,000 steps/s
        shown.saving(0, 2 * size, size)
        clock[0] = 40.0  # half a minute of writing
        shown.saving(size, 2 * size, size)
        shown._live.refresh()
        assert shown.plain_line().startswith(
            "20,000/100,000 env steps (20.0%)  saving a checkpoint (3.00 GiB): 50%  elapsed"
        )
        shown.saving(2 * size, 2 * size, size)  # done: back to training
        assert shown.save_state is None
        shown.update(20_000, ret=1.0, eps=0.5, beta=0.5)
        assert shown.sps == 1_000.0 and shown.speedometer.eta_text() == "ETA 0:01:20"
        shown._live.refresh()
    lines = _screen_lines(buffer.getvalue())
    assert all(len(line) <= 80 for line in lines), lines
    saving = [line for line in lines if line.startswith("save ")]
    assert saving and saving[-1].endswith("checkpoint 3.00 GiB  50%  written and checked"), lines
    assert lines[-2].startswith("train") and lines[-2].endswith("ETA 0:01:20"), lines
