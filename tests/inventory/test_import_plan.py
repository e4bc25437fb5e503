"""Planning an import is a pure function of the document and the stored state: these tests build the
stored rows in memory and run without a database (pytest-django refuses any query here)."""

from decimal import Decimal

import pytest

from apps.inventory.choices import GpuState, LinkState, PortKind, SwitchTier
from apps.inventory.importer import ImportFailed
from apps.inventory.importer.diff import Change
from apps.inventory.importer.plan import plan_import
from apps.inventory.importer.schema import convert_document
from apps.inventory.importer.stored import StoredState
from apps.inventory.models.clusters import Cluster, NodeType, PortTemplate, Rack
from apps.inventory.models.fabric import Fabric, Link, LinkTermination, Switch, SwitchPort
from apps.inventory.models.nodes import Gpu, NetworkPort, Node
from tests.inventory.import_documents import UUIDS, gpu_node, small_document


def two_stored_nodes() -> StoredState:
    """gpu-a and gpu-b as small_document() would have stored them (no links or NVLinks yet)."""
    cluster = Cluster(pk=1, name="c1", site="lab")
    type_record = small_document()["node_types"][0]
    node_type = NodeType(
        pk=1,
        **{name: value for name, value in type_record.items() if name not in ("port_templates", "peak_bf16_tflops")},
        peak_bf16_tflops=Decimal(str(type_record["peak_bf16_tflops"])),
    )
    rack = Rack(pk=1, cluster=cluster, name="r01")
    fabric = Fabric(pk=1, name="ib", cluster=cluster, kind="infiniband", topology="fat_tree")
    leaf = Switch(pk=1, name="leaf-01", fabric=fabric, tier=SwitchTier.LEAF)
    stored = StoredState(
        clusters={"c1": cluster},
        node_types={"hgx-2g": node_type},
        templates={
            "hgx-2g": {
                (f"mlx5_{i}", 1): PortTemplate(
                    pk=1 + i, node_type=node_type, device_name=f"mlx5_{i}", kind=PortKind.INFINIBAND, rate_gbps=400
                )
                for i in range(2)
            }
        },
        racks={("c1", "r01"): rack},
        fabrics={"ib": fabric},
        switches={"leaf-01": leaf},
        switch_ports={
            ("leaf-01", name): SwitchPort(pk=pk, switch=leaf, name=name, rate_gbps=400)
            for pk, name in ((1, "p1"), (9, "p9"))
        },
    )
    for n, record in enumerate([gpu_node("gpu-a", 0), gpu_node("gpu-b", 2)]):
        node = Node(pk=10 + n, hostname=record["hostname"], cluster=cluster, node_type=node_type, rack=rack)
        stored.nodes[node.hostname] = node
        for i, port in enumerate(record["ports"] + [{"device_name": "mlx5_1"}]):
            stored.ports[(node.hostname, port["device_name"], 1)] = NetworkPort(
                pk=20 + 2 * n + i,
                node=node,
                device_name=port["device_name"],
                port_num=1,
                kind=PortKind.INFINIBAND,
                rate_gbps=400,
                link_state=port.get("link_state", LinkState.UNKNOWN),
                guid=port.get("guid", ""),
            )
        for gpu in record["gpus"]:
            stored.gpus[gpu["uuid"]] = Gpu(
                pk=100 + 2 * n + gpu["index"],
                uuid=gpu["uuid"],
                node=node,
                index=gpu["index"],
                model=node_type.gpu_model,
                serial=gpu["serial"],
                state=GpuState.HEALTHY,
            )
    return stored


def nodes_document() -> dict:
    return {"version": 1, "nodes": [gpu_node("gpu-a", 0), gpu_node("gpu-b", 2)]}


def plan(document: dict, stored: StoredState):
    return plan_import(convert_document(document), stored, dry_run=False)


def issues(document: dict, stored: StoredState) -> list[str]:
    with pytest.raises(ImportFailed) as failed:
        plan(document, stored)
    return [str(issue) for issue in failed.value.issues]


def test_it_plans_a_whole_document_over_an_empty_database():
    result = plan(small_document(), StoredState()).result

    assert result.created == {
        "cluster": 1,
        "nodetype": 1,
        "porttemplate": 2,
        "rack": 1,
        "fabric": 1,
        "switch": 1,
        "node": 2,
        "networkport": 4,
        "gpu": 4,
        "switchport": 4,
        "link": 4,
        "nvlink": 2,
    }
    assert (result.updated, result.unchanged) == ({}, {})


def test_what_the_database_has_is_unchanged_and_a_difference_is_an_update():
    stored = two_stored_nodes()
    document = nodes_document()
    document["nodes"][0]["gpus"][0]["state"] = "degraded"

    made = plan(document, stored)

    assert made.result.changes == [Change("gpu", UUIDS[0], "update", {"state": ["healthy", "degraded"]})]
    assert made.updates[Gpu] == [(stored.gpus[UUIDS[0]], ["state"])]
    assert made.result.unchanged == {"node": 2, "networkport": 2, "gpu": 3}
    assert not any(made.creates.values())


def registries(stored: StoredState) -> dict[str, dict]:
    """Each registry's entries (a node type's port templates too), as they are now."""
    return {
        name: {key: dict(value) if isinstance(value, dict) else value for key, value in registry.items()}
        for name, registry in vars(stored).items()
        if isinstance(registry, dict)
    }


def test_it_leaves_the_stored_registries_as_they_were_loaded():
    stored = two_stored_nodes()
    before = registries(stored)
    document = nodes_document()
    document["nodes"].append(gpu_node("gpu-c", 4))
    document["node_types"] = [{**small_document()["node_types"][0]}]
    document["node_types"][0]["port_templates"].append({"device_name": "mlx5_2", "kind": "ethernet", "rate_gbps": 100})

    made = plan(document, stored)

    assert made.result.created["node"] == 1
    assert made.result.created["porttemplate"] == 1
    assert registries(stored) == before


def test_a_gpu_may_move_between_nodes_of_the_file_unless_the_stored_state_says_it_has_nvlinks():
    document = nodes_document()
    a_gpus, b_gpus = document["nodes"][0]["gpus"], document["nodes"][1]["gpus"]
    a_gpus[1], b_gpus[0] = {**b_gpus[0], "index": 1}, {**a_gpus[1], "index": 0}

    moved = plan(document, two_stored_nodes())
    assert [(change.key, change.fields) for change in moved.result.changes] == [
        (UUIDS[2], {"node": ["gpu-b", "gpu-a"], "index": [0, 1]}),
        (UUIDS[1], {"node": ["gpu-a", "gpu-b"], "index": [1, 0]}),
    ]

    stored = two_stored_nodes()
    stored.gpus_with_nvlinks = {stored.gpus[UUIDS[2]].pk}
    assert issues(document, stored) == [
        f"nodes[0] (gpu-a).gpus[1].uuid: {UUIDS[2]} would move from gpu-b to gpu-a, but it has NVLinks on gpu-b; "
        "an import never deletes them: delete them first if the GPU really moved"
    ]


def test_a_port_the_stored_state_cables_elsewhere_is_not_recabled():
    stored = two_stored_nodes()
    port, p1 = stored.ports[("gpu-a", "mlx5_0", 1)], stored.switch_ports[("leaf-01", "p1")]
    link = Link(pk=7)
    ends = [
        LinkTermination(pk=70, link=link, end="A", network_port=port),
        LinkTermination(pk=71, link=link, end="B", switch_port=p1),
    ]
    stored.terminations = {("network", port.pk): ends[0], ("switch", p1.pk): ends[1]}
    stored.link_ends = {link.pk: ends}
    cable = {"a": {"node": "gpu-a", "port": "mlx5_0"}, "b": {"switch": "leaf-01", "port": "p9"}}
    document = {"version": 1, "links": [cable]}

    assert issues(document, stored) == [
        "links[0] (gpu-a:mlx5_0 ↔ leaf-01:p9).a: gpu-a:mlx5_0/1 is cabled to leaf-01:p1 in the database (link 7); "
        "an import never re-cables: delete link 7 first if the cable really moved"
    ]

    document["links"][0]["b"]["port"] = "p1"
    assert plan(document, stored).result.unchanged == {"link": 1}
