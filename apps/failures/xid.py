"""The XID catalog, kept in code: what each XID the NVIDIA driver logs means and what to do about it.

Wording follows NVIDIA's "XID Errors" documentation (docs.nvidia.com/deploy/xid-errors), written
for the engineer holding the pager: what to do first, and what to do if it comes back. An XID
not listed here maps to a generic entry that says where to look it up, never to a crash.

Two relations drive how failures are linked (apps/failures/recording.py):

- ``fatal``: the GPU cannot run work again until it is reset (or replaced). After a fatal XID the
  driver tears down every context on the GPU, which logs the XIDs in ``side_effects`` (45
  "preemptive cleanup", 43 "GPU stopped processing", ...). Those are linked to the fatal one as
  its side effects instead of raising alarms of their own.
- ``explains``: conditions seen in telemetry counters (an uncorrected ECC count that rose, rows
  pending remapping) that this XID already accounts for, fatal or not; they are linked the same way.

NVML's GPU recovery action (``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``, R550+ drivers) is the driver's
own verdict on what the GPU needs; ``RECOVERY_ACTIONS`` turns its value into words.
"""

from dataclasses import dataclass, field
from typing import Final

import pynvml

from apps.failures.choices import Severity
from apps.failures.choices import XidCategory as Category

# Condition codes of failures seen in telemetry or events without an XID (apps/failures/conditions.py).
ECC_UNCORRECTED: Final = "ecc-uncorrected"
ROW_REMAP_PENDING: Final = "row-remap-pending"
ROW_REMAP_FAILED: Final = "row-remap-failed"
NVLINK_ERROR: Final = "nvlink-error"
PCIE_ERROR: Final = "pcie-error"

# What the driver logs when it tears down the contexts of a GPU that just failed.
_TEARDOWN_XIDS: Final = frozenset({13, 31, 43, 45, 154})


@dataclass(frozen=True)
class XidEntry:
    code: int
    name: str
    severity: Severity
    category: Category
    action: str  # what to do, in an ops engineer's words
    fatal: bool = False
    side_effects: frozenset[int] = field(default_factory=frozenset)
    explains: frozenset[str] = field(default_factory=frozenset)
    known: bool = True  # False for the generic entry of an XID the catalog does not list

    @property
    def title(self) -> str:
        return f"XID {self.code}: {self.name}"


_NOTHING: Final[frozenset] = frozenset()


def _fatal(
    code: int,
    name: str,
    severity: Severity,
    category: Category,
    action: str,
    *,
    also_side_effects: frozenset[int] = _NOTHING,
    explains: frozenset[str] = _NOTHING,
) -> XidEntry:
    """A fatal XID: the GPU needs a reset, and the context teardown that follows is its side effect."""
    side_effects = _TEARDOWN_XIDS | also_side_effects
    return XidEntry(code, name, severity, category, action, fatal=True, side_effects=side_effects, explains=explains)


_ENTRIES: tuple[XidEntry, ...] = (
    XidEntry(
        13,
        "Graphics engine exception",
        Severity.WARNING,
        Category.APPLICATION,
        "Usually the application (an out-of-range access or illegal instruction in a kernel): restart it and "
        "debug with compute-sanitizer. If it repeats on this GPU with different applications, run diagnostics "
        "(dcgmi diag -r 3).",
    ),
    XidEntry(
        31,
        "GPU memory page fault",
        Severity.WARNING,
        Category.APPLICATION,
        "Usually the application accessed memory it does not own: restart it and debug with compute-sanitizer. "
        "If it repeats on this GPU with different applications, run diagnostics (dcgmi diag -r 3).",
    ),
    XidEntry(
        32,
        "Invalid or corrupted push buffer stream",
        Severity.ERROR,
        Category.PCIE,
        "Data was corrupted on its way to the GPU (PCIe bus, system memory or driver). Check the PCIe link "
        "(nvidia-smi -q -d PCIE: replays, width, generation) and the host's memory errors; reset the GPU if "
        "it repeats, reseat it if the link is degraded.",
    ),
    XidEntry(
        38,
        "Driver firmware error",
        Severity.ERROR,
        Category.DRIVER,
        "Restart the application; if it repeats, reset the GPU and check the driver and GPU firmware versions "
        "against NVIDIA's release notes. Contact NVIDIA support if it persists on a supported driver.",
    ),
    XidEntry(
        43,
        "GPU stopped processing",
        Severity.WARNING,
        Category.APPLICATION,
        "The application's context was stopped (a fault in the application, or the driver cleaning up after "
        "another error). The GPU stays usable: restart the application. Look at XIDs logged just before it.",
    ),
    XidEntry(
        45,
        "Preemptive cleanup, due to previous errors",
        Severity.INFO,
        Category.APPLICATION,
        "A side effect: the driver ended the GPU's contexts because of an earlier error, or because a process "
        "was killed. No action on its own; look at the XID logged before it on this GPU.",
    ),
    _fatal(
        46,
        "GPU stopped processing (timeout)",
        Severity.CRITICAL,
        Category.GPU,
        "The GPU stopped responding. Drain the node and reset the GPU; if it recurs, run diagnostics and "
        "plan a replacement.",
    ),
    _fatal(
        48,
        "Double-bit ECC error",
        Severity.CRITICAL,
        Category.MEMORY,
        "Uncorrectable memory error: drain the node and reset the GPU (the reset retires the page or remaps "
        "the row). If it recurs or XID 64 follows, RMA the GPU.",
        also_side_effects=frozenset({63, 94, 95}),
        explains=frozenset({ECC_UNCORRECTED, ROW_REMAP_PENDING}),
    ),
    _fatal(
        61,
        "Internal micro-controller breakpoint/warning",
        Severity.ERROR,
        Category.GPU,
        "Internal micro-controller (PMU) fault: reset the GPU. If it recurs, update the driver and contact "
        "NVIDIA support.",
    ),
    _fatal(
        62,
        "Internal micro-controller halt",
        Severity.CRITICAL,
        Category.GPU,
        "Internal micro-controller (PMU) halted: drain the node and reset the GPU. If it recurs, update the "
        "driver and contact NVIDIA support.",
    ),
    XidEntry(
        63,
        "ECC page retirement or row remapping recording event",
        Severity.WARNING,
        Category.MEMORY,
        "The page retirement or row remap was recorded and is pending: reset the GPU at the next idle window "
        "(drain the node when convenient) to activate it. No replacement needed unless XID 64 follows.",
        explains=frozenset({ROW_REMAP_PENDING}),
    ),
    _fatal(
        64,
        "ECC page retirement or row remapping recording failure",
        Severity.CRITICAL,
        Category.MEMORY,
        "Row remapping failed (no spare rows left or the record could not be written): drain the node and "
        "RMA the GPU; its memory can no longer protect itself.",
        explains=frozenset({ECC_UNCORRECTED, ROW_REMAP_PENDING, ROW_REMAP_FAILED}),
    ),
    XidEntry(
        68,
        "Video processor exception",
        Severity.WARNING,
        Category.GPU,
        "NVDEC/NVENC exception, usually the application's: restart it. If it repeats with different "
        "applications, reset the GPU and run diagnostics.",
    ),
    XidEntry(
        69,
        "Graphics engine class error",
        Severity.ERROR,
        Category.GPU,
        "Restart the application; if it repeats on this GPU, reset the GPU and run diagnostics (dcgmi diag -r 3).",
    ),
    _fatal(
        74,
        "NVLink error",
        Severity.CRITICAL,
        Category.NVLINK,
        "An NVLink went down or saw fatal errors: check the NVLink/NVSwitch state (nvidia-smi nvlink -s, "
        "fabric manager log) and the cables or bridges, then reset the GPUs on the link. If it persists "
        "after a reset, RMA the GPU (or the NVSwitch board).",
        explains=frozenset({NVLINK_ERROR}),
    ),
    _fatal(
        79,
        "GPU has fallen off the bus",
        Severity.CRITICAL,
        Category.PCIE,
        "The GPU is no longer reachable over PCIe: drain the node and reset the GPU (usually a node reboot). "
        "If it recurs, reseat the GPU and check its riser, cabling and power; then replace it.",
        also_side_effects=frozenset({32, 38, 61, 62, 119, 120}),
        explains=frozenset({PCIE_ERROR}),
    ),
    XidEntry(
        92,
        "High single-bit ECC error rate",
        Severity.WARNING,
        Category.MEMORY,
        "Corrected errors are arriving fast: the memory is degrading. Nothing to do right away; run "
        "diagnostics at the next idle window and plan a replacement if the rate stays high.",
    ),
    XidEntry(
        94,
        "Contained ECC error",
        Severity.ERROR,
        Category.MEMORY,
        "An uncorrectable error was contained: the application using that memory was killed, the GPU is OK "
        "for other work. Restart the job; reset the GPU when it is idle to remap the row.",
        explains=frozenset({ECC_UNCORRECTED, ROW_REMAP_PENDING}),
    ),
    _fatal(
        95,
        "Uncontained ECC error",
        Severity.CRITICAL,
        Category.MEMORY,
        "An uncorrectable error could not be contained: every application on the GPU is affected. Drain the "
        "node and reset the GPU; if it recurs, RMA the GPU.",
        also_side_effects=frozenset({63, 94}),
        explains=frozenset({ECC_UNCORRECTED, ROW_REMAP_PENDING}),
    ),
    XidEntry(
        109,
        "Context switch timeout",
        Severity.ERROR,
        Category.APPLICATION,
        "A context did not yield in time, usually the application's doing: restart it. If it repeats with "
        "different applications, reset the GPU and check the driver version.",
    ),
    _fatal(
        119,
        "GSP RPC timeout",
        Severity.CRITICAL,
        Category.DRIVER,
        "The GPU System Processor stopped answering the driver: drain the node and reset the GPU (reboot the "
        "node if the reset fails). If it recurs, update the driver and contact NVIDIA support.",
    ),
    _fatal(
        120,
        "GSP error",
        Severity.CRITICAL,
        Category.DRIVER,
        "The GPU System Processor reported an error: drain the node and reset the GPU (reboot the node if the "
        "reset fails). If it recurs, update the driver and contact NVIDIA support.",
    ),
    XidEntry(
        123,
        "SPI PMU RPC write failure",
        Severity.ERROR,
        Category.DRIVER,
        "The driver could not write the GPU's firmware storage: reset the GPU when it is idle; if it recurs, "
        "contact NVIDIA support.",
    ),
    _fatal(
        140,
        "Unrecovered ECC error",
        Severity.CRITICAL,
        Category.MEMORY,
        "An ECC error the GPU could not recover from: drain the node and reset the GPU; if it recurs, RMA it.",
        explains=frozenset({ECC_UNCORRECTED, ROW_REMAP_PENDING}),
    ),
    XidEntry(
        154,
        "GPU recovery action changed",
        Severity.WARNING,
        Category.DRIVER,
        "The driver says what the GPU now needs (reset, reboot, drain): follow the recovery action shown.",
    ),
)

CATALOG: Final[dict[int, XidEntry]] = {entry.code: entry for entry in _ENTRIES}


def lookup(code: int) -> XidEntry:
    """The catalog entry of an XID; a generic one (warning) when the catalog does not list it."""
    entry = CATALOG.get(code)
    if entry is not None:
        return entry
    return XidEntry(
        code,
        "Unlisted XID",
        Severity.WARNING,
        Category.GPU,
        f"Look up XID {code} in NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors) and check the "
        "kernel log (dmesg) on the node for the driver's message.",
        known=False,
    )


def condition_code(code: int) -> str:
    """How a failure names the condition "XID <code>" (the other conditions are named above)."""
    return f"xid-{code}"


def possible_effects(code: int) -> frozenset[str]:
    """The conditions that are put down to this XID when they come with it: its context teardown if
    it is fatal, and the counters it explains either way."""
    entry = lookup(code)
    teardown = {condition_code(x) for x in entry.side_effects} if entry.fatal else set()
    return entry.explains | teardown


def possible_causes(condition: str) -> frozenset[int]:
    """The XIDs a condition ("xid-45", "ecc-uncorrected") can be the side effect of."""
    return frozenset(code for code in CATALOG if condition in possible_effects(code))


# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION ---------------------------------------------------------


NO_RECOVERY_ACTION: Final = pynvml.NVML_GPU_RECOVERY_ACTION_NONE


@dataclass(frozen=True)
class RecoveryAction:
    value: int
    name: str
    text: str
    severity: Severity


_RECOVERY_ACTIONS: tuple[RecoveryAction, ...] = (
    RecoveryAction(NO_RECOVERY_ACTION, "none", "No recovery action needed.", Severity.INFO),
    RecoveryAction(
        pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET,
        "gpu_reset",
        "Reset the GPU (nvidia-smi -r) once its work has stopped.",
        Severity.ERROR,
    ),
    RecoveryAction(
        pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT,
        "node_reboot",
        "Reboot the node: a GPU reset is not enough.",
        Severity.CRITICAL,
    ),
    RecoveryAction(
        pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_P2P,
        "drain_p2p",
        "Stop peer-to-peer (NVLink) traffic to this GPU: drain the work that uses it.",
        Severity.ERROR,
    ),
    RecoveryAction(
        pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET,
        "drain_and_reset",
        "Drain the node, then reset the GPU.",
        Severity.CRITICAL,
    ),
    RecoveryAction(
        pynvml.NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN,
        "recover_imex_domain",
        "Recover the IMEX domain (multi-node NVLink) this GPU belongs to.",
        Severity.CRITICAL,
    ),
    RecoveryAction(
        pynvml.NVML_GPU_RECOVERY_ACTION_BUS_RESET,
        "bus_reset",
        "Reset the GPU's PCIe bus (a secondary bus reset), then check the GPU is back.",
        Severity.CRITICAL,
    ),
    RecoveryAction(
        pynvml.NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT,
        "system_reboot",
        "Reboot the whole system (all nodes sharing the GPU's NVLink domain).",
        Severity.CRITICAL,
    ),
)

RECOVERY_ACTIONS: Final[dict[int, RecoveryAction]] = {action.value: action for action in _RECOVERY_ACTIONS}


def recovery_action(value: int) -> RecoveryAction:
    """NVML's recovery action in words; an unknown value (a newer driver) says so rather than failing."""
    return RECOVERY_ACTIONS.get(
        value,
        RecoveryAction(
            value,
            "unknown",
            f"Recovery action {value} is newer than this control plane: see NVML's "
            "nvmlDeviceGetFieldValues(NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) documentation.",
            Severity.ERROR,
        ),
    )
