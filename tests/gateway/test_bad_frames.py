"""Every class of bad frame gets an Error reply with the protocol's code (and the frame's seq when it
had one) and a counter, and the socket goes on: the next valid message is handled."""

import json

import pytest

from agents import protocol
from apps.gateway.models import GatewayCounter
from tests.gateway.conftest import NOW, enrolled_node, eventually, in_db

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


def telemetry_json(seq: int, **gpu: object) -> str:
    return json.dumps({"type": "telemetry", "seq": seq, "samples": [{"ts": NOW, "gpus": [{"index": 0, **gpu}]}]})


def with_temperature(seq: int, literal: str) -> str:
    """A telemetry frame whose temperature is written as this JSON literal (json.dumps cannot write 1e999)."""
    return telemetry_json(seq, temp_c="TEMPERATURE").replace('"TEMPERATURE"', literal)


BAD_FRAMES = {  # frame, error code, seq and stream named in the reply
    "malformed JSON": ("{not json", "malformed", None, None),
    "binary frame": (b'{"type": "heartbeat", "ts": 1760000000}', "malformed", None, None),
    "unknown type": ('{"type": "reboot", "seq": 4}', "unknown_type", 4, None),
    "oversize": (
        telemetry_json(10, util_gpu=1.0)[:-3] + " " * protocol.MAX_FRAME_BYTES + "}]}",
        "oversize",
        10,
        "telemetry",
    ),
    "NaN": (with_temperature(11, "NaN"), "malformed", None, None),
    "Infinity": (with_temperature(12, "Infinity"), "malformed", None, None),
    "overflow to infinity": (with_temperature(13, "1e999"), "invalid", 13, "telemetry"),
    "out of range": (telemetry_json(14, temp_c=900.0), "invalid", 14, "telemetry"),
    "negative counter": (telemetry_json(15, pcie_replay_count=-1), "invalid", 15, "telemetry"),
    "unknown field": (telemetry_json(16, fan_rpm=3000), "invalid", 16, "telemetry"),
    "empty events": ('{"type": "events", "seq": 17, "events": []}', "invalid", 17, "events"),
    "wrong type": ('{"type": "telemetry", "seq": "eighteen", "samples": []}', "invalid", None, "telemetry"),
    "array": ('[{"type": "heartbeat"}]', "invalid", None, None),
    "empty": ("", "malformed", None, None),
    "nested too deep": (
        '{"type": "telemetry", "seq": 19, "samples": ' + "[" * 10**5 + "]" * 10**5 + "}",
        "invalid",
        None,
        None,
    ),
}


@pytest.mark.parametrize(("frame", "code", "seq", "stream"), BAD_FRAMES.values(), ids=BAD_FRAMES.keys())
async def test_it_answers_a_bad_frame_with_an_error_and_carries_on(connect_agent, frame, code, seq, stream):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()

    await agent.socket.send(frame)

    reply = await agent.receive()
    assert isinstance(reply, protocol.Error), reply
    assert (reply.code, reply.seq, reply.stream) == (code, seq, stream), reply.message
    assert (await agent.roundtrip()).seq == 1
    counter = await eventually(lambda: GatewayCounter.objects.filter(node=node, code=code).first())
    assert (counter.count, counter.last_message) == (1, reply.message[:500])


async def test_it_names_the_field_that_is_out_of_range(connect_agent):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()

    await agent.socket.send(telemetry_json(3, temp_c=900.0))

    reply = await agent.receive()
    assert reply.message == "Expected `float` <= 150.0 - at `$.samples[0].gpus[0].temp_c`"


async def test_it_requires_hello_first_and_then_only_once(connect_agent, storage):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)

    await agent.send(agent.telemetry(seq=8))
    before_hello = await agent.receive()
    welcome = await agent.hello()
    again = await agent.hello()

    assert (before_hello.code, before_hello.seq, before_hello.stream) == ("invalid", 8, "telemetry")
    assert before_hello.message == "Send hello first; 'telemetry' came before it."
    assert isinstance(welcome, protocol.Welcome)
    assert (again.code, again.message) == ("invalid", "Hello was already received on this connection.")
    assert await storage.sample_times(node) == []
    assert (await agent.roundtrip()).seq == 1


async def test_it_counts_each_error_of_a_node_by_code(connect_agent, api_client):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()

    for frame in ("{", "[", '{"type": "x"}', "{"):
        await agent.socket.send(frame)
        await agent.receive()

    await eventually(lambda: GatewayCounter.objects.filter(node=node, code="malformed", count=2).exists())
    viewer = await in_db(api_client)("viewer")
    response = await in_db(viewer.get)(f"/api/v1/gateway-errors?node={node.pk}")
    assert response.status_code == 200
    assert [(row["hostname"], row["code"], row["count"]) for row in response.json()["results"]] == [
        (node.hostname, "invalid", 1),
        (node.hostname, "malformed", 2),
        (node.hostname, "unknown_type", 1),
    ]


async def test_it_answers_an_error_it_did_not_foresee_and_keeps_the_socket(connect_agent, monkeypatch):
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()

    def broken_storage(node_id: int, message: protocol.Events) -> int:
        raise RuntimeError("disk full")

    monkeypatch.setattr("apps.gateway.sinks.store_events", broken_storage)
    await agent.send(protocol.Events(seq=4, events=[protocol.GpuEvent(ts=NOW, kind="xid", xid=48)]))

    reply = await agent.receive()
    assert (reply.code, reply.seq, reply.stream) == ("internal", 4, "events")
    assert "disk full" not in reply.message  # internals stay in the server's log
    assert (await agent.roundtrip()).seq == 1


async def test_a_flood_of_bad_frames_closes_the_socket_and_is_counted(connect_agent, settings):
    settings.AGENT_ERROR_LIMIT, settings.AGENT_ERROR_WINDOW_S = 3, 3600
    node, credential = await in_db(enrolled_node)()
    agent = await connect_agent(credential, node.hostname)
    await agent.hello()

    for frame in ("{", "[", "{"):
        await agent.socket.send(frame)
    replies = [await agent.receive() for _ in range(3)]

    assert [reply.code for reply in replies] == ["malformed", "invalid", "malformed"]
    assert await agent.close_code() == protocol.CloseCode.TOO_MANY_ERRORS == 4429
    assert agent.socket.close_reason == "Too many bad frames; closing."
    counter = await eventually(lambda: GatewayCounter.objects.filter(node=node, code="error_flood").first())
    assert counter.count == 1
    assert counter.last_message == "3 errors within 3600 s; the last: " + replies[-1].message
