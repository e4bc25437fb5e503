"""apps/dashboard/fleet_mirror.py: the fleet the process holds for the fleet page, kept from the fleet
group's messages, and the fleet page served from it, its shell first."""

import json
import re

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from apps.accounts.models import User
from apps.core.process import DatabaseThread
from apps.dashboard import messages, streams
from apps.dashboard.fleet_mirror import FleetMirror, script_json
from apps.dashboard.live_streams import live_streams
from apps.inventory.models import Node
from tests import factories
from tests.dashboard.test_live_stream import eventually, fleet_update, sample_at
from tests.streaming import streamed_parts

T = 1_764_590_400.0  # 2025-12-01 12:00 UTC


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def entry(lifecycle: str = "in_service", liveness: str = "online", **fields) -> dict:
    return {"hostname": "gpu-001", "lifecycle": lifecycle, "liveness": liveness, "alarms": 0, **fields}


def counts(entries: dict) -> dict:
    by = {"lifecycle": {}, "liveness": {}}
    for value in entries.values():
        for field in by:
            by[field][value[field]] = by[field].get(value[field], 0) + 1
    return by


@pytest.fixture
def mirror() -> FleetMirror:
    return FleetMirror(DatabaseThread("unused"), clock=Clock())


def test_it_has_nothing_to_give_before_its_first_snapshot(mirror):
    mirror.apply({"type": "node.state", "node": 1, "state": {"lifecycle": "drained"}})

    assert mirror.snapshot_json({"lifecycle": {}, "liveness": {}}) is None


def test_it_merges_the_fleet_groups_messages_as_a_page_merges_its_deltas(mirror):
    mirror.replace({"1": entry(), "2": entry(hostname="gpu-002")})

    mirror.apply(fleet_update((1, sample_at(T, utils={3: 99.0}))))
    mirror.apply({"type": "node.state", "node": 2, "state": {"lifecycle": "quarantined"}})
    mirror.apply({"type": "failure.update", "node": 2, "failure": {}, "state": {}})  # not the fleet's

    agreed = {"lifecycle": {"in_service": 1, "quarantined": 1}, "liveness": {"online": 2}}
    fleet = json.loads(mirror.snapshot_json(agreed))
    assert fleet["1"]["heat"][3][0] == 99
    assert fleet["1"]["ts"] == T
    assert fleet["1"]["hostname"] == "gpu-001"
    assert fleet["2"]["lifecycle"] == "quarantined"


def test_a_nodes_telemetry_waits_for_a_read_and_its_newest_entry_stands_for_those_before(mirror):
    mirror.replace({"1": entry()})
    agreed = counts({"1": entry()})

    mirror.apply(fleet_update((1, sample_at(T, utils={0: 10.0}))))
    mirror.apply(fleet_update((1, sample_at(T + 1, utils={0: 20.0}))))
    assert mirror._entries["1"].get("ts") is None  # merged when a page reads it, not as it came

    fleet = json.loads(mirror.snapshot_json(agreed))
    assert fleet["1"]["ts"] == T + 1
    assert fleet["1"]["heat"][0][0] == 20


def test_a_node_the_snapshot_lacked_gets_its_telemetry_and_its_state(mirror):
    mirror.replace({"1": entry()})

    mirror.apply(fleet_update((2, sample_at(T))))  # a node the snapshot did not have
    mirror.apply({"type": "node.state", "node": 2, "state": {**entry(), "hostname": "gpu-002"}})

    fleet = json.loads(mirror.snapshot_json({"lifecycle": {"in_service": 2}, "liveness": {"online": 2}}))
    assert fleet["2"]["hostname"] == "gpu-002"
    assert fleet["2"]["ts"] == T


def test_a_snapshot_replaces_the_telemetry_that_came_before_it(mirror):
    mirror.replace({"1": entry()})
    mirror.apply(fleet_update((1, sample_at(T)), (2, sample_at(T))))

    mirror.replace({"1": entry(ts=T + 5)})

    assert json.loads(mirror.snapshot_json(counts({"1": entry()}))) == {"1": entry(ts=T + 5)}


def test_it_gives_nothing_when_the_database_counts_other_nodes(mirror):
    mirror.replace({"1": entry()})

    assert mirror.snapshot_json({"lifecycle": {"in_service": 2}, "liveness": {"online": 2}}) is None  # one added
    assert mirror.snapshot_json({"lifecycle": {"drained": 1}, "liveness": {"online": 1}}) is None  # a lost change
    assert mirror.snapshot_json({"lifecycle": {"in_service": 1, "new": 0}, "liveness": {"online": 1}}) is not None


def test_it_encodes_at_most_once_a_second_while_the_fleet_changes(mirror):
    mirror.replace({"1": entry()})
    agreed = counts({"1": entry()})
    first = mirror.snapshot_json(agreed)

    mirror.apply(fleet_update((1, sample_at(T))))
    assert mirror.snapshot_json(agreed) is first  # the same text for the pages of that second
    mirror._clock.now += 1.0
    assert json.loads(mirror.snapshot_json(agreed))["1"]["ts"] == T


def test_its_json_cannot_close_the_script_element_it_stands_in():
    text = script_json({"1": {"hostname": "</script><script>alert(1)</script>&"}})

    assert "<" not in text
    assert ">" not in text
    assert "&" not in text
    assert json.loads(text)["1"]["hostname"] == "</script><script>alert(1)</script>&"


def test_it_follows_the_fleet_group_on_a_loop_of_its_own(transactional_db, redis_channel_layer):
    node = factories.node(factories.cluster(), factories.node_type(nics=0), "gpu-001")
    mirror = FleetMirror(DatabaseThread("mirror-test"))
    mirror.start()
    try:
        assert eventually(lambda: mirror.snapshot_json(Node.objects.state_counts()) is not None)

        async_to_sync(redis_channel_layer.group_send)(messages.FLEET_GROUP, fleet_update((node.pk, sample_at(T))))

        def held() -> dict:
            return json.loads(mirror.snapshot_json(Node.objects.state_counts()))

        assert eventually(lambda: held()[str(node.pk)].get("ts") == T)
        factories.node(node.cluster, node.node_type, "gpu-002")  # added: no message says so, a resync does
        assert eventually(lambda: mirror.snapshot_json(Node.objects.state_counts()) is not None)
        assert mirror.resyncs >= 2  # once more for each page that found it disagreeing while it read
    finally:
        async_to_sync(mirror.shutdown)()


# The fleet page ---------------------------------------------------------------------------------


@pytest.fixture
def viewer_page(db) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("mirror-viewer", role="viewer"))
    return client


def test_the_page_sends_its_shell_then_the_mirrors_snapshot_without_reading_it_again(viewer_page, monkeypatch):
    node = factories.node(factories.cluster(), factories.node_type(nics=0), "gpu-001")
    held = {str(node.pk): entry(lifecycle=node.lifecycle, liveness=node.liveness, hostname="held-by-the-mirror")}
    monkeypatch.setattr(live_streams, "fleet", FleetMirror(DatabaseThread("unused"), clock=Clock()))
    live_streams.fleet.replace(held)
    monkeypatch.setattr(streams, "fleet_snapshot", lambda: pytest.fail("the page read the snapshot again"))

    response = viewer_page.get("/")

    assert response.streaming
    shell, snapshot, rest = [part.decode() for part in streamed_parts(response)]
    assert "fleet-boot.js" in shell
    assert 'id="heatmap"' in shell
    assert "fleet-snapshot" not in shell
    data = re.fullmatch(r'<script id="fleet-snapshot" type="application/json">(.*)</script>', snapshot).group(1)
    assert json.loads(data) == held
    assert "fleet.js" in rest
    assert rest.rstrip().endswith("</html>")


def test_without_an_agreeing_mirror_the_page_reads_the_snapshot_after_its_shell(viewer_page):
    node = factories.node(factories.cluster(), factories.node_type(nics=0), "gpu-001")

    response = viewer_page.get("/")

    _, snapshot, _ = [part.decode() for part in streamed_parts(response)]
    assert json.loads(re.search(r">(.*)</script>", snapshot).group(1))[str(node.pk)]["hostname"] == "gpu-001"
