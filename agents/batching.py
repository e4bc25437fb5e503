"""The samples an agent holds between telemetry sends, handed to the buffer as one frame per send.

The agent samples every ``interval`` and, given a send interval, sends telemetry at most that often
(Telegraf's ``interval`` and ``flush_interval``, Prometheus remote-write's batch deadline): the
samples taken in between go out together in one frame, so both ends pay their per-frame work (a
WebSocket message, its parse and dispatch on the server, an ack) once per send instead of once per
sample. The price is latency by design: a frame's oldest sample waited on the agent for up to
``(ceil(send_interval / interval) - 1) * interval``.

A frame is due once it holds ``ceil(send_interval / interval)`` samples: counted, not timed, since
ticks are scheduled exactly but the clock read at each one jitters, and a frame due at 0.999 s must
not wait a whole tick more. It is due too once its oldest sample is ``send_interval`` old, so a
collector that stalls (ticks skipped) cannot hold samples longer than asked. A send interval of 0,
or one no longer than the sample interval, sends each sample at once (the default). The frame limits
hold: a sample that would not fit beside the held ones starts the next frame.

Held samples are in memory only, like the buffer's newest frames: the agent hands them to the buffer
when it stops, so a SIGTERM spools them, and a crash loses at most one send interval of them.
"""

import math
from typing import Final

from agents.protocol import FRAME_SPLICERS

# Decimal intervals are not exact in binary (3 x 0.3 < 0.9): a count that reaches the send interval
# within this share of it has reached it.
_TOLERANCE: Final = 1e-9


def samples_per_frame(send_interval: float, interval: float) -> int:
    """How many samples an agent sampling every ``interval`` sends in one frame: a send interval's worth,
    rounded up (never more often than asked), at least one."""
    return max(1, math.ceil(send_interval / interval * (1 - _TOLERANCE)))


class SampleBatch:
    def __init__(self, send_interval: float = 0.0) -> None:
        self.send_interval = send_interval
        self._samples: list[bytes] = []
        self._bytes = -1  # of the held samples joined with commas, as a frame holds them
        self._oldest_at = 0.0
        self._fits = FRAME_SPLICERS["telemetry"].fits

    def __len__(self) -> int:
        return len(self._samples)

    def add(self, sample: bytes | None, now: float, interval: float) -> list[list[bytes]]:
        """Hold ``sample`` (None: this tick gave none), taken at ``now`` by an agent sampling every
        ``interval``; the frames' samples due now, oldest first (none, one, or two at a frame limit)."""
        due: list[list[bytes]] = []
        if sample is not None:
            if self._samples and not self._fits(len(self._samples) + 1, self._bytes + 1 + len(sample)):
                due.append(self.take())
            if not self._samples:
                self._oldest_at = now
            self._samples.append(sample)
            self._bytes += 1 + len(sample)
        if self._samples and self._due(now, interval):
            due.append(self.take())
        return due

    def take(self) -> list[bytes]:
        """Every held sample, oldest first; the batch is empty afterwards."""
        samples, self._samples, self._bytes = self._samples, [], -1
        return samples

    def _due(self, now: float, interval: float) -> bool:
        full = len(self._samples) >= samples_per_frame(self.send_interval, interval)
        return full or now - self._oldest_at >= self.send_interval
