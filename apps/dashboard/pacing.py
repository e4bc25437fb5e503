"""When a browser's next delta goes: at most one message a second, and soon after fresh values arrive.

Updates for a client are collected (apps/dashboard/deltas.py) and sent together. A delta goes
``coalesce_s`` after the first update it carries arrived (to catch the node and fleet messages the
publisher sends together), unless the client had a message less than ``interval_s`` before: then
when that second is up. A snapshot counts as that second's message.

That alone drifts out of step with a stream that itself ticks once a second (a node's telemetry):
every delta is held until the second is up, each second starts a little later than the last (the
timer and the send take some time), and a page watching one node ends up showing every sample up
to a second late. So when a delta would go with values already older than ``fresh_s``, it waits
for fresher ones instead (a node reports again within the second) and goes ``coalesce_s`` after
they arrive; nothing is held longer than ``interval_s + fresh_s`` in all. The client then skips
one second, and its seconds are back in step with its updates.

Times are the caller's clock (the consumer's, apps/core/clock.py), passed in, so the rules are tested without waiting.
"""

import math

UPDATE_INTERVAL_S = 1.0
COALESCE_S = 0.05
FRESH_S = 0.4


class DeltaPacing:
    def __init__(
        self, *, interval_s: float = UPDATE_INTERVAL_S, coalesce_s: float = COALESCE_S, fresh_s: float = FRESH_S
    ) -> None:
        self.interval_s, self.coalesce_s, self.fresh_s = interval_s, coalesce_s, fresh_s
        self._sent_at = -math.inf  # the client's last message
        self._owed_since: float | None = None  # the oldest update not yet sent arrived then
        self._window_from = -math.inf  # the coalescing window opened then
        self._newest_at = -math.inf  # the newest update arrived then

    def offered(self, now: float) -> None:
        """An update for the client arrived."""
        if self._owed_since is None:
            self._owed_since = self._window_from = now
        elif self._waits_for_fresher():
            self._window_from = now  # the fresher values the delta waited for
        self._newest_at = now

    def sent(self, now: float) -> None:
        """The client was sent a message (a delta or a snapshot): the next delta follows a second later."""
        self._sent_at = now

    def settled(self) -> None:
        """Everything owed is sent (or turned out to change nothing)."""
        self._owed_since = None

    def due(self) -> float | None:
        """When the owed delta goes (None: nothing is owed). Ask again after every ``offered``: fresh
        values bring a delta that waits for them forward."""
        if self._owed_since is None:
            return None
        due = self._in_step_due()
        if due - self._newest_at > self.fresh_s:
            return max(due, self._owed_since + self.interval_s + self.fresh_s)
        return due

    def _in_step_due(self) -> float:
        return max(self._sent_at + self.interval_s, self._window_from + self.coalesce_s)

    def _waits_for_fresher(self) -> bool:
        return self._in_step_due() - self._newest_at > self.fresh_s
