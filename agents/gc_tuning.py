"""Garbage collection for processes that handle thousands of small messages a second: the control
plane's server processes (controlplane/asgi.py) and the fleet simulator's one process for N nodes.

With CPython's defaults such a process ran a full collection every few seconds, each walking every
object it had made at startup (~220,000 for Django and its libraries; the simulator's agents and
their state), all of which live as long as the process, and stopping it for 100-500 ms: pages,
snapshots and samples all waited. Frozen, those objects are left out of every collection; and young
objects are collected every ``YOUNG_THRESHOLD`` allocations instead of 700, since a message's
objects die young. Measured with benchmarks/dashboard.py: the fleet page's first byte went from
~500 ms to ~150 ms under the 1,000-node load.
"""

import gc

YOUNG_THRESHOLD = 20_000


def freeze_startup_objects() -> None:
    """Call once the process has made its long-lived objects."""
    gc.set_threshold(YOUNG_THRESHOLD, 10, 10)
    gc.freeze()
