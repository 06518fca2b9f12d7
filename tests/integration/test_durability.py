"""The broker as a real OS process: SIGKILL never loses an acknowledged
(acks=all) record, SIGTERM shuts down cleanly, data survives restarts, and
segment roll + retention work end to end."""

from __future__ import annotations

import os
import threading
import time

import kafka.errors as kerr
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTP
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.helpers import BrokerProcess, wait_until

from .clients import Msg, consume, produce

pytestmark = pytest.mark.slow


def _create_topic(bootstrap: str, name: str, partitions: int = 1, config=None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])
    futures[name].result(15)


def _watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "durability-tests"})
    try:
        return c.get_watermark_offsets(CTP(topic, partition), timeout=10, cached=False)
    finally:
        c.close()


def _values(records) -> list[bytes]:
    return [r.value for r in records]


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_sigkill_after_acks_loses_nothing(broker_process, topic, client):
    """Every record acknowledged with acks=all is there after SIGKILL + restart,
    exactly once and in order."""
    _create_topic(broker_process.bootstrap, topic, 2)
    n = 150
    msgs = [Msg(b"key-%d" % (i % 7), b"record-%05d" % i) for i in range(n)]
    if client == "confluent":
        placed = produce("confluent", broker_process.bootstrap, topic, msgs,
                         **{"acks": "all", "partitioner": "murmur2_random"})
    else:
        placed = produce("kafka-python", broker_process.bootstrap, topic, msgs, acks="all")
    assert len(placed) == n and all(o is not None and o >= 0 for _p, o in placed)

    broker_process.kill()
    assert broker_process.proc.returncode == -9
    broker_process.start()
    assert "(unclean shutdown)" in broker_process.log_text()

    got = consume("confluent", broker_process.bootstrap, topic, [0, 1], n)
    assert len(got) == n
    assert sorted((r.partition, r.offset) for r in got) == sorted(placed)
    by_partition: dict[int, list[bytes]] = {}
    for m, (p, _o) in zip(msgs, placed, strict=True):
        by_partition.setdefault(p, []).append(m.value)
    for p, values in by_partition.items():
        assert [r.value for r in got if r.partition == p] == values
    # The restarted broker keeps appending after the recovered data.
    after = produce("kafka-python", broker_process.bootstrap, topic,
                    [Msg(None, b"after-restart", partition=0)])
    assert after == [(0, len(by_partition.get(0, [])))]


def test_sigkill_during_idempotent_produce(broker_process, topic):
    """SIGKILL while an idempotent librdkafka producer is mid-stream; the broker
    comes back on the same port and the producer's retries complete. Every
    acknowledged record is stored exactly once, in order (no duplicates from
    retried batches: the producer state was recovered)."""
    _create_topic(broker_process.bootstrap, topic, 1)
    n = 600
    producer = Producer({"bootstrap.servers": broker_process.bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 2,
                         "batch.num.messages": 20, "message.timeout.ms": 30000,
                         "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200,
                         "retry.backoff.ms": 50})
    acked: list[int] = []
    failed: list[tuple[int, str]] = []

    def report(err, msg):
        i = int(msg.value().split(b"-")[1])
        if err is None:
            acked.append(i)
        else:
            failed.append((i, str(err)))

    killed = threading.Event()

    def run():
        for i in range(n):
            if i == n // 2:
                # Park mid-stream (still serving delivery reports) until the kill.
                while not killed.wait(0.02):
                    producer.poll(0)
            producer.produce(topic, value=b"rec-%05d" % i, on_delivery=report)
            producer.poll(0)
            time.sleep(0.001)
        producer.flush(45)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert wait_until(lambda: len(acked) >= n // 4, timeout=20)
        broker_process.kill()
        killed_after = len(acked)
        killed.set()  # the second half is produced while the broker is down
        time.sleep(0.3)
        broker_process.start()
    finally:
        killed.set()
        thread.join(60)
    assert not thread.is_alive()
    assert killed_after <= n // 2
    assert failed == []
    assert sorted(acked) == list(range(n))

    got = consume("confluent", broker_process.bootstrap, topic, [0], n)
    values = _values(got)
    assert values == [b"rec-%05d" % i for i in range(n)]  # each once, in order
    assert [r.offset for r in got] == list(range(n))
    assert _watermarks(broker_process.bootstrap, topic) == (0, n)


def test_sigterm_is_clean_and_restart_keeps_data(broker_process, topic):
    _create_topic(broker_process.bootstrap, topic, 1)
    msgs = [Msg(b"k%d" % i, b"v%d" % i, (("h", b"%d" % i),)) for i in range(40)]
    produce("kafka-python", broker_process.bootstrap, topic, msgs, acks="all")

    assert broker_process.terminate() == 0
    log = broker_process.log_text()
    assert "shutting down" in log and "shutdown complete" in log
    assert "Traceback" not in log
    assert os.path.exists(os.path.join(broker_process.data_dir, ".txbroker_cleanshutdown"))

    broker_process.start()
    assert "(clean shutdown)" in broker_process.log_text()
    got = consume("kcat", broker_process.bootstrap, topic, [0], 40)
    assert [(r.offset, r.key, r.value, r.headers) for r in got] == [
        (i, m.key, m.value, m.headers) for i, m in enumerate(msgs)]
    assert produce("confluent", broker_process.bootstrap, topic, [Msg(None, b"more")]) == [(0, 40)]

    # A second clean cycle, then SIGKILL: still everything.
    assert broker_process.terminate() == 0
    broker_process.start()
    broker_process.kill()
    broker_process.start()
    assert len(consume("confluent", broker_process.bootstrap, topic, [0], 41)) == 41


def test_segment_roll_and_retention_end_to_end(tmp_path, topic):
    proc = BrokerProcess(str(tmp_path / "data"), {"log.retention.check.interval.ms": "200"})
    proc.start()
    try:
        _create_topic(proc.bootstrap, topic, 1, {"segment.bytes": "2048",
                                                 "retention.bytes": "4096"})
        part_dir = os.path.join(proc.data_dir, f"{topic}-0")
        n = 60
        values = [b"r%03d-" % i + b"." * 300 for i in range(n)]
        # One batch per record: each ~380 bytes, so a segment holds about five.
        for v in values:
            produce("confluent", proc.bootstrap, topic, [Msg(None, v)], **{"linger.ms": 0})

        def log_start() -> int:
            return _watermarks(proc.bootstrap, topic)[0]

        assert wait_until(lambda: log_start() > 0, timeout=10, interval=0.2)
        time.sleep(0.5)  # let a retention pass after the last roll settle
        start, end = _watermarks(proc.bootstrap, topic)
        assert end == n
        assert n - 20 <= start < n  # about 4 KiB (10 records) kept, whole segments only
        segments = sorted(f for f in os.listdir(part_dir) if f.endswith(".log"))
        assert 2 <= len(segments) <= 4, segments
        assert int(segments[0][:-4]) == start
        assert "retention deleted" in proc.log_text()

        # A consumer that asks for offset 0 resets to the new earliest.
        got = consume("confluent", proc.bootstrap, topic, [0], n - start, start=0,
                      **{"auto.offset.reset": "earliest"})
        assert [r.offset for r in got] == list(range(start, n))
        assert _values(got) == values[start:]
        got = consume("kafka-python", proc.bootstrap, topic, [0], n - start, start=0)
        assert _values(got) == values[start:]
        with pytest.raises(kerr.OffsetOutOfRangeError):
            consume("kafka-python", proc.bootstrap, topic, [0], 1, start=0, timeout=5,
                    auto_offset_reset="none")

        # The moved log start survives a crash.
        proc.kill()
        proc.start()
        assert _watermarks(proc.bootstrap, topic) == (start, n)
        got = consume("aiokafka", proc.bootstrap, topic, [0], n - start, start=0)
        assert _values(got) == values[start:]
    finally:
        proc.kill()


def test_time_retention_end_to_end(tmp_path, topic):
    """retention.ms: segments whose newest record is older go, the active one too once
    it is (rolled first, as Kafka does): the log keeps one empty segment at its end and
    the next record goes on from there."""
    proc = BrokerProcess(str(tmp_path / "data"), {"log.retention.check.interval.ms": "200"})
    proc.start()
    try:
        # Retention starts long and is shortened once everything is written: producing
        # twelve records one producer at a time can take longer than 1.5 s on a busy machine.
        _create_topic(proc.bootstrap, topic, 1, {"segment.bytes": "1024",
                                                 "retention.ms": "3600000"})
        for i in range(12):
            produce("kafka-python", proc.bootstrap, topic, [Msg(None, b"t%02d-" % i + b"x" * 300)])
        start, end = _watermarks(proc.bootstrap, topic)
        assert (start, end) == (0, 12)
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", "1500", incremental_operation=AlterConfigOpType.SET)])
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.incremental_alter_configs([resource])[resource].result(15)
        # Segments expire one after the other as they age, the active one last.
        part_dir = os.path.join(proc.data_dir, f"{topic}-0")
        assert wait_until(lambda: _watermarks(proc.bootstrap, topic) == (12, 12),
                          timeout=15, interval=0.2), _watermarks(proc.bootstrap, topic)
        assert len([f for f in os.listdir(part_dir) if f.endswith(".log")]) == 1
        produce("kafka-python", proc.bootstrap, topic, [Msg(None, b"after")])
        assert _watermarks(proc.bootstrap, topic) == (12, 13)
        got = consume("kcat", proc.bootstrap, topic, [0], 1, start=12)
        assert [(r.offset, r.value) for r in got] == [(12, b"after")]
    finally:
        proc.kill()


def _fsync_helpers(pid: int) -> list[int]:
    """Child processes of ``pid`` running storage/fsync_helper.py."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z" and b"fsync_helper.py" in cmdline:
            out.append(int(entry))
    return out


def test_fsync_helper_killed_broker_goes_on_and_no_helper_outlives_it(broker_process, topic):
    """The broker's fsyncs run in a helper process. SIGKILL it: acks=all produce goes on
    (the flusher fsyncs in threads, with an ERROR line), nothing acknowledged is lost,
    and neither a SIGTERM nor a SIGKILL of the broker leaves a helper behind."""
    _create_topic(broker_process.bootstrap, topic, 2)
    [helper] = _fsync_helpers(broker_process.proc.pid)
    first = [Msg(None, b"before-%d" % i) for i in range(50)]
    assert len(produce("confluent", broker_process.bootstrap, topic, first, acks="all")) == 50
    os.kill(helper, 9)
    second = [Msg(None, b"after-%d" % i) for i in range(50)]
    placed = produce("confluent", broker_process.bootstrap, topic, second, acks="all")
    assert len(placed) == 50 and all(o >= 0 for _p, o in placed)
    assert wait_until(lambda: "fsync helper process: it exited; fsyncing in threads"
                      in broker_process.log_text(), timeout=10)
    assert _fsync_helpers(broker_process.proc.pid) == []
    broker_process.kill()  # acknowledged means fsynced, also without the helper
    broker_process.start()
    got = consume("confluent", broker_process.bootstrap, topic, [0, 1], 100)
    assert sorted(_values(got)) == sorted(m.value for m in first + second)
    # A new broker process has a helper again; it leaves with the broker.
    pid = broker_process.proc.pid
    assert len(_fsync_helpers(pid)) == 1
    [helper] = _fsync_helpers(pid)
    assert broker_process.terminate() == 0
    assert "Traceback" not in broker_process.log_text()
    assert wait_until(lambda: not os.path.exists(f"/proc/{helper}") or
                      open(f"/proc/{helper}/stat").read().rsplit(")", 1)[1].split()[0] == "Z",
                      timeout=10)
    broker_process.start()
    [helper] = _fsync_helpers(broker_process.proc.pid)
    broker_process.kill()
    assert wait_until(lambda: not os.path.exists(f"/proc/{helper}") or
                      open(f"/proc/{helper}/stat").read().rsplit(")", 1)[1].split()[0] == "Z",
                      timeout=10)
