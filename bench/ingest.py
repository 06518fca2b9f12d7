"""Spark ingestion benchmark: the ``txbroker`` source and Spark's Kafka connector into
Parquet on ``local[2]``, same broker, same topic, same run.

    .venv/bin/python -m bench.ingest                  # 5 runs of 2M x 100-byte records
    .venv/bin/python -m bench.ingest --quick          # 3 runs of 500k
    .venv/bin/python -m bench.ingest --sources txbroker   # without the connector
    .venv/bin/python -m bench.ingest --wait-idle 60   # on a shared machine

Setup (not timed): a txbroker process with its defaults (fsync on) and a fresh
data directory; one topic with ``--partitions`` partitions filled with
``--records`` committed records of ``--value-size`` bytes by confluent-kafka
transactional producers (one transaction per 10,000 records), so every batch is
transactional and every partition ends with COMMIT markers the reader must
skip; one SparkSession (``txbroker.spark_jobs.session.spark_session``, ``local[2]``,
with Spark's Kafka connector from ``make spark-kafka-jars``) whose start-up is
reported separately.

Timed, per run and per source (``txbroker``, then ``kafka`` = Spark's connector with
``kafka.isolation.level=read_committed``; the order alternates between runs), with
fresh output and checkpoint directories each time:

* **stream ingest**: ``txbroker.spark_jobs.ingest.ingest`` with ``trigger(availableNow)``
  and ``source_format`` set to the source: the ingestion job itself, read_committed
  into partitioned Parquet with a checkpoint. Rows/s = records / wall seconds of the
  query (one-shot, including the ~2 s a streaming query needs to start). Target for
  the txbroker source: >= 600,000 rows/s.
* **running job**: the same rows over the micro-batches' own time (Spark's
  ``triggerExecution``), what a long-running ingestion job sustains once started.
  Target for the txbroker source: >= 1,000,000 rows/s, and >= 1.0x the connector.
* **the source alone**: the same stream into Spark's ``noop`` sink, over the
  micro-batches' time: what the source delivers when no Parquet is written.
* **batch read**: ``spark.read.format(source)`` over the whole topic written to
  Parquet (``mode("overwrite")``), the source without the streaming machinery.

MB/s counts the value bytes only. Each run checks that the row count equals what
was committed. The JSON keeps every run and the machine's busy cores during it
(the 2 cores may be shared). Results: bench/results/ingest.json and ingest.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import report
from .brokers import TxBroker
from .clients import create_topic

DEFAULT_OUT = report.ROOT / "bench" / "results"
TARGET_ONE_SHOT = 600_000
TARGET_RUNNING = 1_000_000
TARGET_RATIO = 1.0  # txbroker source / Spark's connector, running job
TXN_RECORDS = 10_000
SOURCES = ("txbroker", "kafka")
PHASES = ("stream", "steady", "source", "batch")


@dataclass
class Options:
    runs: int = 5
    records: int = 2_000_000
    value_size: int = 100
    partitions: int = 4
    wait_idle: float = 0.0
    out: Path = DEFAULT_OUT
    sources: list[str] = field(default_factory=lambda: list(SOURCES))


def fill(bootstrap: str, topic: str, records: int, value_size: int,
         random_values: bool = False) -> dict[str, Any]:
    """Commit ``records`` records in transactions of TXN_RECORDS (keys spread partitions).

    Every value is the same ``value_size`` bytes unless ``random_values`` (distinct,
    incompressible values: Parquet's dictionaries and statistics then cost differently)."""
    import os

    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"fill-{topic}",
                         "linger.ms": 20, "batch.size": 1_000_000, "log_level": 3})
    producer.init_transactions(30)
    value = b"v" * value_size
    blob = os.urandom(records * value_size) if random_values else b""
    started = time.monotonic()
    sent = 0
    while sent < records:
        producer.begin_transaction()
        n = min(TXN_RECORDS, records - sent)
        for i in range(sent, sent + n):
            while True:
                try:
                    producer.produce(topic, blob[i * value_size:(i + 1) * value_size]
                                     if random_values else value, str(i).encode())
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.commit_transaction(60)
        sent += n
    secs = time.monotonic() - started
    return {"records": records, "seconds": round(secs, 2),
            "mb_per_s": round(records * value_size / secs / 1e6, 1)}


def _timed(body: Any) -> tuple[float, Any]:
    t0 = time.monotonic()
    out = body()
    return time.monotonic() - t0, out


def one_run(spark: Any, bootstrap: str, topic: str, opts: Options, source: str
            ) -> dict[str, Any]:
    """Stream ingest then batch read of the whole topic with one source."""
    from txbroker.spark_jobs.ingest import ingest, source_stream

    work = Path(tempfile.mkdtemp(prefix="txbroker-ingest-bench-"))
    try:
        secs, result = _timed(lambda: ingest(
            spark, bootstrap_servers=bootstrap, topic=topic, output=str(work / "stream"),
            checkpoint=str(work / "checkpoint"), source_format=source, available_now=True))
        stream = {"seconds": round(secs, 3), "rows": result.rows_written,
                  "micro_batches": result.batches}
        # The same rows over the micro-batches' own time (Spark's triggerExecution): the
        # rate of a long-running job, which pays the query start-up only once.
        steady = {"seconds": round(result.batch_seconds, 3), "rows": result.rows_written}

        # The source alone: the same stream into Spark's noop sink (no Parquet), over
        # the micro-batches' time.
        query = (source_stream(spark, bootstrap_servers=bootstrap, topic=topic,
                               source_format=source, starting_offsets="earliest")
                 .writeStream.format("noop").option("checkpointLocation", str(work / "noop"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        done = [p for p in query.recentProgress if p.numInputRows]
        source_only = {"seconds": round(sum(p.durationMs["triggerExecution"]
                                            for p in done) / 1000, 3),
                       "rows": sum(p.numInputRows for p in done)}

        reader = (spark.read.format(source).option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic))
        if source == "kafka":
            reader = reader.option("kafka.isolation.level", "read_committed")
        bsecs, _ = _timed(lambda: reader.load().write.mode("overwrite").parquet(
            str(work / "batch")))
        batch_rows = spark.read.parquet(str(work / "batch")).count()  # not timed
        batch = {"seconds": round(bsecs, 3), "rows": batch_rows}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out: dict[str, Any] = {"ok": True}
    for name, ph in (("stream", stream), ("steady", steady), ("source", source_only),
                     ("batch", batch)):
        ph["rows_per_s"] = round(ph["rows"] / ph["seconds"], 1) if ph["seconds"] else None
        ph["mb_per_s"] = (round(ph["rows"] * opts.value_size / ph["seconds"] / 1e6, 2)
                          if ph["seconds"] else None)
        out[name] = ph
    bad = [n for n in ("stream", "source", "batch") if out[n]["rows"] != opts.records]
    if bad:
        out = {**out, "ok": False, "error": f"{source}: row count != {opts.records} "
                                            f"committed in {bad}: "
                                            f"{[out[n]['rows'] for n in bad]}"}
    return out


def summarize(runs: list[dict[str, Any]], sources: Sequence[str]) -> dict[str, Any]:
    """Median and worst rows/s per source and phase, and the txbroker/connector ratio of
    each run (both measured back to back) with its median."""
    summary: dict[str, Any] = {"runs": len(runs)}
    for source in sources:
        ok = [r[source] for r in runs if r.get(source, {}).get("ok")]
        s: dict[str, Any] = {"ok_runs": len(ok), "errors": [
            r[source]["error"] for r in runs if source in r and not r[source].get("ok")]}
        for phase in PHASES:
            s[phase] = {k: report.median([r[phase].get(k) for r in ok])
                        for k in ("rows_per_s", "mb_per_s", "seconds")}
            s[phase]["rows_per_s_min"] = min((r[phase]["rows_per_s"] for r in ok
                                              if r[phase]["rows_per_s"]), default=None)
        summary[source] = s
    if all(s in sources for s in SOURCES):
        for phase in PHASES:
            ratios = [r["txbroker"][phase]["rows_per_s"] / r["kafka"][phase]["rows_per_s"]
                      for r in runs if r.get("txbroker", {}).get("ok")
                      and r.get("kafka", {}).get("ok") and r["kafka"][phase]["rows_per_s"]]
            summary.setdefault("ratio", {})[phase] = {
                "median": report.median(ratios), "min": round(min(ratios), 2) if ratios else None,
                "max": round(max(ratios), 2) if ratios else None}
    return summary


def targets(summary: dict[str, Any]) -> dict[str, Any]:
    tx = summary.get("txbroker", {})
    one_shot = tx.get("stream", {}).get("rows_per_s")
    running = tx.get("steady", {}).get("rows_per_s")
    ratio = summary.get("ratio", {}).get("steady", {}).get("median")
    return {
        "one_shot": {"target": TARGET_ONE_SHOT, "measured": one_shot,
                     "met": one_shot is not None and one_shot >= TARGET_ONE_SHOT},
        "running": {"target": TARGET_RUNNING, "measured": running,
                    "met": running is not None and running >= TARGET_RUNNING},
        "vs_connector": {"target": TARGET_RATIO, "measured": ratio,
                         "met": ratio is not None and ratio >= TARGET_RATIO},
    }


LABELS = {
    "stream": "stream ingest, one-shot availableNow (`ingest()`, Parquet + checkpoint; "
              "incl. query start-up)",
    "steady": "running job: the micro-batches' time only (Spark's triggerExecution)",
    "source": "the source alone: running job into Spark's `noop` sink (no Parquet)",
    "batch": "batch read (`spark.read.format(...)` -> Parquet)",
}


def render_markdown(rep: dict[str, Any]) -> str:
    m, o, s = rep["machine"], rep["options"], rep["summary"]
    sources = o["sources"]
    lines = [
        "# Spark ingestion benchmark (txbroker source and Spark's Kafka connector, local[2])",
        "",
        f"- command: `{rep['command']}`",
        f"- machine: {m['cpu_model']}, {m['logical_cores']} cores, Python {m['python']}, "
        f"pyspark {m['pyspark']}, pyarrow {m['pyarrow']}, numpy {m.get('numpy')}, "
        f"commit {m['txbroker_commit']}, {m['date']}",
        f"- load average at start {m['loadavg_start']}; busy cores during the runs "
        f"(everything on the machine, this benchmark included): "
        f"{', '.join(str(r.get('system_busy_cores')) for r in rep['runs'])}",
        f"- {o['records']:,} committed records x {o['value_size']} B in {o['partitions']} "
        f"partitions (transactions of {TXN_RECORDS:,}); median of the good runs out of "
        f"{s['runs']} (worst in brackets)",
        f"- SparkSession start-up: {rep['spark_startup_s']} s (not in the rates); fill: "
        f"{rep['fill']['seconds']} s", "",
        "| path | " + " | ".join(f"`{src}` rows/s" for src in sources)
        + (" | txbroker / connector (per run: min-max) |" if "ratio" in s else " |"),
        "|---|" + "---:|" * len(sources) + ("---:|" if "ratio" in s else ""),
    ]
    for phase in PHASES:
        cells = []
        for src in sources:
            p = s[src][phase]
            cells.append(f"{report.fmt(p['rows_per_s'], 0)} ({report.fmt(p['rows_per_s_min'], 0)})")
        row = f"| {LABELS[phase]} | " + " | ".join(cells) + " |"
        if "ratio" in s:
            r = s["ratio"][phase]
            row += f" {report.fmt(r['median'], 2)} ({report.fmt(r['min'], 2)}-" \
                   f"{report.fmt(r['max'], 2)}) |"
        lines.append(row)
    t = rep["target"]
    lines += ["", "Targets for the txbroker source:"]
    for key, label in (("running", "running job >= {:,} rows/s"),
                       ("one_shot", "one-shot availableNow >= {:,} rows/s"),
                       ("vs_connector", "running job >= {}x Spark's connector")):
        tt = t[key]
        lines.append(f"- {label.format(tt['target'])}: "
                     f"{'met' if tt['met'] else '**not met**'} "
                     f"({report.fmt(tt['measured'], 2 if key == 'vs_connector' else 0)})")
    errors = [e for src in sources for e in s[src]["errors"]]
    if errors:
        lines += ["", "Errors:"] + [f"- {e}" for e in errors]
    return "\n".join(lines) + "\n"


def run(opts: Options, command: str) -> dict[str, Any]:
    from txbroker.spark_jobs.session import connector_jars, spark_session

    if "kafka" in opts.sources and not connector_jars():
        raise SystemExit("Spark's Kafka connector is missing: run `make spark-kafka-jars` "
                         "(or --sources txbroker)")
    machine = report.machine_info(pyspark=report.package_version("pyspark"),
                                  pyarrow=report.package_version("pyarrow"),
                                  numpy=report.package_version("numpy"),
                                  confluent_kafka=report.package_version("confluent-kafka"))
    started = time.monotonic()
    broker = TxBroker().start()
    runs: list[dict[str, Any]] = []
    try:
        topic = "ingest-bench"
        create_topic(broker.bootstrap, topic, opts.partitions)
        filled = fill(broker.bootstrap, topic, opts.records, opts.value_size)
        t0 = time.monotonic()
        spark = spark_session("txbroker-ingest-bench")
        startup = round(time.monotonic() - t0, 2)
        for source in opts.sources:  # warm-up: JIT, Python workers, connector classes
            one_run(spark, broker.bootstrap, topic, opts, source)
        for i in range(opts.runs):
            waited = report.wait_for_idle(opts.wait_idle) if opts.wait_idle > 0 else 0.0
            busy0, t1 = report.system_busy(), time.monotonic()
            r: dict[str, Any] = {"waited_for_idle_s": waited}
            # Alternate which source goes first: a slow spell of the machine then hits
            # both sides alike over the runs.
            order = opts.sources if i % 2 == 0 else list(reversed(opts.sources))
            for source in order:
                try:
                    r[source] = one_run(spark, broker.bootstrap, topic, opts, source)
                except Exception as e:  # a failed run is reported, not fatal
                    r[source] = {"ok": False, "error": f"{source}: {type(e).__name__}: {e}"}
            secs = time.monotonic() - t1
            # Spark and the broker may use both cores; more than that is other load.
            r["system_busy_cores"] = round((report.system_busy() - busy0) / secs, 2)
            runs.append(r)
            print(f"run {i + 1}/{opts.runs}: " + "; ".join(
                f"{src} " + (f"{r[src]['stream']['rows_per_s']:,.0f} one-shot, "
                             f"{r[src]['steady']['rows_per_s']:,.0f} running, "
                             f"{r[src]['source']['rows_per_s']:,.0f} source alone, "
                             f"{r[src]['batch']['rows_per_s']:,.0f} batch"
                             if r[src].get("ok") else f"ERROR {r[src]['error']}")
                for src in opts.sources) + f" (busy cores {r['system_busy_cores']})",
                flush=True)
        spark.stop()
    finally:
        broker.stop()
    summary = summarize(runs, opts.sources)
    return {
        "command": command, "machine": machine, "options": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in opts.__dict__.items()},
        "wall_seconds": round(time.monotonic() - started, 1), "fill": filled,
        "spark_startup_s": startup, "runs": runs, "summary": summary,
        "target": targets(summary),
    }


def parse_args(argv: Sequence[str] | None) -> Options:
    p = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=Options.runs)
    p.add_argument("--records", type=int, default=Options.records)
    p.add_argument("--value-size", type=int, default=Options.value_size)
    p.add_argument("--partitions", type=int, default=Options.partitions)
    p.add_argument("--quick", action="store_true", help="3 runs of 500,000 records")
    p.add_argument("--sources", default=",".join(SOURCES),
                   help="comma-separated: txbroker, kafka (Spark's connector); default both")
    p.add_argument("--wait-idle", type=float, default=0.0, metavar="S",
                   help="before each run, wait up to S seconds for an idle machine")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = p.parse_args(argv)
    sources = [x.strip() for x in a.sources.split(",") if x.strip()]
    unknown = set(sources) - set(SOURCES)
    if unknown or not sources:
        p.error(f"--sources: expected some of {', '.join(SOURCES)}")
    opts = Options(a.runs, a.records, a.value_size, a.partitions, a.wait_idle, a.out, sources)
    if a.quick:
        opts.runs, opts.records = 3, 500_000
    return opts


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    report.stop_on_sigterm()
    result = run(opts, report.command_line("bench.ingest", argv))
    report.write_report(opts.out, "ingest", result, render_markdown)
    return 0 if all(result["summary"][s]["ok_runs"] for s in opts.sources) else 1


if __name__ == "__main__":
    sys.exit(main())
