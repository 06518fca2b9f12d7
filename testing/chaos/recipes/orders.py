"""A generator of your own for ``txbroker chaos --generator``, and the mapping that goes
with it (``--mapping python:txbroker.testing.chaos.recipes.orders:order_id``)::

    txbroker chaos --input orders --output payments --duration 60 \\
        --generator "python -m txbroker.testing.chaos.recipes.orders" \\
        --mapping python:txbroker.testing.chaos.recipes.orders:order_id \\
        -- python -m txbroker.testing.chaos.sample_pipeline

It writes TXBROKER_RECORDS orders (JSON: ``{"order": id, "customer": ..., "amount":
...}``, keyed by customer, so keys repeat and cannot name an input) over
TXBROKER_SECONDS, in transactions of ten, every fifth one aborted (a read_committed
pipeline never sees those). Its order ids carry a random run id, so a generator
restarted after a broker crash never repeats one. confluent-kafka.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid

BATCH = 10


def order_id(record) -> str | None:
    """The mapping: an order's id, in the input and (the pipeline copies the value) in
    the output."""
    try:
        return json.loads(record.value)["order"]
    except (TypeError, ValueError, KeyError):
        return None


def main() -> int:
    from confluent_kafka import KafkaException, Producer

    env = os.environ
    topic = env.get("TXBROKER_INPUT", "orders")
    count, seconds = int(env.get("TXBROKER_RECORDS", "1000")), float(
        env.get("TXBROKER_SECONDS", "30"))
    run = uuid.uuid4().hex[:8]  # a restarted generator writes new ids
    producer = Producer({"bootstrap.servers": env["TXBROKER_BOOTSTRAP"],
                         "transactional.id": "orders-generator",
                         "transaction.timeout.ms": 10000,
                         # The run's request faults reach the generator too: a dropped
                         # answer is given up on after 5 s, not librdkafka's 60.
                         "socket.timeout.ms": 5000,
                         "metadata.recovery.strategy": "none"})
    producer.init_transactions(30)
    partitions = len(producer.list_topics(topic, timeout=30).topics[topic].partitions)
    started, done, attempt = time.monotonic(), 0, 0
    while done < count:
        time.sleep(max(started + seconds * done / count - time.monotonic(), 0))
        attempt += 1
        void = attempt % 5 == 0  # aborted: ids of their own, which no output may have
        ids = range(done, min(done + BATCH, count))
        try:
            producer.begin_transaction()
            for n in ids:
                order = f"order-{run}-void{attempt}-{n}" if void else f"order-{run}-{n}"
                producer.produce(topic, key=f"customer-{n % 7}", partition=n % partitions,
                                 value=json.dumps({"order": order, "customer": f"customer-{n % 7}",
                                                   "amount": n % 100}))
            if void:
                producer.flush(30)  # in the log, then aborted (abort purges what is unsent)
                producer.abort_transaction(30)
                continue
            producer.commit_transaction(30)
            done += len(ids)
        except KafkaException as e:
            if not e.args[0].txn_requires_abort():
                raise  # fatal: exit, the chaos run starts us again
            producer.abort_transaction(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
