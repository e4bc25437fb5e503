"""Upserting what a node's agent discovered into the inventory, and recording what changed.

A GPU row is a slot, ``(node, NVML index)``; a network port row is ``(node, device, port)``. A
different UUID in a slot is a swapped GPU; a GPU or port no longer reported is removed (the GPU
becomes *missing*, the port *down*); rows are never deleted, because failures, cables and history
refer to them. The whole report is applied in one transaction, and an unchanged report (a
reconnect) costs one read, outside any transaction.
"""

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

import msgspec
from django.core.exceptions import ValidationError
from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone

from agents import protocol
from apps.accounts.audit import changed_fields
from apps.gateway.choices import ChangeKind
from apps.gateway.identity import check_claims
from apps.gateway.models import DiscoveryChange, NodeAgent
from apps.inventory.choices import GpuState, LinkState
from apps.inventory.models import Gpu, NetworkPort, Node, NvLink

# A GPU UUID names one row. When a GPU turns up in another slot, the slot it left keeps its row
# (history refers to it) under this placeholder, which no NVML device ever reports.
VACANT_UUID_PREFIX: Final = "GPU-00000000-0000-0000-0000-"
# Inventory field names where the protocol's differ from the model's, for error messages.
_GPU_FIELD_NAMES: Final = {"model": "name"}
_PORT_FIELD_NAMES: Final = {"device_name": "device", "port_num": "port", "link_state": "state"}


def apply_inventory(node: Node, inventory: protocol.Inventory, now: datetime | None = None) -> list[DiscoveryChange]:
    """Bring the node's GPUs, ports, NVLinks and host facts in line with the report; return the changes.

    Raises ProtocolError("invalid") naming the field when the report cannot be stored, and
    IdentityConflict when it claims hardware another online node reports (identity.py); nothing is
    written then.
    """
    now = now or timezone.now()
    snapshot = msgspec.to_builtins(inventory)
    _refuse_duplicates(inventory)
    # A reconnecting agent reports what it reported last: one read, no lock and no commit (a fleet
    # reconnecting after a restart would otherwise queue a transaction per node). Only this node's
    # own connection writes its report, so an equal one read here cannot be changed meanwhile.
    if NodeAgent.objects.filter(node_id=node.pk).values_list("inventory", flat=True).first() == snapshot:
        return []
    with transaction.atomic():
        # The agent row is the lock that puts two reports of one node in turn; not the node's row, which
        # the gateway's bookkeeping updates every second (last_seen_at) for every node it heard from:
        # locking it queued each inventory behind that update, and that update behind the inventories.
        NodeAgent.objects.get_or_create(node=node)
        agent = NodeAgent.objects.select_for_update(of=("self",)).select_related("node__node_type").get(node=node)
        node = agent.node
        if agent.inventory == snapshot:
            return []
        check_claims(node, inventory)
        changes = [
            *_apply_gpus(node, inventory.gpus, now),
            *_apply_ports(node, inventory.ports, agent.inventory),
            *_host_changes(node, agent.host, snapshot["host"]),
        ]
        _apply_nvlinks(node, inventory.gpus)
        for change in changes:
            change.at = now
        DiscoveryChange.objects.bulk_create(changes)
        agent.inventory, agent.inventory_at, agent.host = snapshot, now, snapshot["host"]
        agent.save(update_fields=["inventory", "inventory_at", "host"])
    return changes


def vacant_uuid(gpu_pk: int) -> str:
    return f"{VACANT_UUID_PREFIX}{gpu_pk:012x}"


def _change(node: Node, kind: str, subject: str, /, **detail: Any) -> DiscoveryChange:
    return DiscoveryChange(node=node, kind=kind, subject=subject, detail=detail)


def _refuse_duplicates(inventory: protocol.Inventory) -> None:
    for label, keys in (
        ("gpus[].index", [g.index for g in inventory.gpus]),
        ("gpus[].uuid", [g.uuid.upper() for g in inventory.gpus]),
        ("ports[].device/port", [(p.device, p.port) for p in inventory.ports]),
    ):
        repeated = sorted({str(k) for k in keys if keys.count(k) > 1})
        if repeated:
            raise protocol.ProtocolError("invalid", f"{label}: reported more than once: {', '.join(repeated)}.")


def _validated_save(row: models.Model, where: str, names: dict[str, str], **save: Any) -> None:
    try:
        row.clean_fields(exclude=["node"])
    except ValidationError as exc:
        problems = "; ".join(
            f"{where}.{names.get(field, field)}: {' '.join(messages)}" for field, messages in exc.message_dict.items()
        )
        raise protocol.ProtocolError("invalid", problems) from exc
    row.save(**save)


# GPUs ----------------------------------------------------------------------------------------


def _apply_gpus(node: Node, reported: Sequence[protocol.GpuInfo], now: datetime) -> list[DiscoveryChange]:
    rows = {row.index: row for row in Gpu.objects.select_for_update().filter(node=node)}
    before = {index: (row.uuid, row.serial) for index, row in rows.items()}
    placed = {info.uuid: info.index for info in reported}
    changes: list[DiscoveryChange] = []
    moved_from: dict[str, str] = {}

    # Free the UUID of every reported GPU recorded in another slot (it was moved).
    for row in rows.values():
        target = placed.get(row.uuid)
        if target is not None and target != row.index:
            moved_from[row.uuid] = f"gpu{row.index}"
            row.uuid = vacant_uuid(row.pk)
            row.save(update_fields=["uuid", "updated_at"])
    elsewhere = Gpu.objects.select_for_update().filter(uuid__in=placed).exclude(node=node).select_related("node")
    for row in elsewhere:
        old_uuid = row.uuid
        moved_from[old_uuid] = f"{row.node.hostname}/gpu{row.index}"
        row.uuid, row.state, row.missing_since = vacant_uuid(row.pk), GpuState.MISSING, now
        row.save(update_fields=["uuid", "state", "missing_since", "updated_at"])
        changes.append(
            _change(
                row.node,
                ChangeKind.GPU_REMOVED,
                f"gpu{row.index}",
                index=row.index,
                uuid=old_uuid,
                moved_to=f"{node.hostname}/gpu{placed[old_uuid]}",
            )
        )

    for position, info in enumerate(reported):
        subject = f"gpu{info.index}"
        row = rows.get(info.index)
        moved = {"moved_from": moved_from[info.uuid]} if info.uuid in moved_from else {}
        if row is None:
            row = rows[info.index] = Gpu(node=node, index=info.index, uuid=info.uuid)
            changes.append(
                _change(node, ChangeKind.GPU_ADDED, subject, index=info.index, uuid=info.uuid, model=info.name, **moved)
            )
        elif before[info.index][0] != info.uuid:
            old_uuid, old_serial = before[info.index]
            changes.append(
                _change(
                    node,
                    ChangeKind.GPU_SWAPPED,
                    subject,
                    index=info.index,
                    old_uuid=old_uuid,
                    new_uuid=info.uuid,
                    old_serial=old_serial,
                    new_serial=info.serial or "",
                    **moved,
                )
            )
            row.uuid, row.state, row.missing_since = info.uuid, GpuState.HEALTHY, None
        elif row.state == GpuState.MISSING:
            changes.append(
                _change(node, ChangeKind.GPU_ADDED, subject, index=info.index, uuid=info.uuid, returned=True)
            )
            row.state, row.missing_since = GpuState.HEALTHY, None
        row.model, row.serial, row.memory_mib = info.name, info.serial or "", info.memory_mib
        row.slowdown_temp_c = info.slowdown_temp_c
        row.pci_bus_id = info.pci_bus_id or ""
        _validated_save(row, f"gpus[{position}]", _GPU_FIELD_NAMES)

    reported_indexes = {info.index for info in reported}
    for index, row in rows.items():
        if index in reported_indexes or row.state == GpuState.MISSING:
            continue
        old_uuid = before[index][0]
        moved = {"moved_to": f"gpu{placed[old_uuid]}"} if old_uuid in placed else {}
        changes.append(_change(node, ChangeKind.GPU_REMOVED, f"gpu{index}", index=index, uuid=old_uuid, **moved))
        row.state, row.missing_since = GpuState.MISSING, now
        row.save(update_fields=["state", "missing_since", "updated_at"])
    return changes


# Network ports -------------------------------------------------------------------------------


def _apply_ports(
    node: Node, reported: Sequence[protocol.PortInfo], previous: dict[str, Any] | None
) -> list[DiscoveryChange]:
    rows = {(p.device_name, p.port_num): p for p in NetworkPort.objects.select_for_update().filter(node=node)}
    # Ports the previous report listed; before the first report, those the node type promised.
    expected = set(rows) if previous is None else {(p["device"], p["port"]) for p in previous["ports"]}
    changes: list[DiscoveryChange] = []
    for position, info in enumerate(reported):
        key = (info.device, info.port)
        subject = f"{info.device}/{info.port}"
        facts = {"kind": info.kind, "rate_gbps": round(info.rate_gbps), "guid": info.guid or ""}
        row = rows.get(key)
        if row is None:
            row = NetworkPort(node=node, device_name=info.device, port_num=info.port, **facts)
            changes.append(_change(node, ChangeKind.PORT_ADDED, subject, **facts))
        else:
            old = {"kind": row.kind, "rate_gbps": row.rate_gbps, "guid": row.guid}
            if not facts["guid"]:
                facts["guid"] = row.guid  # not reported this time: keep what we knew
            if key not in expected:
                changes.append(_change(node, ChangeKind.PORT_ADDED, subject, returned=True, **facts))
            elif diff := changed_fields(old, facts):
                changes.append(_change(node, ChangeKind.PORT_CHANGED, subject, **diff))
            for name, value in facts.items():
                setattr(row, name, value)
        row.link_state = info.state
        _validated_save(row, f"ports[{position}]", _PORT_FIELD_NAMES)

    reported_keys = {(info.device, info.port) for info in reported}
    for key, row in rows.items():
        if key in reported_keys or key not in expected:
            continue
        changes.append(
            _change(node, ChangeKind.PORT_REMOVED, f"{row.device_name}/{row.port_num}", kind=row.kind, guid=row.guid)
        )
        row.link_state = LinkState.DOWN
        row.save(update_fields=["link_state"])
    return changes


# Host facts and NVLinks ----------------------------------------------------------------------


def _host_changes(node: Node, before: dict[str, Any], after: dict[str, Any]) -> list[DiscoveryChange]:
    """A fact that changed value (a driver upgrade, a new kernel); facts appearing for the first time are not news."""
    common = {name: before[name] for name in before.keys() & after.keys() if name != "hostname"}
    diff = changed_fields(common, {name: after[name] for name in common})
    return [_change(node, ChangeKind.HOST_CHANGED, "host", **diff)] if diff else []


def _pci_key(bus_id: str) -> str:
    """NVML writes the PCI domain with 4 or 8 digits (0000:18:00.0, 00000000:18:00.0): compare without them."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    try:
        return f"{int(domain, 16):x}:{rest}"
    except ValueError:
        return bus_id.strip().lower()


def _apply_nvlinks(node: Node, reported: Sequence[protocol.GpuInfo]) -> None:
    """NvLink rows for GPUs wired directly to each other.

    Through NVSwitches (HGX H100/B200) every peer is a switch, so GPU pairs cannot be derived from
    discovery; those rows stay as the inventory has them.
    """
    index_by_bus = {_pci_key(g.pci_bus_id): g.index for g in reported if g.pci_bus_id}
    lanes: dict[tuple[int, int], dict[int, list[bool]]] = defaultdict(lambda: defaultdict(list))
    links_per_gpu = {g.index: len(g.nvlinks) for g in reported}
    for gpu in reported:
        for link in gpu.nvlinks:
            peer = index_by_bus.get(_pci_key(link.peer_pci_bus_id)) if link.peer_pci_bus_id else None
            if peer is not None and peer != gpu.index:
                lanes[(min(gpu.index, peer), max(gpu.index, peer))][gpu.index].append(link.active)
    if not lanes:
        return
    rows = {g.index: g for g in Gpu.objects.filter(node=node)}
    per_gpu_gbs = node.node_type.nvlink_bandwidth_gbs
    for (i, j), seen_from in lanes.items():
        # Each link is reported by both of its GPUs; take the fuller of the two views.
        states = max(seen_from.values(), key=len)
        count = len(states)
        bandwidth = round(per_gpu_gbs * count / max(links_per_gpu[i], links_per_gpu[j], 1))
        state = LinkState.ACTIVE if all(states) else LinkState.DOWN
        a, b = rows[i], rows[j]
        nvlink = NvLink.objects.filter(Q(gpu_a=a, gpu_b=b) | Q(gpu_a=b, gpu_b=a)).first() or NvLink(gpu_a=a, gpu_b=b)
        nvlink.lanes, nvlink.bandwidth_gbs, nvlink.link_state = count, bandwidth, state
        nvlink.save()
