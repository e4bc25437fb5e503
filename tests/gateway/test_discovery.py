"""Discovery upsert: what an agent reports becomes inventory rows, and what changed becomes a
DiscoveryChange. Rows are slots and are never deleted."""

import asyncio
import threading
from datetime import UTC, datetime, timedelta

import pytest

from agents import protocol
from apps.gateway import consumers
from apps.gateway.discovery import Outcome, apply_inventories, apply_inventory, vacant_uuid
from apps.gateway.models import DiscoveryChange, NodeAgent
from apps.inventory.choices import GpuState, LinkState
from apps.inventory.models import Gpu, NetworkPort, Node, NvLink
from tests import factories
from tests.gateway.conftest import enrolled_node, eventually, in_db

LATER = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
UUIDS = [f"GPU-{i:08x}-0000-4000-8000-{i:012x}" for i in range(1, 20)]


def gpu(index: int, uuid: str | None = None, **fields: object) -> protocol.GpuInfo:
    fields = {
        "name": "NVIDIA H100 80GB HBM3",
        "memory_mib": 81559,
        "pci_bus_id": f"00000000:{0x18 + index:02x}:00.0",
    } | fields
    return protocol.GpuInfo(index=index, uuid=uuid or UUIDS[index], **fields)


def port(device: str, rate: float = 400, state: str = "active", **fields: object) -> protocol.PortInfo:
    return protocol.PortInfo(device=device, port=1, kind="infiniband", rate_gbps=rate, state=state, **fields)


def inventory(
    node: Node, gpus: list[protocol.GpuInfo], ports: list[protocol.PortInfo], **host: object
) -> protocol.Inventory:
    return protocol.Inventory(host=protocol.HostFacts(hostname=node.hostname, **host), gpus=gpus, ports=ports)


@pytest.fixture
def node(db) -> Node:
    """A new node whose type promises two HCAs (mlx5_0, mlx5_1) and which has no GPU rows yet."""
    return Node.objects.create(
        hostname="gpu-0100", cluster=factories.cluster(), node_type=factories.node_type(nics=2, gpus=4)
    )


def changes(node: Node) -> list[tuple[str, str]]:
    return list(DiscoveryChange.objects.filter(node=node).order_by("id").values_list("kind", "subject"))


def test_it_adds_every_gpu_and_port_of_a_first_report(node):
    report = inventory(node, [gpu(i) for i in range(4)], [port("mlx5_0"), port("mlx5_1"), port("mlx5_2", 200)])

    found = apply_inventory(node, report)

    assert [(c.kind, c.subject) for c in found] == [
        ("gpu_added", "gpu0"),
        ("gpu_added", "gpu1"),
        ("gpu_added", "gpu2"),
        ("gpu_added", "gpu3"),
        ("port_added", "mlx5_2/1"),
    ]
    assert list(node.gpus.values_list("index", "uuid", "state", "pci_bus_id")) == [
        (i, UUIDS[i], GpuState.HEALTHY, f"00000000:{0x18 + i:02x}:00.0") for i in range(4)
    ]
    assert list(node.ports.values_list("device_name", "rate_gbps", "link_state")) == [
        ("mlx5_0", 400, LinkState.ACTIVE),
        ("mlx5_1", 400, LinkState.ACTIVE),
        ("mlx5_2", 200, LinkState.ACTIVE),
    ]
    assert changes(node) == [(c.kind, c.subject) for c in found]


def test_it_records_a_swapped_gpu_in_the_same_slot_with_both_uuids(node):
    apply_inventory(node, inventory(node, [gpu(i, serial=f"S{i}") for i in range(4)], []))
    Gpu.objects.filter(node=node, index=3).update(state=GpuState.FAILED)  # XID 79: why it was replaced

    found = apply_inventory(
        node, inventory(node, [*(gpu(i, serial=f"S{i}") for i in range(3)), gpu(3, UUIDS[9], serial="NEW")], [])
    )

    assert [(c.kind, c.subject, c.detail) for c in found] == [
        (
            "gpu_swapped",
            "gpu3",
            {"index": 3, "old_uuid": UUIDS[3], "new_uuid": UUIDS[9], "old_serial": "S3", "new_serial": "NEW"},
        )
    ]
    slot = Gpu.objects.get(node=node, index=3)
    assert (slot.uuid, slot.serial, slot.state) == (UUIDS[9], "NEW", GpuState.HEALTHY)
    assert node.gpus.count() == 4


def test_it_marks_a_gpu_no_longer_reported_missing_and_keeps_its_row(node):
    apply_inventory(node, inventory(node, [gpu(i) for i in range(4)], []))

    found = apply_inventory(node, inventory(node, [gpu(0), gpu(1), gpu(3)], []), now=LATER)
    again = apply_inventory(node, inventory(node, [gpu(0), gpu(1), gpu(3)], [], kernel="6.8"), now=LATER + HOUR)

    assert [(c.kind, c.subject, c.detail) for c in found] == [("gpu_removed", "gpu2", {"index": 2, "uuid": UUIDS[2]})]
    assert again == []  # still missing: nothing new to say
    missing = Gpu.objects.get(node=node, index=2)
    assert (missing.state, missing.missing_since) == (GpuState.MISSING, LATER)  # its exposure ends there
    assert node.gpus.count() == 4


def test_it_notes_a_missing_gpu_that_comes_back(node):
    apply_inventory(node, inventory(node, [gpu(0), gpu(1)], []))
    apply_inventory(node, inventory(node, [gpu(0)], []))

    found = apply_inventory(node, inventory(node, [gpu(0), gpu(1)], []))

    assert [(c.kind, c.detail) for c in found] == [("gpu_added", {"index": 1, "uuid": UUIDS[1], "returned": True})]
    back = Gpu.objects.get(node=node, index=1)
    assert (back.state, back.missing_since) == (GpuState.HEALTHY, None)


def test_it_stores_the_slowdown_temperature_each_gpu_reports(node):
    apply_inventory(node, inventory(node, [gpu(0, slowdown_temp_c=87.0), gpu(1)], []))
    assert list(node.gpus.order_by("index").values_list("slowdown_temp_c", flat=True)) == [87.0, None]


def test_it_takes_down_a_port_that_is_gone_and_records_changed_rates(node):
    apply_inventory(node, inventory(node, [], [port("mlx5_0"), port("mlx5_1")]))

    found = apply_inventory(node, inventory(node, [], [port("mlx5_0", 200, state="init")]))

    assert [(c.kind, c.subject, c.detail) for c in found] == [
        ("port_changed", "mlx5_0/1", {"rate_gbps": [400, 200]}),
        ("port_removed", "mlx5_1/1", {"kind": "infiniband", "guid": ""}),
    ]
    assert dict(node.ports.values_list("device_name", "link_state")) == {
        "mlx5_0": LinkState.INIT,
        "mlx5_1": LinkState.DOWN,
    }
    back = apply_inventory(node, inventory(node, [], [port("mlx5_0", 200, state="init"), port("mlx5_1")]))
    assert [(c.kind, c.subject, c.detail.get("returned")) for c in back] == [("port_added", "mlx5_1/1", True)]


def test_it_reports_a_port_the_node_type_promised_but_the_first_report_lacks(node):
    found = apply_inventory(node, inventory(node, [], [port("mlx5_0")]))

    assert [(c.kind, c.subject) for c in found] == [("port_removed", "mlx5_1/1")]
    assert node.ports.get(device_name="mlx5_1").link_state == LinkState.DOWN


def test_it_records_a_host_fact_that_changed_but_not_one_first_learned(node):
    apply_inventory(node, inventory(node, [], [], driver_version="550.54.15"))

    first_cuda = apply_inventory(node, inventory(node, [], [], driver_version="550.54.15", cuda_version="12.4"))
    upgrade = apply_inventory(node, inventory(node, [], [], driver_version="560.35.03", cuda_version="12.6"))

    assert first_cuda == []
    assert [(c.kind, c.subject, c.detail) for c in upgrade] == [
        ("host_changed", "host", {"cuda_version": ["12.4", "12.6"], "driver_version": ["550.54.15", "560.35.03"]})
    ]
    assert NodeAgent.objects.get(node=node).host["driver_version"] == "560.35.03"


def test_it_writes_nothing_for_an_unchanged_report(node, django_assert_num_queries):
    report = inventory(node, [gpu(i) for i in range(4)], [port("mlx5_0"), port("mlx5_1")])
    apply_inventory(node, report)

    with django_assert_num_queries(1):  # the agent row's last report, read: no lock, no transaction, no writes
        assert apply_inventory(node, report) == []


def test_it_follows_a_gpu_moved_to_another_node(node):
    other = Node.objects.create(hostname="gpu-0200", cluster=node.cluster, node_type=node.node_type)
    apply_inventory(other, inventory(other, [gpu(0, UUIDS[7])], []))

    found = apply_inventory(node, inventory(node, [gpu(0, UUIDS[7])], []))

    assert [(c.node.hostname, c.kind, c.subject, c.detail) for c in found if c.subject == "gpu0"] == [
        ("gpu-0200", "gpu_removed", "gpu0", {"index": 0, "uuid": UUIDS[7], "moved_to": "gpu-0100/gpu0"}),
        (
            "gpu-0100",
            "gpu_added",
            "gpu0",
            {"index": 0, "uuid": UUIDS[7], "model": "NVIDIA H100 80GB HBM3", "moved_from": "gpu-0200/gpu0"},
        ),
    ]
    left_behind = Gpu.objects.get(node=other, index=0)
    assert (left_behind.uuid, left_behind.state) == (vacant_uuid(left_behind.pk), GpuState.MISSING)
    assert Gpu.objects.get(uuid=UUIDS[7]).node == node


def test_it_handles_two_gpus_trading_slots(node):
    apply_inventory(node, inventory(node, [gpu(0), gpu(1)], []))

    found = apply_inventory(node, inventory(node, [gpu(0, UUIDS[1]), gpu(1, UUIDS[0])], []))

    assert [(c.kind, c.detail["old_uuid"], c.detail["new_uuid"]) for c in found] == [
        ("gpu_swapped", UUIDS[0], UUIDS[1]),
        ("gpu_swapped", UUIDS[1], UUIDS[0]),
    ]
    assert list(node.gpus.values_list("index", "uuid")) == [(0, UUIDS[1]), (1, UUIDS[0])]


@pytest.mark.parametrize(
    ("report", "message"),
    [
        ([gpu(0, pci_bus_id="slot 4")], "gpus[1].pci_bus_id: Not a PCI bus id (0000:18:00.0)."),
        ([gpu(0, name="N" * 100)], "gpus[1].name: Ensure this value has at most 64 characters (it has 100)."),
        ([gpu(0), gpu(0, UUIDS[5])], "gpus[].index: reported more than once: 0."),
        ([gpu(0), gpu(2, UUIDS[0])], f"gpus[].uuid: reported more than once: {UUIDS[0].upper()}."),
    ],
)
def test_it_refuses_a_report_it_cannot_store_and_writes_nothing(node, report, message):
    with pytest.raises(protocol.ProtocolError) as refused:
        apply_inventory(node, inventory(node, [gpu(1), *report], []))

    assert (refused.value.code, refused.value.message) == ("invalid", message)
    assert not node.gpus.exists()
    assert not DiscoveryChange.objects.exists()
    assert NodeAgent.objects.filter(node=node, inventory__isnull=False).count() == 0


def test_it_derives_nvlinks_between_gpus_wired_to_each_other(node):
    # Two pairs bridged directly (0-1 with 4 links, one of them down; 2-3 with 4), as on PCIe cards with NVLink bridges.
    def bridged(index: int, peer: int, active: tuple[bool, ...]) -> protocol.GpuInfo:
        peer_bus = f"0000:{0x18 + peer:02x}:00.0"
        links = [protocol.NvLinkPeer(link=i, active=a, peer_pci_bus_id=peer_bus) for i, a in enumerate(active)]
        return gpu(index, nvlinks=links)

    report = [bridged(0, 1, (True, True, True, False)), bridged(1, 0, (True, True, True, False))]
    report += [bridged(2, 3, (True,) * 4), bridged(3, 2, (True,) * 4)]

    apply_inventory(node, inventory(node, report, []))

    links = NvLink.objects.filter(_node=node).order_by("gpu_a__index")
    assert [(n.gpu_a.index, n.gpu_b.index, n.lanes, n.bandwidth_gbs, n.link_state) for n in links] == [
        (0, 1, 4, 900, LinkState.DOWN),
        (2, 3, 4, 900, LinkState.ACTIVE),
    ]


def test_it_leaves_nvlinks_alone_when_every_peer_is_an_nvswitch(node):
    switch_peers = [
        protocol.NvLinkPeer(link=i, active=True, peer_pci_bus_id=f"0000:{0xA0 + i:02x}:00.0") for i in range(18)
    ]

    apply_inventory(node, inventory(node, [gpu(i, nvlinks=switch_peers) for i in range(4)], []))

    assert not NvLink.objects.filter(_node=node).exists()


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_it_applies_an_inventory_sent_over_the_socket(connect_agent):
    node, credential = await in_db(enrolled_node)("gpu-0300")
    old_uuid = await in_db(lambda: Gpu.objects.get(node=node, index=5).uuid)()
    agent = await connect_agent(credential, "gpu-0300")
    await agent.hello()
    reported = [gpu(i) for i in range(7)]  # slot 5 holds a new GPU, slot 7 is gone

    await agent.send(inventory(node, reported, [port("mlx5_0"), port("mlx5_1")], driver_version="550.54.15"))

    found = await eventually(lambda: changes(node))
    assert [kind for kind, _ in found] == ["gpu_swapped"] * 7 + ["gpu_removed"]
    swapped = await in_db(DiscoveryChange.objects.get)(node=node, subject="gpu5")
    assert (swapped.detail["old_uuid"], swapped.detail["new_uuid"]) == (old_uuid, UUIDS[5])
    assert await in_db(lambda: Gpu.objects.get(node=node, index=7).state)() == GpuState.MISSING
    assert await eventually(lambda: NetworkPort.objects.filter(node=node, link_state=LinkState.ACTIVE).count() == 2)


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_telemetry_is_acked_while_the_nodes_inventory_is_still_being_applied(connect_agent, monkeypatch):
    """A fleet's first inventories queue on their thread: a node's telemetry does not wait behind its own."""
    node, credential = await in_db(enrolled_node)("gpu-0301")
    applying, release = threading.Event(), threading.Event()

    def slow_apply(reports: list[tuple[Node, protocol.Inventory]]) -> list[Outcome]:
        applying.set()
        release.wait(timeout=10)
        return apply_inventories(reports)

    monkeypatch.setattr(consumers.inventories, "function", slow_apply)
    agent = await connect_agent(credential, "gpu-0301")
    await agent.hello()
    await agent.send(inventory(node, [gpu(i) for i in range(7)], []))
    assert await asyncio.to_thread(applying.wait, 5)

    assert (await agent.roundtrip()).seq == 1  # stored and acked, the inventory still under way
    assert await in_db(changes)(node) == []
    release.set()
    found = await eventually(lambda: changes(node))
    assert [kind for kind, _ in found] == ["gpu_swapped"] * 7 + ["gpu_removed"] + ["port_removed"] * 2
