"""Broker crashes (exit 137, as SIGKILL) at each fault point of a transactions v2
commit (KIP-890 part 2), then a restart: a raw-wire v2 producer (partitions added by
Produce v12, offsets by TxnOffsetCommit v5, EndTxn v5) retries its EndTxn with the
epoch it had, as a client whose answer was lost does, and gets the bumped epoch; the
transaction is committed in every partition (recovery writes the markers with the
bumped epoch); the producer carries on at that epoch, and a late duplicate of the
crashed transaction's batch is refused. The v1 counterpart is test_transactions_crash.py.
"""

from __future__ import annotations

import time

import pytest
from txbroker.coordinator.group.coordinator import OFFSETS_TOPIC
from txbroker.coordinator.internal_topic import partition_for

from tests.differential.util import init_txn
from tests.helpers import BrokerProcess, RawClient

from .test_transactions_crash import committed_offsets, create_topics, markers_on_disk
from .txn_util import TXN_CONFIG, RawTxn, list_offsets, read_all, retry_retriable, unique

PRODUCE_V2, END_TXN_V2, TXN_OFFSET_COMMIT_V2 = 12, 5, 5
INVALID_PRODUCER_EPOCH = 47

CASES = [
    ("after_prepare_durable", "crash"),
    ("before_markers", "crash"),
    ("after_first_marker", "crash"),
    ("before_complete", "crash"),
    ("after_first_marker", "power_loss"),
    ("drop_end_txn_response", "crash"),
    ("drop_end_txn_response", "drop"),
]


@pytest.mark.parametrize(("point", "action"), CASES, ids=[f"{p}-{a}" for p, a in CASES])
def test_crash_in_v2_end_txn_then_restart(tmp_path, point, action):
    overrides = dict(TXN_CONFIG)
    overrides["txbroker.fault.points"] = f"{point}={action}"
    broker = BrokerProcess(str(tmp_path / "data"), overrides)
    broker.start()
    client = None
    try:
        data, source = unique("v2crash"), unique("v2crash-in")
        create_topics(broker.bootstrap, data, source)
        tps = [(data, 0), (data, 1)]
        in_tps = [(source, 0), (source, 1)]
        group, tid = unique("v2crash-group"), unique("v2crash")
        offsets_tp = (OFFSETS_TOPIC, partition_for(group, int(TXN_CONFIG["offsets.topic.num.partitions"])))
        client = RawClient(broker.host, broker.port)
        txn = RawTxn(client, tid)
        assert init_txn(txn).error_code == 0
        pid, epoch = txn.producer_id, txn.epoch
        batches = {tp: txn.batch(tp, [b"t1-%d" % tp[1]]) for tp in tps}
        for tp, batch in batches.items():
            assert retry_retriable(lambda tp=tp, b=batch: txn.produce(tp, b, version=PRODUCE_V2))[0] == 0
        assert txn.txn_offset_commit(group, dict.fromkeys(in_tps, 7),
                                     version=TXN_OFFSET_COMMIT_V2) == dict.fromkeys(in_tps, 0)
        try:
            answered = txn.end(True, version=END_TXN_V2)
        except (OSError, AssertionError):
            answered = None  # the broker died (or dropped the connection) first
        client.close()
        if action != "drop":
            assert broker.wait(20) == 137, broker.log_text()[-3000:]
            broker.overrides.pop("txbroker.fault.points")
            broker.start()
        else:
            assert answered is None

        # The retry of a client that did not see (or trust) the answer: the old epoch.
        client = RawClient(broker.host, broker.port)
        txn = RawTxn(client, tid)
        txn.producer_id, txn.epoch = pid, epoch
        assert retry_retriable(lambda: txn.end(True, version=END_TXN_V2)) == 0
        assert (txn.producer_id, txn.epoch) == (pid, epoch + 1)
        for tp in [*tps, offsets_tp]:
            deadline = time.monotonic() + 10
            while not markers_on_disk(broker.data_dir, tp) and time.monotonic() < deadline:
                time.sleep(0.05)
            marked = markers_on_disk(broker.data_dir, tp)
            assert marked and set(marked) == {"COMMIT"}, (tp, marked)
        assert committed_offsets(broker.host, broker.port, group, in_tps) == {
            tp: (0, 7) for tp in in_tps}

        # The producer carries on at the bumped epoch; the crashed transaction's batch,
        # retried late, is refused (it would otherwise join this transaction).
        for tp in tps:
            assert retry_retriable(lambda tp=tp: txn.produce(tp, txn.batch(tp, [b"t2"]),
                                                    version=PRODUCE_V2))[0] == 0
            assert txn.produce(tp, batches[tp], version=PRODUCE_V2)[0] == INVALID_PRODUCER_EPOCH
        assert txn.txn_offset_commit(group, dict.fromkeys(in_tps, 9),
                                     version=TXN_OFFSET_COMMIT_V2) == dict.fromkeys(in_tps, 0)
        assert retry_retriable(lambda: txn.end(True, version=END_TXN_V2)) == 0
        assert txn.epoch == epoch + 2
        deadline = time.monotonic() + 10
        while True:
            ends = {tp: list_offsets(client, tp, read_committed=False) for tp in tps}
            got = read_all("confluent", broker.bootstrap, ends)
            if all(len(got.get(tp, [])) == 2 for tp in tps) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert {tp: got.get(tp, []) for tp in tps} == {
            tp: [b"t1-%d" % tp[1], b"t2"] for tp in tps}
        assert committed_offsets(broker.host, broker.port, group, in_tps) == {
            tp: (0, 9) for tp in in_tps}
        assert broker.terminate() == 0
    finally:
        if client is not None:
            client.close()
        broker.kill()
