"""Exactly-once consume-transform-produce with real clients (txn_worker.py processes):
the worker is SIGKILLed in the middle of a transaction (records produced, offsets sent
with send_offsets_to_transaction, no EndTxn); a new worker with the same
transactional.id fences and aborts it and finishes the job. Every input record
appears in the output exactly once for read_committed readers, and the group's
committed offsets end at the input's end. While the transaction is open, OffsetFetch
with require_stable (KIP-447) answers UNSTABLE_OFFSET_COMMIT, checked on the wire.
And send_offsets_to_transaction with a consumer's group metadata (TxnOffsetCommit v3:
member id and generation): a stale generation or a departed member is refused.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

import pytest
from txbroker.coordinator.group.coordinator import OFFSETS_TOPIC
from txbroker.protocol.errors import ErrorCode

from .clients import Msg, produce
from .txn_util import (
    TXN_CONFIG,
    TxnProducer,
    Worker,
    log_ends,
    offset_fetch,
    read_all,
    stable_ends,
    unique,
    wait_state,
)
from .wire_util import connect

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 3
PER_PARTITION = 20
UNSTABLE = ErrorCode.unstable_offset_commit.value


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    return dict(TXN_CONFIG)


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_consume_transform_produce_survives_killed_worker(txbroker, client):
    source, sink = unique("eos-in"), unique("eos-out")
    txbroker.create_topic(source, PARTITIONS)
    txbroker.create_topic(sink, PARTITIONS)
    group, tid = unique("eos-group"), unique(f"eos-{client}")
    inputs = {p: [b"v%d-%d" % (p, i) for i in range(PER_PARTITION)] for p in range(PARTITIONS)}
    produce("confluent", txbroker.bootstrap, source,
            [Msg(b"k%d" % i, v, partition=p) for p, vs in inputs.items()
             for i, v in enumerate(vs)])
    in_tps = [(source, p) for p in range(PARTITIONS)]
    out_tps = [(sink, p) for p in range(PARTITIONS)]
    args = [client, txbroker.bootstrap, source, sink, group, tid, "--batch", "7"]
    raw = connect(txbroker)
    workers: list[Worker] = []
    try:
        first = Worker(*args, "--pause-after", "2")
        workers.append(first)
        positions = json.loads(first.wait_for("PAUSED", 60).split(" ", 1)[1])
        info = wait_state(txbroker, tid, ["Ongoing"])
        assert any(t == OFFSETS_TOPIC for t, _p in info["partitions"]), info
        before = first.committed_records()
        assert before == 14  # two transactions of 7

        # KIP-447 between TxnOffsetCommit and EndTxn, on the wire (OffsetFetch v7).
        stable = offset_fetch(raw, group, in_tps, require_stable=True)
        for p in positions:
            assert stable[(source, int(p))][0] == UNSTABLE, stable
        loose = offset_fetch(raw, group, in_tps, require_stable=False)
        assert all(error == 0 for error, _o in loose.values()), loose
        assert sum(max(o, 0) for _e, o in loose.values()) == before  # the pending ones hidden
        # The open transaction's records are written but invisible to read_committed.
        visible = read_all("kafka-python", txbroker.bootstrap, stable_ends(txbroker, out_tps))
        assert sum(len(v) for v in visible.values()) == before
        everything = read_all("kafka-python", txbroker.bootstrap, log_ends(txbroker, out_tps),
                              read_committed=False)
        assert sum(len(v) for v in everything.values()) == before + 7

        first.kill()  # SIGKILL in the middle of the transaction
        second = Worker(*args)
        workers.append(second)
        second.wait_for("DONE", 60)
        assert second.proc.wait(10) == 0
    finally:
        for w in workers:
            w.kill()
    wait_state(txbroker, tid, ["CompleteCommit", "CompleteAbort", "Empty"])
    in_ends = log_ends(txbroker, in_tps)
    assert offset_fetch(raw, group, in_tps, require_stable=True) == {
        tp: (0, end) for tp, end in in_ends.items()}
    raw.close()
    out_ends = log_ends(txbroker, out_tps)
    expected = {(sink, p): [b"out:" + v for v in vs] for p, vs in inputs.items()}
    for reader in ("confluent", "aiokafka"):
        assert read_all(reader, txbroker.bootstrap, out_ends) == expected, reader
    # The killed transaction's records are in the log, aborted.
    raw_out = read_all("kafka-python", txbroker.bootstrap, out_ends, read_committed=False)
    assert sum(len(v) for v in raw_out.values()) == PARTITIONS * PER_PARTITION + 7


def _group_consumer(bootstrap: str, group: str, topic: str):
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False, "session.timeout.ms": 6000,
                  "heartbeat.interval.ms": 200, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    return c


def _poll_until_assigned(consumers, generations: int, timeout: float = 20) -> None:
    """Poll every consumer until each has an assignment and is in a generation at least
    ``generations`` (as its consumer_group_metadata() will carry)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.05)
        if all(c.assignment() for c in consumers) and all(
                _generation(c) >= generations for c in consumers):
            return
    raise AssertionError("the consumers never settled in one generation")


def _generation(consumer) -> int:
    """The generation in confluent-kafka's serialized group metadata (librdkafka's
    "CGMDv2:" then the generation id, a native int32)."""
    data = consumer.consumer_group_metadata()
    assert data[:7] == b"CGMDv2:", data
    return struct.unpack_from("=i", data, 7)[0]


def test_send_offsets_to_transaction_with_a_stale_generation_fails(txbroker):
    """TxnOffsetCommit v3 carries the consumer's member id and generation (KIP-447):
    offsets sent with the group metadata of a generation the group has left behind
    (a rebalance happened) fail with ILLEGAL_GENERATION, abortable; with the member's
    current metadata they commit; once the consumer has left the group its member id
    is UNKNOWN_MEMBER_ID."""
    from confluent_kafka import KafkaError, KafkaException

    topic = unique("eos-generation")
    txbroker.create_topic(topic, 2)
    out = unique("eos-generation-out")
    txbroker.create_topic(out, 1)
    group = unique("eos-generation-group")
    tp = (topic, 0)
    first = _group_consumer(txbroker.bootstrap, group, topic)
    second = None
    producer = TxnProducer("confluent", txbroker.bootstrap, unique("eos-generation-tid"))
    raw = connect(txbroker)
    try:
        _poll_until_assigned([first], 1)
        stale = first.consumer_group_metadata()
        second = _group_consumer(txbroker.bootstrap, group, topic)  # the group rebalances
        _poll_until_assigned([first, second], _generation(first) + 1)
        producer.init()

        producer.begin()
        producer.send(out, b"a")
        with pytest.raises(KafkaException) as excinfo:
            producer.send_offsets({tp: 5}, stale)
        err = excinfo.value.args[0]
        assert err.code() == KafkaError.ILLEGAL_GENERATION, err
        assert err.txn_requires_abort() and not err.fatal(), err
        producer.abort()
        wait_state(txbroker, producer.transactional_id, ["CompleteAbort"])
        assert offset_fetch(raw, group, [tp]) == {tp: (0, -1)}

        producer.begin()
        producer.send(out, b"b")
        producer.send_offsets({tp: 7}, first.consumer_group_metadata())
        producer.commit()
        wait_state(txbroker, producer.transactional_id, ["CompleteCommit"])
        assert offset_fetch(raw, group, [tp]) == {tp: (0, 7)}

        current = first.consumer_group_metadata()
        first.close()  # leaves the group
        first = None
        producer.begin()
        producer.send(out, b"c")
        with pytest.raises(KafkaException) as excinfo:
            producer.send_offsets({tp: 9}, current)
        assert excinfo.value.args[0].code() == KafkaError.UNKNOWN_MEMBER_ID
        producer.abort()
        wait_state(txbroker, producer.transactional_id, ["CompleteAbort"])
        assert offset_fetch(raw, group, [tp]) == {tp: (0, 7)}
    finally:
        producer.close()
        for c in (first, second):
            if c is not None:
                c.close()
        raw.close()
