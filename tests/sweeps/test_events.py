"""The report's event reader (``per_dqn.sweeps.events``) against TensorBoard's ``EventAccumulator``,
the reader it stands in for: the same points on archived runs, on a resumed run's purge, on the
older out-of-order rule, and on damaged files (where TensorBoard stops at a bad record, it raises);
its CRC against TensorBoard's own.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import TINY
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.proto import event_pb2, summary_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c
from typer.testing import CliRunner

from per_dqn.cli import app
from per_dqn.sweeps import events

ROOT = Path(__file__).resolve().parents[2]
ARCHIVE = ROOT / "docs/results/data/literature-per-beta-over-1m.tar.xz"


def tensorboard_reads(run_dir: Path) -> tuple[dict[str, list[tuple[int, float]]], bool]:
    """Every scalar tag's points as TensorBoard's ``EventAccumulator`` holds them, and whether
    its reader stopped at a bad record (it says so only at DEBUG level)."""
    log = logging.getLogger("tensorboard")
    seen: list[str] = []

    class Notes(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(str(record.msg))

    handler, level = Notes(logging.DEBUG), log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    try:
        accumulator = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
        accumulator.Reload()
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    curves = {
        tag: [(e.step, e.value) for e in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }
    return curves, any(note.startswith("Truncated record in") for note in seen)


def ours(run_dir: Path, tags) -> dict[str, list[tuple[int, float]]]:
    files = sorted(p for p in run_dir.iterdir() if "tfevents" in p.name)
    return events.scalar_curves([(p, p.read_bytes()) for p in files], tags)


@pytest.fixture(scope="module")
def archived(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("archive") / "sweep"
    result = CliRunner().invoke(app, ["unarchive", str(ARCHIVE), str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_archived_runs_read_as_tensorboard_reads_them(archived):
    runs = sorted({p.parent for p in archived.rglob("*tfevents*")})
    assert len(runs) >= 5
    for run in runs:
        theirs, lost = tensorboard_reads(run)
        assert not lost and len(theirs["episode/return"]) > 100  # archives keep 3 tags
        assert ours(run, theirs) == theirs, run


def test_a_resumed_training_run_reads_as_tensorboard_reads_it(tmp_path):
    """Every tag a run logs (beside its HParams, text and Custom Scalars records), over the two
    event files of a run extended by ``--resume --steps``: its second starts with a purge."""
    run = tmp_path / "run"
    sets = [a for s in TINY for a in ("--set", s)]
    first = ["train", "-c", "cartpole.yaml", "--steps", "600", "--run-dir", str(run), "--quiet"]
    assert CliRunner().invoke(app, [*first, *sets]).exit_code == 0
    resumed = ["train", "--resume", str(run), "--steps", "900", "--quiet"]
    assert CliRunner().invoke(app, resumed).exit_code == 0
    assert len(list(run.glob("*tfevents*"))) == 2
    theirs, lost = tensorboard_reads(run)
    assert not lost and len(theirs) >= 20
    assert ours(run, theirs) == theirs


def record(event: event_pb2.Event) -> bytes:
    data = event.SerializeToString()
    header = struct.pack("<Q", len(data))
    return (
        header + struct.pack("<I", masked_crc32c(header)) + data
        + struct.pack("<I", masked_crc32c(data))
    )  # fmt: skip


def scalar(step: int, tag: str, value: float) -> event_pb2.Event:
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
    return event_pb2.Event(step=step, wall_time=1.0, summary=summary)


def start(step: int) -> event_pb2.Event:
    log = event_pb2.SessionLog(status=event_pb2.SessionLog.START)
    return event_pb2.Event(step=step, wall_time=1.0, session_log=log)


VERSION = event_pb2.Event(wall_time=1.0, file_version="brain.Event:2")


@pytest.mark.parametrize(
    "files",
    [
        # A resumed run: the second file's purge_step drops what the first logged past it.
        [[VERSION, *(scalar(s, "a", s) for s in range(10))],
         [VERSION, start(6), *(scalar(s, "a", -s) for s in range(6, 12))]],
        # No file version: a step going back drops that tag's later points only.
        [[scalar(1, "a", 1), scalar(2, "b", 2), scalar(5, "a", 5), scalar(5, "b", 5),
          scalar(3, "a", 3), scalar(9, "a", 9)]],
        # A start without a file version purges nothing; a version read later switches rules.
        [[scalar(4, "a", 4), start(2), scalar(6, "a", 6), VERSION, scalar(3, "a", 3),
          start(5), scalar(7, "b", 7)]],
        # A file version that does not parse is -1: the older rule.
        [[event_pb2.Event(file_version="nonsense"), scalar(5, "a", 5), scalar(2, "a", 2)]],
    ],
)  # fmt: skip
def test_restarts_and_out_of_order_steps_purge_as_tensorboard_does(tmp_path, files):
    for i, file in enumerate(files):
        (tmp_path / f"events.out.tfevents.{i}").write_bytes(b"".join(map(record, file)))
    theirs, lost = tensorboard_reads(tmp_path)
    assert not lost and theirs
    assert ours(tmp_path, ["a", "b"]) == {tag: theirs.get(tag, []) for tag in ("a", "b")}


@settings(max_examples=60, deadline=None)
@given(
    cut=st.one_of(st.none(), st.integers(1, 400)),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=2),
)
def test_a_damaged_file_raises_where_tensorboard_stops_and_reads_the_same_otherwise(
    tmp_path_factory, cut, flips
):
    """Bytes flipped or the end cut off: TensorBoard stops at the bad record (the curves it shows
    are cut short there) exactly when this reader raises; an undamaged read is the same."""
    run = tmp_path_factory.mktemp("damaged")
    data = bytearray(
        b"".join(record(e) for e in [VERSION, *(scalar(s, "a", s) for s in range(60))])
    )
    for at, mask in flips:
        data[at % len(data)] ^= mask
    if cut is not None:
        data = data[: max(len(data) - cut, 0)]
    (run / "events.out.tfevents.0").write_bytes(bytes(data))
    theirs, lost = tensorboard_reads(run)
    try:
        read = ours(run, ["a"])
    except events.Damaged:
        assert lost
    else:
        assert not lost
        assert read == {"a": theirs.get("a", [])}


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300))
def test_the_crc_is_tensorboard_s(data):
    array = np.frombuffer(data, dtype=np.uint8)
    assert int(events._masked_crc(array, 0, len(array), events._TABLE)) == masked_crc32c(data)


def test_points_written_back_read_in_tensorboard_as_given(tmp_path):
    """``write_scalars`` (``per-dqn unarchive``'s writer): TensorBoard reads every point, two at
    one step included, in order, as float32 values, from a file named as a SummaryWriter names
    its own; this reader reads the same."""
    points = [("a", 0, 0.1), ("b", 0, 2.0), ("a", 5, -1.5), ("a", 5, 3.25), ("b", 9, 1e-3)]
    path = events.write_scalars(tmp_path, points)
    assert path.parent == tmp_path and path.name.startswith("events.out.tfevents.")
    theirs, lost = tensorboard_reads(tmp_path)
    f32 = [(tag, step, float(np.float32(value))) for tag, step, value in points]
    assert not lost and theirs == {
        tag: [(step, value) for t, step, value in f32 if t == tag] for tag in ("a", "b")
    }
    assert ours(tmp_path, ["a", "b"]) == theirs
