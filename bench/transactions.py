"""Transaction benchmark of txbroker and Tansu with confluent-kafka transactional producers.

    .venv/bin/python -m bench.transactions [--quick] [--runs N] [--out DIR] [--wait-idle S]

Every run starts a fresh broker per broker under test and runs, on it, the
scenarios below. The brokers: ``txbroker`` with its defaults (durable: fsync before
acks=all and before acting on transaction state) in a fresh temporary data dir;
``txbroker-kafka-flush``, the same with Apache Kafka's default flush policy
(``log.flush.interval.messages`` = Long.MAX_VALUE: nothing waits for an fsync, as in
a Kafka broker, which leaves durability to replicas); Tansu with in-memory storage.

* **rate**: transactions/s with 1 and with 8 concurrent transactional producers,
  each committing transactions of 1, 10 and 100 records of 1 KiB (4-partition
  topic, a transaction's records spread round-robin over the partitions). Every
  producer runs in its own worker process, with its own ``transactional.id``: 8
  threads in one process measured about a third fewer transactions/s, because a
  thread returning from ``commit_transaction()`` waits for the GIL. The time of each
  ``commit_transaction()`` call is the commit latency.
* **consume**: a topic filled by 4 transactional producers with 1,000-record
  transactions, every 10th aborted (its records were delivered before the abort,
  so they are in the log), is read from offset 0 with ``isolation.level=
  read_committed`` and with ``read_uncommitted``, 3 times each, taking turns.
  Values carry a one-byte tag, so a read_committed consumer that gets an aborted
  record is caught.
* **cost**: one idempotent (``enable.idempotence=true``) and one transactional
  producer (in the same worker process) take turns producing 1 KiB values as fast
  as they can, in 8 slices of 0.75 s each; the transactional one commits whenever
  its transaction is 100 ms old. Taking turns makes a change in the machine's other
  load hit both alike. cost = 1 - transactional MB/s / idempotent MB/s.

Medians over the runs; the broker's RSS (with children) is sampled every 50 ms.
Results: bench/results/transactions.json and transactions.md. A broker that fails
a scenario gets the failure recorded, not a crash.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import report
from .brokers import broker_factories
from .report import cmd_output as _cmd_output
from .report import wait_for_idle
from .throughput import machine_info
from .transactions_report import _txbrokers, check_targets, ratios, render_markdown, summarize
from .transactions_scenarios import Run
from .transactions_scenarios import _cpu_of as _cpu_of
from .transactions_scenarios import _percentile as _percentile
from .transactions_settings import (
    BROKER_CODE,
    BROKERS,
    CONSUMER,
    COST_PRODUCER,
    DEFAULT_OUT,
    FILL_PRODUCERS,
    PARTITIONS,
    TXN_PRODUCER,
    Options,
)
from .transactions_workers import WorkerPool
from .transactions_workers import cmd_txn_rate as cmd_txn_rate

# This module is the command; the benchmark is split into transactions_settings.py
# (options, constants, client configurations), transactions_workers.py (the clients,
# in worker processes), transactions_scenarios.py (a run's phases on one broker) and
# transactions_report.py (summary, ratios, targets, Markdown). Other benchmarks import
# from here (the `x as x` imports are these re-exports): bench.acl (DEFAULT_OUT),
# bench.transactions_v2 (PARTITIONS, _percentile, cmd_txn_rate), bench.txn_cpu
# (Options, WorkerPool, _cpu_of, _percentile), bench.vs_kafka (Options, Run, WorkerPool).

# --- main -------------------------------------------------------------------------------

def parse_args(argv: Sequence[str] | None) -> Options:
    ap = argparse.ArgumentParser(prog="python -m bench.transactions", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, help="runs per broker (default 3)")
    ap.add_argument("--quick", action="store_true",
                    help="short phases and a small consume topic (about 1.5 min)")
    ap.add_argument("--rate-seconds", type=float, help="measured window per rate phase (3)")
    ap.add_argument("--cost-seconds", type=float,
                    help="producing time per mode in the cost phase (6, in 8 slices)")
    ap.add_argument("--fill-txns", type=int,
                    help=f"transactions per fill producer ({FILL_PRODUCERS} producers, "
                         "1,000 records each; default 75)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    ap.add_argument("--brokers", default=",".join(BROKERS), help="comma-separated subset")
    ap.add_argument("--phase-timeout", type=float, default=60.0,
                    help="seconds allowed for one client call sequence of a phase")
    ap.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS",
                    help="before each run, wait up to this long for the machine to be idle")
    ap.add_argument("--txbroker-override", action="append", default=[], metavar="KEY=VALUE",
                    help="passed to txbroker as --override (default: none)")
    args = ap.parse_args(argv)
    opts = Options(out=args.out, phase_timeout=args.phase_timeout, wait_idle=args.wait_idle)
    if args.quick:
        opts.rate_seconds, opts.cost_seconds, opts.cost_slices = 0.6, 1.5, 2
        opts.fill_txns, opts.reads, opts.warmup_txns = 10, 2, 1
    for name in ("runs", "rate_seconds", "cost_seconds", "fill_txns"):
        if getattr(args, name) is not None:
            setattr(opts, name, getattr(args, name))
    opts.brokers = [b for b in args.brokers.split(",") if b]
    for item in args.txbroker_override:
        key, _, value = item.partition("=")
        opts.txbroker_overrides[key] = value
    bad = [b for b in opts.brokers if b not in BROKERS]
    if bad or opts.runs < 1 or opts.fill_txns < 1 or min(opts.rate_seconds,
                                                          opts.cost_seconds) <= 0:
        ap.error(f"bad arguments: {bad or 'runs, fill transactions and times must be > 0'}")
    return opts


def code_version() -> str:
    """HEAD, plus a hash of the uncommitted changes to the broker's code if any."""
    head = _cmd_output(["git", "rev-parse", "--short", "HEAD"])
    diff = _cmd_output(["git", "diff", "HEAD", "--", *BROKER_CODE])
    return f"{head}+{hashlib.sha1(diff.encode()).hexdigest()[:8]}" if diff else head



def run(opts: Options, command: str) -> dict[str, Any]:
    factories, skipped, tansu = broker_factories(opts.brokers, opts.txbroker_overrides)
    machine = machine_info(tansu)
    started = time.monotonic()
    results: dict[str, dict[str, Any]] = {name: {"runs": []} for name in factories}
    pool = WorkerPool(max(max(opts.producers), FILL_PRODUCERS))
    try:
        pool.ensure()
        for run_index in range(opts.runs):
            for name, make in factories.items():  # alternate brokers within a run index
                waited = wait_for_idle(opts.wait_idle) if opts.wait_idle > 0 else 0.0
                # The code under test is read when the broker starts: note its version.
                version = code_version()
                r = Run(make(), pool, opts, run_index).execute()
                r["waited_for_idle_s"] = waited
                if name.startswith("txbroker"):
                    r["txbroker_commit"] = version
                results[name]["runs"].append(r)
                ph = r["phases"]
                bits = []
                for key in ("rate-1p-10r", "rate-8p-10r"):
                    if ph.get(key, {}).get("ok"):
                        bits.append(f"{key} {ph[key]['txn_per_s']:.0f} txn/s "
                                    f"p99 {ph[key]['commit_p99_ms']:.1f} ms")
                if ph.get("consume", {}).get("ok"):
                    bits.append(f"read_committed {ph['consume']['rc_mb_per_s']:.0f} MB/s, "
                                f"read_uncommitted {ph['consume']['ru_mb_per_s']:.0f} MB/s")
                if r.get("cost") is not None:
                    bits.append(f"cost {100 * r['cost']:.1f}%")
                failed = [k for k, v in ph.items() if not v.get("ok")]
                if failed:
                    bits.append(f"FAILED {failed}")
                if r.get("error"):
                    bits.append(f"ERROR {r['error']}")
                print(f"[{time.monotonic() - started:6.1f}s] {name:20s} run {run_index + 1}/"
                      f"{opts.runs}: {'; '.join(bits)}", flush=True)
    finally:
        pool.close()
    for data in results.values():
        data["summary"] = summarize(data["runs"])
    return {
        "command": command,
        "machine": machine | {"loadavg_end": [round(x, 2) for x in os.getloadavg()]},
        "options": {
            "runs": opts.runs, "producers": list(opts.producers),
            "records_per_txn": list(opts.records), "rate_seconds": opts.rate_seconds,
            "rate_max_txns_per_producer": opts.rate_max_txns, "warmup_txns": opts.warmup_txns,
            "fill_producers": FILL_PRODUCERS, "fill_txns": opts.fill_txns,
            "fill_records": opts.fill_records, "abort_every": opts.abort_every,
            "reads_per_level": opts.reads,
            "cost_seconds_per_mode": opts.cost_seconds, "cost_slices": opts.cost_slices,
            "commit_interval_s": opts.commit_interval,
            "value_size": opts.value_size, "partitions": PARTITIONS,
            "phase_timeout_s": opts.phase_timeout, "wait_idle_s": opts.wait_idle,
            "txbroker_overrides": opts.txbroker_overrides,
            "client_config": {"transactional_producer": TXN_PRODUCER,
                              "cost_producer": COST_PRODUCER, "consumer": CONSUMER},
            "producer_model": "one worker process per producer (spawned), one "
                              "transactional.id each"},
        "wall_seconds": round(time.monotonic() - started, 1),
        "results": results,
        "ratios": ratios(results),
        "targets": check_targets(results),
        "skipped": skipped,
    }


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    command = report.command_line("bench.transactions", argv)
    report.stop_on_sigterm()
    result = run(opts, command)
    report.write_report(opts.out, "transactions", result, render_markdown)
    # Tansu failures are findings; a txbroker variant with no good run is an error.
    return 1 if any(not result["results"][name]["summary"]["ok_runs"]
                    for name in _txbrokers(result["results"])) else 0


if __name__ == "__main__":
    sys.exit(main())
