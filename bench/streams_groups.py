"""Kafka Streams' group protocol (KIP-1071) and the classic one, on txbroker and on
Apache Kafka 4.4.0.

    .venv/bin/python -m bench.streams_groups              # about 20 minutes on 2 cores
    .venv/bin/python -m bench.streams_groups --runs 1 --no-kafka --records 20000  # a look

The app is bench/jvm/StreamsBench.java, Kafka Streams 4.4.0 with exactly_once_v2
(default commit interval, one stream thread, one JVM per instance with ``-Xmx256m``): it
copies a 6-partition input topic to a 6-partition output topic (6 stateless tasks), and
prints its state changes and the active tasks it owns (polled every 10 ms in the app).
A group is *stable* when every live instance is RUNNING and owns some tasks, together
all 6, none twice: the same signal whichever protocol or broker assigned them. Each
scenario runs on a fresh application id and fresh topics:

* **rebalance**: three instances are stable; then
  - *join*: a 4th instance starts; the time runs from its ``KafkaStreams.start()``
    (its REBALANCING state line) until the four are stable;
  - *leave*: the 4th closes with ``CloseOptions`` LEAVE_GROUP (the same on both
    protocols: a classic Streams member otherwise stays until its session times out);
    the time runs from the close command until the three are stable.
* **eos-1**, **eos-3**: ``--records`` records of ``--size`` bytes are produced ahead;
  1 or 3 instances start paused (``KafkaStreams.pause()``) and become stable; the clock
  starts when they are resumed and stops when a read_committed consumer of the output
  topic has received every record.

Legs: ``group.protocol=streams`` on txbroker (``txbroker.streams.version=1``) and on
Apache Kafka 4.4.0 (both finalize ``streams.version`` 1 on a new cluster), and
``group.protocol=classic`` on both (on Kafka it tells the client's share of a
streams/classic difference from the broker's), alternating the order across ``--runs``. Group settings, the same on both brokers: ``group.streams.heartbeat.interval.ms``
500 and ``group.streams.session.timeout.ms`` 6000 (Kafka's minimums of both lowered to
allow it), ``group.streams.initial.rebalance.delay.ms`` 0; classic members ``heartbeat.interval.ms`` 500, ``session.timeout.ms`` 6000,
``group.initial.rebalance.delay.ms`` 0.

Results: bench/results/streams_groups.json and streams_groups.md.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from . import report
from .brokers import KafkaBroker, ManagedBroker, TxBroker
from .clients import PhaseError, create_topic
from .share_groups import ratio

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "bench" / "results"
TASKS = 6
STABLE_TIMEOUT = 120.0
READ_TIMEOUT = 300.0
SETTLE = 1.0  # after a stable group: no reconciliation left in flight
COMMON = {"offsets.topic.num.partitions": "4", "transaction.state.log.num.partitions": "4",
          "group.initial.rebalance.delay.ms": "0",
          "group.streams.heartbeat.interval.ms": "500",
          "group.streams.session.timeout.ms": "6000",
          "group.streams.initial.rebalance.delay.ms": "0"}
TXBROKER_SETTINGS = {**COMMON, "txbroker.streams.version": "1"}
KAFKA_SETTINGS = {**COMMON, "group.streams.min.session.timeout.ms": "1000",
                  "group.streams.min.heartbeat.interval.ms": "100"}
LEGS = (("txbroker", "streams"), ("kafka", "streams"), ("txbroker", "classic"),
        ("kafka", "classic"))
SCENARIOS = ("join_s", "leave_s", "eos-1", "eos-3")


def compile_app() -> Path:
    """bench/jvm/StreamsBench.java compiled against Kafka's jars; the classes directory."""
    from tests.kafka_reference import jars_dir

    out = Path(tempfile.mkdtemp(prefix="streamsbench-"))
    subprocess.run(["javac", "-nowarn", "-d", str(out), "-cp", f"{jars_dir()}/*",
                    str(ROOT / "bench" / "jvm" / "StreamsBench.java")], check=True, timeout=180)
    return out


class Instance:
    """One StreamsBench JVM: its state and owned tasks, each with when it changed."""

    def __init__(self, classes: Path, bootstrap: str, app_id: str, topics: tuple[str, str],
                 protocol: str, state_dir: Path) -> None:
        from tests.kafka_reference import jars_dir

        self.state = ""
        self.tasks: frozenset[str] = frozenset()
        self.changed_at = 0.0
        self.started_at = 0.0  # when KafkaStreams.start() moved it to REBALANCING
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", f"{classes}:{jars_dir()}/*", "StreamsBench",
             bootstrap, app_id, *topics, str(state_dir), protocol],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True)
        self._pump = threading.Thread(target=self._read, daemon=True)
        self._pump.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            now = time.monotonic()
            line = line.rstrip("\n")
            self.lines = [*self.lines[-60:], line]
            kind, _, rest = line.partition(" ")
            if kind == "STATE":
                if rest == "REBALANCING" and not self.started_at:
                    self.started_at = now
                self.state, self.changed_at = rest, now
            elif kind == "TASKS":
                self.tasks, self.changed_at = frozenset(filter(None, rest.split(","))), now

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def failed(self) -> str | None:
        if self.proc.poll() is not None or self.state in ("ERROR", "PENDING_ERROR"):
            return "\n".join(self.lines[-25:])
        return None

    def close(self, timeout: float = 40) -> None:
        """Close (leave the group); SIGKILL if it does not exit in time."""
        try:
            if self.proc.poll() is None:
                self.send("close")
            self.proc.wait(timeout)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def wait_stable(members: Sequence[Instance], timeout: float = STABLE_TIMEOUT) -> float:
    """When ``members`` last changed, once each is RUNNING and owns some tasks, together
    every task, none twice."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            if (why := m.failed()) is not None:
                raise PhaseError(f"a Streams instance failed:\n{why}")
        owned = [t for m in members for t in m.tasks]
        if all(m.state == "RUNNING" and m.tasks for m in members) \
                and len(owned) == len(set(owned)) == TASKS:
            return max(m.changed_at for m in members)
        time.sleep(0.005)
    raise PhaseError(f"not stable within {timeout}s: "
                     f"{[(m.state, sorted(m.tasks)) for m in members]}")


class Leg:
    """One (broker, protocol) pair: fresh topics and app ids per scenario; every JVM
    it started is closed or killed when it ends."""

    def __init__(self, classes: Path, broker: ManagedBroker, protocol: str) -> None:
        self.classes, self.broker, self.protocol = classes, broker, protocol
        self.work = Path(tempfile.mkdtemp(prefix="streams-bench-"))
        self.started: list[Instance] = []

    def app(self, records: int, size: int) -> tuple[str, tuple[str, str]]:
        tag = uuid.uuid4().hex[:8]
        topics = (f"sb-in-{tag}", f"sb-out-{tag}")
        for topic in topics:
            create_topic(self.broker.bootstrap, topic, TASKS)
        if records:
            produce(self.broker.bootstrap, topics[0], records, size)
        return f"sb-app-{tag}", topics

    def instance(self, app_id: str, topics: tuple[str, str]) -> Instance:
        i = Instance(self.classes, self.broker.bootstrap, app_id, topics, self.protocol,
                     self.work / f"i{len(self.started)}")
        self.started.append(i)
        return i

    def rebalance(self) -> dict[str, float]:
        app_id, topics = self.app(0, 0)
        members = [self.instance(app_id, topics) for _ in range(3)]
        for m in members:
            m.send("resume")
        wait_stable(members)
        time.sleep(SETTLE)
        extra = self.instance(app_id, topics)
        extra.send("resume")
        joined = wait_stable([*members, extra])
        join_s = joined - extra.started_at
        time.sleep(SETTLE)
        t_leave = time.monotonic()
        extra.send("close")
        leave_s = wait_stable(members) - t_leave
        return {"join_s": round(join_s, 3), "leave_s": round(leave_s, 3)}

    def eos(self, instances: int, records: int, size: int) -> dict[str, float]:
        from confluent_kafka import Consumer, TopicPartition

        app_id, topics = self.app(records, size)
        members = [self.instance(app_id, topics) for _ in range(instances)]
        wait_stable(members)
        consumer = Consumer({"bootstrap.servers": self.broker.bootstrap, "group.id": app_id,
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "fetch.queue.backoff.ms": 10, "log_level": 3})
        consumer.assign([TopicPartition(topics[1], p, 0) for p in range(TASKS)])
        try:
            start = time.monotonic()
            for m in members:
                m.send("resume")
            got = 0
            while got < records:
                if time.monotonic() - start > READ_TIMEOUT:
                    raise PhaseError(f"{got}/{records} records after {READ_TIMEOUT} s")
                for m in members:
                    if (why := m.failed()) is not None:
                        raise PhaseError(f"a Streams instance failed:\n{why}")
                got += sum(1 for msg in consumer.consume(10_000, 0.2) if msg.error() is None)
            seconds = time.monotonic() - start
        finally:
            consumer.close()
        return {"seconds": round(seconds, 3), "records_per_s": round(records / seconds)}

    def run(self, records: int, size: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, step in (("rebalance", self.rebalance),
                           ("eos-1", lambda: self.eos(1, records, size)),
                           ("eos-3", lambda: self.eos(3, records, size))):
            try:
                out[name] = step()
            except PhaseError as e:
                out[name] = {"error": str(e)[-1500:]}
            finally:
                self.close_all()
        return out

    def close_all(self) -> None:
        for i in self.started:
            i.close()
        self.started.clear()

    def cleanup(self) -> None:
        for i in self.started:
            i.kill()
        self.started.clear()
        # A JVM forked just as an interrupt arrived is in no list: find it by its main class.
        for child in psutil.Process().children():
            try:
                if "StreamsBench" in child.cmdline():
                    child.kill()
            except psutil.Error:
                pass
        shutil.rmtree(self.work, ignore_errors=True)


def produce(bootstrap: str, topic: str, count: int, size: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                         "batch.size": 1_000_000, "log_level": 3})
    value = b"x" * size
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value, key=str(i).encode(), partition=i % TASKS)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(60) != 0:
        raise PhaseError(f"produce to {topic}: records not acknowledged after 60 s")


def value_of(result: dict[str, Any], scenario: str) -> float | None:
    if scenario in ("join_s", "leave_s"):
        return result.get("rebalance", {}).get(scenario)
    return result.get(scenario, {}).get("records_per_s")


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for broker, protocol in LEGS:
        leg = f"{protocol} on {broker}"
        out[leg] = {s: report.median([value_of(r[leg], s) for r in runs if leg in r], 3)
                    for s in SCENARIOS}
    return out


def times(r: float | None) -> str:
    return "n/a" if r is None else f"{r:.2f}x"


def render_markdown(rep: dict[str, Any]) -> str:
    s, m = rep["summary"], rep["machine"]
    tx, kafka, classic, kafka_classic = (s[f"{p} on {b}"] for b, p in LEGS)
    lines = [
        "# Streams groups (KIP-1071): Kafka Streams 4.4.0 exactly_once_v2", "",
        f"`{rep['command']}` — {rep['runs']} run(s), medians; eos: {rep['records']} records "
        f"of {rep['size']} B; {m['cpu_model']}, {m['logical_cores']} logical cores, "
        f"txbroker {m['txbroker_commit']}, load average at start {m['loadavg_start']} "
        f"(2 cores shared with other work: measured under load).", "",
        "| scenario | streams on txbroker | streams on Kafka 4.4.0 | classic on txbroker "
        "| classic on Kafka 4.4.0 | streams: txbroker / Kafka | streams / classic on "
        "txbroker | streams / classic on Kafka |",
        "|---|---:|---:|---:|---:|---:|---:|---:|"]
    labels = {"join_s": "4th instance joins (s)", "leave_s": "4th instance leaves (s)",
              "eos-1": "EOS, 1 instance (records/s)", "eos-3": "EOS, 3 instances (records/s)"}
    for sc in SCENARIOS:
        digits = 3 if sc.endswith("_s") else 0
        cells = [report.fmt(v[sc], digits) for v in (tx, kafka, classic, kafka_classic)]
        cells += [times(ratio(tx[sc], kafka[sc])), times(ratio(tx[sc], classic[sc])),
                  times(ratio(kafka[sc], kafka_classic[sc]))]
        lines.append(f"| {labels[sc]} | " + " | ".join(cells) + " |")
    lines += ["", "For times, a ratio below 1 means the streams protocol (or txbroker) is "
              "faster; for records/s, above 1."]
    errors = [f"- run {i}, {leg}, {sc}: {v['error'].splitlines()[0]}"
              for i, run in enumerate(rep["runs_detail"], 1) for leg, res in run.items()
              for sc, v in res.items() if "error" in v]
    if errors:
        lines += ["", "Failed scenarios (left out of the medians):", "", *errors]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.streams_groups", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--no-kafka", action="store_true", help="txbroker only")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    opts = p.parse_args(argv)
    report.stop_on_sigterm()
    machine = report.machine_info()
    classes = compile_app()
    brokers: dict[str, ManagedBroker] = {}
    runs: list[dict[str, Any]] = []
    try:
        brokers["txbroker"] = TxBroker(TXBROKER_SETTINGS).start()
        if not opts.no_kafka:
            brokers["kafka"] = KafkaBroker(KAFKA_SETTINGS).start()
        legs = [(b, proto) for b, proto in LEGS if b in brokers]
        for i in range(opts.runs):
            run: dict[str, Any] = {}
            # Alternate the order: neither broker always gets the cooler machine.
            for name, protocol in (legs if i % 2 == 0 else list(reversed(legs))):
                leg = Leg(classes, brokers[name], protocol)
                try:
                    run[f"{protocol} on {name}"] = leg.run(opts.records, opts.size)
                finally:
                    leg.cleanup()
                print(f"run {i + 1} {protocol} on {name}: {run[f'{protocol} on {name}']}",
                      flush=True)
            runs.append(run)
    finally:
        for broker in brokers.values():
            broker.stop()
        shutil.rmtree(classes, ignore_errors=True)
    rep = {"command": report.command_line("bench.streams_groups", argv), "runs": opts.runs,
           "records": opts.records, "size": opts.size, "machine": machine,
           "summary": summarize(runs), "runs_detail": runs}
    report.write_report(opts.out, "streams_groups", rep, render_markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
