"""The list endpoints and the dashboard's pages cost the same number of queries for 10 nodes as for
500, and a node's page the same for a small node as for one with many GPUs, ports and failures.

A module-scoped fleet is built once in bulk: the query count of each endpoint is measured at 10
nodes, the fleet grows to 500, and each test asserts the same count (and that the answer grew).
"""

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from django.conf import settings
from django.db import connection
from django.db.models import OuterRef, Subquery
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from agents.protocol import PortSample
from apps.accounts.models import AuditLogEntry, User
from apps.accounts.roles import Role
from apps.failures.choices import FailureKind, Severity
from apps.failures.models import Failure
from apps.inventory.choices import Lifecycle, LinkState, PortKind, SwitchTier
from apps.inventory.models import (
    Gpu,
    Link,
    LinkEnd,
    LinkTermination,
    NetworkPort,
    Node,
    NodeTransition,
    NvLink,
    Rack,
    Switch,
    SwitchPort,
)
from apps.telemetry.models import LatestPortSample
from tests import factories
from tests.conftest import SOURCE_STATIC_FILES
from tests.dashboard.node_data import node_with_history
from tests.shared_data import rolled_back_afterwards
from tests.streaming import streamed_parts

SMALL, LARGE = 10, 500
GPUS_PER_NODE = NICS_PER_NODE = 8
NODES_PER_LEAF = 32  # also nodes per rack
FIRST_LEAF_NODES = 5  # so that the 10-node fleet, like the 500-node one, spans more than one leaf


def leaf_of(i: int) -> int:
    """The leaf (and rack) of the i-th node: five under the first, then 32 under each."""
    return 0 if i < FIRST_LEAF_NODES else 1 + (i - FIRST_LEAF_NODES) // NODES_PER_LEAF


class Fleet:
    """A cluster grown in bulk: 8 GPUs with a full NVLink mesh and 8 NDR ports per node, each port
    cabled to a leaf switch (with the derived ``_peer`` columns the signals would keep), a rack and a
    leaf per 32 nodes after the first five, a lifecycle history and an audit entry per node."""

    def __init__(self) -> None:
        self.cluster = factories.cluster("fleet")
        self.node_type = factories.node_type("hgx-h100", nics=0, gpus=GPUS_PER_NODE)
        self.fabric = factories.fabric(self.cluster)
        self.racks: list[Rack] = []
        self.leaves: list[Switch] = []
        self.size = 0

    def grow_to(self, size: int) -> None:
        first = self.size
        while len(self.leaves) <= leaf_of(size - 1):
            group = len(self.leaves)
            self.racks.append(Rack.objects.create(cluster=self.cluster, name=f"r{group:02d}"))
            self.leaves.append(
                Switch.objects.create(name=f"measured-leaf-{group:02d}", fabric=self.fabric, tier=SwitchTier.LEAF)
            )
        nodes = Node.objects.bulk_create(
            Node(
                hostname=f"gpu-{i:04d}",
                cluster=self.cluster,
                node_type=self.node_type,
                rack=self.racks[leaf_of(i)],
                rack_position=i % NODES_PER_LEAF,
                lifecycle=Lifecycle.IN_SERVICE,
            )
            for i in range(first, size)
        )
        NodeTransition.objects.bulk_create(
            NodeTransition(node=n, from_state="", to_state=Lifecycle.IN_SERVICE, actor="import") for n in nodes
        )
        AuditLogEntry.objects.bulk_create(
            AuditLogEntry(actor="import", action="node.create", object_type="inventory.node", object_id=str(n.pk))
            for n in nodes
        )
        self._add_gpus(nodes)
        self._add_cabled_ports(nodes, first)
        self._add_failures_and_port_samples(nodes)
        self.size = size

    def _add_gpus(self, nodes: list[Node]) -> None:
        gpus = Gpu.objects.bulk_create(
            Gpu(node=n, index=i, uuid=factories.gpu_uuid(), model=self.node_type.gpu_model)
            for n in nodes
            for i in range(GPUS_PER_NODE)
        )
        by_node = itertools.groupby(gpus, key=lambda g: g.node_id)
        NvLink.objects.bulk_create(
            NvLink(gpu_a=a, gpu_b=b, _node_id=node_id, lanes=18, bandwidth_gbs=900)
            for node_id, node_gpus in by_node
            for a, b in itertools.combinations(list(node_gpus), 2)
        )

    def _add_cabled_ports(self, nodes: list[Node], first: int) -> None:
        ends = [
            (n, i, self.leaves[leaf_of(first + offset)]) for offset, n in enumerate(nodes) for i in range(NICS_PER_NODE)
        ]
        links = Link.objects.bulk_create(Link() for _ in ends)
        switch_ports = SwitchPort.objects.bulk_create(
            SwitchPort(switch=leaf, name=f"{n.hostname}-{i}", rate_gbps=400, link_state=LinkState.ACTIVE, _link=link)
            for (n, i, leaf), link in zip(ends, links, strict=True)
        )
        ports = NetworkPort.objects.bulk_create(
            NetworkPort(
                node=n,
                device_name=f"mlx5_{i}",
                kind=PortKind.INFINIBAND,
                rate_gbps=400,
                link_state=LinkState.ACTIVE,
                _link=link,
                _peer_switch_port=switch_port,
            )
            for (n, i, _), link, switch_port in zip(ends, links, switch_ports, strict=True)
        )
        SwitchPort.objects.filter(_link__isnull=False, _peer_network_port__isnull=True).update(
            _peer_network_port=Subquery(NetworkPort.objects.filter(_peer_switch_port=OuterRef("pk")).values("pk")[:1])
        )
        LinkTermination.objects.bulk_create(
            itertools.chain.from_iterable(
                (
                    LinkTermination(link=link, end=LinkEnd.A, network_port=port),
                    LinkTermination(link=link, end=LinkEnd.B, switch_port=switch_port),
                )
                for link, port, switch_port in zip(links, ports, switch_ports, strict=True)
            )
        )

    def _add_failures_and_port_samples(self, nodes: list[Node]) -> None:
        """An XID per node with a side effect under it, and a fresh sample of every port."""
        now = timezone.now()
        fields = {"kind": FailureKind.XID, "severity": Severity.CRITICAL, "first_seen": now, "last_seen": now}
        causes = Failure.objects.bulk_create(
            Failure(node=n, gpu_index=3, code="xid-79", xid=79, title="XID 79", recommended_action="-", **fields)
            for n in nodes
        )
        Failure.objects.bulk_create(
            Failure(
                node_id=c.node_id,
                gpu_index=3,
                code="xid-45",
                xid=45,
                title="XID 45",
                recommended_action="-",
                cause=c,
                **fields,
            )
            for c in causes
        )
        ports = [
            dict(device=f"mlx5_{i}", port=1, state="active", rate_gbps=400.0, tx_gbps=100.0, rx_gbps=50.0)
            for i in range(NICS_PER_NODE)
        ]
        LatestPortSample.objects.bulk_create(
            LatestPortSample.of(n.pk, now, [PortSample(**port) for port in ports], now) for n in nodes
        )


@dataclass
class Measured:
    queries: int
    rows: int


def rows_in(response) -> int:
    """What the answer holds: rows of a JSON list, or the bytes of a page (which grow with its rows)."""
    if response["Content-Type"].startswith("text/html"):
        return len(b"".join(streamed_parts(response)) if response.streaming else response.content)
    body = response.json()
    if isinstance(body, dict) and "results" in body:
        return len(body["results"])
    return len(body["nodes"] if isinstance(body, dict) else body)


# Each endpoint whose answer grows with the fleet; {leaf}, {node} and {cluster} are filled in from it.
ENDPOINTS = {
    "nodes": "/api/v1/nodes?limit=1000",
    "gpus": "/api/v1/gpus?limit=1000",
    "network-ports": "/api/v1/network-ports?limit=1000",
    "switches": "/api/v1/switches?limit=1000",
    "switch-ports": "/api/v1/switch-ports?limit=1000",
    "links": "/api/v1/links?limit=1000",
    "nvlinks": "/api/v1/nvlinks?limit=1000",
    "racks": "/api/v1/racks?limit=1000",
    "node-transitions": "/api/v1/node-transitions?limit=1000",
    "audit-log": "/api/v1/audit-log?limit=1000",
    "nodes filtered by lifecycle": "/api/v1/nodes?limit=1000&lifecycle=in_service",
    "nodes under a leaf": "/api/v1/switches/{leaf}/nodes",
    "siblings of a node": "/api/v1/nodes/{node}/siblings",
    "theoretical busbw of a cluster": "/api/v1/fabric/theoretical-busbw?cluster={cluster}",
    # The dashboard's pages
    "fleet page": "/",
    "nodes page": "/nodes/",
    "nodes page filtered by leaf switch and lifecycle": "/nodes/?lifecycle=in_service&leaf_switch_name={leaf_name}",
    "failures page": "/failures/?state=all&limit=500",
    "failures page, the list read again": "/failures/?partial=1&limit=500",
    "topology page": "/topology/",
    "racks page": "/racks/",
    "reliability page": "/reliability/?days=30",
}


def urls_for(fleet: Fleet) -> dict[str, str]:
    """The second leaf and a node under it: both the leaf and the node's siblings grow with the fleet."""
    node = Node.objects.get(hostname=f"gpu-{FIRST_LEAF_NODES:04d}")
    return {
        name: url.format(
            leaf=fleet.leaves[1].pk, leaf_name=fleet.leaves[1].name, node=node.pk, cluster=fleet.cluster.pk
        )
        for name, url in ENDPOINTS.items()
    }


def measure(client: APIClient, url: str) -> Measured:
    with CaptureQueriesContext(connection) as queries:  # a streamed page's reads count too: read it here
        response = client.get(url)
        rows = rows_in(response)
    assert response.status_code == 200, response.content
    return Measured(len(queries), rows)


@pytest.fixture(scope="module")
def fleet_measured(django_db_setup, django_db_blocker) -> Iterator[tuple[APIClient, dict[str, str], dict]]:
    """The client, the endpoints and their cost at 10 nodes; the fleet has 500 when the tests run.
    Everything is rolled back when the module is done."""
    # Module-scoped: the autouse fixture that serves static files without collectstatic has not run yet.
    pages_without_collectstatic = override_settings(STORAGES={**settings.STORAGES, "staticfiles": SOURCE_STATIC_FILES})
    with rolled_back_afterwards(django_db_blocker), pages_without_collectstatic:
        client = APIClient()
        # A session, not a token: a token writes its last use now and then, which is not the endpoint's cost.
        client.force_login(User.objects.create(username="ops", role=Role.OPERATOR))  # the audit log needs it
        fleet = Fleet()
        fleet.grow_to(SMALL)
        urls = urls_for(fleet)
        small = {name: measure(client, url) for name, url in urls.items()}
        fleet.grow_to(LARGE)
        yield client, urls, small


@pytest.mark.django_db
@pytest.mark.parametrize(
    "name",
    list(ENDPOINTS),
)
def test_it_costs_the_same_queries_for_500_nodes_as_for_10(name, fleet_measured, django_assert_num_queries):
    client, urls, small = fleet_measured

    with django_assert_num_queries(small[name].queries):
        response = client.get(urls[name])
        rows = rows_in(response)

    assert response.status_code == 200
    assert rows > small[name].rows, "the fleet did not grow under this endpoint"


@pytest.mark.django_db
def test_a_node_page_costs_the_same_queries_whatever_its_gpus_ports_failures_and_history(django_assert_num_queries):
    client = APIClient()
    client.force_login(User.objects.create(username="node-page-reader", role=Role.OPERATOR))
    small = node_with_history("gpu-small", gpus=1, ports=1, failures=2, transitions=1)
    large = node_with_history("gpu-large", gpus=8, ports=8, failures=12, transitions=9)
    with CaptureQueriesContext(connection) as queries:
        small_page = client.get(f"/nodes/{small.pk}/").content.decode()

    with django_assert_num_queries(len(queries)):
        large_page = client.get(f"/nodes/{large.pk}/").content.decode()

    for marker in ("<tr data-gpu=", "<tr data-port=", "<tr data-failure=", 'class="pill lc-'):
        assert large_page.count(marker) > small_page.count(marker), marker
