"""``txbroker``: a PySpark Python Data Source reading Kafka topics read_committed.

    spark.dataSource.register(TxBrokerDataSource)
    df = (spark.readStream.format("txbroker")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "payments")
          .load())

Batch and streaming reads (with ``trigger(availableNow=True)`` and
``maxOffsetsPerTrigger``), one input partition per topic-partition offset range,
the schema and options of Spark's own Kafka source, so the same job runs on a
cluster with ``format("kafka")`` and ``kafka.isolation.level=read_committed``.

Every range ends at or below the last stable offset seen when it was planned:
nothing of an open transaction is read, and a micro-batch replayed after a
crash reads exactly the rows it read the first time (Spark's checkpoint then
makes the sink exactly-once). See docs/spark.md.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterator, Sequence

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from txbroker.protocol.kio_import import import_kio_without_hypothesis


def _in_spark_python_worker() -> bool:
    """Run by ``python -m pyspark.daemon`` (the readers) or ``python -m
    pyspark.sql.streaming.python_streaming_source_runner`` (a streaming query's planner,
    a fresh process per query), not in the driver."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", "").startswith("pyspark.")


if _in_spark_python_worker():
    import_kio_without_hypothesis()

from .options import (  # noqa: E402
    OffsetMap,
    Range,
    SourceOptions,
    TopicPartition,
    include_headers,
    offsets_from_json,
    offsets_json,
    open_client,
    parse_options,
    rate_limit,
    resolve_offsets,
    select_partitions,
    split_ranges,
)
from .wire import TxBrokerSourceError, WireClient  # noqa: E402

__all__ = ["TxBrokerDataSource", "TxBrokerSourceError", "spark_schema", "user_message"]

log = logging.getLogger("txbroker.spark_jobs.source")

_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]
_HEADERS = StructField("headers", ArrayType(StructType([
    StructField("key", StringType()), StructField("value", BinaryType())])))


def spark_schema(with_headers: bool = False) -> StructType:
    """The schema of Spark's Kafka source (``headers`` only with includeHeaders=true)."""
    return StructType(_FIELDS + ([_HEADERS] if with_headers else []))


class OffsetRangePartition(InputPartition):
    """One Spark task: the offsets [start, end) of one topic-partition."""

    def __init__(self, rng: Range) -> None:
        super().__init__(rng)
        self.range = rng

    def __repr__(self) -> str:
        r = self.range
        return f"OffsetRangePartition({r.topic}-{r.partition} [{r.start}, {r.end}))"


def _client(opts: SourceOptions) -> WireClient:
    return open_client(opts)


def current_partitions(client: WireClient, opts: SourceOptions, *,
                       missing_ok: bool = False) -> list[TopicPartition]:
    """The partitions the subscription names now. Unknown topics raise, naming them;
    with ``missing_ok`` a subscribed topic that does not exist has no partitions yet."""
    sub = opts.subscription
    if sub.kind == "subscribe":
        info = client.topics(list(sub.topics), missing_ok=missing_ok)
    elif sub.kind == "assign":
        info = client.topics(sorted({t for t, _ in sub.assigned}))
    else:
        # Kafka consumers leave internal topics out of pattern subscriptions by default.
        info = {n: i for n, i in client.topics(None).items() if not i.internal}
    return select_partitions(sub, {name: i.leaders for name, i in info.items()},
                             missing_ok=missing_ok)


def _ranges(start: OffsetMap, end: OffsetMap, opts: SourceOptions) -> list[OffsetRangePartition]:
    # A partition absent from ``start`` appeared after the query started: it is read
    # from its beginning, offset 0 (anything deleted before that is data loss).
    ranges = [Range(t, p, start.get((t, p), 0), e) for (t, p), e in sorted(end.items())]
    return [OffsetRangePartition(r) for r in split_ranges(ranges, opts.min_partitions)]


def _read(partition: InputPartition, opts: SourceOptions) -> Iterator:
    if not isinstance(partition, OffsetRangePartition):
        return iter(())  # Spark plans one empty partition when there is nothing to read
    # Only the readers decode records: the planner process (a fresh one per streaming
    # query) does not import numpy and the decoders.
    from .reader import read_range

    return read_range(partition.range, opts)


class TxBrokerBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        with _client(opts) as client:
            tps = current_partitions(client, opts)
            earliest = client.earliest(tps)
            latest = client.latest(tps)
        start = resolve_offsets("startingOffsets", opts.starting, tps, earliest, latest)
        end = resolve_offsets("endingOffsets", opts.ending, tps, earliest, latest)
        after = [f"{t}-{p} ({start[(t, p)]} > {end[(t, p)]})" for t, p in tps
                 if start[(t, p)] > end[(t, p)]]
        if after:
            raise TxBrokerSourceError("startingOffsets is after endingOffsets for "
                                      + ", ".join(after))
        return _ranges(start, end, opts)

    def read(self, partition: InputPartition) -> Iterator:
        return _read(partition, self.opts)


class TxBrokerStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are Spark's Kafka source JSON ``{"topic": {"partition": offset}}``.

    The reader lives in a long-running Python process on the driver between
    micro-batches, so it keeps one connection; the copy Spark pickles for the tasks
    drops it (``__getstate__``)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._wire: WireClient | None = None
        self._target: OffsetMap | None = None  # availableNow: the end of this run
        self._latest: OffsetMap | None = None
        self._waiting: set[str] = set()  # subscribed topics not created yet

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_wire"] = None
        return state

    def _client(self) -> WireClient:
        if self._wire is None:
            self._wire = _client(self.opts)
        return self._wire

    def _partitions(self, client: WireClient) -> list[TopicPartition]:
        """A stream subscribed to topics that do not exist yet waits for them, as Spark's
        Kafka source does: they have no partitions until they are created, and are then
        read from their first offset (a job can start before its topics)."""
        tps = current_partitions(client, self.opts, missing_ok=True)
        if self.opts.subscription.kind == "subscribe":
            present = {t for t, _ in tps}
            missing = set(self.opts.subscription.topics) - present
            for topic in sorted(missing - self._waiting):
                log.warning("topic %r does not exist (yet) on %s: waiting for it",
                            topic, self.opts.bootstrap_servers)
            for topic in sorted(self._waiting - missing):
                log.info("topic %r now exists: reading it from its first offset", topic)
            self._waiting = missing
        return tps

    def initialOffset(self) -> dict:
        client = self._client()
        tps = self._partitions(client)
        spec = self.opts.starting
        earliest = client.earliest(tps) if spec != "latest" else {}
        latest = client.latest(tps) if spec != "earliest" else {}
        return offsets_json(resolve_offsets("startingOffsets", spec, tps, earliest, latest))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        client = self._client()
        self._target = client.latest(self._partitions(client))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        client = self._client()
        begin = offsets_from_json(start)
        tps = self._partitions(client)
        gone = sorted(set(begin) - set(tps))
        if gone:
            names = ", ".join(f"{t}-{p}" for t, p in gone)
            if self.opts.fail_on_data_loss:
                raise TxBrokerSourceError(
                    f"partitions {names} disappeared (topic deleted or no longer subscribed?)."
                    " Set failOnDataLoss=false to go on without them.",
                    "UNKNOWN_TOPIC_OR_PARTITION")
            log.warning("partitions %s disappeared; going on without them", names)
        lso = client.latest(tps)
        self._latest = lso
        end: OffsetMap = {}
        for tp in tps:
            if self._target is not None and tp not in self._target:
                # availableNow reads nothing written after the run started: a partition
                # created since then waits for the next run.
                if tp in begin:
                    end[tp] = begin[tp]
                continue
            latest = lso[tp] if self._target is None else min(lso[tp], self._target[tp])
            # Never move backwards (a JSON start beyond the current end waits for data).
            end[tp] = max(latest, begin.get(tp, 0))
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, end, limit.max_rows)
        return offsets_json(end)

    def reportLatestOffset(self) -> dict | None:
        return offsets_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return _ranges(offsets_from_json(start), offsets_from_json(end), self.opts)

    def read(self, partition: InputPartition) -> Iterator:
        return _read(partition, self.opts)

    def commit(self, end: dict) -> None:
        # Nothing to do: progress lives in Spark's checkpoint, not in consumer offsets.
        pass

    def stop(self) -> None:
        if self._wire is not None:
            self._wire.close()
            self._wire = None


class TxBrokerDataSource(DataSource):
    """``format("txbroker")``: options as Spark's Kafka source (see docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        _use_this_python()
        return "txbroker"

    def schema(self) -> StructType:
        # Validate everything the two kinds of read share now, so that a typo fails at
        # load() rather than when the query starts.
        parse_options(self.options, streaming=None)
        return spark_schema(include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return TxBrokerBatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TxBrokerStreamReader(parse_options(self.options, streaming=True))


def _use_this_python() -> None:
    """Make a user's own local SparkSession run this source's Python workers with the
    driver's interpreter, unless told otherwise.

    Without PYSPARK_PYTHON, Spark's workers run whatever ``python3`` is first on PATH,
    often one without this package (the read then fails in the worker with
    ModuleNotFoundError). ``spark.dataSource.register`` calls ``name()`` in the driver
    just before it pickles the class together with the context's interpreter, and the
    driver has imported this package, so its interpreter can run the source. Only in
    local mode: on a cluster the driver's path may not exist on the executors."""
    if os.environ.get("PYSPARK_PYTHON"):
        return
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None or not sc.master.startswith("local") or \
            sc.getConf().contains("spark.pyspark.python"):
        return
    sc.pythonExec = sys.executable


_ERROR_LINE = re.compile(r"TxBrokerSourceError: (.+)")


def user_message(error: BaseException) -> str:
    """The one line worth showing for an exception out of a Spark job: the source's own
    message when the failure came from it (Spark wraps it in Java and Python traces)."""
    text = str(error)
    found = _ERROR_LINE.findall(text)
    if found:
        return found[-1].strip()
    if isinstance(error, TxBrokerSourceError):
        return text
    # Spark's errors start with "[ERROR_CLASS] message": keep the first meaningful line.
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("Traceback", "File ", "at ", "JVM stacktrace")):
            return line
    return type(error).__name__
