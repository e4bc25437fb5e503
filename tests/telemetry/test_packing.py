"""The compact layout's codec (apps/telemetry/packing.py) gives back what it packed, every mode and
width, however the sections it remembers between values are shared: one field's values never stand
in for another's, nor one item count's header for another's."""

import pytest

from apps.telemetry.packing import ABSENT, EACH, SAME, SOME, Field, Packing

PACKING = Packing(
    [
        Field("index", int),
        Field("util", float, steps=100),
        Field("temp", float, lower=-40, steps=100),
        Field("count", int),
        Field("flag", bool),
        Field("name", str),
    ]
)


def modes(packed: bytes) -> list[int]:
    nibbles = [byte >> shift & 0xF for byte in packed[2 : 2 + (packed[0] + 1) // 2] for shift in (0, 4)]
    return [nibble & 3 for nibble in nibbles[: packed[0]]]


@pytest.mark.parametrize(
    ("items", "expected_modes"),
    [
        pytest.param([(0, 87.25, 65.5, 3, True, "a")], [SAME] * 6, id="one item"),
        pytest.param(
            [(0, 87.25, -3.5, 3, False, "sxm"), (1, 87.25, 70.0, 3, False, "sxm")],
            [EACH, SAME, EACH, SAME, SAME, SAME],
            id="some the same, some each",
        ),
        pytest.param(
            [(0, None, None, 0, None, None), (1, 50.0, None, 70_000, None, "pcie")],
            [EACH, SOME, ABSENT, EACH, ABSENT, SOME],
            id="some absent, some never there",
        ),
        pytest.param([(None,) * 6, (None,) * 6], [ABSENT] * 6, id="items with nothing"),
        pytest.param([(i, i / 3, 0.0, 2**40 + i, i % 2 == 0, "x" * 300) for i in range(9)], None, id="wide values"),
    ],
)
def test_it_gives_back_every_value_and_absence_it_packed(items, expected_modes):
    packed = PACKING.pack(items)

    assert PACKING.count(packed) == len(items)
    if expected_modes is not None:
        assert modes(packed) == expected_modes
    rounded = [tuple(round(v, 2) if isinstance(v, float) else v for v in item) for item in items]
    assert PACKING.unpack(packed) == rounded


def test_a_value_packed_again_is_the_same_bytes_as_the_first_time():
    items = [(0, 12.5, 40.0, 1, True, "a"), (1, 13.5, 40.0, 1, True, "a")]

    assert PACKING.pack(list(items)) == PACKING.pack(list(items)) == Packing(PACKING.fields).pack(items)


def test_one_fields_values_never_stand_for_anothers():
    """index and count hold the same integers here: each field's section is its own."""
    first = PACKING.pack([(0, None, None, 5, None, None), (1, None, None, 6, None, None)])
    second = PACKING.pack([(5, None, None, 0, None, None), (6, None, None, 1, None, None)])

    assert PACKING.unpack(first) == [(0, None, None, 5, None, None), (1, None, None, 6, None, None)]
    assert PACKING.unpack(second) == [(5, None, None, 0, None, None), (6, None, None, 1, None, None)]


def test_values_of_two_item_counts_with_the_same_modes_keep_their_own_count():
    one = PACKING.pack([(0, 1.0, 1.0, 1, True, "a")])
    two = PACKING.pack([(0, 1.0, 1.0, 1, True, "a")] * 2)

    assert (PACKING.count(one), PACKING.count(two)) == (1, 2)
    assert PACKING.unpack(two) == [(0, 1.0, 1.0, 1, True, "a")] * 2


def test_an_empty_value_holds_no_items():
    assert PACKING.unpack(PACKING.pack([])) == []
