"""What the share-group differential tests (test_share_groups.py, test_share_group_wire.py)
need on both brokers: a broker that serves share groups, a group that starts at the
earliest offset, confluent-kafka's ShareConsumer, and the share-group APIs on the wire.

A new Kafka 4.4 cluster finalizes ``share.version`` 2 (nothing to format or enable);
txbroker needs ``txbroker.share.version`` 1. Where a share group starts reading is
the group config ``share.auto.offset.reset`` (default latest), set per group before its
first member joins (txbroker's broker key ``txbroker.share.auto.offset.reset`` says the
same for every group)."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator

import pytest
from txbroker.protocol.messages import build, request_module

from tests.differential.conftest import BROKER_PARAMS, COMMON_CONFIG, Broker, running_broker
from tests.integration import test_share_groups as _integration

ck = _integration.ck  # (that module skips without confluent-kafka's ShareConsumer)

HEARTBEAT, DESCRIBE, SHARE_FETCH, SHARE_ACK = 76, 77, 78, 79
INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CONFIGS = 44, 32
ACCEPT, RELEASE, REJECT = 1, 2, 3
LOCK_MS = 6000  # short, so that the lock-expiry test is quick; long enough for a slow poll

SHARE_CONFIG = {
    **COMMON_CONFIG,
    "group.share.record.lock.duration.ms": str(LOCK_MS),
    "group.share.heartbeat.interval.ms": "1000",
    # (the broker's share keys must lie within its group.share.min.* keys: 15 s and 5 s)
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.min.heartbeat.interval.ms": "500",
}
TXBROKER_ONLY = {"txbroker.share.version": "1", "txbroker.share.auto.offset.reset": "earliest"}


@pytest.fixture(scope="session", params=BROKER_PARAMS)
def share_broker(request, tmp_path_factory) -> Iterator[Broker]:
    """txbroker or Apache Kafka 4.4.0 serving share groups (one of each per session)."""
    extra = {} if request.param == "kafka" else TXBROKER_ONLY
    yield from running_broker(request.param, tmp_path_factory, {**SHARE_CONFIG, **extra})


def new_group(broker: Broker, prefix: str = "sg") -> str:
    """A share group id no other test uses, which starts at the earliest offset."""
    group = f"{prefix}-{uuid.uuid4().hex[:8]}"
    broker.wait_coordinator(group, key_type=0)  # Kafka: __consumer_offsets made on demand
    set_group_config(broker, group, "share.auto.offset.reset", "earliest")
    return group


def set_group_config(broker: Broker, group: str, key: str, value: str,
                     timeout: float = 10) -> None:
    """IncrementalAlterConfigs SET of a group config, then DescribeConfigs until it reads
    ``value``: Kafka applies it through its metadata log, a moment after the answer."""
    client = broker.raw()
    try:
        m = request_module(INCREMENTAL_ALTER_CONFIGS, 1)
        r = client.request(INCREMENTAL_ALTER_CONFIGS, 1, build(
            m.IncrementalAlterConfigsRequest, validate_only=False, resources=(build(
                m.AlterConfigsResource, resource_type=32, resource_name=group, configs=(build(
                    m.AlterableConfig, name=key, config_operation=0, value=value),)),)))
        assert int(r.responses[0].error_code) == 0, r
        d = request_module(DESCRIBE_CONFIGS, 4)
        deadline = time.monotonic() + timeout
        while True:
            r = client.request(DESCRIBE_CONFIGS, 4, build(
                d.DescribeConfigsRequest, include_synonyms=False, include_documentation=False,
                resources=(build(d.DescribeConfigsResource, resource_type=32,
                                 resource_name=group, configuration_keys=(key,)),)))
            if [c.value for c in r.results[0].configs] == [value]:
                return
            assert time.monotonic() < deadline, r
            time.sleep(0.05)
    finally:
        client.close()


def produce(broker: Broker, topic: str, n: int, start: int = 0, partition: int = -1) -> None:
    p = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(start, start + n):
        p.produce(topic, value=f"v{i}".encode(), partition=partition)
    assert p.flush(30) == 0


def share_consumer(broker: Broker, group: str, topic: str, *, explicit: bool = False,
                   **extra: str):
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group, **extra}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    c = ck.ShareConsumer(conf)
    c.subscribe([topic])
    return c


# confluent-kafka's ShareConsumer helpers are the integration tests' (they take a consumer).
poll_once, poll_until, accept, nothing_more = (_integration.poll_once, _integration.poll_until,
                                               _integration.accept, _integration.nothing_more)


def heartbeat(client, group: str, member: str, epoch: int, topics=None):
    m = request_module(HEARTBEAT, 1)
    return client.request(HEARTBEAT, 1, build(
        m.ShareGroupHeartbeatRequest, group_id=group, member_id=member, member_epoch=epoch,
        rack_id=None, subscribed_topic_names=topics))


def join(client, group: str, topics: tuple[str, ...], timeout: float = 30):
    """A member by heartbeats (a new member id), once its assignment names every
    partition of ``topics``: (member id, epoch, last answer)."""
    member = str(uuid.uuid4())
    r = heartbeat(client, group, member, 0, topics)
    assert int(r.error_code) == 0, r
    deadline = time.monotonic() + timeout
    while r.assignment is None or not r.assignment.topic_partitions:
        assert time.monotonic() < deadline, r
        time.sleep(0.2)
        r = heartbeat(client, group, member, r.member_epoch)
        assert int(r.error_code) == 0, r
    return member, r.member_epoch, r


def describe_groups(client, *groups: str):
    m = request_module(DESCRIBE, 1)
    return client.request(DESCRIBE, 1, build(m.ShareGroupDescribeRequest, group_ids=groups,
                                             include_authorized_operations=False)).groups


def share_fetch(client, group: str, member: str, epoch: int, topic_id, partitions=(0,), *,
                acks=(), max_wait_ms: int = 0, max_records: int = 100, forgotten=(),
                batch_size: int | None = None, acquire_mode: int | None = None):
    """ShareFetch v1 (v2 with ``acquire_mode``: 0 batch_optimized, 1 record_limit);
    ``acks``: (first, last, type) on the first partition."""
    version = 1 if acquire_mode is None else 2
    m = request_module(SHARE_FETCH, version)
    extra = {} if acquire_mode is None else {"share_acquire_mode": acquire_mode}
    parts = tuple(build(m.FetchPartition, partition_index=p, acknowledgement_batches=tuple(
        build(m.AcknowledgementBatch, first_offset=a, last_offset=b, acknowledge_types=(t,))
        for a, b, t in (acks if i == 0 else ())))
        for i, p in enumerate(partitions))
    return client.request(SHARE_FETCH, version, build(
        m.ShareFetchRequest, group_id=group, member_id=member, share_session_epoch=epoch,
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=1 << 20,
        max_records=max_records, batch_size=max_records if batch_size is None else batch_size,
        **extra,
        topics=(build(m.FetchTopic, topic_id=topic_id, partitions=parts),) if parts else (),
        forgotten_topics_data=tuple(build(m.ForgottenTopic, topic_id=topic_id,
                                          partitions=tuple(forgotten)) for _ in forgotten[:1])))


def share_ack(client, group: str, member: str, epoch: int, topic_id, acks, partition: int = 0):
    """ShareAcknowledge v1 of (first, last, type) batches on one partition."""
    m = request_module(SHARE_ACK, 1)
    return client.request(SHARE_ACK, 1, build(
        m.ShareAcknowledgeRequest, group_id=group, member_id=member, share_session_epoch=epoch,
        topics=(build(m.AcknowledgeTopic, topic_id=topic_id, partitions=(build(
            m.AcknowledgePartition, partition_index=partition, acknowledgement_batches=tuple(
                build(m.AcknowledgementBatch, first_offset=a, last_offset=b,
                      acknowledge_types=(t,)) for a, b, t in acks)),)),)))


def acquired(r) -> list[tuple[int, int, int, int]]:
    """(partition, first, last, delivery count) of a ShareFetch answer."""
    return [(p.partition_index, a.first_offset, a.last_offset, a.delivery_count)
            for t in r.responses for p in t.partitions for a in getattr(p, "acquired_records", ())]


def topic_id(broker: Broker, topic: str):
    m = request_module(3, 12)
    client = broker.raw()
    try:
        r = client.request(3, 12, build(
            m.MetadataRequest, topics=(build(m.MetadataRequestTopic, topic_id=None, name=topic),),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    finally:
        client.close()
    return r.topics[0].topic_id
