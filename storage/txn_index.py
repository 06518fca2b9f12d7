"""Aborted-transaction index: ``<base>.txnindex`` per segment, Kafka's format.

Each entry is 34 bytes: version i16 (0), producer id i64, first offset i64,
last offset i64 (the ABORT marker), last stable offset i64 (at the time the
marker was written). A read_committed fetch returns the aborted transactions
that overlap the fetched range so the client can drop their records.

The partition keeps every entry in memory, sorted by last offset; the files
are the durable copy, rebuilt from the log on recovery past the last producer
snapshot.
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass

from .durable_file import write_durably

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size


@dataclass(frozen=True, order=True, slots=True)
class AbortedTxn:
    last_offset: int
    producer_id: int
    first_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(0, self.producer_id, self.first_offset, self.last_offset,
                           self.last_stable_offset)


def txnindex_path(directory: str, base_offset: int) -> str:
    return os.path.join(directory, f"{base_offset:020d}.txnindex")


def read_txnindex(path: str) -> list[AbortedTxn]:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return []
    out = []
    usable = len(raw) - len(raw) % ENTRY_SIZE  # a torn last entry is rebuilt by replay
    for version, pid, first, last, lso in _ENTRY.iter_unpack(raw[:usable]):
        if version != 0:
            break
        out.append(AbortedTxn(last, pid, first, lso))
    return out


def write_txnindex(path: str, entries: list[AbortedTxn], *, sync_directory: bool = True) -> None:
    """Replace the file durably: recovery reads the entries below the producer
    snapshot's offset from it, so the rename must survive too (directory fsync,
    unless the caller does it once for several files)."""
    write_durably(path, b"".join(e.encode() for e in entries), sync_directory=sync_directory)


class AbortedTxnIndex:
    """All aborted transactions of one partition, queryable by offset range."""

    def __init__(self) -> None:
        self.entries: list[AbortedTxn] = []  # sorted by last_offset

    def add(self, entry: AbortedTxn) -> None:
        bisect.insort(self.entries, entry)

    def overlapping(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [start, end): last >= start, first < end."""
        i = bisect.bisect_left(self.entries, (start,), key=lambda e: (e.last_offset,))
        return [e for e in self.entries[i:] if e.first_offset < end]

    def drop_below(self, offset: int) -> None:
        """Forget transactions that ended before the log start offset."""
        i = bisect.bisect_left(self.entries, (offset,), key=lambda e: (e.last_offset,))
        del self.entries[:i]

    def replace_range(self, start: int | None, end: int, entries: list[AbortedTxn]) -> None:
        """Replace the transactions whose marker is in [start, end) (start None: from
        the first) by ``entries`` (the log cleaner's, for a cleaned segment)."""
        i = 0 if start is None else bisect.bisect_left(self.entries, (start,),
                                                       key=lambda e: (e.last_offset,))
        j = bisect.bisect_left(self.entries, (end,), key=lambda e: (e.last_offset,))
        self.entries[i:j] = sorted(entries)

    def drop_from(self, offset: int) -> None:
        """Forget transactions whose marker is at or after ``offset`` (truncation, replay)."""
        i = bisect.bisect_left(self.entries, (offset,), key=lambda e: (e.last_offset,))
        del self.entries[i:]
