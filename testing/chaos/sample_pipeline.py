"""A sample exactly-once consume-transform-produce pipeline for ``txbroker chaos``
(confluent-kafka), and its deliberately broken variants:

    txbroker chaos --input orders --output payments --instances 2 --duration 60 -- \\
        python -m txbroker.testing.chaos.sample_pipeline

It reads ``TXBROKER_BOOTSTRAP``, ``TXBROKER_INSTANCE``, ``TXBROKER_INPUT``,
``TXBROKER_OUTPUT`` and ``TXBROKER_GROUP`` (set by the chaos run). Each input record
goes to the same partition of the output with the same key, its offsets committed in
the same transaction. Crash-only: on any error it exits and the supervisor restarts it,
and it starts over from the group's committed offsets. What a crash test needs:
static membership and a short session timeout (a SIGKILLed member is replaced at
once, not after 45 s), a transactional id stable across restarts (the instance
number), read_committed input, and ``metadata.recovery.strategy=none`` (reconnect to
the restarted broker instead of re-bootstrapping).

Broken variants, each caught by the checker: ``--offsets-outside-transaction``
(lost-write or duplicate), ``--read-uncommitted`` (G1a: aborted input processed),
``--no-idempotence`` (no transactions, ``enable.idempotence=false`` with retries, offsets
committed after delivery: a retried Produce whose answer was lost is appended twice, and
a killed instance's delivered but uncommitted records are produced again: duplicate),
``--unfenced`` (a processor that produces before anything fenced the instance it
replaces: its transactional.id changes on every start, so InitProducerId fences no one,
and it assigns its share of the input itself, ``TXBROKER_INSTANCES``, so no group
generation fences its offsets either, as KIP-447 would; a paused instance resumed beside
its replacement, a zombie, processes the same records again: duplicate).
"""

from __future__ import annotations

import argparse
import os
import sys

BATCH = 100


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--offsets-outside-transaction", action="store_true")
    parser.add_argument("--read-uncommitted", action="store_true")
    parser.add_argument("--no-idempotence", action="store_true")
    parser.add_argument("--unfenced", action="store_true")
    args = parser.parse_args(argv)
    from confluent_kafka import Consumer, Producer, TopicPartition

    env = os.environ
    bootstrap, instance = env["TXBROKER_BOOTSTRAP"], env.get("TXBROKER_INSTANCE", "0")
    source, sink = env.get("TXBROKER_INPUT", "orders"), env.get("TXBROKER_OUTPUT", "payments")
    group = env.get("TXBROKER_GROUP", "chaos-pipeline")
    common = {"bootstrap.servers": bootstrap, "metadata.recovery.strategy": "none"}
    consumer = Consumer({**common, "group.id": group, "group.instance.id": f"{group}-{instance}",
                         "session.timeout.ms": 6000, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest",
                         "isolation.level": "read_uncommitted" if args.read_uncommitted
                         else "read_committed"})
    transactional_id = f"{group}-{instance}"
    if args.unfenced:
        count = int(env.get("TXBROKER_INSTANCES", "1"))
        partitions = consumer.list_topics(source, timeout=30).topics[source].partitions
        consumer.assign([TopicPartition(source, p) for p in partitions
                         if p % count == int(instance)])
        transactional_id += f"-{os.getpid()}"
    else:
        consumer.subscribe([source])
    if args.no_idempotence:
        # A short client timeout, so that a lost answer is retried within a short run:
        # librdkafka's is socket.timeout.ms (request.timeout.ms is only the acks timeout
        # it asks of the broker)
        return _at_least_once(consumer, Producer({**common, "enable.idempotence": False,
                                                  "acks": "all", "retries": 10,
                                                  "socket.timeout.ms": 3000}), sink)
    producer = Producer({**common, "transactional.id": transactional_id,
                         "transaction.timeout.ms": 10000})
    producer.init_transactions(30)
    while True:
        msgs = [m for m in consumer.consume(BATCH, timeout=0.5) if m.error() is None]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, key=m.key(), value=m.value(), partition=m.partition())
        positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
        if args.offsets_outside_transaction:
            consumer.commit(offsets=positions, asynchronous=False)
        else:
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(),
                                                 30)
        producer.commit_transaction(30)


def _at_least_once(consumer, producer, sink: str) -> int:
    """The broken variant without transactions or idempotence: produce, wait for the
    deliveries, then commit the consumer's offsets."""
    while True:
        msgs = [m for m in consumer.consume(BATCH, timeout=0.5) if m.error() is None]
        if not msgs:
            continue
        for m in msgs:
            producer.produce(sink, key=m.key(), value=m.value(), partition=m.partition())
        if producer.flush(30):
            return 1  # undelivered: exit, the supervisor restarts us
        consumer.commit(asynchronous=False)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)
