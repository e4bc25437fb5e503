"""What the gateway hands to other apps: telemetry and events to ``apps.telemetry``, liveness changes
to ``apps.failures`` (which raises and resolves liveness failures) and ``apps.dashboard`` (browsers).

These functions are the only place the gateway touches those apps, and they import them when
called, so the gateway runs without them and says so honestly: telemetry is refused with
``not_ready`` rather than acknowledged and dropped. Tests replace these functions with recorders.
"""

import logging

from django.apps import apps as django_apps

from agents import protocol
from apps.accounts.audit import record
from apps.inventory.models import Node

logger = logging.getLogger(__name__)
TELEMETRY_APP = "apps.telemetry"
FAILURES_APP = "apps.failures"
DASHBOARD_APP = "apps.dashboard"


class NotReady(Exception):
    """The server cannot store this yet; the agent keeps it buffered and sends it again later."""


def _require_telemetry() -> None:
    if not django_apps.is_installed(TELEMETRY_APP):
        raise NotReady("Telemetry storage is not installed on this server; keep the data buffered.")


async def store_telemetry(node_id: int, message: protocol.Telemetry) -> int:
    """Store the samples; return the highest seq now durably stored for the node (the ack)."""
    _require_telemetry()
    from apps.telemetry.ingest import get_ingestor

    return await get_ingestor().submit(node_id, message)


def store_events(node_id: int, message: protocol.Events) -> int:
    """Store the events (and raise the failures they mean); return the highest seq stored."""
    _require_telemetry()
    from apps.telemetry.events import record_events

    return record_events(node_id, message)


def stored_cursors(node_id: int) -> tuple[int, int]:
    """The highest telemetry and events seq stored for the node, for the Welcome (0, 0 when none)."""
    if not django_apps.is_installed(TELEMETRY_APP):
        return 0, 0
    from apps.telemetry.models import TelemetryCursor

    cursor = TelemetryCursor.objects.filter(node_id=node_id).values_list("telemetry_seq", "events_seq").first()
    return cursor or (0, 0)


def node_unreachable(node: Node) -> None:
    """A node fell silent: audited, a liveness failure raised (apps.failures), browsers told (apps.dashboard)."""
    logger.warning("%s is unreachable (last seen %s)", node.hostname, node.last_seen_at)
    record("node.unreachable", actor="system:liveness", obj=node, last_seen_at=_iso(node))
    if django_apps.is_installed(FAILURES_APP):
        from apps.failures.events import node_unreachable as raise_liveness_failure

        raise_liveness_failure(node.pk)
    publish_liveness(node)


def node_recovered(node: Node) -> None:
    """An unreachable node's agent is back: audited, its liveness failures resolved, browsers told."""
    logger.info("%s is reachable again", node.hostname)
    record("node.recovered", actor="system:liveness", obj=node, last_seen_at=_iso(node))
    if django_apps.is_installed(FAILURES_APP):
        from apps.failures.events import node_recovered as resolve_liveness_failures

        resolve_liveness_failures(node.pk)
    publish_liveness(node)


def publish_liveness(node: Node) -> None:
    """Browsers watching the fleet or the node see its new liveness (apps.dashboard)."""
    if django_apps.is_installed(DASHBOARD_APP):
        from apps.dashboard.publish import publish_node_state

        publish_node_state(node)


def _iso(node: Node) -> str | None:
    return node.last_seen_at.isoformat() if node.last_seen_at else None
