"""The rewrite of one group of segments into one cleaned segment (worker thread).

Why a module of its own: it is the file-writing half of a cleaning (Kafka's
Cleaner.cleanSegments): it reads the group's batches, passes each through the rules
of cleaner_filter.py, and writes ``<base>.log.cleaned`` with its offset, time and
aborted-transaction indexes, fsynced, for cleaner.py to swap in on the event loop
(the file protocol: cleaner_recovery.py).

The cleaned segment's ``.txnindex`` holds exactly the aborted transactions whose
ABORT marker it contains and whose data it still retains (Kafka's cleaned
transaction index likewise keeps only the aborted transactions whose marker stays
because batches of theirs were seen). An entry therefore goes at the same cleaning
that sets its marker's horizon, always before the marker itself: a read_committed
fetch is never told about an aborted transaction without the marker that ends it,
and aborted records are never retained, so no fetch can return them. An entry whose
marker lies past the cleaned range stays, even if the cleaning removed all its data,
until its marker's segment is cleaned (as in Kafka): harmless, but a replay of the
whole log does not recreate it (its marker then ends no open transaction).

Producer state rebuilt from the log stays right: a marker only goes with all of its
transaction's data, so a replay never sees a transaction opened without the marker
closing it, and the last data batch of each tracked producer is kept (with it, its
marker). A producer snapshot taken inside the cleaned range could hold a transaction
open whose marker a cleaning removed. The snapshot a restart loads is the newest,
taken at the last roll or shutdown, at or above the range's end; in case it were
unreadable, a group that drops a marker first deletes the snapshots below its end,
so a restart falls back to a snapshot that does not need the removed markers, or to
replaying the log from its start.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator

from txbroker.protocol.errors import CorruptRecordError
from txbroker.protocol.records import BatchHeader, read_header

from .cleaner_filter import FilterContext, filter_batch
from .cleaner_job import (
    CleanerError,
    CleaningJob,
    GroupOutput,
    SourceSegment,
    checked_batch,
    read_batches,
)
from .cleaner_recovery import CLEANED_SUFFIX, WRITTEN_SUFFIXES
from .durable_file import fsync_directory
from .producer_state import list_snapshots, snapshot_path
from .segment import filename_prefix
from .txn_index import AbortedTxn

_INDEX_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _IndexWriter:
    """Sparse offset/time index entries for a cleaned segment, by the rules of
    LogSegment._note_appended, plus a last time entry for the segment's true maximum
    (Kafka appends it when a segment becomes inactive)."""

    def __init__(self, base_offset: int, interval: int) -> None:
        self.base = base_offset
        self.interval = interval
        self.index = bytearray()
        self.timeindex = bytearray()
        self._last_ts: int | None = None
        self._since = 0
        self.max_ts = -1
        self.offset_of_max_ts = -1

    def add(self, position: int, header: BatchHeader) -> None:
        if header.max_timestamp > self.max_ts:
            self.max_ts = header.max_timestamp
            self.offset_of_max_ts = header.last_offset
        if self._since > self.interval or position == 0:
            self.index += _INDEX_ENTRY.pack(header.last_offset - self.base, position)
            self._time_entry()
            self._since = 0
        self._since += header.size

    def _time_entry(self) -> None:
        if self._last_ts is None or self.max_ts > self._last_ts:
            self.timeindex += _TIME_ENTRY.pack(self.max_ts, self.offset_of_max_ts - self.base)
            self._last_ts = self.max_ts

    def finish(self) -> None:
        if self.index:
            self._time_entry()


def group_prefix(job: CleaningJob, group: list[SourceSegment]) -> str:
    return os.path.join(job.plog.directory, filename_prefix(group[0].segment.base_offset))


def discard_group(prefix: str) -> None:
    for ext in WRITTEN_SUFFIXES:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(prefix + ext + CLEANED_SUFFIX)


def _group_batches(job: CleaningJob, group: list[SourceSegment]
                   ) -> Iterator[tuple[BatchHeader, memoryview, bool]]:
    """(header, bytes, is_last_of_group) for every batch of the group's segments."""
    pending: tuple[BatchHeader, memoryview] | None = None
    for src in group:
        for header, data in read_batches(src.fd, src.size, job.abort):
            if pending is not None:
                yield pending[0], pending[1], False
            pending = (header, data)
    if pending is not None:
        yield pending[0], pending[1], True


def _group_txn_entries(job: CleaningJob, group: list[SourceSegment], ctx: FilterContext
                       ) -> tuple[int | None, int, list[AbortedTxn]]:
    """The aborted transactions the cleaned segment of a group keeps: those whose ABORT
    marker it holds and whose data it still retains. An entry is assigned to the
    segment holding its marker (PartitionLog.rewrite_txn_indexes); the first group of
    the log also takes any entry below it (gone with its marker)."""
    low = None if group[0] is job.sources[0] else group[0].segment.base_offset
    end = group[-1].end_offset
    kept = [e for e in job.aborted_entries
            if (low is None or e.last_offset >= low) and e.last_offset < end
            and (e.producer_id, e.last_offset) in ctx.kept_aborts]
    return low, end, kept


def _forget_snapshots_below(directory: str, end: int) -> None:
    """Delete the producer snapshots below ``end``: one could hold a transaction open
    whose marker this cleaning removes (module docstring, "Producer state")."""
    removed = False
    for offset in list_snapshots(directory):
        if offset < end:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(snapshot_path(directory, offset))
                removed = True
    if removed:
        fsync_directory(directory)  # before the swap commits the removal of the markers


def write_group(job: CleaningJob, group: list[SourceSegment], ctx: FilterContext) -> GroupOutput:
    """Write the cleaned segment of one group as ``<base>.*.cleaned`` files, fsynced."""
    base = group[0].segment.base_offset
    prefix = group_prefix(job, group)
    index = _IndexWriter(base, job.index_interval)
    position = 0
    markers_removed = ctx.markers_removed
    try:
        with open(prefix + ".log" + CLEANED_SUFFIX, "wb") as out:
            for header, data, last in _group_batches(job, group):
                try:
                    kept = filter_batch(header, checked_batch(header, data), ctx, last)
                except CorruptRecordError as e:
                    raise CleanerError(f"offset {header.base_offset}: {e}") from None
                if kept is None:
                    continue
                written = header if kept is data else read_header(kept)
                out.write(kept)
                index.add(position, written)
                position += len(kept)
            out.flush()
            os.fsync(out.fileno())
        index.finish()
        low, end, entries = _group_txn_entries(job, group, ctx)
        txnindex = b"".join(e.encode() for e in entries)
        for ext, content in ((".index", index.index), (".timeindex", index.timeindex),
                             (".txnindex", txnindex)):
            with open(prefix + ext + CLEANED_SUFFIX, "wb") as f:
                f.write(content)
                f.flush()
                os.fsync(f.fileno())
        if ctx.markers_removed > markers_removed:
            _forget_snapshots_below(job.plog.directory, end)
    except BaseException:
        discard_group(prefix)
        raise
    return GroupOutput(base, prefix, position, low, end, entries)
