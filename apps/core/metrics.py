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
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, TypeVar

from django.db.models import Model, QuerySet

Number = int | float | bool
Labels = str  # rendered: 'name="value",name="value"'
M = TypeVar("M", bound=Model)


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    type: Literal["gauge", "counter"]
    help: str
    samples: Sequence[tuple[Labels, Number]]


class ScrapeError(ValueError):
    """The scrape asked for something that is not there; ``parameter`` names the query parameter."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


@dataclass(frozen=True, slots=True)
class Scrape:
    now: datetime
    clusters: frozenset[str] = field(default_factory=frozenset)  # empty: every cluster

    def within(self, queryset: QuerySet[M], cluster_name: str) -> QuerySet[M]:
        """``queryset`` limited to the scrape's clusters; ``cluster_name`` is the lookup of the cluster's name."""
        return queryset.filter(**{f"{cluster_name}__in": sorted(self.clusters)}) if self.clusters else queryset


Collector = Callable[[Scrape], Iterable[Family]]


class Registry:
    def __init__(self) -> None:
        self._collectors: list[Collector] = []

    def register(self, collector: Collector) -> None:
        if collector not in self._collectors:
            self._collectors.append(collector)

    def collect(self, scrape: Scrape) -> list[Family]:
        """Every collector's families, in the order the apps registered them. Raises ``ScrapeError``."""
        return [family for collector in self._collectors for family in collector(scrape) if family.samples]

    def render(self, scrape: Scrape) -> str:
        lines: list[str] = []
        for family in self.collect(scrape):
            name = family.name
            lines.append(f"# HELP {name} {family.help}")
            lines.append(f"# TYPE {name} {family.type}")
            lines.extend(f"{name}{{{labels}}} {number(value)}" for labels, value in family.samples)
        return "\n".join(lines) + "\n" if lines else ""


registry = Registry()


def labels(pairs: Iterable[tuple[str, str]]) -> Labels:
    return ",".join(f'{name}="{escape(value)}"' for name, value in pairs)


def escape(value: str) -> str:
    return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")


def number(value: Number) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return repr(value) if isinstance(value, float) else str(value)
