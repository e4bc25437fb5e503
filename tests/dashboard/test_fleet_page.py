"""The fleet overview in real headless Chromium: sign-in, the heatmap drawn from the fleet stream and
redrawn as samples arrive, an XID 79 outlining its node and reaching the failures feed."""

from datetime import UTC, datetime

import pytest
from playwright.sync_api import Page, expect

from apps.failures.events import record_events
from apps.inventory.models import Node
from apps.telemetry import live
from apps.telemetry.models import LatestGpuSample
from tests import factories
from tests.dashboard.conftest import group_send, needs_redis, off_the_loop, screenshot
from tests.dashboard.test_live_stream import ALL_GPU_FIELDS, fleet_update, sample_at
from tests.failures.conftest import events, xid
from tests.telemetry.conftest import T0

pytestmark = [needs_redis, pytest.mark.browser]


@pytest.fixture
def fleet(transactional_db) -> list[Node]:
    """Twelve nodes under two leaves, every GPU at 50 % busy."""
    cluster, node_type = factories.cluster(), factories.node_type(nics=1)
    fabric = factories.fabric(cluster)
    leaves = [factories.switch(fabric), factories.switch(fabric)]
    nodes = []
    for i in range(12):
        node = factories.node(cluster, node_type, f"gpu-{i:03d}", lifecycle="in_service")
        factories.cable_node_to_leaf(node, leaves[i % 2])
        nodes.append(node)
    at = datetime.fromtimestamp(T0, tz=UTC)
    LatestGpuSample.objects.bulk_create(
        LatestGpuSample(node=node, gpu_index=i, ts=at, received_at=at, power_limit_w=700.0, **ALL_GPU_FIELDS)
        for node in nodes
        for i in range(8)
    )
    return nodes


def wait_for_first_render(page: Page) -> None:
    page.wait_for_function("window.cpFleetRendered !== undefined", timeout=10_000)


def cell_colour(page: Page, node: Node, gpu: int) -> list[int]:
    """The RGBA of the middle of one GPU's cell, read back from the canvas."""
    return page.evaluate(
        """([nodeId, gpu]) => {
            const { heatmap } = window.cpFleet;
            const block = heatmap.blocks.find((b) => b.node.id === nodeId);
            const x = (block.x + gpu * block.cell + block.cell / 2) * heatmap.scale;
            const y = (block.y + block.cell / 2) * heatmap.scale;
            return Array.from(heatmap.canvas.getContext("2d").getImageData(x, y, 1, 1).data);
        }""",
        [node.pk, gpu],
    )


def test_a_viewer_signs_in_through_the_form_and_lands_on_the_fleet(open_page, viewer, fleet):
    page = open_page(None, "/")
    assert "/login/" in page.url
    page.fill("input[name=username]", "vera")
    page.fill("input[name=password]", "unused-password-1")
    page.click("button[type=submit]")
    expect(page.locator("h2", has_text="GPUs")).to_be_visible()
    expect(page.locator(".role-badge")).to_have_text("viewer")


def test_a_wrong_password_is_refused_with_a_message(open_page, viewer):
    page = open_page(None, "/login/")
    page.fill("input[name=username]", "vera")
    page.fill("input[name=password]", "not-the-password")
    page.click("button[type=submit]")
    expect(page.locator(".form-error")).to_be_visible()
    assert "/login/" in page.url


def test_the_heatmap_shows_the_fleet_and_changes_as_samples_arrive(open_page, viewer, fleet):
    page = open_page(viewer, "/")
    wait_for_first_render(page)
    expect(page.locator("#live-status")).to_have_text("live")
    node = fleet[3]
    before = cell_colour(page, node, 5)
    assert before == cell_colour(page, fleet[4], 5)  # same utilization, same colour

    group_send(live.FLEET_GROUP, fleet_update((node.pk, sample_at(T0 + 1, utils={5: 100.0}))))

    page.wait_for_function(f"window.cpFleet.live.fleet['{node.pk}'].heat[5][0] === 100", timeout=5_000)
    after = cell_colour(page, node, 5)
    assert after != before
    assert cell_colour(page, node, 4) == before  # its sibling did not move
    screenshot(page, "fleet")


def test_an_xid_79_reaches_the_failures_feed_and_outlines_its_node(open_page, viewer, fleet):
    page = open_page(viewer, "/")
    wait_for_first_render(page)
    node = fleet[7]

    off_the_loop(record_events, node.pk, events(xid(79, gpu=2, at=T0)))

    feed = page.locator("#failure-feed li", has_text=node.hostname)
    expect(feed).to_contain_text("critical")
    page.wait_for_function(f"window.cpFleet.live.fleet['{node.pk}'].severity === 'critical'", timeout=5_000)
    outline = page.evaluate(
        """(nodeId) => {
            const { heatmap } = window.cpFleet;
            const block = heatmap.blocks.find((b) => b.node.id === nodeId);
            const x = (block.x + block.cell * 3) * heatmap.scale, y = (block.y - 1.5) * heatmap.scale;
            return Array.from(heatmap.canvas.getContext("2d").getImageData(x, y, 1, 1).data);
        }""",
        node.pk,
    )
    assert outline[3] > 0, "no outline drawn above the node's cells"
    screenshot(page, "fleet-xid79")


def test_the_fleet_page_reads_in_dark_mode_and_on_a_4k_wall_screen(open_page, viewer, fleet):
    page = open_page(viewer, "/", viewport=(3840, 2160), dark=True)
    wait_for_first_render(page)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(15, 18, 22)"
    screenshot(page, "fleet-4k-dark")


def test_with_no_nodes_the_page_says_how_to_start(open_page, viewer):
    page = open_page(viewer, "/")
    expect(page.locator("#empty-fleet")).to_contain_text("import_inventory")
    expect(page.locator("#empty-fleet")).to_contain_text("simulate")
    screenshot(page, "fleet-empty")
