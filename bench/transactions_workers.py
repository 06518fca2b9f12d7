"""The client side of the transaction benchmark (``python -m bench.transactions``):
the commands that run confluent-kafka producers and consumers in worker processes,
and the pool of those processes.

Why a module of its own: this code runs in spawned worker processes (every producer
in its own process, so no producer waits for another's GIL), which import only what
they need from here; the parent talks to them through ``WorkerPool`` (a command name
and its keyword arguments per worker, a result dict back). bench.txn_cpu and
bench.vs_kafka use the same pool (imported from bench.transactions).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from . import clients
from .transactions_settings import (
    ABORTED,
    COMMITTED,
    CONSUMER,
    COST_PRODUCER,
    PARTITIONS,
    TXN_PRODUCER,
    WORKER_LIFETIME,
    PhaseError,
)

# --- worker side (each in its own process) ------------------------------------------

def _value(size: int, tag: bytes = COMMITTED) -> bytes:
    return tag + os.urandom(size - 1)  # incompressible, not that compression is on


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
