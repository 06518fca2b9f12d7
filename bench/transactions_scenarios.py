"""The scenarios of the transaction benchmark (``python -m bench.transactions``): one
broker, one run, its phases (rate, fill, consume, cost) in order, each measured
(broker CPU and RSS, the clients' and the machine's other CPU) and each failure
recorded as data.

Why a module of its own: it is the parent side of a run, between the client workers
(transactions_workers.py), which it drives, and the report (transactions_report.py),
which aggregates what it returns. bench.vs_kafka runs its own phases on ``Run``.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import psutil

from . import clients
from .brokers import ManagedBroker, RssSampler
from .report import system_busy as _system_busy
from .transactions_settings import FILL_PRODUCERS, PARTITIONS, Options, PhaseError
from .transactions_workers import WorkerPool


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * len(s) + 0.5) - 1))]  # nearest rank


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
