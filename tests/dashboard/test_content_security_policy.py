"""The Content-Security-Policy: every response carries it (Django's test client), and every page, the
admin and the API docs work under it in a real browser with no violation reported (headless Chromium,
``-m browser``). The browser tests of each page (``open_page``) fail on any console error, CSP
violations included; these look for the violation events themselves, on every page in turn."""

from collections.abc import Callable

import pytest
from django.test import Client
from playwright.sync_api import Page, expect

from apps.accounts.models import User
from tests.dashboard.conftest import off_the_loop
from tests.dashboard.test_pages_ops_browser import OpsFleet, ops_fleet

# Chromium reports each violation as a `securitypolicyviolation` event on the document; the listener
# goes in before any of the page's own scripts run.
COLLECT_VIOLATIONS = """
window.__csp_violations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  const where = `${e.sourceFile}:${e.lineNumber}`;
  window.__csp_violations.push(`${e.effectiveDirective} refused ${e.blockedURI || "inline"} at ${where}`);
});
"""


def directives(header: str) -> dict[str, list[str]]:
    parts = (part.split() for part in header.split(";") if part.strip())
    return {name: values for name, *values in parts}


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/login/", "/", "/api/docs/", "/admin/login/", "/api/v1/nodes"])
def test_every_response_carries_a_strict_policy(path):
    response = Client().get(path, follow=True)

    policy = directives(response.headers["Content-Security-Policy"])
    assert policy["default-src"] == ["'none'"]
    assert policy["script-src"] == ["'self'"]
    assert policy["style-src"] == ["'self'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["object-src"] == ["'none'"]
    assert policy["base-uri"] == ["'none'"]
    assert policy["form-action"] == ["'self'"]
    assert not any("unsafe" in value for values in policy.values() for value in values)


@pytest.mark.django_db
@pytest.mark.parametrize(("secure", "scheme"), [(False, "ws"), (True, "wss")])
def test_connect_src_names_the_pages_own_websocket_origin(secure, scheme):
    response = Client().get("/login/", secure=secure, HTTP_HOST="localhost:8000")

    assert directives(response.headers["Content-Security-Policy"])["connect-src"] == [
        "'self'",
        f"{scheme}://localhost:8000",
    ]


def test_a_host_that_is_not_allowed_gets_a_400_not_a_500(db):
    response = Client().get("/login/", HTTP_HOST="evil.example")

    assert response.status_code == 400
    assert directives(response.headers["Content-Security-Policy"])["connect-src"] == ["'self'"]


# In the browser ------------------------------------------------------------------------------------


def violations(page: Page) -> list[str]:
    return page.evaluate("window.__csp_violations")


@pytest.fixture
def open_watched(open_page) -> Callable[..., Page]:
    """``open_page`` with a violation listener installed before the page's scripts run."""

    def open_(user: User | None, path: str) -> Page:
        page = open_page(user, "about:blank")
        page.add_init_script(COLLECT_VIOLATIONS)
        response = page.goto(path)
        assert response is not None
        assert response.ok, f"{path}: {response.status}"
        assert "content-security-policy" in response.headers  # Playwright lower-cases header names
        return page

    return open_


def fleet_ready(page: Page, fleet: OpsFleet) -> None:
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    expect(page.locator("#heatmap")).to_be_visible()


def nodes_ready(page: Page, fleet: OpsFleet) -> None:
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    expect(page.locator("#nodes-table tbody tr[data-node]")).to_have_count(len(fleet.nodes))


def node_ready(page: Page, fleet: OpsFleet) -> None:
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    expect(page.locator("h1")).to_contain_text(fleet.hot.hostname)


def ops_ready(selector: str) -> Callable[[Page, OpsFleet], None]:
    def ready(page: Page, fleet: OpsFleet) -> None:
        expect(page.locator(selector).first).to_be_visible()

    return ready


DASHBOARD_PAGES = {
    "fleet": (lambda fleet: "/", fleet_ready),
    "nodes": (lambda fleet: "/nodes/", nodes_ready),
    "node": (lambda fleet: f"/nodes/{fleet.hot.pk}/", node_ready),
    "failures": (lambda fleet: "/failures/", ops_ready("#failure-list > li[data-failure]")),
    "topology": (lambda fleet: "/topology/", ops_ready(".node-chip[data-node]")),
    "racks": (lambda fleet: "/racks/", ops_ready(".rack-node[data-node]")),
    "reliability": (lambda fleet: "/reliability/", ops_ready("#worst-nodes tbody tr")),
}


@pytest.fixture
def admin_user(transactional_db) -> User:
    return User.objects.create_superuser("ada", "ada@example.com", "unused-password-3")


@pytest.mark.browser
def test_every_dashboard_page_works_under_the_policy(open_watched, admin_user):
    """As an admin, who sees every button a page has."""
    fleet = off_the_loop(ops_fleet)
    for name, (path, ready) in DASHBOARD_PAGES.items():
        page = open_watched(admin_user, path(fleet))
        ready(page, fleet)
        assert violations(page) == [], name


@pytest.mark.browser
def test_sizes_and_places_the_templates_compute_still_apply(open_watched, admin_user):
    """The policy refuses style attributes: bar widths, rack rows and chart colours travel as data
    attributes that a script applies (apps/dashboard/static/dashboard/data-styles.js)."""
    fleet = off_the_loop(ops_fleet)
    page = open_watched(admin_user, "/racks/")
    hot = page.locator(f'.rack-node[data-node="{fleet.hot.pk}"]')
    expect(hot).to_be_visible()
    row, span = hot.get_attribute("data-grid-row").split(" / span ")
    assert hot.evaluate("e => [getComputedStyle(e).gridRowStart, getComputedStyle(e).gridRowEnd]") == [
        row,
        f"span {span}",
    ]
    rows = page.locator(".rack").first.evaluate("e => getComputedStyle(e).gridTemplateRows.split(' ').length")
    assert rows == int(page.locator(".rack").first.get_attribute("data-grid-rows"))

    page = open_watched(admin_user, "/topology/")
    chip_bar = page.locator(f'.node-chip[data-node="{fleet.hot.pk}"] .bar > span')
    assert chip_bar.evaluate("e => e.style.width") == "95%"  # 4 × 380 Gb/s of 4 × 400

    page = open_watched(admin_user, "/nodes/")
    nodes_ready(page, fleet)
    hot_util = page.locator(f'#nodes-table tr[data-node="{fleet.hot.pk}"] .util .bar > span')
    expect(hot_util).to_have_attribute("style", "width: 95%;")
    assert violations(page) == []


@pytest.mark.browser
def test_signing_in_works_under_the_policy(open_watched, admin_user):
    page = open_watched(None, "/login/")
    page.fill("input[name=username]", "ada")
    page.fill("input[name=password]", "unused-password-3")
    page.click("button[type=submit]")
    expect(page.locator(".who")).to_contain_text("ada")
    assert violations(page) == []


@pytest.mark.browser
def test_a_locked_out_user_is_told_why_and_for_how_long(open_page, open_watched, admin_user):
    open_page.expect_console_error("status of 429")  # Chromium logs the refusal the page explains
    page = open_watched(None, "/login/")
    for _ in range(5):
        page.fill("input[name=username]", "ada")
        page.fill("input[name=password]", "not-the-password")
        page.click("button[type=submit]")
    page.fill("input[name=password]", "unused-password-3")
    with page.expect_response(lambda response: response.url.endswith("/login/")) as answer:
        page.click("button[type=submit]")

    assert answer.value.status == 429
    expect(page.get_by_role("alert")).to_have_text(
        "Too many failed sign-ins for this account: it is locked for 15 minutes. An admin can unlock it sooner."
    )
    assert violations(page) == []


@pytest.mark.browser
@pytest.mark.parametrize(
    "path",
    [
        "/admin/",
        "/admin/accounts/user/",
        "/admin/accounts/user/add/",
        "/admin/inventory/node/",
        "/admin/accounts/auditlogentry/",
    ],
)
def test_the_admin_works_under_the_policy(open_watched, admin_user, path):
    off_the_loop(ops_fleet)
    page = open_watched(admin_user, path)
    expect(page.locator("#content")).to_be_visible()
    page.wait_for_load_state("networkidle")
    assert violations(page) == []


@pytest.mark.browser
def test_the_admin_change_form_and_its_widgets_work_under_the_policy(open_watched, admin_user):
    fleet = off_the_loop(ops_fleet)
    page = open_watched(admin_user, f"/admin/inventory/node/{fleet.hot.pk}/change/")
    expect(page.locator("#node_form")).to_be_visible()
    page.wait_for_load_state("networkidle")
    assert violations(page) == []


@pytest.mark.browser
def test_the_api_docs_work_under_the_policy(open_watched, admin_user):
    """Down to trying an operation out: the docs' requests are connect-src 'self'."""
    page = open_watched(admin_user, "/api/docs/")
    page.locator("#operations-tag-clusters").click()  # the tags open folded (SWAGGER_UI_SETTINGS)
    operation = page.locator("#operations-clusters-clusters_list")
    operation.locator(".opblock-summary").click()
    operation.get_by_role("button", name="Try it out").click()
    with page.expect_response(lambda response: "/api/v1/clusters" in response.url) as answer:
        operation.get_by_role("button", name="Execute").click()
    assert answer.value.status == 200  # the signed-in session's
    expect(operation.locator(".live-responses-table tbody .response-col_status").first).to_have_text("200")
    assert violations(page) == []
