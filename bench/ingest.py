"""Spark ingestion benchmark: rows/s and MB/s from txbroker into Parquet on ``local[2]``.

    .venv/bin/python -m bench.ingest                  # 5 runs of 2M x 100-byte records
    .venv/bin/python -m bench.ingest --quick          # 3 runs of 500k
    .venv/bin/python -m bench.ingest --wait-idle 60   # on a shared machine

Setup (not timed): a txbroker process with its defaults (fsync on) and a fresh
data directory; one topic with ``--partitions`` partitions filled with
``--records`` committed records of ``--value-size`` bytes by confluent-kafka
transactional producers (one transaction per 10,000 records), so every batch is
transactional and every partition ends with COMMIT markers the reader must
skip; one SparkSession (``txbroker.spark_jobs.session.spark_session``, ``local[2]``)
whose start-up is reported separately.

Timed, per run (fresh output and checkpoint directories each time):

* **stream ingest**: ``txbroker.spark_jobs.ingest.ingest`` with ``trigger(availableNow)``
  — the ingestion job itself: the ``txbroker`` source read_committed into
  partitioned Parquet with a checkpoint. Target >= 300,000 rows/s.
* **batch read**: ``spark.read.format("txbroker")`` over the whole topic written
  to Parquet (``mode("overwrite")``), i.e. the source without the streaming
  checkpoint machinery.

Rows/s = records / wall seconds of the query (one-shot, including the ~2 s a
streaming query with a Python source needs to start its source runner process);
also records / the micro-batches' own time (Spark's ``triggerExecution``), which
is what a long-running ingestion job sustains. MB/s counts the value bytes only.
Each run checks that the row count equals what was committed.
Results: bench/results/ingest.json and ingest.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import report
from .brokers import TxBroker
from .clients import create_topic

DEFAULT_OUT = report.ROOT / "bench" / "results"
TARGET_ROWS_PER_S = 300_000
TXN_RECORDS = 10_000


@dataclass
class Options:
    runs: int = 5
    records: int = 2_000_000
    value_size: int = 100
    partitions: int = 4
    wait_idle: float = 0.0
    out: Path = DEFAULT_OUT


def fill(bootstrap: str, topic: str, records: int, value_size: int) -> dict[str, Any]:
    """Commit ``records`` records in transactions of TXN_RECORDS (keys spread partitions)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"fill-{topic}",
                         "linger.ms": 20, "batch.size": 1_000_000, "log_level": 3})
    producer.init_transactions(30)
    value = b"v" * value_size
    started = time.monotonic()
    sent = 0
    while sent < records:
        producer.begin_transaction()
        n = min(TXN_RECORDS, records - sent)
        for i in range(sent, sent + n):
            while True:
                try:
                    producer.produce(topic, value, str(i).encode())
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


def one_run(spark: Any, bootstrap: str, topic: str, opts: Options) -> dict[str, Any]:
    from txbroker.spark_jobs.ingest import ingest

    work = Path(tempfile.mkdtemp(prefix="txbroker-ingest-bench-"))
    try:
        secs, result = _timed(lambda: ingest(
            spark, bootstrap_servers=bootstrap, topic=topic, output=str(work / "stream"),
            checkpoint=str(work / "checkpoint"), available_now=True))
        stream = {"seconds": round(secs, 3), "rows": result.rows_written,
                  "micro_batches": result.batches}
        # The same rows over the micro-batches' own time (Spark's triggerExecution): the
        # rate of a long-running job, which pays the query start-up only once.
        steady = {"seconds": round(result.batch_seconds, 3), "rows": result.rows_written}

        t0 = time.monotonic()
        df = (spark.read.format("txbroker").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).load())
        df.write.mode("overwrite").parquet(str(work / "batch"))
        bsecs = time.monotonic() - t0
        batch_rows = spark.read.parquet(str(work / "batch")).count()  # not timed
        batch = {"seconds": round(bsecs, 3), "rows": batch_rows}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out: dict[str, Any] = {"ok": True}
    for name, ph in (("stream", stream), ("steady", steady), ("batch", batch)):
        ph["rows_per_s"] = round(ph["rows"] / ph["seconds"], 1)
        ph["mb_per_s"] = round(ph["rows"] * opts.value_size / ph["seconds"] / 1e6, 2)
        out[name] = ph
    bad = [n for n in ("stream", "batch") if out[n]["rows"] != opts.records]
    if bad:
        out = {"ok": False, "error": f"row count != {opts.records} committed in {bad}: "
                                     f"{[out[n]['rows'] for n in bad]}", **out}
    return out


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if r.get("ok")]
    summary: dict[str, Any] = {"runs": len(runs), "ok_runs": len(ok),
                               "errors": [r["error"] for r in runs if not r.get("ok")]}
    for phase in ("stream", "steady", "batch"):
        summary[phase] = {k: report.median([r[phase].get(k) for r in ok if phase in r])
                          for k in ("rows_per_s", "mb_per_s", "seconds")}
        summary[phase]["rows_per_s_min"] = min(
            (r[phase]["rows_per_s"] for r in ok), default=None)
    return summary


def render_markdown(rep: dict[str, Any]) -> str:
    m, o, s = rep["machine"], rep["options"], rep["summary"]
    lines = [
        "# Spark ingestion benchmark (txbroker source, local[2])", "",
        f"- command: `{rep['command']}`",
        f"- machine: {m['cpu_model']}, {m['logical_cores']} cores, Python {m['python']}, "
        f"pyspark {m['pyspark']}, pyarrow {m['pyarrow']}, commit {m['txbroker_commit']}",
        f"- {o['records']:,} committed records x {o['value_size']} B in {o['partitions']} "
        f"partitions (transactions of {TXN_RECORDS:,}); median of {s['ok_runs']} good runs "
        f"out of {s['runs']}",
        f"- SparkSession start-up: {rep['spark_startup_s']} s (not in the rates); fill: "
        f"{rep['fill']['seconds']} s", "",
        "| path | rows/s (median) | rows/s (worst) | MB/s (values) | seconds |",
        "|---|---:|---:|---:|---:|",
    ]
    for phase, label in (("stream", "stream ingest, one-shot (`ingest()`, availableNow, "
                                    "Parquet + checkpoint; incl. query start-up)"),
                         ("steady", "stream ingest, micro-batch time only (Spark's "
                                    "triggerExecution: a long-running job)"),
                         ("batch", "batch read (`format(\"txbroker\")` -> Parquet)")):
        p = s[phase]
        lines.append(f"| {label} | {report.fmt(p['rows_per_s'], 0)} "
                     f"| {report.fmt(p['rows_per_s_min'], 0)} | {report.fmt(p['mb_per_s'])} "
                     f"| {report.fmt(p['seconds'], 2)} |")
    t = rep["target"]
    lines += ["", f"Target: stream ingest >= {t['rows_per_s']:,} rows/s. One-shot: "
                  f"{'met' if t['met'] else 'not met'} ({report.fmt(t['measured'], 0)}); "
                  f"micro-batch time only: {'met' if t['steady_met'] else 'not met'} "
                  f"({report.fmt(t['steady_measured'], 0)})."]
    if s["errors"]:
        lines += ["", "Errors:"] + [f"- {e}" for e in s["errors"]]
    return "\n".join(lines) + "\n"


def run(opts: Options, command: str) -> dict[str, Any]:
    from txbroker.spark_jobs.session import spark_session

    machine = report.machine_info(pyspark=report.package_version("pyspark"),
                                  pyarrow=report.package_version("pyarrow"),
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
        one_run(spark, broker.bootstrap, topic, Options(**{**opts.__dict__, "runs": 1}))  # warm-up
        for i in range(opts.runs):
            waited = report.wait_for_idle(opts.wait_idle) if opts.wait_idle > 0 else 0.0
            busy0, t1 = report.system_busy(), time.monotonic()
            try:
                r = one_run(spark, broker.bootstrap, topic, opts)
            except Exception as e:  # a failed run is reported, not fatal
                r = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            secs = time.monotonic() - t1
            # Spark and the broker may use both cores; "other" is what is left over.
            r["system_busy_cores"] = round((report.system_busy() - busy0) / secs, 2)
            r["waited_for_idle_s"] = waited
            runs.append(r)
            print(f"run {i + 1}/{opts.runs}: {r.get('stream', {}).get('rows_per_s')} rows/s "
                  f"stream ({r.get('steady', {}).get('rows_per_s')} in micro-batches), "
                  f"{r.get('batch', {}).get('rows_per_s')} rows/s batch"
                  + ("" if r["ok"] else f" ERROR {r['error']}"), flush=True)
        spark.stop()
    finally:
        broker.stop()
    summary = summarize(runs)
    measured = summary["stream"]["rows_per_s"]
    steady = summary["steady"]["rows_per_s"]
    return {
        "command": command, "machine": machine, "options": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in opts.__dict__.items()},
        "wall_seconds": round(time.monotonic() - started, 1), "fill": filled,
        "spark_startup_s": startup, "runs": runs, "summary": summary,
        "target": {"rows_per_s": TARGET_ROWS_PER_S, "measured": measured,
                   "met": measured is not None and measured >= TARGET_ROWS_PER_S,
                   "steady_measured": steady,
                   "steady_met": steady is not None and steady >= TARGET_ROWS_PER_S},
    }


def parse_args(argv: Sequence[str] | None) -> Options:
    p = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=Options.runs)
    p.add_argument("--records", type=int, default=Options.records)
    p.add_argument("--value-size", type=int, default=Options.value_size)
    p.add_argument("--partitions", type=int, default=Options.partitions)
    p.add_argument("--quick", action="store_true", help="3 runs of 500,000 records")
    p.add_argument("--wait-idle", type=float, default=0.0, metavar="S",
                   help="before each run, wait up to S seconds for an idle machine")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = p.parse_args(argv)
    opts = Options(a.runs, a.records, a.value_size, a.partitions, a.wait_idle, a.out)
    if a.quick:
        opts.runs, opts.records = 3, 500_000
    return opts



def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    report.stop_on_sigterm()
    result = run(opts, report.command_line("bench.ingest", argv))
    report.write_report(opts.out, "ingest", result, render_markdown)
    return 0 if result["summary"]["ok_runs"] else 1


if __name__ == "__main__":
    sys.exit(main())
