"""A new node burns in when its agent first comes online (``BURNIN_ON_ENROLLMENT``, the demo's quick
suite), once; nodes in service, and any node when no suite is set, are left alone."""

import pytest
from django.test import override_settings

from apps.accounts.models import AuditLogEntry
from apps.burnin.choices import Outcome, Trigger
from apps.burnin.models import BurnIn, BurnInNode
from apps.core import events
from apps.inventory.choices import Lifecycle, Liveness
from apps.inventory.models import Node
from tests.burnin.conftest import suite

pytestmark = pytest.mark.django_db(transaction=True)


def comes_online(node: Node) -> None:
    Node.objects.filter(pk=node.pk).update(liveness=Liveness.ONLINE)
    events.announce(events.NodeChanged(node.pk, "liveness"))


@override_settings(BURNIN_ON_ENROLLMENT="quick")
def test_a_new_node_runs_the_enrollment_suite_once_and_goes_into_service(fleet):
    sim = fleet(2)
    suite("quick")
    comes_online(sim.nodes[0])
    comes_online(sim.nodes[0])  # a reconnect: no second burn-in

    burn_in = BurnIn.objects.get()
    assert (burn_in.trigger, burn_in.actor, burn_in.suite.name) == (Trigger.ENROLLMENT, "system:burnin", "quick")
    assert AuditLogEntry.objects.filter(action="burnin.start", actor="system:burnin").count() == 1
    sim.answer()
    assert BurnInNode.objects.get().outcome == Outcome.IN_SERVICE
    assert Node.objects.get(pk=sim.nodes[0].pk).lifecycle == Lifecycle.IN_SERVICE
    assert Node.objects.get(pk=sim.nodes[1].pk).lifecycle == Lifecycle.NEW  # its agent never came


@override_settings(BURNIN_ON_ENROLLMENT="quick")
def test_a_node_in_service_is_left_alone(fleet):
    sim = fleet(1, lifecycle=Lifecycle.IN_SERVICE)
    comes_online(sim.nodes[0])

    assert not BurnIn.objects.exists()


@override_settings(BURNIN_ON_ENROLLMENT="")
def test_nothing_runs_when_no_suite_is_set(fleet):
    sim = fleet(1)
    comes_online(sim.nodes[0])

    assert not BurnIn.objects.exists()
