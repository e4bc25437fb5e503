"""Inventory import: idempotent, all or nothing, every problem named by record and field, dry-run diff."""

import copy
import json
from io import StringIO
from pathlib import Path
from unittest import mock

import pytest
import yaml
from django.apps import apps
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection
from django.test.utils import CaptureQueriesContext

from apps.accounts.models import AuditLogEntry
from apps.inventory.bandwidth import theoretical_busbw
from apps.inventory.choices import GpuState, Lifecycle, SwitchTier
from apps.inventory.importer import ImportFailed, ImportResult, import_inventory, load_document
from apps.inventory.importer.schema import convert_document
from apps.inventory.importer.stored import load_stored_state
from apps.inventory.models import Gpu, Link, NetworkPort, Node, NodeTransition, Switch, SwitchPort
from apps.inventory.topology import nvlink_matrix
from tests import factories
from tests.inventory.import_documents import UUIDS, gpu_node, small_document

pytestmark = pytest.mark.django_db

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "inventory" / "h100-16node.yaml"


def run(document: dict, *, dry_run: bool = False) -> ImportResult:
    return import_inventory(copy.deepcopy(document), dry_run=dry_run, actor="tester")


def problems(document: object) -> list[str]:
    with pytest.raises(ImportFailed) as failure:
        import_inventory(document, actor="tester")
    return [str(issue) for issue in failure.value.issues]


def inventory_rows() -> dict[str, list[dict]]:
    """Every inventory row, for comparing the database before and after."""
    return {
        model._meta.model_name: list(model.objects.order_by("pk").values())
        for model in apps.get_app_config("inventory").get_models()
    }


def example() -> dict:
    return load_document(EXAMPLE.read_bytes(), "yaml")


# The example cluster -----------------------------------------------------------------------------


def test_the_example_is_a_16_node_128_gpu_non_blocking_fat_tree():
    result = run(example())

    assert result.created["node"] == 16
    assert Node.objects.count() == 16
    assert Gpu.objects.count() == 128
    assert set(Gpu.objects.values_list("model", flat=True)) == {"NVIDIA H100 80GB HBM3"}
    for node in Node.objects.all():
        labels = nvlink_matrix(node)["labels"]
        assert [labels[i][j] for i in range(8) for j in range(8) if i != j] == ["NV18"] * 56
    leaves = Switch.objects.filter(tier=SwitchTier.LEAF)
    assert [Node.objects.under_switch(leaf).count() for leaf in leaves] == [4, 4, 4, 4]
    assert [leaf.uplink_downlink_gbps() for leaf in leaves] == [(12_800, 12_800)] * 4
    estimate = theoretical_busbw(Node.objects.all())
    assert estimate.busbw_gbs == 400.0  # 8 NDR HCAs x 400 Gb/s per node, no oversubscription
    assert estimate.cross_leaf_factor == 1.0


def test_new_nodes_start_in_the_files_lifecycle_with_history():
    document = small_document()
    document["nodes"][1]["lifecycle"] = "burn_in"
    run(document)

    assert dict(Node.objects.values_list("hostname", "lifecycle")) == {"gpu-a": "new", "gpu-b": "burn_in"}
    transition = NodeTransition.objects.get(node__hostname="gpu-b")
    assert (transition.from_state, transition.to_state) == ("", Lifecycle.BURN_IN)
    assert (transition.actor, transition.reason) == ("tester", "inventory import")


def test_it_ignores_lifecycle_for_a_node_that_exists():
    run(small_document())
    node = Node.objects.get(hostname="gpu-a")
    node.transition(Lifecycle.QUARANTINED, actor="ops", reason="XID 79")
    document = small_document()
    document["nodes"][0]["lifecycle"] = "in_service"

    result = run(document)

    node.refresh_from_db()
    assert node.lifecycle == Lifecycle.QUARANTINED
    assert result.updated == {}
    assert NodeTransition.objects.filter(node=node).count() == 2


def test_new_nodes_get_their_node_types_ports_with_the_files_values():
    run(small_document())

    ports = NetworkPort.objects.filter(node__hostname="gpu-a").order_by("device_name")
    assert [(p.device_name, p.kind, p.rate_gbps, p.guid, p.link_state) for p in ports] == [
        ("mlx5_0", "infiniband", 400, "0xa088c20300000000", "active"),
        ("mlx5_1", "infiniband", 400, "", "unknown"),
    ]
    # Links keep the ports' derived columns, so "where does this port go" is one query.
    assert ports[0]._peer_switch_port.name == "p1"
    assert SwitchPort.objects.get(name="p1")._peer_network_port == ports[0]


def test_a_port_added_to_a_stored_node_comes_from_its_template_or_needs_kind_and_rate():
    run(small_document())
    document = small_document()
    document["node_types"][0]["port_templates"].append({"device_name": "mlx5_2", "kind": "roce", "rate_gbps": 200})
    document["nodes"][0]["ports"].append({"device_name": "mlx5_2", "mac": "a0:88:c2:00:00:02"})
    document["nodes"][1]["ports"].append({"device_name": "eth0", "mac": "a0:88:c2:00:00:03"})

    assert problems(document) == [
        "nodes[1] (gpu-b).ports[1]: eth0/1 is not a port of gpu-b or its node type hgx-2g; "
        "kind and rate_gbps are needed to add it"
    ]
    document["nodes"][1]["ports"][1].update(kind="ethernet", rate_gbps=100)
    run(document)

    assert NetworkPort.objects.get(node__hostname="gpu-a", device_name="mlx5_2").rate_gbps == 200
    # A template added later reaches only the stored nodes whose ports the file lists.
    assert sorted(NetworkPort.objects.filter(node__hostname="gpu-b").values_list("device_name", flat=True)) == [
        "eth0",
        "mlx5_0",
        "mlx5_1",
    ]


# Idempotency and dry runs ------------------------------------------------------------------------


def test_a_second_import_changes_nothing():
    first = run(example())
    before = inventory_rows()

    second = run(example())

    assert (second.created, second.updated, second.changes) == ({}, {}, [])
    assert sum(second.unchanged.values()) == sum(first.created.values()) - first.created["switchport"]
    assert inventory_rows() == before


def test_loading_what_the_database_has_costs_the_same_queries_for_2_nodes_as_for_16(django_assert_num_queries):
    run(example())
    whole, two_nodes = convert_document(example()), convert_document(example())
    two_nodes.nodes = two_nodes.nodes[:2]
    two_nodes.links = [link for link in two_nodes.links if {link.a.node, link.b.node} & {"gpu-001", "gpu-002"}]
    two_nodes.nvlinks = two_nodes.nvlinks[:2]
    with CaptureQueriesContext(connection) as loading_two:
        stored = load_stored_state(two_nodes)
    assert len(stored.nodes) == 2
    assert len(stored.terminations) == 2 * len(two_nodes.links)  # its links are stored: both ends were read

    with django_assert_num_queries(len(loading_two)):
        stored = load_stored_state(whole)
    assert len(stored.nodes) == 16
    assert len(stored.terminations) == 2 * len(whole.links)


def test_a_dry_run_shows_the_real_runs_diff_and_writes_nothing():
    dry = run(example(), dry_run=True)

    assert inventory_rows() == {name: [] for name in inventory_rows()}
    real = run(example())
    assert dry.as_dict() == {**real.as_dict(), "dry_run": True}
    assert dry.summary().startswith("Would create 1 cluster, 1 node type, 9 port templates, 4 racks")
    assert dry.summary().endswith("(dry run: nothing was written)")


def test_a_dry_run_lists_updates_with_old_and_new_values():
    run(small_document())
    document = small_document()
    document["node_types"][0]["port_templates"][0]["rate_gbps"] = 200
    document["nodes"][0]["ports"][0]["rate_gbps"] = 200
    document["nodes"][1]["gpus"][0].update(serial="9999", state="degraded")

    result = run(document, dry_run=True)

    assert [c.as_dict() for c in result.changes] == [
        {"model": "porttemplate", "key": "hgx-2g mlx5_0/1", "action": "update", "fields": {"rate_gbps": [400, 200]}},
        {"model": "networkport", "key": "gpu-a:mlx5_0/1", "action": "update", "fields": {"rate_gbps": [400, 200]}},
        {
            "model": "gpu",
            "key": UUIDS[2],
            "action": "update",
            "fields": {"serial": ["1652322002", "9999"], "state": ["healthy", "degraded"]},
        },
    ]
    assert result.render()[2] == f"~ gpu {UUIDS[2]} serial: 1652322002 -> 9999, state: healthy -> degraded"
    assert Gpu.objects.get(uuid=UUIDS[2]).state == GpuState.HEALTHY


def test_an_update_is_written_and_leaves_unmentioned_fields_alone():
    run(small_document())
    Gpu.objects.filter(uuid=UUIDS[0]).update(pci_bus_id="0000:18:00.0")
    document = small_document()
    document["nodes"][0]["gpus"][0]["serial"] = "1652322999"

    result = run(document)

    gpu = Gpu.objects.get(uuid=UUIDS[0])
    assert (gpu.serial, gpu.pci_bus_id) == ("1652322999", "0000:18:00.0")
    assert result.updated == {"gpu": 1}


def test_it_never_deletes_what_the_file_leaves_out():
    run(small_document())
    document = small_document()
    del document["nodes"][1]
    document["links"] = document["links"][:2]
    document["nvlinks"] = document["nvlinks"][:1]

    result = run(document)

    assert Node.objects.filter(hostname="gpu-b").exists()
    assert Link.objects.count() == 4
    assert (result.created, result.updated) == ({}, {})


def test_it_swaps_the_indices_of_two_gpus():
    run(small_document())
    document = small_document()
    gpus = document["nodes"][0]["gpus"]
    gpus[0]["index"], gpus[1]["index"] = 1, 0

    run(document)

    assert dict(Gpu.objects.filter(node__hostname="gpu-a").values_list("uuid", "index")) == {UUIDS[0]: 1, UUIDS[1]: 0}


def test_a_gpu_may_move_between_nodes_the_file_describes():
    document = small_document()
    document["nvlinks"] = []
    run(document)
    a_gpus, b_gpus = document["nodes"][0]["gpus"], document["nodes"][1]["gpus"]
    a_gpus[1], b_gpus[0] = {**b_gpus[0], "index": 1}, {**a_gpus[1], "index": 0}

    result = run(document)

    assert Gpu.objects.get(uuid=UUIDS[2]).node.hostname == "gpu-a"
    assert Gpu.objects.get(uuid=UUIDS[1]).node.hostname == "gpu-b"
    assert [(c.key, c.fields) for c in result.changes] == [
        (UUIDS[2], {"node": ["gpu-b", "gpu-a"], "index": [0, 1]}),
        (UUIDS[1], {"node": ["gpu-a", "gpu-b"], "index": [1, 0]}),
    ]


def test_a_gpu_with_nvlinks_does_not_move():
    run(small_document())
    document = small_document()
    a_gpus, b_gpus = document["nodes"][0]["gpus"], document["nodes"][1]["gpus"]
    a_gpus[1], b_gpus[0] = {**b_gpus[0], "index": 1}, {**a_gpus[1], "index": 0}

    assert problems(document) == [
        f"nodes[0] (gpu-a).gpus[1].uuid: {UUIDS[2]} would move from gpu-b to gpu-a, but it has NVLinks on gpu-b; "
        "an import never deletes them: delete them first if the GPU really moved",
        f"nodes[1] (gpu-b).gpus[0].uuid: {UUIDS[1]} would move from gpu-a to gpu-b, but it has NVLinks on gpu-a; "
        "an import never deletes them: delete them first if the GPU really moved",
    ]


# All or nothing ----------------------------------------------------------------------------------


def test_a_bad_last_record_writes_nothing():
    document = example()
    document["nvlinks"].append({"node": "gpu-017", "mesh": True, "lanes": 18, "bandwidth_gbs": 900})

    assert problems(document) == [
        "nvlinks[16] (gpu-017).node: no node 'gpu-017' in this file or the database (did you mean 'gpu-016'?)"
    ]
    assert inventory_rows() == {name: [] for name in inventory_rows()}


def test_a_database_refusal_halfway_rolls_everything_back():
    with (
        mock.patch("apps.inventory.importer.apply._terminate", side_effect=IntegrityError("UNIQUE failed")),
        pytest.raises(ImportFailed, match="1 problem"),
    ):
        run(small_document())
    assert inventory_rows() == {name: [] for name in inventory_rows()}


def test_a_concurrent_writer_that_takes_a_hostname_is_named_without_the_databases_words(caplog):
    save = Node.save

    def lose_the_race(node, *args, **kwargs):
        if node.hostname == "gpu-b" and node.pk is None:  # another writer creates it first
            save(Node(hostname="gpu-b", cluster=node.cluster, node_type=node.node_type))
        save(node, *args, **kwargs)

    with mock.patch.object(Node, "save", lose_the_race), caplog.at_level("WARNING", "apps.inventory.importer"):
        issues = problems(small_document())

    assert issues == [
        "document: the database refused the import, nothing was written: Another node already has this hostname."
    ]
    assert not Node.objects.exists()  # nothing was written (the stand-in writer wrote inside the import's transaction)
    assert "inventory_node" in caplog.text  # the database's own words are in the log


# Clear errors ------------------------------------------------------------------------------------


def test_it_reports_every_problem_not_just_the_first():
    document = small_document()
    document["clusters"][0]["sight"] = "lab"
    document["nodes"][1]["gpus"][1]["state"] = "broken"
    document["switches"][0]["tier"] = "top"

    assert problems(document) == [
        "clusters[0] (c1).sight: unknown field (did you mean 'site'?)",
        "switches[0] (leaf-01).tier: 'top' is not one of: leaf, spine, core",
        "nodes[1] (gpu-b).gpus[1].state: 'broken' is not one of: healthy, degraded, failed, missing",
    ]


def test_unknown_fields_and_sections_name_what_is_known():
    document = small_document()
    document["nodez"] = []
    document["nodes"][0]["gpus"][0]["colour"] = "green"

    assert problems(document) == [
        "nodez: unknown section (did you mean 'nodes'?)",
        "nodes[0] (gpu-a).gpus[0].colour: unknown field; this record has: "
        "index, uuid, model, serial, memory_mib, pci_bus_id, state",
    ]


def test_it_names_both_records_that_use_one_gpu_uuid():
    document = small_document()
    document["nodes"][1]["gpus"][1]["uuid"] = UUIDS[0]

    # (gpu-b's NVLinks, which need the refused GPU, add no error of their own)
    assert problems(document) == [f"nodes[1] (gpu-b).gpus[1].uuid: {UUIDS[0]} is also used by nodes[0] (gpu-a).gpus[0]"]


def test_it_refuses_a_gpu_uuid_that_belongs_to_a_node_outside_the_file():
    owner = factories.node(factories.cluster(), factories.node_type(gpus=1, nics=0), "gpu-z")
    taken = owner.gpus.get().uuid
    document = small_document()
    document["nodes"][0]["gpus"][0]["uuid"] = taken

    assert problems(document) == [
        f"nodes[0] (gpu-a).gpus[0].uuid: {taken} is gpu0 of gpu-z in the database, and gpu-z is not in this file; "
        "if the GPU really moved, describe gpu-z too, otherwise correct the UUID"
    ]


def test_it_refuses_to_put_a_gpu_where_an_unlisted_one_sits():
    run(small_document())
    document = small_document()
    document["nodes"][0]["gpus"][1]["uuid"] = UUIDS[5]  # a replacement GPU, the old one still stored

    assert problems(document) == [
        f"nodes[0] (gpu-a).gpus[1].index: gpu1 of gpu-a is {UUIDS[1]} in the database, which this file does "
        "not list; an import never deletes: remove the old GPU first if it was replaced, or correct the index"
    ]


def test_it_finds_duplicates_inside_the_file():
    document = small_document()
    document["nodes"].append(gpu_node("gpu-a", 4))
    document["nodes"][1]["gpus"][1]["index"] = 0
    document["nodes"][1]["ports"].append({"device_name": "mlx5_0", "mac": "a0:88:c2:00:00:01"})
    document["links"][3]["b"]["port"] = "p1"
    document["links"].append({"a": {"node": "gpu-a", "port": "mlx5_0"}, "b": {"switch": "leaf-01", "port": "p9"}})

    assert problems(document) == [
        "nodes[1] (gpu-b).ports[1]: mlx5_0/1 is also described by nodes[1] (gpu-b).ports[0]",
        "nodes[1] (gpu-b).gpus[1].index: index 0 is also used by nodes[1] (gpu-b).gpus[0]",
        "nodes[2] (gpu-a).hostname: gpu-a is also described by nodes[0] (gpu-a)",
        "links[3] (gpu-b:mlx5_1 ↔ leaf-01:p1).b: leaf-01:p1 is also cabled by links[0] (gpu-a:mlx5_0 ↔ leaf-01:p1)",
        "links[4] (gpu-a:mlx5_0 ↔ leaf-01:p9).a: gpu-a:mlx5_0/1 is also cabled by links[0] (gpu-a:mlx5_0 ↔ leaf-01:p1)",
    ]


def test_it_names_dangling_references_and_suggests_the_near_miss():
    document = small_document()
    document["nodes"][0]["node_type"] = "hgx-2"
    document["nodes"].append({**gpu_node("gpu-c", 4), "rack": "r1"})
    document["links"][2]["b"]["switch"] = "leaf-1"
    document["links"][3]["a"]["port"] = "mlx5_7"
    document["nvlinks"][1] = {"node": "gpu-b", "gpus": [0, 5], "lanes": 18, "bandwidth_gbs": 900}

    # The links and NVLinks of gpu-a, whose own record was refused, add no errors of their own.
    assert problems(document) == [
        "nodes[0] (gpu-a).node_type: no node type 'hgx-2' in this file or the database (did you mean 'hgx-2g'?)",
        "nodes[2] (gpu-c).rack: no rack 'r1' in cluster c1 (did you mean 'r01'?)",
        "links[2] (gpu-b:mlx5_0 ↔ leaf-1:p3).b.switch: no switch 'leaf-1' in this file or the database "
        "(did you mean 'leaf-01'?)",
        "links[3] (gpu-b:mlx5_7 ↔ leaf-01:p4).a.port: gpu-b has no port mlx5_7/1; its ports: mlx5_0/1, mlx5_1/1",
        "nvlinks[1] (gpu-b).gpus: gpu-b has no GPU with index 5; it has [0, 1]",
    ]


def test_field_formats_are_checked_by_the_models_with_the_record_path():
    document = small_document()
    document["nodes"][0]["hostname"] = "gpu_a!"
    document["nodes"][0]["management_address"] = "10.0.0.300"
    document["nodes"][1]["gpus"][0]["uuid"] = "GPU-1234"
    document["nodes"][1]["gpus"][1]["pci_bus_id"] = "18:00.0"
    document["nodes"][1]["ports"][0].update(guid="0xa088", mac="a0:88:c2")
    document["links"] = []
    document["nvlinks"] = []

    assert problems(document) == [
        "nodes[0] (gpu_a!).hostname: Not a valid hostname.",
        "nodes[0] (gpu_a!).management_address: Enter a valid IPv4 or IPv6 address.",
        "nodes[1] (gpu-b).ports[0].guid: Not a 64-bit GUID.",
        "nodes[1] (gpu-b).ports[0].mac: Not a MAC address (aa:bb:cc:dd:ee:ff).",
        "nodes[1] (gpu-b).gpus[0].uuid: Not an NVML GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx).",
        "nodes[1] (gpu-b).gpus[1].pci_bus_id: Not a PCI bus id (0000:18:00.0).",
    ]


def test_it_refuses_to_recable_a_stored_link():
    run(small_document())
    document = small_document()
    document["links"][0]["b"]["port"] = "p9"

    assert problems(document) == [
        "links[0] (gpu-a:mlx5_0 ↔ leaf-01:p9).a: gpu-a:mlx5_0/1 is cabled to leaf-01:p1 in the database "
        f"(link {Link.objects.order_by('pk').first().pk}); an import never re-cables: delete link "
        f"{Link.objects.order_by('pk').first().pk} first if the cable really moved"
    ]


def test_structure_errors_say_what_was_expected():
    document = small_document()
    document["version"] = 2
    document["nodes"][0]["ports"][0]["guid"] = 0xA088C20300000000  # what unquoted YAML makes of it
    document["links"][0]["b"]["port_num"] = 1
    document["nvlinks"][1]["gpus"] = [0, 1]

    assert problems(document) == [
        "version: 2 is not a version this server reads (1)",
        "nodes[0] (gpu-a).ports[0].guid: expected `str`, got `int` (quote it: YAML reads unquoted 0x..., digits "
        "with colons and yes/no as numbers or booleans)",
        "links[0] (gpu-a:mlx5_0 ↔ leaf-01:p1).b: port_num belongs to node ports; a switch port is named by port alone",
        "nvlinks[1] (gpu-b): an NVLink record gives either gpus: [a, b] or mesh: true",
    ]


def test_malformed_yaml_and_json_give_line_and_column():
    with pytest.raises(ImportFailed) as yaml_failure:
        load_document(b"version: 1\nnodes:\n  - hostname: gpu-a\n    gpus: [\n", "yaml")
    with pytest.raises(ImportFailed) as json_failure:
        load_document(b'{"version": 1,\n "nodes": [}', "json")
    with pytest.raises(ImportFailed) as duplicate_failure:
        load_document(b"nodes:\n  - hostname: gpu-a\n    hostname: gpu-b\n", "yaml")

    assert str(yaml_failure.value.issues[0]).startswith("document: YAML error at line 5, column 1: ")
    assert str(json_failure.value.issues[0]) == "document: JSON syntax error at line 2, column 12: Expecting value"
    assert str(duplicate_failure.value.issues[0]) == (
        "document: YAML error at line 3, column 5: key 'hostname' is given twice (first on line 2)"
    )


# The management command --------------------------------------------------------------------------


def test_the_command_prints_a_diff_and_audits_the_import(tmp_path):
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(small_document()))
    out = StringIO()

    call_command("import_inventory", str(path), stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[0] == "+ cluster c1"
    assert "+ node gpu-a" in lines
    assert lines[-1].startswith("Created 1 cluster, 1 node type, 2 port templates, 1 rack, 1 fabric, 1 switch, ")
    entry = AuditLogEntry.objects.get(action="inventory.import")
    assert entry.actor == "system:import_inventory"
    assert entry.detail["created"]["node"] == 2
    assert entry.detail["source"] == str(path)


def test_the_command_dry_run_writes_nothing_and_is_not_audited(tmp_path):
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(small_document()))
    out = StringIO()

    call_command("import_inventory", str(path), "--dry-run", "--format", "json", stdout=out)

    assert json.loads(out.getvalue())["created"]["gpu"] == 4
    assert not Node.objects.exists()
    assert not AuditLogEntry.objects.exists()


def test_the_command_fails_with_the_error_list(tmp_path):
    document = small_document()
    document["nodes"][0]["cluster"] = "c2"
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(document))
    err = StringIO()

    with pytest.raises(CommandError, match="nothing was imported"):
        call_command("import_inventory", str(path), stderr=err)

    assert err.getvalue().strip() == "nodes[0] (gpu-a).cluster: no cluster 'c2' in this file or the database"
    assert not Node.objects.exists()
    assert not AuditLogEntry.objects.exists()
