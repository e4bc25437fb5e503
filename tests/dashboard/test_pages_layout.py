"""Layout at a laptop's 1366x768 in real headless Chromium: wide tables scroll inside their card, not
the page, and nothing is cut off at the window's right edge."""

import msgspec
import pytest
from playwright.sync_api import Page, expect

from apps.inventory.models import Gpu, Node
from apps.telemetry.models import LatestGpuSample
from tests.dashboard.conftest import off_the_loop, screenshot
from tests.dashboard.node_data import node_with_history
from tests.dashboard.test_fleet_page import fleet  # noqa: F401 (the twelve-node fleet fixture)

LAPTOP = (1366, 768)


def page_scrolls_sideways(page: Page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth > document.documentElement.clientWidth")


def busy_node() -> Node:
    """A node whose GPU rows are as wide as they get: every clock event reason, a recovery action, and
    a serial and model on every GPU."""
    node = node_with_history(transitions=0)
    latest = LatestGpuSample.objects.get(node=node)
    gpus = [msgspec.structs.replace(gpu, throttle_reasons=0x1FF, recovery_action=2) for gpu in latest.readings()]
    LatestGpuSample.of(node.pk, latest.ts, gpus, latest.received_at).save()
    Gpu.objects.filter(node=node).update(serial="1654922012345", model="NVIDIA H100 80GB HBM3 (SXM5)")
    return node


def test_a_node_pages_gpu_table_fits_its_card_or_scrolls_inside_it_at_1366(open_page, viewer):
    node = off_the_loop(busy_node)
    page = open_page(viewer, f"/nodes/{node.pk}/", viewport=LAPTOP)
    table = page.locator("#gpus table.gpus")
    expect(table.locator("tbody tr")).to_have_count(8)
    screenshot(page, "node-gpus-1366")

    box = page.evaluate(
        """() => {
        const card = document.querySelector('#gpus'), wrap = card.querySelector('.table-wide');
        const c = card.getBoundingClientRect(), w = wrap.getBoundingClientRect();
        return {card: c.right, wrap: w.right, table: card.querySelector('table').getBoundingClientRect().right};
    }"""
    )
    assert not page_scrolls_sideways(page)
    assert box["card"] <= LAPTOP[0]
    assert box["wrap"] <= box["card"]
    assert box["table"] <= box["wrap"] + 0.5, "the GPU table runs past its card's right edge"


@pytest.mark.usefixtures("fleet")
@pytest.mark.parametrize("width", [1366, 1440])
def test_the_fleet_pages_node_counts_and_chart_axis_fit_at_laptop_widths(open_page, viewer, width):
    page = open_page(viewer, "/", viewport=(width, 768))
    expect(page.locator("#fleet-chart .u-over")).to_be_visible()
    screenshot(page, f"fleet-{width}")

    rows = page.evaluate(
        "[...document.querySelectorAll('#lifecycle-counts .stat')].map((s) => s.getBoundingClientRect().top)"
    )
    assert rows.count(rows[-1]) > 1, "the last node count wraps onto a row by itself"
    # uPlot draws the y axis on a canvas, right-aligned before its 10 px ticks and 5 px gap: the
    # plot starts where the axis ends, so the widest label fits when the axis is wider than both.
    room = page.evaluate(
        """() => {
        const over = document.querySelector('#fleet-chart .u-over');
        const context = document.createElement('canvas').getContext('2d');
        context.font = '12px system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif';
        const right = over.parentElement.clientWidth - over.offsetLeft - over.offsetWidth;
        const left = over.offsetLeft;
        return [left - 15 - context.measureText('100 %').width, right - 15 - context.measureText('0.8 kW').width];
    }"""
    )
    assert room[0] >= 0, f"the left axis' 100 % label is clipped by {-room[0]:.1f} px"
    assert room[1] >= 0, f"the right axis' 0.8 kW label is clipped by {-room[1]:.1f} px"
