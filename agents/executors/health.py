"""Health before and after: the node's error counters and flags, judged now and against an earlier
snapshot.

A burn-in runs this check first and last: the first result's ``evidence["snapshot"]`` is the
second one's ``baseline``, so the second judges what the stress in between did. From the node's
collector (NVML, InfiniBand sysfs; the simulator's model on a simulated node), per GPU:

- fails now, whatever came before: uncorrectable volatile ECC errors, rows pending remapping (the
  GPU needs a reset), a failed row remap (the GPU needs replacing), retired pages pending, an NVML
  recovery action other than none;
- fails when it rose since the baseline: uncorrectable aggregate ECC errors, NVLink recovery
  errors, and past a tolerance NVLink CRC and replay errors and PCIe replays;
- the GPUs present: fewer than the baseline had (or ``expected_gpus``) fails: one fell off the bus;
- XIDs since the baseline (or ``since``), from the kernel log and the collector's events, apart
  from application-caused ones (``ignore_xids``); without a start time they are reported, not judged.

Per InfiniBand port: it must be active (list unused ports in ``ignore_ports``), and since the
baseline its ``link_downed`` may not rise, its symbol and receive errors only within a tolerance.

A counter the GPU does not report is left out, never read as zero; which ones is in the evidence.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import msgspec

from agents.executors.context import CheckContext
from agents.executors.kernel_log import boot_time, parse_kmsg, read_kmsg
from agents.executors.params import HealthParams
from agents.executors.results import measurement
from agents.executors.runtime import cpu_name, gpus_label
from agents.protocol import CheckMeasurement, GpuEvent, GpuSample, NodeSample, PortSample

# What a health snapshot keeps of a sample (the next check's baseline): every counter and flag,
# read from the protocol so that a counter added there is kept here too; not the readings of the
# moment (load, temperature, power, clocks, throughput).
_MOMENTARY: Final = frozenset(
    {
        "index", "util_gpu", "util_mem", "mem_used_mib", "temp_c", "power_w", "power_limit_w", "sm_clock_mhz",
        "mem_clock_mhz", "pcie_tx_kbps", "pcie_rx_kbps", "nvlink_tx_kbps", "nvlink_rx_kbps",
    }
)  # fmt: skip
GPU_HEALTH_FIELDS: Final = tuple(name for name in GpuSample.__struct_fields__ if name not in _MOMENTARY)
PORT_HEALTH_FIELDS: Final = ("state", "symbol_errors", "link_downed", "rcv_errors")
# (field, measurement) judged on the value now: must be zero / false.
_NOW: Final = (
    ("ecc_uncorrected_volatile", "ecc_uncorrected_volatile"),
    ("retired_pages_pending", "retired_pages_pending"),
    ("remapped_rows_pending", "remapped_rows_pending"),
    ("remapped_rows_failed", "remapped_rows_failed"),
    ("recovery_action", "recovery_action"),
)
# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: what the driver says the GPU needs.
RECOVERY_ACTIONS: Final = {0: "none", 1: "GPU reset", 2: "node reboot", 3: "drain peer-to-peer", 4: "drain and reset"}
MAX_XIDS_SHOWN: Final = 20
SAME_XID_WITHIN_S: Final = 10.0  # the kernel log and NVML stamp one XID a little apart


@dataclass(frozen=True)
class Xid:
    ts: float
    gpu: int | None
    xid: int
    text: str
    source: str  # "kernel log" or "collector"


def snapshot(sample: NodeSample) -> NodeSample:
    """``sample`` with only what a health check compares, small enough to travel as evidence."""
    gpus = [
        GpuSample(index=gpu.index, **{name: getattr(gpu, name) for name in GPU_HEALTH_FIELDS}) for gpu in sample.gpus
    ]
    ports = [
        PortSample(device=port.device, port=port.port, **{name: getattr(port, name) for name in PORT_HEALTH_FIELDS})
        for port in sample.ports
    ]
    return NodeSample(ts=sample.ts, gpus=gpus, ports=ports)


def to_evidence(sample: NodeSample) -> dict[str, object]:
    """``snapshot(sample)`` as JSON-ready values, for a result's evidence."""
    return msgspec.to_builtins(snapshot(sample))


def judge(
    now: NodeSample, params: HealthParams, xids: Iterable[Xid], *, xids_judged: bool
) -> tuple[list[CheckMeasurement], dict[str, object]]:
    """Every measurement of the health check, and what could not be read (for the evidence)."""
    before = params.baseline
    out: list[CheckMeasurement] = []
    absent: dict[str, list[str]] = {}
    earlier = {gpu.index: gpu for gpu in before.gpus} if before else {}
    expected_gpus = params.expected_gpus if params.expected_gpus is not None else len(earlier) if before else None
    present = sorted(gpu.index for gpu in now.gpus)
    missing = sorted(set(earlier) - set(present))
    out.append(
        measurement("gpus", len(present), "count", expected_gpus, evidence={"present": present, "missing": missing})
    )
    for gpu in now.gpus:
        out += _gpu(gpu, earlier.get(gpu.index), params, absent.setdefault(f"gpu{gpu.index}", []))
    ports_before = {(port.device, port.port): port for port in before.ports} if before else {}
    ignored = set(params.ignore_ports)
    for port in now.ports:
        if port.device not in ignored and f"{port.device}/{port.port}" not in ignored:
            out += _port(port, ports_before.get((port.device, port.port)), params)
    out += _xids(list(xids), params, judged=xids_judged)
    return out, {name: fields for name, fields in absent.items() if fields}


def _gpu(gpu: GpuSample, before: GpuSample | None, params: HealthParams, absent: list[str]) -> list[CheckMeasurement]:
    out = []
    for field, name in _NOW:
        value = getattr(gpu, field)
        if value is None:
            absent.append(field)
        else:
            meaning = {"action": RECOVERY_ACTIONS.get(value, "unknown")} if field == "recovery_action" else None
            out.append(measurement(name, int(value), "count", 0, "at_most", gpu=gpu.index, evidence=meaning))
    if before is None:
        if gpu.ecc_uncorrected_aggregate is not None:  # history, not judged without a baseline
            out.append(measurement("ecc_uncorrected_aggregate", gpu.ecc_uncorrected_aggregate, "count", gpu=gpu.index))
        return out
    rises = (
        ("ecc_uncorrected_aggregate", "ecc_uncorrected_new", 0),
        ("nvlink_recovery_errors", "nvlink_recovery_errors_new", 0),
        ("nvlink_crc_errors", "nvlink_crc_errors_new", params.max_nvlink_crc_errors),
        ("nvlink_replay_errors", "nvlink_replay_errors_new", params.max_nvlink_replay_errors),
        ("pcie_replay_count", "pcie_replays_new", params.max_pcie_replays),
    )
    for field, name, tolerance in rises:
        rise = _rise(getattr(before, field), getattr(gpu, field))
        if rise is None:
            absent.append(field)
        else:
            out.append(measurement(name, rise, "count", tolerance, "at_most", gpu=gpu.index))
    return out


def _port(port: PortSample, before: PortSample | None, params: HealthParams) -> list[CheckMeasurement]:
    where = f"{port.device}/{port.port}"
    out = [measurement("port_active", port.state == "active", "count", 1, port=where, evidence={"state": port.state})]
    if before is None:
        return out
    rises = (
        ("link_downed", "ib_link_downed_new", 0),
        ("symbol_errors", "ib_symbol_errors_new", params.max_ib_symbol_errors),
        ("rcv_errors", "ib_rcv_errors_new", params.max_ib_rcv_errors),
    )
    for field, name, tolerance in rises:
        rise = _rise(getattr(before, field), getattr(port, field))
        if rise is not None:
            out.append(measurement(name, rise, "count", tolerance, "at_most", port=where))
    return out


def _rise(before: int | None, now: int | None) -> int | None:
    """How much a counter rose; a counter that went back (a reset, a reboot) counts from zero."""
    if before is None or now is None:
        return None
    return now - before if now >= before else now


def _xids(xids: list[Xid], params: HealthParams, *, judged: bool) -> list[CheckMeasurement]:
    ignored = set(params.ignore_xids)
    counted = [x for x in xids if x.xid not in ignored]
    by_gpu: dict[int | None, list[Xid]] = {}
    for xid in counted:
        by_gpu.setdefault(xid.gpu, []).append(xid)
    if not by_gpu:
        by_gpu[None] = []  # a node with none still reports its zero
    out = []
    for gpu, seen in sorted(by_gpu.items(), key=lambda item: -1 if item[0] is None else item[0]):
        shown = [{"ts": round(x.ts, 3), "xid": x.xid, "text": x.text[:200], "source": x.source} for x in seen]
        evidence = {"xids": shown[:MAX_XIDS_SHOWN], "ignored": sorted(ignored)}
        out.append(
            measurement("xids", len(seen), "count", 0 if judged else None, "at_most", gpu=gpu, evidence=evidence)
        )
    return out


def run(params: HealthParams, ctx: CheckContext) -> None:
    now, events, pci = _read_node(ctx)
    since = params.since if params.since is not None else params.baseline.ts if params.baseline else None
    xids = [Xid(e.ts, e.gpu_index, e.xid, e.data, "collector") for e in events if e.kind == "xid" and e.xid]
    if ctx.result.device == "simulated":
        ctx.result.evidence["kernel_log"] = "not read: a simulated node's XIDs are its model's events"
    else:
        ctx.result.evidence["kernel_log"] = _add_kernel_log_xids(params, pci, xids)
    if since is not None:
        xids = [xid for xid in xids if xid.ts >= since]
    measurements, absent = judge(now, params, xids, xids_judged=since is not None)
    ctx.result.add(*measurements)
    ctx.result.evidence.update(
        snapshot=to_evidence(now),
        since=since,
        baseline_ts=params.baseline.ts if params.baseline else None,
        not_reported=absent,
    )


def _read_node(ctx: CheckContext) -> tuple[NodeSample, list[GpuEvent], dict[str, int]]:
    """A sample of the node, the events its collector holds, and each GPU's PCI id → index."""
    collector = ctx.open_collector()
    if collector is None:  # no NVML: the ports still have something to say
        from agents.collectors.infiniband import InfiniBandCollector

        ports = InfiniBandCollector()
        ctx.result.ran_on("cpu", cpu_name(), "collectors (no NVML: InfiniBand ports only)")
        return NodeSample(ts=ctx.result.clock(), gpus=[], ports=ports.sample(ctx.result.clock())), [], {}
    try:
        inventory = collector.discover()
        names = gpus_label([gpu.name for gpu in inventory.gpus])
        if collector.simulated:
            ctx.result.ran_on("simulated", f"simulated {names}", "simulator collector")
        else:
            ctx.result.ran_on("cuda" if inventory.gpus else "cpu", names, "collectors (NVML, sysfs)")
        now = collector.sample(ctx.result.clock())
        events = collector.drain_events()
    finally:
        collector.close()
    pci = {gpu.pci_bus_id.rsplit(".", 1)[0]: gpu.index for gpu in inventory.gpus if gpu.pci_bus_id}
    return now, events, pci


def _add_kernel_log_xids(params: HealthParams, pci: dict[str, int], into: list[Xid]) -> str:
    """Adds the kernel log's XIDs to ``into`` (the log is the record: an XID the collector also saw
    is kept once), and says whether the log could be read."""
    if not params.kernel_log:
        return "not read (kernel_log is off)"
    try:
        lines = read_kmsg()
    except OSError as error:
        return f"not readable ({error.strerror or error}); XIDs come from the collector alone"
    records = [Xid(r.ts, pci.get(r.pci_bus_id), r.xid, r.text, "kernel log") for r in parse_kmsg(lines, boot_time())]
    into[:] = [x for x in into if not any(_same(x, r) for r in records)] + records
    return f"read /dev/kmsg: {len(records)} XID records in the ring buffer"


def _same(one: Xid, other: Xid) -> bool:
    return one.gpu == other.gpu and one.xid == other.xid and abs(one.ts - other.ts) < SAME_XID_WITHIN_S
