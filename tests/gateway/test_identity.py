"""A credential speaks for its own node's hardware only: an inventory claiming a GPU UUID or serial, or
an HCA port GUID, that another online node still reports is refused whole, and the other node's rows
stay as they were; a GPU that really moved (its old node reports it no more, or is not online) is
followed as before."""

import pytest

from agents import protocol
from apps.accounts.models import AuditLogEntry
from apps.failures.choices import FailureKind
from apps.failures.models import Failure
from apps.gateway.discovery import apply_inventory
from apps.gateway.identity import IdentityConflict
from apps.gateway.models import DiscoveryChange, GatewayCounter
from apps.inventory.choices import GpuState, Liveness
from apps.inventory.models import Gpu, NetworkPort, Node
from tests import factories
from tests.gateway.conftest import enrolled_node, eventually, in_db

UUIDS = [f"GPU-{i:08x}-0000-4000-8000-{i:012x}" for i in range(1, 20)]
GUIDS = [f"b859:9f03:0000:{i:04x}" for i in range(1, 20)]


def gpu(index: int, uuid: str, serial: str | None = None) -> protocol.GpuInfo:
    return protocol.GpuInfo(index=index, uuid=uuid, name="NVIDIA H100 80GB HBM3", serial=serial)


def port(device: str, guid: str) -> protocol.PortInfo:
    return protocol.PortInfo(device=device, port=1, kind="infiniband", rate_gbps=400, state="active", guid=guid)


def report(node: Node, gpus: list[protocol.GpuInfo], ports: list[protocol.PortInfo] = ()) -> protocol.Inventory:
    return protocol.Inventory(host=protocol.HostFacts(hostname=node.hostname), gpus=gpus, ports=list(ports))


def two_nodes(holder_liveness: str = Liveness.ONLINE) -> tuple[Node, Node]:
    """A holder that reported GPUs UUIDS[0..1] (serials S0, S1) and HCA GUIDS[0], and a claimant."""
    cluster, node_type = factories.cluster(), factories.node_type(nics=1, gpus=2)
    holder = Node.objects.create(hostname="gpu-holder", cluster=cluster, node_type=node_type)
    claimant = Node.objects.create(hostname="gpu-claimant", cluster=cluster, node_type=node_type)
    apply_inventory(
        holder, report(holder, [gpu(0, UUIDS[0], "S0"), gpu(1, UUIDS[1], "S1")], [port("mlx5_0", GUIDS[0])])
    )
    Node.objects.filter(pk=holder.pk).update(liveness=holder_liveness)
    return holder, claimant


def holders_rows(holder: Node) -> list[tuple[int, str, str, str]]:
    return list(holder.gpus.order_by("index").values_list("index", "uuid", "serial", "state"))


CLAIMS = {  # what the claimant reports: the refusal's message names it
    "a GPU UUID": (
        lambda: [gpu(0, UUIDS[1], "S9")],
        f"GPU UUID {UUIDS[1]} (gpu0), which gpu-holder reports as gpu1",
    ),
    "a GPU serial": (lambda: [gpu(0, UUIDS[9], "S0")], "GPU serial S0 (gpu0), which gpu-holder reports as gpu0"),
}


@pytest.mark.django_db
@pytest.mark.parametrize(("claimed", "named"), CLAIMS.values(), ids=CLAIMS.keys())
def test_a_gpu_another_online_node_reports_is_refused_and_nothing_changes(claimed, named):
    holder, claimant = two_nodes()
    before, changes = holders_rows(holder), DiscoveryChange.objects.count()

    with pytest.raises(IdentityConflict) as refused:
        apply_inventory(claimant, report(claimant, claimed()))

    assert refused.value.code == "forbidden"
    assert named in refused.value.message
    assert holders_rows(holder) == before
    assert not claimant.gpus.exists()
    assert DiscoveryChange.objects.count() == changes


@pytest.mark.django_db
def test_an_hca_port_guid_another_online_node_reports_is_refused():
    _, claimant = two_nodes()

    with pytest.raises(IdentityConflict) as refused:
        apply_inventory(claimant, report(claimant, [gpu(0, UUIDS[9])], [port("mlx5_3", GUIDS[0])]))

    assert [str(claim) for claim in refused.value.claims] == [
        f"HCA port GUID {GUIDS[0]} (mlx5_3/1), which gpu-holder reports as mlx5_0/1"
    ]
    assert not NetworkPort.objects.filter(node=claimant, guid=GUIDS[0]).exists()


@pytest.mark.django_db
def test_a_gpu_its_old_node_reports_no_more_moves_though_that_node_is_online():
    holder, claimant = two_nodes()
    apply_inventory(holder, report(holder, [gpu(0, UUIDS[0], "S0")], [port("mlx5_0", GUIDS[0])]))  # gpu1 left

    apply_inventory(claimant, report(claimant, [gpu(0, UUIDS[1], "S1")]))

    assert Gpu.objects.get(uuid=UUIDS[1]).node == claimant


@pytest.mark.django_db
@pytest.mark.parametrize("liveness", [Liveness.UNREACHABLE, Liveness.UNKNOWN])
def test_hardware_of_a_node_that_is_not_online_moves(liveness):
    _, claimant = two_nodes(liveness)

    apply_inventory(claimant, report(claimant, [gpu(0, UUIDS[0], "S0")], [port("mlx5_0", GUIDS[0])]))

    assert Gpu.objects.get(uuid=UUIDS[0]).node == claimant
    assert NetworkPort.objects.filter(node=claimant, guid=GUIDS[0]).exists()


@pytest.mark.django_db
def test_an_hca_its_old_node_reports_no_more_moves():
    holder, claimant = two_nodes()
    apply_inventory(holder, report(holder, [gpu(0, UUIDS[0], "S0"), gpu(1, UUIDS[1], "S1")]))  # the HCA left

    apply_inventory(claimant, report(claimant, [gpu(0, UUIDS[9])], [port("mlx5_0", GUIDS[0])]))

    assert NetworkPort.objects.filter(node=claimant, guid=GUIDS[0]).exists()


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_node_claiming_another_online_nodes_gpus_is_refused_audited_and_both_get_a_failure(connect_agent):
    holder, _ = await in_db(enrolled_node)("gpu-victim")
    await in_db(lambda: Node.objects.filter(pk=holder.pk).update(liveness=Liveness.ONLINE))()
    victims = await in_db(lambda: list(holder.gpus.order_by("index").values_list("index", "uuid", "state")))()
    node, credential = await in_db(enrolled_node)("gpu-thief")
    agent = await connect_agent(credential, "gpu-thief")
    await agent.hello()

    await agent.send(report(node, [gpu(index, uuid) for index, uuid, _ in victims]))

    reply = await agent.receive()
    assert (reply.code, reply.seq) == ("forbidden", None)
    assert reply.message.startswith(f"Refused this inventory, which claims GPU UUID {victims[0][1]} (gpu0)")
    assert (await agent.roundtrip()).seq == 1  # the socket goes on
    assert await in_db(lambda: list(holder.gpus.order_by("index").values_list("index", "uuid", "state")))() == victims
    assert await in_db(lambda: all(state == GpuState.HEALTHY for *_, state in victims))()
    assert not await in_db(DiscoveryChange.objects.filter(node=holder).exists)()
    entry = await in_db(AuditLogEntry.objects.get)(action="agent.identity_conflict")
    assert (entry.actor, entry.object_id, len(entry.detail["claims"])) == ("agent:gpu-thief", str(node.pk), 8)
    failures = await in_db(
        lambda: sorted(Failure.objects.filter(kind=FailureKind.IDENTITY).values_list("node__hostname", "title"))
    )()
    assert failures == [("gpu-thief", "Duplicate GPU identity"), ("gpu-victim", "Duplicate GPU identity")]
    counter = await eventually(lambda: GatewayCounter.objects.filter(node=node, code="identity_conflict").first())
    assert counter.count == 1
