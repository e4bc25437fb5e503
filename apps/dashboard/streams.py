"""The two live streams' contents: what a snapshot holds (read from the database in a fixed number of
queries, whatever the fleet's size) and how each published event becomes a fragment of it.

Fleet entry (one per node): ``hostname, lifecycle, liveness, alarms, severity, alarm_gpus,
straggler_gpus`` and, once the node has reported, ``ts, gpus, util_gpu_mean, power_w_total,
temp_c_max, heat`` (as apps/dashboard/messages.py summarises a sample: ``heat`` holds each GPU's
heatmap cell). Node state: ``hostname, lifecycle, liveness, alarms, severity, ts``,
``gpus`` (by index: apps/dashboard/messages.py's LIVE_GPU_FIELDS and the ``ts`` of that GPU's newest
values, so that a GPU that stopped reporting shows its last values as stale) and ``failures`` (by id,
as the REST API's failure serializer writes them: the node's active failures, then every change
published).

A fleet entry sums up the GPUs of the node's newest sample: a GPU that fell off the bus, or that the
agent stopped seeing, is not in it, so it lends the node no old numbers as current ones.

``alarms`` counts the node's open or acknowledged failures that are not side effects of another
(what the failures feed shows); ``severity`` is the worst of them, or null; ``alarm_gpus`` lists the
indexes of the GPUs they name and ``straggler_gpus`` those flagged as stragglers (lists, so that a
delta replaces them whole and a resolved failure drops out).

Floats are rounded to one decimal (``ts`` to the millisecond) before they are compared or sent:
a dashboard shows no more, and a wattage that moved by 0.01 W is not worth a byte to anyone.
"""

from collections import defaultdict
from typing import Any, NamedTuple

from django.conf import settings
from django.db.models import OuterRef, QuerySet, Subquery

from apps.dashboard.deltas import Tree
from apps.dashboard.messages import LIVE_GPU_FIELDS, fleet_entry
from apps.failures.api.serializers import FailureSerializer
from apps.failures.choices import FailureKind, most_severe
from apps.failures.models import IS_ALARM, Failure
from apps.inventory.models import Node
from apps.jobs.models import CommandLogLine, Run
from apps.telemetry.models import LatestGpuSample

FLEET_TELEMETRY_FIELDS = ("ts", "gpus", "util_gpu_mean", "power_w_total", "temp_c_max", "heat")
ALARM_FIELDS = ("severity", "gpu_index", "kind")
NODE_FIELDS = ("hostname", "lifecycle", "liveness")


def stale_after_s() -> int:
    """A value older than this is not a value of now: a node silent this long is called unreachable
    (``AGENT_UNREACHABLE_AFTER_S``), and the pages show values this old as stale, with their age."""
    return settings.AGENT_UNREACHABLE_AFTER_S


def rounded(value: Any) -> Any:
    return round(value, 1) if isinstance(value, float) else value


def rounded_ts(ts: float | None) -> float | None:
    return None if ts is None else round(ts, 3)


def alarm_summary(alarms: list[tuple[str, int | None, str]]) -> Tree:
    """A node's alarm fields from its alarms' ``(severity, GPU index, kind)`` (``ALARM_FIELDS``)."""
    severities = [severity for severity, _, _ in alarms]
    return {
        "alarms": len(alarms),
        "severity": most_severe(*severities).value if severities else None,
        "alarm_gpus": sorted({gpu for _, gpu, _ in alarms if gpu is not None}),
        "straggler_gpus": sorted({gpu for _, gpu, kind in alarms if gpu is not None and kind == FailureKind.STRAGGLER}),
    }


def alarm_rows(failures: QuerySet[Failure]) -> QuerySet[Any]:
    """``failures`` as ``ALARM_FIELDS`` tuples (and the node id first)."""
    return failures.filter(IS_ALARM).values_list("node_id", *ALARM_FIELDS)


# From published events ------------------------------------------------------------------------


def fleet_fragment(entry: dict[str, Any]) -> Tree:
    """A ``telemetry.fleet`` entry (apps/dashboard/messages.py fleet_entry) as a fleet entry fragment."""
    return {field: rounded(entry[field]) for field in FLEET_TELEMETRY_FIELDS} | {"ts": rounded_ts(entry["ts"])}


def node_fragment(update: dict[str, Any]) -> Tree:
    """A ``telemetry.node`` message (apps/dashboard/messages.py node_update) as a node state fragment."""
    ts = rounded_ts(update["ts"])
    gpus = {
        str(gpu["index"]): {field: rounded(gpu[field]) for field in LIVE_GPU_FIELDS} | {"ts": ts}
        for gpu in update["gpus"]
    }
    return {"ts": ts, "gpus": gpus}


def failure_payload(failure: Failure) -> Tree:
    """A failure as the REST API shows it (``failure`` from ``Failure.objects.with_related()``)."""
    return dict(FailureSerializer(failure).data)


# Snapshots (sync: consumers call them through database_sync_to_async) ----------------------------


class _Reading(NamedTuple):
    """A GPU's newest stored values, as much of them as a fleet entry reads (GpuReading)."""

    index: int
    util_gpu: float | None
    power_w: float | None
    temp_c: float | None
    mem_used_mib: int | None


def _stored_fleet_telemetry() -> dict[int, Tree]:
    """Each reporting node's telemetry fragment of its fleet entry (``fleet_fragment``), from its newest
    sample, summed up as apps/dashboard/messages.py sums up a published one: one row per node, only
    the fields a fleet entry reads unpacked (a tuple per GPU, not a struct: 8,000 of them per snapshot)."""
    return {
        node_id: fleet_fragment(fleet_entry(node_id, ts.timestamp(), [_Reading._make(gpu) for gpu in gpus]))
        for (node_id, ts), gpus in LatestGpuSample.objects.order_by().unpacked(_Reading._fields, "node_id", "ts")
    }


def fleet_snapshot() -> Tree:
    """Every node's fleet entry, by node id: three queries, whatever the fleet's size."""
    alarms: dict[int, list[tuple[str, int | None, str]]] = defaultdict(list)
    for node_id, *alarm in alarm_rows(Failure.objects.all()):
        alarms[node_id].append(tuple(alarm))
    telemetry = _stored_fleet_telemetry()
    entries: Tree = {}
    for node in Node.objects.values("id", *NODE_FIELDS):
        entry = {field: node[field] for field in NODE_FIELDS} | alarm_summary(alarms[node["id"]])
        if fragment := telemetry.get(node["id"]):
            entry |= fragment
        entries[str(node["id"])] = entry
    return entries


def node_snapshot(node_id: int) -> Tree | None:
    """One node's state (None: no such node): three queries (four when one of its GPUs is missing from
    its newest sample: that GPU's last values come with their older ``ts``, shown as stale)."""
    node = Node.objects.filter(pk=node_id).values(*NODE_FIELDS, "node_type__gpus_per_node").first()
    if node is None:
        return None
    failures = list(Failure.objects.with_related().active().filter(node_id=node_id).order_by("id"))
    state: Tree = {field: node[field] for field in NODE_FIELDS} | alarm_summary(
        [(f.severity, f.gpu_index, f.kind) for f in failures if not f.is_side_effect]
    )
    readings = LatestGpuSample.objects.of_node(node_id, expected=range(node["node_type__gpus_per_node"] or 0))
    if readings:
        state["ts"] = max(rounded_ts(gpu.ts.timestamp()) for gpu in readings.values())
    state["gpus"] = {
        str(index): {"ts": rounded_ts(gpu.ts.timestamp())}
        | {field: rounded(getattr(gpu, field)) for field in LIVE_GPU_FIELDS}
        for index, gpu in sorted(readings.items())
    }
    state["failures"] = {str(f.pk): failure_payload(f) for f in failures}
    return state


def node_state(node_id: int) -> Tree | None:
    """``hostname``, ``lifecycle`` and ``liveness`` of one node (None: gone): one query. The hostname
    rides along so that a node enrolled after a fleet snapshot arrives in the fleet with its name."""
    return Node.objects.filter(pk=node_id).values(*NODE_FIELDS).first()


def node_alarms(node_id: int) -> Tree:
    """``alarms`` and ``severity`` of one node: one query."""
    return alarm_summary([tuple(alarm) for _, *alarm in alarm_rows(Failure.objects.filter(node_id=node_id))])


def run_percent(run: Run) -> int:
    """How far a run (``Run.objects.with_counts()``) is, in whole percent."""
    return round(100 * run.progress_sum / run.command_count) if run.command_count else 0


def run_summary(run_id: int) -> Tree | None:
    """A run as the runs feed sends it (None: gone): its state, progress in percent, counts, and the id
    of its newest log line (so that a page showing its log hears of a new line). One query."""
    newest_line = CommandLogLine.objects.filter(command__run=OuterRef("pk")).order_by("-pk").values("pk")[:1]
    run = Run.objects.with_counts().filter(pk=run_id).annotate(last_log_id=Subquery(newest_line)).first()
    if run is None:
        return None
    return {
        "state": run.state,
        "title": run.title,
        "percent": run_percent(run),
        "nodes": run.node_count,
        "failed": run.failed_count + run.expired_count,
        "last_log_id": run.last_log_id or 0,
    }


def failure_update(failure_id: int) -> tuple[int, Tree] | None:
    """A failure's node and payload as they are now (None: gone): one query."""
    failure = Failure.objects.with_related().filter(pk=failure_id).first()
    return None if failure is None else (failure.node_id, failure_payload(failure))
