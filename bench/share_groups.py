"""Share groups (KIP-932): how fast confluent-kafka's ShareConsumer drains one partition.

    .venv/bin/python -m bench.share_groups                 # about 4 minutes on 2 cores
    .venv/bin/python -m bench.share_groups --runs 1 --no-kafka --records 20000  # a look

What is measured (confluent-kafka 2.16 / librdkafka, only 127.0.0.1; each scenario on a
fresh single-partition topic and a fresh group, the records produced before the clock
starts):

* **share-1**: one ``ShareConsumer`` (implicit acknowledgement: a poll accepts what the
  previous poll returned) reads ``--records`` records of ``--size`` bytes;
* **share-4**: four ``ShareConsumer`` s of one group, each in its own thread, read the
  same partition together (a share group hands every member every partition, and
  each record to one member at a time);
* **classic-1**: one member of a classic consumer group reads the same partition, for
  reference (with one partition a classic group cannot use a second member);
* **share-1-single**: share-1 over 30,000 records (at most ``--records``) produced one
  per batch (``batch.num.messages=1``), as a queue fed one job at a time is: a
  ShareFetch then acquires many small batches.

The clock runs from the first record any consumer received to the moment every
offset was received (assignment and the first fetch are left out: they are the same
handful of round trips on both brokers and would dominate short runs). A record
received twice (its lock expired, or a member's records were released) counts once.
Each scenario runs against txbroker (``share.version`` 1) and Apache Kafka 4.4.0 (a
new 4.4 cluster finalizes ``share.version``) in the same run, alternating, ``--runs``
times; the table gives medians and txbroker's ratio to Kafka (goal: >= 1.0x for the
share scenarios) and to classic-1 on txbroker.

Results: bench/results/share_groups.json and share_groups.md.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import report
from .brokers import KafkaBroker, ManagedBroker, TxBroker
from .clients import PhaseError, create_topic

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "bench" / "results"
SCENARIOS = ("share-1", "share-4", "classic-1", "share-1-single")
SINGLE_RECORDS = 30_000  # share-1-single: one record per producer batch is slow to produce
TXBROKER_SETTINGS = {"txbroker.share.version": "1"}
READ_TIMEOUT = 180.0


def produce_one_partition(bootstrap: str, topic: str, count: int, size: int,
                          one_per_batch: bool = False) -> None:
    from confluent_kafka import Producer

    batching = {"linger.ms": 0, "batch.num.messages": 1} if one_per_batch else \
        {"linger.ms": 5, "batch.size": 1_000_000}
    producer = Producer({"bootstrap.servers": bootstrap, **batching, "acks": "all",
                         "log_level": 3})
    value = b"x" * size
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(60) != 0:
        raise PhaseError(f"produce to {topic}: records not acknowledged after 60 s")


def earliest_for_group(bootstrap: str, group: str) -> None:
    """``share.auto.offset.reset=earliest`` for ``group`` (a group config, as on Kafka)."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest",
                    incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


class Reader:
    """Consumers of one group in threads, collecting the offsets they received."""

    def __init__(self, bootstrap: str, topic: str, group: str, members: int, share: bool,
                 records: int) -> None:
        from confluent_kafka import Consumer, ShareConsumer

        base = {"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3}
        if share:
            self.consumers = [ShareConsumer(dict(base)) for _ in range(members)]
        else:
            self.consumers = [Consumer({**base, "group.protocol": "classic",
                                        "auto.offset.reset": "earliest",
                                        "enable.auto.commit": False})
                              for _ in range(members)]
        for c in self.consumers:
            c.subscribe([topic])
        self.share = share
        self.records = records
        self.seen = bytearray(records)
        self.unique = 0
        self.deliveries = 0
        self.first = 0.0
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.errors: list[str] = []

    def _poll(self, c: Any) -> list:
        if self.share:
            return c.poll(0.5)
        return c.consume(10_000, 0.5)

    def _run(self, c: Any) -> None:
        try:
            while not self.done.is_set():
                msgs = [m for m in self._poll(c) if m.error() is None]
                if not msgs:
                    continue
                with self.lock:
                    if not self.first:
                        self.first = time.perf_counter()
                    self.deliveries += len(msgs)
                    for m in msgs:
                        offset = m.offset()
                        if offset < self.records and not self.seen[offset]:
                            self.seen[offset] = 1
                            self.unique += 1
                    if self.unique >= self.records:
                        self.done.set()
        except Exception as e:  # a failed client fails the run, loudly
            self.errors.append(repr(e))
            self.done.set()

    def run(self) -> dict[str, Any]:
        threads = [threading.Thread(target=self._run, args=(c,), daemon=True)
                   for c in self.consumers]
        for t in threads:
            t.start()
        finished = self.done.wait(READ_TIMEOUT)
        end = time.perf_counter()
        self.done.set()
        for t in threads:
            t.join(10)
        for c in self.consumers:
            c.close()
        if self.errors:
            raise PhaseError(f"consumer failed: {self.errors[0]}")
        if not finished:
            raise PhaseError(f"{self.unique}/{self.records} records after {READ_TIMEOUT} s")
        seconds = end - self.first
        return {"seconds": round(seconds, 3), "records_per_s": round(self.records / seconds),
                "redelivered": self.deliveries - self.unique}


def scenario(broker: ManagedBroker, name: str, records: int, size: int) -> dict[str, Any]:
    bootstrap = broker.bootstrap
    tag = uuid.uuid4().hex[:8]
    topic, group = f"share-bench-{tag}", f"share-bench-{tag}"
    create_topic(bootstrap, topic, partitions=1)
    single = name.endswith("-single")
    if single:
        records = min(records, SINGLE_RECORDS)
    produce_one_partition(bootstrap, topic, records, size, one_per_batch=single)
    share = name.startswith("share")
    if share:
        earliest_for_group(bootstrap, group)
    members = int(name.split("-")[1])
    return Reader(bootstrap, topic, group, members, share, records).run()


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    out: dict[str, dict[str, float | None]] = {}
    for broker in ("txbroker", "kafka"):
        out[broker] = {}
        for name in SCENARIOS:
            values = [r[broker][name]["records_per_s"] for r in runs
                      if broker in r and name in r[broker]]
            out[broker][name] = report.median(values, 0) if values else None
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def render_markdown(rep: dict[str, Any]) -> str:
    s = rep["summary"]
    lines = [
        "# Share groups: ShareConsumer throughput on one partition",
        "",
        f"`{rep['command']}` — {rep['records']} records of {rep['size']} B, "
        f"{rep['runs']} run(s), medians in records/s; "
        f"{rep['machine']['cpu_model']}, {rep['machine']['logical_cores']} logical cores, "
        f"txbroker {rep['machine']['txbroker_commit']}, load at start "
        f"{rep['machine']['loadavg_start']}.",
        "",
        "| scenario | txbroker | Kafka 4.4.0 | txbroker / Kafka | txbroker / classic-1 |",
        "|---|---:|---:|---:|---:|",
    ]
    tx_classic = s["txbroker"].get("classic-1")
    for name in SCENARIOS:
        tx, kafka = s["txbroker"].get(name), s["kafka"].get(name)
        lines.append(f"| {name} | {report.fmt(tx, 0)} | {report.fmt(kafka, 0)} | "
                     f"{report.fmt(ratio(tx, kafka), 2)}x | "
                     f"{report.fmt(ratio(tx, tx_classic), 2)}x |")
    lines += ["", "Records received twice (lock expiries, releases), per run:", ""]
    for i, run in enumerate(rep["runs_detail"], 1):
        parts = [f"{b} {n} {run[b][n]['redelivered']}" for b in ("txbroker", "kafka")
                 if b in run for n in SCENARIOS if n in run[b]]
        lines.append(f"- run {i}: " + ", ".join(parts))
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.share_groups", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--no-kafka", action="store_true", help="txbroker only")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    opts = parse_args(argv)
    report.stop_on_sigterm()
    machine = report.machine_info()
    brokers: list[ManagedBroker] = [TxBroker(TXBROKER_SETTINGS).start()]
    try:
        if not opts.no_kafka:
            brokers.append(KafkaBroker().start())
        runs: list[dict[str, Any]] = []
        for i in range(opts.runs):
            run: dict[str, Any] = {}
            # Alternate which broker goes first: neither always gets the cooler machine.
            for broker in (brokers if i % 2 == 0 else list(reversed(brokers))):
                run[broker.name] = {name: scenario(broker, name, opts.records, opts.size)
                                    for name in SCENARIOS}
                print(f"run {i + 1} {broker.name}: "
                      + ", ".join(f"{n} {r['records_per_s']}/s"
                                  for n, r in run[broker.name].items()), flush=True)
            runs.append(run)
    finally:
        for broker in brokers:
            broker.stop()
    rep = {"command": report.command_line("bench.share_groups", argv),
           "records": opts.records, "size": opts.size, "runs": opts.runs,
           "machine": machine, "summary": summarize(runs), "runs_detail": runs}
    report.write_report(opts.out, "share_groups", rep, render_markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
