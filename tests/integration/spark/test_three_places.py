"""One ingestion job, three places, one output.

``txbroker.spark_jobs.ingest.ingest`` runs unchanged (only ``source_format`` differs) on
(a) the ``txbroker`` source against txbroker, (b) Spark's Kafka connector against
txbroker and (c) Spark's Kafka connector against Apache Kafka (tests/kafka_reference.py,
``kafka`` marker: ``make test-kafka``). The same input — committed, aborted,
non-transactional records and a transaction left open, with fixed timestamps — gives
the same Parquet rows, offsets and date partitions included, in all three.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

import pytest
from txbroker.spark_jobs.ingest import ingest

from tests.helpers import wait_until
from tests.integration.spark.conftest import connector_missing

TOPIC = "three-places"
PARTITIONS = 2
# Two seconds before a UTC midnight: the records straddle two `date` partitions.
BASE_MS = int(dt.datetime(2025, 12, 31, 23, 59, 58, tzinfo=dt.UTC).timestamp() * 1000)


@dataclass(frozen=True)
class Rec:
    partition: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


@dataclass(frozen=True)
class Txn:
    """Records written one after the other; ``end`` is commit, abort, open or plain
    (an idempotent producer, no transaction: no marker)."""

    end: str
    records: tuple[Rec, ...]


def _recs(tag: str, n: int, first_ms: int, key: bool = True) -> tuple[Rec, ...]:
    return tuple(Rec(i % PARTITIONS, b"%s-k%d" % (tag.encode(), i) if key else None,
                     b"%s-v%d" % (tag.encode(), i), first_ms + 500 * i) for i in range(n))


# The input, in the order it is written. Each step completes before the next, so the
# offsets (one per record, one per transaction marker in each partition touched) are
# the same on every broker.
SCRIPT: tuple[Txn, ...] = (
    Txn("commit", _recs("c1", 6, BASE_MS)),
    Txn("abort", _recs("a1", 4, BASE_MS + 100)),
    Txn("plain", _recs("p1", 2, BASE_MS + 200)),
    Txn("commit", (*_recs("c2", 4, BASE_MS + 3000, key=False),
                   Rec(0, b"tombstone", None, BASE_MS + 5000))),
    Txn("abort", _recs("a2", 2, BASE_MS + 6000)),
    Txn("commit", _recs("c3", 3, BASE_MS + 7000)),
    Txn("open", _recs("o1", 2, BASE_MS + 8000)),  # holds back the last stable offset
    Txn("commit", _recs("c4", 4, BASE_MS + 9000)),  # committed, but above the open one
)


def layout() -> list[tuple[Txn, list[int], dict[int, int]]]:
    """Per step of SCRIPT: its records' offsets and the end offset (high watermark) of
    every partition once the step is complete. Offsets advance by one per record and
    by one per transaction marker in each partition the transaction touched."""
    next_offset = dict.fromkeys(range(PARTITIONS), 0)
    steps = []
    for txn in SCRIPT:
        offsets = []
        for r in txn.records:
            offsets.append(next_offset[r.partition])
            next_offset[r.partition] += 1
        if txn.end in ("commit", "abort"):
            for p in {r.partition for r in txn.records}:
                next_offset[p] += 1
        steps.append((txn, offsets, dict(next_offset)))
    return steps


def expected_rows() -> list[tuple]:
    """What read_committed ingestion must write, computed from SCRIPT alone: committed and
    non-transactional records, none at or past the first record of the open transaction."""
    lso: dict[int, int] = {}
    rows = []
    for txn, offsets, _ in layout():
        for r, offset in zip(txn.records, offsets, strict=True):
            if txn.end == "open":
                lso.setdefault(r.partition, offset)
            if txn.end in ("commit", "plain"):
                rows.append((r.partition, offset, r.key, r.value, r.timestamp_ms))
    return sorted(
        (TOPIC, p, o, k, v, ms, 0, dt.datetime.fromtimestamp(ms / 1000, dt.UTC).date().isoformat())
        for p, o, k, v, ms in rows if o < lso.get(p, 2**63))


def write_script(bootstrap: str) -> list:
    """Write SCRIPT; returns the producers (the open transaction's must stay alive).

    After each step it waits until every partition's high watermark is where layout()
    puts it: commit_transaction returns once the coordinator has decided, and Kafka
    writes the markers after that, so without the wait the next step's records could
    land before a marker and the offsets would differ from broker to broker."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    def producer(transactional: bool) -> Producer:
        conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5}
        if transactional:
            conf["transactional.id"] = f"three-places-{uuid.uuid4().hex[:8]}"
            conf["transaction.timeout.ms"] = 300_000
        p = Producer(conf)
        if transactional:
            p.init_transactions(30)
        return p

    committer, aborter, opener, plain = (producer(True), producer(True), producer(True),
                                         producer(False))
    by_end = {"commit": committer, "abort": aborter, "open": opener, "plain": plain}
    # read_uncommitted: the high watermark, not the last stable offset.
    watermarks = Consumer({"bootstrap.servers": bootstrap, "group.id": "three-places",
                           "isolation.level": "read_uncommitted"})
    errors: list = []
    delivered: dict[int, int] = {}  # record's index in the step -> its offset
    try:
        for txn, offsets, ends in layout():
            p = by_end[txn.end]
            if txn.end != "plain":
                p.begin_transaction()
            delivered.clear()
            for i, r in enumerate(txn.records):
                def report(err, msg, i: int = i) -> None:
                    if err is not None:
                        errors.append(err)
                    else:
                        delivered[i] = msg.offset()

                p.produce(TOPIC, key=r.key, value=r.value, partition=r.partition,
                          timestamp=r.timestamp_ms, on_delivery=report)
            assert p.flush(30) == 0 and not errors, errors
            # The same offsets on every broker, or the outputs could not be identical.
            assert [delivered[i] for i in range(len(offsets))] == offsets, txn
            if txn.end == "commit":
                p.commit_transaction(30)
            elif txn.end == "abort":
                p.abort_transaction(30)

            def written(ends: dict[int, int] = ends) -> bool:
                return all(watermarks.get_watermark_offsets(
                    TopicPartition(TOPIC, part), timeout=10, cached=False)[1] == end
                    for part, end in ends.items())

            assert wait_until(written, timeout=30, interval=0.05), (txn, ends)
    finally:
        watermarks.close()
    return [committer, aborter, opener, plain]


def ingested_rows(spark, output: str) -> list[tuple]:
    """Every column of the table; the timestamp as epoch milliseconds and the partition
    date as text, so that no time zone of this process enters the comparison."""
    df = spark.read.parquet(output).selectExpr(
        "topic", "partition", "offset", "key", "value", "unix_millis(timestamp) AS ms",
        "timestampType", "CAST(date AS STRING) AS date")
    return sorted(
        (r.topic, r.partition, r.offset, None if r.key is None else bytes(r.key),
         None if r.value is None else bytes(r.value), r.ms, r.timestampType, r.date)
        for r in df.collect())


def run_job(spark, bootstrap: str, source_format: str, tmp_path) -> list[tuple]:
    out, ckpt = tmp_path / f"out-{source_format}", tmp_path / f"ckpt-{source_format}"
    result = ingest(spark, bootstrap_servers=bootstrap, topic=TOPIC, output=str(out),
                    checkpoint=str(ckpt), source_format=source_format,
                    max_offsets_per_trigger=10)
    rows = ingested_rows(spark, str(out))
    assert result.rows_written == len(rows)
    return rows


def test_script_expectation_is_not_trivial():
    rows = expected_rows()
    assert len(rows) == 16 and len({r[-1] for r in rows}) == 2
    assert any(r[3] is None for r in rows) and any(r[4] is None for r in rows)


def test_txbroker_source_and_connector_on_txbroker(spark, txbroker, tmp_path):
    """(a) and (b): the same job over the same topic, once per source."""
    why = connector_missing()
    if why:
        pytest.skip(why)
    txbroker.create_topic(TOPIC, PARTITIONS)
    producers = write_script(txbroker.bootstrap)
    expected = expected_rows()
    assert run_job(spark, txbroker.bootstrap, "txbroker", tmp_path) == expected
    assert run_job(spark, txbroker.bootstrap, "kafka", tmp_path) == expected
    # The checkpoints hold the same offsets JSON: where each query stopped (the last
    # stable offset of each partition), in Spark's Kafka source format.
    ends = {fmt: _last_offsets(tmp_path / f"ckpt-{fmt}") for fmt in ("txbroker", "kafka")}
    assert ends["txbroker"] == ends["kafka"]
    del producers


def _last_offsets(checkpoint) -> dict:
    """The source offsets of the checkpoint's last micro-batch, as parsed JSON."""
    import json

    last = max((p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()),
               key=lambda p: int(p.name))
    return json.loads(last.read_text().splitlines()[-1])


@pytest.mark.kafka
def test_connector_on_apache_kafka(spark, tmp_path):
    """(c): the same job on Spark's connector against Apache Kafka gives the rows of (a)
    and (b)."""
    from tests.kafka_reference import KafkaProcess, jars_available, jars_dir

    why = connector_missing() or (None if jars_available() else
                                  f"no Kafka jars in {jars_dir()} or no java: run "
                                  "`make kafka-jars`")
    if why:
        pytest.skip(why)
    with KafkaProcess(tmp_path / "kafka") as kafka:
        _create_topic(kafka.bootstrap)
        producers = write_script(kafka.bootstrap)
        assert run_job(spark, kafka.bootstrap, "kafka", tmp_path) == expected_rows()
        del producers


def _create_topic(bootstrap: str) -> None:
    from tests.differential.conftest import Broker

    host, port = bootstrap.rsplit(":", 1)
    broker = Broker("kafka", host, int(port))
    try:
        broker.create_topic(TOPIC, PARTITIONS)
    finally:
        broker.close()
