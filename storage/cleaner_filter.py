"""Which batches and records a cleaning keeps, rewrites or drops (worker thread).

Why a module of its own: these are the rules of compaction, as Kafka's
MemoryRecords.filterTo, shouldRetainRecord and CleanedTransactionMetadata hold them,
free of files, threads and scheduling: each batch of a group goes through
``filter_batch`` in log order, with a ``FilterContext`` that carries what the
cleaning has learnt (offset map, producers, kept transactions) from group to group.

Records and batches. A record is kept only if no later record of its key is in the
offset map. Kept records keep their offsets, timestamps and order. Batches that lose
nothing are copied byte for byte; others are decoded, filtered and re-encoded with
the same codec, base offset, lastOffsetDelta, producer id/epoch/base sequence and
flags (as Kafka's MemoryRecords.filterTo does, so producer sequence state stays
right). A batch that becomes empty is dropped, except (a) the last data batch of a
producer the partition still tracks (producer state must survive a reopen) and (b)
the last batch of each group (KAFKA-17076 keeps the last one of a cleaning so the log
end offset survives; keeping it per group also means a cleaned segment always ends
exactly where the segments it replaces ended, which makes ``.swap`` recovery exact):
these are kept as header-only batches with zero records. Records without a key are
dropped, as Kafka's cleaner does.

Tombstones (value None) follow Kafka 3.x (KIP-534): the first cleaning that sees a
tombstone's batch keeps it and marks the rewritten batch with the delete horizon
(attribute bit 6, horizon = now + ``delete.retention.ms`` stored as the base
timestamp; record timestamp deltas are relative to it, so clients decode record
timestamps unchanged). A later cleaning at or past the horizon drops the tombstone.
The horizon travels with the batch, so it survives restarts and does not depend on
file modification times.

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
  group's last batch (see (b) above) or carries the current epoch of a producer the
  partition tracks without data batches (its fencing epoch, Kafka's third
  "last record of an active producer" case); Kafka empties such a marker, but
  aiokafka and kafka-python reject a control batch without records.
* The ABORT markers kept because their data is are noted (``kept_aborts``): their
  aborted-transaction entries stay in the cleaned segment's ``.txnindex``
  (cleaner_rewrite.py).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

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
    read_control_type,
)

LONG_MAX = 2**63 - 1
_HEADER = struct.Struct(">qiibIhiqqqhii")  # the RecordBatch v2 header, as protocol.records
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


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
class FilterContext:
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


def _filter_marker(header: BatchHeader, data: memoryview, ctx: FilterContext,
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


def filter_batch(header: BatchHeader, data: memoryview, ctx: FilterContext,
                  must_retain: bool) -> bytes | memoryview | None:
    """The bytes to write for one batch, or None to drop it."""
    if header.is_control:
        return _filter_marker(header, data, ctx, must_retain)
    kept = _filter_data(header, data, ctx, must_retain)
    if kept is not None and header.is_transactional:
        ctx.txn_data_kept.add(header.producer_id)
    return kept


def _filter_data(header: BatchHeader, data: memoryview, ctx: FilterContext,
                 must_retain: bool) -> bytes | memoryview | None:
    records = decode_records(data)
    ctx.records_read += len(records)
    if in_aborted_txn(header, ctx.aborted):
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


def in_aborted_txn(header: BatchHeader, aborted: dict[int, list[tuple[int, int]]]) -> bool:
    """A transactional data batch inside one of its producer's aborted transactions."""
    if not header.is_transactional or header.is_control:
        return False
    return any(first <= header.base_offset <= last
               for first, last in aborted.get(header.producer_id, ()))
