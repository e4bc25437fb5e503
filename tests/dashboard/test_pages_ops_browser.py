"""The failures, topology, racks and reliability pages over a small fleet in headless Chromium
(``-m browser``): light and dark, at 1280 and at 4k, without sideways scrolling; the racks' metric switch."""

from dataclasses import dataclass
from decimal import Decimal

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from agents.protocol import GpuEvent
from apps.failures.events import node_unreachable, record_event, record_events
from apps.inventory.choices import FabricKind, FabricTopology, Liveness, SwitchTier
from apps.inventory.models import Fabric, Node, Rack
from tests import factories
from tests.dashboard.conftest import live, off_the_loop, screenshot
from tests.failures.conftest import events, xid


@dataclass
class OpsFleet:
    nodes: list[Node]
    hot: Node  # the hottest node, drawing the most power
    unreachable: Node
    unracked: Node


def ops_fleet() -> OpsFleet:
    """Two racks of four 8-GPU nodes under two leaves and two spines, an empty rack, a node in no
    rack, live samples (one node hot, one unreachable), port load, and a few days of failures."""
    cluster = factories.cluster("h100-east")
    node_type = factories.node_type("hgx-h100-80g", nics=4)
    fabric = factories.fabric(cluster)
    Fabric.objects.create(name="nvl-h100", cluster=cluster, kind=FabricKind.NVLINK, topology=FabricTopology.NVSWITCH)
    spines = [factories.switch(fabric, SwitchTier.SPINE) for _ in range(2)]
    racks = [Rack.objects.create(cluster=cluster, name=f"r0{i}", power_budget_kw=Decimal(45)) for i in (1, 2, 3)]
    nodes = []
    for r, rack in enumerate(racks[:2]):
        leaf = factories.switch(fabric)
        for spine in spines:
            factories.uplink(leaf, spine, count=2)
        for slot, position in enumerate((2, 11, 20, 29)):
            node = factories.node(cluster, node_type, f"gpu-{r * 4 + slot + 1:03d}")
            Node.objects.filter(pk=node.pk).update(rack=rack, rack_position=position, liveness=Liveness.ONLINE)
            factories.cable_node_to_leaf(node, leaf)
            nodes.append(node)
    unracked = factories.node(cluster, node_type, "gpu-009")
    Node.objects.filter(pk=unracked.pk).update(liveness=Liveness.ONLINE)
    factories.nvlink_mesh(nodes[0])
    nodes.append(unracked)

    now = timezone.now()
    for i, node in enumerate(nodes):
        hot = i == 5
        factories.latest_gpus(
            node,
            now,
            [
                dict(
                    gpu_index=g,
                    util_gpu=95.0 if hot else 40.0 + 5 * i,
                    util_mem=30.0,
                    mem_used_mib=60_000,
                    temp_c=(86.0 if hot else 48.0 + 3 * i) + g % 3,
                    power_w=690.0 if hot else 300.0 + 30 * i,
                    sm_clock_mhz=1980,
                )
                for g in range(8)
            ],
        )
        factories.latest_ports(
            node,
            now,
            [
                dict(
                    device=f"mlx5_{p}",
                    port=1,
                    state="active",
                    rate_gbps=400.0,
                    tx_gbps=380.0 if hot else 20.0 * i,
                    rx_gbps=100.0,
                )
                for p in range(4)
            ],
        )
    fleet = OpsFleet(nodes, nodes[5], nodes[3], unracked)

    ts = now.timestamp()
    record_events(
        nodes[5].pk, events(xid(79, gpu=3, at=ts - 60, data="GPU has fallen off the bus."), xid(45, gpu=3, at=ts - 59))
    )
    record_event(nodes[2].pk, xid(48, gpu=1, at=ts - 3 * 86400))
    for repeat in range(5):
        record_event(nodes[1].pk, xid(13, gpu=6, at=ts - 7200 + repeat * 60, data="Graphics SM Warp Exception"))
    record_event(nodes[1].pk, xid(94, gpu=2, at=ts - 86400)).acknowledge(actor="otto")
    record_event(nodes[6].pk, xid(74, gpu=0, at=ts - 5 * 86400)).resolve(actor="otto", note="NVLink cable reseated")
    record_event(
        nodes[4].pk,
        GpuEvent(
            ts=ts - 600,
            kind="port",
            port_device="mlx5_2",
            data="mlx5_2 port 1: state active → down; link went down 1 times",
        ),
    )
    Node.objects.filter(pk=fleet.unreachable.pk).update(liveness=Liveness.UNREACHABLE)
    node_unreachable(fleet.unreachable.pk)
    return fleet


VIEWS = {  # name: viewport, dark
    "": ((1280, 800), False),
    "-dark": ((1280, 800), True),
    "-4k": ((3840, 2160), False),
}


def fits_the_width(page: Page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def failures_ready(page: Page, fleet: OpsFleet) -> None:
    live(page)
    expect(page.locator("#failure-list > li[data-failure]")).to_have_count(6)
    expect(page.locator(f'#failure-list a[href="/nodes/{fleet.hot.pk}/"]')).to_have_count(1)
    expect(page.get_by_text("caused 1 side effect")).to_be_visible()
    expect(page.get_by_text("×5")).to_be_visible()


def topology_ready(page: Page, fleet: OpsFleet) -> None:
    live(page)
    expect(page.locator(".node-chip[data-node]")).to_have_count(8)
    hot = page.locator(f'.node-chip[data-node="{fleet.hot.pk}"]')
    expect(hot).to_contain_text("95 %")  # 4 × 380 Gb/s of 4 × 400
    expect(hot).to_have_attribute("data-severity", "critical")  # its XID 79, from the fleet stream
    expect(page.locator(f'.node-chip[data-node="{fleet.unreachable.pk}"]')).to_have_attribute(
        "data-liveness", "unreachable"
    )
    expect(page.locator("#uncabled")).to_contain_text("gpu-009")


def racks_ready(page: Page, fleet: OpsFleet) -> None:
    live(page)
    expect(page.locator(f'.rack-node[data-node="{fleet.hot.pk}"] .value')).to_have_text("5.5 kW")  # 8 × 690 W
    expect(page.locator(f'.rack-node[data-node="{fleet.unreachable.pk}"]')).to_have_class("rack-node u8 unreachable")
    expect(page.locator("#unracked")).to_contain_text("gpu-009")
    expect(page.locator("#empty-racks")).to_contain_text("r03")


def reliability_ready(page: Page, fleet: OpsFleet) -> None:
    expect(page.locator("#worst-nodes tbody tr")).to_have_count(6)
    expect(page.locator("#by-model")).to_contain_text("NVIDIA H100 80GB HBM3")
    expect(page.locator("#mtbf tbody tr")).to_have_count(len(fleet.nodes))


PAGES = {
    "failures": ("/failures/", failures_ready),
    "topology": ("/topology/", topology_ready),
    "racks": ("/racks/", racks_ready),
    "reliability": ("/reliability/", reliability_ready),
}


@pytest.mark.browser
@pytest.mark.parametrize("name", list(PAGES))
def test_each_page_shows_the_fleet_light_and_dark_at_1280_and_at_4k(open_page, viewer, name):
    fleet = off_the_loop(ops_fleet)
    path, ready = PAGES[name]
    for suffix, (viewport, dark) in VIEWS.items():
        page = open_page(viewer, path, viewport=viewport, dark=dark)
        ready(page, fleet)
        assert fits_the_width(page), f"{name}{suffix} scrolls sideways"
        screenshot(page, f"{name}{suffix}")


@pytest.mark.browser
def test_racks_switch_to_temperature_and_keep_the_choice_in_the_address(open_page, viewer):
    fleet = off_the_loop(ops_fleet)
    page = open_page(viewer, "/racks/")
    hot = page.locator(f'.rack-node[data-node="{fleet.hot.pk}"]')
    expect(hot.locator(".value")).to_have_text("5.5 kW")

    page.get_by_text("Temperature").click()

    expect(hot.locator(".value")).to_have_text("88 °C")  # its hottest GPU: 86 + 2
    expect(page.locator("#legend-high")).to_have_text("90 °C")
    assert page.url.endswith("/racks/?metric=temp")
    assert "hottest GPU 88 °C" in hot.get_attribute("title")
    screenshot(page, "racks-temperature")
    page.reload()
    expect(hot.locator(".value")).to_have_text("88 °C")
