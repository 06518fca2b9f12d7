"""Round trips through the broker with real clients: kafka-python, aiokafka,
confluent-kafka (librdkafka) and kcat. Each client's output must be readable,
identically, by every other client."""

from __future__ import annotations

import json
import subprocess

import pytest
from kafka.partitioner.default import murmur2

from .clients import (
    CONSUMERS,
    CREATE_TIME,
    KCAT,
    LOG_APPEND_TIME,
    PRODUCERS,
    Msg,
    Rec,
    consume,
    now_ms,
    produce,
    stored_batches,
)

BASE_TS = now_ms() - 60_000  # a minute ago: inside the broker's accepted timestamp range


def _kafka_partition(key: bytes, partitions: int) -> int:
    """The Java client's default partitioner (murmur2), as kafka-python implements it."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def _messages(client: str) -> list[Msg]:
    """Keys, values, null key, null value, repeated header keys; explicit timestamps
    where the client can set them (kcat cannot, and sends one header set per call)."""
    ts = None if client == "kcat" else BASE_TS
    hdrs = (("trace", b"t-1"), ("dup", b"a"), ("dup", b"b"))
    return [
        Msg(b"key-0", b"value-0", hdrs, None if ts is None else ts + 0),
        Msg(b"key-1", b"value one", hdrs, None if ts is None else ts + 1),
        Msg(None, b"no key", (), None if ts is None else ts + 2),
        Msg(b"tombstone", None, (), None if ts is None else ts + 3),
        Msg(b"key-4", b"x" * 1000, (("h", b"last"),), None if ts is None else ts + 4),
    ]


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "confluent"])
def test_round_trip_same_client(txbroker, topic, client):
    txbroker.create_topic(topic, 1)
    # Empty key and value are not null (kcat cannot tell them apart, these can).
    msgs = _messages(client) + [Msg(b"", b"", (("empty", b""),), BASE_TS + 5)]
    placed = produce(client, txbroker.bootstrap, topic, msgs)
    assert placed == [(0, i) for i in range(len(msgs))]
    got = consume(client, txbroker.bootstrap, topic, [0], len(msgs))
    assert got == [
        Rec(0, i, m.key, m.value, m.headers, m.timestamp, CREATE_TIME) for i, m in enumerate(msgs)
    ]


@pytest.mark.parametrize("producer", PRODUCERS)
def test_cross_client(txbroker, topic, producer):
    """Produce with one client, read the same records back with every client."""
    txbroker.create_topic(topic, 1)
    msgs = _messages(producer)
    before = now_ms()
    placed = produce(producer, txbroker.bootstrap, topic, msgs)
    after = now_ms()
    if producer != "kcat":  # kcat does not report where its records went
        assert placed == [(0, i) for i in range(len(msgs))]
    results = {c: consume(c, txbroker.bootstrap, topic, [0], len(msgs)) for c in CONSUMERS}
    reference = results["kafka-python"]
    assert [(r.offset, r.key, r.value, r.headers) for r in reference] == [
        (i, m.key, m.value, m.headers) for i, m in enumerate(msgs)
    ]
    for r, m in zip(reference, msgs, strict=True):
        assert r.timestamp_type == CREATE_TIME
        if m.timestamp is not None:
            assert r.timestamp == m.timestamp
        else:
            assert before - 1000 <= r.timestamp <= after + 1000
    for client, recs in results.items():
        assert recs == reference, f"{client} read something else than kafka-python"


@pytest.mark.parametrize("producer", PRODUCERS)
def test_keys_choose_partitions_like_kafka(txbroker, topic, producer):
    """With murmur2 partitioning (the Java default; librdkafka's murmur2_random),
    every client puts a key where Kafka would, and a key always in one partition."""
    partitions = 4
    txbroker.create_topic(topic, partitions)
    keys = [f"user-{i}".encode() for i in range(12)]
    msgs = [Msg(k, b"v-" + k) for k in keys] + [Msg(k, b"again-" + k) for k in keys[:4]]
    config = {}
    if producer == "confluent":
        config = {"partitioner": "murmur2_random"}
    elif producer == "kcat":
        config = {"extra": ["-X", "partitioner=murmur2_random"]}
    placed = produce(producer, txbroker.bootstrap, topic, msgs, **config)
    if producer != "kcat":
        assert [p for p, _o in placed] == [_kafka_partition(m.key, partitions) for m in msgs]
    got = consume("kafka-python", txbroker.bootstrap, topic, range(partitions), len(msgs))
    assert len(got) == len(msgs)
    by_key: dict[bytes, set[int]] = {}
    for r in got:
        assert r.partition == _kafka_partition(r.key, partitions), r
        by_key.setdefault(r.key, set()).add(r.partition)
    assert all(len(ps) == 1 for ps in by_key.values())
    # Records of one key keep their order within the partition.
    for k in keys[:4]:
        values = [r.value for r in got if r.key == k]
        assert values == [b"v-" + k, b"again-" + k]
    # Each partition's offsets are dense from 0.
    for p in range(partitions):
        offsets = [r.offset for r in got if r.partition == p]
        assert offsets == list(range(len(offsets)))
    assert len({r.partition for r in got}) > 1  # 12 keys do not all hash to one partition


def test_explicit_partitions_across_clients(txbroker, topic):
    txbroker.create_topic(topic, 3)
    for i, producer in enumerate(PRODUCERS):
        msgs = [Msg(f"{producer}-{j}".encode(), b"p", partition=(i + j) % 3) for j in range(3)]
        placed = produce(producer, txbroker.bootstrap, topic, msgs)
        assert [p for p, _o in placed] == [(i + j) % 3 for j in range(3)]
    for consumer in CONSUMERS:
        got = consume(consumer, txbroker.bootstrap, topic, [0, 1, 2], 12)
        assert len(got) == 12, consumer
        for r in got:
            name, j = r.key.decode().rsplit("-", 1)
            assert r.partition == (PRODUCERS.index(name) + int(j)) % 3
        assert sorted(r.offset for r in got if r.partition == 0) == [0, 1, 2, 3]


def test_idempotent_producers_write_sequenced_batches(txbroker, topic):
    """kafka-python 3.x is idempotent by default, librdkafka when asked: the stored
    batches carry their producer ids and gapless sequences."""
    txbroker.create_topic(topic, 1)
    produce("kafka-python", txbroker.bootstrap, topic, [Msg(b"k", b"a%d" % i) for i in range(3)])
    produce("confluent", txbroker.bootstrap, topic, [Msg(b"k", b"b%d" % i) for i in range(3)],
            **{"enable.idempotence": True})
    batches = stored_batches(txbroker, topic, 0)
    pids = []
    for h in batches:
        assert h.producer_id >= 0 and h.producer_epoch >= 0, h
        if h.producer_id not in pids:
            pids.append(h.producer_id)
    assert len(pids) == 2
    for pid in pids:
        own = [h for h in batches if h.producer_id == pid]
        assert own[0].base_sequence == 0
        for prev, cur in zip(own, own[1:], strict=False):
            assert cur.base_sequence == prev.base_sequence + prev.records_count
        assert sum(h.records_count for h in own) == 3
    got = consume("confluent", txbroker.bootstrap, topic, [0], 6)
    assert [r.value for r in got] == [b"a0", b"a1", b"a2", b"b0", b"b1", b"b2"]


def test_log_append_time_topic(txbroker, topic):
    """message.timestamp.type=LogAppendTime: the broker's clock wins, and every
    client sees the timestamp type."""
    txbroker.create_topic(topic, 1, {"message.timestamp.type": "LogAppendTime"})
    old = now_ms() - 3_600_000
    before = now_ms()
    produce("confluent", txbroker.bootstrap, topic, [Msg(b"k", b"v", timestamp=old)])
    produce("kafka-python", txbroker.bootstrap, topic, [Msg(b"k2", b"v2", timestamp=old)])
    after = now_ms()
    for consumer in CONSUMERS:
        got = consume(consumer, txbroker.bootstrap, topic, [0], 2)
        assert [r.value for r in got] == [b"v", b"v2"], consumer
        for r in got:
            assert r.timestamp_type == LOG_APPEND_TIME, (consumer, r)
            assert before - 5 <= r.timestamp <= after + 5, (consumer, r)


def test_large_values_across_clients(txbroker, topic):
    """Values of a few hundred KiB: one batch per record, well under the limits."""
    txbroker.create_topic(topic, 1)
    values = [(chr(ord("a") + i) * (300 * 1024)).encode() for i in range(3)]
    produce("confluent", txbroker.bootstrap, topic, [Msg(b"k%d" % i, v) for i, v in
                                                       enumerate(values)])
    for consumer in CONSUMERS:
        got = consume(consumer, txbroker.bootstrap, topic, [0], 3)
        assert [r.value for r in got] == values, consumer


def test_kcat_metadata_list(txbroker, topic):
    txbroker.create_topic(topic, 3)
    proc = subprocess.run([KCAT, "-b", txbroker.bootstrap, "-L", "-J"], capture_output=True,
                          timeout=30)
    assert proc.returncode == 0, proc.stderr
    meta = json.loads(proc.stdout)
    assert meta["controllerid"] == 1
    assert [b["name"] for b in meta["brokers"]] == [txbroker.bootstrap]
    (entry,) = [t for t in meta["topics"] if t["topic"] == topic]
    assert [p["partition"] for p in entry["partitions"]] == [0, 1, 2]
    for p in entry["partitions"]:
        assert p["leader"] == 1
        assert [r["id"] for r in p["replicas"]] == [1]
        assert [r["id"] for r in p["isrs"]] == [1]
        assert "error" not in p
