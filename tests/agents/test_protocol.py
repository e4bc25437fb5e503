"""The wire protocol's own facts: frames spliced from encoded items are the encoder's frames."""

import pytest

from agents import protocol
from agents.protocol import FRAME_SPLICERS, Events, GpuEvent, Telemetry, encode
from tests.agents.doubles import FakeCollector

T0 = 1_760_000_000.0


def telemetry(seq: int, count: int) -> Telemetry:
    collector = FakeCollector("gpu-001", gpus=8, ports=8, seed=seq)
    return Telemetry(seq=seq, samples=[collector.sample(T0 + i) for i in range(count)])


def events(seq: int) -> Events:
    return Events(
        seq=seq,
        events=[
            GpuEvent(ts=T0, kind="xid", gpu_index=3, xid=79, data="fallen off the bus"),
            GpuEvent(ts=T0 + 0.25, kind="port", port_device="mlx5_0", data='état "active" → down\n'),
            GpuEvent(ts=T0 + 1, kind="thermal", gpu_index=0),
        ],
    )


@pytest.mark.parametrize(
    "message",
    [telemetry(1, 1), telemetry(2**63 - 1, 3), events(7), events(1234567)],
    ids=["one sample", "largest seq", "events", "events, long seq"],
)
def test_a_spliced_frame_is_exactly_what_the_encoder_writes(message):
    splicer = FRAME_SPLICERS["telemetry" if isinstance(message, Telemetry) else "events"]
    items = message.samples if isinstance(message, Telemetry) else message.events

    spliced = splicer.frame(message.seq, [encode(item) for item in items])

    assert spliced == encode(message)
    assert protocol.decode_agent_message(spliced) == message


def test_the_splicers_limits_are_the_protocols():
    telemetry_frames, events_frames = FRAME_SPLICERS["telemetry"], FRAME_SPLICERS["events"]

    assert (telemetry_frames.max_items, events_frames.max_items) == (
        protocol.MAX_SAMPLES_PER_FRAME,
        protocol.MAX_EVENTS_PER_FRAME,
    )
    for splicer in (telemetry_frames, events_frames):
        largest = splicer.frame(2**63 - 1, [b"0" * splicer.max_items_bytes])
        assert len(largest) == protocol.MAX_FRAME_BYTES  # the most that fits, with the longest seq there is
        assert splicer.fits(splicer.max_items, splicer.max_items_bytes)
        assert not splicer.fits(splicer.max_items + 1, 10)
        assert not splicer.fits(1, splicer.max_items_bytes + 1)
