"""What the database holds of an inventory document: every stored row the document names, by natural
key, read in a fixed number of queries whatever the document's size.

This is the importer's only read; the planner (plan.py) takes the result and the document and reads
nothing more, so that planning can be tested on rows built in memory.
"""

from dataclasses import dataclass, field

from django.db.models import Q

from apps.inventory.importer.schema import Document
from apps.inventory.models.clusters import Cluster, NodeType, PortTemplate, Rack
from apps.inventory.models.fabric import Fabric, LinkTermination, NvLink, Switch, SwitchPort
from apps.inventory.models.nodes import Gpu, NetworkPort, Node

Port = NetworkPort | SwitchPort
PortKey = tuple[str, int]  # "network" or "switch", and the port's id


def port_key(port: Port) -> PortKey:
    return ("network" if isinstance(port, NetworkPort) else "switch", port.pk)


@dataclass
class StoredState:
    """The stored rows a document names, each related row it shows already attached (a GPU's node, a
    switch's fabric and rack, ...). Every registry may be empty: a document for an empty database."""

    clusters: dict[str, Cluster] = field(default_factory=dict)
    node_types: dict[str, NodeType] = field(default_factory=dict)
    templates: dict[str, dict[tuple[str, int], PortTemplate]] = field(default_factory=dict)  # node type, port
    racks: dict[tuple[str, str], Rack] = field(default_factory=dict)  # cluster name, rack name
    fabrics: dict[str, Fabric] = field(default_factory=dict)
    switches: dict[str, Switch] = field(default_factory=dict)
    switch_ports: dict[tuple[str, str], SwitchPort] = field(default_factory=dict)  # switch name, port name
    nodes: dict[str, Node] = field(default_factory=dict)
    ports: dict[tuple[str, str, int], NetworkPort] = field(default_factory=dict)  # hostname, device, port
    gpus: dict[str, Gpu] = field(default_factory=dict)  # by UUID: of the nodes named, and the UUIDs listed
    nvlinks: dict[frozenset[int], NvLink] = field(default_factory=dict)  # of nodes with nvlinks records, by GPU ids
    # Ids of the GPUs the document moves to another node that have NVLinks (an import never deletes them).
    gpus_with_nvlinks: set[int] = field(default_factory=set)
    # Of each stored port a link of the document names: its termination, and every end of that link.
    terminations: dict[PortKey, LinkTermination] = field(default_factory=dict)
    link_ends: dict[int, list[LinkTermination]] = field(default_factory=dict)  # by link id


def load_stored_state(doc: Document) -> StoredState:
    """Every stored row the document names: at most 13 queries, whatever the document's size."""
    stored = StoredState()
    link_ends = [end for link in doc.links for end in (link.a, link.b)]
    cluster_names = {r.name for r in doc.clusters} | {r.cluster for r in (*doc.racks, *doc.fabrics, *doc.nodes)}
    stored.clusters = {c.name: c for c in Cluster.objects.filter(name__in=cluster_names)}

    node_types = NodeType.objects.filter(
        name__in={r.name for r in doc.node_types} | {r.node_type for r in doc.nodes}
    ).prefetch_related("port_templates")
    stored.node_types = {t.name: t for t in node_types}
    stored.templates = {t.name: {(p.device_name, p.port_num): p for p in t.port_templates.all()} for t in node_types}

    rack_names = {r.name for r in doc.racks} | {r.rack for r in (*doc.nodes, *doc.switches) if isinstance(r.rack, str)}
    racks = Rack.objects.filter(name__in=rack_names).select_related("cluster")
    stored.racks = {(r.cluster.name, r.name): r for r in racks}

    fabric_names = {r.name for r in doc.fabrics} | {r.fabric for r in doc.switches}
    stored.fabrics = {f.name: f for f in Fabric.objects.filter(name__in=fabric_names).select_related("cluster")}

    switch_names = {r.name for r in doc.switches} | {e.switch for e in link_ends if isinstance(e.switch, str)}
    switches = Switch.objects.filter(name__in=switch_names).select_related("fabric__cluster", "rack__cluster")
    stored.switches = {s.name: s for s in switches}
    for port in SwitchPort.objects.filter(switch__in=switches).select_related("switch"):
        stored.switch_ports[(port.switch.name, port.name)] = port

    hostnames_in_file = {node.hostname for node in doc.nodes}
    uuids_in_file = {gpu.uuid for node in doc.nodes for gpu in node.gpus}
    hostnames = (
        hostnames_in_file | {e.node for e in link_ends if isinstance(e.node, str)} | {r.node for r in doc.nvlinks}
    )
    nodes = Node.objects.filter(hostname__in=hostnames).select_related("cluster", "node_type", "rack__cluster")
    stored.nodes = {n.hostname: n for n in nodes}
    by_pk = {n.pk: n for n in nodes}
    for port in NetworkPort.objects.filter(node__in=nodes):
        port.node = by_pk[port.node_id]
        stored.ports[(port.node.hostname, port.device_name, port.port_num)] = port
    for gpu in Gpu.objects.filter(Q(node__in=nodes) | Q(uuid__in=uuids_in_file)).select_related("node"):
        gpu.node = by_pk.get(gpu.node_id, gpu.node)
        stored.gpus[gpu.uuid] = gpu
    nvlink_nodes = [stored.nodes[r.node] for r in doc.nvlinks if r.node in stored.nodes]
    for link in NvLink.objects.filter(_node__in=nvlink_nodes):
        stored.nvlinks[frozenset((link.gpu_a_id, link.gpu_b_id))] = link

    stored.gpus_with_nvlinks = _moving_gpus_with_nvlinks(doc, stored)
    _load_terminations(doc, stored)
    return stored


def _moving_gpus_with_nvlinks(doc: Document, stored: StoredState) -> set[int]:
    """Of the stored GPUs the document lists on another node than their own, those with NVLinks:
    no query when no GPU moves."""
    moving = {
        gpu.pk
        for node in doc.nodes
        for record in node.gpus
        if (gpu := stored.gpus.get(record.uuid)) is not None and gpu.node.hostname != node.hostname
    }
    if not moving:
        return set()
    pairs = NvLink.objects.filter(Q(gpu_a_id__in=moving) | Q(gpu_b_id__in=moving)).values_list("gpu_a_id", "gpu_b_id")
    return moving & {pk for pair in pairs for pk in pair}


def _load_terminations(doc: Document, stored: StoredState) -> None:
    """The links that already hold a stored port the document's links name, with both their ends:
    one query (none when every such port is new)."""
    network_ids, switch_ids = set(), set()
    for end in (end for link in doc.links for end in (link.a, link.b)):
        if isinstance(end.node, str):
            if (port := stored.ports.get((end.node, end.port, end.node_port_num))) is not None:
                network_ids.add(port.pk)
        elif (switch_port := stored.switch_ports.get((end.switch, end.port))) is not None:
            switch_ids.add(switch_port.pk)
    if not (network_ids or switch_ids):
        return
    on_links = LinkTermination.objects.filter(Q(network_port_id__in=network_ids) | Q(switch_port_id__in=switch_ids))
    terminations = LinkTermination.objects.filter(link__in=on_links.values("link")).select_related(
        "link", "network_port__node", "switch_port__switch"
    )
    for termination in terminations:
        stored.link_ends.setdefault(termination.link_id, []).append(termination)
        stored.terminations[port_key(termination.endpoint)] = termination
