"""Compressed batches from every client are stored exactly as produced (codec
bits intact, no recompression) and read back by every client."""

from __future__ import annotations

import pytest
from txbroker.protocol.records import Compression

from .clients import CONSUMERS, PRODUCERS, Msg, consume, produce, stored_batches, stored_records

CODECS = ["gzip", "snappy", "lz4", "zstd"]


def _config(producer: str, codec: str) -> dict:
    if producer == "kafka-python":
        return {"compression_type": codec, "linger_ms": 50}
    if producer == "aiokafka":
        return {"compression_type": codec, "linger_ms": 50}
    if producer == "confluent":
        return {"compression.codec": codec, "linger.ms": 50}
    return {"extra": ["-X", f"compression.codec={codec}", "-X", "linger.ms=50"]}


def _values(producer: str) -> list[bytes]:
    # Repetitive enough that every codec shrinks it (librdkafka sends a batch
    # uncompressed when compression does not pay).
    return [f"{producer}-{i}-".encode() + b"compressible payload " * 40 for i in range(3)]


@pytest.mark.parametrize("codec", CODECS)
def test_codec_stored_as_produced_and_read_by_all(txbroker, topic, codec):
    txbroker.create_topic(topic, len(PRODUCERS))
    expected = []
    for partition, producer in enumerate(PRODUCERS):
        values = _values(producer)
        msgs = [Msg(b"k%d" % i, v, partition=partition) for i, v in enumerate(values)]
        produce(producer, txbroker.bootstrap, topic, msgs, **_config(producer, codec))
        expected += [(partition, i, b"k%d" % i, v) for i, v in enumerate(values)]

        batches = stored_batches(txbroker, topic, partition)
        assert sum(h.records_count for h in batches) == 3, producer
        assert [h.compression.name.lower() for h in batches] == [codec] * len(batches), producer
        # The broker's own record reader understands every client's framing.
        assert [r.value for r in stored_records(txbroker, topic, partition)] == values

    for consumer in CONSUMERS:
        got = consume(consumer, txbroker.bootstrap, topic, range(len(PRODUCERS)), len(expected))
        assert [(r.partition, r.offset, r.key, r.value) for r in got] == expected, consumer


# librdkafka enables its LZ4 feature only when the broker advertises FindCoordinator
# (its feature map ties LZ4 to FindCoordinator v0); without it LZ4 batches go out
# uncompressed. This guards that coupling.
@pytest.mark.parametrize("producer", ["confluent", "kcat"])
def test_librdkafka_lz4_batches_are_compressed(txbroker, topic, producer):
    txbroker.create_topic(topic, 1)
    msgs = [Msg(b"k", v) for v in _values(producer)]
    produce(producer, txbroker.bootstrap, topic, msgs, **_config(producer, "lz4"))
    batches = stored_batches(txbroker, topic, 0)
    assert batches and all(h.compression == Compression.LZ4 for h in batches)


def test_mixed_codecs_in_one_partition(txbroker, topic):
    """Batches of different codecs interleave in one partition; a fetch returns
    them all and each client decodes each batch by its own attributes."""
    txbroker.create_topic(topic, 1)
    expected = []
    plan = [("kafka-python", "gzip"), ("aiokafka", "zstd"), ("confluent", "snappy"),
            ("kafka-python", "lz4"), ("kcat", "gzip"), ("confluent", "zstd")]
    for n, (producer, codec) in enumerate(plan):
        values = [v + b"%d" % n for v in _values(producer)]
        produce(producer, txbroker.bootstrap, topic, [Msg(b"m", v) for v in values],
                **_config(producer, codec))
        expected += values
    codecs = [h.compression.name.lower() for h in stored_batches(txbroker, topic, 0)]
    assert {c for _p, c in plan} == set(codecs)
    for consumer in CONSUMERS:
        got = consume(consumer, txbroker.bootstrap, topic, [0], len(expected))
        assert [r.value for r in got] == expected, consumer
        assert [r.offset for r in got] == list(range(len(expected)))
