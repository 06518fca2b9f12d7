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
import multiprocessing
import multiprocessing.connection
import os
import signal
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from . import clients, report
from .brokers import (
    KAFKA_FLUSH_BROKER,
    KAFKA_FLUSH_POLICY,
    ManagedBroker,
    RssSampler,
    broker_factories,
)
from .report import cmd_output as _cmd_output
from .report import fmt as _fmt
from .report import system_busy as _system_busy
from .report import wait_for_idle
from .throughput import _ratio, machine_info

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "bench" / "results"
BROKERS = ("txbroker", KAFKA_FLUSH_BROKER, "tansu")
PARTITIONS = clients.PARTITIONS
COMMITTED, ABORTED = b"C", b"A"  # first byte of every value in the consume topic
FILL_PRODUCERS = 4
BROKER_CODE = ("protocol", "storage", "coordinator", "broker")
WORKER_LIFETIME = 3600.0  # a worker exits if it hears nothing for this long

TARGETS = {
    "txn_per_s_8p_10r": ("rate-8p-10r", "txn_per_s", ">=", 1000.0),
    "commit_p99_ms_1p_10r": ("rate-1p-10r", "commit_p99_ms", "<=", 10.0),
    "cost_at_100ms": ("cost", "cost", "<=", 0.10),
}

# Client defaults, except the log level: transactional.id implies idempotence and
# acks=all; linger.ms stays at its default (5 ms; commit_transaction() flushes anyway).
TXN_PRODUCER: dict[str, Any] = {"log_level": 3}
# The cost scenario uses the throughput benchmark's producer settings for both modes,
# except a 32 MB local queue (the Java client's buffer.memory default) instead of
# 256 MB: the producer is then paced by the broker, and a slice does not end with
# a second or more of draining a full queue (which made the cost swing by +-20%).
COST_PRODUCER: dict[str, Any] = clients.CONFLUENT_PRODUCER | {
    "queue.buffering.max.kbytes": 32 * 1024}
CONSUMER: dict[str, Any] = dict(clients.CONFLUENT_CONSUMER)


@dataclass
class Options:
    runs: int = 3
    producers: Sequence[int] = (1, 8)
    records: Sequence[int] = (1, 10, 100)
    rate_seconds: float = 3.0
    rate_max_txns: int = 200_000  # per producer and phase
    warmup_txns: int = 3
    fill_txns: int = 75  # per fill producer
    fill_records: int = 1000
    reads: int = 3  # full reads of the consume topic per isolation level and run
    abort_every: int = 10
    cost_seconds: float = 6.0  # per producer: 2 x 6 s in all
    cost_slices: int = 8  # per producer
    cost_max_messages: int = 20_000_000
    commit_interval: float = 0.1
    value_size: int = 1024
    phase_timeout: float = 60.0
    brokers: Sequence[str] = BROKERS
    out: Path = DEFAULT_OUT
    txbroker_overrides: dict[str, str] = field(default_factory=dict)
    wait_idle: float = 0.0


class PhaseError(RuntimeError):
    pass


# --- worker side (each in its own process) ------------------------------------------

def _value(size: int, tag: bytes = COMMITTED) -> bytes:
    return tag + os.urandom(size - 1)  # incompressible, not that compression is on


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))]  # nearest rank


def cmd_txn_rate(bootstrap: str, topic: str, transactional_id: str, records: int,
                 value_size: int, start_at: float, duration: float, max_txns: int,
                 warmup: int, timeout: float, first_partition: int) -> dict[str, Any]:
    """Warm up, wait for ``start_at`` (CLOCK_MONOTONIC is system-wide), then commit
    transactions of ``records`` records until ``duration`` has passed."""
    from confluent_kafka import Producer

    value = _value(value_size)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                  **TXN_PRODUCER})
    produce = p.produce
    part = first_partition

    def one() -> float:
        nonlocal part
        p.begin_transaction()
        for _ in range(records):
            produce(topic, value, partition=part)
            part = (part + 1) % PARTITIONS
        t0 = time.perf_counter()
        p.commit_transaction(timeout)
        return time.perf_counter() - t0

    p.init_transactions(timeout)
    for _ in range(warmup):
        one()
    late = time.monotonic() - start_at
    if late < 0:
        time.sleep(-late)
    started = time.monotonic()
    deadline = started + duration  # a late producer still gets its full window
    latencies: list[float] = []
    while len(latencies) < max_txns and time.monotonic() < deadline:
        latencies.append(one())
    end = time.monotonic()
    p.flush(5)
    return {"txns": len(latencies), "started": started, "end": end,
            "late_s": round(max(0.0, late), 4),
            "commit_ms": [round(x * 1000, 3) for x in latencies]}


def cmd_fill(bootstrap: str, topic: str, transactional_id: str, txns: int, records: int,
             abort_every: int, value_size: int, timeout: float,
             first_partition: int) -> dict[str, Any]:
    """Transactions of ``records`` records; every ``abort_every``-th is aborted after its
    records were delivered (so they are in the log, followed by an ABORT marker)."""
    from confluent_kafka import Producer

    committed_value, aborted_value = _value(value_size, COMMITTED), _value(value_size, ABORTED)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                  **TXN_PRODUCER})
    p.init_transactions(timeout)
    committed = aborted = 0
    part = first_partition
    start = time.perf_counter()
    for i in range(txns):
        abort = abort_every > 0 and i % abort_every == abort_every - 1
        value = aborted_value if abort else committed_value
        p.begin_transaction()
        for _ in range(records):
            while True:
                try:
                    p.produce(topic, value, partition=part)
                    break
                except BufferError:
                    p.poll(0.01)
            part = (part + 1) % PARTITIONS
        if abort:
            left = p.flush(timeout)
            if left:
                raise PhaseError(f"fill: {left} records of an aborted transaction undelivered")
            p.abort_transaction(timeout)
            aborted += records
        else:
            p.commit_transaction(timeout)
            committed += records
    return {"committed": committed, "aborted": aborted,
            "seconds": time.perf_counter() - start}


def cmd_consume(bootstrap: str, topic: str, isolation: str, committed: int, aborted: int,
                timeout: float) -> dict[str, Any]:
    """Read all 4 partitions from offset 0 until every expected record has arrived
    (read_committed: the committed ones; read_uncommitted: all)."""
    from confluent_kafka import Consumer, TopicPartition

    want_aborted = aborted if isolation == "read_uncommitted" else 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "isolation.level": isolation,
                         **CONSUMER})
    deadline = time.monotonic() + timeout
    got_c = got_a = nbytes = 0
    first = None
    try:
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        while got_c < committed or got_a < want_aborted:
            if time.monotonic() > deadline:
                raise PhaseError(f"consume {isolation}: {got_c}/{committed} committed and "
                                 f"{got_a}/{want_aborted} aborted records after {timeout}s")
            # consume() returns when it has num_messages or at the timeout: ask for no
            # more than are still missing, or the last call would wait out the timeout.
            missing = committed - got_c + want_aborted - got_a
            msgs = consumer.consume(num_messages=max(1, min(10_000, missing)),
                                    timeout=clients.POLL_SECONDS)
            if msgs and first is None:
                first = time.perf_counter() - start
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    raise PhaseError(f"consume {isolation}: {err}")
                v = msg.value()
                nbytes += len(v)
                if v[:1] == ABORTED:
                    got_a += 1
                else:
                    got_c += 1
        seconds = time.perf_counter() - start
    finally:
        consumer.close()
    return {"records": got_c + got_a, "committed_seen": got_c, "aborted_seen": got_a,
            "value_bytes": nbytes, "seconds": seconds, "first_record_s": first}


def cmd_cost(bootstrap: str, idempotent_topic: str, transactional_topic: str,
             transactional_id: str, value_size: int, slices: int, slice_seconds: float,
             warmup_seconds: float, commit_interval: float, max_messages: int,
             transactional_first: bool, timeout: float) -> dict[str, Any]:
    """One idempotent and one transactional producer take turns, ``slices`` slices of
    ``slice_seconds`` each (so that a change in the machine's other load hits both
    alike). In its slice a producer produces as fast as it can; the transactional one
    commits whenever its transaction is ``commit_interval`` s old. A slice ends with
    the last commit (transactional) or a flush (idempotent)."""
    from confluent_kafka import KafkaException, Producer

    failures: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None and len(failures) < 10:
            failures.append(str(err))

    base = {"bootstrap.servers": bootstrap, **COST_PRODUCER}
    idem = Producer(base | {"enable.idempotence": True})
    txn = Producer(base | {"transactional.id": transactional_id})
    value = _value(value_size)
    commits: list[float] = []
    slices_done: list[tuple[bool, int, float]] = []  # (transactional, messages, seconds)

    def run_slice(transactional: bool, seconds: float) -> tuple[int, float]:
        p = txn if transactional else idem
        topic = transactional_topic if transactional else idempotent_topic
        produce, poll = p.produce, p.poll
        start = time.perf_counter()
        end_at = time.monotonic() + seconds
        if transactional:
            p.begin_transaction()
        commit_at = time.monotonic() + commit_interval
        n = 0
        while n < max_messages:
            try:
                produce(topic, value, partition=n % PARTITIONS, on_delivery=on_delivery)
                n += 1
            except BufferError:
                poll(0.005)
            if n & 63 == 0:
                now = time.monotonic()
                if now >= end_at:
                    break
                if transactional and now >= commit_at:
                    t0 = time.perf_counter()
                    p.commit_transaction(timeout)
                    commits.append(time.perf_counter() - t0)
                    p.begin_transaction()
                    commit_at = time.monotonic() + commit_interval
        if transactional:
            t0 = time.perf_counter()
            p.commit_transaction(timeout)
            commits.append(time.perf_counter() - t0)
        elif p.flush(timeout):
            raise PhaseError(f"idempotent: messages not acknowledged after {timeout}s")
        if failures:
            raise PhaseError(f"delivery failed: {failures[:3]}")
        return n, time.perf_counter() - start

    try:
        txn.init_transactions(timeout)
        idem.list_topics(idempotent_topic, timeout=timeout)
        for transactional in (False, True):  # connections, metadata, first batches
            run_slice(transactional, warmup_seconds)
        del commits[:]
        for k in range(2 * slices):
            transactional = (k % 2 == 0) == transactional_first
            slices_done.append((transactional, *run_slice(transactional, slice_seconds)))
    except KafkaException as e:
        raise PhaseError(str(e)) from e
    finally:
        for p in (idem, txn):
            p.purge()
            p.flush(0)
    totals = {mode: (sum(n for t, n, _s in slices_done if t == mode),
                     sum(secs for t, _n, secs in slices_done if t == mode))
              for mode in (False, True)}
    return {"idempotent_messages": totals[False][0], "idempotent_seconds": totals[False][1],
            "transactional_messages": totals[True][0], "transactional_seconds": totals[True][1],
            "commit_ms": [round(x * 1000, 3) for x in commits], "slices": slices_done}


COMMANDS: dict[str, Callable[..., dict[str, Any]]] = {
    "txn_rate": cmd_txn_rate,
    "fill": cmd_fill,
    "consume": cmd_consume,
    "cost": cmd_cost,
}


def worker_main(conn: multiprocessing.connection.Connection) -> None:
    """Run commands from the parent until it sends None, closes the pipe or is silent
    for WORKER_LIFETIME seconds."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us in order
    try:
        while conn.poll(WORKER_LIFETIME):
            msg = conn.recv()
            if msg is None:
                break
            name, kwargs = msg
            try:
                conn.send({"ok": True, **COMMANDS[name](**kwargs)})
            except Exception as e:
                conn.send({"ok": False, "error": f"{type(e).__name__}: {e}"})
    except (EOFError, OSError):
        pass


# --- parent side -----------------------------------------------------------------------

class WorkerPool:
    """Client worker processes (spawned, so no librdkafka threads are forked)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.ctx = multiprocessing.get_context("spawn")
        self.workers: list[tuple[Any, multiprocessing.connection.Connection]] = []

    def ensure(self) -> None:
        self.workers = [(proc, conn) for proc, conn in self.workers if proc.is_alive()]
        while len(self.workers) < self.size:
            parent, child = self.ctx.Pipe()
            proc = self.ctx.Process(target=worker_main, args=(child,), daemon=True,
                                    name=f"txn-bench-worker-{len(self.workers)}")
            proc.start()
            child.close()
            self.workers.append((proc, parent))

    def pids(self) -> list[int]:
        return [proc.pid for proc, _ in self.workers if proc.pid is not None]

    def run(self, commands: list[tuple[str, dict[str, Any]]],
            timeout: float) -> list[dict[str, Any]]:
        """Run one command per worker concurrently; on a timeout the workers are killed
        (they are respawned for the next phase) and PhaseError raised."""
        self.ensure()
        used = self.workers[:len(commands)]
        for (_, conn), command in zip(used, commands, strict=True):
            conn.send(command)
        deadline = time.monotonic() + timeout
        results: list[dict[str, Any]] = []
        try:
            for proc, conn in used:
                if not conn.poll(max(0.0, deadline - time.monotonic())):
                    raise PhaseError(f"client worker gave no answer within {timeout:.0f}s")
                try:
                    results.append(conn.recv())
                except (EOFError, OSError) as e:
                    raise PhaseError(f"client worker died (exit code {proc.exitcode})") from e
        except PhaseError:
            self.kill()
            raise
        return results

    def kill(self) -> None:
        for proc, conn in self.workers:
            proc.kill()
            proc.join(5)
            conn.close()
        self.workers = []

    def close(self) -> None:
        for _proc, conn in self.workers:
            try:
                conn.send(None)
            except OSError:
                pass
        for proc, conn in self.workers:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
            conn.close()
        self.workers = []


def _cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


class Run:
    """One broker, one run: the phases in order, each failure recorded, never raised."""

    def __init__(self, broker: ManagedBroker, pool: WorkerPool, opts: Options,
                 run_index: int) -> None:
        self.broker = broker
        self.pool = pool
        self.opts = opts
        self.run_index = run_index
        self.sampler: RssSampler | None = None
        self.tag = uuid.uuid4().hex[:8]
        self.phases: dict[str, dict[str, Any]] = {}

    def _phase(self, name: str, body: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
        assert self.sampler is not None
        self.sampler.mark(name)
        pids = [os.getpid(), *self.pool.pids()]
        cpu0, busy0, t0 = _cpu_of(pids), _system_busy(), time.monotonic()
        try:
            out = body()
            out["ok"] = True
        except Exception as e:  # a failed phase is data, not a crash
            out = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        if self.broker.proc is not None and self.broker.proc.poll() is not None:
            out["ok"] = False
            out.setdefault("error", f"broker exited with {self.broker.proc.returncode}")
        wall = time.monotonic() - t0
        out["phase_wall_s"] = round(wall, 3)
        out["clients_cpu_s"] = round(_cpu_of(pids) - cpu0, 3)
        out["system_busy_cpu_s"] = round(_system_busy() - busy0, 3)
        self.phases[name] = out
        return out if out["ok"] else None

    def _topic(self, kind: str) -> str:
        topic = f"bench-{kind}-{self.tag}"
        clients.create_topic(self.broker.bootstrap, topic)
        return topic

    def _tid(self, kind: str, i: int) -> str:
        return f"bench-{kind}-{self.tag}-{i}"

    def rate(self, topic: str, producers: int, records: int) -> dict[str, Any]:
        o = self.opts
        self.pool.ensure()
        # Room for every worker's producer start and warm-up before the window opens.
        start_at = time.monotonic() + 0.4 + 0.05 * producers
        kind = f"{producers}p{records}r"
        commands = [("txn_rate", {
            "bootstrap": self.broker.bootstrap, "topic": topic,
            "transactional_id": self._tid(kind, i), "records": records,
            "value_size": o.value_size, "start_at": start_at, "duration": o.rate_seconds,
            "max_txns": o.rate_max_txns, "warmup": o.warmup_txns,
            "timeout": min(30.0, o.phase_timeout), "first_partition": i % PARTITIONS})
            for i in range(producers)]
        results = self.pool.run(commands, o.phase_timeout + 5 + o.rate_seconds)
        errors = [r["error"] for r in results if not r["ok"]]
        if errors:
            raise PhaseError("; ".join(sorted(set(errors)))[:500])
        txns = sum(r["txns"] for r in results)
        # Each producer's own rate over its own window, summed: a producer that started
        # late (slow init) does not dilute the others.
        rate = sum(r["txns"] / (r["end"] - r["started"]) for r in results
                   if r["end"] > r["started"])
        lat = [x for r in results for x in r["commit_ms"]]
        return {"producers": producers, "records_per_txn": records, "txns": txns,
                "seconds": round(max(r["end"] for r in results) - start_at, 4),
                "txn_per_s": round(rate, 1),
                "mb_per_s": round(rate * records * o.value_size / 1e6, 3),
                "commit_p50_ms": _percentile(lat, 0.50), "commit_p99_ms": _percentile(lat, 0.99),
                "commit_max_ms": max(lat) if lat else None,
                "max_late_s": max(r["late_s"] for r in results)}

    def fill(self, topic: str) -> dict[str, Any]:
        o = self.opts
        commands = [("fill", {
            "bootstrap": self.broker.bootstrap, "topic": topic,
            "transactional_id": self._tid("fill", i), "txns": o.fill_txns,
            "records": o.fill_records, "abort_every": o.abort_every,
            "value_size": o.value_size, "timeout": min(30.0, o.phase_timeout),
            "first_partition": i % PARTITIONS}) for i in range(FILL_PRODUCERS)]
        t0 = time.perf_counter()
        results = self.pool.run(commands, o.phase_timeout * 3)
        seconds = time.perf_counter() - t0
        errors = [r["error"] for r in results if not r["ok"]]
        if errors:
            raise PhaseError("; ".join(sorted(set(errors)))[:500])
        committed = sum(r["committed"] for r in results)
        aborted = sum(r["aborted"] for r in results)
        return {"committed": committed, "aborted": aborted, "seconds": round(seconds, 3),
                "mb_per_s": round((committed + aborted) * o.value_size / seconds / 1e6, 2)}

    def read(self, topic: str, isolation: str, fill: dict[str, Any]) -> dict[str, Any]:
        o = self.opts
        [r] = self.pool.run([("consume", {
            "bootstrap": self.broker.bootstrap, "topic": topic, "isolation": isolation,
            "committed": fill["committed"], "aborted": fill["aborted"],
            "timeout": o.phase_timeout})], o.phase_timeout + 15)
        if not r["ok"]:
            raise PhaseError(f"{isolation}: {r['error']}")
        return r

    def consume(self, topic: str, fill: dict[str, Any]) -> dict[str, Any]:
        """``reads`` full reads per isolation level, taking turns (the first read of the
        run alternates between runs), aggregated per level: MB/s = bytes / seconds."""
        order = ["read_committed", "read_uncommitted"]
        if self.run_index % 2:
            order.reverse()
        reads: dict[str, list[dict[str, Any]]] = {k: [] for k in order}
        for _ in range(self.opts.reads):
            for isolation in order:
                reads[isolation].append(self.read(topic, isolation, fill))
        out: dict[str, Any] = {"reads_per_level": self.opts.reads}
        for isolation, rs in reads.items():
            k = "rc" if isolation == "read_committed" else "ru"
            secs = sum(r["seconds"] for r in rs)
            nbytes = sum(r["value_bytes"] for r in rs)
            out |= {f"{k}_mb_per_s": round(nbytes / secs / 1e6, 2),
                    f"{k}_records_per_s": round(sum(r["records"] for r in rs) / secs, 1),
                    f"{k}_seconds": round(statistics.median(r["seconds"] for r in rs), 4),
                    f"{k}_first_record_s": round(statistics.median(
                        r["first_record_s"] or 0 for r in rs), 4),
                    f"{k}_records": rs[0]["records"],
                    f"{k}_aborted_seen": max(r["aborted_seen"] for r in rs)}
        out["rc_over_ru"] = round(out["rc_mb_per_s"] / out["ru_mb_per_s"], 3)
        if out["rc_aborted_seen"]:
            out["incorrect"] = (f"read_committed returned {out['rc_aborted_seen']} aborted "
                                "records")
        return out

    def cost(self) -> dict[str, Any]:
        o = self.opts
        idem_topic, txn_topic = self._topic("cost-idem"), self._topic("cost-txn")
        [r] = self.pool.run([("cost", {
            "bootstrap": self.broker.bootstrap, "idempotent_topic": idem_topic,
            "transactional_topic": txn_topic, "transactional_id": self._tid("cost", 0),
            "value_size": o.value_size, "slices": o.cost_slices,
            "slice_seconds": o.cost_seconds / o.cost_slices, "warmup_seconds": 0.3,
            "commit_interval": o.commit_interval, "max_messages": o.cost_max_messages,
            "transactional_first": self.run_index % 2 == 1,
            "timeout": min(30.0, o.phase_timeout)})],
            o.phase_timeout + 2 * o.cost_seconds + 15)
        if not r["ok"]:
            raise PhaseError(r["error"])
        size = o.value_size
        idem = r["idempotent_messages"] * size / r["idempotent_seconds"] / 1e6
        txn = r["transactional_messages"] * size / r["transactional_seconds"] / 1e6
        lat = r["commit_ms"]
        return {"idempotent_mb_per_s": round(idem, 2), "transactional_mb_per_s": round(txn, 2),
                "cost": round(1 - txn / idem, 4) if idem > 0 else None,
                "cost_pair_median": _pair_cost_median(r["slices"]),
                "idempotent_messages": r["idempotent_messages"],
                "transactional_messages": r["transactional_messages"],
                "idempotent_seconds": round(r["idempotent_seconds"], 3),
                "transactional_seconds": round(r["transactional_seconds"], 3),
                "commits": len(lat), "commit_p50_ms": _percentile(lat, 0.5),
                "commit_p99_ms": _percentile(lat, 0.99)}

    def stop(self) -> None:
        """The sampler's last phase closed, then the broker stopped."""
        if self.sampler is not None:
            self.sampler.mark("stop")
            self.sampler.stop()
        self.broker.stop()

    def first_transaction(self, topic: str) -> None:
        """The first InitProducerId creates the transaction state topic (50 partitions
        by default): done before, outside the measured phases."""
        o = self.opts
        [warm] = self.pool.run([("txn_rate", {
            "bootstrap": self.broker.bootstrap, "topic": topic,
            "transactional_id": self._tid("setup", 0), "records": 1,
            "value_size": o.value_size, "start_at": time.monotonic(), "duration": 0.0,
            "max_txns": 0, "warmup": 1, "timeout": min(30.0, o.phase_timeout),
            "first_partition": 0})], o.phase_timeout + 5)
        if not warm["ok"]:
            raise PhaseError(f"first transaction: {warm['error']}")

    def execute(self) -> dict[str, Any]:
        o = self.opts
        out: dict[str, Any] = {"ok": False}
        step = "start"
        try:
            self.broker.start()
            self.sampler = RssSampler(self.broker.pid).start()
            step = "setup"
            rate_topic = self._topic("rate")
            self.first_transaction(rate_topic)
            step = "phases"
            for producers in o.producers:
                for records in o.records:
                    self._phase(f"rate-{producers}p-{records}r",
                                lambda p=producers, r=records: self.rate(rate_topic, p, r))
            consume_topic = self._topic("consume")
            fill = self._phase("fill", lambda: self.fill(consume_topic))
            if fill is None:
                self.phases["consume"] = {"ok": False, "error": "fill failed"}
            else:
                self._phase("consume", lambda: self.consume(consume_topic, fill))
            self._phase("cost", self.cost)
            out["ok"] = True
        except Exception as e:
            out["error"] = f"{step}: {type(e).__name__}: {e}"
            out["broker_log_tail"] = self.broker.log_tail(15)
        finally:
            self.stop()
        if self.sampler is not None:
            out["peak_rss_bytes"] = self.sampler.peak_rss
            for name, s in self.sampler.phases.items():
                ph = self.phases.get(name)
                if ph is None:
                    continue
                ph["peak_rss_bytes"] = s.peak_rss
                ph["broker_cpu_s"] = round(s.cpu_seconds, 3)
                wall = ph.get("phase_wall_s") or 0
                if wall > 0:
                    ph["broker_cpu_cores"] = round(s.cpu_seconds / wall, 2)
                    other = ph["system_busy_cpu_s"] - s.cpu_seconds - ph["clients_cpu_s"]
                    ph["other_load_cores"] = round(max(0.0, other) / wall, 2)
        out["phases"] = self.phases
        if self.phases.get("cost", {}).get("ok"):
            out["cost"] = self.phases["cost"]["cost"]
        return out


def _pair_cost_median(slices: list) -> float | None:
    """The cost of each pair of adjacent slices (one idempotent, one transactional),
    median over the pairs: one slice slowed by something else moves it less than the
    totals (a run's ``cost``)."""
    costs = []
    for a, b in zip(slices[::2], slices[1::2], strict=False):
        rates = {t: n / secs for t, n, secs in (a, b) if secs > 0}
        if len(rates) == 2 and rates[False] > 0:
            costs.append(1 - rates[True] / rates[False])
    return round(statistics.median(costs), 4) if costs else None


# --- aggregation ------------------------------------------------------------------------

def _median(values: list[float | None], digits: int = 2) -> float | None:
    vals = [v for v in values if v is not None]
    return round(statistics.median(vals), digits) if vals else None


RATE_KEYS = ("txn_per_s", "mb_per_s", "commit_p50_ms", "commit_p99_ms", "broker_cpu_cores",
             "clients_cpu_s", "other_load_cores")
CONSUME_KEYS = tuple(f"{k}_{m}" for k in ("rc", "ru") for m in (
    "mb_per_s", "records_per_s", "seconds", "first_record_s", "records", "aborted_seen")) + (
    "rc_over_ru", "broker_cpu_cores", "other_load_cores")
COST_KEYS = ("idempotent_mb_per_s", "transactional_mb_per_s", "cost", "cost_pair_median",
             "commits", "commit_p50_ms", "commit_p99_ms", "broker_cpu_cores",
             "other_load_cores")
FOUR_DIGIT_KEYS = ("cost", "cost_pair_median", "rc_over_ru")


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    names: list[str] = []
    for r in runs:
        names += [n for n in r.get("phases", {}) if n not in names]
    phases: dict[str, Any] = {}
    for name in names:
        data = [r["phases"][name] for r in runs if name in r.get("phases", {})]
        ok = [d for d in data if d.get("ok")]
        keys = RATE_KEYS if name.startswith("rate") else CONSUME_KEYS \
            if name.startswith("consume") else COST_KEYS if name.startswith("cost") \
            else ("mb_per_s", "seconds", "committed", "aborted")
        phases[name] = {"runs": len(data), "ok_runs": len(ok),
                        "errors": [d["error"] for d in data if not d.get("ok")]}
        phases[name] |= {k: _median([d.get(k) for d in ok], 4 if k in FOUR_DIGIT_KEYS else 2)
                         for k in keys}
        incorrect = [d["incorrect"] for d in ok if d.get("incorrect")]
        if incorrect:
            phases[name]["incorrect"] = incorrect
    rss = [r["peak_rss_bytes"] for r in runs if r.get("peak_rss_bytes")]
    costs = [r["cost"] for r in runs if r.get("cost") is not None]
    return {
        "runs": len(runs), "ok_runs": sum(1 for r in runs if r.get("ok")),
        "errors": [r["error"] for r in runs if r.get("error")],
        "phases": phases,
        "cost": _median(costs, 4),
        "cost_runs": [round(c, 4) for c in costs],
        "peak_rss_mb_median": _median([x / 1e6 for x in rss], 1),
        "peak_rss_mb_max": round(max(rss) / 1e6, 1) if rss else None,
    }


def _txbrokers(results: dict[str, Any]) -> list[str]:
    return [name for name in results if name.startswith("txbroker")]


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per txbroker variant: variant / Tansu (throughput > 1: txbroker faster; latency,
    cost, RSS > 1: bigger)."""
    return {name: r for name in _txbrokers(results) if (r := _ratios(results, name))}


def _ratios(results: dict[str, dict[str, Any]], txbroker: str) -> dict[str, Any]:
    tx = results.get(txbroker, {}).get("summary")
    ta = results.get("tansu", {}).get("summary")
    if not tx or not ta:
        return {}
    out: dict[str, Any] = {}
    for name, a in tx["phases"].items():
        b = ta["phases"].get(name)
        if not b:
            continue
        if name.startswith("rate"):
            out[name] = {"txn_per_s": _ratio(a["txn_per_s"], b["txn_per_s"]),
                         "commit_p99_ms": _ratio(a["commit_p99_ms"], b["commit_p99_ms"])}
        elif name == "consume":
            for k, level in (("rc", "read_committed"), ("ru", "read_uncommitted")):
                out[f"consume-{level}"] = {"mb_per_s": _ratio(a[f"{k}_mb_per_s"],
                                                              b[f"{k}_mb_per_s"])}
            if b.get("incorrect"):
                out["consume-read_committed"]["note"] = \
                    "Tansu's result is incorrect (aborted records delivered)"
        elif name == "cost":
            for mode in ("idempotent", "transactional"):
                key = f"{mode}_mb_per_s"
                out[f"cost-{mode}"] = {"mb_per_s": _ratio(a[key], b[key])}
    out["peak_rss_mb"] = _ratio(tx["peak_rss_mb_median"], ta["peak_rss_mb_median"])
    return out


def check_targets(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per txbroker variant: each of the issue's first targets, measured and met."""
    out: dict[str, Any] = {}
    for name in _txbrokers(results):
        s = results[name].get("summary")
        if not s:
            continue
        out[name] = {}
        for key, (phase, metric, op, target) in TARGETS.items():
            got = s["cost"] if phase == "cost" else s["phases"].get(phase, {}).get(metric)
            met = None if got is None else got >= target if op == ">=" else got <= target
            out[name][key] = {"target": f"{op} {target:g}", "measured": got, "met": met}
    return out


# --- report -----------------------------------------------------------------------------

def _yes(met: bool | None) -> str:
    return "n/a" if met is None else "yes" if met else "**no**"


def render_markdown(report: dict[str, Any]) -> str:
    m, o = report["machine"], report["options"]
    lines = [
        "# Transactions benchmark",
        "",
        f"- date: {m['date']}",
        f"- command: `{report['command']}`",
        f"- machine: {m['cpu_model']}, {m['logical_cores']} logical cores, "
        f"{m['memory_gb']} GB RAM, {m['os']}; load average at start {m['loadavg_start']}",
        f"- python {m['python']}; txbroker {m['txbroker_commit']}; "
        f"confluent-kafka {m['confluent_kafka']}; {m['tansu']} ({m['tansu_package']})",
        f"- {o['runs']} runs (median shown), a fresh broker per run; "
        f"{o['value_size']}-byte values, {PARTITIONS}-partition topics; "
        f"every producer in its own worker process; wall time {report['wall_seconds']:.0f} s",
        "- txbroker: defaults (durable: fsync before acks=all and before acting on "
        "transaction state), fresh temporary data dir"
        + (f", overrides {o['txbroker_overrides']}" if o["txbroker_overrides"] else "")
        + f"; {KAFKA_FLUSH_BROKER}: the same with Apache Kafka's default flush policy "
        f"({', '.join(f'`{k}={v}`' for k, v in KAFKA_FLUSH_POLICY.items())}: no fsync "
        "waits, as in Kafka)"
        + "; Tansu: `--storage-engine memory://tansu/` (in memory, no fsync)",
        "",
        f"## Transactions/s ({o['rate_seconds']:g} s window per run, "
        f"{o['warmup_txns']} warm-up transactions per producer)",
        "",
        "Commit latency = the time of one `commit_transaction()` call "
        "(flush of the transaction's records + EndTxn), over all producers.",
        "",
        "| broker | producers | records/txn | txn/s | MB/s | commit p50 ms | commit p99 ms "
        "| broker CPU | other load | ok runs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    noisy = False
    results = report["results"]
    for broker, data in results.items():
        for name, s in data["summary"]["phases"].items():
            if not name.startswith("rate"):
                continue
            p, r = name.split("-")[1:]
            lines.append(
                f"| {broker} | {p[:-1]} | {r[:-1]} | {_fmt(s['txn_per_s'], 0)} "
                f"| {_fmt(s['mb_per_s'], 2)} | {_fmt(s['commit_p50_ms'], 2)} "
                f"| {_fmt(s['commit_p99_ms'], 2)} | {_fmt(s['broker_cpu_cores'], 2)} "
                f"| {_fmt(s['other_load_cores'], 2)} | {s['ok_runs']}/{s['runs']} |")
            noisy = noisy or (s["other_load_cores"] or 0) > 0.2
    lines += [
        "",
        f"## read_committed vs read_uncommitted ({FILL_PRODUCERS} producers x "
        f"{o['fill_txns']} transactions x {o['fill_records']:,} records, every "
        f"{o['abort_every']}th transaction aborted; {o['reads_per_level']} reads per level "
        "per run, taking turns)",
        "",
        "| broker | isolation | records read | aborted records read | MB/s | s per read "
        "| first record s | ok runs |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for broker, data in results.items():
        s = data["summary"]["phases"].get("consume")
        if s is None:
            continue
        for k, level in (("rc", "read_committed"), ("ru", "read_uncommitted")):
            lines.append(
                f"| {broker} | {level} | {_fmt(s[f'{k}_records'], 0)} "
                f"| {_fmt(s[f'{k}_aborted_seen'], 0)} | {_fmt(s[f'{k}_mb_per_s'])} "
                f"| {_fmt(s[f'{k}_seconds'], 3)} | {_fmt(s[f'{k}_first_record_s'], 3)} "
                f"| {s['ok_runs']}/{s['runs']} |")
        lines.append(f"| {broker} | read_committed / read_uncommitted MB/s (median of runs) "
                     f"| | | {_fmt(s['rc_over_ru'], 3)} | | | |")
        noisy = noisy or (s["other_load_cores"] or 0) > 0.2
    lines += ["", "Filling the topic (transactional produce, 4 producers, 1,000-record "
              "transactions):", "", "| broker | MB/s | s | ok runs |", "|---|---:|---:|---:|"]
    for broker, data in results.items():
        fill = data["summary"]["phases"].get("fill")
        if fill is not None:
            lines.append(f"| {broker} | {_fmt(fill['mb_per_s'])} | {_fmt(fill['seconds'], 2)} "
                         f"| {fill['ok_runs']}/{fill['runs']} |")
    lines += [
        "",
        f"## Cost of transactions ({o['cost_slices']} slices of "
        f"{o['cost_seconds_per_mode'] / o['cost_slices']:g} s per mode, taking turns; "
        "producing as fast as possible, commit when the transaction is "
        f"{o['commit_interval_s'] * 1000:g} ms old)",
        "",
        "| broker | idempotent MB/s | transactional MB/s | cost | per-run costs "
        "| cost, median of slice pairs | commits per run | commit p50 / p99 ms | broker CPU "
        "| ok runs |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for broker, data in results.items():
        s = data["summary"]
        c = s["phases"].get("cost", {})
        cost = "n/a" if s["cost"] is None else f"{100 * s['cost']:.1f}%"
        pairs = c.get("cost_pair_median")
        pairs = "n/a" if pairs is None else f"{100 * pairs:.1f}%"
        lines.append(
            f"| {broker} | {_fmt(c.get('idempotent_mb_per_s'))} "
            f"| {_fmt(c.get('transactional_mb_per_s'))} | {cost} "
            f"| {', '.join(f'{100 * x:.1f}%' for x in s['cost_runs'])} | {pairs} "
            f"| {_fmt(c.get('commits'), 0)} "
            f"| {_fmt(c.get('commit_p50_ms'), 1)} / {_fmt(c.get('commit_p99_ms'), 1)} "
            f"| {_fmt(c.get('broker_cpu_cores'), 2)} "
            f"| {c.get('ok_runs', 0)}/{c.get('runs', 0)} |")
        noisy = noisy or (c.get("other_load_cores") or 0) > 0.2
    lines += ["", "## Peak RSS (broker + children, MB)", "",
              "| broker | median of runs | max |", "|---|---:|---:|"]
    for broker, data in results.items():
        s = data["summary"]
        lines.append(f"| {broker} | {_fmt(s['peak_rss_mb_median'])} "
                     f"| {_fmt(s['peak_rss_mb_max'])} |")
    for variant, variant_ratios in report["ratios"].items():
        lines += ["", f"## {variant} / Tansu", "",
                  "| scenario | txn/s or MB/s | commit p99 | note |", "|---|---:|---:|---|"]
        for name, r in variant_ratios.items():
            if name == "peak_rss_mb":
                continue
            lines.append(f"| {name} | {_fmt(r.get('txn_per_s', r.get('mb_per_s')), 2)} "
                         f"| {_fmt(r.get('commit_p99_ms'), 2)} | {r.get('note', '')} |")
        lines.append(f"| peak RSS | {_fmt(variant_ratios['peak_rss_mb'], 2)} | | |")
    if report["targets"]:
        variants = list(report["targets"])
        lines += ["", "## First targets", "",
                  "| target | bound | " + " | ".join(f"{v} | met" for v in variants) + " |",
                  "|---|---:|" + "---:|---|" * len(variants)]
        for key in TARGETS:
            t0 = report["targets"][variants[0]][key]
            cells = " | ".join(f"{_fmt(report['targets'][v][key]['measured'], 3)} "
                               f"| {_yes(report['targets'][v][key]['met'])}" for v in variants)
            lines.append(f"| {key} | {t0['target']} | {cells} |")
    if noisy:
        lines += ["", "**Warning:** other processes used more than 0.2 cores during some "
                  "phases (\"other load\"); the numbers are not reliable. Re-run on an idle "
                  "machine (`--wait-idle 60`)."]
    commits = sorted({r.get("txbroker_commit", "") for name in _txbrokers(results)
                      for r in results[name].get("runs", [])} - {""})
    if len(commits) > 1:
        lines += ["", f"**Warning:** the broker code changed during the benchmark "
                  f"({', '.join(commits)}); the txbroker runs did not all test the same code."]
    failures = []
    for broker, data in results.items():
        s = data["summary"]
        failures += [(broker, "run", e) for e in s["errors"]]
        for name, ph in s["phases"].items():
            failures += [(broker, name, e) for e in sorted(set(ph["errors"]))]
            failures += [(broker, name, e) for e in sorted(set(ph.get("incorrect", [])))]
    failures += [(b, "-", e) for b, e in report.get("skipped", {}).items()]
    if failures:
        lines += ["", "## Failures and incorrect results", ""]
        lines += [f"- {b} / {n}: {e}" for b, n, e in failures]
    lines.append("")
    return "\n".join(lines)


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
