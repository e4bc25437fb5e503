"""Starting a burn-in from the dashboard, in real headless Chromium: an operator selects nodes on the
nodes page (or picks them, or a cluster, on the runs page), chooses the suite from its steps, and lands
on the run's page; the runs page's picker filters its nodes by hostname, cluster and state; a double
click starts one burn-in; a node the API refuses is named in the API's own words with nothing started;
a viewer gets no form at all."""

import pytest
from playwright.sync_api import Page, expect

from apps.burnin.models import BurnIn
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Node
from tests import factories
from tests.burnin.conftest import suite
from tests.dashboard.conftest import off_the_loop, screenshot
from tests.dashboard.test_pages_nodes import wait_until_live

pytestmark = pytest.mark.browser


def lab() -> list[Node]:
    """gpu-001 new, gpu-002 drained, gpu-003 in service, in cluster lab; the shipped suites."""
    for name in ("quick", "standard", "extended"):
        suite(name)
    cluster, node_type = factories.cluster("lab"), factories.node_type("hgx-h100", nics=1)
    states = (Lifecycle.NEW, Lifecycle.DRAINED, Lifecycle.IN_SERVICE)
    return [factories.node(cluster, node_type, f"gpu-{i:03d}", lifecycle=s) for i, s in enumerate(states, 1)]


def burn_ins() -> list[tuple[str, list[str], bool]]:
    return [
        (b.suite.name, sorted(b.nodes.values_list("node__hostname", flat=True)), b.into_service)
        for b in BurnIn.objects.all()
    ]


def select(page: Page, *hostnames: str) -> None:
    wait_until_live(page)
    for hostname in hostnames:
        page.get_by_label(f"Select {hostname}").check()


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
def test_an_operator_burns_in_two_selected_nodes_and_lands_on_the_run(open_page, operator, dark):
    off_the_loop(lab)
    page = open_page(operator, "/nodes/", dark=dark)
    select(page, "gpu-001", "gpu-002")
    page.locator("#burn-in-selected").click()

    form = page.locator("#burn-in-dialog")
    expect(form.locator("#burn-in-names")).to_have_text("gpu-001, gpu-002")
    expect(form.locator('.suite-about[data-suite="quick"]')).to_contain_text("nccl_allreduce")
    form.locator("#burn-in-suite").select_option("standard")
    expect(form.locator('.suite-about[data-suite="standard"]')).to_contain_text("dcgm_diag (level=2)")
    expect(form.locator('.suite-about[data-suite="quick"]')).to_be_hidden()
    form.locator("#burn-in-into-service").uncheck()
    screenshot(page, f"burn-in-form-{'dark' if dark else 'light'}")
    form.locator("#burn-in-start").dblclick()  # a double click starts one burn-in

    expect(page.locator("h1")).to_contain_text("burn-in: Standard")
    assert page.url.endswith(f"/runs/{off_the_loop(lambda: BurnIn.objects.get().run_id)}/")
    assert off_the_loop(burn_ins) == [("standard", ["gpu-001", "gpu-002"], False)]


def test_a_node_in_service_is_refused_in_the_apis_words_and_nothing_starts(open_page, operator):
    off_the_loop(lab)
    page = open_page(operator, "/nodes/")
    open_page.expect_console_error("400 (Bad Request)")
    select(page, "gpu-001", "gpu-003")
    page.locator("#burn-in-selected").click()
    page.locator("#burn-in-start").click()

    expect(page.locator("#burn-in-error")).to_have_text("gpu-003 is in service: drain it first.")
    assert page.url.endswith("/nodes/")
    assert off_the_loop(burn_ins) == []
    assert off_the_loop(lambda: Node.objects.get(hostname="gpu-001").lifecycle) == Lifecycle.NEW


def test_the_runs_page_starts_a_burn_in_of_a_cluster_or_of_picked_nodes(open_page, operator):
    off_the_loop(lab)
    page = open_page(operator, "/runs/")
    page.locator("#start-burn-in").click()
    form = page.locator("#burn-in-dialog")
    expect(form.locator("#burn-in-node-picker option")).to_have_text(["gpu-001 (new)", "gpu-002 (drained)"])
    expect(form.locator("#burn-in-cluster")).to_have_text("lab: 2 nodes can start")
    expect(form.locator("#burn-in-unlisted")).to_have_count(0)
    screenshot(page, "burn-in-form-runs")
    form.locator("#burn-in-cluster").select_option("lab")  # choosing a cluster chooses "every node of"
    expect(form.locator("#burn-in-on-cluster")).to_be_checked()
    form.locator("#burn-in-start").click()

    expect(page.locator("h1")).to_contain_text("burn-in: Quick of lab")
    assert off_the_loop(burn_ins) == [("quick", ["gpu-001", "gpu-002"], True)]


def test_the_runs_page_picker_says_how_many_nodes_it_could_not_list(open_page, operator, monkeypatch):
    monkeypatch.setattr("apps.dashboard.views.burnins.MAX_NODES_PER_RUN", 1)  # a run's most, 5,000 in truth
    off_the_loop(lab)
    page = open_page(operator, "/runs/")
    page.locator("#start-burn-in").click()
    form = page.locator("#burn-in-dialog")

    expect(form.locator("#burn-in-node-picker option")).to_have_text(["gpu-001 (new)"])
    expect(form.locator("#burn-in-unlisted")).to_contain_text("1 more node can start one but is not listed")
    expect(form.locator("#burn-in-cluster")).to_have_text("lab: 2 nodes can start")


def a_second_cluster() -> None:
    """Cluster prod's prod-01 to prod-12, new but for prod-03, prod-07 and prod-11, quarantined."""
    cluster, node_type = factories.cluster("prod"), factories.node_type("hgx-h100-prod", nics=1)
    for i in range(1, 13):
        lifecycle = Lifecycle.QUARANTINED if i in (3, 7, 11) else Lifecycle.NEW
        factories.node(cluster, node_type, f"prod-{i:02d}", lifecycle=lifecycle)


def test_the_runs_page_picker_filters_by_hostname_cluster_and_state_and_keeps_what_is_selected(open_page, operator):
    off_the_loop(lab)
    off_the_loop(a_second_cluster)
    page = open_page(operator, "/runs/")
    page.locator("#start-burn-in").click()
    form = page.locator("#burn-in-dialog")
    shown = form.locator("#burn-in-node-picker option:not([hidden])")
    picked = form.locator("#burn-in-picked")
    expect(shown).to_have_count(14)
    expect(picked).to_have_text("14 nodes listed; 0 selected.")

    form.get_by_role("searchbox", name="Hostname").fill("OD-1")  # a part of the name, any case
    expect(shown).to_have_text(["prod-10 (new)", "prod-11 (quarantined)", "prod-12 (new)"])
    form.get_by_role("searchbox", name="Hostname").fill("")
    form.get_by_label("Cluster", exact=True).select_option("prod")
    form.get_by_label("State", exact=True).select_option("quarantined")
    expect(shown).to_have_text(["prod-03 (quarantined)", "prod-07 (quarantined)", "prod-11 (quarantined)"])
    screenshot(page, "burn-in-form-picker-filter")
    form.get_by_role("button", name="Select all shown").click()
    expect(form.locator("#burn-in-on-nodes")).to_be_checked()
    expect(picked).to_have_text("3 of 14 nodes shown; 3 selected.")

    # Another filter hides what is selected, and says so; Enter in the search box starts nothing.
    form.get_by_label("Cluster", exact=True).select_option("")
    form.get_by_label("State", exact=True).select_option("")
    form.get_by_role("searchbox", name="Hostname").fill("gpu")
    expect(shown).to_have_text(["gpu-001 (new)", "gpu-002 (drained)"])
    expect(picked).to_have_text("2 of 14 nodes shown; 3 selected (3 hidden by the filter).")
    form.get_by_role("searchbox", name="Hostname").fill("nothing-like-it")
    expect(picked).to_have_text("No node matches the filter; 3 selected (3 hidden by the filter).")
    form.get_by_role("searchbox", name="Hostname").press("Enter")
    expect(form.locator("#burn-in-start")).to_have_text("Start burn-in")
    expect(form).to_be_visible()

    form.locator("#burn-in-start").click()
    expect(page.locator("h1")).to_contain_text("burn-in: Quick")
    assert off_the_loop(burn_ins) == [("quick", ["prod-03", "prod-07", "prod-11"], True)]


def test_a_viewer_gets_no_burn_in_form(open_page, viewer):
    off_the_loop(lab)
    for path in ("/nodes/", "/runs/"):
        page = open_page(viewer, path)
        expect(page.locator("#burn-in-dialog, #burn-in-selected, #start-burn-in")).to_have_count(0)
