"""A partition's log: ordered segments, offsets, high watermark, roll and retention.

Offsets: ``log_start_offset`` <= ``high_watermark`` <= ``log_end_offset``.
With ``flush.messages=1`` (the default) the high watermark is the flushed
offset: consumers only ever see data that survives a crash, the single-broker
analogue of Kafka's "replicated to the ISR". Otherwise it follows the log end.

Who may touch what: a ``PartitionLog`` owns its segments, offsets, producer state
(``producer_state``) and open transactions (``ongoing_txns``). The broker's handlers, the
console and the coordinators ask through the public methods (``append``, ``read``,
``has_ongoing_transaction``, ``ongoing_transaction_start``, ``open_transactions``,
``producers``...); the flusher reports a round with ``flushed``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from txbroker.protocol.errors import (
    ErrorCode,
    InvalidTimestampError,
    KafkaError,
    RecordTooLargeError,
)
from txbroker.protocol.records import (
    BASE_OFFSET,
    NO_TIMESTAMP,
    BatchHeader,
    ControlType,
    RecordsSummary,
    build_end_txn_marker,
    decode_records,
    read_end_txn_marker,
    set_base_offset,
    set_log_append_time,
)

from .cleaner_recovery import recover_interrupted_cleaning
from .durable_file import drop_unsynced_entries, fsync_directory, unsynced_entries
from .log_config import LogConfig
from .producer_state import (
    ProducerEntry,
    ProducerStateManager,
    load_latest_snapshot,
    write_snapshot,
)
from .segment import LogSegment, ReadResult
from .torn import tear_file, tear_small_file
from .txn_index import AbortedTxn, AbortedTxnIndex, read_txnindex, txnindex_path, write_txnindex

log = logging.getLogger(__name__)


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    duplicate: bool = False  # a retried idempotent batch: nothing was appended


# A produced batch (bytes) below this is copied to set its base offset: under load a
# pwritev of two buffers cost 10 us where the copy and one pwrite cost 5 (cProfile of
# the 4 x 10 transaction load); above it the copy costs more (45 us per MiB).
COPY_BELOW = 64 * 1024


class LogOfflineError(KafkaError, OSError):
    """A partition taken offline by a failed fsync (Kafka's KafkaStorageException for a
    log directory it took offline). A KafkaError with KAFKA_STORAGE_ERROR for handlers,
    and an OSError too, so that every caller that already treats a disk error as a
    storage error (the coordinators' appends and durable waits) treats this one alike."""

    code = ErrorCode.kafka_storage_error

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorCode.kafka_storage_error)


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """A producer's open transaction in one partition (epoch, coordinator epoch and
    last timestamp are -1 when the producer's state has expired)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    first_offset: int
    last_timestamp: int


class PartitionLog:
    def __init__(self, topic: str, partition: int, directory: str, config: LogConfig) -> None:
        self.topic = topic
        self.partition = partition
        self.directory = directory
        self.config = config
        self.segments: list[LogSegment] = []
        self.log_start_offset = 0
        self.high_watermark = 0
        self.flushed_offset = 0  # everything below is fsynced
        self.recovery_point = 0  # persisted flushed offset (checkpoint)
        self.unflushed_messages = 0
        self.bytes_since_snapshot = 0  # appended since the last producer-state snapshot
        self.last_flush_ms = now_ms()
        self._waiters: set[asyncio.Future] = set()
        self.pending_sync: list[LogSegment] = []  # rolled segments not yet fsynced
        self.directory_dirty = True
        self.on_append: Callable[[PartitionLog], None] | None = None
        self.producer_state = ProducerStateManager(f"{topic}-{partition}")
        # Transactions: first offset of each producer's open transaction here, and
        # the aborted ones (mirrored in the segments' .txnindex files).
        self.ongoing_txns: dict[int, int] = {}
        # Transactions whose marker is appended but not yet below the high watermark:
        # (first offset, marker offset), in marker order. Kafka keeps such a transaction
        # unstable until its marker is replicated, so the LSO never passes a marker the
        # high watermark has not; here "replicated" is "fsynced" (the high watermark).
        self.unstable_completed: deque[tuple[int, int]] = deque()
        self.aborted = AbortedTxnIndex()
        self._txnindex_dirty = False
        self.closed = False
        # The failed fsync that took this log offline (take_offline), else None: it then
        # refuses appends and reads until the broker restarts.
        self.offline: OSError | None = None

    # --- opening and recovery ---------------------------------------------------

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def open(self, *, log_start_offset: int = 0, recovery_point: int | None = None,
             clean: bool = False) -> None:
        """Load segments. Unless the last shutdown was clean, every segment holding
        offsets at or above the recovery point is validated and a torn tail cut."""
        os.makedirs(self.directory, exist_ok=True)
        recover_interrupted_cleaning(self.directory)  # before segments are listed
        bases = sorted(
            int(name[:-4])
            for name in os.listdir(self.directory)
            if name.endswith(".log") and name[:-4].isdigit()
        )
        for name in os.listdir(self.directory):
            if name.endswith((".index", ".timeindex")):
                stem = name.split(".")[0]
                if stem.isdigit() and int(stem) not in bases:
                    os.unlink(os.path.join(self.directory, name))  # index of a deleted segment
        segments = [LogSegment(self.directory, b, self.config.index_interval_bytes) for b in bases]
        rp = recovery_point if recovery_point is not None else 0
        first_unflushed = len(segments)  # segments from here on may hold unsynced data
        for i, seg in enumerate(segments):
            is_last = i == len(segments) - 1
            next_base = segments[i + 1].base_offset if not is_last else None
            needs_recovery = (not clean) and (next_base is None or next_base > rp)
            if needs_recovery or (is_last and not clean):
                first_unflushed = min(first_unflushed, i)
                # Kafka recovers from the recovery point: the segment holding it only
                # from there (its part below was fsynced), later ones whole.
                truncated = seg.recover_from(rp) if seg.base_offset < rp else seg.recover()
                # A torn power loss can keep a later segment's pages and lose this one's
                # unsynced tail whole (the file ends at a page): a hole the CRC does not
                # see. Without compaction offsets are contiguous across segments.
                hole = next_base is not None and seg.next_offset < next_base and \
                    "compact" not in self.config.cleanup_policy
                if (truncated or hole) and not is_last:
                    # Corruption in the middle: drop everything after it (Kafka does too).
                    for later in segments[i + 1 :]:
                        log.warning("%s: deleting segment %s after corrupt data", self.name,
                                    later.log_path)
                        later.delete()
                    segments = segments[: i + 1]
                    break
            else:
                seg.load()
        # Empty trailing segments other than the only one are useless.
        while len(segments) > 1 and segments[-1].size == 0 and \
                segments[-2].next_offset < segments[-1].base_offset:
            segments.pop().delete()
        if not segments:
            segments = [LogSegment(self.directory, log_start_offset,
                                   self.config.index_interval_bytes, create=True)]
            segments[0].recover()
        self.segments = segments
        self.log_start_offset = max(log_start_offset, segments[0].base_offset)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self._load_producer_state()
        # After recovery everything on disk is treated as durable: fsync what may not
        # be yet (segments below the recovery point were fsynced before it was written).
        for seg in segments[min(first_unflushed, len(segments) - 1):]:
            os.fsync(seg.fd)
        if not clean:
            # And their directory entries: a segment created just before the crash may
            # never have had its entry fsynced (a power loss later would remove it).
            fsync_directory(self.directory)
        for seg in segments[:-1]:
            seg.release_file()  # rolled: its .log is reopened when read
        self.flushed_offset = self.log_end_offset
        # What the checkpoint file says: the next checkpoint moves it to the flushed
        # offset (LogManager writes it soon after a flush round).
        self.recovery_point = self.flushed_offset if clean else min(rp, self.flushed_offset)
        self.high_watermark = self.log_end_offset
        self.unstable_completed.clear()  # every marker replayed is below it

    def _load_producer_state(self) -> None:
        """Newest snapshot at or below the log end, then replay the batches after it.
        Aborted transactions come from the .txnindex files below the snapshot offset
        and from the replayed markers above it."""
        state, start = load_latest_snapshot(self.directory, self.log_end_offset, self.name)
        self.aborted = AbortedTxnIndex()
        for seg in self.segments:
            for entry in read_txnindex(txnindex_path(self.directory, seg.base_offset)):
                if entry.last_offset < start and entry.last_offset >= self.log_start_offset:
                    self.aborted.add(entry)
        self.ongoing_txns = {pid: e.current_txn_first_offset for pid, e in state.producers.items()
                             if e.current_txn_first_offset >= 0}
        self.producer_state = state
        replayed = 0
        for seg in self.segments:
            if seg.next_offset <= start or seg.size == 0:
                continue
            found = seg.position_of(start) if start > seg.base_offset else (0, None)
            if found is None:
                continue
            for pos, header in seg.batches(found[0]):
                if header.base_offset >= start:
                    marker = None
                    if header.is_control and header.producer_id >= 0:
                        marker = read_end_txn_marker(seg.read_batch(pos, header.size))
                    self._track_transaction(header, marker)
                    state.update(header, None if marker is None else marker[1])
                    replayed += 1
        self.rewrite_txn_indexes()
        if replayed:
            log.debug("%s: producer state rebuilt from offset %d (%d batches)", self.name,
                      start, replayed)

    def write_producer_snapshot(self) -> None:
        # Aborted-transaction entries below the snapshot offset are no longer rebuilt
        # by replay: make their files durable first.
        if self._txnindex_dirty:
            self.rewrite_txn_indexes()
        write_snapshot(self.directory, self.producer_state, self.log_end_offset)
        self.bytes_since_snapshot = 0

    def producer_snapshot_data(self) -> tuple[int, bytes]:
        """(offset, encoded snapshot) of the producer state now, for writing elsewhere
        (``write_snapshot_data``, off the event loop); the .txnindex files it relies on
        are written first."""
        if self._txnindex_dirty:
            self.rewrite_txn_indexes()
        self.bytes_since_snapshot = 0
        return self.log_end_offset, self.producer_state.encode(self.log_end_offset)

    def recovery_index_paths(self, recovery_point: int) -> list[str]:
        """Write the index entries of the segment holding ``recovery_point`` (the part
        below it: an unclean start trusts them, see ``LogSegment.recover_from``) and
        return the files to fsync before a checkpoint names that recovery point (the
        directory too while it has entries not yet durable)."""
        seg = self.segments[self._segment_index_for(recovery_point)]
        if seg.closed or seg.base_offset >= recovery_point or not seg.size:
            return []
        seg.write_indexes()
        paths = [seg.index_path, seg.timeindex_path]
        if unsynced_entries(self.directory):  # e.g. the index files were just created
            paths.append(self.directory)
        return paths

    def _track_transaction(self, header: BatchHeader,
                           marker: tuple[ControlType, int] | None) -> None:
        """Keep ongoing/aborted transactions in step with a batch being appended or
        replayed (before producer_state.update, which forgets the first offset);
        ``marker``: (type, coordinator epoch) of a control batch."""
        pid = header.producer_id
        if header.is_control:
            first = self.ongoing_txns.pop(pid, None)
            if first is None:
                return
            if header.last_offset >= self.high_watermark:
                self.unstable_completed.append((first, header.last_offset))
            if marker is not None and marker[0] == ControlType.ABORT:
                lso = min(self.ongoing_txns.values(), default=header.last_offset + 1)
                self.aborted.add(AbortedTxn(header.last_offset, pid, first, lso))
                self._txnindex_dirty = True
        elif header.is_transactional and pid not in self.ongoing_txns:
            self.ongoing_txns[pid] = header.base_offset

    # --- the producers and their open transactions (front doors for the broker and the
    # coordinators: ``producer_state`` and ``ongoing_txns`` are this log's) -------------

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Kafka's ``hasOngoingTransaction(pid, epoch)``: the producer's transaction is
        open here, opened by this epoch (a newer epoch is the producer's next
        transaction, which its coordinator must vouch for)."""
        if producer_id not in self.ongoing_txns:
            return False
        entry = self.producer_state.producers.get(producer_id)
        return entry is not None and entry.epoch == producer_epoch

    def ongoing_transaction_start(self, producer_id: int) -> int | None:
        """The offset of the first batch of the producer's open transaction here, or None."""
        return self.ongoing_txns.get(producer_id)

    def ongoing_transaction_count(self) -> int:
        return len(self.ongoing_txns)

    def open_transactions(self) -> list[OpenTransaction]:
        """Every open transaction here with what the log knows of its producer (a copy:
        the caller may await while it reads)."""
        out = []
        for pid, first in list(self.ongoing_txns.items()):
            entry = self.producer_state.producers.get(pid)
            if entry is None:
                out.append(OpenTransaction(pid, -1, -1, first, -1))
            else:
                out.append(OpenTransaction(pid, entry.epoch, entry.coordinator_epoch, first,
                                           entry.last_timestamp))
        return out

    def producers(self) -> list[ProducerEntry]:
        """The producers this partition knows, by producer id (DescribeProducers)."""
        return sorted(self.producer_state.producers.values(), key=lambda e: e.producer_id)

    def max_coordinator_epoch(self) -> int:
        """The largest coordinator epoch of a marker written here (-1: none)."""
        return max((e.coordinator_epoch for e in list(self.producer_state.producers.values())),
                   default=-1)

    def rewrite_txn_indexes(self) -> None:
        """Write each segment's .txnindex from the in-memory aborted transactions."""
        bases = [s.base_offset for s in self.segments]
        by_segment: dict[int, list[AbortedTxn]] = {b: [] for b in bases}
        for entry in self.aborted.entries:
            i = max(0, self._segment_index_for(entry.last_offset))
            by_segment[bases[i]].append(entry)
        changed = False
        for base, entries in by_segment.items():
            path = txnindex_path(self.directory, base)
            if entries:
                write_txnindex(path, entries, sync_directory=False)
                changed = True
            elif os.path.exists(path):
                os.unlink(path)
                changed = True
        if changed:  # the renames (and removals) must survive a power failure too
            fsync_directory(self.directory)
        self._txnindex_dirty = False

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [start, end), for read_committed fetches."""
        return self.aborted.overlapping(start, end)

    @property
    def active_segment(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active_segment.next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def last_stable_offset(self) -> int:
        """First offset of the oldest open transaction, else the high watermark; never
        below the log start offset (DeleteRecords may pass an open transaction)."""
        if self.ongoing_txns or self.unstable_completed:
            first = min(min(self.ongoing_txns.values(), default=self.high_watermark),
                        min((f for f, _ in self.unstable_completed), default=self.high_watermark))
            return min(max(first, self.log_start_offset), self.high_watermark)
        return self.high_watermark

    # --- appending --------------------------------------------------------------

    def check_size(self, header: BatchHeader) -> None:
        """max.message.bytes, checked before the records are looked at (as Kafka)."""
        if header.size > self.config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {header.size} bytes exceeds max.message.bytes "
                f"{self.config.max_message_bytes} of {self.name}"
            )

    def check_batch(self, header: BatchHeader, now: int,
                    records: RecordsSummary | None = None) -> None:
        """Topic-level checks Kafka's LogValidator makes before anything is written:
        the size, then every record timestamp other than -1 within
        message.timestamp.before/after.max.ms of ``now`` (CreateTime topics). Without
        ``records`` (the batch's validated records) the header's max timestamp
        stands for them."""
        self.check_size(header)
        create_time = self.config.message_timestamp_type == "CreateTime"
        if header.log_append_time:
            # Kafka: a record of a LogAppendTime batch carries the batch's max
            # timestamp; the producer may not ask for LogAppendTime itself.
            if not create_time or header.max_timestamp == NO_TIMESTAMP:
                raise InvalidTimestampError(
                    f"producer set timestamp type LogAppendTime in a batch for {self.name}")
            lowest = highest = header.max_timestamp
        elif records is None:
            lowest = highest = header.max_timestamp
            if lowest == NO_TIMESTAMP:
                lowest = None
        else:
            lowest, highest = records.min_timestamp, records.max_timestamp
        if not create_time:
            return
        if (lowest is not None and now - lowest > self.config.timestamp_before_max_ms) or \
                highest - now > self.config.timestamp_after_max_ms:
            raise InvalidTimestampError(
                f"a record timestamp in [{lowest}, {highest}] is out of the accepted range "
                f"[{now - self.config.timestamp_before_max_ms}, "
                f"{now + self.config.timestamp_after_max_ms}] of {self.name}"
            )

    def append(self, batch: bytes | bytearray, header: BatchHeader, *, now: int | None = None,
               flush: bool = True, transaction_version: int = 0,
               marker: tuple[ControlType, int] | None = None) -> AppendResult:
        """Assign offsets to one validated batch and write it. Synchronous: the
        write goes to the page cache; the flusher makes it durable. With
        ``flush=False`` the flusher is not told: the batch becomes durable with the
        next fsync of this log (a later append, flush.ms, a roll or shutdown), for
        records whose loss in a crash is repaired on recovery. ``marker``: (type,
        coordinator epoch) of an end-transaction marker the caller built, so it is not
        read back from the batch."""
        if self.closed:
            raise KafkaError(f"{self.name} is closed", code=ErrorCode.not_leader_or_follower)
        if self.offline is not None:
            raise self.offline_error()
        now = now_ms() if now is None else now
        if marker is None and header.is_control and header.producer_id >= 0:
            marker = read_end_txn_marker(batch)
        duplicate = self.producer_state.check(header, None if marker is None else marker[1],
                                              transaction_version)
        if duplicate is not None:
            return AppendResult(duplicate.first_offset, duplicate.last_offset, -1,
                                self.log_start_offset, duplicate=True)
        base = self.log_end_offset
        append_time = -1
        first_bytes = None  # the stored base offset, when it is written beside ``batch``
        log_append_time = self.config.message_timestamp_type == "LogAppendTime"
        if not log_append_time and not isinstance(batch, bytearray) and len(batch) >= COPY_BELOW:
            # A large produced batch as it came (bytes): its offset is written beside
            # it rather than copying a megabyte to change eight bytes.
            first_bytes = BASE_OFFSET.pack(base)
        else:
            if not isinstance(batch, bytearray):
                batch = bytearray(batch)
            set_base_offset(batch, 0, base)
            if log_append_time:
                set_log_append_time(batch, 0, len(batch), now)
                append_time = now
        placed = BatchHeader(
            base, header.batch_length, header.partition_leader_epoch, header.magic,
            header.crc, header.attributes, header.last_offset_delta, header.base_timestamp,
            append_time if append_time >= 0 else header.max_timestamp, header.producer_id,
            header.producer_epoch, header.base_sequence, header.records_count,
        )
        self._maybe_roll(placed.size, now)
        self.active_segment.append(batch, placed, first_bytes)
        if placed.producer_id >= 0:
            self._track_transaction(placed, marker)
        self.producer_state.update(placed, None if marker is None else marker[1])
        self.unflushed_messages += placed.records_count
        self.bytes_since_snapshot += placed.size
        if not self.config.fsync_every_append:
            self._advance_high_watermark(self.log_end_offset)
        if flush and self.on_append is not None:
            self.on_append(self)
        return AppendResult(base, placed.last_offset, append_time, self.log_start_offset)

    def append_raw(self, batch: bytearray, header: BatchHeader) -> AppendResult:
        """Append a broker-written batch without client checks."""
        return self.append(batch, header)

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int = 0, transaction_version: int = 0) -> AppendResult:
        """Write a COMMIT or ABORT control batch ending the producer's transaction here.
        A marker of an older producer epoch than the producer's is refused
        (INVALID_PRODUCER_EPOCH; at ``transaction_version`` 2 also one of the same
        epoch while a transaction is open), and so is one of an older coordinator
        epoch than the producer's last marker here (TRANSACTION_COORDINATOR_FENCED)."""
        control_type = ControlType.COMMIT if commit else ControlType.ABORT
        batch, header = build_end_txn_marker(
            control_type, producer_id=producer_id, producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch, timestamp=now_ms())
        return self.append(batch, header, transaction_version=transaction_version,
                           marker=(control_type, coordinator_epoch))

    def _maybe_roll(self, incoming: int, now: int) -> None:
        seg = self.active_segment
        if seg.size == 0:
            return
        too_big = seg.size + incoming > self.config.segment_bytes
        too_old = seg.rolling_base_ms is not None and \
            now - seg.rolling_base_ms > self.config.segment_ms
        if too_big or too_old or seg.index_full(self.config.segment_index_bytes):
            self.roll()

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end offset. The old one is fsynced
        by the flusher's next round (it stays in ``pending_sync`` until then)."""
        old = self.active_segment
        new = LogSegment(self.directory, self.log_end_offset, self.config.index_interval_bytes,
                         create=True)
        new.recover()
        self.segments.append(new)
        # Before anything else can fail: the old segment's unflushed tail is fsynced
        # only through pending_sync once it is no longer the active segment.
        self.pending_sync.append(old)
        old.release_file()
        try:
            old.write_indexes()  # fsynced with the segment by the next flush round
        except OSError as e:
            # Rebuildable: a restart recovers every segment past the recovery point,
            # which does not pass this one until its fsync round succeeds.
            log.error("%s: cannot write the indexes of segment %d: %r", self.name,
                      old.base_offset, e)
        self.directory_dirty = True  # the new file's directory entry must be fsynced too
        try:
            self.write_producer_snapshot()  # bounds the replay on the next start
        except OSError as e:
            # Only an optimisation: without it a restart replays from an older snapshot.
            log.error("%s: cannot write the producer snapshot at offset %d: %r", self.name,
                      new.base_offset, e)
        log.info("%s: rolled segment at offset %d (previous %d bytes)", self.name,
                 new.base_offset, old.size)
        if self.on_append is not None:
            self.on_append(self)
        return new

    def take_sync_fds(self) -> list[int]:
        """Duplicated fds to fsync for this log's next flush round: rolled segments
        (with their indexes), the active segment, and the directory after a roll.
        Duplicates keep the flush safe if a segment is closed meanwhile."""
        fds: list[int] = []
        try:
            for seg in self.pending_sync:
                if not seg.closed:
                    fds.extend(seg.dup_fds(indexes=True))
            if not self.active_segment.closed:
                fds.extend(self.active_segment.dup_fds(indexes=False))
            if self.directory_dirty:
                fds.append(os.open(self.directory, os.O_RDONLY))
        except BaseException:
            # EMFILE half-way: close what was taken and leave everything to the next
            # round, or each failing round would leak descriptors and never recover.
            for fd in fds:
                os.close(fd)
            raise
        self.pending_sync = []
        self.directory_dirty = False
        return fds

    def sync_failed(self, segments: list[LogSegment], directory: bool) -> None:
        """The fsync of what :meth:`take_sync_fds` handed out (``segments`` were its
        rolled segments, ``directory`` whether it included the directory) failed: hand
        them out again next round (the active segment always is). Else a retry would
        fsync only the active segment, and the flushed offset would pass a rolled
        segment's tail that was never fsynced."""
        again = [s for s in segments if not s.closed and s not in self.pending_sync]
        self.pending_sync[:0] = again
        self.directory_dirty = self.directory_dirty or directory

    # --- durability ---------------------------------------------------------------

    def flushed(self, offset: int, messages: int, now: int) -> None:
        """The flusher's report: everything below ``offset`` (``messages`` of the
        unflushed ones) is fsynced as of ``now``."""
        self.unflushed_messages = max(0, self.unflushed_messages - messages)
        self.last_flush_ms = now
        self.mark_flushed(offset)

    def mark_flushed(self, offset: int) -> None:
        if offset > self.flushed_offset:
            self.flushed_offset = offset
        if self.config.fsync_every_append:
            self._advance_high_watermark(min(offset, self.log_end_offset))

    def _advance_high_watermark(self, offset: int) -> None:
        if offset <= self.high_watermark:
            return
        self.high_watermark = offset
        done = self.unstable_completed
        while done and done[0][1] < offset:  # the marker is below the high watermark
            done.popleft()
        waiters, self._waiters = self._waiters, set()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def add_waiter(self, fut: asyncio.Future) -> None:
        """Resolve ``fut`` when the high watermark next moves (fetch long polls)."""
        self._waiters.add(fut)

    def remove_waiter(self, fut: asyncio.Future) -> None:
        self._waiters.discard(fut)

    # --- reading --------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one: bool = False) -> ReadResult:
        """Whole batches from ``offset`` up to ``max_offset`` (default: high watermark)."""
        if self.offline is not None:
            raise self.offline_error()
        limit = self.high_watermark if max_offset is None else max_offset
        if offset >= limit:
            return ReadResult(b"", -1, offset)
        i = self._segment_index_for(offset)
        while i < len(self.segments):
            seg = self.segments[i]
            if seg.base_offset >= limit:
                break
            result = seg.read(offset, max_bytes, limit, min_one)
            if result.data:
                return result
            if seg.next_offset > offset and seg.size and seg.position_of(offset) is not None:
                # The batch exists but does not fit max_bytes.
                return result
            i += 1  # offset is past this segment's data (gap at a compacted tail)
        return ReadResult(b"", -1, offset)

    def _segment_index_for(self, offset: int) -> int:
        lo, hi = 0, len(self.segments) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.segments[mid].base_offset <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``timestamp``
        below the high watermark, as Kafka's ListOffsets answers it."""
        if self.offline is not None:
            raise self.offline_error()
        for seg in self.segments:
            if seg.max_timestamp < timestamp or seg.size == 0:
                continue
            for pos, header in seg.batches(seg.lookup_timestamp(timestamp)):
                if header.base_offset >= self.high_watermark:
                    return None
                if header.max_timestamp >= timestamp and not header.is_control:
                    for rec in decode_records(seg.read_batch(pos, header.size)):
                        if rec.timestamp >= timestamp and rec.offset >= self.log_start_offset:
                            return rec.offset, rec.timestamp
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (KIP-734)."""
        if self.offline is not None:
            raise self.offline_error()
        best: tuple[int, int, int, int, LogSegment] | None = None  # ts, -, pos, size, seg
        for seg in self.segments:
            if seg.size == 0 or (best is not None and seg.max_timestamp <= best[0]):
                continue
            for pos, header in seg.batches():
                if header.base_offset >= self.high_watermark:
                    break
                if not header.is_control and (best is None or header.max_timestamp > best[0]):
                    best = (header.max_timestamp, header.base_offset, pos, header.size, seg)
        if best is None:
            return None
        ts, _, pos, size, seg = best
        for rec in decode_records(seg.read_batch(pos, size)):
            if rec.timestamp == ts:
                return rec.offset, ts
        return None

    # --- retention ------------------------------------------------------------------

    def delete_old_segments(self, now: int | None = None) -> int:
        """Apply retention.bytes, then retention.ms, from the oldest segment on, as
        Kafka's retention check does; returns how many segments were deleted. The
        active segment goes too once everything in it is below the high watermark and
        old enough (or over the size): it is rolled first, so the log keeps one (empty)
        segment at the log end. The log start offset moves to the first kept segment."""
        if "delete" not in self.config.cleanup_policy or self.offline is not None:
            return 0
        now = now_ms() if now is None else now
        segments = self.segments
        n = 0  # segments[:n] are deletable
        retention_bytes = self.config.retention_bytes
        if retention_bytes >= 0:
            excess = self.size_bytes - retention_bytes
            while n < len(segments) and self._retention_may_delete(n) \
                    and excess >= segments[n].size:
                excess -= segments[n].size
                n += 1
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            while n < len(segments) and self._retention_may_delete(n):
                seg = segments[n]
                if seg.max_timestamp >= 0:
                    if now - seg.max_timestamp <= retention_ms:
                        break
                elif seg.size:
                    break  # records without timestamps: kept
                n += 1
        deletable = segments[:n]
        if not deletable:
            return 0
        if n == len(segments):
            # Kafka keeps at least one segment: appends go on at the log end.
            self.roll()
        # The kept segments' directory entries are made durable before any file goes:
        # a power failure must not leave the partition with no segment (its log end
        # would then fall back to a checkpointed log start offset).
        pending = unsynced_entries(self.directory)
        if pending and any(os.path.basename(seg.log_path) in pending
                           for seg in self.segments[n:]):
            fsync_directory(self.directory)
        for seg in deletable:
            self.segments.remove(seg)
            if seg in self.pending_sync:
                self.pending_sync.remove(seg)
            seg.delete()
        new_start = self.segments[0].base_offset
        if new_start > self.log_start_offset:
            self.log_start_offset = new_start
            self.aborted.drop_below(new_start)
        log.info("%s: retention deleted %d segment(s); log start offset now %d", self.name,
                 len(deletable), self.log_start_offset)
        return len(deletable)

    def _retention_may_delete(self, index: int) -> bool:
        """Whether retention may delete ``segments[index]`` (if old or large enough):
        every offset in it is below the high watermark, so the log start offset never
        passes it, and it is not the active segment while that is empty."""
        segments = self.segments
        if index + 1 < len(segments):
            return segments[index + 1].base_offset <= self.high_watermark
        return segments[index].size > 0 and self.log_end_offset <= self.high_watermark

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to ``offset`` (at most the high
        watermark) and delete the segments wholly below it; returns the new log start
        offset. A lower ``offset`` than the current start changes nothing, as in Kafka.
        The caller checks the topic's cleanup.policy and the range."""
        if offset <= self.log_start_offset:
            return self.log_start_offset
        self.log_start_offset = offset
        self.aborted.drop_below(offset)
        # The active segment stays even when everything is deleted: appends go there.
        while len(self.segments) > 1 and self.segments[1].base_offset <= offset:
            seg = self.segments.pop(0)
            if seg in self.pending_sync:
                self.pending_sync.remove(seg)
            seg.delete()
        log.info("%s: records deleted below offset %d", self.name, offset)
        return offset

    def simulate_power_loss(self, durable: int | None = None,
                            torn: random.Random | None = None) -> int:
        """Fault injection: cut the segment files back to what was fsynced, as a power
        failure may leave them, and close the log. ``durable`` is the offset below
        which everything was fsynced when the power went (default and at most
        ``flushed_offset``, which only moves once an fsync round has finished: rolled
        segments waiting in ``pending_sync`` are not counted until theirs is done).

        The segment holding that offset is truncated to its first batch at or above
        it (a batch boundary: the flushed offset is always one); later segments are
        deleted with their index files (their creation may not be durable either).
        The cut segment becomes the last one, whose indexes an unclean start rebuilds.
        Not modeled: index files of the segments kept whole (written but maybe never
        fsynced, yet rebuildable), directory entries (created, renamed or deleted
        files), and the small metadata files next to the logs (producer snapshots,
        .txnindex, checkpoints: each written to a temporary file, fsynced, renamed).
        ``torn``: the disk tore the unsynced writes instead (storage/torn.py): from the
        cut on, a random subset of 4 KiB pages of each segment and of its unsynced index
        bytes persists, later segments stay (torn whole) unless their directory entry
        is lost, and each producer snapshot or coordinator.state here may be left
        half-written. Returns the number of log bytes dropped."""
        cut = self.flushed_offset if durable is None else min(durable, self.flushed_offset)
        if torn is None:
            dropped, _ = self._cut_files(cut, sync=False)
        else:
            dropped = self._tear_files(cut, torn)
        self.pending_sync = []
        self.closed = True
        for seg in self.segments:
            seg.close()
        if dropped:
            log.warning("%s: simulated power loss: %d unsynced byte(s) dropped from offset %d",
                        self.name, dropped, cut)
        lost = drop_unsynced_entries(self.directory)
        if lost:
            log.warning("%s: simulated power loss: directory entries never fsynced lost: %s",
                        self.name, ", ".join(lost))
        return dropped

    def _tear_files(self, cut: int, rng: random.Random) -> int:
        dropped = 0
        for seg in self.segments:
            if seg.closed or (seg.next_offset <= cut and seg not in self.pending_sync
                              and seg is not self.active_segment):
                continue  # fsynced with its indexes
            log_durable = 0
            if seg.base_offset < cut:
                found = seg.position_of(cut)
                log_durable = seg.size if found is None else found[0]
            # Index entries below the checkpointed recovery point were fsynced before it
            # was written (recovery_index_paths); the rest may not be.
            index_durable, times_durable = seg.index_bytes_below(self.recovery_point)
            dropped += tear_file(seg.log_path, log_durable, rng)
            tear_file(seg.index_path, index_durable, rng)
            tear_file(seg.timeindex_path, times_durable, rng)
        for name in sorted(os.listdir(self.directory)):
            if name.endswith(".snapshot") or name == "coordinator.state":
                if rng.random() < 0.5 and tear_small_file(os.path.join(self.directory, name), rng):
                    log.warning("%s: simulated power loss tore %s", self.name, name)
        return dropped

    def _cut_files(self, cut: int, *, sync: bool) -> tuple[int, list[LogSegment]]:
        """Truncate the segment holding offset ``cut`` at its first batch at or above it
        and delete the later segments with their index files (the first segment always
        stays). ``sync``: fsync the truncated file, and the directory if a file was
        deleted, so that the cut survives a power failure. Returns the bytes dropped
        and the segments deleted."""
        dropped = 0
        kept: list[LogSegment] = []
        deleted: list[LogSegment] = []
        for i, seg in enumerate(self.segments):
            if seg.closed:
                continue
            if i > 0 and seg.base_offset >= cut:
                dropped += seg.size
                seg.delete()
                deleted.append(seg)
                continue
            kept.append(seg)
            if seg.next_offset <= cut:
                continue  # entirely below the cut: fsynced
            found = seg.position_of(cut)
            position = seg.size if found is None else found[0]
            if position < seg.size:
                dropped += seg.size - position
                os.ftruncate(seg.fd, position)
                seg.size = position
                if sync:
                    os.fsync(seg.fd)
        self.segments = kept
        if sync and deleted:
            fsync_directory(self.directory)
        return dropped, deleted

    def offline_error(self) -> LogOfflineError:
        """What an append or read of this log raises once it is offline."""
        return LogOfflineError(f"{self.name} is offline since an fsync failed "
                               f"({self.offline}); restart the broker to recover it")

    def take_offline(self, error: OSError) -> str:
        """A failed fsync (``error``): this log goes offline until the broker restarts,
        as Kafka takes a log directory offline. Linux may have dropped the dirty pages
        the fsync covered while the page cache still shows them (PostgreSQL's
        "fsyncgate"), so nothing above the flushed offset can be trusted or repaired
        by another fsync: the files are cut back to the flushed offset (best effort: a
        file system that is gone refuses that too), so that neither a restart nor a
        power loss brings back records no client was told were written. Appends and
        reads raise LogOfflineError (KAFKA_STORAGE_ERROR) from now on; the next start
        recovers the partition from its recovery point (the data directory is not
        marked clean). Returns what became of the files, for the caller's log line."""
        if self.offline is not None:
            return "already offline"
        self.offline = error
        # Long-polling fetches answer now, with the error (fetch checks ``offline``).
        waiters, self._waiters = self._waiters, set()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        cut = self.flushed_offset
        self.pending_sync = []
        self.directory_dirty = False
        try:
            dropped, deleted = self._cut_files(cut, sync=True)
            outcome = f"cut back to offset {cut} ({dropped} unsynced byte(s) dropped" + (
                f", {len(deleted)} segment(s) deleted)" if deleted else ")")
        except OSError as e:
            outcome = f"not cut back to offset {cut}: {e}"
        for seg in self.segments:
            seg.close()  # nothing reads them any more; a restart reopens them
        return outcome

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.offline is not None:
            # Nothing to fsync or snapshot: what is not durable was cut (take_offline).
            waiters, self._waiters = self._waiters, set()
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
            return
        try:
            self.write_producer_snapshot()
        except OSError as e:
            log.warning("%s: cannot write producer snapshot: %s", self.name, e)
        for seg in self.segments:
            if not seg.closed:
                os.fsync(seg.fd)
                seg.flush_indexes()
                seg.close()
        waiters, self._waiters = self._waiters, set()
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
