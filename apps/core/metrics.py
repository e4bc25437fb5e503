"""The Prometheus export: one registry of collectors that ``/metrics`` renders in the text format (0.0.4).

Each app exports what it knows, from its own module: the inventory a node's lifecycle and liveness
(apps/inventory/metrics.py), telemetry the GPUs' newest samples under dcgm-exporter's names, the
InfiniBand ports under node_exporter's and the ingest's health (apps/telemetry/metrics/), failures the
open ones (apps/failures/metrics.py), the gateway what it refused (apps/gateway/metrics.py). Each
registers a collector in its ``AppConfig.ready()``, so this module imports no app and every layer above
it may export. docs/metrics.md lists every family with its labels and meaning.

A collector takes the ``Scrape`` (its time, and the clusters it is limited to) and returns families. It
makes a fixed number of queries whatever the fleet's size, and filters by cluster in the database
(``Scrape.within``). A collector that finds the scrape's request wrong (a cluster that does not exist)
raises ``ScrapeError``, which the view answers with a 400 naming the parameter. A family without
samples is left out altogether, as a field no GPU reported.

A collector is registered with its ``Scope``: the series of nodes, or those of the control plane itself
(its server processes' ingest, connections that named no node). A scrape limited to clusters gets only
the nodes' (each cluster's target carries its own); ``?nodes=0`` gets only the control plane's, the
cheap target that goes with per-cluster ones.
"""

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, TypeVar

from django.db.models import Model, QuerySet

Number = int | float  # a boolean is exported as 0 or 1: the collector converts it
Labels = str  # rendered: 'name="value",name="value"'
M = TypeVar("M", bound=Model)


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    type: Literal["gauge", "counter"]
    help: str
    samples: Sequence[tuple[Labels, Number]]


@dataclass(frozen=True, slots=True)
class Column:
    """A family whose value for a row (a GPU, a port) is one of the row's fields, times ``scale``."""

    name: str
    type: Literal["gauge", "counter"]
    help: str
    field: str
    scale: int = 1


def by_column(
    columns: Iterable[Column], rows: Sequence[tuple[Labels, Mapping[str, Number | None]]]
) -> Iterator[Family]:
    """One family per column; a row whose field is None (not reported) has no series in it."""
    for column in columns:
        field, scale = column.field, column.scale
        present = [(label, row[field]) for label, row in rows if row[field] is not None]
        if scale != 1:
            present = [(label, value * scale) for label, value in present]
        yield Family(column.name, column.type, column.help, present)


class ScrapeError(ValueError):
    """The scrape asked for something that is not there; ``parameter`` names the query parameter."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


@dataclass(frozen=True, slots=True)
class Scrape:
    now: datetime
    clusters: frozenset[str] = field(default_factory=frozenset)  # empty: every cluster
    nodes: bool = True  # False: only the series of no node (``?nodes=0``)

    def within(self, queryset: QuerySet[M], cluster_name: str) -> QuerySet[M]:
        """``queryset`` limited to the scrape's clusters; ``cluster_name`` is the lookup of the cluster's name."""
        return queryset.filter(**{f"{cluster_name}__in": sorted(self.clusters)}) if self.clusters else queryset


Collector = Callable[[Scrape], Iterable[Family]]
# What a collector's series are about: nodes (every series has a node's labels, and a cluster filter
# applies), or the control plane itself (a server process, a refused connection: no cluster's, so a
# scrape limited to clusters leaves them out, else every cluster's target would carry the same series).
Scope = Literal["nodes", "control_plane"]


class Registry:
    def __init__(self) -> None:
        self._collectors: dict[Collector, Scope] = {}

    def register(self, collector: Collector, scope: Scope = "nodes") -> None:
        self._collectors.setdefault(collector, scope)

    @property
    def collectors(self) -> tuple[Collector, ...]:
        return tuple(self._collectors)

    def collect(self, scrape: Scrape) -> list[Family]:
        """The families of every collector the scrape asks for, in the order the apps registered them.
        Raises ``ScrapeError``."""
        wanted = (
            collector
            for collector, scope in self._collectors.items()
            if (scrape.nodes if scope == "nodes" else not scrape.clusters)
        )
        return [family for collector in wanted for family in collector(scrape) if family.samples]

    def render(self, scrape: Scrape) -> str:
        lines: list[str] = []
        for family in self.collect(scrape):
            name = family.name
            lines.append(f"# HELP {name} {family.help}")
            lines.append(f"# TYPE {name} {family.type}")
            lines.extend([f"{name}{{{labels}}} {value}" for labels, value in family.samples])  # str(float) is repr
        return "\n".join(lines) + "\n" if lines else ""


registry = Registry()


def labels(pairs: Iterable[tuple[str, str]]) -> Labels:
    return ",".join(f'{name}="{escape(value)}"' for name, value in pairs)


def escape(value: str) -> str:
    if "\\" not in value and '"' not in value and "\n" not in value:
        return value  # nearly every value: three scans cost less than three copies
    return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")
