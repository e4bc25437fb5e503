"""Telemetry (agent → server, every interval; replayed from the buffer after a disconnect)."""

from typing import Annotated

import msgspec

from agents.protocol.base import (
    MAX_GPUS_PER_NODE,
    MAX_PORTS_PER_NODE,
    MAX_SAMPLES_PER_FRAME,
    Celsius,
    Counter,
    Gbps,
    GpuIndex,
    KBps,
    Mebibytes,
    Megahertz,
    Message,
    Percent,
    PortDevice,
    PortNumber,
    PortState,
    Seq,
    Timestamp,
    Watts,
)


class GpuSample(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True, array_like=False):
    index: GpuIndex
    util_gpu: Percent | None = None
    util_mem: Percent | None = None
    mem_used_mib: Mebibytes | None = None
    temp_c: Celsius | None = None
    power_w: Watts | None = None
    power_limit_w: Watts | None = None
    sm_clock_mhz: Megahertz | None = None
    mem_clock_mhz: Megahertz | None = None
    throttle_reasons: Counter | None = None  # NVML clocks-event-reasons bitmask
    ecc_corrected_volatile: Counter | None = None
    ecc_uncorrected_volatile: Counter | None = None
    ecc_corrected_aggregate: Counter | None = None
    ecc_uncorrected_aggregate: Counter | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failed: bool | None = None
    remapped_rows_correctable: Counter | None = None
    remapped_rows_uncorrectable: Counter | None = None
    pcie_replay_count: Counter | None = None
    nvlink_crc_errors: Counter | None = None
    nvlink_replay_errors: Counter | None = None
    nvlink_recovery_errors: Counter | None = None
    pcie_tx_kbps: KBps | None = None
    pcie_rx_kbps: KBps | None = None
    nvlink_tx_kbps: KBps | None = None
    nvlink_rx_kbps: KBps | None = None
    recovery_action: Annotated[int, msgspec.Meta(ge=0, le=16)] | None = None  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION


class PortSample(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    device: PortDevice
    port: PortNumber
    state: PortState
    rate_gbps: Gbps | None = None
    tx_gbps: Gbps | None = None
    rx_gbps: Gbps | None = None
    symbol_errors: Counter | None = None
    link_downed: Counter | None = None
    rcv_errors: Counter | None = None
    tx_bytes: Counter | None = None  # data sent since the HCA's counters were reset (port_xmit_data × 4)
    rx_bytes: Counter | None = None  # data received, likewise (port_rcv_data × 4)


class NodeSample(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    ts: Timestamp
    gpus: Annotated[list[GpuSample], msgspec.Meta(max_length=MAX_GPUS_PER_NODE)]
    ports: Annotated[list[PortSample], msgspec.Meta(max_length=MAX_PORTS_PER_NODE)] = []


class Telemetry(Message, tag="telemetry"):
    """One or more samples, numbered: the server acknowledges by ``seq`` and drops a seq it has."""

    seq: Seq
    samples: Annotated[list[NodeSample], msgspec.Meta(min_length=1, max_length=MAX_SAMPLES_PER_FRAME)]
