"""The runs pages: the list and a run with a progress bar per node and per run, each node's results
check by check and the run's log, in a fixed number of queries (Django's test client); the runs feed
of ``ws/live`` (real Redis channel layer); and in a real browser (headless Chromium, ``-m browser``)
a run's page that follows its progress live and cancels a node's command and the run."""

from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from playwright.sync_api import Page, expect

from apps.accounts.models import User
from apps.core import events
from apps.inventory.models import Node
from apps.jobs.choices import CommandState, RunState
from apps.jobs.models import Command, CommandLogLine, Run
from tests import factories
from tests.dashboard.conftest import listen, off_the_loop, receive, screenshot
from tests.streaming import streamed_parts

RESULT = {
    "check": "compute",
    "device": "simulated",
    "device_name": "simulated NVIDIA H100",
    "tool": "simulator",
    "started": 1.0,
    "finished": 2.0,
    "passed": False,
    "measurements": [
        {"name": "tflops_bf16", "measured": 310.5, "unit": "TFLOP/s", "expected": 600.0, "passed": False, "gpu": 3}
    ],
}


def make_run(nodes: int, steps: tuple[str, ...] = ("health", "compute"), *, title: str = "burn-in") -> Run:
    """A running run written directly (no task queued): the first node's first step done, its second
    running at 40 %, the others' pending."""
    cluster, node_type = factories.cluster(), factories.node_type(nics=0)
    hosts = [factories.node(cluster, node_type) for _ in range(nodes)]
    run = Run.objects.create(
        title=title,
        steps=[{"check": step} for step in steps],
        deadline=timezone.now() + timedelta(hours=1),
        actor="otto",
        state=RunState.RUNNING,
    )
    for n, node in enumerate(hosts):
        for sequence, step in enumerate(steps):
            command = Command.objects.create(
                run=run,
                node=node,
                sequence=sequence,
                key=f"{run.pk}-{node.pk}-{sequence}",
                check_name=step,
                time_limit_s=60,
                deadline=run.deadline,
                invasive=step != "health",
            )
            if n == 0 and sequence == 0:
                done = {"state": CommandState.SUCCEEDED, "result": RESULT | {"check": step}}
                Command.objects.filter(pk=command.pk).update(**done)
            elif n == 0 and sequence == 1:
                Command.objects.filter(pk=command.pk).update(state=CommandState.RUNNING, fraction=0.4, step="bf16")
                CommandLogLine.objects.create(command=command, level="info", message="bf16 warm-up done")
    return run


def page(user: User, path: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(path)
    assert response.status_code == 200
    if not response.streaming:
        return response.content.decode()
    return b"".join(streamed_parts(response)).decode()  # the fleet page streams its shell first


def queries(user: User, path: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        page(user, path)
    return len(captured)


@pytest.fixture
def viewer_user(db) -> User:
    return User.objects.create_user("vic", role="viewer")


@pytest.fixture
def operator_user(db) -> User:
    return User.objects.create_user("ole", role="operator")


# Django client ---------------------------------------------------------------------------------------


def test_the_list_shows_each_run_with_its_progress(viewer_user):
    run = make_run(2)
    html = page(viewer_user, "/runs/")
    assert f'href="/runs/{run.pk}/"' in html
    # 2 nodes × 2 steps: one done (1), one at 0.4 → 1.4 / 4 = 35 %
    assert 'aria-valuenow="35"' in html
    assert 'data-width-percent="35"' in html
    assert "Running" in html


def test_the_list_filters_by_state_and_explains_an_unknown_one(viewer_user):
    make_run(1)
    assert "No runs in this state" in page(viewer_user, "/runs/?state=failed")
    assert "Unknown state “nope”" in page(viewer_user, "/runs/?state=nope")


def test_the_list_reads_the_same_number_of_queries_for_one_run_or_many(viewer_user):
    make_run(1)
    few = queries(viewer_user, "/runs/")
    for _ in range(4):
        make_run(3)
    assert queries(viewer_user, "/runs/") == few


def test_a_run_shows_each_node_with_its_bar_step_and_results_check_by_check(viewer_user):
    run = make_run(2)
    first, second = sorted(Node.objects.all(), key=lambda node: node.hostname)
    html = page(viewer_user, f"/runs/{run.pk}/")
    assert 'aria-valuenow="35"' in html  # the run
    assert 'aria-valuenow="70"' in html  # the first node: 1 + 0.4 of 2 steps
    assert f'<tr data-node="{second.pk}" data-state="pending">' in html
    assert "tflops_bf16 GPU 3" in html
    assert "310.5 TFLOP/s" in html
    assert "≥ 600" in html
    assert '<span class="verdict fail">fail</span>' in html
    assert "bf16 warm-up done" in html
    assert first.hostname in html


def test_cancel_buttons_are_for_operators_only(viewer_user, operator_user):
    run = make_run(1)
    assert "data-cancel" not in page(viewer_user, f"/runs/{run.pk}/")
    html = page(operator_user, f"/runs/{run.pk}/")
    assert f'data-cancel-run="{run.pk}"' in html
    running = run.commands.get(state=CommandState.RUNNING)
    assert f'data-cancel-command="{running.pk}"' in html


def test_a_run_page_reads_the_same_number_of_queries_for_one_node_or_many(viewer_user):
    small, large = make_run(1), make_run(6, ("health", "compute", "pcie"))
    assert queries(viewer_user, f"/runs/{small.pk}/") == queries(viewer_user, f"/runs/{large.pk}/")


def test_a_run_that_does_not_exist_is_a_404(viewer_user):
    client = Client()
    client.force_login(viewer_user)
    assert client.get("/runs/999999/").status_code == 404


# The runs feed --------------------------------------------------------------------------------------


@pytest.mark.asyncio
@pytest.mark.django_db(transaction=True)
async def test_a_commands_progress_reaches_the_runs_group_as_the_runs_summary(redis_channel_layer):
    run = await sync_to_async(make_run)(1)
    channel = (await listen("runs"))["runs"]
    command = await sync_to_async(run.commands.get)(state=CommandState.RUNNING)

    def progress() -> None:
        Command.objects.filter(pk=command.pk).update(fraction=0.9)
        events.announce(
            events.CommandsChanged("progress", (events.ChangedCommand(command.pk, run.pk, command.node_id),))
        )

    await sync_to_async(progress)()
    message = await receive(channel)
    assert message["type"] == "run.update"
    assert message["run"] == run.pk
    assert message["summary"]["percent"] == 95
    assert message["summary"]["state"] == "running"


# Browser --------------------------------------------------------------------------------------------

VIEWS = {
    "-light-1366": ((1366, 768), False),
    "-dark-1366": ((1366, 768), True),
    "-light-1920": ((1920, 1080), False),
    "-dark-1920": ((1920, 1080), True),
}


def fits_the_width(page: Page) -> bool:
    return page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")


@pytest.mark.browser
def test_a_run_page_follows_progress_live_and_an_operator_cancels_a_command_then_the_run(open_page, operator):
    run = off_the_loop(make_run, 2)
    page = open_page(operator, f"/runs/{run.pk}/")
    expect(page.locator("#run-percent")).to_have_text("35 %")
    page.wait_for_function("() => document.getElementById('live-status').dataset.state === 'live'")
    command = off_the_loop(lambda: run.commands.get(state=CommandState.RUNNING))

    def progress() -> None:
        Command.objects.filter(pk=command.pk).update(fraction=0.9, step="fp16")
        CommandLogLine.objects.create(command=command, level="info", message="fp16 started")
        events.announce(events.CommandsChanged("log", (events.ChangedCommand(command.pk, run.pk, command.node_id),)))

    off_the_loop(progress)
    expect(page.locator("#run-percent")).to_have_text("48 %")  # (1 + 0.9) / 4
    expect(page.locator("#run-log")).to_contain_text("fp16 started")

    page.on("dialog", lambda dialog: dialog.accept())
    page.locator(f'button[data-cancel-command="{command.pk}"]').click()
    expect(page.locator(f'td[data-command="{command.pk}"]')).to_have_attribute("data-state", "cancelled")
    page.locator(f'button[data-cancel-run="{run.pk}"]').click()
    expect(page.locator("#run-state")).to_have_text("Cancelled")
    expect(page.locator("button[data-cancel-run]")).to_have_count(0)
    assert off_the_loop(lambda: Run.objects.get(pk=run.pk).state) == RunState.CANCELLED


@pytest.mark.browser
def test_the_runs_pages_light_and_dark_at_1366_and_1920(open_page, viewer):
    run = off_the_loop(make_run, 4, ("health", "compute", "pcie", "nvlink"))
    for suffix, (viewport, dark) in VIEWS.items():
        listing = open_page(viewer, "/runs/", viewport=viewport, dark=dark)
        expect(listing.locator(f'tr[data-run="{run.pk}"]')).to_be_visible()
        assert fits_the_width(listing), f"runs{suffix} scrolls sideways"
        screenshot(listing, f"runs{suffix}")
        detail = open_page(viewer, f"/runs/{run.pk}/", viewport=viewport, dark=dark)
        expect(detail.locator("tr[data-node]")).to_have_count(4)
        assert fits_the_width(detail), f"run{suffix} scrolls sideways"
        screenshot(detail, f"run{suffix}")


def test_the_fleet_pages_running_jobs_lists_running_runs_only(viewer_user):
    running, over = make_run(1, title="rack 7 burn-in"), make_run(1, title="yesterday's")
    Run.objects.filter(pk=over.pk).update(state=RunState.SUCCEEDED)
    html = page(viewer_user, "/")
    jobs = html[html.index('id="jobs"') :]
    assert f'href="/runs/{running.pk}/"' in jobs
    assert f'href="/runs/{over.pk}/"' not in jobs
    assert "rack 7 burn-in" in jobs


def test_the_fleet_pages_running_jobs_says_nothing_is_running_when_only_finished_runs_exist(viewer_user):
    Run.objects.filter(pk=make_run(1).pk).update(state=RunState.SUCCEEDED)
    html = page(viewer_user, "/")
    jobs = html[html.index('id="jobs"') :]
    assert "Nothing is running now." in jobs
    assert "in this state" not in jobs
