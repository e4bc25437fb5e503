"""``/api/v1/runs``: operators start and cancel runs, viewers read them; every start and cancel is
audited, bad input is a 400 naming the field with nothing written, and a repeated request with the
same idempotency key returns the run it made."""

import pytest

from agents import protocol
from apps.accounts.models import AuditLogEntry
from apps.accounts.roles import Role
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Node
from apps.jobs import reports
from apps.jobs.choices import CommandState, RunState
from apps.jobs.models import Command, Run, Step
from tests.jobs.conftest import launch
from tests.jobs.reporting import finished, started

pytestmark = pytest.mark.django_db(transaction=True)

BURN_IN = [{"check": "health"}, {"check": "compute", "params": {"duration_s": 5}, "time_limit_s": 120}]


@pytest.fixture
def operator(api_client):
    return api_client(Role.OPERATOR)


@pytest.fixture
def viewer(api_client):
    return api_client(Role.VIEWER)


def test_an_operator_starts_a_run_and_it_is_audited(operator, make_nodes):
    nodes = make_nodes(2)

    response = operator.post(
        "/api/v1/runs", {"title": "burn-in", "nodes": [n.pk for n in nodes], "steps": BURN_IN}, format="json"
    )

    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["title"], body["state"], body["actor"]) == ("burn-in", RunState.RUNNING, "operator-user")
    assert (body["node_count"], body["command_count"]) == (2, 4)
    assert body["commands"] == {
        "pending": 2, "sent": 2, "running": 0, "succeeded": 0, "failed": 0, "cancelled": 0, "expired": 0
    }  # fmt: skip
    assert [step["check"] for step in body["steps"]] == ["health", "compute"]
    entry = AuditLogEntry.objects.get(action="run.create")
    assert (entry.actor, entry.object_id, entry.status_code) == ("operator-user", str(body["id"]), 201)
    assert entry.detail["steps"] == ["health", "compute"]
    assert sorted(entry.detail["nodes"]) == sorted(n.hostname for n in nodes)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"steps": [{"check": "defragment"}]}, "steps"),
        ({"steps": [{"check": "compute", "params": {"durations": 5}}]}, "steps"),
        ({"steps": [{"check": "compute", "params": {"duration_s": "long"}}]}, "steps"),
        ({"steps": [{"check": "compute", "params": [1, 2]}]}, "steps"),
        ({"steps": [{"check": "nccl_allreduce", "env": {"LD_PRELOAD": "/tmp/x.so"}}]}, "steps"),
        ({"steps": [{"check": "health", "time_limit_s": 0}]}, "steps"),
        ({"steps": []}, "steps"),
        ({"nodes": []}, "nodes"),
        ({"nodes": [999_999]}, "nodes"),
        ({"deadline_s": 5}, "deadline_s"),
        ({"idempotency_key": "k" * 129}, "idempotency_key"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(operator, make_nodes, change, field):
    (node,) = make_nodes(1)
    body = {"nodes": [node.pk], "steps": BURN_IN, **change}

    response = operator.post("/api/v1/runs", body, format="json")

    assert response.status_code == 400
    assert field in response.json()
    assert (Run.objects.count(), Command.objects.count()) == (0, 0)


def test_the_steps_error_names_the_parameter_the_check_refuses(operator, make_nodes):
    (node,) = make_nodes(1)
    steps = [{"check": "health"}, {"check": "compute", "params": {"durations": 5}}]

    response = operator.post("/api/v1/runs", {"nodes": [node.pk], "steps": steps}, format="json")

    assert response.status_code == 400
    assert list(response.json()["steps"]) == ["1"]  # the second step, by its place
    assert "unknown field `durations`" in response.json()["steps"]["1"]["params"][0]


def test_a_retired_node_runs_nothing(operator, make_nodes):
    (node,) = make_nodes(1)
    Node.objects.filter(pk=node.pk).update(lifecycle=Lifecycle.RETIRED)

    response = operator.post("/api/v1/runs", {"nodes": [node.pk], "steps": BURN_IN}, format="json")

    assert response.status_code == 400
    assert node.hostname in str(response.json()["nodes"])


def test_a_repeated_request_with_the_same_idempotency_key_returns_the_run_it_made(operator, make_nodes):
    (node,) = make_nodes(1)
    body = {"nodes": [node.pk], "steps": BURN_IN, "idempotency_key": "replace-gpu-0007-ticket-4711"}

    first = operator.post("/api/v1/runs", body, format="json")
    again = operator.post("/api/v1/runs", body, format="json")

    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert Run.objects.count() == 1


def test_a_viewer_reads_runs_with_counts_and_progress(viewer, make_nodes):
    nodes = make_nodes(2)
    run = launch(nodes, [Step("health"), Step("storage")])
    command = run.commands.get(node=nodes[0], sequence=0)
    started(command)
    reports.store_report(command.node_id, progress_line(command.key, 0.5))

    listed = viewer.get("/api/v1/runs").json()["results"]
    detail = viewer.get(f"/api/v1/runs/{run.pk}").json()

    assert [r["id"] for r in listed] == [run.pk]
    assert detail["commands"]["running"] == 1
    assert detail["progress"] == pytest.approx(0.5 / 4)


def test_the_run_list_costs_the_same_queries_for_one_run_as_for_many(viewer, make_nodes, django_assert_num_queries):
    nodes = make_nodes(3)
    launch(nodes[:1], [Step("health")])
    viewer.get("/api/v1/runs")  # the token's first use writes its last_used_at
    with django_assert_num_queries(3) as one:
        assert len(viewer.get("/api/v1/runs").json()["results"]) == 1
    for _ in range(4):
        launch(nodes, [Step("health"), Step("storage")])
    with django_assert_num_queries(len(one.captured_queries)):
        assert len(viewer.get("/api/v1/runs").json()["results"]) == 5


def test_an_operator_cancels_a_run_once_and_it_is_audited(operator, make_nodes):
    nodes = make_nodes(2)
    run = launch(nodes, [Step("compute")])

    response = operator.post(f"/api/v1/runs/{run.pk}/cancel", {"reason": "wrong nodes"}, format="json")
    again = operator.post(f"/api/v1/runs/{run.pk}/cancel", {}, format="json")

    assert response.status_code == 200
    assert (response.json()["state"], response.json()["reason"]) == (
        RunState.CANCELLED,
        "cancelled by operator-user: wrong nodes",
    )
    assert response.json()["commands"]["cancelled"] == 2
    assert again.status_code == 409
    assert "cancelled; there is nothing to cancel" in again.json()["detail"]
    entry = AuditLogEntry.objects.get(action="run.cancel", status_code=200)
    assert entry.detail == {"from_state": "running", "reason": "wrong nodes", "commands_cancelled": 2}


def test_a_viewer_cannot_cancel_a_run(viewer, make_nodes):
    run = launch(make_nodes(1), [Step("compute")])

    assert viewer.post(f"/api/v1/runs/{run.pk}/cancel", {}, format="json").status_code == 403
    run.refresh_from_db()
    assert run.state == RunState.RUNNING


def test_the_runs_log_is_followed_with_after(viewer, make_nodes):
    a, b = make_nodes(2)
    run = launch([a, b], [Step("compute")])
    for command in run.commands.all():
        for number in range(2):
            reports.store_report(command.node_id, log_line(command.key, f"{command.node.hostname} line {number}"))
    finished(run.commands.get(node=a))

    lines = viewer.get(f"/api/v1/runs/{run.pk}/logs").json()
    later = viewer.get(f"/api/v1/runs/{run.pk}/logs", {"after": lines[1]["id"]}).json()
    bad = viewer.get(f"/api/v1/runs/{run.pk}/logs", {"after": "yesterday"})

    assert [line["message"] for line in lines] == [
        f"{a.hostname} line 0", f"{a.hostname} line 1", f"{b.hostname} line 0", f"{b.hostname} line 1"
    ]  # fmt: skip
    assert {(line["node"], line["check"], line["level"]) for line in lines} == {
        (a.hostname, "compute", "info"),
        (b.hostname, "compute", "info"),
    }
    assert [line["message"] for line in later] == [f"{b.hostname} line 0", f"{b.hostname} line 1"]
    assert (bad.status_code, list(bad.json())) == (400, ["after"])
    assert run.commands.get(node=a).state == CommandState.SUCCEEDED


def progress_line(key: str, fraction: float) -> protocol.CommandUpdate:
    return protocol.CommandUpdate(key=key, line=protocol.CheckProgress(check="health", fraction=fraction, step="x"))


def log_line(key: str, message: str) -> protocol.CommandUpdate:
    return protocol.CommandUpdate(key=key, line=protocol.CheckLog(check="compute", level="info", message=message))
