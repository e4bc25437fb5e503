"""Inventories applied a batch at a time: the same rows, changes and refusals as one report after
another in the batch's order (reports that touch each other's rows included), and the same
statements for a batch of any size."""

from collections.abc import Callable

import pytest
from django.db import transaction

from agents import protocol
from apps.gateway.discovery import Outcome, apply_inventories, apply_inventory
from apps.gateway.discovery_plan import VACANT_UUID_PREFIX
from apps.gateway.models import DiscoveryChange, NodeAgent
from apps.inventory.choices import Liveness
from apps.inventory.models import Gpu, NetworkPort, Node
from tests import factories

pytestmark = pytest.mark.django_db

Batch = list[tuple[Node, protocol.Inventory]]


def uuid(node: int, index: int) -> str:
    return f"GPU-{node:08x}-0000-4000-8000-{index:012x}"


def guid(node: int, device: int) -> str:
    return f"b859:9f03:{node:04x}:{device:04x}"


def gpu(index: int, gpu_uuid: str, serial: str | None = None) -> protocol.GpuInfo:
    return protocol.GpuInfo(index=index, uuid=gpu_uuid, name="NVIDIA H100 80GB HBM3", memory_mib=81559, serial=serial)


def port(device: int, port_guid: str) -> protocol.PortInfo:
    return protocol.PortInfo(
        device=f"mlx5_{device}", port=1, kind="infiniband", rate_gbps=400, state="active", guid=port_guid
    )


def report(node: Node, gpus: list[protocol.GpuInfo], ports: list[protocol.PortInfo] = ()) -> protocol.Inventory:
    return protocol.Inventory(host=protocol.HostFacts(hostname=node.hostname), gpus=gpus, ports=list(ports))


def own(node: Node, number: int, gpus: int = 4) -> protocol.Inventory:
    """The node's own GPUs (with serials) and two HCAs."""
    return report(
        node,
        [gpu(i, uuid(number, i), f"S{number}-{i}") for i in range(gpus)],
        [port(d, guid(number, d)) for d in (0, 1)],
    )


@pytest.fixture
def nodes() -> list[Node]:
    cluster, node_type = factories.cluster(), factories.node_type(nics=2, gpus=4)
    return [
        Node.objects.create(hostname=f"gpu-{n:04d}", cluster=cluster, node_type=node_type, liveness=Liveness.ONLINE)
        for n in range(12)
    ]


def _vacant(value: object) -> object:
    return "vacant" if isinstance(value, str) and value.startswith(VACANT_UUID_PREFIX) else value


def state(nodes: list[Node]) -> tuple[list[tuple], ...]:
    """The nodes' GPU, port, change and agent rows by what they hold (pks, placeholders included, differ)."""
    gpus = Gpu.objects.filter(node__in=nodes).order_by("node__hostname", "index")
    ports = NetworkPort.objects.filter(node__in=nodes).order_by("node__hostname", "device_name")
    changes = DiscoveryChange.objects.filter(node__in=nodes).order_by("node__hostname", "id")
    agents = NodeAgent.objects.filter(node__in=nodes).order_by("node__hostname")
    return (
        [tuple(map(_vacant, row)) for row in gpus.values_list("node__hostname", "index", "uuid", "serial", "state")],
        list(ports.values_list("node__hostname", "device_name", "guid", "link_state")),
        [(c.node.hostname, c.kind, c.subject, {k: _vacant(v) for k, v in c.detail.items()}) for c in changes],
        list(agents.values_list("node__hostname", "inventory")),
    )


def said(outcome: Outcome) -> object:
    if isinstance(outcome, protocol.ProtocolError):
        return (type(outcome).__name__, outcome.code, outcome.message)
    return [(c.node.hostname, c.kind, c.subject, {k: _vacant(v) for k, v in c.detail.items()}) for c in outcome]


def one_after_another(batch: Batch) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for node, inventory in batch:
        try:
            outcomes.append(apply_inventory(node, inventory))
        except protocol.ProtocolError as refused:
            outcomes.append(refused)
    return outcomes


def assert_batched_as_one_after_another(nodes: list[Node], before: Batch, batch: Callable[[], Batch]) -> None:
    apply_inventories(before)
    with transaction.atomic():  # applied one after another, then undone
        expected = [said(outcome) for outcome in one_after_another(batch())], state(nodes)
        transaction.set_rollback(True)

    batched = [said(outcome) for outcome in apply_inventories(batch())], state(nodes)

    assert batched == expected


def test_first_reports_and_refused_ones_in_one_batch(nodes):
    a, b, c, d = nodes[:4]
    assert_batched_as_one_after_another(
        nodes,
        [(a, own(a, 0))],
        lambda: [
            (b, own(b, 1)),
            (c, report(c, [gpu(0, uuid(2, 0)), gpu(1, uuid(0, 3))])),  # gpu1 is a's, online: refused
            (d, report(d, [gpu(0, "GPU-not-a-uuid")])),  # refused: invalid
            (d, own(d, 3)),
        ],
    )
    assert not Gpu.objects.filter(node=c).exists()  # refused whole


def test_a_gpu_moving_between_two_nodes_of_one_batch(nodes):
    a, b = nodes[:2]
    assert_batched_as_one_after_another(
        nodes,
        [(a, own(a, 0)), (b, own(b, 1, gpus=2))],
        lambda: [
            (a, report(a, [gpu(i, uuid(0, i), f"S0-{i}") for i in range(3)], [port(0, guid(0, 0))])),  # gpu3 left
            (b, report(b, [gpu(0, uuid(1, 0)), gpu(1, uuid(1, 1)), gpu(2, uuid(0, 3), "S0-3")])),  # and came here
        ],
    )
    assert Gpu.objects.get(uuid=uuid(0, 3)).node == b


def test_two_nodes_claiming_each_others_gpus_and_one_node_reporting_twice(nodes):
    a, b = nodes[:2]
    assert_batched_as_one_after_another(
        nodes,
        [(a, own(a, 0)), (b, own(b, 1))],
        lambda: [
            (a, report(a, [gpu(0, uuid(1, 0))])),
            (b, report(b, [gpu(0, uuid(0, 0))])),
            (a, own(a, 0, gpus=2)),
            (a, own(a, 0)),  # what it reported before this batch
        ],
    )


def test_a_batch_takes_the_same_statements_whatever_its_size(
    nodes, django_assert_max_num_queries, django_assert_num_queries
):
    apply_inventories([(node, own(node, n)) for n, node in enumerate(nodes[:2])])  # the identity checks find rows

    with django_assert_max_num_queries(20) as small:
        outcomes = apply_inventories([(node, own(node, n)) for n, node in enumerate(nodes[2:4], 2)])
    with django_assert_num_queries(len(small.captured_queries)):
        outcomes += apply_inventories([(node, own(node, n)) for n, node in enumerate(nodes[4:], 4)])

    assert [len(outcome) for outcome in outcomes] == [6] * 10  # 4 GPUs and 2 ports added to each
    again = apply_inventories([(node, own(node, n)) for n, node in enumerate(nodes)])
    assert again == [[]] * 12
