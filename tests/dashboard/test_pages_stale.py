"""Stale values shown as stale, in real headless Chromium: a GPU that fell off the bus and a node that
went silent keep their last values on every page, greyed and with their age, never as the values of
now (the heatmap draws them without colour, and the fleet snapshot leaves the lost GPU out)."""

import re
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from apps.inventory.choices import GpuState, Liveness
from apps.inventory.models import Gpu, Node, Rack
from apps.telemetry.models import NodeGpuSample
from tests import factories
from tests.dashboard.conftest import BROWSER_TEST_STALE_AFTER_S, off_the_loop, screenshot
from tests.dashboard.node_data import gpu_metrics, reading
from tests.dashboard.test_fleet_page import cell_centre, cell_colour, wait_for_first_render
from tests.dashboard.test_pages_nodes import wait_until_live

pytestmark = pytest.mark.browser

AGE = timedelta(seconds=BROWSER_TEST_STALE_AFTER_S) + timedelta(minutes=20)  # shown as "30 min"


@dataclass
class StaleFleet:
    reporting: Node  # online, GPU 6 fell off the bus 30 minutes ago
    silent: Node  # unreachable for 30 minutes
    fresh: Node  # every GPU reporting


def stale_fleet() -> StaleFleet:
    cluster, node_type = factories.cluster(), factories.node_type(nics=0)
    rack = Rack.objects.create(cluster=cluster, name="r01", power_budget_kw=Decimal(40))
    now = timezone.now()
    nodes = []
    for position, hostname in ((2, "gpu-100"), (11, "gpu-101"), (20, "gpu-102")):
        node = factories.node(cluster, node_type, hostname)
        silent = hostname == "gpu-101"
        Node.objects.filter(pk=node.pk).update(
            rack=rack,
            rack_position=position,
            liveness=Liveness.UNREACHABLE if silent else Liveness.ONLINE,
            last_seen_at=now - AGE if silent else now,
        )
        last = [gpu_metrics(g, util_gpu=98.0, power_w=625.0, temp_c=63.0) for g in range(8)]  # AGE ago
        NodeGpuSample.objects.bulk_create([NodeGpuSample.of(node.pk, now - AGE, [reading(g) for g in last], now - AGE)])
        if silent:
            factories.latest_gpus(node, now - AGE, last)
        else:  # gpu-100's GPU 6 is not in its newest sample
            factories.latest_gpus(node, now, [gpu_metrics(g) for g in range(8) if (hostname, g) != ("gpu-100", 6)])
        nodes.append(node)
    Gpu.objects.filter(node=nodes[0], index=6).update(state=GpuState.MISSING)
    return StaleFleet(*nodes)


def test_a_gpu_that_fell_off_the_bus_keeps_its_last_values_greyed_with_their_age(open_page, viewer):
    fleet = off_the_loop(stale_fleet)
    page = open_page(viewer, f"/nodes/{fleet.reporting.pk}/")
    wait_until_live(page)

    lost = page.locator('#gpus tr[data-gpu="6"]')
    expect(lost).to_have_class("stale")
    expect(lost.locator(".age")).to_have_text("30 min old")
    expect(lost).to_contain_text("98 %")  # its last value, not hidden
    assert "Not current: last reported" in lost.get_attribute("title")
    expect(page.locator('#counters tr[data-gpu="6"]')).to_have_class("stale")
    expect(page.locator('#gpus tr[data-gpu="5"]')).not_to_have_class("stale")
    expect(page.locator('#gpus tr[data-gpu="5"] .age')).to_have_count(0)
    # A node that reports shows no age beside "Last seen": the badge is hidden, not an empty box.
    expect(page.locator("#node-seen")).not_to_have_class("stale")
    expect(page.locator("#node-seen-age")).to_be_hidden()
    screenshot(page, "node-gpu-stale")

    silent = open_page(viewer, f"/nodes/{fleet.silent.pk}/")
    wait_until_live(silent)
    expect(silent.locator("#node-seen")).to_have_class("stale")
    expect(silent.locator("#node-seen-age")).to_have_text("30 min ago")
    expect(silent.locator("#gpus tr.stale")).to_have_count(8)


def test_a_silent_node_shows_its_last_values_greyed_in_the_list_and_the_racks(open_page, viewer):
    fleet = off_the_loop(stale_fleet)
    listing = open_page(viewer, "/nodes/")
    wait_until_live(listing)

    util = listing.locator(f'tr[data-node="{fleet.silent.pk}"] td[data-k="util"]')
    expect(util.locator(".num .stale")).to_have_text("98 %")  # its last samples' mean
    assert "Not current: last reported" in util.locator(".num .stale").get_attribute("title")
    expect(listing.locator(f'tr[data-node="{fleet.silent.pk}"] td[data-k="seen"] .age')).to_have_text("30 min ago")
    expect(listing.locator(f'tr[data-node="{fleet.fresh.pk}"] td[data-k="util"] .stale')).to_have_count(0)

    racks = open_page(viewer, "/racks/")
    node = racks.locator(f'.rack-node[data-node="{fleet.silent.pk}"]')
    expect(node).to_have_class(re.compile(r"\bunreachable\b"))
    expect(node.locator(".value")).to_contain_text("30 min old")


def test_the_heatmap_draws_lost_gpus_and_silent_nodes_without_colour_and_says_how_old(open_page, viewer):
    fleet = off_the_loop(stale_fleet)
    page: Page = open_page(viewer, "/")
    wait_for_first_render(page)

    empty = cell_colour(page, fleet.silent, 0)
    assert cell_colour(page, fleet.reporting, 6) == empty  # left out of the snapshot: no data
    assert cell_colour(page, fleet.reporting, 5) != empty
    box = cell_centre(page, fleet.silent, 2)
    page.mouse.move(box["x"], box["y"])
    tip = page.locator("#heatmap-tip")
    expect(tip.locator(".stale")).to_contain_text("Utilization 98 %")
    expect(tip.locator(".age")).to_contain_text("not current: last reported")
    expect(tip.locator(".age")).to_contain_text("30 min ago")
