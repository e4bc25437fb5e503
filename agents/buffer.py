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
spilled to the stream's spool on disk (``agents.spool``: segment files, each record the frame exactly
as it goes on the wire), bounded by ``max_disk_bytes`` per stream: past it the oldest segment is
deleted and its frames are counted as dropped, logged, and reported in Hello/Heartbeat
(``dropped_samples``). Without a state dir (the fleet simulator) the buffer is memory only and drops
the oldest frames past ``memory_frames``, counted the same way.

Durability: a spill is fsynced once per batch; ``state.json`` is replaced atomically when a block of
seqs is reserved and on ``close()``, which also spills every frame still in memory. A crash (not a
SIGTERM) loses the frames still in memory, at most ``memory_frames``; a torn or corrupt record on
disk is skipped with a log line, never a crash.

Not thread-safe: the agent uses it from its event loop only.
"""

import logging
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Final

from agents.protocol import FRAME_SPLICERS, MAX_FRAME_BYTES, MAX_SEQ_AHEAD, STREAMS, Stream
from agents.ratelimit import CountingLog
from agents.spool import SavedStream, Spool, SpooledFrame, read_state, spool_dir, write_state

log = logging.getLogger(__name__)

DEFAULT_MEMORY_FRAMES: Final = 600  # ten minutes at 1 s, ~3.5 MB of 8-GPU samples
DEFAULT_MAX_DISK_BYTES: Final = 512 * 1024 * 1024  # ~26 h of 8-GPU samples at 1 s
DEFAULT_SEGMENT_BYTES: Final = 8 * 1024 * 1024
SEQ_BLOCK: Final = 1024  # seqs reserved per write of state.json

_seq_of = attrgetter("seq")


@dataclass(frozen=True, slots=True)
class BufferLimits:
    """How much each stream may hold: frames in memory, and bytes on disk in segments of what size."""

    memory_frames: int = DEFAULT_MEMORY_FRAMES
    max_disk_bytes: int = DEFAULT_MAX_DISK_BYTES
    segment_bytes: int = DEFAULT_SEGMENT_BYTES


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


class _StreamBuffer:
    def __init__(
        self, stream: Stream, saved: SavedStream, limits: BufferLimits, spool_directory: Path | None, label: str
    ) -> None:
        self.stream = stream
        self.label = f"{label} {stream}"
        self.memory_frames = limits.memory_frames
        self.next_seq = saved.next_seq
        self.acked = saved.acked
        self.loss = CountingLog(log, self.label, total=saved.dropped)
        self.memory: list[_Frame] = []
        self.sent_high = 0  # frames at or below this seq were handed out once: never repacked
        self._splicer = FRAME_SPLICERS[stream]
        self.spool: Spool | None = None
        if spool_directory is not None:
            self.spool = Spool(
                spool_directory,
                max_bytes=limits.max_disk_bytes,
                segment_bytes=limits.segment_bytes,
                loss=self.loss,
                label=self.label,
            )
            # Whether a spooled frame was sent before the restart is unknown: treat it as sent (never repack).
            self.sent_high = self.spool.load(self.acked)
            self.next_seq = max(self.next_seq, self.sent_high + 1)

    # Producing ----------------------------------------------------------------------------------

    def add(self, items: list[bytes], seq: int) -> None:
        self.memory.append(_Frame(seq, items, _joined_size(items)))
        if len(self.memory) > self.memory_frames:
            self._make_room()

    def fits_one_frame(self, items: list[bytes]) -> bool:
        return self._splicer.fits(len(items), _joined_size(items))

    def _make_room(self) -> None:
        if self.spool is None:
            excess = len(self.memory) - self.memory_frames
            oldest = sum(len(f.items) for f in self.memory[:excess])
            self.loss.add(oldest, "memory buffer full (no spool): dropped the oldest items")
            del self.memory[:excess]
        else:
            self.spill(len(self.memory) - self.memory_frames // 2)

    # Sending ------------------------------------------------------------------------------------

    def next_frame(self, after: int) -> OutFrame | None:
        """The first frame with a seq above ``after``, oldest first: spooled frames, then memory."""
        if self.spool is not None and (spooled := self.spool.next_frame(after)) is not None:
            self.sent_high = max(self.sent_high, spooled.seq)
            return OutFrame(self.stream, spooled.seq, spooled.items, spooled.data)
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
        if self.spool is not None:
            self.spool.ack(seq)

    def welcome(self, last_stored: int) -> None:
        """The server's cursor at connect: drop what it has, and renumber never-sent frames it cannot have
        (at or below its cursor) or would refuse (more than MAX_SEQ_AHEAD above it)."""
        limit = last_stored + MAX_SEQ_AHEAD
        if self.next_seq - 1 > limit:
            self._drop_beyond(limit)
        unsent = bisect_right(self.memory, self.sent_high, key=_seq_of)
        if unsent < len(self.memory) and not last_stored < self.memory[unsent].seq <= self.memory[-1].seq <= limit:
            # The server has seqs from an earlier incarnation of this node (state dir wiped, the simulator
            # restarted), or its seqs were reset (a new credential, an admin's repair) far below ours:
            # frames it never received must follow its cursor, not be lost.
            log.warning(
                "%s: the server stores seq %d, and this agent's unsent frames start at %d; renumbering them",
                self.label,
                last_stored,
                self.memory[unsent].seq,
            )
            base = max(last_stored, self.sent_high, self.spool.last_seq if self.spool is not None else 0)
            for offset, frame in enumerate(self.memory[unsent:]):
                frame.seq = base + 1 + offset
            self.next_seq = self.memory[-1].seq + 1
        elif self.next_seq - 1 > limit:
            self.next_seq = max(last_stored, self.sent_high, self.spool.last_seq if self.spool is not None else 0) + 1
        self.next_seq = max(self.next_seq, last_stored + 1)
        self.ack(last_stored)

    def _drop_beyond(self, limit: int) -> None:
        """Drop what the server would refuse and cannot be renumbered (frames already sent, frames on disk)
        numbered above ``limit``: after an outage of more seqs than the protocol lets a frame lead by, or a
        reset of the server's seqs. Counted as lost."""
        if self.spool is not None:
            self.spool.drop_above(limit, "numbered beyond what the server accepts: dropped")
        if self.sent_high > limit:
            sent = [frame for frame in self.memory if frame.seq <= self.sent_high]
            beyond = [frame for frame in sent if frame.seq > limit]
            self.loss.add(sum(len(f.items) for f in beyond), "sent, numbered beyond what the server accepts: dropped")
            self.memory = [frame for frame in self.memory if frame not in beyond]
            kept = [frame.seq for frame in sent if frame.seq <= limit]
            self.sent_high = max([*kept, self.spool.last_seq if self.spool is not None else 0, 0])

    def discard(self, seq: int) -> int:
        """Drop the one frame numbered ``seq`` (the server refused it for good); how many items it held."""
        index = bisect_right(self.memory, seq, key=_seq_of) - 1
        if index >= 0 and self.memory[index].seq == seq:
            return len(self.memory.pop(index).items)
        return self.spool.discard(seq) if self.spool is not None else 0

    def buffered_items(self) -> int:
        spooled = self.spool.items if self.spool is not None else 0
        return sum(len(f.items) for f in self.memory) + spooled

    def spill(self, count: int) -> None:
        """Move the oldest ``count`` memory frames to the spool, packing never-sent ones together."""
        if self.spool is None or count <= 0:
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
        self.spool.append([SpooledFrame(frame.seq, len(frame.items), self._encode(frame)) for frame in packed])


def _joined_size(items: list[bytes]) -> int:
    """The bytes of ``items`` joined with commas."""
    return sum(map(len, items)) + len(items) - 1


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
        limits = BufferLimits(memory_frames, max_disk_bytes, segment_bytes)
        memory_only = self.state_dir is None
        saved = dict.fromkeys(STREAMS, SavedStream()) if memory_only else read_state(self.state_dir, label)
        self.streams: dict[Stream, _StreamBuffer] = {
            stream: _StreamBuffer(
                stream,
                saved[stream],
                limits,
                spool_dir(self.state_dir, stream) if self.state_dir is not None else None,
                label,
            )
            for stream in STREAMS
        }
        self._reserved: dict[Stream, int] = {stream: buffer.next_seq for stream, buffer in self.streams.items()}

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
        if buffer.next_seq != before and (buffer.next_seq > self._reserved[stream] or buffer.next_seq < before):
            self._reserve(stream)  # lowered too: a restart must not number from the old reservation again

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

    def _write_state(self, next_seqs: dict[Stream, int]) -> None:
        if self.state_dir is None:
            return
        saved = {
            stream: SavedStream(next_seqs[stream], buffer.acked, buffer.loss.total)
            for stream, buffer in self.streams.items()
        }
        write_state(self.state_dir, saved)
