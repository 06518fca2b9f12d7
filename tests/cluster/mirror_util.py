"""Clients for the MirrorMaker 2 tests (test_mirror.py): transactional writes with
aborted transactions among them, reading a topic whole, committed group offsets."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def write_transactions(bootstrap: str, topic: str, partitions: int, batches: int,
                       per_batch: int, abort_every: int, tag: str) -> tuple[set, set]:
    """``batches`` committed transactions of ``per_batch`` records spread over the
    partitions, and after every ``abort_every``-th one an aborted transaction: returns
    (committed values, aborted values). Values are ``tag:n`` (committed) and
    ``tag:aborted:n``; keys the same (compacted topics need keys)."""
    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": f"mirror-{tag}-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(30)
    committed: set[str] = set()
    aborted: set[str] = set()
    n = 0
    for batch in range(batches):
        rounds = [(committed, True)]
        if abort_every and batch % abort_every == 0:
            rounds.append((aborted, False))
        for into, commit in rounds:
            producer.begin_transaction()
            for _ in range(per_batch):
                value = f"{tag}:{n}" if commit else f"{tag}:aborted:{n}"
                producer.produce(topic, value.encode(), key=value.encode(),
                                 partition=n % partitions)
                into.add(value)
                n += 1
            if commit:
                producer.commit_transaction(30)
            else:
                producer.flush(30)  # on the log before the abort marker
                producer.abort_transaction(30)
    return committed, aborted


def read_topic(bootstrap: str, topic: str, partitions: int,
               isolation: str = "read_committed") -> list[str]:
    """Every value of the topic (from the beginning to each partition's end), no group."""
    consumer = Consumer({"bootstrap.servers": bootstrap,
                         "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                         for p in range(partitions)])
        return _drain(consumer, partitions)
    finally:
        consumer.close()


def _drain(consumer: Consumer, partitions: int, timeout: float = 60) -> list[str]:
    return [m.value().decode() for m in _messages(consumer, partitions, timeout)]


def _messages(consumer: Consumer, partitions: int, timeout: float) -> list:
    """Poll until every partition reported its end (enable.partition.eof) after the
    last record."""
    import time

    messages = []
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(at_end) < partitions:
        assert time.monotonic() < deadline, f"not at the end of {partitions} partitions"
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
                continue
            raise AssertionError(msg.error())
        at_end.discard(msg.partition())
        messages.append(msg)
    return messages


def consume_as_group(bootstrap: str, group: str, topic: str, partitions: int,
                     per_partition: int | None = None) -> list[str]:
    """A member of ``group`` reads ``topic`` (read_committed) from the group's committed
    offsets, to the end or only the first ``per_partition`` records of each partition,
    commits the position after what it kept and leaves."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "enable.partition.eof": True,
                         "session.timeout.ms": 6000})
    values: list[str] = []
    try:
        consumer.subscribe([topic])
        if per_partition is None:
            values = _drain(consumer, partitions)
            if values:
                consumer.commit(asynchronous=False)
        else:
            kept: dict[int, int] = {}
            positions: list[TopicPartition] = []
            while len(kept) < partitions or min(kept.values()) < per_partition:
                msg = consumer.poll(0.5)
                if msg is None or msg.error():
                    continue
                p = msg.partition()
                if kept.get(p, 0) < per_partition:
                    kept[p] = kept.get(p, 0) + 1
                    values.append(msg.value().decode())
                    if kept[p] == per_partition:
                        positions.append(TopicPartition(topic, p, msg.offset() + 1))
            consumer.commit(offsets=positions, asynchronous=False)
    finally:
        consumer.close()
    return values


def committed_before(bootstrap: str, topic: str, partition: int, offset: int) -> int:
    """How many committed records of the partition lie below ``offset``: where a group
    at ``offset`` on txbroker stands on a copy that MM2 started from the beginning (the
    target holds exactly the committed records, in order, from offset 0)."""
    consumer = Consumer({"bootstrap.servers": bootstrap,
                         "group.id": f"count-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        return sum(1 for m in _messages(consumer, 1, 60) if m.offset() < offset)
    finally:
        consumer.close()


def commit_offsets(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit ``offsets`` for a group with no member (the seek of the hand-over)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets (partition -> offset; absent when none)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(partitions)])
    client = admin(bootstrap)  # kept alive until the future's result
    result = client.list_consumer_group_offsets([request])[group].result(30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets",
                         "isolation.level": "read_committed"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 30)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def waited(condition: Callable[[], bool], timeout: float, why: Callable[[], str],
           alive: Callable[[], None]) -> None:
    """Until ``condition`` holds; ``alive`` raises if MM2 died (its log in the message)."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        alive()
        assert time.monotonic() < deadline, why()
        time.sleep(0.5)
