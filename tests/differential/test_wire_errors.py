"""Malformed and unsupported requests on the raw wire: what each broker answers, or
whether it closes the connection, must be what Apache Kafka does."""

from __future__ import annotations

import struct

import pytest
from txbroker.protocol.messages import decode_response

from tests.integration.wire_util import (
    API_VERSIONS,
    METADATA,
    PRODUCE,
    batch,
    frame,
    metadata_request,
    partition_response,
    produce_request,
    raw_header,
    recv_response,
    sized,
)

CLOSED = "closed"


def outcome(broker, payload: bytes):
    """CLOSED, or the response body's bytes, for one request on a fresh connection."""
    client = broker.raw(timeout=10)
    try:
        client.send_frame(payload)
        body = client.recv_frame()
        return CLOSED if body is None else body
    finally:
        client.close()


def metadata_v12() -> bytes:
    return frame(METADATA, 12, 7, metadata_request(None))


# name -> the request, framed (size prefix included)
CLOSES = {
    # Unsupported versions of any API but ApiVersions: Kafka cannot parse the request
    # and closes the connection (a client never sends a version it was not offered).
    "metadata-v99": sized(raw_header(METADATA, 99, 7) + b"\x00" * 8),
    # Produce v0-2 are advertised (librdkafka needs min 0) but rejected.
    "produce-v2": sized(raw_header(PRODUCE, 2, 7) + struct.pack(">hii", -1, 1000, 0)),
    "fetch-v3": sized(raw_header(1, 3, 7) + struct.pack(">iiii", -1, 0, 1, 0)),
    "unknown-api-key": sized(raw_header(9999, 0, 7) + b"\x00" * 8),
    "truncated-body": sized(metadata_v12()[4:-3]),
    "header-without-body": sized(raw_header(METADATA, 1, 7)),
    "short-header": sized(b"\x00\x03\x00"),
    "negative-size": struct.pack(">i", -1),
    # Kafka 4.4 refuses a collection of more than 1,000,000 elements even when the bytes
    # sent hold it: ListTransactions v1 with 1,000,001 producer-id filters (8 MB).
    "array-over-the-cap": sized(raw_header(66, 1, 7) + b"\x00" + b"\x01"
                                + b"\xc2\x84\x3d"  # uvarint 1,000,002: 1,000,001 elements
                                + bytes(8 * 1_000_001) + struct.pack(">q", -1) + b"\x00"),
}


@pytest.mark.kafka_ci
@pytest.mark.parametrize("case", sorted(CLOSES))
def test_connection_closed(broker, case):
    assert outcome(broker, CLOSES[case]) == CLOSED


@pytest.mark.kafka_ci
def test_api_versions_unknown_version_answers_v0(broker):
    """KIP-511: UNSUPPORTED_VERSION in a v0 body, with the supported ranges (ApiVersions
    among them: 0-5 on Kafka 4.4, 0-4 on txbroker, which has no v5 schema:
    docs/compatibility.md), so the client can retry with a version both know."""
    body = outcome(broker, sized(raw_header(API_VERSIONS, 99, 7) + b"\x00\x00"))
    assert body != CLOSED
    cid, response = decode_response(API_VERSIONS, 0, body)
    assert cid == 7
    assert response.error_code == 35
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert ranges[API_VERSIONS] == ((0, 5) if broker.is_kafka else (0, 4))


def test_trailing_bytes_after_a_request_are_ignored(broker):
    """Bytes past the end of a request's schema are not an error (newer clients may add
    tagged fields): both brokers answer normally."""
    body = outcome(broker, sized(metadata_v12()[4:] + b"\x01\x02\x03"))
    assert body != CLOSED
    cid, response = decode_response(METADATA, 12, body)
    assert cid == 7 and len(response.brokers) == 1


@pytest.mark.parametrize(("existing", "expected"), [(True, 21), (False, 3)])
def test_produce_invalid_acks(broker, existing, expected):
    """acks=5: INVALID_REQUIRED_ACKS for a partition that exists; for one that does not,
    Kafka's partition lookup comes first (UNKNOWN_TOPIC_OR_PARTITION)."""
    topic = broker.topic("acks") if existing else "no-such-topic-for-acks"
    client = broker.raw()
    try:
        client.send_frame(frame(PRODUCE, 3, 7, produce_request({topic: {0: batch()}}, acks=5,
                                                               version=3)))
        got = recv_response(client, PRODUCE, 3)
        assert got is not None, "closed"
        assert int(partition_response(got[1], topic, 0).error_code) == expected
    finally:
        client.close()


@pytest.mark.kafka_ci
def test_fetch_listing_a_partition_many_times_reads_it_once(broker):
    """A Fetch naming one partition 40 times (the amplification of issue 14) gets that
    partition once, with its records, as Kafka keys a fetch by partition."""
    import dataclasses

    from tests.integration.wire_util import FETCH, fetch_request

    topic = broker.topic("dupfetch")
    client = broker.raw(timeout=15)
    try:
        client.send_frame(frame(PRODUCE, 9, 1, produce_request({topic: {0: batch(3)}})))
        _, produced = recv_response(client, PRODUCE, 9)
        assert partition_response(produced, topic, 0).error_code == 0
        request = fetch_request({topic: {0: 0}}, max_wait_ms=500)
        request = dataclasses.replace(request, topics=request.topics * 40)
        client.send_frame(frame(FETCH, 12, 2, request))
        _, response = recv_response(client, FETCH, 12)
    finally:
        client.close()
    listed = [(t.topic, p.partition_index, p.error_code, len(p.records or b""))
              for t in response.responses for p in t.partitions]
    assert len(listed) == 1, listed
    assert listed[0][:3] == (topic, 0, 0) and listed[0][3] > 0
