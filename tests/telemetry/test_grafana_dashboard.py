"""The shipped Grafana dashboard queries only what /metrics exports, per cluster and node, in valid PromQL,
and shows the control plane's own series beside dcgm-exporter's."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.alerting.test_rules import SERIES
from tests.prometheus import busy_fleet, exported_names

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "gpu-fleet-dashboard.json"
GRAFANA_VARIABLES = {"$cluster": ".*", "$Hostname": ".*", "$gpu": ".*", "$__rate_interval": "1m"}
NODE_FILTER = 'cluster=~"$cluster",Hostname=~"$Hostname"'
# Series of no node: a server process's ingest, a cluster's quarantine breaker, refused connections.
NOT_OF_A_NODE = re.compile(r"^controlplane_(ingest_|quarantine_breaker_|gateway_refused_connections_)")


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def expressions() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def test_it_is_templated_on_cluster_hostname_and_gpu():
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert {"datasource", "cluster", "Hostname", "gpu"} <= set(variables)
    assert "cluster" in variables["cluster"]["definition"]
    assert 'cluster=~"$cluster"' in variables["Hostname"]["definition"]


def test_every_query_of_a_nodes_series_is_limited_to_the_chosen_clusters_and_nodes():
    for expr in expressions():
        if any(not NOT_OF_A_NODE.match(name) for name in SERIES.findall(expr)):
            assert NODE_FILTER in expr, expr


@pytest.mark.django_db
def test_it_queries_only_series_that_metrics_exports():
    busy_fleet()()
    used = {name for expr in expressions() for name in SERIES.findall(expr)}
    assert used - exported_names() == set()
    for needed in (
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "controlplane_node_lifecycle",
        "controlplane_node_liveness",
        "controlplane_failures_active",
        "controlplane_gpu_xid_errors_total",
        "node_infiniband_port_data_received_bytes_total",
        "node_infiniband_link_downed_total",
        "node_infiniband_symbol_error_total",
        "controlplane_ingest_gpu_samples_total",
        "controlplane_ingest_lag_seconds",
        "controlplane_gateway_refused_messages_total",
    ):
        assert needed in used


def test_its_panels_have_unique_ids_and_a_place():
    panels = dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    assert all({"h", "w", "x", "y"} <= set(p["gridPos"]) for p in panels)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed (Debian package prometheus)")
def test_its_queries_are_valid_promql(tmp_path):
    rules = []
    for i, expr in enumerate(expressions()):
        for variable, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(variable, value)
        rules.append({"record": f"dashboard:panel_query_{i}", "expr": expr})
    rule_file = tmp_path / "rules.json"  # YAML is a superset of JSON
    rule_file.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        ["promtool", "check", "rules", str(rule_file)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
