"""Broker CPU per committed transaction: the metric that a shared machine does not blur.

    .venv/bin/python -m bench.txn_cpu [--producers 1,8] [--records 10] [--seconds 5]
                                      [--profile DIR] [--repeat N]
                                      [--override KEY=VALUE ...]

Starts txbroker (defaults, fresh data dir) as a process, runs N confluent-kafka
transactional producers (one worker process each, bench.transactions' rate
scenario) and reports, per scenario, the broker's CPU seconds (user + system, all
threads and child processes, from psutil) per committed transaction, split into
the event-loop thread and the rest (the fsync helper process), plus the
wall-clock rate and commit latencies, which other load on the machine does move. With ``--profile DIR`` the broker runs under
cProfile and writes ``DIR/broker-<scenario>.prof`` on exit (one broker per
scenario then; profiling roughly doubles the CPU per transaction).
"""

from __future__ import annotations

import argparse
import os
import pstats
import re
import shlex
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Sequence
from pathlib import Path

import psutil

from . import clients
from .brokers import TxBroker
from .report import system_busy as _system_busy
from .transactions import Options, WorkerPool, _cpu_of, _percentile

_PROFILE_MAIN = (
    "import cProfile, sys, time\n"
    "from txbroker.cli import main\n"
    "prof = cProfile.Profile(time.thread_time)  # CPU time: a loaded machine preempts\n"
    "prof.enable()\n"
    "try:\n"
    "    rc = main(sys.argv[2:])\n"
    "finally:\n"
    "    prof.disable()\n"
    "    prof.dump_stats(sys.argv[1])\n"
    "sys.exit(rc)\n"
)


ADMIN = re.compile(r"admin HTTP on (http://\S+:\d+)")


class MeteredTxBroker(TxBroker):
    """txbroker with its admin endpoint on an ephemeral port, for /metrics."""

    def __init__(self, overrides: dict[str, str] | None = None) -> None:
        super().__init__({"admin.http.port": "0", **(overrides or {})})
        self.admin_url = ""

    def _on_line(self, line: str) -> None:
        m = ADMIN.search(line)
        if m:
            self.admin_url = m.group(1)
        super()._on_line(line)

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if not self.admin_url:
            return out
        with urllib.request.urlopen(self.admin_url + "/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line and not line.startswith("#"):
                    name, _, value = line.rpartition(" ")
                    out[name] = float(value)
        return out


class ProfiledTxBroker(MeteredTxBroker):
    def __init__(self, out: Path, overrides: dict[str, str] | None = None) -> None:
        super().__init__(overrides)
        self.out = out

    def command(self) -> list[str]:
        cmd = super().command()
        # [python, -m, broker, serve, ...] -> [python, -c, CODE, OUT, serve, ...]
        return [cmd[0], "-c", _PROFILE_MAIN, str(self.out), *cmd[3:]]


def _thread_cpu(pid: int) -> tuple[float, float]:
    """(main thread, other threads and child processes: the fsync helper) CPU seconds."""
    proc = psutil.Process(pid)
    main = other = 0.0
    for t in proc.threads():
        cpu = t.user_time + t.system_time
        if t.id == pid:
            main += cpu
        else:
            other += cpu
    for child in proc.children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        other += times.user + times.system
    return main, other


def scenario(broker: TxBroker, pool: WorkerPool, producers: int, records: int,
             seconds: float, opts: Options, attach: str = "") -> dict:
    topic = f"cpu-{uuid.uuid4().hex[:8]}"
    clients.create_topic(broker.bootstrap, topic)
    tag = uuid.uuid4().hex[:6]
    start_at = time.monotonic() + 1.0 + 0.1 * producers
    commands = [("txn_rate", {
        "bootstrap": broker.bootstrap, "topic": topic, "transactional_id": f"cpu-{tag}-{i}",
        "records": records, "value_size": opts.value_size, "start_at": start_at,
        "duration": seconds, "max_txns": 10_000_000, "warmup": 3, "timeout": 30.0,
        "first_partition": i % clients.PARTITIONS}) for i in range(producers)]
    pool.ensure()
    for (_, conn), command in zip(pool.workers, commands, strict=False):
        conn.send(command)
    # Sample the broker's CPU at the window's edges (the warm-up happens before).
    time.sleep(max(0.0, start_at - time.monotonic()))
    x0 = broker.metrics()
    m0, o0 = _thread_cpu(broker.pid)
    c0, b0 = _cpu_of(pool.pids()), _system_busy()
    t0 = time.monotonic()
    if attach:
        # e.g. "perf record -F 499 -g -o /tmp/x.data -p {pid} -- sleep {seconds}"
        subprocess.run(shlex.split(attach.format(pid=broker.pid, seconds=seconds)),
                       check=False, stdout=subprocess.DEVNULL)
        time.sleep(max(0.0, t0 + seconds - time.monotonic()))
    else:
        time.sleep(seconds)
    m1, o1 = _thread_cpu(broker.pid)
    c1, b1 = _cpu_of(pool.pids()), _system_busy()
    t1 = time.monotonic()
    x1 = broker.metrics()
    results = [conn.recv() for _, conn in pool.workers[:producers]]
    errors = [r["error"] for r in results if not r["ok"]]
    if errors:
        raise RuntimeError("; ".join(errors))
    # Transactions committed inside the sampled window (each worker's window matches it
    # up to the late start; count by rate to stay comparable).
    rate = sum(r["txns"] / (r["end"] - r["started"]) for r in results)
    txns = rate * (t1 - t0)
    lat = [x for r in results for x in r["commit_ms"]]
    per_txn = {k: round((x1[k] - x0.get(k, 0)) / txns, 2) for k in x1
               if x1[k] - x0.get(k, 0) > 0 and ("total" in k or "requests" in k)
               and "_seconds" not in k}  # counters, not the histograms' series
    return {"per_txn": per_txn, "producers": producers, "records": records, "txn_per_s": rate,
            "cpu_ms_per_txn": 1000 * ((m1 - m0) + (o1 - o0)) / txns,
            "loop_ms_per_txn": 1000 * (m1 - m0) / txns,
            "other_ms_per_txn": 1000 * (o1 - o0) / txns,
            "broker_cores": ((m1 - m0) + (o1 - o0)) / (t1 - t0),
            "clients_ms_per_txn": 1000 * (c1 - c0) / txns,
            "machine_cores": (b1 - b0) / (t1 - t0),
            "p50_ms": _percentile(lat, 0.5), "p99_ms": _percentile(lat, 0.99)}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.txn_cpu", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--producers", default="1,8")
    ap.add_argument("--records", default="10")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--profile", type=Path, help="run the broker under cProfile, stats here")
    ap.add_argument("--attach", default="",
                    help="command run against the broker during the window ({pid}, {seconds}), "
                         "e.g. 'perf record -g -o OUT -p {pid} -- sleep {seconds}'")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="broker config override (repeatable), e.g. flush.messages=1000000")
    args = ap.parse_args(argv)
    overrides = dict(o.split("=", 1) for o in args.override)
    producers = [int(x) for x in args.producers.split(",")]
    records = [int(x) for x in args.records.split(",")]
    opts = Options()
    pool = WorkerPool(max(producers))
    pool.ensure()
    try:
        for _ in range(args.repeat):
            for n in producers:
                for r in records:
                    if args.profile:
                        args.profile.mkdir(parents=True, exist_ok=True)
                        out = args.profile / f"broker-{n}p{r}r.prof"
                        broker = ProfiledTxBroker(out, overrides)
                    else:
                        broker = MeteredTxBroker(overrides)
                    with broker:
                        s = scenario(broker, pool, n, r, args.seconds, opts, args.attach)
                    print(f"{n}p x {r}r: {s['cpu_ms_per_txn']:.3f} ms CPU/txn "
                          f"(loop {s['loop_ms_per_txn']:.3f}, other {s['other_ms_per_txn']:.3f}), "
                          f"clients {s['clients_ms_per_txn']:.3f}; {s['txn_per_s']:.0f} txn/s, "
                          f"broker {s['broker_cores']:.2f} of {s['machine_cores']:.2f} busy cores, "
                          f"commit p50 {s['p50_ms']:.1f} p99 {s['p99_ms']:.1f} ms, "
                          f"load {os.getloadavg()[0]:.2f}", flush=True)
                    print("   per txn:", ", ".join(
                        f"{k.removeprefix('txbroker_')} {v}" for k, v in s["per_txn"].items()))
                    if args.profile:
                        time.sleep(0.5)
                        pstats.Stats(str(out)).sort_stats("tottime").print_stats(25)
    finally:
        pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
