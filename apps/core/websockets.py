"""What every WebSocket consumer needs to know about its ASGI server."""

# How uvicorn's websockets-sansio protocol refuses a send on a socket it has already failed itself
# (a keepalive ping timeout, say): a RuntimeError whose message says so.
AFTER_CLOSE = "after sending 'websocket.close'"


def client_gone(exc: BaseException) -> bool:
    """Whether a send failed only because the client had gone: the ASGI server's ClientDisconnected
    (an OSError) or uvicorn's RuntimeError about sending after the close. Nothing to report then:
    ``disconnect`` follows."""
    return isinstance(exc, OSError) or (isinstance(exc, RuntimeError) and AFTER_CLOSE in str(exc))
