"""The compiled packer (apps/telemetry/_packing.c) gives the very bytes the Python packer gives, and
leaves to it what it does not handle."""

import random
from types import SimpleNamespace

import pytest

from agents.protocol import GpuSample
from apps.telemetry import packing
from apps.telemetry.models import GPU_PACKING, PORT_PACKING, ROLLUP_PACKING
from tests.telemetry.conftest import every_gpu_field, every_port_field
from tests.telemetry.test_packing import PACKING

compiled = pytest.mark.skipif(packing._compiled is None, reason="apps/telemetry/_packing.c is not built here")


def random_item(rng: random.Random) -> tuple:
    maybe = lambda value: None if rng.random() < 0.2 else value  # noqa: E731
    return (
        maybe(rng.randrange(9)),
        maybe(rng.choice([87.25, rng.uniform(0, 100), 0.005, 0.015])),
        maybe(rng.uniform(-40, 120)),
        maybe(rng.choice([0, 3, 2**40, 2**62])),
        maybe(rng.random() < 0.5),
        maybe(rng.choice(["", "sxm", "x" * 300, "é"])),
    )


@compiled
def test_it_packs_the_bytes_the_python_packer_packs():
    rng = random.Random(13)
    for _ in range(2_000):
        values = [random_item(rng) for _ in range(rng.randrange(10))]
        if rng.random() < 0.3:
            values = [values[0]] * len(values) if values else values
        assert packing._compiled.pack(PACKING._spec, values) == PACKING.pack_in_python(values)


def as_items(packing_: packing.Packing, structs: list) -> list[tuple]:
    return [tuple(getattr(s, name) for name in packing_.names) for s in structs]


SAMPLES = [
    pytest.param(GPU_PACKING, [every_gpu_field(i, high=i % 2 == 0) for i in range(8)], id="gpus, every field"),
    pytest.param(PORT_PACKING, [every_port_field(f"mlx5_{i}", high=i == 0) for i in range(4)], id="ports, every field"),
    pytest.param(GPU_PACKING, [GpuSample(index=0), GpuSample(index=3, temp_c=-12.25)], id="gpus, most fields absent"),
    pytest.param(GPU_PACKING, [], id="no gpu"),
]


@compiled
@pytest.mark.parametrize(("packing_", "structs"), SAMPLES)
def test_every_protocol_field_packs_the_same(packing_, structs):
    values = as_items(packing_, structs)
    assert packing._compiled.pack(packing_._spec, values) == packing_.pack_in_python(values)


@compiled
@pytest.mark.parametrize(("packing_", "structs"), SAMPLES)
def test_protocol_structs_pack_from_their_slots_as_their_tuples_do(packing_, structs):
    kind = type(structs[0]) if structs else GpuSample
    offsets = packing._compiled.slot_offsets(kind, packing_.names)
    assert offsets is not None
    packed = packing._compiled.pack_structs(packing_._spec, kind, offsets, structs)
    assert packed == packing_.pack_in_python(as_items(packing_, structs))
    assert packing_.pack_objects(structs) == packed


@compiled
@pytest.mark.parametrize(
    "values",
    [
        pytest.param([(0, 1, 0.0, 0, False, "a")], id="an integer in a float field"),
        pytest.param([(0, 1.0, 0.0, -1, False, "a")], id="below the lower bound"),
        pytest.param([(0, 1.0, 0.0, 2**64, False, "a")], id="past 63 bits"),
        pytest.param([(0, 1.0)], id="too few values"),
        pytest.param(((0, 1.0, 0.0, 0, False, "a"),), id="not a list"),
        pytest.param([(0, 1.0, 0.0, 0, False, "\udc80")], id="a lone surrogate"),
    ],
)
def test_it_leaves_the_unusual_to_the_python_packer(values):
    assert packing._compiled.pack(PACKING._spec, values) is None


@compiled
def test_objects_other_than_the_structs_slots_were_read_for_go_to_the_python_packer():
    class Gpu(GpuSample):  # a subclass: its instances are not exactly the type the offsets are of
        pass

    offsets = packing._compiled.slot_offsets(GpuSample, GPU_PACKING.names)
    gpus = [GpuSample(index=0, util_gpu=1.0), Gpu(index=1, util_gpu=2.0)]
    assert packing._compiled.pack_structs(GPU_PACKING._spec, GpuSample, offsets, gpus) is None
    assert GPU_PACKING.pack_objects(gpus) == GPU_PACKING.pack_in_python(as_items(GPU_PACKING, gpus))
    assert packing._compiled.slot_offsets(SimpleNamespace, ("index",)) is None  # not a slot
    plain = [
        SimpleNamespace(**dict(zip(GPU_PACKING.names, values, strict=True))) for values in as_items(GPU_PACKING, gpus)
    ]
    assert GPU_PACKING.pack_objects(plain) == GPU_PACKING.pack_in_python(as_items(GPU_PACKING, gpus))


def test_objects_pack_without_the_compiled_packer_too(monkeypatch):
    monkeypatch.setattr(packing, "_pack_structs", None)
    gpus = [every_gpu_field(i) for i in range(8)]
    assert GPU_PACKING.pack_objects(gpus) == GPU_PACKING.pack_in_python(as_items(GPU_PACKING, gpus))


def test_rollups_pack_and_unpack_through_either_packer():
    rollup = [(i, 60, *([60, 1, 100, 3] * ((len(ROLLUP_PACKING.fields) - 2) // 4))) for i in range(8)]
    assert ROLLUP_PACKING.unpack(ROLLUP_PACKING.pack(rollup)) == ROLLUP_PACKING.unpack(
        ROLLUP_PACKING.pack_in_python(rollup)
    )
