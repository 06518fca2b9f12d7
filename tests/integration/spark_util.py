"""Helpers for the Spark tests: one shared SparkSession per test run, transactional
producers that remember where every record landed, and what read_committed must see."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

_SESSION = None


def shared_spark():
    """One SparkSession for the whole test run (starting one takes seconds)."""
    global _SESSION
    if _SESSION is None or _SESSION.sparkContext._jsc is None:  # none yet, or stopped
        from txbroker.spark_jobs.session import spark_session

        _SESSION = spark_session("txbroker-tests")
    return _SESSION


@dataclass
class Sent:
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    state: str  # "committed" | "aborted" | "open"
    headers: tuple[tuple[str, bytes], ...] = ()


@dataclass
class Ledger:
    """Every record a test produced and the fate of its transaction."""

    records: list[Sent] = field(default_factory=list)

    def open_first_offsets(self) -> dict[int, int]:
        """Per partition, the first offset of a still-open transaction: the last stable offset."""
        out: dict[int, int] = {}
        for r in self.records:
            if r.state == "open":
                out[r.partition] = min(out.get(r.partition, r.offset), r.offset)
        return out

    def visible(self) -> list[tuple[int, int, bytes | None, bytes]]:
        """(partition, offset, key, value) a read_committed reader must return, sorted."""
        lso = self.open_first_offsets()
        return sorted((r.partition, r.offset, r.key, r.value) for r in self.records
                      if r.state == "committed" and r.offset < lso.get(r.partition, 2**63))


class Producer:
    """A confluent-kafka producer (transactional unless ``transactional=False``) whose
    sends land in a Ledger with their partition, offset and transaction outcome."""

    def __init__(self, bootstrap: str, ledger: Ledger, *, transactional: bool = True) -> None:
        from confluent_kafka import Producer as CProducer

        conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
        if transactional:
            conf["transactional.id"] = f"spark-test-{uuid.uuid4().hex[:8]}"
            conf["transaction.timeout.ms"] = 300_000  # an "open" transaction stays open
        self.p = CProducer(conf)
        self.ledger = ledger
        self.transactional = transactional
        self._current: list[Sent] = []
        self._errors: list = []
        if transactional:
            self.p.init_transactions(30)

    def begin(self) -> Producer:
        self.p.begin_transaction()
        return self

    def send(self, topic: str, partition: int, value: bytes, key: bytes | None = None,
             headers: tuple[tuple[str, bytes], ...] = ()) -> None:
        sent = Sent(partition, -1, key, value, "pending", headers)
        self._current.append(sent)
        self.ledger.records.append(sent)

        def delivered(err, msg, sent=sent):
            if err is not None:
                self._errors.append(err)
            else:
                sent.offset = msg.offset()

        self.p.produce(topic, value=value, key=key, partition=partition,
                       headers=list(headers) or None, on_delivery=delivered)

    def _flush(self, state: str) -> list[Sent]:
        """Wait until every record sent is written; mark them ``state``."""
        assert self.p.flush(30) == 0 and not self._errors, self._errors
        done, self._current = self._current, []
        for s in done:
            assert s.offset >= 0
            s.state = state
        return done

    def commit(self) -> None:
        done = self._flush("open")
        if self.transactional:
            self.p.commit_transaction(30)
        for s in done:
            s.state = "committed"

    def abort(self) -> None:
        done = self._flush("open")
        self.p.abort_transaction(30)
        for s in done:
            s.state = "aborted"

    def leave_open(self) -> None:
        """Write the records of the transaction but neither commit nor abort it (yet)."""
        self._open = self._flush("open")

    def commit_open(self) -> None:
        self.p.commit_transaction(30)
        for s in self._open:
            s.state = "committed"


def produce_mixed(bootstrap: str, topic: str, partitions: int, ledger: Ledger, *,
                  tag: str, n: int = 20) -> Producer:
    """Committed, aborted and non-transactional records in every partition, then a
    transaction left open (holding back the last stable offset) followed by a committed
    one above it. Returns the producer of the open transaction."""
    committer = Producer(bootstrap, ledger)
    aborter = Producer(bootstrap, ledger)
    plain = Producer(bootstrap, ledger, transactional=False)
    opener = Producer(bootstrap, ledger)
    for round_ in range(2):
        committer.begin()
        aborter.begin()
        for i in range(n):
            p = i % partitions
            committer.send(topic, p, b"%s-c%d-%d" % (tag.encode(), round_, i), key=b"k%d" % i,
                           headers=(("h", b"%d" % i),) if i % 3 == 0 else ())
            aborter.send(topic, p, b"%s-a%d-%d" % (tag.encode(), round_, i), key=None)
        committer.commit()
        aborter.abort()
        for p in range(partitions):
            plain.send(topic, p, b"%s-p%d-%d" % (tag.encode(), round_, p))
        plain.commit()
    opener.begin()
    for p in range(partitions):
        opener.send(topic, p, b"%s-open-%d" % (tag.encode(), p))
    opener.leave_open()
    committer.begin()
    for i in range(n):
        committer.send(topic, i % partitions, b"%s-late-%d" % (tag.encode(), i))
    committer.commit()  # committed, but above the open transaction: not readable yet
    return opener


def rows_of(df) -> list[tuple[int, int, bytes | None, bytes]]:
    """(partition, offset, key, value) of a Spark DataFrame of the Kafka schema, sorted."""
    return sorted((r.partition, r.offset, None if r.key is None else bytes(r.key),
                   bytes(r.value)) for r in df.select("partition", "offset", "key", "value")
                  .collect())
