"""Child processes under one launcher: started with their output prefixed, stopped together, whatever
the signals.

Django-free: the demo launcher (controlplane/demo.py) uses it, and so can any script that runs a few
processes as one.

Each child runs in a process group of its own, so a signal sent to the launcher's group (Ctrl-C in a
terminal; ``timeout``; ``kill -- -PGID``) reaches the launcher (and ``make`` above it) but not the
children: the launcher stops them, in order, the services they depend on last. The stop signals
(SIGINT, SIGTERM, SIGHUP) only record that a stop was asked for; nothing is raised from a signal
handler, so a second signal (the group's and the one ``make`` forwards arrive together; a second
Ctrl-C) can never cut a stop short. A child that has not stopped within the grace period is killed
with SIGKILL, its whole group with it, and every child is reaped before ``stop_all`` returns.
"""

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, NoReturn, TextIO

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DEFAULT_STOP_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.1  # how soon a stop request or a child's exit is noticed
RELAY_DRAIN_TIMEOUT_S = 2.0

_COLOURS = ("36", "33", "35", "32", "34", "31")


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    stop_last: bool
    relays: list[threading.Thread] = field(repr=False)
    stopped: bool = False  # stopped, reaped, and its process group emptied


class StopRequested(Exception):
    """A stop signal arrived: the launcher stops its children and exits."""

    def __init__(self, signal_number: int) -> None:
        super().__init__(signal.Signals(signal_number).name)
        self.signal_number = signal_number


class ChildExited(Exception):
    """A child that should still be running has exited."""

    def __init__(self, child: Child) -> None:
        super().__init__(f"{child.name} exited with status {child.process.returncode}")
        self.child = child


class Supervisor:
    """Runs named children, relays their output line by line with a name prefix, stops them all."""

    def __init__(
        self,
        output: TextIO,
        *,
        cwd: Path | None = None,
        colour: bool = False,
        stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S,
    ) -> None:
        self.output = output
        self.cwd = cwd
        self.colour = colour
        self.stop_timeout_s = stop_timeout_s
        self.children: list[Child] = []
        self.stop_signal: int | None = None  # the first stop signal received, while handling them
        self._output_lock = threading.Lock()
        self._started = 0

    # --- Starting -------------------------------------------------------------------------------

    def start(self, name: str, argv: list[str], env: Mapping[str, str], *, stop_last: bool = False) -> Child:
        """Start a child that runs until the launcher stops; its output (stdout and stderr) is relayed."""
        process = self._popen(argv, env, stderr=subprocess.STDOUT)
        assert process.stdout is not None  # stdout=PIPE
        child = Child(name, process, stop_last, [self._relay(name, process.stdout)])
        self.children.append(child)
        return child

    def run_to_end(self, name: str, argv: list[str], env: Mapping[str, str]) -> bytes:
        """Run a child to completion and return its stdout; its stderr is relayed like other output.

        Raises ``CalledProcessError`` if it fails; ``StopRequested`` or ``ChildExited`` if a stop is
        requested or another child exits meanwhile (it is one of the children ``stop_all`` stops).
        """
        process = self._popen(argv, env, stderr=subprocess.PIPE)
        assert process.stdout is not None  # stdout=PIPE
        assert process.stderr is not None  # stderr=PIPE
        stdout = bytearray()
        collector = _background(f"stdout-{name}", _read_all, process.stdout, stdout)
        child = Child(name, process, stop_last=False, relays=[self._relay(name, process.stderr), collector])
        self.children.append(child)
        while process.poll() is None:
            self._raise_for_stop_or_exit(exempt=child)
            time.sleep(POLL_INTERVAL_S)
        self.children.remove(child)
        for thread in child.relays:
            thread.join()
        if process.returncode != 0:
            raise subprocess.CalledProcessError(process.returncode, argv)
        return bytes(stdout)

    def _popen(self, argv: list[str], env: Mapping[str, str], *, stderr: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv,
            env=dict(env),
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            process_group=0,  # signals to the launcher's group stay with the launcher; see the module
        )

    # --- Output ---------------------------------------------------------------------------------

    def say(self, message: str) -> None:
        with self._output_lock:
            print(message, file=self.output, flush=True)

    def _relay(self, name: str, stream: IO[bytes]) -> threading.Thread:
        return _background(f"relay-{name}", self._relay_lines, self._prefix(name), stream)

    def _prefix(self, name: str) -> str:
        label = f"{name:>6} |"
        colour = _COLOURS[self._started % len(_COLOURS)]
        self._started += 1
        return f"\033[{colour}m{label}\033[0m" if self.colour else label

    def _relay_lines(self, prefix: str, stream: IO[bytes]) -> None:
        for raw_line in iter(stream.readline, b""):
            self.say(f"{prefix} {raw_line.decode(errors='replace').rstrip()}")
        stream.close()

    # --- Supervising ----------------------------------------------------------------------------

    def run(self, start: Callable[[], None], *, label: str) -> int:
        """Start the children (``start``), watch them, and stop them all however that ends.

        Returns 0 after a stop signal and 1 when a child exits; any other exception from ``start``
        propagates once everything is stopped. ``label`` names what is stopping, in its messages.
        """
        with self.handling_stop_signals():
            try:
                start()
                self.watch()
            except StopRequested:
                self.say(f"stopping {label}")
                return 0
            except ChildExited as exited:
                self.say(f"{exited}; stopping {label}")
                return 1
            finally:
                self.stop_all()

    @contextmanager
    def handling_stop_signals(self) -> Iterator[None]:
        """While inside, SIGINT, SIGTERM and SIGHUP record a stop request instead of their default.

        The handler only records (no output, no exception): a signal can land anywhere, inside
        ``stop_all`` or between starting a child and recording it, and must break neither.
        """

        def request_stop(signal_number: int, _frame: FrameType | None) -> None:
            if self.stop_signal is None:
                self.stop_signal = signal_number

        previous = {number: signal.signal(number, request_stop) for number in STOP_SIGNALS}
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def first_exited(self, *, exempt: Child | None = None) -> Child | None:
        exited = (child for child in self.children if child.process.poll() is not None)
        return next((child for child in exited if child is not exempt), None)

    def wait_until(self, condition: Callable[[], bool], *, timeout_s: float | None = None) -> None:
        """Return once ``condition()`` holds; raise ``StopRequested`` when a stop signal arrives first,
        ``ChildExited`` when a child exits first, ``TimeoutError`` after ``timeout_s``. ``condition``
        is not called again once a stop has been requested."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            self._raise_for_stop_or_exit()
            if condition():
                return
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"not done within {timeout_s:g} s")
            time.sleep(POLL_INTERVAL_S)

    def watch(self) -> NoReturn:
        """Wait for a stop signal (``StopRequested``) or a child's exit (``ChildExited``)."""
        while True:
            self._raise_for_stop_or_exit()
            time.sleep(POLL_INTERVAL_S)

    def _raise_for_stop_or_exit(self, *, exempt: Child | None = None) -> None:
        if self.stop_signal is not None:
            raise StopRequested(self.stop_signal)
        if (exited := self.first_exited(exempt=exempt)) is not None:
            raise ChildExited(exited)

    # --- Stopping -------------------------------------------------------------------------------

    def stop_all(self) -> None:
        """SIGTERM, the grace period, then SIGKILL: the children started without ``stop_last`` first,
        then the rest. Reaps every child, and kills what a child left running in its process group."""
        self._stop([child for child in self.children if not child.stop_last])
        self._stop([child for child in self.children if child.stop_last])

    def _stop(self, children: list[Child]) -> None:
        children = [child for child in children if not child.stopped]
        running = [child for child in children if child.process.poll() is None]
        for child in running:
            child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        while any(child.process.poll() is None for child in running) and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL_S)
        for child in running:
            if child.process.poll() is None:
                self.say(f"{child.name} did not stop within {self.stop_timeout_s:g} s; killing it")
                _kill_group(child)
                child.process.wait()
        for child in children:
            _kill_group(child)  # what the child left behind in its group (a worker's pool process)
            child.stopped = True
            for thread in child.relays:
                thread.join(timeout=RELAY_DRAIN_TIMEOUT_S)


def _kill_group(child: Child) -> None:
    """SIGKILL every process of the child's group; nothing to do when none is left.

    Also right after the leader was reaped: its number stays taken while any process is in its
    group. Once the group is empty the number may in time lead another group (a child started later
    leads one), so this is done once per child, as soon as it has stopped.
    """
    with suppress(ProcessLookupError):
        os.killpg(child.process.pid, signal.SIGKILL)


def _background(name: str, target: Callable[..., None], *args: object) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    thread.start()
    return thread


def _read_all(stream: IO[bytes], into: bytearray) -> None:
    into.extend(stream.read())
    stream.close()
