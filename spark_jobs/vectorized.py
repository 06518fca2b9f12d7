"""Decoding the records of many record batches at once, into one Arrow record batch.

The reference decoder (``decoder.decode_fetch``) spends microseconds per record
in Python. Here Python only walks the record lengths (one varint per
record: the start of the next record depends on it, so that walk cannot be
vectorised), and numpy decodes every other field of every record of the fetch
in a few array operations:

1. the record bodies of all batches (decompressed where needed) are joined into
   one buffer, so that one set of array operations covers the whole fetch;
2. a Python loop finds where each record starts (runs of records of one size,
   which fixed-size keys and values give, are taken in strided slices);
3. numpy gathers the varints at those positions, field after field (length,
   attributes, timestamp delta, offset delta, key length, key, value length,
   value), all records at a time, and checks that they stay inside their record;
4. the keys and values become Arrow binary arrays without a Python object per
   record: the joined buffer seen as a binary array whose slots alternate
   between a key (or value) and the bytes up to the next one, then an Arrow
   ``take`` of every other slot, which copies the slices in C.

Headers (``includeHeaders``, nested lists) stay with the reference decoder.
The hypothesis tests check both decoders give the same rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa
from txbroker.protocol.errors import CorruptRecordError

from .decoder import (
    TIMESTAMP_TYPE,
    Columns,
    DataBatch,
    arrow_schema,
    committed_batches,
    corrupt_batch,
    decode_batches,
    uvarint,
)

# Zero bytes after the joined bodies: a varint gathered at any position inside a record
# reads at most 10 bytes, so it never runs off the end of the buffer.
_PAD = bytes(16)
# Arrow binary arrays have 32-bit offsets.
_MAX_JOINED = 2**31 - 1 - len(_PAD)
_U64_1 = np.uint64(1)
_CHUNK = 32  # records walked one by one between two looks for a run of equal sizes


def decode_arrow(buf: bytes, aborted: Iterable[tuple[int, int]], position: int, end: int,
                 topic: str, partition: int, *, include_headers: bool = False,
                 where: str = "", verify_crc: bool = True
                 ) -> tuple[pa.RecordBatch | None, int]:
    """The committed records of ``buf`` with ``position <= offset < end`` as one Arrow
    record batch (None if there are none), and the offset to fetch next (see
    ``decoder.committed_batches``)."""
    batches, nxt = committed_batches(buf, aborted, position, end, where=where,
                                     verify_crc=verify_crc)
    return to_arrow(batches, position, end, topic, partition,
                    include_headers=include_headers, where=where), nxt


def to_arrow(batches: Sequence[DataBatch], position: int, end: int, topic: str,
             partition: int, *, include_headers: bool = False, where: str = ""
             ) -> pa.RecordBatch | None:
    """The records of ``batches`` with ``position <= offset < end`` as one Arrow record
    batch, None if there are none. Headers take the reference decoder."""
    if not batches:
        return None
    if include_headers:
        cols = Columns(True)
        decode_batches(batches, position, end, cols, where=where)
        return cols.to_arrow(topic, partition) if len(cols) else None
    try:
        return decode(batches, position, end, topic, partition)
    except (CorruptRecordError, IndexError, ValueError) as e:
        raise corrupt_batch(where, batches[0].base_offset, e) from None


def decode(batches: Sequence[DataBatch], lo: int, hi: int, topic: str, partition: int
           ) -> pa.RecordBatch | None:
    """The records of ``batches`` with ``lo <= offset < hi`` (no headers column)."""
    counts = np.fromiter((b.count for b in batches), np.int64, len(batches))
    n = int(counts.sum())
    data = b"".join([*(memoryview(b.body)[b.start:b.end] for b in batches), _PAD])
    size = len(data) - len(_PAD)
    if size > _MAX_JOINED:
        raise CorruptRecordError(f"{size} bytes of records in one fetch (at most 2 GiB)")
    starts = _record_starts(data, batches, n)
    if n == 0:
        return None
    u8 = np.frombuffer(data, np.uint8)
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    ends[-1] = size

    # length: the walk trusted its parity; a negative length is odd in zigzag.
    v, w = _varints(u8, starts)
    if ((v & _U64_1) != 0).any() or (starts + w + (v >> _U64_1).view(np.int64) != ends).any():
        raise CorruptRecordError("record lengths do not add up to the batch length")
    p = starts + w + 1  # the attributes byte is unused in magic 2
    _inside(p, ends)
    v, w = _varints(u8, p)
    ts_delta = _zigzag(v)
    p = p + w
    _inside(p, ends)
    v, w = _varints(u8, p)
    offsets = np.repeat(np.fromiter((b.base_offset for b in batches), np.int64, len(batches)),
                        counts) + _zigzag(v)
    p = p + w
    _inside(p, ends)
    v, w = _varints(u8, p)
    key_len = _zigzag(v)
    key_pos = p + w
    # Lengths are compared with what is left of the record, never added first: a
    # 10-byte varint would overflow the position.
    _fits(key_len, ends - key_pos)
    p = key_pos + np.maximum(key_len, 0)
    _inside(p, ends)
    v, w = _varints(u8, p)
    value_len = _zigzag(v)
    value_pos = p + w
    _fits(value_len, ends - value_pos - 1)  # the headers count follows (headers skipped)

    base_ts = np.repeat(np.fromiter((b.base_timestamp for b in batches), np.int64,
                                    len(batches)), counts)
    stamps = base_ts + ts_delta
    log_append = [b.log_append_time is not None for b in batches]
    types = np.repeat(np.array(log_append, np.int32), counts)
    if any(log_append):
        # LogAppendTime: every record has the batch's max timestamp (Kafka's rule).
        max_ts = np.repeat(np.array([b.log_append_time or 0 for b in batches], np.int64),
                           counts)
        stamps = np.where(types == 1, max_ts, stamps)

    wanted = (offsets >= lo) & (offsets < hi)
    if not wanted.all():
        offsets, stamps, types = offsets[wanted], stamps[wanted], types[wanted]
        key_pos, key_len = key_pos[wanted], key_len[wanted]
        value_pos, value_len = value_pos[wanted], value_len[wanted]
        n = len(offsets)
        if n == 0:
            return None
    buffer = pa.py_buffer(data)
    arrays = [
        _binary(buffer, key_pos, key_len),
        _binary(buffer, value_pos, value_len),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        pa.array(stamps * 1000, TIMESTAMP_TYPE),
        pa.array(types, pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(False))


def _record_starts(data: bytes, batches: Sequence[DataBatch], n: int) -> np.ndarray:
    """Where each record starts in ``data`` (the joined bodies), walking record lengths.

    Only the walk: the lengths are checked afterwards, all at once (sign, and that each
    record's fields end inside it), so a wrong guess here cannot pass. A walk that
    leaves its batch's body fails here. Runs of records of one size (fixed-size keys
    and values) are found in slices rather than record by record."""
    starts = [0] * n
    i = 0
    p = 0
    for b in batches:
        body_end = p + (b.end - b.start)
        stop = i + b.count
        while i < stop:
            first, top = i, min(stop, i + _CHUNK)
            for k in range(first, top):
                starts[k] = p
                c = data[p]
                if c < 0x80:  # one-byte length: records below 64 bytes
                    p += 1 + (c >> 1)
                else:
                    c2 = data[p + 1]
                    if c2 < 0x80:  # two bytes: below 8 KiB
                        p += 2 + (((c & 0x7F) | (c2 << 7)) >> 1)
                    else:
                        v, q = uvarint(data, p)
                        p = q + (v >> 1)
            i = top
            size = p - starts[i - 1]
            if i < stop and p - starts[first] == (i - first) * size:
                # The chunk's records likely all had one size: so may the next ones.
                p, i = _run(data, starts, p, i, size, min(stop - i, (body_end - p) // size))
        if p != body_end:
            raise CorruptRecordError("record lengths do not add up to the batch length")
    return np.array(starts, np.int64)


def _run(data: bytes, starts: list[int], p: int, i: int, size: int, m: int
         ) -> tuple[int, int]:
    """How many of the next ``m`` records have ``size`` bytes like the one before ``p``:
    those whose length varint has the same bytes, found with a strided slice per byte.
    Their starts are filled in; returns the position and index after them."""
    ref = p - size  # the last record walked
    if m <= 0 or data[ref] >= 0x80 and data[ref + 1] >= 0x80:
        return p, i  # three-byte lengths: records of 8 KiB or more, walked one by one
    last = p + (m - 1) * size + 1
    col = data[p:last:size]
    run = m - len(col.lstrip(data[ref:ref + 1]))
    if run and data[ref] >= 0x80:
        col = data[p + 1:last + 1:size][:run]
        run -= len(col.lstrip(data[ref + 1:ref + 2]))
    starts[i:i + run] = range(p, p + run * size, size)
    return p + run * size, i + run


def _varints(u8: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray | int]:
    """The unsigned varints at ``pos`` (uint64, before zigzag) and their widths."""
    b = u8[pos]
    more = b >= 0x80
    if not more.any():
        return b.astype(np.uint64), 1
    value = (b & 0x7F).astype(np.uint64)
    width = np.ones(len(pos), np.int64)
    idx = np.flatnonzero(more)
    for j in range(1, 10):
        c = u8[pos[idx] + j]
        value[idx] |= (c & 0x7F).astype(np.uint64) << np.uint64(7 * j)
        width[idx] += 1
        idx = idx[c >= 0x80]
        if not idx.size:
            return value, width
    raise CorruptRecordError("varint longer than 10 bytes")


def _zigzag(v: np.ndarray) -> np.ndarray:
    return (v >> _U64_1).view(np.int64) ^ -(v & _U64_1).view(np.int64)


def _inside(pos: np.ndarray, ends: np.ndarray) -> None:
    if (pos >= ends).any():
        raise CorruptRecordError("record fields run past the record's length")


def _fits(length: np.ndarray, room: np.ndarray) -> None:
    if (length < -1).any() or (length > room).any():
        raise CorruptRecordError("record key or value length outside the record")


def _binary(buffer: pa.Buffer, pos: np.ndarray, length: np.ndarray) -> pa.Array:
    """A binary array of the slices ``buffer[pos:pos+length]`` (null where length is -1).

    The slices are in order and do not overlap, so offsets alternating slice start and
    slice end make a valid binary array over the whole buffer whose even slots are the
    slices; ``take`` of the even slots copies them into a compact array."""
    n = len(pos)
    nulls = length < 0
    offsets = np.empty(2 * n + 1, np.int32)
    offsets[0:-1:2] = pos
    offsets[1::2] = pos + np.where(nulls, 0, length)
    offsets[-1] = offsets[-2]
    spread = pa.Array.from_buffers(pa.binary(), 2 * n, [None, pa.py_buffer(offsets), buffer])
    out = spread.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))
    if nulls.any():
        validity = pa.py_buffer(np.packbits(~nulls, bitorder="little"))
        out = pa.Array.from_buffers(pa.binary(), n, [validity, *out.buffers()[1:]])
    return out
