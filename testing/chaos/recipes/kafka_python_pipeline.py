"""An exactly-once consume-transform-produce pipeline with kafka-python (3.0), for
``txbroker chaos``::

    txbroker chaos --input orders --output payments --instances 2 --duration 60 -- \\
        python -m txbroker.testing.chaos.recipes.kafka_python_pipeline

Each input record goes to the same partition of the output with the same key, its
offsets committed in the same transaction (``send_offsets_to_transaction`` with the
consumer's ``group_metadata()``: KIP-447 fencing of a stale member). Crash-only: any
error ends the process, the supervisor restarts it from the group's committed offsets,
and so does a hang: kafka-python's transactional calls (``commit_transaction``,
``send_offsets_to_transaction``) wait without a timeout, so a watchdog ends a loop
turn that takes more than WATCHDOG seconds, with every thread's stack in the log.
The settings a crash test needs are commented where they are set.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import sys

BATCH = 100
WATCHDOG = 30  # seconds: a loop turn takes 0.5 s idle, a transaction well under 10 s


def main() -> int:
    from kafka import KafkaConsumer, KafkaProducer

    logging.basicConfig(level=logging.WARNING)  # the client's warnings into the log
    env = os.environ
    bootstrap, instance = env["TXBROKER_BOOTSTRAP"], env.get("TXBROKER_INSTANCE", "0")
    source, sink = env.get("TXBROKER_INPUT", "orders"), env.get("TXBROKER_OUTPUT", "payments")
    group = env.get("TXBROKER_GROUP", "chaos-pipeline")
    # kafka-python backs off up to 30 s between reconnects by default: a restarted
    # broker would wait that long for it.
    common = {"bootstrap_servers": bootstrap, "reconnect_backoff_max_ms": 1000}
    consumer = KafkaConsumer(
        source, **common, group_id=group,
        # Static membership and a short session: a SIGKILLed member is replaced at once
        # by its restart, not after the 45 s default session timeout.
        group_instance_id=f"{group}-{instance}", session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        isolation_level="read_committed", enable_auto_commit=False,
        auto_offset_reset="earliest")
    producer = KafkaProducer(
        **common,
        # Stable across restarts: the restarted instance fences its previous incarnation
        # and aborts the transaction it left open.
        transactional_id=f"{group}-{instance}", transaction_timeout_ms=10000,
        # A lost answer (a broker crash, a dropped response) is retried after this.
        request_timeout_ms=5000)
    producer.init_transactions()
    while True:
        # Re-armed each turn: a turn that hangs dumps the stacks and exits (code 1).
        faulthandler.dump_traceback_later(WATCHDOG, exit=True)
        batches = consumer.poll(timeout_ms=500, max_records=BATCH)
        if not batches:
            continue
        producer.begin_transaction()
        for tp, records in batches.items():
            for r in records:
                producer.send(sink, key=r.key, value=r.value, partition=tp.partition)
        positions = {tp: _offset(consumer.position(tp)) for tp in consumer.assignment()}
        producer.send_offsets_to_transaction(positions, consumer.group_metadata())
        producer.commit_transaction()


def _offset(position: int):
    from kafka.structs import OffsetAndMetadata

    return OffsetAndMetadata(position, "", -1)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(0)
