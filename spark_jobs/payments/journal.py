"""The processor's side file of transaction attempts (JSON lines, fsynced per line).

Every output record carries the id of the transaction attempt that wrote it. The
processor appends one line per attempt outcome:

    {"event": "committed", "attempt": "p1-0003", "payments": 47, "rejected": 3}
    {"event": "aborted",   "attempt": "p1-0004", "reason": "deliberate", ...}
    {"event": "crashed",   "attempt": "p1-0006", "payments": 22, "rejected": 3}

An ``aborted`` line is written *before* ``abort_transaction`` and a ``crashed`` line
before the SIGKILL, so the file never misses an attempt whose records sit in the log
uncommitted; a ``committed`` line is written after ``commit_transaction`` returned.
A crashed attempt's transaction is aborted by the broker when the next producer with
the same transactional.id calls ``init_transactions`` (fencing the zombie).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

COMMITTED = "committed"
ABORTED = "aborted"
CRASHED = "crashed"


class Journal:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def record(self, event: str, attempt: str, **fields: object) -> None:
        line = json.dumps({"event": event, "attempt": attempt, **fields}) + "\n"
        # O_APPEND + fsync: the line survives the SIGKILL that may follow right away.
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass
class Attempts:
    """The journal read back: attempt ids by outcome, in order."""

    committed: list[str] = field(default_factory=list)
    aborted: dict[str, str] = field(default_factory=dict)  # attempt -> reason
    crashed: list[str] = field(default_factory=list)
    committed_orders: int = 0
    # Records the aborted and crashed attempts left in the logs (invisible to
    # read_committed readers), per output: "payments" / "rejected".
    uncommitted_records: dict[str, int] = field(
        default_factory=lambda: {"payments": 0, "rejected": 0})

    @property
    def not_committed(self) -> set[str]:
        """Attempts whose records must never be read: aborted, or fenced after a crash."""
        return set(self.aborted) | set(self.crashed)


def read_journal(path: str | os.PathLike[str]) -> Attempts:
    out = Attempts()
    p = Path(path)
    if not p.exists():
        return out
    for line in p.read_text().splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        event, attempt = entry["event"], entry["attempt"]
        if event == COMMITTED:
            out.committed.append(attempt)
            out.committed_orders += int(entry.get("payments", 0)) + int(entry.get("rejected", 0))
        elif event in (ABORTED, CRASHED):
            if event == ABORTED:
                out.aborted[attempt] = str(entry.get("reason", ""))
            else:
                out.crashed.append(attempt)
            for kind in ("payments", "rejected"):
                out.uncommitted_records[kind] += int(entry.get(kind, 0))
    return out
