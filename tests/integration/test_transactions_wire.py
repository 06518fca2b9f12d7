"""Transactions on the raw wire (kio messages over RawClient, batches from
protocol.records.build_batch): duplicates and sequence gaps, transactional batches
outside the transaction or without a transactional id, EndTxn retries, timeouts out
of range, CONCURRENT_TRANSACTIONS while a commit's markers are delayed, KIP-447
UNSTABLE_OFFSET_COMMIT; and KIP-664: DescribeTransactions, ListTransactions,
DescribeProducers and the ``txbroker transactions`` command line.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from txbroker.coordinator.internal_topic import TXN_TOPIC, partition_log_for
from txbroker.protocol.errors import ErrorCode
from txbroker.protocol.records import decode_records, iter_batches
from txbroker.tools import transactions as transactions_cli

from txbroker.cli import main as cli_main

from .txn_util import (
    TXN_CONFIG,
    RawTxn,
    describe_producers,
    describe_transactions,
    fail_appends,
    list_offsets,
    list_transactions,
    offset_fetch,
    read_all,
    unique,
    wait_state,
    write_txn_marker,
)
from .wire_util import (
    FETCH,
    connect,
    fetch_partition,
    fetch_request,
    log_end_offset,
)

ROOT = Path(__file__).resolve().parents[2]
_E = ErrorCode
NONE = 0


@pytest.fixture
def txbroker_config() -> dict[str, str]:
    return dict(TXN_CONFIG, **{"transaction.max.timeout.ms": "120000"})


def committed_values(client, tp, start: int = 0) -> list[bytes]:
    """Values a read_committed Fetch returns from ``start``, aborted transactions and
    control batches dropped (what a client does with the aborted list)."""
    r = client.request(FETCH, 12, fetch_request({tp[0]: {tp[1]: start}}, isolation_level=1))
    part = fetch_partition(r, *tp)
    data = part.records or b""
    aborted = sorted((a.first_offset, a.producer_id) for a in (part.aborted_transactions or ()))
    skipping: set[int] = set()
    out = []
    for pos, h in iter_batches(data):
        for first, pid in aborted:
            if first <= h.last_offset and pid == h.producer_id:
                skipping.add(pid)
        if h.is_control:
            skipping.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in skipping:
            continue
        out.extend(r.value for r in decode_records(data, pos))
    return out


# --- 7. idempotence and transactional produce ------------------------------------------------


def test_duplicates_gaps_and_partitions_outside_the_transaction(txbroker):
    topic = unique("wire-txn")
    txbroker.create_topic(topic, 3)
    tp0, tp1, tp2 = (topic, 0), (topic, 1), (topic, 2)
    client = connect(txbroker)
    txn = RawTxn(client, unique("wire-tid"))
    assert txn.init().error_code == NONE
    assert txn.add_partitions([tp0, tp1]) == {tp0: NONE, tp1: NONE}

    first = txn.batch(tp0, [b"a", b"b", b"c"])  # sequences 0-2
    assert txn.produce(tp0, first) == (NONE, 0)
    # Someone else writes in between (a plain batch).
    plain = RawTxn(client, None)
    assert plain.produce(tp0, plain.batch(tp0, [b"plain"], sequence=-1, transactional=False),
                         transactional_id=None) == (NONE, 3)
    # A retry of the first batch: its original offset, nothing appended.
    assert txn.produce(tp0, first) == (NONE, 0)
    assert log_end_offset(txbroker, topic, 0) == 4
    second = txn.batch(tp0, [b"d"])  # sequence 3
    assert txn.produce(tp0, second) == (NONE, 4)
    assert txn.produce(tp0, first) == (NONE, 0)  # still remembered (last five batches)
    # A gap in the sequence.
    gap = txn.batch(tp0, [b"x"], sequence=7)
    assert txn.produce(tp0, gap)[0] == _E.out_of_order_sequence_number.value
    # A partition not added to the transaction.
    outside = txn.batch(tp2, [b"y"])
    assert txn.produce(tp2, outside)[0] == _E.invalid_txn_state.value
    # Transactional records without a transactional id.
    anonymous = txn.batch(tp1, [b"z"], sequence=0)
    assert txn.produce(tp1, anonymous, transactional_id=None)[0] == \
        _E.transactional_id_authorization_failed.value
    assert log_end_offset(txbroker, topic, 0) == 5
    assert log_end_offset(txbroker, topic, 1) == 0
    assert log_end_offset(txbroker, topic, 2) == 0
    assert txn.produce(tp1, txn.batch(tp1, [b"e"])) == (NONE, 0)

    assert txn.end(commit=True) == NONE
    wait_state(txbroker, txn.transactional_id, ["CompleteCommit"])
    assert txn.end(commit=True) == NONE  # a retry after it completed
    assert txn.end(commit=False) == _E.invalid_txn_state.value
    assert committed_values(client, tp0) == [b"a", b"b", b"c", b"plain", b"d"]
    assert committed_values(client, tp1) == [b"e"]
    # The next transaction goes on with the sequences; a stale one is a gap again.
    assert txn.add_partitions([tp0]) == {tp0: NONE}
    assert txn.produce(tp0, txn.batch(tp0, [b"f"])) == (NONE, 6)
    assert txn.produce(tp0, txn.batch(tp0, [b"g"], sequence=0))[0] == \
        _E.out_of_order_sequence_number.value
    assert txn.end(commit=False) == NONE
    wait_state(txbroker, txn.transactional_id, ["CompleteAbort"])
    assert committed_values(client, tp0) == [b"a", b"b", b"c", b"plain", b"d"]
    client.close()


def test_idempotent_producer_duplicates_and_gaps(txbroker):
    topic = unique("wire-idem")
    txbroker.create_topic(topic, 1)
    tp = (topic, 0)
    client = connect(txbroker)
    idem = RawTxn(client, None)
    r = idem.init()
    assert r.error_code == NONE and r.producer_id >= 0 and r.producer_epoch == 0
    one = idem.batch(tp, [b"1", b"2"], transactional=False)
    assert idem.produce(tp, one, transactional_id=None) == (NONE, 0)
    assert idem.produce(tp, one, transactional_id=None) == (NONE, 0)
    two = idem.batch(tp, [b"3"], transactional=False)
    assert idem.produce(tp, two, transactional_id=None) == (NONE, 2)
    gap = idem.batch(tp, [b"4"], sequence=9, transactional=False)
    assert idem.produce(tp, gap, transactional_id=None)[0] == \
        _E.out_of_order_sequence_number.value
    assert log_end_offset(txbroker, topic) == 3
    client.close()


def test_debug_log_traces_each_coordinator_answer(txbroker, caplog):
    """At DEBUG the transaction coordinator logs each request with its answer and the
    state it left (docs/operations.md); the request's text is formatted only then."""
    topic = unique("wire-debug")
    txbroker.create_topic(topic, 1)
    tp = (topic, 0)
    client = connect(txbroker)
    tid = unique("wire-debug-tid")
    txn = RawTxn(client, tid)
    with caplog.at_level(logging.DEBUG, logger="txbroker"):
        txn.init()
        assert txn.add_partitions([tp])[tp] == NONE
        assert txn.end(True) == NONE
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith(tid + " ")]
    assert any(" InitProducerId v" in m and " -> " in m for m in lines), lines
    assert any(f" AddPartitionsToTxn v3 producer {txn.producer_id} epoch 0 [{tp!r}] -> " in m
               for m in lines), lines
    assert any(" EndTxn v3 " in m and " commit -> " in m for m in lines), lines
    client.close()


def test_init_producer_id_transaction_timeout_above_the_maximum(txbroker):
    client = connect(txbroker)
    for version in (0, 4):
        txn = RawTxn(client, unique("wire-timeout"))
        r = txn.init(timeout_ms=120001, version=version, expect_ok=False)
        assert r.error_code == _E.invalid_transaction_timeout.value
        assert txn.init(timeout_ms=120000, version=version).error_code == NONE
    client.close()


def test_concurrent_transactions_while_markers_are_delayed(txbroker):
    """EndTxn is answered once PrepareCommit is durable; while its markers are delayed
    (before_markers=delay:3000) the transaction is still in PrepareCommit: another
    AddPartitionsToTxn or AddOffsetsToTxn waits up to a second for the completion and then
    gets CONCURRENT_TRANSACTIONS, InitProducerId and EndTxn get it at once, and
    read_committed readers stay at the LSO; a transactional Produce to a partition outside
    the transaction gets NOT_ENOUGH_REPLICAS (Kafka's substitute, which older clients
    retry). Afterwards everything proceeds."""
    topic = unique("wire-concurrent")
    txbroker.create_topic(topic, 3)
    tp0, tp1, tp2 = (topic, 0), (topic, 1), (topic, 2)
    client = connect(txbroker)
    txn = RawTxn(client, unique("wire-concurrent-tid"))
    assert txn.init().error_code == NONE
    assert txn.add_partitions([tp0, tp1]) == {tp0: NONE, tp1: NONE}
    for tp in (tp0, tp1):
        assert txn.produce(tp, txn.batch(tp, [b"v"])) == (NONE, 0)
    txbroker.faults.arm("before_markers", "delay:3000")
    started = time.monotonic()
    assert txn.end(commit=True) == NONE
    assert time.monotonic() - started < 1.0, "EndTxn waited for the markers"
    concurrent = _E.concurrent_transactions.value
    waited = time.monotonic()
    assert txn.add_partitions([tp0]) == {tp0: concurrent}
    assert time.monotonic() - waited >= 0.9, "AddPartitionsToTxn did not wait for completion"
    assert txn.add_offsets(unique("g")) == concurrent
    assert txn.end(commit=True) == concurrent
    assert txn.init(kip360=True, expect_ok=False).error_code == concurrent
    assert txn.init(expect_ok=False).error_code == concurrent  # a new producer instance
    for version in (3, 9):
        assert txn.produce(tp2, txn.batch(tp2, [b"w"], sequence=0), version=version) == \
            (_E.not_enough_replicas.value, -1)
    assert log_end_offset(txbroker, topic, 2) == 0
    assert list_offsets(client, tp0, read_committed=True) == 0
    assert list_offsets(client, tp0, read_committed=False) == 1
    assert committed_values(client, tp0) == []
    assert txbroker.faults.fired == ["before_markers"]
    wait_state(txbroker, txn.transactional_id, ["CompleteCommit"], timeout=10)
    assert time.monotonic() - started >= 2.9
    assert list_offsets(client, tp0, read_committed=True) == 2
    assert committed_values(client, tp1) == [b"v"]
    epoch = txn.epoch
    assert txn.init(kip360=True).error_code == NONE and txn.epoch == epoch + 1
    assert txn.add_partitions([tp0]) == {tp0: NONE}
    client.close()


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_v2_end_txn_while_the_previous_markers_are_delayed(txbroker, commit):
    """Transactions v2: EndTxn v5 is answered with the bumped epoch before the markers;
    the producer's next EndTxn at that epoch (its next transaction's, sent before any
    of its batches got in: the Java 4.3 client can do this) comes while the markers are
    held back (before_markers=delay:1500). As Kafka 4 (KAFKA-18464), it is told
    CONCURRENT_TRANSACTIONS, not PRODUCER_FENCED (which was fatal to the producer),
    and once the commit completed the retry is answered."""
    topic = unique("wire-v2-concurrent")
    txbroker.create_topic(topic, 1)
    tp = (topic, 0)
    txn = RawTxn(connect(txbroker), unique("wire-v2-concurrent-tid"))
    assert txn.init().error_code == NONE
    assert txn.produce(tp, txn.batch(tp, [b"v"]), version=12) == (NONE, 0)
    txbroker.faults.arm("before_markers", "delay:1500")
    epoch = txn.epoch
    assert txn.end(commit=True, version=5) == NONE
    assert txn.epoch == epoch + 1
    assert txn.end(commit=commit, version=5) == _E.concurrent_transactions.value
    wait_state(txbroker, txn.transactional_id, ["CompleteCommit"])
    # Nothing was added at the new epoch: a commit is INVALID_TXN_STATE (as on Kafka),
    # an abort with nothing open is fine in v2 and bumps again.
    expected = _E.invalid_txn_state.value if commit else NONE
    assert txn.end(commit=commit, version=5) == expected


def test_produce_while_the_coordinator_loads_gets_not_enough_replicas(txbroker):
    """The first transactional batch to a partition is verified with the transaction
    coordinator (KIP-890 part 1). While __transaction_state is loading (after a
    restart) the coordinator says COORDINATOR_LOAD_IN_PROGRESS, which clients do not
    retry on Produce: the broker answers NOT_ENOUGH_REPLICAS, as Kafka does, and the
    retried batch is accepted once the coordinator is loaded."""
    topic = unique("wire-loading")
    txbroker.create_topic(topic, 1)
    tp = (topic, 0)
    client = connect(txbroker)
    txn = RawTxn(client, unique("wire-loading-tid"))
    assert txn.init().error_code == NONE
    assert txn.add_partitions([tp]) == {tp: NONE}
    batch = txn.batch(tp, [b"v"])

    def set_loaded(b, loaded):
        # The id's __transaction_state partition back to loading (and out again).
        state = b.transactions.state
        partition = state._partition_of(txn.transactional_id)
        if loaded:
            state._loading.discard(partition)
        else:
            state._loading.add(partition)
        state._loaded = loaded

    txbroker.call(set_loaded, False)
    try:
        assert txn.produce(tp, batch) == (_E.not_enough_replicas.value, -1)
        assert txn.produce(tp, batch, version=3) == (_E.not_enough_replicas.value, -1)
    finally:
        txbroker.call(set_loaded, True)
    assert txn.produce(tp, batch) == (NONE, 0)
    assert txn.end(commit=True) == NONE
    wait_state(txbroker, txn.transactional_id, ["CompleteCommit"])
    assert committed_values(client, tp) == [b"v"]
    client.close()


def test_disk_error_writing_a_marker_is_retried_until_the_transaction_completes(
        txbroker, caplog):
    """An OSError from a marker write (ENOSPC) is a storage error of that partition:
    logged once, and that partition's marker is written again after a back-off until it
    succeeds (the others are not written twice); the transaction then completes (it used to stay in PrepareCommit until a restart,
    the producer getting CONCURRENT_TRANSACTIONS)."""
    topic = unique("wire-enospc")
    txbroker.create_topic(topic, 2)
    tp0, tp1 = (topic, 0), (topic, 1)
    client = connect(txbroker)
    txn = RawTxn(client, unique("wire-enospc-tid"))
    assert txn.init().error_code == NONE
    assert txn.add_partitions([tp0, tp1]) == {tp0: NONE, tp1: NONE}
    for tp in (tp0, tp1):
        assert txn.produce(tp, txn.batch(tp, [b"v"])) == (NONE, 0)
    failures = fail_appends(txbroker, topic, 1, 3, control=True)
    with caplog.at_level(logging.ERROR):
        assert txn.end(commit=True) == NONE
        wait_state(txbroker, txn.transactional_id, ["CompleteCommit"], timeout=10)
    assert failures["left"] == 0
    # Three refused writes, one line: the disk-full condition is logged when it starts,
    # not per retry (storage/disk_conditions.py).
    assert sum(f"{topic}-1" in r.getMessage() and "No space left" in r.getMessage()
               for r in caplog.records if r.levelno == logging.ERROR) == 1
    assert committed_values(client, tp0) == [b"v"]
    assert committed_values(client, tp1) == [b"v"]
    assert list_offsets(client, tp1, read_committed=True) == 2  # one marker, not four
    # Only the failed partition is retried: tp0 got its marker once, not once per retry.
    assert list_offsets(client, tp0, read_committed=True) == 2
    assert txn.add_partitions([tp1]) == {tp1: NONE}
    assert txn.end(commit=False) == NONE
    client.close()


def test_disk_error_persisting_transaction_state_answers_not_coordinator(txbroker):
    """An OSError appending to __transaction_state is a storage error: the request gets
    NOT_COORDINATOR (Kafka's answer for KAFKA_STORAGE_ERROR) and the transactional id
    is not left with a pending transition, so the retry succeeds."""
    topic = unique("wire-enospc-state")
    txbroker.create_topic(topic, 1)
    tp = (topic, 0)
    client = connect(txbroker)
    txn = RawTxn(client, unique("wire-enospc-state-tid"))
    assert txn.init().error_code == NONE
    state_partition = txbroker.call(lambda b: partition_log_for(
        b.logs, TXN_TOPIC, txn.transactional_id).partition)
    failures = fail_appends(txbroker, TXN_TOPIC, state_partition, 1, control=False)
    assert txn.add_partitions([tp]) == {tp: _E.not_coordinator.value}
    assert failures["left"] == 0
    assert txn.add_partitions([tp]) == {tp: NONE}
    assert txn.produce(tp, txn.batch(tp, [b"v"])) == (NONE, 0)
    assert txn.end(commit=True) == NONE
    wait_state(txbroker, txn.transactional_id, ["CompleteCommit"])
    assert committed_values(client, tp) == [b"v"]
    client.close()


# --- KIP-447 on the wire ------------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_offset_fetch_require_stable_between_txn_offset_commit_and_end_txn(txbroker, commit):
    topic = unique("wire-offsets")
    txbroker.create_topic(topic, 2)
    tps = [(topic, 0), (topic, 1)]
    group = unique("wire-group")
    client = connect(txbroker)
    txn = RawTxn(client, unique("wire-offsets-tid"))
    assert txn.init().error_code == NONE
    # Without AddOffsetsToTxn the group's partition is not part of the transaction.
    assert txn.txn_offset_commit(group, {tps[0]: 1}) == {tps[0]: _E.invalid_txn_state.value}
    assert txn.add_offsets(group) == NONE
    assert txn.txn_offset_commit(group, {tps[0]: 5, tps[1]: 8}) == {tps[0]: NONE, tps[1]: NONE}
    unstable = _E.unstable_offset_commit.value
    assert offset_fetch(client, group, tps) == {tp: (unstable, -1) for tp in tps}
    assert offset_fetch(client, group, tps, require_stable=False) == {tp: (NONE, -1)
                                                                      for tp in tps}
    assert txn.end(commit=commit) == NONE
    wait_state(txbroker, txn.transactional_id, ["CompleteCommit", "CompleteAbort"])
    want = {tps[0]: (NONE, 5), tps[1]: (NONE, 8)} if commit else {tp: (NONE, -1) for tp in tps}
    assert offset_fetch(client, group, tps) == want
    assert offset_fetch(client, group, tps, require_stable=False) == want
    client.close()


def test_txn_offset_commit_of_a_fenced_producer_is_invalid_producer_epoch(txbroker):
    """Kafka answers a fenced producer's TxnOffsetCommit with INVALID_PRODUCER_EPOCH at
    every version (never PRODUCER_FENCED, which librdkafka would take as abortable):
    whether the transaction coordinator's check fences it, or, behind it, the
    __consumer_offsets partition's producer state when the batch is appended."""
    topic = unique("wire-fenced-offsets")
    txbroker.create_topic(topic, 1)
    tp = (topic, 0)
    group = unique("wire-fenced-group")
    client = connect(txbroker)
    tid = unique("wire-fenced-offsets-tid")
    txn = RawTxn(client, tid)
    assert txn.init().error_code == NONE
    assert txn.add_offsets(group) == NONE
    assert txn.txn_offset_commit(group, {tp: 1}) == {tp: NONE}
    # The offsets partition has seen a newer epoch of the producer (as after an abort
    # with an epoch bump) while the coordinator still holds the old one.
    offsets_tp = txbroker.call(lambda b: b.transactions.state._partition_for_group(group))
    txbroker.call(lambda b: b.logs.get_log(*offsets_tp).append_marker(
        txn.producer_id, txn.epoch + 1, commit=False))
    bad_epoch = _E.invalid_producer_epoch.value
    for version in (0, 2, 3):
        assert txn.txn_offset_commit(group, {tp: 2}, version=version) == {tp: bad_epoch}
    # A new instance fences this one at the coordinator.
    zombie = RawTxn(client, tid)
    zombie.producer_id, zombie.epoch = txn.producer_id, txn.epoch
    assert RawTxn(client, tid).init().error_code == NONE
    for version in (0, 2, 3):
        assert zombie.txn_offset_commit(group, {tp: 3}, version=version) == {tp: bad_epoch}
    assert offset_fetch(client, group, [tp], require_stable=False) == {tp: (NONE, -1)}
    client.close()


# --- 8. KIP-664: describe, list, find and abort hanging transactions ----------------------------


def cli(txbroker, *args: str, process: bool = False) -> subprocess.CompletedProcess:
    """``txbroker transactions ARGS``: as a subprocess (``python -m txbroker``), or, to save
    the interpreter start, through the same entry point in this process."""
    argv = ["transactions", "--bootstrap-server", txbroker.bootstrap, *args]
    if process:
        return subprocess.run([sys.executable, "-m", "txbroker", *argv], cwd=ROOT,
                              capture_output=True, text=True, timeout=30)
    return _cli_argv(argv)


def _cli_argv(argv: list[str]) -> subprocess.CompletedProcess:
    """``txbroker ARGV`` through the command line's entry point in this process."""
    out, err = io.StringIO(), io.StringIO()
    saved = transactions_cli.OUT
    transactions_cli.OUT = out
    try:
        with contextlib.redirect_stderr(err):
            code = cli_main(argv)
    finally:
        transactions_cli.OUT = saved
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def rows(output: str) -> list[list[str]]:
    """A CLI table without its header, split on whitespace."""
    return [line.split() for line in output.strip().splitlines()[1:]]


def test_kip664_admin_apis_and_cli_list_describe(txbroker):
    """An open transaction (timeout 100 s) holds back read_committed readers.
    DescribeTransactions, ListTransactions and DescribeProducers show it, and so do
    ``txbroker transactions list`` and ``describe``; find-hanging does not report it (its
    coordinator counts both partitions in it). Finding and aborting hanging transactions:
    the tests after this one."""
    topic = unique("hanging")
    txbroker.create_topic(topic, 2)
    tp0, tp1 = (topic, 0), (topic, 1)
    client = connect(txbroker)
    plain = RawTxn(client, None)
    assert plain.produce(tp0, plain.batch(tp0, [b"before"], sequence=-1, transactional=False),
                         transactional_id=None) == (NONE, 0)
    tid = unique("hanging-tid")
    txn = RawTxn(client, tid, timeout_ms=100000)
    assert txn.init().error_code == NONE
    assert txn.add_partitions([tp0, tp1]) == {tp0: NONE, tp1: NONE}
    assert txn.produce(tp0, txn.batch(tp0, [b"t0", b"t1"])) == (NONE, 1)
    assert txn.produce(tp1, txn.batch(tp1, [b"u0"])) == (NONE, 0)
    assert plain.produce(tp0, plain.batch(tp0, [b"after"], sequence=-1, transactional=False),
                         transactional_id=None) == (NONE, 3)
    assert list_offsets(client, tp0, read_committed=True) == 1

    # DescribeTransactions / ListTransactions / DescribeProducers.
    desc = describe_transactions(client, tid, "no-such-id")
    d = desc[tid]
    assert d.error_code == NONE and d.transaction_state == "Ongoing"
    assert (d.producer_id, d.producer_epoch) == (txn.producer_id, txn.epoch)
    assert d.transaction_timeout.total_seconds() == 100
    assert {t.topic: sorted(t.partitions) for t in d.topics} == {topic: [0, 1]}
    assert abs(d.transaction_start_time.timestamp() - time.time()) < 30
    assert desc["no-such-id"].error_code == _E.transactional_id_not_found.value
    listed = list_transactions(client, states=["Ongoing"])
    assert listed.error_code == NONE and listed.unknown_state_filters == ()
    assert (tid, txn.producer_id, "Ongoing") in {
        (t.transactional_id, t.producer_id, t.transaction_state)
        for t in listed.transaction_states}
    assert tid not in {t.transactional_id for t in
                       list_transactions(client, states=["CompleteCommit"]).transaction_states}
    assert list_transactions(client, states=["Bogus"]).unknown_state_filters == ("Bogus",)
    assert [t.transactional_id for t in list_transactions(
        client, producer_ids=[txn.producer_id]).transaction_states] == [tid]
    assert tid in {t.transactional_id for t in list_transactions(client, duration_ms=0,
                                                                 ).transaction_states}
    assert tid not in {t.transactional_id for t in list_transactions(
        client, duration_ms=3_600_000).transaction_states}
    assert list_transactions(client, version=0).error_code == NONE
    p = describe_producers(client, tp0)
    assert p.error_code == NONE
    [producer] = [x for x in p.active_producers if x.producer_id == txn.producer_id]
    assert (producer.producer_epoch, producer.last_sequence,
            producer.current_txn_start_offset) == (txn.epoch, 1, 1)
    assert describe_producers(client, (topic, 7)).error_code == \
        _E.unknown_topic_or_partition.value

    # The command line.
    out = cli(txbroker, "list", process=True)
    assert out.returncode == 0, out.stderr
    assert [tid, str(txn.producer_id), "Ongoing"] in rows(out.stdout)
    out = cli(txbroker, "list", "--state", "CompleteAbort")
    assert out.returncode == 0 and tid not in out.stdout
    out = cli(txbroker, "describe", tid, process=True)
    assert out.returncode == 0, out.stderr
    [row] = rows(out.stdout)
    assert row[:5] == [tid, str(txn.producer_id), str(txn.epoch), "Ongoing", "100000"]
    assert row[6] == f"{topic}-0,{topic}-1"
    out = cli(txbroker, "describe", "no-such-id")
    assert out.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in out.stderr, out.stderr
    # An id without an ongoing transaction: Kafka sends start time -1 (kio cannot read it).
    idle = RawTxn(client, unique("idle-tid"))
    assert idle.init().error_code == NONE
    out = cli(txbroker, "describe", idle.transactional_id)
    assert out.returncode == 0, out.stderr
    assert rows(out.stdout) == [[idle.transactional_id, str(idle.producer_id), "0", "Empty",
                                 "60000", "-", "-"]]
    out = cli(txbroker, "describe", "--transactional-id", tid)  # Kafka's spelling
    assert out.returncode == 0 and rows(out.stdout)[0][:4] == [
        tid, str(txn.producer_id), str(txn.epoch), "Ongoing"], out
    out = cli(txbroker, "describe")
    assert out.returncode == 2 and "one transactional id" in out.stderr
    # Its coordinator counts both partitions in its ongoing transaction: not hanging,
    # whatever its age.
    out = cli(txbroker, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0",
              process=True)
    assert out.returncode == 0 and rows(out.stdout) == [], out
    client.close()


# find-hanging follows Kafka's FindHangingTransactionsCommand: an open transaction whose
# last write is older than --max-transaction-timeout (minutes, default 15) is hanging
# unless its producer's coordinator counts that partition in its transaction, in any
# state. abort refuses a partition its coordinator still counts (unless --force).

def _twenty_minutes_ago() -> int:
    return int(time.time() * 1000) - 20 * 60_000


def _open_old_transaction(client, topic: str, **kwargs) -> RawTxn:
    """A transaction with records in both partitions of ``topic``, written 20 minutes ago
    by the producer's clock (older than find-hanging's default 15-minute limit)."""
    txn = RawTxn(client, unique("old-tid"), **kwargs)
    assert txn.init().error_code == NONE
    tp0, tp1 = (topic, 0), (topic, 1)
    assert txn.add_partitions([tp0, tp1]) == {tp0: NONE, tp1: NONE}
    old = _twenty_minutes_ago()
    assert txn.produce(tp0, txn.batch(tp0, [b"t0", b"t1"], timestamp=old))[0] == NONE
    assert txn.produce(tp1, txn.batch(tp1, [b"u0"], timestamp=old))[0] == NONE
    [p] = [x for x in describe_producers(client, tp0).active_producers
           if x.producer_id == txn.producer_id]
    assert p.last_timestamp == old and p.current_txn_start_offset >= 0
    return txn


def test_find_hanging_leaves_an_old_ongoing_transaction_alone(txbroker):
    """An old open transaction (by its records' timestamps: a slow job, or a producer
    whose clock lags) that its coordinator counts as Ongoing in the partition is not
    hanging, and abort refuses it unless --force."""
    topic = unique("old-ongoing")
    txbroker.create_topic(topic, 2)
    tp0, tp1 = (topic, 0), (topic, 1)
    client = connect(txbroker)
    txn = _open_old_transaction(client, topic, timeout_ms=100000)
    for limit in (["--max-transaction-timeout", "0"], ["--max-transaction-timeout-ms", "0"], []):
        out = cli(txbroker, "find-hanging", "--topic", topic, *limit)
        assert out.returncode == 0, out.stderr
        assert rows(out.stdout) == [], (limit, out.stdout)
    out = cli(txbroker, "find-hanging", "--broker-id", str(txbroker.call(lambda b: b.node_id)),
              "--max-transaction-timeout", "0")
    assert out.returncode == 0 and topic not in out.stdout, out

    for how in (["--start-offset", "0"],
                ["--producer-id", str(txn.producer_id), "--producer-epoch", str(txn.epoch)]):
        out = cli(txbroker, "abort", "--topic", topic, "--partition", "0", *how, process=True)
        assert out.returncode == 1, out
        [line] = out.stderr.strip().splitlines()
        assert f"{topic}-0 is part of the Ongoing transaction of '{txn.transactional_id}'" \
            in line and "--force" in line, line
    assert list_offsets(client, tp0, read_committed=True) == 0
    assert describe_producers(client, tp0).active_producers[0].current_txn_start_offset == 0

    # --force overrides (here harmless: the producer then aborts the whole transaction).
    out = cli(txbroker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0",
              "--force")
    assert out.returncode == 0, out.stderr
    assert list_offsets(client, tp0, read_committed=True) == 3
    assert txn.end(commit=False) == NONE
    wait_state(txbroker, txn.transactional_id, ["CompleteAbort"])
    assert committed_values(client, tp0) == committed_values(client, tp1) == []
    client.close()


def _wait_described(client, tid: str, state: str, timeout: float = 10):
    deadline = time.monotonic() + timeout
    while True:
        d = describe_transactions(client, tid)[tid]
        if d.transaction_state == state:
            return d
        assert time.monotonic() < deadline, d
        time.sleep(0.02)


@pytest.mark.parametrize("end", ["commit", "timeout"])
def test_find_hanging_and_abort_leave_a_completing_transaction_alone(txbroker, end):
    """A transaction in PrepareCommit (EndTxn), or in PrepareAbort at a bumped epoch
    (timed out, its producer fenced), whose markers are delayed: its coordinator will
    write them, so it is not hanging however old, and abort refuses to touch it (a
    hand-written ABORT in one partition of a committing transaction would break its
    atomicity). Then the markers arrive and every partition agrees."""
    topic = unique(f"completing-{end}")
    txbroker.create_topic(topic, 2)
    tp0, tp1 = (topic, 0), (topic, 1)
    client = connect(txbroker)
    txn = _open_old_transaction(client, topic, timeout_ms=100000)
    tid = txn.transactional_id
    txbroker.faults.arm("before_markers", "delay:5000")
    if end == "commit":
        assert txn.end(commit=True) == NONE
        state = "PrepareCommit"
    else:
        txbroker.call(lambda b: b.transactions.expire_transactions_now())
        state = "PrepareAbort"
    d = _wait_described(client, tid, state)
    assert d.producer_id == txn.producer_id
    assert d.producer_epoch == txn.epoch + (end == "timeout")  # the records' epoch, or fenced

    out = cli(txbroker, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert out.returncode == 0 and rows(out.stdout) == [], out.stdout
    out = cli(txbroker, "find-hanging", "--topic", topic)
    assert out.returncode == 0 and rows(out.stdout) == [], out.stdout
    out = cli(txbroker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    assert out.returncode == 1, out
    [line] = out.stderr.strip().splitlines()
    assert f"{topic}-0 is part of the {state} transaction of '{tid}'" in line, line
    # All of that happened while the markers were still held back.
    assert describe_transactions(client, tid)[tid].transaction_state == state
    assert txbroker.faults.fired == ["before_markers"]
    assert list_offsets(client, tp0, read_committed=True) == 0

    _wait_described(client, tid, "CompleteCommit" if end == "commit" else "CompleteAbort")
    want = {tp0: [b"t0", b"t1"], tp1: [b"u0"]} if end == "commit" else {tp0: [], tp1: []}
    assert {tp: committed_values(client, tp) for tp in (tp0, tp1)} == want
    client.close()


def test_find_hanging_reports_and_abort_fixes_what_the_coordinator_lost(txbroker):
    """Genuinely hanging transactions hold back read_committed readers: records of a
    partition the coordinator does not count in the producer's transaction (here its
    AddPartitionsToTxn is taken back), and the records of a producer whose transactional
    id the coordinator forgot (as after losing __transaction_state). find-hanging reports
    them once older than the limit, and abort writes the ABORT marker that frees the
    readers; the coordinator still ends its own partitions."""
    topic = unique("hanging")
    txbroker.create_topic(topic, 2)
    tp0, tp1 = (topic, 0), (topic, 1)
    client = connect(txbroker)
    plain = RawTxn(client, None)
    assert plain.produce(tp0, plain.batch(tp0, [b"before"], sequence=-1, transactional=False),
                         transactional_id=None) == (NONE, 0)
    txn = _open_old_transaction(client, topic, timeout_ms=100000)
    tid = txn.transactional_id
    assert plain.produce(tp0, plain.batch(tp0, [b"after"], sequence=-1, transactional=False),
                         transactional_id=None) == (NONE, 3)

    def forget_tp0(broker):
        t = broker.transactions.state._txns[tid]
        t.partitions = t.partitions - {tp0}

    txbroker.call(forget_tp0)
    assert {t.topic: list(t.partitions) for t in describe_transactions(client, tid)[tid].topics} \
        == {topic: [1]}
    assert list_offsets(client, tp0, read_committed=True) == 1
    out = cli(txbroker, "find-hanging", "--topic", topic, process=True)
    assert out.returncode == 0, out.stderr
    assert [r[:6] for r in rows(out.stdout)] == [
        [topic, "0", str(txn.producer_id), str(txn.epoch), "-1", "1"]]
    assert rows(out.stdout)[0][7] == "20"  # Duration(min)
    # --broker-id searches every topic on the broker (with --topic: that topic's
    # partitions there); partition 1 is still its coordinator's.
    node = txbroker.call(lambda b: b.node_id)
    out = cli(txbroker, "find-hanging", "--broker-id", str(node))
    assert [r[:2] for r in rows(out.stdout) if r[0] == topic] == [[topic, "0"]]
    out = cli(txbroker, "find-hanging", "--topic", topic, "--broker-id", str(node + 1))
    assert out.returncode == 0 and rows(out.stdout) == [], out
    out = cli(txbroker, "abort", "--topic", topic, "--partition", "1", "--start-offset", "0")
    assert out.returncode == 1 and "part of the Ongoing transaction" in out.stderr, out
    out = cli(txbroker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "1",
              process=True)
    assert out.returncode == 0, out.stderr
    assert list_offsets(client, tp0, read_committed=True) == 5
    assert committed_values(client, tp0) == [b"before", b"after"]
    assert read_all("confluent", txbroker.bootstrap, {tp0: 5}) == {tp0: [b"before", b"after"]}
    out = cli(txbroker, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert rows(out.stdout) == []
    assert txn.end(commit=True) == NONE  # its coordinator commits partition 1
    wait_state(txbroker, tid, ["CompleteCommit"])
    assert committed_values(client, tp1) == [b"u0"]

    # A young transaction whose transactional id its coordinator forgot: not a candidate
    # until it is older than the limit (Kafka checks the age first).
    lost = RawTxn(client, unique("lost-tid"))
    assert lost.init().error_code == NONE
    assert lost.add_partitions([tp1]) == {tp1: NONE}
    assert lost.produce(tp1, lost.batch(tp1, [b"lost"])) == (NONE, 2)
    txbroker.call(lambda b: b.transactions.state._txns.pop(lost.transactional_id))
    time.sleep(0.01)
    assert list_offsets(client, tp1, read_committed=True) == 2
    out = cli(txbroker, "find-hanging", "--topic", topic)
    assert out.returncode == 0 and rows(out.stdout) == [], out.stdout
    out = cli(txbroker, "find-hanging", "--topic", topic, "--partition", "1",
              "--max-transaction-timeout", "0")
    assert [(r[1], r[2], r[5]) for r in rows(out.stdout)] == [
        ("1", str(lost.producer_id), "2")]
    out = cli(txbroker, "abort", "--topic", topic, "--partition", "1",
              "--producer-id", str(lost.producer_id), "--producer-epoch", str(lost.epoch))
    assert out.returncode == 0, out.stderr
    assert list_offsets(client, tp1, read_committed=True) == 4
    assert read_all("kafka-python", txbroker.bootstrap, {tp0: 5, tp1: 4}) == {
        tp0: [b"before", b"after"], tp1: [b"u0"]}
    out = cli(txbroker, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert rows(out.stdout) == []
    client.close()


def test_find_hanging_options(txbroker):
    """Kafka's options: --max-transaction-timeout is in minutes (a value too large for
    minutes, like the milliseconds this command took before, is refused);
    --topic or --broker-id is required; --partition needs --topic."""
    topic = unique("options")
    txbroker.create_topic(topic, 1)
    for argv, message in [
        (["--topic", topic, "--max-transaction-timeout", "900000"], "in minutes"),
        ([], "needs --topic or --broker-id"),
        (["--broker-id", "0", "--partition", "0"], "--partition needs --topic"),
    ]:
        out = cli(txbroker, "find-hanging", *argv)
        assert out.returncode == 2 and message in out.stderr, (argv, out)
    out = cli(txbroker, "find-hanging", "--topic", topic, "--max-transaction-timeout", "35791")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["Topic", "Partition", "ProducerId", "ProducerEpoch",
                                  "CoordinatorEpoch", "StartOffset", "LastTimestamp",
                                  "Duration(min)"]
    out = cli(txbroker, "find-hanging", "--topic", unique("no-such-topic"), process=True)
    assert out.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in out.stderr, out


def _one_partition_txn(txbroker, topic_prefix: str, tid_prefix: str):
    """A new one-partition topic, a raw-wire connection and a transaction (InitProducerId
    done) to which that partition is added: (topic, tp, client, txn)."""
    topic = unique(topic_prefix)
    txbroker.create_topic(topic, 1)
    tp = (topic, 0)
    client = connect(txbroker)
    txn = RawTxn(client, unique(tid_prefix))
    assert txn.init().error_code == NONE
    assert txn.add_partitions([tp]) == {tp: NONE}
    return topic, tp, client, txn


def test_coordinator_epoch_of_markers_in_describe_producers_and_abort(txbroker):
    """Each partition records the coordinator epoch of a producer's last marker:
    DescribeProducers reports it, a marker of an older coordinator epoch is refused
    (TRANSACTION_COORDINATOR_FENCED), and ``abort --start-offset`` sends the recorded
    epoch, as Kafka's tool does."""
    txbroker.restart()  # the coordinator's epoch is 1 now: not a default
    epoch = txbroker.call(lambda b: b.transactions.coordinator_epoch)
    assert epoch >= 1
    topic, tp, client, txn = _one_partition_txn(txbroker, "coord-epoch", "coord-epoch-tid")
    tid = txn.transactional_id
    assert txn.produce(tp, txn.batch(tp, [b"a"])) == (NONE, 0)
    [producer] = describe_producers(client, tp).active_producers
    assert producer.coordinator_epoch == -1  # no marker yet
    assert txn.end(commit=True) == NONE
    wait_state(txbroker, tid, ["CompleteCommit"])
    [producer] = describe_producers(client, tp).active_producers
    assert (producer.producer_id, producer.coordinator_epoch) == (txn.producer_id, epoch)

    # The next transaction hangs (its coordinator forgot it, as after losing
    # __transaction_state): an abort from an older coordinator epoch is refused.
    assert txn.add_partitions([tp]) == {tp: NONE}
    assert txn.produce(tp, txn.batch(tp, [b"b"])) == (NONE, 2)
    txbroker.call(lambda b: b.transactions.state._txns.pop(tid))
    assert write_txn_marker(client, tp, txn.producer_id, txn.epoch, commit=False,
                            coordinator_epoch=epoch - 1) == \
        _E.transaction_coordinator_fenced.value
    assert list_offsets(client, tp, read_committed=True) == 2
    out = cli(txbroker, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0")
    assert [(r[2], r[4], r[5]) for r in rows(out.stdout)] == [
        (str(txn.producer_id), str(epoch), "2")]
    out = cli(txbroker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "2")
    assert out.returncode == 0, out.stderr
    assert list_offsets(client, tp, read_committed=True) == 4
    assert committed_values(client, tp) == [b"a"]
    client.close()


def test_cli_describe_producers(txbroker):
    """``describe-producers`` prints Kafka's columns for a partition's producers: the
    open transaction's first offset while it runs, None once its marker is written, and
    the coordinator epoch of that marker."""
    topic, tp, client, txn = _one_partition_txn(txbroker, "describe-producers",
                                                "describe-producers-tid")
    assert txn.produce(tp, txn.batch(tp, [b"a", b"b"])) == (NONE, 0)
    out = cli(txbroker, "describe-producers", "--topic", topic, "--partition", "0")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0].split() == [
        "ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
        "LastTimestamp", "CurrentTransactionStartOffset"]
    [row] = rows(out.stdout)
    assert (row[0], row[1], row[2], row[3], row[5]) == (
        str(txn.producer_id), str(txn.epoch), "-1", "1", "0")
    assert abs(int(row[4]) - time.time() * 1000) < 60_000
    assert txn.end(commit=True) == NONE
    wait_state(txbroker, txn.transactional_id, ["CompleteCommit"])
    epoch = txbroker.call(lambda b: b.transactions.coordinator_epoch)
    [row] = rows(cli(txbroker, "describe-producers", "--topic", topic, "--partition", "0").stdout)
    assert (row[2], row[5]) == (str(epoch), "None")
    out = cli(txbroker, "describe-producers", "--topic", unique("no-such"), "--partition", "0",
              process=True)
    assert out.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in out.stderr, out
    client.close()


def test_marker_refused_for_a_newer_epoch_does_not_stall_the_transaction(txbroker, caplog):
    """An admin's ABORT marker of a later coordinator epoch ended the transaction in one
    partition (``abort --force``); the coordinator's COMMIT there is then refused
    (TRANSACTION_COORDINATOR_FENCED). That partition is over for this transaction: a
    WARNING, no retry loop, and the transaction completes in the others."""
    topic = unique("coord-epoch-moved-on")
    txbroker.create_topic(topic, 2)
    tp0, tp1 = (topic, 0), (topic, 1)
    client = connect(txbroker)
    tid = unique("coord-epoch-moved-on-tid")
    txn = RawTxn(client, tid)
    assert txn.init().error_code == NONE
    assert txn.add_partitions([tp0, tp1]) == {tp0: NONE, tp1: NONE}
    for tp in (tp0, tp1):
        assert txn.produce(tp, txn.batch(tp, [b"v"])) == (NONE, 0)
    epoch = txbroker.call(lambda b: b.transactions.coordinator_epoch)
    assert write_txn_marker(client, tp1, txn.producer_id, txn.epoch, commit=False,
                            coordinator_epoch=epoch + 5) == NONE
    with caplog.at_level(logging.WARNING):
        assert txn.end(commit=True) == NONE
        wait_state(txbroker, tid, ["CompleteCommit"], timeout=5)
    moved_on = [r for r in caplog.records if "has moved on" in r.getMessage()]
    assert len(moved_on) == 1 and "TRANSACTION_COORDINATOR_FENCED" in moved_on[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR
                and "marker for" in r.getMessage()]
    assert committed_values(client, tp0) == [b"v"]
    assert committed_values(client, tp1) == []  # the admin aborted it there
    client.close()


def test_coordinator_epoch_stays_above_recorded_markers_without_its_file(txbroker):
    """A lost transaction-coordinator-epoch file must not make the restarted coordinator
    stale: its epoch starts above every marker epoch the partitions recorded, so its
    markers are accepted and the next transaction completes."""
    topic, tp, client, txn = _one_partition_txn(txbroker, "coord-epoch-lost", "coord-epoch-lost-tid")
    tid = txn.transactional_id
    assert txn.produce(tp, txn.batch(tp, [b"a"])) == (NONE, 0)
    assert txn.end(commit=True) == NONE
    wait_state(txbroker, tid, ["CompleteCommit"])
    # An admin's marker of a later coordinator epoch (Admin.abortTransaction).
    assert write_txn_marker(client, tp, txn.producer_id, txn.epoch, commit=False,
                            coordinator_epoch=5) == NONE
    client.close()
    data_dir = txbroker.config.data_dir
    txbroker.stop()
    os.unlink(os.path.join(data_dir, "transaction-coordinator-epoch"))
    txbroker.start()
    assert txbroker.call(lambda b: b.transactions.coordinator_epoch) == 6
    client = connect(txbroker)
    txn.client = client
    assert txn.init(kip360=True).error_code == NONE
    assert txn.add_partitions([tp]) == {tp: NONE}
    assert txn.produce(tp, txn.batch(tp, [b"b"])) == (NONE, 3)
    assert txn.end(commit=True) == NONE
    wait_state(txbroker, tid, ["CompleteCommit"])
    assert committed_values(client, tp) == [b"a", b"b"]
    client.close()


def test_cli_cannot_reach_broker():
    class Nowhere:
        bootstrap = "127.0.0.1:1"

    out = cli(Nowhere, "list")
    assert out.returncode == 1 and "cannot reach" in out.stderr


def test_cli_command_config(txbroker, tmp_path):
    """kafka-transactions.sh's --command-config: bootstrap.servers (a list: the first
    that answers) and request.timeout.ms are used, other keys are ignored with a note,
    a security protocol other than PLAINTEXT is refused with a clear error."""
    tid = unique("tid-cmdcfg")
    client = connect(txbroker)
    RawTxn(client, tid).init()
    client.close()
    props = tmp_path / "client.properties"
    props.write_text("# as for Kafka's tools\n"
                     f"bootstrap.servers=127.0.0.1:1,{txbroker.bootstrap}\n"
                     "request.timeout.ms=5000\nclient.id=ops\n")
    out = _cli_argv(["transactions", "--command-config", str(props), "list"])
    assert out.returncode == 0, out.stderr
    assert tid in [r[0] for r in rows(out.stdout)]
    assert "ignoring client.id" in out.stderr
    # --bootstrap-server wins over the file's bootstrap.servers.
    out = cli(txbroker, "--command-config", str(props), "describe", tid)
    assert out.returncode == 0 and tid in out.stdout
    props.write_text(f"bootstrap.servers={txbroker.bootstrap}\nsecurity.protocol=SASL_SSL\n")
    out = _cli_argv(["transactions", "--command-config", str(props), "list"])
    assert out.returncode == 1
    # Kafka's default mechanism is GSSAPI, which neither txbroker nor its tools speak.
    assert "sasl.mechanism=GSSAPI (Kafka's default) in " in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    out = _cli_argv(["transactions", "--command-config", str(tmp_path / "missing"), "list"])
    assert out.returncode == 1 and "cannot read --command-config" in out.stderr
