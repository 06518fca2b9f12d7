"""The txbroker Spark data source against a live broker and real transactional
producers: batch and streaming reads see exactly the committed records, never past
the last stable offset; restarts from a checkpoint are exactly-once; errors are one
clear line."""

from __future__ import annotations

import pytest
from txbroker.spark_jobs.ingest import ingest
from txbroker.spark_jobs.source import user_message

from tests.integration.spark_util import Ledger, Producer, produce_mixed, rows_of


def reader(spark, txbroker, topic, **options):
    r = (spark.read.format("txbroker").option("kafka.bootstrap.servers", txbroker.bootstrap)
         .option("subscribe", topic))
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_sees_exactly_the_committed_records(spark, txbroker, topic):
    txbroker.create_topic(topic, 2)
    ledger = Ledger()
    produce_mixed(txbroker.bootstrap, topic, 2, ledger, tag="b")
    df = reader(spark, txbroker, topic, includeHeaders="true")
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
    part = reader(spark, txbroker, topic, startingOffsets=f'{{"{topic}":{{"0":5,"1":-2}}}}',
                  endingOffsets=f'{{"{topic}":{{"0":{lso[0] - 3},"1":-1}}}}', minPartitions="5")
    assert rows_of(part) == [r for r in ledger.visible()
                             if (r[0] == 0 and 5 <= r[1] < lso[0] - 3) or r[0] == 1]


def test_streaming_is_exactly_once_across_restarts(spark, txbroker, topic, tmp_path):
    from confluent_kafka.admin import AdminClient, NewPartitions

    txbroker.create_topic(topic, 2)
    ledger = Ledger()
    opener = produce_mixed(txbroker.bootstrap, topic, 2, ledger, tag="s1")
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")

    def run(**kw):
        return ingest(spark, bootstrap_servers=txbroker.bootstrap, topic=topic, output=out,
                      checkpoint=ckpt, **kw)

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


def test_streaming_starts_at_latest_by_default(spark, txbroker, topic, tmp_path):
    txbroker.create_topic(topic, 1)
    ledger = Ledger()
    old = Producer(txbroker.bootstrap, ledger, transactional=False)
    old.send(topic, 0, b"before")
    old.commit()
    query = (spark.readStream.format("txbroker")
             .option("kafka.bootstrap.servers", txbroker.bootstrap).option("subscribe", topic)
             .load().writeStream.format("memory").queryName("latest_default")
             .option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert spark.table("latest_default").count() == 0


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
