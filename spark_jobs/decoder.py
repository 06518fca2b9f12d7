"""read_committed decoding of fetched record batches straight into Arrow columns.

Sans-IO: bytes of a Fetch response in, Python lists per column out, then one
``pyarrow.RecordBatch`` with the schema of Spark's Kafka source.

What a read_committed consumer must do with the bytes the broker returns (the
broker already stops at the last stable offset and lists the aborted
transactions of the fetched range):

* skip control batches (transaction markers), which still occupy offsets;
* skip the batches of aborted transactions: a transaction of producer P is
  aborted from the ``first_offset`` the broker lists for it until P's ABORT marker;
* tolerate offset gaps (markers, compaction) and batches that begin before the
  requested offset (a fetch returns whole batches);
* decompress compressed batches.

This module is the reference: ``committed_batches`` picks the batches a
read_committed reader returns (shared by both decoders) and ``decode_fetch``
decodes their records one by one (the reference, and still the path for
``includeHeaders``). ``vectorized`` decodes the
same batches all at once with numpy and must give the same rows (hypothesis
tests compare the two).
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterable
from typing import NamedTuple

import crc32c
import pyarrow as pa
import pyarrow.compute as pc
from txbroker.protocol.compression import Compression, decompress
from txbroker.protocol.errors import CorruptRecordError

from .wire import TxBrokerSourceError

HEADER_SIZE = 61
_HEADER = struct.Struct(">qiibIhiqqqhii")
_CONTROL_KEY = struct.Struct(">hh")

ATTR_COMPRESSION = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
CONTROL_ABORT = 0

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

_BASE_FIELDS = [
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", TIMESTAMP_TYPE),
    ("timestampType", pa.int32()),
]
SCHEMA = pa.schema(_BASE_FIELDS)
SCHEMA_WITH_HEADERS = pa.schema([*_BASE_FIELDS, ("headers", HEADERS_TYPE)])


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of Spark's Kafka source schema (what Spark checks our batches against)."""
    return SCHEMA_WITH_HEADERS if include_headers else SCHEMA


class Columns:
    """Column lists of decoded records, appended to batch by batch."""

    __slots__ = ("keys", "values", "offsets", "stamps", "types", "headers")

    def __init__(self, include_headers: bool = False) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.stamps: list[int] = []  # milliseconds since the epoch
        self.types: list[int] = []  # 0 CreateTime, 1 LogAppendTime
        self.headers: list | None = [] if include_headers else None

    def __len__(self) -> int:
        return len(self.offsets)

    def to_arrow(self, topic: str, partition: int) -> pa.RecordBatch:
        n = len(self.offsets)
        millis = pa.array(self.stamps, pa.int64())
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(self.offsets, pa.int64()),
            pc.multiply(millis, 1000).cast(TIMESTAMP_TYPE),
            pa.array(self.types, pa.int32()),
        ]
        if self.headers is not None:
            arrays.append(pa.array(self.headers, HEADERS_TYPE))
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(self.headers is not None))


# --- varints ----------------------------------------------------------------------------------

def uvarint(buf, p: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, p
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")


def _zigzag(buf, p: int) -> tuple[int, int]:
    v, p = uvarint(buf, p)
    return (v >> 1) ^ -(v & 1), p


def _decode_records(buf: bytes, pos: int, count: int, base_offset: int, base_ts: int,
                    lo: int, hi: int, cols: Columns) -> tuple[int, int]:
    """Append the records of one batch with lo <= offset < hi: (how many, end position)."""
    kapp = cols.keys.append
    vapp = cols.values.append
    oapp = cols.offsets.append
    sapp = cols.stamps.append
    happ = cols.headers.append if cols.headers is not None else None
    n = 0
    for _ in range(count):
        # Record: length, attributes, timestampDelta, offsetDelta, key, value, headers
        # (every varint zigzag-encoded).
        length, pos = _zigzag(buf, pos)
        end = pos + length
        ts_delta, p = _zigzag(buf, pos + 1)  # the attributes byte is unused in magic 2
        offset_delta, p = _zigzag(buf, p)
        offset = base_offset + offset_delta
        if offset < lo or offset >= hi:
            pos = end
            continue
        key, p = _nullable_bytes(buf, p)
        kapp(key)
        value, p = _nullable_bytes(buf, p)
        vapp(value)
        if happ is not None:
            happ(_decode_headers(buf, p))
        oapp(offset)
        sapp(base_ts + ts_delta)
        n += 1
        pos = end
    return n, pos


def _nullable_bytes(buf: bytes, p: int) -> tuple[bytes | None, int]:
    """A record's key or value: (the bytes, or None for a length of zigzag(-1) = 1, end)."""
    if buf[p] == 1:
        return None, p + 1
    n, p = _zigzag(buf, p)
    return buf[p:p + n], p + n


def _decode_headers(buf: bytes, p: int) -> list[dict] | None:
    count, p = _zigzag(buf, p)
    if count <= 0:
        return None  # Spark's Kafka source gives null for a record without headers
    out = []
    for _ in range(count):
        klen, p = _zigzag(buf, p)
        key = buf[p:p + klen].decode("utf-8")
        p += klen
        vlen, p = _zigzag(buf, p)
        if vlen < 0:
            value = None
        else:
            value = buf[p:p + vlen]
            p += vlen
        out.append({"key": key, "value": value})
    return out


def _control_type(buf: bytes, pos: int) -> int:
    """The control type (0 ABORT, 1 COMMIT) of the first record of a control batch's body."""
    _length, p = _zigzag(buf, pos)
    p += 1
    _ts, p = _zigzag(buf, p)
    _od, p = _zigzag(buf, p)
    klen, p = _zigzag(buf, p)
    if klen < 4:
        raise CorruptRecordError("control record key shorter than 4 bytes")
    return _CONTROL_KEY.unpack_from(buf, p)[1]


class DataBatch(NamedTuple):
    """A record batch whose records a read_committed reader returns: the records lie in
    ``body[start:end]`` (the fetched bytes, or the decompressed batch)."""

    body: bytes
    start: int
    end: int
    count: int
    base_offset: int
    base_timestamp: int
    log_append_time: int | None  # the batch's max timestamp, with LogAppendTime


def committed_batches(buf: bytes, aborted: Iterable[tuple[int, int]], position: int, end: int,
                      *, where: str = "", verify_crc: bool = True
                      ) -> tuple[list[DataBatch], int]:
    """The batches of ``buf`` holding committed records at or past ``position`` (below
    ``end``), and the offset to fetch next: one past the last offset of the last complete
    batch (``position`` if there was none), so that a range ending on a control batch or
    a compaction gap still terminates.

    ``aborted``: (producer id, first offset) of the aborted transactions the broker
    listed for this fetch. The batches may still hold records below ``position`` or at
    or above ``end`` (a fetch returns whole batches): the decoders drop those."""
    heap = sorted((first, pid) for pid, first in aborted)
    aborted_pids: set[int] = set()
    out: list[DataBatch] = []
    next_position = position
    pos = 0
    size = len(buf)
    header = _HEADER.unpack_from
    try:
        while size - pos >= HEADER_SIZE:
            (base_offset, batch_length, _epoch, magic, crc, attrs, last_delta, base_ts,
             max_ts, pid, _pepoch, _seq, count) = header(buf, pos)
            batch_end = pos + 12 + batch_length
            if batch_end > size:
                break  # a partial batch at the end of the response: fetch it again whole
            if batch_length < HEADER_SIZE - 12:
                raise CorruptRecordError(f"record batch length {batch_length} too small")
            if base_offset >= end:
                break
            if magic != 2:
                raise CorruptRecordError(f"record batch magic {magic} (only magic 2 is read)")
            if verify_crc and crc32c.crc32c(memoryview(buf)[pos + 21:batch_end]) != crc:
                raise CorruptRecordError("record batch CRC mismatch")
            last_offset = base_offset + last_delta
            # Transactions of this producer aborted at or before this batch are now open
            # for skipping, until the producer's ABORT marker closes them.
            while heap and heap[0][0] <= last_offset:
                aborted_pids.add(heapq.heappop(heap)[1])
            if attrs & ATTR_CONTROL:
                if pid in aborted_pids and count > 0:
                    body, start, _ = _body(buf, pos, batch_end, attrs)
                    if _control_type(body, start) == CONTROL_ABORT:
                        aborted_pids.discard(pid)
            elif (attrs & ATTR_TRANSACTIONAL and pid in aborted_pids) or last_offset < position:
                pass
            else:
                body, start, stop = _body(buf, pos, batch_end, attrs)
                # Every record takes at least one byte: a count beyond that is a lie
                # (and would size the decoders' arrays).
                if count < 0 or count > stop - start:
                    raise CorruptRecordError(f"record count {count} does not fit the batch")
                out.append(DataBatch(body, start, stop, count, base_offset, base_ts,
                                     max_ts if attrs & ATTR_LOG_APPEND_TIME else None))
            next_position = max(next_position, last_offset + 1)
            pos = batch_end
    except (CorruptRecordError, IndexError, ValueError, struct.error) as e:
        raise corrupt_batch(where, next_position, e) from None
    return out, next_position


def _body(buf: bytes, pos: int, batch_end: int, attrs: int) -> tuple[bytes, int, int]:
    codec = attrs & ATTR_COMPRESSION
    if codec == 0:
        return buf, pos + HEADER_SIZE, batch_end
    body = decompress(Compression(codec), buf[pos + HEADER_SIZE:batch_end])
    return body, 0, len(body)


def corrupt_batch(where: str, offset: int, e: BaseException) -> TxBrokerSourceError:
    return TxBrokerSourceError(
        f"corrupt record batch{' in ' + where if where else ''} at offset {offset}: {e}",
        "CORRUPT_MESSAGE")


def decode_fetch(buf: bytes, aborted: Iterable[tuple[int, int]], position: int, end: int,
                 cols: Columns, *, where: str = "", verify_crc: bool = True) -> int:
    """Append the committed records of ``buf`` with ``position <= offset < end`` to ``cols``,
    record by record (the reference decoder; also the one that reads headers). Returns
    the offset to fetch next (see ``committed_batches``)."""
    batches, next_position = committed_batches(buf, aborted, position, end, where=where,
                                               verify_crc=verify_crc)
    decode_batches(batches, position, end, cols, where=where)
    return next_position


def decode_batches(batches: Iterable[DataBatch], position: int, end: int, cols: Columns,
                   *, where: str = "") -> None:
    """Append the records of ``batches`` with ``position <= offset < end`` to ``cols``."""
    for b in batches:
        try:
            n, stop = _decode_records(b.body, b.start, b.count, b.base_offset,
                                      b.base_timestamp, position, end, cols)
            if stop != b.end:
                raise CorruptRecordError("record lengths do not add up to the batch length")
        except (CorruptRecordError, IndexError, ValueError, UnicodeDecodeError) as e:
            raise corrupt_batch(where, b.base_offset, e) from None
        if b.log_append_time is not None:
            if n:
                cols.stamps[-n:] = [b.log_append_time] * n
            cols.types.extend([1] * n)
        else:
            cols.types.extend([0] * n)
