"""Stream a Kafka topic, read_committed, into partitioned Parquet, exactly once.

    python -m spark_jobs.ingest --bootstrap-servers localhost:9092 --topic payments \\
        --output ./lake/payments --checkpoint ./lake/_checkpoints/payments
    spark-submit spark_jobs/ingest.py ...same flags...

The output is a Spark file-sink table: Parquet files under ``output`` partitioned by
``topic`` and ``date`` (UTC date of the record timestamp), plus ``output/_spark_metadata``,
the log of which files each committed micro-batch wrote. Exactly-once across restarts
(even after SIGKILL mid-batch) comes from the checkpoint and that log: a batch that was
interrupted is re-run over the same offsets, and files of the interrupted attempt are
never listed. Read the output with Spark (``spark.read.parquet(output)``), which honours
``_spark_metadata``; a plain Parquet reader would also see the orphaned files.

``--format kafka`` runs the same job on Spark's own Kafka connector
(``kafka.isolation.level=read_committed``): the way to move it to a cluster.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # spark-submit spark_jobs/ingest.py: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from txbroker.spark_jobs.source import user_message  # noqa: E402

FORMATS = ("txbroker", "kafka")
CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13"


def error_line(error: BaseException) -> str:
    """user_message, plus how to get Spark's connector when ``format("kafka")`` lacks it
    (Spark's own message says only that the data source was not found)."""
    message = user_message(error)
    if ("KAFKA_DATA_SOURCE_NOT_ENABLED" in message
            or "DATA_SOURCE_NOT_FOUND" in message and "kafka" in message):
        from txbroker.spark_jobs.session import CONNECTOR_JARS_ENV, connector_version

        return ("--format kafka needs Spark's Kafka connector on the classpath: run "
                f"`make spark-kafka-jars`, set {CONNECTOR_JARS_ENV} to a folder of its jars, "
                f"or spark-submit --packages {CONNECTOR}:{connector_version()}")
    return message


@dataclass
class IngestResult:
    rows_written: int
    batches: int
    output: str
    checkpoint: str
    seconds: float
    # Time spent in the micro-batches that read data (Spark's triggerExecution), without
    # the query's start-up: what a long-running job's throughput is made of.
    batch_seconds: float = 0.0

    def summary(self, topic: str) -> str:
        return (f"ingested {self.rows_written} rows of {topic} in {self.batches} "
                f"micro-batch{'es' if self.batches != 1 else ''} into {self.output} "
                f"(checkpoint {self.checkpoint}) in {self.seconds:.1f} s")


def source_stream(spark: SparkSession, *, bootstrap_servers: str, topic: str,
                  source_format: str = "txbroker", max_offsets_per_trigger: int | None = None,
                  starting_offsets: str = "earliest", options: dict[str, str] | None = None
                  ) -> DataFrame:
    """The streaming DataFrame of ``topic``, read_committed, with either source."""
    if source_format not in FORMATS:
        raise ValueError(f"source_format must be one of {FORMATS}, got {source_format!r}")
    reader = (spark.readStream.format(source_format)
              .option("kafka.bootstrap.servers", bootstrap_servers)
              .option("subscribe", topic)
              .option("startingOffsets", starting_offsets))
    if source_format == "kafka":
        # Spark's connector reads read_uncommitted unless told otherwise.
        reader = reader.option("kafka.isolation.level", "read_committed")
    if max_offsets_per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    return reader.load()


def ingest(spark: SparkSession, *, bootstrap_servers: str, topic: str, output: str,
           checkpoint: str, source_format: str = "txbroker", available_now: bool = True,
           processing_time: str | None = None, max_offsets_per_trigger: int | None = None,
           starting_offsets: str = "earliest", options: dict[str, str] | None = None,
           timeout: float | None = None, stop: threading.Event | None = None) -> IngestResult:
    """Run the ingestion query and wait for it.

    ``available_now`` (the default) reads everything committed when the run starts, in
    one or more micro-batches (``max_offsets_per_trigger``), then returns. With
    ``processing_time`` (e.g. "10 seconds") it runs until stopped, or until ``timeout``
    seconds have passed, or until ``stop`` is set (the query then stops between
    micro-batches' progress checks, within half a second). Raises the query's error if
    it fails."""
    if processing_time is not None:
        available_now = False
    if not available_now and processing_time is None:
        raise ValueError("give available_now=True or a processing_time")
    started = time.monotonic()
    df = source_stream(spark, bootstrap_servers=bootstrap_servers, topic=topic,
                       source_format=source_format,
                       max_offsets_per_trigger=max_offsets_per_trigger,
                       starting_offsets=starting_offsets, options=options)
    df = df.withColumn("date", F.to_date("timestamp"))
    writer = (df.writeStream.format("parquet")
              .option("path", output)
              .option("checkpointLocation", checkpoint)
              .partitionBy("topic", "date")
              .outputMode("append"))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=processing_time)
    query = writer.start()
    batches: dict[int, int] = {}
    batch_ms: dict[int, int] = {}

    def collect() -> None:
        for progress in query.recentProgress:
            # Only batches that ran report addBatch; idle triggers report the next id.
            durations = progress.durationMs or {}
            if "addBatch" in durations:
                batches[progress.batchId] = progress.numInputRows
                batch_ms[progress.batchId] = durations.get("triggerExecution", 0)

    try:
        while query.isActive:
            query.awaitTermination(0.5)
            collect()
            if (timeout is not None and time.monotonic() - started > timeout) or \
                    (stop is not None and stop.is_set()):
                query.stop()
        query.awaitTermination()  # raises StreamingQueryException if the query failed
    except BaseException:
        if query.isActive:
            query.stop()
        raise
    collect()
    return IngestResult(rows_written=sum(batches.values()), batches=len(batches),
                        output=output, checkpoint=checkpoint,
                        seconds=time.monotonic() - started,
                        batch_seconds=sum(batch_ms.values()) / 1000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="txbroker.spark_jobs.ingest",
        description="Stream a topic read_committed into partitioned Parquet, exactly once.")
    parser.add_argument("--bootstrap-servers", required=True, help="host:port of the broker")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output", required=True, help="directory of the Parquet table")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    parser.add_argument("--format", choices=FORMATS, default="txbroker",
                        help="txbroker (this package) or kafka (Spark's connector)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true",
                      help="read what is committed now, then stop (availableNow; default)")
    mode.add_argument("--processing-time", metavar="INTERVAL",
                      help='run continuously with this trigger interval, e.g. "10 seconds"')
    parser.add_argument("--max-offsets-per-trigger", type=int)
    parser.add_argument("--starting-offsets", default="earliest",
                        help="earliest (default), latest or JSON per partition")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="extra source option (repeatable)")
    parser.add_argument("--master", help="Spark master (default local[2], or spark-submit's)")
    parser.add_argument("--verbose", action="store_true", help="show Spark's warnings")
    args = parser.parse_args(argv)
    options = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--option {item!r}: expected KEY=VALUE")
        options[key] = value

    from txbroker.spark_jobs.session import spark_session

    # Errors reach the user as one line from us; Spark's own ERROR logs would repeat
    # them with Java stack traces.
    spark = spark_session("txbroker-ingest", master=args.master,
                          log_level="WARN" if args.verbose else "OFF")
    # SIGTERM (docker stop, kill) and Ctrl-C stop the query from ingest()'s wait loop.
    # Raising KeyboardInterrupt instead would land inside a py4j call and tear its
    # connection to the JVM mid-answer.
    stop = threading.Event()
    for signo in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signo, lambda _signo, _frame: stop.set())
    try:
        result = ingest(spark, bootstrap_servers=args.bootstrap_servers, topic=args.topic,
                        output=args.output, checkpoint=args.checkpoint,
                        source_format=args.format, available_now=args.processing_time is None,
                        processing_time=args.processing_time,
                        max_offsets_per_trigger=args.max_offsets_per_trigger,
                        starting_offsets=args.starting_offsets, options=options, stop=stop)
    except Exception as e:
        print(f"ingest: error: {error_line(e)}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(result.summary(args.topic) + (" (stopped by a signal)" if stop.is_set() else ""),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
