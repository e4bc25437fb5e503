"""The agent loop: sample on a fixed timer into the buffer, and let the transport carry it.

Sampling runs on its own schedule whether or not the control plane is reachable, and never waits
on the socket: each tick samples the collector, encodes and validates the sample against the wire
protocol (a bad value is dropped and counted here, so it cannot poison a replayed batch of 600),
appends it to the buffer and wakes the sender. With a ``send_interval`` longer than the sample
interval, samples are held and appended together, one frame per send interval
(``agents.batching``). Events (XIDs) go to their own stream at once, whatever the send interval.
Discovery is re-read every ``discovery_interval`` seconds and sent whenever it changes.

A real collector runs in one worker thread: NVML can block for seconds on a GPU that has fallen off
the bus, and heartbeats must go on meanwhile. A simulated one runs on the event loop (a thousand
of them share one process in the fleet simulator). A tick that overruns skips the ticks it missed
instead of bunching them up.
"""

import asyncio
import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Final, TypeVar

import msgspec

from agents import __version__
from agents.batching import SampleBatch
from agents.buffer import TelemetryBuffer
from agents.collectors.base import Collector
from agents.commands.executor import CommandExecutor
from agents.commands.runner import SubprocessRunner
from agents.commands.store import CommandStore
from agents.protocol import PROTOCOL_VERSION, GpuEvent, Heartbeat, Hello, Inventory, NodeSample, Welcome, encode
from agents.ratelimit import CountingLog
from agents.transport import DEFAULT_HEARTBEAT_INTERVAL_S, Backoff, Transport

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S: Final = 1.0
DEFAULT_DISCOVERY_INTERVAL_S: Final = 30.0
DEFAULT_SEND_INTERVAL_S: Final = 0.0  # each sample sent as soon as it is taken

_sample_validator = msgspec.json.Decoder(NodeSample)
_event_validator = msgspec.json.Decoder(GpuEvent)
_inventory_validator = msgspec.json.Decoder(Inventory)
_T = TypeVar("_T")


@dataclass(slots=True)
class _Collected:
    sample: bytes | None = None
    events: list[bytes] = field(default_factory=list)
    inventory: bytes | None = None


class Agent:
    def __init__(
        self,
        collector: Collector,
        buffer: TelemetryBuffer,
        *,
        server_url: str,
        credential: str,
        hostname: str,
        interval: float = DEFAULT_INTERVAL_S,
        send_interval: float = DEFAULT_SEND_INTERVAL_S,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL_S,
        discovery_interval: float = DEFAULT_DISCOVERY_INTERVAL_S,
        follow_server_interval: bool = True,
        backoff: Backoff | None = None,
        clock: Callable[[], float] = time.time,
        collect_in_thread: bool | None = None,
        commands: CommandExecutor | None = None,
    ) -> None:
        self.collector = collector
        self.buffer = buffer
        self.hostname = hostname
        self.label = hostname
        self.interval = interval
        self.batch = SampleBatch(send_interval)  # samples taken and not yet handed to the buffer
        self.discovery_interval = discovery_interval
        self.follow_server_interval = follow_server_interval
        self.clock = clock
        self.wake = asyncio.Event()
        # Commands from the control plane; without an executor of the caller's, checks run as processes
        # and their keys are remembered only while this agent runs (cp-agent run keeps them on disk).
        self.commands = commands or CommandExecutor(CommandStore(None), SubprocessRunner(), label=hostname)
        self.commands.wake = self.wake
        self.samples_taken = 0
        self.transport = Transport(server_url, credential, self, heartbeat_interval=heartbeat_interval, backoff=backoff)
        if collect_in_thread is None:
            collect_in_thread = not collector.simulated
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="collector") if collect_in_thread else None
        self._inventory: bytes | None = None
        self._inventory_version = 0
        self._discovered_at = -math.inf
        self._failures = CountingLog(log, f"{hostname} collector", level=logging.ERROR)
        self._rejected = CountingLog(log, f"{hostname} validation", level=logging.ERROR)
        self._overruns = CountingLog(log, f"{hostname} sampling")

    # What the transport asks for -------------------------------------------------------------------

    def hello(self) -> Hello:
        return Hello(
            protocol=PROTOCOL_VERSION,
            agent_version=__version__,
            hostname=self.hostname,
            simulated=self.collector.simulated,
            buffered_samples=self.buffered_samples,
            dropped_samples=self.buffer.dropped_samples,
        )

    def heartbeat(self) -> Heartbeat:
        return Heartbeat(
            ts=self.clock(),
            buffered_samples=self.buffered_samples,
            dropped_samples=self.buffer.dropped_samples,
        )

    @property
    def buffered_samples(self) -> int:
        """Samples taken and not yet acknowledged: those the buffer holds, and those waiting for the next send."""
        return self.buffer.buffered_samples + len(self.batch)

    def inventory(self) -> tuple[int, bytes | None]:
        return self._inventory_version, self._inventory

    def welcomed(self, welcome: Welcome) -> None:
        self.buffer.welcome("telemetry", welcome.last_telemetry_seq)
        self.buffer.welcome("events", welcome.last_events_seq)
        if self.follow_server_interval and welcome.telemetry_interval_s != self.interval:
            log.info(
                "%s: sampling every %g s, as the control plane asks (was %g s)",
                self.label,
                welcome.telemetry_interval_s,
                self.interval,
            )
            self.interval = welcome.telemetry_interval_s

    # Running -------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Sample and report until ``stop`` is set; then close the socket and flush the buffer."""
        log.info("%s: agent %s starting (%s collector)", self.label, __version__, self._collector_kind)
        sampler = asyncio.create_task(self._sample_loop())
        transport = asyncio.create_task(self.transport.run(stop))
        try:
            await stop.wait()
        finally:
            sampler.cancel()
            if not stop.is_set():  # cancelled from outside rather than stopped: no goodbye to wait for
                transport.cancel()
            await asyncio.gather(sampler, transport, return_exceptions=True)
            await self.commands.close()
            self.close()

    def close(self) -> None:
        if held := self.batch.take():
            self.buffer.add("telemetry", held)  # spooled by close() with the rest, sent after the restart
        self.buffer.close()
        self.collector.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def _collector_kind(self) -> str:
        return "simulated" if self.collector.simulated else "NVML and sysfs"

    async def _sample_loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_tick = loop.time()
        while True:
            delay = next_tick - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await self.tick()
            next_tick += self.interval
            behind = loop.time() - next_tick
            if behind > 0:
                skipped = math.ceil(behind / self.interval)
                next_tick += skipped * self.interval
                self._overruns.add(skipped, "a sample took longer than the interval; skipped ticks")

    async def tick(self) -> None:
        """Take one sample (and events, and discovery when due) into the buffer."""
        now = self.clock()
        discover = time.monotonic() - self._discovered_at >= self.discovery_interval
        if discover:
            self._discovered_at = time.monotonic()
        if self._executor is not None:
            collected = await asyncio.get_running_loop().run_in_executor(self._executor, self._collect, now, discover)
        else:
            collected = self._collect(now, discover)
        self.samples_taken += 1
        frames = self.batch.add(collected.sample, now, self.interval)
        for samples in frames:
            self.buffer.add("telemetry", samples)
        if collected.events:
            self.buffer.add("events", collected.events)
        inventory_changed = collected.inventory is not None and collected.inventory != self._inventory
        if inventory_changed:
            if self._inventory is not None:
                log.info("%s: inventory changed; reporting it", self.label)
            self._inventory = collected.inventory
            self._inventory_version += 1
        # Held samples wake nobody: a send loop woken by each of them was a task switch per sample in the
        # fleet simulator, for nothing to send.
        if frames or collected.events or inventory_changed:
            self.wake.set()

    def _collect(self, now: float, discover: bool) -> _Collected:
        """Read the collector and encode what it gives; may run in the collector thread."""
        sample = self._read(self.collector.sample, now)
        events = self._read(self.collector.drain_events) or []
        inventory = self._read(self.collector.discover) if discover else None
        return _Collected(
            sample=self._validated(sample, _sample_validator),
            events=[encoded for event in events if (encoded := self._validated(event, _event_validator)) is not None],
            inventory=self._validated(inventory, _inventory_validator),
        )

    def _read(self, method: Callable[..., _T], *args: float) -> _T | None:
        try:
            return method(*args)
        except Exception as exc:
            self._failures.add(1, f"{method.__name__}() failed: {exc!r}", exc_info=exc)
            return None

    def _validated(self, message: msgspec.Struct | None, validator: msgspec.json.Decoder) -> bytes | None:
        """The message encoded, or None (counted, logged) when it breaks the protocol's ranges."""
        if message is None:
            return None
        encoded = encode(message)
        try:
            validator.decode(encoded)
        except msgspec.ValidationError as exc:
            self._rejected.add(1, f"dropped a {type(message).__name__} the protocol refuses: {exc}")
            return None
        return encoded
