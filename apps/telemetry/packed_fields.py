"""Each field of the compact layout (apps/telemetry/packing.py) on its own: its kind, lower bound and
resolution (``Field``, read from the protocol struct's constraints by ``field_of``), how its values
become unsigned little-endian integers of the narrowest width that holds them (``encoder``), and how
they are read back (``Decoder``)."""

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

WIDTHS: Final = (1, 2, 4, 8)  # bytes of each width code
FORMATS: Final = "BHIQ"  # struct's format of each width code


@dataclass(frozen=True, slots=True)
class Field:
    """One packed field: its name, kind (``int``, ``float``, ``bool`` or ``str``), lower bound and, for a
    float, how many stored steps make one unit (100: a resolution of 0.01)."""

    name: str
    kind: type
    lower: float = 0
    steps: int = 1

    @property
    def offset(self) -> int:
        return round(self.lower * self.steps)


def field_of(name: str, info: msgspec.inspect.Type, steps: Mapping[str, int]) -> Field:
    union = info.types if isinstance(info, msgspec.inspect.UnionType) else (info,)
    kinds = [t for t in union if not isinstance(t, msgspec.inspect.NoneType)]
    if len(kinds) != 1:
        raise TypeError(f"{name}: a packed field has one type besides None, not {info!r}")
    kind = kinds[0]
    if isinstance(kind, msgspec.inspect.BoolType):
        return Field(name, bool)
    if isinstance(kind, msgspec.inspect.StrType | msgspec.inspect.LiteralType):
        return Field(name, str)
    if isinstance(kind, msgspec.inspect.IntType | msgspec.inspect.FloatType):
        lower = kind.ge if kind.ge is not None else kind.gt
        if lower is None:
            raise TypeError(f"{name}: a packed number needs a lower bound")
        if isinstance(kind, msgspec.inspect.IntType):
            return Field(name, int, lower=lower)
        if name not in steps:
            raise TypeError(f"{name}: a packed float needs its resolution (steps per unit)")
        return Field(name, float, lower=lower, steps=steps[name])
    raise TypeError(f"{name}: cannot pack {kind!r}")


def width_of(largest: int) -> int:
    if largest < 0x100:
        return 0
    if largest < 0x10000:
        return 1
    if largest < 0x100000000:
        return 2
    if largest < 0x10000000000000000:
        return 3
    raise ValueError(f"{largest} does not fit in 8 bytes")


_STRUCTS: dict[tuple[int, int], struct.Struct] = {}


def ints(count: int, code: int) -> struct.Struct:
    """The struct of ``count`` unsigned integers of width ``code``, made once."""
    found = _STRUCTS.get((count, code))
    if found is None:
        found = _STRUCTS[count, code] = struct.Struct(f"<{count}{FORMATS[code]}")
    return found


def pack_ints(values: Sequence[int]) -> tuple[int, bytes]:
    code = width_of(max(values))
    return code, ints(len(values), code).pack(*values)


def encoder(field: Field) -> Any:
    """values (none of them None) -> (width code, bytes)."""
    if field.kind is str:

        def encode_str(values: Sequence[str]) -> tuple[int, bytes]:
            encoded = [value.encode() for value in values]
            code = width_of(max(len(e) for e in encoded))
            return code, b"".join(len(e).to_bytes(WIDTHS[code], "little") + e for e in encoded)

        return encode_str
    if field.kind is float:
        steps, offset = field.steps, field.offset
        return lambda values: pack_ints([round(value * steps) - offset for value in values])
    if field.lower:
        lower = int(field.lower)
        return lambda values: pack_ints([value - lower for value in values])
    return pack_ints  # unsigned integers and booleans as they are


@dataclass(frozen=True, slots=True)
class Decoder:
    field: Field

    def read(self, packed: bytes, offset: int, count: int, width: int) -> tuple[list[Any], int]:
        if self.field.kind is str:
            values = []
            for _ in range(count):
                size = int.from_bytes(packed[offset : offset + width], "little")
                offset += width
                values.append(packed[offset : offset + size])
                offset += size
            return values, offset
        return list(ints(count, WIDTHS.index(width)).unpack_from(packed, offset)), offset + count * width

    def convert(self, values: list[Any]) -> list[Any]:
        kind = self.field.kind
        if kind is str:
            return [bytes(value).decode() for value in values]
        if kind is float:
            steps, offset = self.field.steps, self.field.offset
            return [(value + offset) / steps for value in values]
        if kind is bool:
            return [value == 1 for value in values]
        lower = int(self.field.lower)
        return [value + lower for value in values] if lower else values
