"""One simulated node: its GPUs' and ports' dynamics under a workload, and the faults it suffers.

Dynamics, per GPU and per sample: utilization follows the workload (with a little jitter and a
per-GPU offset, as real silicon differs); power follows utilization between the profile's idle draw
and its limit, and is capped at the limit (the SW power cap reason bit); temperature follows power
with a first-order lag (time constant 30 s) towards inlet + thermal resistance × power; above the
slowdown temperature the SM clock drops, and with it the power, so a hot GPU settles a few degrees
over the threshold with the thermal slowdown bits set. Memory in use follows the workload; NVLink
and InfiniBand traffic follow its communication share.

Faults change the state the way the hardware does (see ``faults.py`` for the list): an XID is an
event plus the counters, flags and recovery action the driver would show; XID 79 also takes the GPU
out of every later sample and of the inventory; a dead node raises ``NodeDied`` from then on. The GPUs' and
ports' state itself, and the driver's XIDs, are ``hardware.py``'s.

Everything random comes from ``random.Random`` streams seeded by (seed, hostname): the same seed and
the same sample times give the same samples, and the fault stream is separate from the noise stream,
so adding a fault does not change the rest of the fleet's numbers.

Cost: one 8-GPU, 8-port node sample takes about 31 µs on this project's 2-core development machine
(CPython 3.11; benchmarks/sample_cost.py, 2026-12-03 at load 1.6 to 3.7: 56 to 71 µs in the same runs
before the GpuSamples were built positionally and the rounding to decimals done without ``round``), so
1,000 nodes at 1 Hz spend about 3% of one core simulating.
"""

import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Iterable
from typing import Final

from agents.collectors.infiniband import port_event
from agents.protocol import GpuEvent, GpuSample, PortSample, PortState
from agents.simulator.faults import CONDITIONS, FaultSpec, FaultSpecError
from agents.simulator.hardware import (
    GPU_IDLE,
    HW_SLOWDOWN,
    HW_THERMAL_SLOWDOWN,
    PCIE_WIDTH,
    SW_POWER_CAP,
    SW_THERMAL_SLOWDOWN,
    XIDS,
    SimGpu,
    SimPort,
)
from agents.simulator.profiles import Profile
from agents.simulator.workloads import Workload

TEMPERATURE_TIME_CONSTANT_S: Final = 30.0
THROTTLE_PER_DEGREE: Final = 0.045  # SM clock lost per °C over the slowdown temperature
STRAGGLER_DEFICIT_W: Final = 50.0
STRAGGLER_CLOCK: Final = 0.9
FAILED_COOLING_RESISTANCE: Final = 2.0  # the thermal fault doubles the GPU's thermal resistance
FLAP_PERIOD_S: Final = 12.0
FLAP_DOWN_S: Final = 3.0
RANDOM_CONDITION_S: Final = {"thermal": 900.0, "flap": 300.0}  # how long a random condition lasts
CLOCK_STEP_MHZ: Final = 15
XID_HISTORY: Final = 256  # the XIDs a node keeps for its burn-in health check (agents.simulator.checks)


class NodeDied(Exception):
    """The simulated node is dead: the runtime drops its socket and stops sampling it."""

    def __init__(self, hostname: str, at: float) -> None:
        super().__init__(f"Simulated node {hostname} died at {at:.0f}.")
        self.hostname = hostname
        self.at = at


class NodeModel:
    def __init__(
        self,
        profile: Profile,
        hostname: str,
        seed: int,
        workload: Workload,
        faults: Iterable[FaultSpec] = (),
        start: float | None = None,
    ) -> None:
        self.profile = profile
        self.hostname = hostname
        self.workload = workload
        self.start = start  # epoch seconds of simulation time 0; the first sample's time when None
        self._noise = random.Random(f"{seed}:{hostname}:noise")
        self._faults = random.Random(f"{seed}:{hostname}:faults")
        self.gpus = [SimGpu(index, self._noise) for index in range(profile.gpus)]
        self.ports = [SimPort(f"mlx5_{number}") for number in range(profile.ib_ports)]
        self.died_at: float | None = None
        self.events: list[GpuEvent] = []  # drained by the agent
        self.xids: deque[GpuEvent] = deque(maxlen=XID_HISTORY)  # kept, as a kernel log keeps them
        self._t: float | None = None  # simulation time of the last sample
        self._timeline: list[tuple[float, int, Callable[[float], None]]] = []
        self._scheduled = 0
        for spec in faults:
            self._schedule_spec(spec)

    def under(self, workload: Workload) -> "NodeModel":
        """A copy of this node's GPUs as they are now, under ``workload`` from time 0 on, with no
        faults to come: what-if runs (a burn-in's figures) that leave this node untouched."""
        copy = NodeModel(self.profile, self.hostname, 0, workload, start=0.0)
        for mine, theirs in zip(self.gpus, copy.gpus, strict=True):
            for name in SimGpu.__slots__:
                setattr(theirs, name, getattr(mine, name))
            theirs.inactive_links = set(mine.inactive_links)
        copy._t = 0.0 if any(gpu.temp_c for gpu in self.gpus) else None  # warm: go on from here; cold: settle first
        return copy

    # Faults ------------------------------------------------------------------------------------

    def _schedule_spec(self, spec: FaultSpec) -> None:
        if spec.gpu is not None and not 0 <= spec.gpu < len(self.gpus):
            raise FaultSpecError(f"Fault {spec}: {self.hostname} has GPUs gpu0 to gpu{len(self.gpus) - 1}.")
        if spec.port is not None and spec.port not in {port.device for port in self.ports}:
            names = ", ".join(port.device for port in self.ports)
            raise FaultSpecError(f"Fault {spec}: {self.hostname} has no port {spec.port!r}; it has {names}.")
        begin = spec.at_s or 0.0
        if spec.rate_per_hour is None:
            target = self._target(spec)  # chosen now, so a scripted fault hits the same GPU whatever else happens
            self._at(begin, lambda t: self._start(spec, t, target))
        else:
            self._recur(spec, spec.rate_per_hour / 3600, begin, first=True)

    def _recur(self, spec: FaultSpec, per_second: float, t: float, first: bool = False) -> None:
        """A random fault: strike (unless this is the scheduling of the first), then schedule the next."""
        if not first:
            self._start(spec, t, self._target(spec))
        self._at(t + self._faults.expovariate(per_second), lambda at: self._recur(spec, per_second, at))

    def _target(self, spec: FaultSpec) -> int | None:
        """The GPU or port index the fault hits: the one the spec names, or one chosen by the seed."""
        if spec.kind == "die":
            return None
        if spec.kind == "flap":
            names = [port.device for port in self.ports]
            return names.index(spec.port) if spec.port else self._faults.randrange(len(names))
        if spec.gpu is not None:
            return spec.gpu
        present = [gpu.index for gpu in self.gpus if gpu.present]
        return self._faults.choice(present) if present else None

    def _at(self, t: float, action: Callable[[float], None]) -> None:
        self._scheduled += 1
        heapq.heappush(self._timeline, (t, self._scheduled, action))

    def _start(self, spec: FaultSpec, t: float, target: int | None) -> None:
        kind = spec.kind
        if kind == "die":
            self.died_at = self._epoch(t)
            return
        if target is None:
            return  # every GPU is already gone
        index: int = target
        if kind == "flap":
            self._set_flapping(index, t)
        elif not self.gpus[index].present:
            return
        elif kind == "thermal":
            self.gpus[index].resistance = FAILED_COOLING_RESISTANCE
        elif kind == "straggler":
            self.gpus[index].straggler = True
        elif kind == "x8":
            self.gpus[index].pcie_width = PCIE_WIDTH // 2
        else:
            self._xid(self.gpus[index], int(kind.removeprefix("xid")), t)
        if kind in CONDITIONS:
            duration = spec.duration_s or (RANDOM_CONDITION_S.get(kind) if spec.rate_per_hour else None)
            if duration:
                self._at(t + duration, lambda at: self._end(kind, index))

    def _end(self, kind: str, target: int) -> None:
        if kind == "flap":
            self.ports[target].flapping_since = None
        elif kind == "thermal":
            self.gpus[target].resistance = 1.0
        else:
            self.gpus[target].straggler = False

    def _set_flapping(self, port: int, t: float) -> None:
        if self.ports[port].flapping_since is None:
            self.ports[port].flapping_since = t
            self.ports[port].downs_seen = 0

    def _xid(self, gpu: SimGpu, xid: int, t: float) -> None:
        text, action = XIDS[xid]
        if xid == 79:
            gpu.present = False
        elif xid in (48, 94, 95):
            gpu.ecc_uncorrected_volatile += 1
            gpu.ecc_uncorrected_aggregate += 1
        elif xid == 63:
            gpu.remapped_rows_uncorrectable += 1
            gpu.remapped_rows_pending = True
        elif xid == 64:
            gpu.remapped_rows_failed = True
        elif xid == 74:
            links = [link for link in range(self.profile.nvlink_links) if link not in gpu.inactive_links]
            link = self._faults.choice(links) if links else 0
            gpu.inactive_links.add(link)
            gpu.nvlink_crc_errors += self._faults.randint(20, 200)
            gpu.nvlink_replay_errors += self._faults.randint(5, 50)
            gpu.nvlink_recovery_errors += 1
            text = text.format(link=link)
        gpu.recommend(action)
        event = GpuEvent(ts=self._epoch(t), kind="xid", gpu_index=gpu.index, xid=xid, data=text)
        self.events.append(event)
        self.xids.append(event)

    def _epoch(self, t: float) -> float:
        return (self.start or 0.0) + t

    # Sampling ----------------------------------------------------------------------------------

    def sample(self, now: float) -> tuple[list[GpuSample], list[PortSample]]:
        """Advance to ``now`` (epoch seconds) and sample; NodeDied once the node is dead."""
        if self.start is None:
            self.start = now
        t = now - self.start
        timeline = self._timeline
        while timeline and timeline[0][0] <= t:
            at, _, action = heapq.heappop(timeline)
            action(at)
        if self.died_at is not None:
            raise NodeDied(self.hostname, self.died_at)
        # The first sample starts at thermal equilibrium (settle = 1): a node joins the demo already warm.
        elapsed = t - self._t if self._t is not None else math.inf
        self._t = t
        load = self.workload.load(t)
        return self._sample_gpus(load, elapsed), self._sample_ports(load, t, now, elapsed)

    def _sample_gpus(self, load: tuple[float, float, float, float], elapsed: float) -> list[GpuSample]:
        """Each present GPU's sample, built with positional arguments in ``GpuSample``'s field order (a
        test in tests/agents/test_simulator_model.py fails when that order changes): msgspec matched 27
        keywords in about 2 µs a GPU, five times the positional call and a quarter of the node's sample."""
        util_target, power_share, memory_share, comm = load
        profile = self.profile
        mem_clock = profile.mem_clock_mhz
        rnd = self._noise.random
        settle = 1.0 - math.exp(-elapsed / TEMPERATURE_TIME_CONSTANT_S) if elapsed > 0 else 0.0
        idle_w, limit_w = profile.idle_power_w, profile.power_limit_w
        demand_w = idle_w + (limit_w - idle_w) * power_share
        busy = util_target > 1.0
        max_clock, slowdown_c, hw_slowdown_c = profile.max_sm_clock_mhz, profile.slowdown_c, profile.hw_slowdown_c
        inlet_c, resistance = profile.inlet_c, profile.thermal_resistance
        memory_mib = profile.memory_mib * memory_share
        links = profile.nvlink_links
        nvlink_kbps = profile.nvlink_peak_kbps * comm
        samples = []
        for gpu in self.gpus:
            if not gpu.present:
                continue
            jitter = rnd()
            if busy:
                util = util_target + gpu.util_offset + (jitter - 0.5) * 3.0
                util = 100.0 if util > 100.0 else util
                reasons = 0
            else:
                util = util_target
                reasons = GPU_IDLE
            over_c = gpu.temp_c - slowdown_c
            thermal = 1.0 if over_c <= 0.0 or not busy else max(0.5, 1.0 - THROTTLE_PER_DEGREE * over_c)
            power = idle_w + (demand_w * (0.99 + 0.02 * jitter) - idle_w) * thermal + gpu.power_offset_w
            clock = max_clock * thermal if busy else profile.idle_sm_clock_mhz
            if power > limit_w:
                clock *= ((limit_w - idle_w) / (power - idle_w)) ** 1.5
                power = limit_w - 2.0 * jitter
                reasons |= SW_POWER_CAP
            if gpu.straggler and busy:  # a slow part: lower clock, ~50 W under its siblings
                power -= STRAGGLER_DEFICIT_W * util / 100.0
                clock *= STRAGGLER_CLOCK
            target_c = inlet_c + gpu.inlet_offset_c + resistance * gpu.resistance * power
            gpu.temp_c += (target_c - gpu.temp_c) * settle
            if over_c > 0.0:
                reasons |= SW_THERMAL_SLOWDOWN
                if gpu.temp_c > hw_slowdown_c:
                    reasons |= HW_THERMAL_SLOWDOWN | HW_SLOWDOWN
            link_share = 1.0 - len(gpu.inactive_links) / links if gpu.inactive_links else 1.0
            samples.append(
                GpuSample(  # in GpuSample's field order
                    gpu.index,
                    float(round(util)),  # util_gpu
                    float(round(util * 0.45)),  # util_mem
                    int(memory_mib * gpu.memory_share),  # mem_used_mib
                    float(round(gpu.temp_c)),  # temp_c
                    int(power * 10.0 + 0.5) / 10.0,  # power_w, to 1 decimal: round(power, 1) is ten times slower
                    limit_w,  # power_limit_w
                    int(clock) // CLOCK_STEP_MHZ * CLOCK_STEP_MHZ,  # sm_clock_mhz
                    mem_clock,  # mem_clock_mhz
                    reasons,  # throttle_reasons
                    gpu.ecc_corrected_volatile,
                    gpu.ecc_uncorrected_volatile,
                    gpu.ecc_corrected_aggregate,
                    gpu.ecc_uncorrected_aggregate,
                    None,  # retired_pages_pending: row remapping replaced page retirement on these GPUs
                    gpu.remapped_rows_pending,
                    gpu.remapped_rows_failed,
                    gpu.remapped_rows_correctable,
                    gpu.remapped_rows_uncorrectable,
                    gpu.pcie_replay_count,
                    gpu.nvlink_crc_errors,
                    gpu.nvlink_replay_errors,
                    gpu.nvlink_recovery_errors,
                    int((1_500_000 * util / 100.0 + 20_000) * (0.6 + 0.8 * jitter)),  # pcie_tx_kbps
                    int((3_000_000 * util / 100.0 + 30_000) * (1.4 - 0.8 * jitter)),  # pcie_rx_kbps
                    int(nvlink_kbps * link_share * (0.9 + 0.2 * jitter)),  # nvlink_tx_kbps
                    int(nvlink_kbps * link_share * (1.1 - 0.2 * jitter)),  # nvlink_rx_kbps
                    gpu.recovery_action,
                )
            )
        return samples

    def _sample_ports(
        self, load: tuple[float, float, float, float], t: float, now: float, elapsed: float
    ) -> list[PortSample]:
        rate = self.profile.ib_rate_gbps
        traffic = rate * load[3]
        ceiling = rate * 0.97
        rnd = self._noise.random
        counting = math.isfinite(elapsed)  # the data counters count from the first sample on
        samples = []
        for port in self.ports:
            state: PortState = "active"
            if port.flapping_since is not None:
                since = t - port.flapping_since
                self._count_downs(port, int(since // FLAP_PERIOD_S) + 1)
                if since % FLAP_PERIOD_S < FLAP_DOWN_S:
                    state = "down"
            if state == "active":
                jitter = rnd()
                tx = traffic * (0.85 + 0.25 * jitter)
                tx = ceiling if tx > ceiling else tx
                rx = traffic * (1.1 - 0.25 * jitter)
                rx = ceiling if rx > ceiling else rx
            else:
                tx = rx = 0.0
            if counting:
                port.tx_bytes += int(tx * elapsed * 1e9 / 8)
                port.rx_bytes += int(rx * elapsed * 1e9 / 8)
            sample = PortSample(
                device=port.device,
                port=1,
                state=state,
                rate_gbps=rate,
                tx_gbps=int(tx * 100.0 + 0.5) / 100.0,  # to 2 decimals: round(tx, 2) was a fifth of the ports' time
                rx_gbps=int(rx * 100.0 + 0.5) / 100.0,
                symbol_errors=port.symbol_errors,
                link_downed=port.link_downed,
                rcv_errors=port.rcv_errors,
                tx_bytes=port.tx_bytes,
                rx_bytes=port.rx_bytes,
            )
            event = port_event(port.last, sample, now)
            if event is not None:
                self.events.append(event)
            port.last = sample
            samples.append(sample)
        return samples

    def _count_downs(self, port: SimPort, downs: int) -> None:
        """Each time a flapping link goes down: link_downed counts it, the PHY logs symbol errors."""
        new = downs - port.downs_seen
        if new <= 0:
            return
        port.downs_seen = downs
        port.link_downed += new
        for _ in range(min(new, 100)):
            port.symbol_errors += self._noise.randint(20, 400)
            port.rcv_errors += self._noise.randint(0, 5)
