"""The admin APIs Kafka's tools and the Java clients need, on the raw wire and through
confluent-kafka: DeleteRecords (21), OffsetForLeaderEpoch (23), AlterConfigs (33),
DescribeConfigs synonyms (32), DescribeTopicPartitions (75) pagination, ListGroups v5's
types filter, and DeleteTopics dropping committed offsets, with Kafka 4.3.1's answers
as the reference."""

from __future__ import annotations

import datetime

import pytest
from txbroker.protocol.messages import build, request_module

from tests.helpers import wait_until
from tests.integration.clients import Msg, produce
from tests.integration.txn_util import unique

from .test_list_offsets import EARLIEST, LATEST, list_offsets

DELETE_RECORDS, DESCRIBE_CONFIGS, ALTER_CONFIGS, LIST_GROUPS = 21, 32, 33, 16
DESCRIBE_TOPIC_PARTITIONS, OFFSET_FOR_LEADER_EPOCH = 75, 23
TOPIC, GROUP = 2, 32
NONE, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION, POLICY_VIOLATION = 0, 1, 3, 44
INVALID_REQUEST, INVALID_CONFIG, UNKNOWN_LEADER_EPOCH = 42, 40, 75


def delete_records(client, topic: str, offsets: dict[int, int]) -> dict[int, tuple[int, int]]:
    """partition -> (error code, low watermark)."""
    m = request_module(DELETE_RECORDS, 2)
    r = client.request(DELETE_RECORDS, 2, build(
        m.DeleteRecordsRequest, timeout=datetime.timedelta(seconds=10), topics=(build(
            m.DeleteRecordsTopic, name=topic, partitions=tuple(
                build(m.DeleteRecordsPartition, partition_index=p, offset=o)
                for p, o in offsets.items())),)))
    [t] = r.topics
    return {p.partition_index: (int(p.error_code), p.low_watermark) for p in t.partitions}


def test_delete_records(broker):
    topic = broker.topic("delete-records", partitions=2)
    compacted = broker.topic("delete-records-compact", configs={"cleanup.policy": "compact"})
    produce("confluent", broker.bootstrap, topic, [Msg(b"k", b"v", partition=0)] * 5)
    produce("confluent", broker.bootstrap, compacted, [Msg(b"k", b"v", partition=0)] * 2)
    client = broker.raw()
    try:
        assert delete_records(client, topic, {0: 2, 1: 1, 7: 0}) == {
            0: (NONE, 2), 1: (OFFSET_OUT_OF_RANGE, -1), 7: (UNKNOWN_TOPIC_OR_PARTITION, -1)}
        assert list_offsets(client, topic, EARLIEST)[:2] == (0, 2)
        # A lower offset leaves the log start where it is; -1 means the high watermark.
        assert delete_records(client, topic, {0: 1}) == {0: (NONE, 2)}
        assert delete_records(client, topic, {0: -1, 1: -1}) == {0: (NONE, 5), 1: (NONE, 0)}
        assert list_offsets(client, topic, EARLIEST)[:2] == (0, 5)
        assert list_offsets(client, topic, LATEST)[:2] == (0, 5)
        assert delete_records(client, topic, {0: 6}) == {0: (OFFSET_OUT_OF_RANGE, -1)}
        # A compact-only log keeps its start (Kafka: POLICY_VIOLATION).
        assert delete_records(client, compacted, {0: 1}) == {0: (POLICY_VIOLATION, -1)}
    finally:
        client.close()


def test_delete_records_past_an_open_transaction(broker):
    """The last stable offset never falls below the log start offset."""
    from confluent_kafka import Producer

    topic = broker.topic("delete-records-txn")
    produce("confluent", broker.bootstrap, topic, [Msg(b"k", b"v", partition=0)])
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": unique("dr-tx")})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    p.flush(30)
    client = broker.raw()
    try:
        assert list_offsets(client, topic, LATEST, isolation_level=1)[:2] == (0, 1)
        assert delete_records(client, topic, {0: 2}) == {0: (NONE, 2)}
        assert list_offsets(client, topic, LATEST, isolation_level=1)[:2] == (0, 2)
        p.abort_transaction(30)
        # The marker is written after EndTxn is answered.
        assert wait_until(
            lambda: list_offsets(client, topic, LATEST, isolation_level=1)[:2] == (0, 3))
    finally:
        client.close()


def describe_configs(client, resource_type: int, name: str, synonyms: bool = True,
                     keys: tuple[str, ...] | None = None):
    m = request_module(DESCRIBE_CONFIGS, 4)
    r = client.request(DESCRIBE_CONFIGS, 4, build(
        m.DescribeConfigsRequest, include_synonyms=synonyms, include_documentation=False,
        resources=(build(m.DescribeConfigsResource, resource_type=resource_type,
                         resource_name=name, configuration_keys=keys),)))
    [res] = r.results
    return res


def test_describe_configs_synonyms(broker):
    topic = broker.topic("synonyms", configs={"cleanup.policy": "compact"})
    client = broker.raw()
    try:
        res = describe_configs(client, TOPIC, topic, keys=("cleanup.policy", "segment.bytes"))
        found = {c.name: [(s.name, s.value, s.source) for s in c.synonyms] for c in res.configs}
        # Sources: 1 DYNAMIC_TOPIC_CONFIG, 5 DEFAULT_CONFIG.
        assert found == {
            "cleanup.policy": [("cleanup.policy", "compact", 1), ("log.cleanup.policy", "delete", 5)],
            "segment.bytes": [("log.segment.bytes", "1073741824", 5)]}
        res = describe_configs(client, TOPIC, topic, synonyms=False, keys=("cleanup.policy",))
        assert [c.synonyms for c in res.configs] == [()]
    finally:
        client.close()


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_alter_configs_replaces_the_overrides(broker):
    """The legacy AlterConfigs (confluent-kafka's alter_configs) replaces every override."""
    from confluent_kafka.admin import ConfigResource

    topic = broker.topic("alter-configs", configs={"segment.bytes": "10485760"})
    res = ConfigResource("TOPIC", topic, set_config={"retention.ms": "3600000"})
    # confluent-kafka deprecates it, KafkaJS has nothing else (docs/compatibility.md).
    broker.admin.alter_configs([res])[res].result(30)
    described = broker.admin.describe_configs([ConfigResource("TOPIC", topic)])
    configs = next(iter(described.values())).result(30)
    assert configs["retention.ms"].value == "3600000"
    assert configs["segment.bytes"].value == "1073741824"  # back to the default
    assert configs["segment.bytes"].is_default
    bad = ConfigResource("TOPIC", topic, set_config={"no.such.config": "1"})
    with pytest.raises(Exception) as e:
        broker.admin.alter_configs([bad])[bad].result(30)
    assert e.value.args[0].code() == INVALID_CONFIG


def test_group_configs(broker):
    """Group configs (KIP-848) tune the consumer, share and streams group protocols.
    Both list a group's consumer-protocol keys and accept a valid change of one
    (tests/differential/test_group_configs.py has the rest).
    Neither answers INVALID_REQUEST."""
    client = broker.raw()
    try:
        res = describe_configs(client, GROUP, unique("group-configs"))
        assert res.error_code == NONE
        names = {c.name for c in res.configs}
        assert {"consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"} <= names
        m = request_module(ALTER_CONFIGS, 2)
        r = client.request(ALTER_CONFIGS, 2, build(
            m.AlterConfigsRequest, validate_only=True, resources=(build(
                m.AlterConfigsResource, resource_type=GROUP, resource_name="g", configs=(
                    build(m.AlterableConfig, name="consumer.session.timeout.ms",
                          value="50000"),)),)))
        [res] = r.responses
        assert res.error_code == NONE
    finally:
        client.close()


def describe_topic_partitions(client, topics: list[str], limit: int, cursor=None):
    m = request_module(DESCRIBE_TOPIC_PARTITIONS, 0)
    r = client.request(DESCRIBE_TOPIC_PARTITIONS, 0, build(
        m.DescribeTopicPartitionsRequest, response_partition_limit=limit,
        topics=tuple(build(m.TopicRequest, name=t) for t in topics),
        cursor=None if cursor is None else build(m.Cursor, topic_name=cursor[0],
                                                 partition_index=cursor[1])))
    page = [(t.name, int(t.error_code), [p.partition_index for p in t.partitions])
            for t in r.topics]
    for t in r.topics:
        for p in t.partitions:
            assert (p.leader_id, p.replica_nodes, p.isr_nodes) == (1, (1,), (1,))
            assert p.eligible_leader_replicas == () and p.last_known_elr == ()
    nxt = r.next_cursor
    return page, None if nxt is None else (nxt.topic_name, nxt.partition_index)


def test_describe_topic_partitions_pages(broker):
    prefix = unique("dtp")
    a = broker.create_topic(f"{prefix}-a", partitions=3)
    b = broker.create_topic(f"{prefix}-b", partitions=3)
    missing = f"{prefix}-c"
    client = broker.raw()
    try:
        asked = [b, a, missing, a]
        assert describe_topic_partitions(client, asked, 2) == ([(a, 0, [0, 1])], (a, 2))
        assert describe_topic_partitions(client, asked, 3) == ([(a, 0, [0, 1, 2])], (b, 0))
        assert describe_topic_partitions(client, asked, 6) == (
            [(a, 0, [0, 1, 2]), (b, 0, [0, 1, 2])], (missing, 0))
        assert describe_topic_partitions(client, asked, 100) == (
            [(a, 0, [0, 1, 2]), (b, 0, [0, 1, 2]), (missing, UNKNOWN_TOPIC_OR_PARTITION, [])],
            None)
        assert describe_topic_partitions(client, asked, 2, (a, 1)) == ([(a, 0, [1, 2])], (b, 0))
        assert describe_topic_partitions(client, asked, 100, (a, 7)) == (
            [(a, 0, []), (b, 0, [0, 1, 2]), (missing, UNKNOWN_TOPIC_OR_PARTITION, [])], None)
        # At least one partition, whatever the limit.
        assert describe_topic_partitions(client, [a], 0) == ([(a, 0, [0])], (a, 1))
        # A cursor outside the topics asked for fails every topic.
        assert describe_topic_partitions(client, [b, a], 5, ("zzz", 0)) == (
            [(b, INVALID_REQUEST, []), (a, INVALID_REQUEST, [])], None)
    finally:
        client.close()


def test_list_groups_types_filter(broker):
    from confluent_kafka import TopicPartition

    topic = broker.topic("list-groups")
    group = unique("list-groups")
    broker.wait_coordinator(group, key_type=0)
    consumer_conf = {"bootstrap.servers": broker.bootstrap, "group.id": group}
    from confluent_kafka import Consumer

    c = Consumer(consumer_conf)
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        c.close()
    m = request_module(LIST_GROUPS, 5)
    client = broker.raw()
    try:
        def listed(types: tuple[str, ...]) -> dict[str, str]:
            r = client.request(LIST_GROUPS, 5, build(m.ListGroupsRequest, states_filter=(),
                                                     types_filter=types))
            assert r.error_code == NONE
            return {g.group_id: g.group_type for g in r.groups}

        assert listed(())[group] == "classic"
        assert listed(("classic",))[group] == "classic"
        assert listed(("Classic", "consumer"))[group] == "classic"
        assert group not in listed(("consumer",))
    finally:
        client.close()


def test_delete_topic_removes_its_committed_offsets(broker):
    """Kafka's group coordinator forgets the offsets of a deleted topic (and a group left
    Empty without offsets): a topic created again under the name starts uncommitted,
    while the group's offsets of other topics stay."""
    from confluent_kafka import OFFSET_INVALID, Consumer, TopicPartition

    doomed = broker.topic("deleted-offsets")
    kept = broker.topic("kept-offsets")
    group = unique("deleted-offsets")
    broker.wait_coordinator(group, key_type=0)

    def consumer():
        return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})

    c = consumer()
    try:
        c.commit(offsets=[TopicPartition(doomed, 0, 3), TopicPartition(kept, 0, 4)],
                 asynchronous=False)
    finally:
        c.close()
    broker.admin.delete_topics([doomed], operation_timeout=30)[doomed].result(30)
    assert wait_until(lambda: doomed not in broker.admin.list_topics(timeout=5).topics, 30)
    broker.create_topic(doomed)

    def committed() -> list[int]:
        c = consumer()
        try:
            return [tp.offset for tp in c.committed(
                [TopicPartition(doomed, 0), TopicPartition(kept, 0)], timeout=10)]
        finally:
            c.close()

    assert wait_until(lambda: committed() == [OFFSET_INVALID, 4], 30), committed()


def test_offset_for_leader_epoch(broker):
    """One leader epoch (0) per partition: it ends at the log end offset."""
    full = broker.topic("epoch-full")
    empty = broker.topic("epoch-empty")
    produce("confluent", broker.bootstrap, full, [Msg(b"k", b"v", partition=0)] * 5)
    client = broker.raw()
    try:
        for version in (2, 3, 4):
            m = request_module(OFFSET_FOR_LEADER_EPOCH, version)

            def part(index: int, current: int, epoch: int, m=m):
                return build(m.OffsetForLeaderPartition, partition=index,
                             current_leader_epoch=current, leader_epoch=epoch)

            r = client.request(OFFSET_FOR_LEADER_EPOCH, version, build(
                m.OffsetForLeaderEpochRequest, replica_id=-1, topics=(
                    build(m.OffsetForLeaderTopic, topic=full, partitions=(
                        part(0, -1, 0), part(0, 0, 0), part(0, -1, 5), part(0, 1, 0),
                        part(0, -1, -1), part(3, -1, 0))),
                    build(m.OffsetForLeaderTopic, topic=empty, partitions=(part(0, -1, 0),)),
                    build(m.OffsetForLeaderTopic, topic=unique("no-topic"),
                          partitions=(part(0, -1, 0),)))))
            got = [[(int(p.error_code), p.leader_epoch, p.end_offset) for p in t.partitions]
                   for t in r.topics]
            assert got == [
                [(NONE, 0, 5), (NONE, 0, 5), (NONE, -1, -1), (UNKNOWN_LEADER_EPOCH, -1, -1),
                 (NONE, -1, -1), (UNKNOWN_TOPIC_OR_PARTITION, -1, -1)],
                [(NONE, 0, 0)],
                [(UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]], (version, got)
    finally:
        client.close()
