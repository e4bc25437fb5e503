"""Sampling the real NVML collector over a fake NVML (tests/agents/fakes.py), for its tests."""

from agents.collectors.nvml import NvmlCollector
from agents.protocol import GpuSample
from tests.agents.fakes import FakeNvml

T0 = 1_750_000_000.0
ALL_FIELDS = frozenset(GpuSample.__struct_fields__) - {"index"}


def collect(fake: FakeNvml, samples: int = 2) -> tuple[NvmlCollector, list]:
    """Samples one second apart with traffic in between, so the counter rates exist."""
    collector = NvmlCollector(hostname="gpu-001")
    taken = []
    for second in range(samples):
        if second:
            for gpu in fake.gpus:
                gpu.advance(1.0)
        taken.append(collector.sample(T0 + second))
    return collector, taken


def present(sample: GpuSample) -> set[str]:
    return {name for name in ALL_FIELDS if getattr(sample, name) is not None}
