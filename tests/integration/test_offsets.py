"""ListOffsets, timestamps, out-of-range resets, size limits and fetch long polls,
as real clients experience them."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time

import aiokafka
import aiokafka.errors as aerr
import kafka.errors as kerr
import pytest
from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import OffsetSpec as COffsetSpec
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, OffsetSpec

from .clients import KCAT, ConfluentDeliveryError, Msg, consume, now_ms, produce, stored_batches

T0 = now_ms() - 600_000  # ten minutes ago, on a whole second
T0 -= T0 % 1000


def _produce_timed(bootstrap: str, topic: str, offsets_ts: list[int]) -> None:
    """One batch per record (separate sends), with the given timestamps."""
    for ts in offsets_ts:
        produce("kafka-python", bootstrap, topic, [Msg(b"k", b"ts-%d" % ts, timestamp=ts)])


def _kcat_query(bootstrap: str, topic: str, partition: int, ts: int) -> int:
    proc = subprocess.run([KCAT, "-b", bootstrap, "-Q", "-t", f"{topic}:{partition}:{ts}"],
                          capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    # "topic [0] offset N"
    return int(proc.stdout.split()[-1])


def _kafka_consumer(bootstrap: str, **config) -> KafkaConsumer:
    conf = {"enable_auto_commit": False, "fetch_max_wait_ms": 100}
    conf.update(config)
    return KafkaConsumer(bootstrap_servers=bootstrap, **conf)


def _confluent_consumer(bootstrap: str, **config) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": "offsets-tests",
            "enable.auto.commit": False, "fetch.wait.max.ms": 100}
    conf.update(config)
    return Consumer(conf)


def test_list_offsets_earliest_latest_every_client(txbroker, topic):
    txbroker.create_topic(topic, 2)
    produce("confluent", txbroker.bootstrap, topic, [Msg(None, b"v%d" % i, partition=0)
                                                     for i in range(7)])
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    consumer = _kafka_consumer(txbroker.bootstrap)
    try:
        assert consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
        assert consumer.end_offsets([tp0, tp1]) == {tp0: 7, tp1: 0}
    finally:
        consumer.close()

    async def aio():
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=txbroker.bootstrap)
        await c.start()
        try:
            atp = aiokafka.TopicPartition(topic, 0)
            return (await c.beginning_offsets([atp]))[atp], (await c.end_offsets([atp]))[atp]
        finally:
            await c.stop()

    assert asyncio.run(aio()) == (0, 7)

    cc = _confluent_consumer(txbroker.bootstrap)
    try:
        assert cc.get_watermark_offsets(CTP(topic, 0), timeout=10, cached=False) == (0, 7)
        assert cc.get_watermark_offsets(CTP(topic, 1), timeout=10, cached=False) == (0, 0)
    finally:
        cc.close()

    assert _kcat_query(txbroker.bootstrap, topic, 0, -1) == 7
    assert _kcat_query(txbroker.bootstrap, topic, 0, -2) == 0


def test_offsets_for_times_every_client(txbroker, topic):
    """First offset whose timestamp is >= the target, even when timestamps are not
    monotonic; none (-1) past the largest timestamp."""
    txbroker.create_topic(topic, 1)
    stamps = [T0, T0 + 5000, T0 + 2000, T0 + 7000, T0 + 7000, T0 + 9000]
    _produce_timed(txbroker.bootstrap, topic, stamps)
    # Also a multi-record batch: the answer may point inside a batch.
    produce("confluent", txbroker.bootstrap, topic,
            [Msg(None, b"b%d" % i, timestamp=T0 + 20_000 + i * 1000) for i in range(3)],
            **{"linger.ms": 50})
    cases = {
        T0 - 1000: (0, T0),
        T0: (0, T0),
        T0 + 1000: (1, T0 + 5000),
        T0 + 2000: (1, T0 + 5000),
        T0 + 5500: (3, T0 + 7000),
        T0 + 8000: (5, T0 + 9000),
        T0 + 21_000: (7, T0 + 21_000),
        T0 + 21_500: (8, T0 + 22_000),
        T0 + 99_000: None,
    }
    tp = TopicPartition(topic, 0)
    consumer = _kafka_consumer(txbroker.bootstrap)
    try:
        for target, want in cases.items():
            got = consumer.offsets_for_times({tp: target})[tp]
            assert (None if got is None else (got.offset, got.timestamp)) == want, target
    finally:
        consumer.close()

    async def aio():
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=txbroker.bootstrap)
        await c.start()
        try:
            atp = aiokafka.TopicPartition(topic, 0)
            out = {}
            for target in cases:
                got = (await c.offsets_for_times({atp: target}))[atp]
                out[target] = None if got is None else (got.offset, got.timestamp)
            return out
        finally:
            await c.stop()

    assert asyncio.run(aio()) == cases

    cc = _confluent_consumer(txbroker.bootstrap)
    try:
        for target, want in cases.items():
            (res,) = cc.offsets_for_times([CTP(topic, 0, target)], timeout=10)
            assert res.error is None
            assert res.offset == (-1 if want is None else want[0]), target
    finally:
        cc.close()

    for target, want in cases.items():
        assert _kcat_query(txbroker.bootstrap, topic, 0, target) == \
            (-1 if want is None else want[0]), target


def test_admin_list_offsets_specs(txbroker, topic):
    """Admin ListOffsets: earliest, latest, max timestamp (KIP-734, the record
    inside its batch) and by timestamp, from both admin clients."""
    txbroker.create_topic(topic, 1)
    _produce_timed(txbroker.bootstrap, topic, [T0, T0 + 5000, T0 + 2000])
    produce("confluent", txbroker.bootstrap, topic,
            [Msg(None, b"b", timestamp=T0 + d) for d in (100, 9000, 200)], **{"linger.ms": 50})
    assert len(stored_batches(txbroker, topic, 0)) == 4  # the last three in one batch
    expected = {
        "earliest": (0, -1), "latest": (6, -1), "max": (4, T0 + 9000), "ts": (1, T0 + 5000),
    }
    tp = TopicPartition(topic, 0)
    admin = KafkaAdminClient(bootstrap_servers=txbroker.bootstrap)
    try:
        specs = {"earliest": OffsetSpec.EARLIEST, "latest": OffsetSpec.LATEST,
                 "max": OffsetSpec.MAX_TIMESTAMP, "ts": T0 + 3000}
        got = {}
        for name, spec in specs.items():
            res = admin.list_partition_offsets({tp: spec})[tp]
            got[name] = (res.offset, res.timestamp)
        assert got == expected
    finally:
        admin.close()
    cadmin = AdminClient({"bootstrap.servers": txbroker.bootstrap})
    cspecs = {"earliest": COffsetSpec.earliest(), "latest": COffsetSpec.latest(),
              "max": COffsetSpec.max_timestamp(), "ts": COffsetSpec.for_timestamp(T0 + 3000)}
    got = {}
    for name, spec in cspecs.items():
        (future,) = cadmin.list_offsets({CTP(topic, 0): spec}).values()
        res = future.result(10)
        got[name] = (res.offset, res.timestamp)
    assert got == expected


def test_seek_to_timestamp(txbroker, topic):
    txbroker.create_topic(topic, 1)
    _produce_timed(txbroker.bootstrap, topic, [T0 + i * 1000 for i in range(6)])
    tp = TopicPartition(topic, 0)
    consumer = _kafka_consumer(txbroker.bootstrap)
    try:
        consumer.assign([tp])
        found = consumer.offsets_for_times({tp: T0 + 3500})[tp]
        consumer.seek(tp, found.offset)
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                got += [(m.offset, m.timestamp) for m in batch]
        assert got == [(4, T0 + 4000), (5, T0 + 5000)]
    finally:
        consumer.close()

    cc = _confluent_consumer(txbroker.bootstrap)
    try:
        (start,) = cc.offsets_for_times([CTP(topic, 0, T0 + 1000)], timeout=10)
        cc.assign([start])
        msgs = []
        deadline = time.monotonic() + 10
        while len(msgs) < 5 and time.monotonic() < deadline:
            msgs += [m for m in cc.consume(5, timeout=0.2) if not m.error()]
        assert [(m.offset(), m.timestamp()[1]) for m in msgs] == [
            (i, T0 + i * 1000) for i in range(1, 6)]
    finally:
        cc.close()


# --- OFFSET_OUT_OF_RANGE -----------------------------------------------------------------


def test_out_of_range_kafka_python(txbroker, topic):
    txbroker.create_topic(topic, 1)
    produce("kafka-python", txbroker.bootstrap, topic, [Msg(None, b"v%d" % i) for i in range(5)])
    tp = TopicPartition(topic, 0)

    got = consume("kafka-python", txbroker.bootstrap, topic, [0], 5, start=100,
                  auto_offset_reset="earliest")
    assert [r.offset for r in got] == [0, 1, 2, 3, 4]

    latest = _kafka_consumer(txbroker.bootstrap, auto_offset_reset="latest")
    try:
        latest.assign([tp])
        latest.seek(tp, 100)
        assert latest.poll(timeout_ms=1000) == {}
        assert latest.position(tp) == 5
        produce("kafka-python", txbroker.bootstrap, topic, [Msg(None, b"after")])
        records = []
        deadline = time.monotonic() + 10
        while not records and time.monotonic() < deadline:
            records = [m for b in latest.poll(timeout_ms=200).values() for m in b]
        assert [(m.offset, m.value) for m in records] == [(5, b"after")]
    finally:
        latest.close()

    strict = _kafka_consumer(txbroker.bootstrap, auto_offset_reset="none")
    try:
        strict.assign([tp])
        strict.seek(tp, 100)
        with pytest.raises(kerr.OffsetOutOfRangeError):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                strict.poll(timeout_ms=200)
    finally:
        strict.close()


def test_out_of_range_aiokafka(txbroker, topic):
    txbroker.create_topic(topic, 1)
    produce("aiokafka", txbroker.bootstrap, topic, [Msg(None, b"v%d" % i) for i in range(3)])
    got = consume("aiokafka", txbroker.bootstrap, topic, [0], 3, start=42,
                  auto_offset_reset="earliest")
    assert [r.value for r in got] == [b"v0", b"v1", b"v2"]

    async def strict():
        c = aiokafka.AIOKafkaConsumer(bootstrap_servers=txbroker.bootstrap,
                                      auto_offset_reset="none", enable_auto_commit=False)
        await c.start()
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            c.assign([tp])
            c.seek(tp, 42)
            with pytest.raises(aerr.OffsetOutOfRangeError):
                await c.getmany(timeout_ms=5000)
        finally:
            await c.stop()

    asyncio.run(strict())


def test_out_of_range_confluent(txbroker, topic):
    txbroker.create_topic(topic, 1)
    produce("confluent", txbroker.bootstrap, topic, [Msg(None, b"v%d" % i) for i in range(3)])
    got = consume("confluent", txbroker.bootstrap, topic, [0], 3, start=77,
                  **{"auto.offset.reset": "earliest"})
    assert [r.offset for r in got] == [0, 1, 2]

    cc = _confluent_consumer(txbroker.bootstrap, **{"auto.offset.reset": "error"})
    try:
        cc.assign([CTP(topic, 0, 77)])
        error = None
        deadline = time.monotonic() + 10
        while error is None and time.monotonic() < deadline:
            m = cc.poll(0.2)
            if m is not None:
                assert m.error() is not None, "read a record from an out-of-range offset"
                error = m.error()
        assert error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET
        assert "Offset out of range" in error.str()
    finally:
        cc.close()


# --- size limits -----------------------------------------------------------------------------


def test_message_too_large_reaches_every_producer(txbroker, topic):
    txbroker.create_topic(topic, 1, {"max.message.bytes": "1000"})
    big = b"z" * 5000
    with pytest.raises(kerr.MessageSizeTooLargeError):
        produce("kafka-python", txbroker.bootstrap, topic, [Msg(None, big)])
    with pytest.raises(aerr.MessageSizeTooLargeError):
        produce("aiokafka", txbroker.bootstrap, topic, [Msg(None, big)])
    with pytest.raises(ConfluentDeliveryError) as info:
        produce("confluent", txbroker.bootstrap, topic, [Msg(None, big)])
    assert info.value.err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    proc = subprocess.run([KCAT, "-b", txbroker.bootstrap, "-P", "-t", topic, "-p", "0"],
                          input=big + b"\n", capture_output=True, timeout=30)
    assert proc.returncode != 0 and b"Message size too large" in proc.stderr
    # Nothing was written; records under the limit still go in at offset 0.
    assert txbroker.call(lambda b: b.logs.get_log(topic, 0).log_end_offset) == 0
    assert produce("confluent", txbroker.bootstrap, topic, [Msg(None, b"small")]) == [(0, 0)]


def test_timestamps_too_far_in_the_future_are_refused(txbroker, topic):
    """message.timestamp.after.max.ms (1 h by default): INVALID_TIMESTAMP."""
    txbroker.create_topic(topic, 1)
    future = now_ms() + 2 * 3_600_000
    with pytest.raises(kerr.InvalidTimestampError):
        produce("kafka-python", txbroker.bootstrap, topic, [Msg(None, b"x", timestamp=future)])
    with pytest.raises(ConfluentDeliveryError) as info:
        produce("confluent", txbroker.bootstrap, topic, [Msg(None, b"x", timestamp=future)])
    assert info.value.err.code() == KafkaError.INVALID_TIMESTAMP
    assert txbroker.call(lambda b: b.logs.get_log(topic, 0).log_end_offset) == 0
    # Old timestamps are fine by default (before.max.ms is unlimited).
    old = now_ms() - 30 * 86_400_000
    assert produce("kafka-python", txbroker.bootstrap, topic,
                   [Msg(None, b"old", timestamp=old)]) == [(0, 0)]


def test_fetch_returns_a_first_batch_larger_than_the_limits(txbroker, topic):
    """KIP-74: the first batch is returned even when it exceeds the partition
    and response size limits, so consumers always make progress."""
    txbroker.create_topic(topic, 2)
    values = [b"a" * 20_000, b"b" * 20_000]
    produce("confluent", txbroker.bootstrap, topic,
            [Msg(None, v, partition=p) for p in (0, 1) for v in values], **{"linger.ms": 0})
    limits = {
        "kafka-python": {"max_partition_fetch_bytes": 1024, "fetch_max_bytes": 2048},
        "aiokafka": {"max_partition_fetch_bytes": 1024, "fetch_max_bytes": 2048},
        "confluent": {"max.partition.fetch.bytes": 1024, "fetch.max.bytes": 2048,
                      "message.max.bytes": 1000},
    }
    for client, config in limits.items():
        got = consume(client, txbroker.bootstrap, topic, [0, 1], 4, timeout=10, **config)
        assert [(r.partition, r.value) for r in got] == [
            (p, v) for p in (0, 1) for v in values], client


# --- fetch long poll ---------------------------------------------------------------------------


def _fetches(txbroker) -> int:
    return txbroker.call(lambda b: b.request_counts.get("fetch", 0))


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_fetch_long_poll_wakes_on_produce(txbroker, topic, client):
    """A consumer parked on an empty partition (max wait 3 s) gets a record produced
    1 s later within a fraction of a second, having sent only a few Fetches."""
    txbroker.create_topic(topic, 1)
    if client == "kafka-python":
        consumer = _kafka_consumer(txbroker.bootstrap, fetch_max_wait_ms=3000,
                                   auto_offset_reset="earliest")
        consumer.assign([TopicPartition(topic, 0)])

        def poll():
            return [(m.value, time.monotonic()) for b in consumer.poll(timeout_ms=200).values()
                    for m in b]
    else:
        consumer = _confluent_consumer(txbroker.bootstrap, **{"fetch.wait.max.ms": 3000,
                                                              "auto.offset.reset": "earliest"})
        consumer.assign([CTP(topic, 0, 0)])

        def poll():
            return [(m.value(), time.monotonic()) for m in consumer.consume(1, timeout=0.2)
                    if not m.error()]
    try:
        # Let the consumer reach its long poll.
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert poll() == []
        before = _fetches(txbroker)
        sent_at: list[float] = []

        def send_later():
            time.sleep(1.0)
            produce("kafka-python", txbroker.bootstrap, topic, [Msg(None, b"wake up")],
                    acks=1)
            sent_at.append(time.monotonic())

        sender = threading.Thread(target=send_later)
        sender.start()
        received = []
        deadline = time.monotonic() + 10
        while not received and time.monotonic() < deadline:
            received = poll()
        sender.join()
        assert [v for v, _t in received] == [b"wake up"]
        latency = received[0][1] - sent_at[0]
        # Answered by the wake-up, not by the 3 s max wait expiring.
        assert latency < 0.8, f"record arrived {latency:.2f}s after the produce was acknowledged"
        fetches = _fetches(txbroker) - before
        # The wait took ~1.3 s: a busy loop would have sent hundreds of Fetches.
        assert fetches <= 4, f"{fetches} fetches while waiting"
    finally:
        consumer.close()


def test_fetch_max_wait_is_honoured_on_idle_partition(txbroker, topic):
    """With nothing to read, each Fetch waits max_wait before the answer."""
    txbroker.create_topic(topic, 1)
    consumer = _kafka_consumer(txbroker.bootstrap, fetch_max_wait_ms=500)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        consumer.poll(timeout_ms=300)
        before = _fetches(txbroker)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            assert consumer.poll(timeout_ms=200) == {}
        fetches = _fetches(txbroker) - before
        assert 2 <= fetches <= 6, fetches  # ~4 in 2 s
    finally:
        consumer.close()
