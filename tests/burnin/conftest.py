"""A simulated fleet for burn-ins: nodes in the inventory, online, each answered by a simulated agent's
check (``simulate_check`` over the node's own model and scripted faults, the demo's agents' code), with
the real runs-and-commands machinery between them: the jobs' and burn-ins' tasks run where they are
queued, the commands go out as ``CommandsDispatched`` and the answers come back through the reports."""

import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from django.utils import timezone

from agents import protocol
from agents.simulator.checks import simulate_check
from agents.simulator.collector import SimulatedCollector
from agents.simulator.commands import exit_code
from apps.burnin.defaults import SUITES
from apps.burnin.models import BurnIn, Suite
from apps.burnin.starting import start_burn_in
from apps.inventory.choices import Lifecycle, Liveness
from apps.inventory.models import Cluster, Node
from apps.jobs import reports
from apps.jobs.models import Command
from tests import factories
from tests.jobs.conftest import Dispatched, _tasks_run_where_they_are_queued, dispatched  # noqa: F401  (fixtures)

PROFILE = "h100"


def suite(name: str = "quick") -> Suite:
    """The suite of that name, a shipped one made again when missing (a transactional test's flush
    removes the migration's rows)."""
    found = Suite.objects.filter(name=name).first()
    return found or Suite.objects.create(name=name, **SUITES[name], builtin=True)


class Fleet:
    def __init__(self, cluster: Cluster, nodes: list[Node], faults: str, heard: Dispatched) -> None:
        self.cluster, self.nodes, self.heard = cluster, nodes, heard
        self.now = time.time()
        self.collectors = {}
        for node in nodes:
            collector = SimulatedCollector(PROFILE, node.hostname, seed=7, faults=faults, start=self.now)
            collector.sample(self.now)
            self.collectors[node.pk] = collector

    def burn_in(self, name: str = "quick", nodes: list[Node] | None = None, **options: object) -> BurnIn:
        return start_burn_in(
            nodes or self.nodes, suite(name), actor="tester", deadline=timezone.now() + timedelta(hours=1), **options
        )

    def answer(self, *, skip: Callable[[Command], bool] = lambda c: False) -> int:
        """Answer every command sent, and those sent on their answers, until nothing more goes out."""
        answered = 0
        while frames := self.heard.take():
            for node_id, message in frames:
                if not isinstance(message, protocol.Command):
                    continue
                command = Command.objects.get(key=message.key)
                if skip(command):
                    continue
                self.now += 1
                self.collectors[node_id].sample(self.now)
                result = simulate_check(self.collectors[node_id], message.check, message.params, now=self.now)
                reports.store_report(node_id, protocol.CommandStarted(key=message.key, started=self.now))
                reports.store_report(
                    node_id,
                    protocol.CommandResult(
                        key=message.key,
                        outcome="exited",
                        exit_code=exit_code(result),
                        started=self.now,
                        finished=self.now + 1,
                        result=result,
                    ),
                )
                answered += 1
        return answered


@pytest.fixture
def fleet(transactional_db: None, dispatched: Dispatched) -> Iterator[Callable[..., Fleet]]:  # noqa: F811
    def make(count: int, faults: str = "", *, lifecycle: str = Lifecycle.NEW, cluster: Cluster | None = None) -> Fleet:
        cluster = cluster or factories.cluster()
        node_type = factories.node_type(nics=1)
        nodes = [factories.node(cluster, node_type, f"sim-{i:03d}", lifecycle=lifecycle) for i in range(count)]
        Node.objects.filter(pk__in=[n.pk for n in nodes]).update(liveness=Liveness.ONLINE, last_seen_at=timezone.now())
        return Fleet(cluster, [Node.objects.get(pk=n.pk) for n in nodes], faults, dispatched)

    return make
