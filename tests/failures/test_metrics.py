"""/metrics, the failures' part: the failures still being worked on, by node, kind, severity and state;
resolved ones and side effects of another failure are not counted."""

import pytest

from apps.failures.events import record_events
from apps.failures.models import Failure
from tests.failures.conftest import T0, events, xid
from tests.prometheus import scrape, series

pytestmark = pytest.mark.django_db

FAMILY = "controlplane_failures_active"
KEYS = ("Hostname", "cluster", "kind", "severity", "state")


def test_it_counts_active_failures_by_kind_severity_and_state(node):
    record_events(node.pk, events(xid(79, gpu=0), xid(79, gpu=1), xid(13, gpu=2)))
    record_events(node.pk, events(xid(79, gpu=0, at=T0 + 5), seq=2))  # a repeat: counted into the open one
    host, cluster = node.hostname, node.cluster.name
    assert series(scrape(), FAMILY, *KEYS) == {
        (host, cluster, "xid", "critical", "open"): 2,
        (host, cluster, "xid", "warning", "open"): 1,
    }
    Failure.objects.get(gpu_index=1).acknowledge(actor="ops")
    Failure.objects.get(gpu_index=2).resolve(actor="ops")
    assert series(scrape(), FAMILY, *KEYS) == {
        (host, cluster, "xid", "critical", "open"): 1,
        (host, cluster, "xid", "critical", "acknowledged"): 1,
    }


def test_a_side_effect_is_not_counted_apart_from_its_cause(node):
    record_events(node.pk, events(xid(79, gpu=0), xid(45, gpu=0, at=T0 + 1)))  # 45: 79's teardown
    assert Failure.objects.filter(cause__isnull=False).count() == 1
    assert sum(series(scrape(), FAMILY, "kind").values()) == 1


def test_no_failures_no_family(node):
    assert FAMILY not in scrape()
