"""Inventory (agent → server, on connect and whenever it changes): the node's GPUs, ports and host facts."""

from typing import Annotated, Literal

import msgspec

from agents.protocol.base import (
    MAX_GPUS_PER_NODE,
    MAX_PORTS_PER_NODE,
    Celsius,
    Gbps,
    GpuIndex,
    GpuUuid,
    Hostname,
    Mebibytes,
    Message,
    PortDevice,
    PortNumber,
    PortState,
    ShortText,
    Watts,
)


class NvLinkPeer(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    link: Annotated[int, msgspec.Meta(ge=0, lt=64)]
    active: bool
    peer_pci_bus_id: ShortText | None = None  # a peer GPU or an NVSwitch


class GpuInfo(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    index: GpuIndex
    uuid: GpuUuid
    name: ShortText
    serial: ShortText | None = None
    memory_mib: Mebibytes | None = None
    pci_bus_id: ShortText | None = None
    power_limit_w: Watts | None = None
    pcie_gen: Annotated[int, msgspec.Meta(ge=1, le=7)] | None = None
    pcie_width: Annotated[int, msgspec.Meta(ge=1, le=32)] | None = None  # gen and width the link can reach
    # The width the link trained at: under pcie_width means a degraded slot, riser or cable. (The current
    # generation is not inventory: GPUs drop to Gen1 when idle to save power.)
    pcie_width_current: Annotated[int, msgspec.Meta(ge=1, le=32)] | None = None
    # Where the GPU starts slowing its clocks for heat (nvmlDeviceGetTemperatureThreshold, SLOWDOWN):
    # the server judges a sample's temperature against it (apps/failures/throttling.py).
    slowdown_temp_c: Celsius | None = None
    nvlinks: list[NvLinkPeer] = []


class PortInfo(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    device: PortDevice
    port: PortNumber
    kind: Literal["infiniband", "roce", "ethernet"]
    rate_gbps: Gbps
    state: PortState
    physical_state: ShortText | None = None
    guid: ShortText | None = None


class HostFacts(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    hostname: Hostname
    driver_version: ShortText | None = None
    cuda_version: ShortText | None = None
    kernel: ShortText | None = None
    os: ShortText | None = None
    cpu_model: ShortText | None = None
    cpu_count: Annotated[int, msgspec.Meta(ge=1, le=4096)] | None = None
    memory_gib: Annotated[float, msgspec.Meta(ge=0, le=1 << 20)] | None = None


class Inventory(Message, tag="inventory"):
    host: HostFacts
    gpus: Annotated[list[GpuInfo], msgspec.Meta(max_length=MAX_GPUS_PER_NODE)]
    ports: Annotated[list[PortInfo], msgspec.Meta(max_length=MAX_PORTS_PER_NODE)]
