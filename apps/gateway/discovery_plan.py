"""One node's inventory planned against its rows in memory: how its GPU, port and NVLink rows change,
and the DiscoveryChanges that say so. discovery.py reads the rows of a whole batch of nodes before
and writes what the plans changed after, a few statements for the batch.

A GPU row is a slot, ``(node, NVML index)``; a network port row is ``(node, device, port)``. A
different UUID in a slot is a swapped GPU; a GPU or port no longer reported is removed (the GPU
becomes *missing*, the port *down*); rows are never deleted, because failures, cables and history
refer to them.
"""

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from django.core.exceptions import ValidationError
from django.db import models

from agents import protocol
from apps.accounts.audit import changed_fields
from apps.gateway.choices import ChangeKind
from apps.gateway.models import DiscoveryChange
from apps.inventory.choices import GpuState, LinkState
from apps.inventory.models import Gpu, NetworkPort, Node, NvLink

# A GPU UUID names one row. When a GPU turns up in another slot, the slot it left keeps its row
# (history refers to it) under this placeholder, which no NVML device ever reports.
VACANT_UUID_PREFIX: Final = "GPU-00000000-0000-0000-0000-"
# What a plan may change of each row: what discovery.py compares and writes.
GPU_FIELDS: Final = ("uuid", "model", "serial", "memory_mib", "slowdown_temp_c", "pci_bus_id", "state", "missing_since")
PORT_FIELDS: Final = ("kind", "rate_gbps", "guid", "link_state")
NVLINK_FIELDS: Final = ("lanes", "bandwidth_gbs", "link_state")
# Inventory field names where the protocol's differ from the model's, for error messages.
_GPU_FIELD_NAMES: Final = {"model": "name"}
_PORT_FIELD_NAMES: Final = {"device_name": "device", "port_num": "port", "link_state": "state"}


def vacant_uuid(gpu_pk: int) -> str:
    return f"{VACANT_UUID_PREFIX}{gpu_pk:012x}"


def _change(node: Node, kind: str, subject: str, /, **detail: Any) -> DiscoveryChange:
    return DiscoveryChange(node=node, kind=kind, subject=subject, detail=detail)


# Refusals, before anything is planned ---------------------------------------------------------


def refuse_duplicates(inventory: protocol.Inventory) -> None:
    for label, keys in (
        ("gpus[].index", [g.index for g in inventory.gpus]),
        ("gpus[].uuid", [g.uuid.upper() for g in inventory.gpus]),
        ("ports[].device/port", [(p.device, p.port) for p in inventory.ports]),
    ):
        repeated = sorted({str(k) for k in keys if keys.count(k) > 1})
        if repeated:
            raise protocol.ProtocolError("invalid", f"{label}: reported more than once: {', '.join(repeated)}.")


def refuse_invalid(node: Node, inventory: protocol.Inventory) -> None:
    """Raise ProtocolError("invalid") naming the first reported field a row cannot hold. Every field a
    plan writes from the report is checked here, on a row holding the report's values, so that a plan
    (which only sets them) cannot fail halfway through a batch."""
    for position, gpu in enumerate(inventory.gpus):
        row = Gpu(node=node, index=gpu.index, uuid=gpu.uuid)
        _set_gpu_facts(row, gpu)
        _validate(row, f"gpus[{position}]", _GPU_FIELD_NAMES)
    for position, port in enumerate(inventory.ports):
        row = NetworkPort(node=node, device_name=port.device, port_num=port.port, **_port_facts(port))
        row.link_state = port.state
        _validate(row, f"ports[{position}]", _PORT_FIELD_NAMES)


def _validate(row: models.Model, where: str, names: dict[str, str]) -> None:
    try:
        row.clean_fields(exclude=["node"])
    except ValidationError as exc:
        problems = "; ".join(
            f"{where}.{names.get(field, field)}: {' '.join(messages)}" for field, messages in exc.message_dict.items()
        )
        raise protocol.ProtocolError("invalid", problems) from exc


# GPUs ----------------------------------------------------------------------------------------


def _set_gpu_facts(row: Gpu, info: protocol.GpuInfo) -> None:
    row.model, row.serial, row.memory_mib = info.name, info.serial or "", info.memory_mib
    row.slowdown_temp_c = info.slowdown_temp_c
    row.pci_bus_id = info.pci_bus_id or ""


def plan_gpus(
    node: Node, rows: dict[int, Gpu], reported: Sequence[protocol.GpuInfo], elsewhere: dict[str, Gpu], now: datetime
) -> list[DiscoveryChange]:
    """Change the node's GPU rows (by index; a new slot's row is added, unsaved) and ``elsewhere``, other
    nodes' rows by UUID, to what the report says; the changes."""
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
    for uuid in sorted(placed.keys() & elsewhere.keys(), key=lambda u: (elsewhere[u].node_id, elsewhere[u].index)):
        row = elsewhere[uuid]
        moved_from[uuid] = f"{row.node.hostname}/gpu{row.index}"
        row.uuid, row.state, row.missing_since = vacant_uuid(row.pk), GpuState.MISSING, now
        moved_to = f"{node.hostname}/gpu{placed[uuid]}"
        changes.append(
            _change(row.node, ChangeKind.GPU_REMOVED, f"gpu{row.index}", index=row.index, uuid=uuid, moved_to=moved_to)
        )

    for info in reported:
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
        _set_gpu_facts(row, info)

    reported_indexes = {info.index for info in reported}
    for index, row in rows.items():
        if index in reported_indexes or row.state == GpuState.MISSING:
            continue
        old_uuid = before[index][0]
        moved = {"moved_to": f"gpu{placed[old_uuid]}"} if old_uuid in placed else {}
        changes.append(_change(node, ChangeKind.GPU_REMOVED, f"gpu{index}", index=index, uuid=old_uuid, **moved))
        row.state, row.missing_since = GpuState.MISSING, now
    return changes


# Network ports -------------------------------------------------------------------------------


def _port_facts(info: protocol.PortInfo) -> dict[str, Any]:
    return {"kind": info.kind, "rate_gbps": round(info.rate_gbps), "guid": info.guid or ""}


def plan_ports(
    node: Node,
    rows: dict[tuple[str, int], NetworkPort],
    reported: Sequence[protocol.PortInfo],
    previous: dict[str, Any] | None,
) -> list[DiscoveryChange]:
    """Change the node's port rows (by device and port; a new port's row is added, unsaved) to what the
    report says, against the ``previous`` report; the changes."""
    # Ports the previous report listed; before the first report, those the node type promised.
    expected = set(rows) if previous is None else {(p["device"], p["port"]) for p in previous["ports"]}
    changes: list[DiscoveryChange] = []
    for info in reported:
        key = (info.device, info.port)
        subject = f"{info.device}/{info.port}"
        facts = _port_facts(info)
        row = rows.get(key)
        if row is None:
            row = rows[key] = NetworkPort(node=node, device_name=info.device, port_num=info.port, **facts)
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

    reported_keys = {(info.device, info.port) for info in reported}
    for key, row in rows.items():
        if key in reported_keys or key not in expected:
            continue
        changes.append(
            _change(node, ChangeKind.PORT_REMOVED, f"{row.device_name}/{row.port_num}", kind=row.kind, guid=row.guid)
        )
        row.link_state = LinkState.DOWN
    return changes


# Host facts and NVLinks ----------------------------------------------------------------------


def host_changes(node: Node, before: dict[str, Any], after: dict[str, Any]) -> list[DiscoveryChange]:
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


def plan_nvlinks(
    node: Node, gpus: dict[int, Gpu], reported: Sequence[protocol.GpuInfo], links: dict[tuple[int, int], NvLink]
) -> None:
    """NvLink rows for GPUs wired directly to each other, in ``links`` by GPU pks (lower first; a new
    pair's row is added, unsaved). The node's GPU rows, by index, are saved already.

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
    per_gpu_gbs = node.node_type.nvlink_bandwidth_gbs
    for (i, j), seen_from in lanes.items():
        # Each link is reported by both of its GPUs; take the fuller of the two views.
        states = max(seen_from.values(), key=len)
        count = len(states)
        low, high = sorted((gpus[i], gpus[j]), key=lambda row: row.pk)
        nvlink = links.setdefault((low.pk, high.pk), NvLink(gpu_a=low, gpu_b=high, _node_id=low.node_id))
        nvlink.lanes = count
        nvlink.bandwidth_gbs = round(per_gpu_gbs * count / max(links_per_gpu[i], links_per_gpu[j], 1))
        nvlink.link_state = LinkState.ACTIVE if all(states) else LinkState.DOWN
