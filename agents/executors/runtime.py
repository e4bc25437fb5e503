"""What a check runs on: torch when it is installed, the GPUs it can see or the CPU, the node's
collector when NVML answers, and the timing that works on both."""

import logging
import os
import signal
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any, Final, Literal

from agents.collectors.hostfacts import read_host_facts, short_text

if TYPE_CHECKING:
    from agents.collectors.host import NodeCollector

log = logging.getLogger(__name__)

BURNIN_EXTRA: Final = "pip install 'gpu-controlplane-agent[burnin]'"
DeviceChoice = Literal["auto", "cuda", "cpu"]


class CheckUnavailable(Exception):
    """The check cannot run here (torch missing, no GPU asked for, a tool that failed to start):
    the result carries the message as its error."""


class CheckSkipped(Exception):
    """The check has nothing to measure here (one GPU and no pair, no dcgmi on PATH): the result
    says so as ``skipped``, not as an error."""


class Interrupted(BaseException):
    """SIGTERM or SIGINT arrived: the check stops, cleans up and reports what it had. A BaseException,
    so that no ``except Exception`` on the way swallows it."""


def require_torch() -> ModuleType:
    try:
        with warnings.catch_warnings():  # torch without numpy says so on import; no check needs numpy
            warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
            import torch
    except ImportError as error:
        raise CheckUnavailable(
            f"torch is not installed ({error}); install the agent's burn-in extra: {BURNIN_EXTRA}"
        ) from None
    return torch


@dataclass(frozen=True)
class Devices:
    """The devices a check measures: CUDA ordinals (numbered as NVML numbers the GPUs, see
    ``select_devices``), or the CPU."""

    kind: Literal["cuda", "cpu"]
    gpus: tuple[int, ...]  # () on the CPU
    name: str  # for the result's device_name
    tool: str  # "torch 2.4.1+cu121"

    def torch_device(self, torch: ModuleType, gpu: int | None) -> Any:
        return torch.device("cpu") if gpu is None else torch.device("cuda", gpu)

    @property
    def lanes(self) -> tuple[int | None, ...]:
        """What a per-device loop walks: each GPU, or the CPU once (as None)."""
        return self.gpus if self.kind == "cuda" else (None,)


def select_devices(torch: ModuleType, choice: DeviceChoice, gpus: list[int] | None) -> Devices:
    tool = f"torch {torch.__version__}"
    cuda = torch.cuda.is_available()
    if choice == "cuda" and not cuda:
        raise CheckUnavailable("the command asks for CUDA, and torch sees no CUDA device on this node")
    if choice == "cpu" or not cuda:
        if gpus:
            raise CheckUnavailable(f"the command names GPUs {gpus}, and this check runs on the CPU (no CUDA device)")
        return Devices("cpu", (), cpu_name(torch), tool)
    count = torch.cuda.device_count()
    chosen = tuple(gpus) if gpus else tuple(range(count))
    missing = [gpu for gpu in chosen if gpu >= count]
    if missing:
        raise CheckUnavailable(f"GPUs {missing} are not on this node; torch sees {count} (0 to {count - 1})")
    return Devices("cuda", chosen, gpus_label([torch.cuda.get_device_name(gpu) for gpu in chosen]), tool)


def gpus_label(names: list[str]) -> str:
    """``["NVIDIA H100 80GB HBM3"] * 8`` as "8 × NVIDIA H100 80GB HBM3"."""
    kinds = sorted(set(names))
    if not kinds:
        return "no GPUs"
    label = " + ".join(kinds) if len(kinds) > 1 else f"{len(names)} × {kinds[0]}" if len(names) > 1 else kinds[0]
    return short_text(label) or "NVIDIA GPU"


def cpu_name(torch: ModuleType | None = None) -> str:
    """The CPU's model and, with torch, the threads its matmuls use."""
    model = read_host_facts("localhost").cpu_model or "CPU"  # the hostname is irrelevant here
    threads = f", {torch.get_num_threads()} threads" if torch is not None else ""
    return short_text(f"{model} (CPU{threads})") or "CPU"


def prefer_pci_order() -> None:
    """Number CUDA devices as NVML does (by PCI bus id), so "GPU 3" means the same GPU in a check's
    figures and in the node's telemetry. CUDA's default order is fastest first; it must be set
    before CUDA initialises, so a check process calls this first."""
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")


def open_node_collector() -> "NodeCollector | None":
    """The node's NVML and InfiniBand collector, or None (logged) where NVML cannot be used."""
    from agents.collectors.host import NodeCollector
    from agents.collectors.nvml import NvmlUnavailable

    try:
        return NodeCollector.open("localhost")
    except NvmlUnavailable as error:
        log.info("No NVML collector: %s", error)
        return None


class Stopwatch:
    """Times work queued on one device: CUDA events on a GPU (the host does not wait for the work
    to be queued), ``perf_counter`` on the CPU (where torch runs the work as it is called)."""

    def __init__(self, torch: ModuleType, gpu: int | None) -> None:
        self._torch = torch
        self._gpu = gpu
        self._times = [0.0, 0.0]
        if gpu is not None:
            with torch.cuda.device(gpu):
                self._events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))

    def start(self) -> None:
        self._mark(0)

    def stop(self) -> None:
        self._mark(1)

    def _mark(self, end: int) -> None:
        if self._gpu is None:
            self._times[end] = time.perf_counter()
        else:
            with self._torch.cuda.device(self._gpu):
                self._events[end].record()

    def seconds(self) -> float:
        """The time between start and stop; on a GPU, waits until the work between them is done."""
        if self._gpu is None:
            return self._times[1] - self._times[0]
        self._events[1].synchronize()
        return self._events[0].elapsed_time(self._events[1]) / 1000


def synchronize(torch: ModuleType, gpu: int | None) -> None:
    if gpu is not None:
        torch.cuda.synchronize(gpu)


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM and SIGINT raise Interrupted in the main thread while inside, so that a cancelled
    check runs its ``finally`` blocks (a temporary file, a child process) and reports."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
