"""``cp-agent``: enrollment against a real HTTP server, its errors and exit codes, status, and a
``run`` that stops cleanly on SIGTERM."""

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agents.buffer import TelemetryBuffer
from agents.cli import main
from agents.commandline import EXIT_CONFIG, EXIT_OK, EXIT_REFUSED, EXIT_UNREACHABLE
from agents.config import load_config
from tests.agents.doubles import RUN_WITH_FAKE_COLLECTOR, FakeEnrollmentServer

REPO = Path(__file__).resolve().parents[2]
ENROLLED = {"node_id": 7, "hostname": "gpu-007", "credential": "cpn_7_s3cret", "server_ws_url": "ws://cp/ws/agent"}


@pytest.fixture
def enrollment():
    with FakeEnrollmentServer() as server:
        server.answer = lambda body: (201, {**ENROLLED, "hostname": body["hostname"]})
        yield server


def enroll(server_url: str, config: Path, *extra: str) -> int:
    return main(["enroll", "--server", server_url, "--token", "cpe_token", "--config", str(config), *extra])


def test_it_enrolls_and_writes_the_credential_to_a_file_only_its_owner_can_read(enrollment, tmp_path, capsys):
    config = tmp_path / "etc" / "agent.json"

    assert enroll(enrollment.url, config, "--hostname", "gpu-007") == EXIT_OK

    assert enrollment.requests[0]["path"] == "/api/v1/agents/enroll"
    assert enrollment.requests[0]["token"] == "cpe_token"
    assert enrollment.requests[0]["hostname"] == "gpu-007"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    saved = load_config(config)
    assert (saved.node_id, saved.hostname, saved.credential) == (7, "gpu-007", "cpn_7_s3cret")
    assert saved.server_ws_url == "ws://cp/ws/agent"
    assert saved.server_url == enrollment.url
    assert "Enrolled gpu-007 as node 7" in capsys.readouterr().out
    assert [p.name for p in config.parent.iterdir()] == ["agent.json"]  # no temporary file left


def test_it_enrolls_under_this_hosts_name_by_default(enrollment, tmp_path, monkeypatch):
    monkeypatch.setattr("socket.gethostname", lambda: "dgx-42")

    assert enroll(enrollment.url, tmp_path / "agent.json") == EXIT_OK

    assert enrollment.requests[0]["hostname"] == "dgx-42"


@pytest.mark.parametrize(
    ("status", "answer", "expected"),
    [
        (400, {"hostname": ["Enter a valid hostname."]}, "HTTP 400 Bad Request: hostname: Enter a valid hostname."),
        (401, {"detail": "Unknown enrollment token."}, "HTTP 401 Unauthorized: Unknown enrollment token."),
        (410, {"detail": "This enrollment token has expired."}, "HTTP 410 Gone: This enrollment token has expired."),
    ],
)
def test_a_refused_enrollment_prints_the_status_and_the_servers_message(
    enrollment, tmp_path, capsys, status, answer, expected
):
    enrollment.answer = lambda body: (status, answer)
    config = tmp_path / "agent.json"

    assert enroll(enrollment.url, config, "--hostname", "gpu-007") == EXIT_REFUSED

    error = capsys.readouterr().err
    assert "the control plane refused to enroll gpu-007" in error
    assert expected in error
    assert not config.exists()


def test_a_server_error_is_a_different_exit_code_from_a_refusal(enrollment, tmp_path, capsys):
    enrollment.answer = lambda body: (503, {"detail": "Database unavailable."})

    assert enroll(enrollment.url, tmp_path / "agent.json") == EXIT_UNREACHABLE
    assert "HTTP 503 Service Unavailable: Database unavailable." in capsys.readouterr().err


def test_an_unreachable_server_says_so(tmp_path, capsys):
    assert enroll("http://127.0.0.1:9", tmp_path / "agent.json") == EXIT_UNREACHABLE
    assert "cannot reach http://127.0.0.1:9" in capsys.readouterr().err


def test_an_answer_that_is_not_an_enrollment_is_reported(enrollment, tmp_path, capsys):
    enrollment.answer = lambda body: (200, {"node": 1})

    assert enroll(enrollment.url, tmp_path / "agent.json") == EXIT_UNREACHABLE
    assert "not an enrollment" in capsys.readouterr().err


def test_it_does_not_overwrite_an_enrollment_or_spend_the_token_without_force(enrollment, tmp_path, capsys):
    config = tmp_path / "agent.json"
    config.write_text("{}")

    assert enroll(enrollment.url, config) == EXIT_CONFIG

    error = capsys.readouterr().err
    assert "already exists" in error
    assert "pass --force to replace it" in error
    assert enrollment.requests == []
    assert config.read_text() == "{}"
    assert enroll(enrollment.url, config, "--force", "--hostname", "gpu-008") == EXIT_OK
    assert load_config(config).hostname == "gpu-008"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["enroll", "--server", "ftp://cp", "--token", "t"], "is not an http:// or https:// URL"),
        (["enroll", "--server", "https://cp"], "the following arguments are required: --token"),
        (["enroll", "--server", "https://cp", "--token", "t", "--hostname", "bad_name"], "not a valid hostname"),
        (["run", "--interval", "0"], "must be above zero"),
        (["run", "--interval", "fast"], "is not a number"),
        (["run", "--send-interval", "soon"], "is not a number"),
        (["run", "--send-interval", "-1"], "outside 0 .. 60 seconds (0: send each sample as soon as it is taken)"),
        (["run", "--send-interval", "nan"], "outside 0 .. 60 seconds"),
        (["simulate", "--server", "https://cp", "--send-interval", "61"], "outside 0 .. 60 seconds"),
        (["simulate", "--server", "https://cp", "--nodes", "-3"], "must be above zero"),
        (["simulate", "--server", "https://cp", "--profile", "a100"], "invalid choice: 'a100'"),
        (["launch"], "invalid choice: 'launch'"),
    ],
)
def test_bad_flags_exit_2_with_a_clear_message(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        main(argv)

    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_run_and_status_without_an_enrollment_explain_what_to_do(tmp_path, capsys):
    missing = str(tmp_path / "agent.json")

    assert main(["run", "--config", missing]) == EXIT_CONFIG
    assert main(["status", "--config", missing]) == EXIT_CONFIG
    assert "enroll this node first" in capsys.readouterr().err


def test_an_invalid_config_is_reported_with_its_path(tmp_path, capsys):
    config = tmp_path / "agent.json"
    config.write_text('{"server_url": "https://cp"}')

    assert main(["status", "--config", str(config)]) == EXIT_CONFIG
    assert f"{config} is not a valid agent configuration" in capsys.readouterr().err


def test_status_shows_the_node_the_server_and_the_spooled_buffer(enrollment, tmp_path, capsys):
    config, state = tmp_path / "agent.json", tmp_path / "state"
    enroll(enrollment.url, config, "--hostname", "gpu-007", "--state-dir", str(state))
    buffer = TelemetryBuffer(state)
    for _ in range(3):
        buffer.add("telemetry", [b'{"ts":1700000000.0,"gpus":[]}'])
    buffer.close()
    capsys.readouterr()

    assert main(["status", "--config", str(config)]) == EXIT_OK
    text = capsys.readouterr().out
    assert "gpu-007 (node 7)" in text
    assert enrollment.url in text
    assert "3 sample(s)" in text
    assert main(["status", "--config", str(config), "--json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report["buffer"]["telemetry"]["spooled_items"] == 3
    assert report["node_id"] == 7


def test_run_samples_while_the_server_is_away_and_a_sigterm_flushes_the_buffer_to_disk(tmp_path):
    config, state = tmp_path / "agent.json", tmp_path / "state"
    config.write_text(
        json.dumps(
            {
                "server_url": "http://127.0.0.1:9",
                "server_ws_url": "ws://127.0.0.1:9/ws/agent",  # nothing listens: the agent buffers
                "node_id": 1,
                "hostname": "gpu-001",
                "credential": "cpn_1_x",
                "state_dir": str(state),
            }
        )
    )
    command = ["run", "--config", str(config), "--simulated", "h100", "--interval", "0.1"]
    tally = tmp_path / "samples-taken"
    agent = subprocess.Popen(
        [sys.executable, "-c", RUN_WITH_FAKE_COLLECTOR, *command],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "FAKE_COLLECTOR_TALLY": str(tally)},
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: samples_taken(tally) >= 3 or agent.poll() is not None)

    agent.send_signal(signal.SIGTERM)
    _, log = agent.communicate(timeout=15)

    assert agent.returncode == EXIT_OK, log
    assert TelemetryBuffer(state).buffered_samples == samples_taken(tally) >= 3  # every one, nothing lost
    assert "cannot talk to ws://127.0.0.1:9/ws/agent" in log


def samples_taken(tally: Path) -> int:
    return int(tally.read_text()) if tally.exists() else 0


def wait_for(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds (a hung subprocess, not a slow one)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.02)
