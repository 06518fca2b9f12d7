"""Produce and fetch with every codec, on txbroker and on Apache Kafka: the records a
consumer reads back are the ones produced (keys, values, headers, timestamps), at
offsets 0..n-1 of each partition."""

from __future__ import annotations

import pytest

from tests.integration.clients import Msg, consume, produce

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
BASE_TS = 1_700_000_000_000
# Records stamped BASE_TS are years old: under the default retention.ms (7 days) a
# broker's retention check may delete them between produce and fetch, the active
# segment's too (Kafka's runs every 5 min; a kafka-python read then found the log start
# at 100 and nothing). The topics of this file keep them.
KEEP = {"retention.ms": "-1"}


def messages(n: int) -> list[Msg]:
    out = []
    for i in range(n):
        headers = (("h", f"v{i}".encode()), ("empty", b"")) if i % 3 == 0 else ()
        key = None if i % 5 == 0 else f"key-{i}".encode()
        value = None if i % 17 == 16 else (f"value-{i}-".encode() * (1 + i % 40))
        out.append(Msg(key, value, headers, BASE_TS + i, i % 2))
    return out


@pytest.mark.kafka_ci
@pytest.mark.parametrize("codec", CODECS)
def test_produce_fetch_every_codec(broker, codec):
    """confluent-kafka produces 200 records (nulls, headers, repetitive values that
    compress) compressed with ``codec``; confluent-kafka and kafka-python read them back."""
    topic = broker.topic(f"codec-{codec}", partitions=2, configs=KEEP)
    msgs = messages(200)
    acks = produce("confluent", broker.bootstrap, topic, msgs, **{
        "compression.type": codec, "linger.ms": 50, "enable.idempotence": True})
    by_partition: dict[int, list[int]] = {0: [], 1: []}
    for partition, offset in acks:
        by_partition[partition].append(offset)
    assert by_partition == {0: list(range(100)), 1: list(range(100))}

    for client in ("confluent", "kafka-python"):
        got = consume(client, broker.bootstrap, topic, [0, 1], len(msgs))
        assert [(r.partition, r.offset) for r in got] == (
            [(0, o) for o in range(100)] + [(1, o) for o in range(100)]), client
        expected = sorted(msgs, key=lambda m: (m.partition, m.timestamp))
        assert [(r.key, r.value, r.headers, r.timestamp, r.timestamp_type) for r in got] == [
            (m.key, m.value, m.headers, m.timestamp, "create") for m in expected], client


@pytest.mark.parametrize("codec", ("gzip", "zstd"))
def test_produce_codec_per_topic_config(broker, codec):
    """A topic with compression.type set: what the producer sent uncompressed reads back
    the same (the broker recompresses on Kafka; txbroker documents what it does)."""
    topic = broker.topic(f"topic-codec-{codec}", configs={"compression.type": codec, **KEEP})
    msgs = [Msg(f"k{i}".encode(), f"v{i}".encode() * 10, (), BASE_TS + i, 0) for i in range(50)]
    produce("confluent", broker.bootstrap, topic, msgs, **{"compression.type": "none"})
    got = consume("confluent", broker.bootstrap, topic, [0], len(msgs))
    assert [(r.offset, r.key, r.value) for r in got] == [
        (i, m.key, m.value) for i, m in enumerate(msgs)]
