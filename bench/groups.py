"""Consumer-group benchmark: rebalance times and offset-commit rates, with real clients.

    .venv/bin/python -m bench.groups            # 4-5 minutes on 2 cores
    .venv/bin/python -m bench.groups --quick    # 3 runs, short commit phases
    .venv/bin/python -m bench.groups --wait-idle 60   # on a shared machine

What is measured (every run on a fresh txbroker process with a fresh data
directory, a fresh topic and a fresh group; only 127.0.0.1):

* **rebalance** (confluent-kafka, eager ``range`` assignor, 6 partitions): two
  members form a stable group; then
  - *join*: a third member calls ``subscribe()``; the time runs until all three
    have received (``on_assign``) disjoint assignments covering every partition;
  - *leave*: that member calls ``close()`` (LeaveGroup); the time runs until the
    two others hold every partition again.
  Once with the client's defaults and once with ``heartbeat.interval.ms=100``
  and ``fetch.wait.max.ms=10``. With the defaults the client dominates: the
  other members learn about the rebalance only from their next heartbeat (every
  3 s), and librdkafka rejoins only after its in-flight fetch long poll returns
  (up to 500 ms on an idle topic). So the join/leave starts at a random moment
  (0.5-3.5 s after the group became stable), not in step with the heartbeats.
* **commit**: synchronous OffsetCommit round trips (one partition per commit,
  as group members with a generation) for a fixed time: one confluent-kafka
  consumer, four concurrent confluent-kafka consumers of one group (so their
  commits share one ``__consumer_offsets`` partition), and one kafka-python
  consumer. The broker runs with its defaults: a commit is answered only after
  its record is fsynced (group commit shares an fsync between the commits that
  arrive together); the fsync count from the broker's /metrics is reported.

Results: bench/results/groups.json and groups.md.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import report
from .brokers import HOST, TxBroker
from .clients import create_topic
from .report import process_cpu, system_busy, wait_for_idle

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "bench" / "results"
ADMIN_HTTP = re.compile(r"admin HTTP on http://[^:]+:(\d+)")
# Speeds up forming the first two members only; a group that is not Empty never
# waits for it, so the measured rebalances are unaffected.
BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "admin.http.port": "0",
                    "admin.http.host": HOST}
REBALANCE_PARTITIONS = 6
COMMIT_PARTITIONS = 4
REBALANCE_CONFIGS: dict[str, dict[str, Any]] = {
    "client defaults (heartbeat.interval.ms=3000, fetch.wait.max.ms=500)": {},
    "heartbeat.interval.ms=100, fetch.wait.max.ms=10": {"heartbeat.interval.ms": 100,
                                                         "fetch.wait.max.ms": 10},
}
STABLE_TIMEOUT = 60.0  # one rebalance, at most
POLL_S = 0.05


@dataclass
class Options:
    runs: int = 5
    commit_seconds: float = 5.0
    commit_max: int = 50_000  # per consumer and phase
    wait_idle: float = 0.0  # before each commit run, wait this long at most for an idle machine
    out: Path = DEFAULT_OUT


class BenchBroker(TxBroker):
    """txbroker with the admin HTTP endpoint on an ephemeral port (for /metrics)."""

    def __init__(self, overrides: dict[str, str] | None = None) -> None:
        super().__init__(overrides)
        self.admin_port = 0

    def _on_line(self, line: str) -> None:
        m = ADMIN_HTTP.search(line)
        if m:
            self.admin_port = int(m.group(1))
        super()._on_line(line)

    def metrics(self) -> dict[str, float]:
        if not self.admin_port:
            return {}
        url = f"http://{HOST}:{self.admin_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 (127.0.0.1 only)
            text = r.read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out


# --- group members (confluent-kafka, one thread each) -----------------------------------


class Member:
    """A confluent-kafka group member polling in its own thread; it records when
    its rebalance callbacks ran."""

    def __init__(self, bootstrap: str, topic: str, group: str, name: str,
                 extra: dict[str, Any] | None = None, lifetime: float = 300) -> None:
        self.bootstrap, self.topic, self.group, self.name = bootstrap, topic, group, name
        self.extra = dict(extra or {})
        self.lifetime = lifetime
        self.assignment: set[int] = set()
        self.assigned_at = 0.0
        self.subscribed_at = 0.0
        self.error: BaseException | None = None
        self.commit_partitions: list[int] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)
        self.consumer = None

    def start(self) -> Member:
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import Consumer

        conf = {"bootstrap.servers": self.bootstrap, "group.id": self.group,
                "client.id": self.name, "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "partition.assignment.strategy": "range",
                "log_level": 3, **self.extra}
        try:
            consumer = Consumer(conf)
            self.consumer = consumer

            def on_assign(_c, partitions) -> None:
                with self._lock:
                    self.assignment = {p.partition for p in partitions}
                    self.assigned_at = time.monotonic()

            def on_revoke(_c, _partitions) -> None:
                with self._lock:
                    self.assignment = set()

            self.subscribed_at = time.monotonic()
            consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke,
                               on_lost=on_revoke)
            deadline = time.monotonic() + self.lifetime
            while not self._stop.is_set() and time.monotonic() < deadline:
                consumer.consume(num_messages=100, timeout=POLL_S)
        except BaseException as e:  # reported by the caller
            self.error = e
        finally:
            if self.consumer is not None:
                self.consumer.close()
            self._closed.set()

    def snapshot(self) -> tuple[set[int], float]:
        with self._lock:
            return set(self.assignment), self.assigned_at

    def close(self, timeout: float = 30) -> None:
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError(f"member {self.name} did not close in {timeout}s")


def wait_stable(members: Sequence[Member], partitions: int, after: float,
                timeout: float = STABLE_TIMEOUT) -> float:
    """Time of the last on_assign that gave ``members`` disjoint assignments covering
    every partition, all received after ``after``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            if m.error is not None:
                raise RuntimeError(f"member {m.name} failed: {m.error!r}")
        snaps = [m.snapshot() for m in members]
        owned = sorted(p for parts, _t in snaps for p in parts)
        if owned == list(range(partitions)) and all(parts and t > after for parts, t in snaps):
            return max(t for _parts, t in snaps)
        time.sleep(0.005)
    raise RuntimeError(f"no stable assignment within {timeout}s: "
                       f"{[(m.name, m.snapshot()[0]) for m in members]}")


def rebalance_run(extra: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """One fresh broker: (join, leave) rebalance times of a 3-member group."""
    broker = BenchBroker(BROKER_OVERRIDES).start()
    members: list[Member] = []
    try:
        topic, group = f"rebalance-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, REBALANCE_PARTITIONS)
        members = [Member(broker.bootstrap, topic, group, f"m{i}", extra).start()
                   for i in (1, 2)]
        wait_stable(members, REBALANCE_PARTITIONS, 0)
        time.sleep(rng.uniform(0.5, 3.5))  # a random phase of the 3 s heartbeat timers
        third = Member(broker.bootstrap, topic, group, "m3", extra)
        members.append(third)
        t_join = time.monotonic()
        third.start()
        stable = wait_stable(members, REBALANCE_PARTITIONS, t_join)
        join_s = stable - max(t_join, third.subscribed_at or t_join)
        time.sleep(rng.uniform(0.5, 3.5))
        t_leave = time.monotonic()
        third.close()
        stable = wait_stable(members[:2], REBALANCE_PARTITIONS, t_leave)
        leave_s = stable - t_leave
        return {"ok": True, "join_s": round(join_s, 4), "leave_s": round(leave_s, 4)}
    except Exception as e:
        return {"ok": False, "error": repr(e)[:500], "broker_log": broker.log_tail(10)}
    finally:
        for m in members:
            try:
                m.close()
            except RuntimeError:
                pass
        broker.stop()


# --- commit rate --------------------------------------------------------------------------


class Assignments:
    """What each committer holds, so that all keep polling (and so take part in
    every rebalance) until the whole group is assigned."""

    def __init__(self, members: int, partitions: int) -> None:
        self.members, self.partitions = members, partitions
        self._held: dict[str, frozenset[int]] = {}
        self._lock = threading.Lock()

    def update(self, name: str, held: frozenset[int]) -> bool:
        with self._lock:
            self._held[name] = held
            owned = sorted(p for h in self._held.values() for p in h)
            return len(self._held) == self.members and owned == list(range(self.partitions)) \
                and all(self._held.values())


def _confluent_committer(bootstrap: str, topic: str, group: str, name: str,
                         assignments: Assignments, ready: threading.Barrier, seconds: float,
                         max_commits: int, out: dict[str, Any]) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTP

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                         "enable.auto.commit": False, "log_level": 3,
                         "heartbeat.interval.ms": 500})
    latencies: list[float] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + STABLE_TIMEOUT
        # Poll (rebalance callbacks run only inside consume()) until every member
        # of the group holds its share: a member that stopped polling would hold
        # up the rebalance a later member's join starts.
        while time.monotonic() < deadline:
            consumer.consume(num_messages=10, timeout=POLL_S)
            held = frozenset(tp.partition for tp in consumer.assignment())
            if assignments.update(name, held):
                break
        mine = sorted(tp.partition for tp in consumer.assignment())
        if not mine:
            raise RuntimeError(f"{name}: no partition assigned in {STABLE_TIMEOUT}s")
        ready.wait(STABLE_TIMEOUT)
        start = time.monotonic()
        end = start + seconds
        i = 0
        while i < max_commits and time.monotonic() < end:
            i += 1
            t0 = time.perf_counter()
            result = consumer.commit(offsets=[CTP(topic, mine[0], i)], asynchronous=False)
            latencies.append(time.perf_counter() - t0)
            if result is None or any(tp.error is not None for tp in result):
                raise RuntimeError(f"{name}: commit failed: {result}")
        out[name] = {"commits": len(latencies), "seconds": time.monotonic() - start,
                     "latencies": latencies}
    except BaseException as e:
        out[name] = {"error": repr(e)[:300]}
        ready.abort()
    finally:
        consumer.close()


def _kafka_python_committer(bootstrap: str, topic: str, group: str, ready: threading.Barrier,
                            seconds: float, max_commits: int, out: dict[str, Any]) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             enable_auto_commit=False)
    latencies: list[float] = []
    try:
        deadline = time.monotonic() + STABLE_TIMEOUT
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(timeout_ms=1000)
        if not consumer.assignment():
            raise RuntimeError("kafka-python: no assignment")
        tp = TopicPartition(topic, min(p.partition for p in consumer.assignment()))
        ready.wait(STABLE_TIMEOUT)
        start = time.monotonic()
        end = start + seconds
        i = 0
        while i < max_commits and time.monotonic() < end:
            i += 1
            t0 = time.perf_counter()
            consumer.commit({tp: OffsetAndMetadata(i, "", -1)})
            latencies.append(time.perf_counter() - t0)
        out["kafka-python"] = {"commits": len(latencies), "seconds": time.monotonic() - start,
                               "latencies": latencies}
    except BaseException as e:
        out["kafka-python"] = {"error": repr(e)[:300]}
        ready.abort()
    finally:
        consumer.close()


def commit_run(client: str, consumers: int, opts: Options) -> dict[str, Any]:
    broker = BenchBroker(BROKER_OVERRIDES).start()
    try:
        topic, group = f"commits-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, COMMIT_PARTITIONS)
        out: dict[str, Any] = {}
        threads = []
        # Every committer waits here once it holds its partitions; the broker's
        # counters are read in between, so they cover the commit phase only.
        ready = threading.Barrier(consumers + 1)
        if client == "kafka-python":
            threads.append(threading.Thread(
                target=_kafka_python_committer,
                args=(broker.bootstrap, topic, group, ready, opts.commit_seconds,
                      opts.commit_max, out), daemon=True))
        else:
            assignments = Assignments(consumers, COMMIT_PARTITIONS)
            for i in range(consumers):
                threads.append(threading.Thread(
                    target=_confluent_committer,
                    args=(broker.bootstrap, topic, group, f"c{i}", assignments,
                          ready, opts.commit_seconds, opts.commit_max, out), daemon=True))
        for t in threads:
            t.start()
        before: dict[str, float] = {}
        cpu0 = (system_busy(), process_cpu(os.getpid()), process_cpu(broker.pid),
                time.monotonic())
        try:
            # The parties are released together: read the counters just before.
            deadline = time.monotonic() + STABLE_TIMEOUT
            while ready.n_waiting < consumers and time.monotonic() < deadline \
                    and not ready.broken:
                time.sleep(0.01)
            before = broker.metrics()
            cpu0 = (system_busy(), process_cpu(os.getpid()), process_cpu(broker.pid),
                    time.monotonic())
            ready.wait(STABLE_TIMEOUT)
        except threading.BrokenBarrierError:
            pass
        for t in threads:
            t.join(STABLE_TIMEOUT + opts.commit_seconds + 30)
        after = broker.metrics()
        # Cores that other processes kept busy meanwhile (the numbers mean little if high).
        busy, own, brk, t1 = (system_busy(), process_cpu(os.getpid()),
                              process_cpu(broker.pid), time.monotonic())
        other = ((busy - cpu0[0]) - (own - cpu0[1]) - (brk - cpu0[2])) / max(t1 - cpu0[3], 1e-3)
        errors = [v["error"] for v in out.values() if "error" in v]
        if errors or len(out) != len(threads) or any(t.is_alive() for t in threads):
            return {"ok": False, "error": "; ".join(errors) or "a committer did not finish"}
        commits = sum(v["commits"] for v in out.values())
        seconds = max(v["seconds"] for v in out.values())
        lat = sorted(x for v in out.values() for x in v["latencies"])
        fsyncs = after.get("txbroker_fsyncs_total", 0) - before.get("txbroker_fsyncs_total", 0)
        return {"ok": True, "commits": commits, "seconds": round(seconds, 3),
                "commits_per_s": round(commits / seconds, 1),
                "latency_ms_p50": round(lat[len(lat) // 2] * 1000, 3),
                "latency_ms_p99": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 3),
                "fsyncs": int(fsyncs) if before else None,
                "commits_per_fsync": round(commits / fsyncs, 2) if before and fsyncs else None,
                "broker_cpu_cores": round((brk - cpu0[2]) / max(t1 - cpu0[3], 1e-3), 2),
                "other_load_cores": round(max(other, 0.0), 2)}
    except Exception as e:
        return {"ok": False, "error": repr(e)[:500], "broker_log": broker.log_tail(10)}
    finally:
        broker.stop()


# --- report -------------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return report.median(values, 4)


def summarize(runs: list[dict[str, Any]], keys: Sequence[str]) -> dict[str, Any]:
    ok = [r for r in runs if r.get("ok")]
    out: dict[str, Any] = {"runs": len(runs), "ok_runs": len(ok),
                           "errors": [r["error"] for r in runs if not r.get("ok")]}
    for k in keys:
        vals = [r[k] for r in ok if r.get(k) is not None]
        out[k] = _median(vals)
        out[k + "_min"] = min(vals) if vals else None
        out[k + "_max"] = max(vals) if vals else None
    return out


def machine_info() -> dict[str, Any]:
    import confluent_kafka

    return report.machine_info(
        confluent_kafka=f"{report.package_version('confluent-kafka')} "
                        f"(librdkafka {confluent_kafka.libversion()[0]})",
        kafka_python=report.package_version("kafka-python"),
    )


def _fmt(x: float | None, digits: int = 2, scale: float = 1.0) -> str:
    return report.fmt(x, digits, scale)


def render_markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        "# Consumer-group benchmark", "",
        f"- date: {m['date']}",
        f"- command: `{report['command']}`",
        f"- machine: {m['cpu_model']}, {m['logical_cores']} logical cores, {m['os']}; "
        f"python {m['python']}; confluent-kafka {m['confluent_kafka']}; "
        f"kafka-python {m['kafka_python']}; load average at start {m['loadavg_start']}",
        f"- fresh txbroker process, data dir, topic and group per run; broker defaults "
        f"except {BROKER_OVERRIDES}; wall time {report['wall_seconds']:.0f} s",
        "",
        "## Rebalance of a 3-member group (confluent-kafka, eager range assignor, "
        f"{REBALANCE_PARTITIONS} partitions)", "",
        "join: from the third member's `subscribe()` until all three hold disjoint "
        "assignments covering every partition. leave: from its `close()` (LeaveGroup) until "
        "the two others hold every partition again. Each starts 0.5-3.5 s (random) after "
        "the group became stable. Median (min-max) of the runs.", "",
        "| member config | join s | leave s | ok runs |", "|---|---:|---:|---:|",
    ]
    for label, s in report["rebalance"].items():
        lines.append(
            f"| {label} | {_fmt(s['join_s'])} ({_fmt(s['join_s_min'])}-{_fmt(s['join_s_max'])}) "
            f"| {_fmt(s['leave_s'])} ({_fmt(s['leave_s_min'])}-{_fmt(s['leave_s_max'])}) "
            f"| {s['ok_runs']}/{s['runs']} |")
    lines += [
        "", "## Synchronous offset commits", "",
        "One partition per OffsetCommit, each answered after its record is fsynced; "
        f"{report['options']['commit_seconds']:g} s per run; median of the runs.", "",
        "| committers | commits/s | latency p50 ms | latency p99 ms | commits per fsync "
        "| broker CPU (cores) | other load (cores) | ok runs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    noisy = False
    for label, s in report["commit"].items():
        lines.append(f"| {label} | {_fmt(s['commits_per_s'], 0)} | {_fmt(s['latency_ms_p50'])} "
                     f"| {_fmt(s['latency_ms_p99'])} | {_fmt(s['commits_per_fsync'])} "
                     f"| {_fmt(s['broker_cpu_cores'])} | {_fmt(s['other_load_cores'])} "
                     f"| {s['ok_runs']}/{s['runs']} |")
        noisy = noisy or (s["other_load_cores"] or 0) > 0.2
    if noisy:
        lines += ["", "**Warning:** other processes kept more than 0.2 cores busy during the "
                  "commit runs (\"other load\", median); the rates are not reliable. Re-run on "
                  "an idle machine."]
    errors = [(k, e) for part in ("rebalance", "commit") for k, s in report[part].items()
              for e in s["errors"]]
    if errors:
        lines += ["", "## Failures", ""] + [f"- {k}: {e}" for k, e in errors]
    return "\n".join(lines) + "\n"


def run(opts: Options, command: str) -> dict[str, Any]:
    started = time.monotonic()
    machine = machine_info()
    rebalance: dict[str, Any] = {}
    rng = random.Random(20)  # the same phases every time the benchmark runs
    for label, extra in REBALANCE_CONFIGS.items():
        runs = []
        for i in range(opts.runs):
            r = rebalance_run(extra, rng)
            runs.append(r)
            print(f"[{time.monotonic() - started:6.1f}s] rebalance, {label}, run {i + 1}: "
                  f"{r if not r['ok'] else (r['join_s'], r['leave_s'])}", flush=True)
        rebalance[label] = summarize(runs, ["join_s", "leave_s"]) | {"all": runs}
    commit: dict[str, Any] = {}
    for label, client, n in (("1 confluent-kafka consumer", "confluent", 1),
                             ("4 confluent-kafka consumers, one group", "confluent", 4),
                             ("1 kafka-python consumer", "kafka-python", 1)):
        runs = []
        for i in range(opts.runs):
            waited = wait_for_idle(opts.wait_idle) if opts.wait_idle > 0 else 0.0
            r = commit_run(client, n, opts) | {"waited_for_idle_s": waited}
            runs.append(r)
            print(f"[{time.monotonic() - started:6.1f}s] commit, {label}, run {i + 1}: "
                  f"{r.get('commits_per_s', r.get('error'))} commits/s", flush=True)
        commit[label] = summarize(runs, ["commits_per_s", "latency_ms_p50", "latency_ms_p99",
                                         "commits_per_fsync", "broker_cpu_cores",
                                         "other_load_cores"]) | {"all": runs}
    return {"command": command,
            "machine": machine | {"loadavg_end": [round(x, 2) for x in os.getloadavg()]},
            "options": {"runs": opts.runs, "commit_seconds": opts.commit_seconds,
                        "wait_idle_s": opts.wait_idle,
                        "commit_max": opts.commit_max, "broker_overrides": BROKER_OVERRIDES},
            "wall_seconds": round(time.monotonic() - started, 1),
            "rebalance": rebalance, "commit": commit}


def parse_args(argv: Sequence[str] | None) -> Options:
    p = argparse.ArgumentParser(prog="python -m bench.groups", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5, help="runs per measurement (>= 3)")
    p.add_argument("--commit-seconds", type=float, default=5.0)
    p.add_argument("--quick", action="store_true", help="3 runs, 2-second commit phases")
    p.add_argument("--wait-idle", type=float, default=0.0, metavar="S",
                   help="before each commit run, wait up to S seconds for a 2-second window "
                        "in which the machine was idle (< 0.25 cores busy)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = p.parse_args(argv)
    opts = Options(runs=max(3, a.runs), commit_seconds=min(max(a.commit_seconds, 0.5), 60),
                   wait_idle=min(max(a.wait_idle, 0.0), 600), out=a.out)
    if a.quick:
        opts.runs, opts.commit_seconds = 3, 2.0
    return opts



def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    report.stop_on_sigterm()
    command = report.command_line("bench.groups", argv)
    result = run(opts, command)
    report.write_report(opts.out, "groups", result, render_markdown)
    bad = [s for part in ("rebalance", "commit") for s in result[part].values()
           if not s["ok_runs"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
