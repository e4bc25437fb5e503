"""The fleet simulator: the real agent code over a simulated NVML backend.

The backend is a node's GPUs and ports with realistic dynamics and scripted or random faults,
behind the same ``Collector`` interface as the real NVML and sysfs readers; ``fleet`` runs many
such nodes in one process, each a real WebSocket client."""

from agents.simulator.collector import SimulatedCollector
from agents.simulator.faults import FaultSpec, FaultSpecError, parse_fault_spec
from agents.simulator.model import NodeDied
from agents.simulator.profiles import PROFILES, Profile, profile_named
from agents.simulator.workloads import WORKLOADS, BurnIn, Idle, Schedule, Training, Workload, workload_named

__all__ = [
    "PROFILES",
    "WORKLOADS",
    "BurnIn",
    "FaultSpec",
    "FaultSpecError",
    "Idle",
    "NodeDied",
    "Profile",
    "Schedule",
    "SimulatedCollector",
    "Training",
    "Workload",
    "parse_fault_spec",
    "profile_named",
    "workload_named",
]
