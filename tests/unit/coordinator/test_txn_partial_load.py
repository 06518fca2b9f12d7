"""Per-partition loading of the transaction coordinator: the ids of a loaded
__transaction_state partition are served while the other partitions load (Kafka loads
each coordinator partition on its own), and loading partition by partition, in any
order, ends in the state the one-call recover() reaches."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode as E
from txbroker.coordinator.transaction.records import TxnLogValue
from txbroker.coordinator.transaction.state import TransactionCoordinatorState, TxnConfig

from tests.unit.coordinator.test_txn_snapshot import with_first_offsets
from tests.unit.coordinator.test_txn_state import PA, PB, PC, offsets_partition, rec

LOAD = E.coordinator_load_in_progress.value
NOW = 1_700_000_000_000
PARTITIONS = 3
IDS = ["a0", "b1", "c2", "d0", "e1"]  # an id's partition: its last digit


def partition_of(tid: str) -> int:
    return int(tid[-1])


def machine(pids=None) -> TransactionCoordinatorState:
    pids = iter(range(1000, 10**6)) if pids is None else pids
    return TransactionCoordinatorState(TxnConfig(), lambda: next(pids), offsets_partition,
                                       partitions=PARTITIONS, txn_partition=partition_of)


def loaded(history, partition=None) -> TransactionCoordinatorState:
    """A machine with ``history`` loaded into its partitions (``partition`` given: as
    the shell passes it, else computed by the machine)."""
    m = machine()
    for tid, value in history:
        m.load(tid, value, partition_of(tid) if partition else None)
    return m


def test_ids_of_a_loaded_partition_are_served_while_others_load() -> None:
    m = loaded([("b1", rec(producer_id=7, state="CompleteCommit", producer_epoch=2)),
                ("a0", rec(producer_id=8, state="Ongoing", partitions=frozenset({PA}),
                           txn_start_ms=0, timeout_ms=1))])
    m.begin_load()
    assert not m.loaded and m.recover_partition(1, NOW).responses == {}
    assert m.partition_loaded(1) and not m.partition_loaded(0)
    # Partition 1's id is served; partition 0's (and 2's, unknown yet) are loading.
    assert m.describe("b1").error == 0
    assert m.describe("a0").error == LOAD and m.describe("c2").error == LOAD
    fx = m.init_producer_id("t1", NOW, "b1", 60_000, -1, -1, api_version=4)
    assert [p.record.producer_epoch for p in fx.persist] == [3]  # bumped: served
    fx = m.init_producer_id("t2", NOW, "a0", 60_000, -1, -1, api_version=4)
    assert fx.responses["t2"].error == LOAD and not fx.persist
    assert m.add_partitions("t3", NOW, "a0", 8, 0, [PB], api_version=3).responses["t3"].error == LOAD
    assert m.end_txn("t4", NOW, "a0", 8, 0, True, api_version=3).responses["t4"].error == LOAD
    assert m.verify_partitions("a0", 8, 0, [PA]) == {PA: LOAD}
    # ListTransactions waits for every partition, as Kafka's.
    assert m.list_transactions().error == LOAD
    # a0's transaction timed out long ago, but its partition is not loaded: untouched.
    assert m.tick(NOW).persist == [] and m.expire_now(NOW).expired == []
    m.recover_partition(0, NOW)
    assert m.describe("a0").error == 0 and m.list_transactions().error == LOAD
    # Now armed: the timeout aborts it (epoch bump).
    assert [(p.record.state, p.record.producer_epoch) for p in m.tick(NOW).persist] == [
        ("PrepareAbort", 1)]
    m.recover_partition(2, NOW)
    assert m.loaded and m.list_transactions().error == 0


def test_orphans_resolve_when_their_partition_loads() -> None:
    """An orphan (open data the coordinator's record does not cover) is aborted when
    its id's partition loads; one no id claims is unresolved once all are loaded."""
    m = loaded([("b1", rec(producer_id=7, state="CompleteCommit", producer_epoch=2))])
    m.begin_load({7: [PC], 99: [PA]})
    assert m.recover_partition(0, NOW).expired == []
    fx = m.recover_partition(1, NOW)
    assert fx.expired == ["b1"]
    assert [(p.record.state, p.record.producer_epoch) for p in fx.persist] == [("PrepareAbort", 3)]
    assert m.unresolved_orphans == []
    m.recover_partition(2, NOW)
    assert m.unresolved_orphans == [(99, PA)]


histories = st.lists(st.tuples(st.sampled_from(IDS), st.none() | with_first_offsets()),
                     max_size=25)
open_data = st.dictionaries(st.sampled_from([0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 99]), st.lists(st.sampled_from([PA, PB, PC]),
                                                        unique=True, max_size=3), max_size=3)


@settings(max_examples=200, deadline=None)
@given(histories, open_data, st.permutations(range(PARTITIONS)), st.booleans())
def test_partition_by_partition_equals_all_at_once(history, opened, order, shell_partition) -> None:
    """Whatever the order the partitions load in: requests for an id are answered
    COORDINATOR_LOAD_IN_PROGRESS exactly while its partition loads; each partition's
    recovery writes what the all-at-once recovery writes for its ids; the end state,
    timers and unresolved orphans are the same."""
    # One producer id per id (i, next one 10 + i), as a coordinator hands them out, so
    # that the open data hits them.
    history = [(tid, None if v is None else TxnLogValue(**{
        **v.__dict__, "producer_id": IDS.index(tid),
        "next_producer_id": -1 if v.next_producer_id < 0 else 10 + IDS.index(tid),
        # times before NOW, so that a tick far later is past every deadline
        "txn_start_ms": min(v.txn_start_ms, NOW), "last_update_ms": min(v.last_update_ms, NOW)}))
        for tid, v in history]
    whole = loaded(history)
    all_at_once = whole.recover(NOW, opened)
    parts = loaded(history, shell_partition)
    parts.begin_load(opened)
    writes, expired, markers = [], [], []
    done: set[int] = set()
    for p in order:
        for tid in IDS:
            assert (parts.describe(tid).error == LOAD) == (partition_of(tid) not in done)
        fx = parts.recover_partition(p, NOW)
        done.add(p)
        assert {partition_of(w.transactional_id) for w in fx.persist} <= {p}
        writes += [(w.transactional_id, w.record) for w in fx.persist]
        markers += [(m.commit, m.partitions, m.producer_id, m.producer_epoch) for m in fx.markers]
        expired += fx.expired
    assert parts.loaded
    assert sorted(writes, key=repr) == sorted(
        ((w.transactional_id, w.record) for w in all_at_once.persist), key=repr)
    assert sorted(expired) == sorted(all_at_once.expired)
    assert sorted(markers, key=repr) == sorted(
        ((m.commit, m.partitions, m.producer_id, m.producer_epoch) for m in all_at_once.markers),
        key=repr)
    assert parts.unresolved_orphans == whole.unresolved_orphans
    assert parts.deferred_orphan_aborts() == whole.deferred_orphan_aborts()
    assert parts.transactional_ids() == whole.transactional_ids()
    for tid in whole.transactional_ids():
        assert parts.inspect(tid) == whole.inspect(tid)
    assert parts.next_wake_ms() == whole.next_wake_ms()
    # Every timer armed alike: far in the future the same transactions time out and
    # the same ids expire.
    far = NOW + 10**12  # past every deadline the records can hold
    timed_out = parts.tick(far)
    assert sorted(((w.transactional_id, w.record) for w in timed_out.persist), key=repr) == \
        sorted(((w.transactional_id, w.record) for w in whole.tick(far).persist), key=repr)
    # ... and not only alike, but every id recovered: each decided one is being
    # completed, each other open one timed out (its partition's load armed it).
    for tid in whole.transactional_ids():
        state, pending = parts.inspect(tid)["state"], parts.inspect(tid)["pending_state"]
        if state in ("PrepareCommit", "PrepareAbort"):
            assert pending in ("CompleteCommit", "CompleteAbort"), (tid, state, pending)
        elif state == "Ongoing":
            assert tid in {w.transactional_id for w in timed_out.persist} | set(expired), tid

