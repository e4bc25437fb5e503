"""One time convention across the pages, in real headless Chromium: the reader's time zone by default,
UTC on the top bar's toggle (kept as the reader moves on), the date when it is not today, the full
timestamp with its zone on hover."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.failures.conditions import Observation, xid_condition
from apps.failures.recording import raise_failure
from apps.inventory.models import Node
from tests.dashboard.conftest import off_the_loop
from tests.dashboard.node_data import node_with_history
from tests.dashboard.test_pages_nodes import wait_until_live

pytestmark = pytest.mark.browser

NEW_YORK = ZoneInfo("America/New_York")


def shown(moment: datetime, zone: ZoneInfo | None) -> str:
    """What the pages write for ``moment`` in ``zone`` (None: UTC), in en-US: the time to the second
    when it is today there, else the month and day first."""
    local, today = moment.astimezone(zone or UTC), timezone.now().astimezone(zone or UTC)
    time = local.strftime("%H:%M:%S")
    return time if local.date() == today.date() else f"{local.strftime('%b')} {local.day}, {time}"


def node_with_an_old_failure() -> tuple[Node, datetime, datetime]:
    node = node_with_history(transitions=1)
    old = (timezone.now() - timedelta(days=3)).replace(microsecond=0)
    raise_failure(Observation(node.pk, old, xid_condition(48), gpu_index=3, xid=48), actor="test")
    newest_change = node.transitions.first().at
    return node, old, newest_change


def test_times_follow_the_readers_zone_and_utc_on_the_toggle_on_every_page(open_page, viewer):
    node, old, changed = off_the_loop(node_with_an_old_failure)

    failures = open_page(viewer, "/failures/?state=all", timezone_id="America/New_York")
    card = failures.locator("#failure-list li", has_text="XID 48")
    seen = card.locator(".failure-side time").first
    expect(seen).to_have_text(shown(old, NEW_YORK))  # three days ago: with its date
    assert "EST" in seen.get_attribute("title") or "EDT" in seen.get_attribute("title")  # the zone on hover
    expect(failures.locator("#zone-toggle")).to_have_text(
        "EST" if old.astimezone(NEW_YORK).dst() == timedelta(0) else "EDT"
    )

    failures.locator("#zone-toggle").click()
    expect(seen).to_have_text(shown(old, None))
    assert "UTC" in seen.get_attribute("title")
    expect(failures.locator("#zone-toggle")).to_have_text("UTC")

    # The choice stays with the reader, on every page: the node's history, the list's last seen, the
    # fleet's failure feed.
    detail = failures.context.new_page()
    detail.goto(f"/nodes/{node.pk}/")
    wait_until_live(detail)
    expect(detail.locator("#lifecycle-history tbody tr time").first).to_have_text(shown(changed, None))
    expect(detail.locator("#zone-toggle")).to_have_attribute("aria-pressed", "true")
    detail.locator("#zone-toggle").click()  # back to the reader's zone, charts and all
    expect(detail.locator("#lifecycle-history tbody tr time").first).to_have_text(shown(changed, NEW_YORK))
    expect(detail.locator("#charts canvas")).to_have_count(6)

    fleet = failures.context.new_page()
    fleet.goto("/")
    newest = Node.objects.get(pk=node.pk).failures.order_by("-last_seen").first().last_seen
    expect(fleet.locator("#failure-feed time").first).to_have_text(shown(newest, NEW_YORK))
    listing = failures.context.new_page()
    listing.goto("/nodes/")
    seen_at = Node.objects.get(pk=node.pk).last_seen_at
    expect(listing.locator(f'tr[data-node="{node.pk}"] td[data-k="seen"] time')).to_have_text(
        shown(seen_at, NEW_YORK)  # the agent's heartbeat and newest sample: the same moment here
    )
