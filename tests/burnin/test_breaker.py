"""The automatic-quarantine circuit breaker: automation quarantines at most its share of a cluster within
its window; the next failure opens it (an alert row, a domain event, the metric, the audit log) and from
then on nothing more is quarantined in that cluster until a person closes it."""

import pytest
from django.utils import timezone

from apps.accounts.models import AuditLogEntry
from apps.accounts.roles import Role
from apps.burnin.choices import Outcome
from apps.burnin.models import BreakerEvent, BurnInNode, QuarantineBreaker, Suite
from apps.core import events
from apps.core.metrics import Scrape, registry
from apps.inventory.choices import Lifecycle
from apps.inventory.models import Node

pytestmark = pytest.mark.django_db(transaction=True)

# Twenty nodes at 10 %: two may be quarantined; four are scripted with an uncorrectable ECC error.
BREAKER_METRIC = "controlplane_quarantine_breaker_open"
FAULTS = " ".join(f"sim-{i:03d}:xid48@0:gpu0" for i in (2, 5, 9, 14))


@pytest.fixture
def health_only(transactional_db):
    return Suite.objects.create(name="health-only", title="Health", steps=[{"check": "health", "time_limit_s": 60}])


@pytest.fixture
def heard():
    changes: list[events.QuarantineBreakerChanged] = []
    events.subscribe(events.QuarantineBreakerChanged, changes.append)
    yield changes
    events.unsubscribe(events.QuarantineBreakerChanged, changes.append)


def breaker_metric(cluster: str) -> float:
    family = next(f for f in registry.collect(Scrape(now=timezone.now())) if f.name == BREAKER_METRIC)
    return dict(family.samples)[f'cluster="{cluster}"']


def test_it_stops_at_its_share_and_waits_for_a_person(fleet, health_only, heard):
    sim = fleet(20, FAULTS)
    sim.burn_in("health-only")
    sim.answer()

    rows = BurnInNode.objects.filter(state="failed").select_related("node").order_by("judged_at", "pk")
    assert [row.outcome for row in rows] == [Outcome.QUARANTINED] * 2 + [Outcome.WITHHELD] * 2
    assert Node.objects.filter(lifecycle=Lifecycle.QUARANTINED).count() == 2
    assert {row.node.lifecycle for row in rows[2:]} == {Lifecycle.BURN_IN}  # withheld: still out of service
    assert Node.objects.filter(lifecycle=Lifecycle.IN_SERVICE).count() == 16  # passes still go into service
    breaker = QuarantineBreaker.objects.get(cluster=sim.cluster)
    assert breaker.is_open
    assert "2 of the 20 nodes" in breaker.reason
    assert "10 %" in breaker.reason
    (opened,) = BreakerEvent.objects.all()  # one alert, however many are withheld after it
    assert opened.detail["withheld"] == rows[2].node.hostname
    assert heard == [events.QuarantineBreakerChanged(sim.cluster.pk, "opened")]
    assert AuditLogEntry.objects.filter(action="quarantine_breaker.open", actor="system:burnin").count() == 1
    assert breaker_metric(sim.cluster.name) == 1


def test_a_person_closes_it_and_may_quarantine_what_it_withheld(fleet, health_only, heard, api_client):
    sim = fleet(20, FAULTS)
    sim.burn_in("health-only")
    sim.answer()
    breaker = QuarantineBreaker.objects.get(cluster=sim.cluster)
    operator = api_client(Role.OPERATOR)

    empty = operator.post(f"/api/v1/quarantine-breakers/{breaker.pk}/close", {}, format="json")
    assert empty.status_code == 400
    assert "reason" in empty.json()
    answer = operator.post(
        f"/api/v1/quarantine-breakers/{breaker.pk}/close",
        {"reason": "two bad DIMMs batches, not the check", "quarantine_withheld": True},
        format="json",
    )

    assert answer.status_code == 200, answer.content
    assert answer.json()["is_open"] is False
    assert [e["change"] for e in answer.json()["events"]] == ["closed", "opened"]
    assert Node.objects.filter(lifecycle=Lifecycle.QUARANTINED).count() == 4
    assert set(BurnInNode.objects.filter(state="failed").values_list("outcome", flat=True)) == {Outcome.QUARANTINED}
    entry = AuditLogEntry.objects.get(action="quarantine_breaker.close")
    assert len(entry.detail["quarantined"]) == 2
    assert heard[-1] == events.QuarantineBreakerChanged(sim.cluster.pk, "closed")
    assert breaker_metric(sim.cluster.name) == 0
    again = operator.post(f"/api/v1/quarantine-breakers/{breaker.pk}/close", {"reason": "twice"}, format="json")
    assert again.status_code == 409


def test_a_larger_share_lets_more_through(fleet, health_only):
    sim = fleet(20, FAULTS)
    QuarantineBreaker.objects.filter(cluster=sim.cluster).update(percent=50)  # ten may go
    sim.burn_in("health-only")
    sim.answer()

    assert Node.objects.filter(lifecycle=Lifecycle.QUARANTINED).count() == 4
    breaker = QuarantineBreaker.objects.get(cluster=sim.cluster)
    assert not breaker.is_open
    assert breaker.quarantined_in_window(timezone.now()) == 4
