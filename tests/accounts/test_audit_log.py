"""The audit log: one row per state-changing request, whatever its outcome (who, what, when, from
where), except that an anonymous request's repeats share a row with a count; readable by operators
through the API and by admins in the (read-only) admin; purged after ``AUDIT_LOG_RETENTION_DAYS``."""

from datetime import UTC, datetime, timedelta

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AnonymousUser
from django.db import connection
from django.test import AsyncClient, Client, RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import resolve
from django.utils import timezone
from rest_framework.test import APIClient

from apps.accounts.audit import purge_expired, record, record_request
from apps.accounts.models import ApiToken, AuditLogEntry, User
from apps.accounts.roles import Role
from apps.accounts.tasks import purge_audit_log
from apps.inventory.models import Cluster
from tests import factories
from tests.celery_routing import queue_of

pytestmark = pytest.mark.django_db

BROWSER = "Mozilla/5.0 (X11; Linux x86_64) ops-console"


@pytest.fixture
def cluster(db) -> Cluster:
    return factories.cluster("prod")


# One row per unsafe request -----------------------------------------------------------------------


def test_it_records_who_did_what_when_and_from_where(admin_api):
    before = timezone.now()

    response = admin_api.post(
        "/api/v1/clusters?source=script", {"name": "b200-east"}, REMOTE_ADDR="192.0.2.44", HTTP_USER_AGENT=BROWSER
    )

    entry = AuditLogEntry.objects.get()
    assert response.status_code == 201
    assert entry.actor == "admin-user"
    assert entry.user == User.objects.get(username="admin-user")
    assert entry.token == ApiToken.objects.get(user__username="admin-user")
    assert entry.action == "cluster.create"
    assert (entry.method, entry.path, entry.status_code) == ("POST", "/api/v1/clusters?source=script", 201)
    assert (entry.object_type, entry.object_id, entry.object_repr) == (
        "inventory.cluster",
        str(response.json()["id"]),
        "b200-east",
    )
    assert entry.detail["fields"]["name"] == "b200-east"
    assert (entry.remote_addr, entry.user_agent) == ("192.0.2.44", BROWSER)
    assert before <= entry.timestamp <= timezone.now()


@pytest.mark.parametrize(
    ("role", "status", "actor", "action"),
    [
        ("anonymous", 401, "anonymous", "POST cluster-list"),  # by route: see the shared rows below
        (Role.VIEWER, 403, "viewer-user", "POST /api/v1/clusters"),
        (Role.ADMIN, 400, "admin-user", "POST /api/v1/clusters"),
    ],
)
def test_it_records_refused_requests_too(api_client, role, status, actor, action):
    response = api_client(role).post("/api/v1/clusters", {"name": ""}, HTTP_USER_AGENT=BROWSER)

    entry = AuditLogEntry.objects.get()
    assert response.status_code == status
    assert (entry.actor, entry.action, entry.status_code) == (actor, action, status)
    assert (entry.remote_addr, entry.user_agent) == ("127.0.0.1", BROWSER)
    assert not Cluster.objects.exists()


def test_it_records_a_rejected_token_as_anonymous(db):
    response = APIClient(HTTP_AUTHORIZATION="Bearer cpt_0123abcd_revoked").delete("/api/v1/clusters/1")

    entry = AuditLogEntry.objects.get()
    assert response.status_code == 401
    assert (entry.actor, entry.user, entry.token, entry.method, entry.status_code) == (
        "anonymous",
        None,
        None,
        "DELETE",
        401,
    )


# Anonymous requests: one row per address, action, status and window, with a count -----------------

ATTACKER = "203.0.113.9"


def test_repeated_anonymous_refusals_share_one_row_with_a_count(db):
    client = APIClient(REMOTE_ADDR=ATTACKER, HTTP_USER_AGENT=BROWSER)
    for pk in range(40):
        assert client.delete(f"/api/v1/clusters/{pk}").status_code == 401  # a new path each time

    entry = AuditLogEntry.objects.get()
    assert (entry.actor, entry.action, entry.status_code, entry.count) == (
        "anonymous",
        "DELETE cluster-detail",
        401,
        40,
    )
    assert (entry.path, entry.remote_addr, entry.user_agent) == ("/api/v1/clusters/0", ATTACKER, BROWSER)
    assert entry.timestamp <= entry.last_at


def test_each_address_action_and_status_gets_its_own_shared_row(db):
    for address, times in ((ATTACKER, 3), ("203.0.113.10", 2)):
        for _ in range(times):
            APIClient(REMOTE_ADDR=address).post("/api/v1/clusters", {"name": "x"})
    APIClient(REMOTE_ADDR=ATTACKER).delete("/api/v1/clusters/1")
    forged = Client(enforce_csrf_checks=True, REMOTE_ADDR=ATTACKER)
    for _ in range(2):
        assert forged.post("/logout/").status_code == 403  # no CSRF token

    assert sorted(AuditLogEntry.objects.values_list("remote_addr", "action", "status_code", "count")) == [
        ("203.0.113.10", "POST cluster-list", 401, 2),
        (ATTACKER, "DELETE cluster-detail", 401, 1),
        (ATTACKER, "POST cluster-list", 401, 3),
        (ATTACKER, "POST logout", 403, 2),
    ]


def test_an_ipv6_client_shares_one_row_across_its_64_block(db):
    for n in range(5):
        APIClient(REMOTE_ADDR=f"2001:db8:7:1::{n + 1:x}").post("/api/v1/clusters", {"name": "x"})

    entry = AuditLogEntry.objects.get()
    assert (entry.remote_addr, entry.count) == ("2001:db8:7:1::1", 5)  # the first one's address


def test_a_new_window_starts_a_new_row(db, settings):
    settings.AUDIT_REFUSAL_WINDOW_S = 600
    request = RequestFactory().post("/api/v1/clusters", REMOTE_ADDR=ATTACKER)
    request.user, request.resolver_match = AnonymousUser(), resolve("/api/v1/clusters")
    t0 = datetime.fromtimestamp(2_000_000 * 600, tz=UTC)  # a window's first second

    for at in (t0, t0 + timedelta(seconds=599), t0 + timedelta(seconds=600)):
        record_request(request, 401, now=at)

    assert list(AuditLogEntry.objects.order_by("id").values_list("timestamp", "last_at", "count")) == [
        (t0, t0 + timedelta(seconds=599), 2),
        (t0 + timedelta(seconds=600), t0 + timedelta(seconds=600), 1),
    ]


def test_signed_in_callers_keep_a_row_per_request(api_client):
    for _ in range(3):
        api_client(Role.VIEWER).post("/api/v1/clusters", {"name": "x"})

    assert list(AuditLogEntry.objects.values_list("count", flat=True)) == [1, 1, 1]


def test_the_api_shows_how_many_times_a_shared_row_happened(api_client):
    for _ in range(3):
        APIClient(REMOTE_ADDR=ATTACKER).post("/api/v1/clusters", {"name": "x"})

    shown = api_client(Role.OPERATOR).get("/api/v1/audit-log").json()["results"]

    assert [(row["action"], row["count"]) for row in shown] == [("POST cluster-list", 3)]
    assert shown[0]["last_at"] is not None


def test_it_records_a_change_that_was_rolled_back_with_its_status(admin_api, cluster):
    factories.node(cluster, factories.node_type(nics=0, gpus=1))

    response = admin_api.delete(f"/api/v1/clusters/{cluster.pk}")

    entry = AuditLogEntry.objects.get()
    assert response.status_code == 409
    assert Cluster.objects.filter(pk=cluster.pk).exists()
    assert (entry.action, entry.status_code, entry.object_repr) == ("cluster.delete", 409, "prod")


@pytest.mark.parametrize(
    ("method", "body", "status", "action"),
    [
        ("post", {"name": "new"}, 201, "cluster.create"),
        ("put", {"name": "renamed"}, 200, "cluster.update"),
        ("patch", {"site": "eu-west"}, 200, "cluster.update"),
        ("delete", None, 204, "cluster.delete"),
    ],
)
def test_it_writes_exactly_one_row_per_write(admin_api, cluster, method, body, status, action):
    path = "/api/v1/clusters" if method == "post" else f"/api/v1/clusters/{cluster.pk}"

    response = getattr(admin_api, method)(path, body)

    assert response.status_code == status, response.content
    assert list(AuditLogEntry.objects.values_list("action", "method", "status_code")) == [
        (action, method.upper(), status)
    ]


def test_it_records_what_an_update_changed(admin_api, cluster):
    admin_api.patch(f"/api/v1/clusters/{cluster.pk}", {"site": "eu-west", "name": "prod"})

    assert AuditLogEntry.objects.get().detail == {"changes": {"site": ["", "eu-west"]}}


def test_it_records_the_user_behind_a_browser_session(user_with_role):
    client = APIClient()
    client.force_login(user_with_role(Role.OPERATOR))

    client.post("/api/v1/clusters", {"name": "x"})

    entry = AuditLogEntry.objects.get()
    assert (entry.actor, entry.token, entry.status_code) == ("operator-user", None, 403)


def test_it_records_requests_served_through_asgi(transactional_db, user_with_role):
    """Through Django's ASGI handler, as the product serves requests: the same one row per write. (The
    handler answers from another thread, which sees only committed rows: hence transactional_db.)"""
    _, secret = ApiToken.issue(user=user_with_role(Role.ADMIN), name="asgi", role=Role.ADMIN)
    client, bearer = AsyncClient(), {"Authorization": f"Bearer {secret}"}

    created = async_to_sync(client.post)(
        "/api/v1/clusters", {"name": "asgi-east"}, content_type="application/json", headers=bearer
    )
    async_to_sync(client.get)("/api/v1/clusters", headers=bearer)

    entry = AuditLogEntry.objects.get()
    assert created.status_code == 201, created.content
    assert (entry.actor, entry.action, entry.status_code) == ("admin-user", "cluster.create", 201)


@pytest.mark.parametrize("method", ["get", "head", "options"])
@pytest.mark.parametrize("role", ["anonymous", Role.VIEWER, Role.ADMIN])
def test_it_writes_nothing_for_reads(api_client, cluster, method, role):
    client = api_client(role)

    getattr(client, method)("/api/v1/clusters")
    getattr(client, method)(f"/api/v1/clusters/{cluster.pk}")

    assert not AuditLogEntry.objects.exists()


# Reading it through the API -----------------------------------------------------------------------


@pytest.fixture
def history(db) -> dict[str, AuditLogEntry]:
    now = timezone.now()
    entries = {
        "old quarantine": record("node.quarantine", actor="alice", reason="XID 79"),
        "recent quarantine": record("node.quarantine", actor="bob", reason="ECC"),
        "token": record("api_token.create", actor="alice", owner="ci-bot"),
        "cluster": record("cluster.update", actor="bob", obj=factories.cluster("target")),
    }
    AuditLogEntry.objects.filter(pk=entries["old quarantine"].pk).update(timestamp=now - timedelta(days=3))
    return entries


def listed(client: APIClient, **params: str) -> list[int]:
    response = client.get("/api/v1/audit-log", params)
    assert response.status_code == 200, response.content
    return sorted(row["id"] for row in response.json()["results"])


def ids(*entries: AuditLogEntry) -> list[int]:
    return sorted(e.pk for e in entries)


def test_it_filters_the_log_by_actor_action_object_and_time(api_client, history):
    operator = api_client(Role.OPERATOR)
    target = Cluster.objects.get(name="target")

    assert listed(operator, actor="alice") == ids(history["old quarantine"], history["token"])
    assert listed(operator, action="node.quarantine") == ids(history["old quarantine"], history["recent quarantine"])
    assert listed(operator, action_prefix="api_token.") == ids(history["token"])
    assert listed(operator, object_type="inventory.cluster", object_id=str(target.pk)) == ids(history["cluster"])
    since = (timezone.now() - timedelta(days=1)).isoformat()  # an offset with "+": the client encodes it
    assert listed(operator, since=since, action="node.quarantine") == ids(history["recent quarantine"])
    assert listed(operator, until=since) == ids(history["old quarantine"])


def test_it_lists_the_newest_entries_first(api_client, history):
    rows = api_client(Role.OPERATOR).get("/api/v1/audit-log").json()["results"]

    assert rows[0]["id"] == history["cluster"].pk
    assert rows[-1]["id"] == history["old quarantine"].pk


def test_it_shows_one_entry_with_its_detail(api_client, history):
    entry = history["old quarantine"]

    body = api_client(Role.OPERATOR).get(f"/api/v1/audit-log/{entry.pk}").json()

    assert (body["actor"], body["action"], body["detail"]) == ("alice", "node.quarantine", {"reason": "XID 79"})


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_it_cannot_be_rewritten_through_the_api(admin_api, history, method):
    entry = history["token"]
    path = "/api/v1/audit-log" if method == "post" else f"/api/v1/audit-log/{entry.pk}"

    response = getattr(admin_api, method)(path, {"actor": "nobody"})

    assert response.status_code == 405
    entry.refresh_from_db()
    assert entry.actor == "alice"


# The admin site -----------------------------------------------------------------------------------


def test_it_shows_the_log_in_the_admin_read_only(admin_site, history):
    entry = history["token"]

    changelist = admin_site.get("/admin/accounts/auditlogentry/")
    change = admin_site.get(f"/admin/accounts/auditlogentry/{entry.pk}/change/")

    assert changelist.status_code == 200
    assert b"api_token.create" in changelist.content
    assert b"delete_selected" not in changelist.content
    assert change.status_code == 200
    assert b'name="_save"' not in change.content


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/admin/accounts/auditlogentry/add/"),
        ("post", "/admin/accounts/auditlogentry/add/"),
        ("post", "/admin/accounts/auditlogentry/{id}/change/"),
        ("get", "/admin/accounts/auditlogentry/{id}/delete/"),
        ("post", "/admin/accounts/auditlogentry/{id}/delete/"),
    ],
)
def test_it_refuses_to_add_change_or_delete_entries_in_the_admin(admin_site, history, method, path):
    entry = history["token"]

    response = getattr(admin_site, method)(path.format(id=entry.pk), {"actor": "nobody", "action": "x"})

    assert response.status_code == 403
    entry.refresh_from_db()
    assert entry.actor == "alice"
    assert AuditLogEntry.objects.filter(action="x").count() == 0


def test_it_audits_revoking_tokens_in_the_admin(admin_site, user_with_role):
    owner = user_with_role(Role.OPERATOR)
    first, _ = ApiToken.issue(user=owner, name="first", role=Role.VIEWER)
    second, _ = ApiToken.issue(user=owner, name="second", role=Role.VIEWER)

    response = admin_site.post(
        "/admin/accounts/apitoken/",
        {"action": "revoke", "_selected_action": [first.pk, second.pk]},
    )

    assert response.status_code == 302
    assert ApiToken.objects.filter(revoked_at__isnull=True).count() == 0
    entry = AuditLogEntry.objects.get()
    assert (entry.actor, entry.action) == ("root", "api_token.revoke")
    assert sorted(entry.detail["tokens"]) == sorted(f"{t} of operator-user" for t in (first, second))


# Retention ----------------------------------------------------------------------------------------


def aged(days: float, count: int = 1) -> list[int]:
    entries = [record("node.drain", actor="alice") for _ in range(count)]
    AuditLogEntry.objects.filter(pk__in=[e.pk for e in entries]).update(timestamp=timezone.now() - timedelta(days=days))
    return [e.pk for e in entries]


def test_it_purges_entries_past_retention_and_keeps_the_rest(db):
    expired = aged(31, count=5)
    kept = aged(29)

    with CaptureQueriesContext(connection) as queries:
        deleted = purge_expired(retention_days=30, batch_size=2)

    assert deleted == 5
    assert not AuditLogEntry.objects.filter(pk__in=expired).exists()
    assert AuditLogEntry.objects.filter(pk__in=kept).count() == 1
    deletes = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("DELETE")]
    assert len(deletes) == 3  # 2 + 2 + 1: no statement holds every expired row at once


def test_it_leaves_a_trace_of_each_purge(db):
    aged(400, count=3)

    purge_expired(retention_days=30)

    trace = AuditLogEntry.objects.get()
    assert (trace.actor, trace.action) == ("system:purge_audit_log", "audit_log.purge")
    assert trace.detail == {"deleted": 3, "retention_days": 30}


def test_it_writes_nothing_when_nothing_expired(db):
    aged(1)

    assert purge_expired(retention_days=30) == 0
    assert AuditLogEntry.objects.count() == 1


def test_it_runs_the_purge_task_with_the_configured_retention(db, settings):
    settings.AUDIT_LOG_RETENTION_DAYS = 7
    aged(8, count=2)
    aged(6)

    assert purge_audit_log() == 2
    assert AuditLogEntry.objects.filter(action="node.drain").count() == 1


def test_it_schedules_the_purge_daily_on_the_maintenance_queue(settings):
    from controlplane.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["purge-audit-log"]
    app.loader.import_default_modules()
    task = app.tasks[entry["task"]]

    assert task.name == purge_audit_log.name
    assert queue_of(task.name) == "maintenance"
    assert 0 < task.soft_time_limit < task.time_limit
    assert (entry["schedule"].hour, entry["schedule"].day_of_week) == ({3}, set(range(7)))
