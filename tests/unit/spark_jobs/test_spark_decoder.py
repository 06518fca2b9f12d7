"""The txbroker Spark source's read_committed decoders over hand-built record batches:
control batches, aborted transactions, offset gaps, range bounds, compression,
timestamps, headers, and the Arrow schema Spark checks its batches against.

Two decoders: the record-by-record reference (``decoder.decode_fetch``) and the
batch-at-once one the reader uses (``vectorized.decode_arrow``). The example tests
run both (``decode``); hypothesis tests check they give the same rows for arbitrary
batches, and that mangled bytes make the vectorised one fail cleanly."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from txbroker.protocol.compression import Compression
from txbroker.protocol.records import (
    ControlType,
    Record,
    build_batch,
    build_control_batch,
    set_log_append_time,
)
from txbroker.spark_jobs.decoder import Columns, arrow_schema, decode_fetch
from txbroker.spark_jobs.vectorized import decode_arrow
from txbroker.spark_jobs.wire import TxBrokerSourceError

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TS = 1_700_000_000_000


def recs(*values: bytes, key: bytes | None = b"k", ts: int = TS) -> list[Record]:
    return [Record(key, v, timestamp=ts + i) for i, v in enumerate(values)]


def txn(pid: int, base: int, *values: bytes, codec: Compression = Compression.NONE) -> bytes:
    return build_batch(recs(*values), base_offset=base, producer_id=pid, producer_epoch=0,
                       base_sequence=0, transactional=True, compression=codec)


def marker(kind: ControlType, pid: int, offset: int) -> bytes:
    return build_control_batch(kind, producer_id=pid, producer_epoch=0, base_offset=offset,
                               timestamp=TS)


def decode(buf: bytes, aborted=(), position: int = 0, end: int = 2**62,
           headers: bool = False) -> tuple[Columns, int]:
    """The reference decoder's columns, after checking that the vectorised decoder gives
    the same rows and next offset (or fails the same way)."""
    cols = Columns(headers)
    try:
        nxt = decode_fetch(buf, aborted, position, end, cols)
    except TxBrokerSourceError as e:
        with pytest.raises(TxBrokerSourceError) as info:
            decode_arrow(buf, aborted, position, end, "t", 0, include_headers=headers)
        assert info.value.code == e.code
        raise
    batch, vnxt = decode_arrow(buf, aborted, position, end, "t", 0, include_headers=headers)
    assert vnxt == nxt
    assert rows(batch, headers) == rows(cols.to_arrow("t", 0) if len(cols) else None, headers)
    return cols, nxt


def rows(batch: pa.RecordBatch | None, headers: bool = False) -> dict:
    if batch is None:
        return {}
    assert batch.schema == arrow_schema(headers)
    return batch.to_pydict()


def test_plain_records_to_arrow():
    buf = build_batch(recs(b"a", b"b", b"c"), base_offset=10)
    cols, nxt = decode(buf, position=10)
    assert nxt == 13
    batch = cols.to_arrow("t", 3)
    assert batch.schema == arrow_schema(False)
    assert batch.to_pydict() == {
        "key": [b"k"] * 3,
        "value": [b"a", b"b", b"c"],
        "topic": ["t"] * 3,
        "partition": [3] * 3,
        "offset": [10, 11, 12],
        "timestamp": [pa.scalar((TS + i) * 1000, pa.timestamp("us", tz="UTC")).as_py()
                      for i in range(3)],
        "timestampType": [0] * 3,
    }


def test_arrow_schema_is_what_spark_expects():
    from pyspark.sql.pandas.types import to_arrow_schema
    from txbroker.spark_jobs.source import spark_schema

    for headers in (False, True):
        assert to_arrow_schema(spark_schema(headers), timezone="UTC").equals(
            arrow_schema(headers))


def test_committed_and_aborted_transactions():
    # pid 1 commits [0,1], pid 2 aborts [2,3] interleaved with pid 1's [4], markers after.
    buf = b"".join([
        txn(1, 0, b"c0", b"c1"),
        txn(2, 2, b"x2", b"x3"),
        txn(1, 4, b"c4"),
        marker(ControlType.COMMIT, 1, 5),
        marker(ControlType.ABORT, 2, 6),
        txn(2, 7, b"c7"),  # pid 2's next transaction, committed: not skipped
        marker(ControlType.COMMIT, 2, 8),
    ])
    cols, nxt = decode(buf, aborted=[(2, 2)])
    assert cols.values == [b"c0", b"c1", b"c4", b"c7"]
    assert cols.offsets == [0, 1, 4, 7]
    assert nxt == 9


def test_abort_ends_only_at_the_producers_abort_marker():
    # A COMMIT marker of another producer does not end pid 2's aborted transaction.
    buf = b"".join([
        txn(2, 0, b"x0"),
        marker(ControlType.COMMIT, 1, 1),
        txn(2, 2, b"x2"),
        marker(ControlType.ABORT, 2, 3),
    ])
    cols, _ = decode(buf, aborted=[(2, 0)])
    assert cols.values == []


def test_two_aborted_transactions_of_one_producer():
    buf = b"".join([
        txn(5, 0, b"x0"), marker(ControlType.ABORT, 5, 1),
        txn(5, 2, b"c2"), marker(ControlType.COMMIT, 5, 3),
        txn(5, 4, b"x4"), marker(ControlType.ABORT, 5, 5),
        build_batch(recs(b"n6"), base_offset=6),  # non-transactional, same log
    ])
    cols, nxt = decode(buf, aborted=[(5, 0), (5, 4)])
    assert cols.values == [b"c2", b"n6"]
    assert nxt == 7


def test_fetch_that_starts_inside_an_aborted_transaction():
    # The broker lists a transaction aborted before the fetch offset if it is still open there.
    buf = b"".join([txn(3, 4, b"x4"), marker(ControlType.ABORT, 3, 5), txn(3, 6, b"c6"),
                    marker(ControlType.COMMIT, 3, 7)])
    cols, _ = decode(buf, aborted=[(3, 1)], position=4)
    assert cols.values == [b"c6"]


def test_offset_gaps_inside_and_between_batches():
    compacted = build_batch(recs(b"a", b"b", b"c"), base_offset=100, offset_deltas=[0, 5, 9])
    later = build_batch(recs(b"d"), base_offset=150)
    cols, nxt = decode(compacted + later, position=100)
    assert cols.offsets == [100, 105, 109, 150]
    assert nxt == 151


def test_records_below_the_start_and_at_or_above_the_end_are_dropped():
    buf = build_batch(recs(*[bytes([65 + i]) for i in range(10)]), base_offset=20)
    cols, nxt = decode(buf, position=23, end=27)
    assert cols.offsets == [23, 24, 25, 26]
    assert cols.values == [b"D", b"E", b"F", b"G"]
    assert nxt == 30  # progress is by whole batches


def test_batches_at_or_after_the_end_are_not_read():
    buf = build_batch(recs(b"a"), base_offset=0) + build_batch(recs(b"b"), base_offset=1)
    cols, nxt = decode(buf, end=1)
    assert cols.values == [b"a"]
    assert nxt == 1


def test_range_ending_on_a_control_marker_terminates():
    # Range [0, 3): offsets 0-1 data, 2 the COMMIT marker. Progress must reach 3.
    buf = txn(1, 0, b"a", b"b") + marker(ControlType.COMMIT, 1, 2)
    cols, nxt = decode(buf, end=3)
    assert cols.values == [b"a", b"b"]
    assert nxt == 3


def test_only_control_batches_still_progress():
    buf = marker(ControlType.ABORT, 1, 7) + marker(ControlType.COMMIT, 2, 8)
    cols, nxt = decode(buf, position=7)
    assert len(cols) == 0
    assert nxt == 9


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_compressed_batches(codec):
    values = [b"v%03d" % i * 30 for i in range(50)]
    buf = txn(1, 0, *values, codec=codec) + marker(ControlType.COMMIT, 1, 50)
    buf += txn(2, 51, b"gone", codec=codec) + marker(ControlType.ABORT, 2, 52)
    cols, nxt = decode(buf, aborted=[(2, 51)], position=10)
    assert cols.values == values[10:]
    assert cols.offsets == list(range(10, 50))
    assert nxt == 53


def test_log_append_time_uses_the_batch_max_timestamp():
    buf = bytearray(build_batch(recs(b"a", b"b", ts=5), base_offset=0))
    set_log_append_time(buf, 0, len(buf), TS + 999)
    cols, _ = decode(bytes(buf))
    assert cols.stamps == [TS + 999, TS + 999]
    assert cols.types == [1, 1]


def test_null_keys_values_and_headers():
    batch = build_batch([
        Record(None, None),
        Record(b"", b"", headers=[("h1", b"v1"), ("h2", None)]),
        Record(b"k" * 200, b"v" * 10_000),  # 2-byte key length, 3-byte value length
    ], base_offset=0, base_timestamp=TS)
    cols, _ = decode(batch, headers=True)
    assert cols.keys == [None, b"", b"k" * 200]
    assert cols.values == [None, b"", b"v" * 10_000]
    assert cols.headers == [None, [{"key": "h1", "value": b"v1"}, {"key": "h2", "value": None}],
                            None]
    table = cols.to_arrow("t", 0)
    assert table.schema == arrow_schema(True)
    assert table.column("headers").to_pylist()[1] == [{"key": "h1", "value": b"v1"},
                                                      {"key": "h2", "value": None}]


def test_large_and_negative_deltas():
    # 20,000 records: offset deltas need 3-byte varints; timestamps go backwards.
    records = [Record(None, b"x", timestamp=TS + (i * 7919) % 100_000 - 50_000)
               for i in range(20_000)]
    buf = build_batch(records, base_offset=1_000_000)
    cols, nxt = decode(buf, position=1_000_000)
    assert cols.offsets == list(range(1_000_000, 1_020_000))
    assert cols.stamps == [r.timestamp for r in records]
    assert nxt == 1_020_000


def test_partial_batch_at_the_end_is_left_for_the_next_fetch():
    first = build_batch(recs(b"a"), base_offset=0)
    second = build_batch(recs(b"b"), base_offset=1)
    cols, nxt = decode(first + second[:-5])
    assert cols.values == [b"a"]
    assert nxt == 1


def test_corrupt_batch_is_a_clear_error():
    buf = bytearray(build_batch(recs(b"abc"), base_offset=0))
    buf[-1] ^= 0xFF
    with pytest.raises(TxBrokerSourceError, match="CRC") as info:
        decode(bytes(buf))
    assert info.value.code == "CORRUPT_MESSAGE"


def test_old_message_format_is_rejected():
    buf = bytearray(build_batch(recs(b"abc"), base_offset=0))
    buf[16] = 1
    with pytest.raises(TxBrokerSourceError, match="magic 1"):
        decode(bytes(buf))


# --- against a model of a transactional log -------------------------------------------------

# An operation: ("send", pid, n values, codec) | ("commit", pid) | ("abort", pid) | ("plain", n)
ops_st = st.lists(st.one_of(
    st.tuples(st.just("send"), st.integers(1, 3), st.integers(1, 4),
              st.sampled_from([Compression.NONE, Compression.GZIP, Compression.ZSTD])),
    st.tuples(st.just("commit"), st.integers(1, 3)),
    st.tuples(st.just("abort"), st.integers(1, 3)),
    st.tuples(st.just("plain"), st.integers(1, 3)),
), max_size=30)


def build_log(ops):
    """Batches of a log as a broker writes them, the committed (offset, value) pairs a
    read_committed consumer must see (open transactions at the end excluded: the
    reader is never asked past the last stable offset), the aborted transactions as
    (pid, first offset, marker offset), and the last stable offset."""
    batches: list[tuple[int, int, bytes]] = []  # (base, last, bytes)
    open_txn: dict[int, list[tuple[int, bytes]]] = {}
    first: dict[int, int] = {}
    committed: list[tuple[int, bytes]] = []
    aborted: list[tuple[int, int, int]] = []
    offset = 0
    counter = 0
    for op in ops:
        if op[0] == "send":
            _, pid, n, codec = op
            values = []
            for _ in range(n):
                values.append(b"v%d" % counter)
                counter += 1
            batches.append((offset, offset + n - 1, txn(pid, offset, *values, codec=codec)))
            first.setdefault(pid, offset)
            open_txn.setdefault(pid, []).extend((offset + i, v) for i, v in enumerate(values))
            offset += n
        elif op[0] == "plain":
            values = []
            for _ in range(op[1]):
                values.append(b"p%d" % counter)
                counter += 1
            batches.append((offset, offset + len(values) - 1,
                            build_batch(recs(*values), base_offset=offset)))
            committed.extend((offset + i, v) for i, v in enumerate(values))
            offset += len(values)
        else:
            kind, pid = op
            if pid not in open_txn:
                continue
            control = ControlType.COMMIT if kind == "commit" else ControlType.ABORT
            batches.append((offset, offset, marker(control, pid, offset)))
            if kind == "commit":
                committed.extend(open_txn[pid])
            else:
                aborted.append((pid, first[pid], offset))
            del open_txn[pid], first[pid]
            offset += 1
    lso = min(first.values(), default=offset)
    committed = sorted(x for x in committed if x[0] < lso)
    return batches, committed, aborted, lso


@FAST
@given(ops_st, st.data())
def test_matches_a_model_of_read_committed(ops, data):
    batches, committed, aborted, lso = build_log(ops)
    start = data.draw(st.integers(0, lso))
    end = data.draw(st.integers(start, lso))
    cols = Columns()
    vrows: list[tuple[int, bytes]] = []  # the vectorised decoder, fetch by fetch
    position = start
    # Fetch batch by batch from ``position`` as the broker would: whole batches from the
    # one holding ``position`` up to the LSO, with the aborted transactions overlapping.
    while position < end:
        chunk_size = data.draw(st.integers(1, 4))
        chosen = [b for b in batches if b[1] >= position and b[0] < lso][:chunk_size]
        assert chosen, "the model ran out of batches below the LSO"
        upper = chosen[-1][1] + 1
        listed = [(pid, f) for pid, f, last in aborted if last >= position and f < upper]
        fetched = b"".join(b for _, _, b in chosen)
        nxt = decode_fetch(fetched, listed, position, end, cols)
        vbatch, vnxt = decode_arrow(fetched, listed, position, end, "t", 0)
        assert vnxt == nxt
        vrows.extend(zip(*(rows(vbatch).get(c, []) for c in ("offset", "value")), strict=True))
        assert nxt > position
        position = nxt
    expected = [x for x in committed if start <= x[0] < end]
    assert list(zip(cols.offsets, cols.values, strict=True)) == expected
    assert vrows == expected


def test_struct_layout_assumption():
    # The decoder unpacks the 61-byte header with one struct: keep it in step with protocol.
    from txbroker.protocol.records import _HEADER
    from txbroker.spark_jobs.decoder import _HEADER as OURS

    assert OURS.format == _HEADER.format and OURS.size == 61 == struct.calcsize(">qiibIhiqqqhii")


# --- the vectorised decoder against the reference ----------------------------------------

record_st = st.builds(
    Record,
    key=st.one_of(st.none(), st.binary(max_size=20), st.binary(min_size=60, max_size=300)),
    # Values around 64 and 8192 bytes: lengths of one, two and three varint bytes.
    value=st.one_of(st.none(), st.binary(max_size=70),
                    st.integers(8150, 8250).map(lambda n: b"v" * n)),
    headers=st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))),
                     max_size=2),
    # Deltas from the base timestamp of any width, negative ones included.
    timestamp=st.integers(TS - 2**40, TS + 2**40),
)

# One batch of a log: ("data", records, codec, pid or None, log append time, gap before)
# or ("marker", control type, pid).
batch_st = st.one_of(
    st.tuples(st.just("data"), st.lists(record_st, min_size=1, max_size=6),
              st.sampled_from(list(Compression)), st.one_of(st.none(), st.integers(1, 3)),
              st.booleans(), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("marker"), st.sampled_from([ControlType.COMMIT, ControlType.ABORT]),
              st.integers(1, 3)),
)


def arbitrary_log(specs) -> tuple[bytes, list[tuple[int, int]], int]:
    """Batches as specified, the (pid, first offset) of every transaction the log aborts,
    and the offset after the last batch."""
    out = []
    offset = 0
    first: dict[int, int] = {}
    aborted = []
    for spec in specs:
        if spec[0] == "marker":
            _, kind, pid = spec
            out.append(marker(kind, pid, offset))
            if pid in first and kind == ControlType.ABORT:
                aborted.append((pid, first[pid]))
            first.pop(pid, None)
            offset += 1
            continue
        _, records, codec, pid, log_append, gap, spread = spec
        offset += gap
        # Offset deltas with gaps (a compacted batch) or consecutive.
        deltas = [i * 2 if spread else i for i in range(len(records))]
        raw = build_batch(records, base_offset=offset, compression=codec,
                          producer_id=pid if pid else -1, producer_epoch=0 if pid else -1,
                          base_sequence=0 if pid else -1, transactional=pid is not None,
                          offset_deltas=deltas)
        if log_append:
            buf = bytearray(raw)
            set_log_append_time(buf, 0, len(buf), TS + 12345)
            raw = bytes(buf)
        out.append(raw)
        if pid is not None:
            first.setdefault(pid, offset)
        offset += deltas[-1] + 1
    return b"".join(out), aborted, offset


@FAST
@given(st.lists(batch_st, min_size=1, max_size=8), st.booleans(), st.data())
def test_vectorized_matches_the_reference(specs, headers, data):
    buf, aborted, size = arbitrary_log(specs)
    position = data.draw(st.integers(0, size))
    end = data.draw(st.integers(position, size + 1))
    # A fetch may end inside a batch (the partial batch is left for the next one).
    cut = data.draw(st.sampled_from([len(buf), data.draw(st.integers(0, len(buf)))]))
    decode(buf[:cut], aborted, position, end, headers)


def test_vectorized_batch_is_one_arrow_batch_without_python_rows():
    # 3,000 records of three batches, one compressed, one with null keys: one Arrow batch.
    values = [b"%06d" % i * 17 for i in range(3_000)]
    buf = b"".join([
        build_batch([Record(b"k%d" % i, v, timestamp=TS + i) for i, v in
                     enumerate(values[:1000])], base_offset=0),
        build_batch([Record(None, v, timestamp=TS) for v in values[1000:2000]],
                    base_offset=1000, compression=Compression.LZ4),
        build_batch([Record(b"", v, timestamp=TS - 5) for v in values[2000:]],
                    base_offset=2000),
    ])
    batch, nxt = decode_arrow(buf, [], 0, 3000, "topic", 7)
    assert nxt == 3000
    assert batch.num_rows == 3000 and batch.schema == arrow_schema(False)
    assert batch.column("value").to_pylist() == values
    keys = batch.column("key")
    assert keys.null_count == 1000 and keys[0].as_py() == b"k0" and keys[2999].as_py() == b""
    assert batch.column("offset").to_pylist() == list(range(3000))
    assert set(batch.column("partition").to_pylist()) == {7}


@FAST
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1,
                max_size=6), st.booleans())
def test_vectorized_mangled_batches_fail_cleanly(flips, one_size):
    # CRCs off: a lying broker's bytes reach the record decoding itself. Either the
    # records still decode (then to a valid Arrow batch) or the error is CORRUPT_MESSAGE,
    # never an IndexError, a numpy error or a huge allocation. Records of one size
    # take the walk's run path.
    raw = bytearray(build_batch([Record(b"key", b"v" * (70 if one_size else i * 37 % 200),
                                        timestamp=TS + i)
                                 for i in range(40)], base_offset=5))
    for at, value in flips:
        raw[61 + at % (len(raw) - 61)] = value  # the records, not the batch header
    try:
        batch, nxt = decode_arrow(bytes(raw), [], 0, 2**40, "t", 0, verify_crc=False)
    except TxBrokerSourceError as e:
        assert e.code == "CORRUPT_MESSAGE"
    else:
        assert nxt == 45
        assert batch is None or batch.schema == arrow_schema(False)


def test_vectorized_rejects_a_record_count_larger_than_the_batch():
    raw = bytearray(build_batch(recs(b"a", b"b"), base_offset=0))
    struct.pack_into(">i", raw, 57, 2**31 - 1)  # records count: no array of that size
    with pytest.raises(TxBrokerSourceError, match="record count") as info:
        decode_arrow(bytes(raw), [], 0, 10, "t", 0, verify_crc=False)
    assert info.value.code == "CORRUPT_MESSAGE"


# Runs of records of one size (the walk of record lengths skips over them in slices):
# (records in the run, key length or None, value length), batches cut anywhere.
runs_st = st.lists(st.tuples(st.integers(1, 90), st.one_of(st.none(), st.integers(0, 9)),
                             st.sampled_from([0, 1, 50, 55, 56, 57, 120, 8170, 8180])),
                   min_size=1, max_size=5)


@FAST
@given(runs_st, st.lists(st.integers(1, 200), min_size=1, max_size=4),
       st.sampled_from([Compression.NONE, Compression.LZ4]), st.data())
def test_vectorized_runs_of_equal_sized_records(runs, cuts, codec, data):
    records = [Record(None if klen is None else b"k" * klen, b"%d" % (n % 10) * vlen,
                      timestamp=TS + n)
               for n, (count, klen, vlen) in enumerate(runs) for _ in range(count)]
    buf = b""
    start = 0
    for cut in [*cuts, len(records)]:
        chunk = records[start:start + cut]
        if chunk:
            buf += build_batch(chunk, base_offset=start, compression=codec)
        start += len(chunk)
    position = data.draw(st.integers(0, len(records)))
    cols, nxt = decode(buf, position=position)
    assert nxt == len(records)
    assert cols.offsets == list(range(position, len(records)))


def _uvarint_bytes(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


@pytest.mark.parametrize("key_len", [2**63 - 1, 2**62, 2**40, 5, -2])
def test_vectorized_key_length_beyond_the_record(key_len):
    # A record whose key length is far larger than the record (a 10-byte varint, which
    # would overflow a position) or below -1: CORRUPT_MESSAGE, not a read elsewhere.
    zigzag = (key_len << 1) ^ (key_len >> 63)
    body = b"\x00\x00\x00" + _uvarint_bytes(zigzag) + b"\x02v\x00"
    record = _uvarint_bytes(len(body) << 1) + body
    raw = bytearray(build_batch([Record(None, b"v")], base_offset=0))
    raw[61:] = record
    struct.pack_into(">i", raw, 8, len(raw) - 12)
    with pytest.raises(TxBrokerSourceError, match="outside the record") as info:
        decode_arrow(bytes(raw), [], 0, 10, "t", 0, verify_crc=False)
    assert info.value.code == "CORRUPT_MESSAGE"
