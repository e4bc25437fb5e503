"""What the gateway hands to other apps: telemetry and events to ``apps.telemetry``, liveness changes
to ``apps.failures`` (which raises and resolves liveness failures) and, as a domain event, to whoever
listens (apps/core/events.py: the live streams, among others); agents' reports about their commands to
``apps.jobs``, and from it what a connecting agent is to be sent.

These functions are the only place the gateway touches those apps; a test that breaks storage on
purpose replaces one of them with a fault injector.
"""

import logging
from collections.abc import Awaitable, Sequence
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from agents import protocol
from apps.accounts.audit import record
from apps.core.batching import Batched
from apps.core.events import NodeChanged, announce
from apps.failures.events import clock_skewed as raise_clock_skew
from apps.failures.events import duplicate_identity as raise_duplicate_identity
from apps.failures.events import node_recovered as resolve_liveness_failures
from apps.failures.events import node_unreachable as raise_liveness_failure
from apps.failures.events import nodes_still_unreachable as sight_liveness_failures
from apps.failures.events import record_events as raise_failures
from apps.inventory.models import Node
from apps.jobs import dispatch as commands
from apps.jobs import reports as command_reports
from apps.telemetry import cursors
from apps.telemetry.events import store_events as store_agent_events
from apps.telemetry.ingest import ingestor

logger = logging.getLogger(__name__)


def store_telemetry(node_id: int, message: protocol.Telemetry) -> Awaitable[int]:
    """Store the samples; what it returns is awaited for the highest seq then durably stored for the node (the ack)."""
    return ingestor.submit(node_id, message)


def store_events(node_id: int, message: protocol.Events) -> int:
    """Store the events and raise the failures they mean, in one transaction (a stored event never
    lacks its failure); return the highest seq stored. A replay stores and raises nothing."""
    with transaction.atomic():
        stored_seq, new = store_agent_events(node_id, message)
        if new:
            raise_failures(node_id, message)
    return stored_seq


def node_clock_skewed(node_id: int, offset_s: float) -> None:
    """The node's agent stamps its data ``offset_s`` ahead of the server's clock: a failure (apps.failures)."""
    raise_clock_skew(node_id, offset_s)


def duplicate_identity(node_id: int, detail: str) -> None:
    """The node's GPUs or HCAs are claimed by two online nodes: a failure on it (apps.failures)."""
    raise_duplicate_identity(node_id, detail)


def reset_cursors(node_id: int, telemetry_seq: int, events_seq: int, now: datetime) -> tuple[int, int]:
    """Set the node's stored seqs (apps.telemetry); return what they were."""
    return cursors.reset_seqs(node_id, telemetry_seq, events_seq, now)


def forget_stored_seq(node_id: int) -> None:
    """This process's ingestor checks the node's next frame against the stored cursor again."""
    ingestor.forget(node_id)


def stored_cursors_of(node_ids: Sequence[int]) -> dict[int, tuple[int, int]]:
    """The highest telemetry and events seq stored for each of the nodes that has any, for their Welcomes."""
    return cursors.stored_seqs(node_ids)


CommandReport = protocol.CommandStarted | protocol.CommandUpdate | protocol.CommandResult


def store_command_reports(reports: Sequence[tuple[int, CommandReport]]) -> list[protocol.ProtocolError | None]:
    """Agents' reports about their nodes' commands, each ``(node id, report)``, stored in order in one
    transaction (apps/jobs); a thousand at once in a few queries. Each report's refusal, or None: a key
    that is not one of the node's commands is refused with ProtocolError("invalid") naming it."""
    return [
        None if unknown is None else protocol.ProtocolError("invalid", str(unknown), key=message.key)
        for (_, message), unknown in zip(reports, command_reports.store_reports(reports), strict=True)
    ]


def _is_start(item: tuple[int, CommandReport]) -> bool:
    """A command's start is its first report, so storing it before reports that came earlier (other
    commands' progress and results) keeps each command's own reports in order; a repeated start changes
    nothing wherever it goes. And it is the acknowledgement the server resends the command without."""
    return isinstance(item[1], protocol.CommandStarted)


# A batch's time on a server busy with a fleet is mostly waiting, not its size (dispatch.py: a batch of
# 1 start 0.17-0.4 s, of 500 starts 0.7-0.8 s): a thousand agents' starts go in one batch fewer.
store_command_report = Batched(store_command_reports, ahead=_is_start, max_batch=1000)


def commands_on_connect(node_ids: Sequence[int]) -> dict[int, list[bytes]]:
    """The commands and cancels each node's agent is sent after its Welcome (apps/jobs decides which)."""
    return commands.frames_on_connect_of(node_ids, timezone.now())


def node_unreachable(node: Node) -> None:
    """A node fell silent: audited, a liveness failure raised (apps.failures), its liveness announced."""
    logger.warning("%s is unreachable (last seen %s)", node.hostname, node.last_seen_at)
    record("node.unreachable", actor="system:liveness", obj=node, last_seen_at=_iso(node))
    raise_liveness_failure(node.pk)
    announce_liveness(node)


def nodes_still_unreachable(node_ids: list[int], now: datetime) -> None:
    """Nodes still silent at a sweep: a liveness failure resolved meanwhile is raised again (apps.failures)."""
    sight_liveness_failures(node_ids, at=now)


def node_recovered(node: Node) -> None:
    """An unreachable node's agent is back: audited, its liveness failures resolved, its liveness announced."""
    logger.info("%s is reachable again", node.hostname)
    record("node.recovered", actor="system:liveness", obj=node, last_seen_at=_iso(node))
    resolve_liveness_failures(node.pk)
    announce_liveness(node)


def announce_liveness(node: Node) -> None:
    """The node's liveness changed: whoever listens hears of it once it is committed (browsers see it)."""
    announce(NodeChanged(node.pk, "liveness"))


def _iso(node: Node) -> str | None:
    return node.last_seen_at.isoformat() if node.last_seen_at else None
