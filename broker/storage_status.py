"""What the data directory's state is, in one place for the three that show it: the
admin endpoint's /health, the console's banner and (counts only) /metrics.

Read-only over the LogManager: the conditions of ``logs.disk``
(storage/disk_conditions.py: a full, read-only or failing file system, which end by
themselves once the cause goes) and the partitions a failed fsync took offline (which
stay offline until a restart, storage/flusher.py).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from txbroker.storage.manager import LogManager

MAX_LISTED = 20  # offline partitions named; the rest are counted


def offline_partitions(logs: LogManager) -> list[str]:
    return sorted(p.name for p in logs.logs.values() if p.offline is not None)


def storage_status(logs: LogManager) -> dict[str, Any]:
    """``status``: "ok", or "degraded" while a condition lasts or a partition is offline
    (the broker still serves what it can: reads, other partitions)."""
    now = time.time()
    conditions = [{"condition": c.condition, "path": c.path, "detail": c.detail,
                   "since_seconds": round(now - c.since, 1), "refused_writes": c.refused,
                   "retries": c.retries} for c in logs.disk.active.values()]
    offline = offline_partitions(logs)
    status: dict[str, Any] = {"status": "degraded" if conditions or offline else "ok",
                              "conditions": conditions,
                              "offline_partitions": len(offline),
                              "offline_partition_names": offline[:MAX_LISTED]}
    space = logs.disk.free_space()
    if space is not None:
        status["data_dir"] = logs.data_dir
        status["free_bytes"], status["total_bytes"] = space
    return status


def describe(status: dict[str, Any]) -> list[str]:
    """One line per problem, for /health's text and the console's banner."""
    lines = [f"{c['condition']}: {c['path']}: {c['detail']} (for {c['since_seconds']:.0f} s, "
             f"{c['refused_writes']} write(s) refused)" if "path" in c else c["condition"]
             for c in status["conditions"]]
    if status["offline_partitions"]:
        listed = status.get("offline_partition_names", [])
        names = ", ".join(listed)
        more = status["offline_partitions"] - len(listed)
        named = f" ({names}{f' and {more} more' if more > 0 else ''})" if listed else ""
        lines.append(f"offline_partitions: {status['offline_partitions']}{named} after a "
                     "failed fsync; a restart brings them back")
    return lines
