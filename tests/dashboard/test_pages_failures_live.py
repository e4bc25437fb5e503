"""The failures page in headless Chromium (``-m browser``): a failure pushed live, an operator's
acknowledge and resolve, a viewer refused, and Load more (also while a page loads and while the list is read again)."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from apps.accounts.models import AuditLogEntry
from apps.failures.events import record_event, record_events
from apps.failures.models import Failure
from apps.inventory.models import Node
from tests import factories
from tests.dashboard.conftest import live, off_the_loop, screenshot
from tests.failures.conftest import events, xid


@pytest.fixture
def node_042(transactional_db) -> Node:
    return factories.node(factories.cluster(), factories.node_type(nics=0), "gpu-042")


@pytest.fixture
def xid_79(node_042) -> Failure:
    return off_the_loop(record_event, node_042.pk, xid(79, gpu=5, at=time.time()))


# Holds the answers to the page's "load more" reads (those with an offset) until the test releases them:
# the read is answered by the server at once, what it read is handed to the page only when released.
HOLD_LOAD_MORE = """() => {
  window.loadMoreReads = 0;
  window.heldLoadMore = [];
  const realFetch = window.fetch.bind(window);
  window.fetch = async (url, options) => {
    const offset = new URL(url, location.href).searchParams.get("offset");
    if (offset === null || offset === "0") return realFetch(url, options);
    window.loadMoreReads += 1;
    const answer = await realFetch(url, options);
    await new Promise((release) => window.heldLoadMore.push(release));
    return answer;
  };
}"""
RELEASE_LOAD_MORE = "() => { for (const release of window.heldLoadMore.splice(0)) release(); }"


def stored_failures(node: Node, number: int, state: str = "open") -> list[int]:
    """``number`` failures of ``node``, newest first, stored without a live push; their ids in the
    feed's order."""
    now = timezone.now()
    Failure.objects.bulk_create(
        Failure(
            node=node,
            kind="xid",
            code=f"xid-{i}",
            xid=13,
            severity="warning",
            title=f"XID 13 number {i}",
            recommended_action="-",
            state=state,
            first_seen=now - timedelta(minutes=i + 1),
            last_seen=now - timedelta(minutes=i + 1),
        )
        for i in range(number)
    )
    return list(Failure.objects.order_by("-last_seen", "-id").values_list("id", flat=True))


def shown_ids(page: Page) -> list[int]:
    return [
        int(i)
        for i in page.eval_on_selector_all(
            "#failure-list > li[data-failure]", "rows => rows.map(r => r.dataset.failure)"
        )
    ]


@pytest.mark.browser
def test_an_injected_xid_79_appears_in_the_open_feed_without_reload(open_page, viewer, node_042):
    page = open_page(viewer, "/failures/")
    expect(page.locator("#no-failures")).to_contain_text("No open failures")
    live(page)
    expect(page.locator("#failure-feed")).to_have_attribute("data-reads", "1")  # read again after the snapshot
    screenshot(page, "failures-empty")
    page.evaluate("window.notReloaded = true")

    off_the_loop(record_events, node_042.pk, events(xid(79, gpu=5, at=time.time(), data="fell off")))

    row = page.locator("#failure-list > li[data-failure]")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("XID 79")
    expect(row).to_contain_text("GPU 5")
    expect(row).to_contain_text("gpu-042")
    expect(page.locator("#failure-feed")).to_have_attribute("data-reads", "2")  # read again after the push
    assert page.evaluate("window.notReloaded") is True


@pytest.mark.browser
def test_an_operator_acknowledges_then_resolves_a_failure_from_the_page(open_page, operator, xid_79):
    failure = xid_79
    page = open_page(operator, "/failures/")
    row = page.locator(f'li[data-failure="{failure.pk}"]')
    screenshot(page, "failures-operator")

    with page.expect_response(lambda response: response.url.endswith("/acknowledge")):
        row.get_by_role("button", name="Acknowledge").click()
    expect(row).to_have_attribute("data-state", "acknowledged")
    expect(row).to_contain_text("Acknowledged by otto")
    failure.refresh_from_db()
    assert (failure.state, failure.acknowledged_by) == ("acknowledged", "otto")

    row.get_by_role("button", name="Resolve…").click()
    page.locator("#resolve-dialog textarea").fill("GPU reseated")
    screenshot(page, "failures-resolve")
    # The live feed can show the change before the API's answer is back (it is pushed on commit),
    # and the audit entry is written as the request ends: wait for the answer.
    with page.expect_response(lambda response: response.url.endswith("/resolve")):
        page.locator("#resolve-dialog").get_by_role("button", name="Resolve", exact=True).click()
    expect(page.locator("#no-failures")).to_contain_text("No open failures")  # it left the feed
    failure.refresh_from_db()
    assert (failure.state, failure.resolved_by, failure.resolution_note) == ("resolved", "otto", "GPU reseated")
    assert list(
        AuditLogEntry.objects.filter(object_id=str(failure.pk)).values_list("action", flat=True).order_by("id")
    ) == ["failure.open", "failure.acknowledge", "failure.resolve"]


@pytest.mark.browser
def test_a_viewer_sees_no_buttons_and_a_forged_acknowledge_is_refused(open_page, viewer, xid_79):
    failure = xid_79
    page = open_page(viewer, "/failures/")
    expect(page.locator(f'li[data-failure="{failure.pk}"]')).to_be_visible()
    expect(page.locator("button[data-action]")).to_have_count(0)
    expect(page.locator("#resolve-dialog")).to_have_count(0)

    # The viewer's own session and CSRF token, posted straight to the API the buttons would call.
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    for action in ("acknowledge", "resolve"):
        answer = page.context.request.post(f"/api/v1/failures/{failure.pk}/{action}", headers={"X-CSRFToken": csrf})
        assert answer.status == 403
        assert "needs the operator role" in answer.json()["detail"]  # refused by role, not for a missing token
    failure.refresh_from_db()
    assert failure.state == "open"
    assert list(AuditLogEntry.objects.filter(object_id=str(failure.pk)).values_list("action", flat=True)) == [
        "failure.open"
    ]


@pytest.mark.browser
def test_load_more_appends_the_next_page_in_place(open_page, viewer, node_042):
    stored_failures(node_042, 60, state="resolved")
    page = open_page(viewer, "/failures/?state=resolved")
    rows = page.locator("#failure-list > li[data-failure]")
    expect(rows).to_have_count(50)
    # The live snapshot makes the page read its list again: click once that read has replaced the list,
    # or the read may land after the click and bring back a "Load more" row for the rows just loaded.
    live(page)
    expect(page.locator("#failure-feed")).to_have_attribute("data-reads", "1")

    page.get_by_role("link", name="Load more").click()

    expect(rows).to_have_count(60)
    expect(rows.last).to_contain_text("XID 13 number 59")  # oldest last
    expect(page.locator("#load-more")).to_have_count(0)
    assert page.url.endswith("/failures/?state=resolved")  # loaded in place


@pytest.mark.browser
def test_a_second_click_on_load_more_while_the_page_loads_reads_it_once(open_page, viewer, node_042):
    ids = stored_failures(node_042, 60)
    page = open_page(viewer, "/failures/")
    live(page)
    expect(page.locator("#failure-feed")).to_have_attribute("data-reads", "1")
    page.evaluate(HOLD_LOAD_MORE)

    page.get_by_role("link", name="Load more").click()
    page.wait_for_function("() => window.heldLoadMore.length === 1")
    # Impatient: the first page is still on its way. aria-disabled greys the link out but does not stop
    # a click (Playwright waits for an enabled element: forced, the click lands as a person's would).
    page.get_by_role("link", name="Load more").click(force=True)
    assert page.evaluate("window.loadMoreReads") == 1
    page.evaluate(RELEASE_LOAD_MORE)

    expect(page.locator("#failure-list > li[data-failure]")).to_have_count(60)
    expect(page.locator("#load-more")).to_have_count(0)
    assert shown_ids(page) == ids


@pytest.mark.browser
def test_a_live_change_during_load_more_neither_drops_nor_repeats_a_row(open_page, viewer, node_042):
    stored_failures(node_042, 60)
    page = open_page(viewer, "/failures/")
    live(page)
    feed = page.locator("#failure-feed")
    expect(feed).to_have_attribute("data-reads", "1")
    page.evaluate(HOLD_LOAD_MORE)

    page.get_by_role("link", name="Load more").click()
    page.wait_for_function("() => window.heldLoadMore.length === 1")  # the server read rows 51 to 60
    # A new failure tops the list: the live feed has the page read its list again, while that page
    # is still on its way. It must not land on a list that read replaced (it would leave a row out).
    off_the_loop(record_events, node_042.pk, events(xid(79, gpu=5, at=time.time())))
    page.wait_for_function(
        "() => { const feed = document.getElementById('failure-feed');"
        " return Number(feed.dataset.reads) >= 2 || Number(feed.dataset.queuedReads) >= 2; }"
    )
    page.evaluate(RELEASE_LOAD_MORE)

    page.wait_for_function(
        "() => { const feed = document.getElementById('failure-feed');"
        " return Number(feed.dataset.reads) >= 2 && !(Number(feed.dataset.queuedReads) > 0); }"
    )
    ids = list(Failure.objects.order_by("-last_seen", "-id").values_list("id", flat=True))
    assert len(ids) == 61
    shown = shown_ids(page)
    assert shown == ids[: len(shown)]  # the newest first, none left out, none twice
    assert len(shown) >= 60
    expect(page.locator("#load-more")).to_have_count(1 if len(shown) < 61 else 0)


@pytest.mark.browser
def test_a_live_change_reads_again_every_row_shown_past_the_servers_cap_on_one_read(open_page, viewer, node_042):
    stored_failures(node_042, 560)
    page = open_page(viewer, "/failures/?limit=500")  # 500: the server's cap on one read (and failures.js's)
    live(page)
    feed = page.locator("#failure-feed")
    expect(feed).to_have_attribute("data-reads", "1")
    page.get_by_role("link", name="Load more").click()
    rows = page.locator("#failure-list > li[data-failure]")
    expect(rows).to_have_count(550)

    off_the_loop(record_events, node_042.pk, events(xid(79, gpu=5, at=time.time())))
    expect(feed).to_have_attribute("data-reads", "2")
    page.wait_for_function("() => !(Number(document.getElementById('failure-feed').dataset.queuedReads) > 0)")

    ids = list(Failure.objects.order_by("-last_seen", "-id").values_list("id", flat=True))
    assert shown_ids(page) == ids[:550]  # the new one on top, and none of the 550 shown dropped off
    expect(page.locator("#load-more")).to_have_count(1)
