"""The numbered frames of the two streams: their seq, and frames spliced from items encoded one at a time."""

from collections.abc import Sequence
from typing import Final

import msgspec

from agents.protocol.base import MAX_FRAME_BYTES, Message, Stream
from agents.protocol.codec import encode
from agents.protocol.events import Events
from agents.protocol.telemetry import Telemetry


class FrameSplicer:
    """A stream's frames put together from samples or events encoded one at a time: the agent encodes
    and validates each item once, buffers the bytes, and packs them into frames later, byte for byte
    the frame ``encode()`` gives for the same message, without decoding anything again.

    The pieces around the seq and the items are cut from what ``encode()`` writes for an empty frame
    numbered with the largest seq, so they cannot drift from the encoder."""

    def __init__(self, message: type[Telemetry] | type[Events]) -> None:
        info = msgspec.inspect.type_info(message)
        assert isinstance(info, msgspec.inspect.StructType)
        (items,) = (field for field in info.fields if field.name != "seq")
        assert isinstance(items.type, msgspec.inspect.ListType)
        assert items.type.max_length is not None
        largest_seq = str(2**63 - 1).encode()
        empty = encode(message(seq=int(largest_seq), **{items.name: []}))
        self._head, self._items_open = empty.removesuffix(b"]}").split(largest_seq)
        self.stream: Stream = message.__struct_config__.tag  # type: ignore[assignment]
        self.max_items = items.type.max_length  # MAX_SAMPLES_PER_FRAME, MAX_EVENTS_PER_FRAME
        # The most the items may take, joined with commas, so that the frame fits MAX_FRAME_BYTES with any seq.
        self.max_items_bytes = MAX_FRAME_BYTES - len(empty)

    def fits(self, count: int, items_bytes: int) -> bool:
        """Whether ``count`` items taking ``items_bytes`` (joined with commas) fit in one frame."""
        return count <= self.max_items and items_bytes <= self.max_items_bytes

    def frame(self, seq: int, items: Sequence[bytes]) -> bytes:
        return b"".join((self._head, str(seq).encode(), self._items_open, b",".join(items), b"]}"))


FRAME_SPLICERS: Final[dict[Stream, FrameSplicer]] = {
    splicer.stream: splicer for splicer in (FrameSplicer(Telemetry), FrameSplicer(Events))
}


def message_seq(message: Message) -> tuple[int | None, Stream | None]:
    """The seq and stream of a numbered frame (Telemetry, Events); ``(None, None)`` for other messages."""
    if isinstance(message, Telemetry | Events):
        return message.seq, message.__struct_config__.tag  # type: ignore[return-value]
    return None, None
