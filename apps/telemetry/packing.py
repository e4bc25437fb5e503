"""The compact layout's codec: the items of one node at one time (its GPUs' readings, its ports', or
its GPUs' rollups over a bucket) packed into one ``bytes`` value, field by field.

A value is laid out as:

- one byte: how many fields it holds (fields are only ever appended, so a value written before a
  field existed reads that field as absent), one byte: how many items;
- one nibble per field (low nibble first, two to a byte): the field's *mode* in its two low bits and
  its *width* (1, 2, 4 or 8 bytes) in the two high bits;
- then each field's section, in field order, by mode:
  ``ABSENT`` no item has the field (no bytes); ``SAME`` every item has it, with one value (one
  value); ``EACH`` every item has it (one value per item); ``SOME`` only some items have it (a bitmap
  of those items, one bit each, then their values).

A value is an unsigned little-endian integer of the field's width: an integer less its range's lower
bound, a float as a whole number of its *resolution* above its lower bound (``util_gpu`` at 0.01 %:
87.25 % is 8725), a boolean as 0 or 1; a string is a length of that width and its UTF-8 bytes.
Absent stays absent (never zero), and an item with every field absent is still an item.

So a healthy node's counters, limits and clocks, the same on all its GPUs, cost a byte or two per
node, and the values that move cost two or four bytes each: about 38 bytes per GPU for the 27 fields
of an 8-GPU sample (docs/telemetry-storage.md).
"""

import struct
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any, Final

import msgspec

from apps.telemetry.packed_fields import FORMATS, WIDTHS, Decoder, Field, encoder, field_of

try:  # the packer compiled at install (pyproject.toml's ext-modules); without a compiler, this module's
    from apps.telemetry import _packing as _compiled
except ImportError:  # pragma: no cover - depends on the installation
    _compiled = None
# Built from an older _packing.c, the extension lacks it: the objects are then made tuples first.
_pack_structs = getattr(_compiled, "pack_structs", None)

ABSENT, SAME, EACH, SOME = range(4)

_KNOWN_SECTIONS: Final = 4_000  # encoded sections kept per field (a few MB per packing at most)
_LAYOUT_CACHE: Final = 10_000  # section layouts kept per packing, by header and fields wanted
Item = tuple[Any, ...]  # one item's values, in the packing's field order (None: absent)
_Section = tuple[int, int, int, int, tuple[int, ...]]  # position, mode, width, offset, items that have it
_NIBBLE, _DATA = itemgetter(0), itemgetter(1)  # of a remembered section: (nibble, bytes)
_KINDS: Final = {int: 0, bool: 0, float: 1, str: 2}  # a field's kind as _packing.c knows it
_SPEC: Final = struct.Struct("=Bqqq")  # kind, lower bound, steps, offset: one field for _packing.c
_UNKNOWN: Final = object()  # a type whose slots have not been looked for yet


class Packing:
    """How one kind of item is packed: its fields, in the order they are stored."""

    def __init__(self, fields: Sequence[Field]) -> None:
        if len(fields) > 255:
            raise ValueError("A packing holds at most 255 fields")
        self.fields: tuple[Field, ...] = tuple(fields)
        self.names: tuple[str, ...] = tuple(f.name for f in fields)
        self.encoders = tuple(encoder(f) for f in fields)
        # The sections met so far, per field by its values (item by item), and the headers by item
        # count and nibbles: most of a node's fields hold the values they held a second before.
        self._known: tuple[dict[tuple[Any, ...], tuple[int, bytes]], ...] = tuple({} for _ in fields)
        self._headers: dict[tuple[int, tuple[int, ...]], bytes] = {}
        self._layouts: dict[tuple[bytes, tuple[int, ...]], _Reader] = {}
        self._decoders = tuple(Decoder(f) for f in fields)
        self._offsets: dict[type, bytes | None] = {}  # by type: where its slots hold the fields (None: not slots)
        self._spec = b"".join(_SPEC.pack(_KINDS[f.kind], int(f.lower), f.steps, f.offset) for f in fields)

    @classmethod
    def of(cls, struct: type[msgspec.Struct], names: Sequence[str], *, steps: Mapping[str, int]) -> "Packing":
        """The packing of ``struct``'s fields named in ``names`` (in that order), their kinds and lower
        bounds read from the struct's declared types; every float field needs its ``steps``."""
        info = msgspec.inspect.type_info(struct)
        assert isinstance(info, msgspec.inspect.StructType)
        types = {f.name: f.type for f in info.fields}
        return cls([field_of(name, types[name], steps) for name in names])

    # Packing -----------------------------------------------------------------------------------

    def pack(self, items: Sequence[Item]) -> bytes:
        """The packed value of ``items``, each a tuple of this packing's field values.

        Each field's section is looked up by the field's values, item by item: a node's limits,
        clocks, counters and flags are the same second after second, so most of a row's sections are
        found rather than encoded, and only the readings that moved are. Where the compiled packer is
        installed it packs a list of tuples of the usual values (the same bytes), and this code packs
        the rest."""
        if _compiled is not None and (packed := _compiled.pack(self._spec, items)) is not None:
            return packed
        return self.pack_in_python(items)

    def pack_objects(self, objects: Sequence[Any]) -> bytes:
        """``pack`` of objects that carry this packing's fields as attributes (protocol structs): the
        compiled packer reads them from the objects' slots, without a tuple made of each first."""
        if _pack_structs is not None and objects:
            kind = type(objects[0])
            offsets = self._offsets.get(kind, _UNKNOWN)
            if offsets is _UNKNOWN:
                offsets = self._offsets[kind] = _compiled.slot_offsets(kind, self.names)
            if offsets is not None and (packed := _pack_structs(self._spec, kind, offsets, objects)) is not None:
                return packed
        if objects and getattr(type(objects[0]), "__struct_fields__", None) == self.names:
            return self.pack(list(map(msgspec.structs.astuple, objects)))  # a struct in this order: in C
        return self.pack([tuple(getattr(item, name) for name in self.names) for item in objects])

    def pack_in_python(self, items: Sequence[Item]) -> bytes:
        """``pack`` without the compiled packer: what defines the bytes."""
        count = len(items)
        if count > 255:
            raise ValueError("A packed value holds at most 255 items")
        if not count:
            return bytes([len(self.fields), 0]) + bytes((len(self.fields) + 1) // 2)
        columns = list(zip(*items, strict=True))
        if len(columns) != len(self.fields):
            raise ValueError(f"An item has {len(columns)} values, not one per field ({len(self.fields)})")
        # The lookups, the nibbles and the join run in C (map, itemgetter): at 1,000 nodes a second
        # this is the writer's inner loop, and a Python-level loop over 28 fields cost twice as much.
        found = list(map(dict.get, self._known, columns))
        if None in found:
            for position, section in enumerate(found):
                if section is None:
                    found[position] = self._section(position, columns[position])
        nibbles = tuple(map(_NIBBLE, found))
        header = self._headers.get((count, nibbles))
        if header is None:
            header = self._header(count, nibbles)
        return header + b"".join(map(_DATA, found))

    def _section(self, position: int, column: tuple[Any, ...]) -> tuple[int, bytes]:
        """The nibble and section of one field's values, encoded and remembered."""
        count, first = len(column), column[0]
        if column.count(first) == count:
            if first is None:
                section = (ABSENT, b"")
            else:
                code, data = self.encoders[position]((first,))
                section = (SAME | code << 2, data)
        elif None in column:
            present = [value for value in column if value is not None]
            bits = sum(1 << i for i, value in enumerate(column) if value is not None)
            code, data = self.encoders[position](present)
            section = (SOME | code << 2, bits.to_bytes((count + 7) // 8, "little") + data)
        else:
            code, data = self.encoders[position](column)
            section = (EACH | code << 2, data)
        known = self._known[position]
        if len(known) > _KNOWN_SECTIONS:
            known.clear()
        known[column] = section
        return section

    def _header(self, count: int, nibbles: tuple[int, ...]) -> bytes:
        """The field count, item count and nibbles of a value, remembered by item count and nibbles."""
        paired = (*nibbles, 0)
        header = bytes([len(self.fields), count, *(paired[i] | paired[i + 1] << 4 for i in range(0, len(nibbles), 2))])
        if len(self._headers) > _LAYOUT_CACHE:
            self._headers.clear()
        self._headers[count, nibbles] = header
        return header

    # Unpacking ---------------------------------------------------------------------------------

    def count(self, packed: bytes) -> int:
        """How many items ``packed`` holds."""
        return packed[1]

    def unpack(self, packed: bytes) -> list[Item]:
        """Every item of ``packed``, each a tuple of this packing's field values (None: absent)."""
        count, columns = self.columns(packed, range(len(self.fields)))
        filled = [column if column is not None else (None,) * count for column in columns]
        return list(zip(*filled, strict=True)) if filled else [() for _ in range(count)]

    def columns(
        self, packed: bytes, wanted: Iterable[int], *, stored: bool = False
    ) -> tuple[int, list[Sequence[Any] | None]]:
        """``(items, [values of each wanted field, by item])``, the fields named by position; a field
        no item has is None rather than a column of Nones. ``stored``: the stored integers, not the
        values (a float's count of resolution steps above its lower bound), which add up exactly.

        Where no bitmap or string comes before the wanted sections, where they lie follows from the
        header alone: that is worked out once per header (a node's rows mostly share one) into one
        struct that reads them all at once (a chart reads a thousand rows a request). Otherwise they
        are read section by section."""
        wanted = tuple(wanted)
        key = (bytes(packed[: 2 + (packed[0] + 1) // 2]), wanted)
        reader = self._layouts.get(key)
        if reader is None:
            sections, fixed = self._sections(packed, wanted)
            if not fixed:
                return packed[1], self._read(packed, sections, stored)
            if len(self._layouts) > _LAYOUT_CACHE:
                self._layouts.clear()
            reader = self._layouts[key] = _Reader(sections, packed[1])
        return packed[1], reader.read(packed, self._decoders, stored)

    def _read(self, packed: bytes, sections: list[_Section | None], stored: bool) -> list[Sequence[Any] | None]:
        """The wanted sections' values, section by section (a layout with bitmaps or strings)."""
        count = packed[1]
        found: list[Sequence[Any] | None] = []
        for section in sections:
            if section is None:
                found.append(None)
                continue
            position, mode, width, offset, present = section
            decoder = self._decoders[position]
            values, _ = decoder.read(packed, offset, 1 if mode == SAME else len(present), width)
            if not stored:
                values = decoder.convert(values)
            if mode == SAME:
                found.append(values * count)
            elif mode == EACH:
                found.append(values)
            else:
                column: list[Any] = [None] * count
                for i, value in zip(present, values, strict=True):
                    column[i] = value
                found.append(column)
        return found

    def _sections(self, packed: bytes, wanted: tuple[int, ...]) -> tuple[list[_Section | None], bool]:
        """Where each wanted field's values lie (None: no item has it), and whether that follows from
        the header alone."""
        count, fields = packed[1], min(packed[0], len(self.fields))
        offset, fixed = 2 + (packed[0] + 1) // 2, True
        found: dict[int, _Section] = {}
        everyone = tuple(range(count))
        for position in range(min(fields, max(wanted, default=-1) + 1)):
            nibble = packed[2 + position // 2] >> (4 * (position % 2)) & 0xF
            mode, width = nibble & 3, WIDTHS[nibble >> 2]
            if mode == ABSENT:
                continue
            present = everyone
            if mode == SOME:
                size = (count + 7) // 8
                bits = int.from_bytes(packed[offset : offset + size], "little")
                offset += size
                present = tuple(i for i in range(count) if bits >> i & 1)
                fixed = False
            found[position] = (position, mode, width, offset, present)
            decoder = self._decoders[position]
            if decoder.field.kind is str:
                _, offset = decoder.read(packed, offset, 1 if mode == SAME else len(present), width)
                fixed = False
            else:
                offset += (1 if mode == SAME else len(present)) * width
        return [found.get(position) for position in wanted], fixed

    def position(self, name: str) -> int:
        return self.names.index(name)


class _Reader:
    """Every wanted section of a layout without bitmaps or strings, read by one struct: numbers only,
    each section one value (SAME) or one per item (EACH), at offsets the header fixes."""

    __slots__ = ("_columns", "_count", "_start", "_struct")

    def __init__(self, sections: list[_Section | None], count: int) -> None:
        distinct = {s[0]: s for s in sections if s is not None}  # a field wanted twice is read once
        ordered = sorted(distinct.values(), key=lambda section: section[3])
        self._start = ordered[0][3] if ordered else 0
        formats, cursor, flat = ["<"], self._start, 0
        spans: dict[int, tuple[int, int, bool]] = {}
        for position, mode, width, offset, _ in ordered:
            values = 1 if mode == SAME else count
            formats.append(f"{offset - cursor}x{values}{FORMATS[WIDTHS.index(width)]}")
            spans[position] = (flat, flat + values, mode == SAME)
            cursor, flat = offset + values * width, flat + values
        self._struct = struct.Struct("".join(formats))
        self._columns = [None if s is None else (s[0], *spans[s[0]]) for s in sections]
        self._count = count

    def read(self, packed: bytes, decoders: "tuple[Decoder, ...]", stored: bool) -> list[Sequence[Any] | None]:
        flat = self._struct.unpack_from(packed, self._start)
        found: list[Sequence[Any] | None] = []
        for column in self._columns:
            if column is None:
                found.append(None)
                continue
            position, first, last, same = column
            values: Sequence[Any] = flat[first:last]
            if not stored:
                values = decoders[position].convert(list(values))
            found.append(values * self._count if same else values)
        return found
