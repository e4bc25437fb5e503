"""The demo's simulated fleet is the example inventory: the simulator's nodes report exactly the GPUs
and HCAs the example file lists, so connecting the fleet records no change."""

import pytest

from agents.simulator.collector import SimulatedCollector
from apps.gateway.discovery import apply_inventory
from apps.gateway.models import DiscoveryChange
from apps.inventory.importer import import_inventory, load_document
from apps.inventory.models import Node
from controlplane import demo

pytestmark = pytest.mark.django_db


def test_it_records_no_change_when_the_demo_fleet_reports_the_example_inventory():
    import_inventory(load_document(demo.EXAMPLE_INVENTORY.read_text(), "yaml"), actor="tester")
    nodes = list(Node.objects.order_by("hostname"))
    assert [node.hostname for node in nodes] == [f"gpu-{number:03d}" for number in range(1, demo.FLEET_NODES + 1)]

    for node in nodes:
        report = SimulatedCollector(demo.FLEET_PROFILE, node.hostname, seed=demo.FLEET_SEED).discover()
        assert apply_inventory(node, report) == [], node.hostname

    assert not DiscoveryChange.objects.exists()
    assert Node.objects.get(hostname="gpu-005").gpus.get(index=3).uuid == (
        SimulatedCollector(demo.FLEET_PROFILE, "gpu-005", seed=demo.FLEET_SEED).discover().gpus[3].uuid
    )
