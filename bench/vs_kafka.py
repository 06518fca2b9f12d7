"""txbroker against Apache Kafka 4 in the same run, with the same clients.

    .venv/bin/python -m bench.vs_kafka [--runs N] [--messages N] [--rate-seconds S] [--out DIR]

Brokers: ``txbroker`` (its defaults: fsync before acks=all), ``txbroker-kafka-flush``
(Kafka's flush policy: nothing waits for an fsync) and ``kafka`` (Apache Kafka 4.3.1
from `make kafka-jars`, its defaults, one node, 1 GB heap as kafka-server-start.sh
gives it). Every run starts each broker fresh and measures, in this order:

* **startup**: from starting the broker process to its first ApiVersions answer
  (txbroker: to its "ready" line, which it prints once listening; Kafka: its storage
  is formatted before, as it is once per cluster);
* **produce**: confluent-kafka produces N values of 1 KiB with acks=all to a
  4-partition topic (bench/clients.py's producer settings), MB/s;
* **consume**: confluent-kafka reads them back (librdkafka's default
  ``isolation.level=read_committed``), MB/s;
* **perf-produce** / **perf-consume**: the same with Kafka's own perf tools
  (kafka-producer-perf-test with ``acks=all``, then kafka-consumer-perf-test with
  ``isolation.level=read_committed``; N records of 1 KiB, a 4-partition topic), the
  MB/s each tool reports (the consumer's ``fetch.MB.sec``: without its group join);
* **rate**: transactions/s of 1 and of 8 transactional producers (one process each)
  committing transactions of 10 records of 1 KiB, with commit latency p50/p99
  (bench/transactions.py's rate phase);
* the broker's peak RSS (with children) over all of it, sampled every 50 ms.

Ratios are txbroker (each flush policy) / Kafka. Results: bench/results/vs_kafka.json
and vs_kafka.md. The machine's other load is recorded; on a shared machine the numbers
are noisy (compare ratios within one run, not numbers between runs).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import clients, report
from .brokers import KAFKA_FLUSH_BROKER, KAFKA_FLUSH_POLICY, KafkaBroker, ManagedBroker, RssSampler
from .brokers import TxBroker as _TxBroker
from .transactions import Options as TxnOptions
from .transactions import Run as TxnRun
from .transactions import WorkerPool

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "results"
BROKERS = ("txbroker", KAFKA_FLUSH_BROKER, "kafka")
RATE_PHASES = ((1, 10), (8, 10))
# (phase, key, higher is better) compared as txbroker / Kafka.
COMPARED = (
    ("startup", "seconds", False),
    ("produce", "mb_per_s", True),
    ("consume", "mb_per_s", True),
    ("perf-produce", "mb_per_s", True),
    ("perf-consume", "mb_per_s", True),
    ("rate-1p-10r", "txn_per_s", True),
    ("rate-8p-10r", "txn_per_s", True),
    ("rate-1p-10r", "commit_p50_ms", False),
    ("rate-1p-10r", "commit_p99_ms", False),
    ("rate-8p-10r", "commit_p99_ms", False),
    ("run", "peak_rss_mb", False),
)
# The targets: (phase, key, txbroker variant, bound on the ratio to Kafka).
TARGETS = (
    ("rate-8p-10r", "txn_per_s", KAFKA_FLUSH_BROKER, ">=", 1.0),
    ("rate-1p-10r", "commit_p99_ms", KAFKA_FLUSH_BROKER, "<=", 1.0),
    ("produce", "mb_per_s", "txbroker", ">=", 0.5),
    ("run", "peak_rss_mb", "txbroker", "<=", 0.25),
    ("startup", "seconds", "txbroker", "<=", 0.1),
)


@dataclass
class Options:
    runs: int = 1
    messages: int = 200_000
    value_size: int = 1024
    rate_seconds: float = 3.0
    phase_timeout: float = 120.0
    brokers: Sequence[str] = BROKERS
    out: Path = DEFAULT_OUT


class TimedTxBroker(_TxBroker):
    """txbroker with its start timed the way KafkaBroker's is."""

    startup_seconds = 0.0

    def start(self, timeout: float = 30) -> TimedTxBroker:
        began = time.monotonic()
        super().start(timeout)
        self.startup_seconds = time.monotonic() - began
        return self


def make_broker(name: str) -> ManagedBroker:
    if name == "kafka":
        return KafkaBroker()
    return TimedTxBroker(KAFKA_FLUSH_POLICY if name == KAFKA_FLUSH_BROKER else {})


class Run(TxnRun):
    """bench/transactions.py's run with this benchmark's phases."""

    def __init__(self, broker: ManagedBroker, pool: WorkerPool, opts: Options) -> None:
        super().__init__(broker, pool, TxnOptions(
            producers=(1, 8), records=(10,), rate_seconds=opts.rate_seconds,
            value_size=opts.value_size, phase_timeout=opts.phase_timeout), 0)
        self.bench = opts

    def execute(self) -> dict[str, Any]:
        o = self.bench
        out: dict[str, Any] = {"ok": False}
        try:
            self.broker.start()
            self.phases["startup"] = {"ok": True, "seconds": round(
                self.broker.startup_seconds, 3)}
            self.sampler = RssSampler(self.broker.pid).start()
            topic = self._topic("produce")
            value = os.urandom(o.value_size)
            self._phase("produce", lambda: clients.confluent_produce(
                self.broker.bootstrap, topic, o.messages, value, o.phase_timeout).as_dict())
            self._phase("consume", lambda: clients.confluent_consume(
                self.broker.bootstrap, topic, o.messages, o.phase_timeout).as_dict())
            if jvm_tools_available():
                perf_topic = self._topic("perf")
                self._phase("perf-produce", lambda: perf_produce(
                    self.broker.bootstrap, perf_topic, o.messages, o.value_size,
                    o.phase_timeout))
                self._phase("perf-consume", lambda: perf_consume(
                    self.broker.bootstrap, perf_topic, o.messages, o.phase_timeout))
            rate_topic = self._topic("rate")
            self.first_transaction(rate_topic)
            for producers, records in RATE_PHASES:
                self._phase(f"rate-{producers}p-{records}r",
                            lambda p=producers, r=records: self.rate(rate_topic, p, r))
            out["ok"] = all(p.get("ok") for p in self.phases.values())
        except Exception as e:
            out["error"] = f"{type(e).__name__}: {e}"
            out["broker_log_tail"] = self.broker.log_tail(15)
        finally:
            self.stop()
        if self.sampler is not None:
            self.phases["run"] = {"ok": True,
                                  "peak_rss_mb": round(self.sampler.peak_rss / 1e6, 1)}
        out["phases"] = self.phases
        return out


def jvm_tools_available() -> bool:
    from tests.kafka_reference import jars_available

    return jars_available()


def _perf_tool(main: str, args: list[str], timeout: float) -> str:
    from tests.kafka_reference import jars_dir

    done = subprocess.run(["java", "-Xmx512m", "-cp", str(jars_dir() / "*"), main, *args],
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{main} exited {done.returncode}: {done.stderr[-500:]}")
    return done.stdout


def perf_produce(bootstrap: str, topic: str, records: int, size: int,
                 timeout: float) -> dict[str, Any]:
    """kafka-producer-perf-test; its last line: "N records sent, R records/sec (M MB/sec),
    ..."."""
    out = _perf_tool("org.apache.kafka.tools.ProducerPerformance", [
        "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
        "--record-size", str(size), "--throughput", "-1", "--command-property", "acks=all"],
        timeout)
    final = [line for line in out.splitlines() if f"{records} records sent" in line]
    m = re.search(r"([\d.]+) records/sec \(([\d.]+) MB/sec\)", final[-1] if final else "")
    if m is None:
        raise RuntimeError(f"no summary line in kafka-producer-perf-test's output: {out[-300:]}")
    return {"records": records, "records_per_s": float(m.group(1)),
            "mb_per_s": float(m.group(2))}


def perf_consume(bootstrap: str, topic: str, records: int, timeout: float) -> dict[str, Any]:
    """kafka-consumer-perf-test with read_committed; its CSV line's fetch.MB.sec (the
    rate after the group join, which Kafka delays by group.initial.rebalance.delay.ms)."""
    out = _perf_tool("org.apache.kafka.tools.ConsumerPerformance", [
        "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
        "--timeout", str(int(timeout * 1000)), "--group", f"perf-{uuid.uuid4().hex[:8]}",
        "--command-property", "isolation.level=read_committed"], timeout + 30)
    lines = [line.split(",") for line in out.splitlines() if line.count(",") >= 9]
    if len(lines) < 2:
        raise RuntimeError(f"no result line in kafka-consumer-perf-test's output: {out[-300:]}")
    row = dict(zip([h.strip() for h in lines[0]], [v.strip() for v in lines[-1]], strict=True))
    consumed = int(row["data.consumed.in.nMsg"])
    if consumed < records:
        raise RuntimeError(f"kafka-consumer-perf-test read {consumed} of {records} records")
    return {"records": consumed, "mb_per_s": float(row["fetch.MB.sec"]),
            "mb_per_s_with_join": float(row["MB.sec"]),
            "rebalance_ms": float(row["rebalance.time.ms"])}


def _median(values: list[float]) -> float | None:
    return report.median(values, 3)


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for phase, key, _higher in COMPARED:
        vals = [r["phases"][phase][key] for r in runs
                if r["phases"].get(phase, {}).get("ok") and r["phases"][phase].get(key)
                is not None]
        out.setdefault(phase, {})[key] = _median(vals)
    return out


def ratios(summary: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    kafka = summary.get("kafka", {})
    out: dict[str, dict[str, float | None]] = {}
    for name, s in summary.items():
        if name == "kafka":
            continue
        out[name] = {}
        for phase, key, _higher in COMPARED:
            a, b = s.get(phase, {}).get(key), kafka.get(phase, {}).get(key)
            out[name][f"{phase}.{key}"] = round(a / b, 3) if a and b else None
    return out


def check_targets(rat: dict[str, dict[str, float | None]]) -> list[dict[str, Any]]:
    out = []
    for phase, key, name, op, bound in TARGETS:
        r = rat.get(name, {}).get(f"{phase}.{key}")
        met = None if r is None else (r >= bound if op == ">=" else r <= bound)
        out.append({"metric": f"{phase}.{key}", "broker": name, "ratio": r,
                    "target": f"{op} {bound}", "met": met})
    return out


def render_markdown(rep: dict[str, Any]) -> str:
    names = list(rep["summary"])
    lines = ["# txbroker vs Apache Kafka", "",
             f"Command: `{rep['command']}`  ", f"Date: {rep['machine']['date']}, "
             f"{rep['machine']['logical_cores']} cores ({rep['machine']['cpu_model']}), "
             f"load average at start {rep['machine']['loadavg_start']}, at end "
             f"{rep['machine']['loadavg_end']}. Runs: {rep['options']['runs']}, medians.", "",
             "| metric | " + " | ".join(names) + " | " + " | ".join(
                 f"{n} / kafka" for n in names if n != "kafka") + " |",
             "|---|" + "---|" * (2 * len(names) - ("kafka" in names))]
    for phase, key, _higher in COMPARED:
        vals = [report.fmt(rep["summary"][n].get(phase, {}).get(key), 2) for n in names]
        rats = [report.fmt(rep["ratios"][n].get(f"{phase}.{key}"), 3) for n in names
                if n != "kafka"]
        lines.append(f"| {phase} {key} | " + " | ".join(vals + rats) + " |")
    lines += ["", "Targets:", ""]
    for t in rep["targets"]:
        met = {True: "met", False: "NOT met", None: "no data"}[t["met"]]
        lines.append(f"- {t['broker']} / kafka {t['metric']} {t['target']}: "
                     f"{report.fmt(t['ratio'], 3)} ({met})")
    errors = {n: [r.get("error") for r in rep["results"][n] if r.get("error")] for n in names}
    failed = {n: [p for r in rep["results"][n] for p, v in r["phases"].items() if not v.get("ok")]
              for n in names}
    for n in names:
        if errors[n] or failed[n]:
            lines.append(f"- {n}: failed phases {failed[n]} {errors[n]}")
    return "\n".join(lines) + "\n"


def run(opts: Options, command: str) -> dict[str, Any]:
    import confluent_kafka

    from tests.kafka_reference import jars_available, kafka_version

    names = [n for n in opts.brokers if n != "kafka" or jars_available()]
    machine = report.machine_info(
        confluent_kafka=f"{report.package_version('confluent-kafka')} "
                        f"(librdkafka {confluent_kafka.libversion()[0]})",
        kafka=kafka_version() if jars_available() else "no jars (make kafka-jars)")
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    pool = WorkerPool(8)
    started = time.monotonic()
    try:
        for i in range(opts.runs):
            for name in names:
                r = Run(make_broker(name), pool, opts).execute()
                r["broker"] = name
                results[name].append(r)
                ph = r["phases"]
                print(f"[{time.monotonic() - started:6.1f}s] {name} run {i + 1}: " + ", ".join(
                    f"{p}.{k}={ph.get(p, {}).get(k)}" for p, k, _h in COMPARED)
                    + (f" ERROR {r['error']}" if r.get("error") else ""), flush=True)
    finally:
        pool.close()
    summary = {n: summarize(rs) for n, rs in results.items()}
    rat = ratios(summary)
    return {"command": command,
            "machine": machine | {"loadavg_end": [round(x, 2) for x in os.getloadavg()]},
            "options": {"runs": opts.runs, "messages": opts.messages,
                        "value_size": opts.value_size, "rate_seconds": opts.rate_seconds,
                        "partitions": clients.PARTITIONS, "brokers": names,
                        "producer": clients.CONFLUENT_PRODUCER,
                        "consumer": clients.CONFLUENT_CONSUMER},
            "wall_seconds": round(time.monotonic() - started, 1),
            "results": results, "summary": summary, "ratios": rat,
            "targets": check_targets(rat), "tag": uuid.uuid4().hex[:8]}


def parse_args(argv: Sequence[str] | None) -> Options:
    p = argparse.ArgumentParser(prog="python -m bench.vs_kafka", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--rate-seconds", type=float, default=3.0)
    p.add_argument("--brokers", default=",".join(BROKERS))
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = p.parse_args(argv)
    return Options(runs=a.runs, messages=a.messages, rate_seconds=a.rate_seconds,
                   brokers=tuple(a.brokers.split(",")), out=a.out)


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    command = report.command_line("bench.vs_kafka", argv)
    report.stop_on_sigterm()
    rep = run(opts, command)
    report.write_report(opts.out, "vs_kafka", rep, render_markdown)
    return 0 if all(r.get("ok") for rs in rep["results"].values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
