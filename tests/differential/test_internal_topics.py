"""The internal topics (``__consumer_offsets``, ``__transaction_state``) are topics, on
txbroker as on Kafka 4.4: Metadata flags them internal with the configured partition
count, and a ``group.protocol=consumer`` (KIP-848) member that subscribes to one, by name
or by a regex the coordinator resolves, is assigned every partition and fetches its
records (issue 38: txbroker assigned such a member nothing)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from txbroker.protocol.messages import build, request_module

from tests.differential.conftest import COMMON_CONFIG
from tests.integration.consumer_util import poll_until

METADATA = 3
OFFSETS = "__consumer_offsets"
TXN_STATE = "__transaction_state"
PARTITIONS = int(COMMON_CONFIG["offsets.topic.num.partitions"])
TXN_PARTITIONS = int(COMMON_CONFIG["transaction.state.log.num.partitions"])


def _metadata(broker, topics: tuple[str, ...]) -> dict[str, tuple[int, bool, int]]:
    """Metadata v12 of ``topics``: name -> (error, is_internal, partition count)."""
    m = request_module(METADATA, 12)
    client = broker.raw()
    try:
        r = client.request(METADATA, 12, build(
            m.MetadataRequest, topics=tuple(build(m.MetadataRequestTopic, name=t, topic_id=None)
                                            for t in topics),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    finally:
        client.close()
    return {t.name: (int(t.error_code), t.is_internal, len(t.partitions)) for t in r.topics}


def _commit_offset(broker, group: str, topic: str, offset: int) -> None:
    """A standalone OffsetCommit (no group membership): it creates __consumer_offsets and
    writes one offset-commit record for ``group`` there."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def _names_commit(key: bytes | None, group: str, topic: str) -> bool:
    """Whether a record key of __consumer_offsets is that of ``group``'s offset of
    ``topic``. Only the names are compared: txbroker writes its records as msgpack, not
    in Kafka's schema (docs/compatibility.md), but both keys hold the names as UTF-8."""
    return key is not None and group.encode() in key and topic.encode() in key


def _member(broker, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                     "group.protocol": "consumer", "auto.offset.reset": "earliest",
                     "enable.auto.commit": False})


@pytest.mark.kafka_ci
def test_member_subscribed_to_consumer_offsets_by_name(broker):
    """A consumer-protocol member subscribed to ``__consumer_offsets`` gets all of its
    partitions and reads the offset-commit record another group just wrote there."""
    topic = broker.topic("it-src")
    committer = topic + "-committer"
    _commit_offset(broker, committer, topic, 7)
    assert _metadata(broker, (OFFSETS,))[OFFSETS] == (0, True, PARTITIONS)
    reader = _member(broker, topic + "-reader")
    records = []

    def seen() -> bool:
        return ({(tp.topic, tp.partition) for tp in reader.assignment()}
                == {(OFFSETS, p) for p in range(PARTITIONS)}
                and any(_names_commit(r.key(), committer, topic) for r in records))

    try:
        reader.subscribe([OFFSETS])
        assert poll_until([reader], seen, sink=records), (
            reader.assignment(), [r.key() for r in records])
    finally:
        reader.close()


def test_regex_matches_internal_topics(broker):
    """A server-side regex (KIP-848) resolves against the internal topics too: the
    member is assigned every partition of both."""
    topic = broker.topic("it-regex")
    group = topic + "-g"
    _commit_offset(broker, group + "-committer", topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": group + "-txn"})
    producer.init_transactions(30)  # creates __transaction_state
    assert _metadata(broker, (OFFSETS, TXN_STATE)) == {
        OFFSETS: (0, True, PARTITIONS), TXN_STATE: (0, True, TXN_PARTITIONS)}
    member = _member(broker, group)
    want = ({(OFFSETS, p) for p in range(PARTITIONS)}
            | {(TXN_STATE, p) for p in range(TXN_PARTITIONS)})
    try:
        member.subscribe(["^__(consumer_offsets|transaction_state)$"])
        assert poll_until(
            [member], lambda: {(tp.topic, tp.partition) for tp in member.assignment()} == want
        ), member.assignment()
    finally:
        member.close()
