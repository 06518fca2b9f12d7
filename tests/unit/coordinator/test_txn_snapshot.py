"""Coordinator snapshots of __transaction_state partitions: loading a snapshot of the
latest record per id gives the state machine the same state as replaying the whole
history."""

from __future__ import annotations

import random
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from txbroker.coordinator.transaction.records import TxnLogValue
from txbroker.coordinator.transaction.snapshot import (
    SNAPSHOT_FILE,
    decode_snapshot,
    encode_snapshot,
    read_snapshot,
    row_of,
    write_snapshot,
)
from txbroker.coordinator.transaction.state import TransactionCoordinatorState, TxnConfig
from txbroker.storage.torn import tear_small_file

from tests.unit.coordinator.test_txn_records import log_values

NOW = 1_700_000_000_000


def _machine() -> TransactionCoordinatorState:
    return TransactionCoordinatorState(TxnConfig(), lambda: 1, lambda g: ("__consumer_offsets", 0))


@st.composite
def with_first_offsets(draw) -> TxnLogValue:
    v = draw(log_values())
    if v.state in ("PrepareCommit", "PrepareAbort") and v.partitions and draw(st.booleans()):
        offsets = {tp: draw(st.integers(0, 2**40)) for tp in v.partitions}
        v = TxnLogValue(**{**v.__dict__, "txn_first_offsets": offsets})
    # Transactions v2 records carry the client transaction version (0 in v1 ones).
    return TxnLogValue(**{**v.__dict__, "client_transaction_version": draw(st.sampled_from([0, 2]))})


def test_snapshot_rows_from_before_transactions_v2_load_as_version_0() -> None:
    value = TxnLogValue(7, -1, -1, 3, 2, 60_000, "CompleteCommit", frozenset(), 1, 2,
                        client_transaction_version=2)
    row = row_of("t", value)
    assert len(row) == 13 and row[12] == 2
    m = _machine()
    m.load_row(row[:12])  # the layout snapshots had before the version was added
    assert m.record_of("t") == TxnLogValue(**{**value.__dict__, "client_transaction_version": 0})
    assert decode_snapshot(encode_snapshot(5, [row[:12], row]))[1] == [row[:12], row]


histories = st.lists(st.tuples(st.sampled_from(["a", "b", "c", "ü-id"]),
                               st.none() | with_first_offsets()), max_size=30)


@settings(max_examples=200)
@given(histories)
def test_snapshot_load_equals_full_replay(history) -> None:
    replayed, latest = _machine(), {}
    for tid, value in history:
        replayed.load(tid, value)
        if value is None:
            latest.pop(tid, None)
        else:
            latest[tid] = row_of(tid, value)
    offset, rows = decode_snapshot(encode_snapshot(len(history), latest.values()))
    assert offset == len(history)
    loaded = _machine()
    for row in rows:
        loaded.load_row(row)
    assert loaded.transactional_ids() == replayed.transactional_ids()
    for tid in replayed.transactional_ids():
        assert loaded.record_of(tid) == replayed.record_of(tid)
        assert loaded.inspect(tid) == replayed.inspect(tid)
    # ... and they go on alike: timers and recovery.
    assert loaded.recover(NOW).persist == replayed.recover(NOW).persist
    assert loaded.next_wake_ms() == replayed.next_wake_ms()


def test_snapshot_file_round_trip_and_garbage(tmp_path) -> None:
    assert read_snapshot(str(tmp_path)) is None
    value = TxnLogValue(7, -1, -1, 3, 2, 60_000, "PrepareCommit", frozenset({("t", 1)}),
                        NOW, NOW, {("t", 1): 42})
    write_snapshot(str(tmp_path), 99, [row_of("tid", value)])
    offset, rows = read_snapshot(str(tmp_path))
    assert offset == 99
    machine = _machine()
    machine.load_row(rows[0])
    assert machine.record_of("tid") == value
    (tmp_path / SNAPSHOT_FILE).write_bytes(b"\x93garbage")
    with pytest.raises(ValueError):
        read_snapshot(str(tmp_path))


@settings(max_examples=200)
@given(histories, st.integers(0, 2**32 - 1))
def test_a_torn_snapshot_is_refused_never_loaded_wrong(history, seed) -> None:
    """A coordinator snapshot half-written by a power loss (a prefix, maybe zero-filled
    to its length: storage/torn.py) is refused with ValueError, so the coordinator
    replays its whole partition (snapshots.py); it never loads rows that differ from
    what was written (issue 42, item 3)."""
    latest = {}
    for tid, value in history:
        if value is None:
            latest.pop(tid, None)
        else:
            latest[tid] = row_of(tid, value)
    with tempfile.TemporaryDirectory() as tmp:
        write_snapshot(tmp, len(history), list(latest.values()))
        whole = read_snapshot(tmp)
        changed = tear_small_file(f"{tmp}/{SNAPSHOT_FILE}", random.Random(seed))
        try:
            torn = read_snapshot(tmp)
        except ValueError:
            return
    assert not changed and torn == whole, "a torn snapshot was loaded"
