"""The txbroker Spark source's read_committed decoder over hand-built record batches:
control batches, aborted transactions, offset gaps, range bounds, compression,
timestamps, headers, and the Arrow schema Spark checks its batches against."""

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
    cols = Columns(headers)
    nxt = decode_fetch(buf, aborted, position, end, cols)
    return cols, nxt


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
    position = start
    # Fetch batch by batch from ``position`` as the broker would: whole batches from the
    # one holding ``position`` up to the LSO, with the aborted transactions overlapping.
    while position < end:
        chunk_size = data.draw(st.integers(1, 4))
        chosen = [b for b in batches if b[1] >= position and b[0] < lso][:chunk_size]
        assert chosen, "the model ran out of batches below the LSO"
        upper = chosen[-1][1] + 1
        listed = [(pid, f) for pid, f, last in aborted if last >= position and f < upper]
        nxt = decode_fetch(b"".join(b for _, _, b in chosen), listed, position, end, cols)
        assert nxt > position
        position = nxt
    expected = [x for x in committed if start <= x[0] < end]
    assert list(zip(cols.offsets, cols.values, strict=True)) == expected


def test_struct_layout_assumption():
    # The decoder unpacks the 61-byte header with one struct: keep it in step with protocol.
    from txbroker.protocol.records import _HEADER
    from txbroker.spark_jobs.decoder import _HEADER as OURS

    assert OURS.format == _HEADER.format and OURS.size == 61 == struct.calcsize(">qiibIhiqqqhii")
