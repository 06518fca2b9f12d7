"""The payments processor: exactly-once consume-transform-produce with Kafka transactions.

    python -m spark_jobs.payments.processor --bootstrap HOST:PORT --journal FILE
        [--transactional-id ID] [--group G] [--instance NAME] [--batch N]
        [--abort-every K] [--crash-at A] [--run-timeout SECONDS]

A read_committed consumer in group G reads ``orders``; for every batch of up to N
orders one transaction (transactional.id ID) produces each valid order, validated
and enriched (fee, EUR amount, status), to ``payments`` and each invalid one to
``payments-rejected``, then commits the consumer's positions inside the same
transaction (``send_offsets_to_transaction``) and commits: outputs and input offsets
become visible together or not at all.

Faults, on purpose, so that the log really holds records a reader must skip:
- every K-th attempt produces its outputs, waits until the broker has them, sends
  the offsets and then *aborts*; the consumer seeks back and the same orders are
  processed again in a new attempt;
- attempt A produces half of its outputs, waits until they are in the log and
  SIGKILLs its own process: the transaction stays open. The next process started
  with the same transactional.id fences this zombie in ``init_transactions`` (the
  broker bumps the epoch and aborts the open transaction) and, being the same
  static group member (group.instance.id), takes over its partitions at once.

Each output value carries ``attempt`` ("<instance>-<n>"); outcomes go to the journal
(``journal.py``). Lines printed: READY, COMMITTED, ABORTED, CRASHING, DONE. Exit 0
when every input partition is consumed to its end, 2 on timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import uuid

from .generator import ORDERS_TOPIC
from .journal import ABORTED, COMMITTED, CRASHED, Journal
from .orders import Order, process

PAYMENTS_TOPIC = "payments"
REJECTED_TOPIC = "payments-rejected"
DEFAULT_TRANSACTIONAL_ID = "payments-processor-0"
DEFAULT_GROUP = "payments-processor"


def say(*parts: object) -> None:
    print(*parts, flush=True)


class Processor:
    def __init__(self, a: argparse.Namespace) -> None:
        from confluent_kafka import Consumer, Producer

        self.a = a
        self.journal = Journal(a.journal)
        self.instance = a.instance or uuid.uuid4().hex[:6]
        security = read_properties(a.command_config) if a.command_config else {}
        self.producer = Producer({
            "bootstrap.servers": a.bootstrap, "transactional.id": a.transactional_id,
            "transaction.timeout.ms": 60000, "linger.ms": 5,
            # A dead broker connection should be retried quickly, not after seconds.
            "reconnect.backoff.max.ms": 500, **security})
        self.consumer = Consumer({
            "bootstrap.servers": a.bootstrap, "group.id": a.group,
            # Static membership: a restarted processor replaces its dead predecessor in
            # the group immediately instead of waiting for its session to time out.
            "group.instance.id": a.transactional_id,
            "isolation.level": "read_committed", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
            "fetch.wait.max.ms": 100, "reconnect.backoff.max.ms": 500, **security})
        self.attempt_no = 0

    def run(self) -> int:
        from confluent_kafka import KafkaException

        a = self.a
        # Before consuming: this fences any zombie with our transactional.id and waits
        # for its open transaction (outputs *and* offsets) to be aborted, so the
        # committed offsets we start from are stable.
        self.producer.init_transactions(30)
        self.consumer.subscribe([a.input])
        meta = self.consumer.list_topics(a.input, timeout=10)
        self.partitions = sorted(meta.topics[a.input].partitions)
        say("READY", self.instance)
        deadline = time.monotonic() + a.run_timeout
        while time.monotonic() < deadline:
            msgs = self.consumer.consume(num_messages=a.batch, timeout=0.5)
            errors = [m.error() for m in msgs if m.error() is not None]
            for err in errors:
                if err.fatal():
                    raise KafkaException(err)
            msgs = [m for m in msgs if m.error() is None]
            if not msgs:
                if self._caught_up():
                    say("DONE", self.instance)
                    return 0
                continue
            try:
                self._transaction(msgs)
            except KafkaException as e:
                err = e.args[0]
                if not err.txn_requires_abort():
                    raise
                # e.g. a timed-out transaction: abort, then process the same orders again.
                attempt = self._attempt_id()
                self.journal.record(ABORTED, attempt, reason=f"error: {err.str()}")
                say("ABORTED", attempt, "error", err.str())
                self.producer.abort_transaction(30)
                self._rewind(msgs)
        say("TIMEOUT", self.instance)
        return 2

    def _attempt_id(self) -> str:
        return f"{self.instance}-{self.attempt_no:04d}"

    def _transaction(self, msgs: list) -> None:
        a = self.a
        self.attempt_no += 1
        attempt = self._attempt_id()
        crash = self.attempt_no == a.crash_at
        abort = a.abort_every > 0 and self.attempt_no % a.abort_every == 0
        self.producer.begin_transaction()
        todo = msgs[: max(1, len(msgs) // 2)] if crash else msgs
        payments = rejected = 0
        for m in todo:
            valid, value = process(Order.from_json(m.value()), attempt)
            if valid:
                payments += 1
            else:
                rejected += 1
            self.producer.produce(a.payments if valid else a.rejected, key=m.key(),
                                  value=json.dumps(value, separators=(",", ":")).encode())
        self.producer.poll(0)
        if crash:
            # Wait until the broker has the records, so the zombie's transaction really
            # holds data in the payments log, then die without a word to the broker.
            self.producer.flush(30)
            self.journal.record(CRASHED, attempt, payments=payments, rejected=rejected)
            say("CRASHING", attempt, payments + rejected)
            os.kill(os.getpid(), signal.SIGKILL)
        positions = [tp for tp in self.consumer.position(self.consumer.assignment())
                     if tp.offset >= 0]
        self.producer.send_offsets_to_transaction(
            positions, self.consumer.consumer_group_metadata(), 30)
        if abort:
            # librdkafka purges records it has not sent yet on abort: flush first so the
            # aborted records are in the log (and the abort marker has work to do).
            self.producer.flush(30)
            self.journal.record(ABORTED, attempt, reason="deliberate",
                                payments=payments, rejected=rejected)
            self.producer.abort_transaction(30)
            say("ABORTED", attempt, "deliberate", payments + rejected)
            self._rewind(msgs)
            return
        self.producer.commit_transaction(30)
        self.journal.record(COMMITTED, attempt, payments=payments, rejected=rejected)
        say("COMMITTED", attempt, payments + rejected)

    def _rewind(self, msgs: list) -> None:
        """Seek back to the first order of the batch on each partition: the next
        attempt processes exactly these orders again."""
        from confluent_kafka import TopicPartition

        first: dict[int, int] = {}
        for m in msgs:
            first[m.partition()] = min(first.get(m.partition(), m.offset()), m.offset())
        for partition, offset in first.items():
            self.consumer.seek(TopicPartition(self.a.input, partition, offset))

    def _caught_up(self) -> bool:
        """Every input partition assigned to us and consumed to its end."""
        from confluent_kafka import TopicPartition

        assigned = sorted(tp.partition for tp in self.consumer.assignment())
        if assigned != self.partitions:
            return False
        tps = [TopicPartition(self.a.input, p) for p in self.partitions]
        positions = self.consumer.position(tps)
        # Nothing consumed yet on a partition: its position is still unknown (-1001);
        # the committed offset says where the group stands.
        unknown = [tp for tp in positions if tp.offset < 0]
        if unknown:
            committed = {tp.partition: tp.offset
                         for tp in self.consumer.committed(unknown, timeout=10)}
            positions = [TopicPartition(tp.topic, tp.partition,
                                        committed.get(tp.partition, tp.offset))
                         if tp.offset < 0 else tp for tp in positions]
        for tp in positions:
            _low, high = self.consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            if max(tp.offset, 0) < high:
                return False
        return True

    def close(self) -> None:
        self.consumer.close()
        self.producer.flush(10)


def read_properties(path: str) -> dict[str, str]:
    """key=value lines (# comments and blank lines skipped)."""
    props = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith(("#", "!")):
                key, _, value = line.partition("=")
                props[key.strip()] = value.strip()
    return props


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--journal", required=True, help="side file of attempt outcomes")
    p.add_argument("--transactional-id", default=DEFAULT_TRANSACTIONAL_ID)
    p.add_argument("--group", default=DEFAULT_GROUP)
    p.add_argument("--instance", default="", help="prefix of attempt ids (default: random)")
    p.add_argument("--input", default=ORDERS_TOPIC)
    p.add_argument("--payments", default=PAYMENTS_TOPIC)
    p.add_argument("--rejected", default=REJECTED_TOPIC)
    p.add_argument("--batch", type=int, default=50, help="orders per transaction")
    p.add_argument("--abort-every", type=int, default=0, help="abort every K-th attempt")
    p.add_argument("--crash-at", type=int, default=0, help="SIGKILL itself in attempt A")
    p.add_argument("--run-timeout", type=float, default=120)
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties added to the consumer's and producer's "
                        "(librdkafka names: security.protocol, sasl.*, ssl.ca.location)")
    a = p.parse_args(argv)
    processor = Processor(a)
    rc = processor.run()
    processor.close()
    return rc


if __name__ == "__main__":
    sys.exit(main())
