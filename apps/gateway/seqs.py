"""Resetting a node's stored seqs: an admin's repair (the API, the admin site) and what a node's new
credential does, since it begins a new epoch of the node's seqs (re-enrolling after a lost state dir,
or after a frame moved the cursor where no real one reaches).

The stored seqs are the dedup (apps/telemetry/storage.py: a frame at or below them is a replay), so
the node's live socket is closed after the reset commits: its agent reconnects, its Welcome gives it
the new cursors, and it renumbers the frames it has not sent yet to follow them (agents/buffer.py).
Callers audit the reset; it returns the seqs it replaced, for the audit log.
"""

from django.db import transaction
from django.utils import timezone

from apps.gateway import push, sinks
from apps.inventory.models import Node


def reset_seqs(node: Node, telemetry_seq: int = 0, events_seq: int = 0) -> dict[str, int]:
    """Set the node's stored telemetry and events seqs; the ones they replace, by stream."""
    telemetry_before, events_before = sinks.reset_cursors(node.pk, telemetry_seq, events_seq, timezone.now())
    transaction.on_commit(lambda: push.seqs_reset(node.pk))
    return {"telemetry": telemetry_before, "events": events_before}
