"""Writing a plan: parents before children, in bulk where the row count grows with the fleet."""

from datetime import datetime

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import models
from django.db.models import F
from django.utils import timezone

from apps.inventory.importer.plan import Plan
from apps.inventory.importer.schema import GPU_INDEX_LIMIT
from apps.inventory.models import (
    Cluster,
    Fabric,
    Gpu,
    Link,
    LinkEnd,
    LinkTermination,
    NetworkPort,
    Node,
    NodeType,
    NvLink,
    PortTemplate,
    Rack,
    Switch,
    SwitchPort,
)
from apps.inventory.signals import refresh_link_paths

WRITE_ORDER: list[type[models.Model]] = [
    Cluster,
    NodeType,
    PortTemplate,
    Rack,
    Fabric,
    Switch,
    SwitchPort,
    Node,
    NetworkPort,
    Gpu,
    Link,
    NvLink,
]
BATCH_SIZE = 500
# GPUs that change index or node step aside to index + this first, so that a swap of two GPUs
# never meets the (node, index) constraint halfway; the schema keeps real indices below it.
PARKING_OFFSET = GPU_INDEX_LIMIT


IMPORT_REASON = "inventory import"


def apply_plan(plan: Plan, *, actor: str, user: AbstractBaseUser | None) -> None:
    """Write the plan; ``actor`` (and ``user``) are recorded on the history of the nodes it creates."""
    now = timezone.now()
    for model in WRITE_ORDER:
        if model is Gpu:
            _park_moving_gpus(plan)
        _update(model, plan.updates.get(model, []), now)
        creates = plan.creates.get(model, [])
        if model is Node:
            for node in creates:  # with the ports of its node type's templates and its first history row
                Node.objects.create_new(node, actor=actor, user=user, reason=IMPORT_REASON)
        elif model is NetworkPort:
            _create_ports(creates)
        elif model is NvLink:
            _create_nvlinks(creates)
        else:
            model.objects.bulk_create(creates, batch_size=BATCH_SIZE)
        if model is Link:
            _terminate(plan)


def _update(model: type[models.Model], updates: list[tuple[models.Model, list[str]]], now: datetime) -> None:
    if not updates:
        return
    fields = sorted({name for _, names in updates for name in names})
    if any(f.name == "updated_at" for f in model._meta.concrete_fields):
        for obj, _ in updates:
            obj.updated_at = now  # bulk_update, unlike save, does not touch auto_now fields
        fields.append("updated_at")
    model.objects.bulk_update([obj for obj, _ in updates], fields, batch_size=BATCH_SIZE)


def _park_moving_gpus(plan: Plan) -> None:
    moving = [gpu.pk for gpu, names in plan.updates.get(Gpu, []) if {"node", "index"} & set(names)]
    if moving:
        Gpu.objects.filter(pk__in=moving).update(index=F("index") + PARKING_OFFSET)


def _create_ports(ports: list[models.Model]) -> None:
    """Ports of new nodes already exist (their node type's templates, made by Node.save): the plan's
    values update those; the rest are new rows."""
    made = NetworkPort.objects.filter(node__in={port.node.pk for port in ports}).values_list(
        "node_id", "device_name", "port_num", "pk"
    )
    pk_of = {(node_id, device_name, port_num): pk for node_id, device_name, port_num, pk in made}
    from_templates = []
    for port in ports:
        pk = pk_of.get((port.node.pk, port.device_name, port.port_num))
        if pk is not None:
            port.pk = pk
            port._state.adding = False
            from_templates.append(port)
    NetworkPort.objects.bulk_create([p for p in ports if p._state.adding], batch_size=BATCH_SIZE)
    NetworkPort.objects.bulk_update(
        from_templates, ["kind", "rate_gbps", "link_state", "guid", "mac"], batch_size=BATCH_SIZE
    )


def _create_nvlinks(links: list[models.Model]) -> None:
    # What NvLink.save does row by row: the lower GPU id is gpu_a (a constraint), and _node is derived.
    for link in links:
        if link.gpu_a.pk > link.gpu_b.pk:
            link.gpu_a, link.gpu_b = link.gpu_b, link.gpu_a
        link._node = link.gpu_a.node
    NvLink.objects.bulk_create(links, batch_size=BATCH_SIZE)


def _terminate(plan: Plan) -> None:
    LinkTermination.objects.bulk_create(
        [
            LinkTermination(
                link=link,
                end=end,
                network_port=port if isinstance(port, NetworkPort) else None,
                switch_port=port if isinstance(port, SwitchPort) else None,
            )
            for link, a, b in plan.link_ends
            for end, port in ((LinkEnd.A, a), (LinkEnd.B, b))
        ],
        batch_size=BATCH_SIZE,
    )
    for link, _, _ in plan.link_ends:
        refresh_link_paths(link.pk)  # bulk_create sends no post_save: keep the ports' derived columns
