"""The topology page's node chips (apps/dashboard/templatetags/topology.py): made in Python for speed,
so what the template made is checked here: link, data for the live stream, links up / cabled, load,
and every text escaped."""

from collections import Counter

from django.urls import reverse

from apps.dashboard.templatetags.topology import node_chips
from apps.inventory.topology import DOWN, UP, CabledNode, LinkCounts, LinkLoad


def cabled(hostname: str, *, load: LinkLoad | None = None) -> CabledNode:
    links = LinkCounts(Counter({UP: 1, DOWN: 1}), 800)
    node = CabledNode(7, hostname, "in_service", "online", links, ["mlx5_1/1: down"])
    if load is not None:
        node.load = load
    return node


def test_a_chip_links_to_the_node_and_says_its_links_and_load():
    load = LinkLoad()
    load.add(200.0, 100.0, 400)
    html = node_chips([cabled("gpu-007", load=load)])
    assert html.startswith('<li><a class="node-chip has-down" href="' + reverse("dashboard:node", args=[7]) + '"')
    assert 'data-node="7" data-hostname="gpu-007" data-liveness="online"' in html
    assert '<span class="links link-down">1/2</span>' in html
    assert '<span data-width-percent="50"></span>' in html
    assert '<span class="num">50 %</span>' in html
    assert 'title="gpu-007 (online, in_service)\nmlx5_1/1: down\ntx 200.0 Gb/s, rx 100.0 Gb/s of 400 Gb/s"' in html


def test_a_chip_without_a_recent_sample_shows_no_load():
    html = node_chips([cabled("gpu-007")])
    assert '<span data-width-percent="0"></span>' in html
    assert '<span class="num">–</span>' in html


def test_every_text_of_a_chip_is_escaped():
    html = node_chips([cabled('gpu"<b>&')])
    assert "<b>" not in html
    assert 'data-hostname="gpu&quot;&lt;b&gt;&amp;"' in html
    assert '<span class="host">gpu&quot;&lt;b&gt;&amp;</span>' in html
