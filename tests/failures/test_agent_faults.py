"""Faults of a node the gateway finds in what its agent sends: a GPU or HCA identity another live node
holds, and a clock running ahead. Each raises a failure on the node, counted again while it lasts."""

import pytest

from apps.accounts.models import AuditLogEntry
from apps.failures.choices import FailureKind, Severity
from apps.failures.events import clock_skewed, duplicate_identity
from apps.failures.models import Failure

pytestmark = pytest.mark.django_db


def test_a_duplicate_identity_raises_an_identity_failure_that_repeats_into_itself(node):
    first = duplicate_identity(node.pk, "GPU-1234 is also reported by gpu-b")
    again = duplicate_identity(node.pk, "GPU-1234 is also reported by gpu-b")

    assert again.pk == first.pk
    failure = Failure.objects.get()
    assert (failure.kind, failure.code, failure.severity, failure.count) == (
        FailureKind.IDENTITY,
        "duplicate-gpu-identity",
        Severity.ERROR,
        2,
    )
    assert (failure.title, failure.detail) == ("Duplicate GPU identity", "GPU-1234 is also reported by gpu-b")
    assert AuditLogEntry.objects.get(action="failure.open").actor == "system:agent"


def test_a_clock_skew_failure_says_the_measured_offset(node):
    failure = clock_skewed(node.pk, 3612.25)

    assert (failure.kind, failure.title) == (FailureKind.CLOCK, "Clock skew")
    assert failure.detail == "The node's clock is 3612.2 s ahead of the control plane's."
    assert "chronyc" in failure.recommended_action
