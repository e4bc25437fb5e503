"""The agent's bounded buffer of telemetry and event frames, numbered per stream, kept until acknowledged.

Every frame the agent produces gets the next ``seq`` of its stream ("telemetry" or "events"). Seqs
only ever increase, also across agent restarts (the next free seq is reserved in blocks in
``state.json``), so the server can deduplicate by seq alone. They may skip numbers: frames that
were never sent are packed together before they go out, and the packed frame keeps the last seq.

**Frames are immutable once sent.** A frame that went out over any connection keeps its exact seq
and content forever, so the server's rule "a seq at or below my stored cursor is already stored"
is exact even when a frame from an old connection is committed after a new connection's Welcome
was computed. Only frames no server has ever seen are packed into bigger ones (up to
``MAX_SAMPLES_PER_FRAME`` items and under ``MAX_FRAME_BYTES``), which is what makes a long backlog
replay in a few hundred frames instead of one frame per second of outage.

Bounds: at most ``memory_frames`` frames per stream in memory; beyond that the oldest half is
spilled to disk (append-only segment files under ``<state_dir>/spool/<stream>/``, each record the
frame exactly as it goes on the wire, behind a header with its seq, item count, length and CRC-32).
The spool is bounded by ``max_disk_bytes`` per stream: past it the oldest segment is deleted and its
frames are counted as dropped, logged, and reported in Hello/Heartbeat (``dropped_samples``).
Without a state dir (the fleet simulator) the buffer is memory only and drops the oldest frames
past ``memory_frames``, counted the same way.

fsync policy: a spill writes its whole batch and fsyncs the segment once (and the directory when
it created the segment); ``state.json`` is replaced atomically (temp file, fsync, rename, fsync
directory) when a block of seqs is reserved and on ``close()``, which also spills every frame still
in memory. A crash (not a SIGTERM) loses the frames still in memory, at most ``memory_frames``; a
torn or corrupt record on disk is skipped with a log line, never a crash.

Not thread-safe: the agent uses it from its event loop only.
"""

import json
import logging
import os
import struct
import zlib
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Final

from agents.protocol import FRAME_SPLICERS, MAX_FRAME_BYTES, STREAMS, Stream
from agents.ratelimit import CountingLog

log = logging.getLogger(__name__)


DEFAULT_MEMORY_FRAMES: Final = 600  # ten minutes at 1 s, ~3.5 MB of 8-GPU samples
DEFAULT_MAX_DISK_BYTES: Final = 512 * 1024 * 1024  # ~26 h of 8-GPU samples at 1 s
DEFAULT_SEGMENT_BYTES: Final = 8 * 1024 * 1024
SEQ_BLOCK: Final = 1024  # seqs reserved per write of state.json

_RECORD_MAGIC: Final = 0x43505331  # "CPS1"
_RECORD_HEADER: Final = struct.Struct("<IQIII")  # magic, seq, items, payload length, crc32 of payload
_STATE_VERSION: Final = 1
_seq_of = attrgetter("seq")


@dataclass(frozen=True, slots=True)
class OutFrame:
    """A frame ready to send: its stream, seq, how many samples or events it carries, and its bytes."""

    stream: Stream
    seq: int
    items: int
    data: bytes


@dataclass(slots=True)
class _Frame:
    seq: int
    items: list[bytes]  # each one encoded NodeSample or GpuEvent
    size: int  # bytes of the items joined with commas


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


class _StreamBuffer:
    def __init__(
        self,
        stream: Stream,
        *,
        label: str,
        memory_frames: int,
        spool_dir: Path | None,
        max_disk_bytes: int,
        segment_bytes: int,
        next_seq: int,
        acked: int,
        dropped: int,
    ) -> None:
        self.stream = stream
        self.label = f"{label} {stream}"
        self.memory_frames = memory_frames
        self.spool_dir = spool_dir
        self.max_disk_bytes = max_disk_bytes
        self.segment_bytes = min(segment_bytes, max(max_disk_bytes // 4, 1))
        self.next_seq = next_seq
        self.acked = acked
        self.loss = CountingLog(log, self.label, total=dropped)
        self.memory: list[_Frame] = []
        self.segments: list[_Segment] = []
        self._appending: _Segment | None = None  # the segment spills append to; loaded ones are never appended to
        self.sent_high = 0  # frames at or below this seq were handed out once: never repacked
        self._splicer = FRAME_SPLICERS[stream]
        if spool_dir is not None:
            spool_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._load_segments()

    # Producing ----------------------------------------------------------------------------------

    def add(self, items: list[bytes], seq: int) -> None:
        self.memory.append(_Frame(seq, items, _joined_size(items)))
        if len(self.memory) > self.memory_frames:
            self._make_room()

    def fits_one_frame(self, items: list[bytes]) -> bool:
        return self._splicer.fits(len(items), _joined_size(items))

    def _make_room(self) -> None:
        if self.spool_dir is None:
            excess = len(self.memory) - self.memory_frames
            oldest = sum(len(f.items) for f in self.memory[:excess])
            self.loss.add(oldest, "memory buffer full (no spool): dropped the oldest items")
            del self.memory[:excess]
        else:
            self.spill(len(self.memory) - self.memory_frames // 2)

    # Sending ------------------------------------------------------------------------------------

    def next_frame(self, after: int) -> OutFrame | None:
        """The first frame with a seq above ``after``, oldest first: spooled frames, then memory."""
        for segment in self.segments:
            while segment.records and segment.records[-1].seq > after:
                index = bisect_right(segment.records, after, key=_seq_of)
                record = segment.records[index]
                data = self._read(segment, record)
                if data is None:
                    del segment.records[index]
                    self.loss.add(record.items, "corrupt spool record: dropped its items")
                    continue
                self.sent_high = max(self.sent_high, record.seq)
                return OutFrame(self.stream, record.seq, record.items, data)
        index = bisect_right(self.memory, after, key=_seq_of)
        if index == len(self.memory):
            return None
        if self.memory[index].seq > self.sent_high:
            self._pack_unsent(index)
        frame = self.memory[index]
        self.sent_high = max(self.sent_high, frame.seq)
        return OutFrame(self.stream, frame.seq, len(frame.items), self._encode(frame))

    def _pack_unsent(self, start: int) -> None:
        """Merge the never-sent frames from ``start`` on into one frame, within the frame limits."""
        packed = self.memory[start]
        end = start + 1
        while end < len(self.memory) and (merged := self._merged(packed, self.memory[end])) is not None:
            packed = merged
            end += 1
        if end > start + 1:
            self.memory[start:end] = [packed]

    def _merged(self, first: _Frame, second: _Frame) -> _Frame | None:
        """One frame holding both, numbered as the second, or None when that would pass a frame limit."""
        count, size = len(first.items) + len(second.items), first.size + 1 + second.size
        if not self._splicer.fits(count, size):
            return None
        return _Frame(second.seq, first.items + second.items, size)

    def _encode(self, frame: _Frame) -> bytes:
        return self._splicer.frame(frame.seq, frame.items)

    # Acknowledging ------------------------------------------------------------------------------

    def ack(self, seq: int) -> None:
        """The server stores everything up to ``seq``: forget it, in memory and on disk."""
        if seq <= self.acked:
            return
        self.acked = seq
        del self.memory[: bisect_right(self.memory, seq, key=_seq_of)]
        while self.segments and (not self.segments[0].records or self.segments[0].records[-1].seq <= seq):
            self._delete_segment(self.segments[0])
        if self.segments:
            records = self.segments[0].records
            del records[: bisect_right(records, seq, key=_seq_of)]

    def welcome(self, last_stored: int) -> None:
        """The server's cursor at connect: drop what it has, renumber never-sent frames it cannot have."""
        unsent = bisect_right(self.memory, self.sent_high, key=_seq_of)
        if unsent < len(self.memory) and self.memory[unsent].seq <= last_stored:
            # The server has seqs from an earlier incarnation of this node (state dir wiped, or the
            # simulator restarted): frames it never received must move above its cursor, not be lost.
            log.warning(
                "%s: the server already has seq %d, beyond this agent's %d (state was reset); renumbering",
                self.label,
                last_stored,
                self.memory[unsent].seq,
            )
            for offset, frame in enumerate(self.memory[unsent:]):
                frame.seq = last_stored + 1 + offset
            self.next_seq = max(self.next_seq, self.memory[-1].seq + 1)
        self.next_seq = max(self.next_seq, last_stored + 1)
        self.ack(last_stored)

    def discard(self, seq: int) -> int:
        """Drop the one frame numbered ``seq`` (the server refused it for good); how many items it held."""
        index = bisect_right(self.memory, seq, key=_seq_of) - 1
        if index >= 0 and self.memory[index].seq == seq:
            return len(self.memory.pop(index).items)
        for segment in self.segments:
            index = bisect_right(segment.records, seq, key=_seq_of) - 1
            if index >= 0 and segment.records[index].seq == seq:
                return segment.records.pop(index).items
        return 0

    def buffered_items(self) -> int:
        return sum(len(f.items) for f in self.memory) + sum(r.items for s in self.segments for r in s.records)

    # Disk ---------------------------------------------------------------------------------------

    def spill(self, count: int) -> None:
        """Move the oldest ``count`` memory frames to the spool, packing never-sent ones together."""
        if self.spool_dir is None or count <= 0:
            return
        frames, self.memory[:count] = self.memory[:count], []
        packed: list[_Frame] = []
        for frame in frames:
            if packed and frame.seq > self.sent_high and packed[-1].seq > self.sent_high:
                merged = self._merged(packed[-1], frame)
                if merged is not None:
                    packed[-1] = merged
                    continue
            packed.append(frame)
        self._append_records(packed)
        self._enforce_disk_cap()

    def _append_records(self, frames: list[_Frame]) -> None:
        assert self.spool_dir is not None
        segment = self._appending
        if segment is None or segment.size >= self.segment_bytes:
            segment = _Segment(self.spool_dir / f"{frames[0].seq:020d}.seg")
            self.segments.append(segment)
            self._appending = segment
            created = True
        else:
            created = False
        with open(segment.path, "ab") as spool:
            for frame in frames:
                data = self._encode(frame)
                header = _RECORD_HEADER.pack(_RECORD_MAGIC, frame.seq, len(frame.items), len(data), zlib.crc32(data))
                spool.write(header)
                spool.write(data)
                segment.records.append(_Record(frame.seq, len(frame.items), segment.size, len(data)))
                segment.size += _RECORD_HEADER.size + len(data)
            spool.flush()
            os.fsync(spool.fileno())
        if created:
            _fsync_dir(self.spool_dir)

    def _enforce_disk_cap(self) -> None:
        while len(self.segments) > 1 and sum(s.size for s in self.segments) > self.max_disk_bytes:
            oldest = self.segments[0]
            self.loss.add(sum(r.items for r in oldest.records), "spool full: deleted the oldest segment and its items")
            self._delete_segment(oldest)

    def _delete_segment(self, segment: _Segment) -> None:
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

    def _load_segments(self) -> None:
        assert self.spool_dir is not None
        last_seq = 0
        for path in sorted(self.spool_dir.glob("*.seg")):
            segment = _Segment(path)
            try:
                last_seq = _scan_segment(segment, last_seq, self.label)
            except OSError as exc:
                log.error("%s: cannot read spool segment %s (%s); skipping it", self.label, path, exc)
                continue
            unacked = [r for r in segment.records if r.seq > self.acked]
            if unacked:
                segment.records = unacked
                self.segments.append(segment)
            else:
                path.unlink(missing_ok=True)
        # Whether a spooled frame was sent before the restart is unknown: treat it as sent (never repack).
        self.sent_high = last_seq
        self.next_seq = max(self.next_seq, last_seq + 1)
        if self.segments:
            log.info(
                "%s: %d item(s) in %d spool segment(s) to replay",
                self.label,
                self.buffered_items(),
                len(self.segments),
            )


def _joined_size(items: list[bytes]) -> int:
    """The bytes of ``items`` joined with commas."""
    return sum(map(len, items)) + len(items) - 1


def _scan_segment(segment: _Segment, last_seq: int, label: str) -> int:
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


class TelemetryBuffer:
    """Both streams' buffers, the seq counters, and their state on disk (or in memory only)."""

    def __init__(
        self,
        state_dir: Path | str | None,
        *,
        memory_frames: int = DEFAULT_MEMORY_FRAMES,
        max_disk_bytes: int = DEFAULT_MAX_DISK_BYTES,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        label: str = "buffer",
    ) -> None:
        if memory_frames < 2:
            raise ValueError("memory_frames must be at least 2")
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self.label = label
        state = self._read_state()
        self._reserved: dict[Stream, int] = {}
        self.streams: dict[Stream, _StreamBuffer] = {}
        for stream in STREAMS:
            saved = state.get(stream, {})
            self.streams[stream] = _StreamBuffer(
                stream,
                label=label,
                memory_frames=memory_frames,
                spool_dir=self.state_dir / "spool" / stream if self.state_dir is not None else None,
                max_disk_bytes=max_disk_bytes,
                segment_bytes=segment_bytes,
                next_seq=max(1, int(saved.get("next_seq", 1))),
                acked=max(0, int(saved.get("acked", 0))),
                dropped=max(0, int(saved.get("dropped", 0))),
            )
            self._reserved[stream] = self.streams[stream].next_seq

    # The agent's side ---------------------------------------------------------------------------

    def add(self, stream: Stream, items: list[bytes]) -> int | None:
        """Buffer one frame of encoded samples or events; its seq, or None when it cannot fit a frame."""
        buffer = self.streams[stream]
        if not items:
            return None
        if not buffer.fits_one_frame(items):
            buffer.loss.add(len(items), f"dropped items too large for one {MAX_FRAME_BYTES}-byte frame")
            return None
        seq = buffer.next_seq
        buffer.next_seq += 1
        if buffer.next_seq > self._reserved[stream]:
            self._reserve(stream)
        buffer.add(items, seq)
        return seq

    def next_frame(self, stream: Stream, after: int) -> OutFrame | None:
        return self.streams[stream].next_frame(after)

    def pending(self, stream: Stream, after: int = 0) -> Iterator[OutFrame]:
        """Every buffered frame above ``after``, in order (what a replay sends)."""
        frame = self.next_frame(stream, after)
        while frame is not None:
            yield frame
            frame = self.next_frame(stream, frame.seq)

    def ack(self, stream: Stream, seq: int) -> None:
        self.streams[stream].ack(seq)

    def welcome(self, stream: Stream, last_stored: int) -> None:
        buffer = self.streams[stream]
        before = buffer.next_seq
        buffer.welcome(last_stored)
        if buffer.next_seq != before and buffer.next_seq > self._reserved[stream]:
            self._reserve(stream)

    def discard(self, stream: Stream, seq: int, why: str) -> int:
        buffer = self.streams[stream]
        dropped = buffer.discard(seq)
        buffer.loss.add(dropped, why)
        return dropped

    def last_seq(self, stream: Stream) -> int:
        return self.streams[stream].next_seq - 1

    def sent_high(self, stream: Stream) -> int:
        return self.streams[stream].sent_high

    @property
    def buffered_samples(self) -> int:
        return self.streams["telemetry"].buffered_items()

    @property
    def dropped_samples(self) -> int:
        return self.streams["telemetry"].loss.total

    def close(self) -> None:
        """Spill what is in memory and record the exact next seqs (SIGTERM path; nothing is lost)."""
        if self.state_dir is None:
            return
        for buffer in self.streams.values():
            buffer.spill(len(buffer.memory))
        self._write_state({stream: buffer.next_seq for stream, buffer in self.streams.items()})

    # State file ---------------------------------------------------------------------------------

    def _reserve(self, stream: Stream) -> None:
        self._reserved[stream] = self.streams[stream].next_seq + SEQ_BLOCK
        self._write_state(self._reserved)

    def _read_state(self) -> dict:
        if self.state_dir is None:
            return {}
        path = self.state_dir / "state.json"
        try:
            state = json.loads(path.read_text())
            if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
                raise ValueError(f"unexpected content {str(state)[:80]!r}")
            return state
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.error("%s: cannot read %s (%s); seqs continue from the spool", self.label, path, exc)
            return {}

    def _write_state(self, next_seqs: dict[Stream, int]) -> None:
        if self.state_dir is None:
            return
        state = {"version": _STATE_VERSION}
        for stream, buffer in self.streams.items():
            state[stream] = {"next_seq": next_seqs[stream], "acked": buffer.acked, "dropped": buffer.loss.total}
        write_private_file(self.state_dir / "state.json", json.dumps(state, indent=1).encode())


def spool_summary(state_dir: Path | str) -> dict[str, dict[str, int]]:
    """What ``cp-agent status`` shows: per stream, items and bytes spooled, next seq, acked, dropped.

    Reads headers only and changes nothing, so it is safe beside a running agent (whose memory
    buffer it cannot see)."""
    state_dir = Path(state_dir)
    try:
        state = json.loads((state_dir / "state.json").read_text())
    except (OSError, ValueError):
        state = {}
    summary = {}
    for stream in STREAMS:
        saved = state.get(stream, {}) if isinstance(state, dict) else {}
        acked = int(saved.get("acked", 0))
        items = spooled_bytes = 0
        for path in sorted((state_dir / "spool" / stream).glob("*.seg")):
            segment = _Segment(path)
            try:
                _scan_segment(segment, 0, f"status {stream}")
            except OSError:
                continue
            items += sum(r.items for r in segment.records if r.seq > acked)
            spooled_bytes += segment.size
        summary[stream] = {
            "spooled_items": items,
            "spooled_bytes": spooled_bytes,
            "next_seq": int(saved.get("next_seq", 1)),
            "acked_seq": acked,
            "dropped": int(saved.get("dropped", 0)),
        }
    return summary


def write_private_file(path: Path, content: bytes) -> None:
    """Replace ``path`` atomically with a file only its owner can read (0600), durably."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as private:
        os.fchmod(descriptor, 0o600)  # O_CREAT's mode is masked by the umask
        private.write(content)
        private.flush()
        os.fsync(descriptor)
    os.replace(temporary, path)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
