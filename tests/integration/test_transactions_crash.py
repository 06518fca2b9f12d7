"""Broker crashes in the middle of EndTxn's commit protocol (fault points), then a
restart without the fault: the transaction ends committed in every partition (its
data partitions and the group's __consumer_offsets partition) or aborted in every
one, no acknowledged record is lost, and the producer (or a new one with the same
transactional.id) carries on.

Every fault point lies after PrepareCommit/PrepareAbort is durable, so the decision
survives the crash and recovery on start completes it: the expected outcome is the
producer's decision. Broker processes (exit 137 at the point) for each point; the
in-process fixture (``txbroker.faults.arm`` + ``txbroker.restart()``) once.

A crash keeps what was written but not fsynced (the page cache survives a killed
process), so it cannot catch a missing fsync; the ``power_loss`` action can: it drops
everything not fsynced first. It runs at every point in-process (and once as a broker
process), and a sanity test shows it drops acknowledged-but-unsynced records.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from txbroker.coordinator.group.coordinator import OFFSETS_TOPIC
from txbroker.coordinator.internal_topic import TXN_TOPIC, partition_for
from txbroker.coordinator.transaction.records import decode_key, decode_value
from txbroker.protocol.records import ControlType, control_type_of, decode_records, iter_batches

from tests.helpers import BrokerProcess, RawClient

from .clients import Msg, produce
from .txn_util import (
    TXN_CONFIG,
    TxnProducer,
    describe_transaction,
    log_ends,
    offset_fetch,
    read_all,
    step_outcome,
    transactions_in_rounds,
    unique,
    wait_state,
)

PARTITIONS = 2
# librdkafka >= 2.10 re-bootstraps when every broker is down and then decommissions
# the broker; a group coordinator cached on a decommissioned broker makes the next
# send_offsets_to_transaction() hang past its timeout (librdkafka issue #5511).
# The single broker restarting is exactly that case: keep the old recovery strategy.
CLIENT_CONFIG = {"confluent": {"metadata.recovery.strategy": "none"}}


def create_topics(bootstrap: str, *names: str, partitions: int = PARTITIONS) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        f.result(20)


def wait_txn_state(host: str, port: int, tid: str, states, timeout: float = 20) -> object:
    """DescribeTransactions until the id is in one of ``states`` (the coordinator may be
    loading after a restart)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = describe_transaction(host, port, tid)
        except OSError:
            time.sleep(0.1)
            continue
        if last.error_code == 0 and last.transaction_state in states:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{tid} never reached {states}: {last}")


def batches_on_disk(path: str):
    """(segment bytes, position, header) of every batch in a partition directory's
    segment files, in log order (read straight from disk: the broker may be dead)."""
    for name in sorted(n for n in os.listdir(path) if n.endswith(".log")):
        with open(os.path.join(path, name), "rb") as f:
            data = f.read()
        for pos, h in iter_batches(data):
            yield data, pos, h


def markers_on_disk(data_dir: str, tp) -> list[str]:
    """COMMIT/ABORT of the control batches in a partition's segment files, in order."""
    return [ControlType(control_type_of(decode_records(data, pos)[0])).name
            for data, pos, h in batches_on_disk(os.path.join(data_dir, f"{tp[0]}-{tp[1]}"))
            if h.is_control]


# What a crash at each point leaves on disk: how many partitions of the transaction
# (sorted, so __consumer_offsets first) already hold its marker.
MARKED_AT_CRASH = {"after_prepare_durable": 0, "before_markers": 0, "after_first_marker": 1,
                   "before_complete": None}  # None: every partition


def committed_offsets(host: str, port: int, group: str, tps) -> dict:
    client = RawClient(host, port)
    try:
        deadline = time.monotonic() + 10
        while True:
            got = offset_fetch(client, group, tps, require_stable=True)
            if all(e == 0 for e, _o in got.values()) or time.monotonic() > deadline:
                return got
            time.sleep(0.1)
    finally:
        client.close()


class ClientCalls(threading.Thread):
    """A producer's calls in a thread (a client that neither continues nor fails blocks
    there): ``finished`` is set when they end, ``error`` holds what they raised."""

    def __init__(self, producer: TxnProducer) -> None:
        super().__init__(daemon=True)
        self.producer = producer
        self.error: BaseException | None = None
        self.finished = threading.Event()

    def calls(self) -> None:
        raise NotImplementedError

    def run(self) -> None:
        try:
            self.calls()
        except BaseException as e:  # reported to the test
            self.error = e
        finally:
            self.finished.set()


class Commit(ClientCalls):
    """producer.commit()/abort() in a thread: it blocks while the broker is down."""

    def __init__(self, producer: TxnProducer, commit: bool) -> None:
        super().__init__(producer)
        self.commit = commit

    def calls(self) -> None:
        if self.commit:
            self.producer.commit()
        else:
            self.producer.abort()


CASES = [
    # (fault point, action, producer client, commit?, successor client or None)
    ("after_prepare_durable", "crash", "kafka-python", True, None),
    ("before_markers", "crash", "confluent", True, None),
    ("after_first_marker", "crash", "aiokafka", True, None),
    ("before_complete", "crash", "kafka-python", True, None),
    ("drop_end_txn_response", "drop", "confluent", True, None),
    ("drop_end_txn_response", "crash", "kafka-python", True, None),
    # A power failure: what was not fsynced is lost too.
    ("after_first_marker", "power_loss", "kafka-python", True, None),
    ("after_first_marker", "crash", "confluent", False, None),
    # A new producer (another client) with the same transactional.id takes over right
    # after the restart: its InitProducerId must not undo the recovered commit.
    ("after_first_marker", "crash", "aiokafka", True, "confluent"),
]


# With Kafka's flush policy nothing waits for an fsync; a killed process loses nothing
# (the page cache survives it), so the same outcome holds.
KAFKA_FLUSH_CASES = [
    ("after_first_marker", "crash", "confluent", True, None),
    ("before_complete", "crash", "kafka-python", False, None),
]
ALL_CASES = [(*c, False) for c in CASES] + [(*c, True) for c in KAFKA_FLUSH_CASES]


@pytest.mark.parametrize(("point", "action", "client", "commit", "successor", "kafka_flush"),
                         ALL_CASES,
                         ids=[f"{p}-{a}-{c}-{'commit' if k else 'abort'}"
                              + (f"-then-{n}" if n else "") + ("-kafka-flush" if f else "")
                              for p, a, c, k, n, f in ALL_CASES])
def test_crash_in_end_txn_then_restart(tmp_path, point, action, client, commit, successor,
                                       kafka_flush):
    overrides = dict(TXN_CONFIG)
    overrides["txbroker.fault.points"] = f"{point}={action}"
    if kafka_flush:
        overrides["log.flush.interval.messages"] = str((1 << 63) - 1)
    broker = BrokerProcess(str(tmp_path / "data"), overrides)
    broker.start()
    try:
        data_a, data_b, source = unique("crash-a"), unique("crash-b"), unique("crash-in")
        create_topics(broker.bootstrap, data_a, data_b, source)
        group, tid = unique("crash-group"), unique(f"crash-{client}")
        # Acknowledged (acks=all) plain records before the transaction.
        acked = [Msg(None, b"acked-%d" % p, partition=p) for p in range(PARTITIONS)]
        produce("kafka-python", broker.bootstrap, data_a, acked, acks="all")
        tps = [(data_a, p) for p in range(PARTITIONS)] + [(data_b, 0)]
        in_tps = [(source, p) for p in range(PARTITIONS)]
        all_tps = sorted([*tps, (OFFSETS_TOPIC, partition_for(
            group, int(TXN_CONFIG["offsets.topic.num.partitions"])))])
        kind = "COMMIT" if commit else "ABORT"

        producer = TxnProducer(client, broker.bootstrap, tid, **CLIENT_CONFIG.get(client, {}))
        producer.init()
        # The transaction the fault hits: records in three partitions, the group's
        # offsets in its __consumer_offsets partition.
        producer.begin()
        for i in range(2):
            for t, p in tps:
                producer.send(t, b"t1-%s-%d-%d" % (t.encode(), p, i), partition=p)
        producer.send_offsets({tp: 7 for tp in in_tps}, group)
        producer.flush()
        before = len(broker.output)
        ending = Commit(producer, commit)
        ending.start()
        if action in ("crash", "power_loss"):
            assert broker.wait(20) == 137, broker.log_text()[-3000:]
            assert f"crashing at {point}" in "".join(broker.output[before:])
            marked = [markers_on_disk(broker.data_dir, tp) for tp in all_tps]
            if point in MARKED_AT_CRASH:
                n = MARKED_AT_CRASH[point]
                n = len(all_tps) if n is None else n
                assert marked == [[kind]] * n + [[]] * (len(all_tps) - n), (point, marked)
            broker.overrides.pop("txbroker.fault.points")
            broker.start()
        if successor is not None:
            old, client = producer, successor
            producer = TxnProducer(client, broker.bootstrap, tid,
                                   **CLIENT_CONFIG.get(client, {}))
            producer.init()  # CONCURRENT_TRANSACTIONS (retried) while recovery completes
            ending.join(45)
            old.close()
        ending.join(45)
        assert ending.finished.is_set(), f"{client} commit/abort still blocked after restart"
        final = ["CompleteCommit" if commit else "CompleteAbort"]
        state = wait_txn_state(broker.host, broker.port, tid,
                               ["Empty"] if successor is not None else final)
        assert state.producer_id >= 0
        if action == "drop":
            assert "fault point drop_end_txn_response fired" in broker.log_text()
        # Every partition ends with the same decision (recovery may write a marker twice).
        for tp in all_tps:
            marked = markers_on_disk(broker.data_dir, tp)
            assert marked and set(marked) == {kind}, (tp, marked)

        values = {tp: [b"t1-%s-%d-%d" % (tp[0].encode(), tp[1], i) for i in range(2)]
                  for tp in tps}
        expected = {tp: (v if commit else []) for tp, v in values.items()}
        for p in range(PARTITIONS):
            expected[(data_a, p)] = [b"acked-%d" % p, *expected[(data_a, p)]]
        ends = _log_ends(broker, tps)
        for reader in ("kafka-python", "confluent"):
            got = read_all(reader, broker.bootstrap, ends)
            got = {tp: got.get(tp, []) for tp in tps}
            assert got == expected, (reader, point)
        want_offsets = {tp: (0, 7 if commit else -1) for tp in in_tps}
        assert committed_offsets(broker.host, broker.port, group, in_tps) == want_offsets

        # The producer carries on, or (when its client gave up) a new one with the id.
        if ending.error is not None and successor is None:
            producer.close()
            producer = TxnProducer(client, broker.bootstrap, tid,
                                   **CLIENT_CONFIG.get(client, {}))
            producer.init()
        producer.begin()
        for t, p in tps:
            producer.send(t, b"t2", partition=p)
        producer.send_offsets({tp: 9 for tp in in_tps}, group)
        producer.commit()
        producer.close()
        wait_txn_state(broker.host, broker.port, tid, ["CompleteCommit"])
        ends = _log_ends(broker, tps)
        got = read_all("aiokafka", broker.bootstrap, ends)
        assert {tp: got.get(tp, []) for tp in tps} == {tp: [*v, b"t2"]
                                                       for tp, v in expected.items()}
        assert committed_offsets(broker.host, broker.port, group, in_tps) == {
            tp: (0, 9) for tp in in_tps}
        assert broker.terminate() == 0
    finally:
        broker.kill()


def _log_ends(broker: BrokerProcess, tps) -> dict:
    from .txn_util import list_offsets

    client = RawClient(broker.host, broker.port)
    try:
        return {tp: list_offsets(client, tp, read_committed=False) for tp in tps}
    finally:
        client.close()


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    return dict(TXN_CONFIG)


def test_in_process_crash_before_complete_then_restart(txbroker):
    """The pytest fixture's API: arm a crash fault, restart the broker in-process."""
    topic, source = unique("inproc"), unique("inproc-in")
    txbroker.create_topic(topic, 2)
    txbroker.create_topic(source, 1)
    tps = [(topic, 0), (topic, 1)]
    tid, group = unique("inproc-tid"), unique("inproc-group")
    producer = TxnProducer("confluent", txbroker.bootstrap, tid, **CLIENT_CONFIG["confluent"])
    try:
        producer.init()
        producer.begin()
        for t, p in tps:
            producer.send(t, b"v%d" % p, partition=p)
        producer.send_offsets({(source, 0): 3}, group)
        producer.flush()
        txbroker.faults.arm("before_complete", "crash")
        ending = Commit(producer, True)
        ending.start()
        deadline = time.monotonic() + 10
        while not txbroker.crashed and time.monotonic() < deadline:
            time.sleep(0.02)
        assert txbroker.crashed
        assert txbroker.faults.fired == ["before_complete"]
        txbroker.restart()
        ending.join(30)
        assert ending.finished.is_set() and ending.error is None, ending.error
        wait_state(txbroker, tid, ["CompleteCommit"])
        ends = txbroker.call(lambda b: {tp: b.logs.get_log(*tp).log_end_offset for tp in tps})
        assert read_all("kafka-python", txbroker.bootstrap, ends) == {
            (topic, 0): [b"v0"], (topic, 1): [b"v1"]}
        client = RawClient(txbroker.host, txbroker.port)
        assert offset_fetch(client, group, [(source, 0)]) == {(source, 0): (0, 3)}
        client.close()
        producer.begin()
        producer.send(topic, b"after", partition=0)
        producer.commit()
        wait_state(txbroker, tid, ["CompleteCommit"])
    finally:
        producer.close()


def txn_states_on_disk(data_dir: str, tid: str) -> list[str]:
    """The states of the id's __transaction_state records in its partition's files, in
    log order (read straight from disk)."""
    partition = partition_for(tid, int(TXN_CONFIG["transaction.state.log.num.partitions"]))
    path = os.path.join(data_dir, f"{TXN_TOPIC}-{partition}")
    out = []
    for data, pos, h in batches_on_disk(path):
        if h.is_control:
            continue
        for rec in decode_records(data, pos):
            if rec.key is not None and decode_key(rec.key) == tid:
                value = decode_value(rec.value)
                out.append(value.state if value is not None else "tombstone")
    return out


POWER_LOSS_CASES = [
    # (where the power goes, producer client)
    ("after_prepare_durable", "kafka-python"),
    ("before_markers", "confluent"),
    ("after_first_marker", "aiokafka"),
    ("before_complete", "kafka-python"),
    # CompleteCommit is acted on when appended, fsynced later: the power goes between.
    ("after_complete", "confluent"),
]


@pytest.mark.parametrize(("point", "client"), POWER_LOSS_CASES,
                         ids=[f"{p}-{c}" for p, c in POWER_LOSS_CASES])
def test_in_process_power_loss_in_end_txn_then_restart(txbroker, monkeypatch, point, client):
    """A power failure (``power_loss``: every partition log cut back to what was fsynced)
    at each point of the commit protocol, then a restart: the transaction ends committed
    in every partition (data and __consumer_offsets), no acks=all record is lost, and the
    producer (or a new one with its transactional.id) carries on."""
    # Keep an unsynced CompleteCommit unsynced (else the flusher fsyncs it within 1 s).
    monkeypatch.setattr("txbroker.storage.flusher.LAZY_FLUSH_MS", 60_000)
    data_dir = txbroker.config.data_dir
    topic, source = unique("power"), unique("power-in")
    txbroker.create_topic(topic, 2)
    txbroker.create_topic(source, 1)
    tps = [(topic, 0), (topic, 1)]
    tid, group = unique(f"power-{client}"), unique("power-group")
    all_tps = sorted([*tps, (OFFSETS_TOPIC, partition_for(
        group, int(TXN_CONFIG["offsets.topic.num.partitions"])))])
    produce("kafka-python", txbroker.bootstrap, topic,
            [Msg(None, b"acked-%d" % p, partition=p) for p in range(2)], acks="all")
    producer = TxnProducer(client, txbroker.bootstrap, tid, **CLIENT_CONFIG.get(client, {}))
    ending = None
    try:
        producer.init()
        producer.begin()
        for t, p in tps:
            producer.send(t, b"v%d" % p, partition=p)
        producer.send_offsets({(source, 0): 3}, group)
        producer.flush()
        if point == "after_complete":
            producer.commit()
            wait_state(txbroker, tid, ["CompleteCommit"])
            txbroker.crash(power_loss=True)
        else:
            txbroker.faults.arm(point, "power_loss")
            ending = Commit(producer, True)
            ending.start()
            txbroker.wait_crashed()
            assert txbroker.faults.fired == [point]
        # What the power failure left: the fsynced decision and markers, nothing else.
        states = txn_states_on_disk(data_dir, tid)
        assert states[-1] == "PrepareCommit", states  # CompleteCommit, if written, is lost
        n = MARKED_AT_CRASH.get(point)
        n = len(all_tps) if n is None else n
        assert [markers_on_disk(data_dir, tp) for tp in all_tps] == \
            [["COMMIT"]] * n + [[]] * (len(all_tps) - n)
        txbroker.restart()
        if ending is not None:
            ending.join(45)
            assert ending.finished.is_set(), f"{client} commit still blocked after restart"
        wait_state(txbroker, tid, ["CompleteCommit"])
        for tp in all_tps:  # recovery may write a marker twice
            marked = markers_on_disk(data_dir, tp)
            assert marked and set(marked) == {"COMMIT"}, (tp, marked)
        ends = log_ends(txbroker, tps)
        assert read_all("kafka-python" if client != "kafka-python" else "confluent",
                        txbroker.bootstrap, ends) == {
            (topic, p): [b"acked-%d" % p, b"v%d" % p] for p in range(2)}
        client_conn = RawClient(txbroker.host, txbroker.port)
        try:
            assert offset_fetch(client_conn, group, [(source, 0)]) == {(source, 0): (0, 3)}
        finally:
            client_conn.close()
        if ending is not None and ending.error is not None:
            producer.close()  # its client gave up: a new producer with the id takes over
            producer = TxnProducer(client, txbroker.bootstrap, tid,
                                   **CLIENT_CONFIG.get(client, {}))
            producer.init()
        producer.begin()
        producer.send(topic, b"after", partition=0)
        producer.commit()
        wait_state(txbroker, tid, ["CompleteCommit"])
        assert read_all("aiokafka", txbroker.bootstrap, log_ends(txbroker, tps))[(topic, 0)] \
            == [b"acked-0", b"v0", b"after"]
    finally:
        producer.close()


def test_power_loss_drops_acknowledged_but_unsynced_records(txbroker):
    """The power_loss mode has teeth: with a topic that acknowledges acks=all without an
    fsync (flush.messages large), records acknowledged after its last fsync are gone after
    a power failure, while a plain crash keeps them (page cache), and a topic that fsyncs
    every append (the default) loses nothing either way."""
    lazy, safe = unique("unsynced"), unique("synced")
    txbroker.create_topic(lazy, 1, {"flush.messages": "1000000"})
    txbroker.create_topic(safe, 1)

    def offsets(topic):
        return txbroker.call(lambda b: (lambda p: (p.flushed_offset, p.log_end_offset))(
            b.logs.get_log(topic, 0)))

    def send(tag: bytes, n: int) -> None:
        for topic in (lazy, safe):
            placed = produce("kafka-python", txbroker.bootstrap, topic,
                             [Msg(None, b"%s-%d" % (tag, i)) for i in range(n)], acks="all")
            assert len(placed) == n  # acknowledged

    def values(topic):
        end = txbroker.call(lambda b: b.logs.get_log(topic, 0).log_end_offset)
        return read_all("confluent", txbroker.bootstrap, {(topic, 0): end},
                        read_committed=False).get((topic, 0), [])

    def send_fsynced(tag: bytes) -> None:
        """One record, then wait until the lazy topic fsynced it: a partition's first append
        after it is opened fsyncs everything (for its directory entry)."""
        send(tag, 1)
        deadline = time.monotonic() + 10
        while offsets(lazy)[0] < offsets(lazy)[1] and time.monotonic() < deadline:
            time.sleep(0.02)

    send_fsynced(b"a")
    send(b"kept", 3)
    assert offsets(lazy) == (1, 4)  # acknowledged, not fsynced
    txbroker.crash()  # a killed process: the page cache keeps them
    txbroker.restart()
    assert values(lazy) == [b"a-0", b"kept-0", b"kept-1", b"kept-2"]
    send_fsynced(b"b")
    send(b"lost", 3)
    assert offsets(lazy) == (5, 8)
    txbroker.crash(power_loss=True)
    txbroker.restart()
    assert values(lazy) == [b"a-0", b"kept-0", b"kept-1", b"kept-2", b"b-0"]  # lost-* gone
    assert values(safe) == [b"a-0", b"kept-0", b"kept-1", b"kept-2", b"b-0",
                            b"lost-0", b"lost-1", b"lost-2"]


@pytest.mark.parametrize("client", ["kafka-python", "confluent", "aiokafka"])
def test_power_loss_loses_unsynced_add_partitions_then_recovery_aborts(txbroker, monkeypatch,
                                                                      client):
    """AddPartitionsToTxn is answered once its Ongoing record is appended; the record is
    fsynced with the transaction's next state record (or within a second). A power
    failure before that keeps the acknowledged (fsynced) data but loses the record: the
    partitions hold an open transaction the coordinator does not know of. Recovery must
    abort it with an epoch bump, or read_committed readers would be stuck at it forever
    (a hanging transaction). The producer's commit fails (fenced), and a new producer
    with the transactional.id carries on."""
    monkeypatch.setattr("txbroker.storage.flusher.LAZY_FLUSH_MS", 60_000)  # keep the record unsynced
    data_dir = txbroker.config.data_dir
    topic = unique("orphan")
    txbroker.create_topic(topic, 2)
    tps = [(topic, 0), (topic, 1)]
    tid = unique(f"orphan-{client}")
    produce("kafka-python", txbroker.bootstrap, topic,
            [Msg(None, b"acked-%d" % p, partition=p) for p in range(2)], acks="all")
    producer = TxnProducer(client, txbroker.bootstrap, tid, **CLIENT_CONFIG.get(client, {}))
    try:
        producer.init()
        epoch = wait_state(txbroker, tid, ["Empty"])["producer_epoch"]
        producer.begin()
        for t, p in tps:
            producer.send(t, b"v%d" % p, partition=p)
        producer.flush()  # the data is acknowledged, so fsynced
        assert txn_states_on_disk(data_dir, tid)[-1] == "Ongoing"  # in the page cache
        txbroker.faults.arm("before_end_txn", "power_loss")
        ending = Commit(producer, True)
        ending.start()
        txbroker.wait_crashed()
        # The power failure kept the data but lost the Ongoing record.
        assert txn_states_on_disk(data_dir, tid)[-1] == "Empty"
        assert [markers_on_disk(data_dir, tp) for tp in tps] == [[], []]
        txbroker.restart()
        info = wait_state(txbroker, tid, ["CompleteAbort"], timeout=20)
        assert info["producer_epoch"] == epoch + 1  # fenced
        assert [markers_on_disk(data_dir, tp) for tp in tps] == [["ABORT"], ["ABORT"]]
        ending.join(60)
        assert ending.finished.is_set(), f"{client} commit still blocked after restart"
        assert ending.error is not None, "the commit of an aborted transaction succeeded"
        producer.close()
        # Readers move on; the id works again.
        producer = TxnProducer(client, txbroker.bootstrap, tid, **CLIENT_CONFIG.get(client, {}))
        producer.init()
        producer.begin()
        producer.send(topic, b"after", partition=0)
        producer.commit()
        got = read_all("confluent" if client != "confluent" else "kafka-python",
                       txbroker.bootstrap, log_ends(txbroker, tps))
        assert got == {(topic, 0): [b"acked-0", b"after"], (topic, 1): [b"acked-1"]}
    finally:
        producer.close()


@pytest.mark.parametrize("second_partition", [1, 0], ids=["new-partition", "same-partition"])
@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_power_loss_loses_completion_and_next_add_partitions(txbroker, monkeypatch, client,
                                                             second_partition):
    """Both records acted on before their fsync are lost together: a committed
    transaction's CompleteCommit and the next transaction's Ongoing, while that next
    transaction's data is on disk. Recovery completes the commit from its durable
    PrepareCommit, then aborts the next transaction with an epoch bump: its producer
    must not be told it committed, and no partition may be left open.

    same-partition: the next transaction's data sits in a partition of the committed
    one, right after that one's durable COMMIT marker. Recovery must not write the
    recovered COMMIT there again: it would commit the next transaction's data (the
    PrepareCommit record's first offsets tell the two transactions apart)."""
    monkeypatch.setattr("txbroker.storage.flusher.LAZY_FLUSH_MS", 60_000)
    data_dir = txbroker.config.data_dir
    topic = unique("orphan2")
    txbroker.create_topic(topic, 2)
    tps = [(topic, 0), (topic, 1)]
    tid = unique(f"orphan2-{client}")
    producer = TxnProducer(client, txbroker.bootstrap, tid, **CLIENT_CONFIG.get(client, {}))
    try:
        producer.init()
        epoch = wait_state(txbroker, tid, ["Empty"])["producer_epoch"]
        producer.begin()
        producer.send(topic, b"first", partition=0)
        producer.commit()
        wait_state(txbroker, tid, ["CompleteCommit"])
        producer.begin()
        producer.send(topic, b"second", partition=second_partition)
        producer.flush()  # acknowledged: fsynced
        assert txn_states_on_disk(data_dir, tid)[-2:] == ["CompleteCommit", "Ongoing"]
        txbroker.crash(power_loss=True)
        assert txn_states_on_disk(data_dir, tid)[-1] == "PrepareCommit"
        txbroker.restart()
        info = wait_state(txbroker, tid, ["CompleteAbort"], timeout=20)
        assert info["producer_epoch"] == epoch + 1
        if second_partition == 1:
            assert markers_on_disk(data_dir, (topic, 1)) == ["ABORT"]
            assert set(markers_on_disk(data_dir, (topic, 0))) == {"COMMIT"}
        else:
            assert markers_on_disk(data_dir, (topic, 0)) == ["COMMIT", "ABORT"]
            assert markers_on_disk(data_dir, (topic, 1)) == []
        ending = Commit(producer, True)  # the producer's commit of its aborted transaction
        ending.start()
        ending.join(60)
        assert ending.finished.is_set(), f"{client} commit still blocked after restart"
        assert ending.error is not None, "the commit of an aborted transaction succeeded"
        got = read_all("aiokafka", txbroker.bootstrap, log_ends(txbroker, tps))
        assert got == {(topic, 0): [b"first"]}
    finally:
        producer.close()


class Sends(ClientCalls):
    """The producer goes on with its transaction after the restart: sends, then commits."""

    def __init__(self, producer: TxnProducer, topic: str, partitions: list[int]) -> None:
        super().__init__(producer)
        self.topic, self.partitions = topic, partitions

    def calls(self) -> None:
        for i, p in enumerate(self.partitions):
            self.producer.send(self.topic, b"more-%d" % i, partition=p)
        self.producer.flush()
        self.producer.commit()


def commit_first_then_begin(txbroker, producer: TxnProducer, topic: str, tid: str) -> None:
    """A committed transaction ("first" in partition 0), then the next one begun."""
    producer.begin()
    producer.send(topic, b"first", partition=0)
    producer.commit()
    wait_state(txbroker, tid, ["CompleteCommit"])
    producer.begin()


@pytest.mark.parametrize("second_partition", [1, 0], ids=["new-partition", "same-partition"])
@pytest.mark.parametrize("client", ["aiokafka", "kafka-python", "confluent"])
def test_producer_that_goes_on_after_lost_completion_fails_with_kafkas_error(
        txbroker, monkeypatch, client, second_partition):
    """The power-loss case above, but the producer carries on with its transaction after
    the restart (more records, to the same and a new partition), as an application
    does. Recovery aborted that transaction with an epoch bump, so every request of
    the old epoch is refused with Kafka's epoch error (INVALID_PRODUCER_EPOCH, before
    any sequence check; PRODUCER_FENCED on AddPartitionsToTxn v3+) and the client
    fails (fenced) instead of retrying forever; nothing it sends becomes visible."""
    monkeypatch.setattr("txbroker.storage.flusher.LAZY_FLUSH_MS", 60_000)
    data_dir = txbroker.config.data_dir
    topic = unique("goes-on")
    txbroker.create_topic(topic, 3)
    tps = [(topic, 0), (topic, 1), (topic, 2)]
    tid = unique(f"goes-on-{client}")
    producer = TxnProducer(client, txbroker.bootstrap, tid, **CLIENT_CONFIG.get(client, {}))
    try:
        producer.init()
        commit_first_then_begin(txbroker, producer, topic, tid)
        producer.send(topic, b"second", partition=second_partition)
        producer.flush()
        assert txn_states_on_disk(data_dir, tid)[-2:] == ["CompleteCommit", "Ongoing"]
        txbroker.crash(power_loss=True)
        txbroker.restart()
        wait_state(txbroker, tid, ["CompleteAbort"], timeout=20)
        going_on = Sends(producer, topic, [second_partition, second_partition, 2])
        going_on.start()
        going_on.join(60)
        assert going_on.finished.is_set(), f"{client} neither continued nor failed"
        assert going_on.error is not None, "the transaction recovery aborted committed"
        got = read_all("kafka-python" if client != "kafka-python" else "confluent",
                       txbroker.bootstrap, log_ends(txbroker, tps))
        assert got == {(topic, 0): [b"first"]}
    finally:
        producer.close()


@pytest.mark.parametrize("client", ["aiokafka", "kafka-python", "confluent"])
def test_producer_whose_unsynced_transaction_was_lost_recovers(txbroker, monkeypatch, client):
    """A power loss takes back a committed transaction's unsynced CompleteCommit, the
    next transaction's AddPartitionsToTxn record and its records (acknowledged without
    an fsync: flush.messages > 1). Recovery completes the commit; the coordinator knows
    nothing of the next transaction, so the producer's next Produce there fails
    verification (TRANSACTION_ABORTABLE, INVALID_TXN_STATE for old versions) as on
    Kafka. The application then aborts and starts over, which must work: either the
    client recovers by itself (new epoch or sequence reset) or it reports an error the
    application can act on by recreating the producer; it must not retry forever."""
    monkeypatch.setattr("txbroker.storage.flusher.LAZY_FLUSH_MS", 60_000)
    topic = unique("lost-txn")
    txbroker.create_topic(topic, 1, {"flush.messages": "1000000"})
    tid = unique(f"lost-txn-{client}")
    producer = TxnProducer(client, txbroker.bootstrap, tid, **CLIENT_CONFIG.get(client, {}))
    try:
        lose_next_transaction(txbroker, producer, topic, tid)
        going_on = Sends(producer, topic, [0, 0])
        going_on.start()
        going_on.join(60)
        assert going_on.finished.is_set(), f"{client} neither continued nor failed"
        assert going_on.error is not None, "a transaction the coordinator lost committed"
        # What an application does next: abort and start over; if the client calls its
        # state fatal (all three do here), a new producer instance carries on.
        again = AbortThenCommit(producer, topic)
        again.start()
        again.join(60)
        assert again.finished.is_set(), f"{client} stuck after {going_on.error!r}"
        if again.error is not None:
            producer.close()
            producer = TxnProducer(client, txbroker.bootstrap, tid,
                                   **CLIENT_CONFIG.get(client, {}))
            producer.init()
            AbortThenCommit(producer, topic).run()
        got = read_all("kafka-python" if client != "kafka-python" else "confluent",
                       txbroker.bootstrap, log_ends(txbroker, [(topic, 0)]))
        assert got[(topic, 0)][-1:] == [b"retry"]
        assert b"lost" not in got[(topic, 0)] and b"more-0" not in got[(topic, 0)]
    finally:
        producer.close()


def lose_next_transaction(txbroker, producer: TxnProducer, topic: str, tid: str) -> int:
    """A committed transaction ("first" in partition 0), then the next one's record
    ("lost", acknowledged without an fsync: the topic's flush.messages is large) and the
    power goes: recovery completes the commit from its PrepareCommit and knows nothing of
    the next transaction. The producer's epoch after recovery."""
    producer.init()
    commit_first_then_begin(txbroker, producer, topic, tid)
    producer.send(topic, b"lost", partition=0)
    producer.flush()  # acknowledged, not fsynced
    txbroker.crash(power_loss=True)
    txbroker.restart()
    return wait_state(txbroker, tid, ["CompleteCommit"], timeout=20)["producer_epoch"]


class AbortThenCommit(ClientCalls):
    """What an application does after a failed transaction: abort, then a new one."""

    def __init__(self, producer: TxnProducer, topic: str) -> None:
        super().__init__(producer)
        self.topic = topic

    def calls(self) -> None:
        try:
            self.producer.abort()
        except Exception:  # noqa: BLE001 - the abort may fail; the next transaction counts
            pass
        self.producer.begin()
        self.producer.send(self.topic, b"retry", partition=0)
        self.producer.flush()
        self.producer.commit()


# After the power loss below, per client: what the producer's calls do when it goes on
# with its lost transaction (sends to a new partition and to the lost one), aborts, and
# runs three more transactions. The same answers as Kafka's to the same sequence gap
# (tests/differential/test_aborted_with_bump.py: test_gap_after_transaction_abortable_on
# _the_wire, test_client_after_a_refused_batch).
AFTER_LOST_TRANSACTION = {
    # The loop of the report: aborts succeed, every transaction fails, until a new
    # producer instance.
    "aiokafka": {"goes on": "InvalidTxnState", "abort": "ok",
                 "round 0": "OutOfOrderSequenceNumber", "abort 0": "ok",
                 "round 1": "OutOfOrderSequenceNumber", "abort 1": "ok",
                 "round 2": "OutOfOrderSequenceNumber", "abort 2": "ok"},
    # INVALID_TXN_STATE is fatal for kafka-python ("in an error state" afterwards).
    "kafka-python": {"goes on": "InvalidTxnStateError", "abort": "KafkaError",
                     "round 0": "KafkaError", "abort 0": "KafkaError", "round 1": "KafkaError",
                     "abort 1": "KafkaError", "round 2": "KafkaError", "abort 2": "KafkaError"},
    # librdkafka: the gap needs an epoch bump, which its next abort does (KIP-360).
    "confluent": {"goes on": "AssertionError", "abort": "ok", "round 0": "AssertionError",
                  "abort 0": "ok", "round 1": "ok", "round 2": "ok"},
}
# The epoch the coordinator ends with, over the one after recovery: only librdkafka's
# own abort bumps it.
EPOCH_BUMPS = {"aiokafka": 0, "kafka-python": 0, "confluent": 1}


@pytest.mark.parametrize("client", ["aiokafka", "kafka-python", "confluent"])
def test_producer_after_lost_transaction_and_gap(txbroker, monkeypatch, client):
    """Issue 20's report, reproduced: a power loss takes a committed transaction's
    CompleteCommit, the next transaction's AddPartitionsToTxn record and its batch
    (sequence 1 of partition 0, acknowledged without an fsync). The coordinator knows
    nothing of that transaction and keeps the epoch. The producer goes on: its
    AddPartitionsToTxn of a new partition opens a transaction, its batch to partition 0
    (sequence 2) fails verification (TRANSACTION_ABORTABLE, INVALID_TXN_STATE for old
    Produce versions), its abort succeeds, and every later batch to partition 0 leaves
    sequence 1 out: OUT_OF_ORDER_SEQUENCE_NUMBER ("expected sequence 1, got 3"), as Kafka
    answers. A client that renumbers (an epoch bump) carries on; aiokafka does not, and
    a new producer instance (docs/compatibility.md's workaround) commits."""
    monkeypatch.setattr("txbroker.storage.flusher.LAZY_FLUSH_MS", 60_000)
    topic = unique("lost-gap")
    txbroker.create_topic(topic, 2, {"flush.messages": "1000000"})
    tps = [(topic, 0), (topic, 1)]
    tid = unique(f"lost-gap-{client}")
    producer = TxnProducer(client, txbroker.bootstrap, tid, **CLIENT_CONFIG.get(client, {}))
    try:
        epoch = lose_next_transaction(txbroker, producer, topic, tid)

        def goes_on() -> None:
            # The new partition first: its add opens a transaction at the coordinator,
            # so the abort below has one to abort (otherwise INVALID_TXN_STATE, fatal
            # for librdkafka: a race in the client between the two).
            producer.send(topic, b"more-1", partition=1)
            producer.flush()
            producer.send(topic, b"more-0", partition=0)
            producer.flush()

        outcome = {"goes on": step_outcome(goes_on), "abort": step_outcome(producer.abort)}
        transactions_in_rounds(producer, topic, outcome)
        print(f"\n{client}: {outcome}")
        assert outcome == AFTER_LOST_TRANSACTION[client], outcome
        # Recovery did not bump the epoch (so never a fencing error); a client may.
        assert wait_state(txbroker, tid, ["CompleteCommit", "CompleteAbort", "Ongoing"])[
            "producer_epoch"] == epoch + EPOCH_BUMPS[client]
        if outcome["round 2"] != "ok":
            producer.close()
            producer = TxnProducer(client, txbroker.bootstrap, tid,
                                   **CLIENT_CONFIG.get(client, {}))
            producer.init()
            AbortThenCommit(producer, topic).run()
        got = read_all("kafka-python" if client != "kafka-python" else "confluent",
                       txbroker.bootstrap, log_ends(txbroker, tps))
        assert got[(topic, 0)][0] == b"first" and got[(topic, 0)][-1] in (b"next", b"retry")
        assert not {b"lost", b"more-0", b"more-1"} & {v for vs in got.values() for v in vs}
    finally:
        producer.close()
