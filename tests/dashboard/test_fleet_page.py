"""The fleet overview in real headless Chromium: sign-in, the heatmap drawn from the fleet stream and
redrawn as samples arrive, an XID 79 outlining its node and reaching the failures feed."""

import re
import time
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest
from playwright.sync_api import Page, expect

from apps.dashboard import messages
from apps.failures.events import record_events
from apps.inventory.models import Node
from apps.telemetry.models import NodeMinuteRollup
from tests import factories
from tests.dashboard.conftest import group_send, off_the_loop, screenshot
from tests.dashboard.test_live_stream import ALL_GPU_FIELDS, fleet_update, sample_at
from tests.failures.conftest import events, xid
from tests.telemetry.conftest import rollup
from tests.telemetry.test_api_fleet_telemetry import gpu

pytestmark = pytest.mark.browser


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
    at = datetime.now(tz=UTC)  # the values of now: older ones are drawn as stale (tests/dashboard/test_pages_stale.py)
    for node in nodes:
        factories.latest_gpus(node, at, [dict(gpu_index=i, power_limit_w=700.0, **ALL_GPU_FIELDS) for i in range(8)])
    return nodes


def wait_for_first_render(page: Page) -> None:
    # A function, not an expression: Playwright evals a bare expression inside the page, which the CSP forbids.
    page.wait_for_function("() => window.cpFleetRendered !== undefined", timeout=10_000)


def device_pixel(page: Page, node: Node, *, x_cells: float, y_px: float) -> list[int]:
    """The RGBA of a point of the heatmap, ``x_cells`` cells right of a node's block and ``y_px`` CSS
    pixels below its top, read back from the canvas by the page's worker (which owns it)."""
    return page.evaluate(
        """([nodeId, xCells, yPx]) => {
            const { heatmap } = window.cpFleet;
            const block = heatmap.blocks.find((b) => b.node.id === nodeId);
            const x = Math.floor((block.x + xCells * block.cell) * heatmap.scale);
            const y = Math.floor((block.y + yPx) * heatmap.scale);
            return window.cpFleet.pixel(x, y);
        }""",
        [node.pk, x_cells, y_px],
    )


def cell_colour(page: Page, node: Node, gpu: int) -> list[int]:
    """The RGBA of the middle of one GPU's cell."""
    cell = page.evaluate("(nodeId) => window.cpFleet.heatmap.blocks.find((b) => b.node.id === nodeId).cell", node.pk)
    return device_pixel(page, node, x_cells=gpu + 0.5, y_px=cell / 2)


def cell_centre(page: Page, node: Node, gpu: int) -> dict[str, float]:
    """Where the middle of one GPU's cell is on the page, for the mouse."""
    return page.evaluate(
        """([nodeId, gpu]) => {
            const { heatmap } = window.cpFleet;
            const block = heatmap.blocks.find((b) => b.node.id === nodeId);
            const bounds = heatmap.canvas.getBoundingClientRect();
            return {x: bounds.left + block.x + block.cell * (gpu + 0.5), y: bounds.top + block.y + block.cell / 2};
        }""",
        [node.pk, gpu],
    )


def wait_for_entry(page: Page, node: Node, condition: str, timeout_s: float = 5.0) -> None:
    """Wait until the node's entry in the page's copy of the fleet (kept by its worker) satisfies
    ``condition``, a JavaScript expression of ``entry``."""
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(f"window.cpFleet.entry({node.pk}).then((entry) => Boolean(entry && ({condition})))"):
        assert time.monotonic() < deadline, f"node {node.hostname}'s entry never had {condition}"
        page.wait_for_timeout(100)


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

    group_send(messages.FLEET_GROUP, fleet_update((node.pk, sample_at(time.time(), utils={5: 100.0}))))

    wait_for_entry(page, node, "entry.heat[5][0] === 100")
    after = cell_colour(page, node, 5)
    assert after != before
    assert cell_colour(page, node, 4) == before  # its sibling did not move
    screenshot(page, "fleet")


def test_an_xid_79_reaches_the_failures_feed_and_outlines_its_node(open_page, viewer, fleet):
    page = open_page(viewer, "/")
    wait_for_first_render(page)
    node = fleet[7]

    off_the_loop(record_events, node.pk, events(xid(79, gpu=2, at=time.time())))

    feed = page.locator("#failure-feed li", has_text=node.hostname)
    expect(feed).to_contain_text("critical")
    wait_for_entry(page, node, "entry.severity === 'critical'")
    outline = device_pixel(page, node, x_cells=3, y_px=-1.5)
    assert outline[3] > 0, "no outline drawn above the node's cells"
    screenshot(page, "fleet-xid79")


def test_hovering_a_cell_shows_its_gpu_values_and_clicking_opens_the_node(open_page, viewer, fleet):
    page = open_page(viewer, "/")
    wait_for_first_render(page)
    node = fleet[2]
    box = cell_centre(page, node, 6)
    page.mouse.move(box["x"], box["y"])
    tip = page.locator("#heatmap-tip")
    expect(tip).to_contain_text(f"{node.hostname} GPU 6")
    expect(tip).to_contain_text("Utilization 50 %")
    page.mouse.click(box["x"], box["y"])
    page.wait_for_url(f"**/nodes/{node.pk}/")


def test_the_fleet_page_reads_in_dark_mode_and_on_a_4k_wall_screen(open_page, viewer, fleet):
    page = open_page(viewer, "/", viewport=(3840, 2160), dark=True)
    wait_for_first_render(page)
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(15, 18, 22)"
    screenshot(page, "fleet-4k-dark")


# What the page's canvases write, in order (uPlot draws its axes' labels with fillText).
RECORD_CANVAS_TEXT = """window.cpCanvasText = [];
const fillText = CanvasRenderingContext2D.prototype.fillText;
CanvasRenderingContext2D.prototype.fillText = function (text, ...rest) {
  window.cpCanvasText.push(String(text));
  return fillText.call(this, text, ...rest);
};"""


def test_the_fleet_chart_never_repeats_a_time_label(open_page, viewer, fleet):
    # Five minutes of history: uPlot's own choice was a tick every 30 s, and the hour-and-minute
    # labels came in pairs ("04:41 04:41 04:42 04:42").
    minute = datetime.now(tz=UTC).replace(second=0, microsecond=0)
    off_the_loop(
        lambda: NodeMinuteRollup.objects.bulk_create(
            rollup(NodeMinuteRollup, fleet[0], minute - timedelta(minutes=back), {0: gpu(util=90.0, power=600.0)})
            for back in range(1, 6)
        )
    )
    page = open_page(viewer, "/")
    page.add_init_script(RECORD_CANVAS_TEXT)
    page.reload()
    wait_for_first_render(page)

    def time_labels() -> list[str]:
        return [t for t in page.evaluate("() => window.cpCanvasText") if re.fullmatch(r"\d\d:\d\d", t)]

    deadline = time.monotonic() + 10
    while len(time_labels()) < 2:
        assert time.monotonic() < deadline, "the chart drew no time axis"
        page.wait_for_timeout(100)
    labels = time_labels()
    assert not [a for a, b in pairwise(labels) if a == b], labels


def test_with_no_nodes_the_page_says_how_to_start(open_page, viewer):
    page = open_page(viewer, "/")
    expect(page.locator("#empty-fleet")).to_contain_text("import_inventory")
    expect(page.locator("#empty-fleet")).to_contain_text("simulate")
    screenshot(page, "fleet-empty")
