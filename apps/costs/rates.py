"""Cost rates read from the price book: a GPU-hour of a node type, energy for an IT load, a
cluster's whole fleet. Each answer is a CostFigure (or a set of them) that shows its inputs.

Which nodes cost money: every node from the day it is racked or provisioned until it is retired.
Owned hardware depreciates and runs up operating cost whatever it is doing, and a cloud provider
bills a quarantined or drained instance like any other, so new, burn-in, in-service, quarantined
and drained nodes all count. Leaving out the ones not in service would hide exactly the idle cost
an ops engineer needs to see; the breakdown gives the node count per state so it can be read off.
A retired node is off the books (returned to the provider, or written off) and does not count.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from django.db.models import Count, Model
from django.utils import timezone

from apps.costs.figures import CostFigure, plain
from apps.costs.models import EnergyPrice, GpuPrice, PricePeriod
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Cluster, Node, NodeType

COSTED_STATES: tuple[Lifecycle, ...] = tuple(state for state in Lifecycle if state != Lifecycle.RETIRED)


class NoPriceInForce(LookupError):
    """No price in the book covers the date asked about; the message says what the book does cover."""


def _in_force_or_refuse(prices: type[PricePeriod], scope: Model, at: date) -> PricePeriod:
    price = prices.objects.select_related(prices.scope_field).effective(scope, at)
    if price is not None:
        return price
    periods = [p.period for p in prices.objects.filter(**{prices.scope_field: scope}).order_by("valid_from")]
    known = f"Its prices are: {'; '.join(periods)}." if periods else "The price book has none for it."
    raise NoPriceInForce(f"No {prices._meta.verbose_name} for {scope} is in force on {at}. {known}")


def hourly_gpu_cost(node_type: NodeType, at: date) -> CostFigure:
    """What one GPU-hour of ``node_type`` costs on ``at``, or NoPriceInForce."""
    price = _in_force_or_refuse(GpuPrice, node_type, at)
    return price.hourly_cost_per_gpu()


def energy_cost_per_hour(cluster: Cluster, watts: Decimal | int, at: date) -> CostFigure:
    """What an IT load of ``watts`` costs per hour in ``cluster`` on ``at`` (kWh price × PUE × kW)."""
    price = _in_force_or_refuse(EnergyPrice, cluster, at)
    return price.cost_per_hour(watts)


@dataclass(frozen=True)
class NodeTypeRate:
    """One node type's share of a cluster's cost rate. ``price_per_gpu_hour`` and ``rate`` are
    None when no price for the type is in force."""

    node_type_id: int
    node_type: str
    gpus_per_node: int
    nodes: int
    gpus: int
    nodes_by_state: dict[str, int]
    price_per_gpu_hour: CostFigure | None
    rate: CostFigure | None


@dataclass(frozen=True)
class ClusterCostRate:
    """What a cluster's GPU capacity costs per hour. ``total`` is None when nothing is priced or
    the prices are in more than one currency; ``complete`` is False when any node type counted has
    no price in force (the total then leaves its nodes out, and ``notes`` says which)."""

    cluster_id: int
    cluster: str
    at: date
    counted_states: tuple[str, ...]
    total: CostFigure | None
    complete: bool
    breakdown: list[NodeTypeRate]
    notes: list[str]


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _node_type_rate(node_type: NodeType, nodes_by_state: dict[str, int], price: GpuPrice | None) -> NodeTypeRate:
    nodes = sum(nodes_by_state.values())
    gpus = nodes * node_type.gpus_per_node
    per_gpu = price.hourly_cost_per_gpu() if price else None
    rate = None
    if per_gpu is not None:
        rate = CostFigure(
            value=gpus * per_gpu.value,
            unit=per_gpu.unit.replace("/GPU-hour", "/hour"),
            formula=f"{gpus} × {plain(per_gpu.value)}",
            inputs={
                "nodes": nodes,
                "gpus_per_node": node_type.gpus_per_node,
                "gpus": gpus,
                "price_per_gpu_hour": per_gpu.value,
            },
            source=per_gpu.source,
        )
    return NodeTypeRate(
        node_type_id=node_type.pk,
        node_type=node_type.name,
        gpus_per_node=node_type.gpus_per_node,
        nodes=nodes,
        gpus=gpus,
        nodes_by_state=nodes_by_state,
        price_per_gpu_hour=per_gpu,
        rate=rate,
    )


def _total(lines: list[NodeTypeRate], at: date) -> tuple[CostFigure | None, list[str]]:
    priced = [line for line in lines if line.rate is not None]
    if not priced:
        return None, []
    units = sorted({line.rate.unit for line in priced})
    if len(units) > 1:
        return None, [
            f"Prices are in {' and '.join(u.split('/')[0] for u in units)}; the price book holds no exchange "
            "rates, so there is no single total. Each node type's rate is in the breakdown."
        ]
    total = CostFigure(
        value=sum((line.rate.value for line in priced), Decimal(0)),
        unit=units[0],
        formula=" + ".join(line.rate.formula for line in priced),
        inputs={
            f"{line.node_type}.{name}": line.rate.inputs[name]
            for line in priced
            for name in ("gpus", "price_per_gpu_hour")
        },
        source=f"GPU prices in force on {at}: " + "; ".join(line.rate.source for line in priced),
    )
    return total, []


def cluster_cost_rate(cluster: Cluster, at: date) -> ClusterCostRate:
    """What the cluster's GPUs cost per hour at the prices in force on ``at``, per node type.

    The fleet is the cluster's nodes as they are now, in the states that cost money (see the module
    docstring); only the prices are taken at ``at``. Three queries whatever the fleet's size.
    """
    counts: dict[int, dict[str, int]] = defaultdict(dict)
    for node_type_id, state, nodes in (
        Node.objects.filter(cluster=cluster, lifecycle__in=COSTED_STATES)
        .values_list("node_type", "lifecycle")
        .annotate(nodes=Count("pk"))
        .order_by()
    ):
        counts[node_type_id][state] = nodes
    node_types = NodeType.objects.filter(pk__in=counts).order_by("name")
    in_force = GpuPrice.objects.in_force(at).filter(node_type__in=node_types).select_related("node_type")
    prices = {price.node_type_id: price for price in in_force.order_by("valid_from")}
    lines = [_node_type_rate(nt, counts[nt.pk], prices.get(nt.pk)) for nt in node_types]

    notes = [
        f"{line.node_type}: no GPU price in force on {at}, so the total leaves out its "
        f"{_count(line.nodes, 'node')} ({_count(line.gpus, 'GPU')})."
        for line in lines
        if line.rate is None
    ]
    total, total_notes = _total(lines, at)
    notes += total_notes
    if not lines:
        notes.append("The cluster has no nodes in the states that cost money.")
    if at < timezone.localdate():
        notes.append(f"Node counts are the fleet as it is now; only the prices are those in force on {at}.")
    return ClusterCostRate(
        cluster_id=cluster.pk,
        cluster=cluster.name,
        at=at,
        counted_states=tuple(str(state) for state in COSTED_STATES),
        total=total,
        complete=all(line.rate is not None for line in lines),
        breakdown=lines,
        notes=notes,
    )


@dataclass(frozen=True)
class LivePricing:
    """The prices a live page needs to turn measured telemetry into money, per hour, in one currency.

    ``gpu_hour`` by node type id and ``kw_hour`` (energy price × PUE) by cluster id; a type or
    cluster with no price in force is absent, and ``unpriced`` says which, so a page can say its
    figure leaves them out. ``currency`` is None when prices in force use several currencies: adding
    dollars to euros is not a figure, so those pages show the breakdown instead of a sum.
    """

    currency: str | None
    gpu_hour: dict[int, Decimal]
    kw_hour: dict[int, Decimal]
    unpriced: list[str]


def live_pricing(at: date) -> LivePricing:
    """Prices in force on ``at`` for every node type and cluster that has nodes: four queries."""
    node_types = dict(NodeType.objects.filter(nodes__isnull=False).distinct().values_list("pk", "name"))
    clusters = dict(Cluster.objects.filter(nodes__isnull=False).distinct().values_list("pk", "name"))
    gpu_prices = GpuPrice.objects.in_force(at).filter(node_type__in=node_types).select_related("node_type")
    energy_prices = EnergyPrice.objects.in_force(at).filter(cluster__in=clusters)
    gpu_hour = {price.node_type_id: price.hourly_cost_per_gpu() for price in gpu_prices}
    kw_hour = {price.cluster_id: price.cost_per_kw_hour() for price in energy_prices}
    currencies = {figure.unit.split("/")[0] for figure in [*gpu_hour.values(), *kw_hour.values()]}
    unpriced = [f"GPU-hours of {name}" for pk, name in sorted(node_types.items()) if pk not in gpu_hour]
    unpriced += [f"energy in {name}" for pk, name in sorted(clusters.items()) if pk not in kw_hour]
    return LivePricing(
        currency=currencies.pop() if len(currencies) == 1 else None,
        gpu_hour={pk: figure.value for pk, figure in gpu_hour.items()},
        kw_hour={pk: figure.value for pk, figure in kw_hour.items()},
        unpriced=unpriced,
    )
