"""recover(open_transactions=...): data open in partitions the coordinator lost track of.

The shell acts on AddPartitionsToTxn's Ongoing record once it is appended, before its
fsync (ff610ea). A power failure can lose it while the producer's data reached the
partition: recovery is told which partitions hold an open transaction of which producer.
"""

from __future__ import annotations

from tests.unit.coordinator.test_txn_state import (
    CONCURRENT,
    FENCED,
    NONE,
    PA,
    PB,
    PC,
    Harness,
    entry,
    rec,
)

PID = 500  # rec()'s producer id
NOW = 1000


def recovered(records, open_transactions, epoch: int = 0) -> Harness:
    """A harness loaded from ``records``, recovered at NOW with ``open_transactions``."""
    h = Harness(records, recover=False, coordinator_epoch=epoch)
    h.now = NOW
    h.absorb(h.sm.recover(h.now, open_transactions))
    return h


def power_failure(h: Harness, lose_from: int, open_transactions) -> None:
    """Harness.crash(), but the log loses its records from ``lose_from`` on (unsynced),
    and recovery is told which partitions hold open data."""
    del h.log[lose_from:]
    h.writes, h.markers = [], []
    h.coordinator_epoch += 1
    h._build(False)
    h.absorb(h.sm.recover(h.now, open_transactions))


def test_idle_transaction_with_an_orphan_is_aborted_with_an_epoch_bump() -> None:
    # CompleteCommit durable; the next transaction's Ongoing {PB} was lost, its data in PB was not.
    h = recovered([entry("t", rec(state="CompleteCommit", producer_epoch=3, txn_start_ms=5,
                                  last_update_ms=7))], {PID: [PB]})
    assert h.last.expired == ["t"]
    assert h.sm.unresolved_orphans == []
    [p] = h.writes
    assert (p.record.state, p.record.producer_id, p.record.producer_epoch) == ("PrepareAbort", PID, 4)
    assert p.record.partitions == {PB}
    assert (p.record.txn_start_ms, p.record.last_update_ms) == (NOW, NOW)  # the rebuilt Ongoing's
    assert not h.markers  # the markers wait for PrepareAbort to be durable
    # Kafka 4 answers the transition in progress first; the old epoch is fenced after.
    assert h.r(h.add(PID, 3, [PA])).error == CONCURRENT
    h.settle()
    assert h.r(h.add(PID, 3, [PA])).error == FENCED
    [m] = h.all_markers
    assert (m.commit, m.partitions, m.producer_id, m.producer_epoch) == (False, (PB,), PID, 4)
    assert h.state() == "CompleteAbort"
    assert h.r(h.end(PID, 3, commit=True)).error == FENCED


def test_ongoing_transaction_missing_a_partition_aborts_all_of_them() -> None:
    # Ongoing {PA, PC} durable; a later Ongoing adding PB was lost, PB holds data.
    h = recovered([entry("t", rec(state="Ongoing", producer_epoch=2, partitions=frozenset({PA, PC}),
                                  txn_start_ms=5))], {PID: [PA, PB]})
    assert h.last.expired == ["t"]
    [p] = h.writes
    assert (p.record.state, p.record.producer_epoch) == ("PrepareAbort", 3)
    assert p.record.partitions == {PA, PB, PC}
    assert p.record.txn_start_ms == 5  # the transaction's own start
    h.settle()
    [m] = h.all_markers
    assert (m.commit, m.partitions, m.producer_epoch) == (False, (PA, PB, PC), 3)
    assert h.state() == "CompleteAbort"
    assert h.r(h.end(PID, 2, commit=True)).error == FENCED


def test_open_data_the_coordinator_knows_of_changes_nothing() -> None:
    ongoing = rec(state="Ongoing", partitions=frozenset({PA, PB}), txn_start_ms=5)
    h = recovered([entry("t", ongoing)], {PID: [PA, PB], 9999: []})
    assert (h.last.expired, h.writes, h.markers, h.sm.unresolved_orphans) == ([], [], [], [])
    assert h.sm.record_of("t") == ongoing
    t = h.end(PID, 0, commit=True)  # the producer goes on
    h.settle()
    assert h.r(t).error == NONE
    assert [(m.commit, m.partitions) for m in h.all_markers] == [(True, (PA, PB))]
    # A decided transaction covering its open data is finished as usual: markers, no abort.
    h = recovered([entry("t", rec(state="PrepareCommit", partitions=frozenset({PA}), txn_start_ms=5))],
                  {PID: [PA]})
    assert (h.last.expired, h.sm.unresolved_orphans) == ([], [])
    [m] = h.markers
    assert (m.commit, m.partitions, m.producer_epoch) == (True, (PA,), 0)


def test_orphans_of_an_unknown_producer_are_reported() -> None:
    records = [entry("t", rec(state="PrepareCommit", partitions=frozenset({PA}), txn_start_ms=5))]
    h = recovered(records, {PID: [PA], 777: [PC, PA]})
    # Producer 777 is unknown here: nothing to abort it with (find-hanging shows it).
    assert h.sm.unresolved_orphans == [(777, PA), (777, PC)]
    assert h.last.expired == []
    [m] = h.markers
    assert (m.commit, m.partitions, m.producer_epoch) == (True, (PA,), 0)
    assert not h.writes
    h.settle()
    assert h.state() == "CompleteCommit"


def test_orphan_of_a_decided_transaction_is_aborted_after_it_completes() -> None:
    records = [entry("t", rec(state="PrepareCommit", partitions=frozenset({PA}), txn_start_ms=5))]
    h = recovered(records, {PID: [PA, PB]})
    # PB holds data of the producer's next transaction, whose records were lost with this
    # one's completion: the commit of {PA} goes on first, then {PB} is aborted.
    assert (h.sm.unresolved_orphans, h.last.expired) == ([], [])
    assert h.sm.inspect("t")["orphans"] == [PB]
    [m] = h.markers
    assert (m.commit, m.partitions, m.producer_epoch) == (True, (PA,), 0)
    h.settle()
    assert h.state() == "CompleteAbort"
    assert [(m.commit, m.partitions, m.producer_epoch) for m in h.all_markers] == [
        (True, (PA,), 0), (False, (PB,), 1)]
    assert h.sm.inspect("t")["orphans"] == []


def test_lost_completion_and_next_add_leave_data_open() -> None:
    h = Harness()
    pid, e = h.ready()
    h.add(pid, e, [PA])
    h.settle()
    h.end(pid, e, commit=True)
    h.settle()  # PrepareCommit fsynced, COMMIT marker in PA, CompleteCommit appended (no fsync)
    assert h.state() == "CompleteCommit"
    unsynced = len(h.log) - 1
    t = h.add(pid, e, [PB])  # the next transaction: its Ongoing is acted on once appended
    h.flush()
    assert h.r(t).error == NONE
    # The producer's data reaches PB's disk; a power failure loses the unsynced tail of the
    # transaction log: CompleteCommit and Ongoing {PB}.
    power_failure(h, unsynced, {pid: [PB]})
    # PB gets an ABORT marker once the commit of PA is completed, and the producer is
    # fenced (as when only the Ongoing is lost).
    assert h.sm.unresolved_orphans == [], h.sm.unresolved_orphans
    h.settle()
    assert any(PB in m.partitions and not m.commit and m.producer_epoch > e for m in h.all_markers)
    # Without that, PB would stay open for ever, and the producer, still at epoch e, would be
    # told its transaction {PB} committed (CompleteCommit + EndTxn(commit) = "a retry").
    assert h.r(h.end(pid, e, commit=True)).error == FENCED


def committed_then_next_in_same_partition() -> tuple[Harness, int, int, int]:
    """A commit of {PA} (its data from offset 0, COMMIT marker at 1), CompleteCommit appended
    but not fsynced, then the next transaction adds PA again (Ongoing appended, not fsynced)
    and writes from offset 2. Returns (harness, pid, epoch, index of the first unsynced record)."""
    h = Harness(open_data={})
    pid, e = h.ready()
    h.add(pid, e, [PA])
    h.settle()
    h.open_data[(pid, PA)] = 0
    h.end(pid, e, commit=True)
    h.flush()  # PrepareCommit durable: it records where the transaction's data starts
    assert h.sm.record_of("t").txn_first_offsets == {PA: 0}
    assert [(m.commit, m.partitions) for m in h.markers] == [(True, (PA,))]
    del h.open_data[(pid, PA)]  # the COMMIT marker closed it
    h.settle()
    assert h.state() == "CompleteCommit"
    unsynced = len(h.log) - 1
    t = h.add(pid, e, [PA])  # the shell acts on this Ongoing once appended
    h.settle()
    assert h.r(t).error == NONE
    h.open_data[(pid, PA)] = 2
    return h, pid, e, unsynced


def test_next_transaction_in_the_same_partition_is_not_committed_by_recovery() -> None:
    h, pid, e, unsynced = committed_then_next_in_same_partition()
    # Power failure: CompleteCommit and the next Ongoing lost, PA's data and marker kept.
    power_failure(h, unsynced, {pid: {PA: 2}})
    assert h.sm.record_of("t").state == "PrepareCommit"
    # The data open in PA starts at 2, not at the decided transaction's 0: it is the next
    # transaction's. The recovered commit must not mark PA again (that would commit it).
    assert h.sm.inspect("t")["orphans"] == [PA]
    assert h.markers == []
    h.settle()
    assert [(m.commit, m.partitions, m.producer_epoch) for m in h.all_markers] == [
        (True, (PA,), e), (False, (PA,), e + 1)]
    assert h.state() == "CompleteAbort"
    assert h.r(h.end(pid, e, commit=True)).error == FENCED


def test_decided_transaction_whose_marker_was_lost_is_marked_again() -> None:
    h, pid, e, unsynced = committed_then_next_in_same_partition()
    # This time the power failure also lost PA's marker and what came after it: the data
    # open in PA is the decided transaction's own (first offset 0): mark it, abort nothing.
    power_failure(h, unsynced, {pid: {PA: 0}})
    assert h.sm.inspect("t")["orphans"] == []
    assert [(m.commit, m.partitions, m.producer_epoch) for m in h.markers] == [(True, (PA,), e)]
    h.settle()
    assert (h.state(), h.info()["producer_epoch"], h.last.expired) == ("CompleteCommit", e, [])


def test_records_without_first_offsets_trust_the_partition_list() -> None:
    # Written before the first offsets existed: data open in a partition of the decided
    # transaction is taken as its own (as before), whatever its offset.
    records = [entry("t", rec(state="PrepareCommit", partitions=frozenset({PA}), txn_start_ms=5))]
    h = recovered(records, {PID: {PA: 7}})
    assert rec(state="PrepareCommit").txn_first_offsets is None
    assert h.sm.inspect("t")["orphans"] == []
    [m] = h.markers
    assert (m.commit, m.partitions) == (True, (PA,))


def test_no_partition_joins_a_transaction_being_decided() -> None:
    # Its PrepareCommit records where its data starts: a first batch arriving in a new
    # partition after EndTxn (no real client sends one) is refused, retriably.
    h = Harness(open_data={})
    pid, e = h.ready()
    h.add(pid, e, [PA, PB])
    h.settle()
    h.end(pid, e, commit=True)
    assert h.info()["pending_state"] == "PrepareCommit"
    assert h.sm.verify_partitions("t", pid, e, [PB]) == {PB: CONCURRENT}
