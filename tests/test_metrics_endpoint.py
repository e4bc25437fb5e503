"""GET /metrics as a whole: every app's families, token auth, the text format promtool accepts, a
cluster filter that limits every family, and the same number of queries whatever the fleet's size."""

import shutil
import subprocess
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.protocol import Events, GpuEvent, GpuSample, NodeSample, PortSample, Telemetry
from apps.accounts.roles import Role
from apps.failures.events import record_events
from apps.gateway.choices import CounterCode
from apps.gateway.models import GatewayCounter
from apps.inventory.models import Cluster, Node, NodeType, Rack
from apps.telemetry.events import store_events
from apps.telemetry.models import GPU_METRIC_FIELDS, IngestProcess, LatestGpuSample
from apps.telemetry.storage import Submission, write_batch
from tests import factories
from tests.prometheus import exposition, families, scrape

pytestmark = pytest.mark.django_db

NODE_FAMILIES = (
    "controlplane_node_lifecycle",
    "controlplane_node_liveness",
    "controlplane_failures_active",
    "controlplane_gpu_xid_errors_total",
    "DCGM_FI_DEV_GPU_UTIL",
    "node_infiniband_port_data_received_bytes_total",
    "controlplane_gateway_refused_messages_total",
)


def every_field_reported(index: int) -> GpuSample:
    kinds = {"BooleanField": False, "FloatField": 1.5}
    values = {f: kinds.get(LatestGpuSample._meta.get_field(f).get_internal_type(), 1) for f in GPU_METRIC_FIELDS}
    return GpuSample(index=index, **values)


def every_counter_reported(device: str) -> PortSample:
    counters = dict.fromkeys(("symbol_errors", "link_downed", "rcv_errors", "tx_bytes", "rx_bytes"), 1)
    return PortSample(device=device, port=1, state="active", rate_gbps=400.0, tx_gbps=1.5, rx_gbps=1.5, **counters)


def busy_node(cluster: Cluster, node_type: NodeType, rack: Rack | None = None) -> Node:
    """A node with something in every family: fresh samples of 8 GPUs and 8 ports, an XID and the failure
    it opened, a frame the gateway refused."""
    node = factories.node(cluster, node_type)
    Node.objects.filter(pk=node.pk).update(rack=rack)
    sample = NodeSample(
        ts=time.time() - 1,
        gpus=[every_field_reported(i) for i in range(8)],
        ports=[every_counter_reported(f"mlx5_{i}") for i in range(8)],
    )
    write_batch([Submission(node.pk, Telemetry(seq=1, samples=[sample]))])
    xid = Events(seq=1, events=[GpuEvent(ts=time.time(), kind="xid", gpu_index=2, xid=79)])
    store_events(node.pk, xid)
    record_events(node.pk, xid)
    GatewayCounter.add({(node.pk, CounterCode.INVALID): (1, "NaN in power_w")}, timezone.now())
    return node


@pytest.fixture
def fleet():
    """Two clusters: h100-east (racked) and h100-west."""
    node_type = factories.node_type(nics=0)
    east, west = factories.cluster("h100-east"), factories.cluster("h100-west")
    rack = Rack.objects.create(cluster=east, name="r01")
    IngestProcess.objects.create(
        process="cp-1:100",
        updated_at=timezone.now(),
        messages=1,
        gpu_samples=8,
        port_samples=8,
        duplicates=0,
        failed_batches=0,
        pending_rows=0,
        lag_s=0.3,
        write_s=0.01,
    )

    def grow(nodes: int = 1) -> None:
        for _ in range(nodes):
            busy_node(east, node_type, rack)
            busy_node(west, node_type)

    return grow


def test_it_serves_a_viewer_token_in_the_prometheus_text_format(api_client, fleet):
    fleet()
    response = api_client(Role.VIEWER).get("/metrics", HTTP_ACCEPT="application/openmetrics-text;version=1.0.0")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert set(NODE_FAMILIES) <= set(families(response.content.decode()))


def test_it_refuses_a_scraper_without_a_token(api_client, db):
    response = api_client("anonymous").get("/metrics")
    assert response.status_code == 401
    assert response.content.decode().startswith("# ")


def clusters_in(parsed: dict) -> dict[str, frozenset[str]]:
    return {name: frozenset(s.labels["cluster"] for s in parsed[name].samples) for name in NODE_FAMILIES}


def every_family(*clusters: str) -> dict[str, frozenset[str]]:
    return dict.fromkeys(NODE_FAMILIES, frozenset(clusters))


def test_the_cluster_filter_limits_every_family(api_client, fleet):
    fleet()
    assert clusters_in(scrape()) == every_family("h100-east", "h100-west")
    assert clusters_in(scrape("h100-west")) == every_family("h100-west")
    response = api_client(Role.VIEWER).get("/metrics?cluster=h100-east&cluster=h100-west")
    assert clusters_in(families(response.content.decode())) == every_family("h100-east", "h100-west")
    east = families(api_client(Role.VIEWER).get("/metrics", {"cluster": "h100-east"}).content.decode())
    assert clusters_in(east) == every_family("h100-east")
    assert {s.labels["rack"] for s in east["DCGM_FI_DEV_GPU_UTIL"].samples} == {"r01"}


def test_an_unknown_cluster_is_a_400_naming_the_parameter(api_client, fleet):
    fleet()
    response = api_client(Role.VIEWER).get("/metrics?cluster=h100-a")
    assert response.status_code == 400
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert response.content.decode() == "# cluster: no cluster named h100-a; the clusters are h100-east, h100-west.\n"


@pytest.mark.parametrize("query", ["", "?cluster=h100-east"])
def test_it_answers_in_the_same_number_of_queries_for_any_fleet_size(api_client, fleet, query):
    client = api_client(Role.VIEWER)
    client.get("/metrics")  # the token's first use is recorded once; not part of the comparison
    counts = []
    for _ in range(2):
        fleet(3)
        with CaptureQueriesContext(connection) as queries:
            assert client.get(f"/metrics{query}").status_code == 200
        counts.append(len(queries))
    assert counts[0] == counts[1]
    assert len(scrape("h100-east")["DCGM_FI_DEV_GPU_UTIL"].samples) == 6 * 8


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian package prometheus)")
def test_promtool_accepts_the_output_and_lints_only_dcgm_exporters_own_names(fleet):
    fleet()
    text = exposition()
    assert "controlplane_ingest_lag_seconds" in families(text)
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode in (0, 3), result.stderr  # 1 would be a parse error
    problems = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert problems  # dcgm-exporter's names (camelCase modelName, ..._TOTAL counters) draw notes
    assert [line for line in problems if not line.startswith("DCGM_FI_")] == []
