"""Produce and consume phases with real clients, each bounded by a deadline.

A phase returns a PhaseResult (wall time, messages, value bytes) or raises
PhaseError with what went wrong; it never waits without a timeout.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

PARTITIONS = 4
POLL_SECONDS = 0.5
MAX_BLOCK_SECONDS = 30  # a single call to a client library, at most


class PhaseError(RuntimeError):
    pass


@dataclass
class PhaseResult:
    messages: int
    value_bytes: int
    seconds: float
    first_message_s: float | None = None  # consume only: time to the first record

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        # MB = 10**6 bytes of record values (keys are null; protocol overhead not counted).
        return self.value_bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"messages": self.messages, "value_bytes": self.value_bytes,
                "seconds": round(self.seconds, 4), "msgs_per_s": round(self.msgs_per_s, 1),
                "mb_per_s": round(self.mb_per_s, 2)} | (
            {} if self.first_message_s is None
            else {"first_message_s": round(self.first_message_s, 4)})


# --- topic creation (confluent AdminClient, for every scenario) -------------------------

def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS,
                 timeout: float = 30) -> None:
    """CreateTopics, then wait until Metadata shows every partition with a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)],
                                  operation_timeout=timeout, request_timeout=timeout)
    try:
        futures[topic].result(timeout)
    except Exception as e:
        raise PhaseError(f"CreateTopics {topic}: {e}") from e
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions \
                and all(p.leader >= 0 for p in t.partitions.values()):
            return
        time.sleep(0.1)
    raise PhaseError(f"topic {topic} has no leaders for all {partitions} partitions "
                     f"after {timeout}s")


# --- confluent-kafka (librdkafka) -------------------------------------------------------

CONFLUENT_PRODUCER = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "compression.type": "none",
    # Room for many 1 MB batches in flight so the Python loop rarely blocks.
    "queue.buffering.max.kbytes": 256 * 1024,
    "queue.buffering.max.messages": 1_000_000,
    "log_level": 3,
}

CONFLUENT_CONSUMER = {
    # group.id is mandatory for the client; with assign() and no commits it is unused.
    "group.id": "txbroker-bench",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",
    "enable.partition.eof": False,
    # When the app lags, librdkafka pauses fetching for this long (default 1000 ms):
    # with the default the run measures that pause, not the broker.
    "fetch.queue.backoff.ms": 10,
    "log_level": 3,
}


def confluent_produce(bootstrap: str, topic: str, count: int, value: bytes,
                      timeout: float) -> PhaseResult:
    from confluent_kafka import KafkaException, Producer

    failures: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None and len(failures) < 10:
            failures.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, **CONFLUENT_PRODUCER})
    produce = producer.produce
    deadline = time.monotonic() + timeout
    start = time.perf_counter()
    i = 0
    try:
        while i < count:
            try:
                # Explicit round-robin: every partition gets the same share.
                produce(topic, value, partition=i % PARTITIONS, on_delivery=on_delivery)
                i += 1
            except BufferError:
                producer.poll(0.01)
                if time.monotonic() > deadline:
                    raise PhaseError(f"produce: local queue still full after {timeout}s "
                                     f"({i}/{count} queued)") from None
        while True:
            left = producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
            if left == 0:
                break
            if time.monotonic() > deadline:
                raise PhaseError(f"produce: {left} messages not acknowledged after {timeout}s")
        elapsed = time.perf_counter() - start
    except KafkaException as e:
        raise PhaseError(f"produce: {e}") from e
    finally:
        # Drop anything still queued so the client does not linger after a failure.
        producer.purge()
        producer.flush(0)
    if failures:
        raise PhaseError(f"produce: delivery failed: {failures[:3]}")
    return PhaseResult(count, count * len(value), elapsed)


def confluent_consume(bootstrap: str, topic: str, count: int, timeout: float) -> PhaseResult:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, **CONFLUENT_CONSUMER})
    deadline = time.monotonic() + timeout
    got = 0
    nbytes = 0
    first = None
    try:
        start = time.perf_counter()
        # Offset 0 is the beginning of a fresh topic. OFFSET_BEGINNING would cost a
        # ListOffsets that librdkafka schedules ~0.5 s late (client-side, any broker).
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        while got < count:
            if time.monotonic() > deadline:
                raise PhaseError(f"consume: {got}/{count} messages after {timeout}s")
            msgs = consumer.consume(num_messages=10_000, timeout=POLL_SECONDS)
            if msgs and first is None:
                first = time.perf_counter() - start
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    raise PhaseError(f"consume: {err}")
                got += 1
                nbytes += len(msg.value())
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    return PhaseResult(got, nbytes, elapsed, first)


# --- kafka-python (pure Python) ---------------------------------------------------------

KAFKA_PYTHON_PRODUCER = {
    "acks": "all",
    "linger_ms": 5,
    "batch_size": 1_000_000,
    "max_request_size": 4_000_000,  # must exceed batch_size
    "compression_type": None,
    "max_block_ms": MAX_BLOCK_SECONDS * 1000,
}

KAFKA_PYTHON_CONSUMER = {
    "group_id": None,  # no group: assign() only, nothing committed
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
}


def kafka_python_produce(bootstrap: str, topic: str, count: int, value: bytes,
                         timeout: float) -> PhaseResult:
    from kafka import KafkaProducer

    failures: list[str] = []

    def on_error(exc: BaseException) -> None:
        if len(failures) < 10:
            failures.append(repr(exc))

    producer = KafkaProducer(bootstrap_servers=bootstrap, **KAFKA_PYTHON_PRODUCER)
    deadline = time.monotonic() + timeout
    try:
        start = time.perf_counter()
        send = producer.send
        for i in range(count):
            send(topic, value=value, partition=i % PARTITIONS).add_errback(on_error)
            if i & 0xFFF == 0 and time.monotonic() > deadline:
                raise PhaseError(f"produce: only {i}/{count} queued after {timeout}s")
        producer.flush(timeout=max(1.0, deadline - time.monotonic()))
        elapsed = time.perf_counter() - start
    except PhaseError:
        raise
    except Exception as e:
        raise PhaseError(f"produce: {e!r}") from e
    finally:
        producer.close(timeout=5)
    if failures:
        raise PhaseError(f"produce: delivery failed: {failures[:3]}")
    return PhaseResult(count, count * len(value), elapsed)


def kafka_python_consume(bootstrap: str, topic: str, count: int,
                         timeout: float) -> PhaseResult:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, **KAFKA_PYTHON_CONSUMER)
    deadline = time.monotonic() + timeout
    got = 0
    nbytes = 0
    first = None
    try:
        start = time.perf_counter()
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)  # fresh topic: 0 is the beginning, no ListOffsets needed
        while got < count:
            if time.monotonic() > deadline:
                raise PhaseError(f"consume: {got}/{count} messages after {timeout}s")
            batches = consumer.poll(timeout_ms=int(POLL_SECONDS * 1000), max_records=10_000)
            if batches and first is None:
                first = time.perf_counter() - start
            for records in batches.values():
                got += len(records)
                nbytes += sum(len(r.value) for r in records)
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    return PhaseResult(got, nbytes, elapsed, first)


SCENARIOS = {
    "confluent-kafka": (confluent_produce, confluent_consume),
    "kafka-python": (kafka_python_produce, kafka_python_consume),
}
