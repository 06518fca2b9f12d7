"""Restart-after-crash benchmark: time from start to ``ready`` and to the first
committed transaction after a SIGKILL, against the size of the data directory.

    .venv/bin/python -m bench.recovery                          # quick: 128 MB, 10,000 ids
    .venv/bin/python -m bench.recovery --size-mb 1024 --transactional-ids 100000
    .venv/bin/python -m bench.recovery --wait-idle 60           # on a shared machine

Setup (not timed): a txbroker process (``python -m txbroker serve``, its defaults:
fsync on) on a fresh data directory; one topic of ``--partitions`` partitions filled
with ``--size-mb`` MB of 1,000-byte records (random bytes, incompressible) by one
confluent-kafka producer with ``acks=all`` (big batches: the log is written at disk
speed, minutes for 1 GB at most); then ``--transactional-ids`` transactional ids, each
registered with one InitProducerId on the raw wire (pipelined, one connection), and
``--transactions`` committed transactions of one confluent-kafka producer (history in
``__transaction_state``). Then the broker is killed with SIGKILL.

Timed, per run (``--runs``, median reported), on the data directory the previous kill
left behind:

* **ready**: from starting the process (``python -m txbroker serve``, interpreter
  start-up included) to its ``ready: listening on`` log line;
* **first commit**: from starting the process to the first committed transaction of
  a new confluent-kafka transactional producer created at ``ready``
  (``init_transactions``, one produce, ``commit_transaction``);

then the broker is SIGKILLed again, right after that commit. The broker's own log
lines give the breakdown (partitions opened, coordinator load time and records).
For reference, the same start on an empty data directory is measured once.
Results: bench/results/recovery.json and recovery.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from txbroker.protocol.messages import build, decode_response, encode_request, request_module
from txbroker.testing import BrokerProcess

from . import report
from .clients import create_topic

DEFAULT_OUT = report.ROOT / "bench" / "results"
TOPIC = "recovery"
VALUE_SIZE = 1000
TARGET_READY_S = 1.0
TARGET_COMMIT_S = 2.0
INIT_PRODUCER_ID = 22
INIT_VERSION = 1
WINDOW = 400  # InitProducerId requests in flight on the one connection (< queued.max.requests)
RETRIABLE = {14, 15, 16, 51}  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS


@dataclass
class Options:
    runs: int = 5
    size_mb: int = 128
    transactional_ids: int = 10_000
    transactions: int = 200
    partitions: int = 8
    data_dir: Path | None = None
    wait_idle: float = 0.0
    out: Path = DEFAULT_OUT


# --- populating ---------------------------------------------------------------------

def write_log(bootstrap: str, size_mb: int, partitions: int) -> dict[str, Any]:
    """``size_mb`` MB of incompressible 1,000-byte records, acks=all, big batches."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 50,
                         "batch.size": 1_000_000, "queue.buffering.max.kbytes": 1_000_000,
                         "compression.type": "none", "log_level": 3})
    values = [os.urandom(VALUE_SIZE) for _ in range(64)]
    total = size_mb * 1_000_000 // VALUE_SIZE
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    started = time.monotonic()
    for i in range(total):
        while True:
            try:
                producer.produce(TOPIC, values[i % 64], partition=i % partitions,
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(300)
    if left or errors:
        raise RuntimeError(f"writing the log: {left} undelivered, errors {errors[:3]}")
    seconds = time.monotonic() - started
    return {"records": total, "mb": size_mb, "seconds": round(seconds, 1),
            "mb_per_s": round(size_mb / seconds, 1)}


class _Wire:
    """One blocking connection that pipelines requests (answers come in order)."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.cid = 0

    def send(self, api_key: int, version: int, message: Any) -> int:
        self.cid += 1
        self.sock.sendall(encode_request(api_key, version, self.cid, "bench-recovery", message))
        return self.cid

    def recv(self, api_key: int, version: int) -> tuple[int, Any]:
        while True:
            if len(self.buf) >= 4:
                (size,) = struct.unpack_from(">i", self.buf, 0)
                if len(self.buf) >= 4 + size:
                    frame = bytes(self.buf[4:4 + size])
                    del self.buf[:4 + size]
                    return decode_response(api_key, version, frame)
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise RuntimeError("broker closed the connection")
            self.buf += chunk

    def close(self) -> None:
        self.sock.close()


def register_transactional_ids(host: str, port: int, count: int) -> dict[str, Any]:
    """One InitProducerId per id, WINDOW in flight; retriable errors are retried."""
    module = request_module(INIT_PRODUCER_ID, INIT_VERSION)
    wire = _Wire(host, port)
    todo = [f"bench-txn-{i:07d}" for i in range(count)]
    started = time.monotonic()
    done = 0
    try:
        while todo:
            retry: list[str] = []
            in_flight: dict[int, str] = {}
            it = iter(todo)
            exhausted = False
            while in_flight or not exhausted:
                while not exhausted and len(in_flight) < WINDOW:
                    tid = next(it, None)
                    if tid is None:
                        exhausted = True
                        break
                    msg = build(module.InitProducerIdRequest, transactional_id=tid,
                                transaction_timeout=timedelta(seconds=60))
                    in_flight[wire.send(INIT_PRODUCER_ID, INIT_VERSION, msg)] = tid
                if not in_flight:
                    break
                cid, resp = wire.recv(INIT_PRODUCER_ID, INIT_VERSION)
                tid = in_flight.pop(cid)
                code = int(resp.error_code.value)
                if code == 0:
                    done += 1
                elif code in RETRIABLE:
                    retry.append(tid)
                else:
                    raise RuntimeError(f"InitProducerId {tid}: error {code}")
            if retry:
                time.sleep(0.2)
            todo = retry
    finally:
        wire.close()
    seconds = time.monotonic() - started
    return {"transactional_ids": done, "seconds": round(seconds, 1),
            "per_s": round(done / seconds) if seconds else None}


def commit_transactions(bootstrap: str, count: int) -> dict[str, Any]:
    """``count`` small committed transactions of one producer: coordinator history."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-history",
                         "linger.ms": 0, "log_level": 3})
    producer.init_transactions(60)
    started = time.monotonic()
    for i in range(count):
        producer.begin_transaction()
        producer.produce(TOPIC, b"h", partition=i % 2)
        producer.commit_transaction(60)
    return {"transactions": count, "seconds": round(time.monotonic() - started, 1)}


def first_commit(bootstrap: str) -> None:
    """A new transactional producer: init, one record, commit."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": f"bench-first-{uuid.uuid4().hex[:8]}",
                         "linger.ms": 0, "log_level": 3})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(TOPIC, b"first", partition=0)
    producer.commit_transaction(60)


# --- measuring ----------------------------------------------------------------------

_OPENED = re.compile(r"opened (\d+) topic\(s\), (\d+) partition\(s\) in \S+ \((.*?)\)")
_LOADED = re.compile(r"transaction coordinator \(epoch \d+\) loaded (\d+) record\(s\) .* in "
                     r"([\d.]+)s: (\d+) transactional id")
_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})")


def _log_facts(text: str) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    if m := _OPENED.search(text):
        facts["partitions"] = int(m.group(2))
        facts["shutdown"] = m.group(3)
    if m := _LOADED.search(text):
        facts["coordinator_records"] = int(m.group(1))
        facts["coordinator_load_s"] = float(m.group(2))
        facts["coordinator_ids"] = int(m.group(3))
    facts["truncations"] = text.count("truncating ")
    return facts


def timed_restart(data_dir: str, port: int) -> dict[str, Any]:
    """Start on ``data_dir``, time ready and the first commit, then SIGKILL."""
    broker = BrokerProcess(data_dir, port=port)
    started = time.monotonic()
    broker.start(timeout=300)
    ready = time.monotonic() - started
    try:
        first_commit(broker.bootstrap)
        committed = time.monotonic() - started
    finally:
        broker.kill()
    return {"ready_s": round(ready, 3), "first_commit_s": round(committed, 3),
            **_log_facts(broker.log_text())}


def du_mb(path: str) -> float:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return round(total / 1e6, 1)


def run(opts: Options, command: str) -> dict[str, Any]:
    waited = report.wait_for_idle(opts.wait_idle) if opts.wait_idle else 0.0
    info = report.machine_info(waited_for_idle_s=round(waited, 1))
    base = Path(tempfile.mkdtemp(prefix="bench-recovery-", dir=opts.data_dir))
    data_dir = str(base / "data")
    try:
        empty = timed_restart(str(base / "empty"), 0)
        broker = BrokerProcess(data_dir)
        broker.start(timeout=60)
        port = broker.port
        try:
            create_topic(broker.bootstrap, TOPIC, opts.partitions)
            setup = {"log": write_log(broker.bootstrap, opts.size_mb, opts.partitions),
                     "ids": register_transactional_ids(broker.host, broker.port,
                                                        opts.transactional_ids),
                     "history": commit_transactions(broker.bootstrap, opts.transactions)}
        finally:
            broker.kill()  # SIGKILL: the first timed start is an unclean one
        setup["data_dir_mb"] = du_mb(data_dir)
        print(f"setup: {setup}", flush=True)
        runs = []
        for i in range(opts.runs):
            one = timed_restart(data_dir, port)
            print(f"run {i + 1}: {one}", flush=True)
            runs.append(one)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    ready = report.median([r["ready_s"] for r in runs], 3)
    commit = report.median([r["first_commit_s"] for r in runs], 3)
    return {
        "benchmark": "recovery",
        "command": command,
        "machine": info,
        "options": {"runs": opts.runs, "size_mb": opts.size_mb,
                    "transactional_ids": opts.transactional_ids,
                    "transactions": opts.transactions, "partitions": opts.partitions},
        "setup": setup,
        "empty_start": empty,
        "runs": runs,
        "summary": {"ready_s": ready, "first_commit_s": commit,
                    "coordinator_load_s": report.median(
                        [r.get("coordinator_load_s") for r in runs], 3)},
        "targets": {"ready_s": TARGET_READY_S, "first_commit_s": TARGET_COMMIT_S,
                    "ready_met": ready is not None and ready <= TARGET_READY_S,
                    "first_commit_met": commit is not None and commit <= TARGET_COMMIT_S},
    }


def render_markdown(r: dict[str, Any]) -> str:
    o, s, t, setup = r["options"], r["summary"], r["targets"], r["setup"]
    lines = [
        "# Restart after SIGKILL",
        "",
        f"`{r['command']}`",
        "",
        f"{r['machine']['date']}, {r['machine']['cpu_model']}, "
        f"{r['machine']['logical_cores']} cores, commit {r['machine']['txbroker_commit']}.",
        "",
        f"Data directory: {setup['data_dir_mb']} MB ({o['size_mb']} MB of log in "
        f"{o['partitions']} partitions, {setup['ids']['transactional_ids']} transactional ids, "
        f"{o['transactions']} committed transactions of one more id). "
        f"Setup: log {setup['log']['seconds']} s ({setup['log']['mb_per_s']} MB/s), "
        f"ids {setup['ids']['seconds']} s.",
        "",
        "| | median (s) | target (s) | met |",
        "|---|---|---|---|",
        f"| start -> ready | {s['ready_s']} | {t['ready_s']} | {'yes' if t['ready_met'] else 'no'} |",
        f"| start -> first committed transaction | {s['first_commit_s']} | "
        f"{t['first_commit_s']} | {'yes' if t['first_commit_met'] else 'no'} |",
        f"| coordinator load (broker log) | {s['coordinator_load_s']} | | |",
        f"| empty data directory: start -> ready | {r['empty_start']['ready_s']} | | |",
        "",
        "| run | ready (s) | first commit (s) | coordinator load (s) | records replayed | "
        "truncations |",
        "|---|---|---|---|---|---|",
    ]
    for i, run_ in enumerate(r["runs"], 1):
        lines.append(f"| {i} | {run_['ready_s']} | {run_['first_commit_s']} | "
                     f"{run_.get('coordinator_load_s', '')} | "
                     f"{run_.get('coordinator_records', '')} | {run_.get('truncations', '')} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> Options:
    p = argparse.ArgumentParser(prog="bench.recovery", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=Options.runs)
    p.add_argument("--size-mb", type=int, default=Options.size_mb,
                   help="MB of log data (the issue's target: 1024)")
    p.add_argument("--transactional-ids", type=int, default=Options.transactional_ids,
                   help="transactional ids registered (the issue's target: 100000)")
    p.add_argument("--transactions", type=int, default=Options.transactions)
    p.add_argument("--partitions", type=int, default=Options.partitions)
    p.add_argument("--data-dir", type=Path, default=None,
                   help="where to create the data directory (default: the temp dir)")
    p.add_argument("--wait-idle", type=float, default=0.0)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = p.parse_args(argv)
    return Options(a.runs, a.size_mb, a.transactional_ids, a.transactions, a.partitions,
                   a.data_dir, a.wait_idle, a.out)


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    command = report.command_line("bench.recovery", argv)
    report.stop_on_sigterm()
    result = run(opts, command)
    report.write_report(opts.out, "recovery", result, render_markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
