"""A run's scalar curves read from its TensorBoard event files, as TensorBoard's
``EventAccumulator`` reads them, at the speed of a compiled loop; and an archived run's points
written back as an event file (``write_scalars``).

``per-dqn report`` spent most of its time in TensorBoard's reader: without TensorFlow it frames
the records and checks their CRC-32C in pure Python, four reads and two checksums a record. Here
a file is read whole, its records framed and checked by one compiled pass (``_frame``), and each
event parsed by protobuf's C parser; only the tags asked for are kept. On the MinAtar study's 150
runs, 15.1 s against 2.0 s (``benchmarks/events.py``, docs/benchmarks.md).

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


def write_scalars(run_dir: Path, points: Iterable[tuple[str, int, float]]) -> Path:
    """A new event file in ``run_dir`` holding ``(tag, step, value)`` points, one event each in
    the order given (a tag may have several points at one step), as ``add_scalar`` writes one (a
    float32 ``simple_value``) after the ``brain.Event:2`` version event a ``SummaryWriter``
    starts with; its name is a ``SummaryWriter``'s. Framed and checksummed in one compiled pass:
    the writer's thread took a minute for a 150-run sweep's 861,000 points.

    Returns:
        The file written.
    """
    from tensorboard.compat.proto import event_pb2, summary_pb2

    now = time.time()
    records = [event_pb2.Event(wall_time=now, file_version="brain.Event:2").SerializeToString()]
    for tag, step, value in points:
        summary = summary_pb2.Summary(
            value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]
        )
        records.append(
            event_pb2.Event(wall_time=now, step=step, summary=summary).SerializeToString()
        )
    lengths = np.fromiter((len(r) for r in records), dtype=np.int64, count=len(records))
    payload = np.frombuffer(b"".join(records), dtype=np.uint8)
    path = run_dir / f"events.out.tfevents.{int(now)}.{socket.gethostname()}.{os.getpid()}.0"
    path.write_bytes(_framed(payload, lengths, _TABLE).tobytes())
    return path


class Damaged(ValueError):
    """A record TensorBoard's reader stops at (``reason``) in event file ``path``."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def scalar_curves(
    files: Iterable[tuple[Path, bytes]], tags: Iterable[str]
) -> dict[str, list[tuple[int, float]]]:
    """``(step, value)`` points of each of ``tags`` in event files, given as ``(path, contents)``
    in the order TensorBoard reads them (their names' order), in the order TensorBoard keeps
    them (not sorted), as its ``EventAccumulator`` would hold them (see the module docstring).

    Raises:
        Damaged: a record cut short, failing its CRC, or not an event.
    """
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto import event_pb2

    wanted = set(tags)
    points: dict[str, list[tuple[int, float]]] = {tag: [] for tag in wanted}
    file_version: float | None = None
    latest_step = -1  # TensorBoard's ``most_recent_step``
    start = event_pb2.SessionLog.START
    for path, raw in files:
        starts, stops, status = _frame(np.frombuffer(raw, dtype=np.uint8), _TABLE)
        for begin, end in zip(starts.tolist(), stops.tolist(), strict=True):
            try:
                event = event_pb2.Event.FromString(raw[begin:end])
            except DecodeError:
                raise Damaged(Path(path), "a record is not an event") from None
            what = event.WhichOneof("what")
            step = event.step
            # TensorBoard's ``_ProcessEvent``: the file version first, then
            # ``_MaybePurgeOrphanedData``, then the values.
            if what == "file_version":
                file_version = _file_version(event.file_version)
            if file_version and file_version >= 2:
                if what == "session_log" and event.session_log.status == start:
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
                    if value.tag in wanted and value.WhichOneof("value") == "simple_value":
                        points[value.tag].append((step, value.simple_value))
        if status != _OK:
            raise Damaged(Path(path), _REASONS[status])
    return points


def _file_version(text: str) -> float:
    """``brain.Event:2`` as 2.0, as TensorBoard's ``ParseFileVersion`` parses it (-1 where it
    cannot)."""
    try:
        return float(text.split("brain.Event:")[-1])
    except ValueError:
        return -1.0
