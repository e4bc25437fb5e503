"""Test doubles for the agent: a collector that fills every field of 8 GPUs, and a control plane
that speaks the wire protocol over a real WebSocket (Welcome, Ack, Error, CloseCode.UNAUTHORIZED)
and stores what it receives with the server's dedup rule (a seq at or below the stored cursor is
not stored again).

The benchmark ``benchmarks/agent_cost.py`` uses both, so they stay plain Python (no pytest)."""

import asyncio
import itertools
import json
import random
import threading
import zlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from agents.durable import write_private_file
from agents.protocol import (
    Ack,
    CloseCode,
    Error,
    Events,
    GpuEvent,
    GpuInfo,
    GpuSample,
    Heartbeat,
    Hello,
    HostFacts,
    Inventory,
    NodeSample,
    PortInfo,
    PortSample,
    ProtocolError,
    Telemetry,
    Welcome,
    decode_agent_message,
    encode,
)

# ``python -c`` program: ``cp-agent ARGS`` with FakeCollector standing in for the simulator's model, so
# ``cp-agent run --simulated PROFILE`` runs the real CLI path in a subprocess (tests, agent_cost benchmark).
# $FAKE_COLLECTOR_TALLY names a file the collector writes its count of samples to, for a test to watch.
RUN_WITH_FAKE_COLLECTOR = """
import os
import sys
import agents.simulator.fleet as fleet
from agents.cli import main
from tests.agents.doubles import FakeCollector

tally = os.environ.get("FAKE_COLLECTOR_TALLY")
fleet.simulated_collector_factory = lambda: lambda profile, hostname, seed, faults: FakeCollector(hostname, tally=tally)
sys.exit(main(sys.argv[1:]))
"""


HEALTHY_COUNTERS = dict.fromkeys(
    (
        "throttle_reasons",
        "ecc_corrected_volatile",
        "ecc_uncorrected_volatile",
        "ecc_uncorrected_aggregate",
        "remapped_rows_correctable",
        "remapped_rows_uncorrectable",
        "pcie_replay_count",
        "nvlink_crc_errors",
        "nvlink_replay_errors",
        "nvlink_recovery_errors",
    ),
    0,
)


class FakeCollector:
    """Implements ``agents.collectors.base.Collector``: every field of every GPU and port, plausible values."""

    def __init__(
        self,
        hostname: str = "node-001",
        *,
        gpus: int = 8,
        ports: int = 8,
        seed: int = 0,
        limit: int | None = None,
        tally: str | None = None,
    ) -> None:
        self.simulated = True
        self.limit = limit  # after this many samples, sample() fails (a GPU that stopped answering)
        self.tally = tally  # a file that holds how many samples were taken, rewritten after each
        self.hostname = hostname
        self.gpus = gpus
        self.ports = ports
        self.random = random.Random(seed)
        self.sampled_at: list[float] = []
        self.pending_events: list[GpuEvent] = []
        self.discoveries = 0
        self.extra_gpu_name = "NVIDIA H100 80GB HBM3"
        self.closed = False

    def discover(self) -> Inventory:
        self.discoveries += 1
        return Inventory(
            host=HostFacts(hostname=self.hostname, driver_version="550.90.07", cuda_version="12.4", cpu_count=224),
            gpus=[
                GpuInfo(
                    index=i,
                    uuid=f"GPU-{i:08x}-0000-0000-0000-{zlib.crc32(self.hostname.encode()):012x}",
                    name=self.extra_gpu_name,
                    memory_mib=81559,
                    pci_bus_id=f"00000000:{0x18 + i:02X}:00.0",
                    power_limit_w=700.0,
                    pcie_gen=5,
                    pcie_width=16,
                )
                for i in range(self.gpus)
            ],
            ports=[
                PortInfo(device=f"mlx5_{p}", port=1, kind="infiniband", rate_gbps=400.0, state="active")
                for p in range(self.ports)
            ],
        )

    def sample(self, now: float) -> NodeSample:
        if self.limit is not None and len(self.sampled_at) >= self.limit:
            raise RuntimeError("the GPUs stopped answering")
        self.sampled_at.append(now)
        if self.tally is not None:
            write_private_file(Path(self.tally), str(len(self.sampled_at)).encode())
        r = self.random.random
        return NodeSample(
            ts=now,
            gpus=[
                GpuSample(
                    index=i,
                    util_gpu=round(90 + 10 * r(), 1),
                    util_mem=round(40 + 20 * r(), 1),
                    mem_used_mib=60_000 + int(1000 * r()),
                    temp_c=round(60 + 10 * r(), 1),
                    power_w=round(600 + 80 * r(), 1),
                    power_limit_w=700.0,
                    sm_clock_mhz=1980,
                    mem_clock_mhz=2619,
                    ecc_corrected_aggregate=3,
                    retired_pages_pending=False,
                    remapped_rows_pending=False,
                    remapped_rows_failed=False,
                    **HEALTHY_COUNTERS,
                    pcie_tx_kbps=int(1e6 * r()),
                    pcie_rx_kbps=int(1e6 * r()),
                    nvlink_tx_kbps=int(1e8 * r()),
                    nvlink_rx_kbps=int(1e8 * r()),
                    recovery_action=0,
                )
                for i in range(self.gpus)
            ],
            ports=[
                PortSample(
                    device=f"mlx5_{p}",
                    port=1,
                    state="active",
                    rate_gbps=400.0,
                    tx_gbps=round(300 * r(), 2),
                    rx_gbps=round(300 * r(), 2),
                    symbol_errors=0,
                    link_downed=0,
                    rcv_errors=0,
                )
                for p in range(self.ports)
            ],
        )

    def drain_events(self) -> list[GpuEvent]:
        events, self.pending_events = self.pending_events, []
        return events

    def close(self) -> None:
        self.closed = True


@dataclass
class NodeRecord:
    """What the control plane double holds for one node: cursors, stored items, and everything seen."""

    node_id: int
    hostname: str
    cursor: dict[str, int] = field(default_factory=lambda: {"telemetry": 0, "events": 0})
    stored_samples: list[float] = field(default_factory=list)  # sample timestamps, in storage order
    samples_per_frame: list[int] = field(default_factory=list)  # of every telemetry frame received
    stored_events: list[str] = field(default_factory=list)
    received_seqs: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    hellos: list[Hello] = field(default_factory=list)
    heartbeats: list[Heartbeat] = field(default_factory=list)
    inventories: list[Inventory] = field(default_factory=list)
    connections: int = 0
    close_codes: list[int | None] = field(default_factory=list)  # 1006: dropped without a closing handshake


class FakeControlPlane:
    """A WebSocket server double of the gateway at ``/ws/agent``; its store outlives restarts."""

    def __init__(self, *, interval_s: float = 0.1) -> None:
        self.interval_s = interval_s
        self.nodes: dict[str, NodeRecord] = {}  # by credential
        self.refuse: dict[tuple[str, int], str] = {}  # (stream, seq) -> error code to answer with, once
        self.send_error_stream = True  # False: answer like a server that leaves Error.stream out
        self.acknowledging = True  # False: store, but never ack (a server stuck behind its database)
        self.port = 0
        self._server: Server | None = None
        self._ids = itertools.count(1)
        self._live: dict[str, ServerConnection] = {}  # by credential

    def add_node(self, hostname: str, credential: str | None = None) -> str:
        node_id = next(self._ids)
        credential = credential or f"cpn_{node_id}_secret{node_id:04d}"
        self.nodes[credential] = NodeRecord(node_id, hostname)
        return credential

    def node(self, hostname: str) -> NodeRecord:
        return next(n for n in self.nodes.values() if n.hostname == hostname)

    async def revoke(self, credential: str) -> None:
        """Forget the credential and close its node's live socket, as the gateway does on a revocation."""
        self.nodes.pop(credential)
        if (connection := self._live.get(credential)) is not None:
            await connection.close(CloseCode.UNAUTHORIZED, "Credential revoked.")

    async def acknowledge(self, hostname: str, stream: str = "telemetry") -> None:
        """Ack the node's stored cursor now, as a server does once a slow write commits."""
        credential = next(known for known, node in self.nodes.items() if node.hostname == hostname)
        ack = Ack(stream=stream, seq=self.nodes[credential].cursor[stream])
        await self._live[credential].send(encode(ack).decode())

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/agent"

    async def start(self) -> None:
        self._server = await serve(self._handle, "127.0.0.1", self.port, compression=None)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self, *, abrupt: bool = True) -> None:
        """Stop serving; ``abrupt`` drops every TCP connection without a closing handshake, like a crash."""
        assert self._server is not None
        if abrupt:
            for connection in list(self._server.connections):
                connection.transport.abort()
        self._server.close()
        await self._server.wait_closed()
        self._server = None

    async def _handle(self, connection: ServerConnection) -> None:
        authorization = connection.request.headers.get("Authorization", "")
        node = self.nodes.get(authorization.removeprefix("Bearer "))
        if node is None:
            await connection.close(CloseCode.UNAUTHORIZED, "credential refused")
            return
        node.connections += 1
        self._live[authorization.removeprefix("Bearer ")] = connection
        try:
            async for frame in connection:
                reply = self._answer(node, frame)
                if reply is not None:
                    await connection.send(encode(reply).decode())
        except ConnectionClosed:
            pass
        node.close_codes.append(connection.close_code)

    def _answer(self, node: NodeRecord, frame: str | bytes) -> Welcome | Ack | Error | None:
        try:
            message = decode_agent_message(frame)
        except ProtocolError as exc:
            return exc.reply()
        match message:
            case Hello():
                node.hellos.append(message)
                return Welcome(
                    node_id=node.node_id,
                    hostname=node.hostname,
                    telemetry_interval_s=self.interval_s,
                    last_telemetry_seq=node.cursor["telemetry"],
                    last_events_seq=node.cursor["events"],
                )
            case Telemetry() | Events():
                stream = "telemetry" if isinstance(message, Telemetry) else "events"
                node.received_seqs[stream].append(message.seq)
                if isinstance(message, Telemetry):
                    node.samples_per_frame.append(len(message.samples))
                code = self.refuse.pop((stream, message.seq), None)
                if code is not None:
                    return Error(
                        code=code,
                        message=f"refused seq {message.seq}",
                        seq=message.seq,
                        stream=stream if self.send_error_stream else None,
                    )
                if message.seq > node.cursor[stream]:
                    if isinstance(message, Telemetry):
                        node.stored_samples.extend(sample.ts for sample in message.samples)
                    else:
                        node.stored_events.extend(event.data for event in message.events)
                    node.cursor[stream] = message.seq
                return Ack(stream=stream, seq=node.cursor[stream]) if self.acknowledging else None
            case Heartbeat():
                node.heartbeats.append(message)
            case Inventory():
                node.inventories.append(message)
        return None


async def wait_until(condition: Callable[[], bool], timeout: float = 5.0, step: float = 0.01) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        await asyncio.sleep(step)


class FakeEnrollmentServer:
    """``POST /api/v1/agents/enroll`` on a real HTTP socket, in a thread: answers each request with
    ``answer(body) -> (status, json)``; by default enrolls the hostname into ``control_plane``."""

    def __init__(self, control_plane: FakeControlPlane | None = None) -> None:
        self.control_plane = control_plane
        self.requests: list[dict] = []
        self.answer: Callable[[dict], tuple[int, object]] = self._enroll
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def __enter__(self) -> "FakeEnrollmentServer":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._http.shutdown()
        self._http.server_close()

    def _enroll(self, body: dict) -> tuple[int, object]:
        assert self.control_plane is not None
        credential = self.control_plane.add_node(body["hostname"])
        node = self.control_plane.nodes[credential]
        return 201, {
            "node_id": node.node_id,
            "hostname": node.hostname,
            "credential": credential,
            "server_ws_url": self.control_plane.url,
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, **body})
                status, answer = server.answer(body)
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                pass

        return Handler
