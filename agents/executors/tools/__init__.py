"""The standard tools a GPU node may have (``dcgmi``, ``gpu-burn``, nccl-tests), each as a parser
of its output (pure functions, tested on captured-style output) and a runner; and the supervised
child process they, and torchrun, run as."""
