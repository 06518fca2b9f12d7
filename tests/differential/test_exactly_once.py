"""Exactly-once on txbroker and on Apache Kafka: consume-transform-produce with a worker
SIGKILLed in the middle of a transaction, a transaction aborted by the coordinator when
its transaction.timeout.ms passes (what the producer then hears), and an idempotent
producer's duplicate and out-of-order batches on the raw wire."""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.clients import Msg, produce
from tests.integration.txn_util import (
    RawTxn,
    TxnProducer,
    Worker,
    list_offsets,
    offset_fetch,
    read_all,
    unique,
)
from tests.integration.wire_util import PRODUCE, partition_response, produce_request

from .test_transactions import log_ends, wait_stable
from .util import init_txn

UNSTABLE_OFFSET_COMMIT = 88
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
PARTITIONS = 3
PER_PARTITION = 20


@pytest.mark.kafka_ci
@pytest.mark.parametrize("group_protocol", ["classic", "consumer"])
def test_consume_transform_produce_survives_a_killed_worker(broker, group_protocol):
    """A worker (tests/integration/txn_worker.py, confluent-kafka) is SIGKILLed after its
    third transaction produced its records and sent its offsets, before EndTxn; a new
    worker with the same transactional.id fences it, the open transaction is aborted,
    and the new worker finishes: read_committed readers see every input record in the
    output exactly once and the group's committed offsets are the input's ends. With
    group.protocol=consumer (KIP-848) the offsets go with the member epoch; the killed
    member keeps its partitions until group.consumer.session.timeout.ms (6 s here)."""
    source = broker.topic("eos-in", PARTITIONS)
    sink = broker.topic("eos-out", PARTITIONS)
    group, tid = unique("eos-group"), unique("eos-tid")
    inputs = {p: [b"v%d-%d" % (p, i) for i in range(PER_PARTITION)] for p in range(PARTITIONS)}
    produce("confluent", broker.bootstrap, source,
            [Msg(b"k%d" % i, v, partition=p) for p, vs in inputs.items()
             for i, v in enumerate(vs)])
    in_tps = [(source, p) for p in range(PARTITIONS)]
    out_tps = [(sink, p) for p in range(PARTITIONS)]
    args = ["confluent", broker.bootstrap, source, sink, group, tid, "--batch", "7",
            "--group-protocol", group_protocol]
    raw = broker.raw()
    workers: list[Worker] = []
    try:
        first = Worker(*args, "--pause-after", "2")
        workers.append(first)
        positions = json.loads(first.wait_for("PAUSED", 90).split(" ", 1)[1])
        assert first.committed_records() == 14  # two transactions of 7
        from confluent_kafka import ConsumerGroupType

        d = broker.admin.describe_consumer_groups([group], request_timeout=30)[group].result()
        assert d.type == (ConsumerGroupType.CONSUMER if group_protocol == "consumer"
                          else ConsumerGroupType.CLASSIC), d
        # KIP-447: the open transaction's offsets are unstable for require_stable.
        stable = offset_fetch(raw, group, in_tps, require_stable=True)
        for p in positions:
            assert stable[(source, int(p))][0] == UNSTABLE_OFFSET_COMMIT, stable
        # Its records are in the log, invisible to read_committed readers.
        ends = log_ends(broker, out_tps)
        assert sum(ends.values()) == 14 + 2 + 7  # two commit markers (one partition each)
        everything = read_all("confluent", broker.bootstrap, ends, read_committed=False)
        assert sum(len(v) for v in everything.values()) == 14 + 7

        first.kill()  # SIGKILL in the middle of the transaction
        second = Worker(*args)
        workers.append(second)
        second.wait_for("DONE", 90)
        assert second.proc.wait(10) == 0
    finally:
        for w in workers:
            w.kill()
    in_ends = log_ends(broker, in_tps)
    assert offset_fetch(raw, group, in_tps, require_stable=True) == {
        tp: (0, end) for tp, end in in_ends.items()}
    raw.close()
    out_ends = wait_stable(broker, out_tps)
    expected = {(sink, p): [b"out:" + v for v in vs] for p, vs in inputs.items()}
    for reader in ("confluent", "kafka-python"):
        assert read_all(reader, broker.bootstrap, out_ends) == expected, reader
    # The killed transaction's records are in the log, aborted.
    raw_out = read_all("confluent", broker.bootstrap, out_ends, read_committed=False)
    assert sum(len(v) for v in raw_out.values()) == PARTITIONS * PER_PARTITION + 7


def wait_aborted(broker, tp, timeout: float = 20) -> int:
    """Wait until the last stable offset of ``tp`` reached its log end (the coordinator
    wrote the abort marker); the log end then."""
    client = broker.raw()
    deadline = time.monotonic() + timeout
    try:
        while True:
            end = list_offsets(client, tp, read_committed=False)
            if list_offsets(client, tp, read_committed=True) == end:
                return end
            assert time.monotonic() < deadline, f"{broker}: {tp} never aborted"
            time.sleep(0.1)
    finally:
        client.close()


@pytest.mark.kafka_ci
def test_transaction_timeout_on_the_wire(broker):
    """InitProducerId with a 1 s transaction timeout, one record, then silence: the
    coordinator aborts the transaction (abort marker, epoch bumped), and every request
    the producer then sends with its old epoch is refused with Kafka's error."""
    topic = broker.topic("txn-timeout-wire")
    tp = (topic, 0)
    tid = unique("tid-timeout-wire")
    broker.wait_coordinator(tid)
    client = broker.raw()
    try:
        txn = RawTxn(client, tid, timeout_ms=1000)
        assert init_txn(txn).error_code == 0
        assert txn.add_partitions([tp]) == {tp: 0}
        assert txn.produce(tp, txn.batch(tp, [b"doomed"])) == (0, 0)
        assert wait_aborted(broker, tp) == 2  # the record and the abort marker
        codes = {
            "produce": txn.produce(tp, txn.batch(tp, [b"late"]))[0],
            "add_partitions": txn.add_partitions([tp])[tp],
            "end_txn_commit": txn.end(commit=True),
            "end_txn_abort": txn.end(commit=False),
        }
        # The epoch was bumped (Kafka's TV1 abort on timeout): the old one is fenced.
        assert codes == {"produce": 47, "add_partitions": 90, "end_txn_commit": 90,
                         "end_txn_abort": 90}, codes
        # A new InitProducerId gets the same producer id with a later epoch.
        old = (txn.producer_id, txn.epoch)
        assert init_txn(txn).error_code == 0
        assert txn.producer_id == old[0] and txn.epoch > old[1]
    finally:
        client.close()
    assert read_all("confluent", broker.bootstrap, {tp: 2}) == {}


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_transaction_timeout_client_error(broker, client):
    """A client whose transaction outlived transaction.timeout.ms (1 s) and then commits:
    the error it reports, the same on both brokers."""
    topic = broker.topic(f"txn-timeout-{client}")
    tp = (topic, 0)
    with TxnProducer(client, broker.bootstrap, unique(f"tid-timeout-{client}"),
                     timeout_ms=1000) as prod:
        prod.init()
        prod.begin()
        prod.send(topic, b"doomed", partition=0)
        prod.flush()
        wait_aborted(broker, tp)
        with pytest.raises(Exception) as info:
            prod.commit()
    assert client_error(client, info.value) == EXPECTED_TIMEOUT_ERROR[client], repr(info.value)
    assert read_all("confluent", broker.bootstrap, {tp: 2}) == {}


# What each client reports when it commits a transaction the coordinator aborted on
# timeout: the epoch was bumped, so the commit is fenced (fatal for the producer).
EXPECTED_TIMEOUT_ERROR = {
    "confluent": ("_FENCED", True),
    "kafka-python": ("ProducerFencedError", True),
}


def client_error(client: str, exc: BaseException) -> tuple[str, bool]:
    """(the client's name of the error, whether the client calls it fatal)."""
    if client == "confluent":
        err = exc.args[0]
        return err.name(), bool(err.fatal())
    return type(exc).__name__, True


def produce_idempotent(client, txn: RawTxn, tp, batch: bytes) -> tuple[int, int, int]:
    """(error code, base offset, log start offset) of one idempotent Produce v9."""
    r = client.request(PRODUCE, 9, produce_request({tp[0]: {tp[1]: batch}},
                                                   transactional_id=None, version=9))
    p = partition_response(r, *tp)
    return int(p.error_code), p.base_offset, p.log_start_offset


@pytest.mark.kafka_ci
def test_idempotent_duplicates_and_gaps_on_the_wire(broker):
    """An idempotent producer (InitProducerId without a transactional id) on the raw
    wire: a batch sent twice is answered the second time with its original offset and
    appended once; any of the last five batches likewise; a sequence gap, a sequence
    already passed but older than those five are OUT_OF_ORDER_SEQUENCE_NUMBER. A
    producer's first batch on a partition may start at any sequence (Kafka accepts it:
    the records before it may have been deleted by retention); the next must follow it."""
    topic = broker.topic("idem-wire", partitions=2)
    tp, fresh = (topic, 0), (topic, 1)
    client = broker.raw()
    try:
        idem = RawTxn(client, None)
        r = init_txn(idem)
        assert r.error_code == 0 and r.producer_id >= 0 and r.producer_epoch == 0
        batches = [idem.batch(tp, [b"%d-a" % i, b"%d-b" % i], transactional=False)
                   for i in range(7)]
        for i, b in enumerate(batches):
            assert produce_idempotent(client, idem, tp, b) == (0, 2 * i, 0), i
        got = {i: produce_idempotent(client, idem, tp, batches[i]) for i in (6, 2, 6)}
        gap = idem.batch(tp, [b"gap"], sequence=15, transactional=False)
        results = {
            "last-again": got[6],
            "fifth-last-again": got[2],
            "too-old": produce_idempotent(client, idem, tp, batches[1])[0],
            "gap": produce_idempotent(client, idem, tp, gap)[0],
            "first-not-0": produce_idempotent(client, idem, fresh, idem.batch(
                fresh, [b"x"], sequence=5, transactional=False)),
            "after-it-gap": produce_idempotent(client, idem, fresh, idem.batch(
                fresh, [b"y"], sequence=7, transactional=False))[0],
            "after-it-next": produce_idempotent(client, idem, fresh, idem.batch(
                fresh, [b"z"], sequence=6, transactional=False)),
        }
        assert results == {
            "last-again": (0, 12, 0),
            "fifth-last-again": (0, 4, 0),
            "too-old": OUT_OF_ORDER_SEQUENCE_NUMBER,
            "gap": OUT_OF_ORDER_SEQUENCE_NUMBER,
            "first-not-0": (0, 0, 0),
            "after-it-gap": OUT_OF_ORDER_SEQUENCE_NUMBER,
            "after-it-next": (0, 1, 0),
        }, results
        # After the refusals the next sequence still follows on.
        nxt = idem.batch(tp, [b"next"], sequence=14, transactional=False)
        assert produce_idempotent(client, idem, tp, nxt) == (0, 14, 0)
        assert list_offsets(client, tp, read_committed=False) == 15
        assert list_offsets(client, fresh, read_committed=False) == 2
    finally:
        client.close()
