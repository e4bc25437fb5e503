"""A streamed page read in a test as an ASGI server reads it: its async iterator, in order.

The fleet page streams from an async iterator (its snapshot may be read after the shell is sent).
Iterating the response synchronously would make Django gather it first, with a warning; this reads it
the way it is served, on the caller's thread for any database read it makes (thread-sensitive)."""

from asgiref.sync import async_to_sync
from django.http import StreamingHttpResponse


def streamed_parts(response: StreamingHttpResponse) -> list[bytes]:
    async def parts() -> list[bytes]:
        return [part async for part in response.streaming_content]

    return async_to_sync(parts)()
