"""The inventory document: what a file may say, as msgspec Structs (layer 1 of validation).

Records refer to each other by natural key: clusters, node types, fabrics and switches by name,
racks by name within their cluster, nodes by hostname, GPUs by UUID, node ports by device name and
port number, switch ports by name. A field left out of a record leaves the stored value alone;
``null`` clears a field that may be empty (a node's rack, a switch's management address).
"""

import enum
import re
import types
import typing
from decimal import Decimal
from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from apps.inventory.choices import (
    FabricKind,
    FabricTopology,
    GpuState,
    Lifecycle,
    LinkState,
    LinkStatus,
    PortKind,
    SwitchTier,
)
from apps.inventory.importer.errors import DOCUMENT, ImportFailed, Issue, did_you_mean, record_path

# NVML indices are small; the limit leaves room above them for the importer to move GPUs around.
GPU_INDEX_LIMIT = 1000


class Record(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A record of the document. Subclasses inherit the refusal of unknown fields, but not kw_only
    (which lets required fields follow optional ones), so each one says it again."""


class ClusterRecord(Record, kw_only=True):
    name: str
    description: str | UnsetType = UNSET
    site: str | UnsetType = UNSET


class PortTemplateRecord(Record, kw_only=True):
    device_name: str
    port_num: int = 1
    kind: PortKind
    rate_gbps: int


class NodeTypeRecord(Record, kw_only=True):
    name: str
    gpu_model: str
    gpus_per_node: int
    gpu_memory_gb: int
    peak_bf16_tflops: Decimal
    hbm_bandwidth_gbs: int
    nvlink_bandwidth_gbs: int | UnsetType = UNSET
    network_gbps_per_gpu: int
    gpu_power_limit_w: int
    port_templates: list[PortTemplateRecord] = []


class RackRecord(Record, kw_only=True):
    cluster: str
    name: str
    location: str | UnsetType = UNSET
    power_budget_kw: Decimal | UnsetType | None = UNSET


class FabricRecord(Record, kw_only=True):
    name: str
    cluster: str
    kind: FabricKind
    topology: FabricTopology
    oversubscription_ratio: Decimal | UnsetType = UNSET
    description: str | UnsetType = UNSET

    def __post_init__(self) -> None:
        if self.oversubscription_ratio is not UNSET and not self.oversubscription_ratio >= 1:
            raise ValueError("oversubscription_ratio must be at least 1 (1 is non-blocking, 2 is 2:1)")


class SwitchPortRecord(Record, kw_only=True):
    name: str
    rate_gbps: int | UnsetType = UNSET
    link_state: LinkState | UnsetType = UNSET


class SwitchRecord(Record, kw_only=True):
    name: str
    fabric: str
    tier: SwitchTier
    model: str | UnsetType = UNSET
    rack: str | UnsetType | None = UNSET
    management_address: str | UnsetType | None = UNSET
    # Not stored: the rate of ports created for links that name a port this file does not list.
    port_rate_gbps: int | UnsetType = UNSET
    ports: list[SwitchPortRecord] = []


class GpuRecord(Record, kw_only=True):
    index: typing.Annotated[int, msgspec.Meta(ge=0, le=GPU_INDEX_LIMIT - 1)]
    uuid: str
    model: str | UnsetType = UNSET
    serial: str | UnsetType = UNSET
    memory_mib: int | UnsetType | None = UNSET
    pci_bus_id: str | UnsetType = UNSET
    state: GpuState | UnsetType = UNSET


class NetworkPortRecord(Record, kw_only=True):
    device_name: str
    port_num: int = 1
    kind: PortKind | UnsetType = UNSET
    rate_gbps: int | UnsetType = UNSET
    link_state: LinkState | UnsetType = UNSET
    guid: str | UnsetType = UNSET
    mac: str | UnsetType = UNSET


class NodeRecord(Record, kw_only=True):
    hostname: str
    cluster: str
    node_type: str
    rack: str | UnsetType | None = UNSET
    rack_position: int | UnsetType | None = UNSET
    management_address: str | UnsetType | None = UNSET
    serial: str | UnsetType = UNSET
    # The state a node starts in; ignored for a node that exists (use the lifecycle actions).
    lifecycle: Lifecycle = Lifecycle.NEW
    gpus: list[GpuRecord] = []
    ports: list[NetworkPortRecord] = []


def end_label(node: object, switch: object, port: object, port_num: object = None) -> str | None:
    """``gpu-001:mlx5_0`` or ``leaf-01:p1`` (``:mlx5_0/2`` for a second port of an HCA)."""
    owner = node if isinstance(node, str) else switch
    if not isinstance(owner, str) or not isinstance(port, str):
        return None
    return f"{owner}:{port}" + (f"/{port_num}" if isinstance(port_num, int) and port_num != 1 else "")


class LinkEndRecord(Record, kw_only=True):
    """``{node: gpu-001, port: mlx5_0, port_num: 1}`` or ``{switch: leaf-01, port: p1}``."""

    node: str | UnsetType = UNSET
    switch: str | UnsetType = UNSET
    port: str
    port_num: int | UnsetType = UNSET

    def __post_init__(self) -> None:
        if (self.node is UNSET) == (self.switch is UNSET):
            raise ValueError("a link end names exactly one of node or switch")
        if self.switch is not UNSET and self.port_num is not UNSET:
            raise ValueError("port_num belongs to node ports; a switch port is named by port alone")

    @property
    def label(self) -> str:
        return end_label(self.node, self.switch, self.port, self.port_num) or ""

    @property
    def node_port_num(self) -> int:
        """The port number of a node port, which a record may leave out for port 1."""
        return 1 if self.port_num is UNSET else self.port_num


class LinkRecord(Record, kw_only=True):
    a: LinkEndRecord
    b: LinkEndRecord
    status: LinkStatus | UnsetType = UNSET
    label: str | UnsetType = UNSET
    cable_type: str | UnsetType = UNSET


class NvLinkRecord(Record, kw_only=True):
    """NVLink between two GPUs of a node, or ``mesh: true`` for every pair (HGX boards, where each GPU
    reaches every other through the NVSwitches)."""

    node: str
    gpus: typing.Annotated[list[int], msgspec.Meta(min_length=2, max_length=2)] | UnsetType = UNSET
    mesh: bool = False
    lanes: int
    bandwidth_gbs: int
    link_state: LinkState | UnsetType = UNSET

    def __post_init__(self) -> None:
        if (self.gpus is UNSET) == (not self.mesh):
            raise ValueError("an NVLink record gives either gpus: [a, b] or mesh: true")
        if self.gpus is not UNSET and self.gpus[0] == self.gpus[1]:
            raise ValueError("an NVLink joins two different GPUs")


class Document(Record, kw_only=True):
    version: Literal[1]
    clusters: list[ClusterRecord] = []
    node_types: list[NodeTypeRecord] = []
    racks: list[RackRecord] = []
    fabrics: list[FabricRecord] = []
    switches: list[SwitchRecord] = []
    nodes: list[NodeRecord] = []
    links: list[LinkRecord] = []
    nvlinks: list[NvLinkRecord] = []


SECTIONS: dict[str, type[Record]] = {
    "clusters": ClusterRecord,
    "node_types": NodeTypeRecord,
    "racks": RackRecord,
    "fabrics": FabricRecord,
    "switches": SwitchRecord,
    "nodes": NodeRecord,
    "links": LinkRecord,
    "nvlinks": NvLinkRecord,
}
SUPPORTED_VERSION = 1


def record_label(section: str, record: object) -> str | None:
    """The name a person knows a record by, read from the raw record so that it works for records
    that failed to convert too."""
    if not isinstance(record, dict):
        return None
    if section == "links":
        ends = [record.get(side) for side in ("a", "b")]
        labels = [
            end_label(e.get("node"), e.get("switch"), e.get("port"), e.get("port_num"))
            for e in ends
            if isinstance(e, dict)
        ]
        return " ↔ ".join(labels) if len(labels) == 2 and all(labels) else None
    field = {"nodes": "hostname", "nvlinks": "node"}.get(section, "name")
    value = record.get(field)
    return value if isinstance(value, str) else None


def convert_document(raw: object) -> Document:
    """The document as Structs, or ImportFailed with one issue for each record that does not fit."""
    if not isinstance(raw, dict):
        raise ImportFailed([Issue(DOCUMENT, f"expected a mapping with version and sections, got {_type_name(raw)}")])
    issues = [
        Issue(str(key), f"unknown section{did_you_mean(str(key), ['version', *SECTIONS])}")
        for key in raw
        if key != "version" and key not in SECTIONS
    ]
    if "version" not in raw:
        issues.append(Issue("version", f"required: the format version (version: {SUPPORTED_VERSION})"))
    elif raw["version"] != SUPPORTED_VERSION or isinstance(raw["version"], bool):
        issues.append(Issue("version", f"{raw['version']!r} is not a version this server reads ({SUPPORTED_VERSION})"))
    sections: dict[str, list[Record]] = {}
    for section, record_type in SECTIONS.items():
        items = raw.get(section)
        if items is None:  # "nodes:" with nothing under it
            items = []
        if not isinstance(items, list):
            issues.append(Issue(section, f"expected a list of records, got {_type_name(items)}"))
            continue
        sections[section] = []
        for index, item in enumerate(items):
            try:
                sections[section].append(msgspec.convert(item, record_type))
            except msgspec.ValidationError as exc:
                path = record_path(section, index, record_label(section, item))
                issues.append(_explain(exc, path, record_type))
    if issues:
        raise ImportFailed(issues)
    return Document(version=SUPPORTED_VERSION, **sections)  # type: ignore[arg-type]


# Translating msgspec's messages ------------------------------------------------------------------

_MESSAGE = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<at>[^`]*)`)?$", re.DOTALL)
_SEGMENT = re.compile(r"\.(\w+)|\[(\d+)\]")
_UNKNOWN_FIELD = re.compile(r"^Object contains unknown field `(?P<field>[^`]*)`$")
_MISSING_FIELD = re.compile(r"^Object missing required field `(?P<field>[^`]*)`$")
_BAD_ENUM = re.compile(r"^Invalid enum value (?P<value>.*)$")
_EXPECTED_STR = re.compile(r"^Expected `str`, got `(int|float|bool)`$")


def _explain(exc: msgspec.ValidationError, record_path_: str, record_type: type) -> Issue:
    """Turn ``Invalid enum value 'x' - at `$.gpus[0].state``` into a path and a message that says
    what would have been accepted."""
    match = _MESSAGE.match(str(exc))
    assert match is not None  # the pattern matches any text
    message, at = match["message"], match["at"] or ""
    path = record_path_ + at
    target = _type_at(record_type, [name or int(index) for name, index in _SEGMENT.findall(at)])
    if found := _UNKNOWN_FIELD.match(message):
        names = list(msgspec.structs.fields(target)) if _is_struct(target) else []
        known = [f.name for f in names]
        hint = did_you_mean(found["field"], known) or (f"; this record has: {', '.join(known)}" if known else "")
        return Issue(f"{path}.{found['field']}", f"unknown field{hint}")
    if found := _MISSING_FIELD.match(message):
        return Issue(f"{path}.{found['field']}", "required field is missing")
    if (found := _BAD_ENUM.match(message)) and isinstance(target, type) and issubclass(target, enum.Enum):
        choices = ", ".join(str(member.value) for member in target)
        return Issue(path, f"{found['value']} is not one of: {choices}")
    if _EXPECTED_STR.match(message):
        message += " (quote it: YAML reads unquoted 0x..., digits with colons and yes/no as numbers or booleans)"
    return Issue(path, message[:1].lower() + message[1:])


def _is_struct(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, msgspec.Struct)


def _type_at(record_type: type, segments: list[str | int]) -> Any:
    """The declared type at a path inside a record (``gpus``, ``0``, ``state`` -> GpuState)."""
    current: Any = record_type
    for segment in segments:
        current = _without_optional(current)
        if isinstance(segment, int):
            current = typing.get_args(current)[0] if typing.get_origin(current) is list else None
        elif _is_struct(current):
            current = typing.get_type_hints(current, include_extras=False).get(segment)
        else:
            return None
    return _without_optional(current)


def _without_optional(hint: Any) -> Any:
    """``GpuState | UnsetType`` -> GpuState; ``list[int]`` stays as it is."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a not in (UnsetType, type(None))]
        return members[0] if len(members) == 1 else hint
    return hint


def _type_name(value: object) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", type(None): "nothing"}.get(
        type(value), type(value).__name__
    )
