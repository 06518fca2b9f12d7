"""A producer that goes on after the coordinator aborted its transaction with an epoch
bump, on txbroker and on Apache Kafka. Kafka cannot lose power, but the situation a
producer sees after txbroker's recovery aborted a transaction whose AddPartitionsToTxn
record a power loss took (docs/fault-injection.md) is the one of a transaction that
outlived its transaction.timeout.ms: the coordinator wrote ABORT markers with the next
epoch into the partitions it knew of, and the producer still holds the old epoch and
its sequence numbers. What every request then gets, on the raw wire and per client,
must be Kafka's answer (issue 20, item 2)."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.integration.txn_util import (
    RawTxn,
    TxnProducer,
    read_all,
    step_outcome,
    transactions_in_rounds,
    unique,
)

from .test_exactly_once import wait_aborted
from .test_transactions import wait_stable
from .util import init_txn, wait_txn_state

INVALID_PRODUCER_EPOCH = 47
PRODUCER_FENCED = 90
INVALID_TXN_STATE = 48
OUT_OF_ORDER_SEQUENCE_NUMBER = 45


@pytest.mark.kafka_ci
@pytest.mark.parametrize("version", [3, 7, 9])
def test_old_epoch_produce_after_abort_with_bump_on_the_wire(broker, version):
    """Partitions A and B hold a committed transaction at epoch e. The next transaction
    adds only A and times out: ABORT at epoch e+1 in A, nothing in B, whose producer
    state still says epoch e. Every Produce at epoch e is then refused with
    INVALID_PRODUCER_EPOCH: on A by the partition's epoch check, on B by the
    coordinator's verification (PRODUCER_FENCED, answered as INVALID_PRODUCER_EPOCH), the
    same for a batch that leaves a sequence gap behind (the epoch is checked before any
    sequence number) and one that does not. Never OUT_OF_ORDER_SEQUENCE_NUMBER: that would
    tell the client it may carry on at its epoch, as aiokafka tries to."""
    topic = broker.topic(f"bump-wire-v{version}", partitions=2)
    a, b = (topic, 0), (topic, 1)
    tid = unique(f"tid-bump-wire-v{version}")
    broker.wait_coordinator(tid)
    client = broker.raw()
    try:
        txn = RawTxn(client, tid, timeout_ms=1000)
        assert init_txn(txn).error_code == 0
        assert txn.add_partitions([a, b]) == {a: 0, b: 0}
        for tp in (a, b):
            for i in range(3):
                assert txn.produce(tp, txn.batch(tp, [b"c%d" % i]), version=version)[0] == 0
        assert txn.end(commit=True) == 0
        wait_stable(broker, [a, b], expected=4)
        wait_txn_state(broker, tid)
        assert txn.add_partitions([a]) == {a: 0}
        assert txn.produce(a, txn.batch(a, [b"doomed"]), version=version)[0] == 0
        # 3 committed, their marker, doomed, ABORT (txbroker's high watermark passes a
        # marker once it is fsynced: wait for it, docs/compatibility.md)
        assert wait_stable(broker, [a], expected=6) == {a: 6}
        next_b = txn.sequences[b]
        codes = {
            "A in sequence": txn.produce(a, txn.batch(a, [b"late"]), version=version)[0],
            "B in sequence": txn.produce(
                b, txn.batch(b, [b"late"], sequence=next_b), version=version)[0],
            "B after a gap": txn.produce(
                b, txn.batch(b, [b"late"], sequence=next_b + 1), version=version)[0],
            "add B": txn.add_partitions([b])[b],
            "end abort": txn.end(commit=False),
        }
        assert codes == {"A in sequence": INVALID_PRODUCER_EPOCH,
                         "B in sequence": INVALID_PRODUCER_EPOCH,
                         "B after a gap": INVALID_PRODUCER_EPOCH,
                         "add B": PRODUCER_FENCED, "end abort": PRODUCER_FENCED}, codes
    finally:
        client.close()
    assert read_all("confluent", broker.bootstrap, {a: 6, b: 4}) == {
        a: [b"c0", b"c1", b"c2"], b: [b"c0", b"c1", b"c2"]}



@pytest.mark.kafka_ci
@pytest.mark.parametrize("version", [7, 9])
def test_gap_after_transaction_abortable_on_the_wire(broker, version):
    """The other case of a lost completion: the coordinator never heard of the next
    transaction (its AddPartitionsToTxn record and its records were both lost) and did
    not bump the epoch. The producer's next batch (sequence n) fails verification:
    TRANSACTION_ABORTABLE, INVALID_TXN_STATE below Produce v11. Its abort finds nothing
    open (INVALID_TXN_STATE). A producer that then goes on at the same epoch and skips
    sequence n (aiokafka: it numbered the refused batch and does not bump its epoch,
    KIP-360) is refused with OUT_OF_ORDER_SEQUENCE_NUMBER for as long as it does so; the
    batch at sequence n itself is accepted. Kafka's answers: the loop an aiokafka producer
    that carries on runs into is the client's (docs/compatibility.md)."""
    topic = broker.topic(f"gap-wire-v{version}")
    a = (topic, 0)
    tid = unique(f"tid-gap-wire-v{version}")
    broker.wait_coordinator(tid)
    client = broker.raw()
    try:
        txn = RawTxn(client, tid)
        assert init_txn(txn).error_code == 0
        assert txn.add_partitions([a]) == {a: 0}
        for i in range(3):
            assert txn.produce(a, txn.batch(a, [b"c%d" % i]), version=version)[0] == 0
        assert txn.end(commit=True) == 0
        wait_stable(broker, [a], expected=4)
        wait_txn_state(broker, tid)
        codes = {"produce without add": txn.produce(a, txn.batch(a, [b"lost"]),
                                                    version=version)[0],
                 "abort": txn.end(commit=False),
                 "add": txn.add_partitions([a])[a],
                 "produce after the gap": txn.produce(a, txn.batch(a, [b"next"]),
                                                      version=version)[0],
                 "produce at the gap": txn.produce(a, txn.batch(a, [b"at"], sequence=3),
                                                   version=version)[0],
                 "commit": txn.end(commit=True)}
        assert codes == {"produce without add": INVALID_TXN_STATE, "abort": INVALID_TXN_STATE,
                         "add": 0, "produce after the gap": OUT_OF_ORDER_SEQUENCE_NUMBER,
                         "produce at the gap": 0, "commit": 0}, codes
    finally:
        client.close()
    ends = wait_stable(broker, [a], expected=6)
    assert read_all("confluent", broker.bootstrap, ends) == {a: [b"c0", b"c1", b"c2", b"at"]}

# What each client does when it goes on after the coordinator aborted its transaction
# with an epoch bump (sends to a partition of the transaction and one outside it, then
# commits; then aborts and starts a new transaction at its epoch). Recorded on Apache
# Kafka 4.3.1; txbroker must do the same.
# Each fails its sends with its fatal "fenced" error and refuses everything after it:
# the application must create a new producer (no client loops).
GOES_ON = {
    "confluent": {"sends": "_FENCED (fatal)", "commit": "_FENCED (fatal)",
                  "abort": "_FENCED (fatal)", "next transaction": "_FENCED (fatal)"},
    # Then "Cannot execute transactional method because we are in an error state". Which
    # send fails first (Produce to A: INVALID_PRODUCER_EPOCH, or AddPartitionsToTxn for
    # B: PRODUCER_FENCED) is a race in the client, on both brokers. So is a third
    # outcome, seen on a loaded machine: the sender thread gets A's INVALID_PRODUCER_EPOCH,
    # tries to bump the epoch (InitProducerId: PRODUCER_FENCED, fatal) before the
    # application's send to B, and that send() raises the plain KafkaError of a producer
    # in an error state ("Cannot perform send because at least one previous
    # transactional or idempotent request has failed").
    "kafka-python": {"sends": ("ProducerFencedError", "InvalidProducerEpochError",
                               "KafkaError"),
                     "commit": "KafkaError",
                     "abort": "KafkaError", "next transaction": "KafkaError"},
    # aiokafka moved to FATAL_ERROR: "Invalid state transition" assertions (its commit
    # may still go out first, then it is fenced on the wire: a race in the client)
    "aiokafka": {"sends": "ProducerFenced", "commit": ("ProducerFenced", "AssertionError"),
                 "abort": "AssertionError", "next transaction": "AssertionError"},
}


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_client_goes_on_after_abort_with_bump(broker, client):
    """The client sees its transaction aborted under it (transaction.timeout.ms 1 s)
    and goes on: each step's outcome is the one it has on Kafka, none of the aborted
    transaction's records becomes visible."""
    topic = broker.topic(f"bump-{client}", partitions=2)
    a, b = (topic, 0), (topic, 1)
    producer = TxnProducer(client, broker.bootstrap, unique(f"tid-bump-{client}"),
                           timeout_ms=1000)
    try:
        producer.init()
        producer.begin()
        for p in (0, 1):
            producer.send(topic, b"c%d" % p, partition=p)
        producer.commit()
        producer.begin()
        producer.send(topic, b"doomed", partition=0)
        producer.flush()
        wait_aborted(broker, a)

        def sends() -> None:
            producer.send(topic, b"late-a", partition=0)
            producer.send(topic, b"late-b", partition=1)
            producer.flush()

        def again() -> None:
            producer.begin()
            producer.send(topic, b"again", partition=0)
            producer.flush()
            producer.commit()

        outcome = {"sends": step_outcome(sends), "commit": step_outcome(producer.commit),
                   "abort": step_outcome(producer.abort), "next transaction": step_outcome(again)}
    finally:
        producer.close()
    print(f"\n{broker.name} {client}: {outcome}")
    expected = GOES_ON[client]
    assert outcome.keys() == expected.keys()
    assert all(outcome[k] in (v if isinstance(v, tuple) else (v,)) for k, v in expected.items()), \
        outcome
    ends = wait_stable(broker, [a, b])
    got = read_all("confluent", broker.bootstrap, ends)
    assert b"doomed" not in got.get(a, []) and b"late-a" not in got.get(a, [])
    assert b"late-b" not in got.get(b, [])


# Kafka's Java producer 4.3.1 in the same sequence (tests/jvm/AbortedWithBump.java), as
# recorded on Kafka: step -> (ok, root cause's class). INVALID_PRODUCER_EPOCH is abortable
# for it (KIP-588): its abort bumps the epoch (InitProducerId with its id and epoch,
# KIP-360) and the next transaction commits.
JAVA_GOES_ON = {
    "sends": (False, "org.apache.kafka.common.errors.InvalidProducerEpochException"),
    "commit": (False, "org.apache.kafka.common.errors.InvalidProducerEpochException"),
    "abort": (True, ""),
    "next_transaction": (True, ""),
}


def test_java_producer_goes_on_after_abort_with_bump(broker, jvm_classes):
    """The Java producer in the same situation: its outcome per step, as on Kafka."""
    from tests.differential.jvm import run_java_steps

    topic = broker.topic("bump-java", partitions=2)
    steps = run_java_steps(jvm_classes, "AbortedWithBump", broker.bootstrap, topic,
                           unique("tid-bump-java"))
    outcome = {name: (ok, detail.split(":")[0]) for name, (ok, detail) in steps.items()}
    print(f"\n{broker.name} java: {steps}")
    assert outcome == JAVA_GOES_ON, steps


# KafkaJS 2.2.4 in the same sequence (tests/kafkajs/aborted_with_bump.js), as recorded on
# Kafka: step -> (ok, error name: type). The epoch error fails the sends and the commit;
# KafkaJS then refuses the abort and every later transaction of that producer
# (KafkaJSNonRetriableError, its transaction state machine is stuck in error): the
# application must create a new producer, as with confluent-kafka.
KAFKAJS_GOES_ON = {
    "sends": (False, "KafkaJSProtocolError: INVALID_PRODUCER_EPOCH"),
    "commit": (False, "KafkaJSProtocolError: INVALID_PRODUCER_EPOCH"),
    "abort": (False, "KafkaJSNonRetriableError:"),
    "next_transaction": (False, "KafkaJSNonRetriableError:"),
}


def test_kafkajs_goes_on_after_abort_with_bump(broker):
    """KafkaJS in the same situation: its outcome per step, as on Kafka."""
    from .test_kafkajs import KAFKAJS, kafkajs_unavailable

    why = kafkajs_unavailable()
    if why:
        pytest.skip(why)
    topic = broker.topic("bump-kafkajs", partitions=2)
    node = subprocess.Popen(
        ["node", str(KAFKAJS / "aborted_with_bump.js"), broker.bootstrap, topic,
         unique("tid-bump-kafkajs")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert node.stdout.readline().strip() == "SENT"
        wait_aborted(broker, (topic, 0))
        out, _ = node.communicate("go\n", timeout=180)
    finally:
        if node.poll() is None:
            node.kill()
    assert "DONE" in out, out
    steps = {m.group(1): (m.group(2) == "OK", m.group(3).split(" | ")[0].strip())
             for m in re.finditer(r"STEP (\S+) (OK|FAIL) (.*)", out)}
    print(f"\n{broker.name} kafkajs: {steps}")
    assert steps == KAFKAJS_GOES_ON, steps


# What each client does after one of its batches was refused without an epoch bump (a
# record over the topic's max.message.bytes: the batch is not appended, the partition
# expects its sequence number again), then aborts and goes on with new transactions.
# Recorded on Apache Kafka 4.3.1; txbroker must do the same. ("AssertionError" for
# confluent-kafka: TxnProducer.flush found a failed delivery report.)
AFTER_REFUSED_BATCH = {
    # librdkafka: the gap fails the transaction ("skipped sequence numbers, requires
    # epoch bump"); its abort bumps the epoch (KIP-360) and it carries on.
    "confluent": {"refused": "AssertionError", "abort": "ok", "round 0": "AssertionError",
                  "abort 0": "ok", "round 1": "ok", "round 2": "ok"},
    # kafka-python: OUT_OF_ORDER_SEQUENCE_NUMBER is fatal for it; every later call fails.
    "kafka-python": {"refused": "MessageSizeTooLargeError", "abort": "ok",
                     "round 0": "OutOfOrderSequenceNumberError", "abort 0": "KafkaError",
                     "round 1": "KafkaError", "abort 1": "KafkaError", "round 2": "KafkaError",
                     "abort 2": "KafkaError"},
    # aiokafka 0.14: never bumps its epoch nor renumbers; its aborts succeed and every
    # later transaction fails with OUT_OF_ORDER_SEQUENCE_NUMBER, forever (the loop of
    # issue 20), on Kafka as on txbroker: docs/compatibility.md's workaround.
    "aiokafka": {"refused": "MessageSizeTooLargeError", "abort": "ok",
                 "round 0": "OutOfOrderSequenceNumber", "abort 0": "ok",
                 "round 1": "OutOfOrderSequenceNumber", "abort 1": "ok",
                 "round 2": "OutOfOrderSequenceNumber", "abort 2": "ok"},
}


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka"])
def test_client_after_a_refused_batch(broker, client):
    """The sequence gap of the lost-completion case without a power loss: a refused
    batch the client numbered. Kafka and txbroker answer its later batches alike."""
    topic = broker.topic(f"gap-{client}", configs={"max.message.bytes": "2000"})
    producer = TxnProducer(client, broker.bootstrap, unique(f"tid-gap-{client}"))
    try:
        producer.init()
        producer.begin()
        producer.send(topic, b"c0", partition=0)
        producer.commit()

        def refused() -> None:
            producer.begin()
            producer.send(topic, b"x" * 5000, partition=0)
            producer.flush()

        outcome = {"refused": step_outcome(refused), "abort": step_outcome(producer.abort)}
        transactions_in_rounds(producer, topic, outcome)
    finally:
        producer.close()
    print(f"\n{broker.name} {client}: {outcome}")
    assert outcome == AFTER_REFUSED_BATCH[client], outcome
