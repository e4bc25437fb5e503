"""The ranges the numeric field types declare, read back for code that keeps a value inside them."""

import msgspec


class Range(msgspec.Struct, frozen=True):
    """The bounds a numeric type above declares (its ``msgspec.Meta``), for code that keeps a value inside
    what the protocol accepts before it builds a message, such as a collector leaving out one wild reading."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def __contains__(self, value: float) -> bool:
        return (
            (self.ge is None or value >= self.ge)
            and (self.gt is None or value > self.gt)
            and (self.le is None or value <= self.le)
            and (self.lt is None or value < self.lt)
        )


def range_of(numeric: object) -> Range:
    """The range of a numeric type, or of the number in an optional one: ``range_of(Gbps)`` is 0 to 10,000."""
    found = _range(msgspec.inspect.type_info(numeric))
    if found is None:
        raise TypeError(f"{numeric!r} is not a numeric type")
    return found


def field_ranges(struct: type[msgspec.Struct]) -> dict[str, Range]:
    """The range of each numeric field of a message or part of one, by field name."""
    info = msgspec.inspect.type_info(struct)
    assert isinstance(info, msgspec.inspect.StructType)
    return {field.name: found for field in info.fields if (found := _range(field.type)) is not None}


def _range(info: msgspec.inspect.Type) -> Range | None:
    for kind in info.types if isinstance(info, msgspec.inspect.UnionType) else (info,):
        if isinstance(kind, msgspec.inspect.IntType | msgspec.inspect.FloatType):
            return Range(ge=kind.ge, gt=kind.gt, le=kind.le, lt=kind.lt)
    return None
