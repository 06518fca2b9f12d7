"""``python -m txbroker.testing.demo``: start a broker, produce and consume with real clients,
say what it proved. (``make demo`` runs the transactional pipeline + Spark demo,
``spark_jobs/demo.py``; this one is the quick broker-only check.)

Runs the broker as a real process on a free port with a temporary data
directory and embedded defaults, then:
  1. creates a 3-partition topic with confluent-kafka's AdminClient,
  2. produces records with confluent-kafka (idempotent, acks=all),
  3. consumes them back with kafka-python and checks every record arrived once,
     in order per partition,
  4. stops the broker with SIGTERM, restarts it on the same data directory and
     reads the records again (they were fsynced before being acknowledged).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from .broker_process import BrokerProcess

TOPIC = "demo-orders"
PARTITIONS = 3
RECORDS = 20_000


def _consume_all(bootstrap: str, expected: int) -> dict[int, list[bytes]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000)
    consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    count = 0
    deadline = time.monotonic() + 60
    while count < expected and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=1000).items():
            for r in records:
                got[tp.partition].append(r.value)
                count += 1
    consumer.close()
    return got


def main() -> int:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    with tempfile.TemporaryDirectory(prefix="txbroker-demo-") as data_dir:
        broker = BrokerProcess(os.path.join(data_dir, "data"))
        bootstrap = broker.start().bootstrap
        print(f"broker ready at {bootstrap} (data dir {broker.data_dir})")
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(10)
            print(f"created topic {TOPIC} with {PARTITIONS} partitions")

            producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                 "acks": "all", "linger.ms": 5})
            acked = 0
            errors: list[str] = []

            def on_delivery(err, _msg) -> None:
                nonlocal acked
                if err is None:
                    acked += 1
                else:
                    errors.append(str(err))

            start = time.monotonic()
            for i in range(RECORDS):
                key = f"customer-{i % 97}".encode()
                producer.produce(TOPIC, key=key, value=f"order-{i:06d}".encode(),
                                 on_delivery=on_delivery)
                if i % 1000 == 0:
                    producer.poll(0)
            producer.flush(60)
            elapsed = time.monotonic() - start
            print(f"produced {acked}/{RECORDS} records with confluent-kafka (idempotent, acks=all) "
                  f"in {elapsed:.2f}s; delivery errors: {len(errors)}")

            got = _consume_all(bootstrap, RECORDS)
            total = sum(len(v) for v in got.values())
            all_values = [v for vals in got.values() for v in vals]
            ordered = all(vals == sorted(vals) for vals in got.values())
            print(f"consumed {total} records with kafka-python from {PARTITIONS} partitions "
                  f"({', '.join(str(len(got[p])) for p in range(PARTITIONS))})")
            del producer, admin  # close client connections before the broker goes away
            rc = broker.terminate()
            print(f"broker stopped with SIGTERM, exit code {rc}")

            bootstrap = broker.start().bootstrap
            again = _consume_all(bootstrap, RECORDS)
            total_again = sum(len(v) for v in again.values())
            print(f"restarted broker: {total_again} records still there")
        finally:
            if broker.running:
                broker.terminate()

        checks = {
            "every record acknowledged": acked == RECORDS and not errors,
            "every record consumed exactly once": total == RECORDS
            and len(set(all_values)) == RECORDS,
            "per-partition order kept": ordered,
            "clean shutdown (exit 0)": rc == 0,
            "data survives restart": total_again == RECORDS,
        }
        print()
        for name, ok in checks.items():
            print(f"  [{'ok' if ok else 'FAILED'}] {name}")
        passed = all(checks.values())
        print("\ndemo " + ("passed" if passed else "FAILED"))
        return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
