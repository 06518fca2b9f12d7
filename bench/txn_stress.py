"""Stress of transactional Java producers (transactions v2 at transaction.version 2):
many short transactions from several producers, each alone on its transactional id,
so that any fencing or fatal error is a bug (of the broker, or of the client when it
happens on Apache Kafka too). How an intermittent ProducerFencedException of Java
producers on transactions v2 was found (docs/transactions.md).

    .venv/bin/python -m bench.txn_stress [--broker txbroker|kafka] [--runs N]
        [--seconds S] [--producers P] [--records R] [--abort-every K]

Each run starts a fresh broker (txbroker) or uses one Kafka 4.3.1 for all runs, creates
a 4-partition topic, and runs bench/jvm/TxnStress.java. Prints each run's transactions
and failures (with the client's exception); exits 1 if any producer failed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import uuid

from .brokers import KafkaBroker, TxBroker
from .transactions_v2 import compile_java, create_topic


def run_stress(classes, bootstrap: str, a: argparse.Namespace) -> tuple[int, list[str]]:
    from tests.kafka_reference import jars_dir

    topic = create_topic(bootstrap)
    done = subprocess.run(
        ["java", "-Xmx512m", "-cp", f"{classes}{os.pathsep}{jars_dir()}/*", "TxnStress",
         bootstrap, topic, f"stress-{uuid.uuid4().hex[:8]}", str(a.producers), str(a.records),
         str(a.seconds), "4", str(a.abort_every)],
        capture_output=True, text=True, timeout=a.seconds + 180)
    lines = done.stdout.splitlines()
    result = next((x for x in lines if x.startswith("RESULT ")), None)
    if result is None:
        raise RuntimeError(f"TxnStress failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")
    return int(result.split("txns=")[1].split()[0]), [x for x in lines if x.startswith("FAIL ")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--broker", choices=("txbroker", "kafka"), default="txbroker")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--producers", type=int, default=8)
    ap.add_argument("--records", type=int, default=1)
    ap.add_argument("--abort-every", type=int, default=0)
    a = ap.parse_args(argv)
    classes = compile_java("TxnStress.java")
    total, failures = 0, []
    shared = KafkaBroker().start() if a.broker == "kafka" else None
    try:
        for run in range(a.runs):
            broker = shared or TxBroker().start()
            try:
                txns, failed = run_stress(classes, broker.bootstrap, a)
            finally:
                if shared is None:
                    broker.stop()
            total += txns
            failures += failed
            print(f"run {run}: {txns} transactions, {len(failed)} failed", *failed, sep="\n  ",
                  flush=True)
    finally:
        if shared is not None:
            shared.stop()
    print(f"{a.broker}: {a.runs} runs, {total} transactions, {len(failures)} producer(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
