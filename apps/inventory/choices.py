"""Named choices for the inventory, in the words ops engineers use (compare NetBox's dcim/choices.py)."""

from django.db import models


class Lifecycle(models.TextChoices):
    NEW = "new", "New"
    BURN_IN = "burn_in", "Burn-in"
    IN_SERVICE = "in_service", "In service"
    QUARANTINED = "quarantined", "Quarantined"
    DRAINED = "drained", "Drained"
    RETIRED = "retired", "Retired"


class Liveness(models.TextChoices):
    UNKNOWN = "unknown", "Never seen"
    ONLINE = "online", "Online"
    UNREACHABLE = "unreachable", "Unreachable"


class GpuState(models.TextChoices):
    HEALTHY = "healthy", "Healthy"
    DEGRADED = "degraded", "Degraded"
    FAILED = "failed", "Failed"
    MISSING = "missing", "Missing"


class PortKind(models.TextChoices):
    INFINIBAND = "infiniband", "InfiniBand"
    ROCE = "roce", "RoCE"
    ETHERNET = "ethernet", "Ethernet"


class LinkState(models.TextChoices):
    ACTIVE = "active", "Active"
    DOWN = "down", "Down"
    INIT = "init", "Initializing"
    POLLING = "polling", "Polling"
    UNKNOWN = "unknown", "Unknown"


class FabricKind(models.TextChoices):
    NVLINK = "nvlink", "NVLink"
    INFINIBAND = "infiniband", "InfiniBand"
    ROCE = "roce", "RoCE"
    ETHERNET = "ethernet", "Ethernet"


class FabricTopology(models.TextChoices):
    FAT_TREE = "fat_tree", "Fat-tree"
    LEAF_SPINE = "leaf_spine", "Leaf-spine"
    RAIL_OPTIMIZED = "rail_optimized", "Rail-optimized"
    NVSWITCH = "nvswitch", "NVSwitch (in chassis)"


class SwitchTier(models.TextChoices):
    LEAF = "leaf", "Leaf"
    SPINE = "spine", "Spine"
    CORE = "core", "Core"


class LinkStatus(models.TextChoices):
    CONNECTED = "connected", "Connected"
    PLANNED = "planned", "Planned"
    DECOMMISSIONING = "decommissioning", "Decommissioning"


# Speeds an InfiniBand port can run at (4x lanes), in Gb/s: SDR ... XDR.
INFINIBAND_RATES_GBPS = (10, 20, 40, 56, 100, 200, 400, 800)
