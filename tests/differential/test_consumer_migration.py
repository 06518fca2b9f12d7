"""Rolling migrations of a consumer group between the classic protocol and the consumer
protocol (KIP-848's online upgrade and downgrade, ``group.consumer.migration.policy``),
txbroker vs Kafka 4.4.0: two members are replaced one by one by members of the other
protocol while records keep coming; every record is committed exactly once, and the
admin APIs show the group as Kafka shows it at each step."""

from __future__ import annotations

import struct
import time
from datetime import timedelta

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from txbroker.protocol.messages import build, request_module

from tests.differential.util import describe_group
from tests.integration.consumer_util import owned
from tests.integration.group_worker import KAFKA_PYTHON_POLL_MS

PARTITIONS = 4
BATCH = 12

# What Kafka 4.3.1 answers at each step, (DescribeGroups v5, ConsumerGroupDescribe v1):
# a classic group is described by DescribeGroups only (ConsumerGroupDescribe:
# GROUP_ID_NOT_FOUND); a consumer group is Dead to DescribeGroups, and
# ConsumerGroupDescribe lists its classic (member type 0) and consumer (1) members.
SEEN = {
    "classic": ((0, "Stable", "consumer", 2), (69, "", ())),
    "mixed": ((0, "Dead", "", 0), (0, "Stable", (0, 1))),
    "consumer": ((0, "Dead", "", 0), (0, "Stable", (1, 1))),
}


def _consumer_group_describe(broker, group: str) -> tuple:
    """ConsumerGroupDescribe v1: (error, state, sorted member types)."""
    m = request_module(69, 1)
    client = broker.raw()
    try:
        r = client.request(69, 1, build(m.ConsumerGroupDescribeRequest, group_ids=(group,),
                                        include_authorized_operations=False))
    finally:
        client.close()
    (g,) = r.groups
    return (int(g.error_code), g.group_state,
            tuple(sorted(int(mm.member_type) for mm in g.members)))


class Roll:
    """The consumers of one group; each record a member gets is committed synchronously
    before the next poll, and counted only if the commit succeeded."""

    def __init__(self, broker, topic: str) -> None:
        self.broker = broker
        self.topic = topic
        self.group = topic + "-g"
        self.committed: list[tuple[int, int]] = []
        self.producer = Producer({"bootstrap.servers": broker.bootstrap})
        self.sent = 0

    def member(self, protocol: str) -> Consumer:
        conf = {"bootstrap.servers": self.broker.bootstrap, "group.id": self.group,
                "group.protocol": protocol, "auto.offset.reset": "earliest",
                "enable.auto.commit": False}
        if protocol == "classic":
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
        c = Consumer(conf)
        c.subscribe([self.topic])
        return c

    def produce(self) -> None:
        for i in range(BATCH):
            self.producer.produce(self.topic, value=b"%d" % (self.sent + i),
                                  partition=(self.sent + i) % PARTITIONS)
        self.sent += BATCH
        assert self.producer.flush(30) == 0

    def poll(self, consumers, predicate, timeout: float = 60) -> bool:
        """Poll every consumer in turn, committing what it gets, until ``predicate()``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for c in consumers:
                msg = c.poll(0.05)
                if msg is None or msg.error() is not None:
                    continue
                try:
                    c.commit(message=msg, asynchronous=False)
                except KafkaException:
                    continue  # not committed: it will be consumed again
                self.committed.append((msg.partition(), msg.offset()))
            if predicate():
                return True
        return False

    def settled(self, consumers, step: str) -> bool:
        """Every partition owned by exactly one member, every record committed, and the
        group Stable as its kind describes it."""
        sets = [owned(c) for c in consumers]
        if not all(sets) or sum(len(s) for s in sets) != PARTITIONS or \
                set().union(*sets) != set(range(PARTITIONS)) or not self.all_consumed():
            return False
        if step == "classic":
            return describe_group(self.broker, self.group)[1] == "Stable"
        return _consumer_group_describe(self.broker, self.group)[1] == "Stable"

    def all_consumed(self) -> bool:
        return len(self.committed) >= self.sent

    def describe(self) -> tuple:
        return describe_group(self.broker, self.group), \
            _consumer_group_describe(self.broker, self.group)


@pytest.mark.parametrize("old,new", [("classic", "consumer"), ("consumer", "classic")],
                         ids=["upgrade", "downgrade"])
def test_rolling_migration(broker, old, new):
    """Two ``old``-protocol members; one is replaced by a ``new``-protocol member (a
    consumer group with one classic and one consumer member: upgraded from classic, or
    joined by a classic member), then the other (upgrade: only consumer members;
    downgrade: the last consumer member left, the group is classic again and
    rebalances). Each step consumes a new batch; no record is committed twice or
    lost."""
    topic = broker.topic(f"migrate-{new}", partitions=PARTITIONS)
    roll = Roll(broker, topic)
    seen = {}
    members = [roll.member(old), roll.member(old)]
    try:
        for step, replaced in ((old, None), ("mixed", 0), (new, 1)):
            if replaced is not None:
                members[replaced].close()
                members[replaced] = roll.member(new)
            roll.produce()
            assert roll.poll(members, lambda step=step: roll.settled(members, step)), \
                (step, [owned(c) for c in members], len(roll.committed), roll.sent)
            seen[step] = roll.describe()
        got = members[0].committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 30)
    finally:
        for c in members:
            try:
                c.close()
            except RuntimeError:
                pass  # closed already (the step that replaced it failed)
    assert sorted(set(roll.committed)) == sorted(roll.committed), "a record committed twice"
    assert len(roll.committed) == roll.sent
    assert sum(tp.offset for tp in got) == roll.sent
    assert seen == SEEN


def test_kafka_python_classic_member_in_a_migrated_group(broker):
    """kafka-python speaks only the classic protocol: it keeps consuming in a group
    upgraded by a confluent-kafka ``group.protocol=consumer`` member (each gets half,
    every record committed once), and has all partitions again after the consumer member
    leaves and the group is downgraded."""
    from kafka import KafkaConsumer, OffsetAndMetadata
    from kafka.errors import KafkaError

    topic = broker.topic("migrate-kp", partitions=PARTITIONS)
    roll = Roll(broker, topic)
    kp = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=roll.group,
                       enable_auto_commit=False, auto_offset_reset="earliest",
                       session_timeout_ms=6000, heartbeat_interval_ms=300)
    # The topic's metadata first: a leader without it assigns nothing until its next
    # metadata refresh (kafka-python's range assignor).
    assert kp.partitions_for_topic(topic) == set(range(PARTITIONS))
    kp.subscribe([topic])
    modern = None

    def kp_owned() -> set[int]:
        return {tp.partition for tp in kp.assignment()}

    def poll_all(predicate, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # Not a short poll: a kafka-python bug (group_worker.py) leaves the member
            # REBALANCING for good, every commit failing; 50 ms polls hit it under load.
            for tp, records in kp.poll(timeout_ms=KAFKA_PYTHON_POLL_MS).items():
                for r in records:
                    try:
                        kp.commit({tp: OffsetAndMetadata(r.offset + 1, "", -1)})
                    except KafkaError:
                        kp.seek(tp, r.offset)  # not committed: consumed again
                        break
                    roll.committed.append((tp.partition, r.offset))
            if modern is not None:
                roll.poll([modern], lambda: True)
            if predicate():
                return True
        return False

    try:
        roll.produce()
        assert poll_all(lambda: kp_owned() == set(range(PARTITIONS)) and roll.all_consumed())
        modern = roll.member("consumer")
        roll.produce()
        assert poll_all(lambda: len(kp_owned()) == 2 == len(owned(modern))
                        and roll.all_consumed()
                        and _consumer_group_describe(broker, roll.group)[1:] == (
                            "Stable", (0, 1))), (kp_owned(), owned(modern))
        modern.close()
        modern = None
        roll.produce()
        assert poll_all(lambda: kp_owned() == set(range(PARTITIONS)) and roll.all_consumed()
                        and describe_group(broker, roll.group)[1] == "Stable")
        assert describe_group(broker, roll.group) == (0, "Stable", "consumer", 1)
    finally:
        kp.close()
        if modern is not None:
            modern.close()
    assert sorted(set(roll.committed)) == sorted(roll.committed), "a record committed twice"
    assert len(roll.committed) == roll.sent


def _classic_request(broker, api_key: int, version: int, request_type: str, **fields):
    m = request_module(api_key, version)
    client = broker.raw()
    try:
        return client.request(api_key, version, build(getattr(m, request_type), **fields))
    finally:
        client.close()


def test_classic_member_on_the_wire(broker):
    """What a classic member sees of a consumer group, field by field (JoinGroup v7,
    SyncGroup v5, Heartbeat v4): MEMBER_ID_REQUIRED first, then a join answered at once
    with its member epoch as generation, its first protocol and no leader work; the
    assignment in the consumer protocol; a heartbeat with another generation is
    ILLEGAL_GENERATION, and the member is told to rejoin when a consumer member's
    partitions must move to it."""
    from txbroker.protocol.consumer_protocol import decode_consumer_assignment

    topic = broker.topic("migrate-wire", partitions=2)
    group = topic + "-g"
    modern = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                       "group.protocol": "consumer"})
    try:
        modern.subscribe([topic])
        assert poll_until_owned(modern, {0, 1})
        m = request_module(11, 7)
        sub = struct.pack(f">hih{len(topic)}si", 0, 1, len(topic), topic.encode(), -1)

        def join(member_id: str):
            return _classic_request(
                broker, 11, 7, "JoinGroupRequest", group_id=group, session_timeout=timedelta(seconds=10),
                rebalance_timeout=timedelta(seconds=10), member_id=member_id, group_instance_id=None,
                protocol_type="consumer",
                protocols=(build(m.JoinGroupRequestProtocol, name="range", metadata=sub),))

        first = join("")
        assert int(first.error_code) == 79 and first.member_id  # MEMBER_ID_REQUIRED
        r = join(first.member_id)
        seen = (int(r.error_code), r.protocol_type, r.protocol_name, r.leader == r.member_id,
                r.leader, len(r.members), r.member_id == first.member_id)
        assert seen == (0, "consumer", "range", False, "", 0, True), seen
        generation = int(r.generation_id)

        def sync(gen: int):
            return _classic_request(
                broker, 14, 5, "SyncGroupRequest", group_id=group, generation_id=gen,
                member_id=r.member_id, group_instance_id=None, protocol_type="consumer",
                protocol_name="range", assignments=())

        def heartbeat(gen: int) -> int:
            return int(_classic_request(
                broker, 12, 4, "HeartbeatRequest", group_id=group, generation_id=gen,
                member_id=r.member_id, group_instance_id=None).error_code)

        assert heartbeat(generation + 7) == 22  # ILLEGAL_GENERATION
        # Until the consumer member gives up a partition, the classic member gets nothing
        # (or what is already free) and must rejoin once it is released.
        s = sync(generation)
        assert int(s.error_code) == 0, s
        assert (s.protocol_type, s.protocol_name) == ("consumer", "range")
        got = {p for _t, p in decode_consumer_assignment(s.assignment)}
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            modern.poll(0.1)
            if heartbeat(generation) == 27:  # REBALANCE_IN_PROGRESS: rejoin
                r2 = join(r.member_id)
                generation = int(r2.generation_id)
                s = sync(generation)
                got = {p for _t, p in decode_consumer_assignment(s.assignment)}
        assert len(got) == 1 and not got & owned(modern), (got, owned(modern))
    finally:
        modern.close()


def poll_until_owned(c, partitions: set[int], timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        c.poll(0.05)
        if owned(c) == partitions:
            return True
    return False
