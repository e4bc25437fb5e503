"""The compact layout's codec (apps/telemetry/packing.py) gives back what it packed, every mode and
width, however the sections it remembers between values are shared: one field's values never stand
in for another's, nor one item count's header for another's. Reading some fields gives what unpacking
the whole value gives, whether the layout is read by one struct (numbers at offsets the header fixes)
or section by section (a bitmap or a string before the fields asked)."""

import pytest

from agents.protocol import GpuSample, PortSample
from apps.telemetry.models import GPU_PACKING, PORT_PACKING
from apps.telemetry.models.samples import pack
from apps.telemetry.packing import ABSENT, EACH, SAME, SOME, Field, Packing
from tests.telemetry.conftest import every_gpu_field, every_port_field, gpu_sample

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


# Reading some fields ---------------------------------------------------------------------------------

SAME_EACH_SOME = [
    [gpu_sample(0, util=10.0), gpu_sample(1, util=20.0), gpu_sample(2, util=30.0, ecc_corrected_volatile=4)],
    [every_gpu_field(0), every_gpu_field(1, high=True)],
    [GpuSample(index=3), gpu_sample(5)],
    [],
]


def whole_columns(packing: Packing, packed: bytes, wanted: list[int]) -> list[list[object] | None]:
    """The wanted fields' columns as unpacking every item gives them (None: no item has the field)."""
    items = packing.unpack(packed)
    found = []
    for position in wanted:
        column = [item[position] for item in items]
        found.append(None if all(value is None for value in column) else column)
    return found


@pytest.mark.parametrize("gpus", SAME_EACH_SOME)
@pytest.mark.parametrize("names", [("index", "util_gpu"), ("power_w", "index", "power_w"), ("recovery_action",)])
def test_some_fields_read_as_the_whole_value_unpacked(gpus, names):
    packed = pack(GPU_PACKING, gpus)
    wanted = [GPU_PACKING.position(name) for name in names]
    for _ in range(2):  # the first read works the layout out, the second reads by it
        count, columns = GPU_PACKING.columns(packed, wanted)
        assert count == len(gpus)
        assert [None if c is None else list(c) for c in columns] == whole_columns(GPU_PACKING, packed, wanted)


def test_stored_steps_come_back_as_integers_above_the_lower_bound():
    packed = pack(GPU_PACKING, [gpu_sample(0, util=87.25, temp_c=-12.25), gpu_sample(1, util=1.5, temp_c=-12.25)])
    wanted = [GPU_PACKING.position(name) for name in ("util_gpu", "temp_c")]
    for _ in range(2):
        _, (util, temp) = GPU_PACKING.columns(packed, wanted, stored=True)
        temp_c = GPU_PACKING.fields[wanted[1]]
        assert list(util) == [8725, 150]
        assert list(temp) == [round(-12.25 * temp_c.steps) - temp_c.offset] * 2


def test_fields_after_a_string_are_read_section_by_section():
    ports = [every_port_field("mlx5_0"), every_port_field("mlx5_10", high=True), PortSample("ib0", 2, "down")]
    packed = pack(PORT_PACKING, ports)
    wanted = [PORT_PACKING.position(name) for name in ("tx_gbps", "device", "rx_bytes")]
    for _ in range(2):
        _, columns = PORT_PACKING.columns(packed, wanted)
        assert [list(c) for c in columns] == whole_columns(PORT_PACKING, packed, wanted)


def test_a_field_appended_after_a_value_was_written_reads_as_absent():
    old = Packing([Field("a", int), Field("b", int)])
    new = Packing([*old.fields, Field("c", int)])
    packed = old.pack([(1, 2), (3, 4)])
    for _ in range(2):
        count, (c, a) = new.columns(packed, [2, 0])
        assert (count, c, list(a)) == (2, None, [1, 3])
