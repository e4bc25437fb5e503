"""The agent's buffer: seqs, bounds in memory and on disk, acks, restarts, corrupt spools, packing."""

import json
import logging
import os
import stat

import pytest

from agents.buffer import TelemetryBuffer
from agents.durable import write_private_file
from agents.protocol import (
    MAX_FRAME_BYTES,
    MAX_SAMPLES_PER_FRAME,
    MAX_SEQ_AHEAD,
    Events,
    GpuEvent,
    Telemetry,
    decode_agent_message,
    encode,
)
from agents.spool import SavedStream, spool_summary, write_state
from tests.agents.doubles import FakeCollector

T0 = 1_700_000_000.0


def samples(count: int, start: int = 0) -> list[bytes]:
    collector = FakeCollector(gpus=2, ports=1)
    return [encode(collector.sample(T0 + start + i)) for i in range(count)]


def fill(buffer: TelemetryBuffer, count: int, start: int = 0) -> list[int]:
    return [buffer.add("telemetry", [item]) for item in samples(count, start)]


def send_live(buffer: TelemetryBuffer, count: int) -> None:
    """Sample and send one frame at a time, as a connected agent does."""
    for item in samples(count):
        seq = buffer.add("telemetry", [item])
        assert buffer.next_frame("telemetry", seq - 1).seq == seq


def replayed(buffer: TelemetryBuffer, after: int = 0) -> list[Telemetry]:
    return [decode_agent_message(frame.data) for frame in buffer.pending("telemetry", after)]


def timestamps(frames: list[Telemetry]) -> list[float]:
    return [sample.ts for frame in frames for sample in frame.samples]


def test_it_numbers_frames_per_stream_from_one():
    buffer = TelemetryBuffer(None)

    assert fill(buffer, 3) == [1, 2, 3]
    event = encode(GpuEvent(ts=T0, kind="xid", gpu_index=0, xid=79))
    assert buffer.add("events", [event]) == 1
    assert buffer.buffered_samples == 3


def test_it_hands_out_each_frame_as_it_comes_when_the_sender_keeps_up():
    buffer = TelemetryBuffer(None)
    fill(buffer, 1)
    first = buffer.next_frame("telemetry", 0)
    fill(buffer, 1, start=1)
    second = buffer.next_frame("telemetry", first.seq)

    assert (first.seq, first.items, second.seq, second.items) == (1, 1, 2, 1)
    assert buffer.next_frame("telemetry", second.seq) is None


def test_it_packs_a_backlog_of_never_sent_frames_into_few_frames_within_the_limits():
    buffer = TelemetryBuffer(None, memory_frames=2000)
    fill(buffer, MAX_SAMPLES_PER_FRAME + 50)

    frames = replayed(buffer)

    assert [len(f.samples) for f in frames] == [MAX_SAMPLES_PER_FRAME, 50]
    assert [f.seq for f in frames] == [MAX_SAMPLES_PER_FRAME, MAX_SAMPLES_PER_FRAME + 50]  # the last seq packed
    assert timestamps(frames) == [T0 + i for i in range(MAX_SAMPLES_PER_FRAME + 50)]


def test_a_packed_frame_stays_under_the_frame_byte_limit():
    buffer = TelemetryBuffer(None, memory_frames=2000)
    big = [encode(FakeCollector(gpus=72, ports=8).sample(T0 + i)) for i in range(100)]
    for item in big:
        buffer.add("telemetry", [item])

    frames = list(buffer.pending("telemetry"))

    assert len(frames) > 1
    assert all(len(frame.data) <= MAX_FRAME_BYTES for frame in frames)
    assert sum(frame.items for frame in frames) == 100


def test_a_frame_once_sent_is_never_repacked_so_the_servers_seq_dedup_stays_exact():
    buffer = TelemetryBuffer(None)
    fill(buffer, 3)
    sent = [buffer.next_frame("telemetry", 0)]  # seq 3, holding samples 1-3
    fill(buffer, 2, start=3)

    again = list(buffer.pending("telemetry", 0))  # a reconnect whose Welcome says nothing is stored

    assert [(f.seq, f.items) for f in again] == [(3, 3), (5, 2)]
    assert again[0].data == sent[0].data


def test_ack_forgets_everything_up_to_the_seq():
    buffer = TelemetryBuffer(None)
    fill(buffer, 5)
    buffer.next_frame("telemetry", 0)

    buffer.ack("telemetry", 5)

    assert buffer.buffered_samples == 0
    assert buffer.next_frame("telemetry", 0) is None


def test_without_a_state_dir_it_drops_the_oldest_frames_past_its_bound_and_counts_them(caplog):
    buffer = TelemetryBuffer(None, memory_frames=4, label="sim-0001")

    with caplog.at_level(logging.WARNING):
        fill(buffer, 10)

    assert buffer.buffered_samples == 4
    assert buffer.dropped_samples == 6
    assert timestamps(replayed(buffer)) == [T0 + i for i in range(6, 10)]
    assert "sim-0001 telemetry" in caplog.text
    assert "dropped" in caplog.text


def test_it_spills_the_oldest_frames_to_disk_when_memory_fills_and_replays_them_first(tmp_path):
    buffer = TelemetryBuffer(tmp_path, memory_frames=10)

    fill(buffer, 25)

    assert list((tmp_path / "spool" / "telemetry").glob("*.seg"))
    assert buffer.buffered_samples == 25
    assert buffer.dropped_samples == 0
    assert timestamps(replayed(buffer)) == [T0 + i for i in range(25)]


def test_ack_deletes_spooled_segments_it_covers(tmp_path):
    buffer = TelemetryBuffer(tmp_path, memory_frames=4, segment_bytes=1)  # a segment per spill
    fill(buffer, 20)
    frames = list(buffer.pending("telemetry"))

    buffer.ack("telemetry", frames[-2].seq)

    assert buffer.buffered_samples == frames[-1].items
    remaining = list((tmp_path / "spool" / "telemetry").glob("*.seg"))
    assert len(remaining) <= 1


def test_the_spool_is_bounded_and_its_oldest_segment_is_dropped_counted_and_logged(tmp_path, caplog):
    buffer = TelemetryBuffer(tmp_path, memory_frames=4, max_disk_bytes=30_000, segment_bytes=1)

    with caplog.at_level(logging.WARNING):
        fill(buffer, 200)

    spooled = sum(p.stat().st_size for p in (tmp_path / "spool" / "telemetry").glob("*.seg"))
    assert spooled <= 30_000 + 10_000  # the cap, plus the one segment it never deletes
    assert buffer.dropped_samples > 0
    assert buffer.buffered_samples + buffer.dropped_samples == 200
    assert timestamps(replayed(buffer))[-1] == T0 + 199  # the newest are kept
    assert "spool full" in caplog.text


def test_a_restart_keeps_the_spooled_frames_and_goes_on_numbering_above_them(tmp_path):
    buffer = TelemetryBuffer(tmp_path, memory_frames=10)
    send_live(buffer, 3)
    fill(buffer, 12, start=3)  # disconnected: spilled
    buffer.ack("telemetry", 3)
    buffer.close()

    restarted = TelemetryBuffer(tmp_path, memory_frames=10)

    assert restarted.buffered_samples == 12
    assert timestamps(replayed(restarted)) == [T0 + i for i in range(3, 15)]
    assert fill(restarted, 1, start=15) == [16]
    assert stat.S_IMODE(os.stat(tmp_path / "state.json").st_mode) == 0o600


def test_seqs_keep_increasing_after_a_crash_that_skipped_close(tmp_path):
    buffer = TelemetryBuffer(tmp_path)
    last = fill(buffer, 5)[-1]  # no close(): the process was killed

    restarted = TelemetryBuffer(tmp_path)

    assert fill(restarted, 1)[0] > last


def test_welcome_drops_the_frames_the_server_already_stores(tmp_path):
    buffer = TelemetryBuffer(tmp_path, memory_frames=4)
    fill(buffer, 10)
    buffer.close()
    restarted = TelemetryBuffer(tmp_path, memory_frames=4)

    restarted.welcome("telemetry", 6)

    frames = replayed(restarted)
    assert min(f.seq for f in frames) > 6
    assert timestamps(frames) == [T0 + i for i in range(6, 10)]


def test_welcome_renumbers_never_sent_frames_when_the_server_is_ahead_of_a_reset_agent(caplog):
    buffer = TelemetryBuffer(None)  # e.g. the simulator restarted: it numbers from 1 again
    fill(buffer, 3)

    with caplog.at_level(logging.WARNING):
        buffer.welcome("telemetry", 500)

    frames = replayed(buffer, 500)
    assert [f.seq for f in frames] == [503]
    assert timestamps(frames) == [T0, T0 + 1, T0 + 2]
    assert fill(buffer, 1, start=3) == [504]
    assert "renumbering" in caplog.text


FAR = 5 * MAX_SEQ_AHEAD  # an agent that numbered this far: months of 1-second frames


def numbered_from(state_dir, next_seq: int, **limits: int) -> TelemetryBuffer:
    """A buffer whose state says its next telemetry seq is ``next_seq``, as after a long life."""
    write_state(state_dir, {"telemetry": SavedStream(next_seq=next_seq), "events": SavedStream()})
    return TelemetryBuffer(state_dir, **limits)


def test_welcome_renumbers_never_sent_frames_that_the_server_would_refuse_as_too_far_ahead(tmp_path):
    buffer = numbered_from(tmp_path, FAR)  # the server's seqs were reset: a new credential, an admin's repair
    assert fill(buffer, 3) == [FAR, FAR + 1, FAR + 2]

    buffer.welcome("telemetry", 0)

    frames = replayed(buffer)
    assert [f.seq for f in frames] == [3]  # renumbered 1, 2, 3, and packed as never sent
    assert timestamps(frames) == [T0, T0 + 1, T0 + 2]
    assert fill(buffer, 1, start=3) == [4]
    assert TelemetryBuffer(tmp_path).last_seq("telemetry") < MAX_SEQ_AHEAD  # a restart numbers from there too


def test_welcome_drops_spooled_frames_the_server_would_refuse_and_counts_them(tmp_path):
    buffer = numbered_from(tmp_path, FAR, memory_frames=4)
    fill(buffer, 10)
    buffer.close()  # on disk now, and taken as sent after the restart: they cannot be renumbered
    restarted = TelemetryBuffer(tmp_path, memory_frames=4)

    restarted.welcome("telemetry", 7)

    assert replayed(restarted) == []
    assert restarted.dropped_samples == 10
    assert fill(restarted, 1) == [8]


def test_welcome_keeps_frames_within_reach_of_the_servers_seqs(tmp_path):
    buffer = numbered_from(tmp_path, MAX_SEQ_AHEAD)
    fill(buffer, 3)

    buffer.welcome("telemetry", 5)

    assert [f.seq for f in replayed(buffer, 5)] == [MAX_SEQ_AHEAD + 2]
    assert buffer.dropped_samples == 0


def test_discard_drops_only_the_refused_frame_and_counts_it():
    buffer = TelemetryBuffer(None)
    fill(buffer, 3)
    frames = [buffer.next_frame("telemetry", 0)]
    fill(buffer, 1, start=3)

    assert buffer.discard("telemetry", frames[0].seq, "refused") == 3

    assert buffer.dropped_samples == 3
    assert timestamps(replayed(buffer)) == [T0 + 3]


def test_an_item_too_large_for_any_frame_is_refused_and_counted():
    buffer = TelemetryBuffer(None)

    assert buffer.add("telemetry", [b"x" * MAX_FRAME_BYTES]) is None
    assert buffer.dropped_samples == 1


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: b"garbage" + data[7:], id="bad header"),
        pytest.param(lambda data: data[:-10], id="torn last record"),
        pytest.param(lambda data: data[:-5] + b"XXXXX", id="payload checksum"),
    ],
)
def test_a_corrupt_spool_is_skipped_with_a_log_line_never_a_crash(tmp_path, caplog, damage):
    buffer = TelemetryBuffer(tmp_path, memory_frames=2, segment_bytes=1)
    fill(buffer, 6)
    buffer.close()
    segments = sorted((tmp_path / "spool" / "telemetry").glob("*.seg"))
    segments[-1].write_bytes(damage(segments[-1].read_bytes()))

    with caplog.at_level(logging.ERROR):
        restarted = TelemetryBuffer(tmp_path, memory_frames=2)
        kept = timestamps(replayed(restarted))

    assert "corrupt" in caplog.text
    assert kept == sorted(kept)
    assert set(kept) < {T0 + i for i in range(6)}
    assert fill(restarted, 1, start=6)[0] > 6


def test_an_unreadable_state_file_is_logged_and_seqs_continue_from_the_spool(tmp_path, caplog):
    buffer = TelemetryBuffer(tmp_path, memory_frames=2)
    fill(buffer, 5)
    buffer.close()
    (tmp_path / "state.json").write_text("{not json")

    with caplog.at_level(logging.ERROR):
        restarted = TelemetryBuffer(tmp_path, memory_frames=2)

    assert "state.json" in caplog.text
    assert fill(restarted, 1, start=5)[0] > 5


def test_events_frames_carry_their_events_in_order():
    buffer = TelemetryBuffer(None)
    for xid in (79, 48):
        buffer.add("events", [encode(GpuEvent(ts=T0, kind="xid", gpu_index=1, xid=xid))])

    (frame,) = [decode_agent_message(f.data) for f in buffer.pending("events")]

    assert isinstance(frame, Events)
    assert [e.xid for e in frame.events] == [79, 48]


def test_spool_summary_reports_what_is_on_disk_without_changing_it(tmp_path):
    buffer = TelemetryBuffer(tmp_path, memory_frames=4)
    send_live(buffer, 2)
    fill(buffer, 8, start=2)
    buffer.ack("telemetry", 2)
    buffer.close()
    before = sorted(p.name for p in tmp_path.rglob("*"))

    summary = spool_summary(tmp_path)

    assert summary["telemetry"]["spooled_items"] == 8
    assert summary["telemetry"]["acked_seq"] == 2
    assert summary["telemetry"]["next_seq"] == 11
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_write_private_file_replaces_atomically_with_owner_only_permissions(tmp_path):
    target = tmp_path / "agent.json"
    write_private_file(target, b'{"a": 1}')
    write_private_file(target, b'{"a": 2}')

    assert json.loads(target.read_text()) == {"a": 2}
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["agent.json"]
