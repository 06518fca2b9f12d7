"""Log a lasting condition (a failing disk, a full one) as a few lines, not one per attempt.

A broker that logs every failed fsync or checkpoint write of a file system that went
away writes megabytes a second (20 MB in 4 s once, a FUSE file system killed under the
data directory) and buries the one line an
operator needs. A :class:`ConditionLog` writes one line when its condition starts,
at most one summary per ``interval`` while new occurrences keep coming, and one line
when it ends. Owned by whoever reports the condition (the flusher, the log manager);
not thread-safe: call it from the event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

SUMMARY_INTERVAL_S = 10.0  # at most one summary line per condition this often
MAX_NAMED = 10  # names listed in a summary line; the rest are counted


class ConditionLog:
    def __init__(self, logger: logging.Logger, what: str, *,
                 interval: float = SUMMARY_INTERVAL_S, level: int = logging.ERROR,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self.what = what
        self.interval = interval
        self.level = level
        self._clock = clock
        self.active = False
        self.occurrences = 0  # since the condition started
        self._started = 0.0
        self._reported = 0.0  # when the last line was written
        self._unreported = 0  # occurrences since that line
        self._names: dict[str, None] = {}  # what the unreported occurrences concerned
        self._latest = ""
        self._last = 0.0  # when it last occurred

    def occurred(self, detail: str, name: str | None = None) -> None:
        """One more occurrence (``name``: what it concerned, e.g. a partition)."""
        now = self._clock()
        self.occurrences += 1
        self._last = now
        if not self.active:
            self.active = True
            self._started = self._reported = now
            self._unreported = 0
            self._names.clear()
            self._log.log(self.level, "%s: %s", self.what, detail)
            return
        self._unreported += 1
        self._latest = detail
        if name is not None:
            self._names[name] = None
        self.tick(now)

    def tick(self, now: float | None = None) -> None:
        """Write the summary if one is due (call it now and then while it lasts)."""
        if not self.active or not self._unreported:
            return
        now = self._clock() if now is None else now
        if now - self._reported < self.interval:
            return
        self._summary(now)

    def _summary(self, now: float) -> None:
        names = list(self._names)
        named = ", ".join(names[:MAX_NAMED]) + (f" and {len(names) - MAX_NAMED} more"
                                                if len(names) > MAX_NAMED else "")
        self._log.log(self.level, "%s goes on: %d more in the last %.0f s%s (%d since it "
                      "started %.0f s ago); latest: %s", self.what, self._unreported,
                      now - self._reported, f" ({named})" if named else "", self.occurrences,
                      now - self._started, self._latest)
        self._reported = now
        self._unreported = 0
        self._names.clear()

    def cleared(self, detail: str = "", *, quiet: float = 0.0) -> None:
        """The condition is over: one line saying so, if it was on. With ``quiet``, only
        once it has not occurred for that many seconds (so that a condition that comes
        and goes is one condition, not a line pair each time)."""
        if not self.active:
            return
        now = self._clock()
        if now - self._last < quiet:
            return
        if self._unreported:
            self._summary(now)  # what is not summarized yet, first
        self._log.log(logging.WARNING, "%s ended after %.0f s (%d occurrence(s))%s",
                      self.what, now - self._started, self.occurrences,
                      f": {detail}" if detail else "")
        self.active = False
        self.occurrences = 0
        self._unreported = 0
        self._names.clear()
