"""``/api/v1/commands``: one node's step of a run, filtered by run, node, state and check; its detail
carries the check's result and the end of its output; an operator cancels one, audited."""

import pytest

from apps.accounts.models import AuditLogEntry
from apps.accounts.roles import Role
from apps.jobs.choices import CommandState, RunState
from apps.jobs.models import Step
from tests.jobs.conftest import launch
from tests.jobs.reporting import failed_compute, finished


def test_commands_are_listed_by_run_node_state_and_check(api_client, make_nodes):
    viewer = api_client(Role.VIEWER)
    a, b = make_nodes(2)
    run = launch([a, b], [Step("health"), Step("compute")])
    other = launch([a], [Step("storage")])

    of_run = viewer.get("/api/v1/commands", {"run": run.pk}).json()["results"]
    of_a_sent = viewer.get("/api/v1/commands", {"node": a.pk, "state": "sent"}).json()["results"]
    storage = viewer.get("/api/v1/commands", {"check": "storage"}).json()["results"]

    assert [(c["node"]["hostname"], c["sequence"], c["check"]) for c in of_run] == [
        (a.hostname, 0, "health"),
        (a.hostname, 1, "compute"),
        (b.hostname, 0, "health"),
        (b.hostname, 1, "compute"),
    ]
    assert {c["check"] for c in of_a_sent} == {"health", "storage"}  # storage goes alongside a health read
    assert [c["run"] for c in storage] == [other.pk]
    assert "result" not in of_run[0]


def test_a_commands_detail_carries_the_checks_result_and_its_output(api_client, make_nodes):
    (node,) = make_nodes(1)
    run = launch([node], [Step("compute")])
    command = run.commands.get()
    finished(command, exit_code=1, result=failed_compute(), output="GPU 3 ran hot\n")

    body = api_client(Role.VIEWER).get(f"/api/v1/commands/{command.pk}").json()

    assert (body["state"], body["outcome"], body["exit_code"]) == (CommandState.FAILED, "exited", 1)
    assert body["reason"].startswith("the check failed: tflops_bf16 on GPU 3")
    assert body["result"]["measurements"][0]["measured"] == 612.0
    assert body["output"] == "GPU 3 ran hot\n"
    assert (body["key"], body["attempts"]) == (command.key, 1)


def test_an_operator_cancels_one_command_and_the_run_goes_on(api_client, make_nodes):
    operator = api_client(Role.OPERATOR)
    a, b = make_nodes(2)
    run = launch([a, b], [Step("compute")])
    command = run.commands.get(node=a)

    response = operator.post(f"/api/v1/commands/{command.pk}/cancel", {"reason": "reseating GPU 3"}, format="json")
    again = operator.post(f"/api/v1/commands/{command.pk}/cancel", {}, format="json")

    assert response.status_code == 200
    assert (response.json()["state"], response.json()["reason"]) == (
        CommandState.CANCELLED,
        "cancelled by operator-user: reseating GPU 3",
    )
    assert response.json()["stop_requested_at"] is not None  # its agent had it: told to stop it
    assert again.status_code == 409
    run.refresh_from_db()
    assert run.state == RunState.RUNNING
    entry = AuditLogEntry.objects.get(action="command.cancel", status_code=200)
    assert (entry.object_id, entry.detail["from_state"]) == (str(command.pk), "sent")


def test_a_viewer_cannot_cancel_a_command(api_client, make_nodes):
    run = launch(make_nodes(1), [Step("compute")])
    command = run.commands.get()

    assert api_client(Role.VIEWER).post(f"/api/v1/commands/{command.pk}/cancel").status_code == 403
    command.refresh_from_db()
    assert command.state == CommandState.SENT


def test_the_command_list_costs_the_same_queries_for_one_command_as_for_many(
    api_client, make_nodes, django_assert_num_queries
):
    viewer = api_client(Role.VIEWER)
    nodes = make_nodes(5)
    launch(nodes[:1], [Step("health")])
    viewer.get("/api/v1/commands")  # the token's first use writes its last_used_at
    with django_assert_num_queries(3) as one:
        assert len(viewer.get("/api/v1/commands").json()["results"]) == 1
    launch(nodes, [Step("health"), Step("compute"), Step("storage")])
    with django_assert_num_queries(len(one.captured_queries)):
        assert len(viewer.get("/api/v1/commands").json()["results"]) == 16


@pytest.fixture(autouse=True)
def _committed(transactional_db):
    """Real commits: a launch queues its start (and sends) once committed."""
