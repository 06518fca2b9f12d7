"""Broker CPU per unit of work, this checkout against an earlier commit, both brokers
under the same load at the same time.

    .venv/bin/python -m bench.cpu_compare --base REF [--rounds 3] [--seconds 8]
                                          [--producers 4] [--messages 300000]

bench.compare alternates its loads between the two brokers; on a shared or virtual
machine the speed of the machine drifts between rounds (±10-20% here), which blurs a
change of a few percent. This runs the two brokers at once, both pinned to one core
(``taskset``), each with its own clients doing the same work, and measures each
broker's event-loop thread CPU (psutil: user + system) per unit of work over the same
window, so any drift hits both alike. Two loads, one after the other, each round with
fresh brokers:

  txn      ``--producers`` confluent-kafka transactional producers per broker (worker
           processes), 10 x 1 KiB records per transaction (bench.txn_cpu's window):
           loop ms per committed transaction
  produce  one confluent-kafka producer per broker, ``--messages`` x 1 KiB, acks=all,
           linger 5 ms, 4 partitions: loop ms per MB (MiB of values)

Lower is better; the ratio is this/base (above 1: this checkout costs more). It says
nothing about throughput or latency (fsync waits, a second core): bench.compare does.
Exits 1 when a median ratio is above 1/--threshold (0.9 by default: 1.11).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from . import clients
from .compare import ROOT, broker_package, resolve_base
from .transactions import Options, WorkerPool
from .txn_cpu import MeteredTxBroker, scenario

CORE = "0"  # both brokers share it; their clients run anywhere

_PRODUCER = r"""
import sys
from confluent_kafka import Producer
bootstrap, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
              "queue.buffering.max.messages": 200000})
value = b"x" * 1024
for i in range(n):
    while True:
        try:
            p.produce(topic, value, partition=i % 4)
            break
        except BufferError:
            p.poll(0.01)
if p.flush(120):
    sys.exit("not all messages delivered")
"""


def broker_class(tree: Path) -> type[MeteredTxBroker]:
    """txbroker of ``tree``, pinned to CORE."""
    package = broker_package(tree).rsplit(".", 1)[0]  # txbroker or broker (older trees)
    code = (f"import sys\nsys.path.insert(0, {str(tree)!r})\n"
            f"from {package}.cli import main\nsys.exit(main(sys.argv[1:]))\n")

    class Pinned(MeteredTxBroker):
        def command(self) -> list[str]:
            cmd = super().command()  # [python, -m, txbroker, serve, ...]
            return ["taskset", "-c", CORE, cmd[0], "-c", code, *cmd[3:]]

    return Pinned


def loop_cpu(pid: int) -> float:
    proc = psutil.Process(pid)
    return sum(t.user_time + t.system_time for t in proc.threads() if t.id == pid)


def txn_round(classes: list, pools: list, producers: int, seconds: float) -> list[float]:
    brokers = [cls().start() for cls in classes]
    out: dict[int, float] = {}
    try:
        def go(i: int) -> None:
            out[i] = scenario(brokers[i], pools[i], producers, 10, seconds,
                              Options())["loop_ms_per_txn"]
        _both(go)
    finally:
        for b in brokers:
            b.stop()
    return [out[0], out[1]]


def produce_round(classes: list, messages: int) -> list[float]:
    brokers = [cls().start() for cls in classes]
    out: dict[int, float] = {}
    try:
        def go(i: int) -> None:
            b = brokers[i]
            topic = f"cpu-{os.getpid()}-{i}-{time.monotonic_ns()}"
            clients.create_topic(b.bootstrap, topic)
            cpu0 = loop_cpu(b.pid)
            subprocess.run([sys.executable, "-c", _PRODUCER, b.bootstrap, topic,
                            str(messages)], check=True)
            out[i] = 1000 * (loop_cpu(b.pid) - cpu0) / (messages / 1024)
        _both(go)
    finally:
        for b in brokers:
            b.stop()
    return [out[0], out[1]]


def _both(fn) -> None:
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            fn(i)
        except BaseException as e:  # reported after both threads ended
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cpu_compare", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the commit to compare with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0, help="transactions window")
    ap.add_argument("--producers", type=int, default=4, help="per broker")
    ap.add_argument("--messages", type=int, default=300_000, help="produce load per broker")
    ap.add_argument("--only", default="txn,produce")
    ap.add_argument("--threshold", type=float, default=0.9)
    args = ap.parse_args(argv)
    if shutil.which("taskset") is None:
        sys.exit("bench.cpu_compare needs taskset (util-linux)")
    commit, subject = resolve_base(args.base)
    work = Path(tempfile.mkdtemp(prefix="bench-cpu-compare-"))
    tree = work / "base"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=ROOT,
                   check=True, capture_output=True)
    print(f"this: {ROOT}; base: {args.base} = {commit[:10]} {subject!r}", flush=True)
    loads = [x for x in args.only.split(",") if x]
    results: dict[str, list[list[float]]] = {load: [] for load in loads}
    pools = [WorkerPool(args.producers), WorkerPool(args.producers)]
    try:
        classes = [broker_class(ROOT), broker_class(tree)]
        for r in range(args.rounds):
            for load in loads:
                if load == "txn":
                    for pool in pools:
                        pool.ensure()
                    this, base = txn_round(classes, pools, args.producers, args.seconds)
                else:
                    this, base = produce_round(classes, args.messages)
                results[load].append([this, base])
                print(f"round {r + 1}  {load:8} this {this:7.3f}  base {base:7.3f}  "
                      f"ratio {this / base:.3f}", flush=True)
    finally:
        for pool in pools:
            pool.close()
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT,
                       capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    code = 0
    units = {"txn": "loop ms per transaction", "produce": "loop ms per MiB produced"}
    print(f"\nbase {args.base} vs this checkout, medians of {args.rounds} rounds "
          "(lower is better; ratio this/base):")
    for load in loads:
        this = statistics.median(x[0] for x in results[load])
        base = statistics.median(x[1] for x in results[load])
        ratio = statistics.median(x[0] / x[1] for x in results[load])
        print(f"  {load:8} this {this:7.3f}  base {base:7.3f}  ratio {ratio:.3f}  "
              f"({units.get(load, load)})")
        if ratio > 1 / args.threshold:
            code = 1
    if code:
        print(f"REGRESSION? a median ratio is above {1 / args.threshold:.2f}")
    return code


if __name__ == "__main__":
    sys.exit(main())
