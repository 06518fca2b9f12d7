"""Consumer groups (join, sync, rebalance, offset commits) and the KIP-664 admin views
(ListTransactions, DescribeTransactions, DescribeProducers) on txbroker and Kafka."""

from __future__ import annotations

import time

import pytest

from tests.integration.clients import Msg, produce
from tests.integration.txn_util import TxnProducer, unique


def confluent_consumer(broker, group: str):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                     "fetch.wait.max.ms": 100, "partition.assignment.strategy": "range"})


def assigned(consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def read_all(consumer, end: int = 3) -> bool:
    """Whether the consumer's position is ``end`` in every partition it is assigned."""
    return all(tp.offset == end for tp in consumer.position(consumer.assignment()))


@pytest.mark.kafka_ci
def test_group_rebalance_and_offset_commits(broker):
    """Two consumers share four partitions two and two; each reads and commits its
    records; when one leaves, the other is given all four and resumes from the
    committed offsets (it reads nothing twice after the commit)."""
    from confluent_kafka import TopicPartition

    topic = broker.topic("group", partitions=4)
    produce("confluent", broker.bootstrap, topic,
            [Msg(None, f"{p}-{i}".encode(), partition=p) for p in range(4) for i in range(3)])
    group = unique("group")
    a, b = confluent_consumer(broker, group), confluent_consumer(broker, group)
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        seen: list[bytes] = []
        deadline = time.monotonic() + 60
        # Until the group settled and each consumer has read to the end of what it was
        # given (a may have read all twelve before b joined: b's commit would then have
        # no position to commit).
        while len(seen) < 12 or (assigned(a), assigned(b)) not in (
                ({0, 1}, {2, 3}), ({2, 3}, {0, 1})) or not (read_all(a) and read_all(b)):
            assert time.monotonic() < deadline, (assigned(a), assigned(b), len(seen))
            for c in (a, b):
                for m in c.consume(num_messages=100, timeout=0.2):
                    assert m.error() is None, m.error()
                    seen.append(m.value())
        # Before the group settles a partition may move to the other consumer before
        # anything was committed and be read again (at-least-once, on both brokers).
        assert set(seen) == {f"{p}-{i}".encode() for p in range(4) for i in range(3)}
        for c in (a, b):
            c.commit(asynchronous=False)
        committed = a.committed([TopicPartition(topic, p) for p in range(4)], timeout=10)
        assert {(tp.partition, tp.offset) for tp in committed} == {(p, 3) for p in range(4)}
        b.close()
        b = None
        deadline = time.monotonic() + 60
        while assigned(a) != {0, 1, 2, 3}:
            assert time.monotonic() < deadline, assigned(a)
            again = a.consume(num_messages=100, timeout=0.2)
            assert not again, f"read past its committed offsets: {again[0].value()}"
    finally:
        a.close()
        if b is not None:
            b.close()


@pytest.mark.kafka_ci
def test_kip664_views_of_an_open_transaction(broker):
    """An open transaction over one partition as kafka-python's admin client sees it:
    listed Ongoing, described with its partition and producer, and the partition's
    producer state has the transaction's first offset."""
    from kafka import KafkaAdminClient, TopicPartition

    topic = broker.topic("kip664")
    produce("confluent", broker.bootstrap, topic, [Msg(None, b"plain", partition=0)])
    tid = unique("tid-kip664")
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        with TxnProducer("confluent", broker.bootstrap, tid, timeout_ms=60000) as prod:
            prod.init()
            prod.begin()
            prod.send(topic, b"open", partition=0)
            prod.flush()

            listings = [t for per_broker in admin.list_transactions().values()
                        for t in per_broker if t.transactional_id == tid]
            assert len(listings) == 1
            assert str(listings[0].state.value) == "Ongoing"
            pid = listings[0].producer_id

            d = admin.describe_transactions([tid])[tid]
            assert str(d.state.value) == "Ongoing"
            assert d.producer_id == pid
            assert d.transaction_timeout_ms == 60000
            assert d.transaction_start_time_ms > 0
            assert d.topic_partitions == {TopicPartition(topic, 0)}

            tp = TopicPartition(topic, 0)
            [state] = admin.describe_producers([tp])[tp].active_producers
            assert state.producer_id == pid
            assert state.current_transaction_start_offset == 1
            assert state.last_sequence == 0

            ongoing = admin.list_transactions(state_filters=["Ongoing"],
                                              producer_id_filters=[pid])
            assert [t.transactional_id for ts in ongoing.values() for t in ts] == [tid]
            prod.commit()
        deadline = time.monotonic() + 15
        while str(admin.describe_transactions([tid])[tid].state.value) != "CompleteCommit":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        d = admin.describe_transactions([tid])[tid]
        assert d.topic_partitions == set()
    finally:
        admin.close()
