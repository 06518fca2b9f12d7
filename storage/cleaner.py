"""Log compaction for ``cleanup.policy`` containing ``compact``, after Kafka's LogCleaner.

What a cleaning does to one partition log:

1. **Cleanable range.** Closed segments only (never the active one), from the
   log start up to the first segment that is not entirely below the last
   stable offset (so only decided, durable data is cleaned) or whose newest
   record is younger than ``min.compaction.lag.ms``. The part below the
   cleaner checkpoint is "clean" (compacted before), the rest "dirty". Every
   cleaning rewrites the whole range, clean part included, from the first segment.
2. **Offset map.** key -> offset of its latest record, over the dirty part.
3. **Rewrite.** The cleanable segments are grouped (consecutive segments while
   their total size fits ``segment.bytes``, their indexes ``segment.index.bytes``
   and their offsets a 32-bit relative range, like Kafka's groupSegmentsBySize)
   and each group is copied into one new segment keeping a record only if no
   later record of its key is in the map. Kept records keep their offsets,
   timestamps and order. Batches that lose nothing are copied byte for byte;
   others are decoded, filtered and re-encoded with the same codec, base offset,
   lastOffsetDelta, producer id/epoch/base sequence and flags (as Kafka's
   MemoryRecords.filterTo does, so producer sequence state stays right). A batch
   that becomes empty is dropped, except (a) the last data batch of a producer
   the partition still tracks (producer state must survive a reopen) and (b) the
   last batch of each group (KAFKA-17076 keeps the last one of a cleaning so the
   log end offset survives; keeping it per group also means a cleaned segment
   always ends exactly where the segments it replaces ended, which makes ``.swap``
   recovery exact): these are kept as header-only batches with zero records.
   Records without a key are dropped, as Kafka's cleaner does.
4. **Tombstones** (value None) follow Kafka 3.x (KIP-534): the first cleaning
   that sees a tombstone's batch keeps it and marks the rewritten batch with the
   delete horizon (attribute bit 6, horizon = now + ``delete.retention.ms`` stored
   as the base timestamp; record timestamp deltas are relative to it, so clients
   decode record timestamps unchanged). A later cleaning at or past the horizon
   drops the tombstone. The horizon travels with the batch, so it survives
   restarts and does not depend on file modification times.
5. **Swap.** Each group is written as ``<base>.log.cleaned`` (+ ``.index.cleaned``,
   ``.timeindex.cleaned`` and ``.txnindex.cleaned``, the group's aborted
   transactions, always written, possibly empty) and fsynced in a worker thread.
   On the event loop the files are renamed to ``.swap`` (the ``.log`` last: its
   rename is the commit point), the replaced segments are closed and deleted
   (first to last), the ``.swap`` files renamed to their final names (the ``.log``
   last again), the segment list and the in-memory aborted-transaction index
   updated. ``recover_interrupted_cleaning`` (called by PartitionLog.open) deletes
   ``*.cleaned`` leftovers and completes a swap whose ``.log.swap`` exists: it
   deletes every segment file in the swap segment's offset range, renames the
   ``.txnindex.swap`` and then the ``.log.swap`` into place (the offset and time
   indexes are rebuilt on load). Because the cleaned ``.txnindex`` moves with the
   cleaned ``.log`` through the same renames, no crash can leave a cleaned segment
   next to the aborted-transaction entries of the segments it replaced (an entry
   whose ABORT marker the cleaning removed would make a read_committed consumer
   skip that producer's later, committed data) nor without its own entries (a
   restart loads the entries below its producer snapshot from these files only).

Transactions (Kafka's CleanedTransactionMetadata; KIP-534 for the horizon):

* The cleanable range ends at the last stable offset, so undecided data is never
  touched. Records of aborted transactions are removed regardless of keys (they
  must never replace a committed value).
* A transaction's data batches are its producer's transactional batches between
  the producer's previous marker (or the log start) and the COMMIT/ABORT marker
  that closes it. The cleaner follows each producer through the whole cleaned
  range (clean part and every group: the state is carried from group to group)
  and notes whether any of those batches is written to the cleaned log, counting
  the batches kept empty for producer state or as a group's last batch. Data
  before the range cannot exist: the range starts at the first segment, and what
  retention removed before it is gone, so it counts as not retained. A marker
  whose transaction keeps data in the log stays as it is.
* Once no batch of the transaction is retained, its marker is no longer needed:
  the first cleaning that finds this rewrites it with the delete horizon (now +
  ``delete.retention.ms``, like a tombstone) and a later cleaning at or past the
  horizon drops it. Kafka is one cleaning later: it counts the batches it reads,
  not those it writes. A marker is kept whole after its horizon if it is the
  group's last batch (see 3b) or carries the current epoch of a producer the
  partition tracks without data batches (its fencing epoch, Kafka's third
  "last record of an active producer" case); Kafka empties such a marker, but
  aiokafka and kafka-python reject a control batch without records.
* The cleaned segment's ``.txnindex`` holds exactly the aborted transactions whose
  ABORT marker it contains and whose data it still retains (Kafka's cleaned
  transaction index likewise keeps only the aborted transactions whose marker
  stays because batches of theirs were seen). An entry therefore goes at the same
  cleaning that sets its marker's horizon, always before the marker itself: a
  read_committed fetch is never told about an aborted transaction without the
  marker that ends it, and aborted records are never retained, so no fetch can
  return them. An entry whose marker lies past the cleaned range stays, even if the
  cleaning removed all its data, until its marker's segment is cleaned (as in Kafka):
  harmless, but a replay of the whole log does not recreate it (its marker then ends
  no open transaction).
* Producer state rebuilt from the log stays right: a marker only goes with all
  of its transaction's data, so a replay never sees a transaction opened without
  the marker closing it, and the last data batch of each tracked producer is
  kept (with it, its marker). A producer snapshot taken inside the cleaned range
  could hold a transaction open whose marker a cleaning removed. The snapshot a
  restart loads is the newest, taken at the last roll or shutdown, at or above
  the range's end; in case it were unreadable, a group that drops a marker first
  deletes the snapshots below its end, so a restart falls back to a snapshot that
  does not need the removed markers, or to replaying the log from its start.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from txbroker.protocol.errors import CorruptRecordError
from txbroker.protocol.records import (
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    ControlType,
    Record,
    build_batch,
    compute_crc,
    decode_records,
    iter_batches,
    read_control_type,
    read_header,
)

from .durable_file import fsync_directory, write_durably
from .producer_state import list_snapshots, snapshot_path
from .segment import LogSegment, filename_prefix
from .txn_index import AbortedTxn

if TYPE_CHECKING:  # log.py imports this module for open-time recovery
    from .log import PartitionLog

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
SEGMENT_FILE_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
LONG_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
_READ_CHUNK = 1 << 20
# Renamed in this order: the .txnindex before the .log, whose rename is the commit point.
_WRITTEN = (".index", ".timeindex", ".txnindex", ".log")
_HEADER = struct.Struct(">qiibIhiqqqhii")  # the RecordBatch v2 header, as protocol.records
_INDEX_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


class CleanerError(Exception):
    """A log that cannot be cleaned (corrupt data): it is skipped until restart."""


class _Aborted(Exception):
    pass


# --- crash recovery (PartitionLog.open) ----------------------------------------------


def _stem_offset(name: str) -> int | None:
    stem = name.split(".", 1)[0]
    return int(stem) if stem.isdigit() else None


def _file_next_offset(path: str, base: int) -> int:
    """Offset after the last whole batch of a segment file (``base`` if none)."""
    next_offset = base
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        pos = 0
        while pos + HEADER_SIZE <= size:
            header = read_header(os.pread(f.fileno(), HEADER_SIZE, pos))
            if header.magic != 2 or header.batch_length < HEADER_SIZE - LOG_OVERHEAD or \
                    pos + header.size > size:
                break
            next_offset = header.last_offset + 1
            pos += header.size
    return next_offset


def _now_ms() -> int:
    return int(time.time() * 1000)


def recover_interrupted_cleaning(directory: str) -> None:
    """Finish or undo a cleaning that a crash interrupted (see the module docstring).

    ``*.cleaned`` files were never committed: deleted. A ``<base>.log.swap`` was
    committed: every segment file whose base offset lies in the swap segment's
    range is a replaced segment (deleted), then ``<base>.txnindex.swap`` and the
    swap become ``<base>.txnindex`` and ``<base>.log``. Offset and time index
    ``.swap`` files are deleted; the segment's indexes are rebuilt on load.

    The cleaned ``.txnindex`` cannot be rebuilt from its segment alone (an entry's
    first offset and last stable offset may lie before it), so it travels with the
    ``.log``: its ``.swap`` exists whenever the ``.log.swap`` does, unless the
    swap had already renamed it to ``<base>.txnindex``, which it does only after
    every replaced segment (their ``.txnindex`` files included) is deleted: that
    ``<base>.txnindex`` is then the cleaned one and stays."""
    names = os.listdir(directory)
    committed = {n[: -len(".log" + SWAP_SUFFIX)] for n in names
                 if n.endswith(".log" + SWAP_SUFFIX)}
    changed = False
    for name in names:
        keep = name.endswith(".txnindex" + SWAP_SUFFIX) and \
            name[: -len(".txnindex" + SWAP_SUFFIX)] in committed
        if name.endswith(CLEANED_SUFFIX) or (name.endswith(SWAP_SUFFIX) and not keep and
                                             not name.endswith(".log" + SWAP_SUFFIX)):
            os.unlink(os.path.join(directory, name))
            changed = True
    swaps = sorted(n for n in names if n.endswith(".log" + SWAP_SUFFIX) and _stem_offset(n) is not None)
    for name in swaps:
        base = _stem_offset(name)
        assert base is not None
        swap_path = os.path.join(directory, name)
        prefix = os.path.join(directory, filename_prefix(base))
        txn_swap = prefix + ".txnindex" + SWAP_SUFFIX
        txn_renamed = not os.path.exists(txn_swap)
        end = max(_file_next_offset(swap_path, base), base + 1)
        for other in os.listdir(directory):
            offset = _stem_offset(other)
            if offset is not None and base <= offset < end and other.endswith(SEGMENT_FILE_SUFFIXES):
                if txn_renamed and offset == base and other.endswith(".txnindex"):
                    continue  # the cleaned segment's, renamed into place before the crash
                os.unlink(os.path.join(directory, other))
        if not txn_renamed:
            os.replace(txn_swap, prefix + ".txnindex")
        os.replace(swap_path, prefix + ".log")
        log.warning("%s: completed an interrupted log cleaning swap at offset %d", directory, base)
        changed = True
    if changed:
        fsync_directory(directory)


# --- batches (worker thread) ------------------------------------------------------------


def _read_batches(fd: int, size: int, abort: Callable[[], bool]
                  ) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every batch of a closed segment, CRC-checked; a short or corrupt file is an error
    (the cleaner must never silently drop what it cannot read)."""
    pos = 0
    while pos < size:
        if abort():
            raise _Aborted
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


def _checked(header: BatchHeader, data: memoryview) -> memoryview:
    if header.magic != 2 or compute_crc(data, 0, header.size) != header.crc:
        raise CleanerError(f"corrupt batch at offset {header.base_offset}")
    return data


def _empty_batch(header: BatchHeader) -> bytes:
    """A header-only batch with no records that keeps the original offsets, producer
    id/epoch/base sequence and flags (Kafka's DefaultRecordBatch.writeEmptyHeader)."""
    attributes = header.attributes & (ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL)
    out = bytearray(_HEADER.pack(
        header.base_offset, HEADER_SIZE - LOG_OVERHEAD, header.partition_leader_epoch, 2, 0,
        attributes, header.last_offset_delta, header.max_timestamp, header.max_timestamp,
        header.producer_id, header.producer_epoch, header.base_sequence, 0,
    ))
    _U32.pack_into(out, 17, compute_crc(out, 0, len(out)))
    return bytes(out)


def _rebuild(header: BatchHeader, kept: list[Record], horizon: int | None) -> bytes:
    """Re-encode the kept records of a batch (data or control) with its codec, offsets,
    producer fields and flags."""
    out = bytearray(build_batch(
        kept,
        base_offset=header.base_offset,
        compression=header.compression,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        transactional=header.is_transactional,
        control=header.is_control,
        partition_leader_epoch=header.partition_leader_epoch,
        # With a delete horizon the base timestamp field holds it (KIP-534).
        base_timestamp=header.base_timestamp if horizon is None else horizon,
        offset_deltas=[r.offset - header.base_offset for r in kept],
    ))
    attributes = _I16.unpack_from(out, 21)[0] | (header.attributes & ATTR_TIMESTAMP_TYPE)
    if horizon is not None:
        attributes |= ATTR_DELETE_HORIZON
    _I16.pack_into(out, 21, attributes)
    # lastOffsetDelta stays the original one so the batch's last sequence is unchanged.
    _I32.pack_into(out, 23, header.last_offset_delta)
    _U32.pack_into(out, 17, compute_crc(out, 0, len(out)))
    return bytes(out)


@dataclass
class _FilterContext:
    """What one cleaning knows and learns, carried through all its groups in order."""

    offset_map: dict[bytes, int]
    now: int
    delete_retention_ms: int
    producer_last_offsets: dict[int, int]  # producer id -> last offset of its last data batch
    aborted: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    # Producers the partition tracks without a data batch: id -> epoch (set by a marker
    # that bumped it); their markers of that epoch carry the fencing epoch and stay.
    producer_epochs: dict[int, int] = field(default_factory=dict)
    records_read: int = 0
    records_kept: int = 0
    latest_horizon: int = -1
    # Producers whose current transaction (since their last marker) has a batch written.
    txn_data_kept: set[int] = field(default_factory=set)
    # (producer id, offset) of the ABORT markers kept because their data is: their
    # aborted-transaction entries stay in the cleaned .txnindex.
    kept_aborts: set[tuple[int, int]] = field(default_factory=set)
    markers_removed: int = 0


def _filter_marker(header: BatchHeader, data: memoryview, ctx: _FilterContext,
                   must_retain: bool) -> bytes | memoryview | None:
    """A COMMIT/ABORT marker stays while its transaction has data in the log; then it
    gets a delete horizon, and once that has passed it goes (module docstring)."""
    pid = header.producer_id
    had_data = pid in ctx.txn_data_kept
    ctx.txn_data_kept.discard(pid)
    try:
        control = read_control_type(data)
    except ValueError:  # a control type other than COMMIT/ABORT: not ours to remove
        return data
    if control is not None and had_data:
        if control == ControlType.ABORT:
            ctx.kept_aborts.add((pid, header.last_offset))
        return data
    # No data of its transaction is left (or an empty control batch: nothing to end).
    keep = must_retain or ctx.producer_epochs.get(pid) == header.producer_epoch
    has_horizon = bool(header.attributes & ATTR_DELETE_HORIZON)
    if control is None or (has_horizon and ctx.now >= header.base_timestamp):
        if keep:
            return data  # whole: some clients reject a control batch without records
        ctx.markers_removed += 1
        return None
    if has_horizon:
        ctx.latest_horizon = max(ctx.latest_horizon, header.base_timestamp)
        return data
    horizon = min(ctx.now + ctx.delete_retention_ms, LONG_MAX)
    ctx.latest_horizon = max(ctx.latest_horizon, horizon)
    return _rebuild(header, decode_records(data), horizon)


def _filter_batch(header: BatchHeader, data: memoryview, ctx: _FilterContext,
                  must_retain: bool) -> bytes | memoryview | None:
    """The bytes to write for one batch, or None to drop it."""
    if header.is_control:
        return _filter_marker(header, data, ctx, must_retain)
    kept = _filter_data(header, data, ctx, must_retain)
    if kept is not None and header.is_transactional:
        ctx.txn_data_kept.add(header.producer_id)
    return kept


def _filter_data(header: BatchHeader, data: memoryview, ctx: _FilterContext,
                 must_retain: bool) -> bytes | memoryview | None:
    records = decode_records(data)
    ctx.records_read += len(records)
    if _in_aborted_txn(header, ctx.aborted):
        # Records of aborted transactions go regardless of keys: they never count as a
        # key's latest value (otherwise they would erase the committed one).
        last_of_producer = ctx.producer_last_offsets.get(header.producer_id) == header.last_offset
        if not (must_retain or last_of_producer):
            return None
        return _empty_batch(header) if records else data
    has_horizon = bool(header.attributes & ATTR_DELETE_HORIZON)
    kept: list[Record] = []
    tombstones = False
    for rec in records:
        if rec.key is None:
            continue  # compacted topics cannot hold keyless records (Kafka drops them too)
        if rec.offset < ctx.offset_map.get(rec.key, -1):
            continue  # a later record of this key exists
        if rec.value is None:
            if has_horizon and ctx.now >= header.base_timestamp:
                continue  # the tombstone's delete horizon has passed
            tombstones = True
        kept.append(rec)
    ctx.records_kept += len(kept)
    horizon: int | None = header.base_timestamp if has_horizon else None
    if horizon is None and tombstones:
        horizon = min(ctx.now + ctx.delete_retention_ms, LONG_MAX)
    if horizon is not None and tombstones:
        ctx.latest_horizon = max(ctx.latest_horizon, horizon)
    if not kept:  # also a batch left empty by an earlier cleaning
        last_of_producer = header.producer_id >= 0 and \
            ctx.producer_last_offsets.get(header.producer_id) == header.last_offset
        if not (must_retain or last_of_producer):
            return None
        return data if not records else _empty_batch(header)
    if len(kept) == len(records) and (has_horizon or not tombstones):
        return data  # nothing to change: the original bytes
    return _rebuild(header, kept, horizon)


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


# --- planning (event loop) ---------------------------------------------------------


@dataclass
class _Source:
    segment: LogSegment
    fd: int  # a duplicate: stays valid if the segment is closed meanwhile
    size: int
    end_offset: int  # base offset of the next segment


@dataclass
class _Job:
    plog: PartitionLog
    sources: list[_Source]
    groups: list[list[_Source]]
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
class _GroupOutput:
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
class _Cleanable:
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


def _group_segments(segments: list[LogSegment], ends: list[int], max_bytes: int,
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


# --- the cleaner -----------------------------------------------------------------


class LogCleaner:
    """Compacts partition logs in the background, one at a time, filthiest first.

    ``run(logs_provider)`` is the background loop (started by LogManager.start);
    ``clean_log`` (synchronous) and ``compact_now`` (async, work in a thread) clean
    one log on demand, whatever its dirty ratio."""

    def __init__(self, checkpoint_path: str | None = None, *, backoff_ms: int = 15_000) -> None:
        self.checkpoint_path = checkpoint_path
        self.backoff_ms = backoff_ms
        self._checkpoints: dict[tuple[str, int], int] = {}
        self._loaded = False
        self._owners: dict[tuple[str, int], PartitionLog] = {}
        self._horizons: dict[tuple[str, int], int] = {}  # latest tombstone delete horizon
        self.uncleanable: set[str] = set()
        self._executor: ThreadPoolExecutor | None = None
        self._abort = threading.Event()
        self._stopping = False
        self._current: asyncio.Future | None = None
        self._busy: set[PartitionLog] = set()  # one cleaning per log: they share file names
        self.cleanings = 0

    # --- checkpoints ---------------------------------------------------------------

    def _load_checkpoints(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        if self.checkpoint_path is None:
            return
        try:
            with open(self.checkpoint_path) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return
        try:
            for line in lines[2:]:
                topic, partition, offset = line.rsplit(" ", 2)
                self._checkpoints[(topic, int(partition))] = int(offset)
        except ValueError:
            log.warning("ignoring malformed cleaner checkpoint file %s", self.checkpoint_path)
            self._checkpoints = {}

    def adopt(self, logs: Iterable[PartitionLog]) -> None:
        """Take the persisted checkpoints for these logs (those open at start). A log
        first seen later (a new topic, maybe reusing a deleted one's name) starts clean."""
        self._load_checkpoints()
        for plog in logs:
            self._owners.setdefault((plog.topic, plog.partition), plog)

    def checkpoint(self, plog: PartitionLog) -> int:
        """The offset below which ``plog`` has been cleaned (its first dirty offset)."""
        self._load_checkpoints()
        key = (plog.topic, plog.partition)
        if self._owners.get(key) is not plog:
            self._owners[key] = plog
            self._checkpoints.pop(key, None)
            self._horizons.pop(key, None)
            self.uncleanable.discard(plog.name)
        offset = self._checkpoints.get(key, plog.log_start_offset)
        if offset < plog.log_start_offset or offset > plog.log_end_offset:
            offset = plog.log_start_offset  # stale (retention or truncation): start over
        return offset

    def _checkpoint_text(self) -> str:
        rows = [(k, v) for k, v in sorted(self._checkpoints.items())
                if k in self._owners and not self._owners[k].closed]
        return f"0\n{len(rows)}\n" + "".join(f"{t} {p} {o}\n" for (t, p), o in rows)

    def _write_checkpoint_file(self, text: str) -> None:
        if self.checkpoint_path is None:
            return
        write_durably(self.checkpoint_path, text.encode())

    # --- choosing ----------------------------------------------------------------------

    def cleanable(self, plog: PartitionLog, now: int) -> _Cleanable | None:
        """The cleanable range of ``plog`` and its dirtiness; None if nothing is cleanable."""
        if "compact" not in plog.config.cleanup_policy or plog.closed:
            return None
        segs = plog.segments
        limit = min(plog.last_stable_offset, plog.high_watermark)
        lag = plog.config.min_compaction_lag_ms
        chosen: list[LogSegment] = []
        for k, seg in enumerate(segs[:-1]):
            if segs[k + 1].base_offset > limit:
                break  # not all of it is decided and durable yet
            if lag > 0 and seg.max_timestamp > now - lag:
                break  # holds records younger than min.compaction.lag.ms
            chosen.append(seg)
        if not chosen:
            return None
        first_dirty = self.checkpoint(plog)
        clean_bytes = dirty_bytes = 0
        needs_now = False
        max_lag = plog.config.max_compaction_lag_ms
        for k, seg in enumerate(chosen):
            if segs[k + 1].base_offset <= first_dirty:
                clean_bytes += seg.size
            else:
                dirty_bytes += seg.size
                ts = seg.first_batch_timestamp
                if seg.size and ts is not None and ts >= 0 and now - ts > max_lag:
                    needs_now = True
        return _Cleanable(plog, chosen, segs[len(chosen)].base_offset, first_dirty,
                          clean_bytes, dirty_bytes, needs_now)

    def _eligible(self, c: _Cleanable, now: int) -> bool:
        if c.dirty_bytes > 0 and (c.needs_now or c.ratio >= c.plog.config.min_cleanable_dirty_ratio):
            return True
        # Nothing dirty enough: still clean if tombstones' delete horizons have passed.
        horizon = self._horizons.get((c.plog.topic, c.plog.partition), -1)
        return 0 <= horizon <= now

    def filthiest(self, logs: Iterable[PartitionLog], now: int) -> _Cleanable | None:
        """The eligible log with the highest dirty ratio (Kafka's grabFilthiestCompactedLog)."""
        best: _Cleanable | None = None
        for plog in logs:
            if plog.name in self.uncleanable and self._owners.get((plog.topic, plog.partition)) is plog:
                continue
            c = self.cleanable(plog, now)
            if c is not None and self._eligible(c, now) and (best is None or c.ratio > best.ratio):
                best = c
        return best

    # --- cleaning --------------------------------------------------------------------

    def _job(self, c: _Cleanable, now: int) -> _Job:
        plog = c.plog
        segs = plog.segments
        sources = []
        try:
            for k, seg in enumerate(c.segments):
                sources.append(_Source(seg, os.dup(seg.fd), seg.size, segs[k + 1].base_offset))
        except OSError:
            for s in sources:
                os.close(s.fd)
            raise
        groups = _group_segments(c.segments, [s.end_offset for s in sources],
                                 plog.config.segment_bytes, plog.config.segment_index_bytes)
        tracked = plog.producer_state.producers
        producers = {pid: e.batches[-1].last_offset for pid, e in tracked.items() if e.batches}
        epochs = {pid: e.epoch for pid, e in tracked.items() if not e.batches}
        cancelled = threading.Event()
        aborted: dict[int, list[tuple[int, int]]] = {}
        entries = list(plog.aborted.entries)  # snapshot on the loop for the worker thread
        for entry in entries:
            aborted.setdefault(entry.producer_id, []).append((entry.first_offset,
                                                              entry.last_offset))
        return _Job(plog, sources, [[sources[i] for i in g] for g in groups], c.first_dirty,
                    c.end_offset, now, plog.config.delete_retention_ms,
                    plog.config.index_interval_bytes, producers,
                    lambda: self._abort.is_set() or cancelled.is_set() or plog.closed, cancelled,
                    aborted, entries, epochs)

    def _steps(self, job: _Job, stats: CleanStats) -> Generator[Callable[[], object], object, None]:
        """The cleaning as a sequence: each yielded callable is worker-thread work whose
        result is sent back; the code between yields runs on the caller (event loop)."""
        ctx = yield functools.partial(_build_offset_map, job)
        assert isinstance(ctx, _FilterContext)
        plog = job.plog
        for group in job.groups:
            out = yield functools.partial(_write_group, job, group, ctx)
            assert isinstance(out, _GroupOutput)
            if self._stopping or not self._swap(plog, group, out):
                _discard(out.prefix)
                stats.completed = False
                break
            stats.bytes_after += out.size
        stats.records_read, stats.records_kept = ctx.records_read, ctx.records_kept
        stats.segments_after = len(job.groups) if stats.completed else stats.segments_before
        key = (plog.topic, plog.partition)
        if stats.completed:
            self._checkpoints[key] = job.end_offset
            self._horizons[key] = ctx.latest_horizon
        text = self._checkpoint_text()
        yield functools.partial(self._finish_io, plog.directory, text)

    def _finish_io(self, directory: str, checkpoint_text: str) -> None:
        with contextlib.suppress(FileNotFoundError):  # the topic may be gone
            fsync_directory(directory)
        self._write_checkpoint_file(checkpoint_text)

    def _swap(self, plog: PartitionLog, group: list[_Source], out: _GroupOutput) -> bool:
        """Replace the group's segments by the cleaned one (event loop; metadata only)."""
        old = [s.segment for s in group]
        segs = plog.segments
        try:
            i = next(k for k, s in enumerate(segs) if s is old[0])
        except StopIteration:
            return False  # retention or a topic deletion got there first
        if plog.closed or i + len(old) >= len(segs) or \
                any(a is not b for a, b in zip(segs[i : i + len(old)], old, strict=True)):
            return False
        prefix = out.prefix
        # The cleaned .txnindex is renamed with the .log (before it, both times), so at
        # any crash point the segment files on disk and their aborted-transaction
        # entries match (recover_interrupted_cleaning finishes the renames).
        for ext in _WRITTEN:  # commit point: the .log.swap rename
            os.replace(prefix + ext + CLEANED_SUFFIX, prefix + ext + SWAP_SUFFIX)
        for seg in old:
            if seg in plog.pending_sync:
                plog.pending_sync.remove(seg)
            seg.delete()
        for ext in _WRITTEN:
            os.replace(prefix + ext + SWAP_SUFFIX, prefix + ext)
        if not out.txn_entries:  # as rewrite_txn_indexes leaves it: no file, no entries
            os.unlink(prefix + ".txnindex")
        new = LogSegment(plog.directory, out.base_offset, plog.config.index_interval_bytes)
        new.load()
        new.release_file()  # never the active segment: its .log is reopened when read
        segs[i : i + len(old)] = [new]
        plog.aborted.replace_range(out.txn_low, out.end_offset, out.txn_entries)
        return True

    def _start(self, plog: PartitionLog, now: int | None) -> tuple[_Job, CleanStats] | None:
        if plog in self._busy:
            raise RuntimeError(f"{plog.name} is being cleaned already")
        now = _now_ms() if now is None else now
        c = self.cleanable(plog, now)
        if c is None:
            return None
        job = self._job(c, now)
        self._busy.add(plog)
        stats = CleanStats(plog.name, c.first_dirty, c.end_offset, len(c.segments), 0,
                           sum(s.size for s in job.sources), 0, 0, 0)
        return job, stats

    def _done(self, job: _Job, stats: CleanStats, failed: BaseException | None) -> None:
        for s in job.sources:
            os.close(s.fd)
        for group in job.groups:
            _discard(_group_prefix(job, group))
        self._busy.discard(job.plog)
        if isinstance(failed, Exception) and not isinstance(failed, _Aborted):
            self.uncleanable.add(job.plog.name)
            log.error("%s: log cleaning failed, the log is skipped until restart: %s",
                      job.plog.name, failed)
        elif failed is None and not stats.completed:
            log.info("%s: log cleaning given up: the log changed meanwhile", stats.log)
        elif failed is None:
            self.cleanings += 1
            log.info("%s: cleaned up to offset %d (dirty from %d): %d -> %d segment(s), "
                     "%d -> %d bytes, kept %d of %d records", stats.log, stats.end_offset,
                     stats.first_dirty, stats.segments_before, stats.segments_after,
                     stats.bytes_before, stats.bytes_after, stats.records_kept,
                     stats.records_read)

    def clean_log(self, plog: PartitionLog, now: int | None = None) -> CleanStats | None:
        """Clean ``plog`` now, synchronously, whatever its dirty ratio (for tests and tools).
        Returns None if it has nothing cleanable or is not compacted."""
        started = self._start(plog, now)
        if started is None:
            return None
        job, stats = started
        failed: BaseException | None = None
        try:
            steps = self._steps(job, stats)
            result: object = None
            with contextlib.suppress(StopIteration):
                while True:
                    result = steps.send(result)()
        except BaseException as e:
            failed = e
            raise
        finally:
            self._done(job, stats, failed)
        return stats

    async def compact_now(self, plog: PartitionLog, now: int | None = None) -> CleanStats | None:
        """Clean ``plog`` now, its heavy work in the cleaner thread, whatever its dirty ratio."""
        while plog in self._busy and not self._stopping:
            await asyncio.sleep(0.01)
        if self._stopping:
            return None
        started = self._start(plog, now)
        if started is None:
            return None
        job, stats = started
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="txbroker-cleaner")
        loop = asyncio.get_running_loop()
        failed: BaseException | None = None
        try:
            steps = self._steps(job, stats)
            result: object = None
            with contextlib.suppress(StopIteration):
                while True:
                    work = steps.send(result)
                    self._current = loop.run_in_executor(self._executor, work)
                    # Shielded: a cancellation must not mark the thread's work done early.
                    result = await asyncio.shield(self._current)
        except BaseException as e:
            failed = e
            if isinstance(e, _Aborted):
                return None
            raise
        finally:
            current, self._current = self._current, None
            if current is not None and not current.done():
                # Cancelled while the thread works: stop it, and close its fds only
                # once it has finished with them.
                job.cancelled.set()
                current.add_done_callback(lambda _f: self._done(job, stats, _Aborted()))
            else:
                self._done(job, stats, failed)
        return stats

    # --- background loop -------------------------------------------------------------------

    async def run(self, logs_provider: Callable[[], Iterable[PartitionLog]]) -> None:
        """Clean the filthiest eligible log, again at once if one was cleaned, else after
        ``log.cleaner.backoff.ms``."""
        self.adopt(logs_provider())
        while not self._stopping:
            cleaned = False
            try:
                best = self.filthiest(logs_provider(), _now_ms())
                if best is not None:
                    stats = await self.compact_now(best.plog)
                    cleaned = stats is not None and stats.completed
            except CleanerError:
                pass  # logged, and the log is marked uncleanable
            except Exception:
                log.exception("log cleaner round failed")
            await asyncio.sleep(0 if cleaned else self.backoff_ms / 1000)

    async def stop(self) -> None:
        """Abort a cleaning in progress (its files are discarded) and stop the thread."""
        self._stopping = True
        self._abort.set()
        current = self._current
        if current is not None:
            with contextlib.suppress(BaseException):
                await current
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


# --- worker-thread steps -----------------------------------------------------------------


def _group_prefix(job: _Job, group: list[_Source]) -> str:
    return os.path.join(job.plog.directory, filename_prefix(group[0].segment.base_offset))


def _discard(prefix: str) -> None:
    for ext in _WRITTEN:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(prefix + ext + CLEANED_SUFFIX)


def _build_offset_map(job: _Job) -> _FilterContext:
    """key -> offset of its latest record in the dirty part of the cleanable range."""
    offset_map: dict[bytes, int] = {}
    for src in job.sources:
        if src.end_offset <= job.first_dirty:
            continue  # clean already: its keys are unique and older than the dirty ones
        for header, data in _read_batches(src.fd, src.size, job.abort):
            if header.is_control or _in_aborted_txn(header, job.aborted):
                continue
            try:
                records = decode_records(_checked(header, data))
            except CorruptRecordError as e:
                raise CleanerError(f"offset {header.base_offset}: {e}") from None
            for rec in records:
                if rec.key is not None:
                    offset_map[rec.key] = rec.offset
    return _FilterContext(offset_map, job.now, job.delete_retention_ms, job.producer_last_offsets,
                          job.aborted, job.producer_epochs)


def _in_aborted_txn(header: BatchHeader, aborted: dict[int, list[tuple[int, int]]]) -> bool:
    """A transactional data batch inside one of its producer's aborted transactions."""
    if not header.is_transactional or header.is_control:
        return False
    return any(first <= header.base_offset <= last
               for first, last in aborted.get(header.producer_id, ()))


def _group_batches(job: _Job, group: list[_Source]
                   ) -> Iterator[tuple[BatchHeader, memoryview, bool]]:
    """(header, bytes, is_last_of_group) for every batch of the group's segments."""
    pending: tuple[BatchHeader, memoryview] | None = None
    for src in group:
        for header, data in _read_batches(src.fd, src.size, job.abort):
            if pending is not None:
                yield pending[0], pending[1], False
            pending = (header, data)
    if pending is not None:
        yield pending[0], pending[1], True


def _group_txn_entries(job: _Job, group: list[_Source], ctx: _FilterContext
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


def _write_group(job: _Job, group: list[_Source], ctx: _FilterContext) -> _GroupOutput:
    """Write the cleaned segment of one group as ``<base>.*.cleaned`` files, fsynced."""
    base = group[0].segment.base_offset
    prefix = _group_prefix(job, group)
    index = _IndexWriter(base, job.index_interval)
    position = 0
    markers_removed = ctx.markers_removed
    try:
        with open(prefix + ".log" + CLEANED_SUFFIX, "wb") as out:
            for header, data, last in _group_batches(job, group):
                try:
                    kept = _filter_batch(header, _checked(header, data), ctx, last)
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
        _discard(prefix)
        raise
    return _GroupOutput(base, prefix, position, low, end, entries)


__all__ = [
    "CLEANER_CHECKPOINT_FILE",
    "CleanStats",
    "CleanerError",
    "LogCleaner",
    "recover_interrupted_cleaning",
]
