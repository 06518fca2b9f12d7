"""Named fault points in the commit protocol, for testing exactly-once applications.

Arm them from config (``txbroker.fault.points``) or at run time
(``broker.faults.arm(point, action)``). Each point fires once and disarms.

Points (where in EndTxn's commit protocol):
  after_prepare_durable   PrepareCommit/PrepareAbort is fsynced; nothing else done
  drop_end_txn_response   the EndTxn answer is not sent (the connection closes)
  after_first_marker      the first partition's COMMIT/ABORT marker is fsynced
  before_complete         every marker is fsynced; CompleteCommit/Abort not written
  before_markers          PrepareCommit/PrepareAbort is fsynced and answered; no marker yet

Actions:
  crash       stop the broker at once, like SIGKILL (a broker process exits with 137;
              an in-process test broker drops everything without flushing)
  delay:MS    wait MS milliseconds at the point, then go on
  drop        (drop_end_txn_response only) close the connection instead of answering
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

POINTS = {
    "after_prepare_durable",
    "drop_end_txn_response",
    "after_first_marker",
    "before_complete",
    "before_markers",
}


class FaultInjector:
    def __init__(self, crash: Callable[[str], None]) -> None:
        self._crash = crash
        self.armed: dict[str, str] = {}
        self.fired: list[str] = []

    def arm(self, point: str, action: str = "crash") -> None:
        if point not in POINTS:
            raise ValueError(f"unknown fault point {point!r}; known: {', '.join(sorted(POINTS))}")
        if action not in ("crash", "drop") and not action.startswith("delay:"):
            raise ValueError(f"unknown fault action {action!r} (crash, drop, delay:MS)")
        self.armed[point] = action
        log.warning("fault point %s armed: %s", point, action)

    def arm_from_config(self, text: str) -> None:
        """``point[=action],...``, e.g. ``before_complete=crash,before_markers=delay:500``."""
        for item in filter(None, (x.strip() for x in text.split(","))):
            point, _, action = item.partition("=")
            self.arm(point.strip(), action.strip() or ("drop" if point.strip() ==
                                                      "drop_end_txn_response" else "crash"))

    def disarm(self, point: str | None = None) -> None:
        if point is None:
            self.armed.clear()
        else:
            self.armed.pop(point, None)

    async def hit(self, point: str) -> bool:
        """Run the armed action of ``point``; True when the caller must drop its answer."""
        action = self.armed.pop(point, None)
        if action is None:
            return False
        self.fired.append(point)
        log.warning("fault point %s fired: %s", point, action)
        if action.startswith("delay:"):
            await asyncio.sleep(int(action.split(":", 1)[1]) / 1000)
            return False
        if action == "drop":
            return True
        self._crash(point)
        # A crash never returns to the protocol: park until the broker is torn down.
        await asyncio.Event().wait()
        return False
