"""Transactions v2 (KIP-890 part 2) in the coordinator's state machine and in a
partition's producer state: Kafka's rules, case by case (the hypothesis model in
test_txn_state.py mixes v1 and v2 clients on the same ids)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from kio.schema.errors import ErrorCode as E
from txbroker.coordinator.transaction.state import EndTxnResult
from txbroker.protocol.records import NO_SEQUENCE, BatchHeader
from txbroker.storage.producer_state import InvalidProducerEpochError, ProducerStateManager

from .test_txn_state import (
    BAD_STATE,
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

V2_ADD = 5  # the partition leader's AddPartitionsToTxn for Produce v12
V2_END = 5


def v2_txn(h: Harness, pid: int, epoch: int, parts=(PA,), commit: bool = True) -> EndTxnResult:
    h.add(pid, epoch, parts, v=V2_ADD)
    h.settle()
    t = h.end(pid, epoch, commit, v=V2_END)
    h.settle()
    return h.r(t)


def committed_markers_pending() -> tuple[Harness, int, int, int]:
    """A v2 commit whose PrepareCommit is durable (EndTxn answered) and whose markers
    are not written yet: (harness, producer id, epoch before the commit, its token)."""
    h = Harness()
    pid, e = h.ready()
    h.add(pid, e, [PA], v=V2_ADD)
    h.settle()
    first = h.end(pid, e, True, v=V2_END)
    h.flush()
    return h, pid, e, first


def test_end_txn_v5_bumps_the_epoch_and_answers_it() -> None:
    h = Harness()
    pid, e = h.ready()
    h.add(pid, e, [PA, PB], v=V2_ADD)
    h.settle()
    assert h.info()["client_transaction_version"] == 2
    t = h.end(pid, e, True, v=V2_END)
    [p] = h.writes
    assert p.record.state == "PrepareCommit"
    assert (p.record.producer_epoch, p.record.last_producer_epoch) == (e + 1, e)
    assert p.record.client_transaction_version == 2
    h.flush()
    assert h.r(t) == EndTxnResult(NONE, pid, e + 1)
    [m] = h.markers  # the markers carry the bumped epoch and the version
    assert (m.producer_epoch, m.transaction_version, m.partitions) == (e + 1, 2, (PA, PB))
    h.settle()
    assert (h.state(), h.info()["producer_epoch"]) == ("CompleteCommit", e + 1)
    # The old epoch is fenced from now on; the next transaction runs at e + 1.
    assert h.r(h.add(pid, e, [PA], v=V2_ADD)).error == FENCED
    assert v2_txn(h, pid, e + 1, commit=False) == EndTxnResult(NONE, pid, e + 2)


def test_end_txn_v5_retry_gets_the_same_answer() -> None:
    h, pid, e, first = committed_markers_pending()
    # Markers still in flight (PrepareCommit): the retry (old epoch) waits.
    assert h.r(h.end(pid, e, True, v=V2_END)) == EndTxnResult(CONCURRENT)
    h.settle()
    assert h.r(first) == EndTxnResult(NONE, pid, e + 1)
    assert h.r(h.end(pid, e, True, v=V2_END)) == EndTxnResult(NONE, pid, e + 1)
    # Kafka's table: a retry of the other outcome is INVALID_TXN_STATE, an older epoch fenced.
    assert h.r(h.end(pid, e, False, v=V2_END)).error == BAD_STATE
    assert h.r(h.end(pid, e - 1 if e else 99, True, v=V2_END)).error == FENCED
    assert h.writes == [] and h.markers == []


def test_v2_abort_with_nothing_open_bumps_the_epoch() -> None:
    """Kafka's Empty/CompleteCommit/CompleteAbort -> PrepareAbort edge (v2 only): a
    producer whose implicit add failed does not know whether a transaction is open."""
    h = Harness()
    pid, e = h.ready()
    h.now = 50
    t = h.end(pid, e, False, v=V2_END)
    [p] = h.writes
    assert (p.record.state, p.record.partitions, p.record.txn_start_ms) == ("PrepareAbort", frozenset(), 50)
    h.settle()
    assert h.r(t) == EndTxnResult(NONE, pid, e + 1)
    assert h.all_markers == []  # no partition: nothing to mark
    assert h.state() == "CompleteAbort"
    # A commit with nothing open is INVALID_TXN_STATE, as in v1; v1 refuses the abort too.
    assert h.r(h.end(pid, e + 1, True, v=V2_END)).error == BAD_STATE
    assert h.r(h.end(pid, e + 1, False, v=3)).error == NONE  # v1: CompleteAbort + abort is a retry


def test_end_txn_v5_while_the_previous_markers_are_written_waits() -> None:
    """KAFKA-18464: the producer already holds the epoch its commit bumped while that
    commit's markers are still being written (PrepareCommit, Complete pending). Its next
    EndTxn carries that epoch: an abort of a transaction whose implicit add was refused
    CONCURRENT, or a commit the Java 4.3 client sends before its first Produce (a race
    in its sender, docs/transactions.md). Kafka 4 answers CONCURRENT_TRANSACTIONS (the
    pending transition is checked first), and the producer retries; PRODUCER_FENCED here
    was fatal to a sole Java producer (the intermittent failure of the TV2 bench)."""
    h, pid, e, first = committed_markers_pending()
    assert h.r(first) == EndTxnResult(NONE, pid, e + 1)
    assert (h.state(), h.info()["pending_state"]) == ("PrepareCommit", "CompleteCommit")
    assert h.r(h.add(pid, e + 1, [PB], v=V2_ADD)).error == CONCURRENT
    assert h.r(h.end(pid, e + 1, False, v=V2_END)) == EndTxnResult(CONCURRENT)
    assert h.r(h.end(pid, e + 1, True, v=V2_END)) == EndTxnResult(CONCURRENT)
    h.settle()
    t = h.end(pid, e + 1, False, v=V2_END)  # the retry, once the commit is complete
    h.settle()
    assert h.r(t) == EndTxnResult(NONE, pid, e + 2)
    # An older epoch is still fenced once nothing is pending.
    assert h.r(h.end(pid, e, False, v=V2_END)).error == FENCED


class SoleV2Producer(RuleBasedStateMachine):
    """One transactions v2 producer alone on its transactional.id, as the Java client
    drives it (one EndTxn at a time, after its adds were answered; commit only with a
    partition added), against every interleaving of the coordinator's log writes and
    marker writes. Nobody else holds the id and no timeout fires, so it must never be
    told it is fenced or unknown: every answer is NONE or CONCURRENT_TRANSACTIONS (then
    it retries), and each EndTxn answer hands it the epoch it continues with."""

    def __init__(self) -> None:
        super().__init__()
        self.h = Harness()
        self.pid = self.epoch = -1
        self.adds: list[int] = []  # outstanding tokens
        self.ending: int | None = None
        self.open = False  # an add of this transaction was answered NONE

    @initialize()
    def start(self) -> None:
        self.pid, self.epoch = self.h.ready()

    def _collect(self) -> None:
        for t in [t for t in self.adds if t in self.h.responses]:
            self.adds.remove(t)
            error = self.h.r(t).error
            assert error in (NONE, CONCURRENT), (error, self.h.info())
            self.open |= error == NONE
        if self.ending is not None and self.ending in self.h.responses:
            r = self.h.r(self.ending)
            self.ending = None
            assert r.error in (NONE, CONCURRENT), (r, self.h.info())
            if r.error == NONE:
                assert (r.producer_id, r.producer_epoch) == (self.pid, self.epoch + 1)
                self.epoch += 1
                self.open = False

    @precondition(lambda self: self.ending is None)
    @rule(parts=st.lists(st.sampled_from([PA, PB, PC]), min_size=1, max_size=2))
    def produce(self, parts: list) -> None:
        self.adds.append(self.h.add(self.pid, self.epoch, parts, v=V2_ADD))
        self._collect()

    @precondition(lambda self: self.ending is None and not self.adds)
    @rule(commit=st.booleans())
    def end(self, commit: bool) -> None:
        if commit and not self.open:
            return  # the Java client commits only after its first batch was added
        self.ending = self.h.end(self.pid, self.epoch, commit, v=V2_END)
        self._collect()

    @precondition(lambda self: bool(self.h.writes))
    @rule()
    def write_durable(self) -> None:
        self.h.persist_one()
        self._collect()

    @precondition(lambda self: bool(self.h.markers))
    @rule()
    def markers_durable(self) -> None:
        self.h.markers_one()
        self._collect()

    @invariant()
    def epoch_is_the_coordinators(self) -> None:
        info = self.h.info()
        assert info["producer_id"] == self.pid
        assert info["producer_epoch"] in (self.epoch, self.epoch + 1), (info, self.epoch)


SoleV2Producer.TestCase.settings = settings(
    max_examples=300, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
test_sole_v2_producer_is_never_fenced = SoleV2Producer.TestCase


def test_v1_end_txn_does_not_bump() -> None:
    h = Harness()
    pid, e = h.ready()
    h.add(pid, e, [PA], v=3)
    h.settle()
    t = h.end(pid, e, True, v=3)
    h.settle()
    assert h.r(t) == EndTxnResult(NONE)  # no id/epoch below v5
    assert h.info()["producer_epoch"] == e and h.info()["client_transaction_version"] == 0
    assert h.all_markers[-1].transaction_version == 0



def test_v1_end_txn_of_a_transaction_a_v2_add_opened() -> None:
    """EndTxn below v5 ends the transaction as v1 even when the Ongoing record came from
    a v2 producer's implicit add (a producer instance holding the same epoch, e.g. after a
    KIP-360 retry answered without a bump): Kafka's endTransactionWithTV1 records
    transaction version 0 (prepareAbortOrCommit(TV_0)). So no bump, an answer without
    id/epoch, and markers with v1 rules: a v2 marker of the data's own epoch would be
    refused by every partition, and the commit would never complete (found by the model,
    issue 25)."""
    h = Harness()
    pid, e = h.ready()
    h.add(pid, e, [PA], v=V2_ADD)
    h.settle()
    assert h.info()["client_transaction_version"] == 2
    t = h.end(pid, e, True, v=3)
    [p] = h.writes
    assert (p.record.state, p.record.producer_epoch, p.record.client_transaction_version) == (
        "PrepareCommit", e, 0)
    h.flush()
    assert h.r(t) == EndTxnResult(NONE)
    [m] = h.markers
    assert (m.producer_epoch, m.commit, m.transaction_version) == (e, True, 0)
    h.settle()
    assert (h.state(), h.info()["producer_epoch"]) == ("CompleteCommit", e)
    # The same producer goes on with v2: its next EndTxn v5 bumps.
    assert v2_txn(h, pid, e) == EndTxnResult(NONE, pid, e + 1)

def test_exhausted_epoch_rotates_to_the_next_producer_id() -> None:
    h = Harness([entry("t", rec(producer_id=500, producer_epoch=32765))], first_pid=900)
    assert v2_txn(h, 500, 32765) == EndTxnResult(NONE, 500, 32766)
    h.add(500, 32766, [PA], v=V2_ADD)
    h.settle()
    t = h.end(500, 32766, True, v=V2_END)
    [p] = h.writes
    # The last bump of the id, with the next producer id allocated for after it.
    assert (p.record.producer_epoch, p.record.next_producer_id) == (32767, 900)
    h.flush()
    assert h.r(t) == EndTxnResult(NONE, 900, 0)
    [m] = h.markers
    assert (m.producer_id, m.producer_epoch) == (500, 32767)  # the transaction's own id
    h.settle()
    info = h.info()
    assert (info["producer_id"], info["producer_epoch"], info["previous_producer_id"]) == (900, 0, 500)
    assert info["last_producer_epoch"] == 32766 and info["next_producer_id"] == -1
    # A retry with the old id at its last epoch gets the same answer (retryOnOverflow).
    assert h.r(h.end(500, 32766, True, v=V2_END)) == EndTxnResult(NONE, 900, 0)
    assert v2_txn(h, 900, 0) == EndTxnResult(NONE, 900, 1)
    # The rotation survives a reload of the log.
    h.crash()
    assert (h.info()["producer_id"], h.info()["producer_epoch"]) == (900, 1)


def test_rotation_survives_a_crash_between_prepare_and_complete() -> None:
    h = Harness([entry("t", rec(producer_id=500, producer_epoch=32766))], first_pid=900)
    h.add(500, 32766, [PA], v=V2_ADD)
    h.settle()
    h.end(500, 32766, True, v=V2_END)
    h.flush()  # PrepareCommit (epoch 32767, next id 900) is durable; the markers are not
    h.crash()
    [m] = h.markers
    assert (m.producer_id, m.producer_epoch, m.transaction_version) == (500, 32767, 2)
    h.settle()
    assert (h.info()["producer_id"], h.info()["producer_epoch"]) == (900, 0)


def test_timeout_of_a_v2_transaction_bumps_once() -> None:
    """A timed-out v2 transaction is aborted like a v1 one: one bump (the fence), which
    the markers carry, above the epoch of the data (Kafka 4.3.1 does the same for a
    fencing InitProducerId: tests/differential/test_transactions_v2.py)."""
    h = Harness(abort_timed_out_check_interval_ms=10)
    pid, e = h.ready(timeout=100)
    h.add(pid, e, [PA], v=V2_ADD)
    h.settle()
    h.tick(1000)
    [p] = h.writes
    assert (p.record.state, p.record.producer_epoch, p.record.client_transaction_version) == (
        "PrepareAbort", e + 1, 2)
    h.settle()
    m = h.all_markers[-1]
    assert (m.producer_epoch, m.transaction_version) == (e + 1, 2)
    # Kafka's v2 table cannot tell this bump from the producer's own EndTxn: its commit
    # "retry" is INVALID_TXN_STATE; once a new instance initialized, it is fenced.
    assert h.r(h.end(pid, e, True, v=V2_END)).error == BAD_STATE
    h.ready()
    assert h.r(h.end(pid, e, True, v=V2_END)).error == FENCED


def test_v1_records_load_and_continue_as_v2() -> None:
    """Records written before the version existed (no 13th element) load as version 0;
    the same id then runs a v2 transaction, and its records load again."""
    h = Harness([entry("t", rec(state="CompleteCommit", producer_epoch=4, txn_start_ms=1))])
    assert h.info()["client_transaction_version"] == 0
    assert v2_txn(h, 500, 4) == EndTxnResult(NONE, 500, 5)
    h.crash()
    info = h.info()
    assert (info["state"], info["producer_epoch"], info["client_transaction_version"]) == (
        "CompleteCommit", 5, 2)


def _header(pid: int, epoch: int, *, control: bool = False, transactional: bool = True,
            seq: int = 0, offset: int = 0) -> BatchHeader:
    attributes = (0x10 if transactional else 0) | (0x20 if control else 0)
    return BatchHeader(offset, 0, -1, 2, 0, attributes, 0, 0, 0, pid, epoch,
                       NO_SEQUENCE if control else seq, 1)


def test_partition_refuses_a_v2_marker_of_the_open_transactions_epoch() -> None:
    """KIP-1228: a v2 marker must carry an epoch above the producer's; one of the same
    epoch while a transaction of that epoch is open is late (it would end the next
    transaction), and is refused. With nothing open it is a harmless retry (KAFKA-19999)."""
    state = ProducerStateManager("t-0")
    state.update(_header(7, 3))  # a transaction at epoch 3 is open
    with pytest.raises(InvalidProducerEpochError):
        state.check(_header(7, 3, control=True, offset=1), 0, transaction_version=2)
    assert state.check(_header(7, 3, control=True, offset=1), 0, transaction_version=0) is None
    assert state.check(_header(7, 4, control=True, offset=1), 0, transaction_version=2) is None
    state.update(_header(7, 4, control=True, offset=1), 0)
    assert state.check(_header(7, 4, control=True, offset=2), 0, transaction_version=2) is None
    # The producer's next transaction runs at the bumped epoch; the old epoch is fenced.
    with pytest.raises(InvalidProducerEpochError):
        state.check(_header(7, 3, seq=0, offset=2))
    assert state.check(_header(7, 4, seq=0, offset=2)) is None
    assert E.invalid_producer_epoch == InvalidProducerEpochError.code
