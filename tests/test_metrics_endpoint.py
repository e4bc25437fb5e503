"""GET /metrics as a whole: every app's families, token auth, the text format promtool accepts, a
cluster filter that limits every family, and the same number of queries whatever the fleet's size."""

import shutil
import subprocess

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.accounts.roles import Role
from tests.prometheus import busy_fleet, exposition, families, scrape

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet():
    return busy_fleet()


NODE_FAMILIES = (
    "controlplane_node_lifecycle",
    "controlplane_node_liveness",
    "controlplane_failures_active",
    "controlplane_gpu_xid_errors_total",
    "DCGM_FI_DEV_GPU_UTIL",
    "node_infiniband_port_data_received_bytes_total",
    "controlplane_gateway_refused_messages_total",
    "controlplane_agent_dropped_samples_total",
)


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


CONTROL_PLANE_FAMILIES = {
    "controlplane_ingest_gpu_samples_total",
    "controlplane_ingest_lag_seconds",
    "controlplane_gateway_refused_connections_total",
}


def test_nodes_0_is_the_control_planes_own_series_only_and_a_cluster_has_none_of_them(api_client, fleet):
    fleet()
    client = api_client(Role.VIEWER)
    own = families(client.get("/metrics?nodes=0").content.decode())
    assert set(own) >= CONTROL_PLANE_FAMILIES
    assert not set(own) & set(NODE_FAMILIES)
    assert not CONTROL_PLANE_FAMILIES & set(families(client.get("/metrics?cluster=h100-east").content.decode()))
    assert CONTROL_PLANE_FAMILIES | set(NODE_FAMILIES) <= set(families(client.get("/metrics?nodes=1").content.decode()))


@pytest.mark.parametrize(
    ("query", "answer"),
    [
        ("nodes=yes", "# nodes: expected 0 (only the control plane's own series) or 1 (the default), not 'yes'.\n"),
        (
            "nodes=0&cluster=h100-east",
            "# cluster: a scrape without nodes' series (nodes=0) has none of a cluster.\n",
        ),
    ],
)
def test_a_nodes_it_cannot_read_is_a_400_naming_the_parameter(api_client, fleet, query, answer):
    fleet()
    response = api_client(Role.VIEWER).get(f"/metrics?{query}")
    assert (response.status_code, response.content.decode()) == (400, answer)


@pytest.mark.parametrize("query", ["", "?cluster=h100-east", "?nodes=0"])
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
