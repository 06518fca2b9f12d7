"""The checker against a real consume-transform-produce pipeline (confluent-kafka,
transactions, an aborted attempt) on the fixture broker: clean when the pipeline and
its reader are right, the expected anomaly when they are not."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from txbroker.testing.chaos.checker import InputRecord, Read, check
from txbroker.testing.chaos.history import read_log

INPUTS = 12  # per input partition
BATCH = 5


def _feed(txbroker) -> list[InputRecord]:
    txbroker.create_topic("in", 2)
    txbroker.create_topic("out", 2)
    producer = Producer({"bootstrap.servers": txbroker.bootstrap, "enable.idempotence": True})
    for p in (0, 1):
        for k in range(INPUTS):
            producer.produce("in", key=f"in-{p}-{k}", value=b"x", partition=p)
    assert producer.flush(30) == 0
    return [InputRecord(f"in-{p}-{k}", "in", p, k) for p in (0, 1) for k in range(INPUTS)]


def _pipeline(txbroker, *, offsets_in_transaction: bool) -> dict[str, float]:
    """Copy "in" to "out" (same partition, key = the input's id) in transactions of up
    to BATCH records. The second transaction is aborted (a crash before its commit) and
    its records processed again. Broken variant: offsets committed by the consumer,
    outside the transaction, before it commits. Returns when each id's commit began."""
    consumer = Consumer({"bootstrap.servers": txbroker.bootstrap, "group.id": "pipe",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition("in", p, 0) for p in (0, 1)])
    producer = Producer({"bootstrap.servers": txbroker.bootstrap, "transactional.id": "pipe-1"})
    producer.init_transactions(30)
    commit_started: dict[str, float] = {}
    done, attempt = 0, 0
    while done < 2 * INPUTS:
        msgs = [m for m in consumer.consume(BATCH, timeout=1) if m.error() is None]
        if not msgs:
            continue
        attempt += 1
        producer.begin_transaction()
        for m in msgs:
            producer.produce("out", key=m.key(), value=m.value(), partition=m.partition())
        positions = consumer.position(consumer.assignment())
        if offsets_in_transaction:
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(),
                                                 30)
        else:
            consumer.commit(offsets=positions, asynchronous=False)
        if attempt == 2:  # the crash: the transaction aborts, processing restarts from
            # the group's committed offsets. Flushed first, so that the aborted records
            # are in the log for the reader to (not) see.
            assert producer.flush(30) == 0
            producer.abort_transaction(30)
            committed = consumer.committed([TopicPartition("in", p) for p in (0, 1)], 30)
            for tp in committed:
                consumer.seek(TopicPartition("in", tp.partition, max(tp.offset, 0)))
            done = sum(max(tp.offset, 0) for tp in committed)
            continue
        now = time.monotonic()
        for m in msgs:
            commit_started[m.key().decode()] = now
        producer.commit_transaction(30)
        done += len(msgs)
    consumer.close()
    return commit_started


def _read_output(txbroker, isolation: str) -> list[Read]:
    reader = Consumer({"bootstrap.servers": txbroker.bootstrap, "group.id": "checker",
                       "enable.auto.commit": False, "isolation.level": isolation})
    reader.assign([TopicPartition("out", p, 0) for p in (0, 1)])
    ends = {p: txbroker.last_stable_offset("out", p) if isolation == "read_committed"
            else txbroker.high_watermark("out", p) for p in (0, 1)}
    reads = []
    deadline = time.monotonic() + 30
    while any(tp.offset < ends[tp.partition] for tp in reader.position(reader.assignment())):
        assert time.monotonic() < deadline, "the reader never reached the end"
        for m in reader.consume(100, timeout=0.2):
            if m.error() is None:
                reads.append(Read(m.key().decode(), "out", m.partition(), m.offset(),
                                  at=time.monotonic()))
    reader.close()
    return reads


def _group_offsets(txbroker) -> dict[tuple[str, int], int]:
    consumer = Consumer({"bootstrap.servers": txbroker.bootstrap, "group.id": "pipe"})
    committed = consumer.committed([TopicPartition("in", p) for p in (0, 1)], 30)
    consumer.close()
    return {("in", tp.partition): tp.offset for tp in committed}


def _settled(txbroker) -> None:
    """The last COMMIT markers are written after the EndTxn answers."""
    deadline = time.monotonic() + 10
    while any(txbroker.last_stable_offset("out", p) != txbroker.high_watermark("out", p)
              for p in (0, 1)):
        assert time.monotonic() < deadline, "the output never settled"
        time.sleep(0.01)


def test_a_transactional_pipeline_is_clean_and_a_read_uncommitted_reader_is_caught(txbroker):
    inputs = _feed(txbroker)
    commit_started = _pipeline(txbroker, offsets_in_transaction=True)
    _settled(txbroker)
    log = read_log(txbroker.bootstrap, "out")
    offsets = _group_offsets(txbroker)
    report = check(inputs, log, _read_output(txbroker, "read_committed"),
                   group_offsets=offsets, commit_started=commit_started)
    assert report.ok, report.text()
    assert report.stats["aborted"] == BATCH and report.stats["reads"] == 2 * INPUTS

    broken = check(inputs, log, _read_output(txbroker, "read_uncommitted"),
                   group_offsets=offsets, commit_started=commit_started)
    assert broken.counts == {"G1a": BATCH}, broken.text()


def test_offsets_committed_outside_the_transaction_lose_writes(txbroker):
    inputs = _feed(txbroker)
    _pipeline(txbroker, offsets_in_transaction=False)
    _settled(txbroker)
    report = check(inputs, read_log(txbroker.bootstrap, "out"),
                   _read_output(txbroker, "read_committed"),
                   group_offsets=_group_offsets(txbroker))
    # The aborted attempt's offsets were committed anyway: its inputs are never redone.
    assert report.counts == {"lost-write": BATCH}, report.text()
