"""The soak's load: real clients in threads, each at a fixed, moderate rate.

Every worker loops until stopped; an exception is counted and kept (the last few), the
worker waits two seconds and starts over with fresh clients, so one failure is a
finding in the report, not the end of the soak. Counters are plain ints written by the
worker's own thread only (the sampler reads them).
"""

from __future__ import annotations

import itertools
import threading
import time
import urllib.request
from collections import deque
from typing import Any

KEYS = ("produced", "consumed", "txns", "committed", "aborted", "violations", "joins",
        "leaves", "topics_created", "topics_deleted", "admin_calls", "http_requests",
        "http_failures", "client_errors")
PAD = b"x" * 180  # ~200-byte values


class Worker:
    name = "worker"

    def __init__(self) -> None:
        self.counts = dict.fromkeys(KEYS, 0)
        self.errors = 0
        self.last_errors: deque[str] = deque(maxlen=5)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def start(self) -> Worker:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _run(self) -> None:
        while not self.stopping:
            try:
                self.loop()
            except Exception as e:  # noqa: BLE001 - a finding, reported
                self.errors += 1
                self.last_errors.append(f"{time.strftime('%H:%M:%S')} {e!r}"[:300])
                self._stop.wait(2)

    def loop(self) -> None:  # runs until stopped (or a client is recycled)
        raise NotImplementedError

    def pace(self, next_at: float, interval: float) -> float:
        """Sleep until ``next_at`` (or the stop); the next deadline (no burst to catch up
        when behind)."""
        self._stop.wait(max(0.0, next_at - time.monotonic()))
        return max(next_at + interval, time.monotonic())

    def client_error(self, what: Any) -> None:
        self.counts["client_errors"] += 1
        self.last_errors.append(f"{time.strftime('%H:%M:%S')} {what}"[:300])

    def report(self) -> dict[str, Any]:
        return {"worker": self.name, **{k: v for k, v in self.counts.items() if v},
                "exceptions": self.errors, "last_errors": list(self.last_errors)}


class TransactionalProducer(Worker):
    """Transactions of ``records`` records; every ``abort_every``-th is aborted. Aborted
    values start with ``A``, committed ones with ``C``. A new producer instance (same
    transactional.id: InitProducerId fences the old epoch) every ``recycle_s``."""
    name = "txn-producer"

    def __init__(self, bootstrap: str, topic: str, txn_per_s: float, records: int = 10,
                 abort_every: int = 4, recycle_s: float = 120, index: int = 0) -> None:
        self.name = f"txn-producer-{index}"
        super().__init__()
        self.bootstrap, self.topic, self.records = bootstrap, topic, records
        self.interval, self.abort_every, self.recycle_s = 1 / txn_per_s, abort_every, recycle_s
        self.seq = 0

    def loop(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.name,
                             "linger.ms": 5, "log_level": 3})
        producer.init_transactions(30)
        born = time.monotonic()
        next_at = born + self.interval
        while not self.stopping and time.monotonic() - born < self.recycle_s:
            self.seq += 1
            abort = self.seq % self.abort_every == 0
            producer.begin_transaction()
            prefix = b"A:" if abort else b"C:"
            for i in range(self.records):
                producer.produce(self.topic, prefix + f"{self.name}:{self.seq}:{i}:".encode() + PAD,
                                 key=str(i).encode())
            if abort:
                producer.abort_transaction(30)
                self.counts["aborted"] += 1
            else:
                producer.commit_transaction(30)
                self.counts["committed"] += 1
                self.counts["produced"] += self.records
            self.counts["txns"] += 1
            next_at = self.pace(next_at, self.interval)


class IdempotentProducer(Worker):
    """acks=all, enable.idempotence, ``rate`` records/s in tenths of a second; a new
    producer every ``recycle_s``."""
    name = "idempotent-producer"

    def __init__(self, bootstrap: str, topic: str, rate: float, recycle_s: float = 180) -> None:
        super().__init__()
        self.bootstrap, self.topic, self.rate, self.recycle_s = bootstrap, topic, rate, recycle_s

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.counts["produced"] += 1
        else:
            self.client_error(f"delivery: {err}")

    def loop(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                             "acks": "all", "linger.ms": 20, "log_level": 3})
        per_tick, n = max(1, round(self.rate / 10)), 0
        born = time.monotonic()
        next_at = born + 0.1
        try:
            while not self.stopping and time.monotonic() - born < self.recycle_s:
                for _ in range(per_tick):
                    n += 1
                    producer.produce(self.topic, f"{n}:".encode() + PAD, key=str(n % 64).encode(),
                                     on_delivery=self._delivered)
                producer.poll(0)
                next_at = self.pace(next_at, 0.1)
        finally:
            producer.flush(30)


class ReadCommittedConsumer(Worker):
    """confluent-kafka, isolation.level=read_committed, in a group: any value starting
    with ``A`` (from an aborted transaction) is a violation."""
    name = "rc-confluent"

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__()
        self.bootstrap, self.topic = bootstrap, topic

    def check(self, value: bytes | None) -> None:
        self.counts["consumed"] += 1
        if value is None or not value.startswith(b"C:"):
            self.counts["violations"] += 1
            self.client_error(f"read_committed saw {value[:20] if value else value!r}")

    def loop(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "soak-rc-confluent",
                             "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                             "log_level": 3})
        consumer.subscribe([self.topic])
        try:
            while not self.stopping:
                for m in consumer.consume(500, 0.5):
                    if m.error() is not None:
                        self.client_error(m.error())
                    else:
                        self.check(m.value())
        finally:
            consumer.close()


class KafkaPythonReadCommitted(ReadCommittedConsumer):
    """The same check with kafka-python (its own group, classic protocol)."""
    name = "rc-kafka-python"

    def loop(self) -> None:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(self.topic, bootstrap_servers=self.bootstrap,
                                 group_id="soak-rc-kafka-python", isolation_level="read_committed",
                                 auto_offset_reset="earliest")
        try:
            while not self.stopping:
                for records in consumer.poll(timeout_ms=500, max_records=500).values():
                    for r in records:
                        self.check(r.value)
        finally:
            consumer.close()


class ChurnGroup(Worker):
    """A consumer group of ``members`` confluent-kafka consumers with ``group.protocol``
    classic or consumer (KIP-848); every ``period_s / 2`` a member joins, then the
    oldest leaves (close: LeaveGroup, or a leaving heartbeat), so the group rebalances
    all the time. One thread polls every member in turn."""

    def __init__(self, bootstrap: str, topic: str, protocol: str, members: int = 3,
                 period_s: float = 20) -> None:
        self.name = f"group-{protocol}"
        super().__init__()
        self.bootstrap, self.topic, self.protocol = bootstrap, topic, protocol
        self.size, self.period_s = members, period_s
        self.ids = itertools.count()

    def _member(self) -> Any:
        from confluent_kafka import Consumer

        conf = {"bootstrap.servers": self.bootstrap, "group.id": f"soak-{self.protocol}",
                "group.protocol": self.protocol, "client.id": f"{self.name}-{next(self.ids)}",
                "auto.offset.reset": "latest", "log_level": 3}
        if self.protocol == "classic":
            conf["heartbeat.interval.ms"] = 1000
        c = Consumer(conf)
        c.subscribe([self.topic])
        self.counts["joins"] += 1
        return c

    def loop(self) -> None:
        members = [self._member() for _ in range(self.size)]
        next_change, grow = time.monotonic() + self.period_s / 2, True
        try:
            while not self.stopping:
                for c in members:
                    for m in c.consume(200, 0.05):
                        if m.error() is None:
                            self.counts["consumed"] += 1
                        else:
                            self.client_error(m.error())
                if time.monotonic() >= next_change:
                    if grow:
                        members.append(self._member())
                    else:
                        members.pop(0).close()
                        self.counts["leaves"] += 1
                    grow, next_change = not grow, time.monotonic() + self.period_s / 2
        finally:
            for c in members:
                c.close()


class TopicChurn(Worker):
    """Every ``period_s``: create a topic, produce to it, list and describe the groups
    (AdminClient), delete the topic."""
    name = "topic-churn"

    def __init__(self, bootstrap: str, period_s: float = 10, partitions: int = 2) -> None:
        super().__init__()
        self.bootstrap, self.period_s, self.partitions = bootstrap, period_s, partitions
        self.n = 0

    def loop(self) -> None:
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        next_at = time.monotonic() + self.period_s
        while not self.stopping:
            self.n += 1
            topic = f"soak-tmp-{self.n}"
            admin.create_topics([NewTopic(topic, self.partitions, 1)])[topic].result(30)
            self.counts["topics_created"] += 1
            producer = Producer({"bootstrap.servers": self.bootstrap, "log_level": 3})
            for i in range(20):
                producer.produce(topic, PAD, key=str(i).encode())
            if producer.flush(30):
                self.client_error(f"{topic}: records not delivered in 30 s")
            del producer
            groups = admin.list_consumer_groups(request_timeout=10).result(10)
            ids = [g.group_id for g in groups.valid if g.group_id.startswith("soak-")]
            for future in admin.describe_consumer_groups(ids, request_timeout=10).values():
                future.result(10)
            self.counts["admin_calls"] += 2
            admin.delete_topics([topic])[topic].result(30)
            self.counts["topics_deleted"] += 1
            next_at = self.pace(next_at, self.period_s)


class ConsolePoller(Worker):
    """The admin endpoint as a person with the console open would poll it: one page a
    second, round the console's pages, /health and /topics."""
    name = "console-poll"
    PAGES = ("/console/api/rates", "/", "/health", "/console/topics", "/console/groups",
             "/console/transactions", "/topics", "/console/topics/soak-txn")

    def __init__(self, admin_url: str, period_s: float = 1.0) -> None:
        super().__init__()
        self.admin_url, self.period_s = admin_url, period_s

    def loop(self) -> None:
        next_at = time.monotonic() + self.period_s
        for page in itertools.cycle(self.PAGES):
            if self.stopping:
                return
            self.counts["http_requests"] += 1
            try:
                with urllib.request.urlopen(self.admin_url + page, timeout=10) as resp:
                    resp.read()
            except OSError as e:  # HTTPError included: a non-2xx answer
                self.counts["http_failures"] += 1
                self.client_error(f"GET {page}: {e!r}")
            next_at = self.pace(next_at, self.period_s)


# ---------------------------------------------------------------------------------------
# SHARE GROUPS (KIP-932) — NOT YET: the broker has no share groups (no ShareGroupHeartbeat,
# ShareFetch or ShareAcknowledge handler). When it does, add a worker here: two or three
# confluent_kafka.ShareConsumer members of a share group "soak-share" on the idempotent
# topic, joining and leaving like ChurnGroup, acknowledging (and now and then releasing
# or rejecting) what they get and counting it under "consumed"; then list it in
# share_group_workers() and remove the "not run" line from the report.
# ---------------------------------------------------------------------------------------
def share_group_workers(_bootstrap: str, _topic: str) -> list[Worker]:
    return []


def totals(workers: list[Worker]) -> dict[str, int]:
    """The load's counters summed over the workers (what a sample records)."""
    out = dict.fromkeys(("produced", "consumed", "txns", "violations", "client_errors"), 0)
    for w in workers:
        for key in out:
            out[key] += w.counts[key]
        out["client_errors"] += w.errors
    return out
