"""A consume-transform-produce worker (exactly-once) for the transaction tests, run as
a process so a test can SIGKILL it mid-transaction:

    python -m tests.integration.txn_worker CLIENT BOOTSTRAP INPUT OUTPUT GROUP TXN_ID
        [--batch N] [--pause-after K] [--group-protocol consumer]

It subscribes to INPUT in GROUP (read_committed), and for every batch of up to N
records runs one transaction: for each input record it produces ``out:<value>``
(same key) to the same partition of OUTPUT, sends the consumer's positions with
send_offsets_to_transaction (AddOffsetsToTxn + TxnOffsetCommit) and commits.
With ``--group-protocol consumer`` (confluent-kafka only) the consumer speaks KIP-848's
protocol (its offsets carry the member epoch). With ``--pause-after K`` the (K+1)-th transaction stops after its records are
acknowledged and its offsets sent, prints ``PAUSED {json positions}`` and sleeps:
a test then inspects the open transaction and kills the process. When the
worker owns every input partition and has reached their ends it prints ``DONE``
and exits. Lines printed: ``READY``, ``COMMITTED <n> <records>``, ``PAUSED``,
``DONE``, ``ABORTED <reason>``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

# kafka-python 3.0.12 may drop a rejoin's result when JoinGroup + SyncGroup outlast
# poll()'s timeout (see group_worker.py): poll long enough.
KAFKA_PYTHON_POLL_MS = 1000


def say(*parts) -> None:
    print(*parts, flush=True)


def run_confluent(a) -> int:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    conf = {
        "bootstrap.servers": a.bootstrap, "group.id": a.group,
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
        "reconnect.backoff.max.ms": 500}
    if a.group_protocol == "consumer":
        # KIP-848: the session timeout and heartbeat interval are the broker's.
        conf["group.protocol"] = "consumer"
    else:
        conf.update({"session.timeout.ms": 2000, "heartbeat.interval.ms": 300})
    consumer = Consumer(conf)
    producer = Producer({
        "bootstrap.servers": a.bootstrap, "transactional.id": a.tid,
        "transaction.timeout.ms": 30000, "linger.ms": 5, "reconnect.backoff.max.ms": 500})
    producer.init_transactions(30)
    consumer.subscribe([a.input])
    meta = consumer.list_topics(a.input, timeout=10)
    partitions = sorted(meta.topics[a.input].partitions)
    say("READY")
    done = 0
    deadline = time.monotonic() + a.run_timeout
    while time.monotonic() < deadline:
        msgs = [m for m in consumer.consume(num_messages=a.batch, timeout=0.3)
                if m.error() is None]
        if not msgs:
            assigned = sorted(tp.partition for tp in consumer.assignment())
            if assigned == partitions:
                positions = consumer.position([TopicPartition(a.input, p) for p in partitions])
                highs = [consumer.get_watermark_offsets(TopicPartition(a.input, p),
                                                        cached=False)[1] for p in partitions]
                if all(tp.offset >= hw for tp, hw in zip(positions, highs, strict=True)):
                    say("DONE")
                    return 0
            continue
        producer.begin_transaction()
        try:
            for m in msgs:
                producer.produce(a.output, key=m.key(), value=b"out:" + m.value(),
                                 partition=m.partition())
            positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(),
                                                 30)
            if done == a.pause_after:
                assert producer.flush(20) == 0
                say("PAUSED", json.dumps({tp.partition: tp.offset for tp in positions}))
                time.sleep(600)
            producer.commit_transaction(30)
        except KafkaException as e:
            err = e.args[0]
            if not err.txn_requires_abort():
                raise
            say("ABORTED", err)
            producer.abort_transaction(30)
            # Go back to the committed offsets and process those records again.
            committed = consumer.committed(consumer.assignment(), timeout=10)
            for tp in committed:
                consumer.seek(TopicPartition(a.input, tp.partition,
                                             tp.offset if tp.offset >= 0 else 0))
            continue
        done += 1
        say("COMMITTED", done, len(msgs))
    return 2


def run_kafka_python(a) -> int:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    consumer = KafkaConsumer(
        bootstrap_servers=a.bootstrap, group_id=a.group, isolation_level="read_committed",
        enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=2000,
        heartbeat_interval_ms=300, fetch_max_wait_ms=100, max_poll_records=a.batch,
        reconnect_backoff_max_ms=500)
    producer = KafkaProducer(bootstrap_servers=a.bootstrap, transactional_id=a.tid,
                             transaction_timeout_ms=30000, reconnect_backoff_max_ms=500)
    producer.init_transactions()
    consumer.subscribe([a.input])
    partitions = sorted(consumer.partitions_for_topic(a.input) or ())
    say("READY")
    done = 0
    deadline = time.monotonic() + a.run_timeout
    while time.monotonic() < deadline:
        got = consumer.poll(timeout_ms=KAFKA_PYTHON_POLL_MS, max_records=a.batch)
        msgs = [m for batch in got.values() for m in batch]
        if not msgs:
            assigned = sorted(tp.partition for tp in consumer.assignment())
            if assigned == partitions:
                tps = [TopicPartition(a.input, p) for p in partitions]
                ends = consumer.end_offsets(tps)
                if all(consumer.position(tp) >= ends[tp] for tp in tps):
                    say("DONE")
                    return 0
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.send(a.output, key=m.key, value=b"out:" + m.value, partition=m.partition)
        positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
        producer.send_offsets_to_transaction(
            {tp: OffsetAndMetadata(o, "", -1) for tp, o in positions.items()},
            consumer.group_metadata())
        if done == a.pause_after:
            producer.flush(timeout=20)
            say("PAUSED", json.dumps({tp.partition: o for tp, o in positions.items()}))
            time.sleep(600)
        producer.commit_transaction()
        done += 1
        say("COMMITTED", done, len(msgs))
    return 2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    for name in ("client", "bootstrap", "input", "output", "group", "tid"):
        p.add_argument(name)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--pause-after", type=int, default=-1)
    p.add_argument("--run-timeout", type=float, default=60)
    p.add_argument("--group-protocol", choices=["classic", "consumer"], default="classic")
    a = p.parse_args(argv)
    run = run_confluent if a.client == "confluent" else run_kafka_python
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
