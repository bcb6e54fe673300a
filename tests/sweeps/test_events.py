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
from hypothesis import example, given, settings
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


def protobuf_reads(files, tags) -> dict[str, list[tuple[int, float]]]:
    """The reference: every record parsed by protobuf's own parser and put through TensorBoard's
    ``_ProcessEvent`` rules one event at a time (this module's reader before its compiled
    decoder, checked against ``EventAccumulator`` by the tests above)."""
    from google.protobuf.message import DecodeError

    points: dict[str, list[tuple[int, float]]] = {tag: [] for tag in tags}
    file_version, latest_step = None, -1
    for path, raw in files:
        starts, stops, status = events._frame(np.frombuffer(raw, dtype=np.uint8), events._TABLE)
        for begin, end in zip(starts.tolist(), stops.tolist(), strict=True):
            try:
                event = event_pb2.Event.FromString(raw[begin:end])
            except DecodeError:
                raise events.Damaged(Path(path), "a record is not an event") from None
            what, step = event.WhichOneof("what"), event.step
            if what == "file_version":
                file_version = events._file_version(event.file_version)
            if file_version and file_version >= 2:
                if what == "session_log" and event.session_log.status == event_pb2.SessionLog.START:
                    for kept in points.values():
                        kept[:] = [p for p in kept if p[0] < step]
            elif step < latest_step and what == "summary":
                for value in event.summary.value:
                    if value.tag in points:
                        points[value.tag] = [p for p in points[value.tag] if p[0] < step]
            else:
                latest_step = step
            if what == "summary":
                for value in event.summary.value:
                    if value.tag in points and value.WhichOneof("value") == "simple_value":
                        points[value.tag].append((step, value.simple_value))
        if status != events._OK:
            raise events.Damaged(Path(path), events._REASONS[status])
    return points


TAGS = ("a", "b", "é", "")
steps = st.integers(-3, 12) | st.sampled_from([2**63 - 1, -(2**63), 2**40])
values = st.floats(width=32, allow_nan=False)


@st.composite
def scalar_values(draw):
    """A summary value: mostly a scalar, sometimes what the compiled decoder hands to protobuf
    (a tensor with its metadata, a node name, no value at all)."""
    value = summary_pb2.Summary.Value(tag=draw(st.sampled_from(TAGS)))
    shape = draw(st.sampled_from(["simple"] * 6 + ["tensor", "node", "none"]))
    if shape == "simple":
        value.simple_value = draw(values)
    elif shape == "tensor":
        value.tensor.float_val.append(draw(values))
        value.metadata.plugin_data.plugin_name = "scalars"
    elif shape == "node":
        value.node_name = "n"
        value.simple_value = draw(values)
    return value


def field(key: int, data: bytes) -> bytes:
    """A length-delimited protobuf field (``key``: its number << 3 | 2), under 128 bytes."""
    assert len(data) < 128
    return bytes([key, len(data)]) + data


# Values written as raw bytes, as no protobuf message would serialize them: a node name that is
# not UTF-8 (protobuf refuses the record), a tag that is not, a tensor after the scalar (the last
# of the oneof counts: no scalar), the tag given twice (the last counts).
ODD_VALUES = {
    "bad node": field(0x0A, b"a") + b"\x15" + struct.pack("<f", 1.0) + field(0x3A, b"\xff"),
    "bad tag": field(0x0A, b"\xff") + b"\x15" + struct.pack("<f", 2.0),
    "late tensor": field(0x0A, b"b") + b"\x15" + struct.pack("<f", 3.0) + field(0x42, b""),
    "two tags": field(0x0A, b"b") + field(0x0A, b"a") + b"\x15" + struct.pack("<f", 4.0),
    "cut float": field(0x0A, b"a") + b"\x15\x00\x00",
}


@st.composite
def any_event(draw):
    """One event of every kind a run's file holds (and some it never does), serialized."""
    step = draw(steps)
    kind = draw(st.sampled_from(["summary"] * 6 + ["version", "start", "stop", "log", "graph",
                                                    "empty", "two whats", "source", "odd value",
                                                    "odd start", "odd version",
                                                    "odd source", "long key"]))  # fmt: skip
    event = event_pb2.Event(step=step, wall_time=draw(st.sampled_from([0.0, 1.5])))
    if kind == "summary":
        event.summary.value.extend(draw(st.lists(scalar_values(), min_size=0, max_size=3)))
    elif kind == "version":
        event.file_version = draw(st.sampled_from(["brain.Event:2", "brain.Event:1", "x", ""]))
    elif kind in ("start", "stop"):
        event.session_log.status = 1 if kind == "start" else 2
        if draw(st.booleans()):
            event.session_log.msg = "restart"
    elif kind == "log":
        event.log_message.message = "m"
    elif kind == "graph":
        event.graph_def = b"\x00\x01"
    elif kind == "source":
        event.file_version = "brain.Event:2"
        event.source_metadata.writer = "w"
    data = event.SerializeToString()
    if kind == "two whats":  # a summary, a file version, a summary: only the last one counts
        first = event_pb2.Event(summary=summary_pb2.Summary(value=[draw(scalar_values())]))
        second = event_pb2.Event(summary=summary_pb2.Summary(value=[draw(scalar_values())]))
        version = event_pb2.Event(file_version="brain.Event:2")
        data += b"".join(e.SerializeToString() for e in (first, version, second))
    elif kind == "odd value":
        data += field(0x2A, field(0x0A, ODD_VALUES[draw(st.sampled_from(sorted(ODD_VALUES)))]))
    elif kind == "odd start":  # START, then a field SessionLog does not know (9, a varint)
        data += field(0x3A, b"\x08\x01\x48\x05")
    elif kind == "odd version":  # a file version that is not UTF-8: protobuf refuses it
        data += field(0x1A, b"brain.Event:\xff")
    elif kind == "odd source":  # a source whose writer is not UTF-8: protobuf refuses it
        data += field(0x52, field(0x0A, b"\xff"))
    elif kind == "long key":  # a wall time's key in 6 bytes: past protobuf's 5, refused
        data += LONG_KEY
    return data


LONG_KEY = b"\x89\x80\x80\x80\x80\x00" + struct.pack("<d", 1.5)
# A restart at step 3 whose SessionLog also holds a field it does not know (9 = 5): protobuf
# reads START, so the points past step 3 go.
ODD_START = event_pb2.Event(step=3).SerializeToString() + field(0x3A, b"\x08\x01\x48\x05")


def framed(payloads: list[bytes]) -> bytes:
    out = b""
    for data in payloads:
        header = struct.pack("<Q", len(data))
        out += header + struct.pack("<I", masked_crc32c(header)) + data
        out += struct.pack("<I", masked_crc32c(data))
    return out


@settings(max_examples=300, deadline=None)
@given(
    files=st.lists(st.lists(any_event(), max_size=12), min_size=1, max_size=3),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=2),
    cut=st.one_of(st.none(), st.integers(1, 40)),
)
@example(  # each odd record below, where it changes the points if misread
    files=[[VERSION.SerializeToString(), *(scalar(s, "a", s).SerializeToString() for s in (1, 5)),
            ODD_START]],
    flips=[], cut=None,
)  # fmt: skip
@example(files=[[scalar(4, "b", 4).SerializeToString() + LONG_KEY]], flips=[], cut=None)
@example(
    files=[[scalar(1, "a", 1).SerializeToString(),
            event_pb2.Event(step=2).SerializeToString()
            + field(0x2A, field(0x0A, ODD_VALUES["cut float"]))]],
    flips=[], cut=None,
)  # fmt: skip
def test_the_compiled_decoder_reads_what_protobuf_reads(files, flips, cut):
    """Any mix of events, their payloads' bytes flipped or cut (re-framed with good CRCs, so
    that protobuf's parser, not the framing, meets the damage): the same points as protobuf's
    parser record by record, or the same ``Damaged`` on the same file."""
    contents = []
    for n, payloads in enumerate(files):
        payloads = list(payloads)
        if payloads and n == 0:
            for at, mask in flips:
                which = at % len(payloads)
                data = bytearray(payloads[which])
                if data:
                    data[at % len(data)] ^= mask
                if cut is not None:
                    data = data[: max(len(data) - cut, 0)]
                payloads[which] = bytes(data)
        contents.append((Path(f"events.out.tfevents.{n}"), framed(payloads)))
    try:
        expected = protobuf_reads(contents, TAGS)
    except events.Damaged as exc:
        with pytest.raises(events.Damaged) as raised:
            events.scalar_curves(contents, TAGS)
        assert (raised.value.path, raised.value.reason) == (exc.path, exc.reason)
    else:
        assert nan_as_text(events.scalar_curves(contents, TAGS)) == nan_as_text(expected)


def nan_as_text(curves):
    """``curves`` with each NaN as ``"nan"`` (flipped bytes make some), so that equal reads
    compare equal."""
    return {
        tag: [(step, "nan" if value != value else value) for step, value in points]
        for tag, points in curves.items()
    }


@settings(max_examples=200, deadline=None)
@given(
    points=st.lists(
        st.tuples(
            st.text(max_size=140),
            st.integers(-(2**63), 2**63 - 1),
            st.floats(allow_nan=False) | st.floats(width=32, allow_nan=False),
        ),
        max_size=20,
    ),
    wall_time=st.floats(0, 2e9),
)
def test_the_compiled_writer_writes_protobuf_s_bytes(points, wall_time):
    """``encoded_scalars``: byte for byte the records protobuf serializes for the same events
    (an empty tag left out, a step of 0 left out, a value past float32's range as inf), framed
    as TFRecords."""
    records = [event_pb2.Event(wall_time=wall_time, file_version="brain.Event:2")]
    for tag, step, value in points:
        summary = summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]
        )
        records.append(event_pb2.Event(wall_time=wall_time, step=step, summary=summary))
    ids: dict[str, int] = {}
    tag = np.array([ids.setdefault(t, len(ids)) for t, _, _ in points], dtype=np.int64)
    step = np.array([s for _, s, _ in points], dtype=np.int64)
    value = np.array([v for _, _, v in points], dtype=np.float64)
    mine = events.encoded_scalars(list(ids), tag, step, value, wall_time)
    assert mine == framed([r.SerializeToString() for r in records])


def test_a_hash_collision_of_two_tags_is_read_by_protobuf(monkeypatch):
    """Tags are told apart by a 64-bit hash of their bytes; where two tags' hashes collide (made
    to here: every hash 0), the file's records go to protobuf's parser and read the same."""
    payloads = [VERSION.SerializeToString()]
    payloads += [scalar(s, "ab"[s % 2], s).SerializeToString() for s in range(8)]
    contents = [(Path("events.out.tfevents.0"), framed(payloads))]
    expected = protobuf_reads(contents, ["a", "b"])
    assert expected["a"] and expected["b"]
    monkeypatch.setattr(
        events, "_tag_hashes", lambda data, start, stop: np.zeros(len(start), np.uint64)
    )
    assert events.scalar_curves(contents, ["a", "b"]) == expected
