"""The node agent: runs on every GPU node, never imports Django.

It reports inventory and telemetry over one outbound WebSocket and runs the commands it receives.
The same code, with the simulated NVML backend, is the fleet simulator.
"""

__version__ = "0.1.0"
