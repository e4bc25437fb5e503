"""Cabling, derived paths, NVLink matrices and the fabric's theoretical bus bandwidth.

Cases are numbered like NetBox's cable-path tests, so a failure names the topology it broke.
"""

import pytest

from apps.inventory.bandwidth import theoretical_busbw
from apps.inventory.choices import LinkState, SwitchTier
from apps.inventory.models import Link, NetworkPort, Node, NvLink, Switch, SwitchPort
from apps.inventory.models.fabric import trace_port
from apps.inventory.topology import nvlink_matrix, trace_hops
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture
def h100():
    return factories.cluster(), factories.node_type(nics=8)


@pytest.fixture
def two_leaves(h100):
    """Two leaves of one fat-tree, two nodes under each, every node with NVLink NV18."""
    cluster, nt = h100
    fabric = factories.fabric(cluster)
    leaves = [factories.switch(fabric, SwitchTier.LEAF) for _ in range(2)]
    spine = factories.switch(fabric, SwitchTier.SPINE)
    nodes = []
    for leaf in leaves:
        for _ in range(2):
            node = factories.node(cluster, nt)
            factories.nvlink_mesh(node)
            factories.cable_node_to_leaf(node, leaf)
            nodes.append(node)
    return {"fabric": fabric, "leaves": leaves, "spine": spine, "nodes": nodes}


def test_101_cabling_a_port_records_its_peer_on_both_ends(h100):
    cluster, nt = h100
    node = factories.node(cluster, nt)
    leaf = factories.switch(factories.fabric(cluster))
    port = node.ports.get(device_name="mlx5_0")
    switch_port = SwitchPort.objects.create(switch=leaf, name="p1", rate_gbps=400)
    link = factories.cable(port, switch_port)
    port.refresh_from_db()
    switch_port.refresh_from_db()
    assert (port._link_id, port._peer_switch_port_id) == (link.pk, switch_port.pk)
    assert (switch_port._link_id, switch_port._peer_network_port_id) == (link.pk, port.pk)


def test_102_deleting_a_link_clears_both_ends(h100):
    cluster, nt = h100
    node = factories.node(cluster, nt)
    leaf = factories.switch(factories.fabric(cluster))
    port = node.ports.get(device_name="mlx5_0")
    switch_port = SwitchPort.objects.create(switch=leaf, name="p1", rate_gbps=400)
    factories.cable(port, switch_port).delete()
    port.refresh_from_db()
    switch_port.refresh_from_db()
    assert (port._link_id, port._peer_switch_port_id, port._peer_network_port_id) == (None, None, None)
    assert (switch_port._link_id, switch_port._peer_network_port_id) == (None, None)


def test_103_a_port_terminates_at_most_one_link(h100):
    from django.db import IntegrityError, transaction

    cluster, nt = h100
    node = factories.node(cluster, nt)
    leaf = factories.switch(factories.fabric(cluster))
    port = node.ports.get(device_name="mlx5_0")
    factories.cable(port, SwitchPort.objects.create(switch=leaf, name="p1", rate_gbps=400))
    with pytest.raises(IntegrityError), transaction.atomic():
        factories.cable(port, SwitchPort.objects.create(switch=leaf, name="p2", rate_gbps=400))


def test_104_nodes_under_a_leaf_and_their_siblings(two_leaves):
    first_leaf, second_leaf = two_leaves["leaves"]
    a, b, c, d = two_leaves["nodes"]
    assert set(Node.objects.under_switch(first_leaf)) == {a, b}
    assert set(Node.objects.under_switch(second_leaf)) == {c, d}
    assert list(a.siblings_under_leaf()) == [b]
    assert list(Switch.objects.leaves_of(a)) == [first_leaf]


def test_105_nvlink_matrix_reads_like_nvidia_smi_topo(two_leaves):
    node = two_leaves["nodes"][0]
    matrix = nvlink_matrix(node)
    assert matrix["gpu_indices"] == list(range(8))
    assert matrix["labels"][0] == ["X"] + ["NV18"] * 7
    assert matrix["bandwidth_gbs"][3][5] == 900
    link = NvLink.objects.get(gpu_a__node=node, gpu_a__index=3, gpu_b__index=5)
    link.link_state = LinkState.DOWN
    link.save()
    assert nvlink_matrix(node)["bandwidth_gbs"][5][3] == 0
    assert nvlink_matrix(node)["labels"][5][3] == "NV18"  # the lanes are still cabled


def test_106_nvlink_is_stored_as_an_ordered_pair_of_one_node(h100):
    from django.core.exceptions import ValidationError

    cluster, nt = h100
    first, second = factories.node(cluster, nt), factories.node(cluster, nt)
    gpu0, gpu1 = first.gpus.get(index=0), first.gpus.get(index=1)
    link = NvLink.objects.create(gpu_a=gpu1, gpu_b=gpu0, lanes=18, bandwidth_gbs=900)
    assert (link.gpu_a_id, link.gpu_b_id, link._node_id) == (gpu0.pk, gpu1.pk, first.pk)
    with pytest.raises(ValidationError, match="GPUs of one node"):
        NvLink(gpu_a=gpu0, gpu_b=second.gpus.get(index=0), lanes=18, bandwidth_gbs=900).clean()


def test_107_trace_goes_from_node_port_to_leaf_and_its_uplinks(two_leaves):
    leaf, spine = two_leaves["leaves"][0], two_leaves["spine"]
    factories.uplink(leaf, spine, count=2)
    port = two_leaves["nodes"][0].ports.get(device_name="mlx5_3")
    trace = trace_port(port)
    assert (trace.switch_port.switch, trace.peer_port) == (leaf, None)
    assert {uplink._peer_switch_port.switch for uplink in trace.uplinks} == {spine}
    hops = trace_hops(port)
    assert [h["kind"] for h in hops] == ["network_port", "link", "switch_port", "switch", "uplink", "uplink"]
    assert hops[3]["name"] == leaf.name
    assert all(spine.name in h["name"] for h in hops[4:])


def test_108_an_uncabled_port_traces_to_itself(h100):
    cluster, nt = h100
    port = factories.node(cluster, nt).ports.first()
    assert trace_port(port).link is None
    assert [h["kind"] for h in trace_hops(port)] == ["network_port"]


def test_109_gpus_no_nvlink_joins_read_sys(h100):
    cluster, nt = h100
    node = factories.node(cluster, nt)
    gpu0, gpu1 = node.gpus.order_by("index")[:2]
    NvLink.objects.create(gpu_a=gpu0, gpu_b=gpu1, lanes=12, bandwidth_gbs=600)

    grid = NvLink.objects.grid_of(node)
    assert (grid.lanes[0][1], grid.lanes[1][0], grid.lanes[0][2], grid.lanes[0][0]) == (12, 12, None, None)
    assert nvlink_matrix(node)["labels"][0][:3] == ["X", "NV12", "SYS"]


def test_110_a_port_cabled_to_another_node_traces_to_that_port(h100):
    cluster, nt = h100
    port = factories.node(cluster, nt).ports.get(device_name="mlx5_0")
    peer = factories.node(cluster, nt).ports.get(device_name="mlx5_0")
    factories.cable(port, peer)
    port.refresh_from_db()

    assert trace_port(port).peer_port == peer
    assert [(h["kind"], h["name"]) for h in trace_hops(port)] == [
        ("network_port", str(port)),
        ("link", f"link {port._link_id}"),
        ("network_port", str(peer)),
    ]


def test_111_the_api_serves_the_matrix_and_the_trace_as_nvidia_smi_and_a_person_read_them(api_client, two_leaves):
    leaf, spine, node = two_leaves["leaves"][0], two_leaves["spine"], two_leaves["nodes"][0]
    factories.uplink(leaf, spine, count=1)
    gpu3, gpu5 = node.gpus.get(index=3), node.gpus.get(index=5)
    NvLink.objects.filter(gpu_a=gpu3, gpu_b=gpu5).update(link_state=LinkState.DOWN)
    viewer = api_client("viewer")

    matrix = viewer.get(f"/api/v1/nodes/{node.pk}/nvlink-matrix").json()
    assert matrix["gpu_indices"] == list(range(8))
    assert matrix["lanes"][3] == [18, 18, 18, None, 18, 18, 18, 18]
    assert matrix["bandwidth_gbs"][3] == [900, 900, 900, None, 900, 0, 900, 900]
    assert matrix["labels"][3] == ["NV18", "NV18", "NV18", "X", "NV18", "NV18", "NV18", "NV18"]

    port = node.ports.get(device_name="mlx5_0")
    switch_port = port._peer_switch_port
    uplink = leaf.ports.get(_peer_switch_port__isnull=False)
    response = viewer.get(f"/api/v1/network-ports/{port.pk}/trace")
    assert response.json() == [
        {"kind": "network_port", "id": port.pk, "name": f"{node.hostname}:mlx5_0/1", "detail": "400 Gb/s, active"},
        {"kind": "link", "id": port._link_id, "name": f"link {port._link_id}", "detail": "connected"},
        {"kind": "switch_port", "id": switch_port.pk, "name": f"{leaf.name}:p1", "detail": "400 Gb/s"},
        {"kind": "switch", "id": leaf.pk, "name": leaf.name, "detail": f"leaf in {two_leaves['fabric'].name}"},
        {
            "kind": "uplink",
            "id": uplink.pk,
            "name": f"{leaf.name}:{uplink.name} → {spine.name}:{uplink._peer_switch_port.name}",
            "detail": "spine, 400 Gb/s",
        },
    ]


# Theoretical all-reduce bus bandwidth ------------------------------------------------------------


def test_201_one_node_is_bound_by_nvlink(two_leaves):
    estimate = theoretical_busbw(two_leaves["nodes"][:1])
    assert estimate.busbw_gbs == 450.0
    assert estimate.limited_by.startswith("NVLink on")


def test_202_nodes_under_one_leaf_move_eight_nics_worth(two_leaves):
    estimate = theoretical_busbw(two_leaves["nodes"][:2])
    assert estimate.busbw_gbs == 400.0  # 8 x 400 Gb/s = 400 GB/s, below NVLink's 450
    assert estimate.cross_leaf_source == "all nodes under one leaf"
    assert {n.active_nics for n in estimate.nodes} == {8}


def test_203_a_down_nic_costs_its_share(two_leaves):
    a, b = two_leaves["nodes"][:2]
    NetworkPort.objects.filter(node=b, device_name="mlx5_2").update(link_state=LinkState.DOWN)
    estimate = theoretical_busbw([a, b])
    assert estimate.busbw_gbs == 350.0
    assert f"network of {b.hostname} (7 of 8 NICs active" in estimate.limited_by


def test_204_the_slowest_nic_sets_every_ring(two_leaves):
    a, b = two_leaves["nodes"][:2]
    NetworkPort.objects.filter(node=a, device_name="mlx5_5").update(rate_gbps=200)
    assert theoretical_busbw([a, b]).busbw_gbs == 200.0


def test_204b_a_slower_extra_port_is_not_a_rail(h100, two_leaves):
    a, b = two_leaves["nodes"][:2]
    frontend = NetworkPort.objects.create(
        node=a, device_name="mlx5_8", kind="roce", rate_gbps=100, link_state=LinkState.ACTIVE
    )
    factories.cable(frontend, SwitchPort.objects.create(switch=two_leaves["leaves"][0], name="fe1", rate_gbps=100))
    assert theoretical_busbw([a, b]).busbw_gbs == 400.0


def test_205_crossing_leaves_scales_by_the_cabled_uplink_ratio(two_leaves):
    spine = two_leaves["spine"]
    for leaf in two_leaves["leaves"]:
        factories.uplink(leaf, spine, count=8)  # 16 downlinks of 400G, 8 uplinks: 2:1
    estimate = theoretical_busbw(two_leaves["nodes"])
    assert estimate.cross_leaf_factor == 0.5
    assert estimate.busbw_gbs == 200.0
    assert "uplinks 3200 Gb/s for 6400 Gb/s of downlinks" in estimate.limited_by


def test_206_without_cabled_uplinks_the_declared_oversubscription_applies(two_leaves):
    fabric = two_leaves["fabric"]
    fabric.oversubscription_ratio = 2
    fabric.save()
    estimate = theoretical_busbw(two_leaves["nodes"])
    assert estimate.busbw_gbs == 200.0
    assert "declared oversubscription 2.00:1" in estimate.cross_leaf_source


def test_207_a_node_with_no_cabled_nic_has_no_network(h100, two_leaves):
    cluster, nt = h100
    lonely = factories.node(cluster, nt)
    estimate = theoretical_busbw([two_leaves["nodes"][0], lonely])
    assert estimate.busbw_gbs == 0.0
    assert f"network of {lonely.hostname} (0 of 8 NICs active" in estimate.limited_by


def test_208_the_api_shows_the_figure_with_its_inputs(api_client, two_leaves):
    a, b = two_leaves["nodes"][:2]
    response = api_client("viewer").get(f"/api/v1/fabric/theoretical-busbw?hostname={a.hostname},{b.hostname}")
    assert response.status_code == 200
    body = response.json()
    assert body["busbw_gbs"] == 400.0
    assert {n["hostname"] for n in body["nodes"]} == {a.hostname, b.hostname}
    assert body["nodes"][0]["slowest_nic_gbps"] == 400


def test_208b_hostnames_may_be_repeated_comma_separated_or_padded(api_client, two_leaves):
    a, b, c = (node.hostname for node in two_leaves["nodes"][:3])
    query = f"hostname={a},%20{b},&hostname={c}&hostname="
    response = api_client("viewer").get(f"/api/v1/fabric/theoretical-busbw?{query}")
    assert response.status_code == 200, response.content
    assert {n["hostname"] for n in response.json()["nodes"]} == {a, b, c}


@pytest.mark.parametrize(
    ("query", "parameter", "message"),
    [
        ("hostname=nope", "hostname", "Unknown hostnames: nope."),
        ("", "hostname", "Give hostname=... (one or more) or cluster=<id>."),
        ("hostname=,", "hostname", "Give hostname=... (one or more) or cluster=<id>."),
        ("cluster=abc", "cluster", "A valid integer is required."),
        ("cluster=0", "cluster", "No cluster has id 0."),
        ("cluster={empty}", "cluster", "has no node in service; name the nodes with hostname=... instead."),
    ],
)
def test_209_the_api_explains_bad_queries_naming_the_parameter(api_client, two_leaves, query, parameter, message):
    empty = factories.cluster()
    response = api_client("viewer").get(f"/api/v1/fabric/theoretical-busbw?{query.format(empty=empty.pk)}")
    assert response.status_code == 400
    assert list(response.json()) == [parameter]
    assert message in response.json()[parameter][0]


def test_210_link_api_cables_and_refuses_a_busy_port(admin_api, h100):
    cluster, nt = h100
    node = factories.node(cluster, nt)
    leaf = factories.switch(factories.fabric(cluster))
    port = node.ports.get(device_name="mlx5_0")
    sp1 = SwitchPort.objects.create(switch=leaf, name="p1", rate_gbps=400)
    sp2 = SwitchPort.objects.create(switch=leaf, name="p2", rate_gbps=400)
    response = admin_api.post("/api/v1/links", {"a": {"network_port": port.pk}, "b": {"switch_port": sp1.pk}})
    assert response.status_code == 201, response.content
    assert response.json()["b"]["description"] == f"{leaf.name}:p1"
    refused = admin_api.post("/api/v1/links", {"a": {"network_port": port.pk}, "b": {"switch_port": sp2.pk}})
    assert refused.status_code == 400
    assert "already terminates link" in str(refused.json())
    assert Link.objects.count() == 1
    both = admin_api.post(
        "/api/v1/links", {"a": {"network_port": port.pk, "switch_port": sp2.pk}, "b": {"switch_port": sp2.pk}}
    )
    assert both.status_code == 400
    assert "exactly one" in str(both.json())
