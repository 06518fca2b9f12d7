"""A failed fsync (issue 42, item 2) with a real client: an idempotent acks=all
confluent-kafka producer against the in-process broker, whose flusher's fsyncs of one
partition fail (the ``fsync`` fault, docs/fault-injection.md).

What must hold: produces whose fsync failed are answered with KAFKA_STORAGE_ERROR,
never success; the partition is offline (the other is not) until a restart; after
it, every acknowledged record is there exactly once, in order, for read_committed and
read_uncommitted readers, and nothing that was not acknowledged is; the condition
costs the broker a handful of log lines, not one per attempt (the old flusher retried
at once, forever: ~28,000 ERROR lines a second)."""

from __future__ import annotations

import logging
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from txbroker.protocol.errors import ErrorCode

TOPIC = "fsync-orders"


def _produce(bootstrap: str, values: list[tuple[int, bytes]], timeout_ms: int
             ) -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes, str]]]:
    """Produce (partition, value) pairs; (acknowledged, failed with the error)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 0, "retry.backoff.ms": 100,
                         "message.timeout.ms": timeout_ms,
                         "metadata.recovery.strategy": "none"})
    acked: list[tuple[int, bytes]] = []
    failed: list[tuple[int, bytes, str]] = []

    def report(err, msg):
        if err is None:
            acked.append((msg.partition(), msg.value()))
        else:
            failed.append((msg.partition(), msg.value(), err.name()))

    for partition, value in values:
        producer.produce(TOPIC, value=value, partition=partition, on_delivery=report)
        producer.poll(0)
    assert producer.flush(timeout_ms / 1000 + 20) == 0
    return acked, failed


def _read(bootstrap: str, partition: int, isolation: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fsync-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), 10,
                                                   cached=False)
        consumer.assign([TopicPartition(TOPIC, partition, low)])
        out: list[bytes] = []
        deadline = time.monotonic() + 20
        position = low
        while position < high and time.monotonic() < deadline:
            for msg in consumer.consume(100, timeout=1):
                assert msg.error() is None, msg.error()
                out.append(msg.value())
                position = msg.offset() + 1
        assert position >= high, f"read {position} of {high}"
        return out
    finally:
        consumer.close()


def test_a_failed_fsync_is_never_acknowledged_and_loses_nothing_acknowledged(txbroker,
                                                                              caplog):
    txbroker.create_topic(TOPIC, 2)
    answers: list[int] = []  # every Produce partition answer's error code, as sent

    def record_answers(call):
        for topic in call.response.responses:
            for part in topic.partition_responses:
                answers.append(part.error_code)
        return None

    txbroker.faults.add(api="Produce", callable=record_answers)
    before, failed = _produce(txbroker.bootstrap,
                              [(i % 2, b"before-%03d" % i) for i in range(20)], 10000)
    assert not failed and len(before) == 20

    caplog.clear()
    with caplog.at_level(logging.INFO, logger="txbroker"):
        fault = txbroker.faults.fail_fsync(TOPIC, 0)  # every fsync of partition 0 fails
        during, failed = _produce(txbroker.bootstrap,
                                  [(i % 2, b"during-%03d" % i) for i in range(20)], 3000)
        time.sleep(1)  # the old flusher's retry loop would have logged thousands by now
        fault.remove()
    # Partition 0's records failed (KAFKA_STORAGE_ERROR, retried by the client until its
    # message timeout), partition 1's were acknowledged.
    assert sorted(v for _, v, _ in failed) == [b"during-%03d" % i for i in range(0, 20, 2)]
    assert {p for p, _ in during} == {1} and len(during) == 10
    assert ErrorCode.kafka_storage_error.value in answers
    assert txbroker.call(lambda b: b.logs.get_log(TOPIC, 0).offline is not None)
    assert txbroker.call(lambda b: b.logs.get_log(TOPIC, 1).offline is None)
    storage_lines = [r for r in caplog.records if r.name.startswith("txbroker.storage")
                     and r.levelno >= logging.WARNING]
    assert 1 <= len(storage_lines) < 10, [r.getMessage() for r in storage_lines]
    assert not any(r.exc_info for r in caplog.records if r.name.startswith("txbroker"))
    assert "KAFKA_STORAGE_ERROR" in storage_lines[0].getMessage()

    # DeleteRecords is refused there too (it would checkpoint a log start offset of a
    # log the broker no longer trusts), and allowed on the healthy partition.
    admin = AdminClient({"bootstrap.servers": txbroker.bootstrap})
    futures = admin.delete_records([TopicPartition(TOPIC, 0, 1), TopicPartition(TOPIC, 1, 1)])
    deleted = {tp.partition: f for tp, f in futures.items()}
    assert deleted[1].result(20).low_watermark == 1
    with pytest.raises(KafkaException) as refused:
        deleted[0].result(20)
    assert refused.value.args[0].name() == "KAFKA_STORAGE_ERROR"

    txbroker.restart()  # what an operator does (docs/operations.md)
    after, failed = _produce(txbroker.bootstrap,
                             [(i % 2, b"after-%03d" % i) for i in range(20)], 10000)
    assert not failed and len(after) == 20
    acked = before + during + after
    for partition in (0, 1):
        # (partition 1's first record was deleted above)
        want = [v for p, v in acked if p == partition][1 if partition == 1 else 0:]
        for isolation in ("read_committed", "read_uncommitted"):
            got = _read(txbroker.bootstrap, partition, isolation)
            # Every acknowledged record, once, in order; nothing else (the failed ones
            # were cut from the files when the partition went offline).
            assert got == want, (partition, isolation)
