"""What can be seen on a node, before it becomes (or repeats) a failure.

An ``Observation`` is one sighting: an XID or other event from the agent, a counter that moved in
telemetry, a node whose heartbeats stopped, a GPU that runs below its siblings. Each carries a
``Condition``: the code that identifies it (repeats of the same code on the same GPU or port
collapse into one failure), its kind, severity, title and recommended action. XIDs take theirs
from the XID catalog (apps/failures/xid.py); everything else is listed here.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from apps.failures import xid as catalog
from apps.failures.choices import FailureKind, Severity, most_severe


@dataclass(frozen=True)
class Condition:
    code: str
    kind: FailureKind
    severity: Severity
    title: str
    action: str


def xid_condition(code: int) -> Condition:
    entry = catalog.lookup(code)
    return Condition(catalog.condition_code(code), FailureKind.XID, entry.severity, entry.title, entry.action)


XID_WITHOUT_CODE = Condition(
    "xid-unknown",
    FailureKind.XID,
    Severity.WARNING,
    "XID event without a code",
    "The agent reported an XID but not its number: read the driver's message in the node's kernel log "
    "(dmesg | grep -i xid) and look it up in NVIDIA's XID catalog.",
)
ECC_UNCORRECTED = Condition(
    catalog.ECC_UNCORRECTED,
    FailureKind.ECC,
    Severity.ERROR,
    "Uncorrected ECC errors",
    "Uncorrectable memory errors were counted on this GPU: drain the node and reset the GPU so the memory is "
    "retired or remapped (nvidia-smi -q -d ECC,ROW_REMAPPER shows both). If they recur, RMA the GPU.",
)
ROW_REMAP_PENDING = Condition(
    catalog.ROW_REMAP_PENDING,
    FailureKind.ROW_REMAP,
    Severity.WARNING,
    "Row remapping pending",
    "A memory row is waiting to be remapped: reset the GPU at the next idle window (drain the node when "
    "convenient) to activate it. No replacement needed unless remapping fails.",
)
ROW_REMAP_FAILED = Condition(
    catalog.ROW_REMAP_FAILED,
    FailureKind.ROW_REMAP,
    Severity.CRITICAL,
    "Row remapping failed",
    "The GPU could not remap a failing memory row (no spare rows left): drain the node and RMA the GPU.",
)
NVLINK_ERROR = Condition(
    catalog.NVLINK_ERROR,
    FailureKind.NVLINK,
    Severity.ERROR,
    "NVLink errors",
    "Check the NVLink state (nvidia-smi nvlink -s and -e) and the fabric manager log; reset the GPUs on the "
    "link. If errors persist after a reset, RMA the GPU or the NVSwitch board.",
)
PCIE_ERROR = Condition(
    catalog.PCIE_ERROR,
    FailureKind.PCIE,
    Severity.WARNING,
    "PCIe errors",
    "Check the PCIe link (nvidia-smi -q -d PCIE: replay counter, current width and generation against the "
    "maximum). A degraded or erroring link needs the GPU reseated and its riser or cable checked.",
)
THERMAL = Condition(
    "thermal",
    FailureKind.THERMAL,
    Severity.WARNING,
    "Thermal slowdown",
    "The GPU is throttling for heat: check inlet temperature, fans and airflow in the rack. If only this GPU "
    "runs hot, check its heatsink and thermal interface at the next maintenance window.",
)
POWER_BRAKE = Condition(
    "power-brake",
    FailureKind.POWER,
    Severity.ERROR,
    "Power brake slowdown",
    "The board is holding the GPU's clocks down for its power supply (the power brake, or a hardware slowdown "
    "with no heat behind it): check the node's PSUs and power shelf in the BMC (ipmitool sdr, the SEL). If every "
    "GPU of the node or rack brakes, it is the power feed; drain the node if it lasts.",
)
PORT_DOWN = Condition(
    "port-down",
    FailureKind.INFINIBAND,
    Severity.ERROR,
    "Network port down or flapping",
    "Check the port (ibstat, ibdiagnet) and its switch port's counters; reseat or replace the cable or "
    "transceiver if the link keeps going down. Jobs using this rail will slow down or hang meanwhile.",
)
NODE_UNREACHABLE = Condition(
    "node-unreachable",
    FailureKind.LIVENESS,
    Severity.CRITICAL,
    "Node unreachable",
    "The node's agent stopped sending heartbeats: check the node's power and BMC, its management network, "
    "and the agent (systemctl status cp-agent). Resolves itself when the agent reconnects.",
)
STRAGGLER = Condition(
    "straggler",
    FailureKind.STRAGGLER,
    Severity.WARNING,
    "Straggler under load",
    "Runs well below its peers while they are busy, and the slowest one sets the speed of the whole job. "
    "Check clocks and throttle reasons (nvidia-smi -q -d PERFORMANCE,POWER), power limits and cooling; "
    "run a burn-in before putting it back into a large job.",
)
DUPLICATE_GPU_IDENTITY = Condition(
    "duplicate-gpu-identity",
    FailureKind.IDENTITY,
    Severity.ERROR,
    "Duplicate GPU identity",
    "Two live nodes report the same GPU UUID, GPU serial or HCA port GUID, so one of them is wrong: a "
    "cloned disk image or agent state, a copied credential, or a misbehaving agent. Compare nvidia-smi -q "
    "and ibstat on both nodes; the inventory keeps the first node's rows until the other stops reporting them.",
)
CLOCK_SKEW = Condition(
    "clock-skew",
    FailureKind.CLOCK,
    Severity.WARNING,
    "Clock skew",
    "The node's clock is ahead of the control plane's by more than the allowed skew, so its samples are "
    "refused. Check time sync on the node (chronyc tracking or timedatectl): a drifting clock also breaks "
    "NCCL timeouts and the correlation of logs across nodes.",
)

# Agent events without an XID, by the protocol's event kind.
EVENT_CONDITIONS: Final[dict[str, Condition]] = {
    "ecc": ECC_UNCORRECTED,
    "thermal": THERMAL,
    "pcie": PCIE_ERROR,
    "nvlink": NVLINK_ERROR,
    "port": PORT_DOWN,
}


@dataclass(frozen=True)
class Observation:
    """One sighting of a condition on a node (on one of its GPUs or ports, or on the node itself)."""

    node_id: int
    at: datetime
    condition: Condition
    gpu_index: int | None = None
    port_name: str = ""  # "mlx5_0/1": device and port number
    xid: int | None = None
    detail: str = ""  # the sighting's own words: the driver's message, the counter's values
    recovery_action: int | None = None  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION when the agent reported one

    @property
    def severity(self) -> Severity:
        """The condition's severity, raised to what NVML's recovery action says the GPU needs."""
        if self.recovery_action is None:
            return self.condition.severity
        return most_severe(self.condition.severity, catalog.recovery_action(self.recovery_action).severity)
