"""One consumer-group member for the group tests, with any of the three Python clients.

The member subscribes, processes what it polls (a short sleep), then commits
the offsets after the processed records synchronously, and reports every step
as an event: ``assign``/``revoke`` (rebalance callbacks), ``deliver`` (records
handed to the application, reported *before* processing and before the commit
is sent), ``commit`` (offsets the broker acknowledged), ``commit_failed``,
``closing``/``closed``. Every event carries ``t = time.monotonic()``, one clock
for every process of the machine, so events of several members order in time.

In a thread (``Member``) events go into a shared in-memory list; as a process
(``python -m tests.integration.group_worker CONFIG_JSON EVENTS_FILE``) they are
appended, one JSON line per ``write``, to a file, so a test can SIGKILL the
process and still read everything it did up to the kill.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# kafka-python 3.0.12 drops the result of a rejoin that its leader starts because
# the metadata changed (it always does one right after its first join) when the
# JoinGroup + SyncGroup round trip outlasts the poll() timeout: the next poll()
# no longer sees a rejoin as needed and never applies the assignment (the member
# sits without partitions and stops heartbeating). A long poll timeout keeps a
# loaded machine from hitting that client bug; poll() still returns as soon as
# records arrive.
KAFKA_PYTHON_POLL_MS = 1000


@dataclass
class WorkerConfig:
    client: str  # "kafka-python" | "aiokafka" | "confluent"
    bootstrap: str
    topic: str
    group: str
    name: str
    session_timeout_ms: int = 6000
    heartbeat_interval_ms: int = 300
    max_poll_interval_ms: int = 15000
    max_records: int = 50
    process_delay: float = 0.01
    instance_id: str | None = None
    run_timeout: float = 120.0  # hard bound on the member's life


class Events:
    """Thread-safe event sink; with ``path``, also appended to a file (JSON lines)."""

    def __init__(self, path: str | None = None) -> None:
        self.items: list[dict] = []
        self._lock = threading.Lock()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if path else None

    def emit(self, member: str, kind: str, **data) -> None:
        data.update(member=member, kind=kind, t=time.monotonic())
        with self._lock:
            self.items.append(data)
            if self._fd is not None:
                os.write(self._fd, (json.dumps(data) + "\n").encode())

    def snapshot(self) -> list[dict]:
        with self._lock:
            return list(self.items)


def read_events(path: str) -> list[dict]:
    """Complete lines of an events file (a killed writer leaves no partial line
    in practice, but a torn last line is ignored anyway)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    out = []
    for line in data.split(b"\n")[:-1]:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


# --- the three clients ------------------------------------------------------------------


def _run_kafka_python(cfg: WorkerConfig, ev: Events, stop: threading.Event) -> None:
    import kafka.errors as kerr
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata

    name = cfg.name

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            ev.emit(name, "revoke", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, assigned):
            ev.emit(name, "assign", partitions=sorted(tp.partition for tp in assigned))

    extra = {"group_instance_id": cfg.instance_id} if cfg.instance_id else {}
    consumer = KafkaConsumer(
        bootstrap_servers=cfg.bootstrap, group_id=cfg.group, client_id=name,
        enable_auto_commit=False, auto_offset_reset="earliest",
        session_timeout_ms=cfg.session_timeout_ms,
        heartbeat_interval_ms=cfg.heartbeat_interval_ms,
        max_poll_interval_ms=cfg.max_poll_interval_ms, max_poll_records=cfg.max_records,
        fetch_max_wait_ms=100, **extra)
    deadline = time.monotonic() + cfg.run_timeout
    try:
        consumer.subscribe([cfg.topic], listener=Listener())
        while not stop.is_set() and time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=KAFKA_PYTHON_POLL_MS)
            records = [[m.partition, m.offset, m.value.decode()]
                       for msgs in batch.values() for m in msgs]
            if not records:
                continue
            ev.emit(name, "deliver", records=records)
            time.sleep(cfg.process_delay)
            offsets = {tp: OffsetAndMetadata(msgs[-1].offset + 1, "", -1)
                       for tp, msgs in batch.items()}
            try:
                consumer.commit(offsets)
            except kerr.KafkaError as e:
                ev.emit(name, "commit_failed", error=repr(e))
                continue
            ev.emit(name, "commit", offsets={tp.partition: om.offset for tp, om in offsets.items()})
    finally:
        ev.emit(name, "closing")
        consumer.close()
        ev.emit(name, "closed")


def _run_aiokafka(cfg: WorkerConfig, ev: Events, stop: threading.Event) -> None:
    import aiokafka.errors as aerr
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

    name = cfg.name

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            ev.emit(name, "revoke", partitions=sorted(tp.partition for tp in revoked))

        async def on_partitions_assigned(self, assigned):
            ev.emit(name, "assign", partitions=sorted(tp.partition for tp in assigned))

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=cfg.bootstrap, group_id=cfg.group, client_id=name,
            enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=cfg.session_timeout_ms,
            heartbeat_interval_ms=cfg.heartbeat_interval_ms,
            max_poll_interval_ms=cfg.max_poll_interval_ms,
            rebalance_timeout_ms=cfg.max_poll_interval_ms, fetch_max_wait_ms=100)
        await consumer.start()
        deadline = time.monotonic() + cfg.run_timeout
        try:
            consumer.subscribe([cfg.topic], listener=Listener())
            while not stop.is_set() and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=100, max_records=cfg.max_records)
                records = [[m.partition, m.offset, m.value.decode()]
                           for msgs in batch.values() for m in msgs]
                if not records:
                    continue
                ev.emit(name, "deliver", records=records)
                await asyncio.sleep(cfg.process_delay)
                offsets = {tp: msgs[-1].offset + 1 for tp, msgs in batch.items()}
                try:
                    await consumer.commit(offsets)
                except aerr.KafkaError as e:
                    ev.emit(name, "commit_failed", error=repr(e))
                    continue
                ev.emit(name, "commit", offsets={tp.partition: o for tp, o in offsets.items()})
        finally:
            ev.emit(name, "closing")
            await consumer.stop()
            ev.emit(name, "closed")

    asyncio.run(main())


def _run_confluent(cfg: WorkerConfig, ev: Events, stop: threading.Event) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    name = cfg.name
    conf = {
        "bootstrap.servers": cfg.bootstrap, "group.id": cfg.group, "client.id": name,
        "enable.auto.commit": False, "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest", "session.timeout.ms": cfg.session_timeout_ms,
        "heartbeat.interval.ms": cfg.heartbeat_interval_ms,
        "max.poll.interval.ms": cfg.max_poll_interval_ms, "fetch.wait.max.ms": 100,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    if cfg.instance_id:
        conf["group.instance.id"] = cfg.instance_id
    consumer = Consumer(conf)

    def on_assign(_c, partitions):
        ev.emit(name, "assign", partitions=sorted(p.partition for p in partitions))

    def on_revoke(_c, partitions):
        ev.emit(name, "revoke", partitions=sorted(p.partition for p in partitions))

    deadline = time.monotonic() + cfg.run_timeout
    try:
        consumer.subscribe([cfg.topic], on_assign=on_assign, on_revoke=on_revoke,
                           on_lost=on_revoke)
        while not stop.is_set() and time.monotonic() < deadline:
            msgs = consumer.consume(num_messages=cfg.max_records, timeout=0.1)
            good = []
            for m in msgs:
                err = m.error()
                if err is None:
                    good.append(m)
                elif err.code() != KafkaError._PARTITION_EOF:
                    ev.emit(name, "client_error", error=str(err))
            if not good:
                continue
            ev.emit(name, "deliver",
                    records=[[m.partition(), m.offset(), m.value().decode()] for m in good])
            time.sleep(cfg.process_delay)
            last: dict[int, int] = {}
            for m in good:
                last[m.partition()] = m.offset() + 1
            try:
                result = consumer.commit(
                    offsets=[TopicPartition(cfg.topic, p, o) for p, o in last.items()],
                    asynchronous=False)
            except KafkaException as e:
                ev.emit(name, "commit_failed", error=str(e))
                continue
            failed = [tp for tp in result if tp.error is not None]
            if failed:
                ev.emit(name, "commit_failed", error=str(failed))
                continue
            ev.emit(name, "commit", offsets=last)
    finally:
        ev.emit(name, "closing")
        consumer.close()
        ev.emit(name, "closed")


RUNNERS = {"kafka-python": _run_kafka_python, "aiokafka": _run_aiokafka,
           "confluent": _run_confluent}


def run(cfg: WorkerConfig, ev: Events, stop: threading.Event) -> None:
    try:
        RUNNERS[cfg.client](cfg, ev, stop)
    except BaseException as e:  # reported to the test, which fails on it
        ev.emit(cfg.name, "error", error=repr(e))
        raise


# --- handles the tests use ----------------------------------------------------------------


class Member:
    """A member in a thread of the test process."""

    def __init__(self, cfg: WorkerConfig, events: Events) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(events,), daemon=True,
                                       name=f"member-{cfg.name}")

    def _run(self, events: Events) -> None:
        try:
            run(self.cfg, events, self.stop_event)
        except BaseException:
            pass  # the "error" event carries it

    def start(self) -> Member:
        self.thread.start()
        return self

    def stop(self, timeout: float = 30) -> None:
        """Graceful close (LeaveGroup, except for static confluent members)."""
        self.stop_event.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"member {self.name} did not close in {timeout}s"


class MemberProcess:
    """A member in its own OS process, to be SIGKILLed."""

    def __init__(self, cfg: WorkerConfig, events_path: str) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.events_path = events_path
        self.proc: subprocess.Popen | None = None
        self.log_path = events_path + ".log"

    def start(self) -> MemberProcess:
        env = dict(os.environ)
        env.pop("PYTHONWARNINGS", None)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.group_worker",
                 json.dumps(asdict(self.cfg)), self.events_path],
                cwd=str(ROOT), env=env, stdout=log, stderr=subprocess.STDOUT)
        return self

    def events(self) -> list[dict]:
        return read_events(self.events_path)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    def output(self) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""


def main(argv: list[str]) -> int:
    cfg = WorkerConfig(**json.loads(argv[0]))
    ev = Events(argv[1])
    run(cfg, ev, threading.Event())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
