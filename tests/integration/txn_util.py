"""Helpers for the transaction tests: one transactional producer and one consumer
interface over kafka-python, aiokafka and confluent-kafka, reads that run to a
known end, and raw-wire transaction requests (kio messages over RawClient)."""

from __future__ import annotations

import asyncio
import datetime
import errno
import queue
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from txbroker.protocol.messages import build, request_module
from txbroker.protocol.records import Record, build_batch

from tests.helpers import RawClient

from .wire_util import PRODUCE, partition_response, produce_request

ROOT = Path(__file__).resolve().parents[2]

CLIENTS = ("kafka-python", "aiokafka", "confluent")

# Small internal topics, no rebalance delay, timed-out transactions found quickly.
TXN_CONFIG = {
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.min.session.timeout.ms": "1000",
}

TopicPartition = tuple[str, int]

# API keys
LIST_OFFSETS = 2
OFFSET_FETCH = 9
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
WRITE_TXN_MARKERS = 27
TXN_OFFSET_COMMIT = 28
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# --- transactional producers ------------------------------------------------------------------


class _LoopThread:
    """An event loop in a daemon thread, for driving aiokafka from synchronous tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class TxnProducer:
    """A transactional producer of one of the three clients behind one interface.

    ``send`` returns a handle; ``flush`` waits until every record sent so far is
    acknowledged (so an abort then has something to abort: librdkafka purges records
    it has not sent yet)."""

    def __init__(self, client: str, bootstrap: str, transactional_id: str, *,
                 timeout_ms: int = 60000, **config) -> None:
        self.client = client
        self.bootstrap = bootstrap
        self.transactional_id = transactional_id
        self._loop: _LoopThread | None = None
        self._pending: list = []
        if client == "kafka-python":
            from kafka import KafkaProducer

            conf = {"transactional_id": transactional_id, "transaction_timeout_ms": timeout_ms,
                    "reconnect_backoff_max_ms": 500, "max_block_ms": 30000}
            conf.update(config)
            self._p = KafkaProducer(bootstrap_servers=bootstrap, **conf)
        elif client == "aiokafka":
            from aiokafka import AIOKafkaProducer

            self._loop = _LoopThread()
            conf = {"transactional_id": transactional_id, "transaction_timeout_ms": timeout_ms}
            conf.update(config)

            async def make():
                return AIOKafkaProducer(bootstrap_servers=bootstrap, **conf)

            self._p = self._loop.run(make())
        elif client == "confluent":
            from confluent_kafka import Producer

            conf = {"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                    "transaction.timeout.ms": timeout_ms, "linger.ms": 5,
                    "reconnect.backoff.max.ms": 500}
            conf.update(config)
            self._p = Producer(conf)
        else:
            raise ValueError(client)

    def init(self) -> None:
        if self.client == "kafka-python":
            self._p.init_transactions()
        elif self.client == "aiokafka":
            self._loop.run(self._p.start())
        else:
            self._p.init_transactions(30)

    def begin(self) -> None:
        if self.client == "aiokafka":
            self._loop.run(self._p.begin_transaction())
        else:
            self._p.begin_transaction()

    def send(self, topic: str, value: bytes, *, key: bytes | None = None,
             partition: int | None = None) -> None:
        if self.client == "kafka-python":
            self._pending.append(self._p.send(topic, value=value, key=key, partition=partition))
        elif self.client == "aiokafka":
            self._pending.append(self._loop.run(
                self._p.send(topic, value=value, key=key, partition=partition)))
        else:
            errors = self._pending

            def report(err, _msg):
                if err is not None:
                    errors.append(err)

            kwargs = {"key": key, "value": value, "on_delivery": report}
            if partition is not None:
                kwargs["partition"] = partition
            self._p.produce(topic, **kwargs)

    def flush(self) -> None:
        if self.client == "kafka-python":
            self._p.flush(timeout=20)
            for f in self._pending:
                f.get(timeout=20)
        elif self.client == "aiokafka":
            futures = self._pending

            async def wait():
                await asyncio.gather(*futures)

            self._loop.run(wait())
        else:
            remaining = self._p.flush(20)
            assert remaining == 0, f"{remaining} records not delivered"
            if self._pending:
                raise AssertionError(f"delivery failed: {self._pending}")
        self._pending = []

    def send_offsets(self, offsets: Mapping[TopicPartition, int], group) -> None:
        """``group``: a group id, or the client's consumer group metadata."""
        if self.client == "kafka-python":
            from kafka import TopicPartition as KTP
            from kafka.structs import OffsetAndMetadata

            self._p.send_offsets_to_transaction(
                {KTP(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()}, group)
        elif self.client == "aiokafka":
            from aiokafka import TopicPartition as ATP

            self._loop.run(self._p.send_offsets_to_transaction(
                {ATP(t, p): o for (t, p), o in offsets.items()}, group))
        else:
            from confluent_kafka import TopicPartition as CTP

            if isinstance(group, str):
                from confluent_kafka import Consumer

                # A consumer_group_metadata of a group the producer's app does not join.
                c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group})
                group = c.consumer_group_metadata()
                c.close()
            self._p.send_offsets_to_transaction(
                [CTP(t, p, o) for (t, p), o in offsets.items()], group, 30)

    def commit(self) -> None:
        if self.client == "aiokafka":
            self._loop.run(self._p.commit_transaction())
        elif self.client == "confluent":
            self._p.commit_transaction(30)
        else:
            self._p.commit_transaction()
        self._pending = []

    def abort(self) -> None:
        if self.client == "aiokafka":
            self._loop.run(self._p.abort_transaction())
        elif self.client == "confluent":
            self._p.abort_transaction(30)
        else:
            self._p.abort_transaction()
        self._pending = []

    def close(self) -> None:
        try:
            if self.client == "kafka-python":
                self._p.close(timeout=2)
            elif self.client == "aiokafka":
                try:
                    self._loop.run(self._p.stop(), timeout=10)
                except Exception:  # a fenced aiokafka producer may fail to stop cleanly
                    pass
                self._loop.close()
            else:
                self._p.flush(0)
                self._p.close()
        except Exception:
            pass

    def __enter__(self) -> TxnProducer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def is_fenced(client: str, exc: BaseException) -> bool:
    """The client's fatal "fenced by a newer producer / epoch bump" error."""
    if client == "kafka-python":
        from kafka.errors import InvalidProducerEpochError, KafkaError, ProducerFencedError

        if isinstance(exc, (ProducerFencedError, InvalidProducerEpochError)):
            return True
        # Later calls: "Cannot execute transactional method because we are in an error
        # state: [Error 90] ProducerFencedError"
        return isinstance(exc, KafkaError) and "ProducerFenced" in str(exc)
    if client == "aiokafka":
        from aiokafka.errors import ProducerFenced

        return isinstance(exc, ProducerFenced)
    from confluent_kafka import KafkaError, KafkaException

    if not isinstance(exc, KafkaException):
        return False
    err = exc.args[0]
    return err.fatal() and err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                          KafkaError.INVALID_PRODUCER_EPOCH)


# What a client retries: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
# NOT_COORDINATOR, NOT_ENOUGH_REPLICAS, CONCURRENT_TRANSACTIONS.
RETRIABLE = frozenset({14, 15, 16, 19, 51})


def retry_retriable(call, timeout: float = 20):
    """``call()`` again while it fails with what a client retries (or cannot connect,
    while a restarted broker comes up); a tuple result's first item is its error code."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = call()
        except OSError:
            result = None
        code = result[0] if isinstance(result, tuple) else result
        if (code is not None and code not in RETRIABLE) or time.monotonic() > deadline:
            return result
        time.sleep(0.05)


def step_outcome(fn, timeout: float = 45) -> str:
    """What one client call did: "ok", the error's name, or "hung" (it neither returned
    nor failed within ``timeout``)."""
    result: list[str] = []

    def run() -> None:
        try:
            fn()
            result.append("ok")
        except BaseException as e:  # recorded: the outcome is what the test compares
            result.append(error_name(e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    return result[0] if result else "hung"


def transactions_in_rounds(producer: TxnProducer, topic: str, outcome: dict[str, str],
                           rounds: int = 3) -> None:
    """The application goes on after a failed transaction: ``rounds`` transactions of
    one record to partition 0, each failed one aborted; their outcomes into ``outcome``
    ("round i", "abort i")."""
    def one() -> None:
        producer.begin()
        producer.send(topic, b"next", partition=0)
        producer.flush()
        producer.commit()

    for i in range(rounds):
        outcome[f"round {i}"] = step_outcome(one)
        if outcome[f"round {i}"] != "ok":
            outcome[f"abort {i}"] = step_outcome(producer.abort)


def error_name(e: BaseException) -> str:
    from confluent_kafka import KafkaException

    # confluent-kafka's produce() on a fenced instance raises SystemError whose cause is
    # the KafkaException; name that.
    while not isinstance(e, KafkaException) and isinstance(e.__cause__ or e.__context__,
                                                           BaseException):
        e = e.__cause__ or e.__context__
    if isinstance(e, KafkaException):
        err = e.args[0]
        return f"{err.name()}{' (fatal)' if err.fatal() else ''}"
    return type(e).__name__


# --- consume-transform-produce workers (txn_worker.py) ------------------------------------


class Worker:
    """A txn_worker process; its output lines are collected by a thread."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.txn_worker", *args], cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is not None and line.startswith(prefix):
                return line
            if line is None:
                raise AssertionError(f"worker never printed {prefix!r} (exit "
                                     f"{self.proc.poll()}):\n" + "\n".join(self.lines[-60:]))

    def committed_records(self) -> int:
        return sum(int(line.split()[2]) for line in self.lines if line.startswith("COMMITTED"))

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


# --- consumers -----------------------------------------------------------------------------


class Reader:
    """An assigned (group-less) consumer of one client, read_committed by default."""

    def __init__(self, client: str, bootstrap: str, partitions: Sequence[TopicPartition], *,
                 read_committed: bool = True, start: int = 0) -> None:
        self.client = client
        self.partitions = list(partitions)
        self.start = start
        self._loop: _LoopThread | None = None
        level = "read_committed" if read_committed else "read_uncommitted"
        if client == "kafka-python":
            from kafka import KafkaConsumer
            from kafka import TopicPartition as KTP

            self._c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest", fetch_max_wait_ms=100,
                                    isolation_level=level)
            self._tps = [KTP(t, p) for t, p in self.partitions]
            self._c.assign(self._tps)
            for tp in self._tps:
                self._c.seek(tp, start)
        elif client == "aiokafka":
            from aiokafka import AIOKafkaConsumer
            from aiokafka import TopicPartition as ATP

            self._loop = _LoopThread()
            self._tps = [ATP(t, p) for t, p in self.partitions]

            async def make():
                c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                     auto_offset_reset="earliest", fetch_max_wait_ms=100,
                                     isolation_level=level)
                await c.start()
                c.assign(self._tps)
                for tp in self._tps:
                    c.seek(tp, start)
                return c

            self._c = self._loop.run(make())
        elif client == "confluent":
            from confluent_kafka import Consumer
            from confluent_kafka import TopicPartition as CTP

            self._c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("unused"),
                                "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                "fetch.wait.max.ms": 100, "isolation.level": level})
            self._c.assign([CTP(t, p, start) for t, p in self.partitions])
        else:
            raise ValueError(client)

    def poll(self, timeout: float = 0.2) -> list[TRec]:
        out: list[TRec] = []
        if self.client == "kafka-python":
            for batch in self._c.poll(timeout_ms=int(timeout * 1000)).values():
                out.extend(TRec(m.topic, m.partition, m.offset, m.key, m.value)
                           for m in batch)
        elif self.client == "aiokafka":
            got = self._loop.run(self._c.getmany(timeout_ms=int(timeout * 1000)))
            for batch in got.values():
                out.extend(TRec(m.topic, m.partition, m.offset, m.key, m.value)
                           for m in batch)
        else:
            for m in self._c.consume(num_messages=1000, timeout=timeout):
                if m.error():
                    raise AssertionError(f"confluent consumer error: {m.error()}")
                out.append(TRec(m.topic(), m.partition(), m.offset(), m.key(), m.value()))
        return out

    def positions(self) -> dict[TopicPartition, int]:
        if self.client == "kafka-python":
            return {(tp.topic, tp.partition): self._c.position(tp) for tp in self._tps}
        if self.client == "aiokafka":
            async def pos():
                return {(tp.topic, tp.partition): await self._c.position(tp) for tp in self._tps}

            return self._loop.run(pos())
        from confluent_kafka import TopicPartition as CTP

        # librdkafka reports OFFSET_INVALID (-1001) until something has been consumed.
        return {(tp.topic, tp.partition): tp.offset if tp.offset >= 0 else self.start
                for tp in self._c.position([CTP(t, p) for t, p in self.partitions])}

    def read_until(self, ends: Mapping[TopicPartition, int], timeout: float = 15) -> list[TRec]:
        """Poll until every partition's position reached ``ends`` (the log end: a
        read_committed consumer moves past aborted records and markers too)."""
        got: list[TRec] = []
        deadline = time.monotonic() + timeout
        while True:
            got.extend(self.poll(0.2))
            pos = self.positions()
            if all(end <= 0 or pos[tp] >= end for tp, end in ends.items()):
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.client} reader stuck at {pos}, wanted {dict(ends)};"
                                     f" got {len(got)} record(s)")

    def close(self) -> None:
        try:
            if self.client == "aiokafka":
                self._loop.run(self._c.stop(), timeout=10)
                self._loop.close()
            else:
                self._c.close()
        except Exception:
            pass

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class TRec:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def values_by_partition(recs: Iterable[TRec]) -> dict[TopicPartition, list[bytes]]:
    """Values per (topic, partition) in offset order."""
    out: dict[TopicPartition, list[tuple[int, bytes]]] = {}
    for r in recs:
        out.setdefault((r.topic, r.partition), []).append((r.offset, r.value))
    return {tp: [v for _o, v in sorted(items)] for tp, items in sorted(out.items())}


def read_all(client: str, bootstrap: str, ends: Mapping[TopicPartition, int], *,
             read_committed: bool = True, timeout: float = 15) -> dict[TopicPartition, list]:
    """Everything a fresh consumer reads up to ``ends``, as values per partition."""
    with Reader(client, bootstrap, list(ends), read_committed=read_committed) as r:
        return values_by_partition(r.read_until(ends, timeout))


def log_ends(txbroker, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    return txbroker.call(lambda b: {tp: b.logs.get_log(*tp).log_end_offset for tp in partitions})


def stable_ends(txbroker, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
    """Last stable offsets: how far a read_committed reader gets."""
    return txbroker.call(lambda b: {tp: b.logs.get_log(*tp).last_stable_offset
                                    for tp in partitions})


# --- raw wire --------------------------------------------------------------------------------


def _ms(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


class RawTxn:
    """Transaction requests on the raw wire for one transactional id (InitProducerId v4,
    AddPartitionsToTxn v3, AddOffsetsToTxn v3, TxnOffsetCommit v3, EndTxn v3)."""

    def __init__(self, client: RawClient, transactional_id: str | None,
                 timeout_ms: int = 60000) -> None:
        self.client = client
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.producer_id = -1
        self.epoch = -1
        self.sequences: dict[TopicPartition, int] = {}

    def init(self, *, timeout_ms: int | None = None, kip360: bool = False,
             version: int = 4, expect_ok: bool = True):
        m = request_module(INIT_PRODUCER_ID, version)
        fields = {"transactional_id": self.transactional_id,
                  "transaction_timeout": _ms(self.timeout_ms if timeout_ms is None
                                             else timeout_ms)}
        if version >= 3:
            fields.update(producer_id=self.producer_id if kip360 else -1,
                          producer_epoch=self.epoch if kip360 else -1)
        deadline = time.monotonic() + 15
        while True:
            r = self.client.request(INIT_PRODUCER_ID, version,
                                    build(m.InitProducerIdRequest, **fields))
            if not expect_ok or r.error_code != 51 or time.monotonic() > deadline:
                break
            time.sleep(0.05)  # CONCURRENT_TRANSACTIONS: a previous transaction ends first
        if r.error_code == 0:
            self.producer_id, self.epoch = r.producer_id, r.producer_epoch
            self.sequences.clear()
        return r

    def add_partitions(self, partitions: Sequence[TopicPartition], version: int = 3
                       ) -> dict[TopicPartition, int]:
        m = request_module(ADD_PARTITIONS_TO_TXN, version)
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        r = self.client.request(ADD_PARTITIONS_TO_TXN, version, build(
            m.AddPartitionsToTxnRequest, v3_and_below_transactional_id=self.transactional_id,
            v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.epoch,
            v3_and_below_topics=tuple(build(m.AddPartitionsToTxnTopic, name=t,
                                            partitions=tuple(ps))
                                      for t, ps in by_topic.items()),
            transactions=()))
        return {(t.name, p.partition_index): int(p.partition_error_code)
                for t in r.results_by_topic_v3_and_below for p in t.results_by_partition}

    def add_offsets(self, group_id: str, version: int = 3) -> int:
        m = request_module(ADD_OFFSETS_TO_TXN, version)
        r = self.client.request(ADD_OFFSETS_TO_TXN, version, build(
            m.AddOffsetsToTxnRequest, transactional_id=self.transactional_id,
            producer_id=self.producer_id, producer_epoch=self.epoch, group_id=group_id))
        return int(r.error_code)

    def txn_offset_commit(self, group_id: str, offsets: Mapping[TopicPartition, int],
                          version: int = 3) -> dict[TopicPartition, int]:
        m = request_module(TXN_OFFSET_COMMIT, version)
        by_topic: dict[str, list] = {}
        for (t, p), o in offsets.items():
            by_topic.setdefault(t, []).append(build(
                m.TxnOffsetCommitRequestPartition, partition_index=p, committed_offset=o,
                committed_leader_epoch=-1, committed_metadata=""))
        r = self.client.request(TXN_OFFSET_COMMIT, version, build(
            m.TxnOffsetCommitRequest, transactional_id=self.transactional_id, group_id=group_id,
            producer_id=self.producer_id, producer_epoch=self.epoch, generation_id=-1,
            member_id="", group_instance_id=None,
            topics=tuple(build(m.TxnOffsetCommitRequestTopic, name=t, partitions=tuple(ps))
                         for t, ps in by_topic.items())))
        return {(t.name, p.partition_index): int(p.error_code)
                for t in r.topics for p in t.partitions}

    def end(self, commit: bool, version: int = 3) -> int:
        m = request_module(END_TXN, version)
        r = self.client.request(END_TXN, version, build(
            m.EndTxnRequest, transactional_id=self.transactional_id,
            producer_id=self.producer_id, producer_epoch=self.epoch, committed=commit))
        assert r is not None, "the broker closed the connection instead of answering EndTxn"
        if version >= 5 and r.error_code == 0:
            # Transactions v2: carry on with the id/epoch the answer gives (bumped), and
            # sequences from 0, as a v2 producer does.
            self.producer_id, self.epoch = r.producer_id, r.producer_epoch
            self.sequences.clear()
        return int(r.error_code)

    def batch(self, tp: TopicPartition, values: Sequence[bytes], *, sequence: int | None = None,
              transactional: bool = True, timestamp: int | None = None) -> bytes:
        """A batch of this producer for ``tp``; the sequence advances unless given. Its
        records' timestamp is now unless given (ms since the epoch)."""
        seq = self.sequences.get(tp, 0) if sequence is None else sequence
        if sequence is None:
            self.sequences[tp] = seq + len(values)
        ts = int(time.time() * 1000) if timestamp is None else timestamp
        return build_batch([Record(None, v, timestamp=ts) for v in values],
                           producer_id=self.producer_id, producer_epoch=self.epoch,
                           base_sequence=seq, transactional=transactional)

    def produce(self, tp: TopicPartition, batch: bytes, *, transactional_id: str | None = "",
                version: int = 9) -> tuple[int, int]:
        """(error code, base offset); ``transactional_id=""`` means this one's."""
        tid = self.transactional_id if transactional_id == "" else transactional_id
        r = self.client.request(PRODUCE, version, produce_request(
            {tp[0]: {tp[1]: batch}}, transactional_id=tid, version=version))
        p = partition_response(r, *tp)
        return int(p.error_code), p.base_offset


def list_offsets(client: RawClient, tp: TopicPartition, *, read_committed: bool,
                 timestamp: int = -1, version: int = 5) -> int:
    m = request_module(LIST_OFFSETS, version)
    r = client.request(LIST_OFFSETS, version, build(
        m.ListOffsetsRequest, replica_id=-1, isolation_level=1 if read_committed else 0,
        topics=(build(m.ListOffsetsTopic, name=tp[0], partitions=(
            build(m.ListOffsetsPartition, partition_index=tp[1], current_leader_epoch=-1,
                  timestamp=timestamp, max_num_offsets=1),)),)))
    [t] = r.topics
    [p] = t.partitions
    assert p.error_code == 0, p
    return p.offset


def offset_fetch(client: RawClient, group_id: str, partitions: Sequence[TopicPartition], *,
                 require_stable: bool = True, version: int = 7
                 ) -> dict[TopicPartition, tuple[int, int]]:
    """{(topic, partition): (error code, committed offset)} from OffsetFetch v7."""
    m = request_module(OFFSET_FETCH, version)
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    r = client.request(OFFSET_FETCH, version, build(
        m.OffsetFetchRequest, group_id=group_id, require_stable=require_stable,
        topics=tuple(build(m.OffsetFetchRequestTopic, name=t, partition_indexes=tuple(ps))
                     for t, ps in by_topic.items())))
    assert r.error_code == 0, r
    return {(t.name, p.partition_index): (int(p.error_code), p.committed_offset)
            for t in r.topics for p in t.partitions}


def describe_transactions(client: RawClient, *tids: str):
    m = request_module(DESCRIBE_TRANSACTIONS, 0)
    r = client.request(DESCRIBE_TRANSACTIONS, 0, build(
        m.DescribeTransactionsRequest, transactional_ids=tuple(tids)))
    return {s.transactional_id: s for s in r.transaction_states}


def describe_transaction(host: str, port: int, tid: str):
    """One DescribeTransactions answer decoded by the command line's own reader (kio
    cannot read the start time -1 of an id without an ongoing transaction)."""
    from txbroker.tools.admin_client import AdminConnection
    from txbroker.tools.transactions import _describe_transactions

    conn = AdminConnection(f"{host}:{port}", timeout=5)
    try:
        [state] = _describe_transactions(conn, (tid,))
        return state
    finally:
        conn.close()


def list_transactions(client: RawClient, states: Sequence[str] = (),
                      producer_ids: Sequence[int] = (), duration_ms: int = -1, version: int = 1):
    m = request_module(LIST_TRANSACTIONS, version)
    fields = {"state_filters": tuple(states), "producer_id_filters": tuple(producer_ids)}
    if version >= 1:
        fields["duration_filter"] = duration_ms
    return client.request(LIST_TRANSACTIONS, version, build(m.ListTransactionsRequest, **fields))


def describe_producers(client: RawClient, tp: TopicPartition):
    m = request_module(DESCRIBE_PRODUCERS, 0)
    r = client.request(DESCRIBE_PRODUCERS, 0, build(
        m.DescribeProducersRequest, topics=(build(m.TopicRequest, name=tp[0],
                                                  partition_indexes=(tp[1],)),)))
    [t] = r.topics
    [p] = t.partitions
    return p


def write_txn_marker(client: RawClient, tp: TopicPartition, producer_id: int,
                     producer_epoch: int, *, commit: bool, coordinator_epoch: int) -> int:
    """WriteTxnMarkers v1 for one partition (what Admin.abortTransaction sends); its
    error code."""
    m = request_module(WRITE_TXN_MARKERS, 1)
    r = client.request(WRITE_TXN_MARKERS, 1, build(m.WriteTxnMarkersRequest, markers=(build(
        m.WritableTxnMarker, producer_id=producer_id, producer_epoch=producer_epoch,
        transaction_result=commit, coordinator_epoch=coordinator_epoch,
        topics=(build(m.WritableTxnMarkerTopic, name=tp[0], partition_indexes=(tp[1],)),)),)))
    return int(r.markers[0].topics[0].partitions[0].error_code)


def wait_state(txbroker, transactional_id: str, states: Iterable[str], timeout: float = 10):
    """Wait until the coordinator (in-process broker) holds the id in one of ``states``
    with nothing pending; its inspect() dict."""
    wanted = set(states)
    deadline = time.monotonic() + timeout
    while True:
        info = txbroker.call(lambda b: b.transactions.state.inspect(transactional_id))
        if info is not None and info["state"] in wanted and info["pending_state"] is None:
            return info
        if time.monotonic() > deadline:
            raise AssertionError(f"{transactional_id}: {info}, wanted one of {wanted}")
        time.sleep(0.05)


def fail_appends(txbroker, topic: str, partition: int, times: int, *, control: bool):
    """Make the next ``times`` appends of control batches (``control``) or of any batch
    to a partition log raise OSError(ENOSPC), as a full disk would; a dict whose
    "left" counts the failures still to come."""
    state = {"left": times}

    def install(b):
        plog = b.logs.get_log(topic, partition)
        original = plog.append

        def append(batch, header, **kw):
            if state["left"] > 0 and (header.is_control or not control):
                state["left"] -= 1
                raise OSError(errno.ENOSPC, "No space left on device")
            return original(batch, header, **kw)

        plog.append = append

    txbroker.call(install)
    return state
