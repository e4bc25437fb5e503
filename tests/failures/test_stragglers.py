"""Straggler detection: judged on medians over a window, under load, against the peers' median
absolute deviation; and the flags kept current."""

from datetime import UTC, datetime, timedelta

import pytest

from apps.accounts.models import AuditLogEntry
from apps.failures.choices import FailureKind, FailureState, Severity
from apps.failures.models import Failure, StragglerFlag
from apps.failures.stragglers import (
    GpuWindow,
    Judgement,
    judge_fleet,
    judge_gpus,
    judge_nodes,
    summarise,
    update_flags,
)
from tests import factories

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SAMPLES = 300  # five minutes at one sample a second


def busy_gpu(power=650.0, clock=1980.0, util=97.0, *, samples=SAMPLES, jitter=4.0) -> dict[str, list[float]]:
    """A GPU under load: values wobbling around their level, as real telemetry does."""
    wobble = [jitter * ((i * 7) % 5 - 2) / 2 for i in range(samples)]
    return {
        "power_w": [power + w for w in wobble],
        "sm_clock_mhz": [clock + w for w in wobble],
        "util_gpu": [min(100.0, util + w / 4) for w in wobble],
    }


def node_windows(*gpus: dict[str, list[float]]) -> dict[int, GpuWindow]:
    return {index: summarise(series) for index, series in enumerate(gpus)}


def stragglers(judgements: list[Judgement]) -> set[tuple[int | None, str]]:
    return {(j.gpu_index, j.metric) for j in judgements if j.is_straggler}


# Within a node ------------------------------------------------------------------------------------


def test_a_gpu_drawing_50_w_less_than_its_busy_siblings_is_flagged_on_power():
    windows = node_windows(*[busy_gpu() for _ in range(7)], busy_gpu(power=600.0))
    judgements = judge_gpus(1, windows)
    assert stragglers(judgements) == {(7, "power_w")}
    [flagged] = [j for j in judgements if j.is_straggler]
    assert (flagged.value, flagged.reference, flagged.peer_count) == (600.0, 650.0, 8)
    assert flagged.threshold == 50.0  # the floor: the siblings agree to within a few watts


def test_a_gpu_40_w_below_is_not_a_straggler():
    windows = node_windows(*[busy_gpu() for _ in range(7)], busy_gpu(power=610.0))
    assert stragglers(judge_gpus(1, windows)) == set()


def test_an_idle_node_is_not_judged():
    windows = node_windows(*[busy_gpu(power=90.0, util=0.0) for _ in range(7)], busy_gpu(power=60.0, util=0.0))
    assert judge_gpus(1, windows) == []


def test_one_bad_sample_does_not_flag_a_gpu():
    dip = busy_gpu()
    dip["power_w"][150] = 200.0  # one reading 450 W low
    dip["sm_clock_mhz"][150] = 900.0
    dip["util_gpu"][150] = 0.0
    windows = node_windows(*[busy_gpu() for _ in range(7)], dip)
    assert stragglers(judge_gpus(1, windows)) == set()


def test_a_gpu_low_for_most_of_the_window_is_flagged():
    slow = busy_gpu()
    slow["power_w"] = [560.0] * 200 + slow["power_w"][200:]
    windows = node_windows(*[busy_gpu() for _ in range(7)], slow)
    assert stragglers(judge_gpus(1, windows)) == {(7, "power_w")}


def test_a_gpu_clocking_10_percent_below_its_siblings_is_flagged_on_sm_clock():
    windows = node_windows(*[busy_gpu() for _ in range(7)], busy_gpu(clock=1750.0))
    assert stragglers(judge_gpus(1, windows)) == {(7, "sm_clock_mhz")}


def test_a_gpu_within_a_noisy_nodes_usual_spread_is_not_flagged():
    levels = [520.0, 560.0, 600.0, 640.0, 680.0, 720.0, 760.0]
    windows = node_windows(*[busy_gpu(power=p) for p in levels], busy_gpu(power=530.0))
    judgement = next(j for j in judge_gpus(1, windows) if j.gpu_index == 7 and j.metric == "power_w")
    assert judgement.deviation > 50  # below the floor
    assert judgement.threshold > judgement.deviation  # but inside k × MAD
    assert not judgement.is_straggler


def test_a_gpu_with_too_few_samples_is_neither_judged_nor_a_peer():
    windows = node_windows(*[busy_gpu() for _ in range(7)], busy_gpu(power=300.0, samples=3))
    judgements = judge_gpus(1, windows)
    assert {j.gpu_index for j in judgements} == set(range(7))
    assert {j.peer_count for j in judgements} == {7}


def test_a_node_with_too_few_gpus_to_compare_is_not_judged():
    assert judge_gpus(1, node_windows(busy_gpu(), busy_gpu(power=400.0))) == []


def test_a_metric_a_gpu_does_not_report_is_left_out_not_read_as_zero():
    no_power = busy_gpu()
    no_power["power_w"] = [None] * SAMPLES
    windows = node_windows(*[busy_gpu() for _ in range(7)], no_power)
    judgements = judge_gpus(1, windows)
    assert (7, "power_w") not in {(j.gpu_index, j.metric) for j in judgements}
    assert stragglers(judgements) == set()


# Across the fleet of a node type ------------------------------------------------------------------


def fleet_of(levels: dict[int, float]) -> dict[int, dict[int, GpuWindow]]:
    return {node_id: node_windows(*[busy_gpu(clock=clock) for _ in range(8)]) for node_id, clock in levels.items()}


def test_a_node_clocking_below_the_fleet_of_its_type_is_flagged():
    fleet = fleet_of({1: 1980, 2: 1975, 3: 1985, 4: 1980, 5: 1700})
    judgements = judge_nodes(fleet, {n: 10 for n in fleet})
    assert {(j.node_id, j.gpu_index, j.metric) for j in judgements if j.is_straggler} == {(5, None, "sm_clock_mhz")}
    # its GPUs agree with each other, so none of them is a straggler within the node
    assert stragglers([j for j in judge_fleet(fleet, {n: 10 for n in fleet}) if j.gpu_index is not None]) == set()


def test_nodes_are_only_compared_with_their_own_type():
    fleet = fleet_of({1: 1980, 2: 1975, 3: 1985, 4: 1500, 5: 1510, 6: 1505})
    judgements = judge_nodes(fleet, {1: 10, 2: 10, 3: 10, 4: 20, 5: 20, 6: 20})
    assert [j for j in judgements if j.is_straggler] == []


def test_an_idle_node_is_not_compared_with_the_busy_fleet():
    fleet = fleet_of({1: 1980, 2: 1975, 3: 1985, 4: 1980})
    fleet[5] = node_windows(*[busy_gpu(power=80.0, clock=345.0, util=0.0) for _ in range(8)])
    judgements = judge_nodes(fleet, {n: 10 for n in fleet})
    assert 5 not in {j.node_id for j in judgements}


# Keeping the flags current ------------------------------------------------------------------------


@pytest.fixture
def node(db):
    return factories.node(factories.cluster(), factories.node_type(nics=0))


def judgement(node, *, value=600.0, gpu=3, metric="power_w") -> Judgement:
    reference, threshold = {"power_w": (650.0, 50.0), "sm_clock_mhz": (1980.0, 198.0)}[metric]
    return Judgement(node.pk, gpu, metric, value, reference, threshold, peer_count=8)


def test_a_straggler_raises_a_flag_and_a_warning_failure(node):
    changes = update_flags([judgement(node)], now=NOW)
    [flag] = changes.raised
    assert (flag.gpu, flag.metric, flag.value, flag.deviation) == (node.gpus.get(index=3), "power_w", 600.0, 50.0)
    assert (flag.first_flagged, flag.window_s, flag.cleared_at) == (NOW, 300, None)
    failure = flag.failure
    assert (failure.kind, failure.severity, failure.gpu_index) == (FailureKind.STRAGGLER, Severity.WARNING, 3)
    assert "650 W for the 8 GPUs of the node, 50 W below" in failure.detail


def test_a_straggler_still_low_keeps_its_flag_and_failure(node):
    update_flags([judgement(node)], now=NOW)
    changes = update_flags([judgement(node, value=590.0)], now=NOW + timedelta(seconds=30))
    [flag] = changes.refreshed
    assert flag.pk == StragglerFlag.objects.get().pk
    flag.refresh_from_db()
    assert (flag.first_flagged, flag.last_flagged, flag.value) == (NOW, NOW + timedelta(seconds=30), 590.0)
    assert Failure.objects.get().count == 1  # one failure per straggler episode, not per run


def test_a_straggler_resolved_while_still_slow_opens_a_new_failure_at_its_next_sighting(node):
    [flag] = update_flags([judgement(node), judgement(node, metric="sm_clock_mhz", value=1700.0)], now=NOW).raised[:1]
    first = flag.failure
    first.resolve(actor="alice", note="thought it was fixed")

    later = NOW + timedelta(seconds=30)
    changes = update_flags([judgement(node), judgement(node, metric="sm_clock_mhz", value=1700.0)], now=later)

    second = Failure.objects.active().get()
    assert second.pk != first.pk
    assert (second.kind, second.gpu_index, second.first_seen) == (FailureKind.STRAGGLER, 3, later)
    assert {f.failure_id for f in changes.refreshed} == {second.pk}  # both metrics' flags, one failure
    assert set(StragglerFlag.objects.active().values_list("failure", flat=True)) == {second.pk}
    update_flags([judgement(node)], now=later + timedelta(seconds=30))
    assert Failure.objects.count() == 2  # the new one stands while it stays slow


def test_a_gpu_back_in_line_clears_its_flag_and_resolves_its_failure(node):
    update_flags([judgement(node)], now=NOW)
    later = NOW + timedelta(minutes=10)
    changes = update_flags([judgement(node, value=648.0)], now=later)
    [flag] = changes.cleared
    assert flag.cleared_at == later
    failure = Failure.objects.get()
    assert (failure.state, failure.resolved_by) == (FailureState.RESOLVED, "system:stragglers")
    assert AuditLogEntry.objects.filter(action="failure.resolve", actor="system:stragglers").count() == 1


def test_a_gpu_low_on_two_metrics_has_one_failure_that_resolves_when_both_clear(node):
    update_flags([judgement(node), judgement(node, metric="sm_clock_mhz", value=1700.0)], now=NOW)
    assert StragglerFlag.objects.active().count() == 2
    failure = Failure.objects.get()
    assert failure.count == 2
    update_flags([judgement(node, value=650.0)], now=NOW + timedelta(minutes=1))
    failure.refresh_from_db()
    assert failure.state == FailureState.OPEN  # the clock is still low
    update_flags([judgement(node, metric="sm_clock_mhz", value=1980.0)], now=NOW + timedelta(minutes=2))
    failure.refresh_from_db()
    assert failure.state == FailureState.RESOLVED


def test_a_straggler_not_judged_this_time_keeps_its_flag(node):
    update_flags([judgement(node)], now=NOW)
    changes = update_flags([], now=NOW + timedelta(minutes=5))  # the node went idle
    assert (changes.raised, changes.refreshed, changes.cleared) == ([], [], [])
    assert StragglerFlag.objects.active().count() == 1


def test_a_node_level_flag_has_no_gpu(node):
    [flag] = update_flags([judgement(node, gpu=None, metric="sm_clock_mhz", value=1700.0)], now=NOW).raised
    assert (flag.gpu_index, flag.gpu) == (None, None)
    assert "busy nodes of its type" in flag.failure.detail


def test_a_new_episode_after_clearing_is_a_new_flag(node):
    update_flags([judgement(node)], now=NOW)
    update_flags([judgement(node, value=650.0)], now=NOW + timedelta(minutes=1))
    update_flags([judgement(node)], now=NOW + timedelta(minutes=2))
    assert StragglerFlag.objects.count() == 2
    assert StragglerFlag.objects.active().count() == 1
    assert Failure.objects.active().count() == 1
