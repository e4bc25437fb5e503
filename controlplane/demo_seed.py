"""The demo's data: its database migrated, its static files collected, the example inventory priced
with example prices, an admin account with a fresh password and API token, and a fresh credential
for each node of the simulated fleet.

``manage.py seed_demo`` (controlplane/management/commands/seed_demo.py) runs it for the launcher
(controlplane/demo.py), in a process of its own with the demo's environment, and prints the
``Seeded`` answer the launcher needs.
"""

import secrets
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.db import transaction
from django.utils import timezone

from agents.config import FleetCredentials, SimulatedNodeCredential, save_fleet_credentials
from apps.accounts.audit import record
from apps.accounts.models import ApiToken, User
from apps.accounts.roles import Role
from apps.costs.choices import PriceKind
from apps.costs.models import EnergyPrice, GpuPrice
from apps.gateway.models import NodeCredential
from apps.inventory.importer import import_inventory, load_document
from apps.inventory.models import Cluster, Node, NodeType
from controlplane.demo import FLEET_HOSTNAMES, AdminCredentials, Seeded

EXAMPLE_INVENTORY = settings.BASE_DIR / "examples" / "inventory" / "h100-16node.yaml"
ADMIN_USERNAME = "admin"
ADMIN_TOKEN_NAME = "demo"
ACTOR = "system:demo"

# The price book of the demo's fleet, so its dashboard shows costs; illustrative, and labelled so.
EXAMPLE_GPU_HOUR_USD = "2.49"  # on demand, per H100 GPU-hour
EXAMPLE_KWH_USD = "0.12"
EXAMPLE_PUE = "1.30"
EXAMPLE_PRICE_NOTE = "Example price from the demo (controlplane/demo_seed.py), not a quote."

Say = Callable[[str], None]


def seed_demo(*, agent_ws_url: str, fleet_credentials_file: Path, say: Say) -> Seeded:
    """Everything the demo needs in its database and var directory; ``say`` hears the progress."""
    say("applying database migrations")
    call_command("migrate", interactive=False, verbosity=0)
    say("collecting static files")
    call_command("collectstatic", interactive=False, verbosity=0)
    import_example_inventory(say)
    admin = reset_admin()
    fleet_nodes = issue_fleet_credentials(fleet_credentials_file, agent_ws_url, say)
    return Seeded(admin=admin, fleet_nodes=fleet_nodes)


def import_example_inventory(say: Say) -> None:
    """Into an empty database only, priced with the example prices; a database in use is left as it is."""
    if Cluster.objects.exists():
        say("example inventory: the database already holds clusters; leaving them as they are")
        return
    source = str(EXAMPLE_INVENTORY.relative_to(settings.BASE_DIR))
    result = import_inventory(load_document(EXAMPLE_INVENTORY.read_bytes(), "yaml"), actor=ACTOR)
    record("inventory.import", actor=ACTOR, source=source, **result.counts())
    say(f"example inventory {source}: {result.summary()}")
    seed_example_prices(say)


def seed_example_prices(say: Say) -> None:
    since = timezone.localdate().replace(day=1)
    for node_type in NodeType.objects.filter(nodes__isnull=False).distinct():
        GpuPrice.objects.create(
            node_type=node_type,
            kind=PriceKind.ON_DEMAND,
            hourly_price_per_gpu=Decimal(EXAMPLE_GPU_HOUR_USD),
            valid_from=since,
            notes=EXAMPLE_PRICE_NOTE,
        )
    for cluster in Cluster.objects.all():
        EnergyPrice.objects.create(
            cluster=cluster,
            price_per_kwh=Decimal(EXAMPLE_KWH_USD),
            pue=Decimal(EXAMPLE_PUE),
            valid_from=since,
            notes=EXAMPLE_PRICE_NOTE,
        )
    say(f"example prices: ${EXAMPLE_GPU_HOUR_USD}/GPU-hour on demand, ${EXAMPLE_KWH_USD}/kWh at PUE {EXAMPLE_PUE}")


def reset_admin() -> AdminCredentials:
    """Create or reset the ``admin`` account with a fresh password and a fresh API token, both audited."""
    password = secrets.token_urlsafe(12)
    with transaction.atomic():
        admin, created = User.objects.get_or_create(username=ADMIN_USERNAME)
        admin.role = Role.ADMIN
        admin.is_staff = admin.is_superuser = admin.is_active = True
        admin.set_password(password)
        admin.save()
        record("user.create" if created else "user.reset_password", actor=ACTOR, obj=admin)
        ApiToken.objects.filter(user=admin, name=ADMIN_TOKEN_NAME).delete()
        token, secret = ApiToken.issue(user=admin, name=ADMIN_TOKEN_NAME, role=Role.ADMIN)
        record("api_token.create", actor=ACTOR, obj=token, owner=admin.username, role=token.role)
    return AdminCredentials(ADMIN_USERNAME, password, secret)


def issue_fleet_credentials(path: Path, agent_ws_url: str, say: Say) -> int:
    """Give each example node a fresh credential for the simulated fleet, to connect to the agent
    gateway at ``agent_ws_url``; return how many got one.

    The demo is a trusted local launcher with the database at hand, so it issues the credentials
    server-side instead of enrolling: the credentials the previous start issued (those no enrollment
    token produced) are revoked, the new ones written to ``path`` (0600) in the format
    ``cp-agent simulate --credentials-file`` reads. Both are audited.
    """
    fleet = FleetCredentials(server_ws_url=agent_ws_url)
    with transaction.atomic():
        nodes = list(Node.objects.filter(hostname__in=FLEET_HOSTNAMES).order_by("hostname"))
        previous = NodeCredential.objects.usable().filter(node__in=nodes, enrollment_token__isnull=True)
        for credential in previous.select_related("node"):
            credential.revoke()
            record("node_credential.revoke", actor=ACTOR, obj=credential, hostname=credential.node.hostname)
        for node in nodes:
            credential, secret = NodeCredential.issue(node)
            record("node_credential.issue", actor=ACTOR, obj=credential, hostname=node.hostname)
            fleet.nodes.append(SimulatedNodeCredential(node.hostname, node.pk, secret))
    save_fleet_credentials(fleet, path)
    if len(nodes) < len(FLEET_HOSTNAMES):
        say(f"simulated fleet: {len(nodes)} of the example nodes {FLEET_HOSTNAMES[0]}..{FLEET_HOSTNAMES[-1]} exist")
    return len(nodes)
