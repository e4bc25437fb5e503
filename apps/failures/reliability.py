"""How often the fleet fails, over a period: failures per GPU-year by GPU model and by failure kind,
mean time between failures per node, and the worst nodes.

The definitions (docs/failures.md, "Reliability", says the same for API users):

- **A failure** is an alarm first seen in the period: a failure that is not a side effect of another
  (an XID 45 after an XID 79 is part of the 79's incident, not a failure of its own). Repeats of one
  condition while it stayed open are one failure: ``count`` says how often it was seen, not how
  often the GPU failed. Resolved failures count like open ones.
- **The fleet** is every node that was in it during the period: not retired, or retired at or after
  the period's start (the node that was retired because it kept failing stays in the figures).
- **GPUs of a model** are the fleet's GPUs, grouped by their node type's GPU model; a node whose
  GPUs are not in the inventory yet counts its node type's ``gpus_per_node``.
- **GPU-years** of a model: its GPUs × the period's length in years (days / 365.25). The fleet as it
  stands is taken for the whole period, so a node added halfway counts as if it had been there
  from the start (its rate reads lower than it is).
- **Failures per GPU-year**: failures / GPU-years. By kind, over the whole fleet's GPU-years.
- **MTBF of a node**: the period's hours / the node's failures in it; none for a node without
  failures. The fleet's MTBF is the period's hours / all its failures: how often something, somewhere,
  fails (practitioners see about one node failure every 36 hours on 512 GPUs).

Two queries, whatever the fleet's size.
"""

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from django.db.models import Count, Q
from django.utils import timezone

from apps.failures.choices import FailureKind
from apps.failures.models import Failure
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Node

DAYS_PER_YEAR: Final = 365.25
PERIOD_CHOICES: Final = (7, 30, 90, 365)  # what the dashboard offers; the API takes any MIN..MAX
DEFAULT_DAYS: Final = 30
MIN_DAYS: Final = 1
MAX_DAYS: Final = 3650
WORST_NODES: Final = 10


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


def per_gpu_year(failures: int, gpu_years: float) -> float | None:
    """Failures per GPU-year; None without GPUs (a rate of nothing is not zero)."""
    return failures / gpu_years if gpu_years else None


@dataclass
class ModelReliability:
    gpu_model: str
    years: float  # the period's
    gpus: int = 0
    failures: int = 0

    @property
    def gpu_years(self) -> float:
        return self.gpus * self.years

    @property
    def failures_per_gpu_year(self) -> float | None:
        return per_gpu_year(self.failures, self.gpu_years)


@dataclass
class KindReliability:
    kind: str
    failures: int
    gpu_years: float  # the whole fleet's
    total_failures: int

    @property
    def label(self) -> str:
        return FailureKind(self.kind).label

    @property
    def failures_per_gpu_year(self) -> float | None:
        return per_gpu_year(self.failures, self.gpu_years)

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
    period_hours: float
    kinds: Counter[str] = field(default_factory=Counter)  # failures by kind

    @property
    def failures(self) -> int:
        return self.kinds.total()

    @property
    def mtbf_hours(self) -> float | None:
        """Mean time between failures; None: no failure in the period."""
        return self.period_hours / self.failures if self.failures else None

    @property
    def kinds_by_count(self) -> list[tuple[str, int]]:
        """``(kind, failures)``, most frequent first."""
        return sorted(self.kinds.items(), key=lambda item: (-item[1], item[0]))

    @property
    def kind_labels_by_count(self) -> list[tuple[str, int]]:
        """``(kind's label, failures)``, most frequent first."""
        return [(FailureKind(kind).label, number) for kind, number in self.kinds_by_count]


@dataclass
class Reliability:
    period: Period
    by_model: list[ModelReliability]
    by_kind: list[KindReliability]
    nodes: list[NodeReliability]  # every node of the fleet, most failures first, then by hostname

    @property
    def gpus(self) -> int:
        return sum(model.gpus for model in self.by_model)

    @property
    def gpu_years(self) -> float:
        return self.gpus * self.period.years

    @property
    def failures(self) -> int:
        return sum(node.failures for node in self.nodes)

    @property
    def failures_per_gpu_year(self) -> float | None:
        return per_gpu_year(self.failures, self.gpu_years)

    @property
    def fleet_mtbf_hours(self) -> float | None:
        return self.period.hours / self.failures if self.failures else None

    @property
    def worst_nodes(self) -> list[NodeReliability]:
        return [node for node in self.nodes[:WORST_NODES] if node.failures]


def fleet_during(period: Period) -> Q:
    """Nodes that were in the fleet during the period (see the module's definitions)."""
    return ~Q(lifecycle=Lifecycle.RETIRED) | Q(lifecycle_changed_at__gte=period.start)


def reliability(days: int = DEFAULT_DAYS, *, now: datetime | None = None) -> Reliability:
    """The fleet's reliability over the ``days`` days up to ``now``: two queries."""
    period = Period(days, now or timezone.now())
    fleet = Node.objects.filter(fleet_during(period))
    nodes: dict[int, NodeReliability] = {}
    for row in fleet.values("id", "hostname", "node_type__gpu_model", "node_type__gpus_per_node").annotate(
        gpu_rows=Count("gpus")
    ):
        nodes[row["id"]] = NodeReliability(
            node=row["id"],
            hostname=row["hostname"],
            gpu_model=row["node_type__gpu_model"],
            gpus=row["gpu_rows"] or row["node_type__gpus_per_node"],
            period_hours=period.hours,
        )
    alarms = Failure.objects.filter(
        cause__isnull=True, first_seen__gte=period.start, first_seen__lte=period.end, node__in=fleet
    )
    for node_id, kind, number in alarms.values_list("node_id", "kind").annotate(n=Count("id")).order_by():
        nodes[node_id].kinds[kind] += number

    models: dict[str, ModelReliability] = {}
    for node in nodes.values():
        model = models.setdefault(node.gpu_model, ModelReliability(node.gpu_model, period.years))
        model.gpus += node.gpus
        model.failures += node.failures
    kinds = sum((node.kinds for node in nodes.values()), Counter[str]())
    fleet_gpu_years = sum(model.gpu_years for model in models.values())
    return Reliability(
        period=period,
        by_model=sorted(models.values(), key=lambda m: (-(m.failures_per_gpu_year or 0), m.gpu_model)),
        by_kind=[
            KindReliability(kind, number, fleet_gpu_years, kinds.total())
            for kind, number in sorted(kinds.items(), key=lambda item: (-item[1], item[0]))
        ],
        nodes=sorted(nodes.values(), key=lambda n: (-n.failures, n.hostname)),
    )
