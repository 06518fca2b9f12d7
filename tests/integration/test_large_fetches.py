"""Fetch responses of megabytes through a real broker process (uvloop): the records go
to the socket as their own buffers (``transport.writelines``, protocol/messages.py
ResponseParts), in plaintext and through TLS; every byte must arrive in order."""

from __future__ import annotations

import hashlib
import time

import pytest
from confluent_kafka import Consumer, Producer
from txbroker.testing import BrokerProcess

RECORDS = 300
VALUE_BYTES = 20_000  # 6 MB in all: Fetch responses of several MB each


def _value(i: int) -> bytes:
    seed = hashlib.sha256(i.to_bytes(4, "big")).digest()
    return (seed * (VALUE_BYTES // len(seed) + 1))[:VALUE_BYTES]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    data = str(tmp_path_factory.mktemp("large-fetches") / "data")
    with BrokerProcess(data, listeners=["PLAINTEXT", "SASL_SSL"],
                       users={"alice": "alice-secret"}) as b:
        producer = Producer({"bootstrap.servers": b.bootstrap_for("PLAINTEXT"), "acks": "all",
                             "linger.ms": 50, "batch.size": 1_000_000,
                             "message.max.bytes": 2_000_000})
        for i in range(RECORDS):
            producer.produce("big", _value(i), str(i).encode(), partition=0)
        assert producer.flush(30) == 0
        yield b


def _read_all(conf: dict) -> list[tuple[bytes, bytes]]:
    consumer = Consumer({**conf, "group.id": f"g-{time.monotonic_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "fetch.max.bytes": 8_000_000, "max.partition.fetch.bytes": 8_000_000})
    consumer.subscribe(["big"])
    got: list[tuple[bytes, bytes]] = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < RECORDS and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                assert not msg.error(), msg.error()
                got.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return got


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SASL_SSL"])
def test_megabyte_fetches_arrive_whole_with_confluent(broker, listener):
    conf = (broker.client_config("SASL_SSL", "alice") if listener == "SASL_SSL"
            else {"bootstrap.servers": broker.bootstrap_for("PLAINTEXT")})
    got = _read_all(conf)
    assert [k for k, _ in got] == [str(i).encode() for i in range(RECORDS)]
    assert all(v == _value(i) for i, (_, v) in enumerate(got))


def test_megabyte_fetches_arrive_whole_with_kafka_python(broker):
    from kafka import KafkaConsumer

    consumer = KafkaConsumer("big", bootstrap_servers=broker.bootstrap_for("PLAINTEXT"),
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000,
                             fetch_max_bytes=8_000_000, max_partition_fetch_bytes=8_000_000)
    try:
        values = [m.value for m in consumer]
    finally:
        consumer.close()
    assert values == [_value(i) for i in range(RECORDS)]
