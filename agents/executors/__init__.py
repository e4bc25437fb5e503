"""Burn-in check executors: the work a node does when the control plane asks it to prove itself.

Each check is real work, run as a process of its own by the agent's command runner::

    python -m agents.executors compute --params '{"duration_s": 60}'

and speaks the wire protocol on stdout (``agents.protocol``: ``CheckProgress`` and ``CheckLog``
lines while it runs, one ``CheckResult`` at the end). The checks: GPU compute (sustained matmuls),
memory and PCIe bandwidth, NVLink peer-to-peer bandwidth, NCCL all-reduce bus bandwidth (under
torchrun), health counters before and after, storage throughput, and the standard tools when the
node has them (``dcgmi diag``, ``gpu-burn``, nccl-tests' ``all_reduce_perf``).

Honest labels: on a node without a GPU the same code runs on the CPU (gloo for the all-reduce) and
its result says ``cpu``; a simulated node's results come from ``agents.simulator.checks`` and say
``simulated``. torch is an optional dependency (the agent's ``burnin`` extra); a check that needs it
reports that it is missing instead of failing to start. Nothing here imports torch until a check
runs, so the agent and every module here import without it. See docs/burn-in-checks.md.
"""
