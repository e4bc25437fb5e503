"""Stragglers: the GPU drawing 50 W less than its siblings while they all work, the node whose GPUs
clock 10% below the rest of its type. The slowest one sets the speed of a synchronous training job.

Every judgement is made on medians over a window (default 5 minutes), never on one sample, and only
under load (the peers' median utilization at least 50%): an idle GPU at 70 W next to another at
90 W says nothing. Within a group of peers (the GPUs of one node, or the busy nodes of one node
type), a member is a straggler on a metric when

    reference − value ≥ max(k × 1.4826 × MAD, floor)

where ``reference`` is the peers' median, MAD the median absolute deviation from it (×1.4826, the
standard deviation of a normal distribution), k = 3, and ``floor`` keeps a tight group from flagging
noise: 50 W for power, 10 points of utilization, 10% of the reference for the SM clock.

The detection is plain functions over per-GPU time series (``summarise``, ``judge_fleet``) so tests
and the simulator need no database; ``load_windows`` reads the window from the telemetry tables
(on PostgreSQL the medians are computed by the database), and ``update_flags`` keeps the
``StragglerFlag`` rows current: raised, refreshed while it lasts, cleared when back in line.

Each flag also raises a failure of kind straggler (warning), one per GPU or node however many
metrics are low, resolved by itself when its last flag clears. A straggler is not broken hardware,
but it is the thing to fix before the next large job, and the failure feed is where ops engineers
look, acknowledge and leave a note; the warning severity keeps it from paging anyone.
"""

import logging
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from django.apps import apps
from django.db import IntegrityError, transaction

from apps.accounts.audit import record
from apps.failures import conditions
from apps.failures.choices import StragglerMetric
from apps.failures.conditions import Observation
from apps.failures.models import Failure, StragglerFlag
from apps.failures.recording import raise_failure
from apps.inventory.models import Gpu, Node

logger = logging.getLogger(__name__)

STRAGGLERS_ACTOR = "system:stragglers"
MAD_TO_SIGMA: Final = 1.4826
UTILIZATION = StragglerMetric.UTILIZATION.value


@dataclass(frozen=True)
class Rule:
    """How far below its peers' median a member may sit on one metric before it is flagged."""

    metric: StragglerMetric
    absolute_floor: float = 0.0
    relative_floor: float = 0.0  # share of the reference

    def floor(self, reference: float) -> float:
        return max(self.absolute_floor, self.relative_floor * reference)


DEFAULT_RULES: Final = (
    Rule(StragglerMetric.POWER, absolute_floor=50.0),
    Rule(StragglerMetric.SM_CLOCK, relative_floor=0.10),
    Rule(StragglerMetric.UTILIZATION, absolute_floor=10.0),
)


@dataclass(frozen=True)
class Policy:
    window: timedelta = timedelta(minutes=5)
    k: float = 3.0
    busy_utilization: float = 50.0  # peers' median utilization, %, for a group to be judged at all
    min_samples: int = 5  # a GPU with fewer samples in the window is not judged (nor counted as a peer)
    min_peers: int = 3  # with fewer members a median and its MAD mean nothing
    rules: tuple[Rule, ...] = DEFAULT_RULES


DEFAULT_POLICY: Final = Policy()


@dataclass(frozen=True)
class GpuWindow:
    """One GPU over the window: how many samples it sent and the median of each metric it reported."""

    samples: int
    medians: Mapping[str, float]


NodeWindows = Mapping[int, GpuWindow]  # by GPU index


@dataclass(frozen=True)
class Judgement:
    """One GPU (``gpu_index``) or node (None) against its peers on one metric."""

    node_id: int
    gpu_index: int | None
    metric: str
    value: float
    reference: float
    threshold: float
    peer_count: int

    @property
    def deviation(self) -> float:
        return self.reference - self.value

    @property
    def is_straggler(self) -> bool:
        return self.deviation >= self.threshold

    def describe(self) -> str:
        unit = {"power_w": " W", "sm_clock_mhz": " MHz", "util_gpu": "%"}[self.metric]
        peers = "GPUs of the node" if self.gpu_index is not None else "busy nodes of its type"
        return (
            f"{StragglerMetric(self.metric).label}: median {self.value:.0f}{unit} against "
            f"{self.reference:.0f}{unit} for the {self.peer_count} {peers}, {self.deviation:.0f}{unit} below "
            f"(threshold {self.threshold:.0f}{unit})."
        )


# Detection: plain functions ---------------------------------------------------------------------


def summarise(series: Mapping[str, Sequence[float | None]]) -> GpuWindow:
    """One GPU's time series over the window (metric → values, None where it was not reported)."""
    medians = {}
    for metric, values in series.items():
        present = [v for v in values if v is not None]
        if present:
            medians[metric] = statistics.median(present)
    return GpuWindow(samples=max((len(v) for v in series.values()), default=0), medians=medians)


def _judge_group(
    values: Mapping[int, float], rule: Rule, policy: Policy
) -> Iterable[tuple[int, float, float, float, int]]:
    """(member, value, reference, threshold, peer count) for each member of one group on one metric."""
    if len(values) < policy.min_peers:
        return []
    reference = statistics.median(values.values())
    mad = statistics.median(abs(v - reference) for v in values.values())
    threshold = max(policy.k * MAD_TO_SIGMA * mad, rule.floor(reference))
    return [(member, value, reference, threshold, len(values)) for member, value in values.items()]


def _judged_members(windows: NodeWindows, policy: Policy) -> dict[int, GpuWindow]:
    return {index: w for index, w in windows.items() if w.samples >= policy.min_samples}


def _is_busy(medians: Iterable[Mapping[str, float]], policy: Policy) -> bool:
    utilization = [m[UTILIZATION] for m in medians if UTILIZATION in m]
    return bool(utilization) and statistics.median(utilization) >= policy.busy_utilization


def judge_gpus(node_id: int, windows: NodeWindows, policy: Policy = DEFAULT_POLICY) -> list[Judgement]:
    """Each GPU of a busy node against its siblings."""
    members = _judged_members(windows, policy)
    if not _is_busy((w.medians for w in members.values()), policy):
        return []
    judgements = []
    for rule in policy.rules:
        values = {index: w.medians[rule.metric] for index, w in members.items() if rule.metric in w.medians}
        judgements += [
            Judgement(node_id, index, rule.metric, value, reference, threshold, peers)
            for index, value, reference, threshold, peers in _judge_group(values, rule, policy)
        ]
    return judgements


def node_medians(windows: NodeWindows, policy: Policy = DEFAULT_POLICY) -> dict[str, float]:
    """A node's figure per metric: the median of its GPUs' medians (one straggler GPU barely moves it)."""
    per_metric: dict[str, list[float]] = defaultdict(list)
    for window in _judged_members(windows, policy).values():
        for metric, value in window.medians.items():
            per_metric[metric].append(value)
    return {metric: statistics.median(values) for metric, values in per_metric.items()}


def judge_nodes(
    fleet: Mapping[int, NodeWindows], node_types: Mapping[int, int], policy: Policy = DEFAULT_POLICY
) -> list[Judgement]:
    """Each busy node against the other busy nodes of its node type."""
    by_type: dict[int, dict[int, dict[str, float]]] = defaultdict(dict)
    for node_id, windows in fleet.items():
        medians = node_medians(windows, policy)
        if node_id in node_types and _is_busy([medians], policy):
            by_type[node_types[node_id]][node_id] = medians
    judgements = []
    for nodes in by_type.values():
        for rule in policy.rules:
            values = {node_id: m[rule.metric] for node_id, m in nodes.items() if rule.metric in m}
            judgements += [
                Judgement(node_id, None, rule.metric, value, reference, threshold, peers)
                for node_id, value, reference, threshold, peers in _judge_group(values, rule, policy)
            ]
    return judgements


def judge_fleet(
    fleet: Mapping[int, NodeWindows], node_types: Mapping[int, int], policy: Policy = DEFAULT_POLICY
) -> list[Judgement]:
    judgements = [j for node_id, windows in fleet.items() for j in judge_gpus(node_id, windows, policy)]
    return judgements + judge_nodes(fleet, node_types, policy)


# Reading the window from telemetry ------------------------------------------------------------


def load_windows(since: datetime, until: datetime, policy: Policy = DEFAULT_POLICY) -> dict[int, dict[int, GpuWindow]]:
    """Every GPU's window from the raw telemetry samples (``apps.telemetry.queries.gpu_series``), by node
    and GPU index, summarised here (the packed samples are unpacked in Python on either database)."""
    if not apps.is_installed("apps.telemetry"):
        logger.warning("apps.telemetry is not installed: no telemetry to look for stragglers in.")
        return {}
    from apps.telemetry.queries import gpu_series

    fleet: dict[int, dict[int, GpuWindow]] = defaultdict(dict)
    for (node_id, gpu_index), series in gpu_series(since, until, [rule.metric.value for rule in policy.rules]).items():
        fleet[node_id][gpu_index] = summarise(series)
    return dict(fleet)


# Keeping the flags current ----------------------------------------------------------------------


@dataclass
class FlagChanges:
    raised: list[StragglerFlag] = field(default_factory=list)
    refreshed: list[StragglerFlag] = field(default_factory=list)
    cleared: list[StragglerFlag] = field(default_factory=list)


def update_flags(judgements: Iterable[Judgement], *, now: datetime, policy: Policy = DEFAULT_POLICY) -> FlagChanges:
    """Raise a flag for each new straggler, refresh the ones that still are, clear the ones back in line.

    A GPU or node that was not judged this time (idle, silent, too few peers) keeps its flag as it
    was: it was slow the last time it was seen under load, and that is still the best knowledge.
    A straggler whose failure someone resolved while it is still slow gets a new failure.
    """
    judgements = list(judgements)
    changes = FlagChanges()
    still: list[tuple[StragglerFlag, Judgement]] = []
    with transaction.atomic():
        active = {
            (flag.node_id, flag.gpu_index, flag.metric): flag
            for flag in StragglerFlag.objects.active()
            .select_for_update()
            .filter(node_id__in={j.node_id for j in judgements})
        }
        for judgement in judgements:
            flag = active.get((judgement.node_id, judgement.gpu_index, judgement.metric))
            if judgement.is_straggler and flag is None:
                raised = _raise_flag(judgement, now, policy)
                if raised is not None:
                    changes.raised.append(raised)
            elif judgement.is_straggler:
                _copy_judgement(flag, judgement)
                flag.last_flagged = now
                changes.refreshed.append(flag)
                still.append((flag, judgement))
            elif flag is not None:
                flag.cleared_at = now
                changes.cleared.append(flag)
        _reopen_resolved(still, now)
        StragglerFlag.objects.bulk_update(
            changes.refreshed,
            ["value", "reference", "deviation", "threshold", "peer_count", "last_flagged", "failure"],
        )
        StragglerFlag.objects.bulk_update(changes.cleared, ["cleared_at"])
        _resolve_failures_back_in_line({flag.failure_id for flag in changes.cleared if flag.failure_id})
    return changes


def _copy_judgement(flag: StragglerFlag, judgement: Judgement) -> None:
    flag.value, flag.reference, flag.threshold = judgement.value, judgement.reference, judgement.threshold
    flag.deviation, flag.peer_count = judgement.deviation, judgement.peer_count


def _observation(judgement: Judgement, now: datetime) -> Observation:
    return Observation(
        node_id=judgement.node_id,
        at=now,
        condition=conditions.STRAGGLER,
        gpu_index=judgement.gpu_index,
        detail=judgement.describe(),
    )


def _reopen_resolved(still: list[tuple[StragglerFlag, Judgement]], now: datetime) -> None:
    """The flags still low whose failure is no longer active (someone resolved it): the next
    sighting opens a new failure, one per GPU or node however many of its metrics are low."""
    active = set(
        Failure.objects.active().filter(pk__in={flag.failure_id for flag, _ in still}).values_list("pk", flat=True)
    )
    reopened: dict[tuple[int, int | None], Failure] = {}
    for flag, judgement in still:
        if flag.failure_id in active:
            continue
        member = (flag.node_id, flag.gpu_index)
        if member not in reopened:
            reopened[member] = raise_failure(_observation(judgement, now), actor=STRAGGLERS_ACTOR)
        flag.failure = reopened[member]


def _raise_flag(judgement: Judgement, now: datetime, policy: Policy) -> StragglerFlag | None:
    observation = _observation(judgement, now)
    flag = StragglerFlag(
        node_id=judgement.node_id,
        gpu_index=judgement.gpu_index,
        metric=judgement.metric,
        window_s=int(policy.window.total_seconds()),
        first_flagged=now,
        last_flagged=now,
    )
    _copy_judgement(flag, judgement)
    if judgement.gpu_index is not None:
        flag.gpu = Gpu.objects.filter(node_id=judgement.node_id, index=judgement.gpu_index).first()
    try:
        with transaction.atomic():
            flag.failure = raise_failure(observation, actor=STRAGGLERS_ACTOR)
            flag.save()
    except IntegrityError:
        logger.info("Straggler flag %s raised by a concurrent run; leaving it to that one.", flag)
        return None
    return flag


def _resolve_failures_back_in_line(failure_ids: set[int]) -> None:
    still_flagged = StragglerFlag.objects.active().filter(failure_id__in=failure_ids).values("failure_id")
    for failure in Failure.objects.active().filter(pk__in=failure_ids).exclude(pk__in=still_flagged):
        failure.resolve(actor=STRAGGLERS_ACTOR, note="Back in line with its peers under load.")
        record("failure.resolve", actor=STRAGGLERS_ACTOR, obj=failure, note=failure.resolution_note)


def detect_stragglers(now: datetime, policy: Policy = DEFAULT_POLICY) -> FlagChanges:
    """One pass over the fleet: read the window ending ``now``, judge, and update the flags."""
    fleet = load_windows(now - policy.window, now, policy)
    node_types = dict(Node.objects.filter(pk__in=fleet.keys()).values_list("pk", "node_type_id"))
    return update_flags(judge_fleet(fleet, node_types, policy), now=now, policy=policy)
