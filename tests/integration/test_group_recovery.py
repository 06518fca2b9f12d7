"""Committed offsets and group metadata survive restarts of a broker process
(SIGKILL and SIGTERM): OffsetFetch answers the committed offsets, a new
consumer of the group resumes from them, and the group coordinator answers
COORDINATOR_LOAD_IN_PROGRESS at most briefly while it reloads
``__consumer_offsets`` (clients retry it transparently)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build, request_module

from tests.helpers import BrokerProcess, RawClient, wait_until

from .clients import Msg, produce
from .consumer_util import create_topic
from .group_util import GROUP_CONFIG, Feed, History, check_history, errors_of
from .group_worker import KAFKA_PYTHON_POLL_MS, Events, Member, WorkerConfig

pytestmark = pytest.mark.slow

PARTITIONS = 3
PER_PARTITION = 20
COMMITTED = {0: 5, 1: 11, 2: 17}
SIMPLE_COMMITTED = {0: 3, 2: 19}
OFFSET_FETCH = 9


@pytest.fixture
def group_broker(tmp_path):
    proc = BrokerProcess(str(tmp_path / "data"), GROUP_CONFIG)
    proc.start()
    try:
        yield proc
    finally:
        proc.kill()


def _member_commit_kafka_python(bootstrap: str, topic: str, group: str) -> None:
    """Subscribe, read everything, commit COMMITTED as a group member, close."""
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             fetch_max_wait_ms=100)
    try:
        n = 0
        deadline = time.monotonic() + 20
        while n < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
            n += sum(len(v) for v in consumer.poll(timeout_ms=KAFKA_PYTHON_POLL_MS).values())
        assert n == PARTITIONS * PER_PARTITION
        offsets = {TopicPartition(topic, p): OffsetAndMetadata(o, "member", -1)
                   for p, o in COMMITTED.items()}
        consumer.commit(offsets)  # raises unless every partition succeeded
    finally:
        consumer.close()


def _member_commit_confluent(bootstrap: str, topic: str, group: str) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 100})
    try:
        consumer.subscribe([topic])
        n = 0
        deadline = time.monotonic() + 20
        while n < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=100, timeout=0.2):
                assert m.error() is None, m.error()
                n += 1
        assert n == PARTITIONS * PER_PARTITION
        result = consumer.commit(offsets=[CTP(topic, p, o) for p, o in COMMITTED.items()],
                                 asynchronous=False)
        assert all(tp.error is None for tp in result), result
    finally:
        consumer.close()


def _simple_commit(client: str, bootstrap: str, topic: str, group: str) -> None:
    """assign()-style commit: generation -1, no member id."""
    if client == "kafka-python":
        from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                 enable_auto_commit=False)
        try:
            consumer.assign([TopicPartition(topic, p) for p in SIMPLE_COMMITTED])
            consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1)
                             for p, o in SIMPLE_COMMITTED.items()})
        finally:
            consumer.close()
    else:
        from confluent_kafka import Consumer
        from confluent_kafka import TopicPartition as CTP

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                             "enable.auto.commit": False})
        try:
            consumer.assign([CTP(topic, p) for p in SIMPLE_COMMITTED])
            result = consumer.commit(
                offsets=[CTP(topic, p, o) for p, o in SIMPLE_COMMITTED.items()],
                asynchronous=False)
            assert all(tp.error is None for tp in result), result
        finally:
            consumer.close()


def _raw_offset_fetch(host: str, port: int, group: str, topic: str, timeout: float = 10):
    """OffsetFetch v7 until it answers something other than COORDINATOR_LOAD_IN_PROGRESS:
    (seconds it took, error codes seen before, {partition: offset}, final error)."""
    m = request_module(OFFSET_FETCH, 7)
    request = build(m.OffsetFetchRequest, group_id=group, require_stable=False, topics=(
        build(m.OffsetFetchRequestTopic, name=topic, partition_indexes=tuple(range(PARTITIONS))),))
    started = time.monotonic()
    seen = []
    client = None
    while time.monotonic() - started < timeout:
        try:
            if client is None:
                client = RawClient(host, port)
            response = client.request(OFFSET_FETCH, 7, request)
        except OSError:
            client = None
            time.sleep(0.01)
            continue
        if response is None:
            client = None
            continue
        if response.error_code == ErrorCode.coordinator_load_in_progress:
            seen.append(response.error_code)
            time.sleep(0.005)
            continue
        offsets = {p.partition_index: p.committed_offset
                   for t in response.topics for p in t.partitions}
        client.close()
        return time.monotonic() - started, seen, offsets, response.error_code
    raise AssertionError(f"OffsetFetch did not answer within {timeout}s: {seen[-3:]}")


def _resume(client: str, bootstrap: str, topic: str, group: str,
            count: int) -> list[tuple[int, int]]:
    """A new consumer of the group (subscribe); (partition, offset) of what it reads."""
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    if client == "kafka-python":
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                 enable_auto_commit=False, auto_offset_reset="earliest",
                                 fetch_max_wait_ms=100)
        try:
            while len(got) < count and time.monotonic() < deadline:
                for msgs in consumer.poll(timeout_ms=KAFKA_PYTHON_POLL_MS).values():
                    got += [(m.partition, m.offset) for m in msgs]
            # nothing more arrives
            for msgs in consumer.poll(timeout_ms=300).values():
                got += [(m.partition, m.offset) for m in msgs]
        finally:
            consumer.close()
    else:
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest",
                             "fetch.wait.max.ms": 100})
        try:
            consumer.subscribe([topic])
            end = None
            while time.monotonic() < deadline and (end is None or time.monotonic() < end):
                for m in consumer.consume(num_messages=100, timeout=0.2):
                    assert m.error() is None, m.error()
                    got.append((m.partition(), m.offset()))
                if len(got) >= count and end is None:
                    end = time.monotonic() + 0.3
        finally:
            consumer.close()
    return sorted(got)


@pytest.mark.parametrize("client,stop", [("confluent", "kill"), ("kafka-python", "kill"),
                                         ("confluent", "term"), ("kafka-python", "term")])
def test_committed_offsets_survive_restart(group_broker, topic, client, stop):
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, topic, PARTITIONS)
    produce("confluent", bootstrap, topic,
            [Msg(None, b"v%d" % i, partition=i % PARTITIONS)
             for i in range(PARTITIONS * PER_PARTITION)], acks="all")
    group = f"g-{topic}-{uuid.uuid4().hex[:6]}"
    simple_group = group + "-simple"
    if client == "kafka-python":
        _member_commit_kafka_python(bootstrap, topic, group)
    else:
        _member_commit_confluent(bootstrap, topic, group)
    _simple_commit(client, bootstrap, topic, simple_group)

    if stop == "kill":
        group_broker.kill()
        assert group_broker.proc.returncode == -9
    else:
        assert group_broker.terminate() == 0
    group_broker.start()

    # Right away: a raw OffsetFetch (which sees any COORDINATOR_LOAD_IN_PROGRESS)
    # and, concurrently, a real client that must not notice.
    probe: dict = {}

    def run_probe() -> None:
        probe["result"] = _raw_offset_fetch(group_broker.host, group_broker.port, group, topic)

    prober = threading.Thread(target=run_probe, daemon=True)
    prober.start()
    remaining = PARTITIONS * PER_PARTITION - sum(COMMITTED.values())
    got = _resume(client, bootstrap, topic, group, remaining)
    prober.join(15)
    elapsed, seen, offsets, error = probe["result"]
    assert error == ErrorCode.none
    assert offsets == COMMITTED
    assert elapsed < 3, f"the coordinator was loading for {elapsed:.2f}s ({len(seen)} answers)"

    assert got == [(p, o) for p in range(PARTITIONS) for o in range(COMMITTED[p], PER_PARTITION)]
    _elapsed, _seen, simple, error = _raw_offset_fetch(group_broker.host, group_broker.port,
                                                      simple_group, topic)
    assert error == ErrorCode.none
    assert simple == {p: SIMPLE_COMMITTED.get(p, -1) for p in range(PARTITIONS)}

    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        d = admin.describe_groups([group])[group]
        assert d["group_state"] == "Empty" and d["protocol_type"] == "consumer"
        listed = {g["group_id"]: g["protocol_type"] for g in admin.list_groups()}
        assert listed[group] == "consumer" and listed[simple_group] == ""
        offsets = admin.list_group_offsets({group: None})[group]
        assert {tp.partition: om.offset for tp, om in offsets.items()} == COMMITTED
        if client == "kafka-python":
            assert {om.metadata for om in offsets.values()} == {"member"}
    finally:
        admin.close()


def test_group_lives_through_broker_sigkill(group_broker, topic):
    """Two confluent members consume and commit while the broker is SIGKILLed and
    restarted on the same port: they carry on (the group and its offsets were
    reloaded), nothing is lost and nothing committed before the crash is read again."""
    bootstrap = group_broker.bootstrap
    create_topic(bootstrap, topic, PARTITIONS)
    group = f"g-{topic}-{uuid.uuid4().hex[:6]}"
    events = Events()
    history = History(events)
    feed = Feed(bootstrap, topic, PARTITIONS, rate=150, **{"enable.idempotence": True}).start()
    members = [Member(WorkerConfig(client="confluent", bootstrap=bootstrap, topic=topic,
                                   group=group, name=n), events).start() for n in ("A", "B")]
    try:
        t = history.wait_stable({"A", "B"}, PARTITIONS)
        history.wait_commits("A", t, 3)
        history.wait_commits("B", t, 3)
        group_broker.kill()
        time.sleep(0.3)
        group_broker.start()
        t_restart = time.monotonic()
        history.wait_commits("A", t_restart, 3, timeout=30)
        history.wait_commits("B", t_restart, 3, timeout=30)
        produced = feed.stop()
        ends = feed.end_offsets()

        def drained() -> bool:
            *_, offsets, error = _raw_offset_fetch(group_broker.host, group_broker.port,
                                                   group, topic)
            return error == ErrorCode.none and offsets == ends
        assert wait_until(drained, 30), "the members did not commit up to the end"
        for m in members:
            m.stop()
    finally:
        feed.abort()
        for m in members:
            m.stop_event.set()
        for m in members:
            m.thread.join(30)
    evs = history.all()
    assert not errors_of(evs), errors_of(evs)
    check_history(evs, produced)
