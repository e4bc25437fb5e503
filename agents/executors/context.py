"""What a check is handed besides its parameters: where its lines go, the result it fills in, and
the node's facilities (its collector, the tools on PATH), injectable so tests can hand their own."""

import shutil
from collections.abc import Callable
from dataclasses import dataclass

from agents.collectors.base import Collector
from agents.executors.reporter import Reporter
from agents.executors.results import ResultBuilder
from agents.executors.runtime import open_node_collector
from agents.protocol import GpuInfo


@dataclass
class CheckContext:
    reporter: Reporter
    result: ResultBuilder
    open_collector: Callable[[], Collector | None] = open_node_collector
    which: Callable[[str], str | None] = shutil.which

    def gpus(self) -> list[GpuInfo]:
        """The node's GPUs as its collector discovers them (none without NVML)."""
        collector = self.open_collector()
        if collector is None:
            return []
        try:
            return collector.discover().gpus
        finally:
            collector.close()
