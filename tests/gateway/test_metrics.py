"""/metrics, the gateway's part: what it refused from each node's agent, by the protocol's error code;
what it refused before a node was known as the control plane's own series, in no cluster's scrape."""

import pytest
from django.utils import timezone

from apps.gateway.choices import CounterCode
from apps.gateway.models import GatewayCounter
from tests import factories
from tests.prometheus import scrape, series

pytestmark = pytest.mark.django_db

FAMILY = "controlplane_gateway_refused_messages_total"
BEFORE_A_NODE = "controlplane_gateway_refused_connections_total"


def test_it_counts_what_the_gateway_refused_by_node_and_code():
    node = factories.node(factories.cluster("h100-east"), factories.node_type(nics=0), "gpu-007")
    now = timezone.now()
    GatewayCounter.add(
        {(node.pk, CounterCode.INVALID): (3, "NaN in power_w"), (None, CounterCode.UNAUTHORIZED): (2, "")}, now
    )
    GatewayCounter.add({(node.pk, CounterCode.INVALID): (1, "NaN in temp_c")}, now)
    parsed = scrape()
    assert parsed[FAMILY].type == "counter"
    assert series(parsed, FAMILY, "Hostname", "cluster", "code") == {("gpu-007", "h100-east", "invalid"): 4}
    assert series(parsed, BEFORE_A_NODE, "code") == {("unauthorized",): 2}
    east = scrape("h100-east")
    assert series(east, FAMILY, "Hostname", "code") == {("gpu-007", "invalid"): 4}
    assert BEFORE_A_NODE not in east
