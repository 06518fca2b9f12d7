"""Transactions with real clients: commit visible and abort hidden for every producer
and read_committed consumer of kafka-python, aiokafka and confluent-kafka; the last
stable offset holding readers back; fencing by a second producer; transactions of
vanished producers aborted after their timeout.

Consume-transform-produce with a killed worker is in test_transactions_eos.py,
broker crashes in test_transactions_crash.py, raw-wire cases and KIP-664 in
test_transactions_wire.py.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from txbroker.protocol.records import ControlType, control_type_of, decode_records, iter_batches

from .clients import Msg, produce
from .txn_util import (
    CLIENTS,
    TXN_CONFIG,
    Reader,
    TxnProducer,
    is_fenced,
    list_offsets,
    log_ends,
    read_all,
    unique,
    values_by_partition,
    wait_state,
)
from .wire_util import connect, fetch_partition, fetch_request


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    return dict(TXN_CONFIG)


def control_types(txbroker, tp) -> list[str]:
    """COMMIT/ABORT of every control batch in the partition's log, in order."""

    def read(broker):
        out = []
        for seg in broker.logs.get_log(*tp).segments:
            with open(seg.log_path, "rb") as f:
                data = f.read()
            for pos, h in iter_batches(data):
                if h.is_control:
                    out.append(ControlType(control_type_of(decode_records(data, pos)[0])).name)
        return out

    return txbroker.call(read)


def stable(txbroker, tp) -> tuple[int, int, int]:
    """(last stable offset, high watermark, log end) of a partition."""
    return txbroker.call(lambda b: (lambda p: (p.last_stable_offset, p.high_watermark,
                                               p.log_end_offset))(b.logs.get_log(*tp)))


# --- 1. commit visible, abort hidden ---------------------------------------------------------


@pytest.mark.parametrize("producer", CLIENTS)
def test_commit_visible_abort_hidden_across_topics(txbroker, producer):
    """Three transactions (commit, abort, commit) over two topics x three partitions:
    every read_committed consumer sees exactly the committed records in order; a
    read_uncommitted one also sees the aborted ones (they were flushed before the abort)."""
    topics = [unique("txn-a"), unique("txn-b")]
    for t in topics:
        txbroker.create_topic(t, 3)
    tps = [(t, p) for t in topics for p in range(3)]
    committed: dict = {tp: [] for tp in tps}
    everything: dict = {tp: [] for tp in tps}
    tid = unique(f"tid-{producer}")
    with TxnProducer(producer, txbroker.bootstrap, tid) as prod:
        prod.init()
        for n, commit in enumerate((True, False, True)):
            prod.begin()
            for i in range(2):
                for tp in tps:
                    value = f"{producer}-t{n}-{tp[0]}-{tp[1]}-{i}".encode()
                    prod.send(tp[0], value, key=b"k%d" % i, partition=tp[1])
                    everything[tp].append(value)
                    if commit:
                        committed[tp].append(value)
            prod.flush()  # librdkafka purges records not yet sent when it aborts
            if commit:
                prod.commit()
            else:
                prod.abort()
            # EndTxn is answered once PrepareCommit/PrepareAbort is durable; the markers
            # follow (as in Kafka).
            wait_state(txbroker, tid, ["CompleteCommit" if commit else "CompleteAbort"])
    for tp in tps:
        assert control_types(txbroker, tp) == ["COMMIT", "ABORT", "COMMIT"]
        lso, hw, end = stable(txbroker, tp)
        assert lso == hw == end == 2 * 3 + 3  # six records, three markers
    ends = log_ends(txbroker, tps)
    for consumer in CLIENTS:
        got = read_all(consumer, txbroker.bootstrap, ends)
        assert got == committed, f"{consumer} read_committed after {producer} transactions"
    reader = CLIENTS[(CLIENTS.index(producer) + 1) % 3]
    assert read_all(reader, txbroker.bootstrap, ends, read_committed=False) == everything


# --- 2. the last stable offset ---------------------------------------------------------------


def _poll_all(readers, seconds: float) -> dict[str, list]:
    got: dict[str, list] = {r.client: [] for r in readers}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for r in readers:
            got[r.client].extend(r.poll(0.1))
    return got


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_open_transaction_holds_back_read_committed(txbroker, end):
    """Non-transactional records after an open transaction's first record stay
    invisible to read_committed readers (the LSO) until the transaction ends; then they
    see everything in log order, aborted records skipped. ListOffsets(read_committed)
    answers the LSO while the transaction is open, the high watermark after."""
    topic = unique("lso")
    txbroker.create_topic(topic, 1)
    tp = (topic, 0)
    raw = connect(txbroker)
    readers = [Reader(c, txbroker.bootstrap, [tp]) for c in CLIENTS]
    uncommitted = Reader("kafka-python", txbroker.bootstrap, [tp], read_committed=False)
    prod = TxnProducer("kafka-python", txbroker.bootstrap, unique("tid-lso"))
    try:
        prod.init()
        # A committed transaction first, so the open one does not start at offset 0.
        prod.begin()
        prod.send(topic, b"first", partition=0)
        prod.commit()  # offsets 0, marker 1
        for r in readers:
            assert [x.value for x in r.read_until({tp: 2})] == [b"first"]

        prod.begin()
        prod.send(topic, b"txn-0", partition=0)
        prod.send(topic, b"txn-1", partition=0)
        prod.flush()  # offsets 2, 3
        produce("confluent", txbroker.bootstrap, topic,
                [Msg(None, b"plain-%d" % i, partition=0) for i in range(3)])  # 4, 5, 6
        assert stable(txbroker, tp) == (2, 7, 7)
        assert list_offsets(raw, tp, read_committed=True) == 2
        assert list_offsets(raw, tp, read_committed=False) == 7
        f = fetch_partition(raw.request(1, 12, fetch_request({topic: {0: 2}},
                                                              isolation_level=1)), topic, 0)
        assert (f.records or b"") == b"" and f.last_stable_offset == 2 and f.high_watermark == 7

        held = _poll_all(readers, 1.5)
        assert held == {c: [] for c in CLIENTS}, "read_committed readers passed the LSO"
        for r in readers:
            assert r.positions() == {tp: 2}
        # read_uncommitted readers are not held back.
        seen = [x.value for x in uncommitted.read_until({tp: 7})]
        assert seen == [b"first", b"txn-0", b"txn-1", b"plain-0", b"plain-1", b"plain-2"]

        if end == "commit":
            prod.commit()
            expected = [b"txn-0", b"txn-1", b"plain-0", b"plain-1", b"plain-2"]
        else:
            prod.abort()
            expected = [b"plain-0", b"plain-1", b"plain-2"]
        wait_state(txbroker, prod.transactional_id, ["CompleteCommit", "CompleteAbort"])
        assert stable(txbroker, tp) == (8, 8, 8)
        assert list_offsets(raw, tp, read_committed=True) == 8
        for r in readers:
            got = r.read_until({tp: 8})
            assert [x.value for x in got] == expected, r.client
            assert [x.offset for x in got] == sorted(x.offset for x in got)
        for c in CLIENTS:  # fresh readers from the start agree
            first = [b"first"]
            assert read_all(c, txbroker.bootstrap, {tp: 8}) == {tp: first + expected}
    finally:
        prod.close()
        for r in [*readers, uncommitted]:
            r.close()
        raw.close()


# --- 3. fencing --------------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_second_producer_fences_the_first(txbroker, client):
    """A second producer with the same transactional.id (another client library) fences
    the first: the first's open transaction is aborted with an epoch bump, the first
    gets its client's fatal fenced error, and read_committed readers never see its
    records."""
    topic = unique("fence")
    txbroker.create_topic(topic, 2)
    tps = [(topic, 0), (topic, 1)]
    tid = unique(f"tid-fence-{client}")
    other = CLIENTS[(CLIENTS.index(client) + 1) % 3]
    first = TxnProducer(client, txbroker.bootstrap, tid)
    second = TxnProducer(other, txbroker.bootstrap, tid)
    try:
        first.init()
        epoch = txbroker.call(lambda b: b.transactions.state.inspect(tid))["producer_epoch"]
        first.begin()
        for tp in tps:
            first.send(topic, b"zombie-%d" % tp[1], partition=tp[1])
        first.flush()
        assert wait_state(txbroker, tid, ["Ongoing"])["partitions"] == tps

        second.init()  # aborts the first's transaction (epoch + 1), then bumps again
        info = wait_state(txbroker, tid, ["Empty"])
        assert info["producer_epoch"] == epoch + 2
        for tp in tps:
            assert control_types(txbroker, tp) == ["ABORT"]
        second.begin()
        for tp in tps:
            second.send(topic, b"winner-%d" % tp[1], partition=tp[1])
        second.commit()
        wait_state(txbroker, tid, ["CompleteCommit"])

        # EndTxn with the old epoch: PRODUCER_FENCED (INVALID_PRODUCER_EPOCH for the old
        # request versions aiokafka and librdkafka send), the client's fatal error.
        with pytest.raises(Exception) as excinfo:
            first.commit()
        assert is_fenced(client, excinfo.value), repr(excinfo.value)
        with pytest.raises(Exception) as excinfo:  # and it stays unusable
            first.abort()
        assert excinfo.value is not None
    finally:
        first.close()
        second.close()
    ends = log_ends(txbroker, tps)
    for consumer in CLIENTS:
        assert read_all(consumer, txbroker.bootstrap, ends) == {
            (topic, p): [b"winner-%d" % p] for p in range(2)}, consumer
    # The zombie's records are in the log (aborted), and nothing it sent later is.
    everything = read_all("kafka-python", txbroker.bootstrap, ends, read_committed=False)
    assert everything == {(topic, p): [b"zombie-%d" % p, b"winner-%d" % p] for p in range(2)}


# --- 5. vanished producers time out ------------------------------------------------------------


HANG_WORKER = """
import sys, time
from confluent_kafka import Producer
bootstrap, tid, topic = sys.argv[1:4]
p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
              "transaction.timeout.ms": 2000, "linger.ms": 0})
p.init_transactions(20)
p.begin_transaction()
for i in range(4):
    p.produce(topic, b"doomed-%d" % i, partition=i % 2)
assert p.flush(20) == 0
print("READY", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("how", ["killed", "abandoned"])
def test_vanished_producer_is_aborted_after_its_timeout(txbroker, tmp_path, how):
    """A producer that never ends its transaction (a SIGKILLed confluent-kafka process,
    or an aiokafka producer simply left alone) is aborted by the coordinator once its
    transaction.timeout.ms (2 s) has passed, with an epoch bump; read_committed readers
    held back by it move on; the abandoned producer is fenced; a new producer with the
    same transactional.id works."""
    topic = unique(f"vanish-{how}")
    txbroker.create_topic(topic, 2)
    tps = [(topic, 0), (topic, 1)]
    tid = unique(f"tid-vanish-{how}")
    proc = None
    abandoned = None
    try:
        if how == "killed":
            script = tmp_path / "hang.py"
            script.write_text(HANG_WORKER)
            proc = subprocess.Popen([sys.executable, str(script), txbroker.bootstrap, tid, topic],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.strip() == "READY", line + proc.stdout.read() if proc.poll() else line
        else:
            abandoned = TxnProducer("aiokafka", txbroker.bootstrap, tid, timeout_ms=2000)
            abandoned.init()
            abandoned.begin()
            for i in range(4):
                abandoned.send(topic, b"doomed-%d" % i, partition=i % 2)
            abandoned.flush()
        started = time.monotonic()
        info = wait_state(txbroker, tid, ["Ongoing"])
        epoch = info["producer_epoch"]
        assert info["timeout_ms"] == 2000
        produce("kafka-python", txbroker.bootstrap, topic,
                [Msg(None, b"after-%d" % p, partition=p) for p in range(2)])
        with Reader("confluent", txbroker.bootstrap, tps) as reader:
            assert _poll_all([reader], 0.5) == {"confluent": []}
            assert reader.positions() == {tp: 0 for tp in tps}
            if proc is not None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
            done = wait_state(txbroker, tid, ["CompleteAbort"], timeout=10)
            assert time.monotonic() - started <= 8
            # Aborted (PrepareAbort written) only once the timeout had passed.
            assert done["last_update_ms"] - info["txn_start_ms"] > 2000, (info, done)
            assert done["producer_epoch"] == epoch + 1  # fenced
            got = values_by_partition(reader.read_until(log_ends(txbroker, tps)))
        assert got == {(topic, p): [b"after-%d" % p] for p in range(2)}
        for tp in tps:
            assert control_types(txbroker, tp) == ["ABORT"]
        if abandoned is not None:
            with pytest.raises(Exception) as excinfo:
                abandoned.commit()
            assert is_fenced("aiokafka", excinfo.value), repr(excinfo.value)
        with TxnProducer("kafka-python", txbroker.bootstrap, tid) as again:
            again.init()
            assert wait_state(txbroker, tid, ["Empty"])["producer_epoch"] == epoch + 2
            again.begin()
            again.send(topic, b"again", partition=0)
            again.commit()
        wait_state(txbroker, tid, ["CompleteCommit"])
        ends = log_ends(txbroker, tps)
        for consumer in CLIENTS:
            assert read_all(consumer, txbroker.bootstrap, ends) == {
                (topic, 0): [b"after-0", b"again"], (topic, 1): [b"after-1"]}, consumer
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if abandoned is not None:
            abandoned.close()


EXPIRE_CASES = [
    # (how, client, broker config)
    ("fixture", "confluent", TXN_CONFIG),
    ("config", "kafka-python", {**TXN_CONFIG, "txbroker.fault.points": "before_end_txn=expire"}),
]


@pytest.mark.parametrize(("how", "client", "txbroker_config"), EXPIRE_CASES,
                         ids=[f"{how}-{client}" for how, client, _ in EXPIRE_CASES])
def test_expire_transaction_now_fences_the_producer(txbroker, how, client):
    """Fault injection "expire now" (``txbroker.expire_transactions()``, or the fault point
    ``before_end_txn=expire`` from config): the open transaction is aborted at once, as its
    timeout (60 s) would abort it, with an epoch bump: the producer's commit fails with its
    client's fenced error, and read_committed readers held back by it move on. Real
    timeouts are not disturbed: a later transaction with a 1 s timeout is aborted on time."""
    topic = unique(f"expire-{how}")
    txbroker.create_topic(topic, 2)
    tps = [(topic, 0), (topic, 1)]
    tid = unique(f"tid-expire-{how}")
    with TxnProducer(client, txbroker.bootstrap, tid) as producer:
        producer.init()
        producer.begin()
        for p in range(2):
            producer.send(topic, b"doomed-%d" % p, partition=p)
        producer.flush()
        info = wait_state(txbroker, tid, ["Ongoing"])
        assert info["timeout_ms"] == 60000
        produce("kafka-python", txbroker.bootstrap, topic,
                [Msg(None, b"after-%d" % p, partition=p) for p in range(2)])
        with Reader("aiokafka", txbroker.bootstrap, tps) as reader:
            assert _poll_all([reader], 0.5) == {"aiokafka": []}  # held back by the transaction
            started = time.monotonic()
            if how == "fixture":
                assert txbroker.expire_transactions() == [tid]  # returns once aborted
                assert txbroker.call(lambda b: b.transactions.state.inspect(tid))["state"] \
                    == "CompleteAbort"
            with pytest.raises(Exception) as excinfo:
                producer.commit()
            assert is_fenced(client, excinfo.value), repr(excinfo.value)
            done = wait_state(txbroker, tid, ["CompleteAbort"])
            assert time.monotonic() - started < 10
            assert done["producer_epoch"] == info["producer_epoch"] + 1  # fenced
            got = values_by_partition(reader.read_until(log_ends(txbroker, tps)))
        assert got == {(topic, p): [b"after-%d" % p] for p in range(2)}
    if how == "config":
        assert txbroker.faults.fired == ["before_end_txn"]
    for tp in tps:
        assert control_types(txbroker, tp) == ["ABORT"]
    # The next transaction's own timeout still fires when it is due.
    with TxnProducer(client, txbroker.bootstrap, unique("tid-after-expire"),
                     timeout_ms=1000) as short:
        short.init()
        short.begin()
        short.send(topic, b"times-out", partition=0)
        short.flush()
        begun = wait_state(txbroker, short.transactional_id, ["Ongoing"])
        started = time.monotonic()
        ended = wait_state(txbroker, short.transactional_id, ["CompleteAbort"], timeout=8)
        assert time.monotonic() - started < 5
        assert ended["last_update_ms"] - begun["txn_start_ms"] > 1000  # not before its timeout


# --- CONCURRENT_TRANSACTIONS, as clients see it ---------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_next_transaction_retries_while_markers_are_delayed(txbroker, client):
    """The commit is answered before its markers are written (delayed 1 s here); the
    next transaction's AddPartitionsToTxn meanwhile gets CONCURRENT_TRANSACTIONS, which
    the client retries until the first transaction is complete."""
    topic = unique("delayed")
    txbroker.create_topic(topic, 2)
    tps = [(topic, 0), (topic, 1)]
    tid = unique(f"tid-delayed-{client}")
    with TxnProducer(client, txbroker.bootstrap, tid) as prod:
        prod.init()
        prod.begin()
        for tp in tps:
            prod.send(topic, b"first-%d" % tp[1], partition=tp[1])
        prod.flush()
        txbroker.faults.arm("before_markers", "delay:1000")
        started = time.monotonic()
        prod.commit()
        prod.begin()
        for tp in tps:
            prod.send(topic, b"second-%d" % tp[1], partition=tp[1])
        prod.flush()
        assert time.monotonic() - started >= 0.9  # AddPartitionsToTxn waited for the markers
        prod.commit()
    assert txbroker.faults.fired == ["before_markers"]
    wait_state(txbroker, tid, ["CompleteCommit"])
    for tp in tps:
        assert control_types(txbroker, tp) == ["COMMIT", "COMMIT"]
    assert read_all(CLIENTS[(CLIENTS.index(client) + 1) % 3], txbroker.bootstrap,
                    log_ends(txbroker, tps)) == {
        (topic, p): [b"first-%d" % p, b"second-%d" % p] for p in range(2)}


# --- interleaved producers -------------------------------------------------------------------------


def test_interleaved_transactions_in_the_same_partitions(txbroker):
    """Three transactional producers (one per client) and plain records interleave batch
    by batch in the same partitions; one transaction aborts, two commit. read_committed
    readers see the committed and plain records in log order, nothing of the aborted
    one, and each end moves the LSO only as far as the oldest still-open transaction."""
    topic = unique("interleaved")
    txbroker.create_topic(topic, 2)
    tps = [(topic, 0), (topic, 1)]
    producers = {c: TxnProducer(c, txbroker.bootstrap, unique(f"tid-inter-{c}")) for c in CLIENTS}
    log: dict = {tp: [] for tp in tps}  # (owner, value) in log order
    try:
        for prod in producers.values():
            prod.init()
            prod.begin()
        for i in range(3):
            for c, prod in producers.items():
                for tp in tps:
                    value = f"{c}-{i}-{tp[1]}".encode()
                    prod.send(topic, value, partition=tp[1])
                    log[tp].append((c, value))
                prod.flush()  # one batch per producer and partition, in this order
            plain = [Msg(None, f"plain-{i}-{p}".encode(), partition=p) for p in range(2)]
            produce("kafka-python", txbroker.bootstrap, topic, plain)
            for tp in tps:
                log[tp].append(("plain", f"plain-{i}-{tp[1]}".encode()))
        opened = stable(txbroker, tps[0])[0]
        assert opened == 0
        # The first producer's transaction (oldest) aborts: the LSO moves to the next one.
        producers["kafka-python"].abort()
        wait_state(txbroker, producers["kafka-python"].transactional_id, ["CompleteAbort"])
        assert stable(txbroker, tps[0])[0] == 1  # aiokafka's first record
        producers["confluent"].commit()  # the newest ends first: the LSO stays
        wait_state(txbroker, producers["confluent"].transactional_id, ["CompleteCommit"])
        assert stable(txbroker, tps[0])[0] == 1
        producers["aiokafka"].commit()
        wait_state(txbroker, producers["aiokafka"].transactional_id, ["CompleteCommit"])
        lso, hw, end = stable(txbroker, tps[0])
        assert lso == hw == end
    finally:
        for prod in producers.values():
            prod.close()
    expected = {tp: [v for owner, v in entries if owner != "kafka-python"]
                for tp, entries in log.items()}
    ends = log_ends(txbroker, tps)
    for consumer in CLIENTS:
        assert read_all(consumer, txbroker.bootstrap, ends) == expected, consumer
    everything = {tp: [v for _o, v in entries] for tp, entries in log.items()}
    assert read_all("confluent", txbroker.bootstrap, ends, read_committed=False) == everything


# --- 6. Kafka's flush policy -------------------------------------------------------------------

LONG_MAX = str((1 << 63) - 1)


@pytest.mark.parametrize("txbroker_config", [{**TXN_CONFIG,
                                              "log.flush.interval.messages": LONG_MAX}])
@pytest.mark.parametrize("producer", ["confluent", "kafka-python"])
def test_kafka_flush_policy_transactions_wait_for_no_fsync(txbroker, producer, caplog):
    """With Kafka's default flush policy (no fsync per append; the broker says so in a
    WARNING line) the coordinators act on their writes in the page cache, as Kafka
    does: committed and aborted transactions with offsets (state records, markers,
    transactional offsets) complete without a single fsync, and readers see exactly
    the committed records."""
    assert any("Kafka's flush policy" in r.getMessage() for r in caplog.get_records("setup"))
    topic = unique("nofsync")
    group = unique("nofsync-group")
    txbroker.create_topic(topic, 2)
    tps = [(topic, 0), (topic, 1)]

    def fsyncs() -> int:
        return txbroker.call(lambda b: b.logs.flusher.fsyncs)

    async def settled_fsyncs(b) -> int:
        # The warm-up's rounds for new files (their directory entries) may still be queued
        # behind a round in flight on a busy machine: run them now, before counting.
        await b.logs.flusher.flush_now()
        return b.logs.flusher.fsyncs

    prod = TxnProducer(producer, txbroker.bootstrap, unique("tid-nofsync"))
    try:
        prod.init()
        # A first transaction creates __consumer_offsets and opens every file involved
        # (a new file's directory entry is fsynced once, whatever the policy).
        prod.begin()
        prod.send(topic, b"warm-up", partition=0)
        prod.send(topic, b"warm-up", partition=1)
        prod.send_offsets({(topic, 0): 1}, group)
        prod.commit()
        wait_state(txbroker, prod.transactional_id, ["CompleteCommit"])
        before = txbroker.call(settled_fsyncs)
        for n, commit in enumerate([True, False, True]):
            prod.begin()
            for tp in tps:
                prod.send(topic, b"v%d" % n, partition=tp[1])
            prod.send_offsets({(topic, 0): 10 + n}, group)
            prod.commit() if commit else prod.abort()
            wait_state(txbroker, prod.transactional_id,
                       ["CompleteCommit" if commit else "CompleteAbort"])
        assert fsyncs() == before, "a transaction waited for an fsync"
    finally:
        prod.close()
    for tp in tps:
        assert control_types(txbroker, tp) == ["COMMIT"] * 2 + ["ABORT", "COMMIT"]
    ends = log_ends(txbroker, tps)
    for consumer in CLIENTS:
        assert read_all(consumer, txbroker.bootstrap, ends) == {
            tp: [b"warm-up", b"v0", b"v2"] for tp in tps}
    error, found = txbroker.call(lambda b: b.groups.fetch_offsets(group, None, False))
    assert error == 0 and found[(topic, 0)][0] == 12
