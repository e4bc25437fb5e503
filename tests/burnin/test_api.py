"""Burn-ins over the API: an operator starts one on nodes or a cluster (audited), a node in service or a
wrong field is a 400 that names it with nothing written, viewers read the burn-ins, their nodes and
checks at a constant number of queries, and admins publish threshold versions that later burn-ins use."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.accounts.models import AuditLogEntry
from apps.accounts.roles import Role
from apps.burnin.models import BurnIn, BurnInCheck, ThresholdVersion
from apps.burnin.starting import start_burn_in
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Node
from apps.jobs.models import Run
from tests import factories
from tests.burnin.conftest import suite

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(api_client):
    return api_client(Role.OPERATOR)


@pytest.fixture
def new_nodes():
    cluster, node_type = factories.cluster("east"), factories.node_type(nics=1)
    return [factories.node(cluster, node_type, lifecycle=Lifecycle.NEW) for _ in range(3)]


def test_an_operator_starts_a_burn_in_of_a_cluster_and_it_is_audited(operator, new_nodes):
    answer = operator.post("/api/v1/burn-ins", {"suite": "quick", "cluster": "east"}, format="json")

    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["suite"], body["cluster"], body["node_count"], body["nodes"]["testing"]) == ("quick", "east", 3, 3)
    assert set(Node.objects.values_list("lifecycle", flat=True)) == {Lifecycle.BURN_IN}
    run = Run.objects.get(pk=body["run"])
    assert run.commands.count() == 3 * len(suite("quick").steps)
    entry = AuditLogEntry.objects.get(action="burnin.start")
    assert entry.detail["node_count"] == 3
    assert entry.actor == "operator-user"


def test_a_node_in_service_is_refused_by_name_and_nothing_is_written(operator, new_nodes):
    busy = factories.node(new_nodes[0].cluster, new_nodes[0].node_type, "busy-01", lifecycle=Lifecycle.IN_SERVICE)
    ids = [new_nodes[0].pk, busy.pk]

    answer = operator.post("/api/v1/burn-ins", {"suite": "quick", "nodes": ids}, format="json")

    assert answer.status_code == 400
    assert "busy-01 is in service: drain it first" in answer.json()["nodes"][0]
    assert not BurnIn.objects.exists()
    assert not Run.objects.exists()
    assert Node.objects.get(pk=new_nodes[0].pk).lifecycle == Lifecycle.NEW


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"suite": "nope", "cluster": "east"}, "suite"),
        ({"suite": "quick"}, "nodes"),
        ({"suite": "quick", "cluster": "east", "nodes": [1]}, "nodes"),
        ({"suite": "quick", "cluster": "west"}, "cluster"),
        ({"suite": "quick", "cluster": "east", "deadline_s": 5}, "deadline_s"),
    ],
)
def test_a_wrong_field_is_a_400_naming_it(operator, new_nodes, body, field):
    answer = operator.post("/api/v1/burn-ins", body, format="json")

    assert answer.status_code == 400
    assert field in answer.json()
    assert not BurnIn.objects.exists()


def test_an_idempotency_key_returns_the_burn_in_it_started(operator, new_nodes):
    body = {"suite": "quick", "cluster": "east", "idempotency_key": "replaced-rack-7"}
    first = operator.post("/api/v1/burn-ins", body, format="json")
    again = operator.post("/api/v1/burn-ins", body, format="json")

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert BurnIn.objects.count() == 1


def started(count: int) -> None:
    cluster, node_type = factories.cluster(), factories.node_type(nics=1)
    nodes = [factories.node(cluster, node_type, lifecycle=Lifecycle.NEW) for _ in range(count)]
    burn_in = start_burn_in(nodes, suite("quick"), actor="tester", deadline=timezone.now() + timedelta(hours=1))
    for row in burn_in.nodes.all():
        command = burn_in.run.commands.get(node=row.node, sequence=0)
        BurnInCheck.objects.create(burn_in_node=row, command=command, sequence=0, check_name="health", summary="ok")


@pytest.mark.parametrize("path", ["/api/v1/burn-ins", "/api/v1/burn-in-nodes", "/api/v1/burn-in-checks"])
def test_the_lists_cost_the_same_queries_for_more_rows(api_client, django_assert_num_queries, path):
    viewer = api_client(Role.VIEWER)
    started(1)
    viewer.get(path)  # the token's first use writes its last use
    with CaptureQueriesContext(connection) as few:
        assert len(viewer.get(path).json()["results"]) >= 1
    baseline = len(few.captured_queries)
    for _ in range(4):
        started(3)

    with django_assert_num_queries(baseline):
        answer = viewer.get(path)
    assert answer.json()["count"] > 1


def test_an_admin_publishes_a_threshold_version_that_later_burn_ins_are_judged_by(api_client, new_nodes):
    node_type = new_nodes[0].node_type
    first = start_burn_in(new_nodes[:1], suite("quick"), actor="tester", deadline=timezone.now() + timedelta(hours=1))
    v1 = first.nodes.get().thresholds
    assert (v1.version, v1.created_by) == (1, "system:burnin")  # made from the H100 SXM defaults
    assert {(r["check"], r["measurement"]): r["value"] for r in v1.rules}[("nvlink", "p2p")] == 335

    rules = [*v1.rules, {"check": "storage", "measurement": "write", "bound": "at_least", "value": 2, "unit": "GB/s"}]
    answer = api_client(Role.ADMIN).post(
        "/api/v1/burn-in-thresholds",
        {"node_type": node_type.pk, "rules": rules, "note": "the new NVMe array writes 2 GB/s"},
        format="json",
    )

    assert answer.status_code == 201, answer.content
    assert answer.json()["version"] == 2
    later = start_burn_in(new_nodes[1:2], suite("quick"), actor="tester", deadline=timezone.now() + timedelta(hours=1))
    assert later.nodes.get().thresholds.version == 2
    assert first.nodes.get().thresholds.version == 1  # what was judged by v1 says so for good
    assert ThresholdVersion.objects.get(version=1).rules == v1.rules  # a version is never changed
    assert AuditLogEntry.objects.filter(action="burnin.thresholds.publish").count() == 1


def test_a_threshold_rule_with_a_wrong_field_is_refused(api_client, new_nodes):
    rule = {"check": "pcie", "measurement": "h2d", "bound": "above", "value": 52, "unit": "GB/s"}
    answer = api_client(Role.ADMIN).post(
        "/api/v1/burn-in-thresholds",
        {"node_type": new_nodes[0].node_type.pk, "rules": [rule, rule], "note": "x"},
        format="json",
    )

    assert answer.status_code == 400
    assert "rules" in answer.json()
    assert not ThresholdVersion.objects.exists()


def test_defaults_follow_the_gpu_model():
    from apps.burnin.defaults import defaults_for

    def values(model: str) -> dict[tuple[str, str], float]:
        return {(r["check"], r["measurement"]): r["value"] for r in defaults_for(model).rules}

    h100, h200, b200 = values("NVIDIA H100 80GB HBM3"), values("NVIDIA H200"), values("NVIDIA B200")
    assert (h100["pcie", "h2d"], h100["nvlink", "p2p"], h100["nccl_allreduce", "busbw"]) == (52, 335, 460)
    assert (h200["pcie", "h2d"], h200["nvlink", "p2p"], h200["nccl_allreduce", "busbw"]) == (48, 335, 431)
    assert b200["nvlink", "p2p"] > h100["nvlink", "p2p"]
    for model in ("NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA B200", "Tesla T4"):
        assert values(model)["health", "remapped_rows_pending"] == 0
        assert values(model)["health", "ecc_uncorrected_volatile"] == 0
    assert "azurehpc-health-checks" in defaults_for("NVIDIA H200").source
