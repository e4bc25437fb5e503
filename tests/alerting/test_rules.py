"""The shipped Prometheus rules (docs/prometheus/controlplane-rules.yml): valid for promtool, right on
its unit tests (controlplane-rules-test.yml, which covers every alert), and written against series
/metrics exports."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.prometheus import busy_fleet, exported_names

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "prometheus" / "controlplane-rules.yml"
RULE_TESTS = Path(__file__).with_name("controlplane-rules-test.yml")
SERIES = re.compile(r"\b(?:controlplane|node_infiniband|DCGM_FI)_[A-Za-z_]+\b")

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool is not installed")


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60, check=False)


@needs_promtool
def test_promtool_accepts_the_rules():
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


@needs_promtool
def test_the_rules_pass_their_unit_tests():
    result = promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test_and_a_severity():
    tested = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
    }
    alerts = [rule for rule in rules() if "alert" in rule]
    assert {rule["alert"] for rule in alerts} == tested
    assert {rule["labels"]["severity"] for rule in alerts} <= {"critical", "warning"}


@pytest.mark.django_db
def test_the_rules_query_only_series_that_metrics_exports():
    busy_fleet()()
    used = {name for rule in rules() for name in SERIES.findall(rule["expr"])}
    assert "controlplane_node_liveness" in used
    assert used - exported_names() == set()
