"""Encoding messages, and decoding them into a ``ProtocolError`` for anything the protocol refuses: a
code, a message naming the field, and the frame's seq and stream as far as they can be read."""

from types import UnionType
from typing import get_args

import msgspec

from agents.protocol.base import MAX_FRAME_BYTES, STREAMS, CommandKey, Message, Seq, Stream
from agents.protocol.ranges import range_of
from agents.protocol.session import Error, ErrorCode


class ProtocolError(Exception):
    """A refused frame: the code and message of the Error reply, and the frame's seq and stream as far
    as they could be read from it, so the agent knows what was refused."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        seq: int | None = None,
        stream: Stream | None = None,
        key: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.seq = seq
        self.stream = stream
        self.key = key  # the command key a refused command message named

    def reply(self) -> Error:
        return Error(code=self.code, message=self.message, seq=self.seq, stream=self.stream, key=self.key)


_encoder = msgspec.json.Encoder()


def encode(message: Message) -> bytes:
    return _encoder.encode(message)


class Decoder:
    """Decodes the messages of one union (what an agent sends, what a check writes), or raises
    ProtocolError: ``oversize`` past MAX_FRAME_BYTES, ``malformed`` for what is not JSON,
    ``unknown_type`` for a type outside the union, ``invalid`` for anything else msgspec refuses and
    for JSON nested too deeply to decode. It raises nothing else, whatever the frame."""

    def __init__(self, messages: UnionType) -> None:
        self._decoder = msgspec.json.Decoder(messages)
        self._tags = frozenset(message.__struct_config__.tag for message in get_args(messages))

    def decode(self, frame: bytes | str) -> Message:
        if len(frame) > MAX_FRAME_BYTES:
            _, seq, stream = _header(frame)
            message = f"Frame of {len(frame)} bytes exceeds the {MAX_FRAME_BYTES}-byte limit."
            raise ProtocolError("oversize", message, seq=seq, stream=stream)
        try:
            return self._decoder.decode(frame)
        except msgspec.ValidationError as exc:
            kind, seq, stream = _header(frame)
            if isinstance(kind, str) and kind not in self._tags:
                message = f"Unknown message type {kind!r}; expected one of {sorted(self._tags)}."
                raise ProtocolError("unknown_type", message, seq=seq) from exc
            raise ProtocolError("invalid", str(exc), seq=seq, stream=stream, key=command_key(frame)) from exc
        except msgspec.DecodeError as exc:
            raise ProtocolError("malformed", f"Not a JSON message: {exc}") from exc
        except RecursionError as exc:  # msgspec nests as deep as the interpreter's recursion limit allows
            _, seq, stream = _header(frame)
            raise ProtocolError("invalid", "Frame nested too deeply to decode.", seq=seq, stream=stream) from exc


class _Header(msgspec.Struct):
    """What a frame that failed validation says about itself; any JSON value is accepted in each field."""

    type: object = None
    seq: object = None
    key: object = None


_header_decoder = msgspec.json.Decoder(_Header)
SEQ_RANGE = range_of(Seq)
_key_decoder = msgspec.json.Decoder(CommandKey)


def command_key(frame: bytes | str) -> str | None:
    """The command key a frame names, when it names a valid one (so a refusal can say which command)."""
    try:
        key = _header_decoder.decode(frame).key
        return _key_decoder.decode(msgspec.json.encode(key)) if isinstance(key, str) else None
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None


def _header(frame: bytes | str) -> tuple[object, int | None, Stream | None]:
    """The type, seq and stream a refused frame names, each None where it names none (or is no JSON object)."""
    try:
        header = _header_decoder.decode(frame)
    except (msgspec.DecodeError, RecursionError):
        return None, None, None
    seq = header.seq if type(header.seq) is int and header.seq in SEQ_RANGE else None  # not a bool, 0 or 10**30
    return header.type, seq, header.type if header.type in STREAMS else None  # type: ignore[return-value]
