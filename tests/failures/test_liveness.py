"""A node whose heartbeats stop raises a liveness failure; it resolves itself when the agent returns."""

import pytest

from apps.accounts.models import AuditLogEntry
from apps.failures.choices import FailureKind, FailureState, Severity
from apps.failures.events import node_recovered, node_unreachable
from apps.failures.models import Failure

pytestmark = pytest.mark.django_db


def test_an_unreachable_node_raises_a_critical_liveness_failure(node):
    failure = node_unreachable(node.pk)
    assert (failure.kind, failure.severity, failure.gpu_index) == (FailureKind.LIVENESS, Severity.CRITICAL, None)
    assert "cp-agent" in failure.recommended_action
    assert AuditLogEntry.objects.get(action="failure.open").actor == "system:liveness"


def test_going_unreachable_again_before_recovering_counts_into_the_same_failure(node):
    node_unreachable(node.pk)
    node_unreachable(node.pk)
    assert Failure.objects.get().count == 2


def test_recovery_resolves_it_as_the_liveness_system_with_an_audit_row(node):
    failure = node_unreachable(node.pk)
    assert node_recovered(node.pk) == [failure]
    failure.refresh_from_db()
    assert (failure.state, failure.resolved_by) == (FailureState.RESOLVED, "system:liveness")
    assert failure.resolution_note.startswith("The agent reconnected at")
    entry = AuditLogEntry.objects.get(action="failure.resolve")
    assert (entry.actor, entry.object_id) == ("system:liveness", str(failure.pk))


def test_recovery_resolves_an_acknowledged_liveness_failure_too(node):
    failure = node_unreachable(node.pk)
    failure.acknowledge(actor="alice")
    node_recovered(node.pk)
    failure.refresh_from_db()
    assert failure.state == FailureState.RESOLVED


def test_recovery_of_a_node_that_was_never_lost_changes_nothing(node):
    assert node_recovered(node.pk) == []
    assert not AuditLogEntry.objects.exists()


def test_after_recovery_the_next_loss_is_a_new_failure(node):
    first = node_unreachable(node.pk)
    node_recovered(node.pk)
    assert node_unreachable(node.pk).pk != first.pk
