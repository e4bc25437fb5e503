"""Storing the events agents report (XID, ECC, thermal, PCIe, NVLink, port), deduplicated by seq.

This is the storage half: the events as received, the node's events cursor, and each GPU's last XID
and how often it reported each XID (for /metrics). Turning events into failures with a severity and a
recommended action belongs to apps.failures; the gateway (apps/gateway/sinks.py) calls both in one
transaction, so a stored event and the failure it raises commit together, and a replay raises nothing.
"""

from datetime import UTC, datetime

from django.db import connection, transaction
from django.utils import timezone

from agents.protocol import Events
from apps.telemetry.cursors import advance_cursors, lock_cursors
from apps.telemetry.models import AgentEvent, LatestXid, XidCount


def store_events(node_id: int, message: Events) -> tuple[int, bool]:
    """Store the message's events unless its seq is already stored; return the node's events seq and
    whether this message was new (False: a replay of what is stored, and nothing was written)."""
    now = timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        stored_seq = lock_cursors(cursor, [node_id], "events_seq", now)[node_id]
        if message.seq <= stored_seq:
            return stored_seq, False
        events = [
            AgentEvent(
                node_id=node_id,
                ts=datetime.fromtimestamp(event.ts, UTC),
                kind=event.kind,
                gpu_index=event.gpu_index,
                port_device=event.port_device or "",
                xid=event.xid,
                data=event.data,
                received_at=now,
            )
            for event in message.events
        ]
        AgentEvent.objects.bulk_create(events)
        xids = [e for e in events if e.kind == "xid" and e.xid is not None and e.gpu_index is not None]
        _remember_last_xids(node_id, xids)
        _count_xids(node_id, xids)
        advance_cursors(cursor, {node_id: message.seq}, "events_seq", now)
    return message.seq, True


def _remember_last_xids(node_id: int, events: list[AgentEvent]) -> None:
    newest: dict[int, AgentEvent] = {}
    for event in events:
        if event.gpu_index not in newest or newest[event.gpu_index].ts <= event.ts:
            newest[event.gpu_index] = event
    if not newest:
        return
    known = dict(LatestXid.objects.filter(node_id=node_id, gpu_index__in=newest).values_list("gpu_index", "ts"))
    LatestXid.objects.bulk_create(
        [
            LatestXid(node_id=node_id, gpu_index=gpu, xid=event.xid, ts=event.ts)
            for gpu, event in newest.items()
            if gpu not in known or known[gpu] <= event.ts
        ],
        update_conflicts=True,
        unique_fields=["node", "gpu_index"],
        update_fields=["xid", "ts"],
    )


def _count_xids(node_id: int, events: list[AgentEvent]) -> None:
    """Add the events to each GPU's XID counts. The caller holds the node's events cursor locked, so
    no other writer counts this node's XIDs between the read and the write."""
    if not events:
        return
    added: dict[tuple[int, int], tuple[int, datetime]] = {}
    for event in events:
        count, last = added.get((event.gpu_index, event.xid), (0, event.ts))
        added[(event.gpu_index, event.xid)] = (count + 1, max(last, event.ts))
    stored = {
        (gpu, xid): (count, last)
        for gpu, xid, count, last in XidCount.objects.filter(
            node_id=node_id, gpu_index__in={gpu for gpu, _ in added}, xid__in={xid for _, xid in added}
        ).values_list("gpu_index", "xid", "count", "last_ts")
    }
    for key, (count, last) in stored.items():
        if key in added:
            more, ts = added[key]
            added[key] = (count + more, max(last, ts))
    XidCount.objects.bulk_create(
        [
            XidCount(node_id=node_id, gpu_index=gpu, xid=xid, count=count, last_ts=ts)
            for (gpu, xid), (count, ts) in added.items()
        ],
        update_conflicts=True,
        unique_fields=["node", "gpu_index", "xid"],
        update_fields=["count", "last_ts"],
    )
