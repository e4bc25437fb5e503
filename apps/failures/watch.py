"""The telemetry watch: what every stored sample says about failures, judged in one place for the
simulated fleet and real agents alike.

It hears of every stored telemetry batch (``TelemetryStored``, apps/core/events.py; subscribed in
apps/failures/apps.py, on the ingest's writer thread once the batch is committed, so a replayed
duplicate is not in it) and, for each GPU and port sample, at the sample's own time:

- **counters that moved** against the GPU's previous sample (an uncorrected ECC count rising, rows
  newly pending or failed remapping, a new recovery action): ``failures_from_sample_deltas``
  (apps/failures/counters.py) raises them at once;
- **conditions that last** (``Lasting``): thermal and power-brake throttling
  (apps/failures/throttling.py, against the GPU's slowdown threshold from the inventory), rows still
  pending or failed remapping, a recovery action still asked for, and a network port that stays down
  or keeps flapping once the watch has seen it up (the agent's event for its going down opened the
  failure; a port never up, not cabled or not in use, is none). Each is sighted once it has lasted
  its hold (a minute), then again every ``RESIGHT`` while it lasts: the failure's count and last
  sighting move on, and when someone resolved it while the condition was still there, the next
  sighting opens a new one. A sample without the evidence does not end it at once (a bit that
  flickers at a threshold, a lost sample): it ends once the evidence has been missing for ``GAP``.

What it remembers is each GPU's last sample, the ports it has seen up and the conditions under way,
in memory: at 8,000 samples a second, the database is touched only for the rare sample that moved a
counter or sighted a condition, and for the GPUs' slowdown thresholds (one query per batch for the
nodes it has not read in ``THRESHOLDS_TTL``). Shut down, it forgets: after a restart, counters are
compared from the next sample and conditions held afresh.
"""

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, NamedTuple

from agents.protocol import GpuSample, PortSample
from apps.core.events import TelemetryStored
from apps.core.process import ProcessPart
from apps.failures import conditions, throttling
from apps.failures import xid as catalog
from apps.failures.conditions import Condition, Observation
from apps.failures.counters import TELEMETRY_ACTOR, failures_from_sample_deltas, recovery_action_seen, watched
from apps.failures.events import port_name
from apps.failures.models import Failure
from apps.failures.recording import raise_failure
from apps.inventory.models import Gpu

RESIGHT: Final = timedelta(seconds=60)  # how often a condition that lasts is sighted again
GAP: Final = timedelta(seconds=10)  # how long its evidence may be missing before it has ended
THRESHOLDS_TTL: Final = 600.0  # seconds before a node's slowdown thresholds are read again

Subject = GpuSample | PortSample  # what a condition that lasts is seen in
Sight = Callable[[int, Any, datetime, timedelta], list[Failure]]  # (node, its subject, at, how long it lasted)


class Lasting(NamedTuple):
    """A condition one sample shows, that only counts once it has lasted ``hold``."""

    code: str
    hold: timedelta
    sight: Sight


@dataclass(slots=True)
class _Run:
    since: datetime
    sighted: datetime | None = None
    missing_since: datetime | None = None


def _held(condition: Condition, words: Callable[[GpuSample, timedelta], str]) -> Sight:
    def sight(node_id: int, sample: GpuSample, at: datetime, held: timedelta) -> list[Failure]:
        observation = Observation(
            node_id=node_id,
            at=at,
            condition=condition,
            gpu_index=sample.index,
            detail=words(sample, held),
            recovery_action=sample.recovery_action,
        )
        return [raise_failure(observation, actor=TELEMETRY_ACTOR, ongoing=True)]

    return sight


def _recovery_action(node_id: int, sample: GpuSample, at: datetime, held: timedelta) -> list[Failure]:
    assert sample.recovery_action is not None
    return recovery_action_seen(node_id, sample.index, sample.recovery_action, at)


def _for(held: timedelta) -> str:
    return f"for {held.total_seconds():.0f} s"


# Raised at once by the counters when they change; sighted again while they last.
ROWS_PENDING = Lasting(
    conditions.ROW_REMAP_PENDING.code,
    RESIGHT,
    _held(conditions.ROW_REMAP_PENDING, lambda s, held: f"A row is still pending remapping ({_for(held)})."),
)
ROWS_FAILED = Lasting(
    conditions.ROW_REMAP_FAILED.code,
    RESIGHT,
    _held(conditions.ROW_REMAP_FAILED, lambda s, held: f"Row remapping has failed ({_for(held)})."),
)


def _port_down(node_id: int, sample: PortSample, at: datetime, held: timedelta) -> list[Failure]:
    name = port_name(sample.device, sample.port)
    observation = Observation(
        node_id=node_id,
        at=at,
        condition=conditions.PORT_DOWN,
        port_name=name,
        detail=f"{name} is still {sample.state}, or keeps going down ({_for(held)}).",
    )
    return [raise_failure(observation, actor=TELEMETRY_ACTOR, ongoing=True)]


# A port's going down is an agent event (apps/failures/events.py); one that stays down or keeps
# flapping is sighted again while it lasts. Only a port this watch has seen up: one never up
# (not cabled, not in use) is no failure.
PORT_DOWN = Lasting(conditions.PORT_DOWN.code, RESIGHT, _port_down)


def lasting(sample: GpuSample, slowdown_c: float | None) -> list[Lasting]:
    """The conditions that last which one sample shows (usually none: this runs for every sample, so
    the common case is one test of what it reported)."""
    action = sample.recovery_action
    temp = sample.temp_c
    if not (
        (sample.throttle_reasons or 0) & throttling.SLOWDOWN_REASONS
        or sample.remapped_rows_pending
        or sample.remapped_rows_failed
        or (action is not None and action != catalog.NO_RECOVERY_ACTION)
        or (slowdown_c is not None and temp is not None and temp >= slowdown_c)
    ):
        return []
    found = [
        Lasting(
            condition.code,
            throttling.THROTTLE_HOLD,
            _held(condition, lambda s, held: throttling.describe(s, slowdown_c, held)),
        )
        for condition in throttling.throttling(sample, slowdown_c)
    ]
    if sample.remapped_rows_pending:
        found.append(ROWS_PENDING)
    if sample.remapped_rows_failed:
        found.append(ROWS_FAILED)
    if action is not None and action != catalog.NO_RECOVERY_ACTION:
        found.append(Lasting(f"recovery-action-{action}", RESIGHT, _recovery_action))
    return found


class TelemetryWatch(ProcessPart):
    def __init__(self) -> None:
        self._last: dict[tuple[int, int], GpuSample] = {}
        self._runs: dict[tuple[int, int | str], dict[str, _Run]] = {}  # by node and GPU index or port name
        self._ports_up: set[tuple[int, str, int]] = set()  # (node, device, port) seen active
        self._ports_held: set[tuple[int, str, int]] = set()  # those with a condition under way
        self._thresholds: dict[int, tuple[float, dict[int, float | None]]] = {}  # node → (read at, by GPU)

    def telemetry_stored(self, event: TelemetryStored) -> None:
        """The subscriber: the batch's nodes' thresholds read where stale, then each node's samples."""
        self._read_thresholds({node_id for node_id, _ in event.messages})
        for node_id, message in event.messages:
            samples = [(datetime.fromtimestamp(s.ts, UTC), s) for s in sorted(message.samples, key=lambda s: s.ts)]
            self.observe(node_id, [(at, s.gpus) for at, s in samples], [(at, s.ports) for at, s in samples])

    async def shutdown(self) -> None:
        self._last, self._runs, self._thresholds = {}, {}, {}
        self._ports_up, self._ports_held = set(), set()

    def observe(
        self,
        node_id: int,
        samples: list[tuple[datetime, list[GpuSample]]],
        ports: Iterable[tuple[datetime, list[PortSample]]] = (),
    ) -> list[Failure]:
        """Samples of one node, oldest first, each with its own time (its GPUs', and its ports'); the
        failures they raised or repeated."""
        if node_id not in self._thresholds:
            self._read_thresholds([node_id])
        slowdown = self._thresholds[node_id][1]
        raised: list[Failure] = []
        for at, gpus in samples:
            for gpu in gpus:
                key = (node_id, gpu.index)
                prev = self._last.get(key)
                self._last[key] = gpu
                if prev is not None and watched(prev) != watched(gpu):
                    raised += failures_from_sample_deltas(node_id, prev, gpu, at=at)
                shown = lasting(gpu, slowdown.get(gpu.index))
                if shown or key in self._runs:
                    raised += self._sight(key, gpu, at, shown)
        for at, port_samples in ports:
            for port in port_samples:
                raised += self._port(node_id, port, at)
        return raised

    def _port(self, node_id: int, sample: PortSample, at: datetime) -> list[Failure]:
        seen = (node_id, sample.device, sample.port)
        if sample.state == "active":  # nearly every sample: a set to add to and one to look in
            self._ports_up.add(seen)
            if seen not in self._ports_held:
                return []
            shown = []
        elif seen in self._ports_up:
            self._ports_held.add(seen)
            shown = [PORT_DOWN]
        else:
            return []
        key = (node_id, port_name(sample.device, sample.port))
        raised = self._sight(key, sample, at, shown)
        if key not in self._runs:
            self._ports_held.discard(seen)
        return raised

    def _sight(self, key: tuple[int, int | str], subject: Subject, at: datetime, shown: list[Lasting]) -> list[Failure]:
        """Carry a GPU's or port's conditions under way on to ``at``; sight those that have lasted long enough."""
        node_id = key[0]
        runs = self._runs.setdefault(key, {})
        raised: list[Failure] = []
        for condition in shown:
            run = runs.get(condition.code)
            if run is None or (run.missing_since is not None and at - run.missing_since > GAP):
                run = runs[condition.code] = _Run(since=at)
            run.missing_since = None
            held = at - run.since
            if held >= condition.hold and (run.sighted is None or at - run.sighted >= RESIGHT):
                run.sighted = at
                raised += condition.sight(node_id, subject, at, held)
        codes = {condition.code for condition in shown}
        for code, run in list(runs.items()):
            if code in codes:
                continue
            if run.missing_since is None:
                run.missing_since = at
            elif at - run.missing_since > GAP:
                del runs[code]
        if not runs:
            del self._runs[key]
        return raised

    def _read_thresholds(self, node_ids: Iterable[int]) -> None:
        """Each GPU's slowdown threshold, for the nodes not read in ``THRESHOLDS_TTL``: one query."""
        now = time.monotonic()
        stale = [n for n in node_ids if now - self._thresholds.get(n, (-THRESHOLDS_TTL, {}))[0] >= THRESHOLDS_TTL]
        if not stale:
            return
        for node_id in stale:
            self._thresholds[node_id] = (now, {})
        rows = Gpu.objects.filter(node_id__in=stale).values_list("node_id", "index", "slowdown_temp_c")
        for node_id, index, slowdown_c in rows:
            self._thresholds[node_id][1][index] = slowdown_c


telemetry_watch = TelemetryWatch()  # the server process's
