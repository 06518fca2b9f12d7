"""Thin, uniform wrappers around the real Kafka clients the integration tests use.

Every producer helper takes a list of ``Msg`` and returns one (partition, offset)
per message in order (``offset`` is None where the client cannot tell, as for
kcat). Every consumer helper reads partitions by explicit assignment (the
broker has no group coordinator requirement here) from a start offset and
returns ``Rec`` objects sorted by (partition, offset), so results from
different clients compare with ``==``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import time
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

KCAT = "/usr/bin/kcat"
log = logging.getLogger(__name__)

PRODUCERS = ("kafka-python", "aiokafka", "confluent", "kcat")
CONSUMERS = ("kafka-python", "aiokafka", "confluent", "kcat")

CREATE_TIME = "create"
LOG_APPEND_TIME = "append"


@dataclass(frozen=True)
class Msg:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None  # ms; None lets the client stamp it
    partition: int | None = None  # None: the client's partitioner decides


@dataclass(frozen=True)
class Rec:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    timestamp_type: str  # CREATE_TIME or LOG_APPEND_TIME


def unique_topic(prefix: str) -> str:
    clean = re.sub(r"[^a-zA-Z0-9._-]", "-", prefix)[:150]
    return f"{clean}-{uuid.uuid4().hex[:8]}"


def now_ms() -> int:
    return int(time.time() * 1000)


# --- producers -----------------------------------------------------------------


def produce_kafka_python(bootstrap: str, topic: str, msgs: Sequence[Msg], **config):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, **config)
    try:
        futures = [
            producer.send(topic, key=m.key, value=m.value, headers=list(m.headers),
                          timestamp_ms=m.timestamp, partition=m.partition)
            for m in msgs
        ]
        producer.flush(timeout=20)
        out = []
        for f in futures:
            md = f.get(timeout=20)
            out.append((md.partition, md.offset))
        return out
    finally:
        producer.close(timeout=5)


def produce_aiokafka(bootstrap: str, topic: str, msgs: Sequence[Msg], **config):
    from aiokafka import AIOKafkaProducer

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **config)
        await producer.start()
        try:
            futures = [
                await producer.send(topic, key=m.key, value=m.value, headers=list(m.headers),
                                    timestamp_ms=m.timestamp, partition=m.partition)
                for m in msgs
            ]
            results = await asyncio.wait_for(asyncio.gather(*futures), 20)
            return [(md.partition, md.offset) for md in results]
        finally:
            await producer.stop()

    return asyncio.run(run())


def produce_confluent(bootstrap: str, topic: str, msgs: Sequence[Msg], **config):
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5}
    conf.update(config)
    producer = Producer(conf)
    reports: dict[int, tuple] = {}

    def report(i):
        def cb(err, msg):
            reports[i] = (err, msg.partition(), msg.offset())
        return cb

    for i, m in enumerate(msgs):
        kwargs = {"key": m.key, "value": m.value, "on_delivery": report(i)}
        if m.headers:
            kwargs["headers"] = list(m.headers)
        if m.timestamp is not None:
            kwargs["timestamp"] = m.timestamp
        if m.partition is not None:
            kwargs["partition"] = m.partition
        producer.produce(topic, **kwargs)
    remaining = producer.flush(20)
    assert remaining == 0, f"{remaining} confluent-kafka messages not delivered"
    out = []
    for i in range(len(msgs)):
        err, partition, offset = reports[i]
        if err is not None:
            raise ConfluentDeliveryError(err)
        out.append((partition, offset))
    return out


class ConfluentDeliveryError(Exception):
    def __init__(self, err) -> None:
        super().__init__(str(err))
        self.err = err


def produce_kcat(bootstrap: str, topic: str, msgs: Sequence[Msg], *, extra=()):
    """kcat -P: one invocation per (partition, headers) group, newline-delimited,
    keys split at a tab. kcat cannot set timestamps; values must be text lines."""
    groups: list[tuple[int | None, tuple, list[Msg]]] = []
    for m in msgs:
        assert m.timestamp is None, "kcat cannot set record timestamps"
        if groups and groups[-1][0] == m.partition and groups[-1][1] == m.headers:
            groups[-1][2].append(m)
        else:
            groups.append((m.partition, m.headers, [m]))
    out: list[tuple[int | None, None]] = []
    for partition, headers, group in groups:
        cmd = [KCAT, "-b", bootstrap, "-P", "-t", topic, "-K", "\t", "-Z", "-q"]
        if partition is not None:
            cmd += ["-p", str(partition)]
        for hk, hv in headers:
            assert hv is not None, "kcat cannot send null header values"
            cmd += ["-H", f"{hk}={hv.decode()}"]
        cmd += list(extra)
        lines = []
        for m in group:
            for part in (m.key, m.value):
                assert part is None or (b"\n" not in part and b"\t" not in part)
            key = m.key if m.key is not None else b""
            value = m.value if m.value is not None else b""
            lines.append(key + b"\t" + value + b"\n")
        proc = subprocess.run(cmd, input=b"".join(lines), capture_output=True, timeout=30)
        assert proc.returncode == 0, f"kcat -P failed: {proc.stderr.decode()}"
        out.extend((partition, None) for _ in group)
    return out


def produce(client: str, bootstrap: str, topic: str, msgs: Sequence[Msg], **config):
    if client == "kafka-python":
        return produce_kafka_python(bootstrap, topic, msgs, **config)
    if client == "aiokafka":
        return produce_aiokafka(bootstrap, topic, msgs, **config)
    if client == "confluent":
        return produce_confluent(bootstrap, topic, msgs, **config)
    if client == "kcat":
        return produce_kcat(bootstrap, topic, msgs, **config)
    raise ValueError(client)


# --- consumers ----------------------------------------------------------------------


def _sorted(recs: Iterable[Rec]) -> list[Rec]:
    return sorted(recs, key=lambda r: (r.partition, r.offset))


class _RecentLog(logging.Handler):
    """The last ``limit`` log lines of a client library, kept in memory: printed only
    when a consumer comes back short, so a rare client stall can be explained."""

    def __init__(self, logger_name: str, limit: int = 400) -> None:
        super().__init__(logging.DEBUG)
        self.lines: deque[str] = deque(maxlen=limit)
        self.logger = logging.getLogger(logger_name)
        self.setFormatter(logging.Formatter("%(relativeCreated)d %(name)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))
        if record.levelno >= logging.WARNING:  # what would have propagated anyway
            logging.getLogger().handle(record)

    def __enter__(self) -> _RecentLog:
        # Not propagated: pytest's capture would otherwise format every DEBUG line.
        self.before = self.logger.level, self.logger.propagate
        self.logger.setLevel(logging.DEBUG)
        self.logger.propagate = False
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.before[0])
        self.logger.propagate = self.before[1]

    def report_if_short(self, got: int, wanted: int, what: str) -> None:
        if got < wanted:
            log.warning("%s read %d of %d records; its last log lines:\n%s",
                        what, got, wanted, "\n".join(self.lines))


def consume_kafka_python(bootstrap: str, topic: str, partitions: Sequence[int], count: int,
                         start: int = 0, timeout: float = 15, **config) -> list[Rec]:
    with _RecentLog("kafka") as recent:
        got = _consume_kafka_python(bootstrap, topic, partitions, count, start, timeout, **config)
        recent.report_if_short(len(got), count, f"kafka-python on {bootstrap} ({topic})")
    return got


def _consume_kafka_python(bootstrap: str, topic: str, partitions: Sequence[int], count: int,
                          start: int, timeout: float, **config) -> list[Rec]:
    from kafka import KafkaConsumer, TopicPartition

    conf = {"enable_auto_commit": False, "auto_offset_reset": "earliest",
            "fetch_max_wait_ms": 100}
    conf.update(config)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, **conf)
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, start)
        got: list[Rec] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for _tp, batch in consumer.poll(timeout_ms=200).items():
                for m in batch:
                    got.append(Rec(m.partition, m.offset, m.key, m.value,
                                   tuple((k, v) for k, v in m.headers), m.timestamp,
                                   LOG_APPEND_TIME if m.timestamp_type == 1 else CREATE_TIME))
        return _sorted(got)
    finally:
        consumer.close()


def consume_aiokafka(bootstrap: str, topic: str, partitions: Sequence[int], count: int,
                     start: int = 0, timeout: float = 15, **config) -> list[Rec]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run():
        conf = {"enable_auto_commit": False, "auto_offset_reset": "earliest",
                "fetch_max_wait_ms": 100}
        conf.update(config)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **conf)
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in partitions]
            consumer.assign(tps)
            for tp in tps:
                consumer.seek(tp, start)
            got: list[Rec] = []
            deadline = time.monotonic() + timeout
            while len(got) < count and time.monotonic() < deadline:
                for _tp, batch in (await consumer.getmany(timeout_ms=200)).items():
                    for m in batch:
                        got.append(Rec(m.partition, m.offset, m.key, m.value,
                                       tuple((k, v) for k, v in m.headers), m.timestamp,
                                       LOG_APPEND_TIME if m.timestamp_type == 1 else CREATE_TIME))
            return _sorted(got)
        finally:
            await consumer.stop()

    return asyncio.run(run())


def consume_confluent(bootstrap: str, topic: str, partitions: Sequence[int], count: int,
                      start: int = 0, timeout: float = 15, **config) -> list[Rec]:
    from confluent_kafka import Consumer, TopicPartition

    conf = {"bootstrap.servers": bootstrap, "group.id": "txbroker-tests-unused",
            "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100}
    conf.update(config)
    consumer = Consumer(conf)
    try:
        consumer.assign([TopicPartition(topic, p, start) for p in partitions])
        got: list[Rec] = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=max(count - len(got), 1), timeout=0.2):
                if m.error():
                    raise AssertionError(f"confluent consumer error: {m.error()}")
                ts_type, ts = m.timestamp()
                got.append(Rec(m.partition(), m.offset(), m.key(), m.value(),
                               tuple(m.headers() or ()), ts,
                               LOG_APPEND_TIME if ts_type == 2 else CREATE_TIME))
        return _sorted(got)
    finally:
        consumer.close()


def consume_kcat(bootstrap: str, topic: str, partitions: Sequence[int] | None, count: int,
                 start: int = 0, timeout: float = 15, extra=()) -> list[Rec]:
    """kcat -C -e -J: runs until the end of each partition; values must be UTF-8."""
    runs = [None] if partitions is None else list(partitions)
    got: list[Rec] = []
    for p in runs:
        cmd = [KCAT, "-b", bootstrap, "-C", "-t", topic, "-o", str(start), "-e", "-J", "-q"]
        if p is not None:
            cmd += ["-p", str(p)]
        cmd += list(extra)
        proc = subprocess.run(cmd, capture_output=True, timeout=timeout + 15)
        assert proc.returncode == 0, f"kcat -C failed: {proc.stderr.decode()}"
        for line in proc.stdout.decode().splitlines():
            if not line.strip():
                continue
            d = json.loads(line)
            flat = d.get("headers") or []
            headers = tuple(
                (flat[i], None if flat[i + 1] is None else flat[i + 1].encode())
                for i in range(0, len(flat), 2)
            )
            got.append(Rec(d["partition"], d["offset"],
                           None if d["key"] is None else d["key"].encode(),
                           None if d["payload"] is None else d["payload"].encode(),
                           headers, d["ts"],
                           LOG_APPEND_TIME if d["tstype"] == "logappend" else CREATE_TIME))
    return _sorted(got)


def consume(client: str, bootstrap: str, topic: str, partitions: Sequence[int], count: int,
            start: int = 0, timeout: float = 15, **config) -> list[Rec]:
    if client == "kafka-python":
        return consume_kafka_python(bootstrap, topic, partitions, count, start, timeout, **config)
    if client == "aiokafka":
        return consume_aiokafka(bootstrap, topic, partitions, count, start, timeout, **config)
    if client == "confluent":
        return consume_confluent(bootstrap, topic, partitions, count, start, timeout, **config)
    if client == "kcat":
        return consume_kcat(bootstrap, topic, partitions, count, start, timeout, **config)
    raise ValueError(client)


# --- broker-side inspection (in-process broker) ----------------------------------------


def stored_batches(txbroker, topic: str, partition: int):
    """BatchHeaders of every batch in the partition's log, read from the segment files."""
    from txbroker.protocol.records import iter_batches

    def read(broker):
        plog = broker.logs.get_log(topic, partition)
        assert plog is not None, f"no log for {topic}-{partition}"
        headers = []
        for seg in plog.segments:
            with open(seg.log_path, "rb") as f:
                data = f.read()
            headers.extend(h for _pos, h in iter_batches(data))
        return headers

    return txbroker.call(read)


def stored_records(txbroker, topic: str, partition: int):
    """Every record in the partition's log, decoded by the broker's own record reader."""
    from txbroker.protocol.records import decode_records, iter_batches

    def read(broker):
        plog = broker.logs.get_log(topic, partition)
        out = []
        for seg in plog.segments:
            with open(seg.log_path, "rb") as f:
                data = f.read()
            for pos, _h in iter_batches(data):
                out.extend(decode_records(data, pos))
        return out

    return txbroker.call(read)
