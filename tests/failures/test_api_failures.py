"""/api/v1/failures: the feed, and acknowledging and resolving failures."""

import pytest

from apps.accounts.models import AuditLogEntry
from apps.accounts.roles import Role
from apps.failures.choices import FailureState
from apps.failures.events import node_unreachable, record_event, record_events
from apps.failures.models import Failure
from tests import factories
from tests.failures.conftest import T0, events, xid

pytestmark = pytest.mark.django_db

URL = "/api/v1/failures"


@pytest.fixture
def failure(node):
    return record_event(node.pk, xid(79, gpu=1, data="GPU has fallen off the bus."))


def test_it_refuses_anonymous_reads(api_client):
    assert api_client("anonymous").get(URL).status_code == 401


def test_a_viewer_reads_a_failure_with_its_recommended_and_recovery_actions(api_client, failure):
    Failure.objects.filter(pk=failure.pk).update(recovery_action=4)
    body = api_client(Role.VIEWER).get(f"{URL}/{failure.pk}").json()
    assert body["hostname"] == failure.node.hostname
    assert (body["gpu_index"], body["gpu_uuid"]) == (1, failure.gpu.uuid)
    assert (body["xid"], body["severity"], body["state"], body["count"]) == (79, "critical", "open", 1)
    assert body["recommended_action"].startswith("The GPU is no longer reachable over PCIe: drain the node")
    assert (body["recovery_action"], body["recovery_action_text"]) == (4, "Drain the node, then reset the GPU.")


def test_it_lists_newest_sighting_first(api_client, node):
    older = record_event(node.pk, xid(48, at=T0))
    newer = record_event(node.pk, xid(74, at=T0 + 60))
    record_event(node.pk, xid(48, at=T0 + 120))  # a repeat makes the older one the newest
    ids = [row["id"] for row in api_client(Role.VIEWER).get(URL).json()["results"]]
    assert ids == [older.pk, newer.pk]


def test_the_open_feed_leaves_out_side_effects_and_resolved_failures(api_client, node):
    record_events(node.pk, events(xid(79), xid(45, at=T0 + 1), xid(48, gpu=4)))
    cause = Failure.objects.get(xid=79)
    Failure.objects.get(xid=48).resolve(actor="alice")
    rows = api_client(Role.VIEWER).get(URL, {"open": "true"}).json()["results"]
    assert [row["id"] for row in rows] == [cause.pk]
    assert rows[0]["side_effect_count"] == 1


def test_side_effects_are_listed_with_their_cause(api_client, node):
    record_events(node.pk, events(xid(79), xid(45, at=T0 + 1)))
    cause = Failure.objects.get(xid=79)
    rows = api_client(Role.VIEWER).get(URL, {"side_effect": "true"}).json()["results"]
    assert [(row["xid"], row["cause"], row["is_side_effect"]) for row in rows] == [(45, cause.pk, True)]


@pytest.mark.parametrize(
    ("query", "expected_xids"),
    [
        ({"severity": "critical"}, [79]),
        ({"severity": ["critical", "warning"]}, [13, 79]),
        ({"kind": "liveness"}, []),
        ({"xid": "13"}, [13]),
        ({"gpu_index": "1"}, [79]),
        ({"state": "acknowledged"}, [13]),
        ({"since": "2026-03-01T12:00:30Z"}, [13]),
    ],
)
def test_it_filters(api_client, node, query, expected_xids):
    record_event(node.pk, xid(79, gpu=1, at=T0))
    record_event(node.pk, xid(13, gpu=2, at=T0 + 60)).acknowledge(actor="bob")
    rows = api_client(Role.VIEWER).get(URL, query).json()["results"]
    assert sorted(row["xid"] for row in rows) == expected_xids


def test_it_filters_by_node_hostname_and_gpu(api_client, node, failure):
    other = factories.node(node.cluster, node.node_type)
    node_unreachable(other.pk)
    client = api_client(Role.VIEWER)
    for query in ({"node": node.pk}, {"hostname": node.hostname}, {"gpu": failure.gpu_id}):
        assert [row["id"] for row in client.get(URL, query).json()["results"]] == [failure.pk]


def test_a_bad_filter_value_is_a_400_naming_it(api_client):
    response = api_client(Role.VIEWER).get(URL, {"severity": "apocalyptic"})
    assert response.status_code == 400
    assert "severity" in response.json()


@pytest.mark.parametrize("size", [10, 200])
def test_the_list_takes_the_same_queries_whatever_its_length(api_client, node, size, django_assert_num_queries):
    record_events(node.pk, events(xid(79, gpu=0), xid(45, gpu=0, at=T0 + 1)))  # a cause and its side effect
    node_unreachable(node.pk)  # a node-wide one
    for i in range(size - 3):
        record_event(node.pk, xid(200 + i, gpu=i % 8))
    client = api_client(Role.VIEWER)
    # the token, its last-use stamp, the count, the page
    with django_assert_num_queries(4):
        response = client.get(URL, {"limit": 1000})
    assert len(response.json()["results"]) == size


# Acknowledge and resolve ---------------------------------------------------------------------------


@pytest.mark.parametrize("verb", ["acknowledge", "resolve"])
def test_a_viewer_may_not_change_a_failure(api_client, failure, verb):
    response = api_client(Role.VIEWER).post(f"{URL}/{failure.pk}/{verb}")
    assert response.status_code == 403
    assert "operator" in response.json()["detail"]
    failure.refresh_from_db()
    assert failure.state == FailureState.OPEN


@pytest.mark.parametrize("verb", ["acknowledge", "resolve"])
def test_anonymous_may_not_change_a_failure(api_client, failure, verb):
    assert api_client("anonymous").post(f"{URL}/{failure.pk}/{verb}").status_code == 401


def test_an_operator_acknowledges_and_it_is_audited(api_client, failure):
    response = api_client(Role.OPERATOR).post(f"{URL}/{failure.pk}/acknowledge")
    assert response.status_code == 200, response.content
    assert (response.json()["state"], response.json()["acknowledged_by"]) == ("acknowledged", "operator-user")
    entry = AuditLogEntry.objects.get(action="failure.acknowledge")
    assert (entry.actor, entry.object_id, entry.status_code) == ("operator-user", str(failure.pk), 200)
    assert entry.detail["from_state"] == "open"


def test_an_operator_resolves_with_a_note_and_the_side_effects_go_with_it(api_client, node):
    record_events(node.pk, events(xid(79), xid(45, at=T0 + 1)))
    cause = Failure.objects.get(xid=79)
    response = api_client(Role.OPERATOR).post(f"{URL}/{cause.pk}/resolve", {"note": "Reseated GPU 0, burn-in passed."})
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["state"], body["resolved_by"]) == ("resolved", "operator-user")
    assert body["resolution_note"] == "Reseated GPU 0, burn-in passed."
    assert Failure.objects.get(xid=45).state == FailureState.RESOLVED
    entry = AuditLogEntry.objects.get(action="failure.resolve")
    assert entry.detail == {"from_state": "open", "note": "Reseated GPU 0, burn-in passed.", "side_effects_resolved": 1}


def test_an_operator_resolves_an_acknowledged_failure(api_client, failure):
    failure.acknowledge(actor="alice")

    response = api_client(Role.OPERATOR).post(f"{URL}/{failure.pk}/resolve")

    assert response.status_code == 200, response.content
    failure.refresh_from_db()
    assert (failure.state, failure.resolved_by, failure.acknowledged_by) == (
        FailureState.RESOLVED,
        "operator-user",
        "alice",
    )
    assert failure.resolved_at is not None
    assert not Failure.objects.active().exists()
    assert AuditLogEntry.objects.get(action="failure.resolve").detail["from_state"] == "acknowledged"


def test_resolving_a_resolved_failure_is_a_409_that_says_who_resolved_it(api_client, failure):
    failure.resolve(actor="alice")
    response = api_client(Role.OPERATOR).post(f"{URL}/{failure.pk}/resolve", {"note": "again"})
    assert response.status_code == 409
    detail = response.json()["detail"]
    assert f"Failure #{failure.pk}" in detail
    assert "is resolved (by alice at" in detail
    assert "nothing left to resolve" in detail
    assert AuditLogEntry.objects.get(action="failure.resolve").status_code == 409  # the refused attempt is kept


@pytest.mark.parametrize("first", ["acknowledge", "resolve"])
def test_acknowledging_a_failure_that_is_not_open_is_a_409(api_client, failure, first):
    getattr(failure, first)(actor="alice")
    response = api_client(Role.OPERATOR).post(f"{URL}/{failure.pk}/acknowledge")
    assert response.status_code == 409
    assert "only an open failure can be acknowledged" in response.json()["detail"]


def test_a_note_that_is_not_text_is_a_400(api_client, failure):
    response = api_client(Role.OPERATOR).post(f"{URL}/{failure.pk}/resolve", {"note": {"a": 1}})
    assert response.status_code == 400
    assert "note" in response.json()
    failure.refresh_from_db()
    assert failure.state == FailureState.OPEN


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_failures_are_not_created_edited_or_deleted_through_the_api(admin_api, failure, method):
    url = URL if method == "post" else f"{URL}/{failure.pk}"
    assert getattr(admin_api, method)(url, {}).status_code == 405
    assert Failure.objects.filter(pk=failure.pk, state=FailureState.OPEN).exists()
