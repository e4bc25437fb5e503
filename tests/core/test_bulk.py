"""update_from_values: each row to values of its own, a statement per few hundred rows, on
PostgreSQL and SQLite alike."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.core import bulk
from apps.gateway.models import NodeAgent
from tests.gateway.conftest import enrolled_node

pytestmark = pytest.mark.django_db


def test_each_row_gets_its_own_values_over_several_statements(monkeypatch):
    monkeypatch.setattr(bulk, "_MAX_PARAMETERS", 7)  # two rows of three a statement, with the one parameter
    nodes = [enrolled_node()[0] for _ in range(5)]
    for node in nodes:
        NodeAgent.objects.create(node=node, buffered_samples=99, dropped_samples=99)
    listed, untouched = nodes[:4], nodes[4]
    table = connection.ops.quote_name(NodeAgent._meta.db_table)

    with CaptureQueriesContext(connection) as captured, connection.cursor() as cursor:
        bulk.update_from_values(
            cursor,
            table,
            ["node_id", "held", "dropped"],
            [(node.pk, index, 10 * index) for index, node in enumerate(listed)],
            set_sql="buffered_samples = v.held, dropped_samples = v.dropped + %s",
            where_sql=f"{table}.node_id = v.node_id",
            params=[1],
        )

    assert len(captured.captured_queries) == 2
    rows = dict(NodeAgent.objects.values_list("node_id", "buffered_samples"))
    assert [rows[node.pk] for node in listed] == [0, 1, 2, 3]
    dropped = dict(NodeAgent.objects.values_list("node_id", "dropped_samples"))
    assert [dropped[node.pk] for node in listed] == [1, 11, 21, 31]
    assert (rows[untouched.pk], dropped[untouched.pk]) == (99, 99)


def test_no_rows_no_statement():
    with CaptureQueriesContext(connection) as captured, connection.cursor() as cursor:
        bulk.update_from_values(cursor, "t", ["a"], [], set_sql="a = v.a", where_sql="t.a = v.a")
    assert captured.captured_queries == []
