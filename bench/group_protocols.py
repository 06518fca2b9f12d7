"""KIP-848's consumer group protocol against the classic one, with its targets.

    .venv/bin/python -m bench.group_protocols              # about 5 minutes on 2 cores
    .venv/bin/python -m bench.group_protocols --runs 1 --no-kafka   # a quick look

What is measured (confluent-kafka, only 127.0.0.1; every run on a fresh topic and group):

* **rebalance** of a 10-member group (20 partitions, one thread per member, each
  polling every 50 ms): the group is stable (every member holds partitions, together
  all of them, none twice); then
  - *join*: an 11th member subscribes; the time runs until the 11 are stable again;
  - *leave*: it closes; the time runs until the 10 are stable again.
  For ``group.protocol=consumer`` on txbroker and on Apache Kafka 4.3.1 (same run,
  same settings), and ``group.protocol=classic`` (librdkafka's default eager
  ``range,roundrobin``) on both. Both brokers run with
  ``group.consumer.heartbeat.interval.ms=500`` and the classic members with
  ``heartbeat.interval.ms=500``: a member learns of a change at its next heartbeat
  under either protocol, so the interval is the same for both. Targets: consumer on
  txbroker <= Kafka's, and <= classic on txbroker.
* **ctp** (consume-transform-produce transactions/s) on txbroker: 2 workers of one
  group, each a consumer and a transactional producer, each transaction consuming
  up to 50 records, producing them to an output topic and committing the offsets with
  ``send_offsets_to_transaction(..., consumer_group_metadata())``, for a fixed time;
  with ``group.protocol=consumer`` and ``classic``. Target: consumer >= 0.9x classic.

Results: bench/results/group_protocols.json and group_protocols.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import report
from .brokers import KafkaBroker, TxBroker
from .clients import confluent_produce, create_topic

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "bench" / "results"
# The same group settings on both brokers (Kafka's defaults otherwise).
GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": "0",
                  "group.consumer.heartbeat.interval.ms": "500",
                  "group.consumer.min.heartbeat.interval.ms": "100",
                  "offsets.topic.num.partitions": "4",
                  "transaction.state.log.num.partitions": "4"}
MEMBERS = 10
PARTITIONS = 20
STABLE_TIMEOUT = 90.0
CTP_BATCH = 50


class Member:
    """A confluent-kafka consumer polling in its own thread; it records its assignment
    (``assignment()`` after each poll: right for eager and incremental protocols) and
    when it last changed."""

    def __init__(self, bootstrap: str, topic: str, group: str, protocol: str, name: str) -> None:
        self.conf = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                     "group.protocol": protocol, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "log_level": 3}
        if protocol == "classic":
            self.conf["heartbeat.interval.ms"] = 500
        self.topic, self.name = topic, name
        self.assignment: frozenset[int] = frozenset()
        self.changed_at = 0.0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Member:
        self._thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import Consumer

        consumer = None
        try:
            consumer = Consumer(self.conf)
            consumer.subscribe([self.topic])
            while not self._stop.is_set():
                consumer.poll(0.05)
                now = frozenset(tp.partition for tp in consumer.assignment())
                if now != self.assignment:
                    self.assignment, self.changed_at = now, time.monotonic()
        except BaseException as e:  # reported by the caller
            self.error = e
        finally:
            if consumer is not None:
                consumer.close()

    def close(self, timeout: float = 30) -> None:
        self._stop.set()
        self._thread.join(timeout)


def wait_stable(members: Sequence[Member], timeout: float = STABLE_TIMEOUT) -> float:
    """When ``members`` last changed their assignment, once they hold every partition,
    each some and none twice."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            if m.error is not None:
                raise RuntimeError(f"member {m.name} failed: {m.error!r}")
        held = [m.assignment for m in members]
        if all(held) and sorted(p for h in held for p in h) == list(range(PARTITIONS)):
            return max(m.changed_at for m in members)
        time.sleep(0.005)
    raise RuntimeError(f"not stable within {timeout}s: {[sorted(m.assignment) for m in members]}")


def rebalance_run(bootstrap: str, protocol: str) -> dict[str, Any]:
    """(join, leave) times of a 10-member group on a running broker."""
    topic, group = f"rb-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, PARTITIONS)
    members = [Member(bootstrap, topic, group, protocol, f"m{i}").start() for i in range(MEMBERS)]
    extra = None
    try:
        wait_stable(members)
        time.sleep(1.0)  # settled: no reconciliation left in flight
        extra = Member(bootstrap, topic, group, protocol, "extra")
        t_join = time.monotonic()
        extra.start()
        join_s = wait_stable([*members, extra]) - t_join
        time.sleep(1.0)
        t_leave = time.monotonic()
        extra.close()
        leave_s = wait_stable(members) - t_leave
        return {"ok": True, "join_s": round(join_s, 3), "leave_s": round(leave_s, 3)}
    except Exception as e:
        return {"ok": False, "error": repr(e)[:300]}
    finally:
        for m in ([extra] if extra else []) + members:
            m.close()


def _ctp_worker(bootstrap: str, src: str, dst: str, group: str, protocol: str, name: str,
                seconds: float, out: dict[str, int], start: threading.Barrier) -> None:
    from confluent_kafka import Consumer, Producer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "group.protocol": protocol, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "log_level": 3, **({"heartbeat.interval.ms": 500}
                                            if protocol == "classic" else {})})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{group}-{name}",
                         "linger.ms": 0, "log_level": 3})
    producer.init_transactions(30)
    consumer.subscribe([src])
    txns = records = 0
    try:
        start.wait(120)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            batch = [m for m in consumer.consume(CTP_BATCH, 0.1) if m.error() is None]
            if not batch:
                continue
            producer.begin_transaction()
            for m in batch:
                producer.produce(dst, m.value(), m.key())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
            txns += 1
            records += len(batch)
    finally:
        consumer.close()
        out[name] = txns
        out[name + "_records"] = records


def ctp_run(bootstrap: str, protocol: str, seconds: float, workers: int = 2) -> dict[str, Any]:
    src, dst = f"ctp-in-{uuid.uuid4().hex[:8]}", f"ctp-out-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, src, 4)
    create_topic(bootstrap, dst, 4)
    confluent_produce(bootstrap, src, 200_000, b"x" * 100, 120)
    out: dict[str, int] = {}
    start = threading.Barrier(workers)
    threads = [threading.Thread(target=_ctp_worker, args=(
        bootstrap, src, dst, f"g-{src}", protocol, f"w{i}", seconds, out, start))
        for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 180)
    txns = sum(v for k, v in out.items() if not k.endswith("_records"))
    recs = sum(v for k, v in out.items() if k.endswith("_records"))
    return {"ok": len(out) == 2 * workers, "txn_per_s": round(txns / seconds, 1),
            "records_per_s": round(recs / seconds, 1)}


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get("ok")]
    return round(statistics.median(values), 3) if values else None


def run(runs: int, ctp_seconds: float, with_kafka: bool) -> dict[str, Any]:
    result: dict[str, Any] = {"rebalance": {}, "ctp": {}}
    brokers = [("txbroker", lambda: TxBroker(GROUP_SETTINGS))]
    if with_kafka:
        brokers.append(("kafka", lambda: KafkaBroker(GROUP_SETTINGS)))
    for name, factory in brokers:
        broker = factory().start()
        try:
            for protocol in ("consumer", "classic"):
                done = [rebalance_run(broker.bootstrap, protocol) for _ in range(runs)]
                result["rebalance"][f"{protocol} on {name}"] = {
                    "runs": done, "join_s": _median(done, "join_s"),
                    "leave_s": _median(done, "leave_s")}
                print(name, protocol, result["rebalance"][f"{protocol} on {name}"], flush=True)
            if name == "txbroker":
                for protocol in ("consumer", "classic"):
                    done = [ctp_run(broker.bootstrap, protocol, ctp_seconds) for _ in range(runs)]
                    result["ctp"][protocol] = {"runs": done,
                                               "txn_per_s": _median(done, "txn_per_s")}
                    print(name, "ctp", protocol, result["ctp"][protocol], flush=True)
        finally:
            broker.stop()
    return result


def render_markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    lines = ["# Consumer group protocols (KIP-848 vs classic)", "",
             f"`{r['command']}`, {m['date']}, commit {m['txbroker_commit']}; "
             f"{m['cpu_model']}, {m['logical_cores']} cores; {r['load']}.", "",
             "| group | join (s, median) | leave (s, median) |", "|---|---|---|"]
    for name, v in r["result"]["rebalance"].items():
        lines.append(f"| {name} | {v['join_s']} | {v['leave_s']} |")
    ctp = r["result"]["ctp"]
    if ctp:
        lines += ["", "| consume-transform-produce on txbroker | transactions/s (median) |",
                  "|---|---|"]
        lines += [f"| group.protocol={p} | {v['txn_per_s']} |" for p, v in ctp.items()]
        c, k = ctp.get("consumer", {}).get("txn_per_s"), ctp.get("classic", {}).get("txn_per_s")
        if c and k:
            lines.append(f"\nconsumer / classic: {c / k:.2f}x")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.group_protocols", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--ctp-seconds", type=float, default=10.0)
    p.add_argument("--no-kafka", action="store_true", help="txbroker only")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    report.stop_on_sigterm()
    machine = report.machine_info()
    result = run(args.runs, args.ctp_seconds, not args.no_kafka)
    out = {"command": report.command_line("bench.group_protocols", argv), "machine": machine,
           "load": f"load average {machine['loadavg_start']} at the start (2 cores shared "
                   f"with other work: numbers measured under load)",
           "result": result}
    report.write_report(args.out, "group_protocols", out, render_markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
