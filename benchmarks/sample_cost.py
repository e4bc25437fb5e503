"""What producing one sample of an 8-GPU node costs in Python, for the two collectors that make them:

- the NVML collector, apart from NVML's own time: the tests' fake NVML (``tests/agents/fakes.py``)
  answers, installed into pynvml without mocks, and the time spent inside its answers is measured
  and taken off, so what is left is the collector's readers, field-value batch, range checks and
  message building;
- the simulated node (``agents.simulator``, 8 GPUs and 8 ports, with a flapping port and a hot GPU),
  which the fleet simulator runs a thousand of in one process.

    python benchmarks/sample_cost.py [--samples 2000]

A node samples once a second: 10,000 µs per sample is 1 % of one core (for the simulator, of the
fleet's process per 1,000 nodes: 10 µs). The last line printed is JSON:
{"nvml_collector_us": ..., "fake_nvml_us": ..., "nvml_calls": ..., "simulated_node_us": ..., ...}
"""

import argparse
import itertools
import json
import sys
import time
import timeit
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pynvml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.collectors.nvml import NvmlCollector  # noqa: E402
from agents.simulator.collector import SimulatedCollector  # noqa: E402
from tests.agents.fakes import DISCOVERY_FUNCTIONS, SAMPLE_FUNCTIONS, SYSTEM_FUNCTIONS, FakeGpu, FakeNvml  # noqa: E402

T0 = 1_760_000_000.0


class Stopwatch:
    """Time and calls spent inside the functions it wraps."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def wrap(self, function: Callable) -> Callable:
        def timed(*args: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args)
            finally:
                self.seconds += time.perf_counter() - started
                self.calls += 1

        return timed


@contextmanager
def fake_nvml(fake: FakeNvml, stopwatch: Stopwatch) -> Iterator[None]:
    with ExitStack() as stack:
        for name in (*SYSTEM_FUNCTIONS, *DISCOVERY_FUNCTIONS, *SAMPLE_FUNCTIONS):
            stack.enter_context(mock.patch.object(pynvml, name, new=stopwatch.wrap(getattr(fake, name))))
        yield


def nvml_collector(samples: int) -> dict:
    fake = FakeNvml([FakeGpu(index) for index in range(8)])
    stopwatch = Stopwatch()
    with fake_nvml(fake, stopwatch):
        collector = NvmlCollector(hostname="bench-001")
        for second in range(3):  # the first samples find out what each GPU supports
            collector.sample(T0 + second)
        stopwatch.seconds, stopwatch.calls = 0.0, 0
        started = time.perf_counter()
        for second in range(samples):
            collector.sample(T0 + 3 + second)
        elapsed = time.perf_counter() - started
        inside_nvml, calls = stopwatch.seconds, stopwatch.calls
        collector.close()
    return {
        "nvml_collector_us": round((elapsed - inside_nvml) / samples * 1e6, 1),
        "fake_nvml_us": round(inside_nvml / samples * 1e6, 1),
        "nvml_calls": calls / samples,
    }


def simulated_node(samples: int) -> dict:
    faults = "bench-001:flap@0:mlx5_2, bench-001:gpu1:thermal@0"
    collector = SimulatedCollector("h100", "bench-001", seed=7, faults=faults, start=T0)
    clock = itertools.count(1)
    best = min(timeit.repeat(lambda: collector.sample(T0 + next(clock)), number=samples, repeat=5)) / samples
    return {"simulated_node_us": round(best * 1e6, 1)}


REPORT = """\
NVML collector:  {nvml_collector_us:.1f} µs per sample, NVML's time aside
  (fake NVML:    {fake_nvml_us:.1f} µs in {nvml_calls:g} calls)
simulated node:  {simulated_node_us:.1f} µs per sample (best of 5)"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=2000, help="samples timed per collector (default 2000)")
    samples = parser.parse_args().samples
    result = {**nvml_collector(samples), **simulated_node(samples), "gpus": 8, "samples": samples}
    print(REPORT.format(**result))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
