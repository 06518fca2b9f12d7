"""A transactions v2 producer across producer-epoch exhaustion, with an expiry and a
broker crash at the boundary (issue 25, item 1), black box on the raw wire.

With transactions v2 every EndTxn bumps the epoch, so a producer reaches Short.MaxValue
- 1 (32766) after 32,766 transactions: the boundary is a normal event. The test starts
the producer's transactional id near it (its ``__transaction_state`` record written at
epoch 32764 before the broker loads it, with a producer id from the broker's own
allocator), then: InitProducerId (32765), a committed transaction (EndTxn v5 answers
32766), a transaction at 32766 that the coordinator expires, a crash once its
PrepareAbort is durable and before any marker, a restart. Kafka 4.3.1 aborts at 32767
(Short.MaxValue, above the data's epoch) and continues the id under the next producer
id at epoch 0; the producer's late EndTxn (abort, the epoch it held) is a retry of
that, answered with the next id at 0, never with the used-up 32767; the producer
carries on under the new id, and the partition refuses its old epoch.
"""

from __future__ import annotations

import time

import pytest
from txbroker.coordinator.internal_topic import TXN_TOPIC, append_records, partition_log_for
from txbroker.coordinator.transaction.records import TxnLogValue, encode_key, encode_value

from tests.differential.util import init_txn
from tests.helpers import RawClient

from .test_transactions_crash import markers_on_disk
from .txn_util import (
    TXN_CONFIG,
    RawTxn,
    list_offsets,
    read_all,
    retry_retriable,
    unique,
    wait_state,
)

PRODUCE_V2, END_TXN_V2 = 12, 5
LAST, MAX = 32766, 32767


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    return dict(TXN_CONFIG)


def _seed(txbroker, tid: str, epoch: int) -> int:
    """Write the id's record (Empty, a fresh producer id at ``epoch``) into its
    ``__transaction_state`` partition, then restart the broker so that the coordinator
    loads it. Returns the producer id."""

    def write(b) -> int:
        b.transactions.ensure_topic()
        pid = b.producer_ids.next_id()  # the broker's allocator never hands it out again
        record = TxnLogValue(producer_id=pid, previous_producer_id=pid, next_producer_id=-1,
                             producer_epoch=epoch, last_producer_epoch=-1, timeout_ms=60000,
                             state="Empty", partitions=frozenset(), txn_start_ms=-1,
                             last_update_ms=int(time.time() * 1000))
        plog = partition_log_for(b.logs, TXN_TOPIC, tid)
        append_records(plog, [(encode_key(tid), encode_value(record))])
        return pid

    pid = txbroker.call(write)
    txbroker.restart()
    return pid


def _read_committed(txbroker, client: RawClient, tp, expected: int) -> list[bytes]:
    deadline = time.monotonic() + 10
    while True:
        end = list_offsets(client, tp, read_committed=True)
        got = read_all("confluent", txbroker.bootstrap, {tp: end}).get(tp, [])
        if len(got) >= expected or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_v2_producer_across_epoch_exhaustion_with_expiry_and_crash(txbroker):
    topic, tid = unique("exhaust"), unique("exhaust")
    txbroker.create_topic(topic, 1)
    tp = (topic, 0)
    pid = _seed(txbroker, tid, LAST - 2)
    client = RawClient(txbroker.host, txbroker.port)
    try:
        txn = RawTxn(client, tid)
        assert init_txn(txn).error_code == 0
        assert (txn.producer_id, txn.epoch) == (pid, LAST - 1)

        # A committed transaction: EndTxn v5 answers the bumped epoch, the last one.
        assert retry_retriable(lambda: txn.produce(tp, txn.batch(tp, [b"committed"]),
                                          version=PRODUCE_V2))[0] == 0
        assert retry_retriable(lambda: txn.end(True, version=END_TXN_V2)) == 0
        assert (txn.producer_id, txn.epoch) == (pid, LAST)

        # The next one, at 32766, is expired by the coordinator, which crashes once the
        # abort's PrepareAbort is durable, before any marker.
        doomed = txn.batch(tp, [b"doomed"])
        assert retry_retriable(lambda: txn.produce(tp, doomed, version=PRODUCE_V2))[0] == 0
        txbroker.faults.arm("before_markers", "crash")
        assert txbroker.expire_transactions(tid, wait=False) == [tid]
        txbroker.wait_crashed()
        client.close()
        txbroker.restart()

        # The producer ends its transaction late, with the epoch it held: a retry of the
        # abort (recovery wrote its ABORT marker at 32767 and rotated the id), answered
        # with the next producer id at epoch 0, never with the used-up 32767.
        client = RawClient(txbroker.host, txbroker.port)
        txn.client = client
        assert retry_retriable(lambda: txn.end(False, version=END_TXN_V2)) == 0
        next_pid = txn.producer_id
        assert (next_pid != pid, txn.epoch) == (True, 0), (pid, next_pid, txn.epoch)
        info = wait_state(txbroker, tid, ["CompleteAbort"])
        assert (info["producer_id"], info["producer_epoch"]) == (next_pid, 0), info
        assert (info["previous_producer_id"], info["last_producer_epoch"]) == (pid, LAST), info
        assert markers_on_disk(txbroker.config.data_dir, tp) == ["COMMIT", "ABORT"]

        # It carries on under the new id; a late batch of its old id and epoch is refused.
        old = RawTxn(client, tid)
        old.producer_id, old.epoch = pid, LAST
        assert old.produce(tp, old.batch(tp, [b"late"], sequence=1), version=PRODUCE_V2)[0] != 0
        assert retry_retriable(lambda: txn.produce(tp, txn.batch(tp, [b"after"]),
                                          version=PRODUCE_V2))[0] == 0
        assert retry_retriable(lambda: txn.end(True, version=END_TXN_V2)) == 0
        assert (txn.producer_id, txn.epoch) == (next_pid, 1)
        info = wait_state(txbroker, tid, ["CompleteCommit"])
        assert (info["producer_id"], info["producer_epoch"]) == (next_pid, 1)

        # Nothing hangs: read_committed sees the committed data, up to the log end.
        assert _read_committed(txbroker, client, tp, 2) == [b"committed", b"after"]
        assert txbroker.last_stable_offset(topic) == txbroker.high_watermark(topic)
        assert markers_on_disk(txbroker.config.data_dir, tp) == ["COMMIT", "ABORT", "COMMIT"]
    finally:
        client.close()
