"""The collector ``cp-agent run`` uses: NVML + InfiniBand sysfs + host facts, as one Collector."""

import pytest

from agents.collectors.base import Collector
from agents.collectors.host import NodeCollector
from agents.collectors.hostfacts import read_host_facts, valid_hostname
from agents.protocol import Inventory, Telemetry, decode_agent_message, encode
from tests.agents.fakes import set_counters, write_port

T0 = 1_750_000_000.0
COUNTERS = {"port_xmit_data": 0, "port_rcv_data": 0, "symbol_error": 0, "link_downed": 0, "port_rcv_errors": 0}


def test_it_reports_gpus_ports_and_host_as_one_node(nvml, tmp_path):
    for number in range(8):
        write_port(tmp_path, f"mlx5_{number}", counters=COUNTERS)
    collector: Collector = NodeCollector.open(hostname="gpu-001", infiniband_root=tmp_path)

    inventory = collector.discover()
    collector.sample(T0)
    sample = collector.sample(T0 + 1)

    assert collector.simulated is False
    assert (len(inventory.gpus), len(inventory.ports)) == (8, 8)
    assert inventory.host.hostname == "gpu-001"
    assert inventory.host.driver_version == "550.90.07"
    assert (len(sample.gpus), len(sample.ports), sample.ts) == (8, 8, T0 + 1)
    assert decode_agent_message(encode(inventory)) == inventory
    assert decode_agent_message(encode(Telemetry(seq=1, samples=[sample]))).samples == [sample]


def test_it_merges_gpu_and_port_events_oldest_first(nvml, tmp_path):
    port = write_port(tmp_path, "mlx5_0", counters=COUNTERS)
    collector = NodeCollector.open(hostname="gpu-001", infiniband_root=tmp_path)
    collector.sample(T0)
    set_counters(port, link_downed=1)
    collector.sample(T0 + 1)
    nvml.gpus[3].lost = True
    collector.sample(T0 + 2)

    events = collector.drain_events()

    assert [(e.kind, e.ts) for e in events] == [("port", T0 + 1), ("xid", T0 + 2)]
    assert collector.drain_events() == []


def test_it_reads_host_facts_from_proc_and_etc(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "etc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\n")
    (tmp_path / "proc/meminfo").write_text("MemTotal:       2113492384 kB\nMemFree: 1 kB\n")
    (tmp_path / "etc/os-release").write_text('NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 22.04.4 LTS"\n')

    facts = read_host_facts("gpu-001", driver_version="550.90.07", cuda_version="12.4", root=tmp_path)

    assert (facts.hostname, facts.driver_version, facts.cuda_version) == ("gpu-001", "550.90.07", "12.4")
    assert facts.os == "Ubuntu 22.04.4 LTS"
    assert facts.cpu_model == "Intel(R) Xeon(R) Platinum 8480C"
    assert facts.memory_gib == 2015.6
    assert facts.kernel
    assert facts.cpu_count


def test_it_leaves_out_host_facts_it_cannot_read(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/meminfo").write_text("MemTotal: lots\n")

    facts = read_host_facts("gpu-001", root=tmp_path)

    assert (facts.os, facts.memory_gib, facts.driver_version) == (None, None, None)
    assert decode_agent_message(encode(Inventory(host=facts, gpus=[], ports=[]))).host == facts


def test_it_refuses_a_hostname_the_server_would_refuse():
    with pytest.raises(ValueError, match="'gpu_001' is not a valid DNS name"):
        valid_hostname("gpu_001")
    assert valid_hostname("gpu-001.cluster.example") == "gpu-001.cluster.example"
