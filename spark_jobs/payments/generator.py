"""Produce the deterministic payment orders into the ``orders`` topic.

    python -m spark_jobs.payments.generator --bootstrap HOST:PORT [--orders N] [--seed S]

An idempotent producer (``enable.idempotence``, ``acks=all``): retries after a lost
response never duplicate an order, so the topic holds each order exactly once. The
key is the account, so one account's orders stay in order on one partition.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping

from .orders import Order, generate_orders

ORDERS_TOPIC = "orders"


def produce_orders(bootstrap: str, orders: list[Order], topic: str = ORDERS_TOPIC,
                   timeout: float = 60, client: Mapping[str, str] | None = None) -> int:
    """Produce ``orders``; returns how many were acknowledged (raises on any failure).
    ``client``: extra producer properties (security settings)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, **(client or {})})
    errors: list[str] = []
    acked = 0

    def on_delivery(err, _msg) -> None:
        nonlocal acked
        if err is None:
            acked += 1
        else:
            errors.append(str(err))

    for i, order in enumerate(orders):
        producer.produce(topic, key=order.account.encode(), value=order.to_json(),
                         on_delivery=on_delivery)
        if i % 500 == 0:
            producer.poll(0)
    remaining = producer.flush(timeout)
    if remaining or errors or acked != len(orders):
        raise RuntimeError(f"orders not all delivered: {acked}/{len(orders)} acknowledged, "
                           f"{remaining} in flight, errors: {errors[:3]}")
    return acked


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", default=ORDERS_TOPIC)
    p.add_argument("--orders", type=int, default=2000)
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args(argv)
    n = produce_orders(a.bootstrap, generate_orders(a.orders, a.seed), a.topic)
    print(f"produced {n} orders to {a.topic}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
