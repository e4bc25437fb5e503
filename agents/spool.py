"""What the agent's buffer keeps on disk under its state dir: each stream's spool, and ``state.json``.

The spool of a stream is append-only segment files under ``<state_dir>/spool/<stream>/``, each
named by the seq of its first record. A record is a frame exactly as it goes on the wire, behind a
header with its seq, item count, length and the CRC-32 of the frame. A spill appends its whole batch
and fsyncs the segment once (and the directory when it created the segment). The spool is bounded by
``max_bytes``: past it the oldest segment is deleted and its items are counted as lost. A torn or
corrupt record is skipped with a log line, never a crash: a bad header ends the scan of its file,
a bad CRC drops the record when it is read.

``state.json`` holds per stream the next free seq (reserved in blocks), the acknowledged seq and the
items ever dropped, replaced atomically (temp file, fsync, rename, fsync directory).
"""

import json
import logging
import os
import struct
import zlib
from bisect import bisect_right
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Final, NamedTuple

from agents.durable import fsync_dir, write_private_file
from agents.protocol import MAX_FRAME_BYTES, STREAMS, Stream
from agents.ratelimit import CountingLog

log = logging.getLogger(__name__)

_RECORD_MAGIC: Final = 0x43505331  # "CPS1"
_RECORD_HEADER: Final = struct.Struct("<IQIII")  # magic, seq, items, payload length, crc32 of payload
_STATE_VERSION: Final = 1
_seq_of = attrgetter("seq")


class SpooledFrame(NamedTuple):
    seq: int
    items: int  # samples or events in it
    data: bytes  # the frame as it goes on the wire


@dataclass(slots=True)
class _Record:
    seq: int
    items: int
    offset: int
    length: int  # payload bytes after the header


@dataclass(slots=True)
class _Segment:
    path: Path
    records: list[_Record] = field(default_factory=list)
    size: int = 0  # bytes of the file, acknowledged records included until the file goes


def spool_dir(state_dir: Path, stream: Stream) -> Path:
    return state_dir / "spool" / stream


class Spool:
    """One stream's segment files, oldest first, and the records in them not yet acknowledged."""

    def __init__(self, directory: Path, *, max_bytes: int, segment_bytes: int, loss: CountingLog, label: str) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.segment_bytes = min(segment_bytes, max(max_bytes // 4, 1))
        self.loss = loss  # the stream's count of lost items, which deleted and corrupt records add to
        self.label = label
        self.segments: list[_Segment] = []
        self._appending: _Segment | None = None  # the segment appends go to; loaded ones are never appended to
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    def load(self, acked: int) -> int:
        """Index the segments on disk, keeping the records above ``acked``; the last seq found (0 if none)."""
        last_seq = 0
        for path in sorted(self.directory.glob("*.seg")):
            segment = _Segment(path)
            try:
                last_seq = _scan(segment, last_seq, self.label)
            except OSError as exc:
                log.error("%s: cannot read spool segment %s (%s); skipping it", self.label, path, exc)
                continue
            unacked = [r for r in segment.records if r.seq > acked]
            if unacked:
                segment.records = unacked
                self.segments.append(segment)
            else:
                path.unlink(missing_ok=True)
        if self.segments:
            log.info("%s: %d item(s) in %d spool segment(s) to replay", self.label, self.items, len(self.segments))
        return last_seq

    @property
    def items(self) -> int:
        return sum(r.items for s in self.segments for r in s.records)

    def next_frame(self, after: int) -> SpooledFrame | None:
        """The first spooled frame with a seq above ``after``; a corrupt one is dropped, counted, on the way."""
        for segment in self.segments:
            while segment.records and segment.records[-1].seq > after:
                index = bisect_right(segment.records, after, key=_seq_of)
                record = segment.records[index]
                data = self._read(segment, record)
                if data is None:
                    del segment.records[index]
                    self.loss.add(record.items, "corrupt spool record: dropped its items")
                    continue
                return SpooledFrame(record.seq, record.items, data)
        return None

    def append(self, frames: list[SpooledFrame]) -> None:
        """Write ``frames`` (in seq order, above every spooled seq) durably, then keep within ``max_bytes``."""
        segment = self._appending
        created = segment is None or segment.size >= self.segment_bytes
        if segment is None or created:
            segment = self._appending = _Segment(self.directory / f"{frames[0].seq:020d}.seg")
            self.segments.append(segment)
        with open(segment.path, "ab") as spool:
            for frame in frames:
                spool.write(
                    _RECORD_HEADER.pack(_RECORD_MAGIC, frame.seq, frame.items, len(frame.data), zlib.crc32(frame.data))
                )
                spool.write(frame.data)
                segment.records.append(_Record(frame.seq, frame.items, segment.size, len(frame.data)))
                segment.size += _RECORD_HEADER.size + len(frame.data)
            spool.flush()
            os.fsync(spool.fileno())
        if created:
            fsync_dir(self.directory)
        while len(self.segments) > 1 and sum(s.size for s in self.segments) > self.max_bytes:
            oldest = self.segments[0]
            self.loss.add(sum(r.items for r in oldest.records), "spool full: deleted the oldest segment and its items")
            self._delete(oldest)

    def ack(self, seq: int) -> None:
        """Forget every record up to ``seq``, deleting the segments that held only those."""
        while self.segments and (not self.segments[0].records or self.segments[0].records[-1].seq <= seq):
            self._delete(self.segments[0])
        if self.segments:
            records = self.segments[0].records
            del records[: bisect_right(records, seq, key=_seq_of)]

    @property
    def last_seq(self) -> int:
        """The highest seq spooled (0 when none)."""
        return next((s.records[-1].seq for s in reversed(self.segments) if s.records), 0)

    def drop_above(self, seq: int, why: str) -> None:
        """Delete every segment holding a record above ``seq``, and so what it holds, counted as lost: what
        stays on disk is numbered at or below ``seq``, so what is appended next may follow it."""
        while self.segments and self.last_seq > seq:
            newest = self.segments[-1]
            self.loss.add(sum(r.items for r in newest.records), why)
            self._delete(newest)

    def discard(self, seq: int) -> int:
        """Forget the one record numbered ``seq``; how many items it held (0 when there is none)."""
        for segment in self.segments:
            index = bisect_right(segment.records, seq, key=_seq_of) - 1
            if index >= 0 and segment.records[index].seq == seq:
                return segment.records.pop(index).items
        return 0

    def _delete(self, segment: _Segment) -> None:
        self.segments.remove(segment)
        if segment is self._appending:
            self._appending = None
        segment.path.unlink(missing_ok=True)

    def _read(self, segment: _Segment, record: _Record) -> bytes | None:
        try:
            with open(segment.path, "rb") as spool:
                spool.seek(record.offset)
                raw = spool.read(_RECORD_HEADER.size + record.length)
        except OSError as exc:
            log.error("%s: cannot read spool segment %s: %s", self.label, segment.path, exc)
            return None
        header, data = raw[: _RECORD_HEADER.size], raw[_RECORD_HEADER.size :]
        if len(data) != record.length or _RECORD_HEADER.unpack(header)[4] != zlib.crc32(data):
            log.error("%s: spool record seq %d in %s is corrupt; skipping it", self.label, record.seq, segment.path)
            return None
        return data


def _scan(segment: _Segment, last_seq: int, label: str) -> int:
    """Index a segment's records by their headers; a bad one ends the scan of that file, logged.

    Returns the last seq found (``last_seq`` when none); records must be numbered above it."""
    with open(segment.path, "rb") as spool:
        size = os.fstat(spool.fileno()).st_size
        offset = 0
        while offset < size:
            header = spool.read(_RECORD_HEADER.size)
            problem = None
            if len(header) < _RECORD_HEADER.size:
                problem = "truncated header"
            else:
                magic, seq, items, length, _ = _RECORD_HEADER.unpack(header)
                if magic != _RECORD_MAGIC:
                    problem = "bad magic"
                elif seq <= last_seq:
                    problem = f"seq {seq} not above {last_seq}"
                elif length > MAX_FRAME_BYTES or offset + _RECORD_HEADER.size + length > size:
                    problem = "truncated record"
            if problem is not None:
                log.error(
                    "%s: corrupt spool segment %s at byte %d (%s); skipping the rest of it (%d bytes)",
                    label,
                    segment.path,
                    offset,
                    problem,
                    size - offset,
                )
                break
            segment.records.append(_Record(seq, items, offset, length))
            last_seq = seq
            offset += _RECORD_HEADER.size + length
            spool.seek(offset)
        segment.size = size
    return last_seq


# state.json -------------------------------------------------------------------------------------


class SavedStream(NamedTuple):
    """What ``state.json`` keeps of one stream."""

    next_seq: int = 1
    acked: int = 0
    dropped: int = 0


def read_state(state_dir: Path, label: str) -> dict[Stream, SavedStream]:
    """What ``state.json`` says of each stream; the defaults (logged, unless there is no file yet) when it
    cannot be read, so that seqs continue from the spool."""
    path = state_dir / "state.json"
    try:
        state = json.loads(path.read_text())
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ValueError(f"unexpected content {str(state)[:80]!r}")
    except FileNotFoundError:
        state = {}
    except (OSError, ValueError) as exc:
        log.error("%s: cannot read %s (%s); seqs continue from the spool", label, path, exc)
        state = {}
    saved = {}
    for stream in STREAMS:
        values = state.get(stream, {})
        saved[stream] = SavedStream(
            next_seq=max(1, int(values.get("next_seq", 1))),
            acked=max(0, int(values.get("acked", 0))),
            dropped=max(0, int(values.get("dropped", 0))),
        )
    return saved


def write_state(state_dir: Path, saved: dict[Stream, SavedStream]) -> None:
    state: dict[str, object] = {"version": _STATE_VERSION}
    for stream, values in saved.items():
        state[stream] = {"next_seq": values.next_seq, "acked": values.acked, "dropped": values.dropped}
    write_private_file(state_dir / "state.json", json.dumps(state, indent=1).encode())


def spool_summary(state_dir: Path | str) -> dict[str, dict[str, int]]:
    """What ``cp-agent status`` shows: per stream, items and bytes spooled, next seq, acked, dropped.

    Reads headers only and changes nothing, so it is safe beside a running agent (whose memory
    buffer it cannot see)."""
    state_dir = Path(state_dir)
    saved = read_state(state_dir, "status")
    summary = {}
    for stream in STREAMS:
        acked = saved[stream].acked
        items = spooled_bytes = 0
        for path in sorted(spool_dir(state_dir, stream).glob("*.seg")):
            segment = _Segment(path)
            try:
                _scan(segment, 0, f"status {stream}")
            except OSError:
                continue
            items += sum(r.items for r in segment.records if r.seq > acked)
            spooled_bytes += segment.size
        summary[stream] = {
            "spooled_items": items,
            "spooled_bytes": spooled_bytes,
            "next_seq": saved[stream].next_seq,
            "acked_seq": acked,
            "dropped": saved[stream].dropped,
        }
    return summary
