"""The nodes list and one node's page.

Both read what they show in a fixed number of queries, whatever the number of nodes, GPUs, ports,
failures or lifecycle changes (tests/test_query_counts.py), and their scripts keep them live from
``ws/live``. Lifecycle actions go through the REST API, which checks the role again.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from apps.accounts.roles import Role
from apps.dashboard.actions import action_data, attach_moves, move_table
from apps.dashboard.streams import alarm_rows, alarm_summary, rounded
from apps.dashboard.views.base import DashboardPage
from apps.dashboard.views.burnins import burn_in_form
from apps.failures import xid as catalog
from apps.failures.choices import ACTIVE_STATES
from apps.failures.models import Failure
from apps.inventory.actions import actions_for
from apps.inventory.choices import Lifecycle, Liveness, SwitchTier
from apps.inventory.filtersets import NodeFilterSet
from apps.inventory.models import Cluster, Gpu, NetworkPort, Node, NodeType, Switch
from apps.inventory.models.nodes import LIFECYCLE_TRANSITIONS, NodeQuerySet
from apps.inventory.topology import nvlink_matrix
from apps.telemetry import throttle
from apps.telemetry.models import LatestGpuSample, LatestPortSample, Reading
from apps.telemetry.queries import WINDOWS

# The list's filters, named as the REST API's /nodes filters are (the same filter set serves both).
LIST_FILTERS = ("q", "lifecycle", "liveness", "cluster_name", "node_type_name", "leaf_switch_name")
LIFECYCLE_ORDER = {state.value: rank for rank, state in enumerate(Lifecycle)}
LIVENESS_ORDER = {Liveness.ONLINE: 0, Liveness.UNREACHABLE: 1, Liveness.UNKNOWN: 2}

NODE_ROW_FIELDS = (
    "id",
    "hostname",
    "serial",
    "cluster__name",
    "node_type__name",
    "rack__name",
    "rack_position",
    "lifecycle",
    "liveness",
    "last_seen_at",
    "gpu_count",
)
RESOLVED_SHOWN = 20
TRANSITIONS_SHOWN = 50
PORT_SAMPLE_MAX_AGE = timedelta(minutes=15)  # an older port sample is not "the port's state now"
WINDOW_LABELS = {"15m": "15 min", "24h": "24 h", "30d": "30 days"}
CHARTS = (  # (metric of the chart API, title); node-charts.js knows how to show each
    ("util_gpu", "GPU utilization"),
    ("power_w", "Power"),
    ("temp_c", "Temperature"),
    ("mem_used_mib", "Memory used"),
    ("sm_clock_mhz", "SM clock"),
    ("util_mem", "Memory controller utilization"),
)


def state_labels() -> dict[str, dict[str, str]]:
    return {"lifecycle": dict(Lifecycle.choices), "liveness": dict(Liveness.choices)}


def node_rows(nodes: NodeQuerySet) -> list[dict[str, Any]]:
    """The list's rows as its script draws them, by hostname: inventory, lifecycle, liveness, alarms
    (``alarms``, ``severity``) and the newest telemetry under the fleet stream's names
    (``util_gpu_mean``, ``power_w_total``, ``temp_c_max``), so that live entries merge straight in;
    ``seen``: the agent's last heartbeat or newest sample, in Unix seconds. Five queries."""
    ids = nodes.values("pk")
    leaves = Node.objects.filter(pk__in=ids).leaf_names()
    telemetry = LatestGpuSample.objects.filter(node_id__in=ids).node_summaries()
    alarms: dict[int, list[tuple[str, int | None, str]]] = defaultdict(list)
    for node_id, *alarm in alarm_rows(Failure.objects.filter(node_id__in=ids)):
        alarms[node_id].append(tuple(alarm))
    rows = []
    for node in nodes.with_related().order_by("hostname").values(*NODE_ROW_FIELDS):
        summary = telemetry.get(node["id"], {})
        seen = max((t for t in (node["last_seen_at"], summary.get("ts")) if t is not None), default=None)
        summary_of_alarms = alarm_summary(alarms[node["id"]])
        rows.append(
            {
                "id": node["id"],
                "hostname": node["hostname"],
                "serial": node["serial"],
                "cluster": node["cluster__name"],
                "type": node["node_type__name"],
                "rack": node["rack__name"] or "",
                "rack_position": node["rack_position"],
                "leaf": leaves.get(node["id"], ""),
                "gpus": node["gpu_count"],
                "lifecycle": node["lifecycle"],
                "liveness": node["liveness"],
                "alarms": summary_of_alarms["alarms"],
                "severity": summary_of_alarms["severity"],
                **{field: rounded(summary.get(field)) for field in ("util_gpu_mean", "power_w_total", "temp_c_max")},
                "seen": None if seen is None else round(seen.timestamp(), 3),
            }
        )
    return rows


def filter_selects(selected: dict[str, str]) -> list[dict[str, Any]]:
    """The list's drop-down filters: label, query parameter, options (value, text) and the value in
    force (a page shows the first of several). Three queries."""

    def names(queryset: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in queryset.values_list("name", flat=True).order_by("name")]

    options = {
        "lifecycle": ("Lifecycle", Lifecycle.choices),
        "liveness": ("Liveness", Liveness.choices),
        "cluster_name": ("Cluster", names(Cluster.objects.all())),
        "node_type_name": ("Type", names(NodeType.objects.all())),
        "leaf_switch_name": ("Leaf switch", names(Switch.objects.filter(tier=SwitchTier.LEAF))),
    }
    return [
        {"label": label, "name": name, "options": choices, "selected": selected[name]}
        for name, (label, choices) in options.items()
    ]


class NodesPage(DashboardPage):
    """Every node, searchable and filtered by the query string (``?lifecycle=quarantined`` from the
    fleet page's counts), with live utilization, power and temperature columns."""

    nav = "nodes"
    template_name = "dashboard/nodes.html"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        filters = NodeFilterSet(self.request.GET, queryset=Node.objects.all())
        rows = node_rows(filters.qs)
        values = {name: self.request.GET.getlist(name) for name in LIST_FILTERS}
        first = {name: (value[0] if value else "") for name, value in values.items()}
        operator = self.request.user.has_role(Role.OPERATOR)
        return super().get_context_data(**kwargs) | {
            "burn_in_form": burn_in_form(pick_nodes=False) if operator else None,
            "shown": len(rows),
            "node_total": Node.objects.count(),
            "filtered": any(any(v.strip() for v in value) for value in values.values()),
            "search": first["q"],
            "selects": filter_selects(first),
            "filter_errors": [str(error) for errors in filters.errors.values() for error in errors],
            "nodes_page": {
                "rows": rows,
                "labels": state_labels(),
                "lifecycle_order": LIFECYCLE_ORDER,
                "liveness_order": LIVENESS_ORDER,
                "filters": {name: values[name] for name in ("lifecycle", "liveness")},
                "actions": action_data(actions_for(self.request.user.effective_role)),
            },
        }


# One node ------------------------------------------------------------------------------------------


# Error counters of the GPU table, in column order: (field, what makes a value bad). "error": the GPU
# lost data or memory (page someone); "warning": a link or bus retrying (watch it grow).
GPU_COUNTERS: tuple[tuple[str, str], ...] = (
    ("ecc_corrected_volatile", ""),
    ("ecc_uncorrected_volatile", "error"),
    ("ecc_corrected_aggregate", ""),
    ("ecc_uncorrected_aggregate", "error"),
    ("retired_pages_pending", "error"),
    ("remapped_rows_correctable", ""),
    ("remapped_rows_uncorrectable", "error"),
    ("remapped_rows_pending", "warning"),
    ("remapped_rows_failed", "error"),
    ("pcie_replay_count", "warning"),
    ("nvlink_crc_errors", "warning"),
    ("nvlink_replay_errors", "warning"),
    ("nvlink_recovery_errors", "warning"),
)
LEVEL_CLASS = {"error": "bad", "warning": "warn"}


@dataclass
class GpuRow:
    index: int
    gpu: Gpu | None  # None: the agent reports a GPU the inventory does not list
    sample: Reading | None  # None: not in the node's newest sample

    @property
    def clock_events(self) -> list[throttle.ClockEventReason]:
        return throttle.decode(self.sample.throttle_reasons if self.sample else None)

    @property
    def counters(self) -> list[tuple[Any, str]]:
        """Each error counter's value (None: not reported) and its CSS class when it is not zero."""
        values = [(getattr(self.sample, name, None), LEVEL_CLASS.get(level, "")) for name, level in GPU_COUNTERS]
        return [(value, level if value else "") for value, level in values]

    @property
    def recovery_action(self) -> str:
        value = self.sample.recovery_action if self.sample else None
        return "" if not value else catalog.recovery_action(value).text


@dataclass
class PortRow:
    name: str  # "mlx5_0/1"
    port: NetworkPort | None  # None: reported by the agent, not in the inventory
    sample: Reading | None  # None: not in a sample of the last PORT_SAMPLE_MAX_AGE

    @property
    def state(self) -> str:
        return self.sample.state if self.sample else (self.port.link_state if self.port else "unknown")

    @property
    def peer(self) -> str:
        """The switch port it is cabled to, as ``switch:port`` (templates cannot read ``_`` names)."""
        peer = self.port._peer_switch_port if self.port else None
        return f"{peer.switch.name}:{peer.name}" if peer else ""


def gpu_rows(node: Node) -> list[GpuRow]:
    """The inventory's GPUs and the agent's newest reading of each, by index: two queries (three when
    a listed GPU is missing from the newest sample)."""
    gpus = {gpu.index: gpu for gpu in node.gpus.all()}
    samples = LatestGpuSample.objects.of_node(node.pk, expected=gpus)
    return [GpuRow(index, gpus.get(index), samples.get(index)) for index in sorted(gpus.keys() | samples.keys())]


def port_rows(node: Node, now: Any) -> list[PortRow]:
    """The inventory's ports and the newest sample of each from the last minutes: two queries."""
    ports = {
        (port.device_name, port.port_num): port
        for port in NetworkPort.objects.filter(node=node).select_related("_peer_switch_port__switch")
    }
    recent = LatestPortSample.objects.filter(node=node, ts__gte=now - PORT_SAMPLE_MAX_AGE).readings()[node.pk]
    samples = {(sample.device, sample.port): sample for sample in recent}
    return [
        PortRow(f"{device}/{number}", ports.get((device, number)), samples.get((device, number)))
        for device, number in sorted(ports.keys() | samples.keys())
    ]


def nvlink_rows(node: Node) -> list[dict[str, Any]]:
    """The node's NVLink matrix as table rows: a link with lanes but no bandwidth is down."""
    matrix = nvlink_matrix(node)
    return [
        {
            "index": index,
            "cells": [
                {"label": label, "bandwidth": bandwidth, "down": lanes is not None and not bandwidth}
                for label, lanes, bandwidth in zip(
                    matrix["labels"][i], matrix["lanes"][i], matrix["bandwidth_gbs"][i], strict=True
                )
            ],
        }
        for i, index in enumerate(matrix["gpu_indices"])
    ]


def chart_limits(node: Node, gpus: list[GpuRow]) -> dict[str, float]:
    """The tops of the power and memory charts: the GPUs' own limits as last reported or listed,
    else the node type's."""
    power = [row.sample.power_limit_w for row in gpus if row.sample and row.sample.power_limit_w]
    memory = [row.gpu.memory_mib for row in gpus if row.gpu and row.gpu.memory_mib]
    return {
        "power_w": max(power, default=node.node_type.gpu_power_limit_w),
        "memory_gib": max(memory) / 1024 if memory else node.node_type.gpu_memory_gb,
    }


class NodePage(DashboardPage):
    nav = "nodes"
    template_name = "dashboard/node.html"

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        self.node = Node.objects.with_related().filter(pk=kwargs["pk"]).first()
        if self.node is None:
            context = super().get_context_data(missing_id=kwargs["pk"])
            return TemplateResponse(request, "dashboard/node_missing.html", context, status=404)
        if request.GET.get("partial") == "lifecycle":  # node-state.js, after the node changed state
            return TemplateResponse(request, "dashboard/_node_lifecycle.html", self.lifecycle_context())
        return super().get(request, *args, **kwargs)

    def lifecycle_context(self) -> dict[str, Any]:
        """Since when the node is in its state, and its lifecycle history: one query."""
        return {
            "node": self.node,
            "transitions": list(self.node.transitions.all()[:TRANSITIONS_SHOWN]),
            "transitions_shown": TRANSITIONS_SHOWN,
        }

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        node, now = self.node, timezone.now()
        failures = Failure.objects.with_related().filter(node=node)
        active = list(failures.filter(state__in=ACTIVE_STATES).order_by("-last_seen", "-id"))
        resolved = list(failures.exclude(state__in=ACTIVE_STATES).order_by("-resolved_at", "-id")[:RESOLVED_SHOWN])
        gpus = gpu_rows(node)
        role = self.request.user.effective_role
        operator = self.request.user.has_role(Role.OPERATOR)
        actions = action_data(actions_for(role))
        attach_moves(active, role)
        window = self.request.GET.get("window", "15m")
        return super().get_context_data(**kwargs) | {
            "node": node,
            "leaves": list(Switch.objects.leaves_of(node).values_list("name", flat=True).order_by("name")),
            "alarms": alarm_summary([(f.severity, f.gpu_index, f.kind) for f in active if not f.is_side_effect]),
            "active_failures": active,
            "resolved_failures": resolved,
            "gpus": gpus,
            "nvlink": nvlink_rows(node),
            "ports": port_rows(node, now),
            **self.lifecycle_context(),
            "allowed": node.allowed_transitions(),
            "actions": actions,
            # Its "Start burn-in" opens the burn-in form on the node (a suite to choose, the run's page next).
            "burn_in_form": burn_in_form(pick_nodes=False, on="This node") if operator else None,
            "charts": CHARTS,
            "windows": [(name, WINDOW_LABELS[name]) for name in WINDOWS],
            "node_page": {
                "node": node.pk,
                "hostname": node.hostname,
                "lifecycle": node.lifecycle,
                "labels": state_labels(),
                "transitions": {state: sorted(targets) for state, targets in LIFECYCLE_TRANSITIONS.items()},
                "actions": actions,
                "failure_moves": move_table(role),
                "charts": [{"metric": metric, "title": title} for metric, title in CHARTS],
                "window": window if window in WINDOWS else "15m",
                "gpus": [row.index for row in gpus],
                "limits": chart_limits(node, gpus),
            },
        }
