"""Request faults through the pytest fixture, with real clients (docs/fault-injection.md)."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

# Quick retries and metadata refreshes: a test waits for the client's retry paths, not
# for librdkafka's default backoffs.
FAST = {"retry.backoff.ms": 20, "retry.backoff.max.ms": 100,
        "topic.metadata.refresh.fast.interval.ms": 50, "linger.ms": 0}


def _produce(bootstrap: str, topic: str, partitions: list[int], count: int,
             **config) -> list:
    """Produce ``count`` records to each partition; the delivery reports (message,
    error)."""
    reports = []
    producer = Producer({"bootstrap.servers": bootstrap, **FAST, **config})
    for p in partitions:
        for i in range(count):
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p,
                             on_delivery=lambda err, msg: reports.append((msg, err)))
    assert producer.flush(60) == 0
    return reports


def _read(bootstrap: str, topic: str, partition: int, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < expected and time.monotonic() < deadline:
        for msg in consumer.consume(100, timeout=0.5):
            if msg.error() is None:
                values.append(msg.value())
    consumer.close()
    return values


def test_fixture_contract_producer_with_retries_delivers_every_record(txbroker):
    txbroker.create_topic("orders", 2)
    fault = txbroker.faults.add(api="Produce", topic="orders", partition=0,
                                error="NOT_LEADER_OR_FOLLOWER", count=3)
    reports = _produce(txbroker.bootstrap, "orders", [0], 5, retries=10)
    assert [err for _msg, err in reports] == [None] * 5
    assert fault.fired == 3
    fault.remove()
    assert not fault.active
    assert sorted(_read(txbroker.bootstrap, "orders", 0, 5)) == [b"0-%d" % i for i in range(5)]


def test_a_partition_error_fails_that_partition_only_and_appends_nothing(txbroker):
    txbroker.create_topic("two", 2)
    fault = txbroker.faults.add(api="Produce", topic="two", partition=1,
                                error="INVALID_RECORD")  # not retriable: fails at once
    reports = _produce(txbroker.bootstrap, "two", [0, 1], 3)
    errors = {msg.partition(): err for msg, err in reports}
    assert errors[0] is None
    assert errors[1] is not None and errors[1].code() == KafkaError.INVALID_RECORD
    assert fault.fired >= 1
    assert txbroker.high_watermark("two", 0) == 3
    assert txbroker.high_watermark("two", 1) == 0  # the faulted batch was never appended


def test_after_lets_matches_through_then_count_ends_the_fault(txbroker):
    txbroker.create_topic("budget")
    fault = txbroker.faults.add(api="Produce", topic="budget", error="NOT_LEADER_OR_FOLLOWER",
                                after=2, count=2)
    producer = Producer({"bootstrap.servers": txbroker.bootstrap, **FAST})
    errors = []
    for i in range(5):  # one request per record: flush before the next
        producer.produce("budget", value=b"%d" % i, on_delivery=lambda e, m: errors.append(e))
        assert producer.flush(30) == 0
    assert errors == [None] * 5
    # Requests 1 and 2 let through; 3 and its first retry answered with the error (count 2),
    # then the fault is gone: the second retry and records 4 and 5 are not even seen.
    assert (fault.seen, fault.fired, fault.active) == (4, 2, False)
    assert txbroker.high_watermark("budget") == 5


def test_delay_holds_the_answer(txbroker):
    txbroker.create_topic("slow")
    fault = txbroker.faults.add(api="ListOffsets", delay_ms=400, count=1)
    consumer = Consumer({"bootstrap.servers": txbroker.bootstrap, "group.id": "g"})
    started = time.monotonic()
    assert consumer.get_watermark_offsets(TopicPartition("slow", 0), timeout=10) == (0, 0)
    assert time.monotonic() - started >= 0.4
    assert fault.fired == 1
    consumer.close()


def test_drop_serves_the_request_but_never_answers(txbroker):
    """The first Produce is appended, its answer lost: the idempotent producer times the
    request out, reconnects and retries, and the broker recognises the retry (its
    sequence) instead of appending the batch twice."""
    txbroker.create_topic("lost")
    fault = txbroker.faults.add(api="Produce", topic="lost", drop=True, count=1)
    reports = _produce(txbroker.bootstrap, "lost", [0], 1, **{
        "enable.idempotence": True, "request.timeout.ms": 1000,
        "socket.timeout.ms": 1000})
    assert [err for _m, err in reports] == [None]
    assert fault.fired == 1
    assert _read(txbroker.bootstrap, "lost", 0, 1) == [b"0-0"]
    assert txbroker.high_watermark("lost") == 1  # appended once


def test_close_drops_the_connection_without_serving(txbroker):
    txbroker.create_topic("closed")
    fault = txbroker.faults.add(api="Produce", close=True, count=2)
    reports = _produce(txbroker.bootstrap, "closed", [0], 3)
    assert [err for _m, err in reports] == [None] * 3
    assert fault.fired == 2
    assert txbroker.high_watermark("closed") == 3  # closed requests were not served


def test_callable_inspects_and_replaces_the_answer(txbroker):
    txbroker.create_topic("seen")
    calls = []

    def high_watermark_42(call):
        calls.append((call.api, call.client_id, call.principal))
        topics = tuple(
            dataclasses.replace(t, partitions=tuple(
                dataclasses.replace(p, offset=42) if p.timestamp == -1 or p.offset > 0 else p
                for p in t.partitions))
            for t in call.response.topics)
        return dataclasses.replace(call.response, topics=topics)

    fault = txbroker.faults.add(api="ListOffsets", callable=high_watermark_42)
    consumer = Consumer({"bootstrap.servers": txbroker.bootstrap, "group.id": "g",
                         "client.id": "inspected"})
    low, high = consumer.get_watermark_offsets(TopicPartition("seen", 0), timeout=10)
    consumer.close()
    assert high == 42
    assert calls and calls[0] == ("list_offsets", "inspected", "User:ANONYMOUS")
    assert fault.fired == len(calls)


def test_coordinator_moves_are_retried_by_a_transactional_producer(txbroker):
    txbroker.create_topic("moved")
    loading = txbroker.faults.add(profile="coordinator_loading", transactional_id="mover",
                                  count=2)
    moved = txbroker.faults.add(profile="coordinator_moved", transactional_id="mover",
                                after=2, count=1)
    producer = Producer({"bootstrap.servers": txbroker.bootstrap, "transactional.id": "mover",
                         **FAST})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce("moved", value=b"x")
    producer.commit_transaction(30)
    assert (loading.fired, moved.fired) == (2, 1)
    # The record and its COMMIT marker (written after the EndTxn answer).
    deadline = time.monotonic() + 10
    while txbroker.last_stable_offset("moved") != 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert txbroker.last_stable_offset("moved") == 2


def test_hang_and_refused_connections(txbroker):
    txbroker.create_topic("hung")
    refuse = txbroker.faults.refuse_connections(count=2)
    reports = _produce(txbroker.bootstrap, "hung", [0], 1)  # reconnects until let in
    assert [err for _m, err in reports] == [None] and refuse.fired == 2
    hang = txbroker.faults.hang(300)
    consumer = Consumer({"bootstrap.servers": txbroker.bootstrap, "group.id": "g"})
    started = time.monotonic()
    consumer.get_watermark_offsets(TopicPartition("hung", 0), timeout=10)
    assert time.monotonic() - started >= 0.3 and hang.fired >= 1
    hang.remove()
    consumer.close()
    assert [f["id"] for f in txbroker.faults.list() if f["active"]] == []


@pytest.mark.parametrize("spec, message", [
    ({"api": "Produse", "error": 6}, "unknown API 'Produse'"),
    ({"api": "Produce", "error": "NOT_A_LEADER"}, "unknown Kafka error 'NOT_A_LEADER'"),
    ({"api": "Produce"}, "exactly one action"),
    ({"api": "Produce", "error": 6, "delay_ms": 5}, "exactly one action"),
    ({"api": "Metadata", "topic": "t", "delay_ms": 3}, "only APIs that carry partitions"),
    # (Metadata has a top-level error code from v13: a v13 client can be answered one.)
    ({"api": "CreateTopics", "error": 3}, "no error field"),
    ({"api": "Produce", "partition": 0, "error": 6}, "partition needs topic"),
    ({"api": "Produce", "error": 6, "count": 0}, "count must be at least 1"),
    ({"api": "Produce", "error": 6, "colour": "red"}, "unknown fault key(s) colour"),
    ({"point": "before_lunch"}, "unknown fault point"),
    ({"profile": "meteor"}, "unknown fault profile"),
    ({"broker": "hang"}, "a broker hang needs ms"),
    ({"broker": "nap", "ms": 5}, "broker must be one of hang, crash, power_loss"),
    ({"broker": "hang", "ms": 5, "api": "Produce"}, "a broker hang takes only ms, not api"),
    ({"broker": "hang", "ms": 0}, "ms must be at least 1"),
    ({"broker": "crash", "ms": 5}, "a broker crash takes no other key, not ms"),
    ({"api": "Produce", "error": 6, "ms": 5}, "ms is for a broker hang"),
])
def test_bad_specs_are_refused_with_a_clear_error(txbroker, spec, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        txbroker.faults.add(**spec)
    assert txbroker.faults.list() == []


STARTUP = [{"api": "Produce", "topic": "boot", "error": "NOT_LEADER_OR_FOLLOWER", "count": 2}]


@pytest.mark.parametrize("txbroker_config", [{"txbroker.faults": json.dumps(STARTUP)}])
def test_faults_from_the_startup_configuration(txbroker):
    txbroker.create_topic("boot")
    (installed,) = txbroker.faults.list()
    assert installed["topic"] == "boot" and installed["active"]
    assert [err for _m, err in _produce(txbroker.bootstrap, "boot", [0], 2)] == [None, None]
    (after,) = txbroker.faults.list()
    assert (after["fired"], after["active"]) == (2, False)


def test_points_are_listed_with_request_faults(txbroker):
    point = txbroker.faults.arm("before_markers", "delay:10")
    request = txbroker.faults.add(api="EndTxn", delay_ms=1)
    listed = {f["id"]: f for f in txbroker.faults.list()}
    assert listed[point.id]["point"] == "before_markers" and listed[request.id]["api"] == "EndTxn"
    point.remove()
    assert txbroker.faults.armed == {}


class _ClientLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_fetch_partition_errors_and_faults_kept_across_a_restart(txbroker):
    txbroker.create_topic("reads", 2)
    _produce(txbroker.bootstrap, "reads", [0, 1], 3)
    fault = txbroker.faults.add(api="Fetch", topic="reads", partition=1,
                                error="NOT_LEADER_OR_FOLLOWER", count=3)
    txbroker.restart()  # the fault stays installed, its counts with it
    client_log = _ClientLog()
    logger = logging.getLogger("test-fetch-faults")
    logger.addHandler(client_log)
    consumer = Consumer({"bootstrap.servers": txbroker.bootstrap, "group.id": "g",
                         "enable.auto.commit": False, **{
                             k: v for k, v in FAST.items() if k != "linger.ms"}},
                        logger=logger)
    consumer.assign([TopicPartition("reads", 0, 0), TopicPartition("reads", 1, 0)])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < 6 and time.monotonic() < deadline:
        values += [m.value() for m in consumer.consume(10, timeout=0.5) if m.error() is None]
    consumer.close()
    assert sorted(values) == sorted(b"%d-%d" % (p, i) for p in (0, 1) for i in range(3))
    assert fault.fired == 3 and not fault.active
    # The failed partition's answer is one librdkafka reads (empty records, not null).
    assert not [line for line in client_log.lines if "parse failure" in line]


def test_except_client_id_lets_that_client_through(txbroker):
    txbroker.create_topic("spared")
    fault = txbroker.faults.add(api="Produce", error="NOT_LEADER_OR_FOLLOWER", count=1,
                                except_client_id="spared-client")
    reports = _produce(txbroker.bootstrap, "spared", [0], 2, **{"client.id": "spared-client"})
    assert [err for _m, err in reports] == [None, None]
    assert (fault.fired, fault.seen, fault.active) == (0, 0, True)
    _produce(txbroker.bootstrap, "spared", [0], 1, **{"client.id": "other"})
    assert (fault.fired, fault.active) == (1, False)
