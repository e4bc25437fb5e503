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

- ``ChangePublisher.run_changed`` / ``commands_changed``: a run started or ended, or some of its
  commands changed state, made progress or wrote log lines (apps/jobs). The run's summary
  (apps/dashboard/streams.py ``run_summary``) goes to ``runs``.

Events arrive once their transaction has committed, and the subscriber only notes them and returns:
it runs on the thread that committed, which at a fleet's connect is the gateway's admission thread
welcoming hundreds of agents (a read and two Redis round trips per node, waiting on the server's
event loop, held their Welcomes back). What is noted is sent in order on the publisher's own thread
and event loop; rows are read back then rather than taken from the event, so what browsers get is
what is committed (a caller's copy of a node may hold a lifecycle another process has changed since),
and a node noted again before its turn is read and sent once. An XID storm that repeats one failure
50 times in one transaction is one event (the seam delivers an event once per transaction), and a
payload equal to the one last sent for the same node or failure is dropped.

A send that fails (Redis away) is logged as a warning with its cause, once per outage, and counted
(``failed_sends``); the change itself stays committed. ``flush`` waits until what is noted is sent;
``shutdown`` sends it, lets the thread and loop go and forgets what was sent.
"""

import asyncio
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from django.db import close_old_connections

from apps.core.events import CommandsChanged, FailureChanged, NodeChanged, RunChanged
from apps.core.process import DatabaseThread, ProcessPart
from apps.dashboard import streams
from apps.dashboard.live import MAX_CONCURRENT_SENDS
from apps.dashboard.loops import LoopThread
from apps.dashboard.messages import FAILURES_GROUP, FLEET_GROUP, RUNS_GROUP, node_group

log = logging.getLogger(__name__)

_REMEMBERED = 10_000  # payloads remembered to drop repeats (a few MB at most)
_SEND_WAIT_S = 60.0  # a round of sends that takes longer is given up on (the pool waits 10 s per connection)
Message = dict[str, Any]


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


class ChangePublisher(ProcessPart):
    def __init__(self) -> None:
        self._last_sent = _LastSent()
        self._lock = threading.Lock()  # what is noted and whether a drain is under way: noted on many threads
        self._noted: dict[tuple[str, int], Callable[[], list[tuple[str, Message]]]] = {}
        self._draining: Future[None] | None = None
        self._thread = DatabaseThread("change-publisher")
        self._own: LoopThread | None = None
        self._failing = False
        self.failed_sends = 0

    # The subscribers, on the thread that committed: note and return.

    def node_changed(self, event: NodeChanged) -> None:
        self._note(("node", event.node_id), lambda: self._node_messages(event.node_id))

    def failure_changed(self, event: FailureChanged) -> None:
        self._note(("failure", event.failure_id), lambda: self._failure_messages(event.failure_id))

    def run_changed(self, event: RunChanged) -> None:
        self._note_run(event.run_id)

    def commands_changed(self, event: CommandsChanged) -> None:
        for run_id in event.run_ids:
            self._note_run(run_id)

    def _note_run(self, run_id: int) -> None:
        self._note(("run", run_id), lambda: self._run_messages(run_id))

    def flush(self) -> None:
        """Wait until everything noted so far is sent (or given up on)."""
        while (draining := self._draining) is not None:
            draining.result()

    async def shutdown(self) -> None:
        """Send what is noted, let the thread and loop go, forget what was sent: the next change of every
        node and failure is sent whole."""
        await asyncio.to_thread(self.flush)
        await self._thread.shutdown()
        own, self._own = self._own, None
        if own is not None:
            await own.stop()
        self._last_sent = _LastSent()

    # On the publisher's thread.

    def _note(self, key: tuple[str, int], messages: Callable[[], list[tuple[str, Message]]]) -> None:
        with self._lock:
            self._noted.setdefault(key, messages)
            if self._draining is None:
                self._draining = self._thread.executor.submit(self._drain)

    def _drain(self) -> None:
        try:
            close_old_connections()
            while True:
                with self._lock:
                    noted, self._noted = self._noted, {}
                if not noted:
                    return
                outgoing: list[tuple[str, Message]] = []
                for messages in noted.values():
                    try:
                        outgoing += messages()
                    except Exception:  # one row that cannot be read must not stop the others
                        log.exception("Live changes: a change could not be read")
                self._send(outgoing)
        finally:
            with self._lock:  # noted after the last look (or left by a failure) gets a drain of its own
                self._draining = self._thread.executor.submit(self._drain) if self._noted else None

    def _node_messages(self, node_id: int) -> list[tuple[str, Message]]:
        state = streams.node_state(node_id)
        if state is None or not self._last_sent.is_new(("node", node_id), state):
            return []
        message = {"type": "node.state", "node": node_id, "state": state}
        return [(node_group(node_id), message), (FLEET_GROUP, message)]

    def _failure_messages(self, failure_id: int) -> list[tuple[str, Message]]:
        update = streams.failure_update(failure_id)
        if update is None or not self._last_sent.is_new(("failure", failure_id), update[1]):
            return []
        node_id, payload = update
        alarms = streams.node_alarms(node_id)
        failure_message = {"type": "failure.update", "node": node_id, "failure": payload, "state": alarms}
        messages = [(node_group(node_id), failure_message), (FAILURES_GROUP, failure_message)]
        if self._last_sent.is_new(("alarms", node_id), alarms):
            messages.append((FLEET_GROUP, {"type": "node.state", "node": node_id, "state": alarms}))
        return messages

    def _run_messages(self, run_id: int) -> list[tuple[str, Message]]:
        summary = streams.run_summary(run_id)
        if summary is None or not self._last_sent.is_new(("run", run_id), summary):
            return []
        return [(RUNS_GROUP, {"type": "run.update", "run": run_id, "summary": summary})]

    def _send(self, messages: list[tuple[str, Message]]) -> None:
        if not messages:
            return
        if self._own is None:
            self._own = LoopThread.start("change-publisher")
        layer = self._own.layer  # the loop's own: connections of the process's layer belong to the server's loop

        by_group: dict[str, list[Message]] = {}
        for group, message in messages:
            by_group.setdefault(group, []).append(message)
        in_flight = asyncio.Semaphore(MAX_CONCURRENT_SENDS)

        async def send_in_order(group: str, group_messages: list[Message]) -> None:
            async with in_flight:
                for message in group_messages:
                    await layer.group_send(group, message)

        async def send() -> list[BaseException | None]:
            return await asyncio.gather(*(send_in_order(g, m) for g, m in by_group.items()), return_exceptions=True)

        try:
            failures = [r for r in self._own.submit(send()).result(timeout=_SEND_WAIT_S) if r is not None]
        except Exception as exc:
            failures = [exc]
        self.failed_sends += len(failures)
        if failures and not self._failing:  # logged once per outage, not once per round; counted always
            log.warning("Live changes: sends to %d of %d groups failed: %s", len(failures), len(by_group), failures[0])
        self._failing = bool(failures)
