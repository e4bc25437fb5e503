"""What the gateway refuses of an agent beyond what the protocol itself checks.

- **A clock running ahead.** A sample or event stamped more than ``AGENT_MAX_CLOCK_SKEW_S`` ahead of
  the server's clock is refused, frame and all (the newest-sample rows behind /metrics only move
  forward in time, so one sample from 2096 would stand for the GPU for good): the reply says by how
  much, it is counted as ``clock_skew``, and the node gets a "clock skew" failure with the offset.
- **A seq far ahead.** A frame numbered more than ``MAX_SEQ_AHEAD`` past what the server stores for
  its stream is refused and counted as ``seq_ahead``: stored, it would make every real frame after it
  a "replay" (a seq of 2**63 - 1 stopped a node's telemetry for good).
- **A flood of bad frames.** An agent whose frames keep being refused is broken or hostile, and
  answering each refusal costs the server: past ``AGENT_ERROR_LIMIT`` refusals within
  ``AGENT_ERROR_WINDOW_S`` the consumer closes the socket (``CloseCode.TOO_MANY_ERRORS``), and the
  gateway counts it (``CounterCode.ERROR_FLOOD``). The server's own failures (``internal``,
  ``not_ready``) are not the agent's and do not count.
"""

from collections import deque
from typing import Final

from agents import protocol
from apps.core.clock import Clock
from apps.gateway.choices import CounterCode

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


class Refused(protocol.ProtocolError):
    """A frame the gateway refuses although the protocol accepts it: an ``invalid`` reply, counted under
    its own counter code."""

    counter: CounterCode

    def __init__(self, message: str) -> None:
        super().__init__("invalid", message)


class ClockAhead(Refused):
    counter = CounterCode.CLOCK_SKEW

    def __init__(self, offset_s: float, max_skew_s: float) -> None:
        self.offset_s = offset_s
        super().__init__(
            f"Stamped {offset_s:.0f} s ahead of the server's clock, more than the {max_skew_s:g} s allowed; "
            "check the node's time sync."
        )


def lead(message: protocol.Telemetry | protocol.Events | protocol.Heartbeat, now: float) -> float:
    """How far the message's newest timestamp is ahead of ``now`` (negative: behind it), in seconds."""
    match message:
        case protocol.Telemetry():
            newest = max(sample.ts for sample in message.samples)
        case protocol.Events():
            newest = max(event.ts for event in message.events)
        case protocol.Heartbeat():
            newest = message.ts
    return newest - now


def check_clock(message: protocol.Telemetry | protocol.Events, now: float, max_skew_s: float) -> None:
    """Raise ClockAhead for a frame stamped more than ``max_skew_s`` ahead of ``now``."""
    if (offset := lead(message, now)) > max_skew_s:
        raise ClockAhead(offset, max_skew_s)


class SeqAhead(Refused):
    counter = CounterCode.SEQ_AHEAD

    def __init__(self, seq: int, stored: int) -> None:
        super().__init__(
            f"Seq {seq} is more than {protocol.MAX_SEQ_AHEAD} ahead of the {stored} this server stores for "
            "the stream; an agent's buffer cannot hold that many."
        )


def check_seq(message: protocol.Telemetry | protocol.Events, stored: int) -> None:
    """Raise SeqAhead for a frame numbered too far past ``stored``, the stream's stored seq."""
    if message.seq > stored + protocol.MAX_SEQ_AHEAD:
        raise SeqAhead(message.seq, stored)
