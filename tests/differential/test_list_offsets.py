"""ListOffsets on the raw wire (v7, the first with max-timestamp; librdkafka sends ≤7):
earliest, latest, by timestamp, max timestamp, and read_committed's last stable offset."""

from __future__ import annotations

import pytest
from txbroker.protocol.messages import build, request_module
from txbroker.protocol.records import Record, build_batch

from tests.helpers import wait_until
from tests.integration.txn_util import LIST_OFFSETS, RawTxn, unique
from tests.integration.wire_util import PRODUCE, partition_response, produce_request

from .util import init_txn

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
T = 1_700_000_000_000
# Years old: kept from time retention, which could delete them mid-test (test_records.py).
KEEP = {"retention.ms": "-1"}
# Out of order on purpose; the maximum appears twice.
OFFSET_TIMESTAMPS = [T + 1000, T + 5000, T + 3000, T + 5000, T + 2000]


def list_offsets(client, topic: str, timestamp: int, *, isolation_level: int = 0,
                 version: int = 7) -> tuple[int, int, int]:
    """(error code, offset, timestamp) for partition 0."""
    m = request_module(LIST_OFFSETS, version)
    r = client.request(LIST_OFFSETS, version, build(
        m.ListOffsetsRequest, replica_id=-1, isolation_level=isolation_level,
        topics=(build(m.ListOffsetsTopic, name=topic, partitions=(
            build(m.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1,
                  timestamp=timestamp, max_num_offsets=1),)),)))
    [t] = r.topics
    [p] = t.partitions
    return int(p.error_code), p.offset, p.timestamp


def produce_raw(client, topic: str, batch: bytes) -> int:
    r = client.request(PRODUCE, 9, produce_request({topic: {0: batch}}))
    p = partition_response(r, topic, 0)
    assert p.error_code == 0, p
    return p.base_offset


@pytest.fixture(params=["one-batch", "batch-per-record"])
def timed_topic(request, broker):
    """A topic whose partition 0 holds five records with OFFSET_TIMESTAMPS."""
    topic = broker.topic(f"list-offsets-{request.param}", configs=KEEP)
    client = broker.raw()
    try:
        records = [Record(f"k{i}".encode(), b"v", timestamp=ts)
                   for i, ts in enumerate(OFFSET_TIMESTAMPS)]
        if request.param == "one-batch":
            produce_raw(client, topic, build_batch(records))
        else:
            for r in records:
                produce_raw(client, topic, build_batch([r]))
    finally:
        client.close()
    return topic


@pytest.mark.kafka_ci
def test_list_offsets_earliest_latest_timestamps(broker, timed_topic):
    client = broker.raw()
    try:
        assert list_offsets(client, timed_topic, EARLIEST) == (0, 0, -1)
        assert list_offsets(client, timed_topic, LATEST) == (0, 5, -1)
        # The first offset whose timestamp is at or after the target.
        assert list_offsets(client, timed_topic, T) == (0, 0, T + 1000)
        assert list_offsets(client, timed_topic, T + 1000) == (0, 0, T + 1000)
        assert list_offsets(client, timed_topic, T + 1500) == (0, 1, T + 5000)
        assert list_offsets(client, timed_topic, T + 5000) == (0, 1, T + 5000)
        # Past every timestamp: no offset.
        assert list_offsets(client, timed_topic, T + 5001) == (0, -1, -1)
    finally:
        client.close()


@pytest.mark.kafka_ci
def test_list_offsets_max_timestamp(broker, timed_topic):
    """KIP-734: the offset of the record with the largest timestamp (the first of two)."""
    client = broker.raw()
    try:
        assert list_offsets(client, timed_topic, MAX_TIMESTAMP) == (0, 1, T + 5000)
    finally:
        client.close()


def test_list_offsets_max_timestamp_empty_partition(broker):
    topic = broker.topic("list-offsets-empty", configs=KEEP)
    client = broker.raw()
    try:
        assert list_offsets(client, topic, MAX_TIMESTAMP) == (0, -1, -1)
        assert list_offsets(client, topic, EARLIEST) == (0, 0, -1)
        assert list_offsets(client, topic, LATEST) == (0, 0, -1)
    finally:
        client.close()


def test_list_offsets_max_timestamp_needs_v7(broker):
    """Below v7 a max-timestamp query is not a thing: Kafka answers UNSUPPORTED_VERSION
    for the partition."""
    topic = broker.topic("list-offsets-v6", configs=KEEP)
    client = broker.raw()
    try:
        error, _offset, _ts = list_offsets(client, topic, MAX_TIMESTAMP, version=6)
        assert error == 35  # UNSUPPORTED_VERSION
    finally:
        client.close()


@pytest.mark.kafka_ci
def test_list_offsets_read_committed_is_last_stable_offset(broker):
    """Three plain records, then an open transaction of two: read_uncommitted's latest
    is the high watermark (5), read_committed's the first offset of the open
    transaction (3); after the commit both are past the marker (6)."""
    topic = broker.topic("list-offsets-lso", configs=KEEP)
    tid = unique("lso")
    broker.wait_coordinator(tid)
    client = broker.raw()
    try:
        produce_raw(client, topic, build_batch([Record(None, b"plain", timestamp=T + i)
                                                for i in range(3)]))
        txn = RawTxn(client, tid)
        assert init_txn(txn).error_code == 0
        assert txn.add_partitions([(topic, 0)]) == {(topic, 0): 0}
        assert txn.produce((topic, 0), txn.batch((topic, 0), [b"t1", b"t2"])) == (0, 3)
        assert list_offsets(client, topic, LATEST, isolation_level=0)[:2] == (0, 5)
        assert list_offsets(client, topic, LATEST, isolation_level=1)[:2] == (0, 3)
        assert list_offsets(client, topic, EARLIEST, isolation_level=1)[:2] == (0, 0)
        assert txn.end(commit=True) == 0
        # The marker is written after EndTxn is answered: wait for it.
        assert wait_until(lambda: list_offsets(client, topic, LATEST, isolation_level=1)[1] == 6)
        assert list_offsets(client, topic, LATEST, isolation_level=0)[:2] == (0, 6)
    finally:
        client.close()
