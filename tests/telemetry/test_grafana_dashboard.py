"""The shipped Grafana dashboard queries only what /metrics exports, per node, in valid PromQL."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from apps.telemetry.metrics.dcgm import FAMILIES

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "gpu-fleet-dashboard.json"
GRAFANA_VARIABLES = {"$Hostname": ".*", "$gpu": ".*", "$__rate_interval": "1m"}


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def expressions() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def test_it_is_templated_on_hostname_and_gpu():
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert {"datasource", "Hostname", "gpu"} <= set(variables)
    assert "Hostname" in variables["Hostname"]["definition"]
    assert all('Hostname=~"$Hostname"' in expr for expr in expressions())


def test_it_queries_only_metrics_that_metrics_exports():
    exported = {family.name for family in FAMILIES}
    used = {name for expr in expressions() for name in re.findall(r"DCGM_FI_[A-Z_]+", expr)}
    assert used <= exported
    for needed in ("GPU_UTIL", "POWER_USAGE", "GPU_TEMP", "FB_USED", "XID_ERRORS", "ECC_DBE_VOL_TOTAL"):
        assert f"DCGM_FI_DEV_{needed}" in used


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
