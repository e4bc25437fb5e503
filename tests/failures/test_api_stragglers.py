"""/api/v1/stragglers: the current flags and their history."""

from datetime import UTC, datetime, timedelta

import pytest

from apps.accounts.roles import Role
from apps.failures.stragglers import Judgement, update_flags
from tests import factories

pytestmark = pytest.mark.django_db

URL = "/api/v1/stragglers"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def flags():
    cluster, node_type = factories.cluster(), factories.node_type(nics=0)
    slow, cleared = factories.node(cluster, node_type), factories.node(cluster, node_type)
    update_flags(
        [
            Judgement(slow.pk, 2, "power_w", 590.0, 650.0, 50.0, 8),
            Judgement(slow.pk, None, "sm_clock_mhz", 1700.0, 1980.0, 198.0, 12),
            Judgement(cleared.pk, 5, "power_w", 590.0, 650.0, 50.0, 8),
        ],
        now=NOW,
    )
    update_flags([Judgement(cleared.pk, 5, "power_w", 649.0, 650.0, 50.0, 8)], now=NOW + timedelta(minutes=1))
    return slow, cleared


def test_it_refuses_anonymous_reads(api_client):
    assert api_client("anonymous").get(URL).status_code == 401


def test_a_viewer_lists_the_active_flags(api_client, flags):
    slow, _ = flags
    rows = api_client(Role.VIEWER).get(URL, {"active": "true"}).json()["results"]
    assert {(row["hostname"], row["gpu_index"], row["metric"]) for row in rows} == {
        (slow.hostname, 2, "power_w"),
        (slow.hostname, None, "sm_clock_mhz"),
    }
    power = next(row for row in rows if row["metric"] == "power_w")
    assert (power["value"], power["reference"], power["deviation"], power["peer_count"]) == (590.0, 650.0, 60.0, 8)
    assert power["is_active"]
    assert power["failure"] is not None


def test_cleared_flags_stay_as_history(api_client, flags):
    _, cleared = flags
    rows = api_client(Role.VIEWER).get(URL, {"active": "false"}).json()["results"]
    assert [(row["node"], row["is_active"]) for row in rows] == [(cleared.pk, False)]
    assert rows[0]["cleared_at"] == "2026-03-01T12:01:00Z"


@pytest.mark.parametrize(("query", "count"), [({"node_level": "true"}, 1), ({"node_level": "false"}, 2)])
def test_it_filters_node_flags_from_gpu_flags(api_client, flags, query, count):
    assert api_client(Role.VIEWER).get(URL, query).json()["count"] == count


def test_it_filters_by_node(api_client, flags):
    slow, _ = flags
    assert api_client(Role.VIEWER).get(URL, {"node": slow.pk}).json()["count"] == 2
    assert api_client(Role.VIEWER).get(URL, {"hostname": slow.hostname}).json()["count"] == 2


def test_flags_are_read_only(admin_api, flags):
    assert admin_api.post(URL, {}).status_code == 405
