"""Named choices for failures and straggler flags, in the words ops engineers use."""

from django.db import models


class Severity(models.TextChoices):
    """Ordered: ``Severity.rank`` compares them (critical pages someone, info never does)."""

    CRITICAL = "critical", "Critical"
    ERROR = "error", "Error"
    WARNING = "warning", "Warning"
    INFO = "info", "Info"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2, Severity.CRITICAL: 3}


def most_severe(*severities: str) -> Severity:
    return max((Severity(s) for s in severities), key=lambda s: s.rank)


class FailureKind(models.TextChoices):
    XID = "xid", "XID"
    ECC = "ecc", "ECC"
    ROW_REMAP = "row_remap", "Row remapping"
    NVLINK = "nvlink", "NVLink"
    THERMAL = "thermal", "Thermal"
    POWER = "power", "Power"
    PCIE = "pcie", "PCIe"
    INFINIBAND = "infiniband", "InfiniBand"
    LIVENESS = "liveness", "Liveness"
    STRAGGLER = "straggler", "Straggler"
    IDENTITY = "identity", "Hardware identity"
    CLOCK = "clock", "Clock"


class FailureState(models.TextChoices):
    OPEN = "open", "Open"
    ACKNOWLEDGED = "acknowledged", "Acknowledged"
    RESOLVED = "resolved", "Resolved"


# A failure in one of these states is still being worked on: repeats collapse into it.
ACTIVE_STATES = (FailureState.OPEN, FailureState.ACKNOWLEDGED)


class XidCategory(models.TextChoices):
    GPU = "gpu", "GPU hardware"
    MEMORY = "memory", "GPU memory"
    NVLINK = "nvlink", "NVLink"
    PCIE = "pcie", "PCIe"
    DRIVER = "driver", "Driver or firmware"
    APPLICATION = "application", "Application"
    THERMAL = "thermal", "Thermal or power"


class StragglerMetric(models.TextChoices):
    POWER = "power_w", "Power draw (W)"
    SM_CLOCK = "sm_clock_mhz", "SM clock (MHz)"
    UTILIZATION = "util_gpu", "GPU utilization (%)"
