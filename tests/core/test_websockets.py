"""Telling a client that left from a send that really failed (apps/core/websockets.py)."""

import pytest
from uvicorn.protocols.utils import ClientDisconnected

from apps.core.websockets import client_gone


@pytest.mark.parametrize(
    ("exc", "gone"),
    [
        (ClientDisconnected(), True),
        (ConnectionResetError(), True),
        (RuntimeError("Unexpected ASGI message 'websocket.send', after sending 'websocket.close'."), True),
        (RuntimeError("Event loop is closed"), False),
        (ValueError("bad frame"), False),
    ],
)
def test_only_a_departed_client_counts_as_gone(exc: BaseException, gone: bool) -> None:
    assert client_gone(exc) is gone
