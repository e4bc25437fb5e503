"""The demo's data (``manage.py seed_demo``): the simulated fleet is the example inventory, so that
connecting it records no change; each start resets the admin and the fleet's credentials; the
example fleet is priced, labelled as examples."""

import io
import json
import stat
from decimal import Decimal

import msgspec
import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command
from django.utils import timezone

from agents.simulator.collector import SimulatedCollector
from apps.accounts.models import ApiToken, AuditLogEntry, TokenRefused
from apps.costs.models import EnergyPrice, GpuPrice
from apps.costs.rates import live_pricing
from apps.gateway.discovery import apply_inventory
from apps.gateway.models import DiscoveryChange, NodeCredential
from apps.inventory.importer import import_inventory, load_document
from apps.inventory.models import Cluster, Node
from controlplane import demo, demo_seed

pytestmark = pytest.mark.django_db

AGENT_WS_URL = "ws://127.0.0.1:8123/ws/agent"  # the demo's agent gateway


def import_example_inventory() -> None:
    import_inventory(load_document(demo_seed.EXAMPLE_INVENTORY.read_text(), "yaml"), actor="tester")


def test_it_records_no_change_when_the_demo_fleet_reports_the_example_inventory():
    import_example_inventory()
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
    import_example_inventory()
    path = tmp_path / demo.FLEET_CREDENTIALS_FILE
    said: list[str] = []

    assert demo_seed.issue_fleet_credentials(path, AGENT_WS_URL, said.append) == demo.FLEET_NODES
    first = json.loads(path.read_text())
    assert demo_seed.issue_fleet_credentials(path, AGENT_WS_URL, said.append) == demo.FLEET_NODES
    second = json.loads(path.read_text())

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert second["server_ws_url"] == AGENT_WS_URL
    assert [node["hostname"] for node in second["nodes"]] == list(demo.FLEET_HOSTNAMES)
    assert all(NodeCredential.authenticate(node["credential"]) for node in second["nodes"])
    assert not any(NodeCredential.authenticate(node["credential"]) for node in first["nodes"])
    assert AuditLogEntry.objects.filter(action="node_credential.revoke").count() == demo.FLEET_NODES
    assert said == []


def test_it_prices_the_example_fleet_so_the_dashboard_shows_costs_labelled_as_examples():
    import_example_inventory()
    said: list[str] = []
    demo_seed.seed_example_prices(said.append)

    pricing = live_pricing(timezone.localdate())
    assert (pricing.currency, pricing.unpriced) == ("USD", [])
    assert list(pricing.gpu_hour.values()) == [Decimal("2.49")]
    assert all("Example price" in price.notes for price in [*GpuPrice.objects.all(), *EnergyPrice.objects.all()])
    assert "2.49" in said[0]


def seed_demo(credentials_file: str) -> tuple[demo.Seeded, str]:
    """``manage.py seed_demo`` as the launcher runs it: its answer (stdout) and its progress (stderr)."""
    stdout, stderr = io.StringIO(), io.StringIO()
    arguments = ["--agent-ws-url", AGENT_WS_URL, "--fleet-credentials-file", credentials_file]
    call_command("seed_demo", *arguments, stdout=stdout, stderr=stderr)
    return msgspec.json.decode(stdout.getvalue(), type=demo.Seeded), stderr.getvalue()


def test_seed_demo_answers_the_launcher_with_a_working_admin_and_the_fleet(settings, tmp_path):
    settings.STATIC_ROOT = tmp_path / "staticfiles"
    credentials_file = tmp_path / demo.FLEET_CREDENTIALS_FILE

    seeded, progress = seed_demo(str(credentials_file))

    assert seeded.fleet_nodes == demo.FLEET_NODES
    assert authenticate(username=seeded.admin.username, password=seeded.admin.password).effective_role == "admin"
    assert ApiToken.authenticate(seeded.admin.api_token).role == "admin"
    assert len(json.loads(credentials_file.read_text())["nodes"]) == demo.FLEET_NODES
    assert (tmp_path / "staticfiles" / "dashboard" / "app.css").exists()
    assert "Created 1 cluster" in progress
    assert Cluster.objects.get().name == "h100-east"


def test_seed_demo_again_resets_the_admin_and_leaves_the_inventory_as_it_is(settings, tmp_path):
    settings.STATIC_ROOT = tmp_path / "staticfiles"
    credentials_file = str(tmp_path / demo.FLEET_CREDENTIALS_FILE)
    first, _ = seed_demo(credentials_file)
    Node.objects.filter(hostname="gpu-016").update(serial="changed by an operator")

    second, progress = seed_demo(credentials_file)

    assert authenticate(username="admin", password=first.admin.password) is None
    assert authenticate(username="admin", password=second.admin.password) is not None
    with pytest.raises(TokenRefused, match="Unknown API token"):
        ApiToken.authenticate(first.admin.api_token)
    assert "already holds clusters; leaving them as they are" in progress
    assert Node.objects.get(hostname="gpu-016").serial == "changed by an operator"
    assert GpuPrice.objects.count() == 1  # priced once, with the import
