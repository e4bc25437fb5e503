"""The demo's simulated fleet is the example inventory: the simulator's nodes report exactly the GPUs
and HCAs the example file lists, so connecting the fleet records no change."""

import json
import stat

import pytest

from agents.simulator.collector import SimulatedCollector
from apps.accounts.models import AuditLogEntry
from apps.gateway.discovery import apply_inventory
from apps.gateway.models import DiscoveryChange, NodeCredential
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


def test_it_issues_each_example_node_a_fresh_credential_on_every_start(tmp_path):
    import_inventory(load_document(demo.EXAMPLE_INVENTORY.read_text(), "yaml"), actor="tester")
    path = tmp_path / demo.FLEET_CREDENTIALS_FILE
    said: list[str] = []

    assert demo.issue_fleet_credentials(path, "http://127.0.0.1:8123", said.append) == demo.FLEET_NODES
    first = json.loads(path.read_text())
    assert demo.issue_fleet_credentials(path, "http://127.0.0.1:8123", said.append) == demo.FLEET_NODES
    second = json.loads(path.read_text())

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert second["server_ws_url"] == "ws://127.0.0.1:8123/ws/agent"
    assert [node["hostname"] for node in second["nodes"]] == list(demo.FLEET_HOSTNAMES)
    assert all(NodeCredential.authenticate(node["credential"]) for node in second["nodes"])
    assert not any(NodeCredential.authenticate(node["credential"]) for node in first["nodes"])
    assert AuditLogEntry.objects.filter(action="node_credential.revoke").count() == demo.FLEET_NODES
    assert said == []


def test_it_prices_the_example_fleet_so_the_dashboard_shows_costs_labelled_as_examples():
    from decimal import Decimal

    from django.utils import timezone

    from apps.costs.models import EnergyPrice, GpuPrice
    from apps.costs.rates import live_pricing

    import_inventory(load_document(demo.EXAMPLE_INVENTORY.read_text(), "yaml"), actor="tester")
    said: list[str] = []
    demo.seed_example_prices(said.append)

    pricing = live_pricing(timezone.localdate())
    assert (pricing.currency, pricing.unpriced) == ("USD", [])
    assert list(pricing.gpu_hour.values()) == [Decimal("2.49")]
    assert all("Example price" in price.notes for price in [*GpuPrice.objects.all(), *EnergyPrice.objects.all()])
    assert "2.49" in said[0]
