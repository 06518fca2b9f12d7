"""The writes and markers in flight, and what follows each: Kafka's append callbacks
and ``TransactionMarkerChannelManager``.

What it owns (nothing else writes these): every ``__transaction_state`` write in
flight (write id -> :class:`.metadata._Write`) and every marker request in flight
(marker id -> its transaction), their id counters and the coordinator epoch the
markers carry. It turns a prepared transition into a :class:`.results.PersistRequest`
(:meth:`TransactionWrites.write`), carries a transaction forward once the shell
reports a write durable or failed (:meth:`~TransactionWrites.persisted`: the answer,
then markers for a decided transaction, then Complete*; the expiry tombstone) or its
markers written (:meth:`~TransactionWrites.markers_written`), and starts the aborts
the coordinator decides on its own (:meth:`~TransactionWrites.fence_and_abort`:
timeouts, fencing InitProducerId, ``expire_now``, lost records).

Who may touch it: the request coordinator (:mod:`.requests`), which owns it and is
the only caller. It reads and changes transactions of the state manager
(:mod:`.state_manager`) only through :mod:`.metadata`'s transitions and the manager's
methods (``arm``, ``remove``, ``owns``, ``allocate_producer_id``). Every method adds
to the caller's ``Fx``; the caller builds the Effects.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode as _E
from txbroker.coordinator.transaction.metadata import (
    IDLE_STATES,
    MAX_EPOCH,
    IllegalTransitionError,
    PendingWrite,
    Transit,
    Txn,
    TxnState,
    check_transition,
    complete_transition,
    outcome_of,
    prepare_complete,
    prepare_transition,
)
from txbroker.coordinator.transaction.metadata import (
    TxnState as _S,
)
from txbroker.coordinator.transaction.records import encode_key, encode_value
from txbroker.coordinator.transaction.results import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NONE,
    EndTxnResult,
    Fx,
    InitProducerIdResult,
    MarkerRequest,
    PersistRequest,
    Token,
    TopicPartition,
    TxnEvent,
    client_error,
    result_for,
)
from txbroker.coordinator.transaction.state_manager import TransactionStateManager


class TransactionWrites:
    """The writes and marker requests in flight (see the module docstring)."""

    def __init__(self, manager: TransactionStateManager, coordinator_epoch: int,
                 txn_first_offset: Callable[[int, TopicPartition], int | None] | None) -> None:
        self._manager = manager
        self.coordinator_epoch = coordinator_epoch
        self._txn_first_offset = txn_first_offset
        self._writes: dict[int, PendingWrite] = {}
        self._write_ids = itertools.count(1)
        self._markers: dict[int, Txn] = {}
        self._marker_ids = itertools.count(1)

    def held_tokens(self) -> set[Token]:
        return {w.token for w in self._writes.values() if w.token is not None}

    def pending_write_ids(self) -> list[int]:
        return list(self._writes)

    def pending_marker_ids(self) -> list[int]:
        return list(self._markers)

    # -- starting a write --------------------------------------------------------

    def prepare(self, txn: Txn, target: TxnState, **changes: Any) -> Transit:
        """:func:`.metadata.prepare_transition` with this coordinator's first offsets."""
        return prepare_transition(txn, target, self.first_offsets, **changes)

    def first_offsets(self, txn: Txn) -> dict[TopicPartition, int] | None:
        """Where the transaction's data starts in each of its partitions (Prepare* records)."""
        if self._txn_first_offset is None:
            return None
        out = {}
        for tp in sorted(txn.partitions):
            first = self._txn_first_offset(txn.producer_id, tp)
            if first is not None:
                out[tp] = first
        return out

    def write(self, fx: Fx, w: PendingWrite) -> None:
        """Ask the shell to persist ``w``'s record; :meth:`persisted` carries it on."""
        write_id = next(self._write_ids)
        self._writes[write_id] = w
        tid = w.txn.transactional_id
        if w.kind == "dead":
            fx.persist.append(PersistRequest(write_id, tid, encode_key(tid), None, None))
            return
        record = w.transit.record()
        w.acted_on_append = w.kind == "complete" or (
            w.api == "add_partitions" and not w.txn.tombstone_maybe_written)
        fx.persist.append(PersistRequest(write_id, tid, encode_key(tid), encode_value(record), record,
                                         adds_data_partitions=w.acted_on_append and w.kind == "add"))

    # -- what follows a write ----------------------------------------------------

    def persisted(self, fx: Fx, now_ms: int, write_id: int, error: int) -> None:
        """PersistRequest ``write_id`` is durable (``error == NONE``) or failed."""
        w = self._writes.pop(write_id, None)
        if w is None:
            return
        txn = w.txn
        manager = self._manager
        if not manager.owns(txn):
            raise IllegalTransitionError(f"write {write_id} outlived its transaction metadata")
        if w.kind == "complete":
            if error == NONE:
                fx.events.append(TxnEvent(
                    "completed", txn.transactional_id, txn.producer_id, txn.producer_epoch,
                    age_ms=now_ms - txn.start_ms, outcome=outcome_of(txn),
                    markers=txn.marker_count,
                    recovered=txn.recovering))
                txn.outcome, txn.recovering = None, False
                complete_transition(txn, w.transit)
                txn.complete = None
                manager.arm(txn)
                if txn.orphans:
                    orphans, txn.orphans = txn.orphans, frozenset()
                    self.abort_lost_transaction(fx, txn, now_ms, orphans)
            else:
                # Kafka retries this append until it succeeds (pending state kept).
                self.write(fx, PendingWrite("complete", txn, w.transit))
        elif w.kind == "dead":
            if error == NONE:
                if txn.pending is not _S.DEAD:
                    raise IllegalTransitionError(f"{txn.transactional_id}: tombstone without pending Dead")
                check_transition(txn.state, _S.DEAD)
                fx.events.append(TxnEvent("expired", txn.transactional_id, txn.producer_id,
                                          txn.producer_epoch,
                                          age_ms=now_ms - txn.last_update_ms))
                txn.state, txn.pending = _S.DEAD, None
                manager.remove(txn)
            else:
                txn.pending = None
                txn.tombstone_maybe_written = True
                manager.arm(txn)  # expired still: retried at the next expiration check
        elif error != NONE:
            txn.pending = None
            if w.fence:
                txn.failed_epoch_fence = True
            if w.token is not None:
                fx.respond(w.token, result_for(w.api, w.api_version, error, w.partitions))
            manager.arm(txn)
        else:
            if not w.acted_on_append:
                txn.tombstone_maybe_written = False  # durable after any tombstone
            complete_transition(txn, w.transit)
            if w.kind == "prepare":
                # PrepareCommit/PrepareAbort is durable: the outcome is decided. Answer,
                # then write the markers; Complete* follows once they are durable.
                txn.expire_requested = False  # decided: nothing left to expire
                if w.token is not None and w.api == "end_txn" and w.transit.tv >= 2:
                    # EndTxn v5 answers with what the producer continues with.
                    if txn.next_producer_id != NO_PRODUCER_ID:
                        fx.respond(w.token, EndTxnResult(NONE, txn.next_producer_id, 0))
                    else:
                        fx.respond(w.token, EndTxnResult(NONE, txn.producer_id,
                                                         txn.producer_epoch))
                elif w.token is not None:
                    # InitProducerId that fenced an ongoing transaction: retry later.
                    result = _E.concurrent_transactions.value if w.fence else NONE
                    fx.respond(w.token, result_for(w.api, w.api_version, result, ()))
                self.send_markers(fx, txn, prepare_complete(txn, now_ms))
            elif w.kind == "init":
                fx.respond(w.token, InitProducerIdResult(NONE, txn.producer_id, txn.producer_epoch))
            else:  # "add"
                fx.respond(w.token, result_for(w.api, w.api_version, NONE, w.partitions))
            manager.arm(txn)
        if txn.expire_requested and txn.pending is None and manager.owns(txn):
            # expire_now() came while this write was in flight.
            txn.expire_requested = False
            if txn.state is _S.ONGOING:
                self.fence_and_abort(fx, txn, now_ms, None, 0, txn.expire_outcome)

    def markers_written(self, fx: Fx, marker_id: int, error: int,
                        failed: Iterable[TopicPartition] | None) -> None:
        """Every marker of MarkerRequest ``marker_id`` is durable, or (on error) not
        those of ``failed`` (default: all), which are asked for again."""
        txn = self._markers.pop(marker_id, None)
        if txn is None:
            return
        if txn.marker_id != marker_id or not self._manager.owns(txn):
            raise IllegalTransitionError(f"markers {marker_id} outlived their transaction")
        txn.marker_id = None
        assert txn.complete is not None
        if error != NONE:
            asked = txn.marker_partitions or txn.partitions
            retry = asked if failed is None else asked & frozenset(failed)
            self._request_markers(fx, txn, retry or asked)
        else:
            self.write(fx, PendingWrite("complete", txn, txn.complete))

    def send_markers(self, fx: Fx, txn: Txn, complete: Transit,
                     partitions: frozenset[TopicPartition] | None = None) -> None:
        """A decided transaction: its markers (default: into all its partitions), then
        the ``complete`` write once they are durable."""
        txn.complete = complete
        partitions = txn.partitions if partitions is None else partitions
        txn.marker_count = len(partitions)
        if partitions:
            self._request_markers(fx, txn, partitions)
        else:
            self.write(fx, PendingWrite("complete", txn, complete))  # nothing to mark

    def _request_markers(self, fx: Fx, txn: Txn,
                         partitions: frozenset[TopicPartition] | None = None) -> None:
        marker_id = next(self._marker_ids)
        txn.marker_id = marker_id
        txn.marker_partitions = txn.partitions if partitions is None else partitions
        self._markers[marker_id] = txn
        commit = txn.state is _S.PREPARE_COMMIT
        tv = txn.tv
        if not commit and txn.producer_epoch >= MAX_EPOCH:
            # An ABORT at Short.MaxValue goes with the rules of transactions v1 (an epoch
            # at or above the producer's): the producer id is used up, so no later
            # transaction of it can be open at that epoch for a late marker to end, and
            # the partition must take it even where data of that epoch is open, which
            # only a txbroker before issue 25 wrote (it handed Short.MaxValue to v2
            # producers; their aborts, recovered from such a log, would hang with a v2
            # marker the partition refuses). Kafka never gets there.
            tv = 0
        fx.markers.append(MarkerRequest(
            marker_id=marker_id,
            transactional_id=txn.transactional_id,
            producer_id=txn.producer_id,
            producer_epoch=txn.producer_epoch,
            commit=commit,
            partitions=tuple(sorted(txn.marker_partitions)),
            coordinator_epoch=self.coordinator_epoch,
            transaction_version=tv,
        ))

    # -- the aborts the coordinator starts itself --------------------------------

    def fence_and_abort(self, fx: Fx, txn: Txn, now: int, token: Token | None,
                        api_version: int, outcome: str) -> bool:
        """Kafka's prepareFenceProducerEpoch + endTransaction(ABORT, isFromClient=false).

        False if nothing could be done: the abort takes the producer id's last epoch and
        no next producer id could be allocated (the transaction stays Ongoing, unchanged;
        a timeout's abort is tried again at the next check, ``token`` is answered
        COORDINATOR_LOAD_IN_PROGRESS)."""
        epoch = txn.producer_epoch
        # No second bump after a failed fence (that epoch was never handed out), and
        # never past Short.MaxValue.
        bumped = epoch if txn.failed_epoch_fence or epoch >= MAX_EPOCH else epoch + 1
        next_pid = NO_PRODUCER_ID
        if bumped >= MAX_EPOCH:
            # The abort takes Short.MaxValue, the epoch the coordinator keeps for fencing:
            # the id is used up. Kafka 4.3.1 ends the aborts it starts itself (timeout,
            # InitProducerId fencing) through its transactions v2 path whenever the
            # broker finalizes transaction.version 2 (the broker's level, not the
            # client's: TransactionCoordinator passes transactionVersionLevel()), and
            # that path allocates the next producer id when the epoch before the bump is
            # exhausted, fence or not (generateTxnTransitMetadataForTxnCompletion ->
            # prepareAbortOrCommit(nextProducerId)); prepareComplete then continues
            # under it at epoch 0. Without it the id would stay at Short.MaxValue after
            # the abort, an epoch no producer may hold: a v2 EndTxn retry would be handed
            # it, its next transaction could not be aborted with a bump (the partition
            # refuses a v2 marker of the epoch of its open transaction) nor committed.
            allocated = self._manager.allocate_producer_id()
            if allocated is None:
                if token is not None:
                    fx.respond(token, InitProducerIdResult(client_error(
                        "init_producer_id", api_version, _E.coordinator_load_in_progress.value)))
                return False
            next_pid = allocated
        txn.outcome = outcome
        self.prepare(txn, _S.PREPARE_EPOCH_FENCE, producer_epoch=bumped)
        # endTransaction clears the PrepareEpochFence pending state and installs the bumped
        # epoch in memory right away: from now on the old producer is fenced.
        txn.pending = None
        txn.producer_epoch = bumped
        txn.last_producer_epoch = NO_PRODUCER_EPOCH
        if next_pid == NO_PRODUCER_ID:
            # One bump whatever the transaction's version (Kafka 4.3.1: a fenced transaction
            # of either version ends one epoch up; the next InitProducerId bumps again).
            transit = self.prepare(txn, _S.PREPARE_ABORT, last_update_ms=now)
        else:
            # As a v2 EndTxn that exhausts the epoch (Kafka's record: transaction version
            # 2, the next producer id, and the last epoch the producer held, Short.MaxValue
            # - 1, which a late EndTxn or KIP-360 InitProducerId of that producer names).
            transit = self.prepare(txn, _S.PREPARE_ABORT, last_update_ms=now,
                                   next_producer_id=next_pid, last_producer_epoch=MAX_EPOCH - 1,
                                   tv=2)
        self.write(fx, PendingWrite("prepare", txn, transit, token, "init_producer_id", api_version, fence=True))
        return True

    def abort_lost_transaction(self, fx: Fx, txn: Txn, now: int, orphans: frozenset) -> None:
        """Rebuild the lost Ongoing record (in memory, never written) with the orphaned
        partitions, then abort it as a timeout would: epoch bump, PrepareAbort."""
        transit = self.prepare(txn, _S.ONGOING, partitions=txn.partitions | orphans,
                               start_ms=now if txn.state in IDLE_STATES else txn.start_ms,
                               last_update_ms=now)
        complete_transition(txn, transit)
        if self.fence_and_abort(fx, txn, now, None, 0, "aborted"):
            fx.expired.append(txn.transactional_id)
        else:
            # No producer id for the abort at the last epoch: Ongoing (in memory) until
            # its timeout aborts it.
            self._manager.arm(txn)
