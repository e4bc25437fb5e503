"""/metrics: dcgm-exporter names and labels in the Prometheus text format, for the newest sample
of every GPU; absent fields and stale GPUs left out; token auth; constant query count."""

import shutil
import subprocess
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from agents.protocol import Events, GpuEvent, GpuSample, NodeSample, Telemetry
from apps.accounts.roles import Role
from apps.inventory.models import Gpu
from apps.telemetry.events import store_events
from apps.telemetry.metrics import FAMILIES, render_metrics
from apps.telemetry.models import GPU_METRIC_FIELDS, LatestGpuSample
from apps.telemetry.storage import Submission, write_batch
from tests.telemetry.conftest import gpu_sample

pytestmark = pytest.mark.django_db


def report(node, *gpus, age_s: float = 2.0, seq: int = 1) -> None:
    write_batch(
        [Submission(node.pk, Telemetry(seq=seq, samples=[NodeSample(ts=time.time() - age_s, gpus=list(gpus))]))]
    )


def render_metrics_now() -> str:
    return render_metrics(timezone.now())


def families(text: str) -> dict:
    return {family.name: family for family in text_string_to_metric_families(text)}


def samples_of(parsed: dict, name: str) -> dict[tuple[str, str], float]:
    return {(s.labels["Hostname"], s.labels["gpu"]): s.value for s in parsed[name].samples}


def test_it_exports_each_gpus_newest_sample_with_dcgm_names_and_labels(make_node):
    node = make_node()
    gpu = Gpu.objects.get(node=node, index=1)
    report(node, gpu_sample(1, util=87.5, power=612.0, ecc_uncorrected_volatile=3, remapped_rows_failed=True))
    parsed = families(render_metrics_now())
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
    parsed = families(render_metrics_now())
    assert samples_of(parsed, "DCGM_FI_DEV_POWER_USAGE") == {(node.hostname, "1"): 350.0}
    assert "DCGM_FI_DEV_PCIE_REPLAY_COUNTER" not in parsed  # no GPU reported it: no family at all
    assert "DCGM_FI_DEV_XID_ERRORS" not in parsed


def test_it_leaves_out_gpus_whose_newest_sample_is_stale(make_node):
    fresh, dead = make_node(), make_node()
    report(fresh, gpu_sample(0))
    report(dead, gpu_sample(0), age_s=600)
    assert set(samples_of(families(render_metrics_now()), "DCGM_FI_DEV_GPU_UTIL")) == {(fresh.hostname, "0")}


def test_it_exports_the_last_xid_and_derived_free_memory(make_node):
    node = make_node()
    Gpu.objects.filter(node=node, index=0).update(memory_mib=81_559)
    report(node, gpu_sample(0, mem_used_mib=1_559), gpu_sample(1))
    store_events(node.pk, Events(seq=1, events=[GpuEvent(ts=time.time(), kind="xid", gpu_index=0, xid=79)]))
    parsed = families(render_metrics_now())
    assert samples_of(parsed, "DCGM_FI_DEV_XID_ERRORS") == {(node.hostname, "0"): 79}
    assert samples_of(parsed, "DCGM_FI_DEV_FB_FREE") == {(node.hostname, "0"): 80_000}


def test_it_converts_throughput_to_bytes_per_second(make_node):
    node = make_node()
    report(node, gpu_sample(0, pcie_tx_kbps=2, nvlink_rx_kbps=1000))
    parsed = families(render_metrics_now())
    assert samples_of(parsed, "DCGM_FI_PROF_PCIE_TX_BYTES") == {(node.hostname, "0"): 2048}
    assert samples_of(parsed, "DCGM_FI_PROF_NVLINK_RX_BYTES") == {(node.hostname, "0"): 1_024_000}


def test_it_escapes_label_values(make_node):
    node = make_node()
    Gpu.objects.filter(node=node, index=0).update(model='NVIDIA "H100"\\80GB')
    report(node, gpu_sample(0))
    [sample] = families(render_metrics_now())["DCGM_FI_DEV_GPU_UTIL"].samples
    assert sample.labels["modelName"] == 'NVIDIA "H100"\\80GB'


def test_it_serves_a_viewer_token_in_the_prometheus_text_format(api_client, make_node):
    report(make_node(), gpu_sample(0))
    response = api_client(Role.VIEWER).get("/metrics", HTTP_ACCEPT="application/openmetrics-text;version=1.0.0")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "DCGM_FI_DEV_GPU_UTIL" in families(response.content.decode())


def test_it_refuses_a_scraper_without_a_token(api_client, db):
    response = api_client("anonymous").get("/metrics")
    assert response.status_code == 401
    assert response.content.decode().startswith("# ")


def test_it_answers_in_the_same_number_of_queries_for_any_fleet_size(api_client, make_node):
    client = api_client(Role.VIEWER)
    client.get("/metrics")  # the token's first use is recorded once; not part of the comparison
    counts = []
    for _ in range(2):
        for _ in range(3):
            report(make_node(), *(gpu_sample(i) for i in range(8)))
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/metrics").status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1]
    assert len(families(render_metrics_now())["DCGM_FI_DEV_GPU_UTIL"].samples) == 48


def test_every_family_has_help_and_a_dcgm_name():
    assert len({family.name for family in FAMILIES}) == len(FAMILIES)
    for family in FAMILIES:
        assert family.name.startswith(("DCGM_FI_DEV_", "DCGM_FI_PROF_"))
        assert family.type in ("gauge", "counter")
        assert family.help.endswith(".")


# Lint notes that come from dcgm-exporter's own names, kept for dashboard compatibility.
DCGM_NAMING_LINT = (
    "label names should be written in 'snake_case' not 'camelCase'",
    'counter metrics should have "_total" suffix',
    "metric name should not include type 'counter'",  # DCGM_FI_DEV_PCIE_REPLAY_COUNTER
)


def every_field_reported(index: int) -> GpuSample:
    kinds = {"BooleanField": False, "FloatField": 1.5}
    values = {f: kinds.get(LatestGpuSample._meta.get_field(f).get_internal_type(), 1) for f in GPU_METRIC_FIELDS}
    return GpuSample(index=index, **values)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian package prometheus)")
def test_promtool_accepts_the_output(make_node):
    node = make_node()
    report(node, *(every_field_reported(i) for i in range(8)))
    store_events(node.pk, Events(seq=1, events=[GpuEvent(ts=time.time(), kind="xid", gpu_index=2, xid=48)]))
    text = render_metrics_now()
    assert len(families(text)) == len(FAMILIES) - 1  # all but FB_FREE (no memory size in inventory)
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode in (0, 3), result.stderr  # 1 would be a parse error
    problems = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    unexpected = [line for line in problems if not line.endswith(DCGM_NAMING_LINT)]
    assert unexpected == []
