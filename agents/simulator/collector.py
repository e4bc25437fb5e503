"""The simulated backend behind the ``Collector`` interface: what the fleet simulator's agents use
instead of NVML and sysfs. Its identity (UUIDs, serials, PCI ids, GUIDs) is as deterministic as its
dynamics: the same hostname and seed give the same node every time."""

import random
import uuid
from collections.abc import Iterable

from agents.protocol import GpuEvent, GpuInfo, HostFacts, Inventory, NodeSample, NvLinkPeer, PortInfo
from agents.simulator.faults import FaultSpec, parse_fault_spec
from agents.simulator.hardware import PCIE_WIDTH
from agents.simulator.model import NodeDied, NodeModel
from agents.simulator.profiles import Profile, profile_named
from agents.simulator.workloads import Training, Workload

SIMULATED_KERNEL = "5.15.0-119-generic"
SIMULATED_OS = "Ubuntu 22.04.4 LTS"
MELLANOX_OUI = 0xB8599F  # the vendor part (the top 24 bits) of a ConnectX HCA's GUID
# The frontend NIC (storage, SSH, the control plane) next to the compute HCAs: the next mlx5 device,
# an Ethernet port that discovery reports and telemetry leaves out, as on an HGX node.
FRONTEND_RATE_GBPS = 200.0


class SimulatedCollector:
    simulated = True

    def __init__(
        self,
        profile: Profile | str,
        hostname: str,
        seed: int = 0,
        faults: Iterable[FaultSpec] | str = (),
        workload: Workload | None = None,
        start: float | None = None,
    ) -> None:
        """``faults`` may be FaultSpecs or the text format (``faults.py``); only those for this
        ``hostname`` (or ``*``) apply. ``start`` is the epoch time of simulation time 0 (default:
        the first sample's time). Raises FaultSpecError for a fault this node cannot have."""
        self.profile = profile_named(profile) if isinstance(profile, str) else profile
        self.hostname = hostname
        specs = parse_fault_spec(faults) if isinstance(faults, str) else list(faults)
        self.model = NodeModel(
            self.profile,
            hostname,
            seed,
            workload if workload is not None else Training(),
            faults=[spec for spec in specs if spec.applies_to(hostname)],
            start=start,
        )
        self._identity = _Identity(self.profile, hostname, seed)

    @property
    def dead(self) -> bool:
        return self.model.died_at is not None

    def discover(self) -> Inventory:
        """Raises ``NodeDied`` once the node has died."""
        profile, identity, model = self.profile, self._identity, self.model
        if model.died_at is not None:
            raise NodeDied(self.hostname, model.died_at)
        gpus = [
            GpuInfo(
                index=gpu.index,
                uuid=identity.uuids[gpu.index],
                name=profile.name,
                serial=identity.serials[gpu.index],
                memory_mib=profile.memory_mib,
                pci_bus_id=f"0000:{profile.pci_buses[gpu.index]}:00.0",
                power_limit_w=profile.power_limit_w,
                pcie_gen=profile.pcie_gen,
                pcie_width=PCIE_WIDTH,
                pcie_width_current=gpu.pcie_width,
                slowdown_temp_c=profile.slowdown_c,
                nvlinks=identity.nvlinks(gpu.inactive_links),
            )
            for gpu in model.gpus
            if gpu.present
        ]
        ports = [
            PortInfo(
                device=port.device,
                port=1,
                kind="infiniband",
                rate_gbps=profile.ib_rate_gbps,
                state=port.state,
                physical_state="LinkUp" if port.state == "active" else "LinkErrorRecovery",
                guid=identity.port_guids[number],
            )
            for number, port in enumerate(model.ports)
        ]
        ports.append(
            PortInfo(
                device=f"mlx5_{len(model.ports)}",
                port=1,
                kind="ethernet",
                rate_gbps=FRONTEND_RATE_GBPS,
                state="active",
                physical_state="LinkUp",
            )
        )
        host = HostFacts(
            hostname=self.hostname,
            driver_version=profile.driver_version,
            cuda_version=profile.cuda_version,
            kernel=SIMULATED_KERNEL,
            os=SIMULATED_OS,
            cpu_model=profile.cpu_model,
            cpu_count=profile.cpu_count,
            memory_gib=profile.host_memory_gib,
        )
        return Inventory(host=host, gpus=gpus, ports=ports)

    def sample(self, now: float) -> NodeSample:
        """Raises ``NodeDied`` once the node has died."""
        gpus, ports = self.model.sample(now)
        return NodeSample(ts=now, gpus=gpus, ports=ports)

    def drain_events(self) -> list[GpuEvent]:
        events, self.model.events = self.model.events, []
        return events

    def close(self) -> None:
        pass


class _Identity:
    """Serial numbers and ids that look like a real node's and never change for (hostname, seed)."""

    def __init__(self, profile: Profile, hostname: str, seed: int) -> None:
        rng = random.Random(f"{seed}:{hostname}:identity")
        self.uuids = [f"GPU-{uuid.UUID(int=rng.getrandbits(128), version=4)}" for _ in range(profile.gpus)]
        # Wide enough that a simulated fleet of thousands never repeats one: the gateway refuses a serial or
        # GUID another online node reports (apps/gateway/identity.py). Real ones are unique by manufacture.
        self.serials = [f"{profile.serial_prefix}{rng.randrange(10**12):012d}" for _ in range(profile.gpus)]
        self.port_guids = [_guid(MELLANOX_OUI << 40 | rng.getrandbits(40)) for _ in range(profile.ib_ports)]
        self.nvlink_peers = [
            bus for bus, links in zip(profile.nvswitch_buses, profile.nvswitch_links, strict=True) for _ in range(links)
        ]

    def nvlinks(self, inactive: set[int]) -> list[NvLinkPeer]:
        """Each link to its NVSwitch; a link that went down (XID 74) is inactive and shows no peer."""
        return [
            NvLinkPeer(link=link, active=False)
            if link in inactive
            else NvLinkPeer(link=link, active=True, peer_pci_bus_id=switch)
            for link, switch in enumerate(self.nvlink_peers)
        ]


def _guid(value: int) -> str:
    """A 64-bit GUID as ibstat writes it: b859:9f03:00a1:b2c3."""
    digits = f"{value:016x}"
    return ":".join(digits[i : i + 4] for i in range(0, 16, 4))
