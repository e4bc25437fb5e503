"""How often the fleet fails, over a period: failures per GPU-year by GPU model and by failure kind,
mean time between failures per node, and the worst nodes; each figure with the exposure it rests on.

The definitions (docs/failures.md, "Reliability", says the same for API users):

- **A failure** is an alarm first seen in the period: a failure that is not a side effect of another
  (an XID 45 after an XID 79 is part of the 79's incident, not a failure of its own). Repeats of one
  condition while it stayed open are one failure: ``count`` says how often it was seen, not how
  often the GPU failed. Resolved failures count like open ones.
- **The fleet** is every node that was in it during the period: it entered the inventory before the
  period's end, and was not retired before its start (the node that was retired because it kept
  failing stays in the figures).
- **Exposure** is the time that was at risk, inside the period. A node's: from when it entered the
  inventory until it was retired (or the period's end). A GPU's: from when it was first seen in the
  fleet until it went missing or its node was retired. A node whose GPUs are not in the inventory
  yet counts its node type's ``gpus_per_node`` for the node's own exposure. A GPU that went missing
  and came back counts the time it was away (the inventory keeps no history of the gap).
- **GPU-years** of a model: its GPUs' exposure, in years (365.25 days).
- **Failures per GPU-year**: failures / GPU-years. By kind, over the whole fleet's GPU-years.
- **MTBF of a node**: its hours in the fleet during the period / its failures in it; none for a node
  without failures. The fleet's MTBF is the hours the fleet existed during the period (since its
  first node entered) / all its failures: how often something, somewhere, fails (practitioners see
  about one node failure every 36 hours on 512 GPUs).
- **Too little to mean much**: a rate resting on under ``MIN_GPU_YEARS`` of exposure, or an MTBF on
  under ``MIN_HOURS``, is marked ``low_exposure`` (a five-minute-old fleet's one failure is not a
  failure rate).

Three queries, whatever the fleet's size.
"""

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from apps.failures.choices import FailureKind
from apps.failures.models import Failure
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Gpu, Node

DAYS_PER_YEAR: Final = 365.25
HOURS_PER_YEAR: Final = DAYS_PER_YEAR * 24
PERIOD_CHOICES: Final = (7, 30, 90, 365)  # what the dashboard offers; the API takes any MIN..MAX
DEFAULT_DAYS: Final = 30
MIN_DAYS: Final = 1
MAX_DAYS: Final = 3650
WORST_NODES: Final = 10
# Under these, a figure rests on too little exposure to mean much: with failure rates of the order of
# one per GPU-year, less than a GPU-year sees a failure or two at random; an MTBF over less than a
# week is a statement about that week.
MIN_GPU_YEARS: Final = 1.0
MIN_HOURS: Final = 7 * 24.0


@dataclass(frozen=True)
class Period:
    """The ``days`` days up to ``end``."""

    days: int
    end: datetime

    @property
    def start(self) -> datetime:
        return self.end - timedelta(days=self.days)

    @property
    def hours(self) -> float:
        return self.days * 24.0

    @property
    def years(self) -> float:
        return self.days / DAYS_PER_YEAR

    def hours_between(self, since: datetime, until: datetime | None = None) -> float:
        """The hours of [since, until) inside the period (until: the period's end)."""
        start, end = max(since, self.start), min(until or self.end, self.end)
        return max(0.0, (end - start).total_seconds() / 3600)


def per_gpu_year(failures: int, gpu_years: float) -> float | None:
    """Failures per GPU-year; None without exposure (a rate of nothing is not zero)."""
    return failures / gpu_years if gpu_years else None


def too_little(gpu_years: float | None = None, hours: float | None = None) -> bool:
    return (gpu_years is not None and gpu_years < MIN_GPU_YEARS) or (hours is not None and hours < MIN_HOURS)


class OverGpuYears:
    """A failure rate over the GPU-years it was seen in, of a class with ``failures`` and ``gpu_years``."""

    failures: int
    gpu_years: float

    @property
    def failures_per_gpu_year(self) -> float | None:
        return per_gpu_year(self.failures, self.gpu_years)

    @property
    def low_exposure(self) -> bool:
        return too_little(gpu_years=self.gpu_years)


@dataclass
class ModelReliability(OverGpuYears):
    gpu_model: str
    gpus: int = 0
    gpu_hours: float = 0.0
    failures: int = 0

    @property
    def gpu_years(self) -> float:
        return self.gpu_hours / HOURS_PER_YEAR


@dataclass
class KindReliability(OverGpuYears):
    kind: str
    failures: int
    gpu_years: float  # the whole fleet's
    total_failures: int

    @property
    def label(self) -> str:
        return FailureKind(self.kind).label

    @property
    def share(self) -> float:
        """This kind's part of all failures, 0 to 1."""
        return self.failures / self.total_failures if self.total_failures else 0.0


@dataclass
class NodeReliability:
    node: int
    hostname: str
    gpu_model: str
    gpus: int
    hours: float  # in the fleet during the period
    gpu_hours: float = 0.0
    kinds: Counter[str] = field(default_factory=Counter)  # failures by kind

    @property
    def failures(self) -> int:
        return self.kinds.total()

    @property
    def mtbf_hours(self) -> float | None:
        """Mean time between failures over the node's hours in the fleet; None: no failure in the period."""
        return self.hours / self.failures if self.failures else None

    @property
    def low_exposure(self) -> bool:
        return too_little(hours=self.hours)

    @property
    def kinds_by_count(self) -> list[tuple[str, int]]:
        """``(kind, failures)``, most frequent first."""
        return sorted(self.kinds.items(), key=lambda item: (-item[1], item[0]))

    @property
    def kind_labels_by_count(self) -> list[tuple[str, int]]:
        """``(kind's label, failures)``, most frequent first."""
        return [(FailureKind(kind).label, number) for kind, number in self.kinds_by_count]


@dataclass
class Reliability(OverGpuYears):
    period: Period
    by_model: list[ModelReliability]
    by_kind: list[KindReliability]
    nodes: list[NodeReliability]  # every node of the fleet, most failures first, then by hostname
    fleet_hours: float  # since the fleet's first node entered, inside the period

    @property
    def gpus(self) -> int:
        return sum(model.gpus for model in self.by_model)

    @property
    def gpu_years(self) -> float:
        return sum(model.gpu_years for model in self.by_model)

    @property
    def failures(self) -> int:
        return sum(node.failures for node in self.nodes)

    @property
    def fleet_mtbf_hours(self) -> float | None:
        return self.fleet_hours / self.failures if self.failures else None

    @property
    def fleet_mtbf_low_exposure(self) -> bool:
        return too_little(hours=self.fleet_hours)

    @property
    def minimum_exposure(self) -> dict[str, float]:
        return {"gpu_years": MIN_GPU_YEARS, "hours": MIN_HOURS}

    @property
    def worst_nodes(self) -> list[NodeReliability]:
        return [node for node in self.nodes[:WORST_NODES] if node.failures]

    @property
    def caveats(self) -> list[str]:
        """What the figures cannot say yet, in words."""
        said = []
        if self.nodes and self.low_exposure:
            said.append(
                f"The fleet's failure rates rest on {self.gpu_years:.3g} GPU-years of exposure, under "
                f"{MIN_GPU_YEARS:g}: too little to mean much yet."
            )
        if self.nodes and self.fleet_mtbf_low_exposure:
            said.append(
                f"The fleet's MTBF rests on {self.fleet_hours:.3g} hours, under {MIN_HOURS:.0f}: too little to "
                "mean much yet."
            )
        thin = sum(1 for node in self.nodes if node.low_exposure)
        if thin:
            said.append(
                f"{thin} of {len(self.nodes)} nodes were in the fleet under {MIN_HOURS:.0f} hours of the period."
            )
        return said


def fleet_during(period: Period) -> Q:
    """Nodes that were in the fleet during the period (see the module's definitions)."""
    return Q(created_at__lt=period.end) & (~Q(lifecycle=Lifecycle.RETIRED) | Q(lifecycle_changed_at__gte=period.start))


def reliability(days: int = DEFAULT_DAYS, *, now: datetime | None = None) -> Reliability:
    """The fleet's reliability over the ``days`` days up to ``now``: three queries."""
    period = Period(days, now or timezone.now())
    fleet = Node.objects.filter(fleet_during(period))
    nodes, spans = _nodes(fleet, period)
    _add_gpu_exposure(nodes, spans, fleet, period)
    alarms = Failure.objects.filter(
        cause__isnull=True, first_seen__gte=period.start, first_seen__lte=period.end, node__in=fleet
    )
    for node_id, kind, number in alarms.values_list("node_id", "kind").annotate(n=Count("id")).order_by():
        nodes[node_id].kinds[kind] += number

    models: dict[str, ModelReliability] = {}
    for node in nodes.values():
        model = models.setdefault(node.gpu_model, ModelReliability(node.gpu_model))
        model.gpus += node.gpus
        model.gpu_hours += node.gpu_hours
        model.failures += node.failures
    kinds = sum((node.kinds for node in nodes.values()), Counter[str]())
    fleet_gpu_years = sum(model.gpu_years for model in models.values())
    first_entered = min((entered for entered, _ in spans.values()), default=None)
    return Reliability(
        period=period,
        by_model=sorted(models.values(), key=lambda m: (-(m.failures_per_gpu_year or 0), m.gpu_model)),
        by_kind=[
            KindReliability(kind, number, fleet_gpu_years, kinds.total())
            for kind, number in sorted(kinds.items(), key=lambda item: (-item[1], item[0]))
        ],
        nodes=sorted(nodes.values(), key=lambda n: (-n.failures, n.hostname)),
        fleet_hours=period.hours_between(first_entered) if first_entered else 0.0,
    )


Span = tuple[datetime, datetime | None]  # when a node entered the fleet, and left it (None: still in)


def _nodes(fleet: QuerySet[Node], period: Period) -> tuple[dict[int, NodeReliability], dict[int, Span]]:
    """Each node of the fleet with its hours in it during the period, and its span in the fleet. A
    node whose GPUs are not in the inventory yet counts its type's, for the node's own hours."""
    nodes: dict[int, NodeReliability] = {}
    spans: dict[int, Span] = {}
    columns = ("id", "hostname", "node_type__gpu_model", "node_type__gpus_per_node", "created_at")
    rows = fleet.values(*columns, "lifecycle", "lifecycle_changed_at").annotate(gpu_rows=Count("gpus"))
    for row in rows:
        left = row["lifecycle_changed_at"] if row["lifecycle"] == Lifecycle.RETIRED else None
        spans[row["id"]] = (row["created_at"], left)
        hours = period.hours_between(row["created_at"], left)
        assumed = 0 if row["gpu_rows"] else row["node_type__gpus_per_node"]
        nodes[row["id"]] = NodeReliability(
            node=row["id"],
            hostname=row["hostname"],
            gpu_model=row["node_type__gpu_model"],
            gpus=assumed,
            hours=hours,
            gpu_hours=assumed * hours,
        )
    return nodes, spans


def _add_gpu_exposure(
    nodes: dict[int, NodeReliability], spans: dict[int, Span], fleet: QuerySet[Node], period: Period
) -> None:
    """Each GPU's exposure, added to its node: from when it was first seen until it went missing or
    its node was retired; a GPU with none in the period is not one of the fleet's. The GPUs of a node
    mostly share both times, so the database groups them: about one row per node."""
    groups = (
        Gpu.objects.filter(node__in=fleet)
        .values_list("node_id", "created_at", "missing_since")
        .annotate(n=Count("id"))
        .order_by()
    )
    for node_id, first_seen, missing_since, number in groups:
        until = min((t for t in (missing_since, spans[node_id][1]) if t is not None), default=None)
        hours = period.hours_between(first_seen, until)
        if hours:
            nodes[node_id].gpus += number
            nodes[node_id].gpu_hours += number * hours
