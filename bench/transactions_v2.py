"""Transactions v1 against v2 (KIP-890 part 2), txbroker against Apache Kafka 4.3.1.

    .venv/bin/python -m bench.transactions_v2 [--runs N] [--seconds S] [--out DIR]

One transactional producer commits transactions of 10 records of 1 KiB (round-robin
over a 4-partition topic) for S seconds after a warm-up; transactions/s and the
commit latency (p50/p99 of the commit call, which also waits for the records) per leg:

* ``txbroker/confluent-v1``: confluent-kafka (librdkafka speaks transactions v1:
  AddPartitionsToTxn, EndTxn v1) on txbroker with its defaults;
* ``txbroker/java-v2``: Kafka's Java 4.3.1 producer on the same broker, which
  finalizes ``transaction.version`` 2: Produce v12 adds the partitions, EndTxn v5;
* ``txbroker-tv1/java-v1``: the same Java producer on a txbroker started with
  ``txbroker.transaction.version=1``: the same client on the v1 protocol;
* ``kafka/confluent-v1`` and ``kafka/java-v2``: the same clients on Apache Kafka 4.3.1
  (`make kafka-jars`, its defaults: transaction.version 2, no fsync before acks).

Every run starts each broker fresh. Results: bench/results/transactions_v2.json and
.md. On a shared machine the numbers are noisy: compare legs within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .brokers import KafkaBroker, TxBroker
from .transactions import PARTITIONS, _percentile, cmd_txn_rate

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "results"
RECORDS, VALUE_SIZE, WARMUP = 10, 1024, 20
LEGS = (("txbroker", "confluent-v1"), ("txbroker", "java-v2"), ("txbroker-tv1", "java-v1"),
        ("kafka", "confluent-v1"), ("kafka", "java-v2"))


@dataclass
class Options:
    runs: int = 1
    seconds: float = 5.0
    out: Path = DEFAULT_OUT


def compile_java(source: str = "TxnRate.java") -> Path:
    """bench/jvm/``source`` compiled against Kafka's jars; the classes directory."""
    from tests.kafka_reference import jars_dir

    out = Path(tempfile.mkdtemp(prefix="txnrate-"))
    subprocess.run(["javac", "-nowarn", "-d", str(out), "-cp", f"{jars_dir()}/*",
                    str(ROOT / "bench" / "jvm" / source)], check=True, timeout=180)
    return out


def java_rate(classes: Path, bootstrap: str, topic: str, seconds: float) -> dict[str, Any]:
    from tests.kafka_reference import jars_dir

    done = subprocess.run(
        ["java", "-Xmx256m", "-cp", f"{classes}{os.pathsep}{jars_dir()}/*", "TxnRate",
         bootstrap, topic, f"bench-{uuid.uuid4().hex[:8]}", str(RECORDS), str(VALUE_SIZE),
         str(seconds), str(WARMUP), str(PARTITIONS)],
        capture_output=True, text=True, timeout=seconds + 120)
    line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"TxnRate failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")
    fields = dict(f.split("=", 1) for f in line.split()[1:])
    commits = [float(x) for x in fields["commit_ms"].split(",") if x]
    return {"v2": fields["v2"] == "true", "txns": int(fields["txns"]),
            "seconds": float(fields["seconds"]), "commit_ms": commits}


def confluent_rate(bootstrap: str, topic: str, seconds: float) -> dict[str, Any]:
    r = cmd_txn_rate(bootstrap, topic, f"bench-{uuid.uuid4().hex[:8]}", RECORDS, VALUE_SIZE,
                     time.monotonic(), seconds, 10**9, WARMUP, 30.0, 0)
    return {"v2": False, "txns": r["txns"], "seconds": r["end"] - r["started"],
            "commit_ms": r["commit_ms"]}


def create_topic(bootstrap: str) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"tv2-bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    time.sleep(1)  # Kafka: leaders a moment after CreateTopics
    return name


def run_once(opts: Options, classes: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for broker_name in dict.fromkeys(b for b, _ in LEGS):
        broker = (KafkaBroker() if broker_name == "kafka" else
                  TxBroker({"txbroker.transaction.version": "1"}
                           if broker_name == "txbroker-tv1" else {}))
        broker.start()
        try:
            for b, client in LEGS:
                if b != broker_name:
                    continue
                topic = create_topic(broker.bootstrap)
                try:
                    r = (java_rate(classes, broker.bootstrap, topic, opts.seconds)
                         if client.startswith("java") else
                         confluent_rate(broker.bootstrap, topic, opts.seconds))
                except Exception as e:  # recorded, not fatal for the other legs
                    out[f"{b}/{client}"] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                    continue
                assert r["v2"] == client.endswith("v2"), (b, client, r["v2"])
                out[f"{b}/{client}"] = {
                    "ok": True, "txn_per_s": round(r["txns"] / r["seconds"], 1),
                    "commit_p50_ms": round(_percentile(r["commit_ms"], 0.5), 2),
                    "commit_p99_ms": round(_percentile(r["commit_ms"], 0.99), 2),
                    "txns": r["txns"]}
        finally:
            broker.stop()
    return out


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for leg in (f"{b}/{c}" for b, c in LEGS):
        ok = [r[leg] for r in runs if r.get(leg, {}).get("ok")]
        out[leg] = {k: (sorted(x[k] for x in ok)[len(ok) // 2] if ok else None)
                    for k in ("txn_per_s", "commit_p50_ms", "commit_p99_ms")}
    return out


def render_markdown(rep: dict[str, Any]) -> str:
    lines = [f"# Transactions v1 vs v2 ({rep['command']})", "",
             f"{rep['runs']} run(s) of {rep['seconds']} s, one producer, transactions of "
             f"{RECORDS} x {VALUE_SIZE} B over {PARTITIONS} partitions; medians. "
             f"Load average at start: {rep['loadavg']}.", "",
             "| broker / client (protocol) | transactions/s | commit p50 ms | commit p99 ms |",
             "|---|---|---|---|"]
    for leg, s in rep["summary"].items():
        lines.append(f"| {leg} | {s['txn_per_s']} | {s['commit_p50_ms']} | {s['commit_p99_ms']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = ap.parse_args(argv)
    opts = Options(a.runs, a.seconds, a.out)
    classes = compile_java()
    runs = [run_once(opts, classes) for _ in range(opts.runs)]
    rep = {"command": "python -m bench.transactions_v2 " + " ".join(argv or sys.argv[1:]),
           "runs": opts.runs, "seconds": opts.seconds, "loadavg": os.getloadavg(),
           "results": runs, "summary": summarize(runs)}
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / "transactions_v2.json").write_text(json.dumps(rep, indent=2) + "\n")
    (opts.out / "transactions_v2.md").write_text(render_markdown(rep))
    print(render_markdown(rep))
    return 0 if all(r.get("ok") for run in runs for r in run.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

