"""The compiled packer (apps/telemetry/_packing.c) gives the very bytes the Python packer gives, and
leaves to it what it does not handle."""

import random

import pytest

from apps.telemetry import packing
from apps.telemetry.models import GPU_PACKING, PORT_PACKING, ROLLUP_PACKING
from apps.telemetry.models.samples import items
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


@compiled
def test_every_protocol_field_packs_the_same():
    gpus = items(GPU_PACKING, [every_gpu_field(i, high=i % 2 == 0) for i in range(8)])
    ports = items(PORT_PACKING, [every_port_field(f"mlx5_{i}", high=i == 0) for i in range(4)])
    assert packing._compiled.pack(GPU_PACKING._spec, gpus) == GPU_PACKING.pack_in_python(gpus)
    assert packing._compiled.pack(PORT_PACKING._spec, ports) == PORT_PACKING.pack_in_python(ports)


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


def test_rollups_pack_and_unpack_through_either_packer():
    rollup = [(i, 60, *([60, 1, 100, 3] * ((len(ROLLUP_PACKING.fields) - 2) // 4))) for i in range(8)]
    assert ROLLUP_PACKING.unpack(ROLLUP_PACKING.pack(rollup)) == ROLLUP_PACKING.unpack(
        ROLLUP_PACKING.pack_in_python(rollup)
    )
