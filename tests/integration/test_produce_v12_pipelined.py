"""Produce v12 (transactions v2) requests pipelined on one connection, on the raw wire
(and Produce v13, topics by id).

A Java producer sends up to five requests to a broker without waiting for the
answers. Kafka serves a connection's requests one at a time; txbroker runs them at
once, so while the first batch of a partition waits for the coordinator to add the
partition to the transaction, the producer's next batches for that partition must wait
behind it (broker/handlers/produce.py, ``_take_turns``): each is appended once, in
sequence order, at consecutive offsets. Without that, a later batch is answered
CONCURRENT_TRANSACTIONS or OUT_OF_ORDER_SEQUENCE_NUMBER, or lands first.
"""

from __future__ import annotations

import datetime
import threading
import time
import uuid

import pytest
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.messages import build, decode_response, encode_request, request_module
from txbroker.protocol.records import iter_batches

from tests.helpers import wait_until

from .txn_util import TXN_CONFIG, RawTxn, unique
from .wire_util import (
    FETCH,
    METADATA,
    PRODUCE,
    batch,
    connect,
    fetch_partition,
    fetch_request,
    metadata_request,
    partition_response,
    produce_request,
)

PRODUCE_V2, END_TXN_V2 = 12, 5
PIPELINED = 4
NONE = 0


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    return dict(TXN_CONFIG)


def _frames(txn: RawTxn, tp: tuple[str, int], values: list[bytes]) -> list[bytes]:
    """One Produce v12 frame per value, each a batch of the next sequence."""
    client = txn.client
    frames = []
    for value in values:
        client.correlation_id += 1
        request = produce_request({tp[0]: {tp[1]: txn.batch(tp, [value])}},
                                  transactional_id=txn.transactional_id, version=PRODUCE_V2)
        frames.append(encode_request(PRODUCE, PRODUCE_V2, client.correlation_id, "raw",
                                     request))
    return frames


def _answers(txn: RawTxn, tp: tuple[str, int], n: int) -> list[tuple[int, int]]:
    """The last ``n`` requests' answers, [(error code, base offset)] in request order."""
    answers = []
    for cid in range(txn.client.correlation_id - n + 1, txn.client.correlation_id + 1):
        frame = txn.client.recv_frame()
        assert frame is not None, "the broker closed the connection"
        got, response = decode_response(PRODUCE, PRODUCE_V2, frame)
        assert got == cid, "answers out of request order"
        p = partition_response(response, *tp)
        answers.append((int(p.error_code), p.base_offset))
    return answers


def _pipeline(txn: RawTxn, tp: tuple[str, int], values: list[bytes]) -> list[tuple[int, int]]:
    """Send the frames back to back, then read the answers."""
    for frame in _frames(txn, tp, values):
        txn.client.send_frame(frame)
    return _answers(txn, tp, len(values))


def _data_batches(txn: RawTxn, tp: tuple[str, int]) -> list[tuple[int, int, int]]:
    """(base offset, producer epoch, base sequence) of the data batches in ``tp``."""
    r = txn.client.request(FETCH, 12, fetch_request({tp[0]: {tp[1]: 0}}))
    data = fetch_partition(r, *tp).records or b""
    return [(h.base_offset, h.producer_epoch, h.base_sequence)
            for _, h in iter_batches(data) if not h.is_control]


def _assert_appended_in_order(txn: RawTxn, tp, answers, first_offset: int) -> None:
    offsets = list(range(first_offset, first_offset + PIPELINED))
    assert answers == [(NONE, o) for o in offsets], answers
    mine = [b for b in _data_batches(txn, tp) if b[1] == txn.epoch]
    assert mine == [(o, txn.epoch, seq) for seq, o in enumerate(offsets)], mine


def test_pipelined_produce_to_a_new_partition_of_an_open_transaction(txbroker):
    """The transaction is open in partition 0; four requests for partition 1 go out
    back to back: the first adds partition 1 (a __transaction_state write), the others
    wait for it."""
    topic = unique("pipelined-open")
    txbroker.create_topic(topic, 2)
    tp0, tp1 = (topic, 0), (topic, 1)
    txn = RawTxn(connect(txbroker), unique("pipelined"))
    assert txn.init().error_code == NONE
    assert txn.produce(tp0, txn.batch(tp0, [b"first"]), version=PRODUCE_V2) == (NONE, 0)
    answers = _pipeline(txn, tp1, [b"v%d" % i for i in range(PIPELINED)])
    _assert_appended_in_order(txn, tp1, answers, 0)
    assert txn.end(True, version=END_TXN_V2) == NONE


def test_pipelined_produce_overtaking_at_the_previous_commits_completion(txbroker):
    """The race 2d55032 closed, made deterministic. The next transaction's first
    request (sequence 0) waits in the coordinator for the previous commit to complete
    (its CompleteCommit is held back: before_complete=delay:200). The broker's loop is
    then blocked past that delay while the producer's next three requests arrive, so
    that when it runs again it reads them (socket events come before timers in an
    asyncio loop iteration) before the waiting request resumes: the second request
    finds the transaction complete, adds the partition itself and, without its turn,
    would be appended (or refused OUT_OF_ORDER_SEQUENCE_NUMBER) before the first."""
    topic = unique("pipelined-next")
    txbroker.create_topic(topic, 1)
    tp = (topic, 0)
    txn = RawTxn(connect(txbroker), unique("pipelined"))
    assert txn.init().error_code == NONE
    assert txn.produce(tp, txn.batch(tp, [b"t1"]), version=PRODUCE_V2) == (NONE, 0)
    txbroker.faults.arm("before_complete", "delay:200")
    assert txn.end(True, version=END_TXN_V2) == NONE  # answered before the markers
    frames = _frames(txn, tp, [b"t2-%d" % i for i in range(PIPELINED)])
    txn.client.send_frame(frames[0])
    tid = txn.transactional_id

    def first_waits(b) -> bool:
        # (The coordinator's own list of requests waiting for a completion.)
        return "before_complete" in b.faults.fired and tid in b.transactions._completion_waiters

    assert wait_until(lambda: txbroker.call(first_waits)), "the first request is not waiting"
    blocking = threading.Event()

    def block_loop(_b) -> None:
        blocking.set()
        time.sleep(0.4)  # past the 200 ms delay: its timer is due when the loop runs again

    blocker = threading.Thread(target=txbroker.call, args=(block_loop,))
    blocker.start()
    assert blocking.wait(10)
    for frame in frames[1:]:
        txn.client.send_frame(frame)
    blocker.join(30)
    answers = _answers(txn, tp, PIPELINED)
    # Offset 1 is the first transaction's COMMIT marker.
    _assert_appended_in_order(txn, tp, answers, 2)
    assert txn.end(True, version=END_TXN_V2) == NONE


def test_produce_v13_names_topics_by_id(txbroker):
    """Produce v13 (KIP-516, what the Java 4.3 producer sends when it is offered): the
    topic by its id from Metadata; the answer names it by id too. An id no topic has
    is UNKNOWN_TOPIC_ID; the known topic in the same request is written."""
    topic = unique("v13")
    txbroker.create_topic(topic, 1)
    client = connect(txbroker)
    r = client.request(METADATA, 12, metadata_request([topic]))
    [t] = r.topics
    unknown = uuid.uuid4()
    m = request_module(PRODUCE, 13)
    request = build(m.ProduceRequest, transactional_id=None, acks=-1,
                    timeout=datetime.timedelta(seconds=10), topic_data=tuple(
                        build(m.TopicProduceData, topic_id=tid, partition_data=(
                            build(m.PartitionProduceData, index=0, records=batch(2)),))
                        for tid in (t.topic_id, unknown)))
    response = client.request(PRODUCE, 13, request)
    got = {x.topic_id: [(p.index, int(p.error_code), p.base_offset)
                        for p in x.partition_responses] for x in response.responses}
    assert got == {t.topic_id: [(0, NONE, 0)],
                   unknown: [(0, ErrorCode.unknown_topic_id.value, -1)]}
    r = client.request(FETCH, 12, fetch_request({topic: {0: 0}}))
    assert [h.base_offset for _, h in iter_batches(fetch_partition(r, topic, 0).records)] == [0]
