"""What the gateway refuses of an agent beyond what the protocol itself checks: a flood of bad frames.

An agent whose frames keep being refused is broken or hostile, and answering each refusal costs the
server: past ``AGENT_ERROR_LIMIT`` refusals within ``AGENT_ERROR_WINDOW_S`` the consumer closes the
socket (``CloseCode.TOO_MANY_ERRORS``), and the gateway counts it (``CounterCode.ERROR_FLOOD``). The
server's own failures (``internal``, ``not_ready``) are not the agent's and do not count.
"""

from collections import deque
from typing import Final

from agents import protocol
from apps.core.clock import Clock

NOT_THE_AGENTS_FAULT: Final[frozenset[protocol.ErrorCode]] = frozenset({"internal", "not_ready"})


class ErrorWindow:
    """The times of a connection's last ``limit`` refusals: ``add`` says whether the one it notes makes
    ``limit`` within ``window_s``."""

    def __init__(self, limit: int, window_s: float, clock: Clock) -> None:
        self.limit, self.window_s = limit, window_s
        self._clock = clock
        self._times: deque[float] = deque(maxlen=limit)

    def add(self, code: protocol.ErrorCode) -> bool:
        if code in NOT_THE_AGENTS_FAULT:
            return False
        now = self._clock.now()
        self._times.append(now)
        return len(self._times) == self._times.maxlen and now - self._times[0] <= self.window_s
