"""A run's scalar curves read from its TensorBoard event files, as TensorBoard's
``EventAccumulator`` reads them, at the speed of a compiled loop; and an archived run's points
written back as an event file (``write_scalars``).

``per-dqn report`` spent most of its time in TensorBoard's reader: without TensorFlow it frames
the records and checks their CRC-32C in pure Python, four reads and two checksums a record. Here
a file is read whole, its records framed and checked by one compiled pass (``_frame``), the
common events (a file version, a session's status, a summary of scalars) decoded from their wire
format by another (``_decode_records``), every other record parsed by protobuf's C parser, and
TensorBoard's rules applied to them all by a third (``_replay``); only the tags asked for are
kept. The writer encodes its events by a compiled pass too (``_encode_scalars``), byte for byte
what protobuf serializes. Timed in ``benchmarks/events.py`` (docs/benchmarks.md).

What TensorBoard would show, point for point (``tests/sweeps/test_events.py`` checks it against
``EventAccumulator`` on real runs, resumed and damaged ones included):

- files: the names holding ``tfevents`` directly in the run dir, in name order;
- points: each summary value's ``simple_value`` under its tag, at its event's step;
- restarts: once a ``file_version`` of 2 or more is read, a ``SessionLog.START`` at step ``s``
  drops every point at step ``s`` or later (a resumed run's ``purge_step``); until then, a
  summary at a step below the latest event's drops its own tags' points at that step or later
  (TensorBoard's older rule);
- damage: a record cut short or failing its CRC ends TensorBoard's reading of that file; here it
  is ``EventDataLoss``, since the curves TensorBoard shows would be cut short there.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from pathlib import Path

import numba
import numpy as np

# The record framing's status codes (``_frame``).
_OK, _SHORT_HEADER, _HEADER_CRC, _SHORT_DATA, _DATA_CRC = range(5)
_REASONS = {
    _SHORT_HEADER: "a record's header is cut short",
    _HEADER_CRC: "a record's length fails its CRC-32C check",
    _SHORT_DATA: "a record's data is cut short",
    _DATA_CRC: "a record's data fails its CRC-32C check",
}


def _crc32c_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint32)
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table[n] = crc
    return table


_TABLE = _crc32c_table()


@numba.njit(cache=True, nogil=True)
def _masked_crc(data, start, stop, table):  # pragma: no cover - compiled
    """TFRecord's masked CRC-32C of ``data[start:stop]``."""
    crc = np.uint32(0xFFFFFFFF)
    for i in range(start, stop):
        crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> np.uint32(8))
    crc = crc ^ np.uint32(0xFFFFFFFF)
    rotated = ((crc >> np.uint32(15)) | (crc << np.uint32(17))) & np.uint32(0xFFFFFFFF)
    return (rotated + np.uint32(0xA282EAD8)) & np.uint32(0xFFFFFFFF)


@numba.njit(cache=True, nogil=True)
def _read_u32(data, at):  # pragma: no cover - compiled
    return (
        np.uint32(data[at])
        | (np.uint32(data[at + 1]) << np.uint32(8))
        | (np.uint32(data[at + 2]) << np.uint32(16))
        | (np.uint32(data[at + 3]) << np.uint32(24))
    )


@numba.njit(cache=True, nogil=True)
def _frame(data, table):  # pragma: no cover - compiled
    """The records of a TFRecord file (``uint64 length, uint32 masked CRC of it, data, uint32
    masked CRC of it``, little-endian): their data's ``(start, stop)`` and the status at the end
    (``_OK``, or why the reading stopped there)."""
    n = data.shape[0]
    starts = np.empty(n // 16 + 1, dtype=np.int64)
    stops = np.empty(n // 16 + 1, dtype=np.int64)
    count = 0
    at = 0
    while at < n:
        if n - at < 12:
            return starts[:count], stops[:count], 1  # _SHORT_HEADER
        if _masked_crc(data, at, at + 8, table) != _read_u32(data, at + 8):
            return starts[:count], stops[:count], 2  # _HEADER_CRC
        length = np.int64(0)
        for k in range(8):
            length |= np.int64(data[at + k]) << np.int64(8 * k)
        begin = at + 12
        if length < 0 or n - begin < length + 4:
            return starts[:count], stops[:count], 3  # _SHORT_DATA
        end = begin + length
        if _masked_crc(data, begin, end, table) != _read_u32(data, end):
            return starts[:count], stops[:count], 4  # _DATA_CRC
        starts[count] = begin
        stops[count] = end
        count += 1
        at = end + 4
    return starts[:count], stops[:count], 0


@numba.njit(cache=True, nogil=True)
def _framed(payload, lengths, table):  # pragma: no cover - compiled
    """``lengths``' records of ``payload`` (concatenated) in TFRecord framing."""
    out = np.empty(payload.shape[0] + 16 * lengths.shape[0], dtype=np.uint8)
    src = 0
    dst = 0
    for i in range(lengths.shape[0]):
        length = lengths[i]
        for k in range(8):
            out[dst + k] = (length >> np.int64(8 * k)) & 0xFF
        crc = _masked_crc(out, dst, dst + 8, table)
        for k in range(4):
            out[dst + 8 + k] = (crc >> np.uint32(8 * k)) & np.uint32(0xFF)
        out[dst + 12 : dst + 12 + length] = payload[src : src + length]
        crc = _masked_crc(payload, src, src + length, table)
        for k in range(4):
            out[dst + 12 + length + k] = (crc >> np.uint32(8 * k)) & np.uint32(0xFF)
        src += length
        dst += 16 + length
    return out


@numba.njit(cache=True, nogil=True)
def _varint_size(value):  # pragma: no cover - compiled
    size = 1
    while value >= np.uint64(0x80):
        value >>= np.uint64(7)
        size += 1
    return size


@numba.njit(cache=True, nogil=True)
def _put_varint(out, at, value):  # pragma: no cover - compiled
    while value >= np.uint64(0x80):
        out[at] = np.uint8((value & np.uint64(0x7F)) | np.uint64(0x80))
        value >>= np.uint64(7)
        at += 1
    out[at] = np.uint8(value)
    return at + 1


@numba.njit(cache=True, nogil=True)
def _encode_scalars(names, name_stops, tag, step, value, wall):  # pragma: no cover - compiled
    """Each point's Event as protobuf serializes ``Event(wall_time, step, summary=Summary(value=
    [Value(tag, simple_value)]))``: fields in number order, a zero left out (proto3), the
    varints' bytes low first; ``value`` and ``wall`` as their little-endian bytes (4 and 8 a
    point). Returns the records' bytes end to end and each one's length."""
    n = tag.shape[0]
    lengths = np.empty(n, dtype=np.int64)
    value_lengths = np.empty(n, dtype=np.int64)
    summary_lengths = np.empty(n, dtype=np.int64)
    has_wall = False  # a wall time of +0.0 is left out (proto3)
    for k in range(8):
        has_wall |= wall[k] != 0
    for i in range(n):
        name_length = name_stops[tag[i]] - (name_stops[tag[i] - 1] if tag[i] > 0 else 0)
        value_length = 5  # an empty tag is left out (proto3)
        if name_length > 0:
            value_length += 1 + _varint_size(np.uint64(name_length)) + name_length
        summary_length = 1 + _varint_size(np.uint64(value_length)) + value_length
        length = 1 + _varint_size(np.uint64(summary_length)) + summary_length
        if has_wall:
            length += 9
        if step[i] != 0:
            length += 1 + _varint_size(np.uint64(step[i]))
        lengths[i], value_lengths[i], summary_lengths[i] = length, value_length, summary_length
    out = np.empty(lengths.sum(), dtype=np.uint8)
    at = 0
    for i in range(n):
        name_start = name_stops[tag[i] - 1] if tag[i] > 0 else 0
        name_length = name_stops[tag[i]] - name_start
        value_length, summary_length = value_lengths[i], summary_lengths[i]
        if has_wall:
            out[at] = 0x09  # wall_time: field 1, 64-bit
            out[at + 1 : at + 9] = wall
            at += 9
        if step[i] != 0:
            out[at] = 0x10  # step: field 2, varint
            at = _put_varint(out, at + 1, np.uint64(step[i]))
        out[at] = 0x2A  # summary: field 5, length-delimited
        at = _put_varint(out, at + 1, np.uint64(summary_length))
        out[at] = 0x0A  # Summary.value: field 1, length-delimited
        at = _put_varint(out, at + 1, np.uint64(value_length))
        if name_length > 0:
            out[at] = 0x0A  # Value.tag: field 1, length-delimited
            at = _put_varint(out, at + 1, np.uint64(name_length))
            out[at : at + name_length] = names[name_start : name_start + name_length]
            at += name_length
        out[at] = 0x15  # Value.simple_value: field 2, 32-bit
        out[at + 1 : at + 5] = value[i]
        at += 5
    return out, lengths


def encoded_scalars(
    names: list[str], tag: np.ndarray, step: np.ndarray, value: np.ndarray, wall_time: float
) -> bytes:
    """The event file ``write_scalars`` writes, framed: the ``brain.Event:2`` version event, then
    one event a point: ``names[tag[i]]``, ``step[i]`` and ``value[i]`` (as float32, as
    ``simple_value`` holds it), all at ``wall_time``."""
    from tensorboard.compat.proto import event_pb2

    encoded = [name.encode("utf-8") for name in names]
    version = event_pb2.Event(wall_time=wall_time, file_version="brain.Event:2")
    head = np.frombuffer(version.SerializeToString(), dtype=np.uint8)
    with np.errstate(over="ignore"):  # past float32's range: inf, as protobuf's cast gives
        value32 = np.ascontiguousarray(value, dtype="<f4")
    payload, lengths = _encode_scalars(
        np.frombuffer(b"".join(encoded), dtype=np.uint8),
        np.cumsum([len(name) for name in encoded], dtype=np.int64),
        np.ascontiguousarray(tag, dtype=np.int64),
        np.ascontiguousarray(step, dtype=np.int64),
        value32.view(np.uint8).reshape(-1, 4),
        np.frombuffer(np.float64(wall_time).astype("<f8").tobytes(), dtype=np.uint8),
    )
    return _framed(
        np.concatenate([head, payload]),
        np.concatenate([[head.shape[0]], lengths]).astype(np.int64),
        _TABLE,
    ).tobytes()


def write_scalars(run_dir: Path, points: Iterable[tuple[str, int, float]]) -> Path:
    """A new event file in ``run_dir`` holding ``(tag, step, value)`` points, one event each in
    the order given (a tag may have several points at one step), as ``add_scalar`` writes one (a
    float32 ``simple_value``) after the ``brain.Event:2`` version event a ``SummaryWriter``
    starts with; its name is a ``SummaryWriter``'s.

    Returns:
        The file written.
    """
    points = list(points)
    ids: dict[str, int] = {}
    tag = np.array([ids.setdefault(t, len(ids)) for t, _, _ in points], dtype=np.int64)
    step = np.array([s for _, s, _ in points], dtype=np.int64)
    value = np.array([v for _, _, v in points], dtype=np.float64)
    return write_scalar_arrays(run_dir, list(ids), tag, step, value)


def write_scalar_arrays(
    run_dir: Path, names: list[str], tag: np.ndarray, step: np.ndarray, value: np.ndarray
) -> Path:
    """``write_scalars`` of the points ``(names[tag[i]], step[i], value[i])``, encoded and framed
    in compiled passes (``encoded_scalars``): torch's writer thread took a minute for a 150-run
    sweep's 861,000 points, protobuf's messages one event at a time most of ten seconds for a
    300-run sweep's 1.75 million.

    Returns:
        The file written.
    """
    now = time.time()
    path = run_dir / f"events.out.tfevents.{int(now)}.{socket.gethostname()}.{os.getpid()}.0"
    path.write_bytes(encoded_scalars(names, tag, step, value, now))
    return path


# ---------------------------------------------------------------------------------------------
# The compiled decoder: each record's Event read from its protobuf wire format (field numbers of
# tensorboard/compat/proto/event.proto, summary.proto) by one numba pass, for the common records
# alone: a file version, a session log holding only its status, a summary of scalar values
# (``tag`` and ``simple_value``), or an event with no value (a graph). A record it does not take
# whole (a log message, a tensor or image value, a value's metadata, two ``what`` fields, a field
# of an unexpected wire type, a malformed varint) is marked ``_SLOW`` and parsed by protobuf, so
# the points are protobuf's in every case; only their bookkeeping is compiled.

# A record's kind: its Event's ``what`` oneof, by field number; ``_SLOW`` for protobuf.
_NONE, _FILE_VERSION, _SUMMARY, _SESSION_LOG, _OTHER, _SLOW = 0, 3, 5, 7, 4, -1
_SESSION_START = 1  # SessionLog.START
# A scalar value takes at least 7 bytes of its Event: its key and length in the Summary (2), and
# its simple_value's key and 4 bytes (5).
_MIN_VALUE_BYTES = 7


@numba.njit(cache=True, nogil=True)
def _varint(data, at, end):  # pragma: no cover - compiled
    """A varint at ``data[at:end]``: ``(value, next)``, ``next`` -1 where it is cut short or takes
    more than 10 bytes, or a 10th byte past the 64 bits (protobuf's parser decides those)."""
    value = np.uint64(0)
    for k in range(10):
        if at + k >= end:
            return value, -1
        byte = data[at + k]
        if k == 9 and byte > 1:
            return value, -1
        value |= np.uint64(byte & 0x7F) << np.uint64(7 * k)
        if byte < 0x80:
            return value, at + k + 1
    return value, -1


@numba.njit(cache=True, nogil=True)
def _key(data, at, end):  # pragma: no cover - compiled
    """A field's key at ``data[at:end]``: ``(field number, wire type, next)``, ``next`` -1 where
    protobuf's parser must decide (a key past 5 bytes or 32 bits, field number 0)."""
    key, after = _varint(data, at, end)
    if after < 0 or after - at > 5 or key > np.uint64(0xFFFFFFFF) or key >> np.uint64(3) == 0:
        return np.int64(0), np.int64(0), -1
    return np.int64(key >> np.uint64(3)), np.int64(key & np.uint64(7)), after


@numba.njit(cache=True, nogil=True)
def _span(data, at, end):  # pragma: no cover - compiled
    """A length-delimited field's bytes, its length at ``data[at:end]``: ``(start, stop)``,
    ``stop`` -1 where the length is cut short or runs past ``end``."""
    length, start = _varint(data, at, end)
    if start < 0 or length > np.uint64(end - start):
        return start, -1
    return start, start + np.int64(length)


@numba.njit(cache=True, nogil=True)
def _skip(data, at, end, wire):  # pragma: no cover - compiled
    """The end of a field's value of wire type ``wire`` starting at ``at``; -1 where protobuf's
    parser must decide (a group, a bad wire type, a length past ``end``)."""
    if wire == 0:
        return _varint(data, at, end)[1]
    if wire == 1:
        return at + 8 if at + 8 <= end else -1
    if wire == 5:
        return at + 4 if at + 4 <= end else -1
    if wire == 2:
        return _span(data, at, end)[1]
    return -1


@numba.njit(cache=True, nogil=True)
def _scalar_value(data, at, end):  # pragma: no cover - compiled
    """A ``Summary.Value`` at ``data[at:end]`` holding a scalar: ``(tag start, tag stop, offset
    of its float32)``, the offset -1 where protobuf's parser must decide (another oneof value, a
    node name or metadata, whose strings protobuf checks; no value; a bad field)."""
    tag_start, tag_stop, simple = at, at, np.int64(-1)  # no tag: the empty string
    while at < end:
        field, wire, at = _key(data, at, end)
        if at < 0:
            return 0, 0, -1
        if field == 1 and wire == 2:  # tag: the last one read counts
            tag_start, at = _span(data, at, end)
            tag_stop = at
        elif field == 2 and wire == 5:  # simple_value: the last one read counts
            simple = at
            at = at + 4 if at + 4 <= end else -1
        elif field > 9:  # unknown to this protobuf: skipped
            at = _skip(data, at, end, wire)
        else:
            return 0, 0, -1
        if at < 0:
            return 0, 0, -1
    return tag_start, tag_stop, simple


@numba.njit(cache=True, nogil=True)
def _session_status(data, at, end):  # pragma: no cover - compiled
    """A ``SessionLog``'s status at ``data[at:end]`` (0 where unset); -1 where it holds more
    than its status (strings protobuf checks) or protobuf's parser must decide."""
    status = np.int64(0)
    while at < end:
        field, wire, at = _key(data, at, end)
        if at < 0 or field != 1 or wire != 0:
            return -1
        value, at = _varint(data, at, end)
        if at < 0 or value > np.uint64(0x7FFFFFFF):  # an enum is an int32
            return -1
        status = np.int64(value)
    return status


@numba.njit(cache=True, nogil=True)
def _decode_records(data, starts, stops):  # pragma: no cover - compiled
    """Each record's ``(kind, step, field start, field stop)`` (the file version's string, or
    the session log's status in ``field start``) and its scalar values' ``(record, tag start,
    tag stop, float offset)``, in order."""
    n = starts.shape[0]
    kind = np.zeros(n, dtype=np.int8)
    step = np.zeros(n, dtype=np.int64)
    field_start = np.zeros(n, dtype=np.int64)
    field_stop = np.zeros(n, dtype=np.int64)
    capacity = 0
    for r in range(n):
        capacity += (stops[r] - starts[r]) // _MIN_VALUE_BYTES + 1
    v_record = np.empty(capacity, dtype=np.int64)
    v_tag_start = np.empty(capacity, dtype=np.int64)
    v_tag_stop = np.empty(capacity, dtype=np.int64)
    v_float = np.empty(capacity, dtype=np.int64)
    count = 0
    for r in range(n):
        at, end = starts[r], stops[r]
        whats = 0  # fields of the ``what`` oneof: more than one is protobuf's to merge
        first_value = count
        while at >= 0 and at < end:
            field, wire, at = _key(data, at, end)
            if at < 0:
                break
            if field == 1 and wire == 1:  # wall_time
                at = _skip(data, at, end, wire)
            elif field == 2 and wire == 0:  # step
                value, at = _varint(data, at, end)
                step[r] = np.int64(value)
            elif (field == 3 or field == 4 or field == 9) and wire == 2:
                # file_version, graph_def, meta_graph_def
                whats += 1
                kind[r] = _FILE_VERSION if field == 3 else _OTHER
                field_start[r], at = _span(data, at, end)
                field_stop[r] = at
            elif field == 5 and wire == 2:  # summary: its values
                whats += 1
                kind[r] = _SUMMARY
                s_at, at = _span(data, at, end)
                while at >= 0 and s_at < at:
                    s_field, s_wire, s_at = _key(data, s_at, at)
                    if s_at >= 0 and s_field != 1:  # not a value: unknown, skipped
                        s_at = _skip(data, s_at, at, s_wire)
                    elif s_at >= 0 and s_wire == 2:
                        v_at, s_at = _span(data, s_at, at)
                        if s_at >= 0:
                            tag_start, tag_stop, simple = _scalar_value(data, v_at, s_at)
                            if simple >= 0:
                                v_record[count] = r
                                v_tag_start[count] = tag_start
                                v_tag_stop[count] = tag_stop
                                v_float[count] = simple
                                count += 1
                            else:
                                s_at = -1
                    else:
                        s_at = -1
                    if s_at < 0:
                        at = -1
            elif field == 7 and wire == 2:  # session_log: its status alone
                whats += 1
                kind[r] = _SESSION_LOG
                l_at, at = _span(data, at, end)
                if at >= 0:
                    field_start[r] = _session_status(data, l_at, at)
                    if field_start[r] < 0:
                        at = -1
            elif field > 10:  # unknown to this protobuf: skipped
                at = _skip(data, at, end, wire)
            else:  # a log message, tagged run metadata, source metadata, or a bad wire type
                at = -1
        if at < 0 or whats > 1:  # protobuf's to parse: its values are not kept here
            kind[r] = _SLOW
            count = first_value
    return (
        kind, step, field_start, field_stop,
        v_record[:count], v_tag_start[:count], v_tag_stop[:count], v_float[:count],
    )  # fmt: skip


class Damaged(ValueError):
    """A record TensorBoard's reader stops at (``reason``) in event file ``path``."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


@numba.njit(cache=True, nogil=True)
def _tag_hashes(data, tag_start, tag_stop):  # pragma: no cover - compiled
    """Each value's tag bytes' FNV-1a hash (64 bits)."""
    out = np.empty(tag_start.shape[0], dtype=np.uint64)
    for v in range(tag_start.shape[0]):
        h = np.uint64(0xCBF29CE484222325)
        for i in range(tag_start[v], tag_stop[v]):
            h = (h ^ np.uint64(data[i])) * np.uint64(0x100000001B3)
        out[v] = h
    return out


@numba.njit(cache=True, nogil=True)
def _same_tags(data, tag_start, tag_stop, first, inverse):  # pragma: no cover - compiled
    """Whether each value's tag is its hash's first value's, byte for byte (no collision)."""
    for v in range(tag_start.shape[0]):
        u = first[inverse[v]]
        length = tag_stop[v] - tag_start[v]
        if tag_stop[u] - tag_start[u] != length:
            return False
        for k in range(length):
            if data[tag_start[v] + k] != data[tag_start[u] + k]:
                return False
    return True


@numba.njit(cache=True, nogil=True)
def _replay(
    kind, step, version, status, v_begin, v_end, v_tag, v_simple, v_value
):  # pragma: no cover - compiled
    """TensorBoard's ``_ProcessEvent`` over the records in order: the file version first, then
    ``_MaybePurgeOrphanedData``, then the values. The points kept: ``(tag, step, value)``."""
    n = v_tag.shape[0]
    p_tag = np.empty(n, dtype=np.int64)
    p_step = np.empty(n, dtype=np.int64)
    p_value = np.empty(n, dtype=np.float64)
    alive = np.ones(n, dtype=np.bool_)
    count = 0
    file_version = np.nan  # none read yet: TensorBoard's older rule
    latest_step = -1  # TensorBoard's ``most_recent_step``
    for r in range(kind.shape[0]):
        s = step[r]
        if kind[r] == _FILE_VERSION:
            file_version = version[r]
        if file_version >= 2:
            if kind[r] == _SESSION_LOG and status[r] == _SESSION_START:
                for p in range(count):
                    if p_step[p] >= s:
                        alive[p] = False
        elif s < latest_step and kind[r] == _SUMMARY:
            for v in range(v_begin[r], v_end[r]):
                if v_tag[v] >= 0:
                    for p in range(count):
                        if p_tag[p] == v_tag[v] and p_step[p] >= s:
                            alive[p] = False
        else:
            latest_step = s
        if kind[r] == _SUMMARY:
            for v in range(v_begin[r], v_end[r]):
                if v_tag[v] >= 0 and v_simple[v]:
                    p_tag[count] = v_tag[v]
                    p_step[count] = s
                    p_value[count] = v_value[v]
                    count += 1
    keep = alive[:count]
    return p_tag[:count][keep], p_step[:count][keep], p_value[:count][keep]


class _Records:
    """One file's records as ``_replay`` takes them, its values' tags as ids of the tags asked
    for (-1: another tag)."""

    def __init__(self, path: Path, raw: bytes, ids: dict[str, int]) -> None:
        data = np.frombuffer(raw, dtype=np.uint8)
        starts, stops, status = _frame(data, _TABLE)
        decoded = _decode_records(data, starts, stops)
        kind, self.step, field_start, field_stop = decoded[:4]
        v_record, tag_start, tag_stop, floats = decoded[4:]
        self.kind = kind.astype(np.int64)
        self.status = field_start.copy()
        self.version = np.full(kind.shape[0], np.nan)
        tag = np.full(v_record.shape[0], -1, dtype=np.int64)
        if v_record.shape[0]:
            hashes = _tag_hashes(data, tag_start, tag_stop)
            _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
            names = [bytes(data[tag_start[u] : tag_stop[u]]) for u in first]
            try:
                texts = [name.decode("utf-8") for name in names]
            except UnicodeDecodeError:  # protobuf refuses the record: its message, below
                texts = None
            if texts is None or not _same_tags(data, tag_start, tag_stop, first, inverse):
                self.kind[:] = _SLOW  # a bad tag or a hash collision: protobuf reads them all
                v_record, tag, floats = v_record[:0], tag[:0], floats[:0]
            else:
                tag = np.array([ids.get(text, -1) for text in texts], dtype=np.int64)[inverse]
        for r in np.flatnonzero(self.kind == _FILE_VERSION).tolist():
            try:
                text = bytes(data[field_start[r] : field_stop[r]]).decode("utf-8")
            except UnicodeDecodeError:
                self.kind[r] = _SLOW
            else:
                self.version[r] = _file_version(text)
        offsets = floats[:, None] + np.arange(4)
        value = data[offsets].copy().view("<f4").reshape(-1).astype(np.float64)
        record, simple = v_record, np.ones(v_record.shape[0], dtype=np.bool_)
        slow = np.flatnonzero(self.kind == _SLOW).tolist()
        if slow:
            parsed = self._parse_slow(path, raw, starts, stops, slow, ids)
            record, tag, simple, value = (
                np.concatenate([fast, more])
                for fast, more in zip((v_record, tag, simple, value), parsed, strict=True)
            )
        order = np.argsort(record, kind="stable")
        self.v_tag, self.v_simple, self.v_value = tag[order], simple[order], value[order]
        record = record[order]
        records = np.arange(kind.shape[0])
        self.v_begin = np.searchsorted(record, records, side="left")
        self.v_end = np.searchsorted(record, records, side="right")
        if status != _OK:
            raise Damaged(path, _REASONS[status])

    def _parse_slow(self, path, raw, starts, stops, slow, ids):
        """The records ``slow`` parsed by protobuf: their values' ``(record, tag, simple,
        value)`` columns (the fast records' own stay arrays, joined by the caller)."""
        from google.protobuf.message import DecodeError
        from tensorboard.compat.proto import event_pb2

        kinds = {"file_version": _FILE_VERSION, "summary": _SUMMARY, "session_log": _SESSION_LOG}
        record: list[int] = []
        tag: list[int] = []
        simple: list[bool] = []
        value: list[float] = []
        for r in slow:
            try:
                event = event_pb2.Event.FromString(raw[starts[r] : stops[r]])
            except DecodeError:
                raise Damaged(path, "a record is not an event") from None
            what = event.WhichOneof("what")
            self.kind[r] = kinds.get(what, _NONE)
            self.step[r] = event.step
            if what == "file_version":
                self.version[r] = _file_version(event.file_version)
            elif what == "session_log":
                self.status[r] = event.session_log.status
            elif what == "summary":
                for item in event.summary.value:
                    record.append(r)
                    tag.append(ids.get(item.tag, -1))
                    simple.append(item.WhichOneof("value") == "simple_value")
                    value.append(item.simple_value)
        return (
            np.array(record, dtype=np.int64),
            np.array(tag, dtype=np.int64),
            np.array(simple, dtype=np.bool_),
            np.array(value, dtype=np.float64),
        )


def scalar_curves(
    files: Iterable[tuple[Path, bytes]], tags: Iterable[str]
) -> dict[str, list[tuple[int, float]]]:
    """``(step, value)`` points of each of ``tags`` in event files, given as ``(path, contents)``
    in the order TensorBoard reads them (their names' order), in the order TensorBoard keeps
    them (not sorted), as its ``EventAccumulator`` would hold them (see the module docstring).

    Raises:
        Damaged: a record cut short, failing its CRC, or not an event.
    """
    ids = {tag: i for i, tag in enumerate(dict.fromkeys(tags))}
    parts = [_Records(Path(path), raw, ids) for path, raw in files]
    if not parts:
        return {tag: [] for tag in ids}
    shift = np.cumsum([0] + [part.v_tag.shape[0] for part in parts[:-1]])
    columns = [
        np.concatenate([getattr(part, name) for part in parts])
        for name in ("kind", "step", "version", "status")
    ]
    begin = np.concatenate([part.v_begin + k for part, k in zip(parts, shift, strict=True)])
    end = np.concatenate([part.v_end + k for part, k in zip(parts, shift, strict=True)])
    values = [
        np.concatenate([getattr(part, name) for part in parts])
        for name in ("v_tag", "v_simple", "v_value")
    ]
    p_tag, p_step, p_value = _replay(*columns, begin, end, *values)
    return {
        tag: list(zip(p_step[p_tag == i].tolist(), p_value[p_tag == i].tolist(), strict=True))
        for tag, i in ids.items()
    }


def _file_version(text: str) -> float:
    """``brain.Event:2`` as 2.0, as TensorBoard's ``ParseFileVersion`` parses it (-1 where it
    cannot)."""
    try:
        return float(text.split("brain.Event:")[-1])
    except ValueError:
        return -1.0
