"""The fleet simulator: the real agent code over a simulated NVML backend.

The backend is a node's GPUs and ports with realistic dynamics and scripted or random faults
(``model``, ``profiles``, ``workloads``, ``faults``), behind the same ``Collector`` interface as the
real NVML and sysfs readers (``collector``); ``fleet`` runs many such nodes in one process, each a
real WebSocket client, and ``cli`` is its ``cp-agent simulate`` command.

Nothing is imported here: ``cp-agent`` registers ``simulate`` from ``cli`` on every start, and a real
node's agent should not load the simulated backend to do so."""
