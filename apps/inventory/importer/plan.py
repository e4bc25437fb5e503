"""From a well-formed document and the stored rows it names to a plan of rows to create and update
(validation layers 2 to 4).

Planning is a pure function of the two (``plan_import``): it reads no database (stored.py has
loaded what it needs) and writes nothing but the plan, whose updates are the stored rows with the
document's values set on them. It resolves the references between records (in the file or in the
database); finds what the file says twice and what contradicts the database; and checks each new or
changed row with the model's own field validation. It collects every problem before giving up, so
one run lists them all.

Rows are matched by natural key and never deleted. A record's missing fields leave stored values
alone. A node's ``lifecycle`` is its initial state and applies only when the node is created.
"""

import itertools
from typing import Any

from apps.inventory.importer.errors import ImportFailed, did_you_mean, record_path
from apps.inventory.importer.rows import Plan, PlanBuilder, record_values
from apps.inventory.importer.schema import UNSET, Document, LinkEndRecord, NodeRecord
from apps.inventory.importer.stored import Port, StoredState, port_key
from apps.inventory.models import (
    Cluster,
    Fabric,
    Gpu,
    Link,
    NetworkPort,
    Node,
    NodeType,
    NvLink,
    PortTemplate,
    Rack,
    Switch,
    SwitchPort,
)


def plan_import(document: Document, stored: StoredState, *, dry_run: bool) -> Plan:
    """The rows the document creates and updates over the stored state, or ImportFailed with every problem."""
    return _Planner(document, stored, dry_run=dry_run).make()


class _Planner:
    def __init__(self, document: Document, stored: StoredState, *, dry_run: bool) -> None:
        self.doc = document
        self.stored = stored
        self.rows = PlanBuilder(dry_run=dry_run)
        # Rows by natural key: as stored, then as this document makes them (copies: the stored state
        # stays as it was loaded).
        self.clusters = dict(stored.clusters)
        self.node_types = dict(stored.node_types)
        self.templates = {name: dict(templates) for name, templates in stored.templates.items()}
        self.racks = dict(stored.racks)
        self.fabrics = dict(stored.fabrics)
        self.switches = dict(stored.switches)
        self.switch_port_rates: dict[str, int] = {}
        self.switch_ports = dict(stored.switch_ports)
        self.nodes = dict(stored.nodes)
        self.ports = dict(stored.ports)
        # GPUs by hostname and index as they will be after the import.
        self.gpus_at: dict[str, dict[int, Gpu]] = {}
        self.gpu_paths: dict[tuple[str, int], str] = {}
        self.hostnames_in_file = {node.hostname for node in document.nodes}
        self.uuids_in_file = {gpu.uuid for node in document.nodes for gpu in node.gpus}

    def make(self) -> Plan:
        self._plan_clusters()
        self._plan_node_types()
        self._plan_racks()
        self._plan_fabrics()
        self._plan_switches()
        for index, record in enumerate(self.doc.nodes):
            self._plan_node(index, record)
        self._keep_unlisted_gpus()
        self._plan_links()
        self._plan_nvlinks()
        if self.rows.issues:
            raise ImportFailed(self.rows.issues)
        return self.rows.plan

    # Sections ----------------------------------------------------------------------------------------

    def _plan_clusters(self) -> None:
        for index, record in enumerate(self.doc.clusters):
            path = record_path("clusters", index, record.name)
            if self.rows.claim(("cluster", record.name), path, f"{record.name} is also described by", "name"):
                self.clusters[record.name] = self.rows.upsert(
                    Cluster,
                    self.clusters.get(record.name),
                    {"name": record.name},
                    record_values(record, "description", "site"),
                    key=record.name,
                    path=path,
                )

    def _plan_node_types(self) -> None:
        for index, record in enumerate(self.doc.node_types):
            path = record_path("node_types", index, record.name)
            if not self.rows.claim(("node_type", record.name), path, f"{record.name} is also described by", "name"):
                continue
            node_type = self.rows.upsert(
                NodeType,
                self.node_types.get(record.name),
                {"name": record.name},
                record_values(
                    record,
                    "gpu_model",
                    "gpus_per_node",
                    "gpu_memory_gb",
                    "peak_bf16_tflops",
                    "hbm_bandwidth_gbs",
                    "nvlink_bandwidth_gbs",
                    "network_gbps_per_gpu",
                    "gpu_power_limit_w",
                ),
                key=record.name,
                path=path,
            )
            self.node_types[record.name] = node_type
            templates = self.templates.setdefault(record.name, {})
            for t_index, template in enumerate(record.port_templates):
                t_path = f"{path}.port_templates[{t_index}]"
                port = (template.device_name, template.port_num)
                label = f"{template.device_name}/{template.port_num}"
                if self.rows.claim(("template", record.name, *port), t_path, f"{label} is also described by"):
                    templates[port] = self.rows.upsert(
                        PortTemplate,
                        templates.get(port),
                        {"node_type": node_type, "device_name": template.device_name, "port_num": template.port_num},
                        record_values(template, "kind", "rate_gbps"),
                        key=f"{record.name} {label}",
                        path=t_path,
                    )

    def _plan_racks(self) -> None:
        for index, record in enumerate(self.doc.racks):
            path = record_path("racks", index, record.name)
            key = (record.cluster, record.name)
            subject = f"rack {record.name} of {record.cluster} is also described by"
            if not self.rows.claim(("rack", *key), path, subject, "name"):
                continue
            cluster = self.rows.ref(self.clusters, record.cluster, f"{path}.cluster", "cluster")
            if cluster is None:
                self.rows.refused.add(("rack", key))
            else:
                self.racks[key] = self.rows.upsert(
                    Rack,
                    self.racks.get(key),
                    {"cluster": cluster, "name": record.name},
                    record_values(record, "location", "power_budget_kw"),
                    key=f"{record.cluster}/{record.name}",
                    path=path,
                )

    def _plan_fabrics(self) -> None:
        for index, record in enumerate(self.doc.fabrics):
            path = record_path("fabrics", index, record.name)
            if not self.rows.claim(("fabric", record.name), path, f"{record.name} is also described by", "name"):
                continue
            cluster = self.rows.ref(self.clusters, record.cluster, f"{path}.cluster", "cluster")
            if cluster is None:
                self.rows.refused.add(("fabric", record.name))
            else:
                self.fabrics[record.name] = self.rows.upsert(
                    Fabric,
                    self.fabrics.get(record.name),
                    {"name": record.name},
                    {
                        "cluster": cluster,
                        **record_values(record, "kind", "topology", "oversubscription_ratio", "description"),
                    },
                    key=record.name,
                    path=path,
                )

    def _rack(self, cluster: Cluster, name: Any, path: str) -> Rack | Any | None:
        """The rack a node or switch names (in its own cluster), None to clear it, UNSET to keep it."""
        if not isinstance(name, str):
            return name
        rack = self.racks.get((cluster.name, name))
        if rack is None and ("rack", (cluster.name, name)) not in self.rows.refused:
            known = [rack_name for cluster_name, rack_name in self.racks if cluster_name == cluster.name]
            self.rows.error(path, f"no rack {name!r} in cluster {cluster.name}{did_you_mean(name, known)}")
        return rack

    def _plan_switches(self) -> None:
        for index, record in enumerate(self.doc.switches):
            path = record_path("switches", index, record.name)
            if not self.rows.claim(("switch", record.name), path, f"{record.name} is also described by", "name"):
                continue
            fabric = self.rows.ref(self.fabrics, record.fabric, f"{path}.fabric", "fabric")
            rack = self._rack(fabric.cluster, record.rack, f"{path}.rack") if fabric else None
            if fabric is None or (rack is None and record.rack is not None):
                self.rows.refused.add(("switch", record.name))
                continue
            switch = self.rows.upsert(
                Switch,
                self.switches.get(record.name),
                {"name": record.name},
                {"fabric": fabric, "rack": rack, **record_values(record, "tier", "model", "management_address")},
                key=record.name,
                path=path,
            )
            self.switches[record.name] = switch
            if record.port_rate_gbps is not UNSET:
                self.switch_port_rates[record.name] = record.port_rate_gbps
            for p_index, port in enumerate(record.ports):
                p_path = f"{path}.ports[{p_index}]"
                key = (record.name, port.name)
                if not self.rows.claim(("switch_port", *key), p_path, f"{port.name} is also described by", "name"):
                    continue
                stored = self.switch_ports.get(key)
                values = record_values(port, "rate_gbps", "link_state")
                if stored is None and port.rate_gbps is UNSET:
                    if record.name not in self.switch_port_rates:
                        self.rows.error(
                            f"{p_path}.rate_gbps", "required for a new port (or give the switch port_rate_gbps)"
                        )
                        self.rows.refused.add(("switch port", key))
                        continue
                    values["rate_gbps"] = self.switch_port_rates[record.name]
                self.switch_ports[key] = self.rows.upsert(
                    SwitchPort,
                    stored,
                    {"switch": switch, "name": port.name},
                    values,
                    key=f"{record.name}:{port.name}",
                    path=p_path,
                )

    # Nodes, their ports and GPUs ---------------------------------------------------------------------

    def _plan_node(self, index: int, record: NodeRecord) -> None:
        path = record_path("nodes", index, record.hostname)
        if not self.rows.claim(("node", record.hostname), path, f"{record.hostname} is also described by", "hostname"):
            return
        cluster = self.rows.ref(self.clusters, record.cluster, f"{path}.cluster", "cluster")
        node_type = self.rows.ref(self.node_types, record.node_type, f"{path}.node_type", "node type")
        rack = self._rack(cluster, record.rack, f"{path}.rack") if cluster else None
        if cluster is None or node_type is None or (rack is None and record.rack is not None):
            self.rows.refused.add(("node", record.hostname))
            return
        stored = self.nodes.get(record.hostname)
        values = {
            "cluster": cluster,
            "node_type": node_type,
            "rack": rack,
            **record_values(record, "rack_position", "management_address", "serial"),
        }
        key_values = {"hostname": record.hostname, "lifecycle": record.lifecycle}
        node = self.rows.upsert(Node, stored, key_values, values, key=record.hostname, path=path)
        self.nodes[record.hostname] = node
        self._plan_ports(node, record, path, creating=stored is None)
        self._plan_gpus(node, record, path)

    def _plan_ports(self, node: Node, record: NodeRecord, path: str, *, creating: bool) -> None:
        """A new node gets its node type's ports (as Node.save makes them) with the file's values on
        top; a stored node keeps its ports, and the file updates the ones it lists or adds them (from
        the node type's template where it has one)."""
        hostname = record.hostname
        templates = {
            key: {"kind": t.kind, "rate_gbps": t.rate_gbps}
            for key, t in self.templates.get(record.node_type, {}).items()
        }
        listed: dict[tuple[str, int], tuple[str, dict[str, Any]]] = {}
        for p_index, port in enumerate(record.ports):
            p_path = f"{path}.ports[{p_index}]"
            key = (port.device_name, port.port_num)
            subject = f"{port.device_name}/{port.port_num} is also described by"
            if self.rows.claim(("port", hostname, *key), p_path, subject):
                listed[key] = (p_path, record_values(port, "kind", "rate_gbps", "link_state", "guid", "mac"))
        for key in [*templates, *(k for k in listed if k not in templates)] if creating else list(listed):
            p_path, given = listed.get(key, (path, {}))
            stored = None if creating else self.ports.get((hostname, *key))
            values = (templates.get(key, {}) if stored is None else {}) | {
                name: value for name, value in given.items() if value is not UNSET
            }
            if stored is None and not {"kind", "rate_gbps"} <= values.keys():
                self.rows.error(
                    p_path,
                    f"{key[0]}/{key[1]} is not a port of {hostname} or its node type {record.node_type}; "
                    "kind and rate_gbps are needed to add it",
                )
                self.rows.refused.add(("port", (hostname, *key)))
                continue
            self.ports[(hostname, *key)] = self.rows.upsert(
                NetworkPort,
                stored,
                {"node": node, "device_name": key[0], "port_num": key[1]},
                values,
                key=f"{hostname}:{key[0]}/{key[1]}",
                path=p_path,
            )

    def _plan_gpus(self, node: Node, record: NodeRecord, path: str) -> None:
        hostname = record.hostname
        placed = self.gpus_at.setdefault(hostname, {})
        for g_index, gpu in enumerate(record.gpus):
            g_path = f"{path}.gpus[{g_index}]"
            fresh_uuid = self.rows.claim(("gpu", gpu.uuid), g_path, f"{gpu.uuid} is also used by", "uuid")
            fresh_index = self.rows.claim(
                ("gpu_index", hostname, gpu.index), g_path, f"index {gpu.index} is also used by", "index"
            )
            if not (fresh_uuid and fresh_index):
                self.rows.refused.add(("gpus", hostname))
                continue
            stored = self.stored.gpus.get(gpu.uuid)
            conflict = self._move_conflict(stored, hostname) if stored is not None else None
            if conflict:
                self.rows.error(f"{g_path}.uuid", conflict)
                self.rows.refused.add(("gpus", hostname))
                continue
            values = {
                "node": node,
                "index": gpu.index,
                **record_values(gpu, "model", "serial", "memory_mib", "pci_bus_id", "state"),
            }
            if stored is None and gpu.model is UNSET:
                values["model"] = node.node_type.gpu_model  # what NVML will report for this node type
            placed[gpu.index] = self.rows.upsert(Gpu, stored, {"uuid": gpu.uuid}, values, key=gpu.uuid, path=g_path)
            self.gpu_paths[(hostname, gpu.index)] = g_path

    def _move_conflict(self, stored: Gpu, hostname: str) -> str | None:
        """Why a stored GPU cannot be where the file puts it, if it cannot. A GPU may move between
        nodes the file describes; from a node it does not, the UUID is more likely a typo."""
        owner = stored.node.hostname
        if owner == hostname:
            return None
        if owner not in self.hostnames_in_file:
            return (
                f"{stored.uuid} is gpu{stored.index} of {owner} in the database, and {owner} is not in this file; "
                f"if the GPU really moved, describe {owner} too, otherwise correct the UUID"
            )
        if stored.pk in self.stored.gpus_with_nvlinks:
            return (
                f"{stored.uuid} would move from {owner} to {hostname}, but it has NVLinks on {owner}; an import "
                "never deletes them: delete them first if the GPU really moved"
            )
        return None

    def _keep_unlisted_gpus(self) -> None:
        """A stored GPU the file does not list stays where it is (imports never delete), so its index
        is taken: a file that puts another GPU there is refused with both UUIDs named."""
        for gpu in self.stored.gpus.values():
            hostname = gpu.node.hostname
            if gpu.uuid in self.uuids_in_file or hostname not in self.hostnames_in_file:
                continue
            newcomer = self.gpus_at.setdefault(hostname, {}).setdefault(gpu.index, gpu)
            if newcomer is not gpu:
                self.rows.error(
                    f"{self.gpu_paths[(hostname, gpu.index)]}.index",
                    f"gpu{gpu.index} of {hostname} is {gpu.uuid} in the database, which this file does not list; "
                    "an import never deletes: remove the old GPU first if it was replaced, or correct the index",
                )

    def _gpus_of(self, hostname: str) -> dict[int, Gpu]:
        """The node's GPUs by index after the import (for a node the file does not describe: as stored,
        less any GPU the file moves elsewhere)."""
        if hostname not in self.gpus_at:
            stored = [g for g in self.stored.gpus.values() if g.node.hostname == hostname]
            self.gpus_at[hostname] = {g.index: g for g in stored if g.uuid not in self.uuids_in_file}
        return self.gpus_at[hostname]

    # Links -------------------------------------------------------------------------------------------

    def _link_end(self, end: LinkEndRecord, path: str) -> Port | tuple[Switch, str] | None:
        """The port a link end names; for a switch port the file does not list and the database does
        not have, the switch and the name to create it with."""
        if isinstance(end.node, str):
            if self.rows.ref(self.nodes, end.node, f"{path}.node", "node") is None:
                return None
            port_num = end.node_port_num
            port = self.ports.get((end.node, end.port, port_num))
            if port is None and ("port", (end.node, end.port, port_num)) not in self.rows.refused:
                ports = ", ".join(sorted(f"{d}/{n}" for h, d, n in self.ports if h == end.node)) or "none"
                self.rows.error(f"{path}.port", f"{end.node} has no port {end.port}/{port_num}; its ports: {ports}")
            return port
        switch = self.rows.ref(self.switches, end.switch, f"{path}.switch", "switch")
        if switch is None or ("switch port", (switch.name, end.port)) in self.rows.refused:
            return None
        return self.switch_ports.get((switch.name, end.port)) or (switch, end.port)

    def _port_for_link(self, switch: Switch, name: str, other: Any, path: str) -> SwitchPort | None:
        """A switch port named only by a link: created at the rate of the node port at the other end,
        or (between switches) at the switch's port_rate_gbps."""
        if (switch.name, name) in self.switch_ports:
            return self.switch_ports[(switch.name, name)]
        rate = other.rate_gbps if isinstance(other, NetworkPort) else self.switch_port_rates.get(switch.name)
        if rate is None:
            self.rows.error(
                path,
                f"{switch.name}:{name} does not exist; list it under the switch's ports with its rate_gbps, "
                "or give the switch port_rate_gbps",
            )
            return None
        port = self.rows.upsert(
            SwitchPort,
            None,
            {"switch": switch, "name": name, "rate_gbps": rate},
            {},
            key=f"{switch.name}:{name}",
            path=path,
        )
        self.switch_ports[(switch.name, name)] = port
        return port

    def _plan_links(self) -> None:
        resolved: list[tuple[str, Any, list[Any]]] = []
        for index, record in enumerate(self.doc.links):
            path = record_path("links", index, f"{record.a.label} ↔ {record.b.label}")
            ends = [self._link_end(record.a, f"{path}.a"), self._link_end(record.b, f"{path}.b")]
            if None not in ends:
                resolved.append((path, record, ends))
        cabled: list[tuple[str, Any, Port, Port]] = []
        for path, record, ends in resolved:
            for side, other_side in ((0, 1), (1, 0)):
                if isinstance(ends[side], tuple):
                    switch, name = ends[side]
                    ends[side] = self._port_for_link(switch, name, ends[other_side], f"{path}.{'ab'[side]}")
            if None in ends:
                continue
            a, b = ends
            if a is b:
                self.rows.error(path, f"a link cannot join {a} to itself")
                continue
            # Each port is one instance in the registries, so its identity stands for it.
            claims = [
                self.rows.claim(("cabled", id(p)), path, f"{p} is also cabled by", s)
                for s, p in zip("ab", ends, strict=True)
            ]
            if all(claims):
                cabled.append((path, record, a, b))

        for path, record, a, b in cabled:
            held = [self.stored.terminations.get(port_key(p)) if p.pk is not None else None for p in (a, b)]
            values = record_values(record, "status", "label", "cable_type")
            key = f"{a} ↔ {b}"
            if held == [None, None]:
                link = self.rows.upsert(Link, None, {}, values, key=key, path=path)
                self.rows.plan.link_ends.append((link, a, b))
            elif None not in held and held[0].link_id == held[1].link_id:
                self.rows.upsert(Link, held[0].link, {}, values, key=key, path=path)
            else:
                for side, port, termination in zip("ab", (a, b), held, strict=True):
                    if termination is None:
                        continue
                    ends = self.stored.link_ends[termination.link_id]
                    peers = [t.endpoint for t in ends if t.pk != termination.pk]
                    peer = peers[0] if peers else "nothing"
                    self.rows.error(
                        f"{path}.{side}",
                        f"{port} is cabled to {peer} in the database (link {termination.link_id}); an import never "
                        f"re-cables: delete link {termination.link_id} first if the cable really moved",
                    )

    def _plan_nvlinks(self) -> None:
        for index, record in enumerate(self.doc.nvlinks):
            path = record_path("nvlinks", index, record.node)
            node = self.rows.ref(self.nodes, record.node, f"{path}.node", "node")
            if node is None or ("gpus", record.node) in self.rows.refused:
                continue
            gpus = self._gpus_of(record.node)
            if record.mesh:
                pairs = list(itertools.combinations(sorted(gpus), 2))
                if not pairs:
                    self.rows.error(
                        f"{path}.mesh", f"{record.node} has fewer than two GPUs in this file or the database"
                    )
            else:
                missing = [i for i in record.gpus if i not in gpus]
                if missing:
                    self.rows.error(
                        f"{path}.gpus", f"{record.node} has no GPU with index {missing[0]}; it has {sorted(gpus)}"
                    )
                    continue
                pairs = [tuple(sorted(record.gpus))]
            for a, b in pairs:
                subject = f"NVLink gpu{a} ↔ gpu{b} of {record.node} is also described by"
                if not self.rows.claim(("nvlink", record.node, a, b), path, subject):
                    continue
                gpu_a, gpu_b = gpus[a], gpus[b]
                stored = self.stored.nvlinks.get(frozenset((gpu_a.pk, gpu_b.pk))) if gpu_a.pk and gpu_b.pk else None
                self.rows.upsert(
                    NvLink,
                    stored,
                    {"gpu_a": gpu_a, "gpu_b": gpu_b},
                    record_values(record, "lanes", "bandwidth_gbs", "link_state"),
                    key=f"{record.node} gpu{a} ↔ gpu{b}",
                    path=path,
                )
