"""The wire protocol's own facts: frames spliced from encoded items are the encoder's frames."""

import msgspec
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


REFUSED_FRAMES = {  # frame: code, seq and stream the refusal names
    '{"type": "reboot", "seq": 4}': ("unknown_type", 4, None),
    '{"seq": 5, "type": "telemetry2"}': ("unknown_type", 5, None),
    '{"type": 7, "seq": 6}': ("invalid", 6, None),  # a type that is not a string is not an unknown type
    '{"seq": 8}': ("invalid", 8, None),
    '{"type": "events", "seq": 9, "events": []}': ("invalid", 9, "events"),
    '{"type": "telemetry", "seq": true, "samples": []}': ("invalid", None, "telemetry"),
    '["telemetry"]': ("invalid", None, None),
    '{"type": "heartbeat", "ts": 1760000000.0': ("malformed", None, None),
}


DEEP = 100_000  # levels; such a frame takes 200 KB, well under MAX_FRAME_BYTES
DEEPLY_NESTED = {  # where the nesting is: frame
    "an item": '{"type": "telemetry", "seq": 3, "samples": ' + "[" * DEEP + "]" * DEEP + "}",
    "the seq": '{"type": "telemetry", "seq": ' + "[" * DEEP + "]" * DEEP + ', "samples": []}',
    "the type": '{"type": ' + "[" * DEEP + "]" * DEEP + "}",
    "an unknown field": '{"type": "hello", "extra": ' + '{"a": ' * DEEP + "1" + "}" * DEEP + "}",
}


@pytest.mark.parametrize("frame", DEEPLY_NESTED.values(), ids=DEEPLY_NESTED.keys())
def test_a_frame_nested_too_deep_to_decode_is_refused_like_any_other(frame):
    for decode in (protocol.decode_agent_message, protocol.decode_server_message):
        with pytest.raises(protocol.ProtocolError) as refused:
            decode(frame)

        assert refused.value.code in ("invalid", "unknown_type"), refused.value.message


def test_evidence_nested_too_deep_to_decode_is_refused_with_a_reason():
    result = '{"type": "check_result", "check": "compute", "device": "cpu", "device_name": "x", "tool": "y", '
    result += '"started": 1760000000, "finished": 1760000001, "evidence": {"raw": ' + "[" * DEEP + "]" * DEEP + "}}"

    with pytest.raises(protocol.ProtocolError) as refused:
        protocol.decode_check_line(result)

    assert (refused.value.code, refused.value.message) == ("invalid", "Frame nested too deeply to decode.")


@pytest.mark.parametrize(("frame", "refusal"), REFUSED_FRAMES.items(), ids=REFUSED_FRAMES.keys())
def test_a_refused_frame_names_its_code_and_what_it_could_read_of_its_seq_and_stream(frame, refusal):
    with pytest.raises(protocol.ProtocolError) as refused:
        protocol.decode_agent_message(frame)

    assert (refused.value.code, refused.value.seq, refused.value.stream) == refusal
    assert refused.value.reply() == protocol.Error(
        code=refusal[0], message=refused.value.message, seq=refusal[1], stream=refusal[2]
    )


def test_an_unknown_type_is_named_with_the_types_each_side_expects():
    with pytest.raises(protocol.ProtocolError) as from_agent:
        protocol.decode_agent_message('{"type": "welcome"}')  # a server message is not an agent's
    with pytest.raises(protocol.ProtocolError) as from_server:
        protocol.decode_server_message('{"type": "hello"}')

    assert from_agent.value.message == (
        "Unknown message type 'welcome'; expected one of ['command_result', 'command_started', 'command_update', "
        "'events', 'heartbeat', 'hello', 'inventory', 'telemetry']."
    )
    assert from_server.value.message == (
        "Unknown message type 'hello'; expected one of ['ack', 'cancel', 'command', 'error', 'welcome']."
    )


def test_a_types_range_is_what_its_declaration_says():
    assert protocol.range_of(protocol.Gbps) == protocol.Range(ge=0, le=10_000)
    assert protocol.range_of(protocol.GpuIndex) == protocol.Range(ge=0, lt=protocol.MAX_GPUS_PER_NODE)
    assert 10_000 in protocol.range_of(protocol.Gbps)
    assert 10_000.5 not in protocol.range_of(protocol.Gbps)
    assert protocol.MAX_GPUS_PER_NODE not in protocol.range_of(protocol.GpuIndex)
    with pytest.raises(TypeError):
        protocol.range_of(protocol.Hostname)


def edges(allowed: protocol.Range) -> list[tuple[float, bool]]:
    """Values at and just past each of the range's bounds, with whether the range holds them."""
    values = []
    if allowed.ge is not None:
        values += [(allowed.ge, True), (allowed.ge - 1, False)]
    if allowed.le is not None:
        values += [(allowed.le, True), (allowed.le + 1, False)]
    values += [(bound, False) for bound in (allowed.gt, allowed.lt) if bound is not None]
    return values


REQUIRED = {  # the required fields of the structs below, with valid values
    protocol.GpuSample: {"index": 0},
    protocol.GpuInfo: {"index": 0, "uuid": "GPU-00000000-0000-0000-0000-000000000000", "name": "H100"},
    protocol.PortSample: {"device": "mlx5_0", "port": 1, "state": "active"},
}


@pytest.mark.parametrize("struct", REQUIRED, ids=lambda struct: struct.__name__)
def test_a_value_is_in_a_fields_range_exactly_when_the_protocol_accepts_it(struct):
    ranges = protocol.field_ranges(struct)
    assert ranges.keys() - REQUIRED[struct]  # the optional readings, not only the required fields

    for name, allowed in ranges.items():
        for value, inside in edges(allowed):
            assert (value in allowed) == inside, (name, value)
            if inside:
                msgspec.convert({**REQUIRED[struct], name: value}, struct)
            else:
                with pytest.raises(msgspec.ValidationError):
                    msgspec.convert({**REQUIRED[struct], name: value}, struct)


def numbers_in(kind: msgspec.inspect.Type, path: str, seen: set[type]) -> list[tuple[str, msgspec.inspect.Type]]:
    """Every integer and float a message can carry, with where it is."""
    if isinstance(kind, msgspec.inspect.IntType | msgspec.inspect.FloatType):
        return [(path, kind)]
    if isinstance(kind, msgspec.inspect.StructType):
        if kind.cls in seen:
            return []
        seen.add(kind.cls)
        return [found for field in kind.fields for found in numbers_in(field.type, f"{path}.{field.name}", seen)]
    parts = {
        msgspec.inspect.UnionType: lambda: kind.types,
        msgspec.inspect.ListType: lambda: (kind.item_type,),
        msgspec.inspect.DictType: lambda: (kind.key_type, kind.value_type),
    }
    inner = parts.get(type(kind), tuple)()
    return [found for part in inner for found in numbers_in(part, path, seen)]


@pytest.mark.parametrize(
    "union", [protocol.AgentMessage, protocol.ServerMessage, protocol.CheckLine], ids=["agent", "server", "check"]
)
def test_every_number_on_the_wire_has_both_bounds(union):
    numbers = numbers_in(msgspec.inspect.type_info(union), "", set())

    assert numbers  # the walk found them
    unbounded = [
        path for path, kind in numbers if (kind.ge is None and kind.gt is None) or (kind.le is None and kind.lt is None)
    ]
    assert unbounded == []


def test_a_huge_count_in_a_hello_is_refused():
    hello = '{"type": "hello", "protocol": 1, "agent_version": "x", "hostname": "h", "buffered_samples": 1' + "0" * 30

    with pytest.raises(protocol.ProtocolError) as refused:
        protocol.decode_agent_message(hello + "}")

    assert refused.value.code == "invalid"
    assert refused.value.message.endswith("at `$.buffered_samples`")


def test_a_refusal_names_only_a_seq_the_protocol_can_carry():
    with pytest.raises(protocol.ProtocolError) as refused:
        protocol.decode_agent_message('{"type": "bogus", "seq": 1' + "0" * 30 + "}")

    assert refused.value.seq is None
    assert protocol.decode_server_message(protocol.encode(refused.value.reply())) == refused.value.reply()
