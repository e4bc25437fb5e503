"""An agent that disconnects before its reply is not an error: the reply is simply dropped."""

import asyncio
import logging

import pytest

from agents import protocol
from apps.gateway.consumers import AgentConsumer


class _Gone:
    hostname = "gpu-001"


@pytest.mark.parametrize(
    "gone",
    [
        ConnectionResetError("client disconnected"),  # uvicorn's ClientDisconnected is an OSError
        # uvicorn's websockets-sansio protocol, after it failed the socket on a keepalive timeout
        RuntimeError("Unexpected ASGI message 'websocket.send', after sending 'websocket.close'."),
    ],
)
def test_a_reply_to_an_agent_that_went_away_is_dropped_quietly(caplog, gone):
    consumer = AgentConsumer()
    consumer.node = _Gone()

    async def disconnected(**kwargs: object) -> None:
        raise gone

    consumer.send = disconnected
    with caplog.at_level(logging.DEBUG, logger="apps.gateway.consumers"):
        asyncio.run(consumer._send(protocol.Ack(stream="telemetry", seq=7)))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert "disconnected before its Ack" in caplog.text


def test_other_send_errors_still_surface():
    consumer = AgentConsumer()
    consumer.node = _Gone()

    async def broken(**kwargs: object) -> None:
        raise RuntimeError("a bug")

    consumer.send = broken
    with pytest.raises(RuntimeError):
        asyncio.run(consumer._send(protocol.Ack(stream="telemetry", seq=7)))
