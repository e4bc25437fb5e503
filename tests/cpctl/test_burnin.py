"""``cpctl burnin start`` against a live server, with simulated agents answering the burn-in's
commands (tests/burnin/conftest.py): the verdicts it prints and the exit code a script reads."""

import json

from apps.burnin.models import BurnIn
from cpctl import commands
from tests.burnin.conftest import fleet, suite  # noqa: F401  (the fixture)
from tests.cpctl.conftest import Background
from tests.jobs.conftest import dispatched  # noqa: F401  (the fixture)


def answer_until_done(sim, waiting: Background) -> None:
    """Play the agents while cpctl waits: answer whatever the server sends until cpctl is done."""
    while waiting.running():
        sim.answer()
        waiting.pause()


def test_a_burn_in_where_every_node_passes_exits_0(cpctl, fleet):  # noqa: F811
    sim = fleet(2)
    suite("quick")
    waiting = Background(cpctl, "burnin", "start", "--nodes", "sim-000,sim-001", "--suite", "quick", "--wait",
                         "--poll", "0.05")  # fmt: skip
    answer_until_done(sim, waiting)
    result = waiting.join()

    assert result.code == 0, result.err
    burn_in = BurnIn.objects.get()
    label = f"burn-in {burn_in.pk} (run {burn_in.run_id})"
    assert result.out.splitlines()[0] == f"{label} started: 2 nodes, suite quick"
    assert result.out.splitlines()[-1] == f"{label} succeeded: passed 2 in_service 2"


def test_a_failing_node_is_named_with_its_reason_and_exits_1(cpctl, fleet):  # noqa: F811
    sim = fleet(2, "sim-001:x8:gpu1")
    suite("quick")
    waiting = Background(cpctl, "burnin", "start", "--cluster", sim.cluster.name, "--suite", "quick", "--wait",
                         "--poll", "0.05", "--json")  # fmt: skip
    answer_until_done(sim, waiting)
    result = waiting.join()

    assert result.code == commands.FAILED, result.err
    body = json.loads(result.out)
    verdicts = {row["node"]["hostname"]: (row["state"], row["outcome"]) for row in body["nodes"]}
    assert verdicts == {"sim-000": ("passed", "in_service"), "sim-001": ("failed", "quarantined")}
    failed = next(row for row in body["nodes"] if row["state"] == "failed")
    assert "pcie" in failed["reason"]


def test_without_wait_it_starts_and_returns_and_an_unknown_node_starts_nothing(cpctl, fleet):  # noqa: F811
    fleet(1)
    suite("quick")
    missing = cpctl("burnin", "start", "--nodes", "sim-000,sim-404", "--suite", "quick")
    assert missing.code == commands.API_ERROR
    assert missing.err == "cpctl: No node named 'sim-404'.\n"
    assert not BurnIn.objects.exists()
    no_suite = cpctl("burnin", "start", "--nodes", "sim-000", "--suite", "nonesuch")
    assert no_suite.code == commands.API_ERROR
    assert "suite" in no_suite.err

    started = cpctl("burnin", "start", "--nodes", "sim-000", "--suite", "quick", "--json")
    assert started.code == 0, started.err
    assert json.loads(started.out)["node_count"] == 1
    assert BurnIn.objects.count() == 1
