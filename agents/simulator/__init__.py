"""The fleet simulator: the real agent over a simulated NVML backend (``model``), many nodes in
one process (``fleet``)."""
