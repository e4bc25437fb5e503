"""The figures of benchmarks/telemetry.py: what one phase measured (a fleet size, the steady state, a
saturation try), and the report printed from them, its last line JSON."""

import argparse
import json
from dataclasses import dataclass

from agents.batching import samples_per_frame
from benchmarks.telemetry_harness import GPUS_PER_NODE, machine_load, percentile

WATCHED_NODES = 5  # node-detail pages, each watching one node: the latency figure
LATENCY_LIMIT_MS = 1000


@dataclass
class Restart:
    down_s: float
    reconnect_all_s: float | None


@dataclass
class Phase:
    name: str
    nodes: int
    interval: float
    connect_all_s: float | None
    sent: int
    stored: int
    dropped: int
    window_s: float
    window_stored: int
    server_cpu_s: float
    fleet_cpu_s: float
    caught_up: bool  # the connect's backlog was stored before the window began
    discovered_s: float  # from every node reporting until every node's first inventory was applied
    latencies_ms: list[float]
    load: float
    restart: Restart | None = None
    send_interval: float = 0.0  # 0: each sample in its own frame

    @property
    def samples_per_frame(self) -> int:
        return samples_per_frame(self.send_interval, self.interval)

    @property
    def oldest_sample_waited_ms(self) -> float:
        """How long a frame's oldest sample waited on the agent for the newest, by design."""
        return round(1000 * (self.samples_per_frame - 1) * self.interval, 1)

    @property
    def offered_per_s(self) -> float:
        return self.nodes * GPUS_PER_NODE / self.interval

    @property
    def rate_per_s(self) -> float:
        return self.window_stored / self.window_s

    @property
    def lost(self) -> int:
        return max(0, self.sent - self.stored) + self.dropped * GPUS_PER_NODE

    @property
    def p99_ms(self) -> float | None:
        return percentile(self.latencies_ms, 0.99)

    @property
    def server_cpu_us_per_sample(self) -> float | None:
        return round(1e6 * self.server_cpu_s / self.window_stored, 1) if self.window_stored else None

    @property
    def sustained(self) -> bool:
        fast_enough = self.p99_ms is not None and self.p99_ms < LATENCY_LIMIT_MS
        return self.caught_up and self.lost == 0 and self.rate_per_s >= 0.97 * self.offered_per_s and fast_enough

    def summary(self) -> dict:
        return {
            "nodes": self.nodes,
            "offered_per_s": round(self.offered_per_s),
            "stored_per_s": round(self.rate_per_s),
            "lost": self.lost,
            "latency_p99_ms": self.p99_ms,
            "send_interval_s": self.send_interval,
            "samples_per_frame": self.samples_per_frame,
            "oldest_sample_waited_ms": self.oldest_sample_waited_ms,
            "server_cpu_percent": round(100 * self.server_cpu_s / self.window_s),
            "server_cpu_us_per_sample": self.server_cpu_us_per_sample,
            "fleet_cpu_percent": round(100 * self.fleet_cpu_s / self.window_s),
            "connect_all_s": _rounded(self.connect_all_s),
            "inventories_applied_s": _rounded(self.discovered_s),
            "caught_up": self.caught_up,
            "load_1m": self.load,
        }


def _rounded(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None


def report(
    args: argparse.Namespace,
    steady: Phase,
    sizes: list[Phase],
    saturation: list[Phase],
    batched: list[Phase],
    multi_page: list[float],
    others: dict,
    load_at_start: float,
) -> None:
    sustained = [phase.offered_per_s for phase in [steady, *saturation] if phase.sustained]
    batched_sustained = [phase.offered_per_s for phase in batched if phase.sustained]
    restart = steady.restart
    figures = {
        "simulated": True,
        "nodes": args.nodes,
        "gpus": args.nodes * GPUS_PER_NODE,
        "connect_all_s": _rounded(steady.connect_all_s),
        "inventories_applied_s": _rounded(steady.discovered_s),
        "samples_per_s": round(steady.rate_per_s),
        "samples_sent": steady.sent,
        "samples_stored": steady.stored,
        "samples_lost": steady.lost,
        "latency_p50_ms": percentile(steady.latencies_ms, 0.5),
        "latency_p99_ms": steady.p99_ms,
        "latency_deltas": len(steady.latencies_ms),
        "latency_multi_node_page_p50_ms": percentile(multi_page, 0.5),
        "latency_multi_node_page_p99_ms": percentile(multi_page, 0.99),
        "restart_down_s": _rounded(restart.down_s) if restart else None,
        "reconnect_all_s": _rounded(restart.reconnect_all_s) if restart else None,
        "saturation_samples_per_s": round(max(sustained)) if sustained else None,
        "saturation_tries": [phase.summary() for phase in saturation],
        "saturation_batched_samples_per_s": round(max(batched_sustained)) if batched_sustained else None,
        "saturation_send_interval_s": batched[0].send_interval if batched else None,
        "saturation_batched_tries": [phase.summary() for phase in batched],
        "server_cpu_us_per_sample": {str(phase.nodes): phase.server_cpu_us_per_sample for phase in [*sizes, steady]},
        "fleet_sizes": [phase.summary() for phase in sizes],
        "server_workers": args.workers,
        "fleet_processes": args.fleet_processes,
        "server_cpu_percent": round(100 * steady.server_cpu_s / steady.window_s),
        "fleet_cpu_percent": round(100 * steady.fleet_cpu_s / steady.window_s),
        "measured_s": args.seconds,
        "caught_up": steady.caught_up,
        "load_1m_at_start": load_at_start,
        "load_1m_steady": steady.load,
        "load_1m_at_end": machine_load(),
        **others,
    }
    print(f"fleet:        {args.nodes} simulated nodes x 8 GPUs, 1 sample/s, {args.seconds:g} s measured")
    print(f"              (machine load {load_at_start} at the start, {steady.load} in the steady state)")
    print(f"connect:      every node reporting {figures['connect_all_s']} s after the fleet started (target 60)")
    print(f"              every node's first inventory applied {figures['inventories_applied_s']} s after that")
    print(f"ingest:       {figures['samples_per_s']:,} GPU samples/s stored; caught up: {steady.caught_up}")
    if restart:
        print(
            f"restart:      server down {figures['restart_down_s']} s; every node reporting again "
            f"{figures['reconnect_all_s']} s after it answered (target 60)"
        )
    print(f"sent/stored:  {steady.sent:,} / {steady.stored:,} GPU samples, {steady.lost:,} lost (target 0)")
    print(f"latency:      p50 {figures['latency_p50_ms']} ms, p99 {figures['latency_p99_ms']} ms agent -> browser")
    print(f"              ({figures['latency_deltas']} deltas on {WATCHED_NODES} one-node pages; target p99 < 1000)")
    print(
        f"              one page watching {WATCHED_NODES} nodes: p50 {figures['latency_multi_node_page_p50_ms']} ms, "
        f"p99 {figures['latency_multi_node_page_p99_ms']} ms (one delta a second for all of them)"
    )
    for phase in [*sizes, steady]:
        print(
            f"server CPU:   {phase.nodes:>5} nodes: {phase.server_cpu_us_per_sample} us per GPU sample "
            f"({100 * phase.server_cpu_s / phase.window_s:.0f} % of a core; load {phase.load})"
        )
    for phase in [*saturation, *batched]:
        verdict = "sustained" if phase.sustained else "NOT sustained"
        print(
            f"saturation:   {phase.name}: offered {phase.offered_per_s:,.0f}/s, stored {phase.rate_per_s:,.0f}/s, "
            f"{phase.lost:,} lost, p99 {phase.p99_ms} ms, {phase.samples_per_frame} sample(s) a frame, "
            f"server CPU {100 * phase.server_cpu_s / phase.window_s:.0f} %: {verdict} (load {phase.load})"
        )
    print(
        f"saturation:   {figures['saturation_samples_per_s']} GPU samples/s sustained with each sample in its own "
        "frame (target >= 32,000)"
    )
    if batched:
        waited = max(phase.oldest_sample_waited_ms for phase in batched)
        print(
            f"              {figures['saturation_batched_samples_per_s']} GPU samples/s sustained with the fleet "
            f"sending every {batched[0].send_interval:g} s, the samples between sends in one frame; p99 is the "
            f"newest sample's in a frame, the oldest waited up to {waited:g} ms more on the agent by design"
        )
    if others:
        print(f"copy_ratio:   {others['copy_ratio']:.3f} (target >= 0.5)")
        print(f"agent:        {others['agent_cpu_percent']:.3f} % of a core, {others['agent_rss_mb']:.1f} MB RSS")
    print(json.dumps(figures))
