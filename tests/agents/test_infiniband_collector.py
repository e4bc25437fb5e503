"""The InfiniBand/RoCE collector against a fake /sys/class/infiniband tree."""

import pytest

from agents.collectors.infiniband import InfiniBandCollector, parse_rate, parse_state
from agents.protocol import PortInfo, PortSample
from tests.agents.fakes import set_counters, write_port

T0 = 1_750_000_000.0
COUNTERS = {"port_xmit_data": 0, "port_rcv_data": 0, "symbol_error": 0, "link_downed": 0, "port_rcv_errors": 0}


@pytest.fixture
def sysfs(tmp_path):
    return tmp_path / "infiniband"


def test_it_discovers_each_port_with_rate_state_and_guid(sysfs):
    write_port(sysfs, "mlx5_0", counters=COUNTERS)
    write_port(
        sysfs,
        "mlx5_1",
        rate="200 Gb/sec (2X NDR)",
        state="1: DOWN",
        phys_state="3: Disabled",
        node_guid="b859:9f03:00d4:aaaa",
        gid="fe80:0000:0000:0000:0000:0000:0000:0000",  # no port GUID yet: the node's
    )

    ports = InfiniBandCollector(sysfs).discover()

    assert ports == [
        PortInfo(
            device="mlx5_0",
            port=1,
            kind="infiniband",
            rate_gbps=400.0,
            state="active",
            physical_state="LinkUp",
            guid="b859:9f03:00d4:2e3b",
        ),
        PortInfo(
            device="mlx5_1",
            port=1,
            kind="infiniband",
            rate_gbps=200.0,
            state="down",
            physical_state="Disabled",
            guid="b859:9f03:00d4:aaaa",
        ),
    ]


def test_it_reports_an_ethernet_link_layer_as_roce(sysfs):
    write_port(sysfs, "mlx5_8", rate="100 Gb/sec (4X EDR)", link_layer="Ethernet", gid="fe80::ba59:9fff:fe00:1")

    (port,) = InfiniBandCollector(sysfs).discover()

    assert (port.kind, port.rate_gbps, port.guid) == ("roce", 100.0, "b859:9f03:00d4:2e3a")


def test_it_orders_devices_as_a_person_would(sysfs):
    for device in ("mlx5_10", "mlx5_2", "mlx5_1"):
        write_port(sysfs, device)

    assert [port.device for port in InfiniBandCollector(sysfs).discover()] == ["mlx5_1", "mlx5_2", "mlx5_10"]


def test_it_finds_no_ports_on_a_host_without_infiniband(tmp_path):
    collector = InfiniBandCollector(tmp_path / "absent")

    assert collector.discover() == []
    assert collector.sample(T0) == []


def test_it_reports_data_counters_as_bytes_and_as_gbps_from_the_second_sample_on(sysfs):
    port = write_port(sysfs, "mlx5_0", counters=COUNTERS)
    collector = InfiniBandCollector(sysfs)

    first = collector.sample(T0)
    # 2 s at 350 Gb/s out and 100 Gb/s in; the counters count 4-byte words
    set_counters(port, port_xmit_data=int(350e9 * 2 / 32), port_rcv_data=int(100e9 * 2 / 32))
    second = collector.sample(T0 + 2)

    assert (first[0].tx_gbps, first[0].rx_gbps) == (None, None)
    assert (first[0].tx_bytes, first[0].rx_bytes) == (0, 0)
    assert second[0] == PortSample(
        device="mlx5_0",
        port=1,
        state="active",
        rate_gbps=400.0,
        tx_gbps=pytest.approx(350.0),
        rx_gbps=pytest.approx(100.0),
        symbol_errors=0,
        link_downed=0,
        rcv_errors=0,
        tx_bytes=int(350e9 * 2 / 32) * 4,  # node_exporter's port_data_transmitted_bytes: words × 4
        rx_bytes=int(100e9 * 2 / 32) * 4,
    )


def test_it_gives_no_rate_when_a_counter_goes_backwards_and_resumes_after(sysfs):
    port = write_port(sysfs, "mlx5_0", counters={**COUNTERS, "port_xmit_data": 10**12, "port_rcv_data": 10**12})
    collector = InfiniBandCollector(sysfs)
    collector.sample(T0)

    set_counters(port, port_xmit_data=1000, port_rcv_data=1000)  # the counters were reset
    reset = collector.sample(T0 + 1)
    set_counters(port, port_xmit_data=1000 + int(8e9 / 32), port_rcv_data=1000)
    after = collector.sample(T0 + 2)

    assert (reset[0].tx_gbps, reset[0].rx_gbps) == (None, None)
    assert (after[0].tx_gbps, after[0].rx_gbps) == (pytest.approx(8.0), 0.0)


def test_it_gives_no_rate_and_no_bytes_from_a_saturated_32_bit_counter(sysfs):
    port = write_port(sysfs, "mlx5_0", counters=COUNTERS)
    collector = InfiniBandCollector(sysfs)
    collector.sample(T0)

    set_counters(port, port_xmit_data=2**32 - 1, port_rcv_data=1)
    (sample,) = collector.sample(T0 + 1)

    assert (sample.tx_gbps, sample.tx_bytes) == (None, None)  # it no longer counts
    assert (sample.rx_gbps, sample.rx_bytes) == (pytest.approx(32e-9), 4)


def test_it_reports_counters_absent_when_the_counters_directory_is_missing(sysfs):
    write_port(sysfs, "mlx5_0", counters=None)
    collector = InfiniBandCollector(sysfs)

    collector.sample(T0)
    (sample,) = collector.sample(T0 + 1)

    assert sample == PortSample(device="mlx5_0", port=1, state="active", rate_gbps=400.0)


def test_it_reports_garbage_values_as_absent_without_failing(sysfs):
    write_port(
        sysfs,
        "mlx5_0",
        rate="fast",
        state="???",
        phys_state="",
        counters={
            "port_xmit_data": "lots",
            "port_rcv_data": "-5",
            "symbol_error": "",
            "link_downed": "0x10",
            "port_rcv_errors": "99999999999999999999999",
        },
    )
    collector = InfiniBandCollector(sysfs)

    (info,) = collector.discover()
    collector.sample(T0)
    (sample,) = collector.sample(T0 + 1)

    assert (info.rate_gbps, info.state, info.physical_state) == (0.0, "unknown", None)
    assert sample == PortSample(device="mlx5_0", port=1, state="unknown")


def test_it_reports_state_changes_and_link_downs_as_port_events(sysfs):
    port = write_port(sysfs, "mlx5_3", counters=COUNTERS)
    collector = InfiniBandCollector(sysfs)
    collector.sample(T0)
    assert collector.drain_events() == []

    (port / "state").write_text("1: DOWN\n")
    (port / "phys_state").write_text("2: Polling\n")
    set_counters(port, link_downed=1)
    (down,) = collector.sample(T0 + 1)
    (port / "state").write_text("4: ACTIVE\n")
    set_counters(port, link_downed=3)  # it went down twice more between samples
    collector.sample(T0 + 2)

    events = collector.drain_events()
    assert down.state == "polling"
    assert [(e.kind, e.port_device, e.ts, e.data) for e in events] == [
        ("port", "mlx5_3", T0 + 1, "mlx5_3 port 1: state active → polling; link went down 1 time"),
        ("port", "mlx5_3", T0 + 2, "mlx5_3 port 1: state polling → active; link went down 2 times"),
    ]
    assert [(e.port, e.previous_port_state, e.port_state, e.link_downs) for e in events] == [
        (1, "active", "polling", 1),
        (1, "polling", "active", 2),
    ]


def test_a_port_event_carries_only_what_changed(sysfs):
    port = write_port(sysfs, "mlx5_0", 2, counters=COUNTERS)
    collector = InfiniBandCollector(sysfs)
    collector.sample(T0)
    set_counters(port, link_downed=4)  # a flap shorter than the interval: the state is active again
    collector.sample(T0 + 1)
    (port / "state").write_text("1: DOWN\n")
    collector.sample(T0 + 2)
    set_counters(port, link_downed=0)  # a counter reset is no link going down
    collector.sample(T0 + 3)

    flap, down = collector.drain_events()
    assert (flap.port, flap.previous_port_state, flap.port_state, flap.link_downs) == (2, None, "active", 4)
    assert (down.port, down.previous_port_state, down.port_state, down.link_downs) == (2, "active", "down", None)
    assert down.data == "mlx5_0 port 2: state active → down"


def test_it_drops_a_port_whose_hca_went_away_and_discovery_says_so(sysfs):
    write_port(sysfs, "mlx5_0")
    gone = write_port(sysfs, "mlx5_1")
    collector = InfiniBandCollector(sysfs)
    for path in sorted(gone.parent.parent.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    gone.parent.parent.rmdir()

    assert [port.device for port in collector.sample(T0)] == ["mlx5_0"]
    assert [port.device for port in collector.discover()] == ["mlx5_0"]


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("400 Gb/sec (4X NDR)", 400.0),
        ("800 Gb/sec (4X XDR)", 800.0),
        ("2.5 Gb/sec (1X SDR)", 2.5),
        ("", None),
        ("Gb/sec", None),
        ("-1 Gb/sec", None),
    ],
)
def test_it_parses_sysfs_rates(text, rate):
    assert parse_rate(text) == rate


@pytest.mark.parametrize(
    ("state", "physical", "expected"),
    [
        ("4: ACTIVE", "LinkUp", "active"),
        ("2: INIT", "LinkUp", "init"),
        ("3: ARMED", "LinkUp", "init"),
        ("1: DOWN", "Disabled", "down"),
        ("1: DOWN", "Polling", "polling"),
        ("ACTIVE", "LinkUp", "active"),
        ("7: SOMETHING_NEW", "LinkUp", "unknown"),
    ],
)
def test_it_maps_ib_port_states(state, physical, expected):
    assert parse_state(state, physical) == expected
