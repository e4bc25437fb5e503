"""What a simulated node is doing, as a function of time: the load its GPUs and fabric see.

A workload is deterministic in ``t`` (seconds since the simulation started), so nodes given the same
workload move in step, as the nodes of one training job do.
"""

from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol


class Load(NamedTuple):
    util: float  # SM utilization, %
    power: float  # where the power draw sits between idle (0) and the limit (1); above 1 hits the cap
    memory: float  # share of HBM allocated
    comm: float  # share of the NVLink and InfiniBand bandwidth in use


IDLE_LOAD: Final = Load(util=0.0, power=0.0, memory=0.006, comm=0.0)
COMPUTE_LOAD: Final = Load(util=98.0, power=0.88, memory=0.92, comm=0.25)
ALLREDUCE_LOAD: Final = Load(util=72.0, power=0.62, memory=0.92, comm=0.9)
CHECKPOINT_LOAD: Final = Load(util=6.0, power=0.08, memory=0.92, comm=0.03)
BURN_IN_LOAD: Final = Load(util=100.0, power=1.08, memory=0.95, comm=0.0)


class Workload(Protocol):
    @property
    def name(self) -> str: ...

    def load(self, t: float) -> Load: ...


@dataclass(frozen=True)
class Idle:
    name: str = "idle"

    def load(self, t: float) -> Load:
        return IDLE_LOAD


@dataclass(frozen=True)
class Training:
    """Data-parallel training: each step computes (SMs busy, fabric lightly used), then all-reduces
    the gradients (SMs partly idle, fabric busy); every ``checkpoint_every_s`` the job stops to write a
    checkpoint and the GPUs sit nearly idle with their memory still allocated."""

    step_s: float = 6.0
    allreduce_share: float = 0.2
    checkpoint_every_s: float = 1800.0
    checkpoint_s: float = 40.0
    offset_s: float = 0.0
    name: str = "training"

    def load(self, t: float) -> Load:
        t += self.offset_s
        if t % self.checkpoint_every_s >= self.checkpoint_every_s - self.checkpoint_s:
            return CHECKPOINT_LOAD
        if (t % self.step_s) / self.step_s >= 1.0 - self.allreduce_share:
            return ALLREDUCE_LOAD
        return COMPUTE_LOAD


@dataclass(frozen=True)
class BurnIn:
    """A stress test (gpu-burn, dcgmi diag): every SM busy, power demand beyond the cap."""

    name: str = "burnin"

    def load(self, t: float) -> Load:
        return BURN_IN_LOAD


@dataclass(frozen=True)
class Schedule:
    """Workloads one after another, each for its duration; the last one runs on, or all repeat."""

    phases: tuple[tuple[float, Workload], ...]
    repeat: bool = False
    name: str = "schedule"

    def load(self, t: float) -> Load:
        total = sum(duration for duration, _ in self.phases)
        if self.repeat and total > 0:
            t %= total
        for duration, workload in self.phases:
            if t < duration:
                return workload.load(t)
            t -= duration
        return self.phases[-1][1].load(t + self.phases[-1][0])


WORKLOADS: Final[dict[str, Workload]] = {
    "training": Training(),
    "idle": Idle(),
    "burnin": BurnIn(),
    # a node's day: idle, burned in after a repair, then back into the training job
    "mixed": Schedule(((120.0, Idle()), (600.0, BurnIn()), (14_400.0, Training()))),
}


def workload_named(name: str) -> Workload:
    try:
        return WORKLOADS[name.lower()]
    except KeyError:
        raise ValueError(f"Unknown workload {name!r}; expected one of {', '.join(sorted(WORKLOADS))}.") from None
