"""Partition and topic storms (issue 14, item 3): creation limits answered with Kafka's
POLICY_VIOLATION before anything is created, creation that leaves other clients
served, and topic metadata and partition directories that agree after a failure half
way (EMFILE, a crash) and after a restart."""

from __future__ import annotations

import json
import os
import resource
import threading
import time

import kafka.errors as kerr
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.admin import KafkaAdminClient

from tests.helpers import BrokerProcess, wait_until

from .clients import Msg, produce


def _result(future, timeout: float = 60):
    """A confluent admin future's value, or the KafkaError it failed with."""
    try:
        return future.result(timeout)
    except KafkaException as e:
        return e.args[0]


def _partition_dirs(data_dir: str, topic: str) -> set[str]:
    return {n for n in os.listdir(data_dir)
            if n.startswith(topic + "-") and n[len(topic) + 1:].isdigit()}


def _topics_json(data_dir: str) -> dict:
    try:
        with open(os.path.join(data_dir, "topics.json")) as f:
            return json.load(f)
    except FileNotFoundError:  # no topic created yet
        return {}


def _data_dir(txbroker) -> str:
    return txbroker.call(lambda b: b.logs.data_dir)


# --- limits, checked before anything is created ----------------------------------------


def test_create_topics_past_per_request_limit_refused_whole(txbroker, topic):
    """Kafka's controller refuses a CreateTopics asking for more than 10,000 partitions
    in all, every topic with POLICY_VIOLATION; nothing reaches the disk."""
    admin = AdminClient({"bootstrap.servers": txbroker.bootstrap})
    futures = admin.create_topics([NewTopic(topic, 100_000, 1),
                                   NewTopic(topic + "-small", 1, 1)])
    for name in (topic, topic + "-small"):
        err = _result(futures[name])
        assert isinstance(err, KafkaError) and err.code() == KafkaError.POLICY_VIOLATION, err
        assert "Excessively large number of partitions per request" in err.str()
    data_dir = _data_dir(txbroker)
    assert not _partition_dirs(data_dir, topic) and not _partition_dirs(data_dir, topic + "-small")
    assert topic not in txbroker.call(lambda b: list(b.logs.topics))
    # 10,001 one-partition topics: the same bound, counted over the request.
    many = [NewTopic(f"{topic}-{i}", 1, 1) for i in range(10_001)]
    futures = admin.create_topics(many, request_timeout=60)
    err = _result(futures[f"{topic}-0"])
    assert isinstance(err, KafkaError) and err.code() == KafkaError.POLICY_VIOLATION
    assert not [n for n in txbroker.call(lambda b: list(b.logs.topics)) if n.startswith(topic)]


def test_create_partitions_to_int_max_refused(txbroker, topic):
    kadmin = KafkaAdminClient(bootstrap_servers=txbroker.bootstrap)
    try:
        kadmin.create_topics({topic: {"num_partitions": 2}})
        with pytest.raises(kerr.PolicyViolationError):
            kadmin.create_partitions({topic: 2**31 - 1})
    finally:
        kadmin.close()
    admin = AdminClient({"bootstrap.servers": txbroker.bootstrap})
    err = _result(admin.create_partitions([NewPartitions(topic, 100_000)])[topic])
    assert isinstance(err, KafkaError) and err.code() == KafkaError.POLICY_VIOLATION
    assert txbroker.call(lambda b: b.logs.topics[topic].partitions) == 2
    assert _partition_dirs(_data_dir(txbroker), topic) == {f"{topic}-0", f"{topic}-1"}


@pytest.mark.parametrize("txbroker_config", [{"txbroker.max.partitions": "60",
                                              "txbroker.max.partitions.per.request": "40"}])
def test_configured_limits_per_request_and_on_the_broker(txbroker, topic):
    internal = txbroker.call(lambda b: len(b.logs.logs))  # internal topics do not count
    admin = AdminClient({"bootstrap.servers": txbroker.bootstrap})
    err = _result(admin.create_topics([NewTopic(topic + "-a", 41, 1)])[topic + "-a"])
    assert err.code() == KafkaError.POLICY_VIOLATION
    assert _result(admin.create_topics([NewTopic(topic + "-a", 40, 1)])[topic + "-a"]) is None
    # 40 exist (+ internal ones); 25 more pass the per-request bound but not the total.
    err = _result(admin.create_topics([NewTopic(topic + "-b", 25, 1)])[topic + "-b"])
    assert err.code() == KafkaError.POLICY_VIOLATION and "txbroker.max.partitions" in err.str()
    err = _result(admin.create_partitions([NewPartitions(topic + "-a", 66)])[topic + "-a"])
    assert err.code() == KafkaError.POLICY_VIOLATION
    assert _result(admin.create_partitions([NewPartitions(topic + "-a", 60)])[topic + "-a"]) \
        is None
    assert txbroker.call(lambda b: len(b.logs.logs)) == internal + 60
    # Auto-creation by Metadata is bounded too.
    with pytest.raises(kerr.KafkaError):
        produce("kafka-python", txbroker.bootstrap, topic + "-auto", [Msg(b"k", b"v")],
                max_block_ms=3000)
    assert topic + "-auto" not in txbroker.call(lambda b: list(b.logs.topics))
    assert not _partition_dirs(_data_dir(txbroker), topic + "-b")


# --- creation does not stall other clients ------------------------------------------------


def test_large_creation_leaves_other_producers_served(txbroker, topic):
    """While 5,000 partitions are created, another client's acks=all produces are
    answered (the directories are built off the event loop)."""
    _result(AdminClient({"bootstrap.servers": txbroker.bootstrap}).create_topics(
        [NewTopic(topic, 1, 1)])[topic])
    producer = Producer({"bootstrap.servers": txbroker.bootstrap, "acks": "all",
                         "linger.ms": 0})
    acked: list[tuple[float, float]] = []  # (sent, acknowledged)
    stop = threading.Event()

    def produce_loop() -> None:
        while not stop.is_set():
            sent = time.monotonic()
            done = threading.Event()

            def on_delivery(err, _msg, sent=sent, done=done):
                if err is None:
                    acked.append((sent, time.monotonic()))
                done.set()
            producer.produce(topic, b"v", on_delivery=on_delivery)
            while not done.is_set():
                producer.poll(0.01)

    for _ in range(3):  # warm up: metadata, connection
        producer.produce(topic, b"w")
    producer.flush(10)
    thread = threading.Thread(target=produce_loop)
    thread.start()
    try:
        time.sleep(0.3)
        admin = AdminClient({"bootstrap.servers": txbroker.bootstrap})
        began = time.monotonic()
        assert _result(admin.create_topics([NewTopic(topic + "-big", 5000, 1)],
                                           request_timeout=120)[topic + "-big"], 120) is None
        ended = time.monotonic()
    finally:
        stop.set()
        thread.join()
    during = [ack - sent for sent, ack in acked if sent >= began and ack <= ended]
    latencies = sorted(during)
    p99 = latencies[int(len(latencies) * 0.99)] if latencies else None
    print(f"created 5000 partitions in {ended - began:.2f}s; {len(during)} acks=all produces "
          f"answered meanwhile, max {max(during, default=0) * 1000:.1f} ms, "
          f"p99 {p99 and p99 * 1000:.1f} ms")
    assert len(during) >= 5, f"only {len(during)} produces answered during the creation"
    assert txbroker.call(lambda b: b.logs.topics[topic + "-big"].partitions) == 5000


# --- consistency after a failure half-way -----------------------------------------------------


def test_failure_mid_creation_rolls_back(txbroker, topic, monkeypatch):
    """An OSError half-way through a creation (EMFILE here) answers KAFKA_STORAGE_ERROR
    and leaves neither directories nor topics.json entries; the next creation works."""
    from txbroker.storage import log as storage_log

    real_open = storage_log.PartitionLog.open
    calls = {"n": 0, "fail_at": 300}

    def flaky_open(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == calls["fail_at"]:
            raise OSError(24, "Too many open files")
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(storage_log.PartitionLog, "open", flaky_open)
    data_dir = _data_dir(txbroker)
    admin = AdminClient({"bootstrap.servers": txbroker.bootstrap})
    err = _result(admin.create_topics([NewTopic(topic, 1000, 1)])[topic])
    assert isinstance(err, KafkaError) and err.code() == KafkaError.KAFKA_STORAGE_ERROR, err
    assert not _partition_dirs(data_dir, topic)
    assert topic not in _topics_json(data_dir)
    assert topic not in txbroker.call(lambda b: list(b.logs.topics))
    # CreatePartitions: the topic keeps its count, the new directories go.
    assert _result(admin.create_topics([NewTopic(topic, 2, 1)])[topic]) is None
    calls["n"], calls["fail_at"] = 0, 50
    err = _result(admin.create_partitions([NewPartitions(topic, 400)])[topic])
    assert err.code() == KafkaError.KAFKA_STORAGE_ERROR
    assert _partition_dirs(data_dir, topic) == {f"{topic}-0", f"{topic}-1"}
    assert _topics_json(data_dir)[topic]["partitions"] == 2
    assert _result(admin.create_partitions([NewPartitions(topic, 400)])[topic]) is None
    assert len(_partition_dirs(data_dir, topic)) == 400
    assert produce("confluent", txbroker.bootstrap, topic, [Msg(b"k", b"v", partition=399)]) \
        == [(399, 0)]


@pytest.mark.slow
def test_emfile_in_a_broker_process_is_survived(tmp_path, topic):
    """RLIMIT_NOFILE lowered under a running broker: a big creation fails with
    KAFKA_STORAGE_ERROR and rolls back; once descriptors are back, acks=all produces
    and creations work, and SIGTERM exits 0. A restart finds the same topics."""
    data_dir = str(tmp_path / "data")
    with BrokerProcess(data_dir) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert _result(admin.create_topics([NewTopic(topic, 1, 1)])[topic]) is None
        assert produce("confluent", broker.bootstrap, topic, [Msg(b"k", b"before")]) == [(0, 0)]
        _soft, hard = resource.prlimit(broker.proc.pid, resource.RLIMIT_NOFILE)
        in_use = len(os.listdir(f"/proc/{broker.proc.pid}/fd"))
        resource.prlimit(broker.proc.pid, resource.RLIMIT_NOFILE, (in_use + 200, hard))
        try:
            err = _result(admin.create_topics([NewTopic(topic + "-big", 2000, 1)])[topic + "-big"])
            assert isinstance(err, KafkaError) and err.code() == KafkaError.KAFKA_STORAGE_ERROR
            assert not _partition_dirs(data_dir, topic + "-big")
        finally:
            resource.prlimit(broker.proc.pid, resource.RLIMIT_NOFILE, (hard, hard))
        assert topic + "-big" not in _topics_json(data_dir)
        assert produce("confluent", broker.bootstrap, topic, [Msg(b"k", b"after")]) == [(0, 1)]
        assert _result(admin.create_topics([NewTopic(topic + "-big", 2000, 1)],
                                           request_timeout=120)[topic + "-big"], 120) is None
        assert broker.terminate() == 0
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        meta = admin.list_topics(timeout=10).topics
        assert len(meta[topic + "-big"].partitions) == 2000
        assert produce("confluent", broker.bootstrap, topic, [Msg(b"k", b"again")]) == [(0, 2)]
        assert broker.terminate() == 0


@pytest.mark.slow
def test_crash_mid_creation_leaves_no_orphans_after_restart(tmp_path, topic):
    """SIGKILL while a 5,000-partition topic is being created: on restart the partition
    directories are exactly those of the topics in topics.json (orphans removed, with a
    log line)."""
    data_dir = str(tmp_path / "data")
    with BrokerProcess(data_dir) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic, 5000, 1)], request_timeout=120)
        assert wait_until(lambda: len(_partition_dirs(data_dir, topic)) > 100, timeout=30)
        broker.kill()
        assert _partition_dirs(data_dir, topic)
        assert topic not in _topics_json(data_dir)
        broker.start()
        assert not _partition_dirs(data_dir, topic)
        assert "orphan partition director" in broker.log_text()
        assert broker.terminate() == 0
