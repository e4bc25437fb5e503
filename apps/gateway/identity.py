"""Which hardware a node's agent may claim: a credential speaks for its own node, and its node's GPUs
and HCAs only.

A GPU that really moved shows up in its new node's inventory *after* its old node stopped reporting
it (the old row is then missing, or the old node is no longer online): discovery follows it
(discovery.py). A GPU UUID or serial, or an HCA port GUID, that another *online* node still reports is
a conflict instead: a cloned disk image, a copied credential or a lying agent. The inventory is
refused whole and nothing of either node changes; the refusal is audited (``agent.identity_conflict``),
counted (``identity_conflict``), and both nodes get a "duplicate GPU identity" failure.
"""

from dataclasses import dataclass

from django.db.models import Q

from agents import protocol
from apps.accounts.audit import record
from apps.gateway import sinks
from apps.inventory.choices import GpuState, Liveness
from apps.inventory.models import Gpu, NetworkPort, Node


@dataclass(frozen=True)
class Claim:
    """One identity the report claims that another online node holds."""

    what: str  # "GPU UUID", "GPU serial", "HCA port GUID"
    value: str
    claimed_as: str  # where the report puts it: "gpu0", "mlx5_0/1"
    holder_id: int
    holder: str  # the other node's hostname
    held_as: str  # where the other node has it

    def __str__(self) -> str:
        return f"{self.what} {self.value} ({self.claimed_as}), which {self.holder} reports as {self.held_as}"


class IdentityConflict(protocol.ProtocolError):
    """An inventory claiming hardware another online node reports: refused, nothing written."""

    def __init__(self, claims: list[Claim]) -> None:
        self.claims = claims
        listed = "; ".join(str(claim) for claim in claims)
        why = "a GPU or HCA moves only once its old node stops reporting it"
        super().__init__("forbidden", f"Refused this inventory, which claims {listed}: {why}.")


def check_claims(node: Node, inventory: protocol.Inventory) -> None:
    """Raise IdentityConflict if the report claims a GPU or HCA port another online node still reports."""
    claims = _gpu_claims(node, inventory.gpus) + _port_claims(node, inventory.ports)
    if claims:
        raise IdentityConflict(claims)


def _gpu_claims(node: Node, reported: list[protocol.GpuInfo]) -> list[Claim]:
    by_uuid = {gpu.uuid: gpu for gpu in reported}
    by_serial = {gpu.serial: gpu for gpu in reported if gpu.serial}
    held = (
        Gpu.objects.filter(Q(uuid__in=by_uuid) | Q(serial__in=by_serial), node__liveness=Liveness.ONLINE)
        .exclude(node=node)
        .exclude(state=GpuState.MISSING)  # its node reports it no more
        .select_related("node")
        .order_by("node__hostname", "index")
    )
    claims = []
    for row in held:
        for what, value, claimed in (("GPU UUID", row.uuid, by_uuid), ("GPU serial", row.serial, by_serial)):
            if value in claimed:
                claims.append(
                    Claim(what, value, f"gpu{claimed[value].index}", row.node_id, row.node.hostname, f"gpu{row.index}")
                )
    return claims


def _port_claims(node: Node, reported: list[protocol.PortInfo]) -> list[Claim]:
    by_guid = {port.guid: port for port in reported if port.guid}
    held = (
        NetworkPort.objects.filter(guid__in=by_guid, node__liveness=Liveness.ONLINE)
        .exclude(node=node)
        .select_related("node__agent")
        .order_by("node__hostname", "device_name", "port_num")
    )
    claims = []
    for row in held:
        # A port row outlives its HCA: the holder still has it only if its last report listed the GUID.
        last_report = getattr(row.node, "agent", None)
        listed = {port.get("guid") for port in (last_report.inventory or {}).get("ports", [])} if last_report else set()
        if row.guid in listed:
            port = by_guid[row.guid]
            held_as = f"{row.device_name}/{row.port_num}"
            claims.append(
                Claim("HCA port GUID", row.guid, f"{port.device}/{port.port}", row.node_id, row.node.hostname, held_as)
            )
    return claims


def record_conflict(node: Node, conflict: IdentityConflict, **audit: object) -> None:
    """Audit the refusal and raise the duplicate-identity failure on the claimant and on every holder."""
    record(
        "agent.identity_conflict",
        actor=f"agent:{node.hostname}",
        obj=node,
        claims=[str(claim) for claim in conflict.claims],
        **audit,
    )
    for holder_id in sorted({claim.holder_id for claim in conflict.claims}):
        mine = [claim for claim in conflict.claims if claim.holder_id == holder_id]
        holder = mine[0].holder
        sinks.duplicate_identity(
            node.pk, f"Reports what {holder}, online, reports too: " + "; ".join(_named(c) for c in mine)
        )
        sinks.duplicate_identity(
            holder_id, f"{node.hostname} reports what this node reports: " + "; ".join(_named(c) for c in mine)
        )


def _named(claim: Claim) -> str:
    return f"{claim.what} {claim.value}"
