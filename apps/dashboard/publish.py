"""The one way code outside the live streams tells browsers that a node or a failure changed.

Call these from synchronous code, where the change is made (inside or outside a transaction):
the message is sent once the transaction commits, so a browser never sees a change that was rolled
back, and a failure to publish (Redis away) is logged and never fails the change itself.

- ``publish_node_state(node)``: its lifecycle or liveness changed (``Node.transition``; the gateway's
  liveness tracking calls it too). Sent to ``node.<id>`` and ``fleet``.
- ``publish_failure(failure)``: a failure was opened, repeated, linked to a cause, acknowledged or
  resolved (apps/failures). Its current row, as the REST API shows it, goes to ``node.<id>`` and to
  ``failures`` (the failures page's feed); the node's alarm count and worst severity go to
  ``fleet`` when they changed.

Messages (channel layer ``type`` → consumer handler): ``node.state`` {node, state: {field: value}},
``failure.update`` {node, failure: {...}, state: {alarms, severity}}.

Rows are read back after the commit rather than sent as the caller holds them: what browsers get is
what is committed (a caller's copy of a node may hold a lifecycle another process has changed since),
and an XID storm that repeats one failure 50 times in one transaction costs one message with the
final count (the other 49 read the same row and are dropped as already sent).
"""

import logging
import threading
from collections import OrderedDict
from functools import partial
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

# Inventory's models import this module, so app modules (which import those models) are imported
# where they are used, once the commit has happened.
if TYPE_CHECKING:
    from apps.failures.models import Failure
    from apps.inventory.models import Node

log = logging.getLogger(__name__)

_REMEMBERED = 10_000  # payloads remembered to drop repeats (a few MB at most)
FAILURES_GROUP = "failures"


class _LastSent:
    """The last payload sent per key, to drop what browsers already have (bounded, thread-safe:
    commits happen on many threads)."""

    def __init__(self, size: int = _REMEMBERED) -> None:
        self._size = size
        self._sent: OrderedDict[object, Any] = OrderedDict()
        self._lock = threading.Lock()

    def is_new(self, key: object, payload: Any) -> bool:
        """Note ``payload`` as sent for ``key``; False when that is what was sent last."""
        with self._lock:
            if self._sent.get(key) == payload:
                return False
            self._sent[key] = payload
            self._sent.move_to_end(key)
            if len(self._sent) > self._size:
                self._sent.popitem(last=False)
            return True


_last_sent = _LastSent()


def publish_node_state(node: "Node") -> None:
    transaction.on_commit(partial(_publish_node_state, node.pk), robust=True)


def publish_failure(failure: "Failure") -> None:
    transaction.on_commit(partial(_publish_failure, failure.pk), robust=True)


def _publish_node_state(node_id: int) -> None:
    from apps.dashboard import streams

    state = streams.node_state(node_id)
    if state is None or not _last_sent.is_new(("node", node_id), state):
        return
    message = {"type": "node.state", "node": node_id, "state": state}
    _send(node_id, to_node=message, to_fleet=message)


def _publish_failure(failure_id: int) -> None:
    from apps.dashboard import streams

    update = streams.failure_update(failure_id)
    if update is None or not _last_sent.is_new(("failure", failure_id), update[1]):
        return
    node_id, payload = update
    alarms = streams.node_alarms(node_id)
    fleet_message = {"type": "node.state", "node": node_id, "state": alarms}
    failure_message = {"type": "failure.update", "node": node_id, "failure": payload, "state": alarms}
    _send(
        node_id,
        to_node=failure_message,
        to_fleet=fleet_message if _last_sent.is_new(("alarms", node_id), alarms) else None,
        to_failures=failure_message,
    )


def _send(
    node_id: int,
    *,
    to_node: dict[str, Any],
    to_fleet: dict[str, Any] | None,
    to_failures: dict[str, Any] | None = None,
) -> None:
    from apps.telemetry.live import FLEET_GROUP, node_group

    layer = get_channel_layer()
    if layer is None:
        return

    async def send() -> None:
        await layer.group_send(node_group(node_id), to_node)
        if to_fleet is not None:
            await layer.group_send(FLEET_GROUP, to_fleet)
        if to_failures is not None:
            await layer.group_send(FAILURES_GROUP, to_failures)

    try:
        async_to_sync(send)()
    except Exception as exc:  # whatever the layer raises, the change itself is committed
        log.warning("Could not publish %s of node %d to browsers: %s", to_node["type"], node_id, exc)
