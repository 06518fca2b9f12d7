"""KIP-848 consumer-protocol groups with a real client: confluent-kafka (librdkafka)
with ``group.protocol=consumer`` against the in-process broker. Join and read, a second
member takes half, a leaving member's partitions move, commits read back, and a broker
restart keeps epochs and assignments. Exactly-once offsets (TxnOffsetCommit with member
epochs), static members and regex pick-up run against Kafka too, in
tests/differential/test_consumer_protocol.py."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from .clients import Msg, produce, unique_topic
from .consumer_util import owned, poll_until

CONFIG = {
    "offsets.topic.num.partitions": "4",
    # Fast heartbeats keep the test short (Kafka's default is 5 s).
    "group.consumer.heartbeat.interval.ms": "200",
    "group.consumer.min.heartbeat.interval.ms": "100",
}


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    return dict(CONFIG)


def consumer(bootstrap: str, group: str, **extra) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    conf.update(extra)
    return Consumer(conf)


def group_state(txbroker, group: str):
    def read(broker):
        g = broker.groups.consumer.groups.get(group)
        if g is None:
            return None
        return (g.group_epoch, g.assignment_epoch, g.state,
                {m.member_id: (m.member_epoch, {t: sorted(p) for t, p in m.assigned.items()})
                 for m in g.members.values()})
    return txbroker.call(read)


def test_join_read_and_commit(txbroker):
    topic = unique_topic("cp-read")
    txbroker.create_topic(topic, 2)
    produce("confluent", txbroker.bootstrap, topic,
            [Msg(f"k{i}".encode(), f"v{i}".encode(), partition=i % 2) for i in range(10)])
    group = unique_topic("g-read")
    c = consumer(txbroker.bootstrap, group)
    try:
        c.subscribe([topic])
        got = []
        assert poll_until([c], lambda: len(got) >= 10, sink=got), f"read {len(got)} of 10"
        assert owned(c) == {0, 1}
        assert sorted(m.value() for m in got) == sorted(f"v{i}".encode() for i in range(10))
        c.commit(asynchronous=False)
        back = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=10)
        assert {tp.partition: tp.offset for tp in back} == {0: 5, 1: 5}
        state = group_state(txbroker, group)
        assert state[2] == "Stable" and len(state[3]) == 1
        # A week and more later: the offsets of a subscribed topic do not expire.
        future = int(time.time() * 1000) + 8 * 24 * 3600 * 1000
        assert txbroker.call(lambda b: b.groups.expire_offsets(future)) == 0
    finally:
        c.close()
    # close() sent a leave (epoch -1): the group is Empty, its offsets stay...
    assert group_state(txbroker, group)[2] == "Empty"
    assert txbroker.call(lambda b: b.groups.expire_offsets()) == 0
    # ...until the retention has passed since their commit; then the group goes too.
    assert txbroker.call(lambda b: b.groups.expire_offsets(future)) == 2
    assert group_state(txbroker, group) is None


def test_second_member_takes_half_and_leaver_partitions_move(txbroker):
    topic = unique_topic("cp-share")
    txbroker.create_topic(topic, 4)
    group = unique_topic("g-share")
    a = consumer(txbroker.bootstrap, group)
    b = consumer(txbroker.bootstrap, group)
    overlaps = []

    def disjoint_check():
        if owned(a) & owned(b):
            overlaps.append((owned(a), owned(b)))

    try:
        a.subscribe([topic])
        assert poll_until([a], lambda: owned(a) == {0, 1, 2, 3})
        b.subscribe([topic])

        def halves():
            disjoint_check()
            return len(owned(a)) == 2 and len(owned(b)) == 2

        assert poll_until([a, b], halves), (owned(a), owned(b))
        assert owned(a) | owned(b) == {0, 1, 2, 3}
        a.close()
        assert poll_until([b], lambda: owned(b) == {0, 1, 2, 3}), owned(b)
        assert not overlaps, overlaps
        state = group_state(txbroker, group)
        assert len(state[3]) == 1 and state[2] == "Stable"
    finally:
        b.close()


def test_restart_keeps_epochs_and_assignment(txbroker):
    topic = unique_topic("cp-restart")
    txbroker.create_topic(topic, 3)
    group = unique_topic("g-restart")
    c = consumer(txbroker.bootstrap, group)
    try:
        c.subscribe([topic])
        assert poll_until([c], lambda: owned(c) == {0, 1, 2})
        assert poll_until([c], lambda: group_state(txbroker, group)[2] == "Stable")
        before = group_state(txbroker, group)
        txbroker.restart()

        def loaded(broker):
            return broker.groups.loaded
        assert poll_until([], lambda: txbroker.call(loaded), timeout=10)
        assert group_state(txbroker, group) == before
        # The member carries on with its epoch after the restart: no rebalance.
        assert poll_until([c], lambda: False, timeout=1.5) is False
        assert owned(c) == {0, 1, 2}
        assert group_state(txbroker, group)[:2] == before[:2]
    finally:
        c.close()


def test_regex_subscription_and_an_invalid_regex(txbroker):
    """subscribe(["^prefix.*"]) sends SubscribedTopicRegex: the broker resolves it to the
    matching topics (not the others); a regex that does not compile is
    INVALID_REGULAR_EXPRESSION, fatal for the consumer. (A topic created later is picked
    up within Kafka's 10 s refresh: tests/differential/test_consumer_protocol.py.)"""
    import datetime
    import uuid

    from txbroker.protocol.messages import build, request_module

    from .wire_util import connect

    prefix = unique_topic("cp-rx")
    txbroker.create_topic(prefix + "-one", 2)
    txbroker.create_topic("not-" + prefix, 1)
    group = unique_topic("g-rx")
    c = consumer(txbroker.bootstrap, group)
    raw = connect(txbroker)
    try:
        c.subscribe([f"^{prefix}-.*"])
        assert poll_until([c], lambda: len(c.assignment()) == 2)
        assert {tp.topic for tp in c.assignment()} == {prefix + "-one"}
        state = txbroker.call(lambda b: dict(b.groups.consumer.groups[group].resolved))
        # librdkafka sends the pattern in parentheses: "(^prefix-.*)".
        assert list(state.values()) == [frozenset({prefix + "-one"})], state
        # librdkafka checks patterns itself: a bad one goes on the wire by hand.
        m = request_module(68, 1)
        r = raw.request(68, 1, build(
            m.ConsumerGroupHeartbeatRequest, group_id=group + "-bad",
            member_id=str(uuid.uuid4()), member_epoch=0,
            rebalance_timeout=datetime.timedelta(seconds=1), subscribed_topic_names=None,
            subscribed_topic_regex="(a", topic_partitions=()))
        assert int(r.error_code) == 128, r  # INVALID_REGULAR_EXPRESSION
        assert r.error_message.startswith("SubscribedTopicRegex `(a` is not a valid"), r
    finally:
        c.close()
        raw.close()


def test_failed_write_leaves_the_group_as_the_log_has_it(txbroker):
    """A heartbeat whose records cannot be appended (the disk fails) is answered with
    Kafka's mapped error (NOT_COORDINATOR for a storage error) and the group in memory
    goes back to what __consumer_offsets holds: the join never happened."""
    import datetime
    import uuid

    from txbroker.coordinator.group import consumer_coordinator
    from txbroker.protocol.messages import build, request_module

    from .wire_util import connect

    topic = unique_topic("cp-fail")
    txbroker.create_topic(topic, 2)
    group = unique_topic("g-fail")
    m = request_module(68, 1)
    raw = connect(txbroker)

    def join(member_id):
        return raw.request(68, 1, build(
            m.ConsumerGroupHeartbeatRequest, group_id=group, member_id=member_id,
            member_epoch=0, rebalance_timeout=datetime.timedelta(seconds=5),
            subscribed_topic_names=(topic,), topic_partitions=()))

    real = consumer_coordinator.append_records

    def failing(plog, records, **kw):
        raise OSError(5, "Input/output error")

    try:
        first = str(uuid.uuid4())
        assert int(join(first).error_code) == 0
        before = group_state(txbroker, group)
        txbroker.call(lambda b: setattr(consumer_coordinator, "append_records", failing))
        r = join(str(uuid.uuid4()))
        assert int(r.error_code) == 16, r  # NOT_COORDINATOR: the client looks again
        txbroker.call(lambda b: setattr(consumer_coordinator, "append_records", real))
        assert group_state(txbroker, group) == before
        assert int(join(str(uuid.uuid4())).error_code) == 0
        assert len(group_state(txbroker, group)[3]) == 2
    finally:
        consumer_coordinator.append_records = real
        raw.close()


def test_heartbeat_v0_joins_without_a_regex(txbroker):
    """ConsumerGroupHeartbeat v0 (KIP-848's first version, no SubscribedTopicRegex) is
    served: a member joins and gets its assignment, then leaves (fuzz case
    log-consumer-group-heartbeat-v0: every v0 request was an AttributeError)."""
    import datetime

    from txbroker.client.connection import BlockingConnection
    from txbroker.protocol.errors import ErrorCode
    from txbroker.protocol.messages import build, request_class

    topic = unique_topic("cp-v0")
    txbroker.create_topic(topic, 2)
    group = unique_topic("g-v0")
    cls = request_class(68, 0)
    host, port = txbroker.bootstrap.split(":")
    with BlockingConnection(host, int(port), 10, "v0-client") as conn:
        joined = None
        for _ in range(20):  # COORDINATOR_LOAD_IN_PROGRESS while __consumer_offsets loads
            joined = conn.request(68, 0, build(
                cls, group_id=group, member_id="", member_epoch=0, instance_id=None,
                rack_id=None, rebalance_timeout=datetime.timedelta(seconds=30),
                subscribed_topic_names=(topic,), server_assignor=None, topic_partitions=()))
            if joined.error_code is ErrorCode.none:
                break
            time.sleep(0.2)
        assert joined.error_code is ErrorCode.none, joined
        assert joined.member_id and joined.member_epoch > 0
        left = conn.request(68, 0, build(
            cls, group_id=group, member_id=joined.member_id, member_epoch=-1, instance_id=None,
            rack_id=None, rebalance_timeout=datetime.timedelta(milliseconds=-1),
            subscribed_topic_names=None,
            server_assignor=None, topic_partitions=None))
        assert left.error_code is ErrorCode.none, left
        assert left.member_epoch == -1
