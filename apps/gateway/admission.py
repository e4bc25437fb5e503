"""An agent connection's database work at its start and end, batched across every agent of the process.

Each agent connection authenticates (the credential's row, and when and from where it connected),
says Hello (the node heard from, its agent record, the seqs already stored, the commands it should
have) and, at the end, records its disconnect. Done one connection at a time, that was a handful of
queries and three commits per agent, queued on the one thread Channels gives every consumer's
database work in a process: a fleet of 2,000 agents connecting at once (a server restart) queued
for longer than the agents' 10 s handshake timeout, the agents at the back gave up and came back,
and the work done for them was wasted, so the queue never drained (1,938 of 2,000 connected after
three minutes). Batched (apps/core/batching.py), whatever arrived while the previous batch ran
goes in one trip: one query for the credentials, one transaction for the Hellos, one for the
disconnects.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from agents import protocol
from apps.core.batching import Batched
from apps.core.bulk import update_from_values
from apps.gateway import liveness, sinks
from apps.gateway.models import NodeAgent, NodeCredential
from apps.inventory.models import Node


@dataclass(frozen=True, slots=True)
class Arrival:
    """An agent's Hello, as the consumer took it."""

    node: Node
    hello: protocol.Hello
    remote_addr: str | None
    at: datetime
    channel_name: str = ""  # the consumer's, where commands for the node are sent (apps/gateway/push.py)


@dataclass(frozen=True, slots=True)
class Welcomed:
    """What the consumer needs for the Welcome and right after it."""

    telemetry_seq: int
    events_seq: int
    commands: list[bytes]  # the commands and cancels to send after the Welcome (apps/jobs)


def authenticate_all(presented: Sequence[tuple[str, str | None]]) -> list[NodeCredential | None]:
    """Each ``(secret, remote address)``'s usable credential, or None; those found are recorded as connected."""
    credentials = NodeCredential.authenticate_many([secret for secret, _ in presented])
    addresses = [ip for _, ip in presented]
    connected = [(found, ip) for found, ip in zip(credentials, addresses, strict=True) if found is not None]
    if connected:
        NodeCredential.record_connections(connected)
    return credentials


def welcome_all(arrivals: Sequence[Arrival]) -> list[Welcomed]:
    """The nodes' agents said Hello: heard from, their agent records written, their stored seqs read."""
    node_ids = [arrival.node.pk for arrival in arrivals]
    with transaction.atomic():
        liveness.record_heard(node_ids, max(arrival.at for arrival in arrivals))
        NodeAgent.objects.bulk_create(
            [
                NodeAgent(
                    node=arrival.node,
                    agent_version=arrival.hello.agent_version,
                    protocol=arrival.hello.protocol,
                    simulated=arrival.hello.simulated,
                    connected_at=arrival.at,
                    remote_addr=arrival.remote_addr,
                    channel_name=arrival.channel_name,
                )
                for arrival in _last_per_node(arrivals)
            ],
            update_conflicts=True,
            unique_fields=["node"],
            update_fields=["agent_version", "protocol", "simulated", "connected_at", "remote_addr", "channel_name"],
        )
        cursors = sinks.stored_cursors_of(node_ids)
    commands = sinks.commands_on_connect(node_ids)
    return [Welcomed(*cursors.get(node_id, (0, 0)), commands[node_id]) for node_id in node_ids]


def record_disconnects(departures: Sequence[tuple[int, datetime]]) -> list[None]:
    """These ``(node id, connected at)`` connections ended: each updates its own agent record only
    (a newer connection of the node may already be up).

    One statement for the batch, not one per departure: a server stopping with a thousand agents per
    process ended them all at once, and a thousand UPDATEs on the consumers' shared database thread
    outlasted the shutdown's grace. Rows are listed in node order, as the Hellos' upsert lists them."""
    table = NodeAgent._meta.db_table
    adapt = connection.ops.adapt_datetimefield_value
    with transaction.atomic(), connection.cursor() as cursor:
        update_from_values(
            cursor,
            table,
            ["node_id", "connected_at"],
            [(node_id, adapt(at)) for node_id, at in sorted(departures)],
            set_sql="disconnected_at = %s, channel_name = ''",
            where_sql=f"{table}.node_id = v.node_id AND {table}.connected_at <= v.connected_at",
            params=[adapt(timezone.now())],
        )
    return [None] * len(departures)


def _last_per_node(arrivals: Sequence[Arrival]) -> list[Arrival]:
    """One Hello per node (a node whose agent reconnected within one batch): the latest, in node order.

    In node order because the upsert locks its rows in the order it lists them, and the other writers
    of the same rows (the bookkeeper, bookkeeping.py, and the disconnects) lock them in node order
    too: listed as the agents arrived, the upsert deadlocked with them when a fleet reconnected, the
    batch was retried one Hello at a time, the Welcomes at its back came after the agents' 10 s
    timeout, and those agents came back."""
    latest: dict[int, Arrival] = {}
    for arrival in arrivals:
        if arrival.node.pk not in latest or arrival.at >= latest[arrival.node.pk].at:
            latest[arrival.node.pk] = arrival
    return [latest[node_id] for node_id in sorted(latest)]


authenticate = Batched(authenticate_all)
welcome = Batched(welcome_all)
record_disconnect = Batched(record_disconnects)
