"""What the shell reports back: a ``__transaction_state`` write is durable or failed
(:meth:`~CompletionsMixin.persisted`), a transaction's markers are written or not
(:meth:`~CompletionsMixin.markers_written`), and the requests for markers
(Kafka's ``TransactionMarkerChannelManager`` side: PrepareCommit/PrepareAbort ->
markers -> CompleteCommit/CompleteAbort).
"""

from __future__ import annotations

from collections.abc import Iterable

from txbroker.coordinator.transaction.metadata import (
    _MAX_EPOCH,
    _S,
    IllegalTransitionError,
    _outcome_of,
    _Transit,
    _Txn,
    _Write,
    check_transition,
    complete_transition,
    prepare_complete,
)
from txbroker.coordinator.transaction.results import (
    _E,
    NO_PRODUCER_ID,
    NONE,
    Effects,
    EndTxnResult,
    InitProducerIdResult,
    MarkerRequest,
    TopicPartition,
    TxnEvent,
    _Fx,
)


class CompletionsMixin:
    """Completions of TransactionCoordinatorState (:mod:`.state`), whose attributes
    (``_writes``, ``_markers``, ``_txns``, ...) and helpers it uses."""

    def persisted(self, now_ms: int, write_id: int, error: int = NONE) -> Effects:
        """PersistRequest ``write_id`` is durable (``error == NONE``) or failed."""
        fx = _Fx()
        w = self._writes.pop(write_id, None)
        if w is None:
            return self._finish(fx)
        txn = w.txn
        if self._txns.get(txn.transactional_id) is not txn:
            raise IllegalTransitionError(f"write {write_id} outlived its transaction metadata")
        if w.kind == "complete":
            if error == NONE:
                fx.events.append(TxnEvent(
                    "completed", txn.transactional_id, txn.producer_id, txn.producer_epoch,
                    age_ms=now_ms - txn.start_ms, outcome=_outcome_of(txn),
                    markers=txn.marker_count,
                    recovered=txn.recovering))
                txn.outcome, txn.recovering = None, False
                complete_transition(txn, w.transit)
                txn.complete = None
                self._arm(txn)
                if txn.orphans:
                    orphans, txn.orphans = txn.orphans, frozenset()
                    self._abort_lost_transaction(fx, txn, now_ms, orphans)
            else:
                # Kafka retries this append until it succeeds (pending state kept).
                self._write(fx, _Write("complete", txn, w.transit))
        elif w.kind == "dead":
            if error == NONE:
                if txn.pending is not _S.DEAD:
                    raise IllegalTransitionError(f"{txn.transactional_id}: tombstone without pending Dead")
                check_transition(txn.state, _S.DEAD)
                fx.events.append(TxnEvent("expired", txn.transactional_id, txn.producer_id,
                                          txn.producer_epoch,
                                          age_ms=now_ms - txn.last_update_ms))
                txn.state, txn.pending = _S.DEAD, None
                del self._txns[txn.transactional_id]
            else:
                txn.pending = None
                txn.tombstone_maybe_written = True
                self._arm(txn)  # expired still: retried at the next expiration check
        elif error != NONE:
            txn.pending = None
            if w.fence:
                txn.failed_epoch_fence = True
            if w.token is not None:
                fx.respond(w.token, self._result(w.api, w.api_version, error, w.partitions))
            self._arm(txn)
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
                    fx.respond(w.token, self._result(w.api, w.api_version, result, ()))
                self._send_markers(fx, txn, prepare_complete(txn, now_ms))
            elif w.kind == "init":
                fx.respond(w.token, InitProducerIdResult(NONE, txn.producer_id, txn.producer_epoch))
            else:  # "add"
                fx.respond(w.token, self._result(w.api, w.api_version, NONE, w.partitions))
            self._arm(txn)
        if txn.expire_requested and txn.pending is None and self._txns.get(txn.transactional_id) is txn:
            # expire_now() came while this write was in flight.
            txn.expire_requested = False
            if txn.state is _S.ONGOING:
                self._fence_and_abort(fx, txn, now_ms, None, 0, txn.expire_outcome)
        return self._finish(fx)

    def markers_written(self, now_ms: int, marker_id: int, error: int = NONE,
                        failed: Iterable[TopicPartition] | None = None) -> Effects:
        """Every marker of MarkerRequest ``marker_id`` is durable (or, on error, not all:
        ``failed`` names the partitions still without theirs, default all the request's;
        only those are asked for again, as Kafka's marker channel retries per partition)."""
        fx = _Fx()
        txn = self._markers.pop(marker_id, None)
        if txn is None:
            return self._finish(fx)
        if txn.marker_id != marker_id or self._txns.get(txn.transactional_id) is not txn:
            raise IllegalTransitionError(f"markers {marker_id} outlived their transaction")
        txn.marker_id = None
        assert txn.complete is not None
        if error != NONE:
            asked = txn.marker_partitions or txn.partitions
            retry = asked if failed is None else asked & frozenset(failed)
            self._request_markers(fx, txn, retry or asked)
        else:
            self._write(fx, _Write("complete", txn, txn.complete))
        return self._finish(fx)

    def _send_markers(self, fx: _Fx, txn: _Txn, complete: _Transit,
                      partitions: frozenset[TopicPartition] | None = None) -> None:
        txn.complete = complete
        partitions = txn.partitions if partitions is None else partitions
        txn.marker_count = len(partitions)
        if partitions:
            self._request_markers(fx, txn, partitions)
        else:
            self._write(fx, _Write("complete", txn, complete))  # nothing to mark

    def _request_markers(self, fx: _Fx, txn: _Txn,
                         partitions: frozenset[TopicPartition] | None = None) -> None:
        marker_id = next(self._marker_ids)
        txn.marker_id = marker_id
        txn.marker_partitions = txn.partitions if partitions is None else partitions
        self._markers[marker_id] = txn
        commit = txn.state is _S.PREPARE_COMMIT
        tv = txn.tv
        if not commit and txn.producer_epoch >= _MAX_EPOCH:
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
