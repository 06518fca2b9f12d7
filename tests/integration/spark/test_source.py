"""Spark reads of a live txbroker with real transactional producers, through the
``txbroker`` source and through Spark's own Kafka connector (the ``source`` fixture,
``kafka.isolation.level=read_committed``): batch and streaming reads see exactly the
committed records, never past the last stable offset; restarts from a checkpoint are
exactly-once. Errors of the txbroker source are one clear line."""

from __future__ import annotations

import pytest
from txbroker.spark_jobs.ingest import ingest
from txbroker.spark_jobs.source import user_message

from tests.integration.spark_util import Ledger, Producer, produce_mixed, rows_of


def reader(spark, txbroker, topic, source="txbroker", **options):
    r = (spark.read.format(source).option("kafka.bootstrap.servers", txbroker.bootstrap)
         .option("subscribe", topic))
    if source == "kafka":
        r = r.option("kafka.isolation.level", "read_committed")  # the connector's default
        # is read_uncommitted
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_sees_exactly_the_committed_records(spark, txbroker, topic, source):
    txbroker.create_topic(topic, 2)
    ledger = Ledger()
    produce_mixed(txbroker.bootstrap, topic, 2, ledger, tag="b")
    df = reader(spark, txbroker, topic, source, includeHeaders="true")
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                          "timestampType", "headers"]
    rows = df.collect()
    got = sorted((r.partition, r.offset, r.key and bytes(r.key), bytes(r.value)) for r in rows)
    assert got == ledger.visible()
    assert not any(b"-a" in v or b"open" in v or b"late" in v for *_, v in got)
    assert {r.topic for r in rows} == {topic} and {r.timestampType for r in rows} == {0}
    headers = {bytes(r.value): r.headers for r in rows}
    assert [(h.key, bytes(h.value)) for h in headers[b"b-c0-3"]] == [("h", b"3")]
    assert headers[b"b-c0-1"] is None
    # endingOffsets / startingOffsets as JSON per partition, and minPartitions splitting.
    lso = ledger.open_first_offsets()
    part = reader(spark, txbroker, topic, source, startingOffsets=f'{{"{topic}":{{"0":5,"1":-2}}}}',
                  endingOffsets=f'{{"{topic}":{{"0":{lso[0] - 3},"1":-1}}}}', minPartitions="5")
    assert rows_of(part) == [r for r in ledger.visible()
                             if (r[0] == 0 and 5 <= r[1] < lso[0] - 3) or r[0] == 1]


def test_streaming_is_exactly_once_across_restarts(spark, txbroker, topic, tmp_path, source):
    from confluent_kafka.admin import AdminClient, NewPartitions

    txbroker.create_topic(topic, 2)
    ledger = Ledger()
    opener = produce_mixed(txbroker.bootstrap, topic, 2, ledger, tag="s1")
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def run(**kw):
        return ingest(spark, bootstrap_servers=txbroker.bootstrap, topic=topic, output=out,
                      checkpoint=ckpt, source_format=source, **kw)

    first = run(max_offsets_per_trigger=25)
    assert first.batches >= 3, first  # the limit splits the backlog into micro-batches
    stored = rows_of(spark.read.parquet(out))
    assert stored == ledger.visible() and first.rows_written == len(stored)

    # The open transaction commits, more is produced (some aborted, one transaction
    # left open again), and a partition is added: the next run picks up exactly the rest.
    opener.commit_open()
    admin = AdminClient({"bootstrap.servers": txbroker.bootstrap})
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    produce_mixed(txbroker.bootstrap, topic, 3, ledger, tag="s2")
    second = run()
    stored = rows_of(spark.read.parquet(out))
    assert stored == ledger.visible()
    assert len(stored) == len(set(stored)) == first.rows_written + second.rows_written
    assert {p for p, *_ in stored} == {0, 1, 2}
    # Nothing new: a third run writes nothing and finds nothing.
    assert run().rows_written == 0
    # The date partition column comes from the record timestamp.
    dates = spark.read.parquet(out).select("date").distinct().collect()
    assert len(dates) >= 1


def test_streaming_starts_at_latest_by_default(spark, txbroker, topic, tmp_path, source):
    txbroker.create_topic(topic, 1)
    ledger = Ledger()
    old = Producer(txbroker.bootstrap, ledger, transactional=False)
    old.send(topic, 0, b"before")
    old.commit()
    name = f"latest_default_{source}"
    query = (spark.readStream.format(source)
             .option("kafka.bootstrap.servers", txbroker.bootstrap).option("subscribe", topic)
             .load().writeStream.format("memory").queryName(name)
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert spark.table(name).count() == 0


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "no-such-topic"}, "topic 'no-such-topic' does not exist"),
    ({"kafka.isolation.level": "read_uncommitted"}, "the txbroker source reads read_committed "
                                                    "only"),
    ({"subscribe": "x", "startingOffsets": "{oops"}, "startingOffsets is neither earliest/latest nor JSON"),
    ({"subscribe": "x", "assign": '{"x":[0]}'}, "exactly one of the options subscribe"),
])
def test_bad_reads_give_one_clear_error(spark, txbroker, options, message):
    r = spark.read.format("txbroker").option("kafka.bootstrap.servers", txbroker.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    with pytest.raises(Exception) as info:
        r.load().collect()
    assert message in user_message(info.value)


def test_unreachable_broker(spark, tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(Exception) as info:
        ingest(spark, bootstrap_servers=f"127.0.0.1:{port}", topic="t",
               output=str(tmp_path / "o"), checkpoint=str(tmp_path / "c"))
    assert user_message(info.value) == (
        f"cannot connect to kafka.bootstrap.servers=127.0.0.1:{port}: Connection refused")


def test_streaming_ingest_started_before_its_topic_exists(spark, txbroker, topic, tmp_path):
    """What `docker compose up` does on fresh volumes: the ingest job starts before the
    pipeline has created its topic; it waits, then ingests what gets committed."""
    import threading
    import time

    from confluent_kafka import Producer as PlainProducer

    stop = threading.Event()
    result = {}

    def run():
        result["r"] = ingest(spark, bootstrap_servers=txbroker.bootstrap, topic=topic,
                             output=str(tmp_path / "out"), checkpoint=str(tmp_path / "ck"),
                             processing_time="1 second", stop=stop, timeout=120)

    job = threading.Thread(target=run, daemon=True)
    job.start()
    time.sleep(3)  # a few empty triggers against a topic that does not exist
    assert job.is_alive(), result
    txbroker.create_topic(topic, 2)
    p = PlainProducer({"bootstrap.servers": txbroker.bootstrap, "acks": "all"})
    for i in range(5):
        p.produce(topic, value=b"v%d" % i, partition=i % 2)
    assert p.flush(10) == 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if spark.read.parquet(str(tmp_path / "out")).count() == 5:
                break
        except Exception:  # no batch with data committed yet: nothing to read
            pass
        time.sleep(0.5)
    stop.set()
    job.join(60)
    assert result["r"].rows_written == 5


def test_spark_kafka_sink_writes_into_txbroker(spark, txbroker, topic, tmp_path):
    """``df.write.format("kafka")`` (Spark's connector, an idempotent Java producer) into
    txbroker, batch and streaming: every row arrives once, in its partition, headers
    included."""
    from tests.integration.spark.conftest import connector_missing

    why = connector_missing()
    if why:
        pytest.skip(why)
    txbroker.create_topic(topic, 2)
    rows = [(f"k{i}", f"v{i}", i % 2, [("h", b"%d" % i)] if i % 3 == 0 else None)
            for i in range(300)]
    df = spark.createDataFrame(rows, "key STRING, value STRING, partition INT, "
                                     "headers ARRAY<STRUCT<key: STRING, value: BINARY>>")
    (df.write.format("kafka").option("kafka.bootstrap.servers", txbroker.bootstrap)
     .option("topic", topic).save())
    back = reader(spark, txbroker, topic, includeHeaders="true").collect()
    got = sorted((bytes(r.key).decode(), bytes(r.value).decode(), r.partition,
                  [(h.key, bytes(h.value)) for h in r.headers] if r.headers else None)
                 for r in back)
    assert got == sorted(rows)
    assert sorted(r.offset for r in back if r.partition == 0) == list(range(150))

    # Streaming: the txbroker source into the Kafka sink, a topic copied with its keys.
    copy = f"{topic}-copy"
    txbroker.create_topic(copy, 2)
    query = (spark.readStream.format("txbroker")
             .option("kafka.bootstrap.servers", txbroker.bootstrap).option("subscribe", topic)
             .option("startingOffsets", "earliest").load()
             .selectExpr("key", "upper(CAST(value AS STRING)) AS value", "partition")
             .writeStream.format("kafka").option("kafka.bootstrap.servers", txbroker.bootstrap)
             .option("topic", copy).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    copied = reader(spark, txbroker, copy).collect()
    assert sorted((bytes(r.key).decode(), bytes(r.value).decode(), r.partition)
                  for r in copied) == sorted((k, v.upper(), p) for k, v, p, _ in rows)


USER_JOB = """
import sys
from pyspark.sql import SparkSession
from txbroker.spark_jobs.source import TxBrokerDataSource

bootstrap, topic, checkpoint = sys.argv[1:]
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("OFF")
spark.dataSource.register(TxBrokerDataSource)
batch = (spark.read.format("txbroker").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).load().count())
query = (spark.readStream.format("txbroker").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest").load()
         .writeStream.format("memory").queryName("user_job")
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
query.awaitTermination()
print("rows", batch, spark.table("user_job").count())
spark.stop()
"""


def test_own_session_without_pyspark_python(txbroker, topic, tmp_path):
    """A user's own local SparkSession, PYSPARK_PYTHON unset and this venv not on PATH:
    Spark would start the workers with another ``python3``; registering the source makes
    them use the driver's interpreter."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    txbroker.create_topic(topic, 1)
    ledger = Ledger()
    plain = Producer(txbroker.bootstrap, ledger, transactional=False)
    for i in range(7):
        plain.send(topic, 0, b"%d" % i)
    plain.commit()
    root = Path(__file__).resolve().parents[3]
    script = tmp_path / "user_job.py"
    script.write_text(USER_JOB)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p != venv_bin)
    env["PYTHONPATH"] = str(root)  # this checkout's txbroker, in the driver and workers
    job = subprocess.run([sys.executable, str(script), txbroker.bootstrap, topic,
                          str(tmp_path / "ck")], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert job.returncode == 0, job.stdout + job.stderr[-3000:]
    assert "rows 7 7" in job.stdout
