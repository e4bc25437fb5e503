"""The demo's process supervisor (controlplane/supervisor.py) with real child processes: prefixed
output, the first child to exit, an ordered stop, SIGKILL for a child that will not stop, and a stop
that stops everything however many signals arrive."""

import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path

import pytest

from controlplane.supervisor import ChildExited, StopRequested, Supervisor
from tests.launched import Launched

WAIT_S = 30  # a guard against a hang, never a measure: every wait below ends on an event

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")


def python_child(name: str, log: Path, *, ignore_sigterm: bool = False) -> list[str]:
    """A child that says it is ready, then on SIGTERM writes its name to ``log`` and exits."""
    on_sigterm = "signal.SIG_IGN" if ignore_sigterm else "stop"
    code = (
        "import signal, sys, time\n"
        f"def stop(*_):\n    open({str(log)!r}, 'a').write({name!r} + '\\n'); sys.exit(0)\n"
        f"signal.signal(signal.SIGTERM, {on_sigterm})\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    return [sys.executable, "-c", code]


def wait_for(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def is_running(pid: int) -> bool:
    """True while the process exists and is not a zombie (one reaped by nobody yet has stopped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@pytest.fixture
def supervisor() -> Iterator[Supervisor]:
    supervisor = Supervisor(io.StringIO(), stop_timeout_s=5)
    yield supervisor
    supervisor.stop_all()


def output_of(supervisor: Supervisor) -> str:
    assert isinstance(supervisor.output, io.StringIO)
    return supervisor.output.getvalue()


def test_it_prefixes_each_line_with_the_childs_name(supervisor):
    child = supervisor.start("web", [sys.executable, "-c", "print('one'); print('two')"], {})
    child.process.wait()
    supervisor.stop_all()
    assert output_of(supervisor).splitlines() == ["   web | one", "   web | two"]


def test_it_notices_the_first_child_that_exits(supervisor):
    supervisor.start("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], {})
    crasher = supervisor.start("crasher", [sys.executable, "-c", "raise SystemExit(3)"], {})
    with pytest.raises(ChildExited) as exited:
        supervisor.watch()
    assert exited.value.child is crasher
    assert str(exited.value) == "crasher exited with status 3"
    supervisor.stop_all()
    assert all(child.process.returncode is not None for child in supervisor.children)


def test_it_stops_the_application_before_the_services_it_depends_on(supervisor, tmp_path):
    log = tmp_path / "stopped"
    supervisor.start("redis", python_child("redis", log), {}, stop_last=True)
    supervisor.start("web", python_child("web", log), {})
    supervisor.start("worker", python_child("worker", log), {})
    wait_for(lambda: output_of(supervisor).count("ready") == 3)
    supervisor.stop_all()
    stopped = log.read_text().split()
    assert sorted(stopped[:2]) == ["web", "worker"]
    assert stopped[2] == "redis"


def test_it_kills_a_child_that_ignores_sigterm(tmp_path):
    supervisor = Supervisor(io.StringIO(), stop_timeout_s=0.5)
    stubborn = supervisor.start("stubborn", python_child("stubborn", tmp_path / "log", ignore_sigterm=True), {})
    wait_for(lambda: "ready" in output_of(supervisor))
    supervisor.stop_all()
    assert stubborn.process.returncode == -signal.SIGKILL
    assert "stubborn did not stop within 0.5 s; killing it" in output_of(supervisor)


def test_it_kills_what_a_child_leaves_running_in_its_process_group(supervisor):
    leaves_a_sleeper = (
        "import subprocess, sys\n"
        "sleeper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(sleeper.pid, flush=True)\n"
    )
    parent = supervisor.start("parent", [sys.executable, "-c", leaves_a_sleeper], {})
    wait_for(lambda: parent.process.poll() is not None)
    sleeper = int(output_of(supervisor).split("|")[1])
    assert is_running(sleeper)
    supervisor.stop_all()
    wait_for(lambda: not is_running(sleeper))


def test_it_returns_what_a_child_run_to_its_end_prints_and_relays_its_stderr(supervisor):
    code = "import sys; print('progress', file=sys.stderr); print('{\"answer\": 42}')"
    assert supervisor.run_to_end("setup", [sys.executable, "-c", code], {}) == b'{"answer": 42}\n'
    assert output_of(supervisor) == " setup | progress\n"
    assert supervisor.children == []  # its exit is not a child's death


def test_it_raises_for_a_child_run_to_its_end_that_fails(supervisor):
    with pytest.raises(subprocess.CalledProcessError) as failed:
        supervisor.run_to_end("setup", [sys.executable, "-c", "raise SystemExit(4)"], {})
    assert failed.value.returncode == 4


def test_a_stop_signal_is_recorded_not_raised_and_the_handlers_are_restored(supervisor):
    before = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    with supervisor.handling_stop_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)  # a second signal changes nothing
        with pytest.raises(StopRequested) as stop:
            supervisor.wait_until(lambda: True)
    assert stop.value.signal_number == signal.SIGTERM
    assert {number: signal.getsignal(number) for number in before} == before


# --- A launcher under a storm of signals --------------------------------------------------------

# A launcher of three children, as the demo's: the application (slow to stop, so that signals land
# while it stops; one leaves a process of its own behind), one that ignores SIGTERM, and a service
# stopped last. Each child prints its pid (and that of the process it started) once it is ready.
LAUNCHER = """
import sys
from controlplane.supervisor import Supervisor

SLOW_TO_STOP = '''
import os, signal, subprocess, sys, time
def stop(*_):
    time.sleep(0.5)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
helper = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])
print('ready', os.getpid(), helper.pid, flush=True)
time.sleep(120)
'''
IGNORES_SIGTERM = '''
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print('ready', os.getpid(), flush=True)
time.sleep(120)
'''

supervisor = Supervisor(sys.stdout, stop_timeout_s=2)

def start():
    supervisor.start('service', [sys.executable, '-c', SLOW_TO_STOP], {}, stop_last=True)
    supervisor.start('web', [sys.executable, '-c', SLOW_TO_STOP], {})
    supervisor.start('stubborn', [sys.executable, '-c', IGNORES_SIGTERM], {})

sys.exit(supervisor.run(start, label='the launcher'))
"""


class Launcher(Launched):
    def __init__(self) -> None:
        super().__init__(["-c", LAUNCHER])
        self.started: list[int] = []

    def pids(self) -> list[int]:
        """Every process the launcher started, and those its children started."""
        wait_for(lambda: sum(" | ready " in line for line in self.lines) == 3)
        ready = [line.split(" | ready ")[1] for line in self.lines if " | ready " in line]
        self.started = [int(pid) for line in ready for pid in line.split()]
        return self.started


@pytest.fixture
def launcher() -> Iterator[Launcher]:
    launcher = Launcher()
    yield launcher
    # After a failure: leave nothing behind (each child leads a process group of its own).
    for pid in [launcher.process.pid, *launcher.started]:
        with suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    launcher.process.wait()


def test_a_group_signal_and_a_forwarded_one_stop_everything(launcher):
    pids = launcher.pids()
    assert len(pids) == 5
    launcher.signal_group(signal.SIGTERM)  # systemd, timeout, a supervisor
    launcher.signal_launcher(signal.SIGTERM)  # and make, forwarding it

    assert launcher.process.wait(timeout=WAIT_S) == 0
    assert "stopping the launcher" in launcher.lines
    wait_for(lambda: not [pid for pid in pids if is_running(pid)])  # SIGKILLed helpers die as they are scheduled


def test_signals_arriving_while_it_stops_neither_abandon_nor_spare_a_child(launcher):
    pids = launcher.pids()
    launcher.signal_launcher(signal.SIGINT)
    wait_for(lambda: "stopping the launcher" in launcher.lines)
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        launcher.signal_group(number)  # an impatient Ctrl-C, and more
        launcher.signal_launcher(number)

    assert launcher.process.wait(timeout=WAIT_S) == 0
    assert "stubborn did not stop within 2 s; killing it" in launcher.lines
    wait_for(lambda: not [pid for pid in pids if is_running(pid)])
