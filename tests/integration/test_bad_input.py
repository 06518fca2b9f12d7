"""Bad input on the wire: Kafka's answer (an error code or a closed connection), a
clear broker log line, nothing partially appended, and the broker keeps serving."""

from __future__ import annotations

import logging
import struct
import time

import pytest
from txbroker.protocol.compression import Compression
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import decode_response
from txbroker.protocol.records import (
    HEADER_SIZE,
    Record,
    build_batch,
    compute_crc,
    validate_batch,
)

from tests.integration.wire_util import (
    API_VERSIONS,
    FETCH,
    METADATA,
    PRODUCE,
    api_versions_request,
    assert_serving,
    batch,
    connect,
    expect_closed,
    fetch_request,
    frame,
    log_end_offset,
    metadata_request,
    partition_response,
    produce_request,
    raw_header,
    recv_response,
    sized,
    wait_for_log,
)


@pytest.fixture(autouse=True)
def _info_logs(caplog):
    caplog.set_level(logging.INFO)


@pytest.fixture
def topic(txbroker):
    txbroker.create_topic("bad", 2)
    return "bad"


def _fix_crc(buf: bytearray) -> bytearray:
    struct.pack_into(">I", buf, 17, compute_crc(buf, 0, len(buf)))
    return buf


# --- framing -------------------------------------------------------------------------


def test_http_request_instead_of_kafka(txbroker, caplog):
    """'GET ' read as a size prefix is ~1.2 GB: closed before any body is read."""
    client = connect(txbroker)
    client.send_frame(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    expect_closed(client)
    wait_for_log(caplog, "closing", "request size 1195725856", level=logging.WARNING)
    assert_serving(txbroker)


def test_garbage_frame_with_unknown_api_key(txbroker, caplog):
    client = connect(txbroker)
    garbage = bytes(range(0xDE, 0xDE + 32))  # api key 0xdedf: not an API
    client.send_frame(sized(garbage))
    expect_closed(client)
    wait_for_log(caplog, "closing", "unknown API key", level=logging.WARNING)
    assert_serving(txbroker)


def test_garbage_body_after_valid_request_on_same_connection(txbroker, topic, caplog):
    """A valid request is answered; the garbage that follows closes the connection."""
    client = connect(txbroker)
    good = frame(PRODUCE, 9, 1, produce_request({topic: {0: batch()}}))
    # A Metadata v1 header followed by a topic array claiming 1000 entries.
    bad = sized(raw_header(METADATA, 1, 2) + struct.pack(">i", 1000) + b"\x00\x05ab")
    client.send_frame(good + bad)
    cid, response = recv_response(client, PRODUCE, 9)
    assert cid == 1
    assert partition_response(response, topic, 0).error_code == ErrorCode.none
    expect_closed(client)
    wait_for_log(caplog, "closing", "malformed Metadata v1", level=logging.WARNING)
    assert log_end_offset(txbroker, topic, 0) == 1
    assert_serving(txbroker)


def test_truncated_frame(txbroker, topic, caplog):
    """The size prefix promises 100 bytes, the client sends 10 and goes away."""
    other = connect(txbroker)
    client = connect(txbroker)
    full = frame(PRODUCE, 9, 1, produce_request({topic: {0: batch()}}))
    client.send_frame(struct.pack(">i", 100) + full[4:14])
    client.close()
    wait_for_log(caplog, "closed", "10 of 100 bytes")
    assert log_end_offset(txbroker, topic, 0) == 0
    # A connection opened before the truncated one still works.
    assert other.request(API_VERSIONS, 3, api_versions_request()).error_code == ErrorCode.none
    other.close()
    assert_serving(txbroker)


@pytest.mark.parametrize("payload", [b"", b"\x00", b"\x00\x03\x00", b"\x00\x12\x00\x00\x00\x00\x00"],
                         ids=["empty", "1-byte", "3-bytes", "7-bytes"])
def test_frame_shorter_than_request_header(txbroker, caplog, payload):
    client = connect(txbroker)
    client.send_frame(sized(payload))
    expect_closed(client)
    wait_for_log(caplog, "closing", "too short for a header", level=logging.WARNING)
    assert_serving(txbroker)


def test_client_id_longer_than_frame(txbroker, caplog):
    """The header's client id length points past the end of the frame."""
    client = connect(txbroker)
    client.send_frame(sized(struct.pack(">hhih", API_VERSIONS, 0, 7, 50) + b"abc"))
    expect_closed(client)
    wait_for_log(caplog, "closing", "malformed api_versions v0", level=logging.WARNING)
    assert_serving(txbroker)


@pytest.mark.parametrize("size", [-1, -(2**31)])
def test_negative_size_prefix(txbroker, caplog, size):
    client = connect(txbroker)
    client.send_frame(struct.pack(">i", size) + b"\x00" * 16)
    expect_closed(client)
    wait_for_log(caplog, "closing", f"request size {size}", level=logging.WARNING)
    assert_serving(txbroker)


@pytest.mark.parametrize("txbroker_config", [{"socket.request.max.bytes": "1000"}])
def test_oversized_frame_closed_before_body_is_read(txbroker, caplog):
    client = connect(txbroker)
    # Only the size prefix and a header: the broker must not wait for the 5000-byte body.
    client.send_frame(struct.pack(">i", 5000) + raw_header(API_VERSIONS, 0, 1))
    expect_closed(client, timeout=3)
    wait_for_log(caplog, "closing", "request size 5000", "socket.request.max.bytes=1000",
                 level=logging.WARNING)
    # A request right at the limit is still read.
    ok = connect(txbroker)
    request = frame(API_VERSIONS, 0, 1, api_versions_request(0), client_id="x" * 900)
    assert len(request) - 4 <= 1000
    ok.send_frame(request)
    cid, response = recv_response(ok, API_VERSIONS, 0)
    assert cid == 1 and response.error_code == ErrorCode.none
    ok.close()


# --- API keys and versions -------------------------------------------------------------


def test_unknown_api_key(txbroker, caplog):
    client = connect(txbroker)
    client.send_frame(sized(raw_header(9999, 0, 42) + b"\x00" * 8))
    expect_closed(client)
    wait_for_log(caplog, "closing", "unknown API key", "correlation id 42", level=logging.WARNING)
    assert_serving(txbroker)


@pytest.mark.parametrize("api_key,version,name", [
    (FETCH, 99, "fetch v99"),
    (FETCH, 1, "fetch v1"),
    (PRODUCE, 2, "produce v2"),
    (PRODUCE, 14, "produce v14"),  # past Kafka 4's newest (13)
    (METADATA, 14, "metadata v14"),
])
def test_unsupported_version_closes_connection(txbroker, topic, caplog, api_key, version, name):
    client = connect(txbroker)
    body = b""
    if api_key == PRODUCE and version == 2:
        # A plausible Produce v2 body: acks, timeout, one topic, one partition with a batch.
        records = batch()
        body = (struct.pack(">hi", -1, 1000) + struct.pack(">i", 1)
                + struct.pack(">h", len(topic)) + topic.encode() + struct.pack(">i", 1)
                + struct.pack(">ii", 0, len(records)) + records)
    client.send_frame(sized(raw_header(api_key, version, 5) + body))
    expect_closed(client)
    wait_for_log(caplog, "closing", "unsupported version", name, level=logging.WARNING)
    assert log_end_offset(txbroker, topic, 0) == 0
    assert_serving(txbroker)


def test_api_versions_unknown_version_gets_v0_answer(txbroker, caplog):
    """KIP-511: UNSUPPORTED_VERSION in the v0 format with ApiVersions' own range only
    (as Kafka answers); the connection stays."""
    client = connect(txbroker)
    # A v99 request as a newer client would send it: header v2 and some body we cannot know.
    client.send_frame(sized(raw_header(API_VERSIONS, 99, 77, b"future") + b"\x00"
                            + b"\x07future\x041.0\x00"))
    body = client.recv_frame()
    assert body is not None, "ApiVersions of an unknown version must be answered"
    cid, response = decode_response(API_VERSIONS, 0, body)
    assert cid == 77
    assert response.error_code == ErrorCode.unsupported_version
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges == {API_VERSIONS: (0, 4)}
    # The v0 body is exactly error code + api keys: nothing of v1+ (no throttle time).
    assert len(body) == 4 + 2 + 4 + 6 * len(response.api_keys)
    wait_for_log(caplog, "ApiVersions v99", "UNSUPPORTED_VERSION")
    # The client retries on the same connection with a version we support.
    retry = client.request(API_VERSIONS, 3, api_versions_request())
    assert retry is not None and retry.error_code == ErrorCode.none
    client.close()


@pytest.mark.parametrize("name,sw_version", [
    ("bad name", "1.0"), ("-leading-dash", "1.0"), ("ok", "1.0-"), ("", "1.0"), ("ok", ""),
])
def test_api_versions_invalid_client_software(txbroker, caplog, name, sw_version):
    client = connect(txbroker)
    response = client.request(API_VERSIONS, 3, api_versions_request(3, name, sw_version))
    assert response is not None
    assert response.error_code == ErrorCode.invalid_request
    wait_for_log(caplog, "ApiVersions", "invalid client software")
    # Kafka answers INVALID_REQUEST and keeps the connection.
    assert client.request(API_VERSIONS, 3, api_versions_request()).error_code == ErrorCode.none
    client.close()


def test_api_versions_valid_client_software_names(txbroker):
    client = connect(txbroker)
    for name, version in [("librdkafka", "2.16.0"), ("apache-kafka-java", "4.0.0"), ("a", "1"),
                          ("kafka-python", "3.0.12.dev1")]:
        response = client.request(API_VERSIONS, 3, api_versions_request(3, name, version))
        assert response.error_code == ErrorCode.none, (name, version)
    client.close()


# --- Produce: one bad partition --------------------------------------------------------


def _produce_one(txbroker, topic, records, *, version=9, acks=-1, partition=0):
    client = connect(txbroker)
    response = client.request(PRODUCE, version,
                              produce_request({topic: {partition: records}}, acks=acks,
                                              version=version))
    assert response is not None, "a produce error must be answered, not a closed connection"
    # The connection stays usable after a per-partition error.
    assert client.request(API_VERSIONS, 3, api_versions_request()).error_code == ErrorCode.none
    client.close()
    return partition_response(response, topic, partition)


def _wrong_crc() -> bytes:
    b = bytearray(batch(3))
    b[-1] ^= 0xFF
    return bytes(b)


def _magic_1() -> bytes:
    b = bytearray(batch())
    b[16] = 1
    return bytes(b)


def _length_too_long() -> bytes:
    b = bytearray(batch(2))
    struct.pack_into(">i", b, 8, len(b) - 12 + 20)
    return bytes(b)


def _length_too_short() -> bytes:
    b = bytearray(batch(2))
    struct.pack_into(">i", b, 8, len(b) - 12 - 5)
    return bytes(b)


def _length_below_header() -> bytes:
    b = bytearray(batch(2))
    struct.pack_into(">i", b, 8, 20)
    return bytes(b)


def _two_batches() -> bytes:
    return batch(1) + batch(1)


def _offset_delta_mismatch() -> bytes:
    recs = [Record(b"a", b"1"), Record(b"b", b"2"), Record(b"c", b"3")]
    return build_batch(recs, offset_deltas=[0, 1, 5])  # lastOffsetDelta 5, 3 records


def _count_mismatch() -> bytes:
    b = bytearray(batch(3))
    struct.pack_into(">i", b, 57, 2)  # recordsCount 2, lastOffsetDelta 2
    return bytes(_fix_crc(b))


def _negative_count() -> bytes:
    b = bytearray(batch(3))
    struct.pack_into(">i", b, 57, -1)  # recordsCount -1 under a valid CRC
    return bytes(_fix_crc(b))


def _control_batch() -> bytes:
    return build_batch([Record(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], control=True)


def _nonzero_base_offset() -> bytes:
    return batch(2, base_offset=17)


def _idempotent_without_sequence() -> bytes:
    return batch(1, producer_id=5, producer_epoch=0, base_sequence=-1)


@pytest.mark.parametrize("records,error,log_words", [
    (_wrong_crc(), ErrorCode.corrupt_message, "CRC mismatch"),
    (_magic_1(), ErrorCode.invalid_record, "magic"),
    (_length_too_long(), ErrorCode.invalid_record, "exceeds"),
    (_length_too_short(), ErrorCode.corrupt_message, "CRC mismatch"),
    (_length_below_header(), ErrorCode.corrupt_message, "length 20"),
    (_two_batches(), ErrorCode.invalid_record, "exactly one record batch"),
    (b"", ErrorCode.invalid_record, "at least one record batch"),
    (None, ErrorCode.invalid_record, "at least one record batch"),
    (b"\x00" * 8, ErrorCode.invalid_record, "at least one record batch"),
    (_offset_delta_mismatch(), ErrorCode.invalid_record, "inconsistent batch offset range"),
    (_count_mismatch(), ErrorCode.invalid_record, "inconsistent batch offset range"),
    (_negative_count(), ErrorCode.invalid_record, "invalid record count -1"),
    (_control_batch(), ErrorCode.invalid_record, "control records"),
    (_nonzero_base_offset(), ErrorCode.invalid_record, "base offset"),
    (_idempotent_without_sequence(), ErrorCode.invalid_record, "sequence"),
], ids=["wrong-crc", "magic-1", "length-past-end", "length-short", "length-below-header",
        "two-batches", "empty", "null", "8-zero-bytes", "offset-delta", "record-count",
        "negative-count", "control", "base-offset", "idempotent-no-sequence"])
def test_bad_batch_is_rejected_whole(txbroker, topic, caplog, records, error, log_words):
    result = _produce_one(txbroker, topic, records)
    assert result.error_code == error, result
    assert result.base_offset == -1
    record = wait_for_log(caplog, "produce to bad-0", error.name.upper(), log_words,
                          level=logging.WARNING)
    assert record.name.startswith("txbroker.broker")
    assert log_end_offset(txbroker, topic, 0) == 0
    # The partition takes good data afterwards, at offset 0.
    assert _produce_one(txbroker, topic, batch()).base_offset == 0
    assert_serving(txbroker)


def test_zstd_needs_produce_v7(txbroker, topic, caplog):
    zstd = batch(3, compression=Compression.ZSTD)
    result = _produce_one(txbroker, topic, zstd, version=6)
    assert result.error_code == ErrorCode.unsupported_compression_type
    wait_for_log(caplog, "UNSUPPORTED_COMPRESSION_TYPE", "zstd", level=logging.WARNING)
    assert log_end_offset(txbroker, topic, 0) == 0
    # The same batch is fine with v7.
    ok = _produce_one(txbroker, topic, zstd, version=7)
    assert ok.error_code == ErrorCode.none and ok.base_offset == 0
    assert log_end_offset(txbroker, topic, 0) == 3


def test_batch_larger_than_max_message_bytes(txbroker, caplog):
    txbroker.create_topic("small", 1, {"max.message.bytes": "300"})
    big = batch(1, value_size=400)
    result = _produce_one(txbroker, "small", big)
    assert result.error_code == ErrorCode.message_too_large
    wait_for_log(caplog, "MESSAGE_TOO_LARGE", "max.message.bytes", level=logging.WARNING)
    assert log_end_offset(txbroker, "small", 0) == 0
    assert _produce_one(txbroker, "small", batch(1, value_size=100)).error_code == ErrorCode.none


@pytest.mark.parametrize("name,partition", [("no-such-topic", 0), ("bad", 2), ("bad", -1)])
def test_unknown_topic_or_partition(txbroker, topic, caplog, name, partition):
    client = connect(txbroker)
    response = client.request(PRODUCE, 9, produce_request({name: {partition: batch()}}))
    assert partition_response(response, name, partition).error_code == \
        ErrorCode.unknown_topic_or_partition
    wait_for_log(caplog, "produce", "unknown", f"{name}-{partition}")
    # Produce never creates topics.
    assert txbroker.call(lambda b: name in b.logs.topics) == (name == "bad")
    client.close()
    assert_serving(txbroker)


@pytest.mark.parametrize("acks", [5, 2, -2])
def test_invalid_required_acks(txbroker, topic, caplog, acks):
    client = connect(txbroker)
    response = client.request(PRODUCE, 9, produce_request({topic: {0: batch(), 1: batch()}},
                                                          acks=acks))
    for p in (0, 1):
        assert partition_response(response, topic, p).error_code == ErrorCode.invalid_required_acks
        assert log_end_offset(txbroker, topic, p) == 0
    wait_for_log(caplog, f"acks={acks}", level=logging.WARNING)
    client.close()


def test_one_bad_partition_does_not_stop_the_good_one(txbroker, caplog):
    txbroker.create_topic("multi", 3)
    txbroker.create_topic("other", 1)
    client = connect(txbroker)
    response = client.request(PRODUCE, 9, produce_request({
        "multi": {0: _wrong_crc(), 1: batch(2), 2: _two_batches()},
        "other": {0: batch(3)},
        "missing": {0: batch()},
    }))
    assert partition_response(response, "multi", 0).error_code == ErrorCode.corrupt_message
    good = partition_response(response, "multi", 1)
    assert good.error_code == ErrorCode.none and good.base_offset == 0
    assert partition_response(response, "multi", 2).error_code == ErrorCode.invalid_record
    assert partition_response(response, "other", 0).error_code == ErrorCode.none
    assert partition_response(response, "missing", 0).error_code == \
        ErrorCode.unknown_topic_or_partition
    assert [log_end_offset(txbroker, "multi", p) for p in range(3)] == [0, 2, 0]
    assert log_end_offset(txbroker, "other", 0) == 3
    wait_for_log(caplog, "multi-0", "CORRUPT_MESSAGE", level=logging.WARNING)
    wait_for_log(caplog, "multi-2", "INVALID_RECORD", level=logging.WARNING)
    client.close()


# --- acks=0 ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["crc", "unknown-topic"])
def test_acks_zero_error_closes_connection(txbroker, topic, caplog, bad):
    client = connect(txbroker)
    data = {topic: {0: _wrong_crc(), 1: batch()}} if bad == "crc" else {"nope": {0: batch()}}
    client.send_frame(frame(PRODUCE, 9, 1, produce_request(data, acks=0)))
    expect_closed(client)
    if bad == "crc":
        wait_for_log(caplog, "CORRUPT_MESSAGE", level=logging.WARNING)
        # The good partition of the same request is appended, as Kafka does.
        assert log_end_offset(txbroker, topic, 1) == 1
    wait_for_log(caplog, "acks=0", "closing")
    assert log_end_offset(txbroker, topic, 0) == 0
    assert_serving(txbroker)


def test_acks_zero_success_sends_no_response(txbroker, topic):
    client = connect(txbroker)
    client.send_frame(frame(PRODUCE, 9, 1, produce_request({topic: {0: batch(4)}}, acks=0))
                      + frame(API_VERSIONS, 3, 2, api_versions_request()))
    cid, response = recv_response(client, API_VERSIONS, 3)
    assert cid == 2, "the acks=0 produce must not be answered"
    assert response.error_code == ErrorCode.none
    assert log_end_offset(txbroker, topic, 0) == 4
    # Fetch sees it (the fsync-before-visible high watermark has moved by now or soon).
    fetch = fetch_request({topic: {0: 0}}, max_wait_ms=2000)
    client.send_frame(frame(FETCH, 12, 3, fetch))
    cid, fetched = recv_response(client, FETCH, 12)
    assert cid == 3
    assert fetched.responses[0].partitions[0].high_watermark == 4
    client.close()


def test_metadata_for_unknown_topic_without_auto_create(txbroker):
    """Not an error path that closes anything: Metadata answers per topic."""
    client = connect(txbroker)
    response = client.request(METADATA, 12, metadata_request(["nope"]))
    assert response.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    assert txbroker.call(lambda b: "nope" in b.logs.topics) is False
    client.close()


def test_disk_error_on_produce_is_kafka_storage_error_and_the_retry_succeeds(
        txbroker, topic, caplog):
    """An OSError (ENOSPC) appending a produced batch: KAFKA_STORAGE_ERROR for that
    partition with one ERROR log line, nothing appended, the connection stays open, and
    the same producer's retry (confluent-kafka retries the error) lands exactly once."""
    from .clients import Msg, produce, stored_records
    from .txn_util import fail_appends

    failures = fail_appends(txbroker, topic, 0, 2, control=False)
    with caplog.at_level(logging.ERROR):
        offsets = produce("confluent", txbroker.bootstrap, topic,
                          [Msg(None, b"after-a-full-disk", partition=0)],
                          **{"enable.idempotence": True, "retry.backoff.ms": 20})
    assert failures["left"] == 0
    assert offsets == [(0, 0)]
    assert [r.value for r in stored_records(txbroker, topic, 0)] == [b"after-a-full-disk"]
    # Two refused appends, one ERROR line: the disk-full condition is logged when it
    # starts, with the partition, the errno and the free space (storage/disk_conditions.py).
    assert sum("No space left" in r.getMessage() and f"{topic}-0" in r.getMessage()
               for r in caplog.records if r.levelno == logging.ERROR) == 1


# --- Produce: batch header against record content (Kafka's LogValidator) ---------------


def _claims(count: int, *, compression: Compression = Compression.NONE) -> bytes:
    """One real record under a header claiming ``count`` records, with the matching
    lastOffsetDelta and a valid CRC: only the records themselves show the lie."""
    b = bytearray(build_batch([Record(b"k", b"v")], compression=compression))
    struct.pack_into(">i", b, 23, count - 1)
    struct.pack_into(">i", b, 57, count)
    return bytes(_fix_crc(b))


@pytest.mark.parametrize("count,compression", [
    (5_000_000, Compression.NONE), (2**31 - 1, Compression.NONE),
    (5_000_000, Compression.GZIP), (5_000_000, Compression.ZSTD),
], ids=["5M", "2^31-1", "5M-gzip", "5M-zstd"])
def test_records_count_beyond_the_records_never_moves_the_log(txbroker, topic, caplog, count,
                                                              compression):
    from tests.integration.clients import consume_kafka_python

    result = _produce_one(txbroker, topic, _claims(count, compression=compression))
    assert result.error_code == ErrorCode.invalid_record, result
    assert result.base_offset == -1
    wait_for_log(caplog, "produce to bad-0", "INVALID_RECORD",
                 f"declares {count} records but holds 1", level=logging.WARNING)
    assert log_end_offset(txbroker, topic, 0) == 0
    # Good data goes in at offset 0, and stays the only data after a restart.
    assert _produce_one(txbroker, topic, batch(2)).base_offset == 0
    txbroker.restart()
    assert log_end_offset(txbroker, topic, 0) == 2
    # A real client reads the partition (with the bad batch stored, kafka-python raised
    # CorruptRecordError here).
    got = consume_kafka_python(txbroker.bootstrap, topic, [0], 2)
    assert [r.offset for r in got] == [0, 1]


def _record_lie(kind: str) -> bytes:
    recs = [Record(b"k", b"v" * 10)] * 3
    if kind == "offset-deltas":
        return build_batch(recs, offset_deltas=[0, 2, 2])  # header consistent, records not
    b = bytearray(build_batch(recs))
    if kind == "record-length":
        b[HEADER_SIZE] += 2  # first record's length varint: 1 more byte than its fields
    elif kind == "trailing-bytes":
        b += b"\x00\x00\x00"
        struct.pack_into(">i", b, 8, len(b) - 12)
    return bytes(_fix_crc(b))


@pytest.mark.parametrize("kind,words", [
    ("offset-deltas", "consecutive"), ("record-length", "record 0"),
    ("trailing-bytes", "3 bytes follow the last"),
])
def test_records_that_disagree_with_the_header_are_invalid(txbroker, topic, caplog, kind,
                                                           words):
    result = _produce_one(txbroker, topic, _record_lie(kind))
    assert result.error_code == ErrorCode.invalid_record, result
    wait_for_log(caplog, "produce to bad-0", "INVALID_RECORD", words, level=logging.WARNING)
    assert log_end_offset(txbroker, topic, 0) == 0
    assert_serving(txbroker)


def test_decompression_bomb_is_message_too_large(txbroker, topic, caplog):
    import cramjam

    payload = bytes(cramjam.zstd.compress(bytes(64 * 1024 * 1024), level=1))  # 64 MiB of zeros
    b = bytearray(build_batch([Record(None, b"")], compression=Compression.ZSTD))
    b = b[:HEADER_SIZE] + payload
    struct.pack_into(">i", b, 8, len(b) - 12)
    result = _produce_one(txbroker, topic, bytes(_fix_crc(b)))
    assert result.error_code == ErrorCode.message_too_large, result
    wait_for_log(caplog, "produce to bad-0", "MESSAGE_TOO_LARGE", "decompresses to",
                 level=logging.WARNING)
    assert log_end_offset(txbroker, topic, 0) == 0


def test_every_record_timestamp_is_checked_not_only_the_max(txbroker, caplog):
    now = int(time.time() * 1000)
    txbroker.create_topic("recent", 1, {"message.timestamp.before.max.ms": "3600000"})
    # The header's max timestamp is recent; the first record is a day old.
    old_first = build_batch([Record(b"k", b"old", timestamp=now - 86_400_000),
                             Record(b"k", b"new", timestamp=now)])
    result = _produce_one(txbroker, "recent", old_first)
    assert result.error_code == ErrorCode.invalid_timestamp, result
    assert log_end_offset(txbroker, "recent", 0) == 0


def test_header_max_timestamp_is_set_from_the_records(txbroker, topic):
    from tests.integration.clients import consume_kafka_python

    now = int(time.time() * 1000)
    lying = bytearray(build_batch([Record(b"k", b"a", timestamp=now - 5),
                                   Record(b"k", b"b", timestamp=now)]))
    struct.pack_into(">q", lying, 35, now - 1000)  # maxTimestamp below a record's timestamp
    assert _produce_one(txbroker, topic, bytes(_fix_crc(lying))).error_code == ErrorCode.none
    got = consume_kafka_python(txbroker.bootstrap, topic, [0], 2)
    assert [r.timestamp for r in got] == [now - 5, now]
    # As Kafka, the stored header carries the records' real maximum, under a valid CRC.
    data = txbroker.call(lambda b: b.logs.get_log(topic, 0).read(0, 1 << 20).data)
    header = validate_batch(data)
    assert header.max_timestamp == now
