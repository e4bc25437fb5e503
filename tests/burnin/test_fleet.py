"""A burn-in across 50 simulated nodes, some scripted to fail: the right ones are quarantined with the
failed checks as the reason, the rest go into service, and every verdict names the thresholds it used."""

import pytest
from django.utils import timezone

from apps.accounts.models import AuditLogEntry
from apps.burnin import outcomes, subscribers
from apps.burnin.choices import NodeState, Outcome
from apps.burnin.models import BurnInCheck, BurnInNode
from apps.core import events
from apps.inventory.choices import Lifecycle
from apps.inventory.models import BurnInResult, Node
from apps.jobs.choices import RunState

pytestmark = pytest.mark.django_db(transaction=True)

# Five of fifty (the breaker's 10 %): a straggler, a GPU on PCIe x8, a row remap pending, an
# uncorrectable ECC error, an XID 74 taking one of a GPU's 18 NVLinks down (its pairs still copy above
# 335 GB/s, but the all-reduce, as slow as its slowest GPU, falls under 460).
FAULTS = "sim-004:straggler:gpu3 sim-011:x8:gpu1 sim-023:xid63@0:gpu2 sim-030:xid48@0:gpu5 sim-042:xid74@0:gpu6"
EXPECTED = {
    "sim-004": ("compute", "tflops_bf16 on GPU 3"),
    "sim-011": ("pcie", "h2d on GPU 1"),
    "sim-023": ("health", "remapped_rows_pending on GPU 2"),
    "sim-030": ("health", "ecc_uncorrected_volatile on GPU 5"),
    "sim-042": ("nccl_allreduce", "busbw 45"),
}


def test_it_quarantines_the_faulty_nodes_with_their_failed_checks_and_puts_the_rest_into_service(fleet):
    sim = fleet(50, FAULTS)
    burn_in = sim.burn_in("quick")
    assert set(Node.objects.values_list("lifecycle", flat=True)) == {Lifecycle.BURN_IN}  # testing, all of them

    assert sim.answer() == 50 * 6

    burn_in.run.refresh_from_db()
    assert burn_in.run.state == RunState.FAILED  # its failed commands
    rows = {row.node.hostname: row for row in BurnInNode.objects.select_related("node")}
    failed = {hostname for hostname, row in rows.items() if row.state == NodeState.FAILED}
    assert failed == set(EXPECTED)
    for hostname, (check, figure) in EXPECTED.items():
        row = rows[hostname]
        assert row.node.lifecycle == Lifecycle.QUARANTINED
        assert row.outcome == Outcome.QUARANTINED
        assert f"{check}: " in row.reason
        assert figure in row.reason
        assert row.node.transitions.first().reason == row.reason  # the quarantine's reason is the failed checks
        assert not row.node.burn_in_results.get().passed
    passed = [row for hostname, row in rows.items() if hostname not in EXPECTED]
    assert len(passed) == 45
    assert {(row.state, row.outcome, row.node.lifecycle) for row in passed} == {
        (NodeState.PASSED, Outcome.IN_SERVICE, Lifecycle.IN_SERVICE)
    }
    assert all(row.node.transitions.first().burn_in == row.result for row in passed)  # the service gate's evidence
    assert BurnInResult.objects.filter(passed=True).count() == 45
    assert AuditLogEntry.objects.filter(action="node.quarantine", actor="system:burnin").count() == 5
    assert AuditLogEntry.objects.filter(action="burnin.judge").count() == 50


def test_each_check_is_judged_by_the_threshold_version_and_says_by_what(fleet):
    sim = fleet(2, "sim-001:x8:gpu1")
    sim.burn_in("quick")
    sim.answer()

    pcie = BurnInCheck.objects.get(burn_in_node__node__hostname="sim-001", check_name="pcie")
    assert pcie.passed is False
    low = [f for f in pcie.judged if f["passed"] is False]
    assert [(f["name"], f["gpu"], f["expected"], f["bound"]) for f in low] == [
        ("h2d", 1, 52, "at_least"),
        ("d2h", 1, 52, "at_least"),
    ]
    assert pcie.burn_in_node.thresholds.version == 1
    assert "NVIDIA H100 SXM" in pcie.burn_in_node.thresholds.note
    allreduce = BurnInCheck.objects.get(burn_in_node__node__hostname="sim-000", check_name="nccl_allreduce")
    assert allreduce.passed is True
    assert [(f["name"], f["expected"]) for f in allreduce.judged if f.get("expected")] == [("busbw", 460)]


def test_the_last_health_check_is_judged_against_the_first_ones_snapshot(fleet):
    sim = fleet(1)
    sim.burn_in("quick")
    sim.answer()

    first, last = BurnInCheck.objects.filter(check_name="health").order_by("sequence")
    assert "baseline" not in first.command.params
    assert last.command.params["baseline"] == first.command.result["evidence"]["snapshot"]
    assert any(f["name"] == "ecc_uncorrected_new" for f in last.judged)  # a rise since the baseline is judged


def test_a_node_whose_commands_expire_fails_with_the_reason(fleet):
    sim = fleet(2)
    burn_in = sim.burn_in("quick")
    sim.answer(skip=lambda command: command.node.hostname == "sim-001" and command.check_name == "nvlink")
    burn_in.run.cancel(actor="tester", reason="no answer from sim-001")

    row = BurnInNode.objects.get(node__hostname="sim-001")
    assert row.state == NodeState.FAILED
    assert row.node.lifecycle == Lifecycle.QUARANTINED
    assert "nvlink: cancelled by tester: no answer from sim-001" in row.reason
    assert BurnInNode.objects.get(node__hostname="sim-000").outcome == Outcome.IN_SERVICE


def test_a_pass_leaves_a_drained_node_in_burn_in_when_asked_to(fleet):
    sim = fleet(1, lifecycle=Lifecycle.DRAINED)
    sim.burn_in("quick", into_service=False)
    sim.answer()

    row = BurnInNode.objects.get()
    assert (row.state, row.outcome, row.lifecycle_before) == (NodeState.PASSED, Outcome.KEPT, Lifecycle.DRAINED)
    node = row.node
    assert node.lifecycle == Lifecycle.BURN_IN
    assert node.service_refusal() is None


def test_the_sweep_judges_a_node_whose_judging_task_was_lost(fleet):
    sim = fleet(1)
    sim.burn_in("quick")
    events.unsubscribe(events.CommandsChanged, subscribers.commands_changed)  # every judging task lost
    try:
        sim.answer()
    finally:
        events.subscribe(events.CommandsChanged, subscribers.commands_changed)
    assert BurnInNode.objects.get().state == NodeState.TESTING

    assert outcomes.sweep(timezone.now()) == 1
    assert BurnInNode.objects.get().state == NodeState.PASSED
    assert outcomes.sweep(timezone.now()) == 0
