"""One rank of the all-reduce check, started by torchrun (``-m agents.executors.allreduce_worker``).

Each rank all-reduces buffers of every size of the sweep: first once with every element 1.0, and
checks the sum is the world size everywhere (nccl-tests' ``#wrong``); then ``warmup`` untimed and
``iters`` timed all-reduces (in place, as ``torch.distributed.all_reduce`` is). A rank's time per
all-reduce is its wall clock over the timed ones, the GPU synchronised before and after; the ranks
then agree on the mean of their times (what nccl-tests reports by default) and the largest.

Local rank 0 of each node writes the lines: progress while it goes, one ``allreduce_sweep`` at the
end, on the stdout torchrun handed it (its own fd 1 points at stderr, so NCCL's log cannot get in
the way). A rank dies with its torchrun: torchrun starts ranks in sessions of their own, so the
check's process group does not reach them, and a SIGKILL of torchrun would otherwise leave them
running.
"""

import ctypes
import os
import signal
import sys
import time
from types import ModuleType
from typing import Annotated, Any, Final, Literal

import msgspec

from agents import protocol
from agents.executors.reporter import Reporter, claim_stdout
from agents.executors.runtime import require_torch

PR_SET_PDEATHSIG: Final = 1
ELEMENT_BYTES: Final = {"fp32": 4, "bf16": 2, "fp16": 2}
TORCH_DTYPES: Final = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
# A sum of ones is exact in fp32; in bf16 and fp16 a large world's partial sums round.
RELATIVE_TOLERANCE: Final = {"fp32": 0.0, "bf16": 2**-7, "fp16": 2**-10}


class WorkerParams(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    backend: Literal["nccl", "gloo"]
    sizes_bytes: list[Annotated[int, msgspec.Meta(ge=4)]]
    iters: int
    warmup: int
    dtype: Literal["fp32", "bf16", "fp16"]


class SizeTiming(msgspec.Struct, frozen=True):
    size_bytes: int  # rounded down to whole elements
    time_us_mean: float  # per all-reduce, the mean over ranks
    time_us_max: float  # the slowest rank's
    wrong: int  # elements not equal to the world size after the check, over every rank


class WorkerReport(msgspec.Struct, tag="allreduce_sweep", frozen=True):
    world_size: int
    backend: str
    versions: dict[str, str]
    rows: list[SizeTiming]


def main(argv: list[str]) -> int:
    _die_with_parent()
    params = msgspec.json.decode(argv[0], type=WorkerParams)
    local_rank = int(os.environ["LOCAL_RANK"])
    out = claim_stdout()
    torch = require_torch()
    import torch.distributed as dist

    if params.backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank = _Rank(torch, dist, device, params, Reporter("nccl_allreduce", out) if local_rank == 0 else None)
    try:
        rows = [rank.sweep_one(number, size) for number, size in enumerate(params.sizes_bytes)]
    finally:
        dist.destroy_process_group()
    if local_rank == 0:
        versions = {"torch": str(torch.__version__)}
        if params.backend == "nccl":
            nccl = torch.cuda.nccl.version()  # (2, 21, 5); a bare 2215 from torch before 1.13
            versions["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        report = WorkerReport(world_size=rank.world, backend=params.backend, versions=versions, rows=rows)
        out.write(protocol.encode(report) + b"\n")
    return 0


class _Rank:
    def __init__(
        self, torch: ModuleType, dist: ModuleType, device: Any, params: WorkerParams, reporter: Reporter | None
    ) -> None:
        self.torch, self.dist, self.device, self.params, self.reporter = torch, dist, device, params, reporter
        self.world = dist.get_world_size()

    def sweep_one(self, number: int, size: int) -> SizeTiming:
        torch, dist, params = self.torch, self.dist, self.params
        count = max(1, size // ELEMENT_BYTES[params.dtype])
        buffer = torch.ones(count, dtype=getattr(torch, TORCH_DTYPES[params.dtype]), device=self.device)
        dist.all_reduce(buffer)
        allowed = self.world * RELATIVE_TOLERANCE[params.dtype]
        wrong = int(((buffer.float() - self.world).abs() > allowed).sum())
        buffer.zero_()  # the timed sums stay zero: no overflow however many iterations
        for _ in range(params.warmup):
            dist.all_reduce(buffer)
        self._idle()
        dist.barrier()
        began = time.perf_counter()
        for _ in range(params.iters):
            dist.all_reduce(buffer)
        self._idle()
        mine = (time.perf_counter() - began) / params.iters
        summed = torch.tensor([mine, float(wrong)], dtype=torch.float64, device=self.device)
        slowest = torch.tensor([mine], dtype=torch.float64, device=self.device)
        dist.all_reduce(summed)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        size_bytes = count * ELEMENT_BYTES[params.dtype]
        if self.reporter is not None:
            self.reporter.progress((number + 1) / len(params.sizes_bytes), "all-reduce sweep", f"{size_bytes:,} bytes")
        return SizeTiming(
            size_bytes=size_bytes,
            time_us_mean=float(summed[0]) / self.world * 1e6,
            time_us_max=float(slowest[0]) * 1e6,
            wrong=int(summed[1]),
        )

    def _idle(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)


def _die_with_parent() -> None:
    """Ask the kernel to SIGKILL this rank when torchrun goes, however it goes."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: torchrun's own SIGTERM handling is all there is
        return
    if os.getppid() == 1:  # torchrun died before the request took: do not linger
        os._exit(1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
