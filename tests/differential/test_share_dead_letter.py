"""Dead-letter topics of share groups (KIP-1191), txbroker vs Apache Kafka 4.4.0: the same
REJECT and the same release past the delivery count limit by confluent-kafka's
ShareConsumer give the same dead-letter record on both brokers (its key, value,
timestamp type and ``__dlq.errors.*`` headers), as a plain Consumer reads it. A new
Kafka 4.4 cluster finalizes share.version 2; txbroker is started at 2."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from tests.differential.conftest import BROKER_PARAMS, COMMON_CONFIG, Broker, running_broker
from tests.integration.share_progress import wait_start_offset

ck = pytest.importorskip("confluent_kafka")
if not hasattr(ck, "ShareConsumer"):
    pytest.skip("confluent-kafka without ShareConsumer", allow_module_level=True)

from confluent_kafka.admin import (  # noqa: E402 (after the skip)
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

CONFIG = {**COMMON_CONFIG, "group.share.delivery.count.limit": "2",
          "errors.deadletterqueue.auto.create.topics.enable": "true",
          "group.share.heartbeat.interval.ms": "1000",
          "group.share.min.heartbeat.interval.ms": "500"}


@pytest.fixture(scope="module", params=BROKER_PARAMS)
def dlq_broker(request, tmp_path_factory) -> Iterator[Broker]:
    extra = {} if request.param == "kafka" else {"txbroker.share.version": "2"}
    yield from running_broker(request.param, tmp_path_factory, {**CONFIG, **extra})


def _group_configs(broker: Broker, group: str, configs: dict[str, str],
                   timeout: float = 20) -> None:
    """Set them, then read them back (Kafka applies them through its metadata log)."""
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    assert broker.admin.incremental_alter_configs([res])[res].result(timeout) is None
    deadline = time.monotonic() + timeout
    while True:
        probe = ConfigResource(ResourceType.GROUP, group)
        got = broker.admin.describe_configs([probe])[probe].result(timeout)
        if all(k in got and got[k].value == v for k, v in configs.items()):
            return
        assert time.monotonic() < deadline, got
        time.sleep(0.1)


def _setup(broker: Broker, copy: bool, enabled: bool | None = True,
           prefix: str = "dlq.") -> tuple[str, str, str]:
    """A topic with two keyed records, its group's dead-letter topic (``enabled``: with
    the topic config that allows it; None: not created; named with ``prefix``), the
    group."""
    tag = uuid.uuid4().hex[:8]
    topic, dlq, group = f"t-{tag}", f"{prefix}t-{tag}", f"g-{tag}"
    broker.create_topic(topic)
    if enabled is not None:
        broker.create_topic(dlq, 1, {"errors.deadletterqueue.group.enable": "true"}
                            if enabled else {})
    broker.wait_coordinator(group, key_type=0)
    _group_configs(broker, group, {"share.auto.offset.reset": "earliest",
                                   "errors.deadletterqueue.topic.name": dlq,
                                   "errors.deadletterqueue.copy.record.enable": str(copy).lower()})
    _produce(broker, topic, range(2))
    return topic, dlq, group


def _produce(broker: Broker, topic: str, numbers) -> None:
    p = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for i in numbers:
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), headers=[("h", b"x")])
    assert p.flush(30) == 0


def _high_watermark(broker: Broker, topic: str) -> int:
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        return c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


def _poll(c, want: int, timeout: float = 60) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += [m for m in c.poll(1.0) if m.error() is None]
    return sorted(got, key=lambda m: m.offset())


def _dead_letters(broker: Broker, dlq: str, want: int, timeout: float = 60) -> list[tuple]:
    """(key, value, timestamp type, headers) of the dead-letter records once ``want``
    arrived; the header of the group (its id differs per test) made generic."""
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"r-{uuid.uuid4()}",
                     "enable.auto.commit": False})
    c.assign([ck.TopicPartition(dlq, 0, ck.OFFSET_BEGINNING)])  # no group join to wait for
    out: list[tuple] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < want and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                headers = [(k, b"<group>" if k == "__dlq.errors.group" else
                            b"<topic>" if k == "__dlq.errors.topic" else v)
                           for k, v in m.headers() or []]
                out.append((m.key(), m.value(), m.timestamp()[0], headers))
    finally:
        c.close()
    return out


EXPECTED_REJECT = [(b"k0", b"v0", ck.TIMESTAMP_CREATE_TIME, [
    ("__dlq.errors.topic", b"<topic>"), ("__dlq.errors.partition", b"0"),
    ("__dlq.errors.offset", b"0"), ("__dlq.errors.group", b"<group>"),
    ("__dlq.errors.delivery.count", b"1"),
    ("__dlq.errors.message", b"Offset rejected by client.")])]


def test_a_rejected_record_gets_the_same_dead_letter_record(dlq_broker):
    topic, dlq, group = _setup(dlq_broker, copy=True)
    c = ck.ShareConsumer({"bootstrap.servers": dlq_broker.bootstrap, "group.id": group,
                          "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    try:
        got = _poll(c, 2)
        assert [m.offset() for m in got] == [0, 1]
        c.acknowledge(got[0], ck.AcknowledgeType.REJECT)
        c.acknowledge(got[1], ck.AcknowledgeType.ACCEPT)
        c.commit_sync(30)
    finally:
        c.close()
    assert _dead_letters(dlq_broker, dlq, 1) == EXPECTED_REJECT


def test_a_record_over_the_delivery_count_limit_gets_the_same_dead_letter_record(dlq_broker):
    topic, dlq, group = _setup(dlq_broker, copy=False)
    c = ck.ShareConsumer({"bootstrap.servers": dlq_broker.bootstrap, "group.id": group,
                          "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    try:
        for count in (1, 2):
            got = _poll(c, 2)
            assert [(m.offset(), m.delivery_count()) for m in got] == [(0, count), (1, count)]
            c.acknowledge(got[0], ck.AcknowledgeType.RELEASE)
            c.acknowledge(got[1], ck.AcknowledgeType.ACCEPT if count == 2 else
                          ck.AcknowledgeType.RELEASE)
            c.commit_sync(30)
    finally:
        c.close()
    assert _dead_letters(dlq_broker, dlq, 1) == [(None, None, ck.TIMESTAMP_CREATE_TIME, [
        ("__dlq.errors.topic", b"<topic>"), ("__dlq.errors.partition", b"0"),
        ("__dlq.errors.offset", b"0"), ("__dlq.errors.group", b"<group>"),
        ("__dlq.errors.delivery.count", b"2"),
        ("__dlq.errors.message", b"Offset delivery count exceeded the threshold.")])]


@pytest.mark.parametrize("enabled, prefix", [(False, "dlq."), (True, "other.")],
                         ids=["not-enabled", "outside-the-prefix"])
def test_a_refused_dead_letter_topic_gets_nothing(dlq_broker, enabled, prefix):
    """Kafka refuses a dead-letter topic without errors.deadletterqueue.group.enable=true,
    or outside errors.deadletterqueue.topic.name.prefix (dlq.), and archives the record
    regardless: never delivered again, nothing written."""
    topic, dlq, group = _setup(dlq_broker, copy=True, enabled=enabled, prefix=prefix)
    c = ck.ShareConsumer({"bootstrap.servers": dlq_broker.bootstrap, "group.id": group,
                          "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    try:
        got = _poll(c, 2)
        c.acknowledge(got[0], ck.AcknowledgeType.REJECT)
        c.acknowledge(got[1], ck.AcknowledgeType.RELEASE)
        c.commit_sync(30)
        again = _poll(c, 1)
        assert [(m.offset(), m.delivery_count()) for m in again] == [(1, 2)]
        c.acknowledge(again[0], ck.AcknowledgeType.ACCEPT)
        c.commit_sync(30)
        # Never delivered again: a record produced now is delivered alone.
        _produce(dlq_broker, topic, [2])
        again = _poll(c, 1)
        assert [(m.offset(), m.delivery_count()) for m in again] == [(2, 1)]
        c.acknowledge(again[0], ck.AcknowledgeType.ACCEPT)
        c.commit_sync(30)
    finally:
        c.close()
    if dlq_broker.is_kafka:
        # (Kafka's persisted start offset lags a state write behind: no sign to wait for.)
        assert _dead_letters(dlq_broker, dlq, 1, timeout=5) == []
    else:
        # Every record ACKNOWLEDGED or ARCHIVED (never ARCHIVING: that waits for its
        # dead-letter record) once the start offset is past them; then nothing written.
        wait_start_offset(dlq_broker, group, topic, 3)
        assert _high_watermark(dlq_broker, dlq) == 0


def test_a_missing_dead_letter_topic_is_created_when_allowed(dlq_broker):
    """errors.deadletterqueue.auto.create.topics.enable=true on both brokers: the first
    dead-letter record creates the topic, marked as a dead-letter topic."""
    topic, dlq, group = _setup(dlq_broker, copy=True, enabled=None)
    c = ck.ShareConsumer({"bootstrap.servers": dlq_broker.bootstrap, "group.id": group,
                          "share.acknowledgement.mode": "explicit"})
    c.subscribe([topic])
    try:
        got = _poll(c, 2)
        c.acknowledge(got[0], ck.AcknowledgeType.REJECT)
        c.acknowledge(got[1], ck.AcknowledgeType.ACCEPT)
        c.commit_sync(30)
    finally:
        c.close()
    assert _dead_letters(dlq_broker, dlq, 1) == EXPECTED_REJECT
    res = ConfigResource(ResourceType.TOPIC, dlq)
    configs = dlq_broker.admin.describe_configs([res])[res].result(30)
    assert configs["errors.deadletterqueue.group.enable"].value == "true"
    md = dlq_broker.admin.list_topics(dlq, timeout=10).topics[dlq]
    assert len(md.partitions) == 1  # num.partitions
