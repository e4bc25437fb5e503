"""/metrics, dcgm-exporter's part: its names and labels (plus cluster and rack) for the newest sample of
every GPU; absent fields and stale GPUs left out."""

import time

import pytest

from agents.protocol import Events, GpuEvent, NodeSample, Telemetry
from apps.inventory.models import Gpu, Rack
from apps.telemetry.events import store_events
from apps.telemetry.metrics.dcgm import DERIVED, FAMILIES
from apps.telemetry.models import GPU_METRIC_FIELDS
from apps.telemetry.storage import Submission, write_batch
from tests.prometheus import exposition, families
from tests.telemetry.conftest import gpu_sample

pytestmark = pytest.mark.django_db


def report(node, *gpus, age_s: float = 2.0, seq: int = 1) -> None:
    write_batch(
        [Submission(node.pk, Telemetry(seq=seq, samples=[NodeSample(ts=time.time() - age_s, gpus=list(gpus))]))]
    )


def samples_of(parsed: dict, name: str) -> dict[tuple[str, str], float]:
    return {(s.labels["Hostname"], s.labels["gpu"]): s.value for s in parsed[name].samples}


def test_it_exports_each_gpus_newest_sample_with_dcgm_names_and_labels(make_node):
    node = make_node()
    node.rack = Rack.objects.create(cluster=node.cluster, name="r07")
    node.save(update_fields=["rack"])
    gpu = Gpu.objects.get(node=node, index=1)
    report(node, gpu_sample(1, util=87.5, power=612.0, ecc_uncorrected_volatile=3, remapped_rows_failed=True))
    parsed = families(exposition())
    util = parsed["DCGM_FI_DEV_GPU_UTIL"]
    assert util.type == "gauge"
    assert util.documentation == "GPU utilization (in %)."
    [sample] = util.samples
    assert sample.value == 87.5
    assert sample.labels == {
        "gpu": "1",
        "UUID": gpu.uuid,
        "pci_bus_id": gpu.pci_bus_id,
        "device": "nvidia1",
        "modelName": gpu.model,
        "Hostname": node.hostname,
        "cluster": node.cluster.name,
        "rack": "r07",
    }
    assert samples_of(parsed, "DCGM_FI_DEV_POWER_USAGE") == {(node.hostname, "1"): 612.0}
    assert samples_of(parsed, "DCGM_FI_DEV_FB_USED") == {(node.hostname, "1"): 40_000}
    assert samples_of(parsed, "DCGM_FI_DEV_GPU_TEMP") == {(node.hostname, "1"): 60.0}
    assert samples_of(parsed, "DCGM_FI_DEV_SM_CLOCK") == {(node.hostname, "1"): 1980}
    assert samples_of(parsed, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL") == {(node.hostname, "1"): 3}
    assert parsed["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"].type == "counter"
    assert samples_of(parsed, "DCGM_FI_DEV_ROW_REMAP_FAILURE") == {(node.hostname, "1"): 1}


def test_it_leaves_out_what_the_gpu_did_not_report(make_node):
    node = make_node()
    report(node, gpu_sample(0, power=None), gpu_sample(1, power=350.0))
    parsed = families(exposition())
    assert samples_of(parsed, "DCGM_FI_DEV_POWER_USAGE") == {(node.hostname, "1"): 350.0}
    assert "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" not in parsed  # no GPU reported it: no family at all
    assert "DCGM_FI_DEV_XID_ERRORS" not in parsed


def test_it_leaves_out_gpus_whose_newest_sample_is_stale(make_node):
    fresh, dead = make_node(), make_node()
    report(fresh, gpu_sample(0))
    report(dead, gpu_sample(0), age_s=600)
    assert set(samples_of(families(exposition()), "DCGM_FI_DEV_GPU_UTIL")) == {(fresh.hostname, "0")}


def test_it_exports_the_last_xid_and_derived_free_memory(make_node):
    node = make_node()
    Gpu.objects.filter(node=node, index=0).update(memory_mib=81_559)
    report(node, gpu_sample(0, mem_used_mib=1_559), gpu_sample(1))
    store_events(node.pk, Events(seq=1, events=[GpuEvent(ts=time.time(), kind="xid", gpu_index=0, xid=79)]))
    parsed = families(exposition())
    assert samples_of(parsed, "DCGM_FI_DEV_XID_ERRORS") == {(node.hostname, "0"): 79}
    assert samples_of(parsed, "DCGM_FI_DEV_FB_FREE") == {(node.hostname, "0"): 80_000}


def test_it_converts_throughput_to_bytes_per_second(make_node):
    node = make_node()
    report(node, gpu_sample(0, pcie_tx_kbps=2, nvlink_rx_kbps=1000))
    parsed = families(exposition())
    assert samples_of(parsed, "DCGM_FI_PROF_PCIE_TX_BYTES") == {(node.hostname, "0"): 2048}
    assert samples_of(parsed, "DCGM_FI_PROF_NVLINK_RX_BYTES") == {(node.hostname, "0"): 1_024_000}


def test_it_escapes_label_values(make_node):
    node = make_node()
    Gpu.objects.filter(node=node, index=0).update(model='NVIDIA "H100"\\80GB')
    report(node, gpu_sample(0))
    [sample] = families(exposition())["DCGM_FI_DEV_GPU_UTIL"].samples
    assert sample.labels["modelName"] == 'NVIDIA "H100"\\80GB'


def test_every_family_has_help_a_dcgm_name_and_a_field_to_read():
    assert len({family.name for family in FAMILIES}) == len(FAMILIES)
    for family in FAMILIES:
        assert family.name.startswith(("DCGM_FI_DEV_", "DCGM_FI_PROF_"))
        assert family.type in ("gauge", "counter")
        assert family.help.endswith(".")
        assert family.field in (*GPU_METRIC_FIELDS, *DERIVED)
