from django.contrib import admin

from apps.inventory.models import (
    BurnInResult,
    Cluster,
    Fabric,
    Gpu,
    Link,
    LinkTermination,
    NetworkPort,
    Node,
    NodeTransition,
    NodeType,
    NvLink,
    PortTemplate,
    Rack,
    Switch,
    SwitchPort,
)


@admin.register(Cluster)
class ClusterAdmin(admin.ModelAdmin):
    list_display = ["name", "site", "description"]
    search_fields = ["name", "site"]


class PortTemplateInline(admin.TabularInline):
    model = PortTemplate
    extra = 0


@admin.register(NodeType)
class NodeTypeAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "gpu_model",
        "gpus_per_node",
        "peak_bf16_tflops",
        "network_gbps_per_gpu",
        "gpu_power_limit_w",
    ]
    search_fields = ["name", "gpu_model"]
    inlines = [PortTemplateInline]


@admin.register(Rack)
class RackAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "location", "power_budget_kw"]
    list_filter = ["cluster"]


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    fields = ["index", "uuid", "model", "serial", "pci_bus_id", "state"]


class NetworkPortInline(admin.TabularInline):
    model = NetworkPort
    extra = 0
    fields = ["device_name", "port_num", "kind", "rate_gbps", "link_state", "guid", "mac"]


class HistoryInline(admin.TabularInline):
    """History is read, never written here: it is recorded where the change is made."""

    extra = 0
    can_delete = False

    def has_add_permission(self, request: object, obj: object = None) -> bool:
        return False


class NodeTransitionInline(HistoryInline):
    model = NodeTransition  # changes go through the lifecycle actions, which check the state machine
    fields = ["at", "from_state", "to_state", "actor", "reason", "burn_in", "burn_in_override"]
    readonly_fields = fields


class BurnInResultInline(HistoryInline):
    model = BurnInResult  # recorded by the burn-in runs that judged them
    fields = ["finished_at", "passed", "run", "summary"]
    readonly_fields = fields


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["hostname", "cluster", "node_type", "rack", "lifecycle", "liveness", "last_seen_at"]
    list_filter = ["cluster", "node_type", "lifecycle", "liveness"]
    search_fields = ["hostname", "serial", "management_address"]
    list_select_related = ["cluster", "node_type", "rack"]
    readonly_fields = ["lifecycle", "lifecycle_changed_at", "liveness", "last_seen_at"]
    inlines = [GpuInline, NetworkPortInline, NodeTransitionInline, BurnInResultInline]


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ["uuid", "node", "index", "model", "serial", "state"]
    list_filter = ["state", "model"]
    search_fields = ["uuid", "serial", "node__hostname"]
    list_select_related = ["node"]


@admin.register(NetworkPort)
class NetworkPortAdmin(admin.ModelAdmin):
    list_display = ["__str__", "kind", "rate_gbps", "link_state", "_peer_switch_port"]
    list_filter = ["kind", "link_state"]
    search_fields = ["node__hostname", "device_name", "guid"]
    list_select_related = ["node", "_peer_switch_port__switch"]


@admin.register(Fabric)
class FabricAdmin(admin.ModelAdmin):
    list_display = ["name", "cluster", "kind", "topology", "oversubscription_ratio"]


@admin.register(Switch)
class SwitchAdmin(admin.ModelAdmin):
    list_display = ["name", "fabric", "tier", "model", "rack"]
    list_filter = ["fabric", "tier"]
    search_fields = ["name"]


@admin.register(SwitchPort)
class SwitchPortAdmin(admin.ModelAdmin):
    list_display = ["__str__", "rate_gbps", "link_state"]
    search_fields = ["switch__name", "name"]
    list_select_related = ["switch"]


class LinkTerminationInline(admin.TabularInline):
    model = LinkTermination
    extra = 0
    max_num = 2
    raw_id_fields = ["network_port", "switch_port"]


@admin.register(Link)
class LinkAdmin(admin.ModelAdmin):
    list_display = ["id", "__str__", "status", "cable_type"]
    list_filter = ["status"]
    inlines = [LinkTerminationInline]


@admin.register(NvLink)
class NvLinkAdmin(admin.ModelAdmin):
    list_display = ["__str__", "lanes", "bandwidth_gbs", "link_state"]
    raw_id_fields = ["gpu_a", "gpu_b"]
