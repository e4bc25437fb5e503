"""A counter that logs: the first occurrence at once, then at most one summary a minute.

An agent that loses its server for an hour, or a collector that fails every second, must say so
without writing 3,600 lines (times 1,000 in the fleet simulator)."""

import logging
import time
from typing import Final

SUMMARY_INTERVAL_S: Final = 60.0


class CountingLog:
    def __init__(self, logger: logging.Logger, label: str, *, level: int = logging.WARNING, total: int = 0) -> None:
        self.logger = logger
        self.label = label
        self.level = level
        self.total = total
        self._unlogged = 0
        self._logged_at = -SUMMARY_INTERVAL_S

    def add(self, count: int, what: str, *, exc_info: BaseException | None = None) -> None:
        """Count ``count`` occurrences of ``what``; log them now unless a line went out this minute."""
        if count <= 0:
            return
        self.total += count
        self._unlogged += count
        now = time.monotonic()
        if now - self._logged_at >= SUMMARY_INTERVAL_S:
            self.logger.log(
                self.level,
                "%s: %s (%d since the last report, %d in total)",
                self.label,
                what,
                self._unlogged,
                self.total,
                exc_info=exc_info,
            )
            self._unlogged = 0
            self._logged_at = now
