"""Which hardware a node's agent may claim: a credential speaks for its own node, and its node's GPUs
and HCAs only.

A GPU that really moved shows up in its new node's inventory *after* its old node stopped reporting
it (the old row is then missing, or the old node is no longer online): discovery follows it
(discovery.py). A GPU UUID or serial, or an HCA port GUID, that another *online* node still reports is
a conflict instead: a cloned disk image, a copied credential or a lying agent. The inventory is
refused whole and nothing of either node changes; the refusal is audited (``agent.identity_conflict``),
counted (``identity_conflict``), and both nodes get a "duplicate GPU identity" failure.
"""

from collections.abc import Collection, Sequence
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


class Holders:
    """What other online nodes hold of the hardware a batch of inventories claims, read once for the
    batch (two queries, on indexed columns); ``exclude`` names the batch's own nodes, none of which
    holds what another of them reports (discovery.py puts such reports in batches of their own)."""

    def __init__(self, reports: Sequence[protocol.Inventory], exclude: Collection[int]) -> None:
        uuids = {gpu.uuid for report in reports for gpu in report.gpus}
        serials = {gpu.serial for report in reports for gpu in report.gpus if gpu.serial}
        guids = {port.guid for report in reports for port in report.ports if port.guid}
        gpus = (
            Gpu.objects.filter(Q(uuid__in=uuids) | Q(serial__in=serials), node__liveness=Liveness.ONLINE)
            .exclude(node_id__in=exclude)
            .exclude(state=GpuState.MISSING)  # its node reports it no more
            .select_related("node")
            .order_by("node__hostname", "index")
        )
        ports = (
            NetworkPort.objects.filter(guid__in=guids, node__liveness=Liveness.ONLINE)
            .exclude(node_id__in=exclude)
            .select_related("node__agent")
            .order_by("node__hostname", "device_name", "port_num")
        )
        self._gpus = list(gpus) if uuids or serials else []
        self._ports = list(ports) if guids else []

    def claims(self, inventory: protocol.Inventory) -> list[Claim]:
        return self._gpu_claims(inventory.gpus) + self._port_claims(inventory.ports)

    def _gpu_claims(self, reported: list[protocol.GpuInfo]) -> list[Claim]:
        by_uuid = {gpu.uuid: gpu for gpu in reported}
        by_serial = {gpu.serial: gpu for gpu in reported if gpu.serial}
        claims = []
        for row in self._gpus:
            for what, value, claimed in (("GPU UUID", row.uuid, by_uuid), ("GPU serial", row.serial, by_serial)):
                if value in claimed:
                    claims.append(
                        Claim(
                            what, value, f"gpu{claimed[value].index}", row.node_id, row.node.hostname, f"gpu{row.index}"
                        )
                    )
        return claims

    def _port_claims(self, reported: list[protocol.PortInfo]) -> list[Claim]:
        by_guid = {port.guid: port for port in reported if port.guid}
        claims = []
        for row in self._ports:
            if row.guid not in by_guid:
                continue
            # A port row outlives its HCA: the holder still has it only if its last report listed the GUID.
            last_report = getattr(row.node, "agent", None)
            listed = (
                {port.get("guid") for port in (last_report.inventory or {}).get("ports", [])} if last_report else set()
            )
            if row.guid in listed:
                port = by_guid[row.guid]
                held_as = f"{row.device_name}/{row.port_num}"
                claims.append(
                    Claim(
                        "HCA port GUID", row.guid, f"{port.device}/{port.port}", row.node_id, row.node.hostname, held_as
                    )
                )
        return claims


def check_claims(inventory: protocol.Inventory, holders: Holders) -> None:
    """Raise IdentityConflict if the report claims a GPU or HCA port another online node still reports."""
    claims = holders.claims(inventory)
    if claims:
        raise IdentityConflict(claims)


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
