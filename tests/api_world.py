"""The API as its tests see it: every endpoint the schema generator finds, a world with a row of every
kind it serves (and rows whose optional fields are empty), and the real value of each path parameter.
The role matrix (tests/test_api_permissions.py) and the schema fuzzer (tests/test_api_fuzz.py) share it."""

from datetime import date, timedelta

from django.db import models
from django.utils import timezone
from drf_spectacular.generators import EndpointEnumerator

from apps.accounts.audit import record
from apps.accounts.models import ApiToken, User
from apps.accounts.roles import Role
from apps.burnin.models import BurnInCheck, Suite
from apps.burnin.starting import start_burn_in
from apps.failures.events import node_unreachable
from apps.failures.models import StragglerFlag
from apps.gateway.models import DiscoveryChange, EnrollmentToken, GatewayCounter, NodeAgent, NodeCredential
from apps.inventory.models import Link, LinkTermination, Node, Rack
from apps.jobs.models import Run, Step
from tests import factories


def served_endpoints() -> dict[tuple[str, str], type[models.Model] | None]:
    """``(method, path)`` of every API endpoint, with the model its ``{id}`` refers to."""
    endpoints = {}
    for path, _, method, callback in EndpointEnumerator().get_api_endpoints():
        queryset = getattr(callback.cls, "queryset", None)
        endpoints[method, path.replace("{pk}", "{id}")] = queryset.model if queryset is not None else None
    return endpoints


ENDPOINTS = served_endpoints()


def build_world() -> None:
    cluster = factories.cluster()
    node_type = factories.node_type(nics=2, gpus=2)
    rack = Rack.objects.create(cluster=cluster, name="r01")
    node = factories.node(cluster, node_type, lifecycle="in_service")
    factories.nvlink_mesh(node)
    leaf = factories.switch(factories.fabric(cluster))
    factories.cable_node_to_leaf(node, leaf)
    node.transition("quarantined", actor="test", reason="permission matrix")
    automation = User.objects.create(username="automation", role=Role.OPERATOR)
    ApiToken.issue(user=automation, name="nightly", role=Role.OPERATOR)
    record("test.setup", actor="system:test")
    factories.gpu_price(node_type, valid_from=date(2026, 1, 1))
    factories.energy_price(cluster, valid_from=date(2026, 1, 1))
    failure = node_unreachable(node.pk)
    EnrollmentToken.issue(hostname=node.hostname, expires_at=timezone.now() + timedelta(hours=1))
    NodeCredential.issue(node)
    NodeAgent.objects.create(node=node, agent_version="test")
    DiscoveryChange.objects.create(node=node, kind="gpu_added", subject="gpu0")
    GatewayCounter.objects.create(node=node, code="malformed", count=1)
    now = timezone.now()
    Run.objects.launch(nodes=[node], steps=[Step("health")], deadline=now + timedelta(hours=1), actor="test")
    fresh = factories.node(cluster, node_type, lifecycle="new")
    burn_in = start_burn_in([fresh], Suite.objects.get(name="quick"), actor="test", deadline=now + timedelta(hours=1))
    BurnInCheck.objects.create(
        burn_in_node=burn_in.nodes.get(), command=burn_in.run.commands.first(), sequence=0, check_name="health"
    )
    StragglerFlag.objects.create(
        node=node,
        gpu_index=1,
        metric="power_w",
        value=600,
        reference=650,
        deviation=50,
        threshold=50,
        peer_count=8,
        window_s=300,
        first_flagged=now,
        last_flagged=now,
        failure=failure,
    )
    # After the rows above, which stay the first of their kind: rows whose optional fields are empty
    # (null in a response), and one with them all filled.
    spare = factories.node(cluster, node_type, lifecycle="new")  # no rack, ports not cabled
    Node.objects.filter(pk=node.pk).update(rack=rack)
    Link.objects.create(label="half-removed")  # a link with no ends
    LinkTermination.objects.create(
        link=Link.objects.create(label="one end"), end="A", network_port=spare.ports.order_by("pk").first()
    )
    GatewayCounter.objects.create(node=None, code="unauthorized", count=3)  # a refused connection: no node
    NodeCredential.issue(spare, enrollment_token=EnrollmentToken.issue(hostname=spare.hostname)[0])


def model_for(path: str) -> type[models.Model]:
    """The model whose id fills ``{id}``: the view's own, or for a plain APIView such as
    ``/costs/clusters/{id}/rate`` that of the resource named before ``{id}`` (``/clusters/{id}``)."""
    model = next(model for (_, served), model in ENDPOINTS.items() if served == path)
    if model is not None:
        return model
    resource = path.split("/{id}")[0].rsplit("/", 1)[1]
    for (_, served), candidate in ENDPOINTS.items():
        if candidate is not None and served.endswith(f"/{resource}/{{id}}"):
            return candidate
    raise LookupError(f"Cannot tell which model's id {path} takes: no /{resource}/{{id}} endpoint to learn it from.")


def path_values(path: str) -> dict[str, str]:
    """A real value for each of the path's parameters: the first row of the model it names."""
    values = {}
    if "{code}" in path:
        values["code"] = "79"  # an XID the catalog describes
    if "{node}" in path:
        values["node"] = str(Node.objects.order_by("pk").first().pk)
    if "{id}" in path:
        model = model_for(path)
        obj = model._default_manager.order_by("pk").first()
        if obj is None:
            raise LookupError(f"No {model._meta.label} exists to call {path}; build one in build_world().")
        values["id"] = str(obj.pk)
    return values
