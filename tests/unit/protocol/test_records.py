"""RecordBatch v2: builders and decoding, header fields, CRC coverage, validation."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder
from txbroker.protocol import records as records_module
from txbroker.protocol.compression import Compression, compress, decompress
from txbroker.protocol.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
)
from txbroker.protocol.records import (
    ATTR_TIMESTAMP_TYPE,
    CRC_START,
    HEADER_SIZE,
    LOG_OVERHEAD,
    ControlType,
    Record,
    build_batch,
    build_control_batch,
    build_end_txn_marker,
    compute_crc,
    control_type_of,
    decode_records,
    iter_batches,
    peek_size,
    read_header,
    set_base_offset,
    set_create_time_max_timestamp,
    set_log_append_time,
    uncompressed_limit,
    validate_batch,
    validate_produced_batch,
    validate_produced_records,
    validate_records,
)

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

keys = st.none() | st.binary(max_size=40)
values = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3)
timestamps = st.one_of(st.just(-1), st.integers(0, 2**41))
records_st = st.lists(st.builds(Record, keys, values, headers, timestamps), min_size=1, max_size=8)
codecs = st.sampled_from(list(Compression))


def _expected_timestamps(records: list[Record]) -> list[int]:
    known = [r.timestamp for r in records if r.timestamp != -1]
    base = min(known) if known else 0
    return [base if r.timestamp == -1 else r.timestamp for r in records]


@FAST
@given(records=records_st, codec=codecs, base_offset=st.integers(0, 2**40),
       pid=st.integers(-1, 2**40), epoch=st.integers(-1, 2**15 - 1), seq=st.integers(-1, 2**31 - 100),
       transactional=st.booleans())
def test_build_decode_round_trip(records, codec, base_offset, pid, epoch, seq, transactional):
    data = build_batch(records, base_offset=base_offset, compression=codec, producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, transactional=transactional)
    header = validate_batch(data)
    stamps = _expected_timestamps(records)
    # Header fields.
    assert header.size == len(data)
    assert header.batch_length == len(data) - LOG_OVERHEAD
    assert header.magic == 2
    assert header.base_offset == base_offset
    assert header.last_offset_delta == len(records) - 1
    assert header.last_offset == base_offset + len(records) - 1
    assert header.records_count == len(records)
    assert header.compression == codec
    assert header.is_transactional == transactional
    assert not header.is_control
    assert header.base_timestamp == min(stamps)
    assert header.max_timestamp == max(stamps)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (pid, epoch, seq)
    assert header.partition_leader_epoch == -1
    if seq >= 0:
        assert header.last_sequence == seq + len(records) - 1
    # Records.
    decoded = decode_records(data)
    assert [(r.key, r.value, r.headers) for r in decoded] == \
        [(r.key, r.value, r.headers) for r in records]
    assert [r.timestamp for r in decoded] == stamps
    assert [r.offset for r in decoded] == list(range(base_offset, base_offset + len(records)))


@FAST
@given(records=records_st, codec=codecs)
def test_kafka_python_reads_our_batches(records, codec):
    """An independent implementation (kafka-python) decodes what we build, CRC included."""
    data = build_batch(records, compression=codec, producer_id=9, producer_epoch=2, base_sequence=5)
    batch = MemoryRecords(data).next_batch()
    assert batch.validate_crc()
    assert batch.compression_type == int(codec)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 2, 5)
    got = [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in batch]
    want = [(i, ts, r.key, r.value, r.headers)
            for i, (r, ts) in enumerate(zip(records, _expected_timestamps(records), strict=True))]
    assert got == want


@FAST
@given(records=st.lists(st.tuples(keys, st.binary(max_size=200), st.integers(0, 2**41),
                                   st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=8)),
                                            max_size=2)), min_size=1, max_size=6),
       codec=codecs, transactional=st.booleans())
def test_we_read_kafka_python_batches(records, codec, transactional):
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec),
                                        is_transactional=transactional, producer_id=4,
                                        producer_epoch=1, base_sequence=0, batch_size=1 << 20)
    for i, (key, value, ts, hdrs) in enumerate(records):
        builder.append(i, timestamp=ts, key=key, value=value, headers=hdrs)
    data = bytes(builder.build())
    header = validate_produced_batch(data)
    assert header.records_count == len(records)
    assert header.is_transactional == transactional
    # kafka-python stores a batch uncompressed when compression would not make it smaller.
    assert header.compression in (codec, Compression.NONE)
    decoded = decode_records(data)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == \
        [(i, ts, key, value, list(hdrs)) for i, (key, value, ts, hdrs) in enumerate(records)]


@given(st.binary(max_size=5000), codecs)
@settings(max_examples=40, deadline=None)
def test_compression_round_trip(data, codec):
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_decompress_garbage_is_corrupt(codec):
    with pytest.raises(CorruptRecordError):
        decompress(codec, b"\x00\x01garbage that is not compressed\xff" * 3)


# --- CRC coverage ---------------------------------------------------------------------


def _sample_batch() -> bytes:
    return build_batch([Record(b"key", b"value", [("h", b"v")], 1_700_000_000_000),
                        Record(None, b"second", [], 1_700_000_000_005)],
                       producer_id=11, producer_epoch=0, base_sequence=3)


SAMPLE = _sample_batch()


@given(position=st.integers(CRC_START, len(SAMPLE) - 1), flip=st.integers(1, 255))
@settings(max_examples=150, deadline=None)
def test_crc_covers_attributes_to_end(position, flip):
    data = bytearray(SAMPLE)
    data[position] ^= flip
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batch(data)


@given(position=st.integers(0, 7), flip=st.integers(1, 255))
def test_crc_does_not_cover_base_offset(position, flip):
    data = bytearray(SAMPLE)
    data[position] ^= flip
    validate_batch(data)


@given(position=st.integers(12, 15), flip=st.integers(1, 255))
def test_crc_does_not_cover_partition_leader_epoch(position, flip):
    data = bytearray(SAMPLE)
    data[position] ^= flip
    validate_batch(data)


@given(st.integers(0, 2**63 - 1))
def test_set_base_offset_keeps_batch_valid(base):
    data = bytearray(SAMPLE)
    set_base_offset(data, 0, base)
    header = validate_batch(data)
    assert header.base_offset == base
    assert [r.offset for r in decode_records(data)] == [base, base + 1]
    assert data[8:] == SAMPLE[8:]


def test_crc_field_is_crc32c_of_the_covered_range():
    (stored,) = struct.unpack_from(">I", SAMPLE, 17)
    assert stored == compute_crc(SAMPLE, 0, len(SAMPLE))
    assert stored == crc32c.crc32c(SAMPLE[CRC_START:])


def test_set_log_append_time():
    data = bytearray(SAMPLE)
    set_log_append_time(data, 0, len(data), 1_800_000_000_000)
    header = validate_batch(data)
    assert header.log_append_time and header.attributes & ATTR_TIMESTAMP_TYPE
    assert header.max_timestamp == 1_800_000_000_000
    assert [r.timestamp for r in decode_records(data)] == [1_800_000_000_000] * 2


# --- validation ---------------------------------------------------------------------------


@given(st.integers(0, len(SAMPLE) - 1))
def test_validate_rejects_truncated(cut):
    with pytest.raises(CorruptRecordError):
        validate_batch(SAMPLE[:cut])
    with pytest.raises(CorruptRecordError):
        validate_batch(SAMPLE, 0, cut)


@given(st.integers(1, 2**20))
def test_validate_rejects_length_beyond_the_bytes(extra):
    data = bytearray(SAMPLE)
    struct.pack_into(">i", data, 8, len(SAMPLE) - LOG_OVERHEAD + extra)
    with pytest.raises(CorruptRecordError, match="exceeds"):
        validate_batch(data)
    # A producer sending it gets INVALID_RECORD (no complete batch), as from Kafka.
    with pytest.raises(InvalidRecordError, match="at least one record batch"):
        validate_produced_batch(data)


@given(st.integers(-(2**31), HEADER_SIZE - LOG_OVERHEAD - 1))
def test_validate_rejects_length_below_header(length):
    data = bytearray(SAMPLE)
    struct.pack_into(">i", data, 8, length)
    with pytest.raises(CorruptRecordError):
        validate_batch(data)


@given(st.integers(1, 200))
def test_validate_shorter_length_breaks_crc(less):
    data = bytearray(SAMPLE)
    struct.pack_into(">i", data, 8, len(SAMPLE) - LOG_OVERHEAD - min(less, len(SAMPLE) - HEADER_SIZE))
    with pytest.raises(CorruptRecordError):
        validate_batch(data)


@pytest.mark.parametrize("magic", [0, 1, 3, 255])
def test_validate_rejects_other_magic(magic):
    data = bytearray(SAMPLE)
    data[16] = magic
    with pytest.raises(InvalidRecordError, match="magic"):
        validate_batch(data)


def test_validate_at_offset_and_with_trailing_bytes():
    data = b"\x00" * 7 + SAMPLE + b"trailing"
    header = validate_batch(data, 7)
    assert header.size == len(SAMPLE)
    assert validate_batch(data, 7, 7 + len(SAMPLE)) == header


def test_validate_rejects_unknown_codec():
    data = bytearray(SAMPLE)
    struct.pack_into(">h", data, 21, 5)
    struct.pack_into(">I", data, 17, compute_crc(data, 0, len(data)))
    with pytest.raises(CorruptRecordError, match="compression"):
        validate_batch(data)


def _with_fields(base: bytes, **fields) -> bytes:
    offsets = {"base_offset": (0, ">q"), "last_offset_delta": (23, ">i"),
               "records_count": (57, ">i"), "base_sequence": (53, ">i"),
               "attributes": (21, ">h")}
    data = bytearray(base)
    for name, value in fields.items():
        pos, fmt = offsets[name]
        struct.pack_into(fmt, data, pos, value)
    struct.pack_into(">I", data, 17, compute_crc(data, 0, len(data)))
    return bytes(data)


@pytest.mark.parametrize("fields,error,match", [
    ({"records_count": 0, "last_offset_delta": -1}, InvalidRecordError, "offset delta"),
    ({"records_count": 0}, InvalidRecordError, "no records"),
    ({"records_count": 5}, InvalidRecordError, "inconsistent"),
    ({"last_offset_delta": 4}, InvalidRecordError, "inconsistent"),
    ({"records_count": -3}, InvalidRecordError, "record count"),
    ({"base_offset": 1}, InvalidRecordError, "base offset"),
    ({"base_sequence": -1}, InvalidRecordError, "sequence"),
    ({"attributes": 0x20}, InvalidRecordError, "control"),
])
def test_validate_produced_batch_rules(fields, error, match):
    with pytest.raises(error, match=match):
        validate_produced_batch(_with_fields(SAMPLE, **fields))


def test_validate_produced_batch_accepts_plain_and_idempotent_batches():
    validate_produced_batch(SAMPLE)
    validate_produced_batch(build_batch([Record(None, b"x")]))
    validate_produced_batch(build_batch([Record(None, b"x")], transactional=True, producer_id=1,
                                        producer_epoch=0, base_sequence=0))


@pytest.mark.parametrize("fields", [{"records_count": -3},
                                    {"records_count": 0, "last_offset_delta": -1}])
def test_negative_count_or_delta_in_a_log_is_corruption(fields):
    """The same fields under an intact CRC: INVALID_RECORD from a producer (above), but
    corruption when read from a log file."""
    with pytest.raises(CorruptRecordError):
        validate_batch(_with_fields(SAMPLE, **fields))


@pytest.mark.parametrize("data", [b"", b"\x00" * 11])
def test_validate_produced_batch_without_a_batch(data):
    with pytest.raises(InvalidRecordError, match="at least one record batch"):
        validate_produced_batch(data)


# --- iteration and control batches ------------------------------------------------------------


@given(st.lists(st.integers(1, 5), min_size=1, max_size=6), st.integers(0, 60))
def test_iter_batches_stops_at_partial_tail(counts, tail):
    batches = []
    offset = 0
    for n in counts:
        batches.append(build_batch([Record(None, b"v" * n)] * n, base_offset=offset))
        offset += n
    data = b"".join(batches)
    extra = build_batch([Record(b"k", b"tail")], base_offset=offset)[: min(tail, 60)]
    found = list(iter_batches(data + extra))
    assert [pos for pos, _ in found] == [sum(len(b) for b in batches[:i]) for i in range(len(batches))]
    assert [h.records_count for _, h in found] == counts
    assert peek_size(data) == len(batches[0])


@pytest.mark.parametrize("kind", list(ControlType))
@pytest.mark.parametrize("coordinator_epoch", [0, 9, 2**31 - 1])
def test_end_txn_marker_is_build_control_batch(kind, coordinator_epoch):
    # The marker built from its cached record: the same bytes, and the header it returns
    # is the one in them (the log appends with it, without reading the batch back).
    for pid, epoch, ts in ((0, 0, 0), (77, 4, 1_700_000_000_000), (2**62, 32767, 2**41)):
        batch, header = build_end_txn_marker(kind, producer_id=pid, producer_epoch=epoch,
                                             coordinator_epoch=coordinator_epoch, timestamp=ts)
        expected = build_control_batch(kind, producer_id=pid, producer_epoch=epoch,
                                       coordinator_epoch=coordinator_epoch, timestamp=ts)
        assert bytes(batch) == expected
        assert header == validate_batch(expected)


@pytest.mark.parametrize("kind", list(ControlType))
def test_control_batch_round_trip(kind):
    data = build_control_batch(kind, producer_id=77, producer_epoch=4, coordinator_epoch=9,
                               base_offset=123, timestamp=1_700_000_000_000)
    header = validate_batch(data)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch) == (77, 4)
    assert header.base_sequence == -1
    assert header.base_offset == 123 and header.records_count == 1
    (record,) = decode_records(data)
    assert control_type_of(record) == kind
    assert record.key == struct.pack(">hh", 0, int(kind))
    assert record.value == struct.pack(">hi", 0, 9)
    assert record.timestamp == 1_700_000_000_000 and record.offset == 123
    # Clients may not write them.
    with pytest.raises(InvalidRecordError):
        validate_produced_batch(set_zero_base(data))


def set_zero_base(data: bytes) -> bytes:
    buf = bytearray(data)
    set_base_offset(buf, 0, 0)
    return bytes(buf)


def test_control_type_of_short_key():
    with pytest.raises(CorruptRecordError):
        control_type_of(Record(b"\x00", None))


def test_build_batch_needs_records():
    with pytest.raises(ValueError):
        build_batch([])


def test_read_header_needs_61_bytes():
    with pytest.raises(CorruptRecordError):
        read_header(SAMPLE[:60])


@settings(max_examples=300, deadline=None)
@given(key=st.one_of(st.none(), st.binary(max_size=300)),
       value=st.one_of(st.none(), st.binary(max_size=300)),
       ts=st.integers(0, 2**45), pid=st.integers(-1, 2**40), epoch=st.integers(-1, 32767),
       transactional=st.booleans(), control=st.booleans())
def test_single_record_batch_is_build_batch(key, value, ts, pid, epoch, transactional, control):
    from txbroker.protocol.records import Record, build_batch, build_single_record_batch

    assert build_single_record_batch(
        key, value, ts, producer_id=pid, producer_epoch=epoch, transactional=transactional,
        control=control) == build_batch(
        [Record(key, value, timestamp=ts)], producer_id=pid, producer_epoch=epoch,
        transactional=transactional, control=control)


@pytest.mark.parametrize("commit", [True, False])
@pytest.mark.parametrize("coordinator_epoch", [0, 7, 2**31 - 1])
def test_read_control_type(commit, coordinator_epoch):
    from txbroker.protocol.records import (
        Compression,
        ControlType,
        CorruptRecordError,
        Record,
        build_batch,
        build_control_batch,
        control_type_of,
        coordinator_epoch_of,
        decode_records,
        read_control_type,
        read_end_txn_marker,
    )

    kind = ControlType.COMMIT if commit else ControlType.ABORT
    batch = build_control_batch(kind, producer_id=5, producer_epoch=1,
                                coordinator_epoch=coordinator_epoch, timestamp=1_700_000_000_000)
    assert read_control_type(batch) == control_type_of(decode_records(batch)[0]) == kind
    assert read_control_type(b"\0" * 3 + batch, 3) == kind
    assert read_end_txn_marker(batch) == (kind, coordinator_epoch)
    assert read_end_txn_marker(b"\0" * 3 + batch, 3) == (kind, coordinator_epoch)
    assert coordinator_epoch_of(decode_records(batch)[0]) == coordinator_epoch
    empty = bytearray(build_batch([Record(b"k", b"v")], control=True))
    struct.pack_into(">i", empty, 57, 0)  # records count 0
    assert read_control_type(empty) is None
    assert read_end_txn_marker(empty) is None
    # Compressed, and a value from a newer marker version (extra bytes after the epoch).
    key = struct.pack(">hh", 0, int(kind))
    newer = build_batch([Record(key, struct.pack(">hiq", 1, coordinator_epoch, 42))],
                        control=True, compression=Compression.GZIP)
    assert read_end_txn_marker(newer) == (kind, coordinator_epoch)
    for value in (None, b"\0\0\0\0\0", struct.pack(">hi", -1, 3)):
        bad = build_batch([Record(key, value)], control=True)
        with pytest.raises(CorruptRecordError):
            read_end_txn_marker(bad)


# --- record content against the header (Kafka's LogValidator) -------------------------


def _with_header(batch: bytes, **fields: int) -> bytes:
    """``batch`` with header fields replaced and its CRC fixed: a lie a CRC cannot catch."""
    b = bytearray(batch)
    for name, value in fields.items():
        fmt, at = {"records_count": (">i", 57), "last_offset_delta": (">i", 23),
                   "max_timestamp": (">q", 35)}[name]
        struct.pack_into(fmt, b, at, value)
    struct.pack_into(">I", b, 17, compute_crc(b, 0, len(b)))
    return bytes(b)


def _check(batch: bytes):
    return validate_produced_records(batch, validate_produced_batch(batch))


@FAST
@given(records=records_st, codec=codecs)
def test_every_built_batch_passes_content_validation(records, codec):
    batch = build_batch(records, compression=codec)
    summary = _check(batch)
    decoded = decode_records(batch)
    assert summary.records_count == len(records)
    assert summary.has_null_key == any(r.key is None for r in decoded)
    assert summary.max_timestamp == max([-1] + [r.timestamp for r in decoded])
    assert summary.min_timestamp == min((r.timestamp for r in decoded if r.timestamp != -1),
                                        default=None)


@FAST
@given(n=st.integers(1, 300), value_size=st.sampled_from([0, 5, 100, 1024]),
       codec=codecs, spread=st.integers(0, 20_000))
def test_many_records_of_one_shape_pass(n, value_size, codec, spread):
    # The column-by-column path: same-size records over the 64 and 8192 delta widths.
    recs = [Record(None, b"v" * value_size, timestamp=1_000_000 + (i * spread) // n)
            for i in range(n)]
    summary = _check(build_batch(recs, compression=codec))
    assert summary.records_count == n
    assert summary.max_timestamp == max(r.timestamp for r in recs)
    assert summary.min_timestamp == 1_000_000


@FAST
@given(stamps=st.lists(st.integers(-3, 70), min_size=9, max_size=300),
       base=st.sampled_from([0, 1_700_000_000_000]), data=st.data())
def test_column_timestamps_in_any_order(stamps, base, data):
    """The column path takes a run's lowest and highest timestamp from its first and
    last record when every other lies between them, else from all: any order of
    one-byte timestamp deltas (and -1 timestamps among them, at base 0) gives the
    smallest and largest of the records."""
    if data.draw(st.booleans()):
        stamps = sorted(stamps, reverse=data.draw(st.booleans()))
    timestamps = [base + t if base == 0 or t != -1 else t for t in stamps]
    recs = [Record(b"k", b"v" * 30, timestamp=t) for t in timestamps]
    summary = _check(build_batch(recs))
    assert summary.max_timestamp == max(timestamps)
    assert summary.min_timestamp == min((t for t in timestamps if t != -1), default=None)


@FAST
@given(data=st.data(), negative=st.booleans(), base=st.sampled_from([10_000, 1_700_000_000_000]))
def test_column_two_byte_timestamps_in_any_order(data, negative, base):
    """Two-byte timestamp deltas (64 to 8191 ms from the batch's base timestamp, as a
    lingering producer's batch has; or -8192 to -65, records older than the base): the
    column path's lowest and highest, in any order, with and without negative deltas."""
    delta = st.integers(64, 8191)
    if negative:
        delta = st.one_of(delta, st.integers(-8192, -65))
    deltas = data.draw(st.lists(delta, min_size=9, max_size=300))
    if data.draw(st.booleans()):
        deltas.sort(reverse=data.draw(st.booleans()))
    timestamps = [base + d for d in deltas]
    recs = [Record(b"k", b"v" * 30, timestamp=t) for t in timestamps]
    summary = _check(build_batch(recs, base_timestamp=base))
    assert summary.records_count == len(recs)
    assert summary.max_timestamp == max(timestamps)
    assert summary.min_timestamp == min(timestamps)


def test_ten_thousand_records_cross_every_offset_width():
    recs = [Record(b"k", b"v") for _ in range(10_000)]
    assert _check(build_batch(recs)).records_count == 10_000


@pytest.mark.parametrize("claimed", [2, 5_000_000, 2**31 - 1])
@pytest.mark.parametrize("codec", list(Compression))
def test_records_count_larger_than_the_records_is_invalid(claimed, codec):
    # The reproducer: one record, a header claiming millions, a valid CRC.
    batch = _with_header(build_batch([Record(b"k", b"v")], compression=codec),
                         records_count=claimed, last_offset_delta=claimed - 1)
    with pytest.raises(InvalidRecordError, match=f"declares {claimed} records but holds 1"):
        _check(batch)


@pytest.mark.parametrize("codec", list(Compression))
def test_records_count_smaller_than_the_records_is_invalid(codec):
    batch = _with_header(build_batch([Record(b"k", b"v")] * 3, compression=codec),
                         records_count=2, last_offset_delta=1)
    with pytest.raises(InvalidRecordError, match="bytes follow the last"):
        _check(batch)


@FAST
@given(records=st.lists(st.builds(Record, keys, values), min_size=1, max_size=30),
       claimed=st.integers(1, 2**31 - 1), codec=codecs)
def test_any_count_other_than_the_records_is_invalid(records, claimed, codec):
    if claimed == len(records):
        claimed += 1
    batch = _with_header(build_batch(records, compression=codec),
                         records_count=claimed, last_offset_delta=claimed - 1)
    with pytest.raises(InvalidRecordError):
        _check(batch)


@pytest.mark.parametrize("deltas", [[0, 2, 2], [1, 1, 2], [0, 0, 2], [2, 1, 2]])
def test_offset_deltas_must_be_consecutive_from_zero(deltas):
    # The header is consistent (lastOffsetDelta 2, 3 records); the records are not.
    batch = build_batch([Record(b"k", b"v")] * 3, offset_deltas=deltas)
    with pytest.raises(InvalidRecordError, match="consecutive"):
        _check(batch)


def _one_record(body: bytes, length: int | None = None) -> bytes:
    """A 1-record batch whose record bytes are written by hand."""
    from txbroker.protocol.primitives import write_varint

    raw = bytearray()
    write_varint(raw, len(body) if length is None else length)
    raw += body
    template = bytearray(build_batch([Record(None, b"")]))
    out = template[:HEADER_SIZE] + raw
    struct.pack_into(">i", out, 8, len(out) - LOG_OVERHEAD)
    struct.pack_into(">I", out, 17, compute_crc(out, 0, len(out)))
    return bytes(out)


# attributes, timestamp delta 0, offset delta 0, then key, value, headers (zigzag varints)
GOOD_BODY = b"\x00\x00\x00" + b"\x02k" + b"\x02v" + b"\x00"


@pytest.mark.parametrize("body,length,words", [
    (GOOD_BODY, len(GOOD_BODY) + 1, "claims"),  # length past the batch
    (GOOD_BODY + b"\x00", None, "fields end"),  # a byte the fields do not cover
    (GOOD_BODY, len(GOOD_BODY) - 1, "fields end|runs? past"),  # length shorter than fields
    (b"\x00\x00\x00\x10k\x02v\x00", None, "runs? past"),  # key length 8, 1 byte there
    (b"\x00\x00\x00\x02k\x10v\x00", None, "runs? past|fields end"),  # value length 8
    (b"\x00\x00\x00\x03\x02v\x00", None, "key length -2"),
    (b"\x00\x00\x00\x02k\x05\x00", None, "value length -3"),
    (b"\x00\x00\x00\x02k\x02v\x01", None, "claims -1 headers"),
    (b"\x00\x00\x00\x02k\x02v\x20", None, "claims 16 headers"),
    (b"\x00\x00\x00\x02k\x02v\x02\x01\x00", None, "header key length -1"),
    (b"\x00\x00\x00\x02k\x02v\x02\x02h\x05", None, "header value length -3"),
    (b"\x00\x00\x00\x02k\x02v\x02\x02h\x10", None, "runs? past|fields end"),
    (b"\x00\x00\xff\xff\xff\xff\xff\x01\x02v\x00", None, "malformed"),  # 6-byte varint
    (b"\x00" + b"\xff" * 10 + b"\x01\x00\x02k\x02v\x00", None, "malformed"),  # 11-byte varlong
    (b"", None, "claims 0"),
], ids=["length-past-batch", "trailing-byte-in-record", "length-short", "key-past-record",
        "value-past-record", "key-length-minus-2", "value-length-minus-3", "negative-headers",
        "headers-beyond-bytes", "header-key-negative", "header-value-minus-3",
        "header-value-past-record", "varint-too-long", "varlong-too-long", "empty-record"])
def test_malformed_record_is_invalid(body, length, words):
    with pytest.raises(InvalidRecordError, match=words):
        _check(_one_record(body, length))


def test_hand_written_good_record_passes():
    assert _check(_one_record(GOOD_BODY)).records_count == 1


def test_trailing_bytes_after_the_last_record_are_invalid():
    b = bytearray(build_batch([Record(b"k", b"v")] * 2))
    b += b"\x00\x00"
    struct.pack_into(">i", b, 8, len(b) - LOG_OVERHEAD)
    struct.pack_into(">I", b, 17, compute_crc(b, 0, len(b)))
    with pytest.raises(InvalidRecordError, match="2 bytes follow the last"):
        _check(bytes(b))


def _record_starts(batch) -> list[int]:
    from txbroker.protocol.primitives import read_varint

    starts, pos = [], HEADER_SIZE
    while pos < len(batch):
        starts.append(pos)
        length, after = read_varint(batch, pos)
        pos = after + length
    return starts


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 200), value_size=st.sampled_from([1, 30, 700]),
       data=st.data())
def test_column_path_decides_as_record_by_record(n, value_size, data):
    """Mutating any byte of a batch of same-shape records: the column-by-column
    checks accept and reject exactly what decoding one record at a time does."""
    recs = [Record(None if i % 50 == 49 else b"key", b"v" * value_size,
                   timestamp=5_000 + i % 90) for i in range(n)]
    batch = bytearray(build_batch(recs))
    starts = _record_starts(batch)
    for _ in range(data.draw(st.integers(1, 3))):
        if data.draw(st.booleans()):  # anywhere
            at = data.draw(st.integers(HEADER_SIZE, len(batch) - 1))
        else:  # a length, timestamp or offset byte of a record, or the last byte before one
            at = data.draw(st.sampled_from(starts)) + data.draw(st.integers(-1, 8))
            at = min(max(at, HEADER_SIZE), len(batch) - 1)
        batch[at] = data.draw(st.integers(0, 255))
    header = read_header(batch)

    def outcome():
        try:
            return validate_records(bytes(batch), header, HEADER_SIZE)
        except InvalidRecordError as e:
            return type(e)

    fast = outcome()
    saved = records_module._FAST_OFFSET_WIDTH
    records_module._FAST_OFFSET_WIDTH = 0  # every record decoded on its own
    try:
        slow = outcome()
    finally:
        records_module._FAST_OFFSET_WIDTH = saved
    assert fast == slow


def _walk_outcome(batch: bytes, header, **settings_: int):
    """validate_records with module settings changed for the call: the summary, or
    the error's type and message."""
    saved = {name: getattr(records_module, name) for name in settings_}
    for name, value in settings_.items():
        setattr(records_module, name, value)
    try:
        return validate_records(batch, header, HEADER_SIZE)
    except InvalidRecordError as e:
        return type(e), str(e)
    finally:
        for name, value in saved.items():
            setattr(records_module, name, value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(st.builds(Record, keys, st.none() | st.binary(max_size=90), headers,
                                  timestamps), min_size=1, max_size=14),
       same_shape=st.booleans(), data=st.data())
def test_few_records_path_decides_as_the_column_path(records, same_shape, data):
    """The record-by-record path of small batches, the column path and decoding every
    record with its shape (the column path switched off) give the same summary or
    the same error and message, on built batches and on mutations of any byte."""
    if same_shape:  # the shape the column checks take
        records = [Record(b"key", b"v" * 40, timestamp=1_000 + i % 3) for i in range(len(records))]
    batch = bytearray(build_batch(records))
    for _ in range(data.draw(st.integers(0, 2))):
        at = data.draw(st.integers(HEADER_SIZE, len(batch) - 1))
        batch[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):  # the header's count, a lie the CRC does not see here
        struct.pack_into(">i", batch, 57, data.draw(st.integers(0, 16)))
    header = read_header(batch)
    batch = bytes(batch)
    each = _walk_outcome(batch, header, _FEW_RECORDS=100)
    assert _walk_outcome(batch, header, _FEW_RECORDS=0) == each
    assert _walk_outcome(batch, header, _FEW_RECORDS=0, _FAST_OFFSET_WIDTH=0) == each


@pytest.mark.parametrize("codec", [c for c in Compression if c != Compression.NONE])
def test_decompression_past_the_bound_is_message_too_large(codec):
    batch = build_batch([Record(None, bytes(200_000))] * 20, compression=codec)  # 4 MB of zeros
    header = validate_produced_batch(batch)
    assert validate_produced_records(batch, header, max_uncompressed=5_000_000).records_count == 20
    with pytest.raises(RecordTooLargeError, match="decompresses to"):
        validate_produced_records(batch, header, max_uncompressed=1_000_000)


def test_decompression_bomb_stops_at_the_bound():
    import tracemalloc

    import cramjam

    zeros = bytes(256 * 1024 * 1024)  # 256 MiB of records' worth, 8 KiB compressed
    payload = bytes(cramjam.zstd.compress(zeros, level=1))
    del zeros
    b = bytearray(build_batch([Record(None, b"")], compression=Compression.ZSTD))
    b = b[:HEADER_SIZE] + payload
    struct.pack_into(">i", b, 8, len(b) - LOG_OVERHEAD)
    struct.pack_into(">I", b, 17, compute_crc(b, 0, len(b)))
    header = validate_produced_batch(b)
    tracemalloc.start()
    try:
        with pytest.raises(RecordTooLargeError):
            validate_produced_records(b, header, max_uncompressed=uncompressed_limit(1048588))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * uncompressed_limit(1048588)


def test_uncompressed_limit_follows_max_message_bytes():
    assert uncompressed_limit(1048588) == 32 * 1048588
    assert uncompressed_limit(1000) == 32 * 1024 * 1024


def test_set_create_time_max_timestamp_keeps_the_batch_valid():
    batch = bytearray(build_batch([Record(b"k", b"v", timestamp=500)]))
    set_log_append_time(batch, 0, len(batch), 9)
    header = set_create_time_max_timestamp(batch, read_header(batch), 500)
    assert header == validate_batch(batch)
    assert header.max_timestamp == 500 and not header.log_append_time


@given(keys=st.lists(st.booleans(), min_size=1, max_size=20),
       stamps=st.lists(st.integers(0, 20), min_size=20, max_size=20),
       compacted=st.booleans())
def test_find_record_errors_one_reason_per_record_key_first(keys, stamps, compacted):
    """KIP-467 record errors as Kafka's LogValidator finds them: a keyless record on a
    compacted topic, else a timestamp outside the accepted range [5, 15]; the
    indexes are the records' places in the batch, in order, and only those records."""
    from txbroker.protocol.records import RecordError, find_record_errors

    recs = [Record(b"k" if has_key else None, b"v", timestamp=stamps[i])
            for i, has_key in enumerate(keys)]
    batch = records_module.build_batch(recs)
    header = records_module.read_header(batch)
    got = find_record_errors(batch, header, partition="t-0", compacted=compacted,
                             timestamp_range=(5, 15))
    expected = []
    for i, rec in enumerate(recs):
        if compacted and rec.key is None:
            expected.append((i, False))
        elif not 5 <= rec.timestamp <= 15:
            expected.append((i, True))
    assert [(e.batch_index, e.timestamp) for e in got] == expected
    assert all(isinstance(e, RecordError) for e in got)
    assert all("partition t-0" in e.message for e in got if not e.timestamp)
