"""Reliability over a period (apps/failures/reliability.py and GET /api/v1/failures/reliability), checked
against figures worked out by hand.

The fleet of the worked example, over the 30 days up to NOW (720 hours, from 1 March); every node and
GPU entered the fleet on 1 January unless said (1 GPU-year = 8,766 GPU-hours):

    node  GPU model  GPUs                              in the fleet   failures first seen in the period
    h1    H100       8                                 720 h          xid, xid (seen 50 times: still one), liveness
    h2    H100       8, GPU 7 missing from 16 March    720 h          ecc
    n3    H100       8 (no GPU rows: its type's)       360 h          nvlink (entered on 16 March, halfway)
    r1    A100       4                                 216 h          xid (retired on 10 March)
    a1    A100       4                                 720 h          none
    r0    A100       4 (retired before the period)     -              out of the fleet

    Not counted: h1's side effect of its first XID, and h1's failure first seen before the period.

    GPU-hours: h1 8 × 720 = 5,760; h2 7 × 720 + 360 = 5,400; n3 8 × 360 = 2,880; r1 4 × 216 = 864;
    a1 4 × 720 = 2,880.
    H100: 24 GPUs, 14,040 GPU-hours, 5 failures: 5 × 8,766 / 14,040 = 3.1217949 per GPU-year
    A100:  8 GPUs,  3,744 GPU-hours (0.43 GPU-years: too little), 1 failure: 8,766 / 3,744 = 2.3413462
    fleet: 32 GPUs, 17,784 GPU-hours, 6 failures: 6 × 8,766 / 17,784 = 2.9574899; MTBF 720 / 6 = 120 h
    by kind: xid 3 → 1.4787449 (half of all); liveness, ecc, nvlink 1 each → 0.4929150
    MTBF over each node's own hours: h1 720 / 3 = 240 h; h2 720 h; n3 360 h; r1 216 h; a1 none

Taking the fleet as it stands for the whole period (as this module once did) would have read n3 as
half as failure-prone as it is (720 h) and the A100s' rate as 1.52.
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from apps.accounts.roles import Role
from apps.failures.choices import FailureKind, Severity
from apps.failures.models import Failure
from apps.failures.reliability import reliability
from apps.inventory.choices import GpuState, Lifecycle
from apps.inventory.models import Gpu, Node
from tests import factories

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 31, tzinfo=UTC)
H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"


def fail(node: Node, kind: str, at: datetime, *, cause: Failure | None = None, count: int = 1) -> Failure:
    return Failure.objects.create(
        node=node,
        kind=kind,
        code=f"{kind}-{at.timestamp()}",
        severity=Severity.ERROR,
        title=kind,
        recommended_action="-",
        first_seen=at,
        last_seen=at + timedelta(minutes=5),
        count=count,
        cause=cause,
    )


def retired(node: Node, at: datetime) -> Node:
    Node.objects.filter(pk=node.pk).update(lifecycle=Lifecycle.RETIRED, lifecycle_changed_at=at)
    return node


ENTERED = datetime(2026, 1, 1, tzinfo=UTC)
HALFWAY = datetime(2026, 3, 16, tzinfo=UTC)


@pytest.fixture
def fleet() -> dict[str, Node]:
    cluster = factories.cluster()
    h100 = factories.node_type(nics=0)
    a100 = factories.node_type(nics=0, gpus=4)
    a100.gpu_model = A100
    a100.save()
    nodes = {name: factories.node(cluster, h100, name) for name in ("h1", "h2")}
    nodes["n3"] = Node.objects.create(hostname="n3", cluster=cluster, node_type=h100)  # no GPU rows
    nodes |= {name: factories.node(cluster, a100, name) for name in ("r1", "a1", "r0")}
    Node.objects.update(created_at=ENTERED)
    Gpu.objects.update(created_at=ENTERED)
    Node.objects.filter(hostname="n3").update(created_at=HALFWAY)
    Gpu.objects.filter(node=nodes["h2"], index=7).update(state=GpuState.MISSING, missing_since=HALFWAY)
    retired(nodes["r1"], datetime(2026, 3, 10, tzinfo=UTC))
    retired(nodes["r0"], datetime(2026, 2, 1, tzinfo=UTC))

    in_period = datetime(2026, 3, 20, tzinfo=UTC)
    first = fail(nodes["h1"], FailureKind.XID, in_period)
    fail(nodes["h1"], FailureKind.XID, in_period + timedelta(seconds=1), cause=first)  # a side effect
    fail(nodes["h1"], FailureKind.XID, in_period + timedelta(days=1), count=50)
    fail(nodes["h1"], FailureKind.LIVENESS, in_period + timedelta(days=2))
    fail(nodes["h1"], FailureKind.ECC, datetime(2026, 2, 20, tzinfo=UTC))  # before the period
    fail(nodes["h2"], FailureKind.ECC, in_period)
    fail(nodes["n3"], FailureKind.NVLINK, in_period)
    fail(nodes["r1"], FailureKind.XID, datetime(2026, 3, 5, tzinfo=UTC))
    fail(nodes["r0"], FailureKind.XID, datetime(2026, 1, 5, tzinfo=UTC))
    return nodes


def test_failures_per_gpu_year_by_gpu_model_over_each_gpus_exposure(fleet):
    report = reliability(30, now=NOW)
    rows = {m.gpu_model: (m.gpus, m.failures, m.gpu_years, m.failures_per_gpu_year) for m in report.by_model}
    assert rows[H100] == (24, 5, pytest.approx(14040 / 8766), pytest.approx(3.1217949))
    assert rows[A100] == (8, 1, pytest.approx(3744 / 8766), pytest.approx(2.3413462))
    assert [m.gpu_model for m in report.by_model] == [H100, A100]  # worst rate first
    assert {m.gpu_model: m.low_exposure for m in report.by_model} == {H100: False, A100: True}


def test_the_fleets_figures(fleet):
    report = reliability(30, now=NOW)
    assert (report.gpus, report.failures) == (32, 6)
    assert report.period.hours == 720
    assert report.gpu_years == pytest.approx(17784 / 8766)
    assert report.failures_per_gpu_year == pytest.approx(2.9574899)
    assert (report.fleet_hours, report.fleet_mtbf_hours) == (pytest.approx(720), pytest.approx(120))
    assert (report.low_exposure, report.fleet_mtbf_low_exposure, report.caveats) == (False, False, [])


def test_failures_per_gpu_year_by_kind(fleet):
    rows = [(k.kind, k.failures, k.failures_per_gpu_year, k.share) for k in reliability(30, now=NOW).by_kind]
    assert rows == [
        ("xid", 3, pytest.approx(1.4787449), pytest.approx(0.5)),
        ("ecc", 1, pytest.approx(0.4929150), pytest.approx(1 / 6)),
        ("liveness", 1, pytest.approx(0.4929150), pytest.approx(1 / 6)),
        ("nvlink", 1, pytest.approx(0.4929150), pytest.approx(1 / 6)),
    ]


def test_mtbf_per_node_over_the_hours_it_was_in_the_fleet_and_the_worst_nodes(fleet):
    report = reliability(30, now=NOW)
    assert [(n.hostname, n.hours, n.failures, n.mtbf_hours) for n in report.nodes] == [
        ("h1", pytest.approx(720), 3, pytest.approx(240)),
        ("h2", pytest.approx(720), 1, pytest.approx(720)),
        ("n3", pytest.approx(360), 1, pytest.approx(360)),  # added halfway: as failure-prone as it is
        ("r1", pytest.approx(216), 1, pytest.approx(216)),  # retired on the 10th
        ("a1", pytest.approx(720), 0, None),
    ]
    assert [n.hostname for n in report.worst_nodes] == ["h1", "h2", "n3", "r1"]
    assert report.worst_nodes[0].kinds_by_count == [("xid", 2), ("liveness", 1)]


def test_a_longer_period_takes_in_older_failures_and_exposure(fleet):
    report = reliability(90, now=NOW)
    # From 1 January: h1's February ECC joins, and r0 (retired on 1 February) is in the fleet with its XID.
    # GPU-hours: h1 8 × 2136, h2 7 × 2136 + 1776, n3 8 × 360, r1 4 × 1632, a1 4 × 2136, r0 4 × 744 = 54,744.
    assert (report.gpus, report.failures) == (36, 8)
    assert report.gpu_years == pytest.approx(54744 / 8766)
    assert report.failures_per_gpu_year == pytest.approx(8 * 8766 / 54744)
    assert report.fleet_hours == pytest.approx(2136)  # the fleet has been there since 1 January


def test_a_five_minute_old_fleet_says_its_figures_rest_on_too_little(db):
    now = timezone.now()
    cluster, node_type = factories.cluster(), factories.node_type(nics=0)
    nodes = [factories.node(cluster, node_type, f"gpu-{i:03d}") for i in range(16)]
    Node.objects.update(created_at=now - timedelta(minutes=5))
    Gpu.objects.update(created_at=now - timedelta(minutes=5))
    fail(nodes[11], FailureKind.XID, now - timedelta(minutes=1))

    report = reliability(30, now=now)

    assert report.gpu_years == pytest.approx(128 * 5 / 60 / 8766)  # not 128 × 30 days' worth
    assert report.fleet_hours == pytest.approx(5 / 60)
    assert (report.low_exposure, report.fleet_mtbf_low_exposure) == (True, True)
    assert report.worst_nodes[0].mtbf_hours == pytest.approx(5 / 60)
    assert report.worst_nodes[0].low_exposure
    assert report.caveats == [
        "The fleet's failure rates rest on 0.00122 GPU-years of exposure, under 1: too little to mean much yet.",
        "The fleet's MTBF rests on 0.0833 hours, under 168: too little to mean much yet.",
        "16 of 16 nodes were in the fleet under 168 hours of the period.",
    ]


def test_a_fleet_without_nodes_has_no_rates():
    report = reliability(7, now=NOW)
    assert (report.gpus, report.failures, report.failures_per_gpu_year, report.fleet_mtbf_hours) == (0, 0, None, None)
    assert (report.by_model, report.by_kind, report.nodes, report.caveats) == ([], [], [], [])


def test_a_node_that_entered_after_the_period_is_not_in_it(fleet):
    assert "n3" not in {node.hostname for node in reliability(30, now=datetime(2026, 3, 10, tzinfo=UTC)).nodes}


def test_it_costs_three_queries_whatever_the_fleets_size(fleet, django_assert_num_queries):
    with django_assert_num_queries(3):
        reliability(30, now=NOW)


# The API --------------------------------------------------------------------------------------------

URL = "/api/v1/failures/reliability"


def test_the_api_gives_a_viewer_the_same_figures_with_their_exposure(api_client, fleet):
    Failure.objects.update(first_seen=timezone.now() - timedelta(days=2))  # all of them inside the last 7 days
    Node.objects.filter(lifecycle=Lifecycle.RETIRED).update(lifecycle_changed_at=timezone.now())
    within = 1e-4  # retired a moment before the request: that moment is not in their exposure
    body = api_client(Role.VIEWER).get(URL, {"days": 7}).json()
    assert (body["period"]["days"], body["period"]["hours"]) == (7, 168)
    # Both retired nodes were in the fleet this week; h2's missing GPU was not.
    assert (body["gpus"], body["failures"]) == (35, 8)
    assert body["gpu_years"] == pytest.approx(35 * 168 / 8766, rel=within)
    assert body["failures_per_gpu_year"] == pytest.approx(8 / (35 * 168 / 8766), rel=within)
    assert (body["fleet_hours"], body["fleet_mtbf_hours"]) == (pytest.approx(168), pytest.approx(168 / 8))
    # 0.67 GPU-years: too little for a rate to mean much; a week of the fleet is enough for its MTBF.
    assert (body["low_exposure"], body["fleet_mtbf_low_exposure"]) == (True, False)
    assert body["caveats"][0] == (
        "The fleet's failure rates rest on 0.671 GPU-years of exposure, under 1: too little to mean much yet."
    )
    assert body["minimum_exposure"] == {"gpu_years": 1.0, "hours": 168.0}
    h1 = next(node for node in body["nodes"] if node["hostname"] == "h1")
    assert (h1["failures"], h1["hours"], h1["mtbf_hours"], h1["low_exposure"]) == (4, 168, pytest.approx(42), False)
    assert h1["kinds"] == {"xid": 2, "liveness": 1, "ecc": 1}
    assert body["worst_nodes"][0]["hostname"] == "h1"
    assert next(node for node in body["nodes"] if node["hostname"] == "a1")["mtbf_hours"] is None
    a100 = next(model for model in body["by_model"] if model["gpu_model"] == A100)
    assert (a100["gpu_years"], a100["low_exposure"]) == (pytest.approx(12 * 168 / 8766, rel=within), True)
    assert body["by_kind"][0]["gpu_years"] == pytest.approx(body["gpu_years"])


def test_the_api_takes_30_days_by_default(api_client):
    assert api_client(Role.VIEWER).get(URL).json()["period"]["days"] == 30


@pytest.mark.parametrize("days", ["0", "3651", "a week", "-7"])
def test_the_api_refuses_a_period_it_cannot_use(api_client, days):
    response = api_client(Role.VIEWER).get(URL, {"days": days})
    assert response.status_code == 400
    assert "days" in response.json()
