"""A burn-in's run page: its suite, each node's verdict (testing, passed, failed; what it did to the
lifecycle, the reason) and the threshold version it was judged by, and every figure with its siblings
beside it (the median and range of the run's other nodes of the same type), an outlier flagged; in a
fixed number of queries (Django's test client) and in headless Chromium, light and dark, kept live."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.accounts.models import User
from apps.burnin.choices import NodeState, Outcome
from apps.burnin.models import BurnInNode, Suite
from apps.burnin.starting import start_burn_in
from apps.core import events
from apps.inventory.choices import Lifecycle
from apps.jobs.choices import CommandState, RunState
from apps.jobs.models import Command, Run
from tests import factories
from tests.dashboard.conftest import off_the_loop, screenshot
from tests.dashboard.test_pages_runs import page, queries

# Each node's bf16 TFLOP/s on GPU 0 and 1: the third node's GPU 0 is the straggler.
TFLOPS = [(650.0, 660.0), (640.0, 668.0), (412.0, 655.0), (652.0, 659.0), (645.0, 661.0), (657.0, 650.0)]
STRAGGLER = "compute: tflops_bf16 on GPU 0 412 < 600 TFLOP/s"


def compute_result(figures: tuple[float, float]) -> dict:
    rule = {"name": "tflops_bf16", "unit": "TFLOP/s", "expected": 600.0, "bound": "at_least"}
    measurements = [rule | {"gpu": gpu, "measured": value, "passed": value >= 600} for gpu, value in enumerate(figures)]
    passed = all(m["passed"] for m in measurements)
    return {"check": "compute", "device": "simulated", "passed": passed, "measurements": measurements}


def judged_burn_in(nodes: int = 3, site: str = "") -> Run:
    """A burn-in of ``nodes`` nodes whose compute step is over: the first passed into service, the
    third failed into quarantine, the others still testing."""
    suite, _ = Suite.objects.get_or_create(
        name="pair", defaults={"title": "Pair", "steps": [{"check": "health"}, {"check": "compute"}]}
    )
    cluster, node_type = factories.cluster(f"lab{site}"), factories.node_type(f"hgx-h100{site}", nics=0)
    hosts = [
        factories.node(cluster, node_type, f"gpu{site}-{i + 1:03d}", lifecycle=Lifecycle.NEW) for i in range(nodes)
    ]
    burn_in = start_burn_in(hosts, suite, actor="otto", deadline=timezone.now() + timedelta(hours=1))
    for n, host in enumerate(hosts):
        Command.objects.filter(run=burn_in.run, node=host, check_name="compute").update(
            state=CommandState.SUCCEEDED, result=compute_result(TFLOPS[n])
        )
    verdicts = {
        0: {"state": NodeState.PASSED, "outcome": Outcome.IN_SERVICE, "reason": "Every check passed."},
        2: {"state": NodeState.FAILED, "outcome": Outcome.QUARANTINED, "reason": STRAGGLER},
    }
    for n, fields in verdicts.items():
        BurnInNode.objects.filter(burn_in=burn_in, node=hosts[n]).update(**fields)
    Run.objects.filter(pk=burn_in.run_id).update(state=RunState.RUNNING)
    return burn_in.run


@pytest.fixture
def viewer_user(db) -> User:
    return User.objects.create_user("vic", role="viewer")


def test_the_run_page_shows_the_suite_verdicts_thresholds_and_each_figure_beside_its_siblings(viewer_user):
    run = judged_burn_in()
    html = page(viewer_user, f"/runs/{run.pk}/")

    assert "Burn-in of the <strong>Pair</strong> suite" in html
    assert "<th>Burn-in verdict</th>" in html
    assert html.count('<span class="pill bi-passed">Passed</span>') == 1
    assert html.count('<span class="pill bi-failed">Failed</span>') == 1
    assert "Quarantined, against <a" in html
    assert "compute: tflops_bf16 on GPU 0 412 &lt; 600 TFLOP/s" in html
    assert html.count("hgx-h100 thresholds v1</a>") == 3
    # gpu-003's GPU 0 against the other two nodes' four figures: flagged at a glance, outside the details.
    assert "tflops_bf16 GPU 0: 412 TFLOP/s · run median 655 (640–668)" in html
    assert html.count('class="outlier"') == 1
    assert "2 figures, 1 far from the run" in html


def test_a_burn_ins_run_page_reads_the_same_number_of_queries_for_three_nodes_or_six(viewer_user):
    small, large = judged_burn_in(3), judged_burn_in(6, site="-b")
    assert queries(viewer_user, f"/runs/{small.pk}/") == queries(viewer_user, f"/runs/{large.pk}/")


@pytest.mark.browser
@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_the_run_page_in_chromium_shows_verdicts_and_siblings_and_follows_a_verdict_live(open_page, viewer, dark):
    run = off_the_loop(judged_burn_in)
    detail = open_page(viewer, f"/runs/{run.pk}/", viewport=(1366, 768), dark=dark)
    straggler = detail.locator("tr[data-node]", has_text="gpu-003")
    expect(straggler.locator(".verdict-cell .pill")).to_have_text("Failed")
    expect(straggler.locator(".verdict-cell .thresholds")).to_have_text("Quarantined, against hgx-h100 thresholds v1")
    expect(straggler.locator(".outlier")).to_have_text("tflops_bf16 GPU 0: 412 TFLOP/s · run median 655 (640–668) far")
    straggler.locator("td.check details").last.locator("summary").click()
    expect(straggler.locator("table.figures tr.far")).to_have_count(1)
    screenshot(detail, f"run-burn-in-{'dark' if dark else 'light'}")
    detail.wait_for_function("() => document.getElementById('live-status').dataset.state === 'live'")

    off_the_loop(judge_second_node_passed, run)

    testing = detail.locator("tr[data-node]", has_text="gpu-002")
    expect(testing.locator(".verdict-cell .thresholds")).to_contain_text("Moved into service, against")
    expect(detail.locator("#burn-in-summary")).to_contain_text("0 testing 2 passed 1 failed")
    expect(straggler.locator("table.figures tr.far")).to_be_visible()  # kept open across the refetch


def judge_second_node_passed(run: Run) -> None:
    """gpu-002's verdict changes; its command says it changed (as progress: no judging is started)."""
    BurnInNode.objects.filter(burn_in__run=run, node__hostname="gpu-002").update(
        state=NodeState.PASSED, outcome=Outcome.IN_SERVICE, reason="Every check passed."
    )
    command = Command.objects.get(run=run, node__hostname="gpu-002", check_name="health")
    events.announce(events.CommandsChanged("progress", (events.ChangedCommand(command.pk, run.pk, command.node_id),)))
