"""The PER health panel's bookkeeping and run-dir rules, against hand computation."""

from __future__ import annotations

import os
from datetime import datetime

import numpy as np
import pytest

from per_dqn import metrics as m


def test_health_panel_by_hand():
    """Slots 0-3 added at steps 10, 10, 20, 30; slot 1's priority refreshed at 25.

    At step 40 the batch [0, 1, 1, 3] with weights [1, 1, .5, .5]:
      never replayed: all four entries had 0 replays -> 1.0
      sample age: 40 - mean(10, 10, 10, 30) = 25
      priority age: 40 - mean(10, 25, 25, 30) = 17.5
      ESS: (sum w)^2 / sum w^2 / B = 9 / 2.5 / 4 = 0.9
    A second batch [0, 2] at step 50: slot 0 was replayed, slot 2 was not -> 0.5.
    """
    health = m.ReplayHealth(capacity=8)
    health.record_add(np.array([0, 1]), 10)
    health.record_add(np.array([2]), 20)
    health.record_add(3, 30)
    health.record_priority_update(np.array([1]), 25)
    health.record_sample(
        np.array([0, 1, 1, 3]), np.array([1.0, 1.0, 0.5, 0.5], np.float32), 40,
        priorities=np.array([2.0, 4.0, 4.0, 6.0]),
    )  # fmt: skip
    means = health.pop_means()
    assert means[m.PER_NEVER_REPLAYED] == 1.0
    assert means[m.PER_SAMPLE_AGE] == 25.0
    assert means[m.PER_PRIORITY_AGE] == 17.5
    assert means[m.PER_IS_WEIGHT_ESS] == pytest.approx(0.9)
    assert means[m.PER_IS_WEIGHT_MEAN] == 0.75
    assert means[m.PER_IS_WEIGHT_MIN] == 0.5
    assert means[m.PER_SAMPLED_PRIORITY] == 4.0

    health.record_sample(np.array([0, 2]), np.ones(2, np.float32), 50)
    means = health.pop_means()
    assert means[m.PER_NEVER_REPLAYED] == 0.5
    assert m.PER_SAMPLED_PRIORITY not in means  # uniform replay has no priorities
    assert health.pop_means() == {}


def test_overwritten_slot_starts_a_new_history():
    health = m.ReplayHealth(capacity=2)
    health.record_add(np.array([0]), 1)
    health.record_sample(np.array([0]), np.ones(1, np.float32), 2)
    health.record_add(np.array([0]), 3)  # the ring wrapped: a new transition in slot 0
    health.pop_means()
    health.record_sample(np.array([0]), np.ones(1, np.float32), 4)
    assert health.pop_means()[m.PER_NEVER_REPLAYED] == 1.0


def test_mean_accumulator():
    acc = m.MeanAccumulator()
    acc.add({"a": 1.0, "b": 2.0})
    acc.add({"a": 3.0})
    assert acc.pop_means() == {"a": 2.0, "b": 2.0}
    assert acc.pop_means() == {}


def test_default_run_name():
    name = m.default_run_name("ALE/Pong-v5", "atari", "rank", 3, datetime(2026, 1, 2, 3, 4, 5))
    assert name == "ALE-Pong-v5__atari__rank__s3__20260102-030405"


def test_run_dir_rules(tmp_path):
    m.check_run_dir(tmp_path / "absent")
    m.check_run_dir(tmp_path)  # exists but empty: fine
    (tmp_path / "x").write_text("")
    with pytest.raises(m.RunDirError, match="not empty"):
        m.check_run_dir(tmp_path)
    with pytest.raises(m.RunDirError, match="not a directory"):
        m.check_run_dir(tmp_path / "x")


def test_run_dir_lock(tmp_path):
    """One holder at a time (flock is per open file, so a second open in this same process is
    refused too), named from /proc/locks; the lock file alone does not make a dir "not empty";
    a fresh run refuses a dir another run wrote into between its check and its lock;
    ``create=False`` creates nothing."""
    run_dir = tmp_path / "run"
    lock = m.lock_run_dir(run_dir, fresh=True)
    assert lock is not None
    assert m.lock_holder(run_dir) == os.getpid()
    assert (run_dir / m.LOCK_FILE).read_bytes() == b""  # never written: refusals change nothing
    for attempt in (m.lock_run_dir, m.check_run_dir):
        with pytest.raises(
            m.RunDirInUse, match=rf"run dir {run_dir} is in use .*\(pid {os.getpid()}\)"
        ):
            attempt(run_dir)
    lock.release()
    lock.release()  # a second release does nothing
    assert m.lock_holder(run_dir) is None
    m.check_run_dir(run_dir)  # only the lock file: a fresh run may use it
    (run_dir / "events").write_text("")
    with pytest.raises(m.RunDirError, match="exists and is not empty"):
        m.lock_run_dir(run_dir, fresh=True)
    with m.lock_run_dir(run_dir, create=False) as again:  # a resume
        assert again is not None
    assert m.lock_run_dir(tmp_path / "other", create=False) is None
    assert not (tmp_path / "other").exists()


def test_fresh_run_dir_never_reuses_a_written_dir(tmp_path):
    assert m.fresh_run_dir(tmp_path, "run") == tmp_path / "run"
    (tmp_path / "run").mkdir()
    assert m.fresh_run_dir(tmp_path, "run") == tmp_path / "run"  # empty: reusable
    (tmp_path / "run" / "events").write_text("")
    assert m.fresh_run_dir(tmp_path, "run") == tmp_path / "run-2"


def test_every_documented_tag_has_a_meaning():
    assert all(desc.strip() for desc in m.SCALAR_TAGS.values())
    assert set(m.PRIORITY_TAGS) <= set(m.SCALAR_TAGS)
