"""cpctl against a live server with data: nodes, failures, runs (show, logs, cancel, wait) and what
each prints and exits with; bad flags and bad configuration are clear errors before any request."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from agents import protocol
from apps.accounts.models import AuditLogEntry
from apps.accounts.roles import Role
from apps.failures.events import record_event
from apps.inventory.choices import Liveness
from apps.inventory.models import Node
from apps.jobs import reports
from apps.jobs.models import Command, Run, Step
from cpctl import commands
from tests import factories
from tests.cpctl.conftest import Background
from tests.failures.conftest import xid
from tests.jobs.reporting import finished, started


@pytest.fixture
def fleet(transactional_db) -> list[Node]:
    cluster, node_type = factories.cluster("alpha"), factories.node_type("hgx-test", nics=1, gpus=2)
    nodes = [factories.node(cluster, node_type, f"gpu-{i:03d}") for i in (3, 1, 2)]
    other = factories.cluster("beta")
    nodes.append(factories.node(other, node_type, "gpu-900", lifecycle="quarantined"))
    Node.objects.update(liveness=Liveness.ONLINE, last_seen_at=datetime.now(UTC))
    return nodes


def launch(nodes: list[Node], steps: tuple[Step, ...] = (Step("health"),)) -> Run:
    return Run.objects.launch(
        nodes=nodes, steps=steps, deadline=datetime.now(UTC) + timedelta(hours=1), actor="tester", title="checkup"
    )


def finish_all(run: Run, exit_code: int = 0) -> None:
    """Play the agents: each node starts and ends every command it has been sent, step after step."""
    while sent := list(Command.objects.filter(run=run, state="sent")):
        for command in sent:
            started(command)
            finished(command, exit_code=exit_code)


def test_it_lists_nodes_by_hostname_as_a_table_and_as_json(cpctl, fleet):
    listed = cpctl("nodes", "list", role=Role.VIEWER)
    assert listed.code == 0, listed.err
    lines = listed.out.splitlines()
    assert lines[0].split()[:4] == ["ID", "HOSTNAME", "CLUSTER", "TYPE"]
    assert [line.split()[1] for line in lines[1:]] == ["gpu-001", "gpu-002", "gpu-003", "gpu-900"]

    filtered = cpctl("nodes", "list", "--cluster", "alpha", "--json", role=Role.VIEWER)
    assert filtered.code == 0
    assert [node["hostname"] for node in json.loads(filtered.out)] == ["gpu-001", "gpu-002", "gpu-003"]
    quarantined = cpctl("--json", "nodes", "list", "--lifecycle", "quarantined", role=Role.VIEWER)
    assert [node["hostname"] for node in json.loads(quarantined.out)] == ["gpu-900"]
    assert len(json.loads(cpctl("nodes", "list", "--limit", "2", "--json").out)) == 2


def test_it_shows_a_node_by_hostname_or_id(cpctl, fleet):
    shown = cpctl("nodes", "show", "gpu-002", role=Role.VIEWER)
    assert shown.code == 0
    assert "hostname              gpu-002" in shown.out
    assert "cluster_name          alpha" in shown.out
    by_id = json.loads(cpctl("nodes", "show", str(fleet[0].pk), "--json").out)
    assert (by_id["hostname"], by_id["gpu_count"]) == ("gpu-003", 2)


def test_an_unknown_node_is_an_api_error_naming_it(cpctl, fleet):
    missing = cpctl("nodes", "show", "gpu-404")
    assert missing.code == commands.API_ERROR
    assert missing.err == "cpctl: No node named 'gpu-404'.\n"
    assert missing.out == ""


def test_it_lists_failures_with_filters(cpctl, fleet):
    record_event(fleet[1].pk, xid(79, gpu=1, data="GPU has fallen off the bus."))
    record_event(fleet[2].pk, xid(13, gpu=0, data="Graphics engine exception"))

    listed = cpctl("failures", "list", role=Role.VIEWER)
    assert listed.code == 0
    assert {line.split()[1] for line in listed.out.splitlines()[1:]} == {"gpu-001", "gpu-002"}
    only = json.loads(cpctl("failures", "list", "--node", "gpu-001", "--json").out)
    assert [(f["hostname"], f["xid"], f["gpu_index"]) for f in only] == [("gpu-001", 79, 1)]
    refused = cpctl("failures", "list", "--severity", "dreadful")
    assert refused.code == commands.API_ERROR
    assert "severity" in refused.err
    assert "dreadful" in refused.err


def test_it_shows_a_run_with_its_commands(cpctl, fleet):
    run = launch(fleet[:2], (Step("health"), Step("storage")))
    shown = cpctl("runs", "show", str(run.pk), role=Role.VIEWER)
    assert shown.code == 0
    assert "title          checkup" in shown.out
    assert "commands    pending 2 sent 2" in shown.out
    rows = [line.split()[:5] for line in shown.out.split("\n\n")[1].splitlines()[1:]]
    assert sorted(row[1:5] for row in rows) == [
        ["gpu-001", "0", "health", "sent"],
        ["gpu-001", "1", "storage", "pending"],
        ["gpu-003", "0", "health", "sent"],
        ["gpu-003", "1", "storage", "pending"],
    ]
    as_json = json.loads(cpctl("runs", "show", str(run.pk), "--json").out)
    assert (as_json["state"], len(as_json["command_list"])) == ("running", 4)


def test_waiting_for_a_run_draws_a_bar_on_a_terminal_and_exits_0_when_every_command_succeeded(cpctl, fleet):
    run = launch(fleet[:2], (Step("health"), Step("storage")))
    waiting = Background(cpctl, "runs", "wait", str(run.pk), "--poll", "0.05", tty=True)
    finish_all(run)
    result = waiting.join()

    assert result.code == 0, result.err
    assert "\r\x1b[K[" in result.out  # redrawn in place
    bar, verdict = result.out.rstrip().split("\r")[-1].splitlines()
    assert bar == f"\x1b[K[{'#' * 30}] run {run.pk} succeeded 100%  succeeded 4"
    assert verdict == f"run {run.pk} succeeded: all 4 commands succeeded"


def test_waiting_piped_prints_a_plain_line_per_change_and_exits_1_when_a_command_failed(cpctl, fleet):
    run = launch(fleet[:1])
    waiting = Background(cpctl, "runs", "wait", str(run.pk), "--poll", "0.05")
    finish_all(run, exit_code=3)
    result = waiting.join()

    assert result.code == commands.FAILED
    assert "\r" not in result.out
    lines = result.out.splitlines()
    assert len(lines) == len(set(lines[:-1])) + 1  # no progress line twice
    assert lines[-2] == f"run {run.pk} failed 100%  failed 1"
    assert lines[-1].startswith(f"run {run.pk} failed: 1 failed of 1 commands: gpu-003 health")


def test_a_cancelled_run_exits_3_and_the_cancel_is_audited(cpctl, fleet):
    run = launch(fleet[:2])
    viewer = cpctl("runs", "cancel", str(run.pk), role=Role.VIEWER)
    assert viewer.code == commands.API_ERROR
    assert "403" in viewer.err

    cancelled = cpctl("runs", "cancel", str(run.pk), "--reason", "wrong nodes")
    assert cancelled.code == 0, cancelled.err
    assert cancelled.out == f"run {run.pk} cancelled: cancelled by cli-operator: wrong nodes\n"
    assert AuditLogEntry.objects.filter(action="run.cancel", actor="cli-operator").exists()
    again = cpctl("runs", "cancel", str(run.pk))
    assert again.code == commands.API_ERROR
    assert "409" in again.err

    waited = cpctl("runs", "wait", str(run.pk), "--json")
    assert waited.code == commands.CANCELLED
    assert json.loads(waited.out)["state"] == "cancelled"
    assert "cancelled" in waited.err  # the progress goes to stderr, JSON alone to stdout


def log(command: Command, level: str, message: str) -> None:
    line = protocol.CheckLog(check="health", level=level, message=message)
    reports.store_report(command.node_id, protocol.CommandUpdate(key=command.key, line=line))


def test_it_prints_a_runs_log_lines_and_follows_them_until_the_run_is_over(cpctl, fleet):
    run = launch(fleet[:1])
    (command,) = Command.objects.filter(run=run)
    started(command)
    log(command, "info", "reading counters")

    following = Background(cpctl, "runs", "logs", str(run.pk), "--follow", "--poll", "0.05")
    log(command, "warning", "ECC counter moved")
    finished(command)
    result = following.join()

    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [
        "gpu-003 health info: reading counters",
        "gpu-003 health warning: ECC counter moved",
    ]


def test_an_expired_run_is_told_apart_from_a_failed_one():
    counts = {"failed": 0, "expired": 2}
    assert commands.run_exit_code({"state": "failed", "commands": counts}) == commands.CANCELLED
    assert commands.run_exit_code({"state": "failed", "commands": {**counts, "failed": 1}}) == commands.FAILED
    assert commands.run_exit_code({"state": "succeeded", "commands": counts}) == commands.OK


def test_waiting_past_the_timeout_exits_5_and_leaves_the_run_going(cpctl, fleet):
    run = launch(fleet[:1])
    result = cpctl("runs", "wait", str(run.pk), "--poll", "0.01", "--timeout", "0.02")
    assert result.code == commands.TIMED_OUT
    assert f"run {run.pk} is still running after 0.02 s" in result.err
    run.refresh_from_db()
    assert run.state == "running"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nodes", "lits"], "invalid choice: 'lits'"),
        (["nodes", "list", "--limit", "0"], "argument --limit: '0' must be above 0"),
        (["runs", "show", "abc"], "argument run: 'abc' is not a int"),
        (["runs", "wait", "3", "--poll", "-1"], "argument --poll: '-1' must be above 0"),
        (["burnin", "start", "--suite", "quick"], "one of the arguments --nodes --cluster is required"),
        (["burnin", "start", "--nodes", "a", "--cluster", "c", "--suite", "quick"], "not allowed with argument"),
        (["burnin", "start", "--nodes", " , ", "--suite", "quick"], "argument --nodes: give at least one node"),
        (["burnin", "start", "--nodes", "a"], "the following arguments are required: --suite"),
        (["failures", "list", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_every_bad_flag_is_a_usage_error_naming_it(cpctl, argv, message):
    result = cpctl(*argv)
    assert result.code == commands.USAGE
    assert message in result.err
    assert result.out == ""


def test_a_bad_token_or_no_configuration_is_told_apart(cpctl, asgi_server, tmp_path):
    bad = cpctl("nodes", "list", env={"CPCTL_URL": asgi_server.origin, "CPCTL_TOKEN": "cpt_nope"})
    assert bad.code == commands.API_ERROR
    assert "401" in bad.err

    nothing = cpctl("nodes", "list", env={"CPCTL_CONFIG": str(tmp_path / "absent.toml")})
    assert nothing.code == commands.USAGE
    assert f"No server URL: give it with --url, CPCTL_URL or {tmp_path / 'absent.toml'}" in nothing.err

    unreachable = cpctl("nodes", "list", env={"CPCTL_URL": "http://127.0.0.1:9", "CPCTL_TOKEN": "x"})
    assert unreachable.code == commands.API_ERROR
    assert "Cannot reach the API at http://127.0.0.1:9" in unreachable.err


def test_flags_win_over_the_environment_which_wins_over_the_config_file(cpctl, asgi_server, tokens, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f'url = "{asgi_server.origin}"\ntoken = "{tokens[Role.VIEWER]}"\n')
    from_file = cpctl("nodes", "list", env={"CPCTL_CONFIG": str(config)})
    assert from_file.code == 0, from_file.err

    env = {"CPCTL_CONFIG": str(config), "CPCTL_TOKEN": "cpt_wrong"}
    assert cpctl("nodes", "list", env=env).code == commands.API_ERROR
    flagged = cpctl("nodes", "list", "--token", tokens[Role.VIEWER], env=env)
    assert flagged.code == 0, flagged.err

    config.write_text('url = "http://x"\ncolour = "blue"\n')
    broken = cpctl("nodes", "list", env={"CPCTL_CONFIG": str(config)})
    assert broken.code == commands.USAGE
    assert "unknown keys: colour" in broken.err
