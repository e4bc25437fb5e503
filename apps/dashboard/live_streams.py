"""The live streams' share of a server process (apps/core/process.py): what they hold while it runs.

- ``stats``: running totals of the ``ws/live`` consumers (connections accepted, refused and closed,
  client messages rejected, snapshots and deltas sent, pushes that failed), for health pages and tests.
  The live publisher and the change publisher count their failures too (``telemetry.failed_sends``;
  the seam counts a subscriber that raised: apps/core/events.py ``bus.failures``).
- ``snapshot_thread``: where fleet snapshots are read, one at a time (apps/dashboard/consumers.py says why).
- ``telemetry``: stored telemetry to browsers (apps/dashboard/live.py), on an event loop of its own.
- ``changes``: node and failure changes to browsers (apps/dashboard/publish.py), with what it last sent.
- ``fleet``: the fleet as the stream says it is now (apps/dashboard/fleet_mirror.py), for the fleet
  page's first drawing: a part of its own (apps/dashboard/apps.py adds it ahead of this one, so that
  it stops before the snapshot thread it reads on), started only where pages are served.

Shut down, they send what is noted, stop the publisher's loop, close the snapshot thread's
connection and forget what was sent; the totals stay.
"""

from collections import Counter
from dataclasses import dataclass, field

from apps.core.process import DatabaseThread, ProcessPart
from apps.dashboard.fleet_mirror import FleetMirror
from apps.dashboard.live import LivePublisher
from apps.dashboard.publish import ChangePublisher


@dataclass
class LiveStreamStats:
    accepted: int = 0
    refused: Counter[str] = field(default_factory=Counter)  # on connect, by Refusal name
    closed: Counter[str] = field(default_factory=Counter)  # by a later check, by Refusal name or "error"
    rejected: Counter[str] = field(default_factory=Counter)  # client messages answered with an error, by reason
    snapshots: int = 0
    deltas: int = 0
    failed_pushes: int = 0  # deltas that could not be sent, for another cause than a client that left


class LiveStreams(ProcessPart):
    def __init__(self) -> None:
        self.stats = LiveStreamStats()
        self.snapshot_thread = DatabaseThread("live-snapshot")
        self.telemetry = LivePublisher()
        self.changes = ChangePublisher()
        self.fleet = FleetMirror(self.snapshot_thread)

    def start(self) -> None:
        self.telemetry.start()

    async def shutdown(self) -> None:
        await self.telemetry.shutdown()
        await self.snapshot_thread.shutdown()
        await self.changes.shutdown()


live_streams = LiveStreams()
