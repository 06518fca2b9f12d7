"""Loading ``__transaction_state``: Kafka's ``TransactionStateManager`` side of a
coordinator's start. Records replayed per partition (:meth:`~LoadingMixin.replay`,
snapshot rows), the open transactions the partition logs recovered
(:meth:`~LoadingMixin.begin_load`), the end of a partition's load
(:meth:`~LoadingMixin.recover_partition`: its decided transactions finished, the
transactions that lost their records aborted, their orphans), and whether an id's
partition is served yet. The contract is in :mod:`.state`'s docstring.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from txbroker.coordinator.transaction.metadata import (
    _IDLE,
    _NO_PARTITIONS,
    _PREPARE,
    _S,
    _STATE_BY_ID,
    TxnState,
    _outcome_of,
    _Txn,
    complete_transition,
    covers,
    prepare_complete,
)
from txbroker.coordinator.transaction.records import TxnLogValue, decode_key, decode_value
from txbroker.coordinator.transaction.results import Effects, TopicPartition, TxnEvent, _Fx


class LoadingMixin:
    """Loading of TransactionCoordinatorState (:mod:`.state`), whose attributes and
    helpers (``_txns``, ``_loading``, ``_prepare``, ``_finish``, timers, ...) it uses."""

    def replay(self, key: bytes, value: bytes | None, partition: int | None = None) -> None:
        """Load one ``__transaction_state`` record (before its partition's
        :meth:`recover_partition`); ``partition``: the one it was read from (default:
        the id's, computed).

        Raises ValueError on a malformed record (the shell decides whether to skip it).
        """
        self.load(decode_key(key), decode_value(value), partition)

    def _loading_into(self, tid: str, partition: int | None, tombstone: bool = False) -> None:
        """Note ``tid`` as an id of its partition (which must be loading), in the order
        of ``_txns`` (a tombstone removes it; loading it again puts it last)."""
        p = self._partition_of(tid) if partition is None else partition
        members = self._members.get(p)  # present only while p loads (recovery pops it)
        if members is None:
            if p not in self._loading:
                raise RuntimeError("replay() after recover(): build a fresh machine to reload")
            members = self._members[p] = {}
        if tombstone:
            members.pop(tid, None)
        else:
            members.setdefault(tid)

    def load_row(self, row: list, partition: int | None = None) -> None:
        """Load one row of a coordinator snapshot (``snapshot.row_of``'s layout): the
        fast path of a load, a record already validated when it was first written.
        Raises ValueError on a row that does not fit."""
        self._loading_into(row[0], partition)
        (tid, pid, prev, nxt, epoch, last_epoch, timeout, state_id, parts, start, update,
         firsts) = row[:12]
        tv = row[12] if len(row) > 12 else 0  # rows from before transactions v2: 0
        try:
            state = _STATE_BY_ID[state_id]
            partitions = frozenset((t, p) for t, p in parts) if parts else _NO_PARTITIONS
            first_offsets = None if firsts is None else {(t, p): o for t, p, o in firsts}
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"snapshot row of {tid!r}: {e!r}") from None
        if type(tv) is not int:
            raise ValueError(f"snapshot row of {tid!r}: client transaction version {tv!r}")
        self._txns[tid] = _Txn(tid, pid, prev, nxt, epoch, last_epoch, timeout, state,
                               partitions, start, update, first_offsets=first_offsets, tv=tv)

    def load(self, tid: str, rec: TxnLogValue | None, partition: int | None = None) -> None:
        """:meth:`replay` of a record already decoded (a coordinator snapshot's row)."""
        self._loading_into(tid, partition, rec is None)
        if rec is None:
            self._txns.pop(tid, None)
            return
        self._txns[tid] = _Txn(
            transactional_id=tid,
            producer_id=rec.producer_id,
            prev_producer_id=rec.previous_producer_id,
            next_producer_id=rec.next_producer_id,
            producer_epoch=rec.producer_epoch,
            last_producer_epoch=rec.last_producer_epoch,
            timeout_ms=rec.timeout_ms,
            state=TxnState(rec.state),
            partitions=rec.partitions,
            start_ms=rec.txn_start_ms,
            last_update_ms=rec.last_update_ms,
            first_offsets=rec.txn_first_offsets,
            tv=rec.client_transaction_version,
        )

    def recover(self, now_ms: int,
                open_transactions: Mapping[int, Mapping[TopicPartition, int | None]
                                           | Iterable[TopicPartition]] | None = None) -> Effects:
        """End the load of every partition still loading at once: :meth:`begin_load`
        then :meth:`recover_partition` for each (their Effects together)."""
        if self._loaded:
            raise RuntimeError("recover() called twice")
        self.begin_load(open_transactions)
        fx = _Fx()
        for p in sorted(self._loading):
            self._recover_partition(fx, p, now_ms)
        return self._finish(fx)

    def begin_load(self, open_transactions: Mapping[int, Mapping[TopicPartition, int | None]
                                                    | Iterable[TopicPartition]] | None = None
                   ) -> None:
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
        for pid, entries in (open_transactions or {}).items():
            self._open_by_pid[pid] = (
                {(str(t), int(p)): o for (t, p), o in entries.items()} if isinstance(entries, Mapping)
                else {(str(t), int(p)): None for t, p in entries})

    def recover_partition(self, partition: int, now_ms: int) -> Effects:
        """End the load of one partition: serve its ids, and finish each of its
        PrepareCommit/PrepareAbort (request its markers again, then Complete*), like
        Kafka after loading a partition of ``__transaction_state``; abort the
        transactions of its ids that lost their AddPartitionsToTxn record (see
        :meth:`begin_load`)."""
        if partition not in self._loading:
            raise RuntimeError(f"partition {partition} is not loading")
        fx = _Fx()
        self._recover_partition(fx, partition, now_ms)
        return self._finish(fx)

    def _recover_partition(self, fx: _Fx, partition: int, now_ms: int) -> None:
        self._loading.discard(partition)
        txns = self._txns
        mine = [txns[tid] for tid in self._members.pop(partition, ())]
        if self._open_by_pid:
            self._abort_orphans(fx, now_ms, mine)
        for txn in mine:
            if txn.state in _PREPARE and txn.pending is None:
                marked = txn.partitions - txn.orphans
                txn.recovering = True
                fx.events.append(TxnEvent("recovering", txn.transactional_id, txn.producer_id,
                                          txn.producer_epoch, outcome=_outcome_of(txn),
                                          markers=len(marked)))
                self._send_markers(fx, txn, prepare_complete(txn, now_ms), marked)
        self._arm_all(mine)
        if not self._loading:
            self._loaded = True
            for pid in sorted(self._open_by_pid):
                self.unresolved_orphans.extend((pid, tp) for tp in sorted(self._open_by_pid[pid]))
            self._open_by_pid.clear()

    def _ready(self, transactional_id: str) -> bool:
        """Is the id's partition loaded (its requests served)?"""
        return self._loaded or self._partition_of(transactional_id) not in self._loading

    def partition_loaded(self, partition: int) -> bool:
        return partition not in self._loading

    @property
    def loaded(self) -> bool:
        return self._loaded

    def deferred_orphan_aborts(self) -> list[str]:
        """Transactional ids whose next transaction recovery aborts once their decided
        one is completed (see :meth:`recover`)."""
        return sorted(tid for tid, txn in self._txns.items() if txn.orphans)

    def _abort_orphans(self, fx: _Fx, now: int, txns: list[_Txn]) -> None:
        """The open transactions of these (just loaded) transactions' producer ids:
        those their durable record does not cover are orphans (see :meth:`begin_load`)."""
        open_by_pid = self._open_by_pid
        by_pid = {txn.producer_id: txn for txn in txns if txn.producer_id in open_by_pid}
        # Transactions v2: a decided transaction that exhausted its epoch continues under
        # its next producer id; data of that id is the next transaction's.
        by_pid.update({txn.next_producer_id: txn for txn in txns
                       if txn.state in _PREPARE and txn.next_producer_id in open_by_pid})
        for pid in sorted(by_pid):
            opened = open_by_pid.pop(pid)
            txn = by_pid[pid]
            orphans = frozenset(tp for tp, first in opened.items()
                                if txn.producer_id != pid or not covers(txn, tp, first))
            if not orphans:
                continue
            if txn.state in _PREPARE:
                # The completion of this decided transaction was lost too (it is not
                # fsynced either), with the next transaction's records: that one is
                # aborted once recovery has completed this one.
                txn.orphans = txn.orphans | orphans
            else:
                self._abort_lost_transaction(fx, txn, now, orphans)

    def _abort_lost_transaction(self, fx: _Fx, txn: _Txn, now: int, orphans: frozenset) -> None:
        """Rebuild the lost Ongoing record (in memory, never written) with the orphaned
        partitions, then abort it as a timeout would: epoch bump, PrepareAbort."""
        transit = self._prepare(txn, _S.ONGOING, partitions=txn.partitions | orphans,
                                start_ms=now if txn.state in _IDLE else txn.start_ms,
                                last_update_ms=now)
        complete_transition(txn, transit)
        if self._fence_and_abort(fx, txn, now, None, 0, "aborted"):
            fx.expired.append(txn.transactional_id)
        else:
            # No producer id for the abort at the last epoch: Ongoing (in memory) until
            # its timeout aborts it.
            self._arm(txn)
