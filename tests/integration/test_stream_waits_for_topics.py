"""A streaming read subscribed to topics that do not exist yet waits for them, as
Spark's Kafka source does (docker compose starts `ingest` before any topic exists).
The stream reader is driven here the way Spark drives it, without a SparkSession."""

import logging

import pytest
from confluent_kafka import Producer
from pyspark.sql.streaming.datasource import ReadAllAvailable
from txbroker.spark_jobs.options import TxBrokerSourceError, parse_options
from txbroker.spark_jobs.source import TxBrokerBatchReader, TxBrokerStreamReader


def options(txbroker, **extra):
    return {"kafka.bootstrap.servers": txbroker.bootstrap, "kafka.request.timeout.ms": "5000",
            **extra}


def test_stream_waits_for_its_topics_then_reads_them_from_the_start(txbroker, caplog):
    caplog.set_level(logging.INFO, logger="txbroker.spark_jobs")
    reader = TxBrokerStreamReader(parse_options(
        options(txbroker, subscribe="late-a,late-b", startingOffsets="earliest"),
        streaming=True))
    try:
        start = reader.initialOffset()
        assert start == {}
        assert reader.latestOffset(start, ReadAllAvailable()) == {}
        assert "topic 'late-a' does not exist (yet)" in caplog.text
        assert "topic 'late-b' does not exist (yet)" in caplog.text

        txbroker.create_topic("late-a", 2)
        p = Producer({"bootstrap.servers": txbroker.bootstrap, "acks": "all"})
        for i in range(3):
            p.produce("late-a", value=b"%d" % i, partition=1)
        assert p.flush(10) == 0

        end = reader.latestOffset(start, ReadAllAvailable())
        assert end == {"late-a": {"0": 0, "1": 3}}
        assert "topic 'late-a' now exists" in caplog.text
        ranges = reader.partitions(start, end)
        rows = sum(batch.num_rows for part in ranges for batch in reader.read(part))
        assert rows == 3
    finally:
        reader.stop()


def test_batch_reads_and_assign_still_refuse_unknown_topics(txbroker):
    batch = TxBrokerBatchReader(parse_options(options(txbroker, subscribe="nope"),
                                              streaming=False))
    with pytest.raises(TxBrokerSourceError, match="topic 'nope' does not exist"):
        batch.partitions()
    stream = TxBrokerStreamReader(parse_options(options(txbroker, assign='{"nope":[0]}'),
                                                streaming=True))
    try:
        with pytest.raises(TxBrokerSourceError, match="does not exist"):
            stream.initialOffset()
    finally:
        stream.stop()


def test_compose_restarts_ingest_on_failure():
    from pathlib import Path

    compose = (Path(__file__).resolve().parents[2] / "docker-compose.yml").read_text()
    ingest = compose[compose.index("\n  ingest:"):compose.index("\nvolumes:")]
    assert "\n    restart: on-failure" in ingest
