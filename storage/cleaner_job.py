"""What one cleaning works on: its source segments, their grouping, its outputs and stats.

Why a module of its own: these records are shared by the two sides of a cleaning,
the event loop (cleaner.py plans a job and swaps its outputs in) and the worker
thread (cleaner_offset_map.py and cleaner_rewrite.py read the sources through
``read_batches`` and write the outputs); keeping them apart lets each side import
them without importing the other.

Grouping: the cleanable segments are grouped (consecutive segments while their
total size fits ``segment.bytes``, their indexes ``segment.index.bytes`` and their
offsets a 32-bit relative range, like Kafka's groupSegmentsBySize) and each group is
copied into one new segment (cleaner_rewrite.py).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from txbroker.protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    compute_crc,
    iter_batches,
    read_header,
)

from .segment import LogSegment
from .txn_index import AbortedTxn

if TYPE_CHECKING:  # log.py does not import the cleaner modules (cleaner_recovery.py)
    from .log import PartitionLog

INT32_MAX = 2**31 - 1
_READ_CHUNK = 1 << 20


class CleanerError(Exception):
    """A log that cannot be cleaned (corrupt data): it is skipped until restart."""


class CleaningAborted(Exception):
    pass


def read_batches(fd: int, size: int, abort: Callable[[], bool]
                  ) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every batch of a closed segment, CRC-checked; a short or corrupt file is an error
    (the cleaner must never silently drop what it cannot read)."""
    pos = 0
    while pos < size:
        if abort():
            raise CleaningAborted
        chunk = memoryview(os.pread(fd, min(_READ_CHUNK, size - pos), pos))
        advanced = 0
        for rel, header in iter_batches(chunk):
            yield header, chunk[rel : rel + header.size]
            advanced = rel + header.size
        if advanced == 0:  # one batch larger than the chunk
            if len(chunk) < HEADER_SIZE:
                break
            header = read_header(chunk)
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > size:
                break
            yield header, memoryview(os.pread(fd, header.size, pos))
            advanced = header.size
        pos += advanced
    if pos != size:
        raise CleanerError(f"unreadable batch at position {pos} of {size}")


def checked_batch(header: BatchHeader, data: memoryview) -> memoryview:
    if header.magic != 2 or compute_crc(data, 0, header.size) != header.crc:
        raise CleanerError(f"corrupt batch at offset {header.base_offset}")
    return data


@dataclass
class SourceSegment:
    segment: LogSegment
    fd: int  # a duplicate: stays valid if the segment is closed meanwhile
    size: int
    end_offset: int  # base offset of the next segment


@dataclass
class CleaningJob:
    plog: PartitionLog
    sources: list[SourceSegment]
    groups: list[list[SourceSegment]]
    first_dirty: int
    end_offset: int
    now: int
    delete_retention_ms: int
    index_interval: int
    producer_last_offsets: dict[int, int]
    abort: Callable[[], bool]
    cancelled: threading.Event
    aborted: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    aborted_entries: list[AbortedTxn] = field(default_factory=list)  # sorted by last offset
    producer_epochs: dict[int, int] = field(default_factory=dict)


@dataclass
class GroupOutput:
    base_offset: int
    prefix: str
    size: int
    # The aborted transactions whose ABORT marker lies in [txn_low, end_offset): the
    # cleaned segment's .txnindex, which replaces them (txn_low None: from the start).
    txn_low: int | None = None
    end_offset: int = 0
    txn_entries: list[AbortedTxn] = field(default_factory=list)


@dataclass
class CleanStats:
    """What one cleaning of one log did."""

    log: str
    first_dirty: int
    end_offset: int  # everything below was cleaned: the new cleaner checkpoint
    segments_before: int
    segments_after: int
    bytes_before: int
    bytes_after: int
    records_read: int
    records_kept: int
    completed: bool = True  # False: a swap was given up (the log changed meanwhile)


@dataclass
class CleanableRange:
    plog: PartitionLog
    segments: list[LogSegment]  # the cleanable closed segments, from the first
    end_offset: int  # base offset of the first uncleanable segment
    first_dirty: int
    clean_bytes: int
    dirty_bytes: int
    needs_now: bool  # max.compaction.lag.ms exceeded by a dirty record

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def group_segments(segments: list[LogSegment], ends: list[int], max_bytes: int,
                    max_index_bytes: int) -> list[list[int]]:
    """Indexes of consecutive segments cleaned into one (Kafka's groupSegmentsBySize)."""
    groups: list[list[int]] = []
    current: list[int] = []
    size = entries = 0
    for k, seg in enumerate(segments):
        if current:
            span = ends[k] - 1 - segments[current[0]].base_offset
            if size + seg.size > max_bytes or (entries + seg.index_entries() + 1) * 8 > \
                    max_index_bytes or span > INT32_MAX:
                groups.append(current)
                current, size, entries = [], 0, 0
        current.append(k)
        size += seg.size
        entries += seg.index_entries()
    if current:
        groups.append(current)
    return groups
