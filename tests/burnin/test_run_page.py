"""A burn-in's run page says what the burn-in decided for each node and each check, judged against the
node type's thresholds, not only what the check said on the node: a straggler's compute check runs
cleanly on the node and still fails its burn-in."""

import pytest
from django.test import Client
from django.utils.html import escape

from apps.accounts.models import User
from apps.burnin.models import BurnInCheck
from tests.dashboard.test_pages_runs import make_run

pytestmark = pytest.mark.django_db(transaction=True)


def run_page(path: str) -> str:
    client = Client()
    client.force_login(User.objects.create_user("vic", role="viewer"))
    response = client.get(path)
    assert response.status_code == 200
    return response.content.decode()


def test_a_burn_ins_run_page_shows_each_nodes_verdict_and_each_checks_judged_against_thresholds(fleet):
    sim = fleet(2, "sim-001:straggler:gpu3")
    burn_in = sim.burn_in("quick")
    sim.answer()
    failed = BurnInCheck.objects.get(burn_in_node__node__hostname="sim-001", passed=False)

    html = run_page(f"/runs/{burn_in.run_id}/")

    assert "<th>Burn-in verdict</th>" in html
    assert "Quarantined, against <a" in html
    assert "Moved into service, against <a" in html
    assert f'<span class="verdict fail">fail</span> <span class="reason">{escape(failed.summary)}</span>' in html
    assert "tflops_bf16 on GPU 3" in failed.summary


def test_a_run_that_is_no_burn_in_has_no_verdict_column(fleet):
    html = run_page(f"/runs/{make_run(1).pk}/")
    assert "Burn-in verdict" not in html


def test_the_runs_list_counts_the_nodes_that_failed_a_burn_in_whose_commands_all_ran(fleet):
    sim = fleet(3, "sim-001:straggler:gpu3")
    burn_in = sim.burn_in("quick")
    sim.answer()

    html = run_page("/runs/")

    row = html[html.index(f'<tr data-run="{burn_in.run_id}"') :]
    row = row[: row.index("</tr>")]
    assert '<span class="verdict fail">· 1 node failed the burn-in</span>' in row
    assert "Succeeded" not in row
    assert '<span class="pill run-finished-failed"' in row
    assert "Finished: 1 of 3 nodes failed</span>" in row


def test_a_burn_ins_run_page_says_it_finished_with_failed_nodes_not_succeeded(fleet):
    sim = fleet(2, "sim-001:straggler:gpu3")
    burn_in = sim.burn_in("quick")
    sim.answer()

    html = run_page(f"/runs/{burn_in.run_id}/")

    state = html[html.index('id="run-state"') :]
    assert state[state.index(">") + 1 : state.index("</span>")] == "Finished: 1 of 2 nodes failed"
    assert 'class="pill run-finished-failed"' in html
    assert "run-succeeded" not in html


def test_a_burn_in_whose_every_node_passed_still_reads_succeeded(fleet):
    sim = fleet(2)
    burn_in = sim.burn_in("quick")
    sim.answer()

    html = run_page(f"/runs/{burn_in.run_id}/")

    assert '<span class="pill run-succeeded" id="run-state">Succeeded</span>' in html
