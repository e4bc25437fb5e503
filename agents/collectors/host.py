"""The collector ``cp-agent run`` uses on a real GPU node: NVML for the GPUs, sysfs for the
InfiniBand and RoCE ports, /proc for the host facts."""

from pathlib import Path

import msgspec

from agents.collectors.infiniband import SYSFS_ROOT, InfiniBandCollector
from agents.collectors.nvml import NvmlCollector
from agents.protocol import GpuEvent, Inventory, NodeSample


class NodeCollector:
    simulated = False

    def __init__(self, gpus: NvmlCollector, ports: InfiniBandCollector) -> None:
        self._gpus = gpus
        self._ports = ports

    @classmethod
    def open(cls, hostname: str | None = None, infiniband_root: Path = SYSFS_ROOT) -> "NodeCollector":
        """Raises ``NvmlUnavailable`` with a clear message when the NVIDIA driver cannot be used."""
        return cls(NvmlCollector(hostname), InfiniBandCollector(infiniband_root))

    def discover(self) -> Inventory:
        return msgspec.structs.replace(self._gpus.discover(), ports=self._ports.discover())

    def sample(self, now: float) -> NodeSample:
        gpus = self._gpus.sample(now)
        gpus.ports = self._ports.sample(now)
        return gpus

    def drain_events(self) -> list[GpuEvent]:
        return sorted(self._gpus.drain_events() + self._ports.drain_events(), key=lambda event: event.ts)

    def close(self) -> None:
        try:
            self._ports.close()
        finally:
            self._gpus.close()
