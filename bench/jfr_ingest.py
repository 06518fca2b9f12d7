"""Where the JVM's CPU goes in the Spark ingestion job: Java Flight Recorder over warm
``ingest()`` runs of the ``txbroker`` source into partitioned Parquet.

    .venv/bin/python -m bench.jfr_ingest                      # 2M records, 3 profiled runs
    .venv/bin/python -m bench.jfr_ingest --sink noop          # the source alone
    .venv/bin/python -m bench.jfr_ingest --conf spark.sql.parquet.compression.codec=zstd

Set-up as bench/ingest.py (a txbroker process, one topic of 4 partitions filled with
committed transactional records, ``local[2]``); one warm-up run, then ``jcmd <pid>
JFR.start settings=profile`` on the Spark JVM (local mode: the executors run in the
driver's JVM), ``--runs`` runs, ``JFR.stop``. Prints the top methods by self samples
(the frame on top of the stack) and by inclusive samples (anywhere on the stack) of
``jdk.ExecutionSample``, and a breakdown into the job's stages by the frames on the
stack. The recording stays in ``--out`` for ``jfr print`` / JDK Mission Control.
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .brokers import TxBroker
from .clients import create_topic
from .ingest import fill

# Stage of a sample: walking its stack from the top frame down, the first frame that
# matches a rule. The leaf-most match wins, so a Parquet encoder called from under the
# sort's iterator counts as Parquet, and the sort's own copying as the sort. Frames of
# Spark's generated code and row writers match no rule: their work is charged to the
# caller (the Arrow-to-row stage, the sort or the file writer's projections).
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("GC / JVM internals (no Java frame)", ("<no java frame>",)),
    ("Parquet compression (snappy)", ("snappy", "Snappy")),
    ("Parquet dictionary encoding", ("DictionaryValuesWriter", "column/values/dictionary")),
    ("Parquet statistics (min/max)", ("column/statistics", "PrimitiveComparator",
                                      "ColumnIndexBuilder")),
    ("Parquet column writers / encoders", ("org/apache/parquet",
                                           "ParquetWriteSupport")),
    ("Arrow batches -> UnsafeRows (columnar-to-row, to_date)", (
        "arrow", "Arrow", "python", "GeneratedIteratorForCodegenStage", "ColumnarBatchRow",
        "ColumnarToRow")),
    ("sort for the partitioned write", ("Sorter", "SortExec", "RadixSort", "TimSort",
                                        "unsafe/map", "unsafe/sort")),
    ("file writer's projections (partition values, data columns)", (
        "DynamicPartitionDataWriter", "FileFormatDataWriter", "FileFormatWriter")),
    ("checkpoint / metadata log", ("HDFSMetadataLog", "CheckpointFileManager",
                                   "OffsetSeqLog", "CommitLog", "FileStreamSinkLog")),
    ("file system / output streams", ("hadoop/fs", "java/io/File", "RawLocalFileSystem")),
]

PARQUET_GENERIC = STAGES[4][0]


def stage_of(frames: list[str]) -> str:
    slashed = [f.replace(".", "/") for f in frames]  # JFR names hidden classes with dots
    for i, f in enumerate(slashed):
        for name, needles in STAGES:
            if any(n in f for n in needles):
                if name == PARQUET_GENERIC:
                    # A Parquet frame on top (Binary.equals, ...) belongs to the
                    # dictionary/statistics/compression work that called it, if any.
                    below = slashed[i:i + 12]
                    for spec, spec_needles in STAGES[1:4]:
                        if any(n in g for g in below for n in spec_needles):
                            return spec
                return name
    return "other"


def samples(jfr_file: Path) -> list[list[str]]:
    """Stacks (top frame first, as ``Class.method``) of the recording's execution samples."""
    out = subprocess.run(["jfr", "print", "--json", "--stack-depth", "64",
                          "--events", "jdk.ExecutionSample", str(jfr_file)],
                         check=True, capture_output=True, text=True).stdout
    stacks = []
    for event in json.loads(out)["recording"]["events"]:
        st = event["values"].get("stackTrace") or {}
        frames = [f"{f['method']['type']['name']}.{f['method']['name']}"
                  for f in st.get("frames", [])]
        stacks.append(frames or ["<no java frame>"])
    return stacks


def cpu_load(jfr_file: Path) -> dict[str, float]:
    """Mean of jdk.CPULoad (the JVM's user+system share of the machine) over the recording,
    and the GC pause total (jdk.GarbageCollection)."""
    out = subprocess.run(["jfr", "print", "--json", "--events",
                          "jdk.CPULoad,jdk.GarbageCollection", str(jfr_file)],
                         check=True, capture_output=True, text=True).stdout
    loads, pauses = [], 0.0
    for e in json.loads(out)["recording"]["events"]:
        v = e["values"]
        if e["type"] == "jdk.CPULoad":
            loads.append(v["jvmUser"] + v["jvmSystem"])
        elif e["type"] == "jdk.GarbageCollection":
            d = v.get("sumOfPauses") or v.get("duration") or "PT0S"
            pauses += _iso_seconds(d)
    return {"jvm_cpu_share_of_machine": round(sum(loads) / len(loads), 3) if loads else 0.0,
            "gc_pause_s": round(pauses, 3)}


def _iso_seconds(d: Any) -> float:
    if isinstance(d, (int, float)):
        return d / 1e9
    s = str(d).removeprefix("PT")
    total = 0.0
    for unit, mult in (("H", 3600), ("M", 60), ("S", 1)):
        if unit in s:
            head, s = s.split(unit, 1)
            total += float(head) * mult
    return total


def analyse(stacks: list[list[str]], top: int) -> dict[str, Any]:
    n = len(stacks)
    self_c = collections.Counter(s[0] for s in stacks)
    incl: collections.Counter[str] = collections.Counter()
    for s in stacks:
        incl.update(set(s))
    stage = collections.Counter(stage_of(s) for s in stacks)

    def share(c: collections.Counter[str], k: int) -> list[tuple[str, float]]:
        return [(m, round(100 * v / n, 1)) for m, v in c.most_common(k)]

    return {"samples": n, "self": share(self_c, top), "inclusive": share(incl, 3 * top),
            "stages": share(stage, len(STAGES) + 1)}


def report(jfr_file: Path, top: int, extra: dict[str, Any]) -> None:
    """Print the analysis of a recording and keep it as JSON beside it."""
    result = {"jfr": str(jfr_file), **extra, **cpu_load(jfr_file),
              **analyse(samples(jfr_file), top)}
    print(f"recording: {jfr_file}\n{extra}\n"
          f"JVM CPU (share of the machine, jdk.CPULoad): {result['jvm_cpu_share_of_machine']}"
          f"; GC pauses {result['gc_pause_s']} s\nexecution samples: {result['samples']}")
    for title, key in (("stage (leaf-most match on the stack)", "stages"),
                       ("self (top frame)", "self"), ("inclusive", "inclusive")):
        print(f"\n{title}:")
        for m, pct in result[key]:
            print(f"  {pct:5.1f}%  {m}")
    jfr_file.with_suffix(".json").write_text(json.dumps(result, indent=1))


def compare(spark: Any, pid: int, one: Any, variants: list[str], runs: int,
            records: int) -> None:
    """Alternate the variants' order run by run, so a slow spell hits all alike."""
    import statistics

    import psutil

    jvm = psutil.Process(pid)
    confs: dict[str, dict[str, str]] = {}
    for v in variants:
        name, _, rest = v.partition("=")
        confs[name] = dict(kv.split("=", 1) for kv in rest.split(",") if kv)
    rates: dict[str, list[float]] = {n: [] for n in confs}
    cpu: dict[str, list[float]] = {n: [] for n in confs}
    for i in range(runs):
        for name in (list(confs) if i % 2 == 0 else list(reversed(confs))):
            for k, v in confs[name].items():
                spark.conf.set(k, v)
            c0 = sum(jvm.cpu_times()[:2])
            try:
                secs = one()
            finally:
                for k in confs[name]:
                    spark.conf.unset(k)
            cpu[name].append(sum(jvm.cpu_times()[:2]) - c0)
            rates[name].append(records / secs)
            print(f"run {i + 1} {name}: {rates[name][-1]:,.0f} rows/s, JVM CPU "
                  f"{cpu[name][-1]:.2f} s", flush=True)
    for name in confs:
        print(f"{name}: median {statistics.median(rates[name]):,.0f} rows/s, JVM CPU "
              f"{statistics.median(cpu[name]):.2f} s per {records:,} rows")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.jfr_ingest",
                                description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=2_000_000)
    p.add_argument("--value-size", type=int, default=100)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--random-values", action="store_true",
                   help="distinct random values instead of bench.ingest's b'v' * size")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--sink", choices=("parquet", "noop"), default="parquet")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="Spark SQL conf set on the session before the runs")
    p.add_argument("--compare", action="append", default=[], metavar="NAME=K=V,K=V",
                   help="no recording: run these Spark SQL conf variants (NAME= for the "
                        "session as is) in alternating order, --runs each, and print the "
                        "running job's rows/s and the JVM's CPU seconds per run")
    p.add_argument("--analyse", type=Path, metavar="JFR",
                   help="only print the analysis of an earlier recording")
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "txbroker-jfr")
    a = p.parse_args(argv)
    if a.analyse:
        report(a.analyse, a.top, {})
        return 0
    from txbroker.spark_jobs.ingest import ingest, source_stream
    from txbroker.spark_jobs.session import spark_session

    a.out.mkdir(parents=True, exist_ok=True)
    broker = TxBroker().start()
    try:
        topic = "jfr-bench"
        create_topic(broker.bootstrap, topic, a.partitions)
        fill(broker.bootstrap, topic, a.records, a.value_size, a.random_values)
        spark = spark_session("txbroker-jfr", kafka_connector=False)
        for item in a.conf:
            k, _, v = item.partition("=")
            spark.conf.set(k, v)
        pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()

        def one() -> float:
            work = Path(tempfile.mkdtemp(prefix="txbroker-jfr-run-"))
            try:
                if a.sink == "parquet":
                    r = ingest(spark, bootstrap_servers=broker.bootstrap, topic=topic,
                               output=str(work / "out"), checkpoint=str(work / "ck"))
                    assert r.rows_written == a.records, r
                    return r.batch_seconds
                q = (source_stream(spark, bootstrap_servers=broker.bootstrap, topic=topic)
                     .writeStream.format("noop").option("checkpointLocation", str(work / "ck"))
                     .trigger(availableNow=True).start())
                q.awaitTermination()
                return sum(pr.durationMs["triggerExecution"] for pr in q.recentProgress
                           if pr.numInputRows) / 1000
            finally:
                shutil.rmtree(work, ignore_errors=True)

        one()  # warm-up: JIT, Python workers
        if a.compare:
            compare(spark, pid, one, a.compare, a.runs, a.records)
            spark.stop()
            return 0
        jfr_file = a.out / f"ingest-{a.sink}-{int(time.time())}.jfr"
        subprocess.run(["jcmd", str(pid), "JFR.start", "name=ingest", "settings=profile",
                        f"filename={jfr_file}"], check=True, capture_output=True)
        secs = [one() for _ in range(a.runs)]
        subprocess.run(["jcmd", str(pid), "JFR.stop", "name=ingest"], check=True,
                       capture_output=True)
        spark.stop()
    finally:
        broker.stop()
    report(jfr_file, a.top, {"running_rows_per_s": [round(a.records / s) for s in secs],
                             "conf": a.conf, "sink": a.sink,
                             "random_values": a.random_values})
    return 0


if __name__ == "__main__":
    sys.exit(main())
