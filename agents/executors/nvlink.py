"""NVLink: peer-to-peer copy bandwidth between every ordered pair of the node's GPUs.

For each pair (i → j) a buffer on GPU i is copied into one on GPU j ``repeats`` times; GB/s = bytes
× repeats ÷ seconds ÷ 10⁹, one direction, each byte counted once (the "Unidirectional P2P=Enabled
Bandwidth Matrix" of CUDA's p2pBandwidthLatencyTest). With peer access the copy engines move the
data over NVLink (through the NVSwitches on an HGX board); without it the driver stages the copy
through host memory, and the figure shows that: whether each pair has peer access is reported
next to its figure. An H100 pair copies at about 370-390 GB/s of NVLink 4's 450 each way; a pair
far below its siblings points at one GPU's links (an XID 74, a link trained down).

Timed on the host, with both GPUs synchronised before and after the copies. A node with fewer than
two GPUs (or the CPU) has no pair: the check is skipped and says why.
"""

import time
from types import ModuleType
from typing import Any, Final

from agents.executors.bandwidth import WARMUP_COPIES
from agents.executors.context import CheckContext
from agents.executors.params import NvlinkParams
from agents.executors.results import measurement
from agents.executors.runtime import CheckSkipped, require_torch, select_devices
from agents.protocol import CheckMeasurement

PAIR_EVIDENCE: Final = "unidirectional copy i → j, bytes counted once"


def run(params: NvlinkParams, ctx: CheckContext) -> None:
    torch = require_torch()
    devices = select_devices(torch, params.device, params.gpus)
    ctx.result.ran_on(devices.kind, devices.name, devices.tool)
    if len(devices.gpus) < 2:
        where = "the CPU" if devices.kind == "cpu" else f"{len(devices.gpus)} GPU"
        raise CheckSkipped(f"peer-to-peer bandwidth needs two GPUs or more; this check runs on {where}")
    ctx.result.evidence.update(size_bytes=params.size_bytes, repeats=params.repeats, convention=PAIR_EVIDENCE)
    pairs = [(i, j) for i in devices.gpus for j in devices.gpus if i != j]
    peer_access = {(i, j): bool(torch.cuda.can_device_access_peer(i, j)) for i, j in pairs}

    def progress(done: int) -> None:
        ctx.reporter.progress(done / len(pairs), "peer-to-peer copies", f"{done} of {len(pairs)} pairs")

    found = measure_pairs(
        torch,
        {gpu: torch.device("cuda", gpu) for gpu in devices.gpus},
        pairs,
        params.size_bytes,
        params.repeats,
        params.min_gbps,
        peer_access,
        progress,
    )
    ctx.result.add(*found)
    ctx.result.evidence["matrix_gbps"] = matrix(found, devices.gpus)


def measure_pairs(
    torch: ModuleType,
    devices: dict[int, Any],
    pairs: list[tuple[int, int]],
    size: int,
    repeats: int,
    expected: float | None,
    peer_access: dict[tuple[int, int], bool],
    progress: Any = lambda done: None,
) -> list[CheckMeasurement]:
    """One measurement per ordered pair: GB/s from ``devices[i]`` to ``devices[j]``."""
    buffers = {index: torch.ones(size, dtype=torch.uint8, device=device) for index, device in devices.items()}
    targets = {index: torch.empty_like(buffer) for index, buffer in buffers.items()}
    out = []
    for done, (i, j) in enumerate(pairs, start=1):
        seconds = _timed_peer_copies(torch, targets[j], buffers[i], repeats, (devices[i], devices[j]))
        rate = size * repeats / seconds / 1e9
        evidence = {"peer_access": peer_access[(i, j)], "seconds": round(seconds, 9)}
        out.append(measurement("p2p", rate, "GB/s", expected, gpu=i, peer=j, evidence=evidence))
        progress(done)
    return out


def _timed_peer_copies(torch: ModuleType, target: Any, source: Any, repeats: int, ends: tuple[Any, Any]) -> float:
    def both_idle() -> None:
        for device in ends:
            if device.type == "cuda":
                torch.cuda.synchronize(device)

    for _ in range(WARMUP_COPIES):
        target.copy_(source, non_blocking=True)
    both_idle()
    began = time.perf_counter()
    for _ in range(repeats):
        target.copy_(source, non_blocking=True)
    both_idle()
    return time.perf_counter() - began


def matrix(found: list[CheckMeasurement], gpus: tuple[int, ...]) -> list[list[float | None]]:
    """Rows are sources, columns targets, in ``gpus`` order; the diagonal is None."""
    rate = {(m.gpu, m.peer): round(m.measured, 2) for m in found}
    return [[rate.get((i, j)) for j in gpus] for i in gpus]
