"""Named fault points in the commit protocol, for testing exactly-once applications.

Arm them from config (``txbroker.fault.points``) or at run time
(``broker.faults.arm(point, action)``). Each point fires once and disarms.

Points (where in EndTxn's commit protocol):
  before_end_txn          EndTxn arrived; nothing done yet (its transaction is still Ongoing)
  after_prepare_durable   PrepareCommit/PrepareAbort is fsynced; nothing else done
  drop_end_txn_response   the EndTxn answer is not sent (the connection closes)
  after_first_marker      the first partition's COMMIT/ABORT marker is fsynced
  before_complete         every marker is fsynced; CompleteCommit/Abort not written
  before_markers          PrepareCommit/PrepareAbort is fsynced and answered; no marker yet
  after_share_acknowledge_durable
                          a share-group member's acknowledgements (ShareAcknowledge, or
                          piggy-backed on ShareFetch) are durable in __share_group_state;
                          not answered yet

Actions:
  crash       stop the broker at once, like SIGKILL (a broker process exits with 137;
              an in-process test broker drops everything without flushing); what was
              written but not fsynced stays, as in the page cache after SIGKILL
  power_loss  crash as after a power failure: first every partition log is cut back to
              what was fsynced (PartitionLog.simulate_power_loss), then as ``crash``
  delay:MS    wait MS milliseconds at the point, then go on
  drop        (drop_end_txn_response, after_share_acknowledge_durable) close the
              connection instead of answering
  expire      (before_end_txn only) expire the EndTxn's transaction now, as its timeout
              would (aborted, the producer fenced by an epoch bump); EndTxn then goes on
              and the producer gets PRODUCER_FENCED (INVALID_PRODUCER_EPOCH before v2)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

POINTS = {
    "before_end_txn",
    "after_prepare_durable",
    "drop_end_txn_response",
    "after_first_marker",
    "before_complete",
    "before_markers",
    "after_share_acknowledge_durable",
}
# Points where a transaction is still open, so "expire" means something.
EXPIRE_POINTS = {"before_end_txn"}
ACTIONS = ("crash", "power_loss", "drop", "expire", "delay:MS")


def check_fault_point(point: str, action: str) -> None:
    """ValueError unless ``action`` may be armed at ``point``."""
    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}; known: {', '.join(sorted(POINTS))}")
    if action.startswith("delay:"):
        try:
            int(action.split(":", 1)[1])
        except ValueError:
            raise ValueError(f"bad fault action {action!r}: delay:MS needs an integer") from None
    elif action not in ACTIONS:
        raise ValueError(f"unknown fault action {action!r} ({', '.join(ACTIONS)})")
    if action == "expire" and point not in EXPIRE_POINTS:
        raise ValueError(f"fault action expire needs a point with an open transaction "
                         f"({', '.join(sorted(EXPIRE_POINTS))}), not {point!r}")


def parse_fault_points(text: str) -> dict[str, str]:
    """``point[=action],...`` -> {point: action}, checked (ValueError); a point without
    an action crashes (drop_end_txn_response: drops)."""
    out = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        point, _, action = (x.strip() for x in item.partition("="))
        action = action or ("drop" if point == "drop_end_txn_response" else "crash")
        check_fault_point(point, action)
        out[point] = action
    return out


class FaultInjector:
    def __init__(self, crash: Callable[[str, bool], None]) -> None:
        """``crash(point, power_loss)`` stops the broker (power_loss: unsynced data lost)."""
        self._crash = crash
        self.armed: dict[str, str] = {}
        self.fired: list[str] = []
        # Told each point that fires (the broker's fault table counts it).
        self.on_fired: Callable[[str], None] | None = None

    def arm(self, point: str, action: str = "crash") -> None:
        check_fault_point(point, action)
        self.armed[point] = action
        log.warning("fault point %s armed: %s", point, action)

    def arm_from_config(self, text: str) -> None:
        """``point[=action],...``, e.g. ``before_complete=crash,before_markers=delay:500``."""
        for point, action in parse_fault_points(text).items():
            self.arm(point, action)

    def config_text(self) -> str:
        """The armed points in ``txbroker.fault.points`` form (what has not fired yet)."""
        return ",".join(f"{point}={action}" for point, action in self.armed.items())

    def disarm(self, point: str | None = None) -> None:
        if point is None:
            self.armed.clear()
        else:
            self.armed.pop(point, None)

    async def hit(self, point: str, *, expire: Callable[[], object] | None = None) -> bool:
        """Run the armed action of ``point``; True when the caller must drop its answer.
        ``expire`` is what the ``expire`` action does at this point."""
        action = self.armed.pop(point, None)
        if action is None:
            return False
        self.fired.append(point)
        if self.on_fired is not None:
            self.on_fired(point)
        log.warning("fault point %s fired: %s", point, action)
        if action.startswith("delay:"):
            await asyncio.sleep(int(action.split(":", 1)[1]) / 1000)
            return False
        if action == "drop":
            return True
        if action == "expire":
            if expire is not None:
                expire()
            return False
        self._crash(point, action == "power_loss")
        # A crash never returns to the protocol: park until the broker is torn down.
        await asyncio.Event().wait()
        return False
