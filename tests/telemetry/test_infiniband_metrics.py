"""/metrics, node_exporter's part: each port's newest sample under the infiniband collector's names,
types and device/port labels, plus the node's; stale ports and unread counters left out."""

import time

import pytest

from agents.protocol import NodeSample, PortSample, Telemetry
from apps.telemetry.storage import Submission, write_batch
from tests.prometheus import scrape, series

pytestmark = pytest.mark.django_db


def report(node, *ports: PortSample, age_s: float = 2.0, seq: int = 1) -> None:
    sample = NodeSample(ts=time.time() - age_s, gpus=[], ports=list(ports))
    write_batch([Submission(node.pk, Telemetry(seq=seq, samples=[sample]))])


def port(device: str, **fields: object) -> PortSample:
    values = {"state": "active", "rate_gbps": 400.0, "tx_gbps": 12.5, "rx_gbps": 3.0} | fields
    return PortSample(device=device, port=1, **values)


def test_it_exports_each_ports_counters_under_node_exporters_names(make_node):
    node = make_node()
    counters = {"tx_bytes": 8_000, "rx_bytes": 4_000, "link_downed": 3, "symbol_errors": 250, "rcv_errors": 7}
    report(node, port("mlx5_0", **counters), port("mlx5_1", state="down", rate_gbps=None))
    parsed = scrape()
    expected = {
        "node_infiniband_port_data_transmitted_bytes_total": 8_000,
        "node_infiniband_port_data_received_bytes_total": 4_000,
        "node_infiniband_link_downed_total": 3,
        "node_infiniband_symbol_error_total": 250,
        "node_infiniband_port_errors_received_total": 7,
    }
    for name, value in expected.items():
        assert parsed[name].type == "counter"
        assert series(parsed, name, "Hostname", "device", "port") == {(node.hostname, "mlx5_0", "1"): value}
    assert series(parsed, "node_infiniband_rate_bytes_per_second", "device") == {("mlx5_0",): 400e9 / 8}
    assert series(parsed, "node_infiniband_state_id", "device") == {("mlx5_0",): 4, ("mlx5_1",): 1}
    [sample] = parsed["node_infiniband_link_downed_total"].samples
    assert sample.labels == {
        "device": "mlx5_0",
        "port": "1",
        "Hostname": node.hostname,
        "cluster": node.cluster.name,
        "rack": "",
    }


def test_it_exports_the_newest_sample_and_leaves_out_stale_ports(make_node):
    fresh, dead = make_node(), make_node()
    report(fresh, port("mlx5_0", link_downed=1), age_s=30)
    report(fresh, port("mlx5_0", link_downed=2), seq=2)
    report(dead, port("mlx5_0", link_downed=9), age_s=600)
    assert series(scrape(), "node_infiniband_link_downed_total", "Hostname") == {(fresh.hostname,): 2}


def test_a_state_it_cannot_name_has_no_state_id(make_node):
    report(make_node(), port("mlx5_0", state="unknown"))
    assert "node_infiniband_state_id" not in scrape()
    assert "node_infiniband_rate_bytes_per_second" in scrape()
