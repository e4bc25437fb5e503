"""Domain events: how a change made in one app reaches the others that care, once it is committed.

The domain announces what happened where it makes the change (``announce(NodeChanged(...))`` in
``Node.transition``). The announcement waits for the transaction to commit, then goes to every
subscriber of its type, one after another, on the thread that committed and outside any transaction:

- a change that is rolled back is never delivered, nor one announced in a savepoint that is rolled
  back (Django drops its on-commit callbacks); outside a transaction, delivery is at once;
- the same event announced twice in one transaction is delivered once: an XID storm repeats one
  failure fifty times in a transaction, and its subscribers read the committed row once;
- a subscriber that raises is logged as a warning with its cause and counted (``bus.failures``, by
  subscriber); the change stays committed and the other subscribers still hear of it.

Subscribers register in their app's ``AppConfig.ready()`` and know nothing of each other (NetBox's
extras/events.py is the model: the model announces, the presenters and adapters listen). Today:

- the live streams (apps/dashboard/apps.py): node and failure changes, and stored telemetry, to browsers;
- the failures' telemetry watch (apps/failures/apps.py): ECC, row-remapping and recovery-action
  counters, and thermal and power-brake throttling, in stored telemetry raise failures;
- the gateway (apps/gateway/apps.py): commands and cancels for agents, to their nodes' sockets.

Where a subscriber runs matters: it holds up the committing thread for as long as it runs. One that
does database work does it there, in transactions of its own (the telemetry watch, on the ingest's
writer thread, before the agent gets its ack). One that lives on an event loop hands the event over
and returns (the live publisher: ``call_soon_threadsafe`` to its loop; the change publisher notes the
ids for its own thread). Anything slow, remote or that must be retried is queued as a Celery task that
takes ids, never done on the committing thread.
That is how the subscribers still to come will listen:

- notifications (apps/notify): on ``FailureChanged``, an outbox row in a transaction of their own,
  delivered with retries by a task;
- the audit of automatic actions: on what the automation announces (a quarantine refused, ...), an
  audit row;
- scheduler adapters (Slurm, Kubernetes): on ``NodeChanged``, a task with the node's id that drains or
  resumes it in the scheduler.

An event is a frozen dataclass here: ids and the few facts a subscriber needs to decide whether it
cares, not rows (a subscriber reads the committed state). Runs and commands (apps/jobs) announce
``RunChanged`` and ``CommandsChanged`` (commands' states, progress or log lines, a batch at a time)
for the dashboard's progress bars and a run's log to follow, and ``CommandsDispatched``, the frames
the gateway carries. Burn-ins (apps/burnin) announce ``QuarantineBreakerChanged`` when a cluster's
quarantine breaker opens or closes; they listen to ``CommandsChanged`` (to judge nodes whose steps
are over) and to ``NodeChanged`` (to burn in a new node when its agent first comes online).

This module imports no app: every layer above it may announce and subscribe.
"""

import logging
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal, NamedTuple, TypeVar

from django.db import DEFAULT_DB_ALIAS, transaction

from agents.protocol import Telemetry

log = logging.getLogger(__name__)


class DomainEvent:
    """Base of every event. Events are values: two equal ones announced in one transaction are
    delivered once (an event whose payload is not a plain value compares by identity instead)."""

    __slots__ = ()


E = TypeVar("E", bound=DomainEvent)
Subscriber = Callable[[E], None]


# The events -----------------------------------------------------------------------------------

NodeChange = Literal["lifecycle", "liveness"]


@dataclass(frozen=True, slots=True)
class NodeChanged(DomainEvent):
    """A node's lifecycle state (``Node.transition``) or liveness (the gateway) changed."""

    node_id: int
    change: NodeChange


FailureChange = Literal["opened", "repeated", "linked", "recovery_action", "acknowledged", "resolved"]


@dataclass(frozen=True, slots=True)
class FailureChanged(DomainEvent):
    """A failure was opened, counted again, linked to its cause, told a recovery action, acknowledged or
    resolved (apps/failures). Its side effects resolved with it are not announced one by one."""

    failure_id: int
    node_id: int
    change: FailureChange


class NodeTelemetry(NamedTuple):
    node_id: int
    message: Telemetry


@dataclass(frozen=True, slots=True, eq=False)
class TelemetryStored(DomainEvent):
    """Telemetry messages just committed by the ingest, each once: a replayed duplicate is not among them."""

    messages: tuple[NodeTelemetry, ...]

    def __repr__(self) -> str:  # a batch can hold a thousand nodes' samples: not for a log line
        return f"TelemetryStored({len(self.messages)} messages)"


RunChange = Literal["started", "finished"]


@dataclass(frozen=True, slots=True)
class RunChanged(DomainEvent):
    """A run started, or ended (judged, or cancelled) (apps/jobs)."""

    run_id: int
    change: RunChange


CommandChange = Literal["started", "state", "progress", "log"]


class ChangedCommand(NamedTuple):
    command_id: int
    run_id: int
    node_id: int


@dataclass(frozen=True, slots=True)
class CommandsChanged(DomainEvent):
    """Commands of runs started on their nodes' agents, changed state otherwise (they ended, mostly),
    made progress or wrote log lines (apps/jobs). The dashboard's progress bars and a run's log follow
    these; the rows (and their log lines) hold the values.

    One event for all the commands that changed the same way in one transaction: a thousand agents
    answer one run together, their reports are stored in batches, and a subscriber that looked at each
    command's end on its own (a query, a task) held the next batch's acknowledgements back for seconds
    (benchmarks/dispatch.py). A start is told apart because a thousand come at once when a run begins,
    and those that wait for a command's end (burn-ins) need not look."""

    change: CommandChange
    commands: tuple[ChangedCommand, ...]

    def __repr__(self) -> str:
        return f"CommandsChanged({self.change!r}, {len(self.commands)} commands)"

    @property
    def command_ids(self) -> list[int]:
        return [command.command_id for command in self.commands]

    @property
    def run_ids(self) -> set[int]:
        return {command.run_id for command in self.commands}


class AgentFrame(NamedTuple):
    node_id: int
    frame: bytes  # one encoded server → agent message of agents.protocol


@dataclass(frozen=True, slots=True)
class CommandsDispatched(DomainEvent):
    """Commands (or cancels of commands) for agents, recorded as sent and committed: the gateway carries
    each frame to its node's socket. A frame that never arrives is sent again (apps/jobs/dispatch.py)."""

    frames: tuple[AgentFrame, ...]

    def __repr__(self) -> str:
        return f"CommandsDispatched({len(self.frames)} frames)"


BreakerChange = Literal["opened", "closed"]


@dataclass(frozen=True, slots=True)
class QuarantineBreakerChanged(DomainEvent):
    """A cluster's automatic-quarantine circuit breaker opened (automation stopped quarantining: a
    critical alert, until a person decides) or a person closed it (apps/burnin/breaker.py)."""

    cluster_id: int
    change: BreakerChange


# Delivery -------------------------------------------------------------------------------------


class _Commit:
    """The announcements of one transaction on one connection, delivered once it commits."""

    __slots__ = ("delivered", "delivering")

    def __init__(self) -> None:
        self.delivered: set[DomainEvent] = set()
        self.delivering = False


class EventBus:
    def __init__(self) -> None:
        self._subscribers: defaultdict[type[DomainEvent], list[Subscriber]] = defaultdict(list)
        self._local = threading.local()  # this thread's _Commit per database alias, as its connections
        self.failures: Counter[str] = Counter()  # subscribers that raised, by name

    def subscribe(self, event_type: type[E], subscriber: Subscriber[E]) -> None:
        """Call ``subscriber`` with every ``event_type`` event once it is committed."""
        if subscriber not in self._subscribers[event_type]:
            self._subscribers[event_type].append(subscriber)

    def unsubscribe(self, event_type: type[E], subscriber: Subscriber[E]) -> None:
        self._subscribers[event_type].remove(subscriber)

    def announce(self, event: DomainEvent, *, using: str = DEFAULT_DB_ALIAS) -> None:
        """Deliver ``event`` once the current transaction on ``using`` commits (at once outside one).
        Synchronous code only, like the transaction it waits for."""
        commits: dict[str, _Commit] = self._local.__dict__.setdefault("commits", {})
        commit = commits.get(using)
        if commit is None or commit.delivering:  # the first announcement since the last commit
            commit = commits[using] = _Commit()
        transaction.on_commit(partial(self._deliver, commit, event), using=using)

    def _deliver(self, commit: _Commit, event: DomainEvent) -> None:
        commit.delivering = True
        if event in commit.delivered:
            return
        commit.delivered.add(event)
        for subscriber in list(self._subscribers.get(type(event), ())):
            try:
                subscriber(event)
            except Exception as exc:
                name = _name(subscriber)
                self.failures[name] += 1
                log.warning(
                    "%s failed on %s (the change is committed; the other subscribers heard of it): %s",
                    name,
                    event,
                    exc,
                    exc_info=True,
                )


def _name(subscriber: Callable[..., object]) -> str:
    return f"{getattr(subscriber, '__module__', '?')}.{getattr(subscriber, '__qualname__', repr(subscriber))}"


bus = EventBus()
announce = bus.announce
subscribe = bus.subscribe
unsubscribe = bus.unsubscribe
