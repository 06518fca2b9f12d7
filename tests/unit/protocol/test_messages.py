"""Request/response framing on kio: headers, flexible versions, byte-exact responses."""

from __future__ import annotations

import datetime
import io
import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from txbroker.protocol.messages import (
    LARGE_PART_BYTES,
    ResponseParts,
    build,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    has_field,
    is_flexible_request,
    parse_correlation_id,
    parse_request_header,
    request_class,
    request_module,
    response_class,
    response_header_is_flexible,
    response_module,
)
from txbroker.protocol.primitives import DecodeError, write_unsigned_varint
from txbroker.protocol.records import Record, build_batch

ZERO = datetime.timedelta(0)
BATCH = build_batch([Record(b"k", b"v", [("h", b"1")], 1_700_000_000_000)])


def _request(api_key: int, version: int):
    m = request_module(api_key, version)
    if api_key == 0:
        return build(m.ProduceRequest, transactional_id=None, acks=-1,
                     timeout=datetime.timedelta(seconds=30), topic_data=(
                         m.TopicProduceData(name="t", partition_data=(
                             m.PartitionProduceData(index=0, records=BATCH),
                             m.PartitionProduceData(index=3, records=None))),))
    if api_key == 1:
        part = build(m.FetchPartition, partition=2, current_leader_epoch=-1, fetch_offset=17,
                     last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
        return build(m.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(milliseconds=500),
                     min_bytes=1, max_bytes=50 << 20, isolation_level=1, session_id=0,
                     session_epoch=-1, topics=(build(m.FetchTopic, topic="t", partitions=(part,)),),
                     forgotten_topics_data=(), rack_id="r1")
    if api_key == 3:
        topics = (build(m.MetadataRequestTopic, name="a", topic_id=None),
                  build(m.MetadataRequestTopic, name="b", topic_id=None))
        return build(m.MetadataRequest, topics=topics, allow_auto_topic_creation=True,
                     include_topic_authorized_operations=False,
                     include_cluster_authorized_operations=False)
    if api_key == 18:
        return build(m.ApiVersionsRequest, client_software_name="lib",
                     client_software_version="1.2.3")
    if api_key == 22:
        return build(m.InitProducerIdRequest, transactional_id=None,
                     transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
                     producer_epoch=-1)
    if api_key == 2:
        part = build(m.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1,
                     timestamp=-1, max_num_offsets=1)
        return build(m.ListOffsetsRequest, replica_id=-1, isolation_level=0,
                     topics=(build(m.ListOffsetsTopic, name="t", partitions=(part,)),))
    raise AssertionError(api_key)


REQUESTS = [(0, 3), (0, 7), (0, 9), (1, 4), (1, 11), (1, 12), (2, 1), (2, 7), (3, 0), (3, 1),
            (3, 9), (3, 12), (18, 0), (18, 3), (18, 4), (22, 0), (22, 2), (22, 4)]


@pytest.mark.parametrize("api_key,version", REQUESTS, ids=[f"{k}v{v}" for k, v in REQUESTS])
@pytest.mark.parametrize("client_id", [None, "", "client-1", "ünïcode"])
def test_request_round_trip(api_key, version, client_id):
    message = _request(api_key, version)
    data = encode_request(api_key, version, 12345, client_id, message)
    (size,) = struct.unpack_from(">i", data)
    assert size == len(data) - 4
    body = data[4:]
    header = parse_request_header(body)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == \
        (api_key, version, 12345, client_id)
    flexible = bool(request_class(api_key, version).__flexible__)
    assert is_flexible_request(api_key, version) == flexible
    cid_len = -1 if client_id is None else len(client_id.encode())
    assert header.body_offset == 10 + max(cid_len, 0) + (1 if flexible else 0)
    assert decode_request(header, body) == message
    assert parse_correlation_id(body) == (api_key, version, 12345)
    # The body is kio's own encoding.
    buf = io.BytesIO()
    entity_writer(type(message))(buf, message)
    assert body[header.body_offset:] == buf.getvalue()


def test_flexible_header_skips_unknown_tagged_fields():
    message = _request(18, 3)
    plain = encode_request(18, 3, 9, "c", message)[4:]
    # Replace the empty tag section (one 0 byte after the client id) with two tagged fields.
    head_end = 8 + 2 + 1
    tags = bytearray()
    write_unsigned_varint(tags, 2)
    for tag, value in [(0, b"xyz"), (300, b"\x00" * 130)]:
        write_unsigned_varint(tags, tag)
        write_unsigned_varint(tags, len(value))
        tags += value
    assert plain[head_end] == 0
    body = plain[:head_end] + bytes(tags) + plain[head_end + 1:]
    header = parse_request_header(body)
    assert header.body_offset == head_end + len(tags)
    assert decode_request(header, body) == message


@settings(max_examples=60, deadline=None)
@given(cid=st.integers(-(2**31), 2**31 - 1), client_id=st.none() | st.text(max_size=30),
       parts=st.dictionaries(st.integers(0, 1000), st.none() | st.binary(max_size=100), max_size=4),
       topic=st.text(alphabet="abc._-", min_size=1, max_size=20), version=st.sampled_from([3, 7, 9]),
       acks=st.sampled_from([-1, 0, 1]))
def test_produce_request_round_trip_property(cid, client_id, parts, topic, version, acks):
    m = request_module(0, version)
    message = m.ProduceRequest(transactional_id=None, acks=acks, timeout=datetime.timedelta(0),
                               topic_data=(m.TopicProduceData(name=topic, partition_data=tuple(
                                   m.PartitionProduceData(index=i, records=r)
                                   for i, r in parts.items())),))
    body = encode_request(0, version, cid, client_id, message)[4:]
    header = parse_request_header(body)
    assert header.correlation_id == cid and header.client_id == client_id
    assert decode_request(header, body) == message


def test_unknown_versions_have_no_schema():
    assert request_class(0, 2) is None  # kio covers Produce 3+
    assert request_class(1, 99) is None
    assert request_class(9999, 0) is None
    # Only ApiVersions is assumed flexible beyond what kio knows (KIP-511).
    assert is_flexible_request(18, 99)
    assert not is_flexible_request(1, 99)
    header = parse_request_header(struct.pack(">hhih", 0, 2, 1, -1) + b"body")
    with pytest.raises(DecodeError, match="no schema"):
        decode_request(header, struct.pack(">hhih", 0, 2, 1, -1) + b"body")


@pytest.mark.parametrize("api_key,version", [(0, 9), (3, 12), (1, 12), (18, 3)])
def test_malformed_body_raises_decode_error(api_key, version):
    data = encode_request(api_key, version, 1, "c", _request(api_key, version))[4:]
    header = parse_request_header(data)
    for cut in (header.body_offset + 1, len(data) - 1):
        with pytest.raises(DecodeError):
            decode_request(header, data[:cut])
    with pytest.raises(DecodeError):
        decode_request(header, data[:header.body_offset] + b"\xff" * 40)


@pytest.mark.parametrize("data", [b"", b"\x00\x12", b"\x00\x12\x00\x03\x00\x00\x00"])
def test_short_header_raises_decode_error(data):
    with pytest.raises(DecodeError):
        parse_correlation_id(data)
    with pytest.raises(DecodeError):
        parse_request_header(data)


# --- responses -----------------------------------------------------------------------------


def _response(api_key: int, version: int):
    m = response_module(api_key, version)
    if api_key == 18:
        keys = tuple(m.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                     for k, lo, hi in [(0, 0, 9), (1, 4, 12), (18, 0, 4)])
        return build(m.ApiVersionsResponse, error_code=ErrorCode.none, api_keys=keys,
                     throttle_time=ZERO)
    if api_key == 0:
        part = build(m.PartitionProduceResponse, index=1, error_code=ErrorCode.none,
                     base_offset=42, log_append_time=None, log_start_offset=0, record_errors=(),
                     error_message=None)
        return build(m.ProduceResponse, responses=(
            m.TopicProduceResponse(name="t", partition_responses=(part,)),), throttle_time=ZERO)
    if api_key == 1:
        part = build(m.PartitionData, partition_index=0, error_code=ErrorCode.none,
                     high_watermark=5, last_stable_offset=5, log_start_offset=0,
                     aborted_transactions=None, preferred_read_replica=-1, records=BATCH)
        return build(m.FetchResponse, throttle_time=ZERO, error_code=ErrorCode.none, session_id=0,
                     responses=(build(m.FetchableTopicResponse, topic="t", partitions=(part,)),))
    if api_key == 3:
        part = build(m.MetadataResponsePartition, error_code=ErrorCode.none, partition_index=0,
                     leader_id=1, leader_epoch=0, replica_nodes=(1,), isr_nodes=(1,),
                     offline_replicas=())
        topic = build(m.MetadataResponseTopic, error_code=ErrorCode.none, name="t",
                      topic_id=uuid.UUID(int=7), is_internal=False, partitions=(part,),
                      topic_authorized_operations=-2147483648)
        broker = build(m.MetadataResponseBroker, node_id=1, host="localhost", port=9092, rack=None)
        return build(m.MetadataResponse, throttle_time=ZERO, brokers=(broker,), cluster_id="c",
                     controller_id=1, topics=(topic,), cluster_authorized_operations=-2147483648)
    if api_key == 22:
        return build(m.InitProducerIdResponse, throttle_time=ZERO, error_code=ErrorCode.none,
                     producer_id=1000, producer_epoch=0)
    raise AssertionError(api_key)


RESPONSES = [(18, 0), (18, 3), (18, 4), (0, 3), (0, 7), (0, 9), (1, 4), (1, 11), (1, 12),
             (3, 1), (3, 8), (3, 9), (3, 12), (22, 0), (22, 2), (22, 4)]


@pytest.mark.parametrize("api_key,version", RESPONSES, ids=[f"{k}v{v}" for k, v in RESPONSES])
def test_response_bytes_are_kio_bytes_plus_header(api_key, version):
    message = _response(api_key, version)
    data = encode_response(api_key, version, 777, message)
    body = io.BytesIO()
    entity_writer(type(message))(body, message)
    flexible_body = bool(response_class(api_key, version).__flexible__)
    # Header v1 (with tagged fields) for flexible versions, except ApiVersions: always v0.
    header_flexible = flexible_body and api_key != 18
    assert response_header_is_flexible(api_key, version) == header_flexible
    header = struct.pack(">i", 777) + (b"\x00" if header_flexible else b"")
    assert data == struct.pack(">i", len(header) + len(body.getvalue())) + header + body.getvalue()
    cid, decoded = decode_response(api_key, version, data[4:])
    assert cid == 777 and decoded == message


@pytest.mark.parametrize("version", [4, 11, 12, 16])
@pytest.mark.parametrize("records", [memoryview(b"r" * (LARGE_PART_BYTES + 5))[3:],
                                     b"q" * LARGE_PART_BYTES])
def test_large_records_are_a_part_of_their_own_with_the_same_bytes(version, records):
    # A Fetch response with megabytes of records: the frame comes as buffers for
    # writelines, the records one of them (not copied), and the bytes are kio's.
    m = response_module(1, version)
    parts = []
    for i, data in enumerate((records, b"small", records)):
        parts.append(build(m.PartitionData, partition_index=i, error_code=ErrorCode.none,
                           high_watermark=5, last_stable_offset=5, log_start_offset=0,
                           aborted_transactions=(), preferred_read_replica=-1, records=data))
    message = build(m.FetchResponse, throttle_time=ZERO, error_code=ErrorCode.none,
                    session_id=0, responses=(build(m.FetchableTopicResponse, topic="t",
                                                   topic_id=uuid.UUID(int=7),
                                                   partitions=tuple(parts)),))
    frame = encode_response(1, version, 42, message)
    assert type(frame) is ResponseParts
    assert sum(p is records for p in frame.parts) == 2
    body = io.BytesIO()
    entity_writer(type(message))(body, message)
    header = struct.pack(">i", 42) + (b"\x00" if version >= 12 else b"")
    expected = struct.pack(">i", len(header) + len(body.getvalue())) + header + body.getvalue()
    assert bytes(frame) == expected and len(frame) == len(expected)
    cid, decoded = decode_response(1, version, bytes(frame)[4:])
    assert cid == 42 and [bytes(p.records) for p in decoded.responses[0].partitions] == [
        bytes(records), b"small", bytes(records)]


def test_api_versions_v3_response_readable_by_a_v0_header_parser():
    """KIP-511: a client that does not know the version reads correlation id, then error code."""
    data = encode_response(18, 3, 5, _response(18, 3))
    cid, error = struct.unpack_from(">ih", data, 4)
    assert (cid, error) == (5, 0)


def test_build_drops_fields_a_version_lacks():
    v0 = response_module(18, 0)
    message = build(v0.ApiVersionsResponse, error_code=ErrorCode.none, api_keys=(),
                    throttle_time=ZERO, not_a_field=1)
    assert not has_field(message, "throttle_time")
    assert has_field(response_module(18, 3).ApiVersionsResponse, "throttle_time")
