"""Run the soak: the broker as a process, the load in threads, a sample each interval."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from txbroker.testing.broker_process import BrokerProcess

from .. import report
from ..clients import create_topic
from . import load, output, sample, verdict

DEFAULT_OUT = report.ROOT / "bench" / "results" / "soak"
TXN_TOPIC, IDEMPOTENT_TOPIC = "soak-txn", "soak-idem"
# Retention keeps the logs at a steady size: memory that grows with the data (each
# segment's index arrays, ~0.5% of its bytes) would otherwise read as a leak (+15 MB/h
# at this load with the 7-day default, the bytes malloc has in use flat).
STEADY_LOGS = {"log.retention.ms": "180000", "log.segment.bytes": str(16 << 20),
               "log.retention.check.interval.ms": "20000"}
TXN_PRODUCERS = 4


def make_workers(bootstrap: str, admin_url: str, scale: float) -> list[load.Worker]:
    """The mixed load (bench/soak/__init__.py lists it); ``scale`` multiplies the
    producers' rates."""
    return [
        *(load.TransactionalProducer(bootstrap, TXN_TOPIC, txn_per_s=50 * scale, index=i)
          for i in range(TXN_PRODUCERS)),
        load.IdempotentProducer(bootstrap, IDEMPOTENT_TOPIC, rate=3000 * scale),
        load.ReadCommittedConsumer(bootstrap, TXN_TOPIC),
        load.KafkaPythonReadCommitted(bootstrap, TXN_TOPIC),
        load.ChurnGroup(bootstrap, IDEMPOTENT_TOPIC, "classic"),
        load.ChurnGroup(bootstrap, IDEMPOTENT_TOPIC, "consumer"),
        *load.share_group_workers(bootstrap, IDEMPOTENT_TOPIC),
        load.TopicChurn(bootstrap),
        load.ConsolePoller(admin_url),
    ]


def _progress(s: dict[str, Any]) -> str:
    return (f"{s['t'] / 60:5.1f} min  RSS {s.get('rss_mb')} MB  fds {s.get('fds')}  "
            f"tasks {s.get('tasks')}  conns {s.get('connections')}  CPU {s.get('cpu_pct')}%  "
            f"log {s['log_lines']} ({s['errors']} ERROR, {s['warnings']} WARNING)  "
            f"produced/s {s.get('produced_per_s')}  consumed/s {s.get('consumed_per_s')}  "
            f"txn/s {s.get('txn_per_s')}")


def _stop(workers: list[load.Worker], timeout: float = 60) -> list[str]:
    for w in workers:
        w.stop()
    deadline = time.monotonic() + timeout
    return [w.name for w in workers if not w.join(max(0.1, deadline - time.monotonic()))]


def soak(args: argparse.Namespace, data_dir: str) -> dict[str, Any]:
    duration = args.minutes * 60
    broker = BrokerProcess(data_dir, {"admin.http.port": "0", **STEADY_LOGS}).start()
    assert broker.admin_url is not None and broker.proc is not None
    pid, samples, log = broker.proc.pid, [], sample.LogTally()
    workers: list[load.Worker] = []
    interrupted, stuck, broker_died = False, [], False
    try:
        for topic in (TXN_TOPIC, IDEMPOTENT_TOPIC):
            create_topic(broker.bootstrap, topic, 4)
        workers = [w.start() for w in make_workers(broker.bootstrap, broker.admin_url,
                                                   args.load)]
        t0 = time.monotonic()
        next_t = 0.0
        while next_t <= duration + 0.01:
            time.sleep(max(0.0, t0 + next_t - time.monotonic()))
            if not broker.running:
                broker_died = True
                break
            try:
                samples.append(sample.take(time.monotonic() - t0, pid, broker.admin_url, log,
                                           broker.output, load.totals(workers)))
            except FileNotFoundError:  # /proc/PID is gone: the broker exited just now
                broker_died = True
                break
            sample.add_rates(samples)
            print(_progress(samples[-1]), flush=True)
            next_t += args.sample_seconds
    except KeyboardInterrupt:
        interrupted = True
    finally:
        stuck = _stop(workers)
        rc = broker.terminate(60) if broker.running else broker.proc.returncode
        log.update(broker.output)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "broker.log").write_text(broker.log_text())
    return {"samples": samples, "workers": [w.report() for w in workers],
            "broker_exit": rc, "broker_died": broker_died, "interrupted": interrupted,
            "stuck_workers": stuck, "totals": load.totals(workers),
            "log": {"lines": log.lines, "bytes": log.bytes, "errors": log.errors,
                    "warnings": log.warnings, "tracebacks": log.tracebacks,
                    "error_lines": log.error_lines,
                    "warning_lines": log.warning_lines}}


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--sample-seconds", type=float, default=60)
    p.add_argument("--warmup-minutes", type=float, default=None,
                   help="samples before it are not judged (default: a sixth of the run, "
                        "at most 5 minutes)")
    p.add_argument("--load", type=float, default=1.0, help="multiplies the producers' rates")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    if args.warmup_minutes is None:
        args.warmup_minutes = min(5.0, args.minutes / 6)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    report.stop_on_sigterm()
    machine = report.machine_info()
    with tempfile.TemporaryDirectory(prefix="txbroker-soak-") as d:
        result = soak(args, d + "/data")
    result["verdicts"] = verdict.as_dicts(verdict.compute(
        result["samples"], args.warmup_minutes * 60, error_lines=result["log"]["errors"],
        violations=result["totals"]["violations"]))
    for problem, what in (("broker_died", "the broker exited during the soak"),
                          ("interrupted", "interrupted before the end"),
                          ("stuck_workers", "workers that did not stop within 60 s")):
        if result[problem]:
            result["verdicts"].append({"name": what, "value": str(result[problem]),
                                       "goal": "none", "ok": False})
    full = {"command": report.command_line("bench.soak", argv), "machine": machine,
            "config": {"minutes": args.minutes, "sample_seconds": args.sample_seconds,
                       "warmup_seconds": args.warmup_minutes * 60, "load": args.load},
            **result}
    output.write_all(args.out, full)
    print()
    print(output.markdown(full))
    print(f"wrote {args.out}/soak.md, soak.png, soak.json, soak.csv, broker.log")
    return 0 if all(v["ok"] is not False for v in full["verdicts"]) else 1


if __name__ == "__main__":
    sys.exit(main())
