"""The hand-written response encoders write exactly kio's bytes, for every version served."""

from __future__ import annotations

import datetime
import io
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from txbroker.protocol import fast_responses as fast
from txbroker.protocol.messages import build, response_class, response_module

ZERO = datetime.timedelta(0)
ERRORS = st.sampled_from([e.value for e in ErrorCode])
NAMES = st.text(min_size=0, max_size=300)  # > 127 bytes exercises multi-byte varints
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-1, 2**63 - 1)


def kio_body(api_key: int, version: int, message) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(message))(buf, message)
    return buf.getvalue()


def topics_of(partition):
    # Topic names are unique in a response; partitions need not be.
    return st.dictionaries(NAMES, st.lists(partition, max_size=4), max_size=3).map(
        lambda d: list(d.items()))


@settings(max_examples=60, deadline=None)
@given(error=ERRORS, version=st.sampled_from(list(fast.END_TXN_VERSIONS)))
def test_end_txn(error: int, version: int) -> None:
    msg = build(response_class(26, version), throttle_time=ZERO, error_code=ErrorCode(error))
    assert fast.end_txn(version, error) == kio_body(26, version, msg)


@settings(max_examples=60, deadline=None)
@given(error=ERRORS, version=st.sampled_from(list(fast.ADD_OFFSETS_VERSIONS)))
def test_add_offsets_to_txn(error: int, version: int) -> None:
    msg = build(response_class(25, version), throttle_time=ZERO, error_code=ErrorCode(error))
    assert fast.add_offsets_to_txn(version, error) == kio_body(25, version, msg)


@settings(max_examples=150, deadline=None)
@given(topics=topics_of(st.tuples(INT32, ERRORS)),
       version=st.sampled_from(list(fast.ADD_PARTITIONS_VERSIONS)))
def test_add_partitions_to_txn(topics, version: int) -> None:
    schema = response_module(24, version)
    results = tuple(
        build(schema.AddPartitionsToTxnTopicResult, name=name, results_by_partition=tuple(
            build(schema.AddPartitionsToTxnPartitionResult, partition_index=p,
                  partition_error_code=ErrorCode(e)) for p, e in parts))
        for name, parts in topics)
    msg = build(response_class(24, version), throttle_time=ZERO,
                results_by_topic_v3_and_below=results)
    assert fast.add_partitions_to_txn(version, topics) == kio_body(24, version, msg)


@settings(max_examples=150, deadline=None)
@given(topics=topics_of(st.tuples(INT32, ERRORS)),
       version=st.sampled_from(list(fast.TXN_OFFSET_COMMIT_VERSIONS)))
def test_txn_offset_commit(topics, version: int) -> None:
    schema = response_module(28, version)
    msg = build(response_class(28, version), throttle_time=ZERO, topics=tuple(
        build(schema.TxnOffsetCommitResponseTopic, name=name, partitions=tuple(
            build(schema.TxnOffsetCommitResponsePartition, partition_index=p,
                  error_code=ErrorCode(e)) for p, e in parts))
        for name, parts in topics))
    assert fast.txn_offset_commit(version, topics) == kio_body(28, version, msg)


def _to_datetime(ms: int):
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


@settings(max_examples=300, deadline=None)
@given(topics=topics_of(st.tuples(INT32, ERRORS, INT64,
                                  st.one_of(st.just(-1), st.integers(0, 2**41)), INT64,
                                  st.one_of(st.none(), NAMES))),
       version=st.sampled_from(list(fast.PRODUCE_VERSIONS)))
def test_produce(topics, version: int) -> None:
    schema = response_module(0, version)
    if version >= 13:  # topics named by id (KIP-516)
        topics = [(uuid.uuid5(uuid.NAMESPACE_DNS, name), parts) for name, parts in topics]
    msg = build(response_class(0, version), throttle_time=ZERO, responses=tuple(
        build(schema.TopicProduceResponse,
              **({"topic_id": topic} if version >= 13 else {"name": topic}),
              partition_responses=tuple(
            build(schema.PartitionProduceResponse, index=i, error_code=ErrorCode(e),
                  base_offset=base, log_append_time=_to_datetime(at), log_start_offset=start,
                  record_errors=(), error_message=m)
            for i, e, base, at, start, m in parts))
        for topic, parts in topics))
    assert fast.produce(version, topics) == kio_body(0, version, msg)


def test_produce_zero_topic_id() -> None:
    """v13: kio reads the zero topic id as None; the answer echoes the zero id (fuzz case
    log-produce-v13-zero-topic-id), as kio's writer does."""
    schema = response_module(0, 13)
    parts = [(0, ErrorCode.unknown_topic_id.value, -1, -1, -1, None)]
    msg = build(response_class(0, 13), throttle_time=ZERO, responses=(
        build(schema.TopicProduceResponse, topic_id=None, partition_responses=(
            build(schema.PartitionProduceResponse, index=0, error_code=ErrorCode.unknown_topic_id,
                  base_offset=-1, log_append_time=None, log_start_offset=-1, record_errors=(),
                  error_message=None),)),))
    assert fast.produce(13, [(None, parts)]) == kio_body(0, 13, msg)
