from apps.inventory.models.burnin import BurnInResult
from apps.inventory.models.clusters import Cluster, NodeType, PortTemplate, Rack
from apps.inventory.models.fabric import Fabric, Link, LinkEnd, LinkTermination, NvLink, Switch, SwitchPort
from apps.inventory.models.nodes import (
    LIFECYCLE_TRANSITIONS,
    Gpu,
    IllegalTransition,
    NetworkPort,
    Node,
    NodeQuerySet,
    NodeTransition,
    ReasonRequired,
)

__all__ = [
    "LIFECYCLE_TRANSITIONS",
    "BurnInResult",
    "Cluster",
    "Fabric",
    "Gpu",
    "IllegalTransition",
    "Link",
    "LinkEnd",
    "LinkTermination",
    "NetworkPort",
    "Node",
    "NodeQuerySet",
    "NodeTransition",
    "NodeType",
    "NvLink",
    "PortTemplate",
    "Rack",
    "ReasonRequired",
    "Switch",
    "SwitchPort",
]
