"""Node and failure changes to browsers: the live streams' subscriber to the domain's ``NodeChanged``
and ``FailureChanged`` events (apps/core/events.py; subscribed in apps/dashboard/apps.py).

- ``ChangePublisher.node_changed``: a node's lifecycle (``Node.transition``) or liveness (the gateway) changed. Its
  ``hostname``, ``lifecycle`` and ``liveness`` go to ``node.<id>`` and ``fleet``.
- ``ChangePublisher.failure_changed``: a failure was opened, repeated, linked to a cause, told a recovery action,
  acknowledged or resolved (apps/failures). Its current row, as the REST API shows it, goes to
  ``node.<id>`` and to ``failures`` (the failures page's feed); the node's alarm count and worst
  severity go to ``fleet`` when they changed.

Messages (channel layer ``type`` → consumer handler): ``node.state`` {node, state: {field: value}},
``failure.update`` {node, failure: {...}, state: {alarms, severity}}, ``run.update`` {run, summary}.

- ``ChangePublisher.run_changed`` / ``command_changed``: a run started or ended, or one of its commands
  changed state, made progress or wrote a log line (apps/jobs). The run's summary
  (apps/dashboard/streams.py ``run_summary``) goes to ``runs``.

Events arrive once their transaction has committed, and rows are read back then rather than taken
from the event: what browsers get is what is committed (a caller's copy of a node may hold a
lifecycle another process has changed since). An XID storm that repeats one failure 50 times in one
transaction is one event (the seam delivers an event once per transaction), and a payload equal to
the one last sent for the same node or failure is dropped (``forget`` forgets them: the server stopped).

A send that fails (Redis away) raises: the seam logs it as a warning with its cause and counts it
against this subscriber, and the change itself stays committed.
"""

import threading
from collections import OrderedDict
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from apps.core.events import CommandChanged, FailureChanged, NodeChanged, RunChanged
from apps.dashboard import streams
from apps.dashboard.messages import FAILURES_GROUP, FLEET_GROUP, RUNS_GROUP, node_group

_REMEMBERED = 10_000  # payloads remembered to drop repeats (a few MB at most)


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


class ChangePublisher:
    def __init__(self) -> None:
        self._last_sent = _LastSent()

    def node_changed(self, event: NodeChanged) -> None:
        node_id = event.node_id
        state = streams.node_state(node_id)
        if state is None or not self._last_sent.is_new(("node", node_id), state):
            return
        message = {"type": "node.state", "node": node_id, "state": state}
        _send(node_id, to_node=message, to_fleet=message)

    def failure_changed(self, event: FailureChanged) -> None:
        update = streams.failure_update(event.failure_id)
        if update is None or not self._last_sent.is_new(("failure", event.failure_id), update[1]):
            return
        node_id, payload = update
        alarms = streams.node_alarms(node_id)
        fleet_message = {"type": "node.state", "node": node_id, "state": alarms}
        failure_message = {"type": "failure.update", "node": node_id, "failure": payload, "state": alarms}
        _send(
            node_id,
            to_node=failure_message,
            to_fleet=fleet_message if self._last_sent.is_new(("alarms", node_id), alarms) else None,
            to_failures=failure_message,
        )

    def run_changed(self, event: RunChanged | CommandChanged) -> None:
        summary = streams.run_summary(event.run_id)
        if summary is None or not self._last_sent.is_new(("run", event.run_id), summary):
            return
        layer = get_channel_layer()
        if layer is not None:
            async_to_sync(layer.group_send)(RUNS_GROUP, {"type": "run.update", "run": event.run_id, "summary": summary})

    command_changed = run_changed

    def forget(self) -> None:
        """Forget what was sent: the next change of every node and failure is sent whole."""
        self._last_sent = _LastSent()


def _send(
    node_id: int,
    *,
    to_node: dict[str, Any],
    to_fleet: dict[str, Any] | None,
    to_failures: dict[str, Any] | None = None,
) -> None:
    layer = get_channel_layer()
    if layer is None:
        return

    async def send() -> None:
        await layer.group_send(node_group(node_id), to_node)
        if to_fleet is not None:
            await layer.group_send(FLEET_GROUP, to_fleet)
        if to_failures is not None:
            await layer.group_send(FAILURES_GROUP, to_failures)

    async_to_sync(send)()
