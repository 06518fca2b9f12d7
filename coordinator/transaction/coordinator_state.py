"""The request coordinator: Kafka's ``TransactionCoordinator``, the sans-IO
:class:`TransactionCoordinatorState` the async shell drives (its contract is
:mod:`.state`'s docstring), and the one front door of the transaction state machine.

It answers the requests (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn
of transactions v1 and v2: :mod:`.requests`; ``expire_now``; the verification and
admin views: :mod:`.views`), takes the shell's reports (``persisted``,
``markers_written``), and acts on what the state manager hands back: the
transactions a partition's load recovered or lost (their markers again, or an abort)
and those whose timeout or expiration is due (an abort with an epoch bump, a
tombstone).

What it owns: the configuration, the group-partition mapping, and two objects it
builds and no one else touches: the state manager (:mod:`.state_manager`: the cache
of ids, loading, timers, producer id allocation) and the writes in flight
(:mod:`.writes`: records and markers in flight, what follows each, fencing). It
changes a transaction only through :mod:`.metadata`'s transitions and the cache only
through the manager. The shell, handlers, console and metrics use its public methods
only (tests also reach a few state attributes through the back doors at the end).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import txbroker.coordinator.transaction.requests as requests
import txbroker.coordinator.transaction.views as views
from kio.schema.errors import ErrorCode as _E
from txbroker.coordinator.transaction.metadata import (
    PREPARE_STATES,
    PendingWrite,
    Txn,
    TxnState,
    outcome_of,
    prepare_complete,
)
from txbroker.coordinator.transaction.metadata import (
    TxnState as _S,
)
from txbroker.coordinator.transaction.records import TxnLogValue
from txbroker.coordinator.transaction.results import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NONE,
    Effects,
    Fx,
    ListTransactionsResult,
    Token,
    TopicPartition,
    TxnConfig,
    TxnDescription,
    TxnEvent,
)
from txbroker.coordinator.transaction.state_manager import OpenTransactions, TransactionStateManager
from txbroker.coordinator.transaction.writes import TransactionWrites


class TransactionCoordinatorState:
    """All transactional ids of this coordinator (see :mod:`.state`'s docstring)."""

    def __init__(
        self,
        config: TxnConfig,
        allocate_producer_id: Callable[[], int],
        partition_for_group: Callable[[str], TopicPartition],
        *,
        coordinator_epoch: int = 0,
        txn_first_offset: Callable[[int, TopicPartition], int | None] | None = None,
        partitions: int = 1,
        txn_partition: Callable[[str], int] | None = None,
    ) -> None:
        """``allocate_producer_id()`` returns a fresh producer id (never reused, also
        across restarts). Should it raise, the request is answered
        COORDINATOR_LOAD_IN_PROGRESS (retriable: Kafka's answer when no producer id
        block is available) and nothing changes.

        ``partition_for_group(group_id)`` is the group's ``__consumer_offsets``
        partition (AddOffsetsToTxn). ``coordinator_epoch`` goes into every marker.

        ``txn_first_offset(producer_id, partition)`` is the offset of the first batch
        of the producer's open transaction in that partition, or None (none open). It
        is asked when a transaction is decided, for the PrepareCommit/PrepareAbort
        record, so that recovery can tell this transaction's data from a later one's
        (see :meth:`begin_load`). Without it, records carry no first offsets and recovery
        trusts the partition list alone.

        ``partitions``: how many ``__transaction_state`` partitions load;
        ``txn_partition(transactional_id)`` is the one an id lives in (default: all in
        partition 0).
        """
        self.config = config
        self._partition_for_group = partition_for_group
        self._manager = TransactionStateManager(config, allocate_producer_id,
                                                partitions=partitions, txn_partition=txn_partition)
        self._writes = TransactionWrites(self._manager, coordinator_epoch, txn_first_offset)

    @property
    def coordinator_epoch(self) -> int:
        return self._writes.coordinator_epoch

    # ==============================================================================
    # Loading (the manager's), and acting on what a partition's load recovered
    # ==============================================================================

    def replay(self, key: bytes, value: bytes | None, partition: int | None = None) -> None:
        """Load one ``__transaction_state`` record (before its partition's
        :meth:`recover_partition`); ``partition``: the one it was read from (default:
        the id's, computed).

        Raises ValueError on a malformed record (the shell decides whether to skip it).
        """
        self._manager.replay(key, value, partition)

    def load_row(self, row: list, partition: int | None = None) -> None:
        """Load one row of a coordinator snapshot (``snapshot.row_of``'s layout): the
        fast path of a load. Raises ValueError on a row that does not fit."""
        self._manager.load_row(row, partition)

    def load(self, tid: str, rec: TxnLogValue | None, partition: int | None = None) -> None:
        """:meth:`replay` of a record already decoded (a coordinator snapshot's row)."""
        self._manager.load(tid, rec, partition)

    def begin_load(self, open_transactions: OpenTransactions | None = None) -> None:
        """Before the first :meth:`recover_partition`: the open transactions the
        partition logs recovered (taken before any request is served, so that none
        of them is a transaction begun since).

        ``open_transactions``: producer id -> the partitions holding an open
        transaction of that producer (data with no COMMIT/ABORT marker after it),
        as the partition logs recovered them, each with the offset of that open
        transaction's first batch (a plain list of partitions: offsets unknown). A
        partition the producer's transaction here does not include is an orphan: the AddPartitionsToTxn
        record that added it was acted on before it was fsynced and then lost (a
        power failure), while some of the data reached the disk. The transaction
        cannot have committed (its PrepareCommit would follow that record), so it is
        aborted as a timeout would abort it: epoch bump (the producer is fenced),
        PrepareAbort, ABORT markers into every partition, orphans included. If the
        durable record is a PrepareCommit/PrepareAbort, its unsynced completion was
        lost with the next transaction's records: that transaction is aborted the
        same way once recovery has completed the decided one (in the Effects of the
        Complete* write's persisted()). That next transaction may have written to a
        partition of the decided one too, after the decided one's durable marker:
        there the open transaction's first offset differs from the one the Prepare*
        record holds, so that partition is an orphan as well and gets no second
        marker of the decided transaction (which would end the wrong one). Orphans of a producer id unknown here are
        listed in :attr:`unresolved_orphans` for the shell to report once every
        partition is loaded; they are what ``find-hanging`` shows.
        """
        self._manager.begin_load(open_transactions)

    def recover(self, now_ms: int, open_transactions: OpenTransactions | None = None) -> Effects:
        """End the load of every partition still loading at once: :meth:`begin_load`
        then :meth:`recover_partition` for each (their Effects together)."""
        if self._manager.loaded:
            raise RuntimeError("recover() called twice")
        self._manager.begin_load(open_transactions)
        fx = Fx()
        for p in self._manager.loading_partitions():
            self._recover_partition(fx, p, now_ms)
        return self._finish(fx)

    def recover_partition(self, partition: int, now_ms: int) -> Effects:
        """End the load of one partition: serve its ids, and finish each of its
        PrepareCommit/PrepareAbort (request its markers again, then Complete*), like
        Kafka after loading a partition of ``__transaction_state``; abort the
        transactions of its ids that lost their AddPartitionsToTxn record (see
        :meth:`begin_load`)."""
        fx = Fx()
        self._recover_partition(fx, partition, now_ms)
        return self._finish(fx)

    def _recover_partition(self, fx: Fx, partition: int, now_ms: int) -> None:
        loaded = self._manager.end_partition_load(partition)
        for txn, orphans in loaded.lost:
            self._writes.abort_lost_transaction(fx, txn, now_ms, orphans)
        for txn in loaded.txns:
            if txn.state in PREPARE_STATES and txn.pending is None:
                marked = txn.partitions - txn.orphans
                txn.recovering = True
                fx.events.append(TxnEvent("recovering", txn.transactional_id, txn.producer_id,
                                          txn.producer_epoch, outcome=outcome_of(txn),
                                          markers=len(marked)))
                self._writes.send_markers(fx, txn, prepare_complete(txn, now_ms), marked)
        self._manager.arm_all(loaded.txns)

    def partition_loaded(self, partition: int) -> bool:
        return self._manager.partition_loaded(partition)

    @property
    def loaded(self) -> bool:
        return self._manager.loaded

    @property
    def unresolved_orphans(self) -> list[tuple[int, TopicPartition]]:
        """(producer id, partition) open transactions no loaded id claimed (read only)."""
        return self._manager.unresolved_orphans

    def deferred_orphan_aborts(self) -> list[str]:
        """Transactional ids whose next transaction recovery aborts once their decided
        one is completed (see :meth:`begin_load`)."""
        return self._manager.deferred_orphan_aborts()

    # ==============================================================================
    # What the shell reports back
    # ==============================================================================

    def persisted(self, now_ms: int, write_id: int, error: int = NONE) -> Effects:
        """PersistRequest ``write_id`` is durable (``error == NONE``) or failed."""
        fx = Fx()
        self._writes.persisted(fx, now_ms, write_id, error)
        return self._finish(fx)

    def markers_written(self, now_ms: int, marker_id: int, error: int = NONE,
                        failed: Iterable[TopicPartition] | None = None) -> Effects:
        """Every marker of MarkerRequest ``marker_id`` is durable (or, on error, not all:
        ``failed`` names the partitions still without theirs, default all the request's;
        only those are asked for again, as Kafka's marker channel retries per partition)."""
        fx = Fx()
        self._writes.markers_written(fx, marker_id, error, failed)
        return self._finish(fx)

    # ==============================================================================
    # Timers: acting on what the manager hands back as due
    # ==============================================================================

    def tick(self, now_ms: int) -> Effects:
        """Abort timed-out transactions (epoch bump) and expire idle transactional ids."""
        fx = Fx()
        manager = self._manager
        # Only loaded partitions' transactions are armed: nothing else to check.
        for txn in manager.timed_out(now_ms):
            # Kafka's abortTimedOutTransactions: nobody waits for the outcome.
            old_epoch = txn.producer_epoch
            if not self._writes.fence_and_abort(fx, txn, now_ms, None, 0, "timed_out"):
                # No producer id for an abort at the last epoch (Kafka logs the error
                # and tries again at its next check): still due at the next check.
                manager.arm(txn)
                continue
            fx.events.append(TxnEvent("timed_out", txn.transactional_id, txn.producer_id,
                                      old_epoch, age_ms=now_ms - txn.start_ms,
                                      new_epoch=txn.producer_epoch))
        for txn in manager.expired(now_ms):
            transit = self._writes.prepare(txn, _S.DEAD, partitions=frozenset())
            self._writes.write(fx, PendingWrite("dead", txn, transit))
        return self._finish(fx)

    def next_wake_ms(self) -> int | None:
        return self._manager.next_wake_ms()

    def expire_now(self, now_ms: int, transactional_id: str | None = None,
                   outcome: str = "timed_out") -> Effects:
        """Fault injection: abort every ongoing transaction (or only the one of
        ``transactional_id``) now, exactly as its timeout would: the epoch is bumped at
        once (the producer is fenced), then PrepareAbort (stamped ``now_ms``), ABORT
        markers, CompleteAbort. The timers are left alone, so later timeouts and
        expirations fire when they are due.

        A transaction whose state write is in flight (AddPartitionsToTxn, including the
        first one of a transaction, or EndTxn) is aborted once that write is done, if
        it is Ongoing then: an EndTxn whose PrepareCommit/PrepareAbort lands has decided
        the outcome first. ``Effects.expired`` lists the ids acted on (aborted now, or
        marked to be); ids without an ongoing transaction (or unknown) are left alone.
        ``outcome``: how the abort is counted (an operator's abort from the console is
        "aborted", not "timed_out")."""
        fx = Fx()
        manager = self._manager
        if transactional_id is None:
            targets = [manager.get(tid) for tid in manager.ids() if manager.ready(tid)]
        else:
            one = manager.get(transactional_id) if manager.ready(transactional_id) else None
            targets = [] if one is None else [one]
        for txn in targets:
            assert txn is not None
            if _S.ONGOING not in (txn.state, txn.pending):
                continue
            if txn.pending is not None:
                txn.expire_requested = True
                txn.expire_outcome = outcome
            elif not self._writes.fence_and_abort(fx, txn, now_ms, None, 0, outcome):
                continue  # no producer id for an abort at the last epoch: left alone
            fx.expired.append(txn.transactional_id)
        return self._finish(fx)

    # ==============================================================================
    # Requests (:mod:`.requests` does the work)
    # ==============================================================================

    def init_producer_id(
        self,
        token: Token,
        now_ms: int,
        transactional_id: str | None,
        txn_timeout_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        *,
        api_version: int,
    ) -> Effects:
        """InitProducerId. ``transactional_id=None``: an idempotent producer, answered at
        once with a fresh producer id at epoch 0. ``producer_id``/``producer_epoch``
        are the KIP-360 fields (v3+; pass -1/-1 for older versions)."""
        assert token is not None, "tokens must not be None"
        fx = Fx()
        requests.init_producer_id(self._manager, self._writes, fx, token, now_ms, transactional_id,
                                  txn_timeout_ms, producer_id, producer_epoch, api_version)
        return self._finish(fx)

    def add_partitions(
        self,
        token: Token,
        now_ms: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        *,
        api_version: int,
    ) -> Effects:
        """AddPartitionsToTxn v0-3 (the partitions exist and are authorized)."""
        assert token is not None, "tokens must not be None"
        parts = tuple(dict.fromkeys((str(t), int(p)) for t, p in partitions))
        fx = Fx()
        requests.add(self._manager, self._writes, fx, token, now_ms, transactional_id, producer_id,
                     producer_epoch, parts, "add_partitions", api_version)
        return self._finish(fx)

    def add_offsets(
        self,
        token: Token,
        now_ms: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        *,
        api_version: int,
    ) -> Effects:
        """AddOffsetsToTxn: adds the group's ``__consumer_offsets`` partition."""
        assert token is not None, "tokens must not be None"
        tp = self._partition_for_group(group_id)
        fx = Fx()
        requests.add(self._manager, self._writes, fx, token, now_ms, transactional_id, producer_id,
                     producer_epoch, (tp,), "add_offsets", api_version)
        return self._finish(fx)

    def end_txn(
        self,
        token: Token,
        now_ms: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        api_version: int,
    ) -> Effects:
        """EndTxn: transactions v1 below v5, v2 from v5 (see :mod:`.state`'s docstring)."""
        assert token is not None, "tokens must not be None"
        fx = Fx()
        requests.end_txn(self._manager, self._writes, fx, token, now_ms, transactional_id,
                         producer_id, producer_epoch, commit, api_version)
        return self._finish(fx)

    # -- TxnOffsetCommit / produce verification (KIP-890 part 1) ---------------

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Kafka's handleVerifyPartitionsInTransaction: per partition NONE if it is part of
        the producer's ongoing transaction, else TRANSACTION_ABORTABLE; or one error for
        all (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS in
        Prepare*). Raw coordinator codes: callers map them for their API version."""
        return views.verify_partitions(self._manager, transactional_id, producer_id,
                                       producer_epoch, partitions)

    def check_txn_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                group_id: str, *, api_version: int) -> int:
        """What the group coordinator asks before appending a TxnOffsetCommit: is the
        group's offsets partition part of this producer's ongoing transaction?

        NONE, or the error for the whole request: INVALID_PRODUCER_EPOCH for a fenced
        producer (every version: Kafka's verification turns PRODUCER_FENCED into it, and
        TxnOffsetCommit never got the KIP-588 code), INVALID_PRODUCER_ID_MAPPING,
        CONCURRENT_TRANSACTIONS, and INVALID_TXN_STATE when AddOffsetsToTxn was not done
        (TRANSACTION_ABORTABLE from v4, KIP-890's GENERIC_ERROR_SUPPORTED). Group membership and generation are the
        group coordinator's part.
        """
        tp = self._partition_for_group(group_id)
        error = self.verify_partitions(transactional_id, producer_id, producer_epoch, [tp])[tp]
        if error == _E.transaction_abortable.value and api_version < 4:
            error = _E.invalid_txn_state.value
        if error == _E.producer_fenced.value:
            error = _E.invalid_producer_epoch.value
        return error

    # -- Admin views (KIP-664) and introspection: :mod:`.views`, read only ------

    def describe(self, transactional_id: str) -> TxnDescription:
        """DescribeTransactions for one transactional id."""
        return views.describe(self._manager, transactional_id)

    def list_transactions(self, state_filters: Iterable[str] = (), producer_id_filters: Iterable[int] = (),
                          duration_filter_ms: int = -1, now_ms: int | None = None) -> ListTransactionsResult:
        """ListTransactions v0-1. State names match exactly (Kafka's names); unknown ones
        are reported back. ``duration_filter_ms >= 0`` (v1; needs ``now_ms``) keeps only
        transactions whose start time is more than that long ago (pass -1 for v0)."""
        return views.list_transactions(self._manager, state_filters, producer_id_filters,
                                       duration_filter_ms, now_ms)

    def transactional_ids(self) -> list[str]:
        return self._manager.ids()

    def state_of(self, transactional_id: str) -> TxnState | None:
        txn = self._manager.get(transactional_id)
        return txn.state if txn is not None else None

    def record_of(self, transactional_id: str) -> TxnLogValue | None:
        """The current (completed) metadata as a record, None if unknown."""
        return views.record_of(self._manager, transactional_id)

    def inspect(self, transactional_id: str) -> dict[str, Any] | None:
        return views.inspect(self._manager, transactional_id)

    def open_transaction_starts(self) -> list[int]:
        """Start times (ms) of the transactions not yet complete (Ongoing, Prepare*)."""
        return views.open_transaction_starts(self._manager)

    def state_counts(self) -> dict[str, int]:
        """Transactional ids per state (DescribeTransactions' state names)."""
        return views.state_counts(self._manager)

    def held_tokens(self) -> set[Token]:
        """Tokens whose answer waits for a write."""
        return self._writes.held_tokens()

    def pending_write_ids(self) -> list[int]:
        return self._writes.pending_write_ids()

    def pending_marker_ids(self) -> list[int]:
        return self._writes.pending_marker_ids()

    # -- Test back doors: tests stage situations through the old attribute names ----

    @property
    def _txns(self) -> dict[str, Txn]:
        return self._manager._txns

    @property
    def _heaps(self) -> dict[str, list[tuple[int, int, Txn]]]:
        return self._manager._heaps

    @property
    def _loading(self) -> set[int]:
        return self._manager._loading

    @property
    def _loaded(self) -> bool:
        return self._manager._loaded

    @_loaded.setter
    def _loaded(self, value: bool) -> None:
        self._manager._loaded = value

    @property
    def _partition_of(self) -> Callable[[str], int]:
        return self._manager._partition_of

    @property
    def _allocate_producer_id(self) -> Callable[[], int]:
        return self._manager._allocate_producer_id

    @_allocate_producer_id.setter
    def _allocate_producer_id(self, allocate: Callable[[], int]) -> None:
        self._manager._allocate_producer_id = allocate

    # -- helpers -------------------------------------------------------------------

    def _finish(self, fx: Fx) -> Effects:
        return Effects(fx.responses, fx.persist, fx.markers, self._manager.next_wake_ms(),
                       fx.expired, fx.events)
