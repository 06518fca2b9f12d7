"""RecordBatch v2 (magic 2): header view, validation, builders, control records.

The broker treats batches as opaque bytes: it reads the 61-byte header,
checks the CRC32C over attributes..end, rewrites the base offset in place
(the CRC does not cover it) and stores the bytes as they came. Decoding of
individual records exists for tests, timestamp look-ups and compaction.

Layout (big endian):
  0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 | 16 magic i8
  17 crc u32 | 21 attributes i16 | 23 lastOffsetDelta i32 | 27 baseTimestamp i64
  35 maxTimestamp i64 | 43 producerId i64 | 51 producerEpoch i16
  53 baseSequence i32 | 57 recordsCount i32 | 61 records...

Why one file of ~900 lines (the house rule is ~800): the header view, the record
walk that produce validation runs on every batch, the builders and the decoders all
read the same byte layout with the same varint and offset helpers; they are the hot
path of produce and compaction, and keeping them in one module keeps those helpers
module-level names (no attribute look-ups across modules per record). Split it when a
part stops sharing the layout helpers.
"""

from __future__ import annotations

import functools
import struct
import sys
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from .compression import Compression, compress, decompress, decompress_bounded
from .crc32c_ext import crc32c as _crc32c
from .errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError, RecordError
from .primitives import (
    DecodeError,
    read_varint,
    read_varlong,
    write_varint,
    write_varlong,
)

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
MAGIC_V2 = 2
CRC_START = 21

_HEADER = struct.Struct(">qiibIhiqqqhii")
BASE_OFFSET = struct.Struct(">q")  # a batch's first field, outside its CRC
_I64 = struct.Struct(">q")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08  # 1 = LogAppendTime
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1


class BatchHeader(NamedTuple):
    """The 61-byte header of a record batch (magic 2). A named tuple, not a frozen
    dataclass: one is built per batch read, produced or appended, and a frozen
    dataclass's __init__ (object.__setattr__ per field, 13 here) cost as much as the
    write of a small batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the batch occupies in the log, header included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & ATTR_COMPRESSION_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & ATTR_TIMESTAMP_TYPE)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (2**31)


_new_header = BatchHeader._make


def read_header(buf, offset: int = 0) -> BatchHeader:
    """Parse the 61-byte header at ``offset`` (no validation beyond length)."""
    if len(buf) - offset < HEADER_SIZE:
        raise CorruptRecordError(
            f"record batch header needs {HEADER_SIZE} bytes, got {len(buf) - offset}"
        )
    return _new_header(_HEADER.unpack_from(buf, offset))


def peek_size(buf, offset: int = 0) -> int | None:
    """Total size of the batch at ``offset`` from its length field, or None if unreadable."""
    if len(buf) - offset < LOG_OVERHEAD:
        return None
    return LOG_OVERHEAD + _I32.unpack_from(buf, offset + 8)[0]


def compute_crc(buf, offset: int, size: int) -> int:
    return _crc32c(memoryview(buf)[offset + CRC_START : offset + size])


def validate_batch(buf, offset: int = 0, end: int | None = None,
                   field_error: type[Exception] = CorruptRecordError) -> BatchHeader:
    """Check one batch at ``offset``: lengths, magic, CRC and the offset/count fields.

    Raises CorruptRecordError (CORRUPT_MESSAGE) or InvalidRecordError (INVALID_RECORD)
    the way Kafka's LogValidator does. ``field_error`` is raised for a negative record
    count or last offset delta under an intact CRC: corruption in a log file, but
    INVALID_RECORD in a produce request (Kafka's LogValidator.validateBatch).
    """
    end = len(buf) if end is None else end
    available = end - offset
    if available < HEADER_SIZE:
        raise CorruptRecordError(
            f"record batch is {available} bytes, smaller than the {HEADER_SIZE}-byte header"
        )
    magic = buf[offset + 16]
    if magic != MAGIC_V2:
        raise InvalidRecordError(f"record batch magic is {magic}; only magic 2 is supported")
    header = read_header(buf, offset)
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"record batch length {header.batch_length} is too small")
    if header.size > available:
        raise CorruptRecordError(
            f"record batch length {header.batch_length} exceeds the {available} bytes sent"
        )
    actual = compute_crc(buf, offset, header.size)
    if actual != header.crc:
        raise CorruptRecordError(
            f"record batch CRC mismatch: header {header.crc:#010x}, computed {actual:#010x}"
        )
    if header.records_count < 0:
        raise field_error(f"invalid record count {header.records_count}")
    if header.last_offset_delta < 0:
        raise field_error(f"invalid last offset delta {header.last_offset_delta}")
    if header.attributes & ATTR_COMPRESSION_MASK > Compression.ZSTD:
        raise CorruptRecordError(
            f"unknown compression codec {header.attributes & ATTR_COMPRESSION_MASK}"
        )
    return header


def validate_produced_batch(buf, offset: int = 0, end: int | None = None) -> BatchHeader:
    """validate_batch plus the rules for batches coming from a producer.

    Codes as Kafka answers them: bytes that hold no complete batch, a base offset
    other than 0, an offset range that disagrees with the record count and an
    idempotent batch without a sequence are INVALID_RECORD (ProduceRequest.validateRecords,
    UnifiedLog.analyzeAndValidateRecords, LogValidator.validateBatch)."""
    available = (len(buf) if end is None else end) - offset
    size = peek_size(buf, offset)
    if size is None or size > available:
        raise InvalidRecordError(
            "produce requests must have at least one record batch per partition; "
            + (f"only {available} bytes were sent" if size is None else
               f"the record batch of {size} bytes exceeds the {available} bytes sent")
        )
    header = validate_batch(buf, offset, end, field_error=InvalidRecordError)
    if header.base_offset != 0:
        raise InvalidRecordError(
            f"the base offset of a produced record batch must be 0, got {header.base_offset}"
        )
    if header.records_count == 0:
        raise InvalidRecordError("record batch has no records")
    if header.last_offset_delta + 1 != header.records_count:
        raise InvalidRecordError(
            f"inconsistent batch offset range: last offset delta {header.last_offset_delta}, "
            f"{header.records_count} records"
        )
    if header.is_control:
        raise InvalidRecordError("clients are not allowed to write control records")
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecordError(
            f"invalid sequence number {header.base_sequence} in a record batch of "
            f"producer {header.producer_id}"
        )
    return header


# --- record content validation (produce path) -----------------------------
#
# Kafka's LogValidator iterates every record of a produced batch: the declared
# count must match the records present, each record's length must match the
# fields it covers, inner offset deltas must run 0, 1, 2, ... and each record's
# timestamp must be in the topic's accepted range. Walking records one by one in
# Python costs a few microseconds each, so the walk decodes one record fully and
# then checks the following records of the same shape (same length, same key,
# value and header lengths, same varint widths) column by column with strided
# slices, which run in C. Any record that does not fit the shape is decoded
# alone; the fast path only ever accepts what the full decoder would accept.

_FEW_RECORDS = 8  # batches of up to this many records are checked record by record
_RUN_START = 8  # records in the first column comparison after a shape mismatch
_MIN_RUN = 4  # fewer records left in a run (the last records, a width's end): one by one
_MAX_SKIP = 64  # records decoded one by one after repeated shape mismatches
_OFFSET_WIDTH_END = (0, 64, 8192, 1 << 20)  # inner offset deltas per zigzag varint width
_FAST_OFFSET_WIDTH = 3
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
# A single-byte zigzag varint's value + 64, so min()/max() over bytes order by value.
_ZIGZAG1_RANK = bytes(((z >> 1) ^ -(z & 1)) + 64 for z in range(128)) + bytes(128)
_FLIP_HIGH = bytes(b ^ 0x80 for b in range(256))


class RecordsSummary(NamedTuple):
    """What the produce path needs from a validated batch's records. A named tuple,
    not a frozen dataclass: one is built per produced batch, and a frozen
    dataclass's __init__ (object.__setattr__ per field) cost a third of checking a
    one-record batch."""

    records_count: int
    max_timestamp: int  # Kafka's max over record timestamps, starting from -1
    min_timestamp: int | None  # smallest record timestamp other than -1 (None: none)
    has_null_key: bool
    uncompressed_size: int


@dataclass(slots=True)
class _Shape:
    size: int  # bytes of the record, its length varint included
    spans: list[int]  # start, end, start, end...: the record's length varints
    ts_at: int  # positions relative to the record's start
    ts_width: int
    offset_at: int
    offset_width: int
    null_key: bool
    start: int  # where the record decoded for this shape begins in the batch

    def constants(self, raw) -> list[tuple[int, int]]:
        """(position in the record, byte) of every byte of its length varints."""
        return [(p - self.start, raw[p]) for i in range(0, len(self.spans), 2)
                for p in range(self.spans[i], self.spans[i + 1])]


def _varint_at(raw, pos: int, max_bytes: int) -> tuple[int, int]:
    """Zigzag varint at ``pos``: (value, position after it). Same rules as
    primitives.read_varint/read_varlong, with the one-byte case inlined."""
    b = raw[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    c = raw[pos + 1]
    if c < 0x80:
        z = (b & 0x7F) | (c << 7)
        return (z >> 1) ^ -(z & 1), pos + 2
    return (read_varint if max_bytes == 5 else read_varlong)(raw, pos)


def _check_record(raw, pos: int, n: int, offset_delta: int,
                  spans: list[int] | None = None) -> tuple[int, int, bool]:
    """Check the record at ``pos`` (its expected inner offset ``offset_delta``):
    (position after it, its timestamp delta, whether its key is null). Raises
    InvalidRecordError. Any read past the record's end makes ``pos`` pass ``end``,
    which the checks below catch. ``spans``, when given, receives the start and end
    of each of the record's varints, in order (what _decode_record needs for a shape;
    the record-by-record path of small batches passes none).

    The common widths of the varints are decoded inline, as _varint_at would (a call
    costs more than the decoding): one byte for each, two for the lengths of the
    record and its value (64 bytes to 8 KiB); _varint_at reads any other."""
    start = pos
    try:
        if (b := raw[pos]) < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif (c := raw[pos + 1]) < 0x80:
            z = (b & 0x7F) | (c << 7)
            length, pos = (z >> 1) ^ -(z & 1), pos + 2
        else:
            length, pos = _varint_at(raw, pos, 5)
        end = pos + length
        if length < 1 or end > n:
            raise InvalidRecordError(
                f"record {offset_delta} claims {length} bytes, {n - pos} remain in the batch")
        at = pos + 1  # attributes: unused in magic 2, not checked (as Kafka)
        if (b := raw[at]) < 0x80:
            ts_delta, pos = (b >> 1) ^ -(b & 1), at + 1
        else:
            ts_delta, pos = _varint_at(raw, at, 10)
        if spans is not None:
            spans += (start, at - 1, at, pos)
        at = pos
        if offset_delta < 64 and raw[pos] == offset_delta << 1:  # its one-byte zigzag form
            pos += 1
        else:
            delta, pos = _varint_at(raw, pos, 5)
            if delta != offset_delta:
                raise InvalidRecordError(
                    f"record {offset_delta} has offset delta {delta}: inner offsets must be "
                    "consecutive from 0")
        if spans is not None:
            spans += (at, pos)
        at = pos
        if (b := raw[pos]) < 0x80:
            klen, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            klen, pos = _varint_at(raw, pos, 5)
        if spans is not None:
            spans += (at, pos)
        if klen < -1:
            raise InvalidRecordError(f"record {offset_delta} has key length {klen}")
        if klen > 0:
            pos += klen
            if pos > end:
                raise InvalidRecordError(f"key of record {offset_delta} runs past the record")
        at = pos
        if (b := raw[pos]) < 0x80:
            vlen, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif (c := raw[pos + 1]) < 0x80:
            z = (b & 0x7F) | (c << 7)
            vlen, pos = (z >> 1) ^ -(z & 1), pos + 2
        else:
            vlen, pos = _varint_at(raw, pos, 5)
        if spans is not None:
            spans += (at, pos)
        if vlen < -1:
            raise InvalidRecordError(f"record {offset_delta} has value length {vlen}")
        if vlen > 0:
            pos += vlen
            if pos > end:
                raise InvalidRecordError(f"value of record {offset_delta} runs past the record")
        at = pos
        if raw[pos] == 0:  # no headers, the common case
            count, pos = 0, pos + 1
        else:
            count, pos = _varint_at(raw, pos, 5)
        if spans is not None:
            spans += (at, pos)
        if pos > end:
            raise InvalidRecordError(f"fields of record {offset_delta} run past the record")
        if count:  # (no loop to set up for none)
            if count < 0 or count > end - pos:
                raise InvalidRecordError(f"record {offset_delta} claims {count} headers")
            for _ in range(count):
                at = pos
                hklen, pos = _varint_at(raw, pos, 5)
                if spans is not None:
                    spans += (at, pos)
                if hklen < 0:
                    raise InvalidRecordError(
                        f"record {offset_delta} has a header key length {hklen}")
                pos += hklen
                if pos >= end:
                    raise InvalidRecordError(
                        f"header of record {offset_delta} runs past the record")
                at = pos
                hvlen, pos = _varint_at(raw, pos, 5)
                if spans is not None:
                    spans += (at, pos)
                if hvlen < -1:
                    raise InvalidRecordError(
                        f"record {offset_delta} has a header value length {hvlen}")
                if hvlen > 0:
                    pos += hvlen
                if pos > end:
                    raise InvalidRecordError(
                        f"header of record {offset_delta} runs past the record")
        if pos != end:
            raise InvalidRecordError(
                f"record {offset_delta} is {length} bytes long but its fields end "
                f"{pos - end:+d} bytes from there")
    except (DecodeError, IndexError) as e:
        raise InvalidRecordError(f"record {offset_delta} is malformed: {e}") from None
    return end, ts_delta, klen < 0


def _decode_record(raw, pos: int, n: int, offset_delta: int) -> tuple[_Shape, int]:
    """_check_record, and the shape of the record for the column checks of the
    records after it: (shape, timestamp delta)."""
    spans: list[int] = []
    end, ts_delta, null_key = _check_record(raw, pos, n, offset_delta, spans)
    # spans: length, timestamp, offset delta, then the lengths (the shape's constants)
    ts_at, offset_at, offset_end = spans[2], spans[4], spans[5]
    del spans[2:6]
    shape = _Shape(end - pos, spans, ts_at - pos, offset_at - ts_at, offset_at - pos,
                   offset_end - offset_at, null_key, pos)
    return shape, ts_delta


@functools.cache
def _offset_columns(width: int) -> tuple[bytes, ...]:
    """Byte j of the zigzag varint of every inner offset delta of ``width`` bytes,
    indexed from the first delta of that width. Built by repetition, not per value."""
    lo, hi = _OFFSET_WIDTH_END[width - 1], _OFFSET_WIDTH_END[width]
    columns = []
    for j in range(width):
        more = 0x80 if j < width - 1 else 0
        if j == 0:
            # zigzag(d) = 2d: its low 7 bits repeat every 64 deltas (lo is a multiple of 64)
            columns.append(bytes(((2 * d) & 0x7F) | more for d in range(64)) * ((hi - lo) // 64))
        else:
            shift, rep = 7 * j - 1, 1 << (7 * j - 1)
            columns.append(b"".join(bytes((((d >> shift) & 0x7F) | more,)) * rep
                                    for d in range(lo, hi, rep)))
    return tuple(columns)


_ODD = bytes(b & 1 for b in range(256))  # translate: 1 for an odd byte
_LOW_FIRST = sys.byteorder == "little"


def _two_byte_delta_range(low: bytes, high: bytes, k: int) -> tuple[int, int]:
    """(lowest, highest) of ``k`` two-byte zigzag varints of non-negative values, given
    as their first bytes (continuation bit set) and second bytes (without it)."""
    both = bytearray(2 * k)
    both[0::2], both[1::2] = (low, high) if _LOW_FIRST else (high, low)
    values = array("H")
    values.frombytes(both)
    lo_v, hi_v = min(values), max(values)
    # value = high << 8 | low, with low's bit 7 set: the varint is high << 7 | low & 0x7F,
    # and its zigzag (even: non-negative) halves to the delta.
    return ((lo_v >> 8) << 7 | (lo_v & 0x7F)) >> 1, ((hi_v >> 8) << 7 | (hi_v & 0x7F)) >> 1


@functools.lru_cache(maxsize=512)
def _outside_ranks(lo: int, hi: int) -> bytes:
    """Translation table: 0 for a one-byte zigzag varint whose rank (_ZIGZAG1_RANK)
    is in [lo, hi], 1 for any other byte (other values, or not a one-byte varint)."""
    return bytes(0 if b < 0x80 and lo <= _ZIGZAG1_RANK[b] <= hi else 1 for b in range(256))


def _run_matches(raw, pos: int, k: int, shape: _Shape, constants: list[tuple[int, int]],
                 first_delta: int, base_timestamp: int) -> tuple[int, int] | None:
    """Check the ``k`` records at ``pos`` against ``shape`` (``constants``: its
    constants(raw), taken once per shape) with one strided slice per column; (min, max)
    timestamp delta if all match, else None."""
    size = shape.size
    stop = pos + (k - 1) * size + 1
    for at, byte in constants:
        if bytes(raw[pos + at : stop + at : size]).count(byte) != k:
            return None
    o = pos + shape.offset_at
    lo = first_delta - _OFFSET_WIDTH_END[shape.offset_width - 1]
    for j, column in enumerate(_offset_columns(shape.offset_width)):
        if bytes(raw[o + j : stop + o + j - pos : size]) != column[lo : lo + k]:
            return None
    t = pos + shape.ts_at
    if shape.ts_width == 1:
        column = bytes(raw[t : stop + t - pos : size])
        lo_r, hi_r = _ZIGZAG1_RANK[column[0]], _ZIGZAG1_RANK[column[-1]]
        if lo_r > hi_r:
            lo_r, hi_r = hi_r, lo_r
        if b"\x01" in column.translate(_outside_ranks(lo_r, hi_r)):
            # Not all within the first and last record's (time not monotonic in the
            # run): min() and max() over it, ten times slower.
            if not column.isascii():
                return None
            ranks = column.translate(_ZIGZAG1_RANK)
            lo_r, hi_r = min(ranks), max(ranks)
        lo_d, hi_d = lo_r - 64, hi_r - 64
    else:  # two bytes: the first with its continuation bit, the second without
        low = bytes(raw[t : stop + t - pos : size])
        high = bytes(raw[t + 1 : stop + t + 1 - pos : size])
        if not (high.isascii() and low.translate(_FLIP_HIGH).isascii()):
            return None
        if b"\x01" in low.translate(_ODD):
            # A negative delta among them (zigzag odd): decoded one by one.
            zs = [(a & 0x7F) | (b << 7) for a, b in zip(low, high, strict=True)]
            deltas = [(z >> 1) ^ -(z & 1) for z in zs]
            lo_d, hi_d = min(deltas), max(deltas)
        else:
            # All deltas >= 0 (a lingering producer's batch): as every first byte has
            # its continuation bit, the 16-bit values high:low order as the varints do,
            # so the lowest and highest come from one C-level min()/max() of them.
            lo_d, hi_d = _two_byte_delta_range(low, high, k)
    if base_timestamp + lo_d <= NO_TIMESTAMP <= base_timestamp + hi_d and lo_d != hi_d:
        return None  # a -1 timestamp inside the run is exempt from checks: decode one by one
    return lo_d, hi_d


def validate_records(raw: bytes | bytearray, header: BatchHeader, start: int = 0,
                     end: int | None = None) -> RecordsSummary:
    """Check the records of a produced batch (``raw[start:end]``: the bytes after the
    header, decompressed) against its header, as Kafka's LogValidator does; every
    failure is INVALID_RECORD except timestamps outside the 64-bit range
    (INVALID_TIMESTAMP). ``raw`` is bytes or bytearray: their strided slices are
    about ten times faster than a memoryview's."""
    count = header.records_count
    n = len(raw) if end is None else end
    walk = _check_each if count <= _FEW_RECORDS else _check_in_runs
    pos, lo_ts, hi_ts, null_key = walk(raw, count, header.base_timestamp, start, n)
    if pos != n:
        raise InvalidRecordError(
            f"record batch declares {count} records but {n - pos} bytes follow the last")
    if hi_ts > _I64_MAX or (lo_ts is not None and lo_ts < _I64_MIN):
        raise InvalidTimestampError("record timestamp outside the 64-bit range")
    return RecordsSummary(count, hi_ts, lo_ts, null_key, n - start)


# The walks of validate_records: (position after the last record, lowest timestamp
# other than -1 or None, highest timestamp or -1, whether a key is null).
_Walked = tuple[int, int | None, int, bool]


def _check_each(raw, count: int, base: int, pos: int, n: int) -> _Walked:
    """Record by record: a batch of a few records (a transaction's, a linger-less
    producer's) is checked faster this way than with the set-up of the column checks."""
    lo_ts, hi_ts = None, NO_TIMESTAMP
    null_key = False
    for delta in range(count):
        if pos >= n:
            raise InvalidRecordError(
                f"record batch declares {count} records but holds {delta}")
        pos, ts_delta, key_null = _check_record(raw, pos, n, delta)
        ts = base + ts_delta
        if ts != NO_TIMESTAMP:
            if lo_ts is None or ts < lo_ts:
                lo_ts = ts
            if ts > hi_ts:
                hi_ts = ts
        if key_null:
            null_key = True
    return pos, lo_ts, hi_ts, null_key


def _check_in_runs(raw, count: int, base: int, pos: int, n: int) -> _Walked:
    """One record decoded, then the records of its shape after it column by column:
    first all that are left (a producer's batch is usually of one shape), then, after
    a mismatch, in runs from _RUN_START that double while they match."""
    delta = 0
    lo_ts, hi_ts = None, NO_TIMESTAMP
    null_key = False
    run = count  # the first run tries every record left: one batch is often one shape
    skip = skipped = 0
    while delta < count:
        if pos >= n:
            raise InvalidRecordError(
                f"record batch declares {count} records but holds {delta}")
        shape, ts_delta = _decode_record(raw, pos, n, delta)
        ts = base + ts_delta
        if ts != NO_TIMESTAMP:
            lo_ts = ts if lo_ts is None or ts < lo_ts else lo_ts
            hi_ts = max(hi_ts, ts)
        null_key = null_key or shape.null_key
        pos += shape.size
        delta += 1
        width = shape.offset_width
        if skipped < skip or shape.ts_width > 2 or width > _FAST_OFFSET_WIDTH or \
                not _OFFSET_WIDTH_END[width - 1] < delta <= _OFFSET_WIDTH_END[width]:
            # (the last: the offset delta's varint is not in its shortest form, which the
            # column tables assume)
            skipped += 1
            continue
        constants = None
        while True:
            k = min(run, count - delta, (n - pos) // shape.size,
                    _OFFSET_WIDTH_END[shape.offset_width] - delta)
            if k < _MIN_RUN:  # (a column comparison costs about as much as 3 records)
                break
            if constants is None:
                constants = shape.constants(raw)
            found = _run_matches(raw, pos, k, shape, constants, delta, base)
            if found is None:
                run, skip, skipped = _RUN_START, min(_MAX_SKIP, skip * 2 or 1), 0
                break
            lo_d, hi_d = found
            if not (lo_d == hi_d and base + lo_d == NO_TIMESTAMP):
                lo_ts = base + lo_d if lo_ts is None else min(lo_ts, base + lo_d)
                hi_ts = max(hi_ts, base + hi_d)
            null_key = null_key or shape.null_key
            pos += k * shape.size
            delta += k
            run *= 2
            skip = 0
    return pos, lo_ts, hi_ts, null_key


def uncompressed_limit(max_message_bytes: int) -> int:
    """Most bytes a produced batch may decompress to: 32 times the topic's
    max.message.bytes, at least 32 MiB. Kafka streams decompression and sets no
    such bound; we hold the decompressed records while checking them, so a
    decompression bomb must stop at a bounded buffer (MESSAGE_TOO_LARGE above it)."""
    return max(UNCOMPRESSED_LIMIT_FLOOR, UNCOMPRESSED_LIMIT_RATIO * max_message_bytes)


UNCOMPRESSED_LIMIT_RATIO = 32
UNCOMPRESSED_LIMIT_FLOOR = 32 * 1024 * 1024


def validate_produced_records(buf, header: BatchHeader, offset: int = 0, *,
                              max_uncompressed: int = UNCOMPRESSED_LIMIT_FLOOR) -> RecordsSummary:
    """validate_records on the batch at ``offset`` (already through
    validate_produced_batch), decompressing into at most ``max_uncompressed`` bytes.
    The batch itself is left untouched: it is stored as it came."""
    start, end = offset + HEADER_SIZE, offset + header.size
    if header.attributes & ATTR_COMPRESSION_MASK:  # (not header.compression: an enum call)
        raw = decompress_bounded(header.compression, bytes(buf[start:end]), max_uncompressed)
        return validate_records(raw, header)
    if not isinstance(buf, bytes | bytearray):
        buf, start, end = bytes(buf[start:end]), 0, end - start
    return validate_records(buf, header, start, end)


def find_record_errors(buf, header: BatchHeader, offset: int = 0, *, partition: str,
                       compacted: bool, timestamp_range: tuple[int, int] | None
                       ) -> list[RecordError]:
    """The records of a produced batch (already through validate_produced_records) that
    Kafka's LogValidator refuses one by one, each with Kafka's reason: no key on a
    compacted topic; on a CreateTime topic (``timestamp_range``: the accepted
    [lowest, highest]) a timestamp other than -1 outside the range; otherwise a
    LogAppendTime batch from the producer. One reason per record, the key first.
    Only called once a batch failed, so decoding every record here costs nothing on
    the accepted path. ``partition`` is "topic-index", for the messages."""
    errors = []
    for i, rec in enumerate(decode_records(buf, offset)):
        if compacted and rec.key is None:
            errors.append(RecordError(i, "Compacted topic cannot accept message without key "
                                         f"in topic partition {partition}"))
        elif timestamp_range is not None and rec.timestamp != NO_TIMESTAMP:
            lowest, highest = timestamp_range
            if not lowest <= rec.timestamp <= highest:
                errors.append(RecordError(
                    i, f"Timestamp {rec.timestamp} of message with offset {rec.offset} is out "
                       f"of range. The timestamp should be within [{lowest}, {highest}]", True))
        elif header.log_append_time:
            errors.append(RecordError(
                i, f"Invalid timestamp type in message DefaultRecord(offset={rec.offset}, "
                   f"timestamp={rec.timestamp}, key={len(rec.key or b'')} bytes, "
                   f"value={len(rec.value or b'')} bytes). Producer should not set timestamp "
                   "type to LogAppendTime.", True))
    return errors


def iter_batches(buf, offset: int = 0, end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each complete batch; stop at a partial tail.

    No CRC check: use it on data the broker wrote itself.
    """
    end = len(buf) if end is None else end
    pos = offset
    while end - pos >= HEADER_SIZE:
        header = read_header(buf, pos)
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > end:
            return
        yield pos, header
        pos += header.size


def set_base_offset(buf: bytearray | memoryview, offset: int, base_offset: int) -> None:
    BASE_OFFSET.pack_into(buf, offset, base_offset)


def set_log_append_time(buf: bytearray, offset: int, size: int, timestamp: int) -> None:
    """Mark a batch as LogAppendTime with ``timestamp`` and fix its CRC (Kafka does the same)."""
    attrs = _I16.unpack_from(buf, offset + 21)[0] | ATTR_TIMESTAMP_TYPE
    _I16.pack_into(buf, offset + 21, attrs)
    _I64.pack_into(buf, offset + 35, timestamp)
    struct.pack_into(">I", buf, offset + 17, compute_crc(buf, offset, size))


def set_create_time_max_timestamp(buf: bytearray, header: BatchHeader,
                                  max_timestamp: int) -> BatchHeader:
    """Make a produced batch's header say CreateTime and ``max_timestamp`` (the
    records' real maximum) and fix its CRC, as Kafka's LogValidator does when they
    differ; the header of the batch in ``buf`` at offset 0 is returned updated."""
    attributes = header.attributes & ~ATTR_TIMESTAMP_TYPE
    _I16.pack_into(buf, 21, attributes)
    _I64.pack_into(buf, 35, max_timestamp)
    crc = compute_crc(buf, 0, header.size)
    struct.pack_into(">I", buf, 17, crc)
    return header._replace(attributes=attributes, max_timestamp=max_timestamp, crc=crc)


# --- records -------------------------------------------------------------

@dataclass(slots=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp: int = NO_TIMESTAMP
    offset: int = -1


def _encode_record(out: bytearray, rec: Record, offset_delta: int, ts_delta: int) -> None:
    body = bytearray()
    body.append(0)  # record attributes (unused)
    write_varlong(body, ts_delta)
    write_varint(body, offset_delta)
    if rec.key is None:
        write_varint(body, -1)
    else:
        write_varint(body, len(rec.key))
        body += rec.key
    if rec.value is None:
        write_varint(body, -1)
    else:
        write_varint(body, len(rec.value))
        body += rec.value
    write_varint(body, len(rec.headers))
    for hkey, hval in rec.headers:
        hk = hkey.encode("utf-8")
        write_varint(body, len(hk))
        body += hk
        if hval is None:
            write_varint(body, -1)
        else:
            write_varint(body, len(hval))
            body += hval
    write_varint(out, len(body))
    out += body


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = -1,
    base_timestamp: int | None = None,
    offset_deltas: Sequence[int] | None = None,
) -> bytes:
    """Encode a complete magic-2 batch. Record timestamps of -1 take ``base_timestamp``."""
    if not records:
        raise ValueError("a batch needs at least one record")
    stamps = [r.timestamp for r in records]
    if base_timestamp is None:
        known = [t for t in stamps if t != NO_TIMESTAMP]
        base_timestamp = min(known) if known else 0
    stamps = [base_timestamp if t == NO_TIMESTAMP else t for t in stamps]
    deltas = list(offset_deltas) if offset_deltas is not None else list(range(len(records)))
    body = bytearray()
    for rec, delta, ts in zip(records, deltas, stamps, strict=True):
        _encode_record(body, rec, delta, ts - base_timestamp)
    payload = compress(compression, bytes(body)) if compression != Compression.NONE else body
    attributes = int(compression)
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    if control:
        attributes |= ATTR_CONTROL
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    out = bytearray(
        _HEADER.pack(
            base_offset,
            batch_length,
            partition_leader_epoch,
            MAGIC_V2,
            0,
            attributes,
            deltas[-1],
            base_timestamp,
            max(stamps),
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    )
    out += payload
    struct.pack_into(">I", out, 17, compute_crc(out, 0, len(out)))
    return bytes(out)


def decode_records(batch, offset: int = 0) -> list[Record]:
    """Decode every record of the batch at ``offset`` (decompressing if needed)."""
    header = read_header(batch, offset)
    raw = memoryview(batch)[offset + HEADER_SIZE : offset + header.size]
    if header.compression != Compression.NONE:
        raw = memoryview(decompress(header.compression, bytes(raw)))
    records: list[Record] = []
    pos = 0
    try:
        for _ in range(header.records_count):
            length, pos = read_varint(raw, pos)
            end = pos + length
            pos += 1  # attributes
            ts_delta, pos = read_varlong(raw, pos)
            off_delta, pos = read_varint(raw, pos)
            klen, pos = read_varint(raw, pos)
            key = None if klen < 0 else bytes(raw[pos : pos + klen])
            pos += max(klen, 0)
            vlen, pos = read_varint(raw, pos)
            value = None if vlen < 0 else bytes(raw[pos : pos + vlen])
            pos += max(vlen, 0)
            nheaders, pos = read_varint(raw, pos)
            headers = []
            for _h in range(nheaders):
                hklen, pos = read_varint(raw, pos)
                hkey = bytes(raw[pos : pos + hklen]).decode("utf-8")
                pos += hklen
                hvlen, pos = read_varint(raw, pos)
                hval = None if hvlen < 0 else bytes(raw[pos : pos + hvlen])
                pos += max(hvlen, 0)
                headers.append((hkey, hval))
            if pos != end or end > len(raw):
                raise CorruptRecordError("record length does not match its fields")
            ts = header.max_timestamp if header.log_append_time else header.base_timestamp + ts_delta
            records.append(Record(key, value, headers, ts, header.base_offset + off_delta))
    except (DecodeError, UnicodeDecodeError, IndexError) as e:
        raise CorruptRecordError(f"cannot decode records: {e}") from None
    return records


def build_single_record_batch(key: bytes | None, value: bytes | None, timestamp: int, *,
                              producer_id: int = NO_PRODUCER_ID,
                              producer_epoch: int = NO_PRODUCER_EPOCH,
                              transactional: bool = False, control: bool = False) -> bytes:
    """``build_batch`` of one header-less, uncompressed record at offset 0, written
    directly: the shape of every coordinator record and transaction marker."""
    body = bytearray(b"\x00\x00\x00")  # attributes, timestamp delta 0, offset delta 0
    if key is None:
        body.append(1)  # zigzag(-1)
    else:
        write_varint(body, len(key))
        body += key
    if value is None:
        body.append(1)
    else:
        write_varint(body, len(value))
        body += value
    body.append(0)  # no headers
    size = bytearray()
    write_varint(size, len(body))
    attributes = (ATTR_TRANSACTIONAL if transactional else 0) | (ATTR_CONTROL if control else 0)
    out = bytearray(_HEADER.pack(0, HEADER_SIZE - LOG_OVERHEAD + len(size) + len(body), -1,
                                 MAGIC_V2, 0, attributes, 0, timestamp, timestamp, producer_id,
                                 producer_epoch, NO_SEQUENCE, 1))
    out += size
    out += body
    struct.pack_into(">I", out, 17, compute_crc(out, 0, len(out)))
    return bytes(out)


def _first_control_record(batch, offset: int) -> tuple[bytes, bytes | None] | None:
    """Key (at least 4 bytes: version and type) and value of the first record of a
    control batch (None if it has none), without decoding every record of an
    uncompressed one."""
    header = read_header(batch, offset)
    if header.records_count <= 0:
        return None
    if header.compression != Compression.NONE:
        records = decode_records(batch, offset)
        if not records:
            return None
        if records[0].key is None or len(records[0].key) < 4:
            raise CorruptRecordError("control record key too short")
        return records[0].key, records[0].value
    raw = memoryview(batch)[offset + HEADER_SIZE : offset + header.size]
    try:
        _length, pos = read_varint(raw, 0)
        pos += 1  # attributes
        _ts_delta, pos = read_varlong(raw, pos)
        _off_delta, pos = read_varint(raw, pos)
        klen, pos = read_varint(raw, pos)
        if klen < 4 or pos + klen > len(raw):
            raise CorruptRecordError("control record key too short")
        key = bytes(raw[pos : pos + klen])
        pos += klen
        vlen, pos = read_varint(raw, pos)
        if pos + max(vlen, 0) > len(raw):
            raise CorruptRecordError("control record value runs past the batch")
        value = None if vlen < 0 else bytes(raw[pos : pos + vlen])
    except (DecodeError, IndexError) as e:
        raise CorruptRecordError(f"cannot decode control record: {e}") from None
    return key, value


def read_control_type(batch, offset: int = 0) -> ControlType | None:
    """The type of the first control record of a control batch (None if it has no
    record), without decoding every record."""
    first = _first_control_record(batch, offset)
    return None if first is None else ControlType(_I16.unpack_from(first[0], 2)[0])


def read_end_txn_marker(batch, offset: int = 0) -> tuple[ControlType, int] | None:
    """(COMMIT or ABORT, coordinator epoch) of a transaction marker batch; None if
    the batch has no record."""
    first = _first_control_record(batch, offset)
    if first is None:
        return None
    key, value = first
    return ControlType(_I16.unpack_from(key, 2)[0]), _coordinator_epoch(value)


# --- control records (transaction markers) --------------------------------

def build_control_batch(
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int = 0,
    base_offset: int = 0,
    timestamp: int = 0,
) -> bytes:
    key = _I16.pack(0) + _I16.pack(int(control_type))
    value = _I16.pack(0) + _I32.pack(coordinator_epoch)
    if base_offset == 0:
        return build_single_record_batch(key, value, timestamp, producer_id=producer_id,
                                         producer_epoch=producer_epoch, transactional=True,
                                         control=True)
    return build_batch(
        [Record(key, value, timestamp=timestamp)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )


@functools.lru_cache(maxsize=64)
def _marker_tail(control_type: ControlType, coordinator_epoch: int) -> bytes:
    """The bytes after the header of an end-transaction marker batch: its one record."""
    built = build_control_batch(control_type, producer_id=0, producer_epoch=0,
                                coordinator_epoch=coordinator_epoch)
    return built[HEADER_SIZE:]


def build_end_txn_marker(control_type: ControlType, *, producer_id: int, producer_epoch: int,
                         coordinator_epoch: int, timestamp: int
                         ) -> tuple[bytearray, BatchHeader]:
    """build_control_batch of a COMMIT or ABORT marker at offset 0, and its header: the
    record is the same for every marker of a type and coordinator epoch (built once),
    only the header and its CRC are written per marker (one per partition per
    transaction, on the coordinator's path)."""
    tail = _marker_tail(control_type, coordinator_epoch)
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(tail)
    attributes = ATTR_TRANSACTIONAL | ATTR_CONTROL
    out = bytearray(_HEADER.pack(0, batch_length, -1, MAGIC_V2, 0, attributes, 0, timestamp,
                                 timestamp, producer_id, producer_epoch, NO_SEQUENCE, 1))
    out += tail
    crc = compute_crc(out, 0, len(out))
    struct.pack_into(">I", out, 17, crc)
    return out, BatchHeader(0, batch_length, -1, MAGIC_V2, crc, attributes, 0, timestamp,
                            timestamp, producer_id, producer_epoch, NO_SEQUENCE, 1)


def control_type_of(record: Record) -> ControlType:
    if record.key is None or len(record.key) < 4:
        raise CorruptRecordError("control record key too short")
    return ControlType(_I16.unpack_from(record.key, 2)[0])


def coordinator_epoch_of(record: Record) -> int:
    """The coordinator epoch of a COMMIT/ABORT control record."""
    return _coordinator_epoch(record.value)


def _coordinator_epoch(value: bytes | None) -> int:
    # An end-transaction marker's value: version int16 (0; a newer one keeps these
    # fields first), coordinator epoch int32.
    if value is None or len(value) < 6:
        raise CorruptRecordError("transaction marker value too short for a coordinator epoch")
    if _I16.unpack_from(value, 0)[0] < 0:
        raise CorruptRecordError("transaction marker value has a negative version")
    return _I32.unpack_from(value, 2)[0]
