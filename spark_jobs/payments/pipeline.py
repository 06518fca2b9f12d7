"""Run the payments pipeline against a broker: generator → processor (crash, restart).

    python -m spark_jobs.payments.pipeline --bootstrap HOST:PORT --workdir DIR
        [--orders N] [--seed S] [--batch N] [--abort-every K] [--crash-at A]

1. creates the topics ``orders``, ``payments`` and ``payments-rejected``;
2. produces the deterministic orders (``generator.py``, idempotent producer);
3. starts the processor (``processor.py``) as a separate process that aborts every
   K-th transaction and SIGKILLs itself in attempt A, mid-transaction;
4. starts a second processor with the same transactional.id, which fences the
   zombie (its open transaction is aborted by the broker) and finishes the job.

``run_pipeline`` returns what happened (``PipelineResult``), read from the
processors' journal, and the ledger the committed outputs must add up to,
computed from the generator's orders alone.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .generator import ORDERS_TOPIC, produce_orders
from .journal import Attempts, read_journal
from .orders import Ledger, expected_ledger, generate_orders
from .processor import DEFAULT_GROUP, DEFAULT_TRANSACTIONAL_ID, PAYMENTS_TOPIC, REJECTED_TOPIC


@dataclass(frozen=True)
class PipelineConfig:
    orders: int = 2000
    seed: int = 7
    partitions: int = 3
    batch: int = 50  # orders per transaction
    abort_every: int = 4  # every K-th attempt of a processor is aborted on purpose
    crash_at: int = 6  # the first processor SIGKILLs itself in this attempt
    orders_topic: str = ORDERS_TOPIC
    payments_topic: str = PAYMENTS_TOPIC
    rejected_topic: str = REJECTED_TOPIC
    group: str = DEFAULT_GROUP
    transactional_id: str = DEFAULT_TRANSACTIONAL_ID
    processor_timeout: float = 120


@dataclass
class PipelineResult:
    config: PipelineConfig
    ledger: Ledger  # expected, from the generated orders
    attempts: Attempts  # what the processors did, from their journal
    journal: str
    crashes: int  # processor processes that died (SIGKILL)
    processor_runs: int
    elapsed: float
    order_ids: list[str] = field(default_factory=list)

    @property
    def orders(self) -> int:
        return self.ledger.orders

    @property
    def transactions_committed(self) -> int:
        return len(self.attempts.committed)

    @property
    def transactions_aborted(self) -> int:
        """Deliberate (and error) aborts plus the crashed processor's fenced transaction."""
        return len(self.attempts.not_committed)

    @property
    def aborted_attempts(self) -> set[str]:
        return self.attempts.not_committed


def create_topics(bootstrap: str, topics: list[str], partitions: int,
                  client: Mapping[str, str] | None = None) -> None:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **(client or {})})
    # Replication factor -1: the broker's default.replication.factor (1 on txbroker, 3 on
    # the Kafka cluster of docs/migrating-to-kafka.md): the same code on both.
    futures = admin.create_topics([NewTopic(t, partitions, -1) for t in topics])
    for _topic, fut in futures.items():
        try:
            fut.result(30)
        except Exception as e:  # an existing topic is fine: the pipeline may run again
            err = e.args[0] if e.args else None
            if getattr(err, "code", lambda: None)() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


class ProcessorProcess:
    """``python -m spark_jobs.payments.processor`` as a child; its lines are kept."""

    def __init__(self, args: list[str], echo: Callable[[str], None] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "txbroker.spark_jobs.payments.processor", *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._echo = echo
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if self._echo:
                self._echo(line.rstrip("\n"))

    def wait(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise RuntimeError("processor did not finish in time:\n"
                               + "\n".join(self.lines[-40:])) from None
        self._reader.join(5)
        return rc


def write_properties(path: str | os.PathLike[str], props: Mapping[str, str]) -> str:
    """Client properties as a Java-style .properties file (one key=value a line)."""
    Path(path).write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    os.chmod(path, 0o600)  # it may hold a password
    return str(path)


def run_pipeline(bootstrap: str, workdir: str | os.PathLike[str],
                 config: PipelineConfig = PipelineConfig(),
                 echo: Callable[[str], None] | None = None,
                 clients: Mapping[str, Mapping[str, str]] | None = None) -> PipelineResult:
    """``clients``: extra client properties (librdkafka names, e.g. security.protocol,
    sasl.*, ssl.ca.location) per role: "admin" (creates the topics), "generator",
    "processor" (consumer and transactional producer); none: PLAINTEXT as anyone."""
    start = time.monotonic()
    c = config
    clients = clients or {}
    journal = str(Path(workdir) / f"attempts-{uuid.uuid4().hex[:6]}.jsonl")
    orders = generate_orders(c.orders, c.seed)
    create_topics(bootstrap, [c.orders_topic, c.payments_topic, c.rejected_topic], c.partitions,
                  clients.get("admin"))
    produce_orders(bootstrap, orders, c.orders_topic, client=clients.get("generator"))

    common = ["--bootstrap", bootstrap, "--journal", journal,
              "--transactional-id", c.transactional_id, "--group", c.group,
              "--input", c.orders_topic, "--payments", c.payments_topic,
              "--rejected", c.rejected_topic, "--batch", str(c.batch),
              "--abort-every", str(c.abort_every), "--run-timeout", str(c.processor_timeout)]
    if clients.get("processor"):
        common += ["--command-config", write_properties(
            Path(workdir) / "processor.properties", clients["processor"])]
    crashes = runs = 0
    # The first processor crashes in attempt crash_at (if there is that much work);
    # every later one runs to the end of the input.
    crash_at = c.crash_at
    while True:
        runs += 1
        args = [*common, "--instance", f"p{runs}"]
        if crash_at:
            args += ["--crash-at", str(crash_at)]
        proc = ProcessorProcess(args, echo)
        rc = proc.wait(c.processor_timeout + 30)
        if rc == -9:  # SIGKILL, as planned
            crashes += 1
            crash_at = 0
            if crashes > 1:
                raise RuntimeError("processor crashed twice:\n" + "\n".join(proc.lines[-40:]))
            continue
        if rc != 0:
            raise RuntimeError(f"processor exited with {rc}:\n" + "\n".join(proc.lines[-40:]))
        break
    return PipelineResult(config=c, ledger=expected_ledger(orders), attempts=read_journal(journal),
                          journal=journal, crashes=crashes, processor_runs=runs,
                          elapsed=time.monotonic() - start,
                          order_ids=[o.order_id for o in orders])


def read_topic(bootstrap: str, topic: str, *, committed: bool = True,
               timeout: float = 60, client: Mapping[str, str] | None = None) -> list[bytes]:
    """Every record value in ``topic`` from the beginning to the end of each partition,
    as a read_committed (up to the last stable offset, aborted transactions skipped)
    or a read_uncommitted consumer (up to the high watermark, aborted records too)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "enable.partition.eof": True,
        "isolation.level": "read_committed" if committed else "read_uncommitted",
        "fetch.wait.max.ms": 100, **(client or {})})
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        pending = set(partitions)
        values: list[bytes] = []
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: partitions {sorted(pending)} not read to the end")
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                err = m.error()
                if err is None:
                    values.append(m.value())
                elif err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(m.partition())
                else:
                    raise RuntimeError(f"{topic}: {err}")
        return values
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--workdir", default=".", help="where the attempts journal is written")
    p.add_argument("--orders", type=int, default=PipelineConfig.orders)
    p.add_argument("--seed", type=int, default=PipelineConfig.seed)
    p.add_argument("--batch", type=int, default=PipelineConfig.batch)
    p.add_argument("--abort-every", type=int, default=PipelineConfig.abort_every)
    p.add_argument("--crash-at", type=int, default=PipelineConfig.crash_at)
    p.add_argument("-v", "--verbose", action="store_true", help="echo the processors' lines")
    a = p.parse_args(argv)
    config = PipelineConfig(orders=a.orders, seed=a.seed, batch=a.batch,
                            abort_every=a.abort_every, crash_at=a.crash_at)
    r = run_pipeline(a.bootstrap, a.workdir, config, echo=print if a.verbose else None)
    print(f"orders {r.orders} (valid {r.ledger.valid}, invalid {r.ledger.rejected_total}); "
          f"transactions committed {r.transactions_committed}, aborted "
          f"{r.transactions_aborted}; processor crashes {r.crashes}; journal {r.journal}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
