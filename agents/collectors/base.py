"""What the agent needs from a source of GPU and network facts: the real NVML and sysfs readers,
or the simulated backend the fleet simulator uses. The agent loop cannot tell them apart, except
that a simulated collector says so (and so does everything it reports)."""

from typing import Protocol

from agents.protocol import GpuEvent, Inventory, NodeSample


class Collector(Protocol):
    simulated: bool

    def discover(self) -> Inventory:
        """GPUs, ports and host facts, as they are now (sent on connect and when they change)."""
        ...

    def sample(self, now: float) -> NodeSample:
        """One sample of every GPU and port, stamped ``now`` (seconds since the epoch)."""
        ...

    def drain_events(self) -> list[GpuEvent]:
        """Events (XIDs and the like) seen since the last call, oldest first."""
        ...

    def close(self) -> None: ...
