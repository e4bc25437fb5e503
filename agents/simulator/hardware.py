"""A simulated node's hardware as the agent's collectors would read it: each GPU's and port's counters,
flags and link state (``SimGpu``, ``SimPort``), NVML's clock event reason bits and recovery actions, and
the XIDs the driver reports. How they change under a workload and faults is ``model.py``'s."""

import random
from typing import Final

from agents.protocol import PortSample, PortState

# Clock event reason bits, as nvmlDeviceGetCurrentClocksEventReasons reports them.
GPU_IDLE: Final = 0x1
SW_POWER_CAP: Final = 0x4
HW_SLOWDOWN: Final = 0x8
SW_THERMAL_SLOWDOWN: Final = 0x20
HW_THERMAL_SLOWDOWN: Final = 0x40

# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION values.
RECOVERY_NONE: Final = 0
RECOVERY_GPU_RESET: Final = 1
RECOVERY_DRAIN_AND_RESET: Final = 4

PCIE_WIDTH: Final = 16  # lanes a healthy GPU link trains at

# (event text, recovery action) of each XID, as the driver reports them.
XIDS: Final = {
    79: ("GPU has fallen off the bus.", None),
    48: ("An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer.", RECOVERY_GPU_RESET),
    94: ("Contained ECC error.", RECOVERY_NONE),
    95: ("Uncontained ECC error.", RECOVERY_DRAIN_AND_RESET),
    63: ("Row Remapper: New row marked for remapping, reset GPU to activate.", RECOVERY_GPU_RESET),
    64: ("Row Remapper: Failed to remap a row.", RECOVERY_DRAIN_AND_RESET),
    74: ("NVLink: fatal error detected on link {link}.", RECOVERY_GPU_RESET),
}


class SimGpu:
    __slots__ = (
        "ecc_corrected_aggregate",
        "ecc_corrected_volatile",
        "ecc_uncorrected_aggregate",
        "ecc_uncorrected_volatile",
        "inactive_links",
        "index",
        "inlet_offset_c",
        "memory_share",
        "nvlink_crc_errors",
        "nvlink_recovery_errors",
        "nvlink_replay_errors",
        "pcie_replay_count",
        "pcie_width",
        "power_offset_w",
        "present",
        "recovery_action",
        "remapped_rows_correctable",
        "remapped_rows_failed",
        "remapped_rows_pending",
        "remapped_rows_uncorrectable",
        "resistance",
        "straggler",
        "temp_c",
        "util_offset",
    )

    def __init__(self, index: int, rng: random.Random) -> None:
        self.index = index
        self.present = True
        # How this GPU differs from its siblings: silicon, its place in the airflow, its allocator.
        self.util_offset = rng.uniform(-1.0, 1.0)
        self.power_offset_w = rng.uniform(-5.0, 5.0)
        self.inlet_offset_c = rng.uniform(-3.0, 3.0)
        self.memory_share = rng.uniform(0.97, 1.0)
        self.resistance = 1.0
        self.straggler = False
        self.temp_c = 0.0
        self.ecc_corrected_volatile = 0
        self.ecc_uncorrected_volatile = 0
        self.ecc_corrected_aggregate = rng.choice((0, 0, 0, 0, 1, 2, 7))
        self.ecc_uncorrected_aggregate = 0
        self.remapped_rows_correctable = self.ecc_corrected_aggregate // 4
        self.remapped_rows_uncorrectable = 0
        self.remapped_rows_pending = False
        self.remapped_rows_failed = False
        self.pcie_replay_count = 0
        self.pcie_width = PCIE_WIDTH  # the width the link trained at
        self.nvlink_crc_errors = 0
        self.nvlink_replay_errors = 0
        self.nvlink_recovery_errors = 0
        self.recovery_action = RECOVERY_NONE
        self.inactive_links: set[int] = set()

    def recommend(self, action: int | None) -> None:
        if action is not None:
            self.recovery_action = max(self.recovery_action, action)


class SimPort:
    __slots__ = (
        "device",
        "downs_seen",
        "flapping_since",
        "last",
        "link_downed",
        "rcv_errors",
        "rx_bytes",
        "symbol_errors",
        "tx_bytes",
    )

    def __init__(self, device: str) -> None:
        self.device = device
        self.flapping_since: float | None = None
        self.downs_seen = 0
        self.symbol_errors = 0
        self.link_downed = 0
        self.rcv_errors = 0
        self.tx_bytes = 0
        self.rx_bytes = 0
        self.last: PortSample | None = None

    @property
    def state(self) -> PortState:
        return self.last.state if self.last is not None else "active"
