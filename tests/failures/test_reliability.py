"""Reliability over a period (apps/failures/reliability.py and GET /api/v1/failures/reliability), checked
against figures worked out by hand.

The fleet of the worked example, over the 30 days up to NOW (720 hours, 30 / 365.25 years):

    node  GPU model  GPUs                         failures first seen in the period
    h1    H100       8                            xid, xid (seen 50 times: still one), liveness
    h2    H100       8                            ecc
    n3    H100       8 (no GPU rows: its type's)  nvlink
    r1    A100       4 (retired in the period)    xid
    a1    A100       4                            none
    r0    A100       4 (retired before it)        out of the fleet

    Not counted: h1's side effect of its first XID, and h1's failure first seen before the period.

    H100: 24 GPUs, 5 failures: 5 / (24 × 30 / 365.25) = 1826.25 / 720 = 2.5364583 per GPU-year
    A100:  8 GPUs, 1 failure:  1 / ( 8 × 30 / 365.25) =  365.25 / 240 = 1.521875
    fleet: 32 GPUs, 6 failures: 6 × 365.25 / 960 = 2.2828125; MTBF 720 / 6 = 120 h
    by kind: xid 3 → 3 × 365.25 / 960 = 1.14140625 (half of all); liveness, ecc, nvlink 1 each → 0.38046875
    MTBF: h1 720 / 3 = 240 h; h2, n3, r1 720 h; a1 none
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from apps.accounts.roles import Role
from apps.failures.choices import FailureKind, Severity
from apps.failures.models import Failure
from apps.failures.reliability import reliability
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Node
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
    retired(nodes["r1"], datetime(2026, 3, 10, tzinfo=UTC))
    retired(nodes["r0"], datetime(2026, 2, 1, tzinfo=UTC))

    in_period = datetime(2026, 3, 5, tzinfo=UTC)
    first = fail(nodes["h1"], FailureKind.XID, in_period)
    fail(nodes["h1"], FailureKind.XID, in_period + timedelta(seconds=1), cause=first)  # a side effect
    fail(nodes["h1"], FailureKind.XID, in_period + timedelta(days=1), count=50)
    fail(nodes["h1"], FailureKind.LIVENESS, in_period + timedelta(days=2))
    fail(nodes["h1"], FailureKind.ECC, datetime(2026, 2, 20, tzinfo=UTC))  # before the period
    fail(nodes["h2"], FailureKind.ECC, in_period)
    fail(nodes["n3"], FailureKind.NVLINK, in_period)
    fail(nodes["r1"], FailureKind.XID, in_period)
    fail(nodes["r0"], FailureKind.XID, datetime(2026, 1, 5, tzinfo=UTC))
    return nodes


def test_failures_per_gpu_year_by_gpu_model(fleet):
    report = reliability(30, now=NOW)
    rows = {m.gpu_model: (m.gpus, m.failures, m.gpu_years, m.failures_per_gpu_year) for m in report.by_model}
    assert rows[H100] == (24, 5, pytest.approx(720 / 365.25), pytest.approx(2.5364583))
    assert rows[A100] == (8, 1, pytest.approx(240 / 365.25), pytest.approx(1.521875))
    assert [m.gpu_model for m in report.by_model] == [H100, A100]  # worst rate first


def test_the_fleets_figures(fleet):
    report = reliability(30, now=NOW)
    assert (report.gpus, report.failures) == (32, 6)
    assert report.period.hours == 720
    assert report.failures_per_gpu_year == pytest.approx(2.2828125)
    assert report.fleet_mtbf_hours == pytest.approx(120)


def test_failures_per_gpu_year_by_kind(fleet):
    rows = [(k.kind, k.failures, k.failures_per_gpu_year, k.share) for k in reliability(30, now=NOW).by_kind]
    assert rows == [
        ("xid", 3, pytest.approx(1.14140625), pytest.approx(0.5)),
        ("ecc", 1, pytest.approx(0.38046875), pytest.approx(1 / 6)),
        ("liveness", 1, pytest.approx(0.38046875), pytest.approx(1 / 6)),
        ("nvlink", 1, pytest.approx(0.38046875), pytest.approx(1 / 6)),
    ]


def test_mtbf_per_node_and_the_worst_nodes(fleet):
    report = reliability(30, now=NOW)
    assert [(n.hostname, n.failures, n.mtbf_hours) for n in report.nodes] == [
        ("h1", 3, pytest.approx(240)),
        ("h2", 1, pytest.approx(720)),
        ("n3", 1, pytest.approx(720)),
        ("r1", 1, pytest.approx(720)),
        ("a1", 0, None),
    ]
    assert [n.hostname for n in report.worst_nodes] == ["h1", "h2", "n3", "r1"]
    assert report.worst_nodes[0].kinds_by_count == [("xid", 2), ("liveness", 1)]


def test_a_longer_period_takes_in_older_failures(fleet):
    report = reliability(90, now=NOW)
    # h1's February ECC joins; r0 (retired on 1 February, inside these 90 days) is in the fleet with its XID.
    assert (report.gpus, report.failures) == (36, 8)
    assert report.failures_per_gpu_year == pytest.approx(8 / (36 * 90 / 365.25))


def test_a_fleet_without_nodes_has_no_rates():
    report = reliability(7, now=NOW)
    assert (report.gpus, report.failures, report.failures_per_gpu_year, report.fleet_mtbf_hours) == (0, 0, None, None)
    assert (report.by_model, report.by_kind, report.nodes) == ([], [], [])


def test_it_costs_two_queries_whatever_the_fleets_size(fleet, django_assert_num_queries):
    with django_assert_num_queries(2):
        reliability(30, now=NOW)


# The API --------------------------------------------------------------------------------------------

URL = "/api/v1/failures/reliability"


def test_the_api_gives_a_viewer_the_same_figures(api_client, fleet):
    Failure.objects.update(first_seen=timezone.now() - timedelta(days=2))  # all of them inside the last 7 days
    Node.objects.filter(lifecycle=Lifecycle.RETIRED).update(lifecycle_changed_at=timezone.now())
    body = api_client(Role.VIEWER).get(URL, {"days": 7}).json()
    assert (body["period"]["days"], body["period"]["hours"]) == (7, 168)
    assert (body["gpus"], body["failures"]) == (36, 8)  # both retired nodes were in the fleet this week
    assert body["fleet_mtbf_hours"] == pytest.approx(168 / 8)
    assert body["failures_per_gpu_year"] == pytest.approx(8 / (36 * 7 / 365.25))
    h1 = next(node for node in body["nodes"] if node["hostname"] == "h1")
    assert (h1["failures"], h1["mtbf_hours"]) == (4, pytest.approx(42))
    assert h1["kinds"] == {"xid": 2, "liveness": 1, "ecc": 1}
    assert body["worst_nodes"][0]["hostname"] == "h1"
    assert next(node for node in body["nodes"] if node["hostname"] == "a1")["mtbf_hours"] is None


def test_the_api_takes_30_days_by_default(api_client):
    assert api_client(Role.VIEWER).get(URL).json()["period"]["days"] == 30


@pytest.mark.parametrize("days", ["0", "3651", "a week", "-7"])
def test_the_api_refuses_a_period_it_cannot_use(api_client, days):
    response = api_client(Role.VIEWER).get(URL, {"days": days})
    assert response.status_code == 400
    assert "days" in response.json()
