"""What a simulated node is: an 8-GPU HGX/DGX-class server of one GPU model, with its host and its
InfiniBand HCAs, described by the figures NVML, sysfs and /proc show on the real machine."""

from dataclasses import dataclass
from typing import Final

# PCI bus ids of the eight GPUs, as the HGX baseboards lay them out.
HGX_HOPPER_BUSES: Final = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
HGX_AMPERE_BUSES: Final = ("07", "0f", "47", "4e", "87", "90", "b7", "bd")


@dataclass(frozen=True)
class Profile:
    key: str
    name: str  # as nvmlDeviceGetName says it
    memory_mib: int  # as nvmlDeviceGetMemoryInfo says it (a little under the marketing figure)
    power_limit_w: float
    idle_power_w: float
    max_sm_clock_mhz: int
    idle_sm_clock_mhz: int
    mem_clock_mhz: int
    pcie_gen: int
    nvlink_links: int
    nvswitch_links: tuple[int, ...]  # how the links spread over the baseboard's NVSwitch chips
    nvlink_peak_kbps: int  # one direction, all links
    ib_rate_gbps: float
    ib_rate_text: str  # the sysfs rate line
    pci_buses: tuple[str, ...]
    serial_prefix: str
    driver_version: str
    cuda_version: str
    cpu_model: str
    cpu_count: int
    host_memory_gib: float
    gpus: int = 8
    ib_ports: int = 8
    # Thermals: the GPU settles at inlet + resistance × power (°C); ~70 °C at the power limit.
    inlet_c: float = 30.0
    slowdown_c: float = 85.0  # software thermal slowdown starts
    hw_slowdown_c: float = 92.0  # hardware thermal slowdown

    @property
    def thermal_resistance(self) -> float:
        return 40.0 / self.power_limit_w

    @property
    def nvswitch_buses(self) -> tuple[str, ...]:
        return tuple(f"0000:{5 + chip:02x}:00.0" for chip in range(len(self.nvswitch_links)))


H100: Final = Profile(
    key="h100",
    name="NVIDIA H100 80GB HBM3",
    memory_mib=81559,
    power_limit_w=700.0,
    idle_power_w=70.0,
    max_sm_clock_mhz=1980,
    idle_sm_clock_mhz=345,
    mem_clock_mhz=2619,
    pcie_gen=5,
    nvlink_links=18,
    nvswitch_links=(5, 4, 4, 5),
    nvlink_peak_kbps=450_000_000,  # 450 GB/s each way (NVLink 4)
    ib_rate_gbps=400.0,
    ib_rate_text="400 Gb/sec (4X NDR)",
    pci_buses=HGX_HOPPER_BUSES,
    serial_prefix="16549",
    driver_version="550.90.07",
    cuda_version="12.4",
    cpu_model="Intel(R) Xeon(R) Platinum 8480C",
    cpu_count=224,
    host_memory_gib=2015.6,
)

H200: Final = Profile(
    key="h200",
    name="NVIDIA H200",
    memory_mib=143771,
    power_limit_w=700.0,
    idle_power_w=75.0,
    max_sm_clock_mhz=1980,
    idle_sm_clock_mhz=345,
    mem_clock_mhz=3201,
    pcie_gen=5,
    nvlink_links=18,
    nvswitch_links=(5, 4, 4, 5),
    nvlink_peak_kbps=450_000_000,
    ib_rate_gbps=400.0,
    ib_rate_text="400 Gb/sec (4X NDR)",
    pci_buses=HGX_HOPPER_BUSES,
    serial_prefix="16524",
    driver_version="560.35.03",
    cuda_version="12.6",
    cpu_model="Intel(R) Xeon(R) Platinum 8480C",
    cpu_count=224,
    host_memory_gib=2015.6,
)

B200: Final = Profile(
    key="b200",
    name="NVIDIA B200",
    memory_mib=183359,
    power_limit_w=1000.0,
    idle_power_w=140.0,
    max_sm_clock_mhz=1965,
    idle_sm_clock_mhz=420,
    mem_clock_mhz=3996,
    pcie_gen=5,
    nvlink_links=18,
    nvswitch_links=(9, 9),
    nvlink_peak_kbps=900_000_000,  # NVLink 5
    ib_rate_gbps=400.0,
    ib_rate_text="400 Gb/sec (4X NDR)",
    pci_buses=HGX_HOPPER_BUSES,
    serial_prefix="17812",
    driver_version="570.124.06",
    cuda_version="12.8",
    cpu_model="Intel(R) Xeon(R) Platinum 8570",
    cpu_count=224,
    host_memory_gib=4031.4,
)

A100: Final = Profile(
    key="a100",
    name="NVIDIA A100-SXM4-80GB",
    memory_mib=81920,
    power_limit_w=400.0,
    idle_power_w=60.0,
    max_sm_clock_mhz=1410,
    idle_sm_clock_mhz=210,
    mem_clock_mhz=1593,
    pcie_gen=4,
    nvlink_links=12,
    nvswitch_links=(2, 2, 2, 2, 2, 2),
    nvlink_peak_kbps=300_000_000,  # NVLink 3
    ib_rate_gbps=200.0,
    ib_rate_text="200 Gb/sec (4X HDR)",
    pci_buses=HGX_AMPERE_BUSES,
    serial_prefix="13231",
    driver_version="535.183.01",
    cuda_version="12.2",
    cpu_model="AMD EPYC 7742 64-Core Processor",
    cpu_count=256,
    host_memory_gib=1007.7,
)

PROFILES: Final = {profile.key: profile for profile in (H100, H200, B200, A100)}


def profile_named(key: str) -> Profile:
    try:
        return PROFILES[key.lower()]
    except KeyError:
        raise ValueError(f"Unknown GPU profile {key!r}; expected one of {', '.join(sorted(PROFILES))}.") from None
