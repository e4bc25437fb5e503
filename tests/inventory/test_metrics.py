"""/metrics, the inventory's part: each node's lifecycle and liveness as one 0/1 gauge per state, and
when it was last heard from, labelled with its hostname, cluster and rack."""

from datetime import UTC, datetime

import pytest

from apps.inventory.choices import Lifecycle, Liveness
from apps.inventory.models import Node, Rack
from tests import factories
from tests.prometheus import scrape, series

pytestmark = pytest.mark.django_db


@pytest.fixture
def nodes():
    cluster, node_type = factories.cluster("h100-east"), factories.node_type(nics=0)
    racked = factories.node(cluster, node_type, "gpu-001", lifecycle=Lifecycle.QUARANTINED)
    racked.rack = Rack.objects.create(cluster=cluster, name="r12")
    racked.save(update_fields=["rack"])
    loose = factories.node(cluster, node_type, "gpu-002", lifecycle=Lifecycle.IN_SERVICE)
    return racked, loose


def test_it_exports_one_lifecycle_gauge_per_state(nodes):
    lifecycle = series(scrape(), "controlplane_node_lifecycle", "Hostname", "state")
    assert len(lifecycle) == 2 * len(Lifecycle.values)
    assert {key: value for key, value in lifecycle.items() if value == 1} == {
        ("gpu-001", "quarantined"): 1,
        ("gpu-002", "in_service"): 1,
    }
    assert lifecycle[("gpu-001", "in_service")] == 0
    assert set(series(scrape(), "controlplane_node_lifecycle", "state")) == {(s,) for s in Lifecycle.values}


def test_every_node_series_has_hostname_cluster_and_rack(nodes):
    parsed = scrape()
    for name in ("controlplane_node_lifecycle", "controlplane_node_liveness"):
        assert set(series(parsed, name, "Hostname", "cluster", "rack")) == {
            ("gpu-001", "h100-east", "r12"),
            ("gpu-002", "h100-east", ""),
        }


def test_it_exports_liveness_and_when_the_node_was_last_heard_from(nodes):
    seen = datetime(2026, 12, 1, 13, 48, 41, tzinfo=UTC)
    Node.objects.filter(hostname="gpu-001").update(liveness=Liveness.UNREACHABLE, last_seen_at=seen)
    parsed = scrape()
    liveness = series(parsed, "controlplane_node_liveness", "Hostname", "state")
    assert liveness[("gpu-001", "unreachable")] == 1
    assert liveness[("gpu-001", "online")] == 0
    assert liveness[("gpu-002", "unknown")] == 1  # never seen
    assert series(parsed, "controlplane_node_last_seen_timestamp_seconds", "Hostname") == {
        ("gpu-001",): seen.timestamp()  # a node never heard from has no series
    }
    assert parsed["controlplane_node_last_seen_timestamp_seconds"].type == "gauge"
